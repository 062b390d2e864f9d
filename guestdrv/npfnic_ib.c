// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic RDMA personality: an ib_device over npfnic's netdev that speaks
 * rdma_rxe's user ABI, so Debian's stock librxe (ibverbs-providers) drives
 * it with no user-space code of ours: driver id RDMA_DRIVER_RXE, uverbs ABI
 * 2, the rxe queue buffers and create responses (npfnic_ib_queue.c). The
 * device reads the send and receive queues and writes the completion
 * queues itself; the verbs that need the kernel create, change and destroy
 * the objects through one device command each (npfnic_ib_cmd.c).
 *
 * This file holds the device: registration, the port (RoCEv2 over the
 * netdev: link layer Ethernet, state from the link, active MTU from the
 * netdev's MTU), the GID table, user contexts and PDs.
 *
 * rdma_rxe must not be loaded beside npfnic: rxe takes every device of its
 * driver id for its own. So the netdev is reported through ops.get_netdev,
 * never ib_device_set_netdev, and rxe's lookup by netdev never finds
 * npfnic. The core's RoCE GID management still finds it through
 * get_netdev, and fills the GID table from the netdev's addresses
 * (add_gid/del_gid keep a copy, which the device gets by command).
 *
 * The core's MAD layer opens every RoCE port with a PD (so get_dma_mr),
 * then a kernel CQ and QP1, the GSI QP, through which ib_cm and rdma_cm
 * send their MADs. With FEATURES.RDMA_KERNEL the driver serves kernel
 * consumers as librxe serves user space (npfnic_ib_queue.c): kernel CQs,
 * QPs (RC, UC, UD, and QP 1 as a UD QP), SRQs and address handles, their
 * work requests and completions, and each PD's DMA MR (npfnic_ib_mr.c).
 * Without it those creates fail with -EOPNOTSUPP, and ib_mad leaves the
 * port alone ("Couldn't create ib_mad CQ").
 *
 * Lifetime: the ib_device is registered at probe, after the netdev, and
 * unregistered at remove before the netdev goes. ib_unregister_device
 * disassociates live user contexts: the core zaps their mappings and
 * destroys their objects, so rmmod with ibverbs programs running works.
 *
 * Locking: gid_lock covers the GID table; the IDAs lock themselves; each
 * QP's lock its attributes, each SRQ's its limit changes; each context's
 * as_lock its address space. A kernel QP's sq_lock and rq_lock, a kernel
 * SRQ's rq_lock and a kernel CQ's lock are spinlocks taken with
 * interrupts off, the CQ's before the qps xarray's.
 */

#include <linux/etherdevice.h>
#include <linux/module.h>
#include <linux/rtnetlink.h>
#include <net/addrconf.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_mad.h>
#include <rdma/uverbs_ioctl.h>

#include "npfnic_ib.h"

/* RXE_UVERBS_ABI_VERSION, which librxe checks: rxe_verbs.h is not a uapi header. */
#define NPFNIC_IB_UVERBS_ABI	2

/* ---- device and port ---- */

static int npfnic_ib_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
				  struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibdev);
	struct pci_dev *pdev = dev->nic->pdev;

	if (udata->inlen || udata->outlen)
		return -EINVAL;
	memset(attr, 0, sizeof(*attr));
	/* major.minor.sub as librxe prints it: the interface version, 2.4.0. */
	attr->fw_ver = ((u64)(NPFNIC_INTERFACE_VERSION >> 16) << 32) |
		       ((u64)(NPFNIC_INTERFACE_VERSION & 0xffff) << 16);
	attr->sys_image_guid = ibdev->node_guid;
	attr->max_mr_size = NPFNIC_IB_MAX_MR_SIZE;
	attr->page_size_cap = PAGE_SIZE;
	attr->vendor_id = pdev->vendor;
	attr->vendor_part_id = pdev->device;
	attr->hw_ver = NPFNIC_INTERFACE_VERSION;
	attr->max_qp = NPFNIC_IB_MAX_QP;
	attr->max_qp_wr = NPFNIC_IB_MAX_QP_WR;
	attr->device_cap_flags = IB_DEVICE_RC_RNR_NAK_GEN | IB_DEVICE_PORT_ACTIVE_EVENT |
				 IB_DEVICE_SYS_IMAGE_GUID;
	/* On-demand paging: the device faults through PRI (npfnic_ib_odp.c). */
	if (dev->pri.possible) {
		attr->kernel_cap_flags = IBK_ON_DEMAND_PAGING;
		attr->odp_caps.general_caps = IB_ODP_SUPPORT;
		/*
		 * One MR over the whole address space (npfnic_ib_odp.c): the
		 * largest MR is then U64_MAX bytes, as mlx5 reports it.
		 */
		if (npfnic_ib_odp_implicit_possible(dev)) {
			attr->odp_caps.general_caps |= IB_ODP_SUPPORT_IMPLICIT;
			attr->max_mr_size = U64_MAX;
		}
		attr->odp_caps.per_transport_caps.rc_odp_caps = IB_ODP_SUPPORT_SEND |
			IB_ODP_SUPPORT_RECV | IB_ODP_SUPPORT_WRITE | IB_ODP_SUPPORT_READ;
		if (dev->hw.atomics)
			attr->odp_caps.per_transport_caps.rc_odp_caps |= IB_ODP_SUPPORT_ATOMIC;
		/* A receive into an SRQ's entry faults as into a QP's own. */
		if (dev->hw.srq)
			attr->odp_caps.per_transport_caps.rc_odp_caps |= IB_ODP_SUPPORT_SRQ_RECV;
		/*
		 * A UD send waits for its page as an RC send does; a UD
		 * receive that faults is lost (nothing sends it again), so
		 * receives are not offered.
		 */
		if (dev->hw.ud)
			attr->odp_caps.per_transport_caps.ud_odp_caps = IB_ODP_SUPPORT_SEND;
	}
	attr->max_send_sge = NPFNIC_IB_MAX_SGE;
	attr->max_recv_sge = NPFNIC_IB_MAX_SGE;
	attr->max_sge_rd = NPFNIC_IB_MAX_SGE;
	attr->max_cq = NPFNIC_IB_MAX_CQ;
	attr->max_cqe = NPFNIC_IB_MAX_CQE;
	attr->max_mr = NPFNIC_IB_MAX_MR;
	/* Shared receive queues (npfnic_ib_queue.c), not resizable. */
	if (dev->hw.srq) {
		attr->max_srq = NPFNIC_IB_MAX_SRQ;
		attr->max_srq_wr = NPFNIC_IB_MAX_QP_WR;
		attr->max_srq_sge = NPFNIC_IB_MAX_SGE;
	}
	if (dev->hw.ud)
		attr->max_ah = NPFNIC_IB_MAX_AH;
	/* Windows of both types, bound and invalidated through the send queue. */
	if (dev->hw.mw) {
		attr->device_cap_flags |= IB_DEVICE_MEM_WINDOW | IB_DEVICE_MEM_WINDOW_TYPE_2B;
		attr->max_mw = NPFNIC_IB_MAX_MW;
	}
	/* Fast registration: ib_alloc_mr, IB_WR_REG_MR, LOCAL_INV, SEND with Invalidate. */
	if (dev->hw.fast_reg) {
		attr->device_cap_flags |= IB_DEVICE_MEM_MGT_EXTENSIONS;
		attr->max_fast_reg_page_list_len = NPFNIC_RDMA_MAX_FAST_REG_PAGES;
	}
	attr->max_pd = NPFNIC_IB_MAX_PD;
	attr->max_qp_rd_atom = NPFNIC_IB_MAX_RD_ATOM;
	attr->max_qp_init_rd_atom = NPFNIC_IB_MAX_RD_ATOM;
	attr->max_res_rd_atom = NPFNIC_IB_MAX_QP * NPFNIC_IB_MAX_RD_ATOM;
	/* Atomic with respect to the device's other atomics, not the CPUs'. */
	attr->atomic_cap = dev->hw.atomics ? IB_ATOMIC_HCA : IB_ATOMIC_NONE;
	attr->max_pkeys = 1;
	attr->local_ca_ack_delay = 15;
	return 0;
}

static bool npfnic_ib_link_up(struct net_device *netdev)
{
	return netif_running(netdev) && netif_carrier_ok(netdev);
}

static int npfnic_ib_query_port(struct ib_device *ibdev, u32 port, struct ib_port_attr *attr)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibdev);
	struct net_device *netdev = dev->netdev;
	bool up = npfnic_ib_link_up(netdev);

	/* The core zeroed attr. */
	attr->state = up ? IB_PORT_ACTIVE : IB_PORT_DOWN;
	attr->phys_state = up ? IB_PORT_PHYS_STATE_LINK_UP : IB_PORT_PHYS_STATE_DISABLED;
	attr->max_mtu = IB_MTU_4096;
	attr->active_mtu = iboe_get_mtu(READ_ONCE(netdev->mtu));
	attr->gid_tbl_len = NPFNIC_IB_GID_TBL_LEN;
	attr->max_msg_sz = NPFNIC_IB_MAX_MSG;
	attr->pkey_tbl_len = 1;
	attr->max_vl_num = 1;
	attr->ip_gids = true;
	/* The device's port has no line rate: report the 25 Gb/s the RC experiments model. */
	attr->active_width = IB_WIDTH_1X;
	attr->active_speed = IB_SPEED_EDR;
	return 0;
}

static int npfnic_ib_port_immutable(struct ib_device *ibdev, u32 port,
				    struct ib_port_immutable *immutable)
{
	struct ib_port_attr attr;
	int err;

	immutable->core_cap_flags = RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
	err = ib_query_port(ibdev, port, &attr);
	if (err)
		return err;
	immutable->pkey_tbl_len = attr.pkey_tbl_len;
	immutable->gid_tbl_len = attr.gid_tbl_len;
	immutable->max_mad_size = IB_MGMT_MAD_SIZE;
	return 0;
}

static enum rdma_link_layer npfnic_ib_link_layer(struct ib_device *ibdev, u32 port)
{
	return IB_LINK_LAYER_ETHERNET;
}

/* The core's way to the netdev (with a reference), never the netdev's to us. */
static struct net_device *npfnic_ib_get_netdev(struct ib_device *ibdev, u32 port)
{
	struct net_device *netdev = to_npfnic_ib_dev(ibdev)->netdev;

	dev_hold(netdev);
	return netdev;
}

static int npfnic_ib_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	if (index)
		return -EINVAL;
	*pkey = IB_DEFAULT_PKEY_FULL;
	return 0;
}

static void npfnic_ib_fw_str(struct ib_device *ibdev, char *str)
{
	snprintf(str, IB_FW_VERSION_NAME_MAX, "%u.%u", NPFNIC_INTERFACE_VERSION >> 16,
		 NPFNIC_INTERFACE_VERSION & 0xffff);
}

/* ---- GIDs: the core's RoCE GID management fills them from the netdev ---- */

static int npfnic_ib_set_gid(struct npfnic_ib_dev *dev, const struct ib_gid_attr *attr, bool add)
{
	struct npfnic_ib_cmd cmd = {
		.op = add ? NPFNIC_IB_CMD_SET_GID : NPFNIC_IB_CMD_DEL_GID,
		.gid = { .index = attr->index, .type = attr->gid_type, .gid = attr->gid },
	};
	struct npfnic_ib_gid *g;
	int err;

	if (attr->index >= NPFNIC_IB_GID_TBL_LEN)
		return -EINVAL;
	mutex_lock(&dev->gid_lock);
	err = npfnic_ib_cmd(dev, &cmd);
	if (!err) {
		g = &dev->gids[attr->index];
		memset(g, 0, sizeof(*g));
		if (add) {
			g->valid = true;
			g->type = attr->gid_type;
			g->gid = attr->gid;
		}
	}
	mutex_unlock(&dev->gid_lock);
	return err;
}

static int npfnic_ib_add_gid(const struct ib_gid_attr *attr, void **context)
{
	return npfnic_ib_set_gid(to_npfnic_ib_dev(attr->device), attr, true);
}

static int npfnic_ib_del_gid(const struct ib_gid_attr *attr, void **context)
{
	return npfnic_ib_set_gid(to_npfnic_ib_dev(attr->device), attr, false);
}

/* ---- counters (rdma statistic) ---- */

/* The device's counters (QUERY_STATS), then the driver's of on-demand paging. */
static const char * const npfnic_ib_stat_names[NPFNIC_IB_NSTATS] = {
	NPFNIC_RDMA_STAT_NAMES,
	"odp_faults", "odp_fault_errors", "odp_pages_mapped", "odp_invalidations",
	"odp_pages_invalidated", "odp_bad_requests", "odp_rnpf_injected", "odp_rnpf_skipped",
	"odp_fault_p50_ns", "odp_fault_p99_ns",
};

static struct rdma_hw_stats *npfnic_ib_alloc_port_stats(struct ib_device *ibdev, u32 port)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibdev);

	return rdma_alloc_hw_stats_struct(dev->stat_descs, NPFNIC_IB_NSTATS,
					  RDMA_HW_STATS_DEFAULT_LIFESPAN);
}

static int npfnic_ib_get_hw_stats(struct ib_device *ibdev, struct rdma_hw_stats *stats, u32 port,
				  int index)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibdev);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_QUERY_STATS };
	int err;

	/* Without the engine they read 0; a command that failed leaves them as they were. */
	cmd.stats.values = stats->value;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err)
		return err;
	npfnic_ib_odp_get_stats(dev, stats->value + NPFNIC_RDMA_STATS);
	return NPFNIC_IB_NSTATS;
}

/* ---- user contexts and PDs ---- */

static int npfnic_ib_alloc_ucontext(struct ib_ucontext *ibuc, struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibuc->device);
	struct npfnic_ib_ucontext *uc = to_npfnic_ib_uc(ibuc);
	int id, err;

	id = ida_alloc_range(&dev->ctx_ida, NPFNIC_IB_PASID_BASE,
			     NPFNIC_IB_PASID_BASE + NPFNIC_IB_MAX_CTX - 1, GFP_KERNEL);
	if (id < 0)
		return id == -ENOSPC ? -ENOMEM : id;
	uc->pasid = id;
	err = npfnic_ib_as_init(dev, uc);
	if (err)
		ida_free(&dev->ctx_ida, id);
	return err;
}

static void npfnic_ib_dealloc_ucontext(struct ib_ucontext *ibuc)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibuc->device);
	struct npfnic_ib_ucontext *uc = to_npfnic_ib_uc(ibuc);

	npfnic_ib_as_destroy(dev, uc);
	ida_free(&dev->ctx_ida, uc->pasid);
}

/*
 * The device is going away with the context still open. The core already
 * zapped the context's mappings and destroyed its objects (each through
 * its destroy command): nothing is left for the driver to stop.
 */
static void npfnic_ib_disassociate_ucontext(struct ib_ucontext *ibuc)
{
}

static int npfnic_ib_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibpd->device);
	int id;

	id = ida_alloc_range(&dev->pd_ida, 1, NPFNIC_IB_MAX_PD, GFP_KERNEL);
	if (id < 0)
		return id == -ENOSPC ? -ENOMEM : id;
	to_npfnic_ib_pd(ibpd)->pdn = id;
	return 0;
}

static int npfnic_ib_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	ida_free(&to_npfnic_ib_dev(ibpd->device)->pd_ida, to_npfnic_ib_pd(ibpd)->pdn);
	return 0;
}

static const struct ib_device_ops npfnic_ib_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_RXE,
	.uverbs_abi_ver = NPFNIC_IB_UVERBS_ABI,

	.alloc_mw = npfnic_ib_alloc_mw,
	.alloc_pd = npfnic_ib_alloc_pd,
	.alloc_ucontext = npfnic_ib_alloc_ucontext,
	.create_ah = npfnic_ib_create_ah,
	.create_user_ah = npfnic_ib_create_ah,
	.create_cq = npfnic_ib_create_cq,
	.create_qp = npfnic_ib_create_qp,
	.create_srq = npfnic_ib_create_srq,
	.add_gid = npfnic_ib_add_gid,
	.alloc_hw_port_stats = npfnic_ib_alloc_port_stats,
	.dealloc_mw = npfnic_ib_dealloc_mw,
	.dealloc_pd = npfnic_ib_dealloc_pd,
	.dealloc_ucontext = npfnic_ib_dealloc_ucontext,
	.del_gid = npfnic_ib_del_gid,
	.dereg_mr = npfnic_ib_dereg_mr,
	.fill_res_mr_entry = npfnic_ib_fill_res_mr_entry,
	.fill_stat_mr_entry = npfnic_ib_fill_stat_mr_entry,
	.alloc_mr = npfnic_ib_alloc_mr,
	.map_mr_sg = npfnic_ib_map_mr_sg,
	.destroy_ah = npfnic_ib_destroy_ah,
	.destroy_cq = npfnic_ib_destroy_cq,
	.destroy_qp = npfnic_ib_destroy_qp,
	.destroy_srq = npfnic_ib_destroy_srq,
	.disassociate_ucontext = npfnic_ib_disassociate_ucontext,
	.get_dev_fw_str = npfnic_ib_fw_str,
	.get_dma_mr = npfnic_ib_get_dma_mr,
	.get_hw_stats = npfnic_ib_get_hw_stats,
	.get_link_layer = npfnic_ib_link_layer,
	.get_netdev = npfnic_ib_get_netdev,
	.get_port_immutable = npfnic_ib_port_immutable,
	.mmap = npfnic_ib_mmap,
	.mmap_free = npfnic_ib_mmap_free,
	.modify_qp = npfnic_ib_modify_qp,
	.modify_srq = npfnic_ib_modify_srq,
	.poll_cq = npfnic_ib_poll_cq,
	.post_recv = npfnic_ib_post_recv,
	.post_send = npfnic_ib_post_send,
	.post_srq_recv = npfnic_ib_post_srq_recv,
	.query_device = npfnic_ib_query_device,
	.query_pkey = npfnic_ib_query_pkey,
	.query_port = npfnic_ib_query_port,
	.query_qp = npfnic_ib_query_qp,
	.query_srq = npfnic_ib_query_srq,
	.reg_user_mr = npfnic_ib_reg_user_mr,
	.req_notify_cq = npfnic_ib_req_notify_cq,
	.resize_cq = npfnic_ib_resize_cq,

	INIT_RDMA_OBJ_SIZE(ib_ah, npfnic_ib_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, npfnic_ib_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_mw, npfnic_ib_mw, ibmw),
	INIT_RDMA_OBJ_SIZE(ib_pd, npfnic_ib_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_qp, npfnic_ib_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_srq, npfnic_ib_srq, ibsrq),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, npfnic_ib_ucontext, ibuc),
};

/* ---- port events from the netdev ---- */

static void npfnic_ib_port_event(struct npfnic_ib_dev *dev, enum ib_event_type type)
{
	struct ib_event ev = {
		.device = &dev->ibdev,
		.event = type,
		.element.port_num = 1,
	};

	ib_dispatch_event(&ev);
}

static int npfnic_ib_netdev_event(struct notifier_block *nb, unsigned long event, void *ptr)
{
	struct npfnic_ib_dev *dev = container_of(nb, struct npfnic_ib_dev, nb);
	struct net_device *netdev = netdev_notifier_info_to_dev(ptr);

	if (netdev != dev->netdev)
		return NOTIFY_DONE;
	switch (event) {
	case NETDEV_UP:
	case NETDEV_DOWN:
	case NETDEV_CHANGE:
		npfnic_ib_port_event(dev, npfnic_ib_link_up(netdev) ? IB_EVENT_PORT_ACTIVE :
								       IB_EVENT_PORT_ERR);
		break;
	}
	return NOTIFY_DONE;
}

/* ---- registration ---- */

/* Registers the ib_device over the netdev, which must be registered already. */
int npfnic_ib_probe(struct npfnic *nic)
{
	struct pci_dev *pdev = nic->pdev;
	struct npfnic_ib_dev *dev;
	struct ib_device *ibdev;
	int err, k;

	dev = ib_alloc_device(npfnic_ib_dev, ibdev);
	if (!dev)
		return -ENOMEM;
	dev->nic = nic;
	dev->netdev = nic->netdev;
	mutex_init(&dev->gid_lock);
	ida_init(&dev->ctx_ida);
	ida_init(&dev->pd_ida);
	ida_init(&dev->cq_ida);
	ida_init(&dev->qp_ida);
	ida_init(&dev->srq_ida);
	ida_init(&dev->mw_ida);
	ida_init(&dev->mr_ida);
	xa_init_flags(&dev->cqs, XA_FLAGS_LOCK_IRQ);
	xa_init_flags(&dev->qps, XA_FLAGS_LOCK_IRQ);
	xa_init_flags(&dev->srqs, XA_FLAGS_LOCK_IRQ);
	for (k = 0; k < NPFNIC_IB_NSTATS; k++)
		dev->stat_descs[k].name = npfnic_ib_stat_names[k];

	ibdev = &dev->ibdev;
	ibdev->node_type = RDMA_NODE_IB_CA;
	ibdev->phys_port_cnt = 1;
	ibdev->num_comp_vectors = 1;
	ibdev->dev.parent = &pdev->dev;
	addrconf_addr_eui48((u8 *)&ibdev->node_guid, nic->netdev->dev_addr);
	ibdev->uverbs_cmd_mask |= BIT_ULL(IB_USER_VERBS_CMD_POST_SEND) |
				  BIT_ULL(IB_USER_VERBS_CMD_REQ_NOTIFY_CQ);
	strscpy(ibdev->node_desc, "npfnic", sizeof(ibdev->node_desc));
	ib_set_device_ops(ibdev, &npfnic_ib_ops);

	/* Before registration: the core adds the GIDs during it, by command. */
	nic->ib = dev;
	err = npfnic_ib_hw_init(dev);
	if (err)
		goto err_dealloc;
	npfnic_ib_ats_init(dev);
	err = npfnic_ib_odp_init(dev);
	if (err)
		goto err_hw;
	err = ib_register_device(ibdev, "npfnic%d", &pdev->dev);
	if (err) {
		dev_err(&pdev->dev, "register the RDMA device: %d\n", err);
		goto err_hw;
	}
	dev->nb.notifier_call = npfnic_ib_netdev_event;
	err = register_netdevice_notifier(&dev->nb);
	if (err) {
		ib_unregister_device(ibdev);
		goto err_hw;
	}
	dev_info(&pdev->dev, "RDMA device %s over %s (rxe user ABI)\n", dev_name(&ibdev->dev),
		 nic->netdev->name);
	return 0;

err_hw:
	npfnic_ib_hw_fini(dev);
	npfnic_ib_ats_fini(dev);
	npfnic_ib_odp_fini(dev);
err_dealloc:
	nic->ib = NULL;
	ib_dealloc_device(ibdev);
	return err;
}

/* Unregisters the ib_device (disassociating live contexts) before the netdev goes. */
void npfnic_ib_remove(struct npfnic *nic)
{
	struct npfnic_ib_dev *dev = nic->ib;

	if (!dev)
		return;
	unregister_netdevice_notifier(&dev->nb);
	ib_unregister_device(&dev->ibdev);
	/* Only objects the device did not release (and that were leaked) remain. */
	if (!ida_is_empty(&dev->mr_ida))
		dev_warn(&nic->pdev->dev, "RDMA device removed with MRs leaked\n");
	ida_destroy(&dev->ctx_ida);
	ida_destroy(&dev->pd_ida);
	ida_destroy(&dev->cq_ida);
	ida_destroy(&dev->qp_ida);
	ida_destroy(&dev->srq_ida);
	ida_destroy(&dev->mw_ida);
	ida_destroy(&dev->mr_ida);
	/* The engine first: it stops using the translations, then they go. */
	npfnic_ib_hw_fini(dev);
	npfnic_ib_ats_fini(dev);
	npfnic_ib_odp_fini(dev);
	WRITE_ONCE(nic->ib, NULL);
	ib_dealloc_device(&dev->ibdev);
}
