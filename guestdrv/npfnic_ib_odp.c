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
 * Resolution, in that work (mlx5's pagefault_mr is the model): find the
 * MR of the PASID's context that covers the VA and hold it; make sure the
 * page tables down to the VA's PTE exist (as_lock, the only allocation on
 * the way); ib_umem_odp_map_dma_and_lock faults the
 * page in and DMA-maps it, and returns with umem_mutex held; the PTE is
 * entered; umem_mutex is dropped; then the page response.
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
 * Locking. Reclaim runs the notifier, so nothing that holds a lock the
 * notifier may wait for allocates memory that can reclaim: the notifier
 * takes umem_mutex, then the engine's xlat.inv_lock (npfnic_ib_invalidate),
 * never as_lock,
 * and umem_mutex is never held while allocating or taking as_lock. The
 * PTEs of an ODP MR are its own (MRs of a context do not overlap) and
 * change only under its umem_mutex; the tables they sit in are walked
 * without as_lock, which npfnic_pt_walk allows: tables are only added, and
 * the context's tree lives longer than its MRs. Order: dev->odp_lock
 * before as_lock (pinned registration) and before umem_mutex (ODP
 * registration sets the umem's private). An ODP MR shares its context's
 * page tables with the pinned MRs, so it may not overlap another MR of
 * its context; it keeps its pages reserved (in uc->odp_mrs) until its
 * translations are gone.
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

/* The MR of context pasid covering va, held for a resolution (NULL: none). */
static struct npfnic_ib_mr *npfnic_ib_odp_hold(struct npfnic_ib_dev *dev, u32 pasid, u64 va)
{
	struct npfnic_ib_ucontext *uc;
	struct npfnic_ib_mr *mr, *found = NULL;

	mutex_lock(&dev->odp_lock);
	uc = xa_load(&dev->ucs, pasid);
	if (uc) {
		list_for_each_entry(mr, &uc->odp_mrs, odp_node) {
			if (!mr->odp_dying &&
			    va - (mr->va & PAGE_MASK) < PAGE_ALIGN(mr->va + mr->length) -
							(mr->va & PAGE_MASK)) {
				found = mr;
				WRITE_ONCE(found->odp_users, found->odp_users + 1);
				break;
			}
		}
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

/* Makes the page at va present in the MR's context, writable if write. */
static int npfnic_ib_odp_map(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr, u64 va,
			     bool write)
{
	struct ib_umem_odp *odp = to_ib_umem_odp(mr->umem);
	struct npfnic_ib_ucontext *uc = mr->uc;
	u64 user = ib_umem_start(odp) + ((va & PAGE_MASK) - (mr->va & PAGE_MASK));
	u64 mask = ODP_READ_ALLOWED_BIT;
	dma_addr_t dma;
	__le64 *pte;
	int n;

	if (write) {
		if (!mr->umem->writable)
			return -EACCES;
		mask |= ODP_WRITE_ALLOWED_BIT;
	}
	/*
	 * The tables down to the PTE first, under as_lock alone: a table
	 * allocation may reclaim, and reclaim may run the notifier, which
	 * takes umem_mutex. They stay until the context goes.
	 */
	mutex_lock(&uc->as_lock);
	pte = npfnic_pt_walk(dev->nic, uc->root, va & PAGE_MASK, true);
	mutex_unlock(&uc->as_lock);
	if (!pte)
		return -ENOMEM;
	n = ib_umem_odp_map_dma_and_lock(odp, user, PAGE_SIZE, mask, true);
	if (n < 0)
		return n;
	/* umem_mutex held: no invalidation of the page until the PTE is in. */
	dma = odp->dma_list[(user - ib_umem_start(odp)) >> odp->page_shift];
	/* The page before the entry that lets the device reach it. */
	dma_wmb();
	WRITE_ONCE(*pte, cpu_to_le64((dma & ODP_DMA_ADDR_MASK & NPFNIC_PTE_ADDR_MASK) |
				     NPFNIC_PTE_PRESENT |
				     (dma & ODP_WRITE_ALLOWED_BIT ? NPFNIC_PTE_WRITE : 0)));
	mutex_unlock(&odp->umem_mutex);
	atomic64_inc(&dev->odp.pages_mapped);
	return 0;
}

/* Resolves one page of a request: 0, or why the group is refused. */
static int npfnic_ib_odp_fault(struct npfnic_ib_dev *dev, u32 pasid, u64 va, bool write,
			       u64 isr)
{
	struct npfnic_ib_mr *mr = npfnic_ib_odp_hold(dev, pasid, va);
	int err;

	if (!mr)
		return -ENOENT;
	/* fault_delay_us emulates a major fault here too. */
	npfnic_fault_sleep(isr);
	err = npfnic_ib_odp_map(dev, mr, va, write);
	if (!err)
		atomic64_inc(&mr->page_faults);
	npfnic_ib_odp_release_hold(dev, mr);
	return err;
}

/*
 * One page request of a context's PASID, from the engine's RDMA work
 * (npfnic_xlat.c), in the order the device raised them: its page resolved
 * into its group, the group answered at its last request. A group of an
 * earlier run of the engine (gen) was abandoned by its reset.
 */
void npfnic_ib_page_request(struct npfnic_ib_dev *dev, const struct npfnic_xlat_req *r)
{
	struct npfnic_ib_pri *pri = &dev->pri;
	struct npfnic_ib_prg *g;
	int err;

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
	if (!g->failed) {
		err = npfnic_ib_odp_fault(dev, r->pasid, r->addr, r->flags & NPFNIC_PRQ_WRITE,
					  r->isr_ns);
		if (err) {
			g->failed = true;
			dev_dbg_ratelimited(&dev->nic->pdev->dev,
					    "RDMA page request PASID %u %#llx%s: %d\n", r->pasid,
					    r->addr, r->flags & NPFNIC_PRQ_WRITE ? " (write)" : "",
					    err);
		}
	}
	if (!(r->flags & NPFNIC_PRQ_LAST))
		return;
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

/*
 * Takes the process's pages [start, end) of mr away from the device
 * (umem_mutex held): clears their PTEs, drops the device's cached
 * translations of them and waits until no DMA uses them, then DMA-unmaps
 * them. Returns how many PTEs were set. A page is mapped only with its
 * leaf table in place (npfnic_ib_odp_map), so only those tables' parts of
 * the range are looked at, and none when the MR maps nothing: the cost
 * follows what is mapped, not the size of the range.
 */
static u64 npfnic_ib_odp_drop(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr,
			      struct ib_umem_odp *odp, unsigned long start, unsigned long end)
{
	u64 va = npfnic_ib_odp_iova(mr, odp, start), va_end = va + (end - start);
	struct npfnic_pt *root = mr->uc->root;
	u64 zapped, v, to;

	lockdep_assert_held(&odp->umem_mutex);
	if (!odp->npages)
		return 0;
	zapped = npfnic_pt_clear(root, va, va_end);
	/*
	 * Nothing else can be done if the device does not confirm: it is
	 * stopped then (npfnic_ib_invalidate), and the pages go either way.
	 */
	if (zapped && npfnic_ib_invalidate(dev, mr->uc->pasid, va, (end - start) >> PAGE_SHIFT))
		dev_err_ratelimited(&dev->nic->pdev->dev,
				    "MR %#x: translations of %#llx..%#llx not dropped\n",
				    mr->ibmr.lkey, va, va_end);
	for (v = va; npfnic_pt_next_leaf(root, &v, va_end); v = to) {
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
	struct npfnic_ib_mr *mr = odp->private;
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
		if (zapped) {
			atomic64_inc(&mr->dev->odp.invalidations);
			atomic64_add(zapped, &mr->dev->odp.pages_invalidated);
			atomic64_add(zapped, &mr->page_invalidations);
		}
	}
	mutex_unlock(&odp->umem_mutex);
	return true;
}

static const struct mmu_interval_notifier_ops npfnic_ib_odp_ops = {
	.invalidate = npfnic_ib_odp_invalidate,
};

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
	if (npfnic_ib_odp_evict(dev, mr))
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

/* Whether [va, va + length) of uc has a pinned MR's page (odp_lock held). */
static bool npfnic_ib_odp_over_pinned(struct npfnic_ib_ucontext *uc, u64 va, u64 length)
{
	unsigned long idx = va >> PAGE_SHIFT, last = (va + length - 1) >> PAGE_SHIFT;
	bool pinned;

	mutex_lock(&uc->as_lock);
	pinned = xa_find(&uc->refs, &idx, last, XA_PRESENT);
	mutex_unlock(&uc->as_lock);
	return pinned;
}

/* Whether [va, va + length) of uc overlaps a page of one of its ODP MRs (odp_lock held). */
bool npfnic_ib_odp_overlaps(struct npfnic_ib_ucontext *uc, u64 va, u64 length)
{
	unsigned long first = va >> PAGE_SHIFT, last = (va + length - 1) >> PAGE_SHIFT;
	struct npfnic_ib_mr *mr;

	list_for_each_entry(mr, &uc->odp_mrs, odp_node) {
		if (first <= (mr->va + mr->length - 1) >> PAGE_SHIFT &&
		    mr->va >> PAGE_SHIFT <= last)
			return true;
	}
	return false;
}

/*
 * An ODP MR: its range watched from start (the process address of its
 * first byte), and listed in its context so its faults resolve. Nothing
 * is mapped: the first access of each page faults.
 */
int npfnic_ib_odp_reg(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr, u64 start)
{
	struct npfnic_ib_ucontext *uc = mr->uc;
	struct ib_umem_odp *odp;
	int err = 0;

	if (!READ_ONCE(dev->pri.possible))
		return -EOPNOTSUPP;
	/*
	 * A fault maps one 4 KiB page, huge pages too (hmm walks them a
	 * small page at a time): the umem keeps 4 KiB pages, whatever
	 * IBV_ACCESS_HUGETLB says of the memory.
	 */
	odp = ib_umem_odp_get(&dev->ibdev, start, mr->length, mr->access & ~IB_ACCESS_HUGETLB,
			      &npfnic_ib_odp_ops);
	if (IS_ERR(odp))
		return PTR_ERR(odp);
	mutex_lock(&dev->odp_lock);
	if (npfnic_ib_odp_overlaps(uc, mr->va, mr->length) ||
	    npfnic_ib_odp_over_pinned(uc, mr->va, mr->length)) {
		err = -EBUSY;
	} else {
		mutex_lock(&odp->umem_mutex);
		odp->private = mr;
		mutex_unlock(&odp->umem_mutex);
		mr->umem = &odp->umem;
		mr->odp = true;
		list_add(&mr->odp_node, &uc->odp_mrs);
	}
	mutex_unlock(&dev->odp_lock);
	if (err)
		ib_umem_odp_release(odp);
	return err;
}

/*
 * The MR's end, whatever the device said of DEREG_MR: it reaches the
 * pages only through the context's translation, so once their PTEs are
 * cleared and invalidated it reaches none of them, and the notifier must
 * go before the context, the device or the module does. No new
 * resolution takes the MR, the one running finishes, every translation
 * goes, then the umem and its notifier; only then may another MR come
 * over its pages.
 */
void npfnic_ib_odp_dereg(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr)
{
	struct ib_umem_odp *odp = to_ib_umem_odp(mr->umem);

	mutex_lock(&dev->odp_lock);
	mr->odp_dying = true;
	mutex_unlock(&dev->odp_lock);
	wait_event(dev->odp_wait, !READ_ONCE(mr->odp_users));
	mutex_lock(&odp->umem_mutex);
	npfnic_ib_odp_drop(dev, mr, odp, ib_umem_start(odp), ib_umem_end(odp));
	odp->private = NULL;
	mutex_unlock(&odp->umem_mutex);
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
