// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic page requests of the Ethernet side: the fault path of the
 * driver for PASID 0, after PCIe PRI and mlx5's odp.c. The queues
 * themselves, the page request queue (PRQ) the device writes and the page
 * response queue (PRSPQ) it reads, belong to the translation engine
 * (npfnic_xlat.c), whose PRQ work hands this file every request without a
 * PASID or of PASID 0, and the RDMA contexts' to npfnic_ib_odp.c.
 *
 * A fault, in the order it happens (each function is defined before its
 * callers, so read from the bottom up, as odp.c):
 *  1. interrupt: the PRQ vector (npfnic_xlat_prq_irq) notes the time and
 *     queues the PRQ work on the driver's workqueue, since resolving may
 *     sleep;
 *  2. work: the PRQ work takes every request queued at once and reads
 *     each one exactly once, a device that reports a producer index
 *     beyond the queue being refused whole, and gives this file the
 *     Ethernet ones (npfnic_fault_request);
 *  3. resolve: npfnic_fault_page makes the page resident through the I/O
 *     page tables (npfnic_iopt.c): an RX slot gets its page, a TX buffer
 *     its read-only identity entry; anything else, a page that cannot be
 *     had, or any request while the interface is down (npf.active clear:
 *     the engine may run on for RDMA), fails its page request group;
 *  4. respond: once the last request of a group was seen the group is
 *     answered, Success or Invalid Request, with one response
 *     (npfnic_fault_answer); the batch rings the PRSPQ doorbell once, then
 *     the PRQ work the PRQ head doorbell once;
 *  5. ahead: with fault_ahead N (module parameter, debugfs per function),
 *     each pair whose RX buffers faulted in the batch gets the next N cold
 *     slots beyond its last fault (and beyond where the device got to) backed
 *     too (npfnic_fault_ahead_due), after the answers, so no response waits
 *     for them.
 * fault_delay_us (a module parameter, writable at run time) emulates a
 * major fault: a resolution that maps something new waits until that long
 * after the PRQ interrupt that brought its group's first request. So the
 * groups of one batch wait out their delays together, like major faults
 * whose reads are in flight at the same time, rather than one after the
 * other; once per group (npfnic_prg.delayed).
 *
 * Locking: the group table npf.prg and the pairs' ahead_from/ahead_due
 * belong to the one PRQ work item (never concurrent with itself); it is
 * reset at each start of the engine. npf.lock is taken around each page's
 * mapping only, never across the fault delay; the response queue's
 * xlat.prsp_lock around the answers. Stop clears npf.active, then waits
 * for the PRQ work (npfnic_xlat_flush) before the pairs' memory goes.
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
static int npfnic_fault_page(struct npfnic *nic, struct npfnic_prg *g,
			     const struct npfnic_xlat_req *r)
{
	struct npfnic_npf *npf = &nic->npf;
	struct npfnic_qp *qp;
	bool present;
	u64 start;
	int q, err;
	u32 i;

	if ((r->flags & NPFNIC_PRQ_PASID_VALID) && r->pasid != 0)
		return -EINVAL;
	/* Down: the pairs' memory may be going (stop waits for this work). */
	if (!READ_ONCE(npf->active))
		return -ENETDOWN;
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

/* ---- respond ---- */

/* Answers the groups whose last request this batch saw, one doorbell in all. */
void npfnic_fault_answer(struct npfnic *nic, u32 n, u64 isr)
{
	struct npfnic_npf *npf = &nic->npf;
	struct npfnic_xlat *x = &nic->xlat;
	u32 k, answered = 0;

	if (!n)
		return;
	mutex_lock(&x->prsp_lock);
	for (k = 0; k < n; k++) {
		u16 prgi = npf->answer[k];
		struct npfnic_prg *g = &npf->prg[prgi];
		u16 code = g->failed ? NPFNIC_PRSP_INVALID_REQUEST : NPFNIC_PRSP_SUCCESS;

		if (npfnic_xlat_prsp_put(nic, prgi, g->pasid, g->flags & NPFNIC_PRQ_PASID_VALID,
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
	npfnic_xlat_prsp_ring(nic);
	mutex_unlock(&x->prsp_lock);
	atomic64_add(answered, &nic->nstats.page_groups);
	for (k = 0; k < answered; k++)
		npfnic_since(nic, NPFNIC_HIST_FAULT_LAT, isr);
}

/* ---- work: every request of the batch, each group answered once ---- */

/* At each start of the engine: PRI's reset abandoned every group. */
void npfnic_fault_reset(struct npfnic *nic)
{
	memset(nic->npf.prg, 0, sizeof(nic->npf.prg));
}

/*
 * One request of the PRQ work's batch: its page resolved into its group,
 * the group queued for an answer (npf.answer, *n of them) at its last
 * request.
 */
void npfnic_fault_request(struct npfnic *nic, const struct npfnic_xlat_req *r, u32 *n)
{
	struct npfnic_npf *npf = &nic->npf;
	struct npfnic_prg *g;
	int err;

	if (r->prgi >= NPFNIC_PRGI_MAX) {
		atomic64_inc(&nic->nstats.bad_page_requests);
		dev_warn_ratelimited(&nic->pdev->dev, "page request with PRG index %u ignored\n",
				     r->prgi);
		return;
	}
	g = &npf->prg[r->prgi];
	if (!g->active) {
		memset(g, 0, sizeof(*g));
		g->active = true;
		g->pasid = r->pasid;
		g->flags = r->flags;
		g->since_ns = r->isr_ns;
	}
	if (!g->failed) {
		err = npfnic_fault_page(nic, g, r);
		if (err) {
			g->failed = true;
			/* Requests that raced with ifdown are no device's fault. */
			if (err != -ENETDOWN) {
				atomic64_inc(&nic->nstats.bad_page_requests);
				dev_warn_ratelimited(&nic->pdev->dev,
						     "page request %#llx kind %u queue %u desc %u: %d\n",
						     r->addr, r->kind, r->queue, r->desc, err);
			}
		}
	}
	/* A group is answered once; a repeated last request is device garbage. */
	if ((r->flags & NPFNIC_PRQ_LAST) && !g->queued && *n < NPFNIC_PRGI_MAX) {
		g->queued = true;
		npf->answer[(*n)++] = r->prgi;
	}
}

/* After the batch's answers: the pages ahead of each pair's last RX fault. */
void npfnic_fault_ahead_due(struct npfnic *nic)
{
	int q;

	for (q = 0; q < nic->nqps; q++) {
		struct npfnic_qp *qp = &nic->qps[q];

		if (qp->ahead_due) {
			qp->ahead_due = false;
			npfnic_fault_ahead(nic, qp, qp->ahead_from);
		}
	}
}
