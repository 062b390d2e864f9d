// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic RDMA: address translation for the memory regions. The device
 * reaches an MR's pages only through ATS (interface 2.2), in the I/O
 * address space of the MR's PASID: one per user context, whose page tables
 * npfnic_ib_mr.c keeps. This file runs the translation engine for them:
 * the PASID table, the invalidation queue and the PCIe ATS and PASID
 * capabilities, from the RDMA device's registration to its removal.
 *
 * The Ethernet side runs the same engine for PASID 0 while its interface
 * is up under a translating rx_policy (npfnic_npf.c), and resets it at
 * every stop. Until the two share it, RDMA translates only under rx_policy
 * off, where the Ethernet side never touches it; under another policy the
 * RDMA device registers without MRs (reg_user_mr fails with -EOPNOTSUPP).
 * With ATS on, the device translates the Ethernet buffers too, in PASID 0:
 * this file maps it to all of RAM at identity (npfnic_ib_ats_identity).
 * The page request interface runs with it when the device has
 * FEAT_RDMA_ODP (npfnic_ib_odp.c): the pages of a pinned MR are always
 * present, and those of an on-demand paging MR come by page request.
 *
 * The engine runs only while user contexts exist (npfnic_ib_ats_get and
 * _put): with ATS on, the device translates the Ethernet buffers too.
 *
 * Invalidation follows npfnic_iopt.c: the descriptors, one WAIT with an
 * interrupt (INVQ vector, which wakes npf.inv_wait), then sleep until the
 * completion word shows it. Once it does, the device uses no dropped
 * translation, and the pages may be unpinned. Only the RDMA engine uses
 * the contexts' translations, so an invalidation that fails stops it
 * (npfnic_ib_hw_stop): once it is idle it reaches nothing, and the
 * invalidation counts as done. Else the caller leaks what the device
 * might still reach (an on-demand paging MR's pages cannot be kept: they
 * go with the process's mappings whatever the driver does).
 *
 * Locking: ats.lock serialises invalidations, the PASID table and the
 * engine's start and stop.
 */

#include <linux/dma-mapping.h>
#include <linux/ioport.h>
#include <linux/mm.h>
#include <linux/pci.h>
#include <linux/pci-ats.h>

#include "npfnic_ib.h"

#define NPFNIC_IB_INVQ_SIZE	64
#define NPFNIC_IB_PASID_TBL	128	/* entries: PASIDs 0 .. NPFNIC_IB_PASID_BASE + MAX_CTX */
#define NPFNIC_IB_INV_TIMEOUT	(5 * HZ)
#define NPFNIC_IB_ATS_CTL_DONE	64	/* the completion word, after the status block */

static_assert(NPFNIC_IB_PASID_BASE + NPFNIC_IB_MAX_CTX <= NPFNIC_IB_PASID_TBL);
static_assert(NPFNIC_IB_PASID_TBL * sizeof(struct npfnic_pasid_entry) <= PAGE_SIZE);

static void npfnic_ib_ats_free(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_ats *ats = &dev->ats;
	struct device *d = &dev->nic->pdev->dev;

	if (ats->ctl)
		dma_free_coherent(d, PAGE_SIZE, ats->ctl, ats->ctl_dma);
	if (ats->pasid_tbl)
		dma_free_coherent(d, PAGE_SIZE, ats->pasid_tbl, ats->pasid_dma);
	if (ats->invq)
		dma_free_coherent(d, NPFNIC_IB_INVQ_SIZE * sizeof(*ats->invq), ats->invq,
				  ats->invq_dma);
	npfnic_pt_free(dev->nic, ats->root0);
	npfnic_ib_pri_free(dev);
	ats->ctl = NULL;
	ats->pasid_tbl = NULL;
	ats->invq = NULL;
	ats->root0 = NULL;
}

/*
 * PASID 0 while RDMA runs translation: the device translates the Ethernet
 * queues' buffers whenever ATS is on, and under rx_policy off they are
 * IOVAs (DMA addresses, which are physical on q35 without an IOMMU, as
 * pin's identity map assumes too). So every RAM page is entered at its
 * identity, writable: what the Ethernet side could reach without
 * translation, and no more.
 */
static int npfnic_ib_ats_identity(struct npfnic_ib_dev *dev)
{
	unsigned long max_pfn = PHYS_PFN(__pa(high_memory - 1)) + 1;
	const unsigned long span = BIT(NPFNIC_XLAT_LEVEL_BITS);
	struct npfnic *nic = dev->nic;
	unsigned long pfn, k;

	dev->ats.root0 = npfnic_pt_alloc(nic, true);
	if (!dev->ats.root0)
		return -ENOMEM;
	for (pfn = 0; pfn < max_pfn; pfn += span) {
		u64 base = PFN_PHYS(pfn);
		int r = region_intersects(base, (u64)span << PAGE_SHIFT, IORESOURCE_SYSTEM_RAM,
					  IORES_DESC_NONE);

		if (r == REGION_DISJOINT)
			continue;
		for (k = 0; k < span; k++) {
			u64 addr = base + ((u64)k << PAGE_SHIFT);
			__le64 *pte;

			if (r != REGION_INTERSECTS && !npfnic_is_ram(addr, PAGE_SIZE))
				continue;
			pte = npfnic_pt_walk(nic, dev->ats.root0, addr, true);
			if (!pte)
				return -ENOMEM;
			*pte = cpu_to_le64((addr & NPFNIC_PTE_ADDR_MASK) | NPFNIC_PTE_PRESENT |
					   NPFNIC_PTE_WRITE);
		}
		cond_resched();
	}
	dev->ats.pasid_tbl[0].root = cpu_to_le64((dev->ats.root0->dma & NPFNIC_PTE_ADDR_MASK) |
						 NPFNIC_PASID_ENTRY_VALID);
	return 0;
}

/* Decides whether RDMA can translate; nothing runs before the first context. */
void npfnic_ib_ats_init(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_ats *ats = &dev->ats;
	struct npfnic *nic = dev->nic;

	mutex_init(&ats->lock);
	if (!dev->hw.enabled)
		return;
	ats->pasid_pos = pci_find_ext_capability(nic->pdev, PCI_EXT_CAP_ID_PASID);
	if (!nic->ats_pos || !ats->pasid_pos || npfnic_translating(nic)) {
		dev_info(&nic->pdev->dev, "RDMA without memory regions: %s\n",
			 npfnic_translating(nic) ? "translation belongs to rx_policy" :
						   "no ATS or PASID capability");
		return;
	}
	ats->possible = true;
}

/* Allocates what translation needs, the first time (ats.lock held). */
static int npfnic_ib_ats_alloc(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_ats *ats = &dev->ats;
	struct device *d = &dev->nic->pdev->dev;

	if (ats->ctl)
		return 0;
	ats->ctl = dma_alloc_coherent(d, PAGE_SIZE, &ats->ctl_dma, GFP_KERNEL);
	ats->pasid_tbl = dma_alloc_coherent(d, PAGE_SIZE, &ats->pasid_dma, GFP_KERNEL);
	ats->invq = dma_alloc_coherent(d, NPFNIC_IB_INVQ_SIZE * sizeof(*ats->invq), &ats->invq_dma,
				       GFP_KERNEL);
	if (!ats->ctl || !ats->pasid_tbl || !ats->invq || npfnic_ib_pri_alloc(dev) ||
	    npfnic_ib_ats_identity(dev)) {
		npfnic_ib_ats_free(dev);
		return -ENOMEM;
	}
	ats->st = ats->ctl;
	ats->done = ats->ctl + NPFNIC_IB_ATS_CTL_DONE;
	return 0;
}

/* Programs and enables the engine (ats.lock held). */
static int npfnic_ib_ats_start(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_ats *ats = &dev->ats;
	struct npfnic *nic = dev->nic;
	struct pci_dev *pdev = nic->pdev;
	int err;

	err = npfnic_ib_ats_alloc(dev);
	if (err)
		return err;
	memset(ats->ctl, 0, PAGE_SIZE);
	ats->invq_tail = 0;
	ats->seq = 0;
	iowrite32(NPFNIC_ATS_CTRL_RESET, nic->bar0 + NPFNIC_REG_ATS_CTRL);
	npfnic_write64(nic, NPFNIC_REG_ATS_STATUS_LO, ats->ctl_dma);
	npfnic_write64(nic, NPFNIC_REG_PASID_TABLE_LO, ats->pasid_dma);
	iowrite32(NPFNIC_IB_PASID_TBL, nic->bar0 + NPFNIC_REG_PASID_TABLE_SIZE);
	npfnic_write64(nic, NPFNIC_REG_INVQ_BASE_LO, ats->invq_dma);
	iowrite32(NPFNIC_IB_INVQ_SIZE, nic->bar0 + NPFNIC_REG_INVQ_SIZE);
	iowrite32(NPFNIC_INVQ_VECTOR, nic->bar0 + NPFNIC_REG_INVQ_VECTOR);
	iowrite32(nic->atc_entries, nic->bar0 + NPFNIC_REG_ATC_CAPACITY);
	iowrite32(NPFNIC_ATS_CTRL_ENABLE, nic->bar0 + NPFNIC_REG_ATS_CTRL);
	pci_write_config_word(pdev, ats->pasid_pos + PCI_PASID_CTRL, PCI_PASID_CTRL_ENABLE);
	pci_write_config_word(pdev, nic->ats_pos + PCI_ATS_CTRL, PCI_ATS_CTRL_ENABLE);
	WRITE_ONCE(ats->enabled, true);
	npfnic_ib_pri_start(dev);
	return 0;
}

/* Disables the engine and waits until it touches nothing (ats.lock held). */
static void npfnic_ib_ats_stop(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_ats *ats = &dev->ats;
	struct npfnic *nic = dev->nic;
	struct pci_dev *pdev = nic->pdev;

	npfnic_ib_pri_stop(dev);
	WRITE_ONCE(ats->enabled, false);
	pci_write_config_word(pdev, nic->ats_pos + PCI_ATS_CTRL, 0);
	pci_write_config_word(pdev, ats->pasid_pos + PCI_PASID_CTRL, 0);
	iowrite32(NPFNIC_ATS_CTRL_RESET, nic->bar0 + NPFNIC_REG_ATS_CTRL);
	/* Still busy: it may read the tables; they are never freed, nor reused. */
	if (!npfnic_wait_quiesced(nic, nic->bar0 + NPFNIC_REG_ATS_CTRL, NPFNIC_ATS_CTRL_BUSY,
				  "RDMA translation"))
		ats->lost = true;
}

/*
 * A user context takes translation for its PASID. The engine runs only
 * while contexts exist, so the Ethernet side (whose buffers it would
 * translate through PASID 0's identity map) pays for it only then.
 */
int npfnic_ib_ats_get(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_ats *ats = &dev->ats;
	int err = 0;

	mutex_lock(&ats->lock);
	if (!ats->possible)
		goto out;
	if (ats->lost) {
		err = -EIO;
		goto out;
	}
	if (!ats->users) {
		err = npfnic_ib_ats_start(dev);
		if (err)
			goto out;
	}
	ats->users++;
out:
	mutex_unlock(&ats->lock);
	return err;
}

void npfnic_ib_ats_put(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_ats *ats = &dev->ats;

	mutex_lock(&ats->lock);
	if (ats->possible && !WARN_ON_ONCE(!ats->users) && !--ats->users)
		npfnic_ib_ats_stop(dev);
	mutex_unlock(&ats->lock);
}

/* At removal, with every context gone: the memory, unless the engine kept it. */
void npfnic_ib_ats_fini(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_ats *ats = &dev->ats;

	mutex_lock(&ats->lock);
	if (ats->enabled)
		npfnic_ib_ats_stop(dev);
	if (!ats->lost)
		npfnic_ib_ats_free(dev);
	mutex_unlock(&ats->lock);
}

static bool npfnic_ib_inv_done(struct npfnic_ib_ats *ats, u32 seq)
{
	return (s32)(le32_to_cpu(READ_ONCE(*ats->done)) - seq) >= 0 ||
	       READ_ONCE(ats->st->error);
}

/*
 * Drops the translations of pasid: pages from va on (RANGE), or all of
 * them (pages 0: PASID), and waits until the device uses none of them.
 * 0 without translation (nothing was ever reachable), or when the RDMA
 * engine had to be stopped and is idle. Called from the mmu notifier:
 * allocates nothing.
 */
int npfnic_ib_invalidate(struct npfnic_ib_dev *dev, u32 pasid, u64 va, u64 pages)
{
	struct npfnic_ib_ats *ats = &dev->ats;
	struct npfnic *nic = dev->nic;
	struct npfnic_inv_desc *d;
	u32 head, seq;
	int err = 0;

	mutex_lock(&ats->lock);
	if (!ats->enabled)
		goto out;
	if (ats->lost) {
		err = -EIO;
		goto out;
	}
	/* Every earlier invalidation was waited for: the queue is empty. */
	head = le32_to_cpu(READ_ONCE(ats->st->invq_head));
	if (ats->invq_tail - head > NPFNIC_IB_INVQ_SIZE - 2) {
		err = -EBUSY;
		goto out;
	}
	seq = ++ats->seq;
	d = &ats->invq[ats->invq_tail++ & (NPFNIC_IB_INVQ_SIZE - 1)];
	memset(d, 0, sizeof(*d));
	d->op = cpu_to_le16(pages ? NPFNIC_INV_OP_RANGE : NPFNIC_INV_OP_PASID);
	d->pasid = cpu_to_le32(pasid);
	d->addr = cpu_to_le64(va & PAGE_MASK);
	d->pages = cpu_to_le64(pages);
	d = &ats->invq[ats->invq_tail++ & (NPFNIC_IB_INVQ_SIZE - 1)];
	memset(d, 0, sizeof(*d));
	d->op = cpu_to_le16(NPFNIC_INV_OP_WAIT);
	d->flags = cpu_to_le16(NPFNIC_INV_FLAG_IRQ);
	d->addr = cpu_to_le64(ats->ctl_dma + NPFNIC_IB_ATS_CTL_DONE);
	d->data = cpu_to_le32(seq);
	dma_wmb();
	iowrite32(ats->invq_tail, nic->bar0 + NPFNIC_REG_INVQ_TAIL);
	if (!wait_event_timeout(nic->npf.inv_wait, npfnic_ib_inv_done(ats, seq),
				NPFNIC_IB_INV_TIMEOUT))
		err = -ETIMEDOUT;
	if (READ_ONCE(ats->st->error))
		err = -EIO;
	if (err) {
		ats->lost = true;
		dev_err(&nic->pdev->dev, "RDMA invalidation of PASID %u failed (%d, ATS error %u)\n",
			pasid, err, le32_to_cpu(READ_ONCE(ats->st->error)));
	}
out:
	mutex_unlock(&ats->lock);
	if (err && npfnic_ib_hw_stop(dev))
		err = 0;
	return err;
}

/* Points pasid at its tables (root: its level-4 table), or clears it (NULL). */
int npfnic_ib_set_pasid(struct npfnic_ib_dev *dev, u32 pasid, struct npfnic_pt *root)
{
	struct npfnic_ib_ats *ats = &dev->ats;

	mutex_lock(&ats->lock);
	if (ats->enabled) {
		dma_wmb();
		WRITE_ONCE(ats->pasid_tbl[pasid].root,
			   root ? cpu_to_le64((root->dma & NPFNIC_PTE_ADDR_MASK) |
					      NPFNIC_PASID_ENTRY_VALID) : 0);
	}
	mutex_unlock(&ats->lock);
	/* A cleared entry: the device may have cached what it pointed at. */
	return root ? 0 : npfnic_ib_invalidate(dev, pasid, 0, 0);
}

bool npfnic_ib_ats_enabled(struct npfnic_ib_dev *dev)
{
	return READ_ONCE(dev->ats.enabled);
}

/* Whether MRs can be registered: the engine reaches them only through translation. */
bool npfnic_ib_ats_possible(struct npfnic_ib_dev *dev)
{
	return dev->ats.possible;
}

/* Whether the RDMA device runs the translation engine (for the ATC counters). */
bool npfnic_ib_translating(struct npfnic *nic)
{
	struct npfnic_ib_dev *dev = READ_ONCE(nic->ib);

	return dev && npfnic_ib_ats_enabled(dev);
}
