// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic Ethernet: the memory of a queue pair. A pair's TX and RX
 * descriptor rings, its TX slots and its RX buffers (persistent and
 * coherent under rx_policy off, lazily backed slot pages otherwise) are
 * allocated at open and freed at stop, or leaked for good when the device
 * did not let the pair go (still BUSY after its disable).
 */

#include <linux/dma-mapping.h>
#include <linux/slab.h>

#include "npfnic.h"

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

void npfnic_free_qp(struct npfnic_qp *qp)
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

int npfnic_alloc_qp(struct npfnic_qp *qp, u32 tx_size, u32 rx_size)
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
