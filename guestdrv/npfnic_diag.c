// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic diagnostics: the knobs for tests and driver development. They are
 * no user interface, so they live in debugfs, one directory per bound
 * function, /sys/kernel/debug/npfnic/<BDF>/, created at probe and removed
 * with everything in it at remove:
 *  - diag_irq (write VEC): the device fires that MSI-X vector;
 *  - diag_dma (write "LEN SEED", read the verdict): the device writes its
 *    diagnostic pattern into a coherent buffer and the driver checks it;
 *  - diag_echo (write "ROUNDS [GAP_US]", read the rounds answered): DIAG_ECHO
 *    rounds of interrupt, work item and doorbell, the floor under the fault
 *    path (the faultcost experiment);
 *  - inject (write "WHAT [Q]"): bad input for the device or the driver,
 *    each with its defined outcome, reported in the kernel log: bad_desc,
 *    bad_tail and bad_ring for pair Q (npfnic_eth.c); with a translating
 *    rx_policy bad_pte (pair Q), bad_pasid, bad_prgi, prsp_storm and
 *    inv_unmapped (here); with backup, bad_backup_status, bad_backup_queue
 *    and bad_backup_desc corrupt the next backup entry as the driver reads
 *    it (npfnic_backup.c); with the RDMA engine, rdma_dereg_timeout makes
 *    the next DEREG_MR get no status, which kills the engine
 *    (npfnic_ib_cmd.c);
 *  - rnpf_rate_ppm (read, write a number up to 1000000): synthetic receive
 *    faults per million received frames under drop and backup
 *    (npfnic_iopt.c), or per million RDMA messages received into
 *    on-demand paging MRs (npfnic_ib_odp.c), from the module parameter of
 *    the same name at probe; a write takes effect at the next frame;
 *  - rdma_recv_fault (read, write "rnr", "drop" or "hold", with the RDMA
 *    device): what the device's RC responder does on a receive fault, an
 *    RNR NAK (the default), a silent drop the sender recovers from by its
 *    ACK timeout, or (interface 2.12) holding the request in the device
 *    until the page arrives, for peers whose RNR retry count is 0 (an
 *    older device reads back "rnr"); a write takes effect at the next fault;
 *  - odp_prefault_pages (read, write 1..NPFNIC_RDMA_MAX_PREFAULT, with on-demand
 *    paging on an interface 2.9 device): the pages one RDMA page fault asks
 *    for, the faulting one and those after it that its request touches
 *    (NPFNIC_REG_RDMA_PREFAULT), from the module parameter of the same name
 *    at probe (npfnic_ib_cmd.c); a write takes effect at the next fault;
 *  - fault_ahead (read, write a number up to 4096): under drop and backup,
 *    the cold RX slots backed after each resolved RX fault, beyond the one
 *    that faulted (npfnic_iopt.c), from the module parameter of the same
 *    name at probe; a write takes effect at the next fault.
 * Each write is parsed on its own, as a sysfs store would be: a value must
 * come in one write.
 *
 * Locking: diag_lock allows one diagnostic DMA at a time. Injections run
 * under rtnl (npfnic_inject), then take npf.lock, and the translation
 * engine's invalidation or response path (npfnic_xlat.c), as the paths
 * they imitate do. debugfs_remove_recursive at
 * remove waits for the writes in progress, so none outlives the device.
 */

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/iopoll.h>
#include <linux/module.h>
#include <linux/uaccess.h>

#include "npfnic.h"

/* An IOVA far beyond guest RAM, and a VA nothing ever maps (injections). */
#define NPFNIC_BAD_IOVA		BIT_ULL(45)
#define NPFNIC_UNMAPPED_VA	BIT_ULL(45)

/* ---- DIAG_ECHO: the interrupt + work item + doorbell floor ---- */

static int npfnic_diag_echo(struct npfnic *nic, unsigned int rounds, unsigned int gap_us)
{
	if (rounds < 1 || rounds > NPFNIC_DIAG_ECHO_MAX || gap_us > NPFNIC_DIAG_ECHO_GAP_MAX)
		return -EINVAL;
	if (nic->nvecs <= NPFNIC_DIAG_ECHO_VECTOR)
		return -EOPNOTSUPP;
	atomic_set(&nic->echo_round, 0);
	iowrite32(gap_us, nic->bar0 + NPFNIC_REG_DIAG_ECHO_GAP);
	iowrite32(rounds, nic->bar0 + NPFNIC_REG_DIAG_ECHO_CTRL);
	return 0;
}

irqreturn_t npfnic_echo_irq(struct npfnic *nic)
{
	queue_work(nic->wq, &nic->echo_work);
	return IRQ_HANDLED;
}

void npfnic_echo_work(struct work_struct *work)
{
	struct npfnic *nic = container_of(work, struct npfnic, echo_work);

	iowrite32(atomic_inc_return(&nic->echo_round), nic->bar0 + NPFNIC_REG_DIAG_ECHO);
}

/* ---- diagnostic DMA ---- */

/* Polls DIAG_DMA_STATUS until it is not BUSY; returns the last status. */
static u32 npfnic_diag_dma_wait(struct npfnic *nic, unsigned int timeout_ms)
{
	u32 v;

	read_poll_timeout(ioread32, v, v != NPFNIC_DIAG_DMA_STATUS_BUSY, 10000,
			  timeout_ms * USEC_PER_MSEC, false,
			  nic->bar0 + NPFNIC_REG_DIAG_DMA_STATUS);
	return v;
}

/*
 * Has the device write its diagnostic pattern of n bytes from seed into a
 * coherent buffer the driver allocated, and keeps the verdict for reading.
 * A DMA still running (one an earlier write gave up on) fails with EBUSY.
 * A DMA that does not finish in time is aborted; the buffer is freed only
 * once the device reports no byte will be written any more, else it is
 * leaked.
 */
static int npfnic_diag_dma(struct npfnic *nic, unsigned int n, unsigned int seed)
{
	struct device *dev = &nic->pdev->dev;
	unsigned int i, status;
	dma_addr_t addr;
	u8 *data;
	int err = 0;

	mutex_lock(&nic->diag_lock);
	/* The device ignores a start while busy: refuse it here instead. */
	if (ioread32(nic->bar0 + NPFNIC_REG_DIAG_DMA_STATUS) == NPFNIC_DIAG_DMA_STATUS_BUSY) {
		mutex_unlock(&nic->diag_lock);
		return -EBUSY;
	}
	data = dma_alloc_coherent(dev, n, &addr, GFP_KERNEL);
	if (!data) {
		mutex_unlock(&nic->diag_lock);
		return -ENOMEM;
	}
	memset(data, 0, n);
	iowrite32(lower_32_bits(addr), nic->bar0 + NPFNIC_REG_DIAG_DMA_ADDR_LO);
	iowrite32(upper_32_bits(addr), nic->bar0 + NPFNIC_REG_DIAG_DMA_ADDR_HI);
	iowrite32(n, nic->bar0 + NPFNIC_REG_DIAG_DMA_LEN);
	iowrite32(seed, nic->bar0 + NPFNIC_REG_DIAG_DMA_SEED);
	iowrite32(NPFNIC_DIAG_DMA_CTRL_START, nic->bar0 + NPFNIC_REG_DIAG_DMA_CTRL);
	status = npfnic_diag_dma_wait(nic, NPFNIC_QUIESCE_TIMEOUT_MS);
	if (status == NPFNIC_DIAG_DMA_STATUS_BUSY) {
		iowrite32(NPFNIC_DIAG_DMA_CTRL_ABORT, nic->bar0 + NPFNIC_REG_DIAG_DMA_CTRL);
		status = npfnic_diag_dma_wait(nic, NPFNIC_QUIESCE_TIMEOUT_MS);
		snprintf(nic->diag_result, sizeof(nic->diag_result), "timed out, status %u\n",
			 status);
		if (status == NPFNIC_DIAG_DMA_STATUS_BUSY || status == U32_MAX) {
			atomic64_inc(&nic->quiesce_timeouts);
			dev_warn(dev, "diagnostic DMA still busy after abort: its buffer is leaked\n");
			mutex_unlock(&nic->diag_lock);
			return -ETIMEDOUT;
		}
		err = -ETIMEDOUT;
		goto out;
	}
	if (status != NPFNIC_DIAG_DMA_STATUS_DONE) {
		snprintf(nic->diag_result, sizeof(nic->diag_result), "status %u\n", status);
		err = -EIO;
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (data[i] != npfnic_diag_pattern(seed, i)) {
			snprintf(nic->diag_result, sizeof(nic->diag_result),
				 "mismatch at %u\n", i);
			err = -EIO;
			goto out;
		}
	}
	snprintf(nic->diag_result, sizeof(nic->diag_result), "ok %u %#x\n", n, seed);
out:
	dma_free_coherent(dev, n, data, addr);
	mutex_unlock(&nic->diag_lock);
	return err;
}

/* ---- injection of bad translation input ---- */

static u64 npfnic_xlat_errors(struct npfnic *nic)
{
	u64 cooled = 0, xlat = 0;
	int q;

	for (q = 0; q < NPFNIC_PAIR_MAX; q++)
		npfnic_qp_npf_stats(&nic->qps[q], &cooled, &xlat);
	return xlat;
}

static u64 npfnic_tx_fault_errors(struct npfnic *nic)
{
	u64 n = 0;
	int q;

	for (q = 0; q < nic->nqps; q++)
		n += le32_to_cpu(READ_ONCE(npfnic_pair_status(nic, q)->tx_fault_errors));
	return n;
}

/* Waits up to 3 s for a translation error to show up. */
static void npfnic_wait_xlat_error(struct npfnic *nic, u64 rx, u64 tx)
{
	int t;

	for (t = 0; t < 150; t++) {
		if (npfnic_xlat_errors(nic) != rx || npfnic_tx_fault_errors(nic) != tx)
			return;
		msleep(20);
	}
}

/* One RX slot's PTE points outside guest RAM until a frame hits it. */
static int npfnic_inject_bad_pte(struct npfnic *nic, struct npfnic_qp *qp)
{
	struct npfnic_pair_status *st = npfnic_pair_status(nic, qp->idx);
	u32 i = (le32_to_cpu(READ_ONCE(st->rx_head)) +
		 le32_to_cpu(READ_ONCE(st->rx_head_offset))) & (qp->rx_size - 1);
	u64 va = npfnic_rx_va(qp->idx, i), rx = npfnic_xlat_errors(nic), tx;
	__le64 *pte, old;
	int err, err2;

	tx = npfnic_tx_fault_errors(nic);
	mutex_lock(&nic->npf.lock);
	pte = npfnic_pte(nic, va, true);
	if (!pte) {
		mutex_unlock(&nic->npf.lock);
		return -ENOMEM;
	}
	old = READ_ONCE(*pte);
	WRITE_ONCE(*pte, cpu_to_le64(NPFNIC_BAD_IOVA | NPFNIC_PTE_PRESENT | NPFNIC_PTE_WRITE));
	err = npfnic_xlat_invalidate(nic, 0, va, 1);
	if (!err)
		npfnic_wait_xlat_error(nic, rx, tx);
	WRITE_ONCE(*pte, old);
	err2 = npfnic_xlat_invalidate(nic, 0, va, 1);
	mutex_unlock(&nic->npf.lock);
	dev_info(&nic->pdev->dev,
		 "inject bad_pte: queue %d slot %u -> %#llx: %llu RX descriptor(s) completed with RXD_ERROR; restored (%d/%d)\n",
		 qp->idx, i, NPFNIC_BAD_IOVA, npfnic_xlat_errors(nic) - rx, err, err2);
	return err ? err : err2;
}

/*
 * PASID 0's root table outside guest RAM for a moment. With the interface
 * up only open and stop (rtnl, held here) change PASID 0's entry.
 */
static int npfnic_inject_bad_pasid(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;
	u64 rx = npfnic_xlat_errors(nic), tx = npfnic_tx_fault_errors(nic);
	__le64 old;
	int err, err2;

	mutex_lock(&nic->npf.lock);
	old = READ_ONCE(x->pasid_tbl[0].root);
	WRITE_ONCE(x->pasid_tbl[0].root, cpu_to_le64(NPFNIC_BAD_IOVA | NPFNIC_PASID_ENTRY_VALID));
	err = npfnic_xlat_invalidate(nic, 0, 0, 0);
	if (!err)
		npfnic_wait_xlat_error(nic, rx, tx);
	WRITE_ONCE(x->pasid_tbl[0].root, old);
	err2 = npfnic_xlat_invalidate(nic, 0, 0, 0);
	mutex_unlock(&nic->npf.lock);
	dev_info(&nic->pdev->dev,
		 "inject bad_pasid: root -> %#llx: %llu RX descriptor(s) with RXD_ERROR, %llu TX frame(s) dropped; restored (%d/%d)\n",
		 NPFNIC_BAD_IOVA, npfnic_xlat_errors(nic) - rx, npfnic_tx_fault_errors(nic) - tx,
		 err, err2);
	return err ? err : err2;
}

/* Waits up to 2 s for the device to consume every response posted. */
static bool npfnic_prsp_drained(struct npfnic *nic)
{
	struct npfnic_xlat *x = &nic->xlat;
	int t;

	for (t = 0; t < 100; t++) {
		if (le32_to_cpu(READ_ONCE(x->pri_st->prspq_head)) == x->prspq_tail)
			return true;
		msleep(20);
	}
	return false;
}

/*
 * Responses for PRG indexes beyond the 9-bit range, which no request can
 * carry: the device counts each as unexpected and ignores it. n == 0 fills
 * the whole queue.
 */
static int npfnic_inject_bogus_responses(struct npfnic *nic, const char *what, u32 n)
{
	struct npfnic_xlat *x = &nic->xlat;
	u32 before, posted = 0;
	bool drained;
	int err = 0;

	mutex_lock(&x->prsp_lock);
	before = le32_to_cpu(READ_ONCE(x->pri_st->unexpected));
	if (!n)
		n = NPFNIC_PRSPQ_SIZE -
		    (x->prspq_tail - le32_to_cpu(READ_ONCE(x->pri_st->prspq_head)));
	while (posted < n && !err) {
		err = npfnic_xlat_prsp_put(nic, NPFNIC_PRGI_MAX + (posted % NPFNIC_PRGI_MAX), 0,
					   false, NPFNIC_PRSP_SUCCESS);
		if (!err)
			posted++;
	}
	npfnic_xlat_prsp_ring(nic);
	drained = npfnic_prsp_drained(nic);
	/* The device publishes the count after the responses; give it a moment. */
	msleep(20);
	mutex_unlock(&x->prsp_lock);
	npfnic_xlat_pri_check(nic);
	dev_info(&nic->pdev->dev,
		 "inject %s: %u response(s) for PRG index >= %u: queue %s, unexpected %u -> %u, PRI error %u\n",
		 what, posted, NPFNIC_PRGI_MAX, drained ? "drained" : "not drained", before,
		 le32_to_cpu(READ_ONCE(x->pri_st->unexpected)),
		 le32_to_cpu(READ_ONCE(x->pri_st->error)));
	return err;
}

/* Called under rtnl with q a pair in use. */
int npfnic_npf_inject(struct npfnic *nic, const char *what, unsigned int q)
{
	static const char * const names[] = {
		"bad_pte", "bad_pasid", "bad_prgi", "prsp_storm", "inv_unmapped",
		"bad_backup_status", "bad_backup_queue", "bad_backup_desc",
	};
	int err, k;

	for (k = 0; k < ARRAY_SIZE(names); k++)
		if (!strcmp(what, names[k]))
			break;
	if (k == ARRAY_SIZE(names))
		return -EINVAL;
	if (!npfnic_translating(nic))
		return -EOPNOTSUPP;
	if (!nic->npf.active)
		return -ENETDOWN;
	switch (k) {
	case 0:
		return npfnic_inject_bad_pte(nic, &nic->qps[q]);
	case 1:
		return npfnic_inject_bad_pasid(nic);
	case 2:
		return npfnic_inject_bogus_responses(nic, what, 1);
	case 3:
		return npfnic_inject_bogus_responses(nic, what, 0);
	case 5:
	case 6:
	case 7:
		if (nic->policy != NPFNIC_POLICY_BACKUP)
			return -EOPNOTSUPP;
		WRITE_ONCE(nic->npf.inject_bad_backup, NPFNIC_BAD_BACKUP_STATUS + k - 5);
		return 0;
	default:
		err = npfnic_xlat_invalidate(nic, 0, NPFNIC_UNMAPPED_VA, 16);
		dev_info(&nic->pdev->dev,
			 "inject inv_unmapped: RANGE %#llx + 16 pages, WAIT: %s (%d)\n",
			 NPFNIC_UNMAPPED_VA, err ? "failed" : "completed", err);
		return err;
	}
}

/* ---- debugfs files ---- */

static struct dentry *npfnic_debugfs_root;

/*
 * Copies one write into buf as a string: like a sysfs store, each write is
 * parsed on its own.
 */
static int npfnic_diag_copy(char *buf, size_t size, const char __user *ubuf, size_t len)
{
	if (len >= size)
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = '\0';
	return 0;
}

/* Writing a vector number makes the device fire that MSI-X vector. */
static int npfnic_diag_irq_set(void *data, u64 vec)
{
	struct npfnic *nic = data;

	if (vec >= nic->nvecs)
		return -EINVAL;
	iowrite32(vec, nic->bar0 + NPFNIC_REG_DIAG_IRQ);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(npfnic_diag_irq_fops, NULL, npfnic_diag_irq_set, "%llu\n");

/* Writing "LEN SEED" runs a diagnostic DMA; reading shows the last verdict. */
static ssize_t npfnic_diag_dma_write(struct file *file, const char __user *ubuf, size_t len,
				     loff_t *ppos)
{
	struct npfnic *nic = file->private_data;
	unsigned int n, seed;
	char buf[32];
	int err;

	err = npfnic_diag_copy(buf, sizeof(buf), ubuf, len);
	if (err)
		return err;
	if (sscanf(buf, "%u %i", &n, &seed) != 2 || n == 0 || n > PAGE_SIZE * 4)
		return -EINVAL;
	err = npfnic_diag_dma(nic, n, seed);
	return err ? err : len;
}

static ssize_t npfnic_diag_dma_read(struct file *file, char __user *ubuf, size_t len,
				    loff_t *ppos)
{
	struct npfnic *nic = file->private_data;
	char buf[sizeof(nic->diag_result)];
	int n;

	mutex_lock(&nic->diag_lock);
	n = scnprintf(buf, sizeof(buf), "%s", nic->diag_result[0] ? nic->diag_result : "none\n");
	mutex_unlock(&nic->diag_lock);
	return simple_read_from_buffer(ubuf, len, ppos, buf, n);
}

static const struct file_operations npfnic_diag_dma_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.read = npfnic_diag_dma_read,
	.write = npfnic_diag_dma_write,
	.llseek = default_llseek,
};

/*
 * Writing "ROUNDS [GAP_US]" runs that many DIAG_ECHO rounds, the device
 * waiting GAP_US before each; reading shows the rounds answered in the run.
 */
static ssize_t npfnic_diag_echo_write(struct file *file, const char __user *ubuf, size_t len,
				      loff_t *ppos)
{
	unsigned int n, gap_us = 0;
	char buf[32];
	int err;

	err = npfnic_diag_copy(buf, sizeof(buf), ubuf, len);
	if (err)
		return err;
	if (sscanf(buf, "%u %u", &n, &gap_us) < 1)
		return -EINVAL;
	err = npfnic_diag_echo(file->private_data, n, gap_us);
	return err ? err : len;
}

static ssize_t npfnic_diag_echo_read(struct file *file, char __user *ubuf, size_t len,
				     loff_t *ppos)
{
	struct npfnic *nic = file->private_data;
	char buf[16];
	int n;

	n = scnprintf(buf, sizeof(buf), "%d\n", atomic_read(&nic->echo_round));
	return simple_read_from_buffer(ubuf, len, ppos, buf, n);
}

static const struct file_operations npfnic_diag_echo_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.read = npfnic_diag_echo_read,
	.write = npfnic_diag_echo_write,
	.llseek = default_llseek,
};

/* Writing "WHAT [Q]" feeds the device bad input (see the file comment). */
static ssize_t npfnic_inject_write(struct file *file, const char __user *ubuf, size_t len,
				   loff_t *ppos)
{
	unsigned int q = 0;
	char buf[48], what[24];
	int err;

	err = npfnic_diag_copy(buf, sizeof(buf), ubuf, len);
	if (err)
		return err;
	if (sscanf(buf, "%23s %u", what, &q) < 1)
		return -EINVAL;
	if (!strncmp(what, "rdma_", 5))
		err = npfnic_ib_inject(file->private_data, what);
	else
		err = npfnic_inject(file->private_data, what, q);
	return err ? err : len;
}

static const struct file_operations npfnic_inject_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.write = npfnic_inject_write,
	.llseek = no_llseek,
};

/* Synthetic rNPFs per million received frames; NAPI reads it at each poll. */
static int npfnic_rnpf_rate_get(void *data, u64 *ppm)
{
	struct npfnic *nic = data;

	*ppm = READ_ONCE(nic->rnpf_rate_ppm);
	return 0;
}

static int npfnic_rnpf_rate_set(void *data, u64 ppm)
{
	struct npfnic *nic = data;

	if (ppm > NPFNIC_PPM)
		return -EINVAL;
	WRITE_ONCE(nic->rnpf_rate_ppm, ppm);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(npfnic_rnpf_rate_fops, npfnic_rnpf_rate_get, npfnic_rnpf_rate_set,
			 "%llu\n");

/* Cold RX slots backed after each RX fault; the fault paths read it per fault. */
static int npfnic_fault_ahead_get(void *data, u64 *n)
{
	struct npfnic *nic = data;

	*n = READ_ONCE(nic->fault_ahead);
	return 0;
}

static int npfnic_fault_ahead_set(void *data, u64 n)
{
	struct npfnic *nic = data;

	if (n > NPFNIC_RING_SIZE_MAX)
		return -EINVAL;
	WRITE_ONCE(nic->fault_ahead, n);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(npfnic_fault_ahead_fops, npfnic_fault_ahead_get, npfnic_fault_ahead_set,
			 "%llu\n");

/* The RDMA responder's receive-fault policy (NPFNIC_REG_RDMA_RECV_FAULT). */
static const char * const npfnic_recv_fault_names[] = {
	[NPFNIC_RDMA_RECV_FAULT_RNR] = "rnr",
	[NPFNIC_RDMA_RECV_FAULT_DROP] = "drop",
	[NPFNIC_RDMA_RECV_FAULT_HOLD] = "hold",
};

static ssize_t npfnic_recv_fault_read(struct file *file, char __user *ubuf, size_t len,
				      loff_t *ppos)
{
	struct npfnic *nic = file->private_data;
	u32 v = ioread32(nic->bar0 + NPFNIC_REG_RDMA_RECV_FAULT);
	char buf[16];
	int n;

	n = scnprintf(buf, sizeof(buf), "%s\n", v < ARRAY_SIZE(npfnic_recv_fault_names) ?
		      npfnic_recv_fault_names[v] : "?");
	return simple_read_from_buffer(ubuf, len, ppos, buf, n);
}

static ssize_t npfnic_recv_fault_write(struct file *file, const char __user *ubuf, size_t len,
				       loff_t *ppos)
{
	struct npfnic *nic = file->private_data;
	char buf[16];
	int k;

	if (*ppos || len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = 0;
	k = sysfs_match_string(npfnic_recv_fault_names, buf);
	if (k < 0)
		return k;
	iowrite32(k, nic->bar0 + NPFNIC_REG_RDMA_RECV_FAULT);
	return len;
}

static const struct file_operations npfnic_recv_fault_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.read = npfnic_recv_fault_read,
	.write = npfnic_recv_fault_write,
	.llseek = default_llseek,
};

/* Whole-request prefault of RDMA page faults (NPFNIC_REG_RDMA_PREFAULT). */
static int npfnic_prefault_get(void *data, u64 *val)
{
	struct npfnic *nic = data;

	*val = ioread32(nic->bar0 + NPFNIC_REG_RDMA_PREFAULT);
	return 0;
}

static int npfnic_prefault_set(void *data, u64 val)
{
	struct npfnic *nic = data;

	if (val < 1 || val > NPFNIC_RDMA_MAX_PREFAULT)
		return -EINVAL;
	iowrite32(val, nic->bar0 + NPFNIC_REG_RDMA_PREFAULT);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(npfnic_prefault_fops, npfnic_prefault_get, npfnic_prefault_set, "%llu\n");

/* ---- probe / remove ---- */

/* The function's directory; debugfs failures are not the driver's failures. */
void npfnic_diag_probe(struct npfnic *nic)
{
	struct dentry *dir = debugfs_create_dir(pci_name(nic->pdev), npfnic_debugfs_root);

	nic->debugfs = dir;
	debugfs_create_file_unsafe("diag_irq", 0200, dir, nic, &npfnic_diag_irq_fops);
	debugfs_create_file("diag_dma", 0600, dir, nic, &npfnic_diag_dma_fops);
	debugfs_create_file("diag_echo", 0600, dir, nic, &npfnic_diag_echo_fops);
	debugfs_create_file("inject", 0200, dir, nic, &npfnic_inject_fops);
	debugfs_create_file_unsafe("rnpf_rate_ppm", 0600, dir, nic, &npfnic_rnpf_rate_fops);
	debugfs_create_file_unsafe("fault_ahead", 0600, dir, nic, &npfnic_fault_ahead_fops);
	if (nic->features & NPFNIC_FEAT_RDMA_ODP)
		debugfs_create_file("rdma_recv_fault", 0600, dir, nic, &npfnic_recv_fault_fops);
	/* RDMA_PREFAULT came with interface 2.9. */
	if ((nic->features & NPFNIC_FEAT_RDMA_ODP) && (nic->version & 0xffff) >= 9)
		debugfs_create_file_unsafe("odp_prefault_pages", 0600, dir, nic,
					   &npfnic_prefault_fops);
}

void npfnic_diag_remove(struct npfnic *nic)
{
	debugfs_remove_recursive(nic->debugfs);
	nic->debugfs = NULL;
}

void npfnic_diag_init(void)
{
	npfnic_debugfs_root = debugfs_create_dir(DRV_NAME, NULL);
}

void npfnic_diag_exit(void)
{
	debugfs_remove_recursive(npfnic_debugfs_root);
}
