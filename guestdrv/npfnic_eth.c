// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic Ethernet: a net_device with one NAPI context per queue pair. The
 * datapath never reads the BAR: the device reports progress (TX/RX heads,
 * link, errors) in a status block in guest memory, and the driver talks
 * to it only with posted doorbell writes. Only ifdown (the quiesce
 * handshake: each disable, then its BUSY bit polled until clear before any
 * memory is freed) and ethtool -S (late_dma) read registers.
 *
 * This file owns the net_device: its module parameters, probe and remove,
 * open and stop (with the quiesce handshake), link and queue error work,
 * the restart after a bad backup entry, ndo_get_stats64 and the fault
 * injection of the inject knob. The queue pairs' ring memory is in
 * npfnic_eth_ring.c, the datapath (TX, RX, NAPI) in npfnic_eth_txrx.c
 * and the ethtool operations in npfnic_ethtool.c.
 */

#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <linux/interrupt.h>
#include <linux/module.h>

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

static bool lro = true;
module_param(lro, bool, 0444);
MODULE_PARM_DESC(lro, "large receive on at probe when the device offers it (ethtool -K IF lro toggles it)");

static unsigned int itr_usecs = 20;
module_param(itr_usecs, uint, 0444);
MODULE_PARM_DESC(itr_usecs, "minimum microseconds between two interrupts of a queue pair");

static unsigned int tx_irq_delay_us = 500;
module_param(tx_irq_delay_us, uint, 0444);
MODULE_PARM_DESC(tx_irq_delay_us,
		 "microseconds a TX completion's interrupt may wait for an RX one (0: none)");

static bool notify = true;
module_param(notify, bool, 0444);
MODULE_PARM_DESC(notify,
		 "store the RX tail and the interrupt arm in memory the device reads, not in registers (rx_policy off)");

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
			struct npfnic_pair_status *st = npfnic_pair_status(nic, q);
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

/*
 * PAIR_CTRL of a running pair: enabled, with large receive when the
 * features say so (the device takes the bit at every write).
 */
u32 npfnic_pair_ctrl(struct npfnic *nic, netdev_features_t features)
{
	u32 ctrl = NPFNIC_PAIR_CTRL_ENABLE;

	if ((features & NETIF_F_LRO) && (nic->features & NPFNIC_FEAT_RX_LRO))
		ctrl |= NPFNIC_PAIR_CTRL_RX_LRO;
	return ctrl;
}

static void npfnic_start_qp(struct npfnic_qp *qp)
{
	iowrite32(lower_32_bits(qp->tx_ring_dma), qp->regs + NPFNIC_PAIR_TX_BASE_LO);
	iowrite32(upper_32_bits(qp->tx_ring_dma), qp->regs + NPFNIC_PAIR_TX_BASE_HI);
	iowrite32(qp->tx_size, qp->regs + NPFNIC_PAIR_TX_SIZE);
	iowrite32(lower_32_bits(qp->rx_ring_dma), qp->regs + NPFNIC_PAIR_RX_BASE_LO);
	iowrite32(upper_32_bits(qp->rx_ring_dma), qp->regs + NPFNIC_PAIR_RX_BASE_HI);
	iowrite32(qp->rx_size, qp->regs + NPFNIC_PAIR_RX_SIZE);
	iowrite32(qp->nic->itr_usecs, qp->regs + NPFNIC_PAIR_ITR);
	qp->ntf = NULL;
	qp->arm_seq = 0;
	if (qp->nic->use_notify && !npfnic_translating(qp->nic)) {
		dma_addr_t a = qp->nic->notify_dma + qp->idx * sizeof(*qp->ntf);

		qp->ntf = &qp->nic->notify[qp->idx];
		memset(qp->ntf, 0, sizeof(*qp->ntf));
		iowrite32(lower_32_bits(a), qp->regs + NPFNIC_PAIR_NOTIFY_LO);
		iowrite32(upper_32_bits(a), qp->regs + NPFNIC_PAIR_NOTIFY_HI);
	} else if (qp->nic->features & NPFNIC_FEAT_NOTIFY) {
		iowrite32(0, qp->regs + NPFNIC_PAIR_NOTIFY_LO);
		iowrite32(0, qp->regs + NPFNIC_PAIR_NOTIFY_HI);
	}
	/* A response's TX completion is reclaimed by the next request's poll. */
	if (qp->nic->features & NPFNIC_FEAT_TX_IRQ_DELAY)
		iowrite32(qp->nic->tx_irq_delay_us, qp->regs + NPFNIC_PAIR_TX_IRQ_DELAY);
	if (npfnic_translating(qp->nic))
		npfnic_npf_start_qp(qp);
	iowrite32(npfnic_pair_ctrl(qp->nic, qp->nic->netdev->features),
		  qp->regs + NPFNIC_PAIR_CTRL);
	npfnic_post_rx(qp, qp->rx_size);
	iowrite32(1, qp->regs + NPFNIC_PAIR_IRQ_ARM);
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
		iowrite32(0, nic->qps[q].regs + NPFNIC_PAIR_CTRL);
	for (q = 0; q < nic->nqps; q++) {
		struct npfnic_qp *qp = &nic->qps[q];

		qp->lost = !npfnic_wait_quiesced(nic, qp->regs + NPFNIC_PAIR_CTRL,
						 NPFNIC_PAIR_CTRL_BUSY, "queue pair");
	}
	/*
	 * CTRL stays BUSY while the status block is programmed: it lives
	 * until remove, whose CTRL_RESET is the handshake that frees it.
	 */
	iowrite32(0, nic->bar0 + NPFNIC_REG_CTRL);
	if (npfnic_translating(nic))
		npfnic_npf_stop_hw(nic);
}

int npfnic_open(struct net_device *netdev)
{
	struct npfnic *nic = npfnic_from_netdev(netdev);
	int q, err;

	nic->nqps = clamp_t(int, queues, 1, min(NPFNIC_PAIR_MAX, nic->nvecs - 1));
	for (q = 0; q < nic->nqps; q++) {
		err = npfnic_alloc_qp(&nic->qps[q], nic->tx_ring_size, nic->rx_ring_size);
		if (err)
			goto err_free;
		memset(npfnic_pair_status(nic, q), 0, sizeof(struct npfnic_pair_status));
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

int npfnic_stop(struct net_device *netdev)
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

	for (q = 0; q < NPFNIC_PAIR_MAX; q++) {
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
		struct npfnic_pair_status *st = npfnic_pair_status(nic, q);

		s->rx_missed_errors += le32_to_cpu(READ_ONCE(st->rx_drops_no_buf));
		s->rx_length_errors += le32_to_cpu(READ_ONCE(st->rx_drops_too_big));
		s->tx_errors += le32_to_cpu(READ_ONCE(st->tx_drops_bad_len));
	}
	s->rx_dropped = netdev->stats.rx_dropped + s->rx_missed_errors + cooled;
	s->rx_errors = netdev->stats.rx_errors + s->rx_length_errors;
	s->tx_dropped = netdev->stats.tx_dropped;
}

/*
 * ethtool -K IF lro on|off (and dev_disable_lro when the guest forwards):
 * a running pair takes the new PAIR_CTRL at once. Chains the device
 * started before are still received whole.
 */
static int npfnic_set_features(struct net_device *netdev, netdev_features_t features)
{
	struct npfnic *nic = npfnic_from_netdev(netdev);
	int q;

	if (!((netdev->features ^ features) & NETIF_F_LRO) || !netif_running(netdev))
		return 0;
	for (q = 0; q < nic->nqps; q++)
		iowrite32(npfnic_pair_ctrl(nic, features), nic->qps[q].regs + NPFNIC_PAIR_CTRL);
	return 0;
}

static const struct net_device_ops npfnic_netdev_ops = {
	.ndo_set_features = npfnic_set_features,
	.ndo_open = npfnic_open,
	.ndo_stop = npfnic_stop,
	.ndo_start_xmit = npfnic_xmit,
	.ndo_get_stats64 = npfnic_get_stats64,
	.ndo_validate_addr = eth_validate_addr,
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
	netdev = alloc_etherdev_mqs(sizeof(struct npfnic *), NPFNIC_PAIR_MAX, NPFNIC_PAIR_MAX);
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
	nic->features = ioread32(nic->bar0 + NPFNIC_REG_FEATURES);
	nic->use_notify = notify && (nic->features & NPFNIC_FEAT_NOTIFY);
	if (nic->use_notify) {
		/* Coherent memory is page aligned, so each area is aligned. */
		nic->notify = dma_alloc_coherent(dev, NPFNIC_PAIR_MAX * sizeof(*nic->notify),
						 &nic->notify_dma, GFP_KERNEL);
		if (!nic->notify) {
			dma_free_coherent(dev, NPFNIC_STATUS_BLOCK_SIZE, nic->sb, nic->sb_dma);
			free_netdev(netdev);
			return -ENOMEM;
		}
	}
	nic->rx_ring_size = rx_ring_size;
	nic->tx_ring_size = tx_ring_size;
	nic->itr_usecs = itr_usecs;
	nic->tx_irq_delay_us = tx_irq_delay_us;
	INIT_WORK(&nic->misc_work, npfnic_misc_work);
	INIT_WORK(&nic->reset_work, npfnic_reset_work);
	for (q = 0; q < NPFNIC_PAIR_MAX; q++) {
		nic->qps[q].regs = nic->bar0 + NPFNIC_PAIR_BASE(q);
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
	if (nic->features & NPFNIC_FEAT_RX_LRO)
		netdev->hw_features |= NETIF_F_LRO;
	netdev->features = netdev->hw_features;
	if (!lro)
		netdev->features &= ~NETIF_F_LRO;
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
	for (q = 0; q < NPFNIC_PAIR_MAX; q++)
		netif_napi_del(&nic->qps[q].napi);
	if (quiesced) {
		dma_free_coherent(&nic->pdev->dev, NPFNIC_STATUS_BLOCK_SIZE, nic->sb,
				  nic->sb_dma);
		if (nic->notify)
			dma_free_coherent(&nic->pdev->dev, NPFNIC_PAIR_MAX * sizeof(*nic->notify),
					  nic->notify, nic->notify_dma);
	}
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
		iowrite32(qp->rx_tail + 2 * qp->rx_size, qp->regs + NPFNIC_PAIR_RX_TAIL);
	} else if (!strcmp(what, "bad_ring")) {
		/* A ring far beyond guest RAM. */
		iowrite32(0, qp->regs + NPFNIC_PAIR_CTRL);
		iowrite32(0x4000, qp->regs + NPFNIC_PAIR_TX_BASE_HI);
		iowrite32(NPFNIC_PAIR_CTRL_ENABLE, qp->regs + NPFNIC_PAIR_CTRL);
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
			iowrite32(qp->tx_tail, qp->regs + NPFNIC_PAIR_TX_TAIL);
		}
		__netif_tx_unlock_bh(txq);
	} else {
		err = npfnic_npf_inject(nic, what, q);
	}
out:
	rtnl_unlock();
	return err;
}
