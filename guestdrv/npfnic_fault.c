// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic page requests: the fault path of the driver, from the page request
 * queue (PRQ) the device writes to the page response queue (PRSPQ) it
 * reads, after PCIe PRI and mlx5's odp.c.
 *
 * A fault, in the order it happens (each function is defined before its
 * callers, so read from the bottom up, as odp.c):
 *  1. interrupt: the PRQ vector (npfnic_prq_irq) notes the time and queues
 *     npfnic_prq_work on the driver's workqueue, since resolving may sleep;
 *  2. work: npfnic_prq_work takes every request queued at once and reads
 *     each one exactly once (npfnic_prq_entry), a device that reports a
 *     producer index beyond the queue being refused whole;
 *  3. resolve: npfnic_fault_page makes the page resident through the I/O
 *     page tables (npfnic_iopt.c): an RX slot gets its page, a TX buffer
 *     its read-only identity entry; anything else, or a page that cannot
 *     be had, fails its page request group;
 *  4. respond: once the last request of a group was seen the group is
 *     answered, Success or Invalid Request, with one response
 *     (npfnic_answer); the batch rings the PRSPQ doorbell once and the PRQ
 *     head doorbell once;
 *  5. ahead: with fault_ahead N (module parameter, debugfs per function),
 *     each pair whose RX buffers faulted in the batch gets the next N cold
 *     slots beyond its last fault (and beyond where the device got to) backed
 *     too (npfnic_fault_ahead), after the answers, so no response waits for
 *     them.
 * fault_delay_us (a module parameter, writable at run time) emulates a
 * major fault: a resolution that maps something new waits until that long
 * after the PRQ interrupt that brought its group's first request. So the
 * groups of one batch wait out their delays together, like major faults
 * whose reads are in flight at the same time, rather than one after the
 * other; once per group (npfnic_prg.delayed).
 *
 * Locking: the PRQ, its head, the group table npf.prg and the pairs'
 * ahead_from/ahead_due belong to the one PRQ work item (never concurrent
 * with itself); npf.lock is taken around
 * each page's mapping only, never across the fault delay; npf.prsp_lock
 * covers the page response queue, which fault injection (npfnic_diag.c)
 * writes too.
 */

#include <linux/delay.h>
#include <linux/interrupt.h>
#include <linux/module.h>
#include <linux/timekeeping.h>

#include "npfnic.h"

static unsigned int fault_delay_us;
module_param(fault_delay_us, uint, 0644);
MODULE_PARM_DESC(fault_delay_us,
		 "delay before each fault resolution, emulating a major fault (us, 0: none)");

#define NPFNIC_MAX_DELAY_US	1000000

/* ---- resolve: the page a request names ---- */

/*
 * An injected major fault: once per fault resolution that maps something
 * new (not while the interface goes down), sleeping until fault_delay_us
 * after since_ns (the interrupt that announced the fault; 0: now).
 */
void npfnic_fault_delay(struct npfnic *nic, bool *delayed, u64 since_ns)
{
	if (!READ_ONCE(fault_delay_us) || *delayed || !READ_ONCE(nic->npf.active))
		return;
	*delayed = true;
	npfnic_fault_sleep(since_ns);
}

/* Sleeps until fault_delay_us after since_ns (0: now), if it asks for a delay. */
void npfnic_fault_sleep(u64 since_ns)
{
	unsigned int us = READ_ONCE(fault_delay_us);
	u64 now, due;

	if (!us)
		return;
	now = ktime_get_ns();
	if (!since_ns || since_ns > now)
		since_ns = now;
	due = since_ns + (u64)min_t(unsigned int, us, NPFNIC_MAX_DELAY_US) * NSEC_PER_USEC;
	if (due > now)
		fsleep(DIV_ROUND_UP_ULL(due - now, NSEC_PER_USEC));
}

/* Whether fault_delay_us asks for major faults at all. */
bool npfnic_fault_delaying(void)
{
	return READ_ONCE(fault_delay_us);
}

/* A request as read once from the queue. */
struct npfnic_req {
	u64 addr;
	u32 pasid;
	u32 desc;
	u16 prgi;
	u16 flags;
	u16 queue;
	u16 kind;
};

/* The RX slot a VA belongs to, or -EINVAL when it is none of ours. */
static int npfnic_rx_slot_of(struct npfnic *nic, u64 va, int *q, u32 *i)
{
	u64 off = va - NPFNIC_RX_VA_BASE;

	if (va < NPFNIC_RX_VA_BASE || off >= ((u64)NPFNIC_PAIR_MAX << NPFNIC_RX_VA_QSHIFT))
		return -EINVAL;
	*q = off >> NPFNIC_RX_VA_QSHIFT;
	*i = (off & (BIT_ULL(NPFNIC_RX_VA_QSHIFT) - 1)) >> NPFNIC_XLAT_PAGE_SHIFT;
	if (*q >= nic->nqps || *i >= nic->qps[*q].rx_size)
		return -EINVAL;
	return 0;
}

/* Makes one requested page resident; an error answers its group Invalid Request. */
static int npfnic_fault_page(struct npfnic *nic, struct npfnic_prg *g, const struct npfnic_req *r)
{
	struct npfnic_npf *npf = &nic->npf;
	struct npfnic_qp *qp;
	bool present;
	u64 start;
	int q, err;
	u32 i;

	if ((r->flags & NPFNIC_PRQ_PASID_VALID) && r->pasid != 0)
		return -EINVAL;
	switch (r->kind) {
	case NPFNIC_FAULT_KIND_RX_BUF:
		if (npfnic_rx_slot_of(nic, r->addr, &q, &i) || r->queue != q)
			return -EINVAL;
		qp = &nic->qps[q];
		if ((r->desc & (qp->rx_size - 1)) != i)
			return -EINVAL;
		if (npfnic_rx_slot_resident(&qp->rx_slots[i]))
			return 0;
		npfnic_fault_delay(nic, &g->delayed, g->since_ns);
		mutex_lock(&npf->lock);
		err = npfnic_fault_rx_slot(nic, qp, i);
		mutex_unlock(&npf->lock);
		if (!err) {
			qp->ahead_from = r->desc;
			qp->ahead_due = true;
		}
		return err;
	case NPFNIC_FAULT_KIND_TX_BUF:
		/* TX buffers are read; only RAM has an identity mapping. */
		if (r->queue >= nic->nqps || (r->flags & NPFNIC_PRQ_WRITE) ||
		    r->addr >= NPFNIC_RX_VA_BASE || !npfnic_is_ram(r->addr, NPFNIC_PAGE_SIZE))
			return -EINVAL;
		mutex_lock(&npf->lock);
		present = npfnic_pte_present(npfnic_pte(nic, r->addr, false));
		mutex_unlock(&npf->lock);
		if (present)
			return 0;
		npfnic_fault_delay(nic, &g->delayed, g->since_ns);
		mutex_lock(&npf->lock);
		start = ktime_get_ns();
		err = npfnic_map_identity(nic, r->addr);
		if (!err)
			npfnic_since(nic, NPFNIC_HIST_FAULT_MAP, start);
		mutex_unlock(&npf->lock);
		return err;
	default:
		return -EINVAL;
	}
}

/* ---- the queues ---- */

/*
 * Resets the device's page request block and enables it over a status
 * block and the two queues; the Ethernet side and the RDMA side
 * (npfnic_ib_odp.c) each run it while they own translation.
 */
void npfnic_pri_program(struct npfnic *nic, dma_addr_t status, dma_addr_t prq, u32 prq_size,
			dma_addr_t prspq, u32 prspq_size)
{
	iowrite32(NPFNIC_PRI_CTRL_RESET, nic->bar0 + NPFNIC_REG_PRI_CTRL);
	npfnic_write64(nic, NPFNIC_REG_PRI_STATUS_LO, status);
	npfnic_write64(nic, NPFNIC_REG_PRQ_BASE_LO, prq);
	iowrite32(prq_size, nic->bar0 + NPFNIC_REG_PRQ_SIZE);
	iowrite32(NPFNIC_PRQ_VECTOR, nic->bar0 + NPFNIC_REG_PRQ_VECTOR);
	npfnic_write64(nic, NPFNIC_REG_PRSPQ_BASE_LO, prspq);
	iowrite32(prspq_size, nic->bar0 + NPFNIC_REG_PRSPQ_SIZE);
	iowrite32(NPFNIC_PRI_CTRL_ENABLE, nic->bar0 + NPFNIC_REG_PRI_CTRL);
}

/* ---- respond: the page response queue ---- */

/*
 * Waits until the page response queue has room for one more entry, ringing
 * the doorbell for what is queued so the device can make room.
 */
static int npfnic_prsp_room(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	unsigned int waited = 0;

	lockdep_assert_held(&npf->prsp_lock);
	while (npf->prspq_tail - le32_to_cpu(READ_ONCE(npf->pri_st->prspq_head)) >=
	       NPFNIC_PRSPQ_SIZE) {
		if (!waited) {
			dma_wmb();
			iowrite32(npf->prspq_tail, nic->bar0 + NPFNIC_REG_PRSPQ_TAIL);
		}
		if (waited++ >= NPFNIC_WAIT_MS || !READ_ONCE(npf->active) ||
		    READ_ONCE(npf->pri_st->error))
			return -EBUSY;
		usleep_range(1000, 2000);
	}
	return 0;
}

int npfnic_prsp_put(struct npfnic *nic, u16 prgi, u32 pasid, bool pasid_valid, u16 code)
{
	struct npfnic_npf *npf = &nic->npf;
	struct npfnic_page_resp *resp;
	int err;

	err = npfnic_prsp_room(nic);
	if (err)
		return err;
	resp = &npf->prspq[npf->prspq_tail++ & (NPFNIC_PRSPQ_SIZE - 1)];
	resp->pasid = cpu_to_le32(pasid_valid ? pasid : 0);
	resp->prgi = cpu_to_le16(prgi);
	resp->code = cpu_to_le16(code);
	resp->flags = cpu_to_le32(pasid_valid ? NPFNIC_PRSP_PASID_VALID : 0);
	resp->rsvd = 0;
	return 0;
}

void npfnic_prsp_ring(struct npfnic *nic)
{
	dma_wmb();
	iowrite32(nic->npf.prspq_tail, nic->bar0 + NPFNIC_REG_PRSPQ_TAIL);
}

/* Answers the groups whose last request this batch saw, one doorbell in all. */
static void npfnic_answer(struct npfnic *nic, u32 n, u64 isr)
{
	struct npfnic_npf *npf = &nic->npf;
	u32 k, answered = 0;

	if (!n)
		return;
	mutex_lock(&npf->prsp_lock);
	for (k = 0; k < n; k++) {
		u16 prgi = npf->answer[k];
		struct npfnic_prg *g = &npf->prg[prgi];
		u16 code = g->failed ? NPFNIC_PRSP_INVALID_REQUEST : NPFNIC_PRSP_SUCCESS;

		if (npfnic_prsp_put(nic, prgi, g->pasid, g->flags & NPFNIC_PRQ_PASID_VALID,
				    code)) {
			dev_err_ratelimited(&nic->pdev->dev,
					    "page response queue full: group %u not answered\n",
					    prgi);
			atomic64_inc(&nic->nstats.pri_errors);
		} else {
			answered++;
			atomic64_inc(code == NPFNIC_PRSP_SUCCESS ? &nic->nstats.prsp_success :
				     &nic->nstats.prsp_invalid);
		}
		g->active = false;
	}
	npfnic_prsp_ring(nic);
	mutex_unlock(&npf->prsp_lock);
	atomic64_add(answered, &nic->nstats.page_groups);
	for (k = 0; k < answered; k++)
		npfnic_since(nic, NPFNIC_HIST_FAULT_LAT, isr);
}

/* ---- work: every request queued, each group answered once ---- */

/* Reports each new PRI error of the device once. */
void npfnic_pri_check(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	u32 err = le32_to_cpu(READ_ONCE(npf->pri_st->error));

	if (err && err != npf->pri_error_seen) {
		atomic64_inc(&nic->nstats.pri_errors);
		dev_err(&nic->pdev->dev, "PRI error %u (info %u)\n", err,
			le32_to_cpu(READ_ONCE(npf->pri_st->error_info)));
	}
	npf->pri_error_seen = err;
}

static void npfnic_prq_entry(struct npfnic *nic, const struct npfnic_page_req *e, u32 *n,
			     u64 isr)
{
	struct npfnic_npf *npf = &nic->npf;
	struct npfnic_req r = {
		.addr = le64_to_cpu(READ_ONCE(e->addr)),
		.pasid = le32_to_cpu(READ_ONCE(e->pasid)),
		.desc = le32_to_cpu(READ_ONCE(e->desc)),
		.prgi = le16_to_cpu(READ_ONCE(e->prgi)),
		.flags = le16_to_cpu(READ_ONCE(e->flags)),
		.queue = le16_to_cpu(READ_ONCE(e->queue)),
		.kind = le16_to_cpu(READ_ONCE(e->kind)),
	};
	struct npfnic_prg *g;
	int err;

	if (r.prgi >= NPFNIC_PRGI_MAX) {
		atomic64_inc(&nic->nstats.bad_page_requests);
		dev_warn_ratelimited(&nic->pdev->dev, "page request with PRG index %u ignored\n",
				     r.prgi);
		return;
	}
	g = &npf->prg[r.prgi];
	if (!g->active) {
		memset(g, 0, sizeof(*g));
		g->active = true;
		g->pasid = r.pasid;
		g->flags = r.flags;
		g->since_ns = isr;
	}
	if (!g->failed) {
		err = npfnic_fault_page(nic, g, &r);
		if (err) {
			g->failed = true;
			atomic64_inc(&nic->nstats.bad_page_requests);
			dev_warn_ratelimited(&nic->pdev->dev,
					     "page request %#llx kind %u queue %u desc %u: %d\n",
					     r.addr, r.kind, r.queue, r.desc, err);
		}
	}
	/* A group is answered once; a repeated last request is device garbage. */
	if ((r.flags & NPFNIC_PRQ_LAST) && !g->queued && *n < NPFNIC_PRGI_MAX) {
		g->queued = true;
		npf->answer[(*n)++] = r.prgi;
	}
}

/* Serves every page request queued: map all, answer each group, two doorbells. */
void npfnic_prq_work(struct work_struct *work)
{
	struct npfnic *nic = container_of(work, struct npfnic, prq_work);
	struct npfnic_npf *npf = &nic->npf;
	u32 tail, count = 0, n = 0;
	u64 isr;
	int q;

	isr = atomic64_xchg(&npf->prq_isr_ns, 0);
	npfnic_since(nic, NPFNIC_HIST_FAULT_SCHED, isr);
	if (!READ_ONCE(npf->active))
		return;
	npfnic_pri_check(nic);
	tail = le32_to_cpu(READ_ONCE(npf->pri_st->prq_tail));
	if (tail - npf->prq_head > NPFNIC_PRQ_SIZE) {
		atomic64_inc(&nic->nstats.bad_page_requests);
		dev_err_ratelimited(&nic->pdev->dev,
				    "page request queue: producer index %u, %u consumed\n",
				    tail, npf->prq_head);
		return;
	}
	/* The producer index before the entries it covers. */
	dma_rmb();
	while (npf->prq_head != tail && READ_ONCE(npf->active)) {
		npfnic_prq_entry(nic, &npf->prq[npf->prq_head & (NPFNIC_PRQ_SIZE - 1)], &n, isr);
		npf->prq_head++;
		count++;
	}
	if (!count)
		return;
	atomic64_add(count, &nic->nstats.page_requests);
	npfnic_answer(nic, n, isr);
	iowrite32(npf->prq_head, nic->bar0 + NPFNIC_REG_PRQ_HEAD);
	/* Answered: now the pages ahead of each pair's last RX fault. */
	for (q = 0; q < nic->nqps; q++) {
		struct npfnic_qp *qp = &nic->qps[q];

		if (qp->ahead_due) {
			qp->ahead_due = false;
			npfnic_fault_ahead(nic, qp, qp->ahead_from);
		}
	}
}

/* ---- interrupt ---- */

irqreturn_t npfnic_prq_irq(struct npfnic *nic)
{
	/* Otherwise the RDMA side may run the engine, for its contexts' PASIDs. */
	if (!READ_ONCE(nic->npf.active))
		return npfnic_ib_prq_irq(nic);
	atomic64_cmpxchg(&nic->npf.prq_isr_ns, 0, ktime_get_ns());
	queue_work(nic->wq, &nic->prq_work);
	return IRQ_HANDLED;
}
