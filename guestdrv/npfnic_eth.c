// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic Ethernet datapath: a net_device with one NAPI context per queue
 * pair. The datapath never reads the BAR: the device reports progress
 * (TX/RX heads, link, errors) in a status block in guest memory, and the
 * driver talks to it only with posted doorbell writes. Only ifdown (the
 * quiesce handshake: each disable, then its BUSY bit polled until clear
 * before any memory is freed) and ethtool -S (late_dma) read registers.
 *
 * RX copies each frame out of a persistent ring buffer into a fresh skb and
 * gives the same buffer back to the device, so a ring warms once and stays
 * warm; the page-fault support builds on exactly that property. With a
 * translating rx_policy (npfnic_npf.c) the buffer of slot i is a page at a
 * per-slot VA that exists only once the device faulted on it, and NAPI
 * draws the synthetic rNPFs of rnpf_rate_ppm for the frames it received.
 */

#include <linux/etherdevice.h>
#include <linux/ethtool.h>
#include <linux/if_vlan.h>
#include <linux/interrupt.h>
#include <linux/module.h>
#include <linux/skbuff.h>

#include "npfnic.h"

static unsigned int rx_ring_size = 1024;
module_param(rx_ring_size, uint, 0444);
MODULE_PARM_DESC(rx_ring_size, "RX descriptors per queue (power of two, 8..4096)");

static unsigned int tx_ring_size = 256;
module_param(tx_ring_size, uint, 0444);
MODULE_PARM_DESC(tx_ring_size, "TX descriptors per queue (power of two, 8..4096)");

static unsigned int queues = 1;
module_param(queues, uint, 0444);
MODULE_PARM_DESC(queues, "queue pairs to use (1..4, limited by MSI-X vectors)");

static unsigned int itr_usecs = 20;
module_param(itr_usecs, uint, 0444);
MODULE_PARM_DESC(itr_usecs, "minimum microseconds between two interrupts of a queue pair");

static bool npfnic_valid_ring_size(u32 n)
{
	return is_power_of_2(n) && n >= NPFNIC_RING_SIZE_MIN && n <= NPFNIC_RING_SIZE_MAX;
}

static u32 npfnic_tx_free(const struct npfnic_qp *qp)
{
	return qp->tx_size - (qp->tx_tail - qp->tx_clean);
}

/* ---- ring memory ---- */

/*
 * Forgets a pair the device did not let go of (still BUSY after its
 * disable): its rings, RX buffers and slot pages, and the TX frames it may
 * still read, stay allocated for good.
 */
static void npfnic_leak_qp(struct npfnic_qp *qp)
{
	struct npfnic_pending *p, *tmp;

	list_for_each_entry_safe(p, tmp, &qp->bk_pending, list) {
		list_del(&p->list);
		kfree(p);
	}
	qp->bk_npending = 0;
	qp->tx_ring = NULL;
	qp->rx_ring = NULL;
	qp->rx_bufs = NULL;
	qp->rx_slots = NULL;
	qp->tx_slots = NULL;
	qp->lost = false;
}

static void npfnic_free_qp(struct npfnic_qp *qp)
{
	struct device *dev = &qp->nic->pdev->dev;

	if (qp->lost) {
		npfnic_leak_qp(qp);
		return;
	}
	if (qp->tx_ring)
		dma_free_coherent(dev, qp->tx_size * sizeof(*qp->tx_ring), qp->tx_ring,
				  qp->tx_ring_dma);
	if (qp->rx_ring)
		dma_free_coherent(dev, qp->rx_size * sizeof(*qp->rx_ring), qp->rx_ring,
				  qp->rx_ring_dma);
	if (qp->rx_bufs)
		dma_free_coherent(dev, (size_t)qp->rx_size * NPFNIC_RX_BUF_SIZE, qp->rx_bufs,
				  qp->rx_bufs_dma);
	npfnic_free_rx_slots(qp);
	kvfree(qp->tx_slots);
	qp->tx_ring = NULL;
	qp->rx_ring = NULL;
	qp->rx_bufs = NULL;
	qp->tx_slots = NULL;
}

static int npfnic_alloc_qp(struct npfnic_qp *qp, u32 tx_size, u32 rx_size)
{
	struct device *dev = &qp->nic->pdev->dev;

	qp->tx_size = tx_size;
	qp->rx_size = rx_size;
	qp->tx_ring = dma_alloc_coherent(dev, tx_size * sizeof(*qp->tx_ring), &qp->tx_ring_dma,
					 GFP_KERNEL);
	qp->rx_ring = dma_alloc_coherent(dev, rx_size * sizeof(*qp->rx_ring), &qp->rx_ring_dma,
					 GFP_KERNEL);
	if (npfnic_translating(qp->nic))
		qp->rx_slots = kvcalloc(rx_size, sizeof(*qp->rx_slots), GFP_KERNEL);
	else
		qp->rx_bufs = dma_alloc_coherent(dev, (size_t)rx_size * NPFNIC_RX_BUF_SIZE,
						 &qp->rx_bufs_dma, GFP_KERNEL);
	qp->tx_slots = kvcalloc(tx_size, sizeof(*qp->tx_slots), GFP_KERNEL);
	if (!qp->tx_ring || !qp->rx_ring || !(qp->rx_bufs || qp->rx_slots) || !qp->tx_slots) {
		npfnic_free_qp(qp);
		return -ENOMEM;
	}
	qp->tx_tail = 0;
	qp->tx_clean = 0;
	qp->rx_tail = 0;
	qp->rx_next = 0;
	return 0;
}

/* ---- TX ---- */

static void npfnic_unmap_tx_slot(struct device *dev, struct npfnic_tx_slot *slot)
{
	if (!slot->len)
		return;
	if (slot->page)
		dma_unmap_page(dev, slot->dma, slot->len, DMA_TO_DEVICE);
	else
		dma_unmap_single(dev, slot->dma, slot->len, DMA_TO_DEVICE);
	slot->len = 0;
}

/* Reclaims what the device consumed; returns the number of frames completed. */
static int npfnic_clean_tx(struct npfnic_qp *qp, int budget)
{
	struct device *dev = &qp->nic->pdev->dev;
	u32 head = le32_to_cpu(READ_ONCE(npfnic_qp_status(qp->nic, qp->idx)->tx_head));
	struct netdev_queue *txq = netdev_get_tx_queue(qp->nic->netdev, qp->idx);
	unsigned int pkts = 0, bytes = 0;

	/* A head beyond what we posted is device garbage: never trust it. */
	if (head - qp->tx_clean > qp->tx_tail - qp->tx_clean)
		return 0;
	while (qp->tx_clean != head) {
		struct npfnic_tx_slot *slot = &qp->tx_slots[qp->tx_clean & (qp->tx_size - 1)];

		npfnic_unmap_tx_slot(dev, slot);
		if (slot->skb) {
			pkts++;
			bytes += slot->skb->len;
			napi_consume_skb(slot->skb, budget);
			slot->skb = NULL;
		}
		qp->tx_clean++;
	}
	if (!pkts)
		return 0;
	u64_stats_update_begin(&qp->stats.syncp);
	qp->stats.tx_packets += pkts;
	qp->stats.tx_bytes += bytes;
	u64_stats_update_end(&qp->stats.syncp);
	netdev_tx_completed_queue(txq, pkts, bytes);
	/* Pairs with the barrier in npfnic_xmit before it stops the queue. */
	smp_mb();
	if (netif_tx_queue_stopped(txq) && npfnic_tx_free(qp) >= NPFNIC_TX_MAX_SEGS)
		netif_tx_wake_queue(txq);
	return pkts;
}

struct npfnic_tx_offload {
	u16 flags;
	u16 mss;
	u8 csum_start;
	u8 csum_offset;
};

/*
 * Fills the first descriptor's offload request: segmentation for GSO TCP
 * frames, a checksum for partial ones. What the device cannot express (a
 * checksum starting beyond byte 255) is finished in software instead.
 */
static int npfnic_tx_offload(struct npfnic *nic, struct sk_buff *skb,
			     struct npfnic_tx_offload *o)
{
	unsigned int start;

	memset(o, 0, sizeof(*o));
	if (skb->ip_summed != CHECKSUM_PARTIAL)
		return 0;
	start = skb_checksum_start_offset(skb);
	if (start > U8_MAX || skb->csum_offset > U8_MAX)
		return skb_is_gso(skb) ? -EINVAL : skb_checksum_help(skb);
	o->csum_start = start;
	o->csum_offset = skb->csum_offset;
	if (skb_is_gso(skb)) {
		if (skb_shinfo(skb)->gso_type & SKB_GSO_TCPV4)
			o->flags = NPFNIC_TXD_TSO4;
		else if (skb_shinfo(skb)->gso_type & SKB_GSO_TCPV6)
			o->flags = NPFNIC_TXD_TSO6;
		else
			return -EINVAL;	/* only TCP segmentation is advertised */
		o->mss = skb_shinfo(skb)->gso_size;
		return 0;
	}
	if (!(nic->features & NPFNIC_FEAT_TX_CSUM)) {
		memset(o, 0, sizeof(*o));
		return skb_checksum_help(skb);
	}
	o->flags = NPFNIC_TXD_CSUM;
	return 0;
}

static netdev_tx_t npfnic_xmit(struct sk_buff *skb, struct net_device *netdev)
{
	struct npfnic *nic = npfnic_from_netdev(netdev);
	struct npfnic_qp *qp = &nic->qps[skb_get_queue_mapping(skb)];
	struct netdev_queue *txq = netdev_get_tx_queue(netdev, qp->idx);
	struct device *dev = &nic->pdev->dev;
	u32 first = qp->tx_tail, i, nsegs;
	struct npfnic_tx_offload offload;
	struct npfnic_tx_slot *slot;
	struct npfnic_tx_desc *desc;
	int f;

	if (npfnic_tx_offload(nic, skb, &offload))
		goto drop;
	if (skb_headlen(skb) > U16_MAX)
		goto drop;	/* a descriptor carries at most 64 KiB - 1 */
	if (skb_shinfo(skb)->nr_frags + 1 > NPFNIC_TX_MAX_SEGS) {
		if (skb_linearize(skb))
			goto drop;
		u64_stats_update_begin(&qp->stats.syncp);
		qp->stats.tx_linearized++;
		u64_stats_update_end(&qp->stats.syncp);
	}
	nsegs = skb_shinfo(skb)->nr_frags + 1;
	if (unlikely(npfnic_tx_free(qp) < nsegs)) {
		/* The queue is stopped before it fills: this is a bug, not load. */
		netif_tx_stop_queue(txq);
		return NETDEV_TX_BUSY;
	}

	slot = &qp->tx_slots[qp->tx_tail & (qp->tx_size - 1)];
	slot->dma = dma_map_single(dev, skb->data, skb_headlen(skb), DMA_TO_DEVICE);
	if (dma_mapping_error(dev, slot->dma))
		goto drop;
	slot->len = skb_headlen(skb);
	slot->page = false;
	for (f = 0;; f++) {
		desc = &qp->tx_ring[qp->tx_tail & (qp->tx_size - 1)];
		desc->addr = cpu_to_le64(slot->dma);
		desc->len = cpu_to_le16(slot->len);
		desc->flags = 0;
		desc->mss = 0;
		desc->csum_start = 0;
		desc->csum_offset = 0;
		qp->tx_tail++;
		if (f == skb_shinfo(skb)->nr_frags)
			break;
		slot = &qp->tx_slots[qp->tx_tail & (qp->tx_size - 1)];
		slot->len = skb_frag_size(&skb_shinfo(skb)->frags[f]);
		slot->page = true;
		slot->dma = skb_frag_dma_map(dev, &skb_shinfo(skb)->frags[f], 0, slot->len,
					     DMA_TO_DEVICE);
		if (dma_mapping_error(dev, slot->dma)) {
			slot->len = 0;
			goto unwind;
		}
	}
	desc->flags |= cpu_to_le16(NPFNIC_TXD_EOP);
	desc = &qp->tx_ring[first & (qp->tx_size - 1)];
	desc->flags |= cpu_to_le16(offload.flags);
	desc->mss = cpu_to_le16(offload.mss);
	desc->csum_start = offload.csum_start;
	desc->csum_offset = offload.csum_offset;
	slot->skb = skb;
	netdev_tx_sent_queue(txq, skb->len);
	skb_tx_timestamp(skb);

	if (npfnic_tx_free(qp) < NPFNIC_TX_MAX_SEGS) {
		netif_tx_stop_queue(txq);
		u64_stats_update_begin(&qp->stats.syncp);
		qp->stats.tx_ring_full++;
		u64_stats_update_end(&qp->stats.syncp);
		/* Pairs with the barrier in npfnic_clean_tx after it frees slots. */
		smp_mb();
		if (npfnic_tx_free(qp) >= NPFNIC_TX_MAX_SEGS)
			netif_tx_start_queue(txq);
	}
	/* Descriptors before the doorbell; batch doorbells while more frames come. */
	if (!netdev_xmit_more() || netif_xmit_stopped(txq)) {
		dma_wmb();
		iowrite32(qp->tx_tail, qp->regs + NPFNIC_QP_TX_TAIL);
	}
	return NETDEV_TX_OK;

unwind:
	for (i = first; i != qp->tx_tail; i++)
		npfnic_unmap_tx_slot(dev, &qp->tx_slots[i & (qp->tx_size - 1)]);
	qp->tx_tail = first;
drop:
	dev_kfree_skb_any(skb);
	netdev->stats.tx_dropped++;
	return NETDEV_TX_OK;
}

/* ---- RX ---- */

static void npfnic_post_rx(struct npfnic_qp *qp, u32 count)
{
	u32 tail = qp->rx_tail;

	while (count--) {
		u32 i = tail & (qp->rx_size - 1);
		struct npfnic_rx_desc *desc = &qp->rx_ring[i];

		if (qp->rx_slots)
			desc->addr = cpu_to_le64(npfnic_rx_va(qp->idx, i));
		else
			desc->addr = cpu_to_le64(qp->rx_bufs_dma + (u64)i * NPFNIC_RX_BUF_SIZE);
		desc->buf_len = cpu_to_le16(NPFNIC_RX_BUF_SIZE);
		desc->pkt_len = 0;
		desc->status = 0;
		desc->rsvd = 0;
		tail++;
	}
	/*
	 * The backup work places frames in posted descriptors: it must see
	 * these writes before the tail that covers them.
	 */
	smp_store_release(&qp->rx_tail, tail);
	dma_wmb();
	iowrite32(tail, qp->regs + NPFNIC_QP_RX_TAIL);
}

/*
 * The buffer of a completed descriptor: the persistent ring buffer, or the
 * slot's page (NULL when the ring was cooled since the device filled it).
 */
static u8 *npfnic_rx_buf(struct npfnic_qp *qp, u32 i, u16 len)
{
	struct npfnic_rx_slot *slot;
	struct page *page;

	if (!qp->rx_slots)
		return qp->rx_bufs + (size_t)i * NPFNIC_RX_BUF_SIZE;
	slot = &qp->rx_slots[i];
	/* Pairs with the release in npfnic_map_rx_slot: slot->dma is valid. */
	page = smp_load_acquire(&slot->page);
	if (!page)
		return NULL;
	dma_sync_single_for_cpu(&qp->nic->pdev->dev, slot->dma, len, DMA_BIDIRECTIONAL);
	return page_address(page);
}

static int npfnic_clean_rx(struct npfnic_qp *qp, int budget)
{
	struct net_device *netdev = qp->nic->netdev;
	u32 head = le32_to_cpu(READ_ONCE(npfnic_qp_status(qp->nic, qp->idx)->rx_head));
	unsigned int pkts = 0, bytes = 0, cooled = 0, xlat = 0;
	int done = 0;

	if (head - qp->rx_next > qp->rx_tail - qp->rx_next)
		return 0;	/* beyond what we posted: device garbage */
	/* The head is read before the descriptors it covers. */
	dma_rmb();
	while (qp->rx_next != head && done < budget) {
		u32 i = qp->rx_next & (qp->rx_size - 1);
		struct npfnic_rx_desc *desc = &qp->rx_ring[i];
		u16 status = le16_to_cpu(desc->status);
		u16 len = le16_to_cpu(desc->pkt_len);
		struct sk_buff *skb;
		u8 *buf = NULL;

		if (status & NPFNIC_RXD_ERROR) {
			xlat++;		/* no frame: its buffer could not be translated */
		} else if (!(status & NPFNIC_RXD_DONE) || len < ETH_HLEN ||
			   len > NPFNIC_RX_BUF_SIZE) {
			netdev->stats.rx_errors++;
		} else {
			buf = npfnic_rx_buf(qp, i, len);
			if (!buf)
				cooled++;
		}
		if (buf) {
			skb = napi_alloc_skb(&qp->napi, len);
			if (!skb) {
				netdev->stats.rx_dropped++;
			} else {
				skb_put_data(skb, buf, len);
				skb->protocol = eth_type_trans(skb, netdev);
				if ((status & NPFNIC_RXD_CSUM_OK) &&
				    (netdev->features & NETIF_F_RXCSUM))
					skb->ip_summed = CHECKSUM_UNNECESSARY;
				skb_record_rx_queue(skb, qp->idx);
				pkts++;
				bytes += len;
				napi_gro_receive(&qp->napi, skb);
			}
			if (qp->rx_slots)
				dma_sync_single_for_device(&qp->nic->pdev->dev, qp->rx_slots[i].dma,
							   len, DMA_BIDIRECTIONAL);
		}
		qp->rx_next++;
		done++;
	}
	if (done) {
		u64_stats_update_begin(&qp->stats.syncp);
		qp->stats.rx_packets += pkts;
		qp->stats.rx_bytes += bytes;
		qp->stats.rx_cooled_drops += cooled;
		qp->stats.rx_xlat_errors += xlat;
		u64_stats_update_end(&qp->stats.syncp);
		/* The same buffers go straight back: the ring stays warm. */
		npfnic_post_rx(qp, done);
	}
	if (pkts && qp->rx_slots)
		npfnic_rnpf_rx(qp, pkts);
	return done;
}

static bool npfnic_qp_has_work(struct npfnic_qp *qp)
{
	struct npfnic_qp_status *st = npfnic_qp_status(qp->nic, qp->idx);

	return le32_to_cpu(READ_ONCE(st->rx_head)) != qp->rx_next ||
	       le32_to_cpu(READ_ONCE(st->tx_head)) != qp->tx_clean;
}

static int npfnic_poll(struct napi_struct *napi, int budget)
{
	struct npfnic_qp *qp = container_of(napi, struct npfnic_qp, napi);
	int done;

	npfnic_clean_tx(qp, budget);
	done = npfnic_clean_rx(qp, budget);
	if (done < budget && napi_complete_done(napi, done)) {
		iowrite32(1, qp->regs + NPFNIC_QP_IRQ_ARM);
		/*
		 * A completion that landed before the arm raises no interrupt:
		 * look once more after arming so it is not stranded.
		 */
		mb();
		if (npfnic_qp_has_work(qp))
			napi_schedule(napi);
	}
	return done;
}

irqreturn_t npfnic_qp_irq(int irq, void *data)
{
	struct npfnic_qp *qp = data;

	u64_stats_update_begin(&qp->stats.syncp);
	qp->stats.irqs++;
	u64_stats_update_end(&qp->stats.syncp);
	napi_schedule_irqoff(&qp->napi);
	return IRQ_HANDLED;
}

/* ---- link, errors ---- */

irqreturn_t npfnic_misc_irq(int irq, void *data)
{
	struct npfnic *nic = data;

	schedule_work(&nic->misc_work);
	return IRQ_HANDLED;
}

static void npfnic_update_link(struct npfnic *nic)
{
	bool up = le32_to_cpu(READ_ONCE(nic->sb->link)) & NPFNIC_LINK_UP;

	if (up && !netif_carrier_ok(nic->netdev))
		netif_carrier_on(nic->netdev);
	else if (!up && netif_carrier_ok(nic->netdev))
		netif_carrier_off(nic->netdev);
}

static void npfnic_misc_work(struct work_struct *work)
{
	struct npfnic *nic = container_of(work, struct npfnic, misc_work);
	u32 deverr;
	int q;

	rtnl_lock();
	if (netif_running(nic->netdev)) {
		npfnic_update_link(nic);
		deverr = le32_to_cpu(READ_ONCE(nic->sb->error));
		if (deverr)
			netdev_err(nic->netdev, "device error %u\n", deverr);
		for (q = 0; q < nic->nqps; q++) {
			struct npfnic_qp_status *st = npfnic_qp_status(nic, q);
			u32 err = le32_to_cpu(READ_ONCE(st->error));

			if (err && err != nic->qp_errors_seen[q])
				netdev_err(nic->netdev,
					   "queue pair %d stopped by the device: error %u at %u\n",
					   q, err, le32_to_cpu(READ_ONCE(st->error_info)));
			nic->qp_errors_seen[q] = err;
		}
		iowrite32(1, nic->bar0 + NPFNIC_REG_MISC_IRQ_ARM);
	}
	rtnl_unlock();
}

/* ---- open / stop ---- */

static void npfnic_program_status_block(struct npfnic *nic)
{
	iowrite32(lower_32_bits(nic->sb_dma), nic->bar0 + NPFNIC_REG_STATUS_ADDR_LO);
	iowrite32(upper_32_bits(nic->sb_dma), nic->bar0 + NPFNIC_REG_STATUS_ADDR_HI);
}

static void npfnic_start_qp(struct npfnic_qp *qp)
{
	iowrite32(lower_32_bits(qp->tx_ring_dma), qp->regs + NPFNIC_QP_TX_BASE_LO);
	iowrite32(upper_32_bits(qp->tx_ring_dma), qp->regs + NPFNIC_QP_TX_BASE_HI);
	iowrite32(qp->tx_size, qp->regs + NPFNIC_QP_TX_SIZE);
	iowrite32(lower_32_bits(qp->rx_ring_dma), qp->regs + NPFNIC_QP_RX_BASE_LO);
	iowrite32(upper_32_bits(qp->rx_ring_dma), qp->regs + NPFNIC_QP_RX_BASE_HI);
	iowrite32(qp->rx_size, qp->regs + NPFNIC_QP_RX_SIZE);
	iowrite32(qp->nic->itr_usecs, qp->regs + NPFNIC_QP_ITR);
	if (npfnic_translating(qp->nic))
		npfnic_npf_start_qp(qp);
	iowrite32(NPFNIC_QP_CTRL_ENABLE, qp->regs + NPFNIC_QP_CTRL);
	npfnic_post_rx(qp, qp->rx_size);
	iowrite32(1, qp->regs + NPFNIC_QP_IRQ_ARM);
}

/*
 * Stops every engine and waits for each one's BUSY bit to clear (the
 * quiesce handshake): the pairs first, whose DMA goes through translation
 * and the backup ring, then the fault machinery. An
 * engine that stays busy is marked lost and its memory is leaked instead
 * of freed.
 */
static void npfnic_stop_hw(struct npfnic *nic)
{
	int q;

	for (q = 0; q < nic->nqps; q++)
		iowrite32(0, nic->qps[q].regs + NPFNIC_QP_CTRL);
	for (q = 0; q < nic->nqps; q++) {
		struct npfnic_qp *qp = &nic->qps[q];

		qp->lost = !npfnic_wait_quiesced(nic, qp->regs + NPFNIC_QP_CTRL,
						 NPFNIC_QP_CTRL_BUSY, "queue pair");
	}
	/*
	 * CTRL stays BUSY while the status block is programmed: it lives
	 * until remove, whose CTRL_RESET is the handshake that frees it.
	 */
	iowrite32(0, nic->bar0 + NPFNIC_REG_CTRL);
	if (npfnic_translating(nic))
		npfnic_npf_stop_hw(nic);
}

static int npfnic_open(struct net_device *netdev)
{
	struct npfnic *nic = npfnic_from_netdev(netdev);
	int q, err;

	nic->nqps = clamp_t(int, queues, 1, min(NPFNIC_QP_MAX, nic->nvecs - 1));
	for (q = 0; q < nic->nqps; q++) {
		err = npfnic_alloc_qp(&nic->qps[q], nic->tx_ring_size, nic->rx_ring_size);
		if (err)
			goto err_free;
		memset(npfnic_qp_status(nic, q), 0, sizeof(struct npfnic_qp_status));
		nic->qp_errors_seen[q] = 0;
	}
	err = netif_set_real_num_tx_queues(netdev, nic->nqps);
	if (!err)
		err = netif_set_real_num_rx_queues(netdev, nic->nqps);
	if (err)
		goto err_free;

	if (npfnic_translating(nic)) {
		err = npfnic_npf_open(nic);
		if (err)
			goto err_free;
	}
	npfnic_program_status_block(nic);
	iowrite32(NPFNIC_CTRL_ENABLE, nic->bar0 + NPFNIC_REG_CTRL);
	for (q = 0; q < nic->nqps; q++) {
		napi_enable(&nic->qps[q].napi);
		npfnic_start_qp(&nic->qps[q]);
	}
	iowrite32(1, nic->bar0 + NPFNIC_REG_MISC_IRQ_ARM);
	netif_carrier_off(netdev);
	npfnic_update_link(nic);
	netif_tx_start_all_queues(netdev);
	return 0;

err_free:
	while (--q >= 0)
		npfnic_free_qp(&nic->qps[q]);
	nic->nqps = 0;
	return err;
}

static int npfnic_stop(struct net_device *netdev)
{
	struct npfnic *nic = npfnic_from_netdev(netdev);
	struct device *dev = &nic->pdev->dev;
	int q;
	u32 i;

	/*
	 * NAPI goes before the TX queues: its TX clean wakes a stopped queue,
	 * and the last poll (napi_disable waits for it) would undo
	 * netif_tx_disable, letting xmit post into rings freed below.
	 * Interrupts raised from here on find NAPI disabled.
	 */
	for (q = 0; q < nic->nqps; q++)
		napi_disable(&nic->qps[q].napi);
	netif_tx_disable(netdev);
	netif_carrier_off(netdev);
	if (npfnic_translating(nic))
		npfnic_npf_quiesce(nic);
	npfnic_stop_hw(nic);
	if (npfnic_translating(nic))
		npfnic_npf_close(nic);
	for (q = 0; q < nic->nqps; q++) {
		struct npfnic_qp *qp = &nic->qps[q];

		/* Frames the device never sent are dropped and unmapped here. */
		for (i = qp->tx_clean; i != qp->tx_tail && !qp->lost; i++) {
			struct npfnic_tx_slot *slot = &qp->tx_slots[i & (qp->tx_size - 1)];

			npfnic_unmap_tx_slot(dev, slot);
			if (slot->skb)
				dev_kfree_skb_any(slot->skb);
			slot->skb = NULL;
		}
		netdev_tx_reset_queue(netdev_get_tx_queue(netdev, q));
		npfnic_free_qp(qp);
	}
	nic->nqps = 0;
	return 0;
}

/*
 * Restarts every pair: the recovery from a backup entry that names no
 * descriptor the driver could complete (device garbage), on which the
 * pair's rx_head would otherwise wait until the next ifdown.
 */
static void npfnic_reset_work(struct work_struct *work)
{
	struct npfnic *nic = container_of(work, struct npfnic, reset_work);
	struct net_device *netdev = nic->netdev;
	int err;

	rtnl_lock();
	if (netif_running(netdev) && READ_ONCE(nic->npf.reset_pending)) {
		netdev_warn(netdev, "restarting the queue pairs after a bad backup entry\n");
		npfnic_stop(netdev);
		err = npfnic_open(netdev);
		if (err)
			netdev_err(netdev, "restart failed: %d\n", err);
	}
	WRITE_ONCE(nic->npf.reset_pending, false);
	rtnl_unlock();
}

void npfnic_schedule_reset(struct npfnic *nic)
{
	if (!READ_ONCE(nic->npf.reset_pending)) {
		WRITE_ONCE(nic->npf.reset_pending, true);
		atomic64_inc(&nic->nstats.backup_resets);
		schedule_work(&nic->reset_work);
	}
}

static void npfnic_get_stats64(struct net_device *netdev, struct rtnl_link_stats64 *s)
{
	struct npfnic *nic = npfnic_from_netdev(netdev);
	unsigned int start;
	u64 cooled = 0;
	int q;

	for (q = 0; q < NPFNIC_QP_MAX; q++) {
		struct npfnic_qp_stats *st = &nic->qps[q].stats;
		u64 rp, rb, tp, tb, cd;

		do {
			start = u64_stats_fetch_begin(&st->syncp);
			rp = st->rx_packets;
			rb = st->rx_bytes;
			tp = st->tx_packets;
			tb = st->tx_bytes;
			cd = st->rx_cooled_drops;
		} while (u64_stats_fetch_retry(&st->syncp, start));
		s->rx_packets += rp;
		s->rx_bytes += rb;
		s->tx_packets += tp;
		s->tx_bytes += tb;
		cooled += cd;
	}
	for (q = 0; q < nic->nqps; q++) {
		struct npfnic_qp_status *st = npfnic_qp_status(nic, q);

		s->rx_missed_errors += le32_to_cpu(READ_ONCE(st->rx_drops_no_buf));
		s->rx_length_errors += le32_to_cpu(READ_ONCE(st->rx_drops_too_big));
		s->tx_errors += le32_to_cpu(READ_ONCE(st->tx_drops_bad_len));
	}
	s->rx_dropped = netdev->stats.rx_dropped + s->rx_missed_errors + cooled;
	s->rx_errors = netdev->stats.rx_errors + s->rx_length_errors;
	s->tx_dropped = netdev->stats.tx_dropped;
}

static const struct net_device_ops npfnic_netdev_ops = {
	.ndo_open = npfnic_open,
	.ndo_stop = npfnic_stop,
	.ndo_start_xmit = npfnic_xmit,
	.ndo_get_stats64 = npfnic_get_stats64,
	.ndo_validate_addr = eth_validate_addr,
};

/* ---- ethtool ---- */

static const char npfnic_qp_stat_names[][ETH_GSTRING_LEN] = {
	"rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "tx_ring_full",
	"tx_linearized", "interrupts",
};

static const char npfnic_dev_stat_names[][ETH_GSTRING_LEN] = {
	"rx_drops_no_buf", "rx_drops_too_big", "tx_drops_bad_len", "queue_errors",
	"tx_tso_frames", "rx_wire_stalls", "late_dma", "quiesce_timeouts",
};

#define NPFNIC_QP_STATS		ARRAY_SIZE(npfnic_qp_stat_names)
#define NPFNIC_DEV_STATS	ARRAY_SIZE(npfnic_dev_stat_names)

static void npfnic_get_drvinfo(struct net_device *netdev, struct ethtool_drvinfo *info)
{
	struct npfnic *nic = npfnic_from_netdev(netdev);

	strscpy(info->driver, DRV_NAME, sizeof(info->driver));
	strscpy(info->bus_info, pci_name(nic->pdev), sizeof(info->bus_info));
}

static int npfnic_get_sset_count(struct net_device *netdev, int sset)
{
	if (sset != ETH_SS_STATS)
		return -EOPNOTSUPP;
	return NPFNIC_QP_MAX * NPFNIC_QP_STATS + NPFNIC_DEV_STATS + NPFNIC_NPF_STATS;
}

static void npfnic_get_strings(struct net_device *netdev, u32 sset, u8 *data)
{
	int q, i;

	if (sset != ETH_SS_STATS)
		return;
	for (q = 0; q < NPFNIC_QP_MAX; q++)
		for (i = 0; i < NPFNIC_QP_STATS; i++)
			ethtool_sprintf(&data, "q%d_%s", q, npfnic_qp_stat_names[i]);
	for (i = 0; i < NPFNIC_DEV_STATS; i++)
		ethtool_sprintf(&data, "%s", npfnic_dev_stat_names[i]);
	for (i = 0; i < NPFNIC_NPF_STATS; i++)
		ethtool_sprintf(&data, "%s", npfnic_npf_stat_names[i]);
}

static void npfnic_get_ethtool_stats(struct net_device *netdev, struct ethtool_stats *stats,
				     u64 *data)
{
	struct npfnic *nic = npfnic_from_netdev(netdev);
	u64 no_buf = 0, too_big = 0, bad_len = 0, qerr = 0, tso = 0, stalls = 0;
	unsigned int start;
	int q;

	for (q = 0; q < NPFNIC_QP_MAX; q++) {
		struct npfnic_qp_stats *st = &nic->qps[q].stats;

		do {
			start = u64_stats_fetch_begin(&st->syncp);
			data[0] = st->rx_packets;
			data[1] = st->rx_bytes;
			data[2] = st->tx_packets;
			data[3] = st->tx_bytes;
			data[4] = st->tx_ring_full;
			data[5] = st->tx_linearized;
			data[6] = st->irqs;
		} while (u64_stats_fetch_retry(&st->syncp, start));
		data += NPFNIC_QP_STATS;
	}
	for (q = 0; q < nic->nqps; q++) {
		struct npfnic_qp_status *st = npfnic_qp_status(nic, q);

		no_buf += le32_to_cpu(READ_ONCE(st->rx_drops_no_buf));
		too_big += le32_to_cpu(READ_ONCE(st->rx_drops_too_big));
		bad_len += le32_to_cpu(READ_ONCE(st->tx_drops_bad_len));
		qerr += !!le32_to_cpu(READ_ONCE(st->error));
		tso += le32_to_cpu(READ_ONCE(st->tx_tso_frames));
		stalls += le32_to_cpu(READ_ONCE(st->rx_wire_stalls));
	}
	data[0] = no_buf;
	data[1] = too_big;
	data[2] = bad_len;
	data[3] = qerr;
	data[4] = tso;
	data[5] = stalls;
	/* The device's late-DMA detector: nonzero only on a broken device. */
	data[6] = ioread32(nic->bar0 + NPFNIC_REG_LATE_DMA);
	data[7] = atomic64_read(&nic->quiesce_timeouts);
	npfnic_npf_get_stats(nic, data + NPFNIC_DEV_STATS);
}

static void npfnic_get_ringparam(struct net_device *netdev, struct ethtool_ringparam *ring,
				 struct kernel_ethtool_ringparam *kring,
				 struct netlink_ext_ack *extack)
{
	struct npfnic *nic = npfnic_from_netdev(netdev);

	ring->rx_max_pending = NPFNIC_RING_SIZE_MAX;
	ring->tx_max_pending = NPFNIC_RING_SIZE_MAX;
	ring->rx_pending = nic->rx_ring_size;
	ring->tx_pending = nic->tx_ring_size;
}

static int npfnic_set_ringparam(struct net_device *netdev, struct ethtool_ringparam *ring,
				struct kernel_ethtool_ringparam *kring,
				struct netlink_ext_ack *extack)
{
	struct npfnic *nic = npfnic_from_netdev(netdev);
	bool running = netif_running(netdev);
	int err = 0;

	if (ring->rx_mini_pending || ring->rx_jumbo_pending)
		return -EINVAL;
	if (!npfnic_valid_ring_size(ring->rx_pending) ||
	    !npfnic_valid_ring_size(ring->tx_pending)) {
		NL_SET_ERR_MSG(extack, "ring sizes must be powers of two in 8..4096");
		return -EINVAL;
	}
	if (running)
		npfnic_stop(netdev);
	nic->rx_ring_size = ring->rx_pending;
	nic->tx_ring_size = ring->tx_pending;
	if (running)
		err = npfnic_open(netdev);
	return err;
}

static const struct ethtool_ops npfnic_ethtool_ops = {
	.get_drvinfo = npfnic_get_drvinfo,
	.get_link = ethtool_op_get_link,
	.get_sset_count = npfnic_get_sset_count,
	.get_strings = npfnic_get_strings,
	.get_ethtool_stats = npfnic_get_ethtool_stats,
	.get_ringparam = npfnic_get_ringparam,
	.set_ringparam = npfnic_set_ringparam,
};

/* ---- probe / remove ---- */

int npfnic_eth_probe(struct npfnic *nic)
{
	struct device *dev = &nic->pdev->dev;
	struct net_device *netdev;
	u8 mac[ETH_ALEN];
	u32 lo, hi;
	int q;

	if (!npfnic_valid_ring_size(rx_ring_size) || !npfnic_valid_ring_size(tx_ring_size)) {
		dev_err(dev, "ring sizes must be powers of two in %d..%d\n",
			NPFNIC_RING_SIZE_MIN, NPFNIC_RING_SIZE_MAX);
		return -EINVAL;
	}
	netdev = alloc_etherdev_mqs(sizeof(struct npfnic *), NPFNIC_QP_MAX, NPFNIC_QP_MAX);
	if (!netdev)
		return -ENOMEM;
	SET_NETDEV_DEV(netdev, dev);
	*(struct npfnic **)netdev_priv(netdev) = nic;
	nic->netdev = netdev;

	nic->sb = dma_alloc_coherent(dev, NPFNIC_STATUS_BLOCK_SIZE, &nic->sb_dma, GFP_KERNEL);
	if (!nic->sb) {
		free_netdev(netdev);
		return -ENOMEM;
	}
	nic->rx_ring_size = rx_ring_size;
	nic->tx_ring_size = tx_ring_size;
	nic->itr_usecs = itr_usecs;
	INIT_WORK(&nic->misc_work, npfnic_misc_work);
	INIT_WORK(&nic->reset_work, npfnic_reset_work);
	for (q = 0; q < NPFNIC_QP_MAX; q++) {
		nic->qps[q].regs = nic->bar0 + NPFNIC_QP_BASE(q);
		u64_stats_init(&nic->qps[q].stats.syncp);
		netif_napi_add(netdev, &nic->qps[q].napi, npfnic_poll);
	}

	lo = ioread32(nic->bar0 + NPFNIC_REG_MAC_LO);
	hi = ioread32(nic->bar0 + NPFNIC_REG_MAC_HI);
	mac[0] = lo;
	mac[1] = lo >> 8;
	mac[2] = lo >> 16;
	mac[3] = lo >> 24;
	mac[4] = hi;
	mac[5] = hi >> 8;
	if (is_valid_ether_addr(mac))
		eth_hw_addr_set(netdev, mac);
	else
		eth_hw_addr_random(netdev);

	netdev->netdev_ops = &npfnic_netdev_ops;
	netdev->ethtool_ops = &npfnic_ethtool_ops;
	nic->features = ioread32(nic->bar0 + NPFNIC_REG_FEATURES);
	/*
	 * HW_CSUM is always offered: SG needs a checksum feature, and the
	 * driver finishes checksums in software when the device cannot.
	 */
	netdev->hw_features = NETIF_F_SG | NETIF_F_HW_CSUM;
	if (nic->features & NPFNIC_FEAT_TSO4)
		netdev->hw_features |= NETIF_F_TSO;
	if (nic->features & NPFNIC_FEAT_TSO6)
		netdev->hw_features |= NETIF_F_TSO6;
	if (nic->features & NPFNIC_FEAT_RX_CSUM)
		netdev->hw_features |= NETIF_F_RXCSUM;
	netdev->features = netdev->hw_features;
	netdev->min_mtu = ETH_MIN_MTU;
	netdev->max_mtu = NPFNIC_MAX_FRAME - ETH_HLEN - VLAN_HLEN;
	netdev->watchdog_timeo = 5 * HZ;
	npfnic_program_status_block(nic);
	return 0;
}

void npfnic_eth_remove(struct npfnic *nic)
{
	bool quiesced;
	int q;

	iowrite32(NPFNIC_CTRL_RESET, nic->bar0 + NPFNIC_REG_CTRL);
	/* The device forgot the status block once the reset quiesced. */
	quiesced = npfnic_wait_quiesced(nic, nic->bar0 + NPFNIC_REG_CTRL, NPFNIC_CTRL_BUSY,
					"device reset");
	cancel_work_sync(&nic->misc_work);
	cancel_work_sync(&nic->reset_work);
	for (q = 0; q < NPFNIC_QP_MAX; q++)
		netif_napi_del(&nic->qps[q].napi);
	if (quiesced)
		dma_free_coherent(&nic->pdev->dev, NPFNIC_STATUS_BLOCK_SIZE, nic->sb,
				  nic->sb_dma);
	free_netdev(nic->netdev);
}

/*
 * Fault injection for tests and driver development: hand the device the bad
 * input a buggy driver would, so its error reporting can be observed.
 */
int npfnic_inject(struct npfnic *nic, const char *what, unsigned int q)
{
	struct netdev_queue *txq;
	struct npfnic_tx_desc *desc;
	struct npfnic_qp *qp;
	int err = 0;

	rtnl_lock();
	if (!netif_running(nic->netdev) || q >= nic->nqps) {
		err = -ENETDOWN;
		goto out;
	}
	qp = &nic->qps[q];
	if (!strcmp(what, "bad_tail")) {
		/* More buffers than the ring holds. */
		iowrite32(qp->rx_tail + 2 * qp->rx_size, qp->regs + NPFNIC_QP_RX_TAIL);
	} else if (!strcmp(what, "bad_ring")) {
		/* A ring far beyond guest RAM. */
		iowrite32(0, qp->regs + NPFNIC_QP_CTRL);
		iowrite32(0x4000, qp->regs + NPFNIC_QP_TX_BASE_HI);
		iowrite32(NPFNIC_QP_CTRL_ENABLE, qp->regs + NPFNIC_QP_CTRL);
	} else if (!strcmp(what, "bad_desc")) {
		/* A frame whose buffer lies outside guest RAM. */
		txq = netdev_get_tx_queue(nic->netdev, q);
		__netif_tx_lock_bh(txq);
		if (npfnic_tx_free(qp) < 1) {
			err = -EBUSY;
		} else {
			desc = &qp->tx_ring[qp->tx_tail & (qp->tx_size - 1)];
			qp->tx_slots[qp->tx_tail & (qp->tx_size - 1)].len = 0;
			desc->addr = cpu_to_le64(1ULL << 46);
			desc->len = cpu_to_le16(64);
			desc->flags = cpu_to_le16(NPFNIC_TXD_EOP);
			desc->mss = 0;
			desc->csum_start = 0;
			desc->csum_offset = 0;
			qp->tx_tail++;
			dma_wmb();
			iowrite32(qp->tx_tail, qp->regs + NPFNIC_QP_TX_TAIL);
		}
		__netif_tx_unlock_bh(txq);
	} else {
		err = npfnic_npf_inject(nic, what, q);
	}
out:
	rtnl_unlock();
	return err;
}
