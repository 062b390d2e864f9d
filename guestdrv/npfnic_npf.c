// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic network page faults (interface 2.2): the driver side of ATS/PRI on
 * the Ethernet queues, after Lesokhin et al., "Page Fault Support for Network
 * Controllers" (ASPLOS'17), section 5.
 *
 * With rx_policy pin, drop or backup the device translates every buffer
 * address of a queue pair through x86-64 style I/O page tables of PASID 0,
 * which this file builds on demand in guest memory:
 *  - RX slot (q, i) is one 4 KiB page at npfnic_rx_va(q, i). Its page is
 *    allocated, DMA mapped and entered in the page tables only when the
 *    device faults on it (a page request) or the backup ring needs it
 *    (delayed allocation); "cool" takes every page away again.
 *  - TX buffers are addressed by the identity VA (VA == DMA address: the
 *    guest has no vIOMMU, so that is RAM). A page is entered read-only when
 *    the device faults on it and stays, so the identity stays correct.
 *  - pin maps every RX slot and all of RAM at open: it takes no faults.
 *
 * Page requests arrive on a queue in guest memory; the PRQ vector schedules
 * a work item on a dedicated workqueue (resolution may sleep) that maps the
 * pages of every request it finds and answers each page request group with
 * one response, ringing each doorbell once per batch. In backup policy the
 * device stores a frame whose buffer faulted in the backup ring with its
 * queue, descriptor and bitmap index. The backup work takes every entry at
 * once and reposts the backup buffer; in ring order per queue it places
 * the frame in its own RX descriptor (backing the slot with a page first)
 * and tells the device with QP_RX_RESOLVE. A frame whose descriptor lies
 * beyond the driver's RX tail is copied to a per-pair pending queue and
 * waits for the tail to move (QP_RX_TAIL_IRQ), with the frames after it.
 *
 * Knobs: module parameters rx_policy, bm_size, backup_ring_size,
 * atc_entries, fault_delay_us (writable at run time); sysfs files of the
 * PCI function: cool (write 1), rx_policy (read), diag_echo (write N
 * rounds, read rounds answered), inject (bad_pte Q, bad_pasid, bad_prgi,
 * prsp_storm, inv_unmapped; bad_backup_status, bad_backup_queue and
 * bad_backup_desc make the driver read the next backup entry corrupted,
 * as a broken device would write it). ethtool -S adds the names in
 * npfnic_npf_stat_names: the device's fault counters summed over the
 * pairs, the driver's page request, response, invalidation, cool and
 * backup counters, the ATC hit/miss registers, and p50/p99 latencies in ns
 * from log2 histograms with 8 linear sub-buckets (fault_lat: PRQ interrupt
 * to response doorbell; fault_sched: PRQ interrupt to work start;
 * fault_map: page allocation, DMA map and PTE; backup_lat: backup
 * interrupt to RX_RESOLVE). Counters and histograms live as long as the
 * driver is bound; the device's per-pair counters restart at each open.
 *
 * Locking: rtnl serialises open/stop with cool and the injections;
 * npf.lock covers the page tables and the RX slot pages (fault work,
 * backup work, cool); npf.inv_lock the invalidation queue; npf.prsp_lock
 * the page response queue. NAPI takes no lock: it reads a slot's page with
 * acquire semantics and cool disables it while pages go away.
 */

#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/etherdevice.h>
#include <linux/interrupt.h>
#include <linux/ioport.h>
#include <linux/log2.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/rtnetlink.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>

#include "npfnic.h"

static char *rx_policy = "off";
module_param(rx_policy, charp, 0444);
MODULE_PARM_DESC(rx_policy,
		 "RX buffer faults: off (no translation), pin (all mapped), drop or backup");

static unsigned int bm_size = 256;
module_param(bm_size, uint, 0444);
MODULE_PARM_DESC(bm_size, "backup policy: rNPFs a ring may have pending (power of two, 1..4096)");

static unsigned int backup_ring_size = 256;
module_param(backup_ring_size, uint, 0444);
MODULE_PARM_DESC(backup_ring_size, "backup ring entries (power of two, 8..4096)");

static unsigned int atc_entries;
module_param(atc_entries, uint, 0444);
MODULE_PARM_DESC(atc_entries, "device translation cache entries (0: the device default)");

static unsigned int fault_delay_us;
module_param(fault_delay_us, uint, 0644);
MODULE_PARM_DESC(fault_delay_us,
		 "delay before each fault resolution, emulating a major fault (us, 0: none)");

#define NPFNIC_PT_ENTRIES	BIT(NPFNIC_XLAT_LEVEL_BITS)
#define NPFNIC_INVQ_SIZE	64
#define NPFNIC_PRQ_SIZE		512
#define NPFNIC_PRSPQ_SIZE	512
#define NPFNIC_INV_TIMEOUT	(5 * HZ)
#define NPFNIC_WAIT_MS		2000	/* bound on waiting for device queue space */
#define NPFNIC_MAX_DELAY_US	1000000
/* An IOVA far beyond guest RAM, and a VA nothing ever maps (injections). */
#define NPFNIC_BAD_IOVA		BIT_ULL(45)
#define NPFNIC_UNMAPPED_VA	BIT_ULL(45)

/* Layout of the control page: both status blocks and the completion word. */
#define NPFNIC_CTL_ATS		0
#define NPFNIC_CTL_PRI		64
#define NPFNIC_CTL_INV_DONE	128

static_assert(PAGE_SIZE == NPFNIC_PAGE_SIZE);
static_assert(NPFNIC_RX_BUF_SIZE <= NPFNIC_PAGE_SIZE);

const char npfnic_npf_stat_names[][ETH_GSTRING_LEN] = {
	"rx_faults", "rx_backup_pkts", "rx_fault_drops", "tx_faults", "tx_fault_errors",
	"backup_full", "page_requests", "page_groups", "prsp_success", "prsp_invalid",
	"prsp_failure", "invalidations", "atc_hits", "atc_misses", "rx_cooled_drops", "cools",
	"fault_lat_p50_ns", "fault_lat_p99_ns", "fault_sched_p50_ns", "fault_map_p50_ns",
	"backup_lat_p50_ns", "backup_lat_p99_ns",
	"rx_xlat_errors", "rx_resolved", "backup_errors", "bad_page_requests", "pri_errors",
	"pri_unexpected", "tail_irqs", "tail_events", "inv_timeouts", "rx_slot_pages",
	"pt_pages", "backup_resets",
};

static_assert(ARRAY_SIZE(npfnic_npf_stat_names) == NPFNIC_NPF_STATS);

static const char * const npfnic_policy_names[] = {
	[NPFNIC_POLICY_OFF] = "off",
	[NPFNIC_POLICY_PIN] = "pin",
	[NPFNIC_POLICY_DROP] = "drop",
	[NPFNIC_POLICY_BACKUP] = "backup",
};

const char *npfnic_policy_name(const struct npfnic *nic)
{
	return npfnic_policy_names[nic->policy];
}

/* ---- latency histograms ---- */

static unsigned int npfnic_hist_index(u64 v)
{
	unsigned int e;

	if (v < 8)
		return v;
	e = fls64(v) - 1;	/* 3..63 */
	return 8 + (e - 3) * 8 + ((v >> (e - 3)) & 7);
}

/* The middle of bucket idx. */
static u64 npfnic_hist_value(unsigned int idx)
{
	unsigned int e, sub;

	if (idx < 8)
		return idx;
	e = (idx - 8) / 8 + 3;
	sub = (idx - 8) % 8;
	return ((8ULL + sub) << (e - 3)) + (1ULL << (e - 3)) / 2;
}

/*
 * One writer per histogram at a time: fault_lat and fault_sched belong to
 * the PRQ work, backup_lat to the backup work, fault_map to npf.lock.
 */
static void npfnic_hist_add(struct npfnic *nic, int h, u64 ns)
{
	u32 *n = &nic->hist[h].n[npfnic_hist_index(ns)];

	WRITE_ONCE(*n, *n + 1);
}

static u64 npfnic_hist_pct(struct npfnic *nic, int h, unsigned int pct)
{
	const u32 *n = nic->hist[h].n;
	u64 total = 0, target, sum = 0;
	unsigned int i;

	for (i = 0; i < NPFNIC_HIST_BUCKETS; i++)
		total += READ_ONCE(n[i]);
	if (!total)
		return 0;
	target = div_u64(total * pct + 99, 100);
	for (i = 0; i < NPFNIC_HIST_BUCKETS; i++) {
		sum += READ_ONCE(n[i]);
		if (sum >= target)
			return npfnic_hist_value(i);
	}
	return npfnic_hist_value(NPFNIC_HIST_BUCKETS - 1);
}

static void npfnic_since(struct npfnic *nic, int h, u64 from)
{
	u64 now = ktime_get_ns();

	if (from && now >= from)
		npfnic_hist_add(nic, h, now - from);
}

/* ---- I/O page tables ---- */

static unsigned int npfnic_pt_index(u64 va, int level)
{
	return (va >> (NPFNIC_XLAT_PAGE_SHIFT + NPFNIC_XLAT_LEVEL_BITS * (level - 1))) &
	       (NPFNIC_PT_ENTRIES - 1);
}

static struct npfnic_pt *npfnic_pt_alloc(struct npfnic *nic, bool children)
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

static void npfnic_pt_free(struct npfnic *nic, struct npfnic_pt *pt)
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
 * The leaf entry of va, creating the tables on the way when alloc is set
 * (NULL when one is missing, or out of memory). Intermediate entries are
 * present and writable: whether a page is writable is the leaf's call.
 */
static __le64 *npfnic_pte(struct npfnic *nic, u64 va, bool alloc)
{
	struct npfnic_pt *pt = nic->npf.root;
	int level;

	lockdep_assert_held(&nic->npf.lock);
	if (!pt)
		return NULL;
	for (level = NPFNIC_XLAT_LEVELS; level > 1; level--) {
		unsigned int idx = npfnic_pt_index(va, level);
		struct npfnic_pt *next = pt->child[idx];

		if (!next) {
			if (!alloc)
				return NULL;
			next = npfnic_pt_alloc(nic, level - 1 > 1);
			if (!next)
				return NULL;
			pt->child[idx] = next;
			/* The zeroed table before the entry that lets the device walk it. */
			dma_wmb();
			WRITE_ONCE(pt->e[idx], cpu_to_le64((next->dma & NPFNIC_PTE_ADDR_MASK) |
							   NPFNIC_PTE_PRESENT | NPFNIC_PTE_WRITE));
		}
		pt = next;
	}
	return &pt->e[npfnic_pt_index(va, 1)];
}

static bool npfnic_pte_present(__le64 *pte)
{
	return pte && (le64_to_cpu(READ_ONCE(*pte)) & NPFNIC_PTE_PRESENT);
}

/* Backs RX slot i of qp with a page, DMA mapped, entered writable. */
static int npfnic_map_rx_slot(struct npfnic *nic, struct npfnic_qp *qp, u32 i)
{
	struct npfnic_rx_slot *slot = &qp->rx_slots[i];
	struct device *dev = &nic->pdev->dev;
	struct page *page;
	dma_addr_t dma;
	__le64 *pte;

	lockdep_assert_held(&nic->npf.lock);
	if (slot->page)
		return 0;
	pte = npfnic_pte(nic, npfnic_rx_va(qp->idx, i), true);
	if (!pte)
		return -ENOMEM;
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
	WRITE_ONCE(*pte, cpu_to_le64((dma & NPFNIC_PTE_ADDR_MASK) | NPFNIC_PTE_PRESENT |
				     NPFNIC_PTE_WRITE));
	/* Pairs with the acquire in NAPI: dma is set before the page shows. */
	smp_store_release(&slot->page, page);
	atomic64_inc(&nic->nstats.slot_pages);
	return 0;
}

/* Fault resolution: slot i backed, timed as fault_map (alloc + map + PTE). */
static int npfnic_fault_rx_slot(struct npfnic *nic, struct npfnic_qp *qp, u32 i)
{
	u64 start = ktime_get_ns();
	int err;

	lockdep_assert_held(&nic->npf.lock);
	if (qp->rx_slots[i].page)
		return 0;
	err = npfnic_map_rx_slot(nic, qp, i);
	if (!err)
		npfnic_since(nic, NPFNIC_HIST_FAULT_MAP, start);
	return err;
}

/* Takes slot i's page away (its PTE must be cleared and invalidated). */
static void npfnic_unmap_rx_slot(struct npfnic *nic, struct npfnic_rx_slot *slot)
{
	struct page *page = slot->page;

	if (!page)
		return;
	WRITE_ONCE(slot->page, NULL);
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

static bool npfnic_is_ram(u64 addr, u64 len)
{
	return region_intersects(addr, len, IORESOURCE_SYSTEM_RAM, IORES_DESC_NONE) ==
	       REGION_INTERSECTS;
}

/* Enters the RAM page at addr read-only at its identity VA (TX buffers). */
static int npfnic_map_identity(struct npfnic *nic, u64 addr)
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
static int npfnic_pin_all(struct npfnic *nic)
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

/*
 * An injected major fault: once per fault resolution that maps something
 * new (not while the interface goes down).
 */
static void npfnic_fault_delay(struct npfnic *nic, bool *delayed)
{
	unsigned int us = READ_ONCE(fault_delay_us);

	if (!us || *delayed || !READ_ONCE(nic->npf.active))
		return;
	*delayed = true;
	fsleep(min_t(unsigned int, us, NPFNIC_MAX_DELAY_US));
}

/* ---- invalidation queue ---- */

static bool npfnic_inv_done(struct npfnic_npf *npf, u32 seq)
{
	return (s32)(le32_to_cpu(READ_ONCE(*npf->inv_done)) - seq) >= 0 ||
	       READ_ONCE(npf->ats_st->error);
}

/*
 * Posts an invalidation (RANGE: the given number of pages from addr; PASID) of
 * PASID 0 followed by a WAIT, and waits for the completion word: on
 * success no DMA uses, or will use, a dropped translation.
 */
static int npfnic_invalidate(struct npfnic *nic, u16 op, u64 addr, u64 pages)
{
	struct npfnic_npf *npf = &nic->npf;
	unsigned int waited = 0;
	u32 seq, head, k;
	int err = 0;

	mutex_lock(&npf->inv_lock);
	/* Every earlier invalidation was waited for; space is a formality. */
	for (;;) {
		head = le32_to_cpu(READ_ONCE(npf->ats_st->invq_head));
		if (npf->invq_tail + 2 - head <= NPFNIC_INVQ_SIZE)
			break;
		if (waited++ >= NPFNIC_WAIT_MS || READ_ONCE(npf->ats_st->error)) {
			err = -EBUSY;
			goto out;
		}
		usleep_range(1000, 2000);
	}
	seq = ++npf->inv_seq;
	for (k = 0; k < 2; k++) {
		struct npfnic_inv_desc *d = &npf->invq[npf->invq_tail++ & (NPFNIC_INVQ_SIZE - 1)];

		memset(d, 0, sizeof(*d));
		if (k == 0) {
			d->op = cpu_to_le16(op);
			d->pasid = 0;
			d->addr = cpu_to_le64(addr);
			d->pages = cpu_to_le64(pages);
		} else {
			d->op = cpu_to_le16(NPFNIC_INV_OP_WAIT);
			d->flags = cpu_to_le16(NPFNIC_INV_FLAG_IRQ);
			d->addr = cpu_to_le64(npf->inv_done_dma);
			d->data = cpu_to_le32(seq);
		}
	}
	dma_wmb();
	iowrite32(npf->invq_tail, nic->bar0 + NPFNIC_REG_INVQ_TAIL);
	atomic64_inc(&nic->nstats.invalidations);
	if (!wait_event_timeout(npf->inv_wait, npfnic_inv_done(npf, seq), NPFNIC_INV_TIMEOUT)) {
		atomic64_inc(&nic->nstats.inv_timeouts);
		dev_err(&nic->pdev->dev, "invalidation %u (op %u at %#llx) timed out\n",
			seq, op, addr);
		err = -ETIMEDOUT;
	}
out:
	if (READ_ONCE(npf->ats_st->error)) {
		dev_err_ratelimited(&nic->pdev->dev, "invalidation queue halted: ATS error %u at %u\n",
				    le32_to_cpu(READ_ONCE(npf->ats_st->error)),
				    le32_to_cpu(READ_ONCE(npf->ats_st->error_info)));
		err = -EIO;
	}
	mutex_unlock(&npf->inv_lock);
	return err;
}

irqreturn_t npfnic_invq_irq(struct npfnic *nic)
{
	wake_up(&nic->npf.inv_wait);
	return IRQ_HANDLED;
}

/* ---- page requests ---- */

static void npfnic_pri_check(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	u32 err = le32_to_cpu(READ_ONCE(npf->pri_st->error));

	if (err && err != npf->pri_error_seen) {
		atomic64_inc(&nic->nstats.pri_errors);
		dev_err(&nic->pdev->dev, "PRI error %u (info %u)\n", err,
			le32_to_cpu(READ_ONCE(npf->pri_st->error_info)));
	}
	npf->pri_error_seen = err;
}

/* A request as read once from the queue. */
struct npfnic_req {
	u64 addr;
	u32 pasid;
	u32 desc;
	u16 prgi;
	u16 flags;
	u16 queue;
	u16 kind;
};

/* The RX slot a VA belongs to, or -EINVAL when it is none of ours. */
static int npfnic_rx_slot_of(struct npfnic *nic, u64 va, int *q, u32 *i)
{
	u64 off = va - NPFNIC_RX_VA_BASE;

	if (va < NPFNIC_RX_VA_BASE || off >= ((u64)NPFNIC_QP_MAX << NPFNIC_RX_VA_QSHIFT))
		return -EINVAL;
	*q = off >> NPFNIC_RX_VA_QSHIFT;
	*i = (off & (BIT_ULL(NPFNIC_RX_VA_QSHIFT) - 1)) >> NPFNIC_XLAT_PAGE_SHIFT;
	if (*q >= nic->nqps || *i >= nic->qps[*q].rx_size)
		return -EINVAL;
	return 0;
}

/* Makes one requested page resident; an error answers its group Invalid Request. */
static int npfnic_fault_page(struct npfnic *nic, struct npfnic_prg *g, const struct npfnic_req *r)
{
	struct npfnic_npf *npf = &nic->npf;
	struct npfnic_qp *qp;
	bool present;
	u64 start;
	int q, err;
	u32 i;

	if ((r->flags & NPFNIC_PRQ_PASID_VALID) && r->pasid != 0)
		return -EINVAL;
	switch (r->kind) {
	case NPFNIC_FAULT_KIND_RX_BUF:
		if (npfnic_rx_slot_of(nic, r->addr, &q, &i) || r->queue != q)
			return -EINVAL;
		qp = &nic->qps[q];
		if ((r->desc & (qp->rx_size - 1)) != i)
			return -EINVAL;
		if (READ_ONCE(qp->rx_slots[i].page))
			return 0;
		npfnic_fault_delay(nic, &g->delayed);
		mutex_lock(&npf->lock);
		err = npfnic_fault_rx_slot(nic, qp, i);
		mutex_unlock(&npf->lock);
		return err;
	case NPFNIC_FAULT_KIND_TX_BUF:
		/* TX buffers are read; only RAM has an identity mapping. */
		if (r->queue >= nic->nqps || (r->flags & NPFNIC_PRQ_WRITE) ||
		    r->addr >= NPFNIC_RX_VA_BASE || !npfnic_is_ram(r->addr, NPFNIC_PAGE_SIZE))
			return -EINVAL;
		mutex_lock(&npf->lock);
		present = npfnic_pte_present(npfnic_pte(nic, r->addr, false));
		mutex_unlock(&npf->lock);
		if (present)
			return 0;
		npfnic_fault_delay(nic, &g->delayed);
		mutex_lock(&npf->lock);
		start = ktime_get_ns();
		err = npfnic_map_identity(nic, r->addr);
		if (!err)
			npfnic_since(nic, NPFNIC_HIST_FAULT_MAP, start);
		mutex_unlock(&npf->lock);
		return err;
	default:
		return -EINVAL;
	}
}

/*
 * Waits until the page response queue has room for one more entry, ringing
 * the doorbell for what is queued so the device can make room.
 */
static int npfnic_prsp_room(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	unsigned int waited = 0;

	lockdep_assert_held(&npf->prsp_lock);
	while (npf->prspq_tail - le32_to_cpu(READ_ONCE(npf->pri_st->prspq_head)) >=
	       NPFNIC_PRSPQ_SIZE) {
		if (!waited) {
			dma_wmb();
			iowrite32(npf->prspq_tail, nic->bar0 + NPFNIC_REG_PRSPQ_TAIL);
		}
		if (waited++ >= NPFNIC_WAIT_MS || !READ_ONCE(npf->active) ||
		    READ_ONCE(npf->pri_st->error))
			return -EBUSY;
		usleep_range(1000, 2000);
	}
	return 0;
}

static int npfnic_prsp_put(struct npfnic *nic, u16 prgi, u32 pasid, bool pasid_valid, u16 code)
{
	struct npfnic_npf *npf = &nic->npf;
	struct npfnic_page_resp *resp;
	int err;

	err = npfnic_prsp_room(nic);
	if (err)
		return err;
	resp = &npf->prspq[npf->prspq_tail++ & (NPFNIC_PRSPQ_SIZE - 1)];
	resp->pasid = cpu_to_le32(pasid_valid ? pasid : 0);
	resp->prgi = cpu_to_le16(prgi);
	resp->code = cpu_to_le16(code);
	resp->flags = cpu_to_le32(pasid_valid ? NPFNIC_PRSP_PASID_VALID : 0);
	resp->rsvd = 0;
	return 0;
}

static void npfnic_prsp_ring(struct npfnic *nic)
{
	dma_wmb();
	iowrite32(nic->npf.prspq_tail, nic->bar0 + NPFNIC_REG_PRSPQ_TAIL);
}

/* Answers the groups whose last request this batch saw, one doorbell in all. */
static void npfnic_answer(struct npfnic *nic, u32 n, u64 isr)
{
	struct npfnic_npf *npf = &nic->npf;
	u32 k, answered = 0;

	if (!n)
		return;
	mutex_lock(&npf->prsp_lock);
	for (k = 0; k < n; k++) {
		u16 prgi = npf->answer[k];
		struct npfnic_prg *g = &npf->prg[prgi];
		u16 code = g->failed ? NPFNIC_PRSP_INVALID_REQUEST : NPFNIC_PRSP_SUCCESS;

		if (npfnic_prsp_put(nic, prgi, g->pasid, g->flags & NPFNIC_PRQ_PASID_VALID,
				    code)) {
			dev_err_ratelimited(&nic->pdev->dev,
					    "page response queue full: group %u not answered\n",
					    prgi);
			atomic64_inc(&nic->nstats.pri_errors);
		} else {
			answered++;
			atomic64_inc(code == NPFNIC_PRSP_SUCCESS ? &nic->nstats.prsp_success :
				     &nic->nstats.prsp_invalid);
		}
		g->active = false;
	}
	npfnic_prsp_ring(nic);
	mutex_unlock(&npf->prsp_lock);
	atomic64_add(answered, &nic->nstats.page_groups);
	for (k = 0; k < answered; k++)
		npfnic_since(nic, NPFNIC_HIST_FAULT_LAT, isr);
}

static void npfnic_prq_entry(struct npfnic *nic, const struct npfnic_page_req *e, u32 *n)
{
	struct npfnic_npf *npf = &nic->npf;
	struct npfnic_req r = {
		.addr = le64_to_cpu(READ_ONCE(e->addr)),
		.pasid = le32_to_cpu(READ_ONCE(e->pasid)),
		.desc = le32_to_cpu(READ_ONCE(e->desc)),
		.prgi = le16_to_cpu(READ_ONCE(e->prgi)),
		.flags = le16_to_cpu(READ_ONCE(e->flags)),
		.queue = le16_to_cpu(READ_ONCE(e->queue)),
		.kind = le16_to_cpu(READ_ONCE(e->kind)),
	};
	struct npfnic_prg *g;
	int err;

	if (r.prgi >= NPFNIC_PRGI_MAX) {
		atomic64_inc(&nic->nstats.bad_page_requests);
		dev_warn_ratelimited(&nic->pdev->dev, "page request with PRG index %u ignored\n",
				     r.prgi);
		return;
	}
	g = &npf->prg[r.prgi];
	if (!g->active) {
		memset(g, 0, sizeof(*g));
		g->active = true;
		g->pasid = r.pasid;
		g->flags = r.flags;
	}
	if (!g->failed) {
		err = npfnic_fault_page(nic, g, &r);
		if (err) {
			g->failed = true;
			atomic64_inc(&nic->nstats.bad_page_requests);
			dev_warn_ratelimited(&nic->pdev->dev,
					     "page request %#llx kind %u queue %u desc %u: %d\n",
					     r.addr, r.kind, r.queue, r.desc, err);
		}
	}
	/* A group is answered once; a repeated last request is device garbage. */
	if ((r.flags & NPFNIC_PRQ_LAST) && !g->queued && *n < NPFNIC_PRGI_MAX) {
		g->queued = true;
		npf->answer[(*n)++] = r.prgi;
	}
}

irqreturn_t npfnic_prq_irq(struct npfnic *nic)
{
	if (!READ_ONCE(nic->npf.active))
		return IRQ_HANDLED;
	atomic64_cmpxchg(&nic->npf.prq_isr_ns, 0, ktime_get_ns());
	queue_work(nic->wq, &nic->prq_work);
	return IRQ_HANDLED;
}

/* Serves every page request queued: map all, answer each group, two doorbells. */
static void npfnic_prq_work(struct work_struct *work)
{
	struct npfnic *nic = container_of(work, struct npfnic, prq_work);
	struct npfnic_npf *npf = &nic->npf;
	u32 tail, count = 0, n = 0;
	u64 isr;

	isr = atomic64_xchg(&npf->prq_isr_ns, 0);
	npfnic_since(nic, NPFNIC_HIST_FAULT_SCHED, isr);
	if (!READ_ONCE(npf->active))
		return;
	npfnic_pri_check(nic);
	tail = le32_to_cpu(READ_ONCE(npf->pri_st->prq_tail));
	if (tail - npf->prq_head > NPFNIC_PRQ_SIZE) {
		atomic64_inc(&nic->nstats.bad_page_requests);
		dev_err_ratelimited(&nic->pdev->dev,
				    "page request queue: producer index %u, %u consumed\n",
				    tail, npf->prq_head);
		return;
	}
	/* The producer index before the entries it covers. */
	dma_rmb();
	while (npf->prq_head != tail && READ_ONCE(npf->active)) {
		npfnic_prq_entry(nic, &npf->prq[npf->prq_head & (NPFNIC_PRQ_SIZE - 1)], &n);
		npf->prq_head++;
		count++;
	}
	if (!count)
		return;
	atomic64_add(count, &nic->nstats.page_requests);
	npfnic_answer(nic, n, isr);
	iowrite32(npf->prq_head, nic->bar0 + NPFNIC_REG_PRQ_HEAD);
}

/* ---- backup ring ---- */

irqreturn_t npfnic_backup_irq(struct npfnic *nic)
{
	if (!READ_ONCE(nic->npf.active))
		return IRQ_HANDLED;
	atomic64_cmpxchg(&nic->npf.bk_isr_ns, 0, ktime_get_ns());
	mod_delayed_work(nic->wq, &nic->backup_work, 0);
	return IRQ_HANDLED;
}

static void npfnic_backup_post(struct npfnic *nic, u32 j)
{
	struct npfnic_backup_desc *d = &nic->npf.bk[j];

	d->addr = cpu_to_le64(nic->npf.bk_bufs_dma + (u64)j * NPFNIC_RX_BUF_SIZE);
	d->buf_len = cpu_to_le16(NPFNIC_RX_BUF_SIZE);
	d->pkt_len = 0;
	d->status = 0;
}

static void npfnic_backup_bad(struct npfnic *nic, const char *why, u32 a, u32 b)
{
	atomic64_inc(&nic->nstats.backup_errors);
	dev_warn_ratelimited(&nic->pdev->dev, "backup entry dropped: %s (%u, %u)\n", why, a, b);
}

/* Puts a backed-up frame into its RX descriptor and resolves the rNPF. */
static void npfnic_backup_resolve(struct npfnic *nic, struct npfnic_qp *qp,
				  const struct npfnic_pending *p, const u8 *data)
{
	u32 i = p->desc & (qp->rx_size - 1);
	struct npfnic_rx_desc *d = &qp->rx_ring[i];
	struct device *dev = &nic->pdev->dev;
	struct npfnic_rx_slot *slot = &qp->rx_slots[i];
	bool delayed = false;
	u16 status, len = p->len;
	int err = -EINVAL;

	if (len) {
		if (!READ_ONCE(slot->page))
			npfnic_fault_delay(nic, &delayed);
		mutex_lock(&nic->npf.lock);
		err = npfnic_fault_rx_slot(nic, qp, i);
		if (!err) {
			dma_sync_single_for_cpu(dev, slot->dma, len, DMA_BIDIRECTIONAL);
			memcpy(page_address(slot->page), data, len);
			dma_sync_single_for_device(dev, slot->dma, len, DMA_BIDIRECTIONAL);
		}
		mutex_unlock(&nic->npf.lock);
	}
	if (err) {
		len = 0;
		status = NPFNIC_RXD_DONE | NPFNIC_RXD_ERROR;
		if (p->len)
			npfnic_backup_bad(nic, "no page for the slot", qp->idx, i);
	} else {
		status = NPFNIC_RXD_DONE;
		if (p->status & NPFNIC_BKD_CSUM_OK)
			status |= NPFNIC_RXD_CSUM_OK;
	}
	d->pkt_len = cpu_to_le16(len);
	d->status = cpu_to_le16(status);
	/* The descriptor before the doorbell that lets the head pass it. */
	wmb();
	iowrite32(p->bm_index, qp->regs + NPFNIC_QP_RX_RESOLVE);
	atomic64_inc(&nic->nstats.rx_resolved);
	npfnic_since(nic, NPFNIC_HIST_BACKUP_LAT, p->isr_ns);
}

enum npfnic_where {
	NPFNIC_POSTED,		/* the driver posted the descriptor: place the frame */
	NPFNIC_NOT_YET,		/* beyond the driver's tail: wait for it to move */
	NPFNIC_NOWHERE,		/* consumed already or far beyond: device garbage */
};

static enum npfnic_where npfnic_backup_where(struct npfnic *nic, struct npfnic_qp *qp, u32 desc)
{
	/* Pairs with the release in npfnic_post_rx: the descriptors it covers. */
	u32 tail = smp_load_acquire(&qp->rx_tail);

	if ((s32)(desc - tail) >= 0)
		return desc - tail < qp->rx_size + nic->bm_size ? NPFNIC_NOT_YET : NPFNIC_NOWHERE;
	if ((s32)(desc - READ_ONCE(qp->rx_next)) < 0)
		return NPFNIC_NOWHERE;
	return NPFNIC_POSTED;
}

/* What inject bad_backup_* does to the next backup entry the driver reads. */
enum {
	NPFNIC_BAD_BACKUP_NONE,
	NPFNIC_BAD_BACKUP_STATUS,	/* BKD_DONE clear */
	NPFNIC_BAD_BACKUP_QUEUE,	/* a queue pair that is not in use */
	NPFNIC_BAD_BACKUP_DESC,		/* a descriptor long consumed */
};

static void npfnic_backup_corrupt(struct npfnic *nic, struct npfnic_pending *e, u16 *queue)
{
	int what = xchg(&nic->npf.inject_bad_backup, NPFNIC_BAD_BACKUP_NONE);

	if (what != NPFNIC_BAD_BACKUP_NONE)
		dev_info(&nic->pdev->dev, "inject bad_backup: entry of pair %u desc %u bm_index %u corrupted (%d)\n",
			 *queue, e->desc, e->bm_index, what);
	switch (what) {
	case NPFNIC_BAD_BACKUP_STATUS:
		e->status &= ~NPFNIC_BKD_DONE;
		break;
	case NPFNIC_BAD_BACKUP_QUEUE:
		*queue = NPFNIC_QP_MAX;
		break;
	case NPFNIC_BAD_BACKUP_DESC:
		e->desc -= 1U << 31;
		break;
	}
}

/*
 * Takes every new backup entry and reposts its buffer at once. A frame
 * whose descriptor is posted and nothing of its pair waits before it is
 * placed straight from the backup buffer; any other is copied to its
 * pair's pending queue. Returns false when it ran out of memory and must
 * be retried.
 */
static bool npfnic_backup_drain(struct npfnic *nic, u64 isr)
{
	struct npfnic_npf *npf = &nic->npf;
	u32 mask = nic->backup_size - 1, head, posted = 0;
	bool ok = true;

	head = le32_to_cpu(READ_ONCE(nic->sb->backup_head));
	if (head - npf->bk_next > nic->backup_size) {
		npfnic_backup_bad(nic, "backup head beyond the posted buffers", head, npf->bk_next);
		return true;
	}
	dma_rmb();
	while (npf->bk_next != head && READ_ONCE(npf->active)) {
		u32 j = npf->bk_next & mask;
		struct npfnic_backup_desc *d = &npf->bk[j];
		const u8 *data = npf->bk_bufs + (size_t)j * NPFNIC_RX_BUF_SIZE;
		struct npfnic_pending e = {
			.desc = le32_to_cpu(READ_ONCE(d->desc)),
			.bm_index = le32_to_cpu(READ_ONCE(d->bm_index)),
			.len = le16_to_cpu(READ_ONCE(d->pkt_len)),
			.status = le16_to_cpu(READ_ONCE(d->status)),
			.isr_ns = isr,
		};
		u16 queue = le16_to_cpu(READ_ONCE(d->queue));
		struct npfnic_pending *p;
		struct npfnic_qp *qp;

		if (unlikely(READ_ONCE(npf->inject_bad_backup)))
			npfnic_backup_corrupt(nic, &e, &queue);
		/*
		 * Every refused entry is an rNPF the device waits for: rx_head
		 * stays on it until it is resolved. An entry of a known pair is
		 * resolved as an error completion, so the ring moves on; one
		 * naming no pair or no descriptor the driver could complete
		 * cannot be, and the pairs are restarted instead.
		 */
		if (queue >= nic->nqps) {
			npfnic_backup_bad(nic, "queue", e.status, queue);
			npfnic_schedule_reset(nic);
			goto repost;
		}
		qp = &nic->qps[queue];
		if (qp->bk_npending >= nic->bm_size) {
			npfnic_backup_bad(nic, "more pending than bm_size", queue, qp->bk_npending);
			npfnic_schedule_reset(nic);
			goto repost;
		}
		if (!(e.status & NPFNIC_BKD_DONE)) {
			npfnic_backup_bad(nic, "status", queue, e.status);
			e.len = 0;
		} else if (e.len < ETH_HLEN || e.len > NPFNIC_RX_BUF_SIZE) {
			npfnic_backup_bad(nic, "frame length", queue, e.len);
			e.len = 0;
		}
		/* No injected delay here: that would hold the backup buffers back. */
		if (list_empty(&qp->bk_pending) &&
		    (READ_ONCE(qp->rx_slots[e.desc & (qp->rx_size - 1)].page) ||
		     !READ_ONCE(fault_delay_us))) {
			switch (npfnic_backup_where(nic, qp, e.desc)) {
			case NPFNIC_POSTED:
				npfnic_backup_resolve(nic, qp, &e, data);
				goto repost;
			case NPFNIC_NOWHERE:
				npfnic_backup_bad(nic, "descriptor outside the ring", e.desc,
						  qp->rx_tail);
				npfnic_schedule_reset(nic);
				goto repost;
			case NPFNIC_NOT_YET:
				break;
			}
		}
		p = kmalloc(struct_size(p, data, e.len), GFP_KERNEL);
		if (!p) {
			ok = false;
			break;
		}
		*p = e;
		memcpy(p->data, data, e.len);
		list_add_tail(&p->list, &qp->bk_pending);
		qp->bk_npending++;
repost:
		/* Index j is also where the buffer posted next goes: size ahead. */
		npfnic_backup_post(nic, j);
		npf->bk_next++;
		npf->bk_tail++;
		/* Buffers go back in small batches while the ring drains. */
		if (++posted % 16 == 0) {
			dma_wmb();
			iowrite32(npf->bk_tail, nic->bar0 + NPFNIC_REG_BACKUP_TAIL);
		}
	}
	if (posted % 16) {
		dma_wmb();
		iowrite32(npf->bk_tail, nic->bar0 + NPFNIC_REG_BACKUP_TAIL);
	}
	return ok;
}

/*
 * Resolves qp's pending frames in ring order. A descriptor the driver has
 * not posted yet (the ring was full while the device kept receiving) waits:
 * the device is asked to raise the backup vector when RX_TAIL moves.
 */
static void npfnic_backup_place(struct npfnic *nic, struct npfnic_qp *qp)
{
	struct npfnic_pending *p;
	bool armed = false;

	while (READ_ONCE(nic->npf.active) &&
	       (p = list_first_entry_or_null(&qp->bk_pending, struct npfnic_pending, list))) {
		switch (npfnic_backup_where(nic, qp, p->desc)) {
		case NPFNIC_NOT_YET:
			if (armed)
				return;
			iowrite32(1, qp->regs + NPFNIC_QP_RX_TAIL_IRQ);
			atomic64_inc(&nic->nstats.tail_irqs);
			armed = true;
			/* The arm before a second look: a tail that moved meanwhile is seen. */
			mb();
			continue;
		case NPFNIC_NOWHERE:
			npfnic_backup_bad(nic, "descriptor outside the ring", p->desc, qp->rx_tail);
			npfnic_schedule_reset(nic);
			break;
		case NPFNIC_POSTED:
			npfnic_backup_resolve(nic, qp, p, p->data);
			break;
		}
		list_del(&p->list);
		qp->bk_npending--;
		kfree(p);
	}
}

static void npfnic_backup_work(struct work_struct *work)
{
	struct npfnic *nic = container_of(to_delayed_work(work), struct npfnic, backup_work);
	u64 isr = atomic64_xchg(&nic->npf.bk_isr_ns, 0);
	int q;

	if (!READ_ONCE(nic->npf.active))
		return;
	if (!isr)
		isr = ktime_get_ns();
	if (!npfnic_backup_drain(nic, isr))
		queue_delayed_work(nic->wq, &nic->backup_work, msecs_to_jiffies(10));
	for (q = 0; q < nic->nqps; q++)
		npfnic_backup_place(nic, &nic->qps[q]);
}

/* ---- DIAG_ECHO: the interrupt + work item + doorbell floor ---- */

int npfnic_diag_echo(struct npfnic *nic, unsigned int rounds, unsigned int gap_us)
{
	if (rounds < 1 || rounds > NPFNIC_DIAG_ECHO_MAX || gap_us > NPFNIC_DIAG_ECHO_GAP_MAX)
		return -EINVAL;
	if (nic->nvecs <= NPFNIC_DIAG_ECHO_VECTOR)
		return -EOPNOTSUPP;
	atomic_set(&nic->echo_round, 0);
	iowrite32(gap_us, nic->bar0 + NPFNIC_REG_DIAG_ECHO_GAP);
	iowrite32(rounds, nic->bar0 + NPFNIC_REG_DIAG_ECHO_CTRL);
	return 0;
}

irqreturn_t npfnic_echo_irq(struct npfnic *nic)
{
	queue_work(nic->wq, &nic->echo_work);
	return IRQ_HANDLED;
}

static void npfnic_echo_work(struct work_struct *work)
{
	struct npfnic *nic = container_of(work, struct npfnic, echo_work);

	iowrite32(atomic_inc_return(&nic->echo_round), nic->bar0 + NPFNIC_REG_DIAG_ECHO);
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
	err = npfnic_invalidate(nic, NPFNIC_INV_OP_RANGE, npfnic_rx_va(qp->idx, 0), qp->rx_size);
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
		if (pte)
			WRITE_ONCE(*pte, cpu_to_le64((slot->dma & NPFNIC_PTE_ADDR_MASK) |
						     NPFNIC_PTE_PRESENT | NPFNIC_PTE_WRITE));
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

/* ---- open / stop ---- */

/*
 * Frees what the device used, except the memory of an engine that stayed
 * BUSY after its reset (npfnic_npf_stop_hw): that is forgotten, not freed.
 * ATS reads the PASID table and page tables and writes its status and the
 * invalidation completions; PRI writes page requests and its status and
 * reads responses; the backup ring writes entries and frames.
 */
static void npfnic_npf_free(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	struct device *dev = &nic->pdev->dev;

	if (npf->ats_lost) {
		npf->root = NULL;
		npf->pasid_tbl = NULL;
		npf->invq = NULL;
	}
	if (npf->ats_lost || npf->pri_lost)
		npf->ctl = NULL;
	if (npf->pri_lost) {
		npf->prq = NULL;
		npf->prspq = NULL;
	}
	if (npf->bk_lost) {
		npf->bk = NULL;
		npf->bk_bufs = NULL;
	}
	npf->ats_lost = false;
	npf->pri_lost = false;
	npf->bk_lost = false;
	mutex_lock(&npf->lock);
	npfnic_pt_free(nic, npf->root);
	npf->root = NULL;
	mutex_unlock(&npf->lock);
	if (npf->ctl)
		dma_free_coherent(dev, PAGE_SIZE, npf->ctl, npf->ctl_dma);
	if (npf->pasid_tbl)
		dma_free_coherent(dev, PAGE_SIZE, npf->pasid_tbl, npf->pasid_dma);
	if (npf->invq)
		dma_free_coherent(dev, NPFNIC_INVQ_SIZE * sizeof(*npf->invq), npf->invq,
				  npf->invq_dma);
	if (npf->prq)
		dma_free_coherent(dev, NPFNIC_PRQ_SIZE * sizeof(*npf->prq), npf->prq, npf->prq_dma);
	if (npf->prspq)
		dma_free_coherent(dev, NPFNIC_PRSPQ_SIZE * sizeof(*npf->prspq), npf->prspq,
				  npf->prspq_dma);
	if (npf->bk)
		dma_free_coherent(dev, nic->backup_size * sizeof(*npf->bk), npf->bk, npf->bk_dma);
	if (npf->bk_bufs)
		dma_free_coherent(dev, (size_t)nic->backup_size * NPFNIC_RX_BUF_SIZE, npf->bk_bufs,
				  npf->bk_bufs_dma);
	npf->ctl = NULL;
	npf->pasid_tbl = NULL;
	npf->invq = NULL;
	npf->prq = NULL;
	npf->prspq = NULL;
	npf->bk = NULL;
	npf->bk_bufs = NULL;
}

static void npfnic_write64(struct npfnic *nic, u32 lo, u64 v)
{
	iowrite32(lower_32_bits(v), nic->bar0 + lo);
	iowrite32(upper_32_bits(v), nic->bar0 + lo + 4);
}

/* The PCIe ATS and PRI capabilities: enabled for the session, else off. */
static void npfnic_caps(struct npfnic *nic, bool on)
{
	struct pci_dev *pdev = nic->pdev;
	u32 max_req = 0;

	pci_write_config_word(pdev, nic->ats_pos + PCI_ATS_CTRL, 0);
	/* With Enable clear, Reset abandons every outstanding page request. */
	pci_write_config_word(pdev, nic->pri_pos + PCI_PRI_CTRL, 0);
	pci_write_config_word(pdev, nic->pri_pos + PCI_PRI_CTRL, PCI_PRI_CTRL_RESET);
	if (!on)
		return;
	pci_read_config_dword(pdev, nic->pri_pos + PCI_PRI_MAX_REQ, &max_req);
	pci_write_config_dword(pdev, nic->pri_pos + PCI_PRI_ALLOC_REQ, max_req);
	pci_write_config_word(pdev, nic->pri_pos + PCI_PRI_CTRL, PCI_PRI_CTRL_ENABLE);
	pci_write_config_word(pdev, nic->ats_pos + PCI_ATS_CTRL, PCI_ATS_CTRL_ENABLE);
}

int npfnic_npf_open(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	struct device *dev = &nic->pdev->dev;
	bool backup = nic->policy == NPFNIC_POLICY_BACKUP;
	u32 j;
	int err;

	npf->ctl = dma_alloc_coherent(dev, PAGE_SIZE, &npf->ctl_dma, GFP_KERNEL);
	npf->pasid_tbl = dma_alloc_coherent(dev, PAGE_SIZE, &npf->pasid_dma, GFP_KERNEL);
	npf->invq = dma_alloc_coherent(dev, NPFNIC_INVQ_SIZE * sizeof(*npf->invq),
				       &npf->invq_dma, GFP_KERNEL);
	npf->prq = dma_alloc_coherent(dev, NPFNIC_PRQ_SIZE * sizeof(*npf->prq), &npf->prq_dma,
				      GFP_KERNEL);
	npf->prspq = dma_alloc_coherent(dev, NPFNIC_PRSPQ_SIZE * sizeof(*npf->prspq),
					&npf->prspq_dma, GFP_KERNEL);
	if (backup) {
		npf->bk = dma_alloc_coherent(dev, nic->backup_size * sizeof(*npf->bk),
					     &npf->bk_dma, GFP_KERNEL);
		npf->bk_bufs = dma_alloc_coherent(dev, (size_t)nic->backup_size *
						  NPFNIC_RX_BUF_SIZE, &npf->bk_bufs_dma,
						  GFP_KERNEL);
	}
	mutex_lock(&npf->lock);
	npf->root = npfnic_pt_alloc(nic, true);
	mutex_unlock(&npf->lock);
	if (!npf->ctl || !npf->pasid_tbl || !npf->invq || !npf->prq || !npf->prspq ||
	    !npf->root || (backup && (!npf->bk || !npf->bk_bufs))) {
		err = -ENOMEM;
		goto err_free;
	}
	npf->ats_st = npf->ctl + NPFNIC_CTL_ATS;
	npf->pri_st = npf->ctl + NPFNIC_CTL_PRI;
	npf->inv_done = npf->ctl + NPFNIC_CTL_INV_DONE;
	npf->inv_done_dma = npf->ctl_dma + NPFNIC_CTL_INV_DONE;
	npf->invq_tail = 0;
	npf->inv_seq = 0;
	npf->prq_head = 0;
	npf->prspq_tail = 0;
	npf->pri_error_seen = 0;
	npf->bk_next = 0;
	npf->bk_tail = 0;
	npf->inject_bad_backup = NPFNIC_BAD_BACKUP_NONE;
	memset(npf->prg, 0, sizeof(npf->prg));
	atomic64_set(&npf->prq_isr_ns, 0);
	atomic64_set(&npf->bk_isr_ns, 0);
	npf->pasid_tbl[0].root = cpu_to_le64((npf->root->dma & NPFNIC_PTE_ADDR_MASK) |
					     NPFNIC_PASID_ENTRY_VALID);
	nic->sb->backup_head = 0;
	nic->sb->backup_full = 0;
	nic->sb->tail_events = 0;

	if (nic->policy == NPFNIC_POLICY_PIN) {
		err = npfnic_pin_all(nic);
		if (err)
			goto err_free;
	}

	/* Translation: PASID table, invalidation queue, translation cache. */
	iowrite32(NPFNIC_ATS_CTRL_RESET, nic->bar0 + NPFNIC_REG_ATS_CTRL);
	npfnic_write64(nic, NPFNIC_REG_ATS_STATUS_LO, npf->ctl_dma + NPFNIC_CTL_ATS);
	npfnic_write64(nic, NPFNIC_REG_PASID_TABLE_LO, npf->pasid_dma);
	iowrite32(1, nic->bar0 + NPFNIC_REG_PASID_TABLE_SIZE);
	npfnic_write64(nic, NPFNIC_REG_INVQ_BASE_LO, npf->invq_dma);
	iowrite32(NPFNIC_INVQ_SIZE, nic->bar0 + NPFNIC_REG_INVQ_SIZE);
	iowrite32(NPFNIC_INVQ_VECTOR, nic->bar0 + NPFNIC_REG_INVQ_VECTOR);
	iowrite32(nic->atc_entries, nic->bar0 + NPFNIC_REG_ATC_CAPACITY);
	iowrite32(NPFNIC_ATS_CTRL_ENABLE, nic->bar0 + NPFNIC_REG_ATS_CTRL);

	/* Page requests and responses. */
	iowrite32(NPFNIC_PRI_CTRL_RESET, nic->bar0 + NPFNIC_REG_PRI_CTRL);
	npfnic_write64(nic, NPFNIC_REG_PRI_STATUS_LO, npf->ctl_dma + NPFNIC_CTL_PRI);
	npfnic_write64(nic, NPFNIC_REG_PRQ_BASE_LO, npf->prq_dma);
	iowrite32(NPFNIC_PRQ_SIZE, nic->bar0 + NPFNIC_REG_PRQ_SIZE);
	iowrite32(NPFNIC_PRQ_VECTOR, nic->bar0 + NPFNIC_REG_PRQ_VECTOR);
	npfnic_write64(nic, NPFNIC_REG_PRSPQ_BASE_LO, npf->prspq_dma);
	iowrite32(NPFNIC_PRSPQ_SIZE, nic->bar0 + NPFNIC_REG_PRSPQ_SIZE);
	iowrite32(NPFNIC_PRI_CTRL_ENABLE, nic->bar0 + NPFNIC_REG_PRI_CTRL);

	npfnic_caps(nic, true);

	if (backup) {
		iowrite32(0, nic->bar0 + NPFNIC_REG_BACKUP_CTRL);
		for (j = 0; j < nic->backup_size; j++)
			npfnic_backup_post(nic, j);
		npfnic_write64(nic, NPFNIC_REG_BACKUP_BASE_LO, npf->bk_dma);
		iowrite32(nic->backup_size, nic->bar0 + NPFNIC_REG_BACKUP_SIZE);
		iowrite32(NPFNIC_BACKUP_VECTOR, nic->bar0 + NPFNIC_REG_BACKUP_VECTOR);
		iowrite32(NPFNIC_BACKUP_CTRL_ENABLE, nic->bar0 + NPFNIC_REG_BACKUP_CTRL);
		npf->bk_tail = nic->backup_size;
		dma_wmb();
		iowrite32(npf->bk_tail, nic->bar0 + NPFNIC_REG_BACKUP_TAIL);
	}
	mutex_lock(&npf->lock);
	WRITE_ONCE(npf->active, true);
	mutex_unlock(&npf->lock);
	return 0;

err_free:
	npfnic_npf_free(nic);
	return err;
}

/* Pair registers latched at enable: policy, PASID, bitmap size. */
void npfnic_npf_start_qp(struct npfnic_qp *qp)
{
	static const u32 policy[] = {
		[NPFNIC_POLICY_PIN] = NPFNIC_RX_POLICY_PIN,
		[NPFNIC_POLICY_DROP] = NPFNIC_RX_POLICY_DROP,
		[NPFNIC_POLICY_BACKUP] = NPFNIC_RX_POLICY_BACKUP,
	};
	struct npfnic *nic = qp->nic;

	iowrite32(policy[nic->policy], qp->regs + NPFNIC_QP_RX_POLICY);
	iowrite32(0, qp->regs + NPFNIC_QP_PASID);
	iowrite32(nic->bm_size, qp->regs + NPFNIC_QP_BM_SIZE);
}

/* First step of stop: the work items stop doing anything new. */
void npfnic_npf_quiesce(struct npfnic *nic)
{
	mutex_lock(&nic->npf.lock);
	WRITE_ONCE(nic->npf.active, false);
	mutex_unlock(&nic->npf.lock);
}

/* With the queue pairs stopped, before the read that flushes the writes. */
void npfnic_npf_stop_hw(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	void __iomem *bar0 = nic->bar0;

	if (nic->policy == NPFNIC_POLICY_BACKUP) {
		iowrite32(0, bar0 + NPFNIC_REG_BACKUP_CTRL);
		npf->bk_lost = !npfnic_wait_quiesced(nic, bar0 + NPFNIC_REG_BACKUP_CTRL,
						     NPFNIC_BACKUP_CTRL_BUSY, "backup ring");
	}
	npfnic_caps(nic, false);
	iowrite32(NPFNIC_PRI_CTRL_RESET, bar0 + NPFNIC_REG_PRI_CTRL);
	iowrite32(NPFNIC_ATS_CTRL_RESET, bar0 + NPFNIC_REG_ATS_CTRL);
	npf->pri_lost = !npfnic_wait_quiesced(nic, bar0 + NPFNIC_REG_PRI_CTRL,
					      NPFNIC_PRI_CTRL_BUSY, "page request queue");
	npf->ats_lost = !npfnic_wait_quiesced(nic, bar0 + NPFNIC_REG_ATS_CTRL,
					      NPFNIC_ATS_CTRL_BUSY, "translation");
}

/* With the device stopped: no interrupt, no work, then free everything. */
void npfnic_npf_close(struct npfnic *nic)
{
	struct pci_dev *pdev = nic->pdev;

	synchronize_irq(pci_irq_vector(pdev, NPFNIC_PRQ_VECTOR));
	synchronize_irq(pci_irq_vector(pdev, NPFNIC_INVQ_VECTOR));
	synchronize_irq(pci_irq_vector(pdev, NPFNIC_BACKUP_VECTOR));
	cancel_work_sync(&nic->prq_work);
	cancel_delayed_work_sync(&nic->backup_work);
	npfnic_npf_free(nic);
}

/* ---- statistics ---- */

static void npfnic_qp_npf_stats(struct npfnic_qp *qp, u64 *cooled, u64 *xlat)
{
	struct npfnic_qp_stats *st = &qp->stats;
	unsigned int start;
	u64 c, x;

	do {
		start = u64_stats_fetch_begin(&st->syncp);
		c = st->rx_cooled_drops;
		x = st->rx_xlat_errors;
	} while (u64_stats_fetch_retry(&st->syncp, start));
	*cooled += c;
	*xlat += x;
}

/* Called under rtnl (ethtool), so the pairs in use do not change. */
void npfnic_npf_get_stats(struct npfnic *nic, u64 *data)
{
	struct npfnic_npf_stats *ns = &nic->nstats;
	u64 rxf = 0, rxb = 0, rxd = 0, txf = 0, txe = 0, cooled = 0, xlat = 0;
	u64 full = 0, tail_events = 0, hits = 0, misses = 0, unexpected = 0;
	int q, k = 0;

	for (q = 0; q < nic->nqps; q++) {
		struct npfnic_qp_status *st = npfnic_qp_status(nic, q);

		rxf += le32_to_cpu(READ_ONCE(st->rx_faults));
		rxb += le32_to_cpu(READ_ONCE(st->rx_backup));
		rxd += le32_to_cpu(READ_ONCE(st->rx_fault_drops));
		txf += le32_to_cpu(READ_ONCE(st->tx_faults));
		txe += le32_to_cpu(READ_ONCE(st->tx_fault_errors));
	}
	for (q = 0; q < NPFNIC_QP_MAX; q++)
		npfnic_qp_npf_stats(&nic->qps[q], &cooled, &xlat);
	if (nic->nqps) {
		full = le32_to_cpu(READ_ONCE(nic->sb->backup_full));
		tail_events = le32_to_cpu(READ_ONCE(nic->sb->tail_events));
	}
	if (npfnic_translating(nic)) {
		hits = ioread32(nic->bar0 + NPFNIC_REG_ATC_HITS);
		misses = ioread32(nic->bar0 + NPFNIC_REG_ATC_MISSES);
	}
	if (nic->npf.ctl)
		unexpected = le32_to_cpu(READ_ONCE(nic->npf.pri_st->unexpected));

	data[k++] = rxf;
	data[k++] = rxb;
	data[k++] = rxd;
	data[k++] = txf;
	data[k++] = txe;
	data[k++] = full;
	data[k++] = atomic64_read(&ns->page_requests);
	data[k++] = atomic64_read(&ns->page_groups);
	data[k++] = atomic64_read(&ns->prsp_success);
	data[k++] = atomic64_read(&ns->prsp_invalid);
	data[k++] = atomic64_read(&ns->prsp_failure);
	data[k++] = atomic64_read(&ns->invalidations);
	data[k++] = hits;
	data[k++] = misses;
	data[k++] = cooled;
	data[k++] = atomic64_read(&ns->cools);
	data[k++] = npfnic_hist_pct(nic, NPFNIC_HIST_FAULT_LAT, 50);
	data[k++] = npfnic_hist_pct(nic, NPFNIC_HIST_FAULT_LAT, 99);
	data[k++] = npfnic_hist_pct(nic, NPFNIC_HIST_FAULT_SCHED, 50);
	data[k++] = npfnic_hist_pct(nic, NPFNIC_HIST_FAULT_MAP, 50);
	data[k++] = npfnic_hist_pct(nic, NPFNIC_HIST_BACKUP_LAT, 50);
	data[k++] = npfnic_hist_pct(nic, NPFNIC_HIST_BACKUP_LAT, 99);
	data[k++] = xlat;
	data[k++] = atomic64_read(&ns->rx_resolved);
	data[k++] = atomic64_read(&ns->backup_errors);
	data[k++] = atomic64_read(&ns->bad_page_requests);
	data[k++] = atomic64_read(&ns->pri_errors);
	data[k++] = unexpected;
	data[k++] = atomic64_read(&ns->tail_irqs);
	data[k++] = tail_events;
	data[k++] = atomic64_read(&ns->inv_timeouts);
	data[k++] = atomic64_read(&ns->slot_pages);
	data[k++] = atomic64_read(&ns->pt_pages);
	data[k++] = atomic64_read(&ns->backup_resets);
	WARN_ON_ONCE(k != NPFNIC_NPF_STATS);
}

/* ---- injection of bad translation input ---- */

static u64 npfnic_xlat_errors(struct npfnic *nic)
{
	u64 cooled = 0, xlat = 0;
	int q;

	for (q = 0; q < NPFNIC_QP_MAX; q++)
		npfnic_qp_npf_stats(&nic->qps[q], &cooled, &xlat);
	return xlat;
}

static u64 npfnic_tx_fault_errors(struct npfnic *nic)
{
	u64 n = 0;
	int q;

	for (q = 0; q < nic->nqps; q++)
		n += le32_to_cpu(READ_ONCE(npfnic_qp_status(nic, q)->tx_fault_errors));
	return n;
}

/* Waits up to 3 s for a translation error to show up. */
static void npfnic_wait_xlat_error(struct npfnic *nic, u64 rx, u64 tx)
{
	int t;

	for (t = 0; t < 150; t++) {
		if (npfnic_xlat_errors(nic) != rx || npfnic_tx_fault_errors(nic) != tx)
			return;
		msleep(20);
	}
}

/* One RX slot's PTE points outside guest RAM until a frame hits it. */
static int npfnic_inject_bad_pte(struct npfnic *nic, struct npfnic_qp *qp)
{
	struct npfnic_qp_status *st = npfnic_qp_status(nic, qp->idx);
	u32 i = (le32_to_cpu(READ_ONCE(st->rx_head)) +
		 le32_to_cpu(READ_ONCE(st->rx_head_offset))) & (qp->rx_size - 1);
	u64 va = npfnic_rx_va(qp->idx, i), rx = npfnic_xlat_errors(nic), tx;
	__le64 *pte, old;
	int err, err2;

	tx = npfnic_tx_fault_errors(nic);
	mutex_lock(&nic->npf.lock);
	pte = npfnic_pte(nic, va, true);
	if (!pte) {
		mutex_unlock(&nic->npf.lock);
		return -ENOMEM;
	}
	old = READ_ONCE(*pte);
	WRITE_ONCE(*pte, cpu_to_le64(NPFNIC_BAD_IOVA | NPFNIC_PTE_PRESENT | NPFNIC_PTE_WRITE));
	err = npfnic_invalidate(nic, NPFNIC_INV_OP_RANGE, va, 1);
	if (!err)
		npfnic_wait_xlat_error(nic, rx, tx);
	WRITE_ONCE(*pte, old);
	err2 = npfnic_invalidate(nic, NPFNIC_INV_OP_RANGE, va, 1);
	mutex_unlock(&nic->npf.lock);
	dev_info(&nic->pdev->dev,
		 "inject bad_pte: queue %d slot %u -> %#llx: %llu RX descriptor(s) completed with RXD_ERROR; restored (%d/%d)\n",
		 qp->idx, i, NPFNIC_BAD_IOVA, npfnic_xlat_errors(nic) - rx, err, err2);
	return err ? err : err2;
}

/* PASID 0's root table outside guest RAM for a moment. */
static int npfnic_inject_bad_pasid(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	u64 rx = npfnic_xlat_errors(nic), tx = npfnic_tx_fault_errors(nic);
	__le64 old;
	int err, err2;

	mutex_lock(&npf->lock);
	old = READ_ONCE(npf->pasid_tbl[0].root);
	WRITE_ONCE(npf->pasid_tbl[0].root, cpu_to_le64(NPFNIC_BAD_IOVA | NPFNIC_PASID_ENTRY_VALID));
	err = npfnic_invalidate(nic, NPFNIC_INV_OP_PASID, 0, 0);
	if (!err)
		npfnic_wait_xlat_error(nic, rx, tx);
	WRITE_ONCE(npf->pasid_tbl[0].root, old);
	err2 = npfnic_invalidate(nic, NPFNIC_INV_OP_PASID, 0, 0);
	mutex_unlock(&npf->lock);
	dev_info(&nic->pdev->dev,
		 "inject bad_pasid: root -> %#llx: %llu RX descriptor(s) with RXD_ERROR, %llu TX frame(s) dropped; restored (%d/%d)\n",
		 NPFNIC_BAD_IOVA, npfnic_xlat_errors(nic) - rx, npfnic_tx_fault_errors(nic) - tx,
		 err, err2);
	return err ? err : err2;
}

/* Waits up to 2 s for the device to consume every response posted. */
static bool npfnic_prsp_drained(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	int t;

	for (t = 0; t < 100; t++) {
		if (le32_to_cpu(READ_ONCE(npf->pri_st->prspq_head)) == npf->prspq_tail)
			return true;
		msleep(20);
	}
	return false;
}

/*
 * Responses for PRG indexes beyond the 9-bit range, which no request can
 * carry: the device counts each as unexpected and ignores it. n == 0 fills
 * the whole queue.
 */
static int npfnic_inject_bogus_responses(struct npfnic *nic, const char *what, u32 n)
{
	struct npfnic_npf *npf = &nic->npf;
	u32 before, posted = 0;
	bool drained;
	int err = 0;

	mutex_lock(&npf->prsp_lock);
	before = le32_to_cpu(READ_ONCE(npf->pri_st->unexpected));
	if (!n)
		n = NPFNIC_PRSPQ_SIZE -
		    (npf->prspq_tail - le32_to_cpu(READ_ONCE(npf->pri_st->prspq_head)));
	while (posted < n && !err) {
		err = npfnic_prsp_put(nic, NPFNIC_PRGI_MAX + (posted % NPFNIC_PRGI_MAX), 0, false,
				      NPFNIC_PRSP_SUCCESS);
		if (!err)
			posted++;
	}
	npfnic_prsp_ring(nic);
	drained = npfnic_prsp_drained(nic);
	/* The device publishes the count after the responses; give it a moment. */
	msleep(20);
	mutex_unlock(&npf->prsp_lock);
	npfnic_pri_check(nic);
	dev_info(&nic->pdev->dev,
		 "inject %s: %u response(s) for PRG index >= %u: queue %s, unexpected %u -> %u, PRI error %u\n",
		 what, posted, NPFNIC_PRGI_MAX, drained ? "drained" : "not drained", before,
		 le32_to_cpu(READ_ONCE(npf->pri_st->unexpected)),
		 le32_to_cpu(READ_ONCE(npf->pri_st->error)));
	return err;
}

/* Called under rtnl with q a pair in use. */
int npfnic_npf_inject(struct npfnic *nic, const char *what, unsigned int q)
{
	static const char * const names[] = {
		"bad_pte", "bad_pasid", "bad_prgi", "prsp_storm", "inv_unmapped",
		"bad_backup_status", "bad_backup_queue", "bad_backup_desc",
	};
	int err, k;

	for (k = 0; k < ARRAY_SIZE(names); k++)
		if (!strcmp(what, names[k]))
			break;
	if (k == ARRAY_SIZE(names))
		return -EINVAL;
	if (!npfnic_translating(nic))
		return -EOPNOTSUPP;
	if (!nic->npf.active)
		return -ENETDOWN;
	switch (k) {
	case 0:
		return npfnic_inject_bad_pte(nic, &nic->qps[q]);
	case 1:
		return npfnic_inject_bad_pasid(nic);
	case 2:
		return npfnic_inject_bogus_responses(nic, what, 1);
	case 3:
		return npfnic_inject_bogus_responses(nic, what, 0);
	case 5:
	case 6:
	case 7:
		if (nic->policy != NPFNIC_POLICY_BACKUP)
			return -EOPNOTSUPP;
		WRITE_ONCE(nic->npf.inject_bad_backup, NPFNIC_BAD_BACKUP_STATUS + k - 5);
		return 0;
	default:
		err = npfnic_invalidate(nic, NPFNIC_INV_OP_RANGE, NPFNIC_UNMAPPED_VA, 16);
		dev_info(&nic->pdev->dev,
			 "inject inv_unmapped: RANGE %#llx + 16 pages, WAIT: %s (%d)\n",
			 NPFNIC_UNMAPPED_VA, err ? "failed" : "completed", err);
		return err;
	}
}

/* ---- probe / remove ---- */

static int npfnic_parse_policy(struct npfnic *nic)
{
	int p;

	for (p = 0; p < ARRAY_SIZE(npfnic_policy_names); p++) {
		if (sysfs_streq(rx_policy, npfnic_policy_names[p])) {
			nic->policy = p;
			return 0;
		}
	}
	dev_err(&nic->pdev->dev, "rx_policy %s: want off, pin, drop or backup\n", rx_policy);
	return -EINVAL;
}

int npfnic_npf_probe(struct npfnic *nic)
{
	struct device *dev = &nic->pdev->dev;
	int q, err;

	err = npfnic_parse_policy(nic);
	if (err)
		return err;
	if (!is_power_of_2(bm_size) || bm_size > NPFNIC_BM_SIZE_MAX ||
	    !is_power_of_2(backup_ring_size) || backup_ring_size < NPFNIC_RING_SIZE_MIN ||
	    backup_ring_size > NPFNIC_RING_SIZE_MAX || atc_entries > NPFNIC_ATC_CAPACITY_MAX) {
		dev_err(dev, "bm_size %u, backup_ring_size %u or atc_entries %u out of range\n",
			bm_size, backup_ring_size, atc_entries);
		return -EINVAL;
	}
	nic->bm_size = bm_size;
	nic->backup_size = backup_ring_size;
	nic->atc_entries = atc_entries;
	nic->ats_pos = pci_find_ext_capability(nic->pdev, PCI_EXT_CAP_ID_ATS);
	nic->pri_pos = pci_find_ext_capability(nic->pdev, PCI_EXT_CAP_ID_PRI);
	if (npfnic_translating(nic) &&
	    (!nic->ats_pos || !nic->pri_pos || nic->nvecs < NPFNIC_MSIX_VECTORS)) {
		dev_err(dev, "rx_policy %s needs ATS, PRI and %d MSI-X vectors\n",
			npfnic_policy_name(nic), NPFNIC_MSIX_VECTORS);
		return -ENODEV;
	}

	mutex_init(&nic->npf.lock);
	mutex_init(&nic->npf.inv_lock);
	mutex_init(&nic->npf.prsp_lock);
	init_waitqueue_head(&nic->npf.inv_wait);
	INIT_WORK(&nic->prq_work, npfnic_prq_work);
	INIT_DELAYED_WORK(&nic->backup_work, npfnic_backup_work);
	INIT_WORK(&nic->echo_work, npfnic_echo_work);
	for (q = 0; q < NPFNIC_QP_MAX; q++)
		INIT_LIST_HEAD(&nic->qps[q].bk_pending);
	nic->wq = alloc_workqueue("npfnic-%s", WQ_HIGHPRI | WQ_MEM_RECLAIM, 0,
				  pci_name(nic->pdev));
	if (!nic->wq)
		return -ENOMEM;
	return 0;
}

void npfnic_npf_remove(struct npfnic *nic)
{
	destroy_workqueue(nic->wq);
}
