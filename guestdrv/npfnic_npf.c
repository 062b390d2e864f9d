// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic network page faults (interface 2.2): the driver side of ATS/PRI on
 * the Ethernet queues, after Lesokhin et al., "Page Fault Support for Network
 * Controllers" (ASPLOS'17), section 5. This file sets the machinery up,
 * takes it down and counts; the paths themselves live by concern:
 *  - npfnic_xlat.c: the translation engine (PASID table, invalidation,
 *    page request and response queues), which the RDMA side uses too;
 *  - npfnic_iopt.c: the I/O page tables of PASID 0, cool, synthetic rNPFs;
 *  - npfnic_fault.c: the Ethernet page requests, from the PRQ work's
 *    batch to the response;
 *  - npfnic_backup.c: the backup ring of rx_policy backup;
 *  - npfnic_diag.c: fault injection and the other test knobs (debugfs).
 *
 * With rx_policy pin, drop or backup the device translates every buffer
 * address of a queue pair through x86-64 style I/O page tables of PASID 0,
 * which the driver builds on demand in guest memory: an RX slot is backed
 * by a page only once the device faulted on it, a TX buffer is addressed
 * by its identity VA. pin maps everything at open and takes no faults;
 * drop loses a frame whose buffer faulted (its page is requested); backup
 * has the device keep it in the backup ring for the driver to place.
 *
 * Open allocates PASID 0's root table (pin fills it) and, for backup, the
 * backup ring with its buffers, then takes the translation engine with
 * those tables (npfnic_xlat_eth_get: it starts the engine unless the RDMA
 * side runs it already) and enables the backup ring. Stop disables the
 * backup ring and waits for its BUSY bit to clear (the quiesce handshake),
 * then lets go of the engine (npfnic_xlat_eth_put: it stops, or PASID 0
 * lets go of the tables for the RDMA side); memory the device may still
 * use (an engine or ring still BUSY, tables not invalidated) is leaked,
 * never freed. rx_policy off takes no engine: its queues run on IOVAs
 * with no translation at all (unless an RDMA context runs the engine,
 * npfnic_xlat.c).
 *
 * Knobs: module parameters rx_policy, bm_size, backup_ring_size,
 * atc_entries, rnpf_rate_ppm (the start value of each function's debugfs
 * rnpf_rate_ppm, npfnic_iopt.c), fault_ahead (likewise: cold RX slots
 * backed after each RX fault, npfnic_iopt.c), and fault_delay_us (npfnic_fault.c,
 * writable at run time); the sysfs files cool and rx_policy
 * (npfnic_main.c); the test knobs in debugfs (npfnic_diag.c). ethtool -S
 * adds the names in npfnic_npf_stat_names: the device's fault counters
 * summed over the pairs, the driver's page request, response,
 * invalidation, cool, backup and synthetic rNPF counters, the ATC hit/miss
 * registers, and p50/p99 latencies in ns from log2 histograms with 8
 * linear sub-buckets (fault_lat: PRQ interrupt to response doorbell;
 * fault_sched: PRQ interrupt to work start; fault_map: page allocation,
 * DMA map and PTE; backup_lat: backup interrupt to RX_RESOLVE). Counters
 * and histograms live as long as the driver is bound; the device's
 * per-pair counters restart at each open.
 *
 * Locking: rtnl serialises open/stop with cool and the injections. The
 * work items do nothing new once npf.active is cleared under npf.lock
 * (npfnic_npf_quiesce, which then waits for the PRQ work: that runs on
 * while RDMA uses the engine, answering Ethernet requests Invalid), and
 * close cancels the Ethernet ones before anything is freed.
 * Each histogram has one writer at a time (npfnic_hist_add); the counters
 * are atomics. The files above state their own locks.
 */

#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/log2.h>
#include <linux/mm.h>
#include <linux/module.h>
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

static unsigned int rnpf_rate_ppm;
module_param(rnpf_rate_ppm, uint, 0644);
MODULE_PARM_DESC(rnpf_rate_ppm,
		 "drop and backup: synthetic receive faults per million received frames, at probe (debugfs rnpf_rate_ppm changes it per function)");

/*
 * 64: the cold-ring experiment's sweep (README, "Page faults") took a
 * 512-entry ring from 512 faults to about 50, and the small rings to one,
 * with no measurable cost at any ring size.
 */
static unsigned int fault_ahead = 64;
module_param(fault_ahead, uint, 0444);
MODULE_PARM_DESC(fault_ahead,
		 "drop and backup: cold RX slots backed after each RX fault (0: none), at probe (debugfs fault_ahead changes it per function)");

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
	"pt_pages", "backup_resets", "rnpf_injected", "rnpf_skipped", "rx_prefaulted",
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
 * the PRQ work, backup_lat to the backup work, fault_map to npf.lock,
 * rdma_fault to the RDMA page request work (npfnic_xlat.c's rdma_work).
 */
static void npfnic_hist_add(struct npfnic *nic, int h, u64 ns)
{
	u32 *n = &nic->hist[h].n[npfnic_hist_index(ns)];

	WRITE_ONCE(*n, *n + 1);
}

u64 npfnic_hist_pct(struct npfnic *nic, int h, unsigned int pct)
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

/* Records in histogram h the time since from (a ktime_get_ns() stamp; 0: none). */
void npfnic_since(struct npfnic *nic, int h, u64 from)
{
	u64 now = ktime_get_ns();

	if (from && now >= from)
		npfnic_hist_add(nic, h, now - from);
}

/* ---- open / stop ---- */

/*
 * Frees what the device used, except what it may still use: PASID 0's
 * tables when the engine did not let go of them (root_lost), the backup
 * ring when it stayed BUSY after its disable (bk_lost). Those are
 * forgotten, not freed.
 */
static void npfnic_npf_free(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	struct device *dev = &nic->pdev->dev;

	if (npf->root_lost)
		npf->root = NULL;
	if (npf->bk_lost) {
		npf->bk = NULL;
		npf->bk_bufs = NULL;
	}
	npf->root_lost = false;
	npf->bk_lost = false;
	mutex_lock(&npf->lock);
	npfnic_pt_free(nic, npf->root);
	npf->root = NULL;
	mutex_unlock(&npf->lock);
	if (npf->bk)
		dma_free_coherent(dev, nic->backup_size * sizeof(*npf->bk), npf->bk, npf->bk_dma);
	if (npf->bk_bufs)
		dma_free_coherent(dev, (size_t)nic->backup_size * NPFNIC_RX_BUF_SIZE, npf->bk_bufs,
				  npf->bk_bufs_dma);
	npf->bk = NULL;
	npf->bk_bufs = NULL;
}

int npfnic_npf_open(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	struct device *dev = &nic->pdev->dev;
	bool backup = nic->policy == NPFNIC_POLICY_BACKUP;
	u32 j;
	int q, err;

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
	if (!npf->root || (backup && (!npf->bk || !npf->bk_bufs))) {
		err = -ENOMEM;
		goto err_free;
	}
	npf->bk_next = 0;
	npf->bk_tail = 0;
	npf->inject_bad_backup = NPFNIC_BAD_BACKUP_NONE;
	for (q = 0; q < NPFNIC_PAIR_MAX; q++) {
		atomic_set(&nic->qps[q].rnpf_want, 0);
		nic->qps[q].ahead_due = false;
	}
	atomic64_set(&npf->bk_isr_ns, 0);
	nic->sb->backup_head = 0;
	nic->sb->backup_full = 0;
	nic->sb->tail_events = 0;

	if (nic->policy == NPFNIC_POLICY_PIN) {
		err = npfnic_pin_all(nic);
		if (err)
			goto err_free;
	}

	/* Translation through npf.root, page requests: the engine both sides use. */
	err = npfnic_xlat_eth_get(nic, npf->root);
	if (err)
		goto err_free;

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

	iowrite32(policy[nic->policy], qp->regs + NPFNIC_PAIR_RX_POLICY);
	iowrite32(0, qp->regs + NPFNIC_PAIR_PASID);
	iowrite32(nic->bm_size, qp->regs + NPFNIC_PAIR_BM_SIZE);
}

/*
 * First step of stop: the work items stop doing anything new, and the PRQ
 * work, which runs on for RDMA, is done with what it started on the
 * pairs (it answers their requests Invalid from here on).
 */
void npfnic_npf_quiesce(struct npfnic *nic)
{
	mutex_lock(&nic->npf.lock);
	WRITE_ONCE(nic->npf.active, false);
	mutex_unlock(&nic->npf.lock);
	npfnic_xlat_flush(nic);
}

/*
 * With the queue pairs stopped, before the read that flushes the writes:
 * the backup ring stops, then the engine lets go of PASID 0's tables.
 */
void npfnic_npf_stop_hw(struct npfnic *nic)
{
	struct npfnic_npf *npf = &nic->npf;
	void __iomem *bar0 = nic->bar0;

	if (nic->policy == NPFNIC_POLICY_BACKUP) {
		iowrite32(0, bar0 + NPFNIC_REG_BACKUP_CTRL);
		npf->bk_lost = !npfnic_wait_quiesced(nic, bar0 + NPFNIC_REG_BACKUP_CTRL,
						     NPFNIC_BACKUP_CTRL_BUSY, "backup ring");
	}
	npf->root_lost = !npfnic_xlat_eth_put(nic);
}

/* With the device stopped: no interrupt, no work, then free everything. */
void npfnic_npf_close(struct npfnic *nic)
{
	synchronize_irq(pci_irq_vector(nic->pdev, NPFNIC_BACKUP_VECTOR));
	cancel_delayed_work_sync(&nic->backup_work);
	cancel_work_sync(&nic->rnpf_work);
	npfnic_npf_free(nic);
}

/* ---- statistics ---- */

/* Adds qp's counters of RX completions without a frame. */
void npfnic_qp_npf_stats(struct npfnic_qp *qp, u64 *cooled, u64 *xlat)
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
		struct npfnic_pair_status *st = npfnic_pair_status(nic, q);

		rxf += le32_to_cpu(READ_ONCE(st->rx_faults));
		rxb += le32_to_cpu(READ_ONCE(st->rx_backup));
		rxd += le32_to_cpu(READ_ONCE(st->rx_fault_drops));
		txf += le32_to_cpu(READ_ONCE(st->tx_faults));
		txe += le32_to_cpu(READ_ONCE(st->tx_fault_errors));
	}
	for (q = 0; q < NPFNIC_PAIR_MAX; q++)
		npfnic_qp_npf_stats(&nic->qps[q], &cooled, &xlat);
	if (nic->nqps) {
		full = le32_to_cpu(READ_ONCE(nic->sb->backup_full));
		tail_events = le32_to_cpu(READ_ONCE(nic->sb->tail_events));
	}
	/* Either side may run the engine (npfnic_xlat.c); under xlat.lock it stays. */
	mutex_lock(&nic->xlat.lock);
	if (npfnic_xlat_running(nic)) {
		hits = ioread32(nic->bar0 + NPFNIC_REG_ATC_HITS);
		misses = ioread32(nic->bar0 + NPFNIC_REG_ATC_MISSES);
		unexpected = le32_to_cpu(READ_ONCE(nic->xlat.pri_st->unexpected));
	}
	mutex_unlock(&nic->xlat.lock);

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
	data[k++] = atomic64_read(&ns->rnpf_injected);
	data[k++] = atomic64_read(&ns->rnpf_skipped);
	data[k++] = atomic64_read(&ns->rx_prefaulted);
	WARN_ON_ONCE(k != NPFNIC_NPF_STATS);
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
	    backup_ring_size > NPFNIC_RING_SIZE_MAX || atc_entries > NPFNIC_ATC_CAPACITY_MAX ||
	    rnpf_rate_ppm > NPFNIC_PPM || fault_ahead > NPFNIC_RING_SIZE_MAX) {
		dev_err(dev,
			"bm_size %u, backup_ring_size %u, atc_entries %u, rnpf_rate_ppm %u or fault_ahead %u out of range\n",
			bm_size, backup_ring_size, atc_entries, rnpf_rate_ppm, fault_ahead);
		return -EINVAL;
	}
	nic->rnpf_rate_ppm = rnpf_rate_ppm;
	nic->fault_ahead = fault_ahead;
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
	INIT_DELAYED_WORK(&nic->backup_work, npfnic_backup_work);
	INIT_WORK(&nic->echo_work, npfnic_echo_work);
	INIT_WORK(&nic->rnpf_work, npfnic_rnpf_work);
	for (q = 0; q < NPFNIC_PAIR_MAX; q++)
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
