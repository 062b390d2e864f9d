// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic Ethernet datapath: transmit (offloads, doorbell batching, TX
 * reclaim), receive, and the NAPI poll and interrupt of each queue pair.
 * It reads the device's progress from the status block only, never the
 * BAR, and writes only doorbells.
 *
 * RX under rx_policy off is zero-copy: each descriptor owns a page of the
 * pair's page pool, a frame goes up as an skb whose linear part holds a
 * copy of its headers and whose frags are the pages themselves, and a
 * fresh page takes each one's place (a frame of at most
 * NPFNIC_RX_COPYBREAK bytes is copied instead, and its page stays). When
 * no fresh page or skb can be had the frame is dropped and its pages
 * stay. A TCP super-packet the device received whole (large receive,
 * NETIF_F_LRO) spans a chain of buffers, up to 17 pages of 4 KiB, and the
 * skb carries gso_size and gso_type as if GRO had merged its segments.
 * With a translating rx_policy (npfnic_npf.c) the buffer of slot i is a
 * page at a per-slot VA that exists only once the device faulted on it:
 * the device must find the same page there again, so each frame is copied
 * out of it into a fresh skb (the first buffer of a chain into the linear
 * part, the others into page frags) and the buffer goes back as it was;
 * the page-fault support builds on exactly that property, and NAPI draws
 * the synthetic rNPFs of rnpf_rate_ppm for the frames it received.
 */

#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <linux/interrupt.h>
#include <linux/ip.h>
#include <linux/skbuff.h>
#include <linux/tcp.h>
#include <net/ipv6.h>
#include <net/page_pool.h>

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
			desc->addr = cpu_to_le64(qp->rx_pages[i].dma);
		desc->buf_len = cpu_to_le16(npfnic_rx_buf_size(qp));
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
	if (qp->ntf) {
		WRITE_ONCE(qp->ntf->rx_tail, cpu_to_le32(tail));
		/*
		 * The tail before rx_kick: either the device, setting rx_kick
		 * and reading rx_tail again, sees this tail, or this read sees
		 * rx_kick and the doorbell wakes the device.
		 */
		mb();
		if (!READ_ONCE(qp->ntf->rx_kick))
			return;
	}
	iowrite32(tail, qp->regs + NPFNIC_PAIR_RX_TAIL);
	u64_stats_update_begin(&qp->stats.syncp);
	qp->stats.rx_doorbells++;
	u64_stats_update_end(&qp->stats.syncp);
}

/*
 * The buffer of a completed descriptor under a translating policy: the
 * slot's page (NULL when the ring was cooled since the device filled it).
 */
static u8 *npfnic_rx_buf(struct npfnic_qp *qp, u32 i, u16 len)
{
	struct npfnic_rx_slot *slot;
	struct page *page;

	slot = &qp->rx_slots[i];
	/* Pairs with the release in npfnic_map_rx_slot: slot->dma is valid. */
	page = smp_load_acquire(&slot->page);
	if (!page)
		return NULL;
	dma_sync_single_for_cpu(&qp->nic->pdev->dev, slot->dma, len, DMA_BIDIRECTIONAL);
	return page_address(page);
}

/* Gives the buffer of a completed descriptor back to the device after the copy. */
static void npfnic_rx_buf_done(struct npfnic_qp *qp, u32 i, u16 len)
{
	dma_sync_single_for_device(&qp->nic->pdev->dev, qp->rx_slots[i].dma, len,
				   DMA_BIDIRECTIONAL);
}

/* What became of the descriptors of one frame or chain. */
struct npfnic_rx_res {
	unsigned int cooled;	/* buffers whose slot page was cooled away */
	unsigned int bad;	/* a chain refused as malformed */
	unsigned int nomem;
};

/*
 * The offset of the TCP payload of an LRO skb whose data starts after the
 * Ethernet header (eth_type_trans), for gso_segs; 0 when the headers do
 * not parse as the RXD_GSO_* bit says. The device puts every header into
 * the first buffer, so the pulls only check.
 */
static unsigned int npfnic_lro_hlen(struct sk_buff *skb, bool v6)
{
	__be16 proto = skb->protocol;
	unsigned int off = 0, l4;

	if (proto == htons(ETH_P_8021Q)) {
		if (!pskb_may_pull(skb, VLAN_HLEN))
			return 0;
		proto = ((struct vlan_hdr *)skb->data)->h_vlan_encapsulated_proto;
		off = VLAN_HLEN;
	}
	if (!v6) {
		const struct iphdr *iph;

		if (proto != htons(ETH_P_IP) || !pskb_may_pull(skb, off + sizeof(*iph)))
			return 0;
		iph = (const struct iphdr *)(skb->data + off);
		if (iph->ihl < 5 || iph->protocol != IPPROTO_TCP)
			return 0;
		l4 = off + iph->ihl * 4;
	} else {
		__be16 frag_off;
		u8 nexthdr;
		int l;

		if (proto != htons(ETH_P_IPV6) ||
		    !pskb_may_pull(skb, off + sizeof(struct ipv6hdr)))
			return 0;
		nexthdr = ((const struct ipv6hdr *)(skb->data + off))->nexthdr;
		l = ipv6_skip_exthdr(skb, off + sizeof(struct ipv6hdr), &nexthdr, &frag_off);
		if (l < 0 || nexthdr != IPPROTO_TCP || frag_off)
			return 0;
		l4 = l;
	}
	if (!pskb_may_pull(skb, l4 + sizeof(struct tcphdr)))
		return 0;
	return l4 + ((const struct tcphdr *)(skb->data + l4))->doff * 4;
}

/*
 * Copies the continuation buffers of a chain (descriptors first + 1 ..
 * first + n - 1, all below rx_head and checked by the caller) into page
 * frags of skb, filling each page before taking the next. Returns false
 * when a buffer's slot was cooled, pages ran out or the chain needs more
 * frags than an skb has.
 */
static bool npfnic_rx_chain_frags(struct npfnic_qp *qp, struct sk_buff *skb, u32 first, u32 n,
				  struct npfnic_rx_res *res)
{
	struct skb_shared_info *shinfo = skb_shinfo(skb);
	struct page *page = NULL;
	unsigned int poff = PAGE_SIZE;
	u32 k;

	for (k = 1; k < n; k++) {
		u32 i = (first + k) & (qp->rx_size - 1);
		u16 len = le16_to_cpu(qp->rx_ring[i].pkt_len);
		const u8 *buf = npfnic_rx_buf(qp, i, len);
		u16 copied = 0;

		if (!buf) {
			res->cooled++;
			return false;
		}
		while (copied < len) {
			unsigned int c;

			if (poff == PAGE_SIZE) {
				if (shinfo->nr_frags == MAX_SKB_FRAGS) {
					res->bad++;
					npfnic_rx_buf_done(qp, i, len);
					return false;
				}
				page = dev_alloc_page();
				if (!page) {
					res->nomem++;
					npfnic_rx_buf_done(qp, i, len);
					return false;
				}
				poff = 0;
			}
			c = min_t(unsigned int, len - copied, PAGE_SIZE - poff);
			memcpy(page_address(page) + poff, buf + copied, c);
			if (!poff) {
				skb_add_rx_frag(skb, shinfo->nr_frags, page, 0, c, PAGE_SIZE);
			} else {
				skb_frag_size_add(&shinfo->frags[shinfo->nr_frags - 1], c);
				skb->len += c;
				skb->data_len += c;
			}
			poff += c;
			copied += c;
		}
		npfnic_rx_buf_done(qp, i, len);
	}
	return true;
}

/*
 * Checks the chain that starts at descriptor first (n descriptors, avail
 * of them completed): the first with exactly one RXD_GSO_* bit and
 * gso_size, every other DONE | CONT, every length within its buffer. The
 * descriptors are the device's word; nothing outside the ring is read.
 */
static bool npfnic_rx_chain_ok(struct npfnic_qp *qp, u32 first, u32 n, u32 avail)
{
	const struct npfnic_rx_desc *desc = &qp->rx_ring[first & (qp->rx_size - 1)];
	u16 status = le16_to_cpu(desc->status);
	u16 gso = status & (NPFNIC_RXD_GSO_TCP4 | NPFNIC_RXD_GSO_TCP6);
	u32 k;

	if (n > NPFNIC_RX_CHAIN_MAX || n > avail || !(status & NPFNIC_RXD_DONE) ||
	    (gso != NPFNIC_RXD_GSO_TCP4 && gso != NPFNIC_RXD_GSO_TCP6) || !desc->gso_size ||
	    le16_to_cpu(desc->pkt_len) < ETH_HLEN ||
	    le16_to_cpu(desc->pkt_len) > npfnic_rx_buf_size(qp))
		return false;
	/* Zero-copy: every buffer is a frag (a correct device needs 17 at most). */
	if (!qp->rx_slots && n > MAX_SKB_FRAGS)
		return false;
	for (k = 1; k < n; k++) {
		desc = &qp->rx_ring[(first + k) & (qp->rx_size - 1)];
		status = le16_to_cpu(desc->status);
		if ((status & (NPFNIC_RXD_DONE | NPFNIC_RXD_CONT)) !=
		    (NPFNIC_RXD_DONE | NPFNIC_RXD_CONT) || !desc->pkt_len ||
		    le16_to_cpu(desc->pkt_len) > npfnic_rx_buf_size(qp))
			return false;
	}
	return true;
}

/*
 * Copies the frame at descriptor first (n buffers, checked) out of the
 * slot pages of a translating policy into a fresh skb, leaving every
 * buffer in place.
 */
static struct sk_buff *npfnic_rx_copy(struct npfnic_qp *qp, u32 first, u32 n,
				      struct npfnic_rx_res *res)
{
	u32 i = first & (qp->rx_size - 1);
	u16 len = le16_to_cpu(qp->rx_ring[i].pkt_len);
	struct sk_buff *skb;
	u8 *buf;

	buf = npfnic_rx_buf(qp, i, len);
	if (!buf) {
		res->cooled++;
		return NULL;
	}
	skb = napi_alloc_skb(&qp->napi, len);
	if (skb)
		skb_put_data(skb, buf, len);
	npfnic_rx_buf_done(qp, i, len);
	if (!skb) {
		res->nomem++;
		return NULL;
	}
	if (n > 1 && !npfnic_rx_chain_frags(qp, skb, first, n, res)) {
		dev_kfree_skb_any(skb);
		return NULL;
	}
	return skb;
}

/*
 * Receives the frame at descriptor first (n buffers, checked, at most
 * MAX_SKB_FRAGS) under rx_policy off. A frame of one buffer and at most
 * NPFNIC_RX_COPYBREAK bytes is copied and its page stays. Otherwise the
 * headers are copied into the skb's linear part and every page holding
 * the rest becomes a frag, a fresh page from the pool taking its place in
 * the ring; when the skb or the fresh pages cannot be had the frame is
 * dropped and the pages stay.
 */
static struct sk_buff *npfnic_rx_pages(struct npfnic_qp *qp, u32 first, u32 n,
				       struct npfnic_rx_res *res)
{
	struct device *dev = &qp->nic->pdev->dev;
	struct page *fresh[MAX_SKB_FRAGS];
	u32 i0 = first & (qp->rx_size - 1), k;
	struct npfnic_rx_page *rp = &qp->rx_pages[i0];
	u16 len = le16_to_cpu(qp->rx_ring[i0].pkt_len);
	unsigned int hlen;
	struct sk_buff *skb;
	const u8 *buf;

	dma_sync_single_for_cpu(dev, rp->dma, len, DMA_FROM_DEVICE);
	buf = page_address(rp->page);
	if (n == 1 && len <= NPFNIC_RX_COPYBREAK) {
		skb = napi_alloc_skb(&qp->napi, len);
		if (skb)
			skb_put_data(skb, buf, len);
		else
			res->nomem++;
		dma_sync_single_for_device(dev, rp->dma, len, DMA_FROM_DEVICE);
		return skb;
	}
	skb = napi_alloc_skb(&qp->napi, NPFNIC_RX_HDR_MAX);
	for (k = 0; skb && k < n; k++) {
		fresh[k] = page_pool_dev_alloc_pages(qp->rx_pool);
		if (!fresh[k])
			break;
	}
	if (!skb || k < n) {
		while (skb && k--)
			page_pool_recycle_direct(qp->rx_pool, fresh[k]);
		dev_kfree_skb_any(skb);
		res->nomem++;
		dma_sync_single_for_device(dev, rp->dma, len, DMA_FROM_DEVICE);
		return NULL;
	}
	/* At least the Ethernet header (len >= ETH_HLEN): eth_type_trans pulls it. */
	hlen = eth_get_headlen(qp->nic->netdev, buf, min_t(unsigned int, len, NPFNIC_RX_HDR_MAX));
	hlen = clamp_t(unsigned int, hlen, ETH_HLEN, len);
	skb_put_data(skb, buf, hlen);
	skb_mark_for_recycle(skb);
	for (k = 0; k < n; k++) {
		u32 i = (first + k) & (qp->rx_size - 1);
		unsigned int off = k ? 0 : hlen;

		rp = &qp->rx_pages[i];
		len = le16_to_cpu(qp->rx_ring[i].pkt_len);
		if (k)
			dma_sync_single_for_cpu(dev, rp->dma, len, DMA_FROM_DEVICE);
		if (len == off) {
			/* Headers only: the page stays, the fresh one goes back. */
			dma_sync_single_for_device(dev, rp->dma, len, DMA_FROM_DEVICE);
			page_pool_recycle_direct(qp->rx_pool, fresh[k]);
			continue;
		}
		skb_add_rx_frag(skb, skb_shinfo(skb)->nr_frags, rp->page, off, len - off,
				PAGE_SIZE);
		rp->page = fresh[k];
		rp->dma = page_pool_get_dma_addr(fresh[k]);
	}
	return skb;
}

/*
 * Receives the frame at descriptor first: one buffer, or (large receive)
 * a chain of n buffers, returned as one skb with gso_size and gso_type
 * set, as GRO would have merged its segments. NULL when there is nothing
 * to hand up (res says why, unless the descriptor was an error).
 */
static struct sk_buff *npfnic_rx_frame(struct npfnic_qp *qp, u32 first, u32 n,
				       struct npfnic_rx_res *res)
{
	const struct npfnic_rx_desc *desc = &qp->rx_ring[first & (qp->rx_size - 1)];
	u16 status = le16_to_cpu(desc->status);
	struct net_device *netdev = qp->nic->netdev;
	struct sk_buff *skb;
	unsigned int hlen, gso_size;

	if (qp->rx_slots)
		skb = npfnic_rx_copy(qp, first, n, res);
	else
		skb = npfnic_rx_pages(qp, first, n, res);
	if (!skb)
		return NULL;
	skb->protocol = eth_type_trans(skb, netdev);
	if ((status & NPFNIC_RXD_CSUM_OK) && (netdev->features & NETIF_F_RXCSUM))
		skb->ip_summed = CHECKSUM_UNNECESSARY;
	if (status & (NPFNIC_RXD_GSO_TCP4 | NPFNIC_RXD_GSO_TCP6)) {
		bool v6 = status & NPFNIC_RXD_GSO_TCP6;

		hlen = npfnic_lro_hlen(skb, v6);
		gso_size = le16_to_cpu(desc->gso_size);
		if (!hlen || hlen >= skb->len) {
			res->bad++;
			goto drop;
		}
		skb_shinfo(skb)->gso_size = gso_size;
		skb_shinfo(skb)->gso_type = v6 ? SKB_GSO_TCPV6 : SKB_GSO_TCPV4;
		skb_shinfo(skb)->gso_segs = DIV_ROUND_UP(skb->len - hlen, gso_size);
	}
	skb_record_rx_queue(skb, qp->idx);
	return skb;

drop:
	dev_kfree_skb_any(skb);
	return NULL;
}

/*
 * The descriptors of the chain at rx_next whose first status is status
 * (avail completed from there on), or 0 when it is refused.
 */
static u32 npfnic_rx_chain_len(struct npfnic_qp *qp, u16 status, u32 avail)
{
	u32 n = (status & NPFNIC_RXD_CHAIN_MASK) >> NPFNIC_RXD_CHAIN_SHIFT;

	n = max_t(u32, n, 1);
	if ((status & NPFNIC_RXD_CONT) || !npfnic_rx_chain_ok(qp, qp->rx_next, n, avail))
		return 0;
	return n;
}

/*
 * Counts a refused chain and returns how many descriptors to skip: its
 * first and the continuations that follow it, never beyond rx_head.
 */
static u32 npfnic_rx_bad_chain(struct npfnic_qp *qp, u32 avail, struct npfnic_rx_res *res)
{
	u32 n, lim = min_t(u32, avail, NPFNIC_RX_CHAIN_MAX);

	res->bad++;
	for (n = 1; n < lim; n++) {
		u32 i = (qp->rx_next + n) & (qp->rx_size - 1);

		if (!(le16_to_cpu(qp->rx_ring[i].status) & NPFNIC_RXD_CONT))
			break;
	}
	return n;
}

static int npfnic_clean_rx(struct npfnic_qp *qp, int budget)
{
	struct net_device *netdev = qp->nic->netdev;
	u32 head = le32_to_cpu(READ_ONCE(npfnic_pair_status(qp->nic, qp->idx)->rx_head));
	unsigned int pkts = 0, bytes = 0, xlat = 0, lro = 0;
	struct npfnic_rx_res res = {};
	u32 descs = 0;
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
		u32 avail = head - qp->rx_next, n = 1;
		struct sk_buff *skb = NULL;

		if (status & NPFNIC_RXD_ERROR) {
			xlat++;		/* no frame: its buffer could not be translated */
		} else if (status & (NPFNIC_RXD_CONT | NPFNIC_RXD_GSO_TCP4 | NPFNIC_RXD_GSO_TCP6 |
				     NPFNIC_RXD_CHAIN_MASK)) {
			/* Large receive: a chain of n descriptors, all below head. */
			n = npfnic_rx_chain_len(qp, status, avail);
			if (n)
				skb = npfnic_rx_frame(qp, qp->rx_next, n, &res);
			else
				n = npfnic_rx_bad_chain(qp, avail, &res);
		} else if (!(status & NPFNIC_RXD_DONE) || len < ETH_HLEN ||
			   len > npfnic_rx_buf_size(qp)) {
			netdev->stats.rx_errors++;
		} else {
			skb = npfnic_rx_frame(qp, qp->rx_next, 1, &res);
		}
		if (skb) {
			pkts++;
			bytes += skb->len + ETH_HLEN;
			if (skb_is_gso(skb))
				lro++;
			napi_gro_receive(&qp->napi, skb);
		}
		qp->rx_next += n;
		descs += n;
		done++;
	}
	if (done) {
		netdev->stats.rx_dropped += res.nomem;
		u64_stats_update_begin(&qp->stats.syncp);
		qp->stats.rx_packets += pkts;
		qp->stats.rx_bytes += bytes;
		qp->stats.rx_cooled_drops += res.cooled;
		qp->stats.rx_xlat_errors += xlat;
		qp->stats.rx_lro_frames += lro;
		qp->stats.rx_bad_chains += res.bad;
		u64_stats_update_end(&qp->stats.syncp);
		/* The same buffers go straight back: the ring stays warm. */
		npfnic_post_rx(qp, descs);
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
		if (qp->ntf) {
			WRITE_ONCE(qp->ntf->irq_arm, cpu_to_le32(++qp->arm_seq));
		} else {
			iowrite32(1, qp->regs + NPFNIC_PAIR_IRQ_ARM);
			u64_stats_update_begin(&qp->stats.syncp);
			qp->stats.irq_arm_writes++;
			u64_stats_update_end(&qp->stats.syncp);
		}
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
