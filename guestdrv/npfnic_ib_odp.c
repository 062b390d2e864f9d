// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic RDMA: on-demand paging (interface 2.5).
 *
 * An MR registered with IB_ACCESS_ON_DEMAND pins nothing: ib_umem_odp_get
 * only watches the process's range with an mmu interval notifier, and the
 * context's I/O page tables start without the MR's pages. The device
 * reaches a page that has no PTE (or a write to one without write
 * permission) as a translation fault and asks for it with a page request
 * in the PASID of the context, through the function's page request queue
 * (npfnic_xlat.c, whose PRQ work hands the contexts' requests in order to
 * an ordered workqueue of their own, where npfnic_ib_page_request takes
 * them). The RC engine meanwhile answers an RNR NAK (a receive), or
 * stalls the send queue (a send), and retries once the page response
 * came.
 *
 * Resolution, in that work (mlx5's pagefault_mr is the model): the
 * requests of a group that ask for consecutive pages (the device asks for
 * every page a faulting request touches, in order: whole-request
 * prefault) gather into a run, resolved at once when the run breaks or
 * the group ends. For each MR of the PASID's context that covers part of
 * the run, held: make sure the page tables down to its PTEs exist
 * (as_lock, the only allocation on the way); ib_umem_odp_map_dma_and_lock
 * faults the pages in and DMA-maps them in one hmm_range_fault, and
 * returns with umem_mutex held; the PTEs are entered; umem_mutex is
 * dropped. Then the page response. One call per run instead of per page
 * is what brings a cold 64 KiB receive's resolution near one page's.
 *
 * Invalidation (munmap, reclaim, migration, COW, exit): the notifier
 * takes umem_mutex, moves the interval's sequence, clears the PTEs of the
 * range, drops the device's cached translations and waits until no DMA
 * uses them (npfnic_ib_invalidate), then unmaps the pages. That wait never
 * depends on a page response: the device completes an invalidation while
 * requests of the same PASID are outstanding, so the work may sit in
 * hmm_range_fault for the same range without a deadlock. Clearing skips
 * the tables that do not exist (npfnic_pt_clear), and an MR with no page
 * mapped is not looked at: invalidating a huge, sparse range costs what
 * is mapped in it.
 *
 * Synthetic receive faults (rnpf_rate_ppm, as on the Ethernet side, now
 * per message the device's responder executes): the work draws the number
 * of messages until the next fault (each one faults with probability
 * rnpf_rate_ppm / 10^6) and arms the device's RDMA_MSG_ALARM with it; at
 * the MSG_ALARM event it drops the translation of a random mapped page of
 * a random ODP MR, as an invalidation would, so the next access to it
 * takes the whole fault path, and arms the next gap. Faults so land
 * between the messages they were drawn for, not after the fact. The work
 * also looks for a changed rate every NPFNIC_IB_RNPF_MS. A fault finds no
 * page to evict (odp_rnpf_skipped) when the MR's pages are all unmapped
 * already.
 *
 * Implicit ODP (mlx5's model): ibv_reg_mr(pd, NULL, SIZE_MAX,
 * IBV_ACCESS_ON_DEMAND) registers the process's whole address space. The
 * device gets one region over its PASID (REG_MR FLAG_IMPLICIT); the
 * driver's MR is an implicit umem (ib_umem_odp_alloc_implicit), which
 * watches nothing. A fault at va finds the MR, then its child over va's
 * NPFNIC_IB_IMR_SPAN (the children xarray, by va >> NPFNIC_IB_IMR_SHIFT),
 * made if there is none (ib_umem_odp_alloc_child: a umem with a notifier
 * of its own over that span), and resolves the page through the child
 * as through an explicit MR. An invalidation that leaves a child with
 * nothing mapped queues the parent's reap work, which frees the children
 * that are still empty and unused; a dereg frees them all. A child's
 * faults and invalidations count for its parent (rdma statistic mr).
 *
 * Transparent ODP (odp=all, writable at run time, read at each
 * registration): every user MR is registered as if with
 * IBV_ACCESS_ON_DEMAND, so unmodified programs run unpinned, and fork,
 * munmap and mremap under an MR behave as under ODP.
 *
 * Overlapping MRs. A context has one I/O page table, so an MR's PTEs are
 * not its own: ODP MRs may overlap each other and pinned MRs, and each
 * PTE is either a pinned page or an ODP entry. The invariant: no PTE
 * outlives the page or the DMA mapping it points at. Hence:
 *  - a pinned page's PTE (its VA in uc->refs) is the pinned page for as
 *    long as a pinned MR covers it. A pinned registration enters it,
 *    replacing an ODP entry; the last pinned MR's dereg clears it, then
 *    invalidates, then unpins. ODP faults never replace it (an ODP MR
 *    over it reaches the pinned page, the page the process had there at
 *    the pinned registration), and ODP invalidations never clear it: a
 *    write fault may only make it writable if it is the page the fault
 *    found (else the fault is refused, -EBUSY), and an ODP invalidation
 *    takes that permission back unless a pinned MR writes the page;
 *  - an ODP entry is the DMA address of some ODP MR's mapping of the
 *    page, entered by that MR's fault under its umem_mutex. Any ODP MR's
 *    invalidation of a range clears every ODP entry in it, whichever MR
 *    entered it (clearing too much only costs a fault), and drops the
 *    device's cached translations of the range whenever the MR had a
 *    page of it mapped, before it unmaps its pages: so a mapping goes
 *    only after no PTE, and no cached translation, points at it, even
 *    when another MR's fault replaced the entry meanwhile;
 *  - whose an entry is, is decided under uc->pt_lock, under which a
 *    pinned MR's refs entry and its PTE change together.
 * VM tests: TestRDMAODPWithRxe (odp=all, implicit ODP under fork and
 * munmap), rdma-core's test_odp (implicit ODP beside explicit MRs).
 *
 * Locking. Reclaim runs the notifier, so nothing that holds a lock the
 * notifier may wait for allocates memory that can reclaim: the notifier
 * takes umem_mutex, then pt_lock (a spinlock) and the engine's
 * xlat.inv_lock (npfnic_ib_invalidate), never as_lock or imr_lock, and
 * umem_mutex is never held while allocating or taking as_lock. PTEs change only under
 * pt_lock; the tables they sit in are walked without as_lock, which
 * npfnic_pt_walk allows: tables are only added, and the context's tree
 * lives longer than its MRs. Order: dev->odp_lock before as_lock and
 * before umem_mutex (ODP registration sets the umem's private); an
 * implicit MR's imr_lock before its children's umem_mutex (imr_lock may
 * allocate: a child, whose notifier does not take it). An ODP MR keeps
 * its pages reserved (in uc->odp_mrs) until its translations are gone.
 */

#include <linux/dma-mapping.h>
#include <linux/mmu_notifier.h>
#include <linux/pci.h>
#include <linux/pci-ats.h>
#include <linux/sched/mm.h>
#include <rdma/ib_umem_odp.h>
#include <rdma/restrack.h>
#include <rdma/uverbs_ioctl.h>

#include "npfnic_ib.h"

/* Synthetic receive faults: how often a changed rate is looked for. */
#define NPFNIC_IB_RNPF_MS	10
/* Pages of an MR drawn, at most, to find a mapped one to evict. */
#define NPFNIC_IB_RNPF_PROBES	32

/* ---- the contexts' use of page requests ---- */

/*
 * The first context took the engine (ats.lock held): its page requests
 * reach npfnic_ib_page_request from now on; synthetic receive faults on.
 */
void npfnic_ib_pri_start(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_pri *pri = &dev->pri;

	if (!pri->possible)
		return;
	WRITE_ONCE(pri->enabled, true);
	dev->rnpf_ppm = 0;
	clear_bit(0, &dev->rnpf_due);
	/* Not behind the fault resolutions: a due fault waits for none. */
	queue_delayed_work(system_unbound_wq, &dev->rnpf_work, msecs_to_jiffies(NPFNIC_IB_RNPF_MS));
}

/*
 * The last context went (ats.lock held, so no ODP MR is left): the
 * synthetic faults stop. Requests still queued find no MR and are
 * refused.
 */
void npfnic_ib_pri_stop(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_pri *pri = &dev->pri;

	if (!pri->possible || !pri->enabled)
		return;
	WRITE_ONCE(pri->enabled, false);
	cancel_delayed_work_sync(&dev->rnpf_work);
}

/* ---- resolution ---- */

/* Whether the ODP MR's pages take in va (an implicit MR: its process's whole address space). */
static bool npfnic_ib_odp_covers(const struct npfnic_ib_mr *mr, u64 va)
{
	if (mr->implicit)
		return va < mr->umem->owning_mm->task_size;
	return va - (mr->va & PAGE_MASK) < PAGE_ALIGN(mr->va + mr->length) - (mr->va & PAGE_MASK);
}

/*
 * An ODP MR of context pasid covering va, held for a resolution (NULL:
 * none). MRs may overlap: a write takes one the process registered for
 * writing, if any covers va (the device checked the key's rights; the
 * page only has to be mapped writable), else the fault is refused.
 */
static struct npfnic_ib_mr *npfnic_ib_odp_hold(struct npfnic_ib_dev *dev, u32 pasid, u64 va,
					       bool write)
{
	struct npfnic_ib_ucontext *uc;
	struct npfnic_ib_mr *mr, *found = NULL;

	mutex_lock(&dev->odp_lock);
	uc = xa_load(&dev->ucs, pasid);
	if (uc) {
		list_for_each_entry(mr, &uc->odp_mrs, odp_node) {
			if (mr->odp_dying || !npfnic_ib_odp_covers(mr, va))
				continue;
			if (!found)
				found = mr;
			if (!write || mr->umem->writable) {
				found = mr;
				break;
			}
		}
		if (found)
			WRITE_ONCE(found->odp_users, found->odp_users + 1);
	}
	mutex_unlock(&dev->odp_lock);
	return found;
}

static void npfnic_ib_odp_release_hold(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr)
{
	mutex_lock(&dev->odp_lock);
	WRITE_ONCE(mr->odp_users, mr->odp_users - 1);
	if (!mr->odp_users)
		wake_up_all(&dev->odp_wait);
	mutex_unlock(&dev->odp_lock);
}

/* The MR's VA (in its PASID) of the process address user. */
static u64 npfnic_ib_odp_iova(const struct npfnic_ib_mr *mr, struct ib_umem_odp *odp, u64 user)
{
	return (mr->va & PAGE_MASK) + (user - ib_umem_start(odp));
}

static const struct mmu_interval_notifier_ops npfnic_ib_odp_ops;

/*
 * The child of implicit MR imr over va, made if there is none, with a
 * user taken (npfnic_ib_imr_put_child). Its umem watches its span of the
 * process like an explicit ODP MR's. Allocates under imr_lock, which no
 * notifier takes.
 */
static struct npfnic_ib_mr *npfnic_ib_imr_get_child(struct npfnic_ib_dev *dev,
						    struct npfnic_ib_mr *imr, u64 va)
{
	unsigned long idx = va >> NPFNIC_IB_IMR_SHIFT;
	struct npfnic_ib_mr *child;
	struct ib_umem_odp *odp;
	int err;

	mutex_lock(&imr->imr_lock);
	if (imr->imr_dead) {
		child = ERR_PTR(-ENOENT);
		goto out;
	}
	child = xa_load(&imr->children, idx);
	if (child)
		goto used;
	child = kzalloc(sizeof(*child), GFP_KERNEL);
	if (!child) {
		child = ERR_PTR(-ENOMEM);
		goto out;
	}
	odp = ib_umem_odp_alloc_child(to_ib_umem_odp(imr->umem), idx << NPFNIC_IB_IMR_SHIFT,
				      NPFNIC_IB_IMR_SPAN, &npfnic_ib_odp_ops);
	if (IS_ERR(odp)) {
		kfree(child);
		child = ERR_CAST(odp);
		goto out;
	}
	child->dev = dev;
	child->uc = imr->uc;
	child->parent = imr;
	child->odp = true;
	child->umem = &odp->umem;
	child->va = idx << NPFNIC_IB_IMR_SHIFT;
	child->length = NPFNIC_IB_IMR_SPAN;
	child->access = imr->access;
	INIT_LIST_HEAD(&child->odp_node);
	err = xa_err(xa_store(&imr->children, idx, child, GFP_KERNEL));
	if (err) {
		ib_umem_odp_release(odp);
		kfree(child);
		child = ERR_PTR(err);
		goto out;
	}
	mutex_lock(&odp->umem_mutex);
	odp->private = child;
	mutex_unlock(&odp->umem_mutex);
used:
	child->odp_users++;
out:
	mutex_unlock(&imr->imr_lock);
	return child;
}

static void npfnic_ib_imr_put_child(struct npfnic_ib_mr *child)
{
	struct npfnic_ib_mr *imr = child->parent;

	mutex_lock(&imr->imr_lock);
	child->odp_users--;
	mutex_unlock(&imr->imr_lock);
}

/*
 * Enters the page at va of ODP MR mr, DMA address dma, into its context's
 * PTE (umem_mutex held). A pinned MR's page stays as it is: it is the
 * page the process had there when the pinned MR was registered, which an
 * ODP MR over it reaches too; such a page is made writable only if it is
 * the page the fault found. -EBUSY: the process has another page there
 * now, and a write into the pinned one would go where it no longer looks.
 */
static int npfnic_ib_odp_enter(struct npfnic_ib_ucontext *uc, __le64 *pte, u64 va,
			       dma_addr_t dma, bool write)
{
	u64 cur, val = (dma & ODP_DMA_ADDR_MASK & NPFNIC_PTE_ADDR_MASK) | NPFNIC_PTE_PRESENT |
		       (dma & ODP_WRITE_ALLOWED_BIT ? NPFNIC_PTE_WRITE : 0);
	int err = 0;

	spin_lock(&uc->pt_lock);
	if (!xa_load(&uc->refs, va >> PAGE_SHIFT)) {
		/* The page before the entry that lets the device reach it. */
		dma_wmb();
		WRITE_ONCE(*pte, cpu_to_le64(val));
	} else if (write) {
		cur = le64_to_cpu(READ_ONCE(*pte));
		if ((cur & NPFNIC_PTE_ADDR_MASK) != (val & NPFNIC_PTE_ADDR_MASK))
			err = -EBUSY;
		else if (!(cur & NPFNIC_PTE_WRITE))
			WRITE_ONCE(*pte, cpu_to_le64(cur | NPFNIC_PTE_WRITE));
	}
	spin_unlock(&uc->pt_lock);
	return err;
}

/* Pages one npfnic_ib_odp_map call enters: its PTE pointers live on the stack. */
#define NPFNIC_IB_MAP_BATCH	32

/*
 * Makes the pages at va (page aligned, pages of them, all within the MR
 * and at most NPFNIC_IB_MAP_BATCH) present in the MR's context, writable
 * if write.
 */
static int npfnic_ib_odp_map(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr, u64 va,
			     unsigned int pages, bool write)
{
	struct ib_umem_odp *odp = to_ib_umem_odp(mr->umem);
	struct npfnic_ib_ucontext *uc = mr->uc;
	u64 user = ib_umem_start(odp) + (va - (mr->va & PAGE_MASK));
	__le64 *ptes[NPFNIC_IB_MAP_BATCH];
	u64 mask = ODP_READ_ALLOWED_BIT;
	unsigned int i, mapped = 0;
	size_t first;
	int n, err = 0;

	if (write) {
		if (!mr->umem->writable)
			return -EACCES;
		mask |= ODP_WRITE_ALLOWED_BIT;
	}
	/*
	 * The tables down to the PTEs first, under as_lock alone: a table
	 * allocation may reclaim, and reclaim may run the notifier, which
	 * takes umem_mutex. They stay until the context goes.
	 */
	mutex_lock(&uc->as_lock);
	for (i = 0; i < pages; i++) {
		ptes[i] = npfnic_pt_walk(dev->nic, uc->root, va + i * PAGE_SIZE, true);
		if (!ptes[i])
			break;
	}
	mutex_unlock(&uc->as_lock);
	if (i < pages)
		return -ENOMEM;
	n = ib_umem_odp_map_dma_and_lock(odp, user, (size_t)pages << PAGE_SHIFT, mask, true);
	if (n < 0)
		return n;
	/* umem_mutex held: no invalidation of the pages until the PTEs are in. */
	first = (user - ib_umem_start(odp)) >> odp->page_shift;
	for (i = 0; i < pages; i++) {
		int e = npfnic_ib_odp_enter(uc, ptes[i], va + i * PAGE_SIZE,
					    odp->dma_list[first + i], write);

		if (!e)
			mapped++;
		else if (!err)
			err = e;
	}
	mutex_unlock(&odp->umem_mutex);
	atomic64_add(mapped, &dev->odp.pages_mapped);
	return err;
}

/*
 * How many of the pages from va (page aligned) MR mr's umem takes in
 * (an implicit MR: up to the end of va's child), at most pages.
 */
static unsigned int npfnic_ib_odp_reach(const struct npfnic_ib_mr *mr, u64 va,
					unsigned int pages)
{
	u64 end;

	if (mr->implicit)
		end = min_t(u64, (va | (NPFNIC_IB_IMR_SPAN - 1)) + 1,
			    PAGE_ALIGN(mr->umem->owning_mm->task_size));
	else
		end = PAGE_ALIGN(mr->va + mr->length);
	return min_t(u64, pages, (end - va) >> PAGE_SHIFT);
}

/*
 * Resolves pages consecutive pages from va (page aligned) of a request
 * group: 0, or why the group is refused. The MR covering va is held; the
 * pages it takes in are mapped at once; the rest goes to the MRs after.
 */
static int npfnic_ib_odp_fault(struct npfnic_ib_dev *dev, u32 pasid, u64 va,
			       unsigned int pages, bool write, u64 isr)
{
	/* fault_delay_us emulates a major fault here too (once: one I/O). */
	npfnic_fault_sleep(isr);
	while (pages) {
		struct npfnic_ib_mr *mr = npfnic_ib_odp_hold(dev, pasid, va, write);
		struct npfnic_ib_mr *target;
		unsigned int k;
		int err;

		if (!mr)
			return -ENOENT;
		k = min(npfnic_ib_odp_reach(mr, va, pages), NPFNIC_IB_MAP_BATCH);
		target = mr->implicit ? npfnic_ib_imr_get_child(dev, mr, va) : mr;
		if (IS_ERR(target)) {
			err = PTR_ERR(target);
		} else {
			err = npfnic_ib_odp_map(dev, target, va, k, write);
			if (target != mr)
				npfnic_ib_imr_put_child(target);
		}
		if (!err)
			atomic64_add(k, &mr->page_faults);
		npfnic_ib_odp_release_hold(dev, mr);
		if (err)
			return err;
		va += (u64)k << PAGE_SHIFT;
		pages -= k;
	}
	return 0;
}

/* Resolves the group's gathered run, if any; a failure refuses the group. */
static void npfnic_ib_prg_resolve(struct npfnic_ib_dev *dev, struct npfnic_ib_prg *g)
{
	int err;

	if (!g->run_pages)
		return;
	err = npfnic_ib_odp_fault(dev, g->run_pasid, g->run_va, g->run_pages, g->run_write,
				  g->run_isr_ns);
	if (err) {
		g->failed = true;
		dev_dbg_ratelimited(&dev->nic->pdev->dev,
				    "RDMA page request PASID %u %#llx+%u pages%s: %d\n",
				    g->run_pasid, g->run_va, g->run_pages,
				    g->run_write ? " (write)" : "", err);
	}
	g->run_pages = 0;
}

/*
 * One page request of a context's PASID, from the engine's RDMA work
 * (npfnic_xlat.c), in the order the device raised them: its page joins
 * the group's run if it follows it, else the run is resolved and a new
 * one starts; at the group's last request the run is resolved and the
 * group answered. A group of an
 * earlier run of the engine (gen) was abandoned by its reset.
 */
void npfnic_ib_page_request(struct npfnic_ib_dev *dev, const struct npfnic_xlat_req *r)
{
	struct npfnic_ib_pri *pri = &dev->pri;
	struct npfnic_ib_prg *g;
	bool write;
	u64 page;

	if (r->prgi >= NPFNIC_PRGI_MAX) {
		atomic64_inc(&dev->odp.bad_requests);
		dev_warn_ratelimited(&dev->nic->pdev->dev,
				     "RDMA page request with PRG index %u ignored\n", r->prgi);
		return;
	}
	g = &pri->prg[r->prgi];
	if (!g->active || g->gen != r->gen) {
		memset(g, 0, sizeof(*g));
		g->active = true;
		g->gen = r->gen;
		g->pasid = r->pasid;
		g->flags = r->flags;
	}
	atomic64_inc(&dev->odp.faults);
	write = r->flags & NPFNIC_PRQ_WRITE;
	page = r->addr & PAGE_MASK;
	if (!g->failed) {
		if (g->run_pages && g->run_write == write && g->run_pasid == r->pasid &&
		    g->run_pages < NPFNIC_PRQ_SIZE &&
		    page == g->run_va + ((u64)g->run_pages << PAGE_SHIFT)) {
			g->run_pages++;
		} else {
			npfnic_ib_prg_resolve(dev, g);
		}
		if (!g->failed && !g->run_pages) {
			g->run_pasid = r->pasid;
			g->run_va = page;
			g->run_pages = 1;
			g->run_write = write;
			g->run_isr_ns = r->isr_ns;
		}
	}
	if (!(r->flags & NPFNIC_PRQ_LAST))
		return;
	if (!g->failed)
		npfnic_ib_prg_resolve(dev, g);
	if (g->failed)
		atomic64_inc(&dev->odp.fault_errors);
	if (!npfnic_xlat_respond(dev->nic, r->prgi, g->pasid, g->flags & NPFNIC_PRQ_PASID_VALID,
				 g->failed ? NPFNIC_PRSP_INVALID_REQUEST : NPFNIC_PRSP_SUCCESS))
		npfnic_since(dev->nic, NPFNIC_HIST_RDMA_FAULT, r->isr_ns);
	else
		dev_err_ratelimited(&dev->nic->pdev->dev,
				    "RDMA page response not posted: group %u not answered\n",
				    r->prgi);
	g->active = false;
}

/* ---- invalidation ---- */

/* The PTE's index in its leaf table. */
static unsigned int npfnic_ib_pte_index(u64 va)
{
	return (va >> NPFNIC_XLAT_PAGE_SHIFT) & (BIT(NPFNIC_XLAT_LEVEL_BITS) - 1);
}

/*
 * Clears the ODP entries of leaf table pt's part [va, end) of uc and
 * returns how many it changed. A pinned MR's page stays, made read-only
 * again where an ODP write fault made it writable and no pinned MR over
 * it writes. Whose an entry is, is decided under pt_lock, where a pinned
 * MR's refs and its entry change together.
 */
static u64 npfnic_ib_odp_clear_leaf(struct npfnic_ib_ucontext *uc, struct npfnic_pt *pt,
				    u64 va, u64 end)
{
	unsigned long first = va >> PAGE_SHIFT;
	u64 v, cur, changed = 0;
	bool pinned;
	void *ref;

	spin_lock(&uc->pt_lock);
	pinned = xa_find(&uc->refs, &first, (end - 1) >> PAGE_SHIFT, XA_PRESENT);
	for (v = va; v < end; v += PAGE_SIZE) {
		__le64 *pte = &pt->e[npfnic_ib_pte_index(v)];

		cur = le64_to_cpu(READ_ONCE(*pte));
		if (!cur)
			continue;
		ref = pinned ? xa_load(&uc->refs, v >> PAGE_SHIFT) : NULL;
		if (!ref) {
			WRITE_ONCE(*pte, 0);
			changed++;
		} else if ((cur & NPFNIC_PTE_WRITE) && !npfnic_ib_ref_w(xa_to_value(ref))) {
			WRITE_ONCE(*pte, cpu_to_le64(cur & ~NPFNIC_PTE_WRITE));
			changed++;
		}
	}
	spin_unlock(&uc->pt_lock);
	return changed;
}

/* Whether the umem has a page of the process's [start, end) DMA-mapped (umem_mutex held). */
static bool npfnic_ib_odp_mapped(struct ib_umem_odp *odp, unsigned long start, unsigned long end)
{
	size_t k = (start - ib_umem_start(odp)) >> odp->page_shift;
	size_t last = (end - ib_umem_start(odp)) >> odp->page_shift;

	for (; k < last; k++) {
		if (odp->dma_list[k])
			return true;
	}
	return false;
}

/*
 * Takes the process's pages [start, end) of mr away from the device
 * (umem_mutex held): clears the PTEs of the range, drops the device's
 * cached translations of it and waits until no DMA uses them, then
 * DMA-unmaps the MR's pages. Returns how many PTEs changed. The cached
 * translations are dropped whenever the MR had a page of the range
 * mapped, even if no PTE of it was left to clear: another MR's fault may
 * have replaced the entry (its own mapping of the page), while the
 * device still caches this MR's. A page is mapped only with its leaf
 * table in place (npfnic_ib_odp_map), so only those tables' parts of the
 * range are looked at, and none when the MR maps nothing: the cost
 * follows what is mapped, not the size of the range.
 */
static u64 npfnic_ib_odp_drop(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr,
			      struct ib_umem_odp *odp, unsigned long start, unsigned long end)
{
	u64 va = npfnic_ib_odp_iova(mr, odp, start), va_end = va + (end - start);
	struct npfnic_ib_ucontext *uc = mr->uc;
	u64 zapped = 0, v, to;
	struct npfnic_pt *pt;
	bool had = false;

	lockdep_assert_held(&odp->umem_mutex);
	if (!odp->npages)
		return 0;
	for (v = va; (pt = npfnic_pt_next_leaf(uc->root, &v, va_end)); v = to) {
		to = npfnic_pt_leaf_end(v, va_end);
		zapped += npfnic_ib_odp_clear_leaf(uc, pt, v, to);
		had = had || npfnic_ib_odp_mapped(odp, start + (v - va), start + (to - va));
		cond_resched();
	}
	/*
	 * Nothing else can be done if the device does not confirm: it is
	 * stopped then (npfnic_ib_invalidate), and the pages go either way.
	 */
	if ((zapped || had) &&
	    npfnic_ib_invalidate(dev, uc->pasid, va, (end - start) >> PAGE_SHIFT))
		dev_err_ratelimited(&dev->nic->pdev->dev,
				    "MR %#x: translations of %#llx..%#llx not dropped\n",
				    (mr->parent ?: mr)->ibmr.lkey, va, va_end);
	for (v = va; npfnic_pt_next_leaf(uc->root, &v, va_end); v = to) {
		to = npfnic_pt_leaf_end(v, va_end);
		ib_umem_odp_unmap_dma_pages(odp, start + (v - va), start + (to - va));
		cond_resched();
	}
	return zapped;
}

static bool npfnic_ib_odp_invalidate(struct mmu_interval_notifier *mni,
				     const struct mmu_notifier_range *range, unsigned long cur_seq)
{
	struct ib_umem_odp *odp = container_of(mni, struct ib_umem_odp, notifier);
	struct npfnic_ib_mr *mr = odp->private, *counted;
	unsigned long start, end;
	u64 zapped;

	if (!mmu_notifier_range_blockable(range))
		return false;
	mutex_lock(&odp->umem_mutex);
	mmu_interval_set_seq(mni, cur_seq);
	start = max(range->start, ib_umem_start(odp));
	end = min(range->end, ib_umem_end(odp));
	/*
	 * Without private the MR is not registered yet, or its dereg took
	 * every page away already: nothing is mapped.
	 */
	if (mr && start < end) {
		zapped = npfnic_ib_odp_drop(mr->dev, mr, odp, start, end);
		/* An implicit MR's child counts for its parent, the MR user space knows. */
		counted = mr->parent ?: mr;
		if (zapped) {
			atomic64_inc(&mr->dev->odp.invalidations);
			atomic64_add(zapped, &mr->dev->odp.pages_invalidated);
			atomic64_add(zapped, &counted->page_invalidations);
		}
		/* A child with nothing mapped goes, as mlx5's do; the next fault makes another. */
		if (mr->parent && !odp->npages && !READ_ONCE(mr->parent->imr_dead))
			queue_work(system_unbound_wq, &mr->parent->reap);
	}
	mutex_unlock(&odp->umem_mutex);
	return true;
}

static const struct mmu_interval_notifier_ops npfnic_ib_odp_ops = {
	.invalidate = npfnic_ib_odp_invalidate,
};

/* ---- implicit MRs' children ---- */

/* A child's end: its translations, then its umem and notifier (no user left). */
static void npfnic_ib_imr_free_child(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *child)
{
	struct ib_umem_odp *odp = to_ib_umem_odp(child->umem);

	mutex_lock(&odp->umem_mutex);
	npfnic_ib_odp_drop(dev, child, odp, ib_umem_start(odp), ib_umem_end(odp));
	odp->private = NULL;
	mutex_unlock(&odp->umem_mutex);
	/* Waits for a notifier call still running. */
	ib_umem_odp_release(odp);
	kfree(child);
}

/* Frees the children that have nothing mapped and no user (system_unbound_wq). */
static void npfnic_ib_imr_reap(struct work_struct *work)
{
	struct npfnic_ib_mr *imr = container_of(work, struct npfnic_ib_mr, reap);
	struct npfnic_ib_mr *child, *tmp;
	struct ib_umem_odp *odp;
	unsigned long idx;
	LIST_HEAD(gone);
	bool empty;

	mutex_lock(&imr->imr_lock);
	if (!imr->imr_dead) {
		xa_for_each(&imr->children, idx, child) {
			if (child->odp_users)
				continue;
			odp = to_ib_umem_odp(child->umem);
			mutex_lock(&odp->umem_mutex);
			empty = !odp->npages;
			mutex_unlock(&odp->umem_mutex);
			if (!empty)
				continue;
			xa_erase(&imr->children, idx);
			list_add(&child->odp_node, &gone);
		}
	}
	mutex_unlock(&imr->imr_lock);
	list_for_each_entry_safe(child, tmp, &gone, odp_node) {
		list_del(&child->odp_node);
		npfnic_ib_imr_free_child(imr->dev, child);
	}
}

/*
 * Every child of a dying implicit MR goes (no resolution holds the MR any
 * more, so no child has a user); then the reap work, which only a
 * child's notifier queues.
 */
static void npfnic_ib_imr_destroy(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *imr)
{
	struct npfnic_ib_mr *child, *tmp;
	unsigned long idx;
	LIST_HEAD(gone);

	mutex_lock(&imr->imr_lock);
	imr->imr_dead = true;
	xa_for_each(&imr->children, idx, child) {
		WARN_ON(child->odp_users);
		xa_erase(&imr->children, idx);
		list_add(&child->odp_node, &gone);
	}
	mutex_unlock(&imr->imr_lock);
	list_for_each_entry_safe(child, tmp, &gone, odp_node) {
		list_del(&child->odp_node);
		npfnic_ib_imr_free_child(dev, child);
		cond_resched();
	}
	cancel_work_sync(&imr->reap);
	xa_destroy(&imr->children);
}

/* ---- synthetic receive faults ---- */

/*
 * Drops the translation of a random mapped page of mr, as an invalidation
 * of that page would; false if none of NPFNIC_IB_RNPF_PROBES pages drawn
 * had one. The first mapped page drawn is taken, so every mapped page is
 * as likely, and the pages the device never touches (the MR's unused
 * part) do not thin the rate out.
 */
static bool npfnic_ib_odp_evict(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr)
{
	struct ib_umem_odp *odp = to_ib_umem_odp(mr->umem);
	u64 base = mr->va & PAGE_MASK;
	u64 pages = (PAGE_ALIGN(mr->va + mr->length) - base) >> PAGE_SHIFT;
	bool evicted = false;
	unsigned long user;
	__le64 *pte;
	int i;

	mutex_lock(&odp->umem_mutex);
	for (i = 0; i < NPFNIC_IB_RNPF_PROBES && odp->npages && !evicted; i++) {
		u64 k = get_random_u32_below(pages);

		pte = npfnic_pt_walk(dev->nic, mr->uc->root, base + (k << PAGE_SHIFT), false);
		if (pte && READ_ONCE(*pte)) {
			user = ib_umem_start(odp) + (k << PAGE_SHIFT);
			evicted = npfnic_ib_odp_drop(dev, mr, odp, user, user + PAGE_SIZE);
		}
	}
	mutex_unlock(&odp->umem_mutex);
	return evicted;
}

/* Evicts a page of a random child of implicit MR imr (held). */
static bool npfnic_ib_imr_evict(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *imr)
{
	struct npfnic_ib_mr *child, *found = NULL;
	unsigned long idx;
	bool evicted;
	u32 n = 0;

	mutex_lock(&imr->imr_lock);
	xa_for_each(&imr->children, idx, child) {
		if (!get_random_u32_below(++n))
			found = child;
	}
	if (found)
		found->odp_users++;
	mutex_unlock(&imr->imr_lock);
	if (!found)
		return false;
	evicted = npfnic_ib_odp_evict(dev, found);
	npfnic_ib_imr_put_child(found);
	return evicted;
}

/* A random ODP MR of any context, held (NULL: none). */
static struct npfnic_ib_mr *npfnic_ib_odp_pick(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_mr *mr, *found = NULL;
	struct npfnic_ib_ucontext *uc;
	unsigned long pasid;
	u32 n = 0;

	mutex_lock(&dev->odp_lock);
	/* Reservoir sampling over every context's list. */
	xa_for_each(&dev->ucs, pasid, uc) {
		list_for_each_entry(mr, &uc->odp_mrs, odp_node) {
			if (!mr->odp_dying && !get_random_u32_below(++n))
				found = mr;
		}
	}
	if (found)
		WRITE_ONCE(found->odp_users, found->odp_users + 1);
	mutex_unlock(&dev->odp_lock);
	return found;
}

/*
 * The messages until the next synthetic fault, each faulting with
 * probability ppm / 10^6 (1 <= ppm <= 10^6): a geometric draw, capped at
 * what RDMA_MSG_ALARM holds.
 */
static u32 npfnic_ib_rnpf_gap(u32 ppm)
{
	u32 n = 1;

	while (n < U32_MAX && get_random_u32_below(NPFNIC_PPM) >= ppm)
		n++;
	return n;
}

/* Drops the translation of a random mapped page of a random ODP MR. */
static void npfnic_ib_rnpf_inject(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_mr *mr = npfnic_ib_odp_pick(dev);

	if (!mr) {
		atomic64_inc(&dev->odp.rnpf_skipped);
		return;
	}
	if (mr->implicit ? npfnic_ib_imr_evict(dev, mr) : npfnic_ib_odp_evict(dev, mr))
		atomic64_inc(&dev->odp.rnpf_injected);
	else
		atomic64_inc(&dev->odp.rnpf_skipped);
	npfnic_ib_odp_release_hold(dev, mr);
}

static void npfnic_ib_rnpf_work(struct work_struct *work)
{
	struct npfnic_ib_dev *dev = container_of(to_delayed_work(work), struct npfnic_ib_dev,
						 rnpf_work);
	u32 ppm = min_t(u32, READ_ONCE(dev->nic->rnpf_rate_ppm), NPFNIC_PPM);
	bool due = test_and_clear_bit(0, &dev->rnpf_due);

	if (!READ_ONCE(dev->pri.enabled))
		return;
	/*
	 * The next gap first, after this fault or for a new rate: the
	 * messages executed while the page is evicted count towards it.
	 */
	if (due || ppm != dev->rnpf_ppm) {
		dev->rnpf_ppm = ppm;
		iowrite32(ppm ? npfnic_ib_rnpf_gap(ppm) : 0,
			  dev->nic->bar0 + NPFNIC_REG_RDMA_MSG_ALARM);
	}
	if (due && ppm)
		npfnic_ib_rnpf_inject(dev);
	/* Not mod_: an alarm meanwhile queued this work to run at once. */
	queue_delayed_work(system_unbound_wq, &dev->rnpf_work, msecs_to_jiffies(NPFNIC_IB_RNPF_MS));
}

/* The device's MSG_ALARM event (interrupt context): a fault is due now. */
void npfnic_ib_rnpf_alarm(struct npfnic_ib_dev *dev)
{
	set_bit(0, &dev->rnpf_due);
	if (READ_ONCE(dev->pri.enabled))
		mod_delayed_work(system_unbound_wq, &dev->rnpf_work, 0);
}

/* ---- registration ---- */

/*
 * odp=all: every user MR is registered on demand, whatever its access
 * flags, so unmodified programs run unpinned (read at each registration;
 * explicit, the default, leaves it to IBV_ACCESS_ON_DEMAND).
 */
static bool npfnic_ib_odp_every;

static int npfnic_ib_odp_param_set(const char *val, const struct kernel_param *kp)
{
	if (sysfs_streq(val, "all"))
		WRITE_ONCE(npfnic_ib_odp_every, true);
	else if (sysfs_streq(val, "explicit"))
		WRITE_ONCE(npfnic_ib_odp_every, false);
	else
		return -EINVAL;
	return 0;
}

static int npfnic_ib_odp_param_get(char *buf, const struct kernel_param *kp)
{
	return scnprintf(buf, PAGE_SIZE, "%s\n",
			 READ_ONCE(npfnic_ib_odp_every) ? "all" : "explicit");
}

static const struct kernel_param_ops npfnic_ib_odp_param_ops = {
	.set = npfnic_ib_odp_param_set,
	.get = npfnic_ib_odp_param_get,
};
module_param_cb(odp, &npfnic_ib_odp_param_ops, NULL, 0644);
MODULE_PARM_DESC(odp, "on-demand paging of user MRs: explicit (IBV_ACCESS_ON_DEMAND asks for it; default) or all (every user MR, nothing pinned)");

bool npfnic_ib_odp_all(void)
{
	return READ_ONCE(npfnic_ib_odp_every);
}

/* Whether an implicit ODP MR can be registered (FEATURES.RDMA_IMPLICIT_ODP). */
bool npfnic_ib_odp_implicit_possible(struct npfnic_ib_dev *dev)
{
	return READ_ONCE(dev->pri.possible) &&
	       (dev->nic->features & NPFNIC_FEAT_RDMA_IMPLICIT_ODP);
}

/*
 * An ODP MR: its range watched from start (the process address of its
 * first byte), and listed in its context so its faults resolve. Nothing
 * is mapped: the first access of each page faults. It may overlap the
 * context's other MRs, pinned or not (the file's header). An implicit MR
 * (mr->implicit) watches nothing itself: its children do, made by the
 * faults that need them.
 */
int npfnic_ib_odp_reg(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr, u64 start)
{
	struct npfnic_ib_ucontext *uc = mr->uc;
	struct ib_umem_odp *odp;

	if (!READ_ONCE(dev->pri.possible))
		return -EOPNOTSUPP;
	if (mr->implicit) {
		if (!npfnic_ib_odp_implicit_possible(dev))
			return -EOPNOTSUPP;
		odp = ib_umem_odp_alloc_implicit(&dev->ibdev, mr->access & ~IB_ACCESS_HUGETLB);
		mutex_init(&mr->imr_lock);
		xa_init(&mr->children);
		INIT_WORK(&mr->reap, npfnic_ib_imr_reap);
	} else {
		/*
		 * A fault maps one 4 KiB page, huge pages too (hmm walks them
		 * a small page at a time): the umem keeps 4 KiB pages,
		 * whatever IBV_ACCESS_HUGETLB says of the memory.
		 */
		odp = ib_umem_odp_get(&dev->ibdev, start, mr->length,
				      mr->access & ~IB_ACCESS_HUGETLB, &npfnic_ib_odp_ops);
	}
	if (IS_ERR(odp))
		return PTR_ERR(odp);
	mutex_lock(&dev->odp_lock);
	mutex_lock(&odp->umem_mutex);
	odp->private = mr;
	mutex_unlock(&odp->umem_mutex);
	mr->umem = &odp->umem;
	mr->odp = true;
	list_add(&mr->odp_node, &uc->odp_mrs);
	mutex_unlock(&dev->odp_lock);
	return 0;
}

/*
 * The MR's end, whatever the device said of DEREG_MR: it reaches the
 * pages only through the context's translation, so once their PTEs are
 * cleared and invalidated it reaches none of them, and the notifier must
 * go before the context, the device or the module does. No new
 * resolution takes the MR, the one running finishes, every translation
 * goes (an implicit MR's children with theirs), then the umem and its
 * notifier.
 */
void npfnic_ib_odp_dereg(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr)
{
	struct ib_umem_odp *odp = to_ib_umem_odp(mr->umem);

	mutex_lock(&dev->odp_lock);
	mr->odp_dying = true;
	mutex_unlock(&dev->odp_lock);
	wait_event(dev->odp_wait, !READ_ONCE(mr->odp_users));
	if (mr->implicit) {
		npfnic_ib_imr_destroy(dev, mr);
	} else {
		mutex_lock(&odp->umem_mutex);
		npfnic_ib_odp_drop(dev, mr, odp, ib_umem_start(odp), ib_umem_end(odp));
		odp->private = NULL;
		mutex_unlock(&odp->umem_mutex);
	}
	/* Waits for a notifier call still running. */
	ib_umem_odp_release(odp);
	mr->umem = NULL;
	mutex_lock(&dev->odp_lock);
	list_del_init(&mr->odp_node);
	mutex_unlock(&dev->odp_lock);
}

/* ---- the device's side of it ---- */

/*
 * At probe, before registration: whether ODP is possible (the device
 * faults through PRI, and RDMA can use the translation engine); the
 * engine's RDMA work resolves the contexts' requests here from now on.
 */
int npfnic_ib_odp_init(struct npfnic_ib_dev *dev)
{
	struct npfnic *nic = dev->nic;

	mutex_init(&dev->odp_lock);
	xa_init(&dev->ucs);
	init_waitqueue_head(&dev->odp_wait);
	INIT_DELAYED_WORK(&dev->rnpf_work, npfnic_ib_rnpf_work);
	/* The contexts' page requests come here whether or not ODP is possible. */
	npfnic_xlat_rdma_attach(nic, dev);
	if (!IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING) || !npfnic_ib_ats_possible(dev) ||
	    !(nic->features & NPFNIC_FEAT_RDMA_ODP) || !nic->pri_pos)
		return 0;
	dev->pri.possible = true;
	return 0;
}

/* At removal, with every context gone. */
void npfnic_ib_odp_fini(struct npfnic_ib_dev *dev)
{
	/* The RDMA vector is quiet now (npfnic_ib_hw_fini): no alarm requeues it. */
	cancel_delayed_work_sync(&dev->rnpf_work);
	/* No resolution finds the device from here on. */
	npfnic_xlat_rdma_attach(dev->nic, NULL);
	WARN_ON(!xa_empty(&dev->ucs));
	xa_destroy(&dev->ucs);
}

/* The driver's counters after the device's, in npfnic_ib_odp_stat_names' order. */
void npfnic_ib_odp_get_stats(struct npfnic_ib_dev *dev, u64 *data)
{
	struct npfnic_ib_odp_stats *s = &dev->odp;

	data[0] = atomic64_read(&s->faults);
	data[1] = atomic64_read(&s->fault_errors);
	data[2] = atomic64_read(&s->pages_mapped);
	data[3] = atomic64_read(&s->invalidations);
	data[4] = atomic64_read(&s->pages_invalidated);
	data[5] = atomic64_read(&s->bad_requests);
	data[6] = atomic64_read(&s->rnpf_injected);
	data[7] = atomic64_read(&s->rnpf_skipped);
	data[8] = npfnic_hist_pct(dev->nic, NPFNIC_HIST_RDMA_FAULT, 50);
	data[9] = npfnic_hist_pct(dev->nic, NPFNIC_HIST_RDMA_FAULT, 99);
}

/*
 * An on-demand paging MR's counters, named as mlx5 names them:
 * page_faults counts the pages device faults mapped, page_invalidations
 * the pages the MR's notifier took from the device; page_prefetch stays
 * 0, as nothing can ask for a prefetch (librxe has no advise_mr). The
 * core asks for them as statistics (rdma statistic mr, iproute2 6.3 on)
 * and as the MR's resource entry (rdma -dd resource show mr: bookworm's
 * iproute2 6.1 has no rdma statistic mr).
 */
static int npfnic_ib_put_mr_counters(struct sk_buff *msg, const struct npfnic_ib_mr *mr,
				     int nest, int (*put)(struct sk_buff *, const char *, u64))
{
	struct nlattr *table = nla_nest_start(msg, nest);

	if (!table)
		return -EMSGSIZE;
	if (put(msg, "page_faults", atomic64_read(&mr->page_faults)) ||
	    put(msg, "page_invalidations", atomic64_read(&mr->page_invalidations)) ||
	    put(msg, "page_prefetch", 0)) {
		nla_nest_cancel(msg, table);
		return -EMSGSIZE;
	}
	nla_nest_end(msg, table);
	return 0;
}

int npfnic_ib_fill_stat_mr_entry(struct sk_buff *msg, struct ib_mr *ibmr)
{
	struct npfnic_ib_mr *mr = to_npfnic_ib_mr(ibmr);

	if (!mr->odp)
		return 0;
	return npfnic_ib_put_mr_counters(msg, mr, RDMA_NLDEV_ATTR_STAT_HWCOUNTERS,
					 rdma_nl_stat_hwcounter_entry);
}

int npfnic_ib_fill_res_mr_entry(struct sk_buff *msg, struct ib_mr *ibmr)
{
	struct npfnic_ib_mr *mr = to_npfnic_ib_mr(ibmr);

	if (!mr->odp)
		return 0;
	return npfnic_ib_put_mr_counters(msg, mr, RDMA_NLDEV_ATTR_DRIVER, rdma_nl_put_driver_u64);
}
