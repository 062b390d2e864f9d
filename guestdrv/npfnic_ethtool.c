// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic ethtool operations: driver info, link, the ethtool -S counters
 * (per queue pair, from the device's status block, and those of the
 * network page fault machinery, npfnic_npf.c) and the ring sizes of
 * ethtool -g and -G, which restart an interface that is up.
 */

#include <linux/ethtool.h>
#include <linux/netdevice.h>

#include "npfnic.h"

static const char npfnic_qp_stat_names[][ETH_GSTRING_LEN] = {
	"rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "tx_ring_full",
	"tx_linearized", "interrupts",
};

static const char npfnic_dev_stat_names[][ETH_GSTRING_LEN] = {
	"rx_drops_no_buf", "rx_drops_too_big", "tx_drops_bad_len", "queue_errors",
	"tx_tso_frames", "rx_wire_stalls", "late_dma", "quiesce_timeouts",
	"rx_lro_frames", "rx_bad_chains", "rx_doorbells", "irq_arm_writes",
};

#define NPFNIC_PAIR_STATS		ARRAY_SIZE(npfnic_qp_stat_names)
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
	return NPFNIC_PAIR_MAX * NPFNIC_PAIR_STATS + NPFNIC_DEV_STATS + NPFNIC_NPF_STATS;
}

static void npfnic_get_strings(struct net_device *netdev, u32 sset, u8 *data)
{
	int q, i;

	if (sset != ETH_SS_STATS)
		return;
	for (q = 0; q < NPFNIC_PAIR_MAX; q++)
		for (i = 0; i < NPFNIC_PAIR_STATS; i++)
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
	u64 lro = 0, bad_chains = 0, doorbells = 0, arms = 0;
	unsigned int start;
	int q;

	for (q = 0; q < NPFNIC_PAIR_MAX; q++) {
		struct npfnic_qp_stats *st = &nic->qps[q].stats;
		u64 l, b, rd, ia;

		do {
			start = u64_stats_fetch_begin(&st->syncp);
			l = st->rx_lro_frames;
			b = st->rx_bad_chains;
			rd = st->rx_doorbells;
			ia = st->irq_arm_writes;
			data[0] = st->rx_packets;
			data[1] = st->rx_bytes;
			data[2] = st->tx_packets;
			data[3] = st->tx_bytes;
			data[4] = st->tx_ring_full;
			data[5] = st->tx_linearized;
			data[6] = st->irqs;
		} while (u64_stats_fetch_retry(&st->syncp, start));
		lro += l;
		bad_chains += b;
		doorbells += rd;
		arms += ia;
		data += NPFNIC_PAIR_STATS;
	}
	for (q = 0; q < nic->nqps; q++) {
		struct npfnic_pair_status *st = npfnic_pair_status(nic, q);

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
	data[8] = lro;
	data[9] = bad_chains;
	data[10] = doorbells;
	data[11] = arms;
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

const struct ethtool_ops npfnic_ethtool_ops = {
	.get_drvinfo = npfnic_get_drvinfo,
	.get_link = ethtool_op_get_link,
	.get_sset_count = npfnic_get_sset_count,
	.get_strings = npfnic_get_strings,
	.get_ethtool_stats = npfnic_get_ethtool_stats,
	.get_ringparam = npfnic_get_ringparam,
	.set_ringparam = npfnic_set_ringparam,
};
