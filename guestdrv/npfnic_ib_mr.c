// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic RDMA: memory regions, and the I/O address space of each user
 * context they live in.
 *
 * The device reaches an MR's pages through its ATS translation, in the
 * same I/O page table format as the Ethernet side's PASID 0
 * (npfnic_iopt.c): every user context has a PASID of its own with its own
 * tables, and an MR maps its VAs (the iova librxe registers, the process's
 * address) to the DMA addresses of its pages, which ib_umem_get pinned.
 * The REG_MR command then gives the device the key, the PD, the VA range,
 * the access rights and the PASID, so the device checks every access
 * against the MR and translates the VA in that PASID. Two MRs over the same
 * page share its PTE: refs counts the MRs over each page, and how many of
 * them may write it (the page is entered writable only then, since only
 * then was it pinned for writing). Pages that are pinned stay at one DMA
 * address, so an MR over a VA another MR maps to a different page (the
 * process remapped it in between) is refused.
 *
 * On-demand paging keeps this layout: an ODP MR starts with no PTEs, and
 * the device's page requests for its PASID fill them (npfnic_ib_odp.c).
 * Pinned and ODP MRs of one context may overlap: a pinned page's PTE
 * (refs) stays the pinned page while a pinned MR covers it, whatever an
 * ODP MR's fault or invalidation does; refs and the PTE change together
 * under the context's pt_lock (npfnic_ib_odp.c has the invariant).
 *
 * Kernel consumers address memory by DMA address (ib_dma_map_*), with
 * their PD's local_dma_lkey: the PD's DMA MR (get_dma_mr), which the
 * device registers with FLAG_PHYSICAL (FEATURES.RDMA_KERNEL) over every
 * IOVA below NPFNIC_IB_MAX_MR_SIZE and reaches as it reaches the rings,
 * untranslated. No page of it is the driver's to pin or map.
 *
 * The PASID table entry of a context points at its tables for the
 * context's life (npfnic_xlat.c); a dereg drops the MR's translations
 * with an invalidation before its pages are unpinned. The device reaches
 * the pages only through those translations: once the invalidation
 * completed it reaches none of them, whatever it answered to DEREG_MR (a
 * dead engine's is answered once it is reset and idle, npfnic_ib_cmd.c),
 * so the pages are unpinned then, and kept pinned (leaked) only when the
 * invalidation fails. A registration that fails after its pages were
 * entered drops them the same way: the device may have reached them
 * through an MR whose REG_MR got no answer.
 *
 * Locking: a context's as_lock covers its tables (their growth: the
 * on-demand paging paths walk them without it) and changes of refs. The
 * mmu notifier never takes it, so allocating under it is allowed; the
 * PTEs themselves change under pt_lock, inside it.
 */

#include <linux/dma-mapping.h>
#include <rdma/ib_umem.h>
#include <rdma/iter.h>
#include <rdma/uverbs_ioctl.h>

#include "npfnic_ib.h"

/* The I/O page tables translate 48-bit VAs. */
#define NPFNIC_IB_VA_BITS \
	(NPFNIC_XLAT_PAGE_SHIFT + NPFNIC_XLAT_LEVELS * NPFNIC_XLAT_LEVEL_BITS)

int npfnic_ib_as_init(struct npfnic_ib_dev *dev, struct npfnic_ib_ucontext *uc)
{
	int err;

	mutex_init(&uc->as_lock);
	spin_lock_init(&uc->pt_lock);
	xa_init(&uc->refs);
	INIT_LIST_HEAD(&uc->odp_mrs);
	uc->root = npfnic_pt_alloc(dev->nic, true);
	if (!uc->root)
		return -ENOMEM;
	err = npfnic_ib_ats_get(dev);
	if (err)
		goto err_root;
	err = npfnic_ib_set_pasid(dev, uc->pasid, uc->root);
	if (err)
		goto err_ats;
	/* Its page requests find it from now on. */
	mutex_lock(&dev->odp_lock);
	err = xa_err(xa_store(&dev->ucs, uc->pasid, uc, GFP_KERNEL));
	mutex_unlock(&dev->odp_lock);
	if (!err)
		return 0;
	npfnic_ib_set_pasid(dev, uc->pasid, NULL);
err_ats:
	npfnic_ib_ats_put(dev);
err_root:
	npfnic_pt_free(dev->nic, uc->root);
	return err;
}

void npfnic_ib_as_destroy(struct npfnic_ib_dev *dev, struct npfnic_ib_ucontext *uc)
{
	mutex_lock(&dev->odp_lock);
	xa_erase(&dev->ucs, uc->pasid);
	mutex_unlock(&dev->odp_lock);
	/*
	 * Pages still mapped: MRs the device did not release, so it may walk
	 * the tables; so may it if the PASID's entry could not be dropped.
	 */
	if (!xa_empty(&uc->refs) || npfnic_ib_set_pasid(dev, uc->pasid, NULL)) {
		dev_warn(&dev->nic->pdev->dev, "PASID %u still maps MRs: its page tables are leaked\n",
			 uc->pasid);
		npfnic_ib_ats_put(dev);
		return;
	}
	npfnic_ib_ats_put(dev);
	xa_destroy(&uc->refs);
	npfnic_pt_free(dev->nic, uc->root);
	uc->root = NULL;
}

static __le64 npfnic_ib_pte_val(dma_addr_t dma, bool write)
{
	return cpu_to_le64((dma & NPFNIC_PTE_ADDR_MASK) | NPFNIC_PTE_PRESENT |
			   (write ? NPFNIC_PTE_WRITE : 0));
}

/*
 * Drops the MR's reference on the page at va (as_lock held): the PTE goes
 * with the last pinned MR over the page, its write permission with the
 * last one that writes it.
 */
static void npfnic_ib_as_put(struct npfnic_ib_dev *dev, struct npfnic_ib_ucontext *uc,
			     u64 va, bool write)
{
	unsigned long idx = va >> PAGE_SHIFT;
	void *e = xa_load(&uc->refs, idx);
	__le64 *pte;
	u64 ref;

	if (WARN_ON(!e))
		return;
	ref = xa_to_value(e) - 1 - (write ? NPFNIC_IB_REF_W : 0);
	pte = npfnic_pt_walk(dev->nic, uc->root, va, false);
	spin_lock(&uc->pt_lock);
	if (!npfnic_ib_ref_n(ref)) {
		xa_erase(&uc->refs, idx);
		if (pte)
			WRITE_ONCE(*pte, 0);
	} else {
		/* Replaces a present entry: nothing to allocate. */
		xa_store(&uc->refs, idx, xa_mk_value(ref), GFP_NOWAIT);
		if (pte && !npfnic_ib_ref_w(ref))
			WRITE_ONCE(*pte, *pte & ~cpu_to_le64(NPFNIC_PTE_WRITE));
	}
	spin_unlock(&uc->pt_lock);
}

/*
 * Takes a reference on the page at va for the MR, entering it (as_lock
 * held). The page's refs entry and its PTE change together under
 * pt_lock, where an ODP MR's fault or invalidation decides whose the
 * entry is: from then on it is the pinned page, which replaces an ODP
 * MR's entry (the same page, as both are the process's page there now).
 * The refs slot is reserved first, outside pt_lock, where it may
 * allocate.
 */
static int npfnic_ib_as_get(struct npfnic_ib_dev *dev, struct npfnic_ib_ucontext *uc,
			    u64 va, dma_addr_t dma, bool write)
{
	unsigned long idx = va >> PAGE_SHIFT;
	void *e = xa_load(&uc->refs, idx);
	u64 ref = e ? xa_to_value(e) : 0;
	__le64 *pte;
	int err = 0;

	pte = npfnic_pt_walk(dev->nic, uc->root, va, true);
	if (!pte)
		return -ENOMEM;
	if (!e) {
		err = xa_reserve(&uc->refs, idx, GFP_KERNEL);
		if (err)
			return err;
	}
	ref += 1 + (write ? NPFNIC_IB_REF_W : 0);
	spin_lock(&uc->pt_lock);
	/* A pinned page stays at its DMA address: the process remapped the VA in between. */
	if (e && (le64_to_cpu(*pte) & NPFNIC_PTE_ADDR_MASK) != (dma & NPFNIC_PTE_ADDR_MASK)) {
		err = -EBUSY;
	} else {
		xa_store(&uc->refs, idx, xa_mk_value(ref), GFP_NOWAIT);
		/* The page before the entry that lets the device reach it. */
		dma_wmb();
		WRITE_ONCE(*pte, npfnic_ib_pte_val(dma, npfnic_ib_ref_w(ref)));
	}
	spin_unlock(&uc->pt_lock);
	return err;
}

static void npfnic_ib_mr_unmap(struct npfnic_ib_dev *dev, struct npfnic_ib_ucontext *uc,
			       struct npfnic_ib_mr *mr, u64 pages)
{
	u64 va = mr->va & PAGE_MASK, i;

	mutex_lock(&uc->as_lock);
	for (i = 0; i < pages; i++) {
		npfnic_ib_as_put(dev, uc, va + i * PAGE_SIZE, mr->umem->writable);
		if (!((i + 1) % 512))
			cond_resched();
	}
	mutex_unlock(&uc->as_lock);
}

/*
 * Takes a pinned MR's pages away from the device: their PTEs (where no
 * other MR keeps them), then whatever it cached of them. 0 once it
 * reaches none of them: the pages may be unpinned.
 */
static int npfnic_ib_mr_drop(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr)
{
	u64 pages = ib_umem_num_dma_blocks(mr->umem, PAGE_SIZE);
	int err;

	npfnic_ib_mr_unmap(dev, mr->uc, mr, pages);
	err = npfnic_ib_invalidate(dev, mr->uc->pasid, mr->va, pages);
	if (err)
		dev_warn(&dev->nic->pdev->dev, "MR %#x: translations not dropped (%d): pages leaked\n",
			 mr->ibmr.lkey, err);
	return err;
}

/* Enters every page of the MR at its VA; on failure none stays entered. */
static int npfnic_ib_mr_map(struct npfnic_ib_dev *dev, struct npfnic_ib_ucontext *uc,
			    struct npfnic_ib_mr *mr)
{
	struct ib_block_iter biter;
	u64 va = mr->va & PAGE_MASK, n = 0;
	int err = 0;

	mutex_lock(&uc->as_lock);
	rdma_umem_for_each_dma_block(mr->umem, &biter, PAGE_SIZE) {
		err = npfnic_ib_as_get(dev, uc, va + n * PAGE_SIZE,
				       rdma_block_iter_dma_address(&biter), mr->umem->writable);
		if (err)
			break;
		n++;
		if (!(n % 512))
			cond_resched();
	}
	mutex_unlock(&uc->as_lock);
	if (err)
		npfnic_ib_mr_unmap(dev, uc, mr, n);
	return err;
}

static u32 npfnic_ib_mr_key(struct npfnic_ib_dev *dev, u32 index)
{
	return (index << 8) | ((u32)atomic_inc_return(&dev->mr_gen) & 0xff);
}

/*
 * The kernel's DMA MR of a PD (ib_alloc_pd asks for one, ib_mad's
 * included, and makes its lkey the PD's local_dma_lkey): a physical MR
 * over the IOVAs the device can be given. Without FEATURES.RDMA_KERNEL no
 * kernel consumer can post work, and it stays a key that names nothing.
 */
struct ib_mr *npfnic_ib_get_dma_mr(struct ib_pd *ibpd, int access)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibpd->device);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_REG_MR };
	struct npfnic_ib_mr *mr;
	int id, err;

	if (access & IB_ACCESS_ON_DEMAND)
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->dev = dev;
	mr->access = access;
	INIT_LIST_HEAD(&mr->odp_node);
	if (!dev->hw.kernel)
		return &mr->ibmr;
	/* The largest MR the device takes; no DMA address lies above it without an IOMMU. */
	if (dma_get_required_mask(&dev->nic->pdev->dev) > NPFNIC_IB_MAX_MR_SIZE - 1)
		dev_warn_once(&dev->nic->pdev->dev, "DMA addresses above %#llx: kernel RDMA consumers may fail\n",
			      (u64)NPFNIC_IB_MAX_MR_SIZE);
	id = ida_alloc_range(&dev->mr_ida, 1, NPFNIC_IB_MAX_MR, GFP_KERNEL);
	if (id < 0) {
		err = id == -ENOSPC ? -ENOMEM : id;
		goto err_mr;
	}
	mr->index = id;
	mr->length = NPFNIC_IB_MAX_MR_SIZE;
	mr->ibmr.lkey = npfnic_ib_mr_key(dev, mr->index);
	mr->ibmr.rkey = mr->ibmr.lkey;
	mr->ibmr.length = mr->length;

	cmd.mr.key = mr->ibmr.lkey;
	cmd.mr.pdn = to_npfnic_ib_pd(ibpd)->pdn;
	cmd.mr.access = access;
	cmd.mr.physical = true;
	cmd.mr.va = 0;
	cmd.mr.length = mr->length;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err) {
		/* A REG_MR without an answer may have reached the device: its key stays taken. */
		if (err != -ETIMEDOUT)
			ida_free(&dev->mr_ida, mr->index);
		goto err_mr;
	}
	mr->physical = true;
	return &mr->ibmr;

err_mr:
	kfree(mr);
	return ERR_PTR(err);
}

struct ib_mr *npfnic_ib_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length, u64 va,
				    int access, struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibpd->device);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_REG_MR };
	struct npfnic_ib_ucontext *uc;
	struct npfnic_ib_mr *mr;
	bool implicit;
	int id, err;

	if (!udata)
		return ERR_PTR(-EOPNOTSUPP);
	/* The engine reaches MRs only through translation. */
	if (dev->hw.enabled && !npfnic_ib_ats_possible(dev))
		return ERR_PTR(-EOPNOTSUPP);
	/*
	 * A dead engine takes no REG_MR: no page is entered for it, where a
	 * lost engine's stale MR of the context could reach it.
	 */
	if (READ_ONCE(dev->hw.dead))
		return ERR_PTR(-EIO);
	/*
	 * Implicit ODP, as mlx5 tells it: ibv_reg_mr(pd, NULL, SIZE_MAX,
	 * IBV_ACCESS_ON_DEMAND), the process's whole address space.
	 */
	implicit = !start && length == U64_MAX;
	if (implicit && (va || !(access & IB_ACCESS_ON_DEMAND)))
		return ERR_PTR(-EINVAL);
	/* The device translates page by page: the VA keeps the buffer's offset in its page. */
	if (!implicit &&
	    (!length || length > NPFNIC_IB_MAX_MR_SIZE || offset_in_page(va ^ start) ||
	     va >= BIT_ULL(NPFNIC_IB_VA_BITS) || length > BIT_ULL(NPFNIC_IB_VA_BITS) - va))
		return ERR_PTR(-EINVAL);
	/* odp=all: on demand whatever user space asked for, if the device can fault. */
	if (npfnic_ib_odp_all() && READ_ONCE(dev->pri.possible))
		access |= IB_ACCESS_ON_DEMAND;
	uc = rdma_udata_to_drv_context(udata, struct npfnic_ib_ucontext, ibuc);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->uc = uc;
	mr->dev = dev;
	mr->va = va;
	mr->length = length;
	mr->access = access;
	mr->implicit = implicit;
	INIT_LIST_HEAD(&mr->odp_node);
	id = ida_alloc_range(&dev->mr_ida, 1, NPFNIC_IB_MAX_MR, GFP_KERNEL);
	if (id < 0) {
		err = id == -ENOSPC ? -ENOMEM : id;
		goto err_mr;
	}
	mr->index = id;
	if (access & IB_ACCESS_ON_DEMAND) {
		err = npfnic_ib_odp_reg(dev, mr, start);
		if (err)
			goto err_id;
	} else {
		mr->umem = ib_umem_get(ibpd->device, start, length, access);
		if (IS_ERR(mr->umem)) {
			err = PTR_ERR(mr->umem);
			goto err_id;
		}
		err = npfnic_ib_mr_map(dev, uc, mr);
		if (err)
			goto err_umem;
	}
	mr->ibmr.lkey = npfnic_ib_mr_key(dev, mr->index);
	mr->ibmr.rkey = mr->ibmr.lkey;
	mr->ibmr.iova = va;
	mr->ibmr.length = length;

	cmd.mr.key = mr->ibmr.lkey;
	cmd.mr.pdn = to_npfnic_ib_pd(ibpd)->pdn;
	cmd.mr.pasid = uc->pasid;
	cmd.mr.access = access;
	cmd.mr.implicit = implicit;
	cmd.mr.va = implicit ? 0 : va;
	cmd.mr.length = implicit ? 0 : length;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err)
		goto err_map;
	return &mr->ibmr;

err_map:
	if (mr->odp) {
		npfnic_ib_odp_dereg(dev, mr);
		goto err_id;
	}
	/* A REG_MR without an answer may have reached the device. */
	if (npfnic_ib_mr_drop(dev, mr))
		goto err_id;
err_umem:
	ib_umem_release(mr->umem);
err_id:
	ida_free(&dev->mr_ida, mr->index);
err_mr:
	kfree(mr);
	return ERR_PTR(err);
}

/*
 * Fast registration (kernel consumers: nvme-rdma, iSER, ...): ib_alloc_mr
 * creates a free region on the device (ALLOC_MR) with a page list in
 * coherent memory; ib_map_mr_sg fills the list; an IB_WR_REG_MR send entry
 * (npfnic_ib_queue.c) has the device read the list and register the region
 * under the key byte the consumer chose; LOCAL_INV, or the peer's SEND with
 * Invalidate, frees it again. The device reads the list only while a
 * REG_MR runs, as the consumer may rewrite it once that completed.
 */
struct ib_mr *npfnic_ib_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type type, u32 max_num_sg)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibpd->device);
	struct device *d = &dev->nic->pdev->dev;
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_ALLOC_MR };
	struct npfnic_ib_mr *mr;
	int id, err;

	if (!dev->hw.fast_reg || type != IB_MR_TYPE_MEM_REG)
		return ERR_PTR(-EOPNOTSUPP);
	if (!max_num_sg || max_num_sg > NPFNIC_RDMA_MAX_FAST_REG_PAGES)
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->dev = dev;
	mr->fast = true;
	mr->max_pages = max_num_sg;
	INIT_LIST_HEAD(&mr->odp_node);
	mr->pages = dma_alloc_coherent(d, max_num_sg * sizeof(*mr->pages), &mr->pages_dma,
				       GFP_KERNEL);
	if (!mr->pages) {
		err = -ENOMEM;
		goto err_mr;
	}
	id = ida_alloc_range(&dev->mr_ida, 1, NPFNIC_IB_MAX_MR, GFP_KERNEL);
	if (id < 0) {
		err = id == -ENOSPC ? -ENOMEM : id;
		goto err_pages;
	}
	mr->index = id;
	mr->hw_key = npfnic_ib_mr_key(dev, mr->index);
	mr->ibmr.lkey = mr->hw_key;
	mr->ibmr.rkey = mr->hw_key;

	cmd.mr.key = mr->hw_key;
	cmd.mr.pdn = to_npfnic_ib_pd(ibpd)->pdn;
	cmd.mr.pages = mr->pages_dma;
	cmd.mr.max_pages = max_num_sg;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err) {
		/* An ALLOC_MR without an answer may have reached the device: all stays taken. */
		if (err == -ETIMEDOUT)
			goto err_mr;
		ida_free(&dev->mr_ida, mr->index);
		goto err_pages;
	}
	return &mr->ibmr;

err_pages:
	dma_free_coherent(d, max_num_sg * sizeof(*mr->pages), mr->pages, mr->pages_dma);
err_mr:
	kfree(mr);
	return ERR_PTR(err);
}

static int npfnic_ib_set_page(struct ib_mr *ibmr, u64 addr)
{
	struct npfnic_ib_mr *mr = to_npfnic_ib_mr(ibmr);

	if (mr->npages == mr->max_pages)
		return -ENOMEM;
	mr->pages[mr->npages++] = cpu_to_le64(addr);
	return 0;
}

int npfnic_ib_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
			unsigned int *sg_offset)
{
	struct npfnic_ib_mr *mr = to_npfnic_ib_mr(ibmr);

	if (!mr->fast)
		return -EINVAL;
	mr->npages = 0;
	return ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, npfnic_ib_set_page);
}

/* DEREG_MR names the region by ALLOC_MR's key, whatever REG_MR made of it. */
static int npfnic_ib_dereg_fast_mr(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr)
{
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_DEREG_MR };
	int err;

	cmd.mr.key = mr->hw_key;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err) {
		/* The device may still read the list: it stays, as does the key. */
		dev_warn(&dev->nic->pdev->dev, "fast MR %#x not released by the device (%d)\n",
			 mr->hw_key, err);
		kfree(mr);
		return 0;
	}
	dma_free_coherent(&dev->nic->pdev->dev, mr->max_pages * sizeof(*mr->pages), mr->pages,
			  mr->pages_dma);
	ida_free(&dev->mr_ida, mr->index);
	kfree(mr);
	return 0;
}

/*
 * The core's destroy paths may not fail: 0 always. DEREG_MR first, so the
 * device stops using the key; then the translations go whatever it
 * answered, since they alone let it reach the pages. An on-demand paging
 * MR's notifier goes in any case: left registered, it would run at the
 * next munmap or exit on a freed context, or on an unloaded module.
 */
int npfnic_ib_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibmr->device);
	struct npfnic_ib_mr *mr = to_npfnic_ib_mr(ibmr);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_DEREG_MR };
	int err;

	if (mr->fast)
		return npfnic_ib_dereg_fast_mr(dev, mr);
	if (mr->physical) {
		/*
		 * The memory is the consumers'; a device that did not let go
		 * of the key keeps it (and the remove path reports it).
		 */
		cmd.mr.key = ibmr->lkey;
		err = npfnic_ib_cmd(dev, &cmd);
		if (err)
			dev_warn(&dev->nic->pdev->dev, "DMA MR %#x not released by the device (%d)\n",
				 ibmr->lkey, err);
		else
			ida_free(&dev->mr_ida, mr->index);
		kfree(mr);
		return 0;
	}
	if (!mr->umem) {
		kfree(mr);
		return 0;
	}
	cmd.mr.key = ibmr->lkey;
	cmd.mr.pasid = mr->uc->pasid;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err)
		dev_warn(&dev->nic->pdev->dev, "MR %#x not released by the device (%d): dropping its translations\n",
			 ibmr->lkey, err);
	if (mr->odp) {
		npfnic_ib_odp_dereg(dev, mr);
	} else {
		/* Cached translations of the pages go before the pages are unpinned. */
		if (npfnic_ib_mr_drop(dev, mr))
			return 0;
		ib_umem_release(mr->umem);
	}
	ida_free(&dev->mr_ida, mr->index);
	kfree(mr);
	return 0;
}
