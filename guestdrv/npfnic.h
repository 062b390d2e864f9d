/* SPDX-License-Identifier: GPL-2.0 */
/*
 * npfnic driver internals shared by the PCI core (npfnic_main.c) and the
 * Ethernet datapath (npfnic_eth.c).
 */
#ifndef NPFNIC_H
#define NPFNIC_H

#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/u64_stats_sync.h>
#include <linux/workqueue.h>

#include "npfnic_hw.h"

#define DRV_NAME		"npfnic"
#define NPFNIC_RX_BUF_SIZE	2048	/* one frame per buffer: >= NPFNIC_MAX_FRAME */

struct npfnic;

struct npfnic_qp_stats {
	u64 rx_packets;
	u64 rx_bytes;
	u64 tx_packets;
	u64 tx_bytes;
	u64 tx_ring_full;
	u64 tx_linearized;
	u64 irqs;
	struct u64_stats_sync syncp;
};

struct npfnic_tx_slot {
	struct sk_buff *skb;	/* set on the frame's last descriptor */
	dma_addr_t dma;
	u32 len;
	bool page;		/* mapped with skb_frag_dma_map */
};

/* One queue pair: a TX ring, an RX ring and the NAPI context serving both. */
struct npfnic_qp {
	struct npfnic *nic;
	int idx;
	void __iomem *regs;	/* BAR0 + NPFNIC_QP_BASE(idx) */
	struct napi_struct napi;

	struct npfnic_tx_desc *tx_ring;
	dma_addr_t tx_ring_dma;
	struct npfnic_tx_slot *tx_slots;
	u32 tx_size;
	u32 tx_tail;		/* descriptors posted (free-running) */
	u32 tx_clean;		/* descriptors reclaimed (free-running) */

	struct npfnic_rx_desc *rx_ring;
	dma_addr_t rx_ring_dma;
	u8 *rx_bufs;		/* persistent buffers: slot i at i * NPFNIC_RX_BUF_SIZE */
	dma_addr_t rx_bufs_dma;
	u32 rx_size;
	u32 rx_tail;		/* buffers posted (free-running) */
	u32 rx_next;		/* next descriptor to receive (free-running) */

	struct npfnic_qp_stats stats;
};

struct npfnic {
	struct pci_dev *pdev;
	struct net_device *netdev;
	void __iomem *bar0;
	u32 features;			/* NPFNIC_FEAT_*, from the device */
	int nvecs;
	atomic_t irq_count[NPFNIC_MSIX_VECTORS];
	struct npfnic_qp *misc_ctx;	/* context of the misc vector */

	struct npfnic_status_block *sb;	/* written by the device */
	dma_addr_t sb_dma;

	int nqps;			/* queue pairs in use while up */
	struct npfnic_qp qps[NPFNIC_QP_MAX];
	u32 rx_ring_size;
	u32 tx_ring_size;
	u32 itr_usecs;
	struct work_struct misc_work;	/* link changes and queue errors */
	u32 qp_errors_seen[NPFNIC_QP_MAX];

	struct mutex diag_lock;		/* one diagnostic DMA at a time */
	char diag_result[64];
};

/* The netdev's private area holds a pointer to the PCI-level struct npfnic. */
static inline struct npfnic *npfnic_from_netdev(struct net_device *netdev)
{
	return *(struct npfnic **)netdev_priv(netdev);
}

static inline struct npfnic_qp_status *npfnic_qp_status(struct npfnic *nic, int q)
{
	return &nic->sb->qp[q];
}

int npfnic_eth_probe(struct npfnic *nic);
void npfnic_eth_remove(struct npfnic *nic);
irqreturn_t npfnic_misc_irq(int irq, void *data);
irqreturn_t npfnic_qp_irq(int irq, void *data);
int npfnic_inject(struct npfnic *nic, const char *what, unsigned int q);

#endif /* NPFNIC_H */
