/* SPDX-License-Identifier: GPL-2.0 */
/*
 * npfnic driver internals shared by the PCI core (npfnic_main.c), the
 * Ethernet side (the netdev in npfnic_eth.c, its ring memory in
 * npfnic_eth_ring.c, the datapath in npfnic_eth_txrx.c and ethtool in
 * npfnic_ethtool.c), the translation engine both sides use
 * (npfnic_xlat.c), the network page fault machinery
 * (npfnic_npf.c with npfnic_iopt.c, npfnic_fault.c and npfnic_backup.c),
 * the diagnostics (npfnic_diag.c) and the RDMA personality (npfnic_ib.c,
 * whose own declarations are in npfnic_ib.h).
 */
#ifndef NPFNIC_H
#define NPFNIC_H

#include <linux/ethtool.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/u64_stats_sync.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "npfnic_hw.h"

#define DRV_NAME		"npfnic"
#define NPFNIC_RX_BUF_SIZE	2048	/* one frame per buffer: >= NPFNIC_MAX_FRAME */

/*
 * rx_policy off: each RX descriptor owns a page from the pair's page pool,
 * buf_len NPFNIC_RX_PAGE_SIZE, which goes up the stack as an skb frag
 * (zero-copy receive) and is replaced by a fresh one. A 64 KiB large
 * receive chain then takes 17 buffers, within MAX_SKB_FRAGS. Frames of at
 * most NPFNIC_RX_COPYBREAK bytes are copied and their page stays; larger
 * ones have at most NPFNIC_RX_HDR_MAX bytes of headers copied.
 */
#define NPFNIC_RX_PAGE_SIZE	4096
#define NPFNIC_RX_COPYBREAK	256
#define NPFNIC_RX_HDR_MAX	256

/*
 * Network page faults (interface 2.2). With rx_policy other than off the
 * device translates every buffer address through the I/O page tables of
 * PASID 0. RX slot (q, i) lives at its own VA, one 4 KiB page per slot,
 * backed by a page only once the device faulted on it; TX buffers use the
 * identity VA (VA == DMA address), mapped lazily and never unmapped.
 */
#define NPFNIC_RX_VA_BASE	BIT_ULL(46)
#define NPFNIC_RX_VA_QSHIFT	32
#define NPFNIC_PAGE_SIZE	BIT(NPFNIC_XLAT_PAGE_SHIFT)

static inline u64 npfnic_rx_va(int q, u32 i)
{
	return NPFNIC_RX_VA_BASE + ((u64)q << NPFNIC_RX_VA_QSHIFT) +
	       ((u64)i << NPFNIC_XLAT_PAGE_SHIFT);
}

enum npfnic_policy {
	NPFNIC_POLICY_OFF,	/* ATS disabled: buffers are IOVAs (interface 2.1 path) */
	NPFNIC_POLICY_PIN,	/* everything mapped at open: no faults */
	NPFNIC_POLICY_DROP,	/* a faulting RX frame is dropped, its page requested */
	NPFNIC_POLICY_BACKUP,	/* a faulting RX frame goes to the backup ring */
};

/* Queues of the fault machinery, in entries. */
#define NPFNIC_INVQ_SIZE	64
#define NPFNIC_PRQ_SIZE		512
#define NPFNIC_PRSPQ_SIZE	512
#define NPFNIC_WAIT_MS		2000	/* bound on waiting for device queue space */

/* MSI-X vectors of the fault machinery (the device defaults, written at open). */
#define NPFNIC_PRQ_VECTOR	NPFNIC_PRQ_VECTOR_DEFAULT
#define NPFNIC_INVQ_VECTOR	NPFNIC_INVQ_VECTOR_DEFAULT
#define NPFNIC_BACKUP_VECTOR	NPFNIC_BACKUP_VECTOR_DEFAULT

/* Log2 histogram with 8 linear sub-buckets per power of two (nanoseconds). */
#define NPFNIC_HIST_BUCKETS	(8 + 61 * 8)

struct npfnic_hist {
	u32 n[NPFNIC_HIST_BUCKETS];
};

enum {
	NPFNIC_HIST_FAULT_LAT,		/* PRQ interrupt -> response doorbell */
	NPFNIC_HIST_FAULT_SCHED,	/* PRQ interrupt -> work starts */
	NPFNIC_HIST_FAULT_MAP,		/* page allocation + DMA map + PTE */
	NPFNIC_HIST_BACKUP_LAT,		/* backup interrupt -> RX_RESOLVE */
	NPFNIC_HIST_RDMA_FAULT,		/* PRQ interrupt -> response doorbell, RDMA's PASIDs */
	NPFNIC_NHIST,
};

struct dentry;
struct page_pool;
struct npfnic;
struct npfnic_ib_dev;

struct npfnic_qp_stats {
	u64 rx_packets;
	u64 rx_bytes;
	u64 tx_packets;
	u64 tx_bytes;
	u64 tx_ring_full;
	u64 tx_linearized;
	u64 irqs;
	u64 rx_cooled_drops;	/* completed while its slot page was cooled away */
	u64 rx_xlat_errors;	/* completed with NPFNIC_RXD_ERROR: no frame */
	u64 rx_lro_frames;	/* super-packets received as descriptor chains */
	u64 rx_bad_chains;	/* chains refused: malformed by the device */
	u64 rx_doorbells;	/* RX_TAIL writes (with a notify area: when asked) */
	u64 irq_arm_writes;	/* IRQ_ARM writes after a poll (with a notify area: none) */
	struct u64_stats_sync syncp;
};

/*
 * An RX slot's page under a translating policy; NULL until it faulted.
 * evicted: a synthetic rNPF took the page's translation away (PTE cleared
 * and invalidated) but kept the page, as a minor fault finds it: the next
 * fault enters it again (npfnic_iopt.c).
 */
struct npfnic_rx_slot {
	struct page *page;
	dma_addr_t dma;
	bool evicted;
};

/* The page an RX descriptor owns under rx_policy off, mapped by the pool. */
struct npfnic_rx_page {
	struct page *page;
	dma_addr_t dma;
};

/* Whether the device can use the slot's page without a fault. */
static inline bool npfnic_rx_slot_resident(const struct npfnic_rx_slot *slot)
{
	return READ_ONCE(slot->page) && !READ_ONCE(slot->evicted);
}

/* rnpf_rate_ppm: synthetic receive faults per million received frames. */
#define NPFNIC_PPM		1000000

/* A frame copied out of the backup ring, waiting for its RX descriptor. */
struct npfnic_pending {
	struct list_head list;
	u32 desc;		/* free-running RX descriptor index */
	u32 bm_index;		/* written back to PAIR_RX_RESOLVE */
	u16 len;
	u16 status;		/* NPFNIC_BKD_* */
	u64 isr_ns;		/* backup interrupt that brought it */
	u8 data[];
};

struct npfnic_tx_slot {
	struct sk_buff *skb;	/* set on the frame's last descriptor */
	dma_addr_t dma;
	u32 len;
	bool page;		/* mapped with skb_frag_dma_map */
};

/* One queue pair: a TX ring, an RX ring and the NAPI context serving both. */
struct npfnic_qp {
	struct npfnic *nic;
	int idx;
	void __iomem *regs;	/* BAR0 + NPFNIC_PAIR_BASE(idx) */
	struct napi_struct napi;

	struct npfnic_tx_desc *tx_ring;
	dma_addr_t tx_ring_dma;
	struct npfnic_tx_slot *tx_slots;
	u32 tx_size;
	u32 tx_tail;		/* descriptors posted (free-running) */
	u32 tx_clean;		/* descriptors reclaimed (free-running) */

	struct npfnic_rx_desc *rx_ring;
	dma_addr_t rx_ring_dma;
	struct page_pool *rx_pool;	/* policy off: the pages of rx_pages */
	struct npfnic_rx_page *rx_pages;	/* policy off: descriptor i's page */
	struct npfnic_rx_slot *rx_slots;	/* other policies: lazily backed slots */
	u32 rx_size;
	u32 rx_tail;		/* buffers posted (free-running; release-stored) */
	u32 rx_next;		/* next descriptor to receive (free-running) */
	/* NPFNIC_FEAT_NOTIFY: RX tail and arms in memory; NULL: registers. */
	struct npfnic_pair_notify *ntf;
	u32 arm_seq;		/* irq_arm: arms stored since enable */

	struct list_head bk_pending;	/* backup frames of this pair, in ring order */
	u32 bk_npending;

	atomic_t rnpf_want;	/* synthetic rNPFs drawn by NAPI, not yet injected */
	/* fault_ahead: the PRQ work backs the slots after descriptor ahead_from once answered. */
	u32 ahead_from;
	bool ahead_due;

	/* Still BUSY after its disable: its rings and buffers are leaked. */
	bool lost;

	struct npfnic_qp_stats stats;
};

/* One node of the I/O page tables: a 4 KiB table the device reads. */
struct npfnic_pt {
	__le64 *e;			/* 512 entries, DMA coherent */
	dma_addr_t dma;
	struct npfnic_pt **child;	/* levels 4..2: the tables the entries point to */
};

/* A page request group being answered. */
struct npfnic_prg {
	bool active;		/* requests seen, no response yet */
	bool failed;		/* answer Invalid Request */
	bool delayed;		/* fault_delay_us already spent on it */
	u64 since_ns;		/* PRQ interrupt of its first request: the delay's start */
	bool queued;		/* its last request seen: answered at the end of the batch */
	u32 flags;		/* NPFNIC_PRQ_* of its requests */
	u32 pasid;
};

/* What inject bad_backup_* does to the next backup entry the driver reads. */
enum {
	NPFNIC_BAD_BACKUP_NONE,
	NPFNIC_BAD_BACKUP_STATUS,	/* BKD_DONE clear */
	NPFNIC_BAD_BACKUP_QUEUE,	/* a queue pair that is not in use */
	NPFNIC_BAD_BACKUP_DESC,		/* a descriptor long consumed */
};

/* The Ethernet side's fault machinery and backup ring: valid while npf.active. */
struct npfnic_npf {
	bool active;
	struct mutex lock;		/* page tables, RX slot pages, backup placement */

	struct npfnic_pt *root;		/* PASID 0's tables while the interface is up */
	/* The PRQ work's (npfnic_fault.c): reset at each engine start. */
	struct npfnic_prg prg[NPFNIC_PRGI_MAX];
	u16 answer[NPFNIC_PRGI_MAX];	/* groups completed in one batch */

	struct npfnic_backup_desc *bk;	/* backup ring */
	dma_addr_t bk_dma;
	u8 *bk_bufs;			/* its pinned buffers */
	dma_addr_t bk_bufs_dma;
	u32 bk_next;			/* entries consumed (free-running) */
	u32 bk_tail;			/* buffers posted (free-running) */

	atomic64_t bk_isr_ns;		/* first backup interrupt not yet served */

	/* The device may still hold these: their memory is leaked. */
	bool root_lost;
	bool bk_lost;
	/* Refused backup entries: the pairs are restarted (reset_work). */
	bool reset_pending;
	/* inject bad_backup_*: the next backup entry is read corrupted. */
	int inject_bad_backup;
};

/*
 * PASID table entries: PASID 0 (the Ethernet queues) and the RDMA user
 * contexts' (NPFNIC_IB_PASID_BASE .. + NPFNIC_IB_MAX_CTX - 1).
 */
#define NPFNIC_PASID_TBL	128

/* A page request as read once from the PRQ, with the interrupt that brought it. */
struct npfnic_xlat_req {
	u64 addr;
	u64 isr_ns;		/* PRQ interrupt (ktime_get_ns; 0: none) */
	u32 pasid;
	u32 desc;
	u32 gen;		/* the engine start that raised it (npfnic_xlat.gen) */
	u16 prgi;
	u16 flags;
	u16 queue;
	u16 kind;
};

enum npfnic_xlat_state {
	NPFNIC_XLAT_OFF,	/* nothing translated, nothing allocated */
	NPFNIC_XLAT_RUNNING,
	NPFNIC_XLAT_STOPPING,	/* being reset: invalidations are refused */
	NPFNIC_XLAT_LOST,	/* stayed BUSY at its stop: leaked, never started again */
};

/*
 * The function's translation engine, one owner for the Ethernet and the
 * RDMA side (npfnic_xlat.c): the control page, the PASID table, the
 * invalidation queue, the page request and response queues.
 */
struct npfnic_xlat {
	struct mutex lock;		/* users, start and stop, the PASID table */
	struct mutex inv_lock;		/* the invalidation queue, leaving RUNNING */
	struct mutex prsp_lock;		/* the page response queue, prsp_on */
	wait_queue_head_t inv_wait;	/* woken by the INVQ vector */
	int state;			/* enum npfnic_xlat_state (changed under lock) */
	bool possible;			/* ATS capability and the vectors */
	int pasid_pos;			/* PASID extended capability */
	bool eth;			/* the Ethernet side translates */
	unsigned int rdma_users;	/* RDMA user contexts */
	struct npfnic_pt *eth_root;	/* PASID 0 while eth */
	struct npfnic_pt *identity;	/* PASID 0 for RDMA under rx_policy off: RAM */
	u32 gen;			/* engine starts */

	void *ctl;			/* one coherent page: status blocks, completion word */
	dma_addr_t ctl_dma;
	struct npfnic_ats_status *ats_st;
	struct npfnic_pri_status *pri_st;
	__le32 *inv_done;
	dma_addr_t inv_done_dma;
	struct npfnic_pasid_entry *pasid_tbl;
	dma_addr_t pasid_dma;

	struct npfnic_inv_desc *invq;
	dma_addr_t invq_dma;
	u32 invq_tail;
	u32 inv_seq;

	struct npfnic_page_req *prq;
	dma_addr_t prq_dma;
	u32 prq_head;			/* the PRQ work's */
	struct npfnic_page_resp *prspq;
	dma_addr_t prspq_dma;
	u32 prspq_tail;
	bool prsp_on;			/* responses may be posted */
	u32 pri_error_seen;
	atomic64_t prq_isr_ns;		/* first PRQ interrupt not yet served */
	struct work_struct prq_work;	/* on nic->wq */

	/* The RDMA contexts' requests, handed from the PRQ work to rdma_work. */
	spinlock_t rdma_lock;
	struct npfnic_xlat_req *rdma_q;
	u32 rdma_head;
	u32 rdma_tail;
	bool prq_blocked;		/* the PRQ work stopped at a full rdma_q */
	struct workqueue_struct *rdma_wq;	/* ordered */
	struct work_struct rdma_work;
	struct npfnic_ib_dev *rdma;	/* resolves them (npfnic_ib_page_request) */
};

/* Counters of the fault machinery (driver side). */
struct npfnic_npf_stats {
	atomic64_t page_requests;
	atomic64_t page_groups;
	atomic64_t prsp_success;
	atomic64_t prsp_invalid;
	atomic64_t prsp_failure;
	atomic64_t bad_page_requests;
	atomic64_t pri_errors;
	atomic64_t invalidations;
	atomic64_t inv_timeouts;
	atomic64_t cools;
	atomic64_t rx_resolved;
	atomic64_t backup_errors;
	atomic64_t tail_irqs;
	atomic64_t slot_pages;		/* RX slot pages mapped now */
	atomic64_t pt_pages;		/* page-table pages now */
	atomic64_t backup_resets;	/* restarts after a backup entry naming no descriptor */
	atomic64_t rnpf_injected;	/* synthetic rNPFs: slot translations invalidated */
	atomic64_t rnpf_skipped;	/* synthetic rNPFs drawn but not injected */
	atomic64_t rx_prefaulted;	/* cold RX slots backed ahead of a fault (fault_ahead) */
};

/* The dev_id of one MSI-X vector. */
struct npfnic_vec {
	struct npfnic *nic;
	int vec;
};

struct npfnic {
	struct pci_dev *pdev;
	struct net_device *netdev;
	void __iomem *bar0;
	u32 features;			/* NPFNIC_FEAT_*, from the device */
	u32 version;			/* NPFNIC_REG_VERSION: the device's interface version */
	int nvecs;
	atomic_t irq_count[NPFNIC_MSIX_VECTORS];
	struct npfnic_vec vecs[NPFNIC_MSIX_VECTORS];

	struct npfnic_status_block *sb;	/* written by the device */
	dma_addr_t sb_dma;
	struct npfnic_pair_notify *notify;	/* NPFNIC_PAIR_MAX notify areas */
	dma_addr_t notify_dma;
	bool use_notify;		/* the notify module parameter and the device agree */

	int nqps;			/* queue pairs in use while up */
	struct npfnic_qp qps[NPFNIC_PAIR_MAX];
	u32 rx_ring_size;
	u32 tx_ring_size;
	u32 itr_usecs;
	u32 tx_irq_delay_us;	/* NPFNIC_PAIR_TX_IRQ_DELAY, with the feature */
	struct work_struct misc_work;	/* link changes and queue errors */
	struct work_struct reset_work;	/* restarts the pairs (npfnic_schedule_reset) */
	u32 qp_errors_seen[NPFNIC_PAIR_MAX];
	atomic64_t quiesce_timeouts;	/* BUSY bits that did not clear in time */

	struct mutex diag_lock;		/* one diagnostic DMA at a time */
	char diag_result[64];
	struct dentry *debugfs;		/* npfnic/<BDF>/ (npfnic_diag.c) */

	/* Network page faults (module parameters, fixed at probe). */
	enum npfnic_policy policy;
	u32 bm_size;
	u32 backup_size;
	u32 atc_entries;
	int ats_pos;			/* ATS extended capability */
	int pri_pos;			/* PRI extended capability */
	struct workqueue_struct *wq;	/* page request, backup and echo work */
	struct delayed_work backup_work;
	struct work_struct echo_work;
	atomic_t echo_round;		/* DIAG_ECHO rounds answered in this run */
	u32 rnpf_rate_ppm;		/* debugfs rnpf_rate_ppm, read by NAPI */
	u32 fault_ahead;		/* debugfs fault_ahead, read by fault resolution */
	struct work_struct rnpf_work;	/* injects the synthetic rNPFs NAPI drew */
	struct npfnic_npf npf;
	struct npfnic_xlat xlat;
	struct npfnic_npf_stats nstats;
	struct npfnic_hist hist[NPFNIC_NHIST];

	struct npfnic_ib_dev *ib;	/* the RDMA device over netdev (npfnic_ib.c) */
};

/* The netdev's private area holds a pointer to the PCI-level struct npfnic. */
static inline struct npfnic *npfnic_from_netdev(struct net_device *netdev)
{
	return *(struct npfnic **)netdev_priv(netdev);
}

static inline struct npfnic_pair_status *npfnic_pair_status(struct npfnic *nic, int q)
{
	return &nic->sb->pair[q];
}

static inline bool npfnic_translating(const struct npfnic *nic)
{
	return nic->policy != NPFNIC_POLICY_OFF;
}

bool npfnic_wait_quiesced(struct npfnic *nic, void __iomem *ctrl, u32 busy, const char *what);

static inline bool npfnic_valid_ring_size(u32 n)
{
	return is_power_of_2(n) && n >= NPFNIC_RING_SIZE_MIN && n <= NPFNIC_RING_SIZE_MAX;
}

/* buf_len of the pair's RX descriptors, and the most a completion may hold. */
static inline u16 npfnic_rx_buf_size(const struct npfnic_qp *qp)
{
	return qp->rx_slots ? NPFNIC_RX_BUF_SIZE : NPFNIC_RX_PAGE_SIZE;
}

static inline u32 npfnic_tx_free(const struct npfnic_qp *qp)
{
	return qp->tx_size - (qp->tx_tail - qp->tx_clean);
}

/* npfnic_eth.c: the netdev, its open and stop, link and errors */
void npfnic_schedule_reset(struct npfnic *nic);
int npfnic_eth_probe(struct npfnic *nic);
void npfnic_eth_remove(struct npfnic *nic);
int npfnic_open(struct net_device *netdev);
int npfnic_stop(struct net_device *netdev);
irqreturn_t npfnic_misc_irq(int irq, void *data);
u32 npfnic_pair_ctrl(struct npfnic *nic, netdev_features_t features);
int npfnic_inject(struct npfnic *nic, const char *what, unsigned int q);

/* npfnic_eth_ring.c: the rings and buffers of a queue pair */
int npfnic_alloc_qp(struct npfnic_qp *qp, u32 tx_size, u32 rx_size);
void npfnic_free_qp(struct npfnic_qp *qp);

/* npfnic_eth_txrx.c: transmit, receive and NAPI */
void npfnic_unmap_tx_slot(struct device *dev, struct npfnic_tx_slot *slot);
netdev_tx_t npfnic_xmit(struct sk_buff *skb, struct net_device *netdev);
void npfnic_post_rx(struct npfnic_qp *qp, u32 count);
int npfnic_poll(struct napi_struct *napi, int budget);
irqreturn_t npfnic_qp_irq(int irq, void *data);

/* npfnic_ethtool.c: the ethtool operations */
extern const struct ethtool_ops npfnic_ethtool_ops;

/* npfnic_npf.c: network page faults, set up, taken down and counted */
#define NPFNIC_NPF_STATS	37
extern const char npfnic_npf_stat_names[][ETH_GSTRING_LEN];

int npfnic_npf_probe(struct npfnic *nic);
void npfnic_npf_remove(struct npfnic *nic);
const char *npfnic_policy_name(const struct npfnic *nic);
int npfnic_npf_open(struct npfnic *nic);
void npfnic_npf_quiesce(struct npfnic *nic);
void npfnic_npf_stop_hw(struct npfnic *nic);
void npfnic_npf_close(struct npfnic *nic);
void npfnic_npf_start_qp(struct npfnic_qp *qp);
void npfnic_npf_get_stats(struct npfnic *nic, u64 *data);
void npfnic_qp_npf_stats(struct npfnic_qp *qp, u64 *cooled, u64 *xlat);
void npfnic_since(struct npfnic *nic, int h, u64 from);
u64 npfnic_hist_pct(struct npfnic *nic, int h, unsigned int pct);

/* Writes a 64-bit register pair (bits 31:0 at lo, 63:32 at lo + 4). */
static inline void npfnic_write64(struct npfnic *nic, u32 lo, u64 v)
{
	iowrite32(lower_32_bits(v), nic->bar0 + lo);
	iowrite32(upper_32_bits(v), nic->bar0 + lo + 4);
}

/* npfnic_iopt.c: I/O page tables, cool, synthetic rNPFs (the table walkers assert npf.lock) */
struct npfnic_pt *npfnic_pt_alloc(struct npfnic *nic, bool children);
void npfnic_pt_free(struct npfnic *nic, struct npfnic_pt *pt);
__le64 *npfnic_pt_walk(struct npfnic *nic, struct npfnic_pt *root, u64 va, bool alloc);
struct npfnic_pt *npfnic_pt_next_leaf(struct npfnic_pt *root, u64 *va, u64 end);
u64 npfnic_pt_leaf_end(u64 va, u64 end);
u64 npfnic_pt_clear(struct npfnic_pt *root, u64 va, u64 end);
__le64 *npfnic_pte(struct npfnic *nic, u64 va, bool alloc);
bool npfnic_pte_present(__le64 *pte);
int npfnic_fault_rx_slot(struct npfnic *nic, struct npfnic_qp *qp, u32 i);
void npfnic_fault_ahead(struct npfnic *nic, struct npfnic_qp *qp, u32 desc);
void npfnic_free_rx_slots(struct npfnic_qp *qp);
bool npfnic_is_ram(u64 addr, u64 len);
int npfnic_map_identity(struct npfnic *nic, u64 addr);
int npfnic_pin_all(struct npfnic *nic);
int npfnic_cool(struct npfnic *nic);
void npfnic_rnpf_rx(struct npfnic_qp *qp, unsigned int frames);
void npfnic_rnpf_work(struct work_struct *work);

/* npfnic_fault.c: the Ethernet side's page requests (PASID 0), from the PRQ work */
void npfnic_fault_delay(struct npfnic *nic, bool *delayed, u64 since_ns);
void npfnic_fault_sleep(u64 since_ns);
bool npfnic_fault_delaying(void);
void npfnic_fault_reset(struct npfnic *nic);
void npfnic_fault_request(struct npfnic *nic, const struct npfnic_xlat_req *r, u32 *n);
void npfnic_fault_answer(struct npfnic *nic, u32 n, u64 isr);
void npfnic_fault_ahead_due(struct npfnic *nic);

/* npfnic_xlat.c: the translation engine both sides use */
/* The invalidations one WAIT may cover: the WAIT needs an entry too. */
#define NPFNIC_INV_BATCH	(NPFNIC_INVQ_SIZE / 2)

int npfnic_xlat_probe(struct npfnic *nic);
void npfnic_xlat_remove(struct npfnic *nic);
bool npfnic_xlat_running(struct npfnic *nic);
int npfnic_xlat_eth_get(struct npfnic *nic, struct npfnic_pt *root);
bool npfnic_xlat_eth_put(struct npfnic *nic);
int npfnic_xlat_rdma_get(struct npfnic *nic);
void npfnic_xlat_rdma_put(struct npfnic *nic);
void npfnic_xlat_rdma_attach(struct npfnic *nic, struct npfnic_ib_dev *dev);
int npfnic_xlat_set_pasid(struct npfnic *nic, u32 pasid, struct npfnic_pt *root);
int npfnic_xlat_invalidate_n(struct npfnic *nic, u32 pasid, const u64 *addr, u32 n, u64 pages);
int npfnic_xlat_invalidate(struct npfnic *nic, u32 pasid, u64 addr, u64 pages);
int npfnic_xlat_prsp_put(struct npfnic *nic, u16 prgi, u32 pasid, bool pasid_valid, u16 code);
void npfnic_xlat_prsp_ring(struct npfnic *nic);
int npfnic_xlat_respond(struct npfnic *nic, u16 prgi, u32 pasid, bool pasid_valid, u16 code);
void npfnic_xlat_pri_check(struct npfnic *nic);
void npfnic_xlat_flush(struct npfnic *nic);
irqreturn_t npfnic_xlat_prq_irq(struct npfnic *nic);
irqreturn_t npfnic_xlat_invq_irq(struct npfnic *nic);

/* npfnic_backup.c: the backup ring */
void npfnic_backup_post(struct npfnic *nic, u32 j);
void npfnic_backup_work(struct work_struct *work);
irqreturn_t npfnic_backup_irq(struct npfnic *nic);

/* npfnic_diag.c: diagnostics and fault injection in debugfs */
void npfnic_diag_init(void);
void npfnic_diag_exit(void);
void npfnic_diag_probe(struct npfnic *nic);
void npfnic_diag_remove(struct npfnic *nic);
int npfnic_npf_inject(struct npfnic *nic, const char *what, unsigned int q);
void npfnic_echo_work(struct work_struct *work);
irqreturn_t npfnic_echo_irq(struct npfnic *nic);

/* npfnic_ib.c: the RDMA device (rdma_rxe's user ABI) over the netdev */
int npfnic_ib_probe(struct npfnic *nic);
void npfnic_ib_remove(struct npfnic *nic);
irqreturn_t npfnic_ib_irq(struct npfnic *nic);
void npfnic_ib_page_request(struct npfnic_ib_dev *dev, const struct npfnic_xlat_req *r);
int npfnic_ib_inject(struct npfnic *nic, const char *what);

#endif /* NPFNIC_H */
