// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic Ethernet datapath: transmit (offloads, doorbell batching, TX
 * reclaim), receive, and the NAPI poll and interrupt of each queue pair.
 * It reads the device's progress from the status block only, never the
 * BAR, and writes only doorbells.
 *
 * RX copies each frame out of a persistent ring buffer into a fresh skb and
 * gives the same buffer back to the device, so a ring warms once and stays
 * warm; the page-fault support builds on exactly that property. With a
 * translating rx_policy (npfnic_npf.c) the buffer of slot i is a page at a
 * per-slot VA that exists only once the device faulted on it, and NAPI
 * draws the synthetic rNPFs of rnpf_rate_ppm for the frames it received.
 */

#include <linux/etherdevice.h>
#include <linux/interrupt.h>
#include <linux/skbuff.h>

#include "npfnic.h"

/* ---- TX ---- */

void npfnic_unmap_tx_slot(struct device *dev, struct npfnic_tx_slot *slot)
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
	u32 head = le32_to_cpu(READ_ONCE(npfnic_pair_status(qp->nic, qp->idx)->tx_head));
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

netdev_tx_t npfnic_xmit(struct sk_buff *skb, struct net_device *netdev)
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
		iowrite32(qp->tx_tail, qp->regs + NPFNIC_PAIR_TX_TAIL);
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

void npfnic_post_rx(struct npfnic_qp *qp, u32 count)
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
		desc->gso_size = 0;
		tail++;
	}
	/*
	 * The backup work places frames in posted descriptors: it must see
	 * these writes before the tail that covers them.
	 */
	smp_store_release(&qp->rx_tail, tail);
	dma_wmb();
	iowrite32(tail, qp->regs + NPFNIC_PAIR_RX_TAIL);
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
	u32 head = le32_to_cpu(READ_ONCE(npfnic_pair_status(qp->nic, qp->idx)->rx_head));
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
	struct npfnic_pair_status *st = npfnic_pair_status(qp->nic, qp->idx);

	return le32_to_cpu(READ_ONCE(st->rx_head)) != qp->rx_next ||
	       le32_to_cpu(READ_ONCE(st->tx_head)) != qp->tx_clean;
}

int npfnic_poll(struct napi_struct *napi, int budget)
{
	struct npfnic_qp *qp = container_of(napi, struct npfnic_qp, napi);
	int done;

	npfnic_clean_tx(qp, budget);
	done = npfnic_clean_rx(qp, budget);
	if (done < budget && napi_complete_done(napi, done)) {
		iowrite32(1, qp->regs + NPFNIC_PAIR_IRQ_ARM);
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
