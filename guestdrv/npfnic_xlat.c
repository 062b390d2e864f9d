// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic translation: the one owner of the function's ATS and PRI
 * hardware, which the Ethernet side (npfnic_npf.c and the files it names)
 * and the RDMA side (npfnic_ib_ats.c, npfnic_ib_odp.c) both use, as
 * mlx5_core owns what mlx5_ib uses. This file holds:
 *  - the control page (ATS status, PRI status, the invalidation
 *    completion word), the PASID table (PASID 0 and the RDMA contexts'),
 *    the invalidation queue, the page request queue (PRQ) and the page
 *    response queue (PRSPQ), and the PCIe ATS, PASID and PRI enables;
 *  - start and stop of the engine, counted by user: it runs while the
 *    Ethernet side translates (its interface up under rx_policy pin, drop
 *    or backup: npfnic_xlat_eth_get/_put) or any RDMA user context exists
 *    (npfnic_xlat_rdma_get/_put), and stops when the last user leaves,
 *    with the quiesce handshake. Memory of an engine that stayed BUSY is
 *    leaked, never freed, and the engine is never started again (LOST).
 *    rx_policy off with no RDMA context runs no translation at all;
 *  - PASID 0: the Ethernet side's page tables (npf.root) while it
 *    translates; otherwise, while RDMA runs the engine under rx_policy
 *    off, an identity map of RAM, since the device translates the
 *    Ethernet buffers too once ATS is on, and under off they are IOVAs
 *    (physical on q35 without an IOMMU). Under a translating policy with
 *    the interface down no Ethernet queue runs, so PASID 0 is left
 *    invalid. A change of the entry is followed by an invalidation of
 *    PASID 0 before the old tables may go;
 *  - one invalidation function (npfnic_xlat_invalidate_n): RANGE
 *    descriptors of a PASID, or one PASID descriptor for all of it, then
 *    one WAIT with an interrupt (INVQ vector); it sleeps until the device
 *    writes the completion word. Once it returns 0 no DMA uses, or will
 *    use, a dropped translation. With the engine off it returns 0
 *    (nothing is translated), while it stops -ENETDOWN, once lost -EIO;
 *  - one PRQ work item that reads the queue and dispatches each request
 *    by PASID: PASID 0 or none to the Ethernet fault path
 *    (npfnic_fault.c: its groups, batching and fault_ahead), the RDMA
 *    contexts' PASIDs by queuing to an ordered workqueue of their own
 *    that runs the RDMA ODP resolution (npfnic_ib_page_request). An RDMA
 *    resolution may sleep for long in hmm_range_fault (reclaim, swap):
 *    on its own queue it holds up no Ethernet RX fault, and the RDMA
 *    requests stay in the order the device raised them. The hand-over
 *    queue has room for a whole PRQ; when it is full the PRQ work leaves
 *    the rest in the PRQ and the RDMA work queues it again once it made
 *    room;
 *  - one response path (npfnic_xlat_respond, or _prsp_put and _prsp_ring
 *    under prsp_lock), used by both sides and by the fault injection of
 *    npfnic_diag.c.
 *
 * Locking: lock covers the users, start and stop, and the PASID table;
 * inv_lock the invalidation queue and the move from RUNNING (nested in
 * lock, in npf.lock, and in an ODP MR's umem_mutex, which the mmu
 * notifier holds); prsp_lock the response queue and prsp_on. The PRQ, its
 * head and the Ethernet group table belong to the one PRQ work item; the
 * RDMA hand-over queue to rdma_lock (a spinlock). An invalidation never
 * waits for a page response, nor for either work item: the device
 * completes a WAIT while page requests of the same PASID are
 * outstanding. So the RDMA resolution may sit in hmm_range_fault while
 * the notifier invalidates the same range (it holds no lock the notifier
 * takes until it enters the PTE), and a reclaim under any lock here ends.
 * Nothing holding inv_lock or prsp_lock takes lock.
 */

#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/ioport.h>
#include <linux/mm.h>
#include <linux/pci.h>
#include <linux/pci-ats.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>

#include "npfnic.h"

#define NPFNIC_INV_TIMEOUT	(5 * HZ)
/* The RDMA hand-over queue: room for a whole PRQ. */
#define NPFNIC_XLAT_RDMA_Q	NPFNIC_PRQ_SIZE

/* Layout of the control page: both status blocks and the completion word. */
#define NPFNIC_CTL_ATS		0
#define NPFNIC_CTL_PRI		64
#define NPFNIC_CTL_INV_DONE	128

static_assert(NPFNIC_PASID_TBL * sizeof(struct npfnic_pasid_entry) <= PAGE_SIZE);
static_assert(NPFNIC_CTL_INV_DONE + sizeof(__le32) <= PAGE_SIZE);

bool npfnic_xlat_running(struct npfnic *nic)
{
	return READ_ONCE(nic->xlat.state) == NPFNIC_XLAT_RUNNING;
}

/* ---- memory ---- */

static void npfnic_xlat_free(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;
	struct device *dev = &nic->pdev->dev;

	if (x->ctl)
		dma_free_coherent(dev, PAGE_SIZE, x->ctl, x->ctl_dma);
	if (x->pasid_tbl)
		dma_free_coherent(dev, PAGE_SIZE, x->pasid_tbl, x->pasid_dma);
	if (x->invq)
		dma_free_coherent(dev, NPFNIC_INVQ_SIZE * sizeof(*x->invq), x->invq, x->invq_dma);
	if (x->prq)
		dma_free_coherent(dev, NPFNIC_PRQ_SIZE * sizeof(*x->prq), x->prq, x->prq_dma);
	if (x->prspq)
		dma_free_coherent(dev, NPFNIC_PRSPQ_SIZE * sizeof(*x->prspq), x->prspq,
				  x->prspq_dma);
	npfnic_pt_free(nic, x->identity);
	x->ctl = NULL;
	x->pasid_tbl = NULL;
	x->invq = NULL;
	x->prq = NULL;
	x->prspq = NULL;
	x->identity = NULL;
}

/* What the device may still use after a stop that did not quiesce: forgotten. */
static void npfnic_xlat_leak(struct npfnic_xlat *x)
{
	x->ctl = NULL;
	x->pasid_tbl = NULL;
	x->invq = NULL;
	x->prq = NULL;
	x->prspq = NULL;
	x->identity = NULL;
}

/*
 * PASID 0 while RDMA runs translation under rx_policy off: every RAM page
 * at its identity, writable, what the Ethernet queues could reach without
 * translation and no more.
 */
static int npfnic_xlat_identity(struct npfnic *nic)
{
	unsigned long max_pfn = PHYS_PFN(__pa(high_memory - 1)) + 1;
	const unsigned long span = BIT(NPFNIC_XLAT_LEVEL_BITS);
	struct npfnic_pt *root;
	unsigned long pfn, k;

	root = npfnic_pt_alloc(nic, true);
	if (!root)
		return -ENOMEM;
	nic->xlat.identity = root;
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
			pte = npfnic_pt_walk(nic, root, addr, true);
			if (!pte)
				return -ENOMEM;
			*pte = cpu_to_le64((addr & NPFNIC_PTE_ADDR_MASK) | NPFNIC_PTE_PRESENT |
					   NPFNIC_PTE_WRITE);
		}
		cond_resched();
	}
	return 0;
}

/* What PASID 0 points at now (lock held): NULL leaves it invalid. */
static struct npfnic_pt *npfnic_xlat_root0(struct npfnic_xlat *x)
{
	return x->eth ? x->eth_root : x->identity;
}

static __le64 npfnic_xlat_entry(const struct npfnic_pt *root)
{
	return root ? cpu_to_le64((root->dma & NPFNIC_PTE_ADDR_MASK) | NPFNIC_PASID_ENTRY_VALID) :
		      0;
}

/* ---- start / stop ---- */

/* The PCIe capabilities: on for the engine's run, else off. */
static void npfnic_xlat_caps(struct npfnic *nic, bool on)
{
	struct npfnic_xlat *x = &nic->xlat;
	struct pci_dev *pdev = nic->pdev;
	u32 max_req = 0;

	pci_write_config_word(pdev, nic->ats_pos + PCI_ATS_CTRL, 0);
	if (nic->pri_pos) {
		/* With Enable clear, Reset abandons every outstanding page request. */
		pci_write_config_word(pdev, nic->pri_pos + PCI_PRI_CTRL, 0);
		pci_write_config_word(pdev, nic->pri_pos + PCI_PRI_CTRL, PCI_PRI_CTRL_RESET);
	}
	if (x->pasid_pos)
		pci_write_config_word(pdev, x->pasid_pos + PCI_PASID_CTRL,
				      on ? PCI_PASID_CTRL_ENABLE : 0);
	if (!on)
		return;
	if (nic->pri_pos) {
		/* Enable latches the outstanding allocation. */
		pci_read_config_dword(pdev, nic->pri_pos + PCI_PRI_MAX_REQ, &max_req);
		pci_write_config_dword(pdev, nic->pri_pos + PCI_PRI_ALLOC_REQ, max_req);
		pci_write_config_word(pdev, nic->pri_pos + PCI_PRI_CTRL, PCI_PRI_CTRL_ENABLE);
	}
	pci_write_config_word(pdev, nic->ats_pos + PCI_ATS_CTRL, PCI_ATS_CTRL_ENABLE);
}

/* Allocates, programs and enables the engine (lock held, state OFF). */
static int npfnic_xlat_start(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;
	struct device *dev = &nic->pdev->dev;
	int err = -ENOMEM;

	lockdep_assert_held(&x->lock);
	x->ctl = dma_alloc_coherent(dev, PAGE_SIZE, &x->ctl_dma, GFP_KERNEL);
	x->pasid_tbl = dma_alloc_coherent(dev, PAGE_SIZE, &x->pasid_dma, GFP_KERNEL);
	x->invq = dma_alloc_coherent(dev, NPFNIC_INVQ_SIZE * sizeof(*x->invq), &x->invq_dma,
				     GFP_KERNEL);
	x->prq = dma_alloc_coherent(dev, NPFNIC_PRQ_SIZE * sizeof(*x->prq), &x->prq_dma,
				    GFP_KERNEL);
	x->prspq = dma_alloc_coherent(dev, NPFNIC_PRSPQ_SIZE * sizeof(*x->prspq), &x->prspq_dma,
				      GFP_KERNEL);
	if (!x->ctl || !x->pasid_tbl || !x->invq || !x->prq || !x->prspq)
		goto err_free;
	/* The Ethernet queues are IOVAs under off: RAM at identity while RDMA runs it. */
	if (nic->policy == NPFNIC_POLICY_OFF) {
		err = npfnic_xlat_identity(nic);
		if (err)
			goto err_free;
	}
	x->ats_st = x->ctl + NPFNIC_CTL_ATS;
	x->pri_st = x->ctl + NPFNIC_CTL_PRI;
	x->inv_done = x->ctl + NPFNIC_CTL_INV_DONE;
	x->inv_done_dma = x->ctl_dma + NPFNIC_CTL_INV_DONE;
	x->invq_tail = 0;
	x->inv_seq = 0;
	x->prq_head = 0;
	x->prspq_tail = 0;
	x->pri_error_seen = 0;
	x->gen++;
	x->rdma_head = 0;
	x->rdma_tail = 0;
	x->prq_blocked = false;
	atomic64_set(&x->prq_isr_ns, 0);
	npfnic_fault_reset(nic);
	x->pasid_tbl[0].root = npfnic_xlat_entry(npfnic_xlat_root0(x));

	/* Translation: PASID table, invalidation queue, translation cache. */
	iowrite32(NPFNIC_ATS_CTRL_RESET, nic->bar0 + NPFNIC_REG_ATS_CTRL);
	npfnic_write64(nic, NPFNIC_REG_ATS_STATUS_LO, x->ctl_dma + NPFNIC_CTL_ATS);
	npfnic_write64(nic, NPFNIC_REG_PASID_TABLE_LO, x->pasid_dma);
	iowrite32(NPFNIC_PASID_TBL, nic->bar0 + NPFNIC_REG_PASID_TABLE_SIZE);
	npfnic_write64(nic, NPFNIC_REG_INVQ_BASE_LO, x->invq_dma);
	iowrite32(NPFNIC_INVQ_SIZE, nic->bar0 + NPFNIC_REG_INVQ_SIZE);
	iowrite32(NPFNIC_INVQ_VECTOR, nic->bar0 + NPFNIC_REG_INVQ_VECTOR);
	iowrite32(nic->atc_entries, nic->bar0 + NPFNIC_REG_ATC_CAPACITY);
	iowrite32(NPFNIC_ATS_CTRL_ENABLE, nic->bar0 + NPFNIC_REG_ATS_CTRL);

	/* Page requests and responses. */
	iowrite32(NPFNIC_PRI_CTRL_RESET, nic->bar0 + NPFNIC_REG_PRI_CTRL);
	npfnic_write64(nic, NPFNIC_REG_PRI_STATUS_LO, x->ctl_dma + NPFNIC_CTL_PRI);
	npfnic_write64(nic, NPFNIC_REG_PRQ_BASE_LO, x->prq_dma);
	iowrite32(NPFNIC_PRQ_SIZE, nic->bar0 + NPFNIC_REG_PRQ_SIZE);
	iowrite32(NPFNIC_PRQ_VECTOR, nic->bar0 + NPFNIC_REG_PRQ_VECTOR);
	npfnic_write64(nic, NPFNIC_REG_PRSPQ_BASE_LO, x->prspq_dma);
	iowrite32(NPFNIC_PRSPQ_SIZE, nic->bar0 + NPFNIC_REG_PRSPQ_SIZE);
	iowrite32(NPFNIC_PRI_CTRL_ENABLE, nic->bar0 + NPFNIC_REG_PRI_CTRL);

	mutex_lock(&x->prsp_lock);
	x->prsp_on = true;
	mutex_unlock(&x->prsp_lock);
	WRITE_ONCE(x->state, NPFNIC_XLAT_RUNNING);
	npfnic_xlat_caps(nic, true);
	return 0;

err_free:
	npfnic_xlat_free(nic);
	return err;
}

/*
 * Disables the engine and waits until it touches nothing (lock held): no
 * invalidation is in flight once the state left RUNNING, and neither work
 * item runs when the memory goes. A block still BUSY leaves the engine
 * LOST, its memory leaked.
 */
static void npfnic_xlat_stop(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;
	struct pci_dev *pdev = nic->pdev;
	bool pri_ok, ats_ok;

	lockdep_assert_held(&x->lock);
	mutex_lock(&x->inv_lock);
	WRITE_ONCE(x->state, NPFNIC_XLAT_STOPPING);
	mutex_unlock(&x->inv_lock);
	npfnic_xlat_caps(nic, false);
	iowrite32(NPFNIC_PRI_CTRL_RESET, nic->bar0 + NPFNIC_REG_PRI_CTRL);
	iowrite32(NPFNIC_ATS_CTRL_RESET, nic->bar0 + NPFNIC_REG_ATS_CTRL);
	pri_ok = npfnic_wait_quiesced(nic, nic->bar0 + NPFNIC_REG_PRI_CTRL, NPFNIC_PRI_CTRL_BUSY,
				      "page request queue");
	ats_ok = npfnic_wait_quiesced(nic, nic->bar0 + NPFNIC_REG_ATS_CTRL, NPFNIC_ATS_CTRL_BUSY,
				      "translation");
	synchronize_irq(pci_irq_vector(pdev, NPFNIC_PRQ_VECTOR));
	synchronize_irq(pci_irq_vector(pdev, NPFNIC_INVQ_VECTOR));
	/* The requests left are abandoned with the reset: no response goes out. */
	mutex_lock(&x->prsp_lock);
	x->prsp_on = false;
	mutex_unlock(&x->prsp_lock);
	cancel_work_sync(&x->prq_work);
	spin_lock(&x->rdma_lock);
	x->rdma_head = x->rdma_tail;
	spin_unlock(&x->rdma_lock);
	flush_work(&x->rdma_work);
	if (pri_ok && ats_ok) {
		npfnic_xlat_free(nic);
		WRITE_ONCE(x->state, NPFNIC_XLAT_OFF);
	} else {
		npfnic_xlat_leak(x);
		WRITE_ONCE(x->state, NPFNIC_XLAT_LOST);
	}
}

/* Starts the engine for a first user (lock held); -EIO once it was lost. */
static int npfnic_xlat_get(struct npfnic *nic)
{
	switch (nic->xlat.state) {
	case NPFNIC_XLAT_RUNNING:
		return 0;
	case NPFNIC_XLAT_OFF:
		return npfnic_xlat_start(nic);
	default:
		return -EIO;
	}
}

/* Stops the engine once neither side uses it (lock held). */
static void npfnic_xlat_put(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;

	if (!x->eth && !x->rdma_users && x->state == NPFNIC_XLAT_RUNNING)
		npfnic_xlat_stop(nic);
}

/*
 * Points PASID 0 at what it maps now, with the engine running (lock
 * held), and drops what the device cached of the old tables: 0 once
 * those may be freed.
 */
static int npfnic_xlat_switch0(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;

	lockdep_assert_held(&x->lock);
	/* The new tables before the entry that lets the device walk them. */
	dma_wmb();
	WRITE_ONCE(x->pasid_tbl[0].root, npfnic_xlat_entry(npfnic_xlat_root0(x)));
	return npfnic_xlat_invalidate(nic, 0, 0, 0);
}

/*
 * The Ethernet side translates from now on, through root (its PASID 0
 * tables, complete for pin). Starts the engine if RDMA does not run it.
 */
int npfnic_xlat_eth_get(struct npfnic *nic, struct npfnic_pt *root)
{
	struct npfnic_xlat *x = &nic->xlat;
	bool running;
	int err;

	mutex_lock(&x->lock);
	running = x->state == NPFNIC_XLAT_RUNNING;
	x->eth = true;
	x->eth_root = root;
	err = npfnic_xlat_get(nic);
	if (!err && running)
		err = npfnic_xlat_switch0(nic);
	if (err) {
		x->eth = false;
		x->eth_root = NULL;
		if (running)
			npfnic_xlat_switch0(nic);
	}
	mutex_unlock(&x->lock);
	return err;
}

/*
 * The Ethernet side stopped translating (its queue pairs are quiesced):
 * the engine stops unless RDMA runs it, else PASID 0 lets go of the
 * Ethernet tables. True once those may be freed: the device neither
 * walks them nor holds a translation from them.
 */
bool npfnic_xlat_eth_put(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;
	bool ok;

	mutex_lock(&x->lock);
	x->eth = false;
	x->eth_root = NULL;
	if (x->rdma_users && x->state == NPFNIC_XLAT_RUNNING) {
		ok = !npfnic_xlat_switch0(nic);
	} else {
		npfnic_xlat_put(nic);
		ok = x->state != NPFNIC_XLAT_LOST;
	}
	mutex_unlock(&x->lock);
	return ok;
}

/* An RDMA user context takes translation for its PASID. */
int npfnic_xlat_rdma_get(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;
	int err;

	mutex_lock(&x->lock);
	err = npfnic_xlat_get(nic);
	if (!err)
		x->rdma_users++;
	mutex_unlock(&x->lock);
	return err;
}

void npfnic_xlat_rdma_put(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;

	mutex_lock(&x->lock);
	if (!WARN_ON_ONCE(!x->rdma_users) && !--x->rdma_users)
		npfnic_xlat_put(nic);
	mutex_unlock(&x->lock);
}

/*
 * Points pasid (an RDMA context's) at its tables (root: its level-4
 * table), or clears it (NULL) and drops what the device cached of it.
 */
int npfnic_xlat_set_pasid(struct npfnic *nic, u32 pasid, struct npfnic_pt *root)
{
	struct npfnic_xlat *x = &nic->xlat;

	if (WARN_ON_ONCE(!pasid || pasid >= NPFNIC_PASID_TBL))
		return -EINVAL;
	mutex_lock(&x->lock);
	if (x->state == NPFNIC_XLAT_RUNNING) {
		dma_wmb();
		WRITE_ONCE(x->pasid_tbl[pasid].root, npfnic_xlat_entry(root));
	}
	mutex_unlock(&x->lock);
	return root ? 0 : npfnic_xlat_invalidate(nic, pasid, 0, 0);
}

/* ---- invalidation ---- */

static bool npfnic_inv_done(struct npfnic_xlat *x, u32 seq)
{
	return (s32)(le32_to_cpu(READ_ONCE(*x->inv_done)) - seq) >= 0 ||
	       READ_ONCE(x->ats_st->error);
}

/*
 * Drops translations of pasid: that many pages from each addr[k] (RANGE), or
 * with pages 0 all of the PASID (one PASID descriptor, addr unused), then
 * one WAIT, and sleeps until the completion word shows it: on success no
 * DMA uses, or will use, a dropped translation. Never waits for a page
 * response. 0 with the engine off (nothing is translated); -ENETDOWN
 * while it stops, -EIO once lost or halted, -ETIMEDOUT when the device
 * does not confirm. Allocates nothing: the mmu notifier calls it.
 */
int npfnic_xlat_invalidate_n(struct npfnic *nic, u32 pasid, const u64 *addr, u32 n, u64 pages)
{
	struct npfnic_xlat *x = &nic->xlat;
	unsigned int waited = 0;
	u32 seq, head, k;
	int err = 0;

	if (!pages)
		n = 1;
	if (WARN_ON_ONCE(!n || n > NPFNIC_INV_BATCH || pasid >= NPFNIC_PASID_TBL))
		return -EINVAL;
	mutex_lock(&x->inv_lock);
	switch (x->state) {
	case NPFNIC_XLAT_RUNNING:
		break;
	case NPFNIC_XLAT_OFF:
		mutex_unlock(&x->inv_lock);
		return 0;
	case NPFNIC_XLAT_STOPPING:
		mutex_unlock(&x->inv_lock);
		return -ENETDOWN;
	default:
		mutex_unlock(&x->inv_lock);
		return -EIO;
	}
	/* Every earlier invalidation was waited for; space is a formality. */
	for (;;) {
		head = le32_to_cpu(READ_ONCE(x->ats_st->invq_head));
		if (x->invq_tail + n + 1 - head <= NPFNIC_INVQ_SIZE)
			break;
		if (waited++ >= NPFNIC_WAIT_MS || READ_ONCE(x->ats_st->error)) {
			err = -EBUSY;
			goto out;
		}
		usleep_range(1000, 2000);
	}
	seq = ++x->inv_seq;
	for (k = 0; k <= n; k++) {
		struct npfnic_inv_desc *d = &x->invq[x->invq_tail++ & (NPFNIC_INVQ_SIZE - 1)];

		memset(d, 0, sizeof(*d));
		if (k < n) {
			d->op = cpu_to_le16(pages ? NPFNIC_INV_OP_RANGE : NPFNIC_INV_OP_PASID);
			d->pasid = cpu_to_le32(pasid);
			d->addr = cpu_to_le64(pages ? addr[k] & PAGE_MASK : 0);
			d->pages = cpu_to_le64(pages);
		} else {
			d->op = cpu_to_le16(NPFNIC_INV_OP_WAIT);
			d->flags = cpu_to_le16(NPFNIC_INV_FLAG_IRQ);
			d->addr = cpu_to_le64(x->inv_done_dma);
			d->data = cpu_to_le32(seq);
		}
	}
	dma_wmb();
	iowrite32(x->invq_tail, nic->bar0 + NPFNIC_REG_INVQ_TAIL);
	atomic64_inc(&nic->nstats.invalidations);
	if (!wait_event_timeout(x->inv_wait, npfnic_inv_done(x, seq), NPFNIC_INV_TIMEOUT)) {
		atomic64_inc(&nic->nstats.inv_timeouts);
		dev_err(&nic->pdev->dev,
			"invalidation %u of PASID %u (%s at %#llx, %u in all) timed out\n", seq,
			pasid, pages ? "range" : "all", pages ? addr[0] : 0, n);
		err = -ETIMEDOUT;
	}
out:
	if (READ_ONCE(x->ats_st->error)) {
		dev_err_ratelimited(&nic->pdev->dev, "invalidation queue halted: ATS error %u at %u\n",
				    le32_to_cpu(READ_ONCE(x->ats_st->error)),
				    le32_to_cpu(READ_ONCE(x->ats_st->error_info)));
		err = -EIO;
	}
	mutex_unlock(&x->inv_lock);
	return err;
}

/* One invalidation of pasid (pages from addr; pages 0: all of it), then a WAIT. */
int npfnic_xlat_invalidate(struct npfnic *nic, u32 pasid, u64 addr, u64 pages)
{
	return npfnic_xlat_invalidate_n(nic, pasid, &addr, 1, pages);
}

irqreturn_t npfnic_xlat_invq_irq(struct npfnic *nic)
{
	wake_up(&nic->xlat.inv_wait);
	return IRQ_HANDLED;
}

/* ---- page responses ---- */

/*
 * Waits until the page response queue has room for one more entry,
 * ringing the doorbell for what is queued so the device can make room.
 */
static int npfnic_xlat_prsp_room(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;
	unsigned int waited = 0;

	lockdep_assert_held(&x->prsp_lock);
	if (!x->prsp_on)
		return -ENETDOWN;
	while (x->prspq_tail - le32_to_cpu(READ_ONCE(x->pri_st->prspq_head)) >=
	       NPFNIC_PRSPQ_SIZE) {
		if (!waited) {
			dma_wmb();
			iowrite32(x->prspq_tail, nic->bar0 + NPFNIC_REG_PRSPQ_TAIL);
		}
		if (waited++ >= NPFNIC_WAIT_MS || !npfnic_xlat_running(nic) ||
		    READ_ONCE(x->pri_st->error))
			return -EBUSY;
		usleep_range(1000, 2000);
	}
	return 0;
}

/* Queues one response (prsp_lock held); the caller rings for it. */
int npfnic_xlat_prsp_put(struct npfnic *nic, u16 prgi, u32 pasid, bool pasid_valid, u16 code)
{
	struct npfnic_xlat *x = &nic->xlat;
	struct npfnic_page_resp *resp;
	int err;

	err = npfnic_xlat_prsp_room(nic);
	if (err)
		return err;
	resp = &x->prspq[x->prspq_tail++ & (NPFNIC_PRSPQ_SIZE - 1)];
	resp->pasid = cpu_to_le32(pasid_valid ? pasid : 0);
	resp->prgi = cpu_to_le16(prgi);
	resp->code = cpu_to_le16(code);
	resp->flags = cpu_to_le32(pasid_valid ? NPFNIC_PRSP_PASID_VALID : 0);
	resp->rsvd = 0;
	return 0;
}

/* The PRSPQ doorbell for the responses queued (prsp_lock held). */
void npfnic_xlat_prsp_ring(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;

	lockdep_assert_held(&x->prsp_lock);
	if (!x->prsp_on)
		return;
	dma_wmb();
	iowrite32(x->prspq_tail, nic->bar0 + NPFNIC_REG_PRSPQ_TAIL);
}

/* One response, rung at once. */
int npfnic_xlat_respond(struct npfnic *nic, u16 prgi, u32 pasid, bool pasid_valid, u16 code)
{
	struct npfnic_xlat *x = &nic->xlat;
	int err;

	mutex_lock(&x->prsp_lock);
	err = npfnic_xlat_prsp_put(nic, prgi, pasid, pasid_valid, code);
	if (!err)
		npfnic_xlat_prsp_ring(nic);
	mutex_unlock(&x->prsp_lock);
	return err;
}

/* ---- page requests ---- */

/* Reports each new PRI error of the device once (the PRQ work's). */
void npfnic_xlat_pri_check(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;
	u32 err = le32_to_cpu(READ_ONCE(x->pri_st->error));

	if (err && err != x->pri_error_seen) {
		atomic64_inc(&nic->nstats.pri_errors);
		dev_err(&nic->pdev->dev, "PRI error %u (info %u)\n", err,
			le32_to_cpu(READ_ONCE(x->pri_st->error_info)));
	}
	x->pri_error_seen = err;
}

/* Whether a request belongs to an RDMA context's PASID. */
static bool npfnic_xlat_rdma_req(const struct npfnic_xlat_req *r)
{
	return (r->flags & NPFNIC_PRQ_PASID_VALID) && r->pasid != 0;
}

/* Hands an RDMA request to the RDMA work; false when its queue is full. */
static bool npfnic_xlat_rdma_push(struct npfnic_xlat *x, const struct npfnic_xlat_req *r)
{
	bool ok;

	spin_lock(&x->rdma_lock);
	ok = x->rdma_tail - x->rdma_head < NPFNIC_XLAT_RDMA_Q;
	if (ok)
		x->rdma_q[x->rdma_tail++ & (NPFNIC_XLAT_RDMA_Q - 1)] = *r;
	else
		x->prq_blocked = true;
	spin_unlock(&x->rdma_lock);
	return ok;
}

static void npfnic_xlat_read_req(const struct npfnic_page_req *e, struct npfnic_xlat_req *r)
{
	r->addr = le64_to_cpu(READ_ONCE(e->addr));
	r->pasid = le32_to_cpu(READ_ONCE(e->pasid));
	r->desc = le32_to_cpu(READ_ONCE(e->desc));
	r->prgi = le16_to_cpu(READ_ONCE(e->prgi));
	r->flags = le16_to_cpu(READ_ONCE(e->flags));
	r->queue = le16_to_cpu(READ_ONCE(e->queue));
	r->kind = le16_to_cpu(READ_ONCE(e->kind));
}

/*
 * Takes every request queued, each read exactly once, and dispatches it
 * by PASID; then the Ethernet side answers its groups (one PRSPQ
 * doorbell), the PRQ head doorbell returns the slots, and the Ethernet
 * side backs the RX slots ahead of its faults.
 */
static void npfnic_xlat_prq_work(struct work_struct *work)
{
	struct npfnic_xlat *x = container_of(work, struct npfnic_xlat, prq_work);
	struct npfnic *nic = container_of(x, struct npfnic, xlat);
	u32 tail, head, count = 0, rdma = 0, n = 0;
	struct npfnic_xlat_req r;
	u64 isr;

	isr = atomic64_xchg(&x->prq_isr_ns, 0);
	npfnic_since(nic, NPFNIC_HIST_FAULT_SCHED, isr);
	if (!npfnic_xlat_running(nic))
		return;
	npfnic_xlat_pri_check(nic);
	tail = le32_to_cpu(READ_ONCE(x->pri_st->prq_tail));
	if (tail - x->prq_head > NPFNIC_PRQ_SIZE) {
		atomic64_inc(&nic->nstats.bad_page_requests);
		dev_err_ratelimited(&nic->pdev->dev,
				    "page request queue: producer index %u, %u consumed\n",
				    tail, x->prq_head);
		return;
	}
	/* The producer index before the entries it covers. */
	dma_rmb();
	head = x->prq_head;
	while (head != tail && npfnic_xlat_running(nic)) {
		npfnic_xlat_read_req(&x->prq[head & (NPFNIC_PRQ_SIZE - 1)], &r);
		r.isr_ns = isr;
		r.gen = x->gen;
		if (npfnic_xlat_rdma_req(&r)) {
			/* Full: the rest waits in the PRQ until the RDMA work made room. */
			if (!npfnic_xlat_rdma_push(x, &r))
				break;
			rdma++;
		} else {
			npfnic_fault_request(nic, &r, &n);
			count++;
		}
		head++;
	}
	if (rdma)
		queue_work(x->rdma_wq, &x->rdma_work);
	if (head == x->prq_head)
		return;
	x->prq_head = head;
	atomic64_add(count, &nic->nstats.page_requests);
	npfnic_fault_answer(nic, n, isr);
	iowrite32(x->prq_head, nic->bar0 + NPFNIC_REG_PRQ_HEAD);
	npfnic_fault_ahead_due(nic);
}

/*
 * The RDMA contexts' requests, in the order the device raised them, on
 * their own ordered workqueue: a resolution may sleep in hmm_range_fault.
 * Without an RDMA device to resolve them a group is refused at its last
 * request.
 */
static void npfnic_xlat_rdma_work(struct work_struct *work)
{
	struct npfnic_xlat *x = container_of(work, struct npfnic_xlat, rdma_work);
	struct npfnic *nic = container_of(x, struct npfnic, xlat);
	struct npfnic_ib_dev *dev;
	struct npfnic_xlat_req r;
	bool kick;

	for (;;) {
		spin_lock(&x->rdma_lock);
		if (x->rdma_head == x->rdma_tail) {
			kick = x->prq_blocked;
			x->prq_blocked = false;
			spin_unlock(&x->rdma_lock);
			break;
		}
		r = x->rdma_q[x->rdma_head++ & (NPFNIC_XLAT_RDMA_Q - 1)];
		spin_unlock(&x->rdma_lock);
		dev = READ_ONCE(x->rdma);
		if (dev)
			npfnic_ib_page_request(dev, &r);
		else if (r.flags & NPFNIC_PRQ_LAST)
			npfnic_xlat_respond(nic, r.prgi, r.pasid, true,
					    NPFNIC_PRSP_INVALID_REQUEST);
	}
	if (kick && npfnic_xlat_running(nic))
		queue_work(nic->wq, &x->prq_work);
}

irqreturn_t npfnic_xlat_prq_irq(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;

	if (!npfnic_xlat_running(nic))
		return IRQ_HANDLED;
	atomic64_cmpxchg(&x->prq_isr_ns, 0, ktime_get_ns());
	queue_work(nic->wq, &x->prq_work);
	return IRQ_HANDLED;
}

/*
 * Waits until the PRQ work is done with what it started: a caller that
 * changed what the Ethernet fault path may touch first (npf.active)
 * knows it is not touched any more.
 */
void npfnic_xlat_flush(struct npfnic *nic)
{
	flush_work(&nic->xlat.prq_work);
}

/* The RDMA device that resolves the contexts' page requests, or NULL at its removal. */
void npfnic_xlat_rdma_attach(struct npfnic *nic, struct npfnic_ib_dev *dev)
{
	WRITE_ONCE(nic->xlat.rdma, dev);
	/* A resolution that still found the device ends before it goes. */
	if (!dev)
		flush_work(&nic->xlat.rdma_work);
}

/* ---- probe / remove ---- */

int npfnic_xlat_probe(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;

	mutex_init(&x->lock);
	mutex_init(&x->inv_lock);
	mutex_init(&x->prsp_lock);
	spin_lock_init(&x->rdma_lock);
	init_waitqueue_head(&x->inv_wait);
	INIT_WORK(&x->prq_work, npfnic_xlat_prq_work);
	INIT_WORK(&x->rdma_work, npfnic_xlat_rdma_work);
	x->state = NPFNIC_XLAT_OFF;
	x->pasid_pos = pci_find_ext_capability(nic->pdev, PCI_EXT_CAP_ID_PASID);
	x->possible = nic->ats_pos && nic->nvecs > max(NPFNIC_PRQ_VECTOR, NPFNIC_INVQ_VECTOR);
	if (!x->possible)
		return 0;
	x->rdma_q = kcalloc(NPFNIC_XLAT_RDMA_Q, sizeof(*x->rdma_q), GFP_KERNEL);
	x->rdma_wq = alloc_ordered_workqueue("npfnic-%s-odp", WQ_MEM_RECLAIM, pci_name(nic->pdev));
	if (!x->rdma_q || !x->rdma_wq) {
		kfree(x->rdma_q);
		if (x->rdma_wq)
			destroy_workqueue(x->rdma_wq);
		x->rdma_q = NULL;
		x->rdma_wq = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* Both sides let go: the engine is off (or lost, its memory leaked). */
void npfnic_xlat_remove(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;

	WARN_ON(x->state == NPFNIC_XLAT_RUNNING);
	if (x->rdma_wq)
		destroy_workqueue(x->rdma_wq);
	kfree(x->rdma_q);
	x->rdma_wq = NULL;
	x->rdma_q = NULL;
}
