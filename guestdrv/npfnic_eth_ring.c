// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic Ethernet: the memory of a queue pair. A pair's TX and RX
 * descriptor rings, its TX slots and its RX buffers (under rx_policy off
 * a page per descriptor from the pair's page pool, lazily backed slot
 * pages otherwise) are allocated at open and freed at stop, or leaked for
 * good when the device did not let the pair go (still BUSY after its
 * disable).
 */

#include <linux/dma-mapping.h>
#include <linux/slab.h>
#include <net/page_pool.h>

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
	qp->rx_pages = NULL;
	qp->rx_pool = NULL;
	qp->rx_slots = NULL;
	qp->tx_slots = NULL;
	qp->lost = false;
}

/*
 * Gives every descriptor's page back to the pool and destroys it; pages
 * still up the stack return to it later, and it goes once they did.
 */
static void npfnic_free_rx_pages(struct npfnic_qp *qp)
{
	u32 i;

	if (qp->rx_pages) {
		for (i = 0; i < qp->rx_size; i++)
			if (qp->rx_pages[i].page)
				page_pool_put_full_page(qp->rx_pool, qp->rx_pages[i].page, false);
		kvfree(qp->rx_pages);
		qp->rx_pages = NULL;
	}
	if (qp->rx_pool)
		page_pool_destroy(qp->rx_pool);
	qp->rx_pool = NULL;
}

/* A page pool for the pair and a page for every RX descriptor (rx_policy off). */
static int npfnic_alloc_rx_pages(struct npfnic_qp *qp)
{
	struct device *dev = &qp->nic->pdev->dev;
	struct page_pool_params pp = {
		.flags = PP_FLAG_DMA_MAP | PP_FLAG_DMA_SYNC_DEV,
		.order = 0,
		.pool_size = qp->rx_size,
		.nid = dev_to_node(dev),
		.dev = dev,
		.dma_dir = DMA_FROM_DEVICE,
		.max_len = NPFNIC_RX_PAGE_SIZE,
		.offset = 0,
	};
	struct page_pool *pool;
	u32 i;

	pool = page_pool_create(&pp);
	if (IS_ERR(pool))
		return PTR_ERR(pool);
	qp->rx_pool = pool;
	qp->rx_pages = kvcalloc(qp->rx_size, sizeof(*qp->rx_pages), GFP_KERNEL);
	if (!qp->rx_pages)
		return -ENOMEM;
	for (i = 0; i < qp->rx_size; i++) {
		struct page *page = page_pool_dev_alloc_pages(pool);

		if (!page)
			return -ENOMEM;
		qp->rx_pages[i].page = page;
		qp->rx_pages[i].dma = page_pool_get_dma_addr(page);
	}
	return 0;
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
	npfnic_free_rx_pages(qp);
	npfnic_free_rx_slots(qp);
	kvfree(qp->tx_slots);
	qp->tx_ring = NULL;
	qp->rx_ring = NULL;
	qp->tx_slots = NULL;
}

int npfnic_alloc_qp(struct npfnic_qp *qp, u32 tx_size, u32 rx_size)
{
	struct device *dev = &qp->nic->pdev->dev;
	int err = 0;

	qp->tx_size = tx_size;
	qp->rx_size = rx_size;
	qp->tx_ring = dma_alloc_coherent(dev, tx_size * sizeof(*qp->tx_ring), &qp->tx_ring_dma,
					 GFP_KERNEL);
	qp->rx_ring = dma_alloc_coherent(dev, rx_size * sizeof(*qp->rx_ring), &qp->rx_ring_dma,
					 GFP_KERNEL);
	if (npfnic_translating(qp->nic))
		qp->rx_slots = kvcalloc(rx_size, sizeof(*qp->rx_slots), GFP_KERNEL);
	else
		err = npfnic_alloc_rx_pages(qp);
	qp->tx_slots = kvcalloc(tx_size, sizeof(*qp->tx_slots), GFP_KERNEL);
	if (err || !qp->tx_ring || !qp->rx_ring || !(qp->rx_pages || qp->rx_slots) ||
	    !qp->tx_slots) {
		npfnic_free_qp(qp);
		return err ?: -ENOMEM;
	}
	qp->tx_tail = 0;
	qp->tx_clean = 0;
	qp->rx_tail = 0;
	qp->rx_next = 0;
	return 0;
}
