// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic backup ring: receive faults (rNPFs) under rx_policy backup, as in
 * section 5 and Figure 6 of Lesokhin et al., ASPLOS'17.
 *
 * When the buffer of an RX descriptor faults, the device stores the frame
 * in the backup ring, a ring of pinned buffers, with its queue pair,
 * descriptor and bitmap index, and raises the backup vector. The backup
 * work takes every new entry at once and reposts its buffer. In ring order
 * per pair it places each frame in its own RX descriptor (backing the slot
 * with a page first, npfnic_iopt.c) and tells the device with
 * PAIR_RX_RESOLVE, which lets the pair's RX head pass the descriptor. A frame
 * whose descriptor lies beyond the driver's RX tail is copied to the pair's
 * pending queue and waits, with the frames after it, for the tail to move
 * (PAIR_RX_TAIL_IRQ raises the backup vector then). An entry the driver
 * cannot complete (no such pair, no such descriptor, more pending than
 * bm_size) restarts the pairs (npfnic_schedule_reset); one of a known pair
 * with a bad status or length completes as an error.
 *
 * Locking: the backup ring, its indexes and the pairs' pending queues
 * belong to the one backup work item (a delayed work, never concurrent
 * with itself; close cancels it before npfnic_free_rx_slots frees the
 * queues). npf.lock is taken around backing a slot and copying the frame
 * into it. The RX tail is read with acquire semantics against
 * npfnic_post_rx, which publishes the descriptors before the tail.
 */

#include <linux/dma-mapping.h>
#include <linux/etherdevice.h>
#include <linux/interrupt.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>

#include "npfnic.h"

void npfnic_backup_post(struct npfnic *nic, u32 j)
{
	struct npfnic_backup_desc *d = &nic->npf.bk[j];

	d->addr = cpu_to_le64(nic->npf.bk_bufs_dma + (u64)j * NPFNIC_RX_BUF_SIZE);
	d->buf_len = cpu_to_le16(NPFNIC_RX_BUF_SIZE);
	d->pkt_len = 0;
	d->status = 0;
}

static void npfnic_backup_bad(struct npfnic *nic, const char *why, u32 a, u32 b)
{
	atomic64_inc(&nic->nstats.backup_errors);
	dev_warn_ratelimited(&nic->pdev->dev, "backup entry dropped: %s (%u, %u)\n", why, a, b);
}

/* Puts a backed-up frame into its RX descriptor and resolves the rNPF. */
static void npfnic_backup_resolve(struct npfnic *nic, struct npfnic_qp *qp,
				  const struct npfnic_pending *p, const u8 *data)
{
	u32 i = p->desc & (qp->rx_size - 1);
	struct npfnic_rx_desc *d = &qp->rx_ring[i];
	struct device *dev = &nic->pdev->dev;
	struct npfnic_rx_slot *slot = &qp->rx_slots[i];
	bool delayed = false, cold = !READ_ONCE(slot->page);
	u16 status, len = p->len;
	int err = -EINVAL;

	if (len) {
		if (!npfnic_rx_slot_resident(slot))
			npfnic_fault_delay(nic, &delayed, p->isr_ns);
		mutex_lock(&nic->npf.lock);
		err = npfnic_fault_rx_slot(nic, qp, i);
		if (!err) {
			dma_sync_single_for_cpu(dev, slot->dma, len, DMA_BIDIRECTIONAL);
			memcpy(page_address(slot->page), data, len);
			dma_sync_single_for_device(dev, slot->dma, len, DMA_BIDIRECTIONAL);
		}
		mutex_unlock(&nic->npf.lock);
	}
	if (err) {
		len = 0;
		status = NPFNIC_RXD_DONE | NPFNIC_RXD_ERROR;
		if (p->len)
			npfnic_backup_bad(nic, "no page for the slot", qp->idx, i);
	} else {
		status = NPFNIC_RXD_DONE;
		if (p->status & NPFNIC_BKD_CSUM_OK)
			status |= NPFNIC_RXD_CSUM_OK;
	}
	d->pkt_len = cpu_to_le16(len);
	d->status = cpu_to_le16(status);
	/* The descriptor before the doorbell that lets the head pass it. */
	wmb();
	iowrite32(p->bm_index, qp->regs + NPFNIC_PAIR_RX_RESOLVE);
	atomic64_inc(&nic->nstats.rx_resolved);
	npfnic_since(nic, NPFNIC_HIST_BACKUP_LAT, p->isr_ns);
	/* This work backed a cold slot before the PRQ work did: fault ahead here. */
	if (cold && !err)
		npfnic_fault_ahead(nic, qp, p->desc);
}

enum npfnic_where {
	NPFNIC_POSTED,		/* the driver posted the descriptor: place the frame */
	NPFNIC_NOT_YET,		/* beyond the driver's tail: wait for it to move */
	NPFNIC_NOWHERE,		/* consumed already or far beyond: device garbage */
};

static enum npfnic_where npfnic_backup_where(struct npfnic *nic, struct npfnic_qp *qp, u32 desc)
{
	/* Pairs with the release in npfnic_post_rx: the descriptors it covers. */
	u32 tail = smp_load_acquire(&qp->rx_tail);

	if ((s32)(desc - tail) >= 0)
		return desc - tail < qp->rx_size + nic->bm_size ? NPFNIC_NOT_YET : NPFNIC_NOWHERE;
	if ((s32)(desc - READ_ONCE(qp->rx_next)) < 0)
		return NPFNIC_NOWHERE;
	return NPFNIC_POSTED;
}

static void npfnic_backup_corrupt(struct npfnic *nic, struct npfnic_pending *e, u16 *queue)
{
	int what = xchg(&nic->npf.inject_bad_backup, NPFNIC_BAD_BACKUP_NONE);

	if (what != NPFNIC_BAD_BACKUP_NONE)
		dev_info(&nic->pdev->dev, "inject bad_backup: entry of pair %u desc %u bm_index %u corrupted (%d)\n",
			 *queue, e->desc, e->bm_index, what);
	switch (what) {
	case NPFNIC_BAD_BACKUP_STATUS:
		e->status &= ~NPFNIC_BKD_DONE;
		break;
	case NPFNIC_BAD_BACKUP_QUEUE:
		*queue = NPFNIC_PAIR_MAX;
		break;
	case NPFNIC_BAD_BACKUP_DESC:
		e->desc -= 1U << 31;
		break;
	}
}

/*
 * Takes every new backup entry and reposts its buffer at once. A frame
 * whose descriptor is posted and nothing of its pair waits before it is
 * placed straight from the backup buffer; any other is copied to its
 * pair's pending queue. Returns false when it ran out of memory and must
 * be retried.
 */
static bool npfnic_backup_drain(struct npfnic *nic, u64 isr)
{
	struct npfnic_npf *npf = &nic->npf;
	u32 mask = nic->backup_size - 1, head, posted = 0;
	bool ok = true;

	head = le32_to_cpu(READ_ONCE(nic->sb->backup_head));
	if (head - npf->bk_next > nic->backup_size) {
		npfnic_backup_bad(nic, "backup head beyond the posted buffers", head, npf->bk_next);
		return true;
	}
	dma_rmb();
	while (npf->bk_next != head && READ_ONCE(npf->active)) {
		u32 j = npf->bk_next & mask;
		struct npfnic_backup_desc *d = &npf->bk[j];
		const u8 *data = npf->bk_bufs + (size_t)j * NPFNIC_RX_BUF_SIZE;
		struct npfnic_pending e = {
			.desc = le32_to_cpu(READ_ONCE(d->desc)),
			.bm_index = le32_to_cpu(READ_ONCE(d->bm_index)),
			.len = le16_to_cpu(READ_ONCE(d->pkt_len)),
			.status = le16_to_cpu(READ_ONCE(d->status)),
			.isr_ns = isr,
		};
		u16 queue = le16_to_cpu(READ_ONCE(d->queue));
		struct npfnic_pending *p;
		struct npfnic_qp *qp;

		if (unlikely(READ_ONCE(npf->inject_bad_backup)))
			npfnic_backup_corrupt(nic, &e, &queue);
		/*
		 * Every refused entry is an rNPF the device waits for: rx_head
		 * stays on it until it is resolved. An entry of a known pair is
		 * resolved as an error completion, so the ring moves on; one
		 * naming no pair or no descriptor the driver could complete
		 * cannot be, and the pairs are restarted instead.
		 */
		if (queue >= nic->nqps) {
			npfnic_backup_bad(nic, "queue", e.status, queue);
			npfnic_schedule_reset(nic);
			goto repost;
		}
		qp = &nic->qps[queue];
		if (qp->bk_npending >= nic->bm_size) {
			npfnic_backup_bad(nic, "more pending than bm_size", queue, qp->bk_npending);
			npfnic_schedule_reset(nic);
			goto repost;
		}
		if (!(e.status & NPFNIC_BKD_DONE)) {
			npfnic_backup_bad(nic, "status", queue, e.status);
			e.len = 0;
		} else if (e.len < ETH_HLEN || e.len > NPFNIC_RX_BUF_SIZE) {
			npfnic_backup_bad(nic, "frame length", queue, e.len);
			e.len = 0;
		}
		/* No injected delay here: that would hold the backup buffers back. */
		if (list_empty(&qp->bk_pending) &&
		    (npfnic_rx_slot_resident(&qp->rx_slots[e.desc & (qp->rx_size - 1)]) ||
		     !npfnic_fault_delaying())) {
			switch (npfnic_backup_where(nic, qp, e.desc)) {
			case NPFNIC_POSTED:
				npfnic_backup_resolve(nic, qp, &e, data);
				goto repost;
			case NPFNIC_NOWHERE:
				npfnic_backup_bad(nic, "descriptor outside the ring", e.desc,
						  qp->rx_tail);
				npfnic_schedule_reset(nic);
				goto repost;
			case NPFNIC_NOT_YET:
				break;
			}
		}
		p = kmalloc(struct_size(p, data, e.len), GFP_KERNEL);
		if (!p) {
			ok = false;
			break;
		}
		*p = e;
		memcpy(p->data, data, e.len);
		list_add_tail(&p->list, &qp->bk_pending);
		qp->bk_npending++;
repost:
		/* Index j is also where the buffer posted next goes: size ahead. */
		npfnic_backup_post(nic, j);
		npf->bk_next++;
		npf->bk_tail++;
		/* Buffers go back in small batches while the ring drains. */
		if (++posted % 16 == 0) {
			dma_wmb();
			iowrite32(npf->bk_tail, nic->bar0 + NPFNIC_REG_BACKUP_TAIL);
		}
	}
	if (posted % 16) {
		dma_wmb();
		iowrite32(npf->bk_tail, nic->bar0 + NPFNIC_REG_BACKUP_TAIL);
	}
	return ok;
}

/*
 * Resolves qp's pending frames in ring order. A descriptor the driver has
 * not posted yet (the ring was full while the device kept receiving) waits:
 * the device is asked to raise the backup vector when RX_TAIL moves.
 */
static void npfnic_backup_place(struct npfnic *nic, struct npfnic_qp *qp)
{
	struct npfnic_pending *p;
	bool armed = false;

	while (READ_ONCE(nic->npf.active) &&
	       (p = list_first_entry_or_null(&qp->bk_pending, struct npfnic_pending, list))) {
		switch (npfnic_backup_where(nic, qp, p->desc)) {
		case NPFNIC_NOT_YET:
			if (armed)
				return;
			iowrite32(1, qp->regs + NPFNIC_PAIR_RX_TAIL_IRQ);
			atomic64_inc(&nic->nstats.tail_irqs);
			armed = true;
			/* The arm before a second look: a tail that moved meanwhile is seen. */
			mb();
			continue;
		case NPFNIC_NOWHERE:
			npfnic_backup_bad(nic, "descriptor outside the ring", p->desc, qp->rx_tail);
			npfnic_schedule_reset(nic);
			break;
		case NPFNIC_POSTED:
			npfnic_backup_resolve(nic, qp, p, p->data);
			break;
		}
		list_del(&p->list);
		qp->bk_npending--;
		kfree(p);
	}
}

void npfnic_backup_work(struct work_struct *work)
{
	struct npfnic *nic = container_of(to_delayed_work(work), struct npfnic, backup_work);
	u64 isr = atomic64_xchg(&nic->npf.bk_isr_ns, 0);
	int q;

	if (!READ_ONCE(nic->npf.active))
		return;
	if (!isr)
		isr = ktime_get_ns();
	if (!npfnic_backup_drain(nic, isr))
		queue_delayed_work(nic->wq, &nic->backup_work, msecs_to_jiffies(10));
	for (q = 0; q < nic->nqps; q++)
		npfnic_backup_place(nic, &nic->qps[q]);
}

irqreturn_t npfnic_backup_irq(struct npfnic *nic)
{
	if (!READ_ONCE(nic->npf.active))
		return IRQ_HANDLED;
	atomic64_cmpxchg(&nic->npf.bk_isr_ns, 0, ktime_get_ns());
	mod_delayed_work(nic->wq, &nic->backup_work, 0);
	return IRQ_HANDLED;
}
