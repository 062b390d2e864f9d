// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic RDMA: address translation for the memory regions. The device
 * reaches an MR's pages only through ATS (interface 2.2), in the I/O
 * address space of the MR's PASID: one per user context, whose page tables
 * npfnic_ib_mr.c keeps. The translation engine itself (the PASID table,
 * the invalidation queue, the page request and response queues, the PCIe
 * ATS, PASID and PRI enables) belongs to the function (npfnic_xlat.c),
 * which the Ethernet side uses too, for PASID 0, under every rx_policy:
 * this file is the RDMA side's use of it.
 *
 * Each user context holds the engine (npfnic_ib_ats_get and _put), so it
 * runs while contexts exist, or while the Ethernet side translates. The
 * first context also starts the work that injects synthetic receive
 * faults when the device has FEAT_RDMA_ODP (npfnic_ib_odp.c), and the
 * last one stops it.
 *
 * Only the RDMA engine uses the contexts' translations, so an
 * invalidation of a context's PASID that fails stops that engine
 * (npfnic_ib_hw_stop): once it is idle it reaches nothing, and the
 * invalidation counts as done. Else the caller leaks what the device
 * might still reach (an on-demand paging MR's pages cannot be kept: they
 * go with the process's mappings whatever the driver does).
 *
 * Locking: ats.lock covers the contexts' count; the engine's own locks
 * are npfnic_xlat.c's.
 */

#include <linux/pci.h>

#include "npfnic_ib.h"

static_assert(NPFNIC_IB_PASID_BASE + NPFNIC_IB_MAX_CTX <= NPFNIC_PASID_TBL);

/* Decides whether RDMA can translate; nothing runs before the first context. */
void npfnic_ib_ats_init(struct npfnic_ib_dev *dev)
{
	struct npfnic *nic = dev->nic;

	mutex_init(&dev->ats.lock);
	if (!dev->hw.enabled)
		return;
	if (!nic->xlat.possible || !nic->xlat.pasid_pos) {
		dev_info(&nic->pdev->dev,
			 "RDMA without memory regions: no ATS or PASID capability\n");
		return;
	}
	dev->ats.possible = true;
}

/* A user context takes translation for its PASID. */
int npfnic_ib_ats_get(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_ats *ats = &dev->ats;
	int err = 0;

	mutex_lock(&ats->lock);
	if (!ats->possible)
		goto out;
	err = npfnic_xlat_rdma_get(dev->nic);
	if (err)
		goto out;
	if (!ats->users++)
		npfnic_ib_pri_start(dev);
out:
	mutex_unlock(&ats->lock);
	return err;
}

void npfnic_ib_ats_put(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_ats *ats = &dev->ats;

	mutex_lock(&ats->lock);
	if (ats->possible && !WARN_ON_ONCE(!ats->users)) {
		if (!--ats->users)
			npfnic_ib_pri_stop(dev);
		npfnic_xlat_rdma_put(dev->nic);
	}
	mutex_unlock(&ats->lock);
}

/* At removal, with every context gone. */
void npfnic_ib_ats_fini(struct npfnic_ib_dev *dev)
{
	WARN_ON(dev->ats.users);
}

/*
 * Drops the translations of pasid: pages from va on (RANGE), or all of
 * them (pages 0: PASID), and waits until the device uses none of them.
 * 0 without translation (nothing was ever reachable), or when the RDMA
 * engine is stopped and idle. Called from the mmu notifier: allocates
 * nothing.
 */
int npfnic_ib_invalidate(struct npfnic_ib_dev *dev, u32 pasid, u64 va, u64 pages)
{
	struct npfnic *nic = dev->nic;
	int err;

	/* A reset, idle engine reaches no context's memory. */
	if (READ_ONCE(dev->hw.quiesced))
		return 0;
	err = npfnic_xlat_invalidate(nic, pasid, va, pages);
	if (!err)
		return 0;
	dev_err(&nic->pdev->dev, "RDMA invalidation of PASID %u failed (%d)\n", pasid, err);
	return npfnic_ib_hw_stop(dev) ? 0 : err;
}

/* Points pasid at its tables (root: its level-4 table), or clears it (NULL). */
int npfnic_ib_set_pasid(struct npfnic_ib_dev *dev, u32 pasid, struct npfnic_pt *root)
{
	int err;

	if (root)
		return npfnic_xlat_set_pasid(dev->nic, pasid, root);
	if (READ_ONCE(dev->hw.quiesced)) {
		npfnic_xlat_set_pasid(dev->nic, pasid, NULL);
		return 0;
	}
	/* A cleared entry: the device may have cached what it pointed at. */
	err = npfnic_xlat_set_pasid(dev->nic, pasid, NULL);
	if (err && npfnic_ib_hw_stop(dev))
		err = 0;
	return err;
}

/* Whether MRs can be registered: the engine reaches them only through translation. */
bool npfnic_ib_ats_possible(struct npfnic_ib_dev *dev)
{
	return dev->ats.possible;
}
