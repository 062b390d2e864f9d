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
 * with no work requests, which becomes the QP's doorbell here.
 *
 * Kernel consumers (udata NULL; FEATURES.RDMA_KERNEL) get the same queues
 * in kernel memory, not mapped, and the driver plays librxe's part:
 * post_send, post_recv and post_srq_recv write the entries (SGEs hold DMA
 * addresses under the PD's DMA MR, a UD send carries its address handle's
 * vector) and move the producer index, a send then rings SQ_DOORBELL;
 * poll_cq turns the device's completions into struct ib_wc and moves the
 * consumer index. The MAD layer posts under its own spinlock, so these
 * paths never sleep: each queue's producer has a spinlock, each CQ's
 * consumer too. QP 1 is the GSI QP, which the device runs as a UD QP.
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

/* A queue buffer no mapping and no device uses any more. */
static void npfnic_ib_buf_free(struct npfnic_ib_mmap *mm)
{
	if (mm->leaked)
		dev_warn(mm->dma_dev, "a queue the device did not release: %zu bytes leaked\n",
			 mm->size);
	else
		dma_free_coherent(mm->dma_dev, mm->size, mm->cpu, mm->dma);
	kfree(mm);
}

/*
 * Allocates a queue of at least *entries entries (*entries >= 1) of
 * elem_size bytes; *entries becomes what the queue holds. A user queue's
 * mmap entry goes into uc, and the mminfo for user space to *mi; a kernel
 * queue (uc NULL) is not mapped.
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
	if (uc) {
		err = rdma_user_mmap_entry_insert(uc, &mm->rdma, mm->size);
		if (err)
			goto err_free;
		mm->mapped = true;
		mi->offset = rdma_user_mmap_get_offset(&mm->rdma);
		mi->size = mm->size;
		mi->pad = 0;
	}
	q->mm = mm;
	q->buf = mm->cpu;
	q->dma = mm->dma;
	q->slots = slots;
	q->log2_elem_size = log2;
	q->buf->log2_elem_size = log2;
	q->buf->index_mask = slots - 1;
	*entries = slots - 1;
	return 0;

err_free:
	dma_free_coherent(mm->dma_dev, mm->size, mm->cpu, mm->dma);
	kfree(mm);
	return err;
}

/*
 * The queue's owner is done with it; the buffer goes with its last
 * mapping (at once for a kernel queue), or never when the device did not
 * confirm it stopped using it.
 */
static void npfnic_ib_queue_release(struct npfnic_ib_queue *q, bool leak)
{
	if (q->mm) {
		q->mm->leaked = leak;
		if (q->mm->mapped)
			rdma_user_mmap_entry_remove(&q->mm->rdma);
		else
			npfnic_ib_buf_free(q->mm);
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
	npfnic_ib_buf_free(container_of(entry, struct npfnic_ib_mmap, rdma));
}

/* ---- a kernel queue's producer and consumer: the driver's ---- */

static void *npfnic_ib_slot(const struct npfnic_ib_queue *q, u32 index)
{
	return q->buf->data + ((size_t)(index & (q->slots - 1)) << q->log2_elem_size);
}

/*
 * Whether the producer may fill slot prod: not when the next one is the
 * device's consumer index (one slot stays empty). *cons caches that
 * index, which is read again only when the queue looks full.
 */
static bool npfnic_ib_queue_room(const struct npfnic_ib_queue *q, u32 prod, u32 *cons)
{
	u32 mask = q->slots - 1;

	if (((prod + 1) & mask) != (*cons & mask))
		return true;
	*cons = READ_ONCE(q->buf->consumer_index);
	return ((prod + 1) & mask) != (*cons & mask);
}

/* The entries before prod are written: the device may take them. */
static void npfnic_ib_queue_publish(struct npfnic_ib_queue *q, u32 prod)
{
	dma_wmb();
	WRITE_ONCE(q->buf->producer_index, prod & (q->slots - 1));
}

/* ---- CQs ---- */

int npfnic_ib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibcq->device);
	struct npfnic_ib_ucontext *uc = NULL;
	struct npfnic_ib_cq *cq = to_npfnic_ib_cq(ibcq);
	struct rxe_create_cq_resp resp = {};
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_CREATE_CQ };
	bool leak = false;
	u32 entries;
	int id, err;

	if (!udata && !dev->hw.kernel)
		return -EOPNOTSUPP;
	if (attr->flags)
		return -EOPNOTSUPP;
	if (attr->cqe <= 0 || attr->cqe > NPFNIC_IB_MAX_CQE ||
	    (udata && udata->outlen < sizeof(resp)))
		return -EINVAL;
	if (udata)
		uc = rdma_udata_to_drv_context(udata, struct npfnic_ib_ucontext, ibuc);
	cq->kernel = !udata;
	spin_lock_init(&cq->lock);
	id = ida_alloc_range(&dev->cq_ida, 0, NPFNIC_IB_MAX_CQ - 1, GFP_KERNEL);
	if (id < 0)
		return id == -ENOSPC ? -ENOMEM : id;
	cq->cqn = id;
	entries = attr->cqe;
	err = npfnic_ib_queue_init(dev, uc ? &uc->ibuc : NULL, &cq->q, &entries,
				   NPFNIC_IB_CQE_SIZE, &resp.mi);
	if (err)
		goto err_id;
	cmd.cq.cqn = cq->cqn;
	cmd.cq.q = &cq->q;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err) {
		leak = err == -ETIMEDOUT;
		goto err_queue;
	}
	if (udata) {
		err = ib_copy_to_udata(udata, &resp, sizeof(resp));
		if (err)
			goto err_cmd;
	}
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

/*
 * ibv_resize_cq: a new ring, to which the device moves the completions not
 * polled yet (RESIZE_CQ, refused if they do not fit); librxe maps it in
 * place of the old one (the response's mmap info), which the device no
 * longer writes once the command completed. librxe holds the CQ's lock
 * across the call, so nothing polls meanwhile. Kernel CQs keep their size.
 */
int npfnic_ib_resize_cq(struct ib_cq *ibcq, int cqe, struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibcq->device);
	struct npfnic_ib_cq *cq = to_npfnic_ib_cq(ibcq);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_RESIZE_CQ };
	struct rxe_resize_cq_resp resp = {};
	struct npfnic_ib_ucontext *uc;
	struct npfnic_ib_queue q = {}, old;
	u32 entries = cqe;
	int err;

	if (!dev->hw.resize_cq || cq->kernel || !udata)
		return -EOPNOTSUPP;
	if (cqe <= 0 || cqe > NPFNIC_IB_MAX_CQE || udata->outlen < sizeof(resp))
		return -EINVAL;
	uc = rdma_udata_to_drv_context(udata, struct npfnic_ib_ucontext, ibuc);
	err = npfnic_ib_queue_init(dev, &uc->ibuc, &q, &entries, NPFNIC_IB_CQE_SIZE, &resp.mi);
	if (err)
		return err;
	cmd.cq.cqn = cq->cqn;
	cmd.cq.q = &q;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err) {
		/* A device that did not answer may write the new ring too. */
		npfnic_ib_queue_release(&q, err == -ETIMEDOUT);
		return err;
	}
	old = cq->q;
	cq->q = q;
	npfnic_ib_queue_release(&old, false);
	ibcq->cqe = entries;
	return ib_copy_to_udata(udata, &resp, sizeof(resp));
}

/*
 * librxe's ibv_req_notify_cq, and the kernel's: the device posts the CQ's
 * event once (CQ_ARM), at once if completions wait unconsumed when the
 * arm arrives. A kernel consumer asking for missed events learns whether
 * any wait already, so that it polls again rather than waiting for the
 * event.
 */
int npfnic_ib_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct npfnic_ib_cq *cq = to_npfnic_ib_cq(ibcq);
	u32 mask = cq->q.slots - 1;

	npfnic_ib_cq_arm(to_npfnic_ib_dev(ibcq->device), cq->cqn,
			 (flags & IB_CQ_SOLICITED_MASK) == IB_CQ_SOLICITED);
	if (!cq->kernel || !(flags & IB_CQ_REPORT_MISSED_EVENTS))
		return 0;
	return (READ_ONCE(cq->q.buf->producer_index) & mask) !=
	       (READ_ONCE(cq->q.buf->consumer_index) & mask);
}

static bool npfnic_ib_wc_opcode_ok(u32 opcode)
{
	switch (opcode) {
	case IB_WC_SEND:
	case IB_WC_RDMA_WRITE:
	case IB_WC_RDMA_READ:
	case IB_WC_COMP_SWAP:
	case IB_WC_FETCH_ADD:
	case IB_WC_LOCAL_INV:
	case IB_WC_REG_MR:
	case IB_WC_RECV:
	case IB_WC_RECV_RDMA_WITH_IMM:
		return true;
	default:
		return false;
	}
}

/*
 * A kernel CQ's entry as the consumer's work completion (qps' lock held):
 * false for one of no kernel QP on this CQ (destroyed, or device input
 * naming another), which is consumed unreported. The values of struct
 * ib_uverbs_wc are the kernel's own; a UD receive's GRH area holds an
 * IPv4 header, which the core reads as RoCEv2's (ib_init_ah_attr_from_wc).
 */
static bool npfnic_ib_cqe_to_wc(struct npfnic_ib_dev *dev, struct npfnic_ib_cq *cq,
				const struct ib_uverbs_wc *e, struct ib_wc *wc)
{
	struct npfnic_ib_qp *qp = xa_load(&dev->qps, READ_ONCE(e->qp_num));

	if (!qp || !qp->kernel ||
	    (qp->ibqp.send_cq != &cq->ibcq && qp->ibqp.recv_cq != &cq->ibcq))
		return false;
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = READ_ONCE(e->wr_id);
	wc->status = READ_ONCE(e->status);
	wc->opcode = READ_ONCE(e->opcode);
	if (wc->status > IB_WC_GENERAL_ERR ||
	    (wc->status == IB_WC_SUCCESS && !npfnic_ib_wc_opcode_ok(wc->opcode)))
		wc->status = IB_WC_GENERAL_ERR;
	wc->vendor_err = READ_ONCE(e->vendor_err);
	wc->byte_len = READ_ONCE(e->byte_len);
	wc->qp = &qp->ibqp;
	wc->ex.imm_data = READ_ONCE(e->ex.imm_data);
	wc->src_qp = READ_ONCE(e->src_qp) & 0xffffff;
	/* ex is a union: imm_data holds a SEND with Invalidate's R_Key too. */
	wc->wc_flags = READ_ONCE(e->wc_flags) &
		       (IB_WC_GRH | IB_WC_WITH_IMM | IB_WC_WITH_INVALIDATE);
	wc->port_num = 1;
	if ((wc->wc_flags & IB_WC_GRH) && npfnic_ib_qp_ud(&qp->ibqp)) {
		wc->wc_flags |= IB_WC_WITH_NETWORK_HDR_TYPE;
		wc->network_hdr_type = RDMA_NETWORK_IPV4;
	}
	return true;
}

/*
 * A kernel consumer's poll: the device writes an entry, then the producer
 * index; the driver reads the index, the entries (dma_rmb between), and
 * moves the consumer index once it read them (dma_mb: the device may
 * write a slot again as soon as it sees it free). User CQs are librxe's.
 */
int npfnic_ib_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibcq->device);
	struct npfnic_ib_cq *cq = to_npfnic_ib_cq(ibcq);
	u32 mask = cq->q.slots - 1, cons, prod, first;
	unsigned long flags;
	int n = 0;

	if (!cq->kernel)
		return -EOPNOTSUPP;
	spin_lock_irqsave(&cq->lock, flags);
	cons = cq->q.buf->consumer_index & mask;
	first = cons;
	prod = READ_ONCE(cq->q.buf->producer_index) & mask;
	dma_rmb();
	xa_lock(&dev->qps);
	while (n < num_entries && cons != prod) {
		if (npfnic_ib_cqe_to_wc(dev, cq, npfnic_ib_slot(&cq->q, cons), &wc[n]))
			n++;
		cons = (cons + 1) & mask;
	}
	xa_unlock(&dev->qps);
	if (cons != first) {
		dma_mb();
		WRITE_ONCE(cq->q.buf->consumer_index, cons);
	}
	spin_unlock_irqrestore(&cq->lock, flags);
	return n;
}

/* ---- receive queues: a QP's own, or an SRQ ---- */

/* The receive queue slot: the entry, then its SGEs. */
static size_t npfnic_ib_recv_elem(u32 max_sge)
{
	return sizeof(struct rxe_recv_wqe) + max_sge * sizeof(struct rxe_sge);
}

/*
 * A kernel consumer's receives into a QP's receive queue or an SRQ, as
 * librxe writes them: the entries, then the producer index. No doorbell:
 * the device takes an entry when a message arrives. -ENOMEM: full.
 */
static int npfnic_ib_post_recv_queue(struct npfnic_ib_queue *q, spinlock_t *lock, u32 max_sge,
				     const struct ib_recv_wr *wr,
				     const struct ib_recv_wr **bad_wr)
{
	u32 prod, start, cons;
	unsigned long flags;
	int err = 0;

	spin_lock_irqsave(lock, flags);
	start = q->buf->producer_index & (q->slots - 1);
	prod = start;
	cons = READ_ONCE(q->buf->consumer_index);
	for (; wr; wr = wr->next) {
		struct rxe_recv_wqe *wqe;
		u64 length = 0;
		int i;

		if (wr->num_sge < 0 || wr->num_sge > max_sge) {
			err = -EINVAL;
			break;
		}
		if (!npfnic_ib_queue_room(q, prod, &cons)) {
			err = -ENOMEM;
			break;
		}
		wqe = npfnic_ib_slot(q, prod);
		memset(wqe, 0, sizeof(*wqe));
		wqe->wr_id = wr->wr_id;
		for (i = 0; i < wr->num_sge; i++) {
			wqe->dma.sge[i].addr = wr->sg_list[i].addr;
			wqe->dma.sge[i].length = wr->sg_list[i].length;
			wqe->dma.sge[i].lkey = wr->sg_list[i].lkey;
			length += wr->sg_list[i].length;
		}
		if (length > NPFNIC_IB_MAX_MSG) {
			err = -EINVAL;
			break;
		}
		wqe->dma.length = length;
		wqe->dma.resid = length;
		wqe->dma.num_sge = wr->num_sge;
		prod++;
	}
	if (prod != start)
		npfnic_ib_queue_publish(q, prod);
	spin_unlock_irqrestore(lock, flags);
	if (err)
		*bad_wr = wr;
	return err;
}

/* ---- SRQs ---- */

/*
 * SRQs need FEATURES.RDMA_SRQ, and for kernel consumers (posting through
 * post_srq_recv) FEATURES.RDMA_KERNEL. The limit of the attributes is
 * armed at creation, as rdma_rxe does.
 */
int npfnic_ib_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
			 struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibsrq->device);
	struct npfnic_ib_srq *srq = to_npfnic_ib_srq(ibsrq);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_CREATE_SRQ };
	struct rxe_create_srq_resp resp = {};
	struct npfnic_ib_ucontext *uc = NULL;
	bool leak = false;
	u32 entries;
	int id, err;

	if (!dev->hw.srq || (!udata && !dev->hw.kernel))
		return -EOPNOTSUPP;
	if (init->srq_type != IB_SRQT_BASIC)
		return -EOPNOTSUPP;
	if (!init->attr.max_wr || init->attr.max_wr > NPFNIC_IB_MAX_QP_WR ||
	    init->attr.max_sge > NPFNIC_IB_MAX_SGE || (udata && udata->outlen < sizeof(resp)))
		return -EINVAL;
	if (udata)
		uc = rdma_udata_to_drv_context(udata, struct npfnic_ib_ucontext, ibuc);
	mutex_init(&srq->lock);
	srq->kernel = !udata;
	spin_lock_init(&srq->rq_lock);
	srq->max_sge = max_t(u32, init->attr.max_sge, 1);
	entries = init->attr.max_wr;

	id = ida_alloc_range(&dev->srq_ida, 0, NPFNIC_IB_MAX_SRQ - 1, GFP_KERNEL);
	if (id < 0)
		return id == -ENOSPC ? -ENOMEM : id;
	srq->srqn = id;
	err = npfnic_ib_queue_init(dev, uc ? &uc->ibuc : NULL, &srq->q, &entries,
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
	if (udata) {
		err = ib_copy_to_udata(udata, &resp, sizeof(resp));
		if (err)
			goto err_cmd;
	}
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

/* User space posts to its SRQs itself; the driver to a kernel consumer's. */
int npfnic_ib_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			    const struct ib_recv_wr **bad_wr)
{
	struct npfnic_ib_srq *srq = to_npfnic_ib_srq(ibsrq);

	if (!srq->kernel) {
		*bad_wr = wr;
		return -EOPNOTSUPP;
	}
	return npfnic_ib_post_recv_queue(&srq->q, &srq->rq_lock, srq->max_sge, wr, bad_wr);
}

/* ---- address handles ---- */

/*
 * librxe resolves the vector (destination MAC, source address) itself and
 * copies it into each send entry, so a user address handle is only
 * checked here: RoCEv2 over IPv4 is all the device sends. It has no
 * number (ah_num 0 in the response). A kernel consumer's (the MAD
 * layer's, ib_cm's) keeps the vector the core resolved (the destination
 * MAC included), which post_send copies into each entry: nothing here
 * sleeps, as RDMA_CREATE_AH_SLEEPABLE may be clear.
 */
int npfnic_ib_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
			struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibah->device);
	struct npfnic_ib_ah *ah = container_of(ibah, struct npfnic_ib_ah, ibah);
	const struct rdma_ah_attr *attr = init->ah_attr;
	struct rxe_create_ah_resp resp = {};
	const struct ib_global_route *grh;
	struct rxe_av *av = &ah->av;

	if (!dev->hw.ud || (!udata && !dev->hw.kernel))
		return -EOPNOTSUPP;
	if (attr->type != RDMA_AH_ATTR_TYPE_ROCE || !(rdma_ah_get_ah_flags(attr) & IB_AH_GRH))
		return -EINVAL;
	grh = rdma_ah_read_grh(attr);
	if (!grh->sgid_attr || grh->sgid_attr->gid_type != IB_GID_TYPE_ROCE_UDP_ENCAP ||
	    !ipv6_addr_v4mapped((const struct in6_addr *)grh->dgid.raw))
		return -EINVAL;
	if (udata) {
		if (udata->outlen >= sizeof(resp))
			return ib_copy_to_udata(udata, &resp, sizeof(resp));
		return 0;
	}
	if (grh->sgid_attr->index >= NPFNIC_IB_GID_TBL_LEN ||
	    !ipv6_addr_v4mapped((const struct in6_addr *)grh->sgid_attr->gid.raw))
		return -EINVAL;
	ah->kernel = true;
	av->port_num = 1;
	av->network_type = RXE_NETWORK_TYPE_IPV4;
	memcpy(av->dmac, attr->roce.dmac, ETH_ALEN);
	memcpy(av->grh.dgid.raw, grh->dgid.raw, sizeof(av->grh.dgid.raw));
	av->grh.flow_label = grh->flow_label;
	av->grh.sgid_index = grh->sgid_attr->index;
	av->grh.hop_limit = grh->hop_limit;
	av->grh.traffic_class = grh->traffic_class;
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

/*
 * With an SRQ the receive capabilities are ignored, as the verbs have it.
 * Kernel consumers need FEATURES.RDMA_KERNEL, and only they get the GSI QP.
 */
static int npfnic_ib_check_cap(const struct npfnic_ib_hw *hw, struct ib_qp_init_attr *init,
			       bool kernel)
{
	struct ib_qp_cap *cap = &init->cap;

	if (kernel && !hw->kernel)
		return -EOPNOTSUPP;
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
	case IB_QPT_GSI:
		if (!kernel)
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

/* The QP's number: 1 for the GSI QP (one per device: one port), else from 16 on. */
static int npfnic_ib_qpn_get(struct npfnic_ib_dev *dev, struct ib_qp *ibqp)
{
	int id;

	if (ibqp->qp_type == IB_QPT_GSI) {
		if (test_and_set_bit(0, &dev->gsi_busy))
			return -EBUSY;
		ibqp->qp_num = 1;
		return 0;
	}
	id = ida_alloc_range(&dev->qp_ida, NPFNIC_IB_QPN_BASE,
			     NPFNIC_IB_QPN_BASE + NPFNIC_IB_MAX_QP - 1, GFP_KERNEL);
	if (id < 0)
		return id == -ENOSPC ? -ENOMEM : id;
	ibqp->qp_num = id;
	return 0;
}

static void npfnic_ib_qpn_put(struct npfnic_ib_dev *dev, struct ib_qp *ibqp)
{
	if (ibqp->qp_type == IB_QPT_GSI)
		clear_bit(0, &dev->gsi_busy);
	else
		ida_free(&dev->qp_ida, ibqp->qp_num);
}

int npfnic_ib_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init, struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibqp->device);
	struct npfnic_ib_qp *qp = to_npfnic_ib_qp(ibqp);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_CREATE_QP };
	struct rxe_create_qp_resp resp = {};
	struct npfnic_ib_ucontext *uc = NULL;
	struct ib_ucontext *ibuc = NULL;
	bool leak = false;
	struct ib_qp_cap cap;
	u32 sq_wr, rq_wr;
	int err;

	if (udata && (udata->inlen || udata->outlen < sizeof(resp)))
		return -EINVAL;
	err = npfnic_ib_check_cap(&dev->hw, init, !udata);
	if (err)
		return err;
	/* The device checks it too: a QP receives into MRs of its SRQ's PD. */
	if (init->srq && init->srq->pd != ibqp->pd)
		return -EINVAL;
	if (udata) {
		uc = rdma_udata_to_drv_context(udata, struct npfnic_ib_ucontext, ibuc);
		ibuc = &uc->ibuc;
	}
	mutex_init(&qp->lock);
	qp->kernel = !udata;
	spin_lock_init(&qp->sq_lock);
	spin_lock_init(&qp->rq_lock);
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

	err = npfnic_ib_qpn_get(dev, ibqp);
	if (err)
		return err;
	err = npfnic_ib_queue_init(dev, ibuc, &qp->sq, &sq_wr, npfnic_ib_sq_elem(&cap),
				   &resp.sq_mi);
	if (err)
		goto err_id;
	if (!init->srq) {
		err = npfnic_ib_queue_init(dev, ibuc, &qp->rq, &rq_wr,
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
	cmd.qp.pasid = uc ? uc->pasid : 0;
	cmd.qp.send_cqn = to_npfnic_ib_cq(init->send_cq)->cqn;
	cmd.qp.recv_cqn = to_npfnic_ib_cq(init->recv_cq)->cqn;
	cmd.qp.qp = qp;
	cmd.qp.srq = init->srq ? to_npfnic_ib_srq(init->srq) : NULL;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err) {
		leak = err == -ETIMEDOUT;
		goto err_rq;
	}
	if (udata) {
		err = ib_copy_to_udata(udata, &resp, sizeof(resp));
		if (err)
			goto err_cmd;
	}
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
	npfnic_ib_qpn_put(dev, ibqp);
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
	if (npfnic_ib_qp_ud(ibqp) && next != IB_QPS_RESET && next != IB_QPS_ERR) {
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
	npfnic_ib_qpn_put(dev, ibqp);
	return 0;
}

/* ---- kernel consumers' work requests ---- */

/* The operations each QP type may post, as the device runs them. */
static int npfnic_ib_send_ok(const struct npfnic_ib_dev *dev, const struct npfnic_ib_qp *qp,
			     const struct ib_send_wr *wr)
{
	bool inl = wr->send_flags & IB_SEND_INLINE;

	switch (wr->opcode) {
	case IB_WR_SEND:
	case IB_WR_SEND_WITH_IMM:
		return 0;
	case IB_WR_RDMA_WRITE:
	case IB_WR_RDMA_WRITE_WITH_IMM:
		return npfnic_ib_qp_ud(&qp->ibqp) ? -EINVAL : 0;
	case IB_WR_RDMA_READ:
		return qp->ibqp.qp_type != IB_QPT_RC || inl ? -EINVAL : 0;
	case IB_WR_ATOMIC_CMP_AND_SWP:
	case IB_WR_ATOMIC_FETCH_AND_ADD:
		if (!dev->hw.atomics)
			return -EOPNOTSUPP;
		/* The original value returns into one 8-byte SGE. */
		if (qp->ibqp.qp_type != IB_QPT_RC || inl || wr->num_sge != 1 ||
		    wr->sg_list[0].length != sizeof(u64))
			return -EINVAL;
		return 0;
	case IB_WR_REG_MR:
		if (!dev->hw.fast_reg)
			return -EOPNOTSUPP;
		if (npfnic_ib_qp_ud(&qp->ibqp) || !to_npfnic_ib_mr(reg_wr(wr)->mr)->fast)
			return -EINVAL;
		return 0;
	case IB_WR_LOCAL_INV:
		if (!dev->hw.fast_reg && !dev->hw.mw)
			return -EOPNOTSUPP;
		return npfnic_ib_qp_ud(&qp->ibqp) ? -EINVAL : 0;
	case IB_WR_SEND_WITH_INV:
		if (!dev->hw.fast_reg && !dev->hw.mw)
			return -EOPNOTSUPP;
		return qp->ibqp.qp_type != IB_QPT_RC ? -EINVAL : 0;
	default:	/* LSO, READ_WITH_INV, masked atomics, ... */
		return -EOPNOTSUPP;
	}
}

/* The access a fast registration may grant. */
#define NPFNIC_IB_REG_ACCESS \
	(IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ | \
	 IB_ACCESS_REMOTE_ATOMIC | IB_ACCESS_MW_BIND)

/*
 * A REG_MR entry: struct npfnic_reg_wr in the entry's wr.wr union, the
 * region's page list as map_mr_sg left it (the device reads it while the
 * entry runs).
 */
static int npfnic_ib_fill_reg(const struct ib_reg_wr *reg, struct rxe_send_wqe *wqe)
{
	struct npfnic_reg_wr *r = (void *)&wqe->wr.wr;
	const struct npfnic_ib_mr *mr = to_npfnic_ib_mr(reg->mr);
	u32 page_size = reg->mr->page_size;

	BUILD_BUG_ON(offsetof(struct rxe_send_wqe, wr.wr) != NPFNIC_RXE_SEND_REG_OFFSET);
	BUILD_BUG_ON(sizeof(wqe->wr.wr) < sizeof(*r));
	if (!is_power_of_2(page_size) || ilog2(page_size) < NPFNIC_RDMA_FAST_REG_MIN_PAGE_SHIFT ||
	    ilog2(page_size) > NPFNIC_RDMA_FAST_REG_MAX_PAGE_SHIFT || !mr->npages)
		return -EINVAL;
	if ((reg->key >> 8) != (mr->hw_key >> 8))
		return -EINVAL;
	r->iova = cpu_to_le64(reg->mr->iova);
	r->length = cpu_to_le64(reg->mr->length);
	r->key = cpu_to_le32(reg->key);
	r->access = cpu_to_le32(reg->access & NPFNIC_IB_REG_ACCESS);
	r->page_shift = ilog2(page_size);
	r->npages = cpu_to_le32(mr->npages);
	return 0;
}

/*
 * A send entry, as librxe writes it (the fields the device reads; see
 * the datasheet's struct rxe_send_wqe): the work request's opcode and
 * flags have the same values, a UD send carries its address handle's
 * vector, inline data is copied from the SGEs' kernel virtual addresses.
 */
static int npfnic_ib_fill_send(const struct npfnic_ib_dev *dev, const struct npfnic_ib_qp *qp,
			       const struct ib_send_wr *wr, struct rxe_send_wqe *wqe)
{
	const int flags = IB_SEND_FENCE | IB_SEND_SIGNALED | IB_SEND_SOLICITED | IB_SEND_INLINE;
	u64 length = 0;
	int i, err;

	err = npfnic_ib_send_ok(dev, qp, wr);
	if (err)
		return err;
	if (wr->num_sge < 0 || wr->num_sge > qp->cap.max_send_sge)
		return -EINVAL;
	memset(wqe, 0, sizeof(*wqe));
	wqe->wr.wr_id = wr->wr_id;
	wqe->wr.opcode = wr->opcode;
	wqe->wr.send_flags = wr->send_flags & flags;
	switch (wr->opcode) {
	case IB_WR_SEND_WITH_IMM:
	case IB_WR_RDMA_WRITE_WITH_IMM:
		wqe->wr.ex.imm_data = wr->ex.imm_data;
		break;
	case IB_WR_SEND_WITH_INV:
		wqe->wr.ex.invalidate_rkey = wr->ex.invalidate_rkey;
		break;
	case IB_WR_LOCAL_INV:
		/* No data: the key is all of it. */
		wqe->wr.ex.invalidate_rkey = wr->ex.invalidate_rkey;
		return 0;
	case IB_WR_REG_MR:
		return npfnic_ib_fill_reg(reg_wr(wr), wqe);
	default:
		break;
	}
	switch (wr->opcode) {
	case IB_WR_RDMA_WRITE:
	case IB_WR_RDMA_WRITE_WITH_IMM:
	case IB_WR_RDMA_READ:
		wqe->wr.wr.rdma.remote_addr = rdma_wr(wr)->remote_addr;
		wqe->wr.wr.rdma.rkey = rdma_wr(wr)->rkey;
		wqe->iova = rdma_wr(wr)->remote_addr;
		break;
	case IB_WR_ATOMIC_CMP_AND_SWP:
	case IB_WR_ATOMIC_FETCH_AND_ADD:
		wqe->wr.wr.atomic.remote_addr = atomic_wr(wr)->remote_addr;
		wqe->wr.wr.atomic.compare_add = atomic_wr(wr)->compare_add;
		wqe->wr.wr.atomic.swap = atomic_wr(wr)->swap;
		wqe->wr.wr.atomic.rkey = atomic_wr(wr)->rkey;
		wqe->iova = atomic_wr(wr)->remote_addr;
		break;
	default:	/* SENDs */
		if (npfnic_ib_qp_ud(&qp->ibqp)) {
			const struct ib_ud_wr *ud = ud_wr(wr);
			const struct npfnic_ib_ah *ah;

			if (!ud->ah)
				return -EINVAL;
			ah = container_of(ud->ah, struct npfnic_ib_ah, ibah);
			if (!ah->kernel)
				return -EINVAL;
			wqe->wr.wr.ud.remote_qpn = ud->remote_qpn & 0xffffff;
			wqe->wr.wr.ud.remote_qkey = ud->remote_qkey;
			wqe->wr.wr.ud.pkey_index = ud->pkey_index;
			wqe->wr.wr.ud.av = ah->av;
		}
		break;
	}
	if (wr->send_flags & IB_SEND_INLINE) {
		for (i = 0; i < wr->num_sge; i++) {
			u32 len = wr->sg_list[i].length;

			if (length + len > qp->cap.max_inline_data)
				return -EINVAL;
			memcpy(wqe->dma.inline_data + length,
			       (const void *)(uintptr_t)wr->sg_list[i].addr, len);
			length += len;
		}
	} else {
		for (i = 0; i < wr->num_sge; i++) {
			wqe->dma.sge[i].addr = wr->sg_list[i].addr;
			wqe->dma.sge[i].length = wr->sg_list[i].length;
			wqe->dma.sge[i].lkey = wr->sg_list[i].lkey;
			length += wr->sg_list[i].length;
		}
		wqe->dma.num_sge = wr->num_sge;
	}
	if (length > NPFNIC_IB_MAX_MSG)
		return -EINVAL;
	wqe->dma.length = length;
	wqe->dma.resid = length;
	return 0;
}

/*
 * A kernel consumer's sends: the entries, the producer index, then
 * SQ_DOORBELL. Before RTS nothing may be posted (the device would hold
 * the entries until then; the verbs say it is an error); in the error
 * state entries are flushed, as ib_drain_qp expects.
 */
static int npfnic_ib_post_send_kernel(struct npfnic_ib_dev *dev, struct npfnic_ib_qp *qp,
				      const struct ib_send_wr *wr,
				      const struct ib_send_wr **bad_wr)
{
	struct npfnic_ib_queue *q = &qp->sq;
	u32 prod, start, cons;
	unsigned long flags;
	int err = 0;

	if (READ_ONCE(qp->attr.qp_state) < IB_QPS_RTS) {
		*bad_wr = wr;
		return -EINVAL;
	}
	spin_lock_irqsave(&qp->sq_lock, flags);
	start = q->buf->producer_index & (q->slots - 1);
	prod = start;
	cons = READ_ONCE(q->buf->consumer_index);
	for (; wr; wr = wr->next) {
		if (!npfnic_ib_queue_room(q, prod, &cons)) {
			err = -ENOMEM;
			break;
		}
		err = npfnic_ib_fill_send(dev, qp, wr, npfnic_ib_slot(q, prod));
		if (err)
			break;
		prod++;
	}
	if (prod != start)
		npfnic_ib_queue_publish(q, prod);
	spin_unlock_irqrestore(&qp->sq_lock, flags);
	if (prod != start)
		npfnic_ib_sq_doorbell(dev, qp->ibqp.qp_num);
	if (err)
		*bad_wr = wr;
	return err;
}

/*
 * librxe's doorbell: the send queue entries are in place and the producer
 * index stored, then POST_SEND comes with no work request; a user QP takes
 * no work request through here. A kernel consumer's go into its queue.
 */
int npfnic_ib_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			const struct ib_send_wr **bad_wr)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibqp->device);
	struct npfnic_ib_qp *qp = to_npfnic_ib_qp(ibqp);

	enum ib_qp_state state;

	if (qp->kernel)
		return npfnic_ib_post_send_kernel(dev, qp, wr, bad_wr);
	if (wr) {
		*bad_wr = wr;
		return -EOPNOTSUPP;
	}
	/*
	 * As rdma_rxe: a send queue that does not send yet refuses the
	 * doorbell (the entries stay posted for when it does).
	 */
	state = READ_ONCE(qp->attr.qp_state);
	if (state == IB_QPS_RESET || state == IB_QPS_INIT || state == IB_QPS_RTR)
		return -EINVAL;
	npfnic_ib_sq_doorbell(dev, ibqp->qp_num);
	return 0;
}

/*
 * User space posts receives itself; a kernel consumer through here. In
 * the error state the device flushes receive entries when its engine next
 * runs, which nothing else may make it do soon (ib_drain_rq waits for
 * that completion): SQ_DOORBELL makes it run.
 */
int npfnic_ib_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr)
{
	struct npfnic_ib_qp *qp = to_npfnic_ib_qp(ibqp);
	enum ib_qp_state state = READ_ONCE(qp->attr.qp_state);
	int err;

	/* A QP on an SRQ has no receive queue of its own. */
	if (!qp->kernel || ibqp->srq || state == IB_QPS_RESET) {
		*bad_wr = wr;
		return qp->kernel ? -EINVAL : -EOPNOTSUPP;
	}
	err = npfnic_ib_post_recv_queue(&qp->rq, &qp->rq_lock, qp->cap.max_recv_sge, wr,
					bad_wr);
	if (state == IB_QPS_ERR)
		npfnic_ib_sq_doorbell(to_npfnic_ib_dev(ibqp->device), ibqp->qp_num);
	return err;
}
