/* SPDX-License-Identifier: GPL-2.0 */
/*
 * npfnic RDMA personality, shared by the ib_device (npfnic_ib.c), the rxe
 * queues with the CQs and QPs built on them (npfnic_ib_queue.c) and the
 * memory regions with their per-context address spaces (npfnic_ib_mr.c).
 *
 * npfnic speaks rdma_rxe's user ABI (include/uapi/rdma/rdma_user_rxe.h) so
 * that Debian's stock librxe drives it: the queue buffers are laid out as
 * rxe lays them out and are mapped into the process, and the device reads
 * the send and receive queues and writes the completion queues there
 * itself. The driver only creates, modifies and destroys objects, through
 * one device command per verb (npfnic_ib_cmd).
 */
#ifndef NPFNIC_IB_H
#define NPFNIC_IB_H

#include <linux/idr.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/xarray.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_user_rxe.h>

#include "npfnic.h"

/*
 * The limits the device enforces, reported by query_device and checked at
 * every create. All in one place: they become the NPFNIC_RDMA_* values of
 * npfnic_hw.h once the device's RDMA contract (vdevice/hw/rdma.go) defines
 * them. The queue sizes keep every rxe queue buffer within one physically
 * contiguous coherent allocation of at most 1 MiB.
 */
#define NPFNIC_IB_MAX_QP	64
#define NPFNIC_IB_MAX_QP_WR	1023	/* slots: the next power of two above */
#define NPFNIC_IB_MAX_SGE	8
#define NPFNIC_IB_MAX_INLINE	256
#define NPFNIC_IB_MAX_CQ	128
#define NPFNIC_IB_MAX_CQE	8191
#define NPFNIC_IB_MAX_MR	1024
#define NPFNIC_IB_MAX_PD	256
#define NPFNIC_IB_MAX_MR_SIZE	BIT_ULL(32)
#define NPFNIC_IB_MAX_RD_ATOM	16
#define NPFNIC_IB_MAX_MSG	BIT(31)
#define NPFNIC_IB_GID_TBL_LEN	32
#define NPFNIC_IB_MAX_CTX	64	/* user contexts: one PASID each */
#define NPFNIC_IB_QPN_BASE	16	/* QP0 and QP1 are the special QPs */
#define NPFNIC_IB_PASID_BASE	1	/* PASID 0 is the Ethernet side's */

/* A completion queue entry: struct ib_uverbs_wc in a 64-byte slot. */
#define NPFNIC_IB_CQE_SIZE	64
static_assert(sizeof(struct ib_uverbs_wc) <= NPFNIC_IB_CQE_SIZE);

/* One RoCE GID of the port, as the core's GID cache handed it over. */
struct npfnic_ib_gid {
	bool valid;
	u8 type;			/* enum ib_gid_type: RoCEv2 here */
	union ib_gid gid;
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
	struct ida mr_ida;		/* MR key indices */
	atomic_t mr_gen;		/* the low byte of every new key */
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
	struct mutex as_lock;		/* root and refs */
	struct npfnic_pt *root;
	struct xarray refs;
};

struct npfnic_ib_pd {
	struct ib_pd ibpd;
	u32 pdn;
};

/*
 * A buffer user space maps (an rxe queue): DMA-coherent, physically
 * contiguous, owned by its mmap entry. Destroying the queue's object
 * removes the entry; the buffer goes in mmap_free, once no mapping of it
 * is left (or the core zapped them all on disassociation).
 */
struct npfnic_ib_mmap {
	struct rdma_user_mmap_entry rdma;
	struct device *dma_dev;
	void *cpu;
	dma_addr_t dma;
	size_t size;			/* page aligned */
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

struct npfnic_ib_cq {
	struct ib_cq ibcq;
	u32 cqn;
	struct npfnic_ib_queue q;
	u32 notify;			/* IB_CQ_SOLICITED or IB_CQ_NEXT_COMP armed */
};

struct npfnic_ib_qp {
	struct ib_qp ibqp;
	struct mutex lock;		/* attr */
	struct npfnic_ib_queue sq;
	struct npfnic_ib_queue rq;
	struct ib_qp_cap cap;		/* what the queues hold */
	struct ib_qp_attr attr;		/* the attributes last set; no sgid_attr kept */
	u8 gid_index;			/* the path's source GID (IB_QP_AV) */
	u8 smac[ETH_ALEN];		/* of the source GID's netdev */
	u16 vlan;			/* 0xffff: none */
};

struct npfnic_ib_mr {
	struct ib_mr ibmr;
	struct ib_umem *umem;		/* NULL: the kernel's DMA MR */
	struct npfnic_ib_ucontext *uc;	/* whose address space maps it */
	u32 index;			/* key >> 8 */
	u64 va;				/* iova of the first byte */
	u64 length;
	int access;
};

/*
 * One device command. The RDMA contract will define the command queue;
 * until then this says what each command carries.
 */
enum npfnic_ib_cmd_op {
	NPFNIC_IB_CMD_SET_GID = 1,
	NPFNIC_IB_CMD_DEL_GID,
	NPFNIC_IB_CMD_CREATE_CQ,
	NPFNIC_IB_CMD_DESTROY_CQ,
	NPFNIC_IB_CMD_ARM_CQ,
	NPFNIC_IB_CMD_CREATE_QP,
	NPFNIC_IB_CMD_MODIFY_QP,
	NPFNIC_IB_CMD_DESTROY_QP,
	NPFNIC_IB_CMD_REG_MR,
	NPFNIC_IB_CMD_DEREG_MR,
	NPFNIC_IB_CMD_SQ_DOORBELL,
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
			u32 flags;		/* ARM_CQ: IB_CQ_SOLICITED / NEXT_COMP */
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
		} qp;
		struct {
			u32 key;
			u32 pdn;
			u32 pasid;
			int access;
			u64 va;
			u64 length;
		} mr;
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

static inline struct npfnic_ib_pd *to_npfnic_ib_pd(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct npfnic_ib_pd, ibpd);
}

static inline struct npfnic_ib_cq *to_npfnic_ib_cq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct npfnic_ib_cq, ibcq);
}

static inline struct npfnic_ib_qp *to_npfnic_ib_qp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct npfnic_ib_qp, ibqp);
}

static inline struct npfnic_ib_mr *to_npfnic_ib_mr(struct ib_mr *ibmr)
{
	return container_of(ibmr, struct npfnic_ib_mr, ibmr);
}

/* npfnic_ib.c */
int npfnic_ib_cmd(struct npfnic_ib_dev *dev, struct npfnic_ib_cmd *cmd);

/* npfnic_ib_queue.c: rxe queues, CQs and QPs */
int npfnic_ib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			struct ib_udata *udata);
int npfnic_ib_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
int npfnic_ib_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);
int npfnic_ib_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc);
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

#endif /* NPFNIC_IB_H */
