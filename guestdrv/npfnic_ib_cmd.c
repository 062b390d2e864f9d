// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic RDMA: the device's side of the verbs (interface 2.4): the command
 * queue every create, modify and destroy goes through, the event queue
 * (completion events, QP, CQ and SRQ errors, SRQ limits, command
 * completions), the send queue and CQ arm doorbells, and the engine's
 * bring-up and quiesce. Shared receive queues (interface 2.7) are there
 * when the device has FEATURES.RDMA_SRQ; what kernel consumers need
 * (interface 2.8: REG_MR's FLAG_PHYSICAL for the DMA MR, QP 1 as the GSI
 * QP) when it has FEATURES.RDMA_KERNEL.
 *
 * Commands run one at a time (cmd_lock): the driver writes a 64-byte
 * entry with status PENDING and NPFNIC_RDMA_CMD_FLAG_EVENT, moves
 * CMDQ_TAIL, and sleeps until the device wrote the status, woken by the
 * CMD_DONE event (and polling, for a device that lost its events).
 *
 * A command that gets no status within NPFNIC_IB_CMD_TIMEOUT_MS, or an
 * engine error, kills the engine, as mlx5 enters its internal error
 * state: no command is posted any more, and RDMA_CTRL RESET destroys
 * every object the device holds. Once BUSY clears the engine touches no
 * memory (quiesced): from then on the commands that end the device's use
 * of memory (DESTROY_CQ, DESTROY_QP, DESTROY_SRQ, DEREG_MR, DEL_GID)
 * succeed without it, so the destroy paths free everything, and the others fail with
 * -EIO. An engine that stays busy is not trusted with anything: every
 * command fails, and what the device may still use (queues, MR pages) is
 * leaked by the destroy paths, never freed; -ETIMEDOUT tells a create's
 * error path that the device may use what the command named.
 *
 * Events are read in the interrupt handler (EQ_VECTOR, armed again after
 * each batch). CQ, QP and SRQ events go to the core's handlers (uverbs
 * turns them into completion channel and async events), found by handle
 * in xarrays whose lock the handler holds while it calls them: a CQ, QP
 * or SRQ leaves its xarray before its destroy command, so no event
 * reaches an object that is going away. Event contents are device input: a handle
 * that names nothing is ignored, an event queue that claims more events
 * than it holds is left alone.
 *
 * Without the engine (FEATURES.RDMA clear), the ib_device still registers
 * and the verbs create their objects on the driver's side only: commands
 * succeed and do nothing, and doorbells are not written.
 */

#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/module.h>
#include <rdma/ib_verbs.h>

#include "npfnic_ib.h"

#define NPFNIC_IB_CMDQ_SIZE		64
#define NPFNIC_IB_EQ_SIZE		1024
#define NPFNIC_IB_CMD_TIMEOUT_MS	5000
/* QUERY_STATS writes the counters into the status block's page, here. */
#define NPFNIC_IB_STATS_OFFSET		256

/*
 * 64: `npfnic exp fault-cost -transport rc -rc-prefault 1,4,16,64` took a
 * cold 256 KiB receive from 64 faults and 1.4 s stalled on them to one
 * fault and 10 ms (docs/experiments.md); a request needs every page it
 * touches anyway, and 64 pages keep one group within the page request
 * queue.
 */
static unsigned int odp_prefault_pages = 64;
module_param(odp_prefault_pages, uint, 0444);
MODULE_PARM_DESC(odp_prefault_pages,
		 "RDMA page faults: pages one fault asks for, the faulting one and those after it its request touches (1..512), at probe (debugfs odp_prefault_pages changes it per function)");

static_assert(sizeof(struct npfnic_rdma_cmd) == NPFNIC_RDMA_CMD_SIZE);
static_assert(sizeof(struct npfnic_rdma_event) == NPFNIC_RDMA_EVENT_SIZE);
static_assert(NPFNIC_IB_CMDQ_SIZE * NPFNIC_RDMA_CMD_SIZE <= PAGE_SIZE);
static_assert(NPFNIC_RDMA_QUEUE_SIZE_MIN <= NPFNIC_IB_CMDQ_SIZE);
static_assert(sizeof(struct npfnic_rdma_status) <= NPFNIC_IB_STATS_OFFSET);
static_assert(NPFNIC_IB_STATS_OFFSET + NPFNIC_RDMA_STATS * sizeof(__le64) <= PAGE_SIZE);
static_assert(NPFNIC_IB_EQ_SIZE <= NPFNIC_RDMA_QUEUE_SIZE_MAX);
/* The device's QP states, attribute mask and access bits are the kernel's own. */
#define NPFNIC_IB_SAME(hw, ib) static_assert((hw) == (ib))
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_STATE, IB_QP_STATE);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_ACCESS_FLAGS, IB_QP_ACCESS_FLAGS);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_PKEY_INDEX, IB_QP_PKEY_INDEX);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_PORT, IB_QP_PORT);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_AV, IB_QP_AV);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_PATH_MTU, IB_QP_PATH_MTU);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_TIMEOUT, IB_QP_TIMEOUT);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_RETRY_CNT, IB_QP_RETRY_CNT);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_RNR_RETRY, IB_QP_RNR_RETRY);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_RQ_PSN, IB_QP_RQ_PSN);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_MAX_QP_RD_ATOMIC, IB_QP_MAX_QP_RD_ATOMIC);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_MIN_RNR_TIMER, IB_QP_MIN_RNR_TIMER);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_SQ_PSN, IB_QP_SQ_PSN);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_MAX_DEST_RD_ATOMIC, IB_QP_MAX_DEST_RD_ATOMIC);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_DEST_QPN, IB_QP_DEST_QPN);
NPFNIC_IB_SAME(NPFNIC_RDMA_ACCESS_LOCAL_WRITE, IB_ACCESS_LOCAL_WRITE);
NPFNIC_IB_SAME(NPFNIC_RDMA_ACCESS_REMOTE_WRITE, IB_ACCESS_REMOTE_WRITE);
NPFNIC_IB_SAME(NPFNIC_RDMA_ACCESS_REMOTE_READ, IB_ACCESS_REMOTE_READ);
NPFNIC_IB_SAME(NPFNIC_RDMA_ACCESS_REMOTE_ATOMIC, IB_ACCESS_REMOTE_ATOMIC);
NPFNIC_IB_SAME(NPFNIC_RDMA_ACCESS_ON_DEMAND, IB_ACCESS_ON_DEMAND);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_RESET, IB_QPS_RESET);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ERR, IB_QPS_ERR);
NPFNIC_IB_SAME(NPFNIC_RDMA_QP_ATTR_QKEY, IB_QP_QKEY);
NPFNIC_IB_SAME(NPFNIC_RDMA_ACCESS_MW_BIND, IB_ACCESS_MW_BIND);

#define NPFNIC_IB_QP_HW_MASK \
	(IB_QP_STATE | IB_QP_ACCESS_FLAGS | IB_QP_AV | IB_QP_PATH_MTU | IB_QP_TIMEOUT | \
	 IB_QP_RETRY_CNT | IB_QP_RNR_RETRY | IB_QP_RQ_PSN | IB_QP_MAX_QP_RD_ATOMIC | \
	 IB_QP_MIN_RNR_TIMER | IB_QP_SQ_PSN | IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_DEST_QPN | \
	 IB_QP_QKEY)
#define NPFNIC_IB_ACCESS_HW_MASK \
	(IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ | \
	 IB_ACCESS_MW_BIND | IB_ACCESS_ON_DEMAND)

/* What of access the device takes: REMOTE_ATOMIC only if it has atomics. */
static u32 npfnic_ib_hw_access(const struct npfnic_ib_hw *hw, u32 access, u32 mask)
{
	if (hw->atomics)
		mask |= IB_ACCESS_REMOTE_ATOMIC;
	return access & mask;
}

/* ---- building one command ---- */

/* CREATE_QP's flag for the QP's type: none for RC; the GSI QP is a UD QP. */
static u8 npfnic_ib_qp_type_flag(const struct npfnic_ib_qp *qp)
{
	switch (qp->ibqp.qp_type) {
	case IB_QPT_UD:
	case IB_QPT_GSI:
		return NPFNIC_RDMA_CMD_FLAG_UD;
	case IB_QPT_UC:
		return NPFNIC_RDMA_CMD_FLAG_UC;
	default:
		return 0;
	}
}

/* A QP with its own receive queue. */
static void npfnic_ib_fill_create_qp(struct npfnic_rdma_cmd_create_qp *c,
				     const struct npfnic_ib_cmd *cmd)
{
	const struct npfnic_ib_qp *qp = cmd->qp.qp;

	c->flags |= npfnic_ib_qp_type_flag(qp);
	c->pd = cpu_to_le32(cmd->qp.pdn);
	c->sq_buf = cpu_to_le64(qp->sq.dma);
	c->sq_slots = cpu_to_le32(qp->sq.slots);
	c->sq_log2_elem_size = cpu_to_le32(qp->sq.log2_elem_size);
	c->rq_buf = cpu_to_le64(qp->rq.dma);
	c->rq_slots = cpu_to_le32(qp->rq.slots);
	c->rq_log2_elem_size = cpu_to_le32(qp->rq.log2_elem_size);
	c->send_cqn = cpu_to_le32(cmd->qp.send_cqn);
	c->recv_cqn = cpu_to_le32(cmd->qp.recv_cqn);
	c->max_send_sge = cpu_to_le16(qp->cap.max_send_sge);
	c->max_recv_sge = cpu_to_le16(qp->cap.max_recv_sge);
	c->max_inline = cpu_to_le16(qp->cap.max_inline_data);
	c->sq_sig_all = cpu_to_le16(qp->sig_all);
}

/* A QP on an SRQ (FLAG_SRQ): the SRQN where the receive queue would be. */
static void npfnic_ib_fill_create_qp_srq(struct npfnic_rdma_cmd_create_qp_srq *c,
					 const struct npfnic_ib_cmd *cmd)
{
	const struct npfnic_ib_qp *qp = cmd->qp.qp;

	c->flags |= NPFNIC_RDMA_CMD_FLAG_SRQ | npfnic_ib_qp_type_flag(qp);
	c->pd = cpu_to_le32(cmd->qp.pdn);
	c->sq_buf = cpu_to_le64(qp->sq.dma);
	c->sq_slots = cpu_to_le32(qp->sq.slots);
	c->sq_log2_elem_size = cpu_to_le32(qp->sq.log2_elem_size);
	c->srqn = cpu_to_le32(cmd->qp.srq->srqn);
	c->send_cqn = cpu_to_le32(cmd->qp.send_cqn);
	c->recv_cqn = cpu_to_le32(cmd->qp.recv_cqn);
	c->max_send_sge = cpu_to_le16(qp->cap.max_send_sge);
	c->max_inline = cpu_to_le16(qp->cap.max_inline_data);
	c->sq_sig_all = cpu_to_le16(qp->sig_all);
}

static void npfnic_ib_fill_create_srq(struct npfnic_rdma_cmd_create_srq *c,
				      const struct npfnic_ib_cmd *cmd)
{
	const struct npfnic_ib_srq *srq = cmd->srq.srq;

	c->pd = cpu_to_le32(cmd->srq.pdn);
	c->buf = cpu_to_le64(srq->q.dma);
	c->slots = cpu_to_le32(srq->q.slots);
	c->log2_elem_size = cpu_to_le32(srq->q.log2_elem_size);
	c->max_sge = cpu_to_le16(srq->max_sge);
	c->limit = cpu_to_le32(cmd->srq.limit);
}

static void npfnic_ib_fill_modify_qp(const struct npfnic_ib_hw *hw,
				     struct npfnic_rdma_cmd_modify_qp *c,
				     const struct npfnic_ib_cmd *cmd)
{
	const struct npfnic_ib_qp *qp = cmd->qp.qp;
	const struct ib_qp_attr *a = &qp->attr;
	const u32 remote = IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ;

	c->mask = cpu_to_le32(cmd->qp.mask & NPFNIC_IB_QP_HW_MASK);
	c->state = a->qp_state;
	c->path_mtu = a->path_mtu;
	c->timeout = a->timeout;
	c->retry_cnt = a->retry_cnt;
	c->rnr_retry = a->rnr_retry;
	c->min_rnr_timer = a->min_rnr_timer;
	c->max_rd_atomic = a->max_rd_atomic;
	c->max_dest_rd_atomic = a->max_dest_rd_atomic;
	c->access = cpu_to_le32(npfnic_ib_hw_access(hw, a->qp_access_flags, remote));
	if (npfnic_ib_qp_ud(&qp->ibqp))
		((struct npfnic_rdma_cmd_modify_qp_ud *)c)->qkey = cpu_to_le32(a->qkey);
	else
		c->dest_qpn = cpu_to_le32(a->dest_qp_num);
	c->rq_psn = cpu_to_le32(a->rq_psn);
	c->sq_psn = cpu_to_le32(a->sq_psn);
	if (cmd->qp.mask & IB_QP_AV) {
		const struct ib_global_route *grh = rdma_ah_read_grh(&a->ah_attr);

		memcpy(c->dgid, grh->dgid.raw, sizeof(c->dgid));
		memcpy(c->dmac, a->ah_attr.roce.dmac, sizeof(c->dmac));
		c->sgid_index = qp->gid_index;
		c->hop_limit = grh->hop_limit;
	}
}

/* The entry for cmd, in the slot at the queue's tail. */
static void npfnic_ib_fill(struct npfnic_ib_hw *hw, struct npfnic_rdma_cmd *e,
			   const struct npfnic_ib_cmd *cmd, u8 op, u32 handle)
{
	memset(e, 0, sizeof(*e));
	e->opcode = op;
	e->flags = NPFNIC_RDMA_CMD_FLAG_EVENT;
	e->handle = cpu_to_le32(handle);
	switch (cmd->op) {
	case NPFNIC_IB_CMD_SET_GID: {
		struct npfnic_rdma_cmd_add_gid *c = (void *)e;

		memcpy(c->gid, cmd->gid.gid.raw, sizeof(c->gid));
		break;
	}
	case NPFNIC_IB_CMD_CREATE_CQ:
	case NPFNIC_IB_CMD_RESIZE_CQ: {
		struct npfnic_rdma_cmd_create_cq *c = (void *)e;

		c->buf = cpu_to_le64(cmd->cq.q->dma);
		c->slots = cpu_to_le32(cmd->cq.q->slots);
		c->log2_elem_size = cpu_to_le32(cmd->cq.q->log2_elem_size);
		break;
	}
	case NPFNIC_IB_CMD_CREATE_QP:
		if (cmd->qp.srq)
			npfnic_ib_fill_create_qp_srq((void *)e, cmd);
		else
			npfnic_ib_fill_create_qp((void *)e, cmd);
		break;
	case NPFNIC_IB_CMD_MODIFY_QP:
		npfnic_ib_fill_modify_qp(hw, (void *)e, cmd);
		break;
	case NPFNIC_IB_CMD_REG_MR: {
		struct npfnic_rdma_cmd_reg_mr *c = (void *)e;

		if (cmd->mr.physical)
			c->flags |= NPFNIC_RDMA_CMD_FLAG_PHYSICAL;
		if (cmd->mr.implicit)
			c->flags |= NPFNIC_RDMA_CMD_FLAG_IMPLICIT;
		c->pd = cpu_to_le32(cmd->mr.pdn);
		c->va = cpu_to_le64(cmd->mr.va);
		c->length = cpu_to_le64(cmd->mr.length);
		c->access = cpu_to_le32(npfnic_ib_hw_access(hw, cmd->mr.access,
							    NPFNIC_IB_ACCESS_HW_MASK));
		c->pasid = cpu_to_le32(cmd->mr.pasid);
		break;
	}
	case NPFNIC_IB_CMD_ALLOC_MR: {
		struct npfnic_rdma_cmd_alloc_mr *c = (void *)e;

		c->pd = cpu_to_le32(cmd->mr.pdn);
		c->max_pages = cpu_to_le32(cmd->mr.max_pages);
		c->pages = cpu_to_le64(cmd->mr.pages);
		break;
	}
	case NPFNIC_IB_CMD_CREATE_SRQ:
		npfnic_ib_fill_create_srq((void *)e, cmd);
		break;
	case NPFNIC_IB_CMD_MODIFY_SRQ: {
		struct npfnic_rdma_cmd_modify_srq *c = (void *)e;

		c->limit = cpu_to_le32(cmd->srq.limit);
		break;
	}
	case NPFNIC_IB_CMD_ALLOC_MW: {
		struct npfnic_rdma_cmd_alloc_mw *c = (void *)e;

		c->pd = cpu_to_le32(cmd->mw.pdn);
		c->type = cmd->mw.type;
		break;
	}
	case NPFNIC_IB_CMD_QUERY_STATS: {
		struct npfnic_rdma_cmd_query_stats *c = (void *)e;

		c->buf = cpu_to_le64(hw->status_dma + NPFNIC_IB_STATS_OFFSET);
		c->count = cpu_to_le32(NPFNIC_RDMA_STATS);
		break;
	}
	default:
		break;
	}
	/* The driver's mark, overwritten by the device's status. */
	e->status = cpu_to_le32(NPFNIC_RDMA_CMD_PENDING);
}

static int npfnic_ib_cmd_errno(u32 status)
{
	switch (status) {
	case NPFNIC_RDMA_CMD_OK:
		return 0;
	case NPFNIC_RDMA_CMDERR_OPCODE:
		return -EOPNOTSUPP;
	case NPFNIC_RDMA_CMDERR_BUSY:
		return -EBUSY;
	case NPFNIC_RDMA_CMDERR_RESOURCE:
		return -ENOMEM;
	default:	/* HANDLE, PARAM, STATE and anything unknown */
		return -EINVAL;
	}
}

/* The commands that end the device's use of an object (and of its memory). */
static bool npfnic_ib_cmd_releases(enum npfnic_ib_cmd_op op)
{
	return op == NPFNIC_IB_CMD_DESTROY_CQ || op == NPFNIC_IB_CMD_DESTROY_QP ||
	       op == NPFNIC_IB_CMD_DESTROY_SRQ || op == NPFNIC_IB_CMD_DEREG_MR ||
	       op == NPFNIC_IB_CMD_DEL_GID;
}

/*
 * Kills the engine (cmd_lock held): no command is posted from now on,
 * RDMA_CTRL RESET destroys every object the device holds, and once BUSY
 * clears it touches no memory.
 */
static void npfnic_ib_hw_kill(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_hw *hw = &dev->hw;
	struct npfnic *nic = dev->nic;

	lockdep_assert_held(&hw->cmd_lock);
	if (hw->dead)
		return;
	WRITE_ONCE(hw->dead, true);
	iowrite32(NPFNIC_RDMA_CTRL_RESET, nic->bar0 + NPFNIC_REG_RDMA_CTRL);
	if (npfnic_wait_quiesced(nic, nic->bar0 + NPFNIC_REG_RDMA_CTRL, NPFNIC_RDMA_CTRL_BUSY,
				 "RDMA engine"))
		WRITE_ONCE(hw->quiesced, true);
	dev_err(&nic->pdev->dev, "RDMA engine reset: %s\n", hw->quiesced ?
		"its objects are gone, their memory is freed as they are destroyed" :
		"still busy, what it may use is leaked");
}

/* The outcome of a command on a dead engine (cmd_lock held). */
static int npfnic_ib_cmd_dead(struct npfnic_ib_hw *hw, const struct npfnic_ib_cmd *cmd,
			      bool posted)
{
	if (hw->quiesced)
		return npfnic_ib_cmd_releases(cmd->op) ? 0 : -EIO;
	return posted ? -ETIMEDOUT : -EIO;
}

/*
 * Stops the engine for good, from a path that could not take a
 * translation away from it (npfnic_ib_invalidate): true once it touches
 * no memory, so nothing it was given is in use any more.
 */
bool npfnic_ib_hw_stop(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_hw *hw = &dev->hw;
	bool quiesced;

	mutex_lock(&hw->cmd_lock);
	if (hw->enabled && !hw->dead) {
		dev_err(&dev->nic->pdev->dev, "RDMA translation lost: stopping the engine\n");
		npfnic_ib_hw_kill(dev);
	}
	quiesced = hw->quiesced;
	mutex_unlock(&hw->cmd_lock);
	return quiesced;
}

static bool npfnic_ib_cmd_done(struct npfnic_ib_hw *hw, struct npfnic_rdma_cmd *e)
{
	return le32_to_cpu(READ_ONCE(e->status)) != NPFNIC_RDMA_CMD_PENDING ||
	       READ_ONCE(hw->status->error);
}

/*
 * Runs one command on the device and returns its outcome as an errno; 0
 * without the engine. The commands that end the device's use of memory
 * (DESTROY_CQ, DESTROY_QP, DESTROY_SRQ, DEREG_MR) returning an error means the memory
 * must be leaked; they return 0 once a dead engine is quiesced. Any other
 * command returning -ETIMEDOUT reached the device, which may use what it
 * named (a create's queues) until it is destroyed: never, the engine
 * being lost.
 */
int npfnic_ib_cmd(struct npfnic_ib_dev *dev, struct npfnic_ib_cmd *cmd)
{
	static const u8 opcodes[] = {
		[NPFNIC_IB_CMD_SET_GID] = NPFNIC_RDMA_CMD_ADD_GID,
		[NPFNIC_IB_CMD_DEL_GID] = NPFNIC_RDMA_CMD_DEL_GID,
		[NPFNIC_IB_CMD_CREATE_CQ] = NPFNIC_RDMA_CMD_CREATE_CQ,
		[NPFNIC_IB_CMD_DESTROY_CQ] = NPFNIC_RDMA_CMD_DESTROY_CQ,
		[NPFNIC_IB_CMD_CREATE_QP] = NPFNIC_RDMA_CMD_CREATE_QP,
		[NPFNIC_IB_CMD_MODIFY_QP] = NPFNIC_RDMA_CMD_MODIFY_QP,
		[NPFNIC_IB_CMD_QUERY_QP] = NPFNIC_RDMA_CMD_QUERY_QP,
		[NPFNIC_IB_CMD_DESTROY_QP] = NPFNIC_RDMA_CMD_DESTROY_QP,
		[NPFNIC_IB_CMD_REG_MR] = NPFNIC_RDMA_CMD_REG_MR,
		[NPFNIC_IB_CMD_DEREG_MR] = NPFNIC_RDMA_CMD_DEREG_MR,
		[NPFNIC_IB_CMD_QUERY_STATS] = NPFNIC_RDMA_CMD_QUERY_STATS,
		[NPFNIC_IB_CMD_CREATE_SRQ] = NPFNIC_RDMA_CMD_CREATE_SRQ,
		[NPFNIC_IB_CMD_MODIFY_SRQ] = NPFNIC_RDMA_CMD_MODIFY_SRQ,
		[NPFNIC_IB_CMD_DESTROY_SRQ] = NPFNIC_RDMA_CMD_DESTROY_SRQ,
		[NPFNIC_IB_CMD_ALLOC_MW] = NPFNIC_RDMA_CMD_ALLOC_MW,
		[NPFNIC_IB_CMD_DEALLOC_MW] = NPFNIC_RDMA_CMD_DEALLOC_MW,
		[NPFNIC_IB_CMD_RESIZE_CQ] = NPFNIC_RDMA_CMD_RESIZE_CQ,
		[NPFNIC_IB_CMD_ALLOC_MR] = NPFNIC_RDMA_CMD_ALLOC_MR,
	};
	struct npfnic_ib_hw *hw = &dev->hw;
	struct npfnic *nic = dev->nic;
	struct npfnic_rdma_cmd *e;
	unsigned long deadline;
	u32 handle, status;
	int err;

	if (!hw->enabled)
		return 0;
	switch (cmd->op) {
	case NPFNIC_IB_CMD_SET_GID:
	case NPFNIC_IB_CMD_DEL_GID:
		handle = cmd->gid.index;
		break;
	case NPFNIC_IB_CMD_CREATE_CQ:
	case NPFNIC_IB_CMD_DESTROY_CQ:
	case NPFNIC_IB_CMD_RESIZE_CQ:
		handle = cmd->cq.cqn;
		break;
	case NPFNIC_IB_CMD_ALLOC_MW:
	case NPFNIC_IB_CMD_DEALLOC_MW:
		handle = cmd->mw.rkey;
		break;
	case NPFNIC_IB_CMD_REG_MR:
	case NPFNIC_IB_CMD_ALLOC_MR:
	case NPFNIC_IB_CMD_DEREG_MR:
		handle = cmd->mr.key;
		break;
	case NPFNIC_IB_CMD_CREATE_SRQ:
	case NPFNIC_IB_CMD_MODIFY_SRQ:
	case NPFNIC_IB_CMD_DESTROY_SRQ:
		handle = cmd->srq.srqn;
		break;
	case NPFNIC_IB_CMD_QUERY_STATS:
		handle = 0;
		break;
	default:
		handle = cmd->qp.qpn;
		break;
	}
	if (WARN_ON_ONCE(cmd->op >= ARRAY_SIZE(opcodes) || !opcodes[cmd->op]))
		return -EINVAL;

	mutex_lock(&hw->cmd_lock);
	if (hw->dead) {
		err = npfnic_ib_cmd_dead(hw, cmd, false);
		goto out;
	}
	/* diag inject rdma_dereg_timeout: as if the device never answered. */
	if (cmd->op == NPFNIC_IB_CMD_DEREG_MR && test_and_clear_bit(0, &hw->inject_dereg)) {
		dev_err(&nic->pdev->dev, "RDMA command %u (handle %#x): no status (injected)\n",
			opcodes[cmd->op], handle);
		goto dead;
	}
	e = &hw->cmdq[hw->cmdq_tail & (NPFNIC_IB_CMDQ_SIZE - 1)];
	npfnic_ib_fill(hw, e, cmd, opcodes[cmd->op], handle);
	dma_wmb();
	iowrite32(++hw->cmdq_tail, nic->bar0 + NPFNIC_REG_CMDQ_TAIL);
	/* One command at a time: the queue never holds more than this one. */
	deadline = jiffies + msecs_to_jiffies(NPFNIC_IB_CMD_TIMEOUT_MS);
	while (!npfnic_ib_cmd_done(hw, e)) {
		if (time_after(jiffies, deadline)) {
			dev_err(&nic->pdev->dev,
				"RDMA command %u (handle %#x) got no status in %u ms: engine dead\n",
				opcodes[cmd->op], handle, NPFNIC_IB_CMD_TIMEOUT_MS);
			goto dead;
		}
		wait_event_timeout(hw->cmd_wait, npfnic_ib_cmd_done(hw, e), msecs_to_jiffies(10));
	}
	dma_rmb();
	if (READ_ONCE(hw->status->error)) {
		dev_err(&nic->pdev->dev, "RDMA engine error %u (info %#x)\n",
			le32_to_cpu(READ_ONCE(hw->status->error)),
			le32_to_cpu(READ_ONCE(hw->status->error_info)));
		goto dead;
	}
	status = le32_to_cpu(READ_ONCE(e->status));
	err = npfnic_ib_cmd_errno(status);
	if (err)
		ibdev_dbg(&dev->ibdev, "command %u handle %#x: status %u\n", opcodes[cmd->op],
			  handle, status);
	if (!err && cmd->op == NPFNIC_IB_CMD_QUERY_QP) {
		const struct npfnic_rdma_cmd_modify_qp *r = (void *)e;

		cmd->qp.state = READ_ONCE(r->state);
		cmd->qp.sq_psn = le32_to_cpu(READ_ONCE(r->sq_psn)) & 0xffffff;
		cmd->qp.rq_psn = le32_to_cpu(READ_ONCE(r->rq_psn)) & 0xffffff;
	}
	if (!err && cmd->op == NPFNIC_IB_CMD_QUERY_STATS) {
		const __le64 *v = (void *)hw->status + NPFNIC_IB_STATS_OFFSET;
		int k;

		for (k = 0; k < NPFNIC_RDMA_STATS; k++)
			cmd->stats.values[k] = le64_to_cpu(READ_ONCE(v[k]));
	}
out:
	mutex_unlock(&hw->cmd_lock);
	return err;

dead:
	npfnic_ib_hw_kill(dev);
	err = npfnic_ib_cmd_dead(hw, cmd, true);
	goto out;
}

/*
 * diag inject rdma_dereg_timeout: the next DEREG_MR gets no status, as
 * from a device that stopped answering (the engine is killed then).
 */
int npfnic_ib_inject(struct npfnic *nic, const char *what)
{
	struct npfnic_ib_dev *dev = READ_ONCE(nic->ib);

	if (strcmp(what, "rdma_dereg_timeout"))
		return -EINVAL;
	if (!dev || !dev->hw.enabled)
		return -EOPNOTSUPP;
	set_bit(0, &dev->hw.inject_dereg);
	dev_info(&nic->pdev->dev, "inject %s: armed\n", what);
	return 0;
}

/* ---- doorbells ---- */

void npfnic_ib_sq_doorbell(struct npfnic_ib_dev *dev, u32 qpn)
{
	if (dev->hw.enabled && !READ_ONCE(dev->hw.dead))
		iowrite32(qpn, dev->nic->bar0 + NPFNIC_REG_SQ_DOORBELL);
}

/*
 * A posted write: user space polls the CQ right after arming, and a
 * completion may land between that poll and the arm's arrival. The device
 * closes that race itself (an arm that finds completions user space has
 * not consumed raises the event at once, RDMADoc), so no read has to wait
 * for the write (one BAR read is ~220 us under TCG, on every
 * ibv_req_notify_cq).
 */
void npfnic_ib_cq_arm(struct npfnic_ib_dev *dev, u32 cqn, bool solicited)
{
	if (dev->hw.enabled && !READ_ONCE(dev->hw.dead))
		iowrite32(cqn | (solicited ? NPFNIC_RDMA_CQ_ARM_SOLICITED : 0),
			  dev->nic->bar0 + NPFNIC_REG_CQ_ARM);
}

/* ---- events ---- */

static void npfnic_ib_cq_event(struct npfnic_ib_dev *dev, u32 cqn, bool err)
{
	struct npfnic_ib_cq *cq;
	struct ib_event ev;

	xa_lock(&dev->cqs);
	cq = xa_load(&dev->cqs, cqn);
	if (cq && !err && cq->ibcq.comp_handler) {
		cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
	} else if (cq && err && cq->ibcq.event_handler) {
		ev.device = &dev->ibdev;
		ev.event = IB_EVENT_CQ_ERR;
		ev.element.cq = &cq->ibcq;
		cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
	} else if (cq && err) {
		/* ib_alloc_cq's CQs have no handler: their consumer just stops hearing. */
		dev_err_ratelimited(&dev->nic->pdev->dev, "CQ %u overran: it takes no more completions\n",
				    cqn);
	}
	xa_unlock(&dev->cqs);
}

static void npfnic_ib_qp_event(struct npfnic_ib_dev *dev, u32 qpn, enum ib_event_type type)
{
	struct npfnic_ib_qp *qp;
	struct ib_event ev;

	xa_lock(&dev->qps);
	qp = xa_load(&dev->qps, qpn);
	if (qp && qp->ibqp.event_handler) {
		ev.device = &dev->ibdev;
		ev.event = type;
		ev.element.qp = &qp->ibqp;
		qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
	}
	xa_unlock(&dev->qps);
}

/*
 * SRQ_LIMIT consumed the arm: the device disarmed the limit, and so does
 * the driver's copy, which query_srq reports. An event of an arm that a
 * MODIFY_SRQ has replaced meanwhile clears the new one's copy too, as the
 * device gives no way to tell them apart: query_srq then reads 0 while
 * the device is armed, and the next event comes all the same.
 */
/*
 * SRQ_LIMIT disarms the limit it reports, unless the SRQ was armed again
 * since: info numbers the arm that fired (its MODIFY_SRQ count).
 */
static void npfnic_ib_srq_event(struct npfnic_ib_dev *dev, u32 srqn, enum ib_event_type type,
				u32 info)
{
	struct npfnic_ib_srq *srq;
	struct ib_event ev;

	xa_lock(&dev->srqs);
	srq = xa_load(&dev->srqs, srqn);
	if (srq && type == IB_EVENT_SRQ_LIMIT_REACHED && info == READ_ONCE(srq->mods))
		WRITE_ONCE(srq->limit, 0);
	if (srq && srq->ibsrq.event_handler) {
		ev.device = &dev->ibdev;
		ev.event = type;
		ev.element.srq = &srq->ibsrq;
		srq->ibsrq.event_handler(&ev, srq->ibsrq.srq_context);
	}
	xa_unlock(&dev->srqs);
}

static void npfnic_ib_event(struct npfnic_ib_dev *dev, const struct npfnic_rdma_event *ev)
{
	u32 handle = le32_to_cpu(ev->handle);

	switch (ev->type) {
	case NPFNIC_RDMA_EVENT_CMD_DONE:
		wake_up(&dev->hw.cmd_wait);
		break;
	case NPFNIC_RDMA_EVENT_CQ_COMP:
		npfnic_ib_cq_event(dev, handle, false);
		break;
	case NPFNIC_RDMA_EVENT_CQ_ERR:
		npfnic_ib_cq_event(dev, handle, true);
		break;
	case NPFNIC_RDMA_EVENT_QP_FATAL:
		npfnic_ib_qp_event(dev, handle, IB_EVENT_QP_FATAL);
		break;
	case NPFNIC_RDMA_EVENT_QP_REQ_ERR:
		npfnic_ib_qp_event(dev, handle, IB_EVENT_QP_REQ_ERR);
		break;
	case NPFNIC_RDMA_EVENT_QP_ACCESS_ERR:
		npfnic_ib_qp_event(dev, handle, IB_EVENT_QP_ACCESS_ERR);
		break;
	case NPFNIC_RDMA_EVENT_COMM_EST:
		npfnic_ib_qp_event(dev, handle, IB_EVENT_COMM_EST);
		break;
	case NPFNIC_RDMA_EVENT_MSG_ALARM:
		npfnic_ib_rnpf_alarm(dev);
		break;
	case NPFNIC_RDMA_EVENT_SRQ_LIMIT:
		npfnic_ib_srq_event(dev, handle, IB_EVENT_SRQ_LIMIT_REACHED, le32_to_cpu(ev->info));
		break;
	case NPFNIC_RDMA_EVENT_SRQ_ERR:
		npfnic_ib_srq_event(dev, handle, IB_EVENT_SRQ_ERR, 0);
		break;
	default:
		dev->hw.bad_events++;
		break;
	}
}

/* EQ_VECTOR: every event the device posted, then the queue armed again. */
irqreturn_t npfnic_ib_irq(struct npfnic *nic)
{
	struct npfnic_ib_dev *dev = READ_ONCE(nic->ib);
	struct npfnic_ib_hw *hw;
	u32 tail;

	/* A dead engine's events are not looked at: it was reset. */
	if (!dev || !READ_ONCE(dev->hw.enabled) || READ_ONCE(dev->hw.dead))
		return IRQ_HANDLED;
	hw = &dev->hw;
	spin_lock(&hw->eq_lock);
	tail = le32_to_cpu(READ_ONCE(hw->status->eq_tail));
	if (tail - hw->eq_head > NPFNIC_IB_EQ_SIZE) {
		/* Not what the device may claim: read nothing, wake the waiters. */
		if (!hw->eq_broken)
			dev_err(&nic->pdev->dev, "RDMA event queue tail %u, head %u: ignored\n",
				tail, hw->eq_head);
		hw->eq_broken = true;
		wake_up(&hw->cmd_wait);
		spin_unlock(&hw->eq_lock);
		return IRQ_HANDLED;
	}
	dma_rmb();
	while (hw->eq_head != tail) {
		struct npfnic_rdma_event ev = hw->eq[hw->eq_head & (NPFNIC_IB_EQ_SIZE - 1)];

		npfnic_ib_event(dev, &ev);
		hw->eq_head++;
	}
	iowrite32(hw->eq_head, nic->bar0 + NPFNIC_REG_EQ_HEAD);
	iowrite32(1, nic->bar0 + NPFNIC_REG_EQ_ARM);
	spin_unlock(&hw->eq_lock);
	return IRQ_HANDLED;
}

/* ---- bring-up and quiesce ---- */

static void npfnic_ib_hw_free(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_hw *hw = &dev->hw;
	struct device *d = &dev->nic->pdev->dev;

	if (hw->status)
		dma_free_coherent(d, PAGE_SIZE, hw->status, hw->status_dma);
	if (hw->cmdq)
		dma_free_coherent(d, PAGE_SIZE, hw->cmdq, hw->cmdq_dma);
	if (hw->eq)
		dma_free_coherent(d, NPFNIC_IB_EQ_SIZE * sizeof(*hw->eq), hw->eq, hw->eq_dma);
	hw->status = NULL;
	hw->cmdq = NULL;
	hw->eq = NULL;
}

/* Starts the RDMA engine if the device has one; without it, commands do nothing. */
int npfnic_ib_hw_init(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_hw *hw = &dev->hw;
	struct npfnic *nic = dev->nic;
	struct device *d = &nic->pdev->dev;

	mutex_init(&hw->cmd_lock);
	spin_lock_init(&hw->eq_lock);
	init_waitqueue_head(&hw->cmd_wait);
	if (!(nic->features & NPFNIC_FEAT_RDMA)) {
		dev_info(d, "no RDMA engine in the device: verbs objects exist on the driver's side only\n");
		return 0;
	}
	hw->status = dma_alloc_coherent(d, PAGE_SIZE, &hw->status_dma, GFP_KERNEL);
	hw->cmdq = dma_alloc_coherent(d, PAGE_SIZE, &hw->cmdq_dma, GFP_KERNEL);
	hw->eq = dma_alloc_coherent(d, NPFNIC_IB_EQ_SIZE * sizeof(*hw->eq), &hw->eq_dma,
				    GFP_KERNEL);
	if (!hw->status || !hw->cmdq || !hw->eq) {
		npfnic_ib_hw_free(dev);
		return -ENOMEM;
	}
	npfnic_write64(nic, NPFNIC_REG_RDMA_STATUS_LO, hw->status_dma);
	npfnic_write64(nic, NPFNIC_REG_CMDQ_BASE_LO, hw->cmdq_dma);
	iowrite32(NPFNIC_IB_CMDQ_SIZE, nic->bar0 + NPFNIC_REG_CMDQ_SIZE);
	npfnic_write64(nic, NPFNIC_REG_EQ_BASE_LO, hw->eq_dma);
	iowrite32(NPFNIC_IB_EQ_SIZE, nic->bar0 + NPFNIC_REG_EQ_SIZE);
	iowrite32(NPFNIC_RDMA_VECTOR, nic->bar0 + NPFNIC_REG_EQ_VECTOR);
	/* RDMA_PREFAULT came with interface 2.9; RESET keeps it. */
	if ((nic->version & 0xffff) >= 9)
		iowrite32(clamp(odp_prefault_pages, 1U, (unsigned int)NPFNIC_RDMA_MAX_PREFAULT),
			  nic->bar0 + NPFNIC_REG_RDMA_PREFAULT);
	hw->cmdq_tail = 0;
	hw->eq_head = 0;
	hw->atomics = nic->features & NPFNIC_FEAT_RDMA_ATOMIC;
	hw->srq = nic->features & NPFNIC_FEAT_RDMA_SRQ;
	hw->ud = nic->features & NPFNIC_FEAT_RDMA_UD;
	hw->uc = nic->features & NPFNIC_FEAT_RDMA_UC;
	hw->mw = nic->features & NPFNIC_FEAT_RDMA_MW;
	hw->resize_cq = nic->features & NPFNIC_FEAT_RDMA_RESIZE_CQ;
	/* The GSI QP is a UD QP: no kernel verbs without UD. */
	hw->kernel = hw->ud && (nic->features & NPFNIC_FEAT_RDMA_KERNEL);
	hw->fast_reg = hw->kernel && (nic->features & NPFNIC_FEAT_RDMA_FAST_REG);
	iowrite32(NPFNIC_RDMA_CTRL_ENABLE, nic->bar0 + NPFNIC_REG_RDMA_CTRL);
	WRITE_ONCE(hw->enabled, true);
	iowrite32(1, nic->bar0 + NPFNIC_REG_EQ_ARM);
	if (nic->nvecs <= NPFNIC_RDMA_VECTOR)
		dev_warn(d, "no MSI-X vector for RDMA events: commands are polled, CQ events lost\n");
	return 0;
}

/*
 * Stops the engine once every object is gone (ib_unregister_device
 * destroyed them): reset, wait for BUSY to clear (unless a kill did
 * already), then free its queues, or leak them if the device stays busy.
 */
void npfnic_ib_hw_fini(struct npfnic_ib_dev *dev)
{
	struct npfnic_ib_hw *hw = &dev->hw;
	struct npfnic *nic = dev->nic;

	if (!hw->enabled)
		return;
	WRITE_ONCE(hw->enabled, false);
	if (nic->nvecs > NPFNIC_RDMA_VECTOR)
		synchronize_irq(pci_irq_vector(nic->pdev, NPFNIC_RDMA_VECTOR));
	if (!hw->quiesced) {
		iowrite32(NPFNIC_RDMA_CTRL_RESET, nic->bar0 + NPFNIC_REG_RDMA_CTRL);
		if (!npfnic_wait_quiesced(nic, nic->bar0 + NPFNIC_REG_RDMA_CTRL,
					  NPFNIC_RDMA_CTRL_BUSY, "RDMA engine"))
			return;
		WRITE_ONCE(hw->quiesced, true);
	}
	npfnic_ib_hw_free(dev);
}
