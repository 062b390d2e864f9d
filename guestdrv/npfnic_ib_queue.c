// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic RDMA: the rxe queues and the CQs, SRQs and QPs built on them.
 *
 * An rxe queue is one buffer: struct rxe_queue_buf (log2_elem_size,
 * index_mask, the producer and consumer indices on their own cache lines)
 * followed by a power-of-two number of slots, each a power of two in size.
 * As in rdma_rxe, a queue for n entries has the next power of two above n
 * slots (a full queue keeps one slot empty), and the caller learns the
 * entries it really got. The buffer is DMA-coherent and physically
 * contiguous, so the device reaches it at one IOVA, and user space maps it
 * through the uverbs file: the create response carries an rxe mminfo
 * cookie {offset, size} of an rdma_user_mmap entry, which librxe passes to
 * mmap(). The mapping goes through rdma_user_mmap_io, so the core tracks
 * it and zaps it when the device is unregistered under a live context.
 *
 * The buffer belongs to its mmap entry: destroying the CQ, SRQ or QP tells
 * the device to stop using the queue (its destroy command), then removes the
 * entry; the memory is freed in mmap_free, once user space unmapped it too.
 * The device never touches a queue after its destroy command completed, so
 * what user space still writes there reaches nothing. A destroy command
 * that fails leaves the buffer leaked, never freed: so does one that a
 * create's error path issues, and a create command that reached the
 * device without an answer (-ETIMEDOUT: the device may have taken the
 * queue, and cannot be told to let it go).
 *
 * Every index, key and length in the queues is written by user space: the
 * device takes a queue's shape from its create command, never from the
 * header, and checks every entry.
 *
 * librxe posts receives and polls completions in user space with no
 * system call; a send is the entry, the producer index, then a POST_SEND
 * with no work requests, which becomes the QP's doorbell here. Kernel
 * consumers get no CQs, SRQs or QPs: there is no kernel datapath.
 *
 * A shared receive queue (FEATURES.RDMA_SRQ) is a receive queue of its
 * own, laid out and mapped as a QP's, that librxe posts to; the QPs
 * created on it get no receive queue (librxe maps none: rq_mi stays
 * zero), and the device takes their receives from the SRQ's ring.
 */

#include <linux/dma-mapping.h>
#include <linux/log2.h>
#include <linux/mm.h>
#include <net/ipv6.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_cache.h>
#include <rdma/uverbs_ioctl.h>

#include "npfnic_ib.h"

/* ---- queue buffers ---- */

static struct device *npfnic_ib_dma_dev(struct npfnic_ib_dev *dev)
{
	return &dev->nic->pdev->dev;
}

/*
 * Allocates a queue of at least *entries entries (*entries >= 1) of
 * elem_size bytes and inserts its mmap entry in uc; *entries becomes what
 * the queue holds. The mminfo for user space goes to *mi.
 */
static int npfnic_ib_queue_init(struct npfnic_ib_dev *dev, struct ib_ucontext *uc,
				struct npfnic_ib_queue *q, u32 *entries, size_t elem_size,
				struct mminfo *mi)
{
	struct npfnic_ib_mmap *mm;
	u32 slots;
	u8 log2;
	int err;

	if (!*entries || *entries >= BIT(20))
		return -EINVAL;
	slots = roundup_pow_of_two(*entries + 1);
	log2 = order_base_2(elem_size);
	mm = kzalloc(sizeof(*mm), GFP_KERNEL);
	if (!mm)
		return -ENOMEM;
	q->size = sizeof(struct rxe_queue_buf) + ((size_t)slots << log2);
	mm->size = PAGE_ALIGN(q->size);
	mm->dma_dev = npfnic_ib_dma_dev(dev);
	/* Zeroed; contiguous in the linear map, so one pfn range maps it. */
	mm->cpu = dma_alloc_attrs(mm->dma_dev, mm->size, &mm->dma, GFP_KERNEL,
				  DMA_ATTR_FORCE_CONTIGUOUS);
	if (!mm->cpu) {
		kfree(mm);
		return -ENOMEM;
	}
	if (is_vmalloc_addr(mm->cpu) || !virt_addr_valid(mm->cpu)) {
		dev_warn_once(mm->dma_dev, "coherent memory outside the linear map: no RDMA queues\n");
		err = -EOPNOTSUPP;
		goto err_free;
	}
	err = rdma_user_mmap_entry_insert(uc, &mm->rdma, mm->size);
	if (err)
		goto err_free;
	q->mm = mm;
	q->buf = mm->cpu;
	q->dma = mm->dma;
	q->slots = slots;
	q->log2_elem_size = log2;
	q->buf->log2_elem_size = log2;
	q->buf->index_mask = slots - 1;
	mi->offset = rdma_user_mmap_get_offset(&mm->rdma);
	mi->size = mm->size;
	mi->pad = 0;
	*entries = slots - 1;
	return 0;

err_free:
	dma_free_coherent(mm->dma_dev, mm->size, mm->cpu, mm->dma);
	kfree(mm);
	return err;
}

/*
 * The queue's owner is done with it; the buffer goes with its last
 * mapping, or never when the device did not confirm it stopped using it.
 */
static void npfnic_ib_queue_release(struct npfnic_ib_queue *q, bool leak)
{
	if (q->mm) {
		q->mm->leaked = leak;
		rdma_user_mmap_entry_remove(&q->mm->rdma);
	}
	memset(q, 0, sizeof(*q));
}

int npfnic_ib_mmap(struct ib_ucontext *ibuc, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *entry;
	struct npfnic_ib_mmap *mm;
	int err;

	entry = rdma_user_mmap_entry_get(ibuc, vma);
	if (!entry)
		return -EINVAL;
	mm = container_of(entry, struct npfnic_ib_mmap, rdma);
	err = rdma_user_mmap_io(ibuc, vma, PHYS_PFN(virt_to_phys(mm->cpu)), mm->size,
				vma->vm_page_prot, entry);
	rdma_user_mmap_entry_put(entry);
	return err;
}

void npfnic_ib_mmap_free(struct rdma_user_mmap_entry *entry)
{
	struct npfnic_ib_mmap *mm = container_of(entry, struct npfnic_ib_mmap, rdma);

	if (mm->leaked)
		dev_warn(mm->dma_dev, "a queue the device did not release: %zu bytes leaked\n",
			 mm->size);
	else
		dma_free_coherent(mm->dma_dev, mm->size, mm->cpu, mm->dma);
	kfree(mm);
}

/* ---- CQs ---- */

int npfnic_ib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibcq->device);
	struct npfnic_ib_ucontext *uc;
	struct npfnic_ib_cq *cq = to_npfnic_ib_cq(ibcq);
	struct rxe_create_cq_resp resp = {};
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_CREATE_CQ };
	bool leak = false;
	u32 entries;
	int id, err;

	if (!udata)
		return -EOPNOTSUPP;
	if (attr->flags)
		return -EOPNOTSUPP;
	if (attr->cqe <= 0 || attr->cqe > NPFNIC_IB_MAX_CQE || udata->outlen < sizeof(resp))
		return -EINVAL;
	uc = rdma_udata_to_drv_context(udata, struct npfnic_ib_ucontext, ibuc);
	id = ida_alloc_range(&dev->cq_ida, 0, NPFNIC_IB_MAX_CQ - 1, GFP_KERNEL);
	if (id < 0)
		return id == -ENOSPC ? -ENOMEM : id;
	cq->cqn = id;
	entries = attr->cqe;
	err = npfnic_ib_queue_init(dev, &uc->ibuc, &cq->q, &entries, NPFNIC_IB_CQE_SIZE,
				   &resp.mi);
	if (err)
		goto err_id;
	cmd.cq.cqn = cq->cqn;
	cmd.cq.q = &cq->q;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err) {
		leak = err == -ETIMEDOUT;
		goto err_queue;
	}
	err = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_cmd;
	err = xa_err(xa_store_irq(&dev->cqs, cq->cqn, cq, GFP_KERNEL));
	if (err)
		goto err_cmd;
	ibcq->cqe = entries;
	return 0;

err_cmd:
	cmd.op = NPFNIC_IB_CMD_DESTROY_CQ;
	leak = npfnic_ib_cmd(dev, &cmd);
err_queue:
	npfnic_ib_queue_release(&cq->q, leak);
err_id:
	ida_free(&dev->cq_ida, cq->cqn);
	return err;
}

int npfnic_ib_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibcq->device);
	struct npfnic_ib_cq *cq = to_npfnic_ib_cq(ibcq);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_DESTROY_CQ };

	/* No event reaches the CQ from here on. */
	xa_erase_irq(&dev->cqs, cq->cqn);
	cmd.cq.cqn = cq->cqn;
	cmd.cq.q = &cq->q;
	/*
	 * A device that does not answer may still write the queue: its
	 * buffer is then leaked rather than freed under it.
	 */
	npfnic_ib_queue_release(&cq->q, npfnic_ib_cmd(dev, &cmd));
	ida_free(&dev->cq_ida, cq->cqn);
	return 0;
}

/* librxe's ibv_req_notify_cq: the device posts the CQ's event once (CQ_ARM). */
int npfnic_ib_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct npfnic_ib_cq *cq = to_npfnic_ib_cq(ibcq);

	npfnic_ib_cq_arm(to_npfnic_ib_dev(ibcq->device), cq->cqn,
			 (flags & IB_CQ_SOLICITED_MASK) == IB_CQ_SOLICITED);
	return 0;
}

/* Only kernel consumers poll through here, and they have no CQs. */
int npfnic_ib_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc)
{
	return -EOPNOTSUPP;
}

/* ---- receive queues: a QP's own, or an SRQ ---- */

/* The receive queue slot: the entry, then its SGEs. */
static size_t npfnic_ib_recv_elem(u32 max_sge)
{
	return sizeof(struct rxe_recv_wqe) + max_sge * sizeof(struct rxe_sge);
}

/* ---- SRQs ---- */

/*
 * Only user space gets SRQs (kernel consumers have no QPs), and only on a
 * device with FEATURES.RDMA_SRQ. The limit of the attributes is armed at
 * creation, as rdma_rxe does.
 */
int npfnic_ib_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
			 struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibsrq->device);
	struct npfnic_ib_srq *srq = to_npfnic_ib_srq(ibsrq);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_CREATE_SRQ };
	struct rxe_create_srq_resp resp = {};
	struct npfnic_ib_ucontext *uc;
	bool leak = false;
	u32 entries;
	int id, err;

	if (!udata || !dev->hw.srq)
		return -EOPNOTSUPP;
	if (init->srq_type != IB_SRQT_BASIC)
		return -EOPNOTSUPP;
	if (!init->attr.max_wr || init->attr.max_wr > NPFNIC_IB_MAX_QP_WR ||
	    init->attr.max_sge > NPFNIC_IB_MAX_SGE || udata->outlen < sizeof(resp))
		return -EINVAL;
	uc = rdma_udata_to_drv_context(udata, struct npfnic_ib_ucontext, ibuc);
	mutex_init(&srq->lock);
	srq->max_sge = max_t(u32, init->attr.max_sge, 1);
	entries = init->attr.max_wr;

	id = ida_alloc_range(&dev->srq_ida, 0, NPFNIC_IB_MAX_SRQ - 1, GFP_KERNEL);
	if (id < 0)
		return id == -ENOSPC ? -ENOMEM : id;
	srq->srqn = id;
	err = npfnic_ib_queue_init(dev, &uc->ibuc, &srq->q, &entries,
				   npfnic_ib_recv_elem(srq->max_sge), &resp.mi);
	if (err)
		goto err_id;
	/* As MODIFY_SRQ's, and rdma_rxe's: at most the entries the queue holds. */
	if (init->attr.srq_limit > entries) {
		err = -EINVAL;
		goto err_queue;
	}
	srq->max_wr = entries;
	srq->limit = init->attr.srq_limit;

	cmd.srq.srqn = srq->srqn;
	cmd.srq.pdn = to_npfnic_ib_pd(ibsrq->pd)->pdn;
	cmd.srq.limit = srq->limit;
	cmd.srq.srq = srq;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err) {
		leak = err == -ETIMEDOUT;
		goto err_queue;
	}
	resp.srq_num = srq->srqn;
	err = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_cmd;
	err = xa_err(xa_store_irq(&dev->srqs, srq->srqn, srq, GFP_KERNEL));
	if (err)
		goto err_cmd;
	init->attr.max_wr = entries;
	init->attr.max_sge = srq->max_sge;
	return 0;

err_cmd:
	cmd.op = NPFNIC_IB_CMD_DESTROY_SRQ;
	leak = npfnic_ib_cmd(dev, &cmd);
err_queue:
	npfnic_ib_queue_release(&srq->q, leak);
err_id:
	ida_free(&dev->srq_ida, srq->srqn);
	return err;
}

/*
 * IB_SRQ_LIMIT arms (or, with 0, disarms) the limit through MODIFY_SRQ.
 * IB_SRQ_MAX_WR, a resize, is not supported: the device reads the ring at
 * the one IOVA CREATE_SRQ gave it and has no command to move it to a new
 * buffer while QPs take entries from it (so IB_DEVICE_SRQ_RESIZE is not
 * reported, and librxe's rxe_modify_srq_cmd is never looked at).
 */
int npfnic_ib_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
			 enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct npfnic_ib_srq *srq = to_npfnic_ib_srq(ibsrq);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_MODIFY_SRQ };
	u32 old_limit;
	int err;

	if (mask & ~(IB_SRQ_MAX_WR | IB_SRQ_LIMIT))
		return -EINVAL;
	if (mask & IB_SRQ_MAX_WR)
		return -EOPNOTSUPP;
	if (!(mask & IB_SRQ_LIMIT))
		return 0;
	if (attr->srq_limit > srq->max_wr)
		return -EINVAL;
	mutex_lock(&srq->lock);
	cmd.srq.srqn = srq->srqn;
	cmd.srq.limit = attr->srq_limit;
	cmd.srq.srq = srq;
	/*
	 * The new arm's number before the command: its SRQ_LIMIT event may
	 * come before the command's completion does.
	 */
	old_limit = srq->limit;
	WRITE_ONCE(srq->mods, srq->mods + 1);
	WRITE_ONCE(srq->limit, attr->srq_limit);
	err = npfnic_ib_cmd(to_npfnic_ib_dev(ibsrq->device), &cmd);
	if (err) {
		/* Not run (the engine is dead or gone): no arm, no event. */
		WRITE_ONCE(srq->mods, srq->mods - 1);
		WRITE_ONCE(srq->limit, old_limit);
	}
	mutex_unlock(&srq->lock);
	return err;
}

int npfnic_ib_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr)
{
	struct npfnic_ib_srq *srq = to_npfnic_ib_srq(ibsrq);

	attr->max_wr = srq->max_wr;
	attr->max_sge = srq->max_sge;
	attr->srq_limit = READ_ONCE(srq->limit);
	return 0;
}

/*
 * The core destroys an SRQ only once no QP uses it (usecnt): the device's
 * DESTROY_SRQ, which fails with BUSY while a QP does, then completes once
 * no DMA reads the ring. As for CQs, a device that did not let go of it
 * gets the ring leaked.
 */
int npfnic_ib_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibsrq->device);
	struct npfnic_ib_srq *srq = to_npfnic_ib_srq(ibsrq);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_DESTROY_SRQ };

	/* No event reaches the SRQ from here on. */
	xa_erase_irq(&dev->srqs, srq->srqn);
	cmd.srq.srqn = srq->srqn;
	cmd.srq.srq = srq;
	npfnic_ib_queue_release(&srq->q, npfnic_ib_cmd(dev, &cmd));
	ida_free(&dev->srq_ida, srq->srqn);
	return 0;
}

/* User space posts to its SRQs itself; kernel consumers have none. */
int npfnic_ib_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			    const struct ib_recv_wr **bad_wr)
{
	*bad_wr = wr;
	return -EOPNOTSUPP;
}

/* ---- address handles ---- */

/*
 * librxe resolves the vector (destination MAC, source address) itself and
 * copies it into each send entry, so an address handle is only checked
 * here: RoCEv2 over IPv4 is all the device sends. It has no number
 * (ah_num 0 in the response). Kernel consumers have no UD QPs to use one.
 */
int npfnic_ib_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
			struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibah->device);
	const struct rdma_ah_attr *attr = init->ah_attr;
	struct rxe_create_ah_resp resp = {};
	const struct ib_global_route *grh;

	if (!udata || !dev->hw.ud)
		return -EOPNOTSUPP;
	if (!(rdma_ah_get_ah_flags(attr) & IB_AH_GRH))
		return -EINVAL;
	grh = rdma_ah_read_grh(attr);
	if (!grh->sgid_attr || grh->sgid_attr->gid_type != IB_GID_TYPE_ROCE_UDP_ENCAP ||
	    !ipv6_addr_v4mapped((const struct in6_addr *)grh->dgid.raw))
		return -EINVAL;
	if (udata->outlen >= sizeof(resp))
		return ib_copy_to_udata(udata, &resp, sizeof(resp));
	return 0;
}

int npfnic_ib_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	return 0;
}

/* ---- QPs ---- */

/* The send queue slot: the entry, then its SGEs or inline data. */
static size_t npfnic_ib_sq_elem(const struct ib_qp_cap *cap)
{
	return sizeof(struct rxe_send_wqe) +
	       max_t(size_t, cap->max_send_sge * sizeof(struct rxe_sge), cap->max_inline_data);
}

/* With an SRQ the receive capabilities are ignored, as the verbs have it. */
static int npfnic_ib_check_cap(const struct npfnic_ib_hw *hw, struct ib_qp_init_attr *init)
{
	struct ib_qp_cap *cap = &init->cap;

	switch (init->qp_type) {
	case IB_QPT_RC:
		break;
	case IB_QPT_UD:
		if (!hw->ud)
			return -EOPNOTSUPP;
		break;
	case IB_QPT_UC:
		if (!hw->uc)
			return -EOPNOTSUPP;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (init->create_flags)
		return -EOPNOTSUPP;
	if (cap->max_send_wr > NPFNIC_IB_MAX_QP_WR || cap->max_send_sge > NPFNIC_IB_MAX_SGE ||
	    cap->max_inline_data > NPFNIC_IB_MAX_INLINE)
		return -EINVAL;
	if (!init->srq &&
	    (cap->max_recv_wr > NPFNIC_IB_MAX_QP_WR || cap->max_recv_sge > NPFNIC_IB_MAX_SGE))
		return -EINVAL;
	return 0;
}

int npfnic_ib_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init, struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibqp->device);
	struct npfnic_ib_qp *qp = to_npfnic_ib_qp(ibqp);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_CREATE_QP };
	struct rxe_create_qp_resp resp = {};
	struct npfnic_ib_ucontext *uc;
	bool leak = false;
	struct ib_qp_cap cap;
	u32 sq_wr, rq_wr;
	int id, err;

	if (!udata)
		return -EOPNOTSUPP;
	if (udata->inlen || udata->outlen < sizeof(resp))
		return -EINVAL;
	err = npfnic_ib_check_cap(&dev->hw, init);
	if (err)
		return err;
	/* The device checks it too: a QP receives into MRs of its SRQ's PD. */
	if (init->srq && init->srq->pd != ibqp->pd)
		return -EINVAL;
	uc = rdma_udata_to_drv_context(udata, struct npfnic_ib_ucontext, ibuc);
	mutex_init(&qp->lock);
	/* As rdma_rxe: the slot fits the SGEs or the inline data, whichever is larger. */
	cap = init->cap;
	cap.max_send_sge = max_t(u32, max_t(u32, cap.max_send_sge, 1),
				 DIV_ROUND_UP(cap.max_inline_data, sizeof(struct rxe_sge)));
	cap.max_send_sge = min_t(u32, cap.max_send_sge, NPFNIC_IB_MAX_SGE);
	cap.max_inline_data = max_t(u32, cap.max_inline_data,
				    cap.max_send_sge * sizeof(struct rxe_sge));
	cap.max_inline_data = min_t(u32, cap.max_inline_data, NPFNIC_IB_MAX_INLINE);
	/* On an SRQ: no receive queue, no receive capabilities. */
	cap.max_recv_sge = init->srq ? 0 : max_t(u32, cap.max_recv_sge, 1);
	sq_wr = max_t(u32, cap.max_send_wr, 1);
	rq_wr = init->srq ? 0 : max_t(u32, cap.max_recv_wr, 1);

	id = ida_alloc_range(&dev->qp_ida, NPFNIC_IB_QPN_BASE,
			     NPFNIC_IB_QPN_BASE + NPFNIC_IB_MAX_QP - 1, GFP_KERNEL);
	if (id < 0)
		return id == -ENOSPC ? -ENOMEM : id;
	ibqp->qp_num = id;
	err = npfnic_ib_queue_init(dev, &uc->ibuc, &qp->sq, &sq_wr, npfnic_ib_sq_elem(&cap),
				   &resp.sq_mi);
	if (err)
		goto err_id;
	if (!init->srq) {
		err = npfnic_ib_queue_init(dev, &uc->ibuc, &qp->rq, &rq_wr,
					   npfnic_ib_recv_elem(cap.max_recv_sge), &resp.rq_mi);
		if (err)
			goto err_sq;
	}
	cap.max_send_wr = sq_wr;
	cap.max_recv_wr = rq_wr;
	qp->cap = cap;
	qp->sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	qp->attr.qp_state = IB_QPS_RESET;
	qp->attr.cur_qp_state = IB_QPS_RESET;
	qp->attr.port_num = 1;
	qp->vlan = 0xffff;

	cmd.qp.qpn = ibqp->qp_num;
	cmd.qp.pdn = to_npfnic_ib_pd(ibqp->pd)->pdn;
	cmd.qp.pasid = uc->pasid;
	cmd.qp.send_cqn = to_npfnic_ib_cq(init->send_cq)->cqn;
	cmd.qp.recv_cqn = to_npfnic_ib_cq(init->recv_cq)->cqn;
	cmd.qp.qp = qp;
	cmd.qp.srq = init->srq ? to_npfnic_ib_srq(init->srq) : NULL;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err) {
		leak = err == -ETIMEDOUT;
		goto err_rq;
	}
	err = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_cmd;
	err = xa_err(xa_store_irq(&dev->qps, ibqp->qp_num, qp, GFP_KERNEL));
	if (err)
		goto err_cmd;
	init->cap = cap;
	return 0;

err_cmd:
	cmd.op = NPFNIC_IB_CMD_DESTROY_QP;
	leak = npfnic_ib_cmd(dev, &cmd);
err_rq:
	npfnic_ib_queue_release(&qp->rq, leak);
err_sq:
	npfnic_ib_queue_release(&qp->sq, leak);
err_id:
	ida_free(&dev->qp_ida, ibqp->qp_num);
	return err;
}

/* The source MAC and VLAN of the path's GID, which the device sends from. */
static int npfnic_ib_qp_path(struct npfnic_ib_qp *qp, const struct ib_qp_attr *attr)
{
	const struct ib_global_route *grh;

	if (!(rdma_ah_get_ah_flags(&attr->ah_attr) & IB_AH_GRH))
		return -EINVAL;
	grh = rdma_ah_read_grh(&attr->ah_attr);
	if (!grh->sgid_attr || grh->sgid_attr->gid_type != IB_GID_TYPE_ROCE_UDP_ENCAP)
		return -EINVAL;
	qp->gid_index = grh->sgid_attr->index;
	return rdma_read_gid_l2_fields(grh->sgid_attr, &qp->vlan, qp->smac);
}

int npfnic_ib_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
			struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibqp->device);
	struct npfnic_ib_qp *qp = to_npfnic_ib_qp(ibqp);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_MODIFY_QP };
	struct ib_qp_attr old;
	enum ib_qp_state cur, next;
	int err;

	if (mask & ~IB_QP_ATTR_STANDARD_BITS)
		return -EOPNOTSUPP;
	mutex_lock(&qp->lock);
	cur = (mask & IB_QP_CUR_STATE) ? attr->cur_qp_state : qp->attr.qp_state;
	next = (mask & IB_QP_STATE) ? attr->qp_state : cur;
	err = -EINVAL;
	if (!ib_modify_qp_is_ok(cur, next, ibqp->qp_type, mask))
		goto out;
	if ((mask & IB_QP_PORT) && attr->port_num != 1)
		goto out;
	if ((mask & IB_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > NPFNIC_IB_MAX_RD_ATOM)
		goto out;
	if ((mask & IB_QP_PATH_MTU) &&
	    (attr->path_mtu < IB_MTU_256 || attr->path_mtu > IB_MTU_4096))
		goto out;
	if (mask & IB_QP_AV) {
		err = npfnic_ib_qp_path(qp, attr);
		if (err)
			goto out;
	}

	old = qp->attr;
	if (mask & IB_QP_STATE)
		qp->attr.qp_state = next;
	qp->attr.cur_qp_state = qp->attr.qp_state;
	if (mask & IB_QP_ACCESS_FLAGS)
		qp->attr.qp_access_flags = attr->qp_access_flags;
	if (mask & IB_QP_PKEY_INDEX)
		qp->attr.pkey_index = attr->pkey_index;
	if (mask & IB_QP_PORT)
		qp->attr.port_num = attr->port_num;
	if (mask & IB_QP_AV) {
		/* The core's reference on the source GID lasts the call only. */
		qp->attr.ah_attr = attr->ah_attr;
		qp->attr.ah_attr.grh.sgid_attr = NULL;
	}
	if (mask & IB_QP_PATH_MTU)
		qp->attr.path_mtu = attr->path_mtu;
	if (mask & IB_QP_TIMEOUT)
		qp->attr.timeout = attr->timeout;
	if (mask & IB_QP_RETRY_CNT)
		qp->attr.retry_cnt = attr->retry_cnt;
	if (mask & IB_QP_RNR_RETRY)
		qp->attr.rnr_retry = attr->rnr_retry;
	if (mask & IB_QP_RQ_PSN)
		qp->attr.rq_psn = attr->rq_psn & 0xffffff;
	/*
	 * The READs this QP may have outstanding: perftest sets the peer's
	 * responder depth here (rdma_rxe's is 128). Fewer than allowed is
	 * always safe for the responder, so the device's limit caps it.
	 */
	if (mask & IB_QP_MAX_QP_RD_ATOMIC)
		qp->attr.max_rd_atomic = min_t(u8, attr->max_rd_atomic, NPFNIC_IB_MAX_RD_ATOM);
	if (mask & IB_QP_MIN_RNR_TIMER)
		qp->attr.min_rnr_timer = attr->min_rnr_timer;
	if (mask & IB_QP_SQ_PSN)
		qp->attr.sq_psn = attr->sq_psn & 0xffffff;
	if (mask & IB_QP_MAX_DEST_RD_ATOMIC)
		qp->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IB_QP_DEST_QPN)
		qp->attr.dest_qp_num = attr->dest_qp_num & 0xffffff;
	if (mask & IB_QP_QKEY)
		qp->attr.qkey = attr->qkey;

	cmd.qp.qpn = ibqp->qp_num;
	cmd.qp.mask = mask;
	/* A UD QP's messages are bounded by the port's MTU, which the device takes from here. */
	if (ibqp->qp_type == IB_QPT_UD && next != IB_QPS_RESET && next != IB_QPS_ERR) {
		qp->attr.path_mtu = iboe_get_mtu(READ_ONCE(dev->netdev->mtu));
		cmd.qp.mask |= IB_QP_PATH_MTU;
	}
	cmd.qp.qp = qp;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err)
		qp->attr = old;
out:
	mutex_unlock(&qp->lock);
	return err;
}

int npfnic_ib_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		       struct ib_qp_init_attr *init)
{
	struct npfnic_ib_qp *qp = to_npfnic_ib_qp(ibqp);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_QUERY_QP };
	int err;

	mutex_lock(&qp->lock);
	*attr = qp->attr;
	/* The device moves a QP to the error state by itself, and its PSNs on. */
	cmd.qp.qpn = ibqp->qp_num;
	cmd.qp.qp = qp;
	cmd.qp.state = qp->attr.qp_state;
	cmd.qp.sq_psn = qp->attr.sq_psn;
	cmd.qp.rq_psn = qp->attr.rq_psn;
	err = npfnic_ib_cmd(to_npfnic_ib_dev(ibqp->device), &cmd);
	if (!err && cmd.qp.state <= IB_QPS_ERR) {
		qp->attr.qp_state = cmd.qp.state;
		qp->attr.cur_qp_state = cmd.qp.state;
		attr->qp_state = cmd.qp.state;
		attr->cur_qp_state = cmd.qp.state;
		attr->sq_psn = cmd.qp.sq_psn;
		attr->rq_psn = cmd.qp.rq_psn;
	}
	mutex_unlock(&qp->lock);
	if (err)
		return err;
	attr->cap = qp->cap;
	memset(init, 0, sizeof(*init));
	init->qp_type = ibqp->qp_type;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->srq = ibqp->srq;
	init->sq_sig_type = IB_SIGNAL_REQ_WR;
	init->cap = qp->cap;
	return 0;
}

int npfnic_ib_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibqp->device);
	struct npfnic_ib_qp *qp = to_npfnic_ib_qp(ibqp);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_DESTROY_QP };
	bool leak;

	xa_erase_irq(&dev->qps, ibqp->qp_num);
	cmd.qp.qpn = ibqp->qp_num;
	cmd.qp.qp = qp;
	/* As for CQs: a device still using the queues gets them leaked. */
	leak = npfnic_ib_cmd(dev, &cmd);
	npfnic_ib_queue_release(&qp->sq, leak);
	npfnic_ib_queue_release(&qp->rq, leak);
	ida_free(&dev->qp_ida, ibqp->qp_num);
	return 0;
}

/*
 * librxe's doorbell: the send queue entries are in place and the producer
 * index stored, then POST_SEND comes with no work request. Kernel work
 * requests have no queue to go to.
 */
int npfnic_ib_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			const struct ib_send_wr **bad_wr)
{
	if (wr) {
		*bad_wr = wr;
		return -EOPNOTSUPP;
	}
	npfnic_ib_sq_doorbell(to_npfnic_ib_dev(ibqp->device), ibqp->qp_num);
	return 0;
}

/* User space posts receives itself; this is the kernel's way, and it has no QPs. */
int npfnic_ib_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr)
{
	*bad_wr = wr;
	return -EOPNOTSUPP;
}
