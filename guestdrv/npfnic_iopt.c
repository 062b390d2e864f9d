// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic I/O page tables: the translation the device walks for PASID 0
 * (x86-64 style, four levels of 4 KiB tables in coherent memory), built
 * on demand, and what takes RX translations away again (cool, synthetic
 * rNPFs). The RDMA contexts' tables have the same format and walkers
 * (npfnic_ib_mr.c); the engine that walks them all, with the PASID table
 * and the invalidation queue, is npfnic_xlat.c's.
 *
 * What is mapped where (see npfnic_npf.c for the policies):
 *  - RX slot (q, i) is one page at npfnic_rx_va(q, i), allocated, DMA
 *    mapped and entered writable only when it is needed: by a page request
 *    (npfnic_fault.c) or a backup frame (npfnic_backup.c).
 *    With fault_ahead N, a resolved RX fault also backs the next N cold
 *    slots of its ring (npfnic_fault_ahead).
 *  - A TX buffer page is entered read-only at its identity VA on its first
 *    fault and stays, so the identity stays correct.
 *  - pin enters every RX slot and all of RAM at open.
 *
 * Invalidation is a separate, synchronous path, like mlx5's
 * invalidate_range: clear the PTEs, then npfnic_xlat_invalidate_n for
 * PASID 0 (RANGE descriptors and one WAIT; npfnic_xlat.c). Once that
 * returns 0 no DMA uses, or will use, a dropped translation, and the
 * pages may go. It never waits for a page response. Its users here:
 *  - cool (sysfs, npfnic_main.c) takes every RX slot page away so the
 *    next frames fault again;
 *  - synthetic rNPFs (rnpf_rate_ppm; Lesokhin et al., section 6.4): for
 *    each frame NAPI receives it draws one with probability rate / 10^6;
 *    the rnpf work takes the translation of a random posted slot the
 *    device has not reached, a real PTE clear and invalidation, so the
 *    device faults on it and the fault takes the whole path (page
 *    request, or backup ring, then response). The page itself stays, as a minor fault finds it in
 *    memory: the fault path enters it again at once (fault_delay_us makes
 *    it a major one). Keeping it also means no frame the device wrote
 *    just before the invalidation can lose its buffer, so NAPI needs no
 *    pause. At most NPFNIC_RNPF_PENDING per pair wait for the work; NAPI
 *    counts the rest as skipped. Only drop and backup have translations
 *    to take: under pin and off the knob does nothing.
 *
 * Locking: npf.lock covers the page tables and the RX slot pages (every
 * function that walks or changes them asserts it); the invalidation
 * queue's xlat.inv_lock nests inside it where both are held. rtnl
 * serialises cool with open and stop. The rnpf work clears PTEs under
 * npf.lock and invalidates after dropping it, so faults are not held up by
 * the round trip; close cancels it. NAPI takes no lock: it reads a slot's
 * page with acquire semantics, and cool disables it while pages go away.
 */

#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/ioport.h>
#include <linux/mm.h>
#include <linux/random.h>
#include <linux/rtnetlink.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>

#include "npfnic.h"

#define NPFNIC_PT_ENTRIES	BIT(NPFNIC_XLAT_LEVEL_BITS)

/* ---- I/O page tables ---- */

static unsigned int npfnic_pt_index(u64 va, int level)
{
	return (va >> (NPFNIC_XLAT_PAGE_SHIFT + NPFNIC_XLAT_LEVEL_BITS * (level - 1))) &
	       (NPFNIC_PT_ENTRIES - 1);
}

struct npfnic_pt *npfnic_pt_alloc(struct npfnic *nic, bool children)
{
	struct device *dev = &nic->pdev->dev;
	struct npfnic_pt *pt;

	pt = kzalloc(sizeof(*pt), GFP_KERNEL);
	if (!pt)
		return NULL;
	/* Coherent memory comes zeroed: every entry starts not present. */
	pt->e = dma_alloc_coherent(dev, NPFNIC_PAGE_SIZE, &pt->dma, GFP_KERNEL);
	if (children)
		pt->child = kcalloc(NPFNIC_PT_ENTRIES, sizeof(*pt->child), GFP_KERNEL);
	if (!pt->e || (children && !pt->child)) {
		if (pt->e)
			dma_free_coherent(dev, NPFNIC_PAGE_SIZE, pt->e, pt->dma);
		kfree(pt->child);
		kfree(pt);
		return NULL;
	}
	atomic64_inc(&nic->nstats.pt_pages);
	return pt;
}

void npfnic_pt_free(struct npfnic *nic, struct npfnic_pt *pt)
{
	unsigned int i;

	if (!pt)
		return;
	if (pt->child) {
		for (i = 0; i < NPFNIC_PT_ENTRIES; i++)
			npfnic_pt_free(nic, pt->child[i]);
		kfree(pt->child);
	}
	dma_free_coherent(&nic->pdev->dev, NPFNIC_PAGE_SIZE, pt->e, pt->dma);
	atomic64_dec(&nic->nstats.pt_pages);
	kfree(pt);
}

/*
 * The leaf entry of va in the tables under root, creating the tables on
 * the way when alloc is set (NULL when one is missing, or out of memory).
 * Intermediate entries are present and writable: whether a page is
 * writable is the leaf's call. A walk that allocates holds the lock of
 * root's address space: npf.lock for PASID 0 (npfnic_pte), a user
 * context's as_lock for the RDMA ones (npfnic_ib_mr.c). Tables are only
 * added until the whole tree is freed, and a new one is published only
 * once initialised, so a walk without alloc (and npfnic_pt_next_leaf,
 * npfnic_pt_clear) may run without that lock where the tree cannot be
 * freed meanwhile (the RDMA contexts' on-demand paging, npfnic_ib_odp.c).
 */
__le64 *npfnic_pt_walk(struct npfnic *nic, struct npfnic_pt *root, u64 va, bool alloc)
{
	struct npfnic_pt *pt = root;
	int level;

	if (!pt)
		return NULL;
	for (level = NPFNIC_XLAT_LEVELS; level > 1; level--) {
		unsigned int idx = npfnic_pt_index(va, level);
		struct npfnic_pt *next = READ_ONCE(pt->child[idx]);

		if (!next) {
			if (!alloc)
				return NULL;
			next = npfnic_pt_alloc(nic, level - 1 > 1);
			if (!next)
				return NULL;
			/* Initialised before lockless walks can find it. */
			smp_store_release(&pt->child[idx], next);
			/* The zeroed table before the entry that lets the device walk it. */
			dma_wmb();
			WRITE_ONCE(pt->e[idx], cpu_to_le64((next->dma & NPFNIC_PTE_ADDR_MASK) |
							   NPFNIC_PTE_PRESENT | NPFNIC_PTE_WRITE));
		}
		pt = next;
	}
	return &pt->e[npfnic_pt_index(va, 1)];
}

/* The bytes one leaf table maps. */
#define NPFNIC_PT_LEAF_SPAN	BIT_ULL(NPFNIC_XLAT_PAGE_SHIFT + NPFNIC_XLAT_LEVEL_BITS)

/*
 * The leaf table under root that maps *va, after moving *va forward past
 * the tables that are missing (whole subtrees at a time), or NULL once *va
 * reaches end: a walk over a huge, sparse range costs what is present in
 * it. The lock rules are npfnic_pt_walk's without alloc.
 */
struct npfnic_pt *npfnic_pt_next_leaf(struct npfnic_pt *root, u64 *va, u64 end)
{
	while (root && *va < end) {
		struct npfnic_pt *pt = root, *next;
		int level;
		u64 span;

		for (level = NPFNIC_XLAT_LEVELS; level > 1; level--) {
			next = READ_ONCE(pt->child[npfnic_pt_index(*va, level)]);
			if (!next)
				break;
			pt = next;
		}
		if (level == 1)
			return pt;
		/* What the missing entry of this level would have mapped. */
		span = BIT_ULL(NPFNIC_XLAT_PAGE_SHIFT + NPFNIC_XLAT_LEVEL_BITS * (level - 1));
		*va = (*va & ~(span - 1)) + span;
	}
	return NULL;
}

/* The end of the leaf table's part of [va, end). */
u64 npfnic_pt_leaf_end(u64 va, u64 end)
{
	return min(end, (va & ~(NPFNIC_PT_LEAF_SPAN - 1)) + NPFNIC_PT_LEAF_SPAN);
}

/*
 * Clears the leaf entries of [va, end) under root and returns how many
 * were set; missing tables are skipped whole (npfnic_pt_next_leaf). May
 * sleep between tables. The device may hold the cleared translations
 * until they are invalidated.
 */
u64 npfnic_pt_clear(struct npfnic_pt *root, u64 va, u64 end)
{
	struct npfnic_pt *pt;
	u64 cleared = 0, to;
	unsigned int i;

	for (; (pt = npfnic_pt_next_leaf(root, &va, end)); va = to) {
		to = npfnic_pt_leaf_end(va, end);
		for (i = npfnic_pt_index(va, 1); i <= npfnic_pt_index(to - 1, 1); i++) {
			if (READ_ONCE(pt->e[i])) {
				WRITE_ONCE(pt->e[i], 0);
				cleared++;
			}
		}
		cond_resched();
	}
	return cleared;
}

/* The leaf entry of va in PASID 0's tables (npfnic_pt_walk). */
__le64 *npfnic_pte(struct npfnic *nic, u64 va, bool alloc)
{
	lockdep_assert_held(&nic->npf.lock);
	return npfnic_pt_walk(nic, nic->npf.root, va, alloc);
}

bool npfnic_pte_present(__le64 *pte)
{
	return pte && (le64_to_cpu(READ_ONCE(*pte)) & NPFNIC_PTE_PRESENT);
}

/* Enters an RX slot's page writable. */
static void npfnic_set_rx_pte(__le64 *pte, dma_addr_t dma)
{
	WRITE_ONCE(*pte, cpu_to_le64((dma & NPFNIC_PTE_ADDR_MASK) | NPFNIC_PTE_PRESENT |
				     NPFNIC_PTE_WRITE));
}

/*
 * Backs RX slot i of qp with a page, DMA mapped, entered writable; a page
 * a synthetic rNPF evicted is entered again as it is.
 */
static int npfnic_map_rx_slot(struct npfnic *nic, struct npfnic_qp *qp, u32 i)
{
	struct npfnic_rx_slot *slot = &qp->rx_slots[i];
	struct device *dev = &nic->pdev->dev;
	struct page *page;
	dma_addr_t dma;
	__le64 *pte;

	lockdep_assert_held(&nic->npf.lock);
	if (slot->page && !slot->evicted)
		return 0;
	pte = npfnic_pte(nic, npfnic_rx_va(qp->idx, i), true);
	if (!pte)
		return -ENOMEM;
	if (slot->page) {
		npfnic_set_rx_pte(pte, slot->dma);
		WRITE_ONCE(slot->evicted, false);
		return 0;
	}
	page = alloc_page(GFP_KERNEL);
	if (!page)
		return -ENOMEM;
	dma = dma_map_page(dev, page, 0, PAGE_SIZE, DMA_BIDIRECTIONAL);
	if (dma_mapping_error(dev, dma)) {
		__free_page(page);
		return -ENOMEM;
	}
	slot->dma = dma;
	dma_wmb();
	npfnic_set_rx_pte(pte, dma);
	/* Pairs with the acquire in NAPI: dma is set before the page shows. */
	smp_store_release(&slot->page, page);
	atomic64_inc(&nic->nstats.slot_pages);
	return 0;
}

/* Fault resolution: slot i backed, timed as fault_map (alloc + map + PTE). */
int npfnic_fault_rx_slot(struct npfnic *nic, struct npfnic_qp *qp, u32 i)
{
	u64 start = ktime_get_ns();
	int err;

	lockdep_assert_held(&nic->npf.lock);
	if (npfnic_rx_slot_resident(&qp->rx_slots[i]))
		return 0;
	err = npfnic_map_rx_slot(nic, qp, i);
	if (!err)
		npfnic_since(nic, NPFNIC_HIST_FAULT_MAP, start);
	return err;
}

/*
 * fault_ahead (seed 004's PI4/PIA prefault policies, for a ring): once the
 * fault of RX descriptor desc (free-running) of qp was answered, the next
 * fault_ahead slots in ring order that never had a page get one too, so a
 * cold ring takes about one fault in fault_ahead + 1. The N slots counted
 * start where the device has got to (rx_head + rx_head_offset in the
 * status block) when that lies ahead of desc: frames that arrived while
 * the fault was resolved already faulted on the slots up to there, so
 * prefaulting those alone would stay behind the device. The position is a
 * hint from device memory: one beyond a ring ahead of desc is ignored, and
 * at most one ring's worth of slots is looked at. Slots holding a page
 * (resident, or evicted by a synthetic rNPF) are left as they are: only
 * cold slots are prefaulted. Called by the fault paths after their
 * response, so the faulting frame does not wait for the pages ahead; takes
 * npf.lock.
 */
void npfnic_fault_ahead(struct npfnic *nic, struct npfnic_qp *qp, u32 desc)
{
	struct npfnic_pair_status *st = npfnic_pair_status(nic, qp->idx);
	u32 n = READ_ONCE(nic->fault_ahead), pos, span, k, done = 0;

	if (!n)
		return;
	pos = le32_to_cpu(READ_ONCE(st->rx_head)) + le32_to_cpu(READ_ONCE(st->rx_head_offset));
	if ((s32)(pos - desc) <= 0 || pos - desc >= qp->rx_size)
		pos = desc + 1;
	span = min_t(u64, (u64)(pos - desc - 1) + n, qp->rx_size - 1);
	mutex_lock(&nic->npf.lock);
	for (k = 1; k <= span && READ_ONCE(nic->npf.active); k++) {
		u32 j = (desc + k) & (qp->rx_size - 1);

		if (READ_ONCE(qp->rx_slots[j].page))
			continue;
		if (npfnic_map_rx_slot(nic, qp, j))
			break;
		done++;
	}
	mutex_unlock(&nic->npf.lock);
	atomic64_add(done, &nic->nstats.rx_prefaulted);
}

/* Takes slot i's page away (its PTE must be cleared and invalidated). */
static void npfnic_unmap_rx_slot(struct npfnic *nic, struct npfnic_rx_slot *slot)
{
	struct page *page = slot->page;

	if (!page)
		return;
	WRITE_ONCE(slot->page, NULL);
	WRITE_ONCE(slot->evicted, false);
	dma_unmap_page(&nic->pdev->dev, slot->dma, PAGE_SIZE, DMA_BIDIRECTIONAL);
	__free_page(page);
	atomic64_dec(&nic->nstats.slot_pages);
}

void npfnic_free_rx_slots(struct npfnic_qp *qp)
{
	struct npfnic_pending *p, *tmp;
	u32 i;

	list_for_each_entry_safe(p, tmp, &qp->bk_pending, list) {
		list_del(&p->list);
		kfree(p);
	}
	qp->bk_npending = 0;
	if (!qp->rx_slots)
		return;
	for (i = 0; i < qp->rx_size; i++)
		npfnic_unmap_rx_slot(qp->nic, &qp->rx_slots[i]);
	kvfree(qp->rx_slots);
	qp->rx_slots = NULL;
}

bool npfnic_is_ram(u64 addr, u64 len)
{
	return region_intersects(addr, len, IORESOURCE_SYSTEM_RAM, IORES_DESC_NONE) ==
	       REGION_INTERSECTS;
}

/* Enters the RAM page at addr read-only at its identity VA (TX buffers). */
int npfnic_map_identity(struct npfnic *nic, u64 addr)
{
	__le64 *pte;

	lockdep_assert_held(&nic->npf.lock);
	pte = npfnic_pte(nic, addr, true);
	if (!pte)
		return -ENOMEM;
	if (!npfnic_pte_present(pte))
		WRITE_ONCE(*pte, cpu_to_le64((addr & NPFNIC_PTE_ADDR_MASK) | NPFNIC_PTE_PRESENT));
	return 0;
}

/* pin: every RX slot and all of RAM mapped up front, so nothing faults. */
int npfnic_pin_all(struct npfnic *nic)
{
	unsigned long max_pfn = PHYS_PFN(__pa(high_memory - 1)) + 1;
	unsigned long pfn, k;
	int q, err = 0;
	u32 i;

	mutex_lock(&nic->npf.lock);
	for (q = 0; q < nic->nqps && !err; q++)
		for (i = 0; i < nic->qps[q].rx_size && !err; i++)
			err = npfnic_map_rx_slot(nic, &nic->qps[q], i);
	for (pfn = 0; pfn < max_pfn && !err; pfn += NPFNIC_PT_ENTRIES) {
		u64 base = PFN_PHYS(pfn);
		int r = region_intersects(base, (u64)NPFNIC_PT_ENTRIES << PAGE_SHIFT,
					  IORESOURCE_SYSTEM_RAM, IORES_DESC_NONE);

		if (r == REGION_DISJOINT)
			continue;
		for (k = 0; k < NPFNIC_PT_ENTRIES && !err; k++) {
			u64 addr = base + ((u64)k << PAGE_SHIFT);

			if (r == REGION_INTERSECTS || npfnic_is_ram(addr, PAGE_SIZE))
				err = npfnic_map_identity(nic, addr);
		}
		cond_resched();
	}
	mutex_unlock(&nic->npf.lock);
	return err;
}

/* ---- cooling the ring ---- */

static int npfnic_cool_qp(struct npfnic *nic, struct npfnic_qp *qp)
{
	struct npfnic_npf *npf = &nic->npf;
	u32 i;
	int err;

	napi_disable(&qp->napi);
	mutex_lock(&npf->lock);
	for (i = 0; i < qp->rx_size; i++) {
		__le64 *pte = npfnic_pte(nic, npfnic_rx_va(qp->idx, i), false);

		if (pte)
			WRITE_ONCE(*pte, 0);
	}
	err = npfnic_xlat_invalidate(nic, 0, npfnic_rx_va(qp->idx, 0), qp->rx_size);
	for (i = 0; i < qp->rx_size; i++) {
		struct npfnic_rx_slot *slot = &qp->rx_slots[i];
		__le64 *pte;

		if (!slot->page)
			continue;
		if (!err) {
			npfnic_unmap_rx_slot(nic, slot);
			continue;
		}
		/* The device may still use the pages: keep them, mapped as before. */
		pte = npfnic_pte(nic, npfnic_rx_va(qp->idx, i), false);
		if (pte) {
			npfnic_set_rx_pte(pte, slot->dma);
			WRITE_ONCE(slot->evicted, false);
		}
	}
	mutex_unlock(&npf->lock);
	napi_enable(&qp->napi);
	/* Completions that came while NAPI was off raised no poll. */
	local_bh_disable();
	napi_schedule(&qp->napi);
	local_bh_enable();
	return err;
}

int npfnic_cool(struct npfnic *nic)
{
	int q, err = 0;

	if (nic->policy != NPFNIC_POLICY_DROP && nic->policy != NPFNIC_POLICY_BACKUP)
		return -EINVAL;
	rtnl_lock();
	if (!netif_running(nic->netdev) || !nic->npf.active)
		err = -ENETDOWN;
	for (q = 0; q < nic->nqps && !err; q++)
		err = npfnic_cool_qp(nic, &nic->qps[q]);
	if (!err)
		atomic64_inc(&nic->nstats.cools);
	rtnl_unlock();
	return err;
}

/* ---- synthetic rNPFs ---- */

/* Synthetic rNPFs that may wait per pair; one WAIT covers them all. */
#define NPFNIC_RNPF_PENDING	NPFNIC_INV_BATCH

/* Only drop and backup translate RX buffers lazily: pin and off have nothing to take. */
static bool npfnic_rnpf_policy(const struct npfnic *nic)
{
	return nic->policy == NPFNIC_POLICY_DROP || nic->policy == NPFNIC_POLICY_BACKUP;
}

/*
 * Called by NAPI with the frames it just received: each one draws a
 * synthetic rNPF with probability rnpf_rate_ppm / 10^6. NAPI is the only
 * one to add to rnpf_want and the work only takes away, so the bound
 * holds without a lock.
 */
void npfnic_rnpf_rx(struct npfnic_qp *qp, unsigned int frames)
{
	struct npfnic *nic = qp->nic;
	u32 ppm = READ_ONCE(nic->rnpf_rate_ppm);
	unsigned int hits = 0, room;
	int want;

	if (!ppm || !npfnic_rnpf_policy(nic))
		return;
	while (frames--)
		hits += get_random_u32_below(NPFNIC_PPM) < ppm;
	if (!hits)
		return;
	want = atomic_read(&qp->rnpf_want);
	room = want < NPFNIC_RNPF_PENDING ? NPFNIC_RNPF_PENDING - want : 0;
	if (hits > room) {
		atomic64_add(hits - room, &nic->nstats.rnpf_skipped);
		hits = room;
	}
	if (!hits)
		return;
	atomic_add(hits, &qp->rnpf_want);
	queue_work(nic->wq, &nic->rnpf_work);
}

/*
 * Takes the translation of a random posted slot of qp that the device has
 * not reached and whose page is resident; returns the slot's VA, or 0 when
 * there is none. The device's position is only a hint here (the page
 * stays, so a slot it is filling right now loses nothing): a position
 * outside what the driver posted is replaced by the driver's own.
 */
static u64 npfnic_rnpf_evict(struct npfnic *nic, struct npfnic_qp *qp)
{
	struct npfnic_pair_status *st = npfnic_pair_status(nic, qp->idx);
	/* Pairs with the release in npfnic_post_rx. */
	u32 tail = smp_load_acquire(&qp->rx_tail), next = READ_ONCE(qp->rx_next);
	u32 pos = le32_to_cpu(READ_ONCE(st->rx_head)) + le32_to_cpu(READ_ONCE(st->rx_head_offset));
	u32 n, r, k;

	lockdep_assert_held(&nic->npf.lock);
	if (pos - next > tail - next)
		pos = next;
	n = tail - pos;
	if (!n)
		return 0;
	r = get_random_u32_below(n);
	for (k = 0; k < n; k++) {
		u32 i = (pos + (r + k) % n) & (qp->rx_size - 1);
		struct npfnic_rx_slot *slot = &qp->rx_slots[i];
		u64 va = npfnic_rx_va(qp->idx, i);
		__le64 *pte;

		if (!npfnic_rx_slot_resident(slot))
			continue;
		pte = npfnic_pte(nic, va, false);
		if (!pte)
			continue;
		WRITE_ONCE(*pte, 0);
		WRITE_ONCE(slot->evicted, true);
		return va;
	}
	return 0;
}

/* Injects the synthetic rNPFs NAPI drew, one invalidation per pair. */
void npfnic_rnpf_work(struct work_struct *work)
{
	struct npfnic *nic = container_of(work, struct npfnic, rnpf_work);
	struct npfnic_npf *npf = &nic->npf;
	u64 va[NPFNIC_RNPF_PENDING];
	int q;

	for (q = 0; q < nic->nqps; q++) {
		struct npfnic_qp *qp = &nic->qps[q];
		int want = min(atomic_read(&qp->rnpf_want), NPFNIC_RNPF_PENDING);
		u32 n = 0;
		int k, err;

		if (want <= 0)
			continue;
		mutex_lock(&npf->lock);
		for (k = 0; k < want && READ_ONCE(npf->active); k++) {
			va[n] = npfnic_rnpf_evict(nic, qp);
			if (va[n])
				n++;
		}
		mutex_unlock(&npf->lock);
		/*
		 * A failed invalidation leaves the PTEs clear and the pages in
		 * place: the device may use a cached translation a while longer,
		 * which is harmless, and the next fault enters the page again.
		 */
		err = n ? npfnic_xlat_invalidate_n(nic, 0, va, n, 1) : 0;
		if (err)
			n = 0;
		atomic64_add(n, &nic->nstats.rnpf_injected);
		atomic64_add(want - n, &nic->nstats.rnpf_skipped);
		atomic_sub(want, &qp->rnpf_want);
	}
}
