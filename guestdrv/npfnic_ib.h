/* SPDX-License-Identifier: GPL-2.0 */
/*
 * npfnic RDMA personality, shared by the ib_device (npfnic_ib.c), the
 * device's command and event queues (npfnic_ib_cmd.c), the rxe queues with
 * the CQs, SRQs and QPs built on them (npfnic_ib_queue.c), the memory
 * regions with their per-context address spaces (npfnic_ib_mr.c), their use
 * of the function's translation engine (npfnic_ib_ats.c over npfnic_xlat.c)
 * and the page requests of on-demand paging memory regions
 * (npfnic_ib_odp.c).
 *
 * npfnic speaks rdma_rxe's user ABI (include/uapi/rdma/rdma_user_rxe.h) so
 * that Debian's stock librxe drives it: the queue buffers are laid out as
 * rxe lays them out and are mapped into the process, and the device reads
 * the send and receive queues and writes the completion queues there
 * itself. The driver creates, modifies and destroys objects, through one
 * device command per verb (npfnic_ib_cmd).
 *
 * Kernel consumers (the MAD layer's GSI QP, ib_cm, rdma_cm; with
 * FEATURES.RDMA_KERNEL) get the same queues in kernel memory, which the
 * driver itself produces into and consumes from (npfnic_ib_queue.c), and
 * a DMA MR per PD that the device reaches without translation.
 */
#ifndef NPFNIC_IB_H
#define NPFNIC_IB_H

#include <linux/idr.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/netdevice.h>
#include <linux/xarray.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_user_rxe.h>

#include "npfnic.h"

/*
 * The limits reported by query_device and checked at every create: the
 * device's (NPFNIC_RDMA_*), tightened where the driver's allocations are
 * smaller. Every rxe queue buffer is one physically contiguous coherent
 * allocation (the device reaches a queue at one IOVA), kept at most
 * 2 MiB: a send queue of 2048 slots of 512 bytes (16 SGEs or 256 inline
 * bytes), a CQ of 16384 slots of 64 bytes.
 */
#define NPFNIC_IB_MAX_QP	NPFNIC_RDMA_MAX_QP
#define NPFNIC_IB_MAX_QP_WR	2047	/* slots: the next power of two above */
#define NPFNIC_IB_MAX_SGE	16
#define NPFNIC_IB_MAX_INLINE	NPFNIC_RDMA_MAX_INLINE
#define NPFNIC_IB_MAX_CQ	NPFNIC_RDMA_MAX_CQ
#define NPFNIC_IB_MAX_SRQ	NPFNIC_RDMA_MAX_SRQ	/* SRQNs 0.., WRs and SGEs as QPs' */
#define NPFNIC_IB_MAX_AH	65536	/* address handles: driver objects only */
#define NPFNIC_IB_MAX_CQE	16383
#define NPFNIC_IB_MAX_MR	NPFNIC_RDMA_MAX_MR
#define NPFNIC_IB_MAX_MW	NPFNIC_RDMA_MAX_MW
/* Window indices (R_Key >> 8) lie above every MR's. */
#define NPFNIC_IB_MW_INDEX_BASE	(NPFNIC_IB_MAX_MR + 1)
#define NPFNIC_IB_MAX_PD	1024
#define NPFNIC_IB_MAX_MR_SIZE	NPFNIC_RDMA_MAX_MR_SIZE
/*
 * The span of an implicit ODP MR's child (npfnic_ib_odp.c): mlx5's are
 * 1 GiB; 64 MiB keeps a child's page arrays at 256 KiB.
 */
#define NPFNIC_IB_IMR_SHIFT	26
#define NPFNIC_IB_IMR_SPAN	BIT_ULL(NPFNIC_IB_IMR_SHIFT)

/* A context's refs values: the pinned MRs over a page, and how many of them write it. */
#define NPFNIC_IB_REF_W		BIT_ULL(32)

static inline u64 npfnic_ib_ref_n(u64 ref)
{
	return lower_32_bits(ref);
}

static inline u64 npfnic_ib_ref_w(u64 ref)
{
	return ref >> 32;
}

#define NPFNIC_IB_MAX_RD_ATOM	NPFNIC_RDMA_MAX_RD_ATOMIC
#define NPFNIC_IB_MAX_MSG	NPFNIC_RDMA_MAX_MSG_SIZE
#define NPFNIC_IB_GID_TBL_LEN	NPFNIC_RDMA_MAX_GID
#define NPFNIC_IB_MAX_CTX	64	/* user contexts: one PASID each */
#define NPFNIC_IB_QPN_BASE	16	/* QPNs 16.., as rdma_rxe's */
#define NPFNIC_IB_PASID_BASE	1	/* PASID 0 is the Ethernet queues' */
/* rdma statistic: the device's counters, then the driver's of on-demand paging. */
#define NPFNIC_IB_ODP_NSTATS	10
#define NPFNIC_IB_NSTATS	(NPFNIC_RDMA_STATS + NPFNIC_IB_ODP_NSTATS)

static_assert(NPFNIC_IB_MAX_QP_WR < NPFNIC_RDMA_MAX_QP_WR);
static_assert(NPFNIC_IB_MAX_CQE < NPFNIC_RDMA_MAX_CQE);
static_assert(NPFNIC_IB_MAX_SGE <= NPFNIC_RDMA_MAX_SGE);
static_assert(NPFNIC_IB_QPN_BASE + NPFNIC_IB_MAX_QP - 1 <= NPFNIC_RDMA_QPN_MAX);

/* A completion queue entry: struct ib_uverbs_wc in a 64-byte slot. */
#define NPFNIC_IB_CQE_SIZE	64
static_assert(sizeof(struct ib_uverbs_wc) <= NPFNIC_IB_CQE_SIZE);

/* One RoCE GID of the port, as the core's GID cache handed it over. */
struct npfnic_ib_gid {
	bool valid;
	u8 type;			/* enum ib_gid_type: RoCEv2 here */
	union ib_gid gid;
};

/* The device's RDMA engine: command queue, event queue, status block (npfnic_ib_cmd.c). */
struct npfnic_ib_hw {
	bool enabled;			/* the device has the engine and it runs */
	bool dead;			/* killed: a command timed out, or an engine error */
	bool quiesced;			/* reset and idle: holds no object, uses no memory */
	bool atomics;			/* FEAT_RDMA_ATOMIC: REMOTE_ATOMIC reaches the device */
	bool srq;			/* FEAT_RDMA_SRQ: shared receive queues */
	bool ud;			/* FEAT_RDMA_UD: UD QPs, address handles */
	bool uc;			/* FEAT_RDMA_UC: UC QPs */
	bool mw;			/* FEAT_RDMA_MW: memory windows */
	bool resize_cq;			/* FEAT_RDMA_RESIZE_CQ */
	bool fast_reg;			/* FEAT_RDMA_FAST_REG: ALLOC_MR, REG_MR entries */
	bool kernel;			/* FEAT_RDMA_KERNEL: kernel verbs, the GSI QP, DMA MRs */
	unsigned long inject_dereg;	/* bit 0: the next DEREG_MR gets no status (diag) */
	struct mutex cmd_lock;		/* the command queue: one command at a time */
	wait_queue_head_t cmd_wait;	/* woken by CMD_DONE events */
	struct npfnic_rdma_cmd *cmdq;
	dma_addr_t cmdq_dma;
	u32 cmdq_tail;			/* commands posted (free-running) */
	spinlock_t eq_lock;		/* the event queue (interrupt handler) */
	struct npfnic_rdma_event *eq;
	dma_addr_t eq_dma;
	u32 eq_head;			/* events consumed (free-running) */
	bool eq_broken;			/* the device claimed impossible events */
	u32 bad_events;			/* events of unknown type */
	struct npfnic_rdma_status *status;
	dma_addr_t status_dma;
};

/* The RDMA side's use of the translation engine (npfnic_ib_ats.c, npfnic_xlat.c). */
struct npfnic_ib_ats {
	bool possible;			/* ATS, PASID and the RDMA engine */
	unsigned int users;		/* user contexts, each holding the engine */
	struct mutex lock;		/* users */
};

/* One page request group of an RDMA PASID being answered (npfnic_ib_odp.c). */
struct npfnic_ib_prg {
	bool active;			/* requests seen, not answered yet */
	bool failed;			/* a page of it could not be made present */
	u32 gen;			/* the engine run that raised it */
	u32 pasid;
	u16 flags;			/* NPFNIC_PRQ_* of its first request */
	/* Consecutive pages asked for and not resolved yet: one run. */
	u32 run_pasid;
	u64 run_va;			/* its first page */
	u32 run_pages;			/* 0: none */
	bool run_write;
	u64 run_isr_ns;			/* when its first request was seen */
};

/*
 * Page requests for the contexts' PASIDs (npfnic_ib_odp.c), when the
 * device has FEAT_RDMA_ODP: the engine's RDMA work hands them over one at
 * a time, in order, so the group table is that work's.
 */
struct npfnic_ib_pri {
	bool possible;			/* FEAT_RDMA_ODP and a PRI capability */
	bool enabled;			/* contexts exist (ats.lock to change) */
	struct npfnic_ib_prg prg[NPFNIC_PRGI_MAX];
};

/* The driver's counters of on-demand paging. */
struct npfnic_ib_odp_stats {
	atomic64_t faults;		/* page requests for RDMA PASIDs */
	atomic64_t fault_errors;	/* answered Invalid Request */
	atomic64_t pages_mapped;	/* PTEs entered by faults */
	atomic64_t invalidations;	/* notifier calls that dropped device translations */
	atomic64_t pages_invalidated;
	atomic64_t bad_requests;	/* queue entries the device should not have written */
	atomic64_t rnpf_injected;	/* synthetic receive faults: pages evicted */
	atomic64_t rnpf_skipped;	/* drawn, but no mapped page to evict */
};

struct npfnic_ib_dev {
	struct ib_device ibdev;		/* first: ib_alloc_device */
	struct npfnic *nic;
	struct net_device *netdev;
	struct notifier_block nb;	/* port events from the netdev */

	struct mutex gid_lock;		/* gids and their commands */
	struct npfnic_ib_gid gids[NPFNIC_IB_GID_TBL_LEN];

	struct ida ctx_ida;		/* PASIDs of the user contexts */
	struct ida pd_ida;
	struct ida cq_ida;
	struct ida qp_ida;		/* QPNs */
	unsigned long gsi_busy;		/* bit 0: QP 1, the GSI QP, exists */
	struct ida srq_ida;		/* SRQNs */
	struct ida mr_ida;		/* MR key indices */
	struct ida mw_ida;		/* memory window R_Key indices */
	atomic_t mr_gen;		/* the low byte of every new key */

	struct npfnic_ib_hw hw;
	struct npfnic_ib_ats ats;
	struct npfnic_ib_pri pri;

	/*
	 * On-demand paging: odp_lock covers ucs (PASID -> context), each
	 * context's odp_mrs and each ODP MR's users; odp_wait wakes a dereg
	 * waiting for a fault resolution to let go of its MR.
	 */
	struct mutex odp_lock;
	struct xarray ucs;
	wait_queue_head_t odp_wait;
	struct npfnic_ib_odp_stats odp;
	struct delayed_work rnpf_work;	/* synthetic receive faults (system_unbound_wq) */
	unsigned long rnpf_due;		/* bit 0: the device's MSG_ALARM came */
	u32 rnpf_ppm;			/* the rate the alarm is armed for (the work's) */
	struct rdma_stat_desc stat_descs[NPFNIC_IB_NSTATS];	/* rdma statistic */
	struct xarray cqs;		/* CQN -> live CQ, for events (irq-safe lock) */
	struct xarray qps;		/* QPN -> live QP, for events (irq-safe lock) */
	struct xarray srqs;		/* SRQN -> live SRQ, for events (irq-safe lock) */
};

/*
 * A user context owns one I/O address space, a PASID with its own page
 * tables, in which every MR of the context maps its VAs to the pinned
 * pages' DMA addresses (npfnic_ib_mr.c). refs counts the MRs over each
 * mapped page (by VA page number), so overlapping MRs share a PTE.
 */
struct npfnic_ib_ucontext {
	struct ib_ucontext ibuc;
	u32 pasid;
	struct mutex as_lock;		/* root's growth and changes of refs */
	/*
	 * Whose a PTE is: a pinned MR's page (in refs) or an ODP MR's;
	 * taken around each leaf entry's change and the refs look-up that
	 * decides it (npfnic_ib_odp.c). Inside as_lock and umem_mutex.
	 */
	spinlock_t pt_lock;
	struct npfnic_pt *root;
	struct xarray refs;
	struct list_head odp_mrs;	/* its ODP MRs (dev->odp_lock) */
};

/* A memory window: the device holds its state (npfnic_ib_mw.c). */
struct npfnic_ib_mw {
	struct ib_mw ibmw;
	u32 index;			/* R_Key >> 8 */
};

struct npfnic_ib_pd {
	struct ib_pd ibpd;
	u32 pdn;
};

/*
 * An address handle: librxe copies its vector into each UD send entry,
 * so the device holds nothing for it and it has no number. A kernel
 * consumer's vector is kept here, and post_send copies it likewise.
 */
struct npfnic_ib_ah {
	struct ib_ah ibah;
	bool kernel;			/* av is filled: created with no udata */
	struct rxe_av av;
};

/*
 * The buffer of an rxe queue: DMA-coherent, physically contiguous. A user
 * queue's is owned by its mmap entry: destroying the queue's object
 * removes the entry, and the buffer goes in mmap_free, once no mapping of
 * it is left (or the core zapped them all on disassociation). A kernel
 * queue's (not mapped) goes when its object is destroyed.
 */
struct npfnic_ib_mmap {
	struct rdma_user_mmap_entry rdma;
	struct device *dma_dev;
	void *cpu;
	dma_addr_t dma;
	size_t size;			/* page aligned */
	bool mapped;			/* rdma is in a user context's mmap table */
	bool leaked;			/* the device may still use it: never freed */
};

/* An rxe queue: struct rxe_queue_buf and its slots. */
struct npfnic_ib_queue {
	struct npfnic_ib_mmap *mm;	/* NULL: none (e.g. a QP on an SRQ) */
	struct rxe_queue_buf *buf;
	dma_addr_t dma;			/* what the device is given */
	size_t size;			/* header + slots */
	u32 slots;			/* a power of two */
	u8 log2_elem_size;
};

/*
 * A completion queue; a kernel consumer's (kernel) is polled by the
 * driver, under lock, which covers the queue's consumer index.
 */
struct npfnic_ib_cq {
	struct ib_cq ibcq;
	u32 cqn;
	bool kernel;
	spinlock_t lock;		/* a kernel CQ's consumer index */
	struct npfnic_ib_queue q;
};

/*
 * A shared receive queue: an rxe queue of receive entries, as a QP's
 * receive queue, that the QPs created on it take their receives from.
 */
struct npfnic_ib_srq {
	struct ib_srq ibsrq;
	struct mutex lock;		/* limit changes (MODIFY_SRQ) */
	bool kernel;			/* the driver posts to it (post_srq_recv) */
	spinlock_t rq_lock;		/* a kernel SRQ's producer index */
	u32 srqn;
	struct npfnic_ib_queue q;
	u32 max_wr;			/* entries the queue holds */
	u32 max_sge;
	u32 limit;			/* armed; 0: not (the SRQ_LIMIT event disarms it) */
	u32 mods;			/* MODIFY_SRQs sent: the arm the device numbers events by */
};

/*
 * A queue pair. A kernel consumer's (kernel) has its queues posted to by
 * the driver: sq_lock and rq_lock cover their producer indices, and may
 * be taken with interrupts off (ib_mad posts under its own spinlock).
 */
struct npfnic_ib_qp {
	struct ib_qp ibqp;
	struct mutex lock;		/* attr */
	bool kernel;
	spinlock_t sq_lock;		/* a kernel QP's send queue producer index */
	spinlock_t rq_lock;		/* its receive queue's */
	struct npfnic_ib_queue sq;
	struct npfnic_ib_queue rq;	/* none on an SRQ */
	struct ib_qp_cap cap;		/* what the queues hold (no receives on an SRQ) */
	bool sig_all;			/* every send WQE completes (IB_SIGNAL_ALL_WR) */
	struct ib_qp_attr attr;		/* the attributes last set; no sgid_attr kept */
	u8 gid_index;			/* the path's source GID (IB_QP_AV) */
	u8 smac[ETH_ALEN];		/* of the source GID's netdev */
	u16 vlan;			/* 0xffff: none */
};

struct npfnic_ib_mr {
	struct ib_mr ibmr;
	struct ib_umem *umem;		/* NULL: the kernel's DMA MR */
	bool physical;			/* the DMA MR, registered (REG_MR FLAG_PHYSICAL) */
	struct npfnic_ib_ucontext *uc;	/* whose address space maps it */
	struct npfnic_ib_dev *dev;
	u32 index;			/* key >> 8 */
	u64 va;				/* iova of the first byte */
	u64 length;
	int access;
	bool odp;			/* umem is an ib_umem_odp: nothing pinned */
	struct list_head odp_node;	/* in uc->odp_mrs while it owns its pages */
	bool odp_dying;			/* dereg began: no resolution takes it (odp_lock) */
	unsigned int odp_users;		/* resolutions using it (odp_lock; a child's: imr_lock) */
	/*
	 * Implicit ODP (npfnic_ib_odp.c): the parent, over the whole address
	 * space, has its children, ODP MRs of NPFNIC_IB_IMR_SPAN each made as
	 * faults need them, in children (by va >> NPFNIC_IB_IMR_SHIFT); a
	 * child knows its parent and is in no list. imr_lock covers children,
	 * the children's users and imr_dead; reap frees the children that
	 * invalidations emptied.
	 */
	bool implicit;
	struct npfnic_ib_mr *parent;
	struct mutex imr_lock;		/* children, their users, imr_dead */
	struct xarray children;
	bool imr_dead;			/* dereg took the children */
	struct work_struct reap;
	/* rdma statistic mr, with mlx5's names: pages mapped by faults, invalidated. */
	atomic64_t page_faults;
	atomic64_t page_invalidations;
	/* Fast registration (ib_alloc_mr): the page list the device reads at REG_MR. */
	bool fast;
	u32 hw_key;			/* ALLOC_MR's key: DEREG_MR names it so */
	__le64 *pages;			/* max_pages entries, DMA-coherent */
	dma_addr_t pages_dma;
	u32 max_pages;
	u32 npages;			/* set by map_mr_sg */
};

/*
 * One device command, as the verbs see it; npfnic_ib_cmd turns it into the
 * device's command queue entry (struct npfnic_rdma_cmd_*).
 */
enum npfnic_ib_cmd_op {
	NPFNIC_IB_CMD_SET_GID = 1,
	NPFNIC_IB_CMD_DEL_GID,
	NPFNIC_IB_CMD_CREATE_CQ,
	NPFNIC_IB_CMD_DESTROY_CQ,
	NPFNIC_IB_CMD_CREATE_QP,
	NPFNIC_IB_CMD_MODIFY_QP,
	NPFNIC_IB_CMD_QUERY_QP,
	NPFNIC_IB_CMD_DESTROY_QP,
	NPFNIC_IB_CMD_REG_MR,
	NPFNIC_IB_CMD_DEREG_MR,
	NPFNIC_IB_CMD_QUERY_STATS,
	NPFNIC_IB_CMD_CREATE_SRQ,
	NPFNIC_IB_CMD_MODIFY_SRQ,
	NPFNIC_IB_CMD_DESTROY_SRQ,
	NPFNIC_IB_CMD_ALLOC_MW,
	NPFNIC_IB_CMD_DEALLOC_MW,
	NPFNIC_IB_CMD_RESIZE_CQ,
	NPFNIC_IB_CMD_ALLOC_MR,
};

struct npfnic_ib_cmd {
	enum npfnic_ib_cmd_op op;
	union {
		struct {
			u32 index;
			u8 type;
			union ib_gid gid;
		} gid;
		struct {
			u32 cqn;
			const struct npfnic_ib_queue *q;
		} cq;
		struct {
			u32 qpn;
			u32 pdn;
			u32 pasid;
			u32 send_cqn;
			u32 recv_cqn;
			int mask;		/* MODIFY_QP: IB_QP_* */
			const struct npfnic_ib_qp *qp;
			const struct npfnic_ib_srq *srq;	/* CREATE_QP: receives from it */
			u8 state;		/* QUERY_QP results */
			u32 sq_psn;
			u32 rq_psn;
		} qp;
		struct {
			u32 srqn;
			u32 pdn;
			u32 limit;		/* CREATE_SRQ, MODIFY_SRQ: to arm; 0: none */
			const struct npfnic_ib_srq *srq;
		} srq;
		struct {
			u32 key;
			u32 pdn;
			u32 pasid;
			int access;
			bool physical;		/* va is an IOVA, reached untranslated */
			bool implicit;		/* the PASID's whole address space (va, length 0) */
			u64 va;
			u64 length;
			u64 pages;		/* ALLOC_MR: the page list's IOVA */
			u32 max_pages;		/* ALLOC_MR: its entries */
		} mr;
		struct {
			u64 *values;		/* NPFNIC_RDMA_STATS of them */
		} stats;
		struct {
			u32 rkey;		/* DEALLOC_MW: only its index counts */
			u32 pdn;
			u8 type;
		} mw;
	};
};

static inline struct npfnic_ib_dev *to_npfnic_ib_dev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct npfnic_ib_dev, ibdev);
}

static inline struct npfnic_ib_ucontext *to_npfnic_ib_uc(struct ib_ucontext *ibuc)
{
	return container_of(ibuc, struct npfnic_ib_ucontext, ibuc);
}

static inline struct npfnic_ib_mw *to_npfnic_ib_mw(struct ib_mw *ibmw)
{
	return container_of(ibmw, struct npfnic_ib_mw, ibmw);
}

static inline struct npfnic_ib_pd *to_npfnic_ib_pd(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct npfnic_ib_pd, ibpd);
}

static inline struct npfnic_ib_cq *to_npfnic_ib_cq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct npfnic_ib_cq, ibcq);
}

static inline struct npfnic_ib_srq *to_npfnic_ib_srq(struct ib_srq *ibsrq)
{
	return container_of(ibsrq, struct npfnic_ib_srq, ibsrq);
}

static inline struct npfnic_ib_qp *to_npfnic_ib_qp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct npfnic_ib_qp, ibqp);
}

static inline struct npfnic_ib_mr *to_npfnic_ib_mr(struct ib_mr *ibmr)
{
	return container_of(ibmr, struct npfnic_ib_mr, ibmr);
}

/* The GSI QP is a UD QP to the device, in every respect. */
static inline bool npfnic_ib_qp_ud(const struct ib_qp *ibqp)
{
	return ibqp->qp_type == IB_QPT_UD || ibqp->qp_type == IB_QPT_GSI;
}

/* npfnic_ib_cmd.c: the device's command and event queues, doorbells */
int npfnic_ib_hw_init(struct npfnic_ib_dev *dev);
void npfnic_ib_hw_fini(struct npfnic_ib_dev *dev);
int npfnic_ib_cmd(struct npfnic_ib_dev *dev, struct npfnic_ib_cmd *cmd);
bool npfnic_ib_hw_stop(struct npfnic_ib_dev *dev);
void npfnic_ib_sq_doorbell(struct npfnic_ib_dev *dev, u32 qpn);
void npfnic_ib_cq_arm(struct npfnic_ib_dev *dev, u32 cqn, bool solicited);

/* npfnic_ib_ats.c: translation of the MRs' PASIDs */
void npfnic_ib_ats_init(struct npfnic_ib_dev *dev);
void npfnic_ib_ats_fini(struct npfnic_ib_dev *dev);
int npfnic_ib_ats_get(struct npfnic_ib_dev *dev);
void npfnic_ib_ats_put(struct npfnic_ib_dev *dev);
bool npfnic_ib_ats_possible(struct npfnic_ib_dev *dev);
int npfnic_ib_set_pasid(struct npfnic_ib_dev *dev, u32 pasid, struct npfnic_pt *root);
int npfnic_ib_invalidate(struct npfnic_ib_dev *dev, u32 pasid, u64 va, u64 pages);

/* npfnic_ib_odp.c: page requests of the contexts' PASIDs, ODP memory regions */
void npfnic_ib_pri_start(struct npfnic_ib_dev *dev);
void npfnic_ib_pri_stop(struct npfnic_ib_dev *dev);
int npfnic_ib_odp_init(struct npfnic_ib_dev *dev);
void npfnic_ib_odp_fini(struct npfnic_ib_dev *dev);
int npfnic_ib_odp_reg(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr, u64 start);
bool npfnic_ib_odp_all(void);
bool npfnic_ib_odp_implicit_possible(struct npfnic_ib_dev *dev);
void npfnic_ib_odp_dereg(struct npfnic_ib_dev *dev, struct npfnic_ib_mr *mr);
void npfnic_ib_odp_get_stats(struct npfnic_ib_dev *dev, u64 *data);
void npfnic_ib_rnpf_alarm(struct npfnic_ib_dev *dev);

/* npfnic_ib_queue.c: rxe queues, CQs, SRQs and QPs */
int npfnic_ib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			struct ib_udata *udata);
int npfnic_ib_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
int npfnic_ib_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);
int npfnic_ib_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc);
int npfnic_ib_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
			 struct ib_udata *udata);
int npfnic_ib_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
			 enum ib_srq_attr_mask mask, struct ib_udata *udata);
int npfnic_ib_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr);
int npfnic_ib_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata);
int npfnic_ib_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			    const struct ib_recv_wr **bad_wr);
int npfnic_ib_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata);
int npfnic_ib_dealloc_mw(struct ib_mw *ibmw);
int npfnic_ib_resize_cq(struct ib_cq *ibcq, int cqe, struct ib_udata *udata);
int npfnic_ib_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
			struct ib_udata *udata);
int npfnic_ib_destroy_ah(struct ib_ah *ibah, u32 flags);
int npfnic_ib_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
			struct ib_udata *udata);
int npfnic_ib_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
			struct ib_udata *udata);
int npfnic_ib_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		       struct ib_qp_init_attr *init);
int npfnic_ib_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata);
int npfnic_ib_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			const struct ib_send_wr **bad_wr);
int npfnic_ib_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr);
int npfnic_ib_mmap(struct ib_ucontext *ibuc, struct vm_area_struct *vma);
void npfnic_ib_mmap_free(struct rdma_user_mmap_entry *entry);

/* npfnic_ib_mr.c: memory regions and the contexts' address spaces */
int npfnic_ib_as_init(struct npfnic_ib_dev *dev, struct npfnic_ib_ucontext *uc);
void npfnic_ib_as_destroy(struct npfnic_ib_dev *dev, struct npfnic_ib_ucontext *uc);
struct ib_mr *npfnic_ib_get_dma_mr(struct ib_pd *ibpd, int access);
struct ib_mr *npfnic_ib_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length, u64 va,
				    int access, struct ib_udata *udata);
int npfnic_ib_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);
int npfnic_ib_fill_stat_mr_entry(struct sk_buff *msg, struct ib_mr *ibmr);
int npfnic_ib_fill_res_mr_entry(struct sk_buff *msg, struct ib_mr *ibmr);
struct ib_mr *npfnic_ib_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type type, u32 max_num_sg);
int npfnic_ib_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
			unsigned int *sg_offset);

#endif /* NPFNIC_IB_H */
