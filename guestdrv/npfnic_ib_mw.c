// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic RDMA: memory windows (FEATURES.RDMA_MW).
 *
 * A window is a device object known by its R_Key's index: ALLOC_MW creates
 * it bound to nothing, DEALLOC_MW destroys it. Everything between happens
 * in the send queue, which librxe writes: ibv_bind_mw (type 1) and a bind
 * work request (type 2) post BIND_MW entries that give the window its
 * region, range, access and a new key byte; LOCAL_INV and a SEND with
 * Invalidate unbind a type 2 window. The kernel's copy of the R_Key is
 * the first one only: librxe keeps the current one, so DEALLOC_MW names
 * the window by its index, which never changes.
 *
 * Window indices lie above the MRs' (NPFNIC_IB_MW_INDEX_BASE), so an
 * R_Key names one kind of object only.
 */

#include <linux/random.h>

#include "npfnic_ib.h"

int npfnic_ib_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibmw->device);
	struct npfnic_ib_mw *mw = to_npfnic_ib_mw(ibmw);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_ALLOC_MW };
	int id, err;

	if (!dev->hw.mw)
		return -EOPNOTSUPP;
	if (ibmw->type != IB_MW_TYPE_1 && ibmw->type != IB_MW_TYPE_2)
		return -EINVAL;
	id = ida_alloc_range(&dev->mw_ida, NPFNIC_IB_MW_INDEX_BASE,
			     NPFNIC_IB_MW_INDEX_BASE + NPFNIC_IB_MAX_MW - 1, GFP_KERNEL);
	if (id < 0)
		return id == -ENOSPC ? -ENOMEM : id;
	mw->index = id;
	ibmw->rkey = (u32)id << 8 | (get_random_u32() & 0xff);
	cmd.mw.rkey = ibmw->rkey;
	cmd.mw.pdn = to_npfnic_ib_pd(ibmw->pd)->pdn;
	cmd.mw.type = ibmw->type;
	err = npfnic_ib_cmd(dev, &cmd);
	if (err) {
		/* A window the device may hold keeps its index: never reused. */
		if (err != -ETIMEDOUT)
			ida_free(&dev->mw_ida, id);
		return err;
	}
	return 0;
}

int npfnic_ib_dealloc_mw(struct ib_mw *ibmw)
{
	struct npfnic_ib_dev *dev = to_npfnic_ib_dev(ibmw->device);
	struct npfnic_ib_mw *mw = to_npfnic_ib_mw(ibmw);
	struct npfnic_ib_cmd cmd = { .op = NPFNIC_IB_CMD_DEALLOC_MW };

	cmd.mw.rkey = mw->index << 8;
	if (npfnic_ib_cmd(dev, &cmd) != -ETIMEDOUT)
		ida_free(&dev->mw_ida, mw->index);
	return 0;
}
