// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic: driver for the npfnic virtual PCIe NIC (served to QEMU over
 * vfio-user). This part binds to the device, maps BAR0, enables bus
 * mastering and MSI-X with a counting handler per vector that dispatches to
 * the Ethernet datapath (npfnic_eth.c) or the page-fault machinery
 * (npfnic_npf.c), and offers sysfs files: diag_irq, diag_dma, diag_echo,
 * inject, cool and rx_policy.
 */

#include <linux/module.h>
#include <linux/io.h>
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/iopoll.h>

#include "npfnic.h"

/*
 * The quiesce handshake (interface 2.3): after an engine's disable or reset
 * write, its control register reads BUSY until the device ended every DMA
 * it had started; from the read that shows BUSY clear on, the device never
 * touches the engine's memory again. Returns true then. A BUSY that stays
 * set for NPFNIC_QUIESCE_TIMEOUT_MS (a device wedged on guest memory) or a
 * device that is gone (reads all ones) returns false: the caller must leak
 * that memory rather than free what the device may still write. A read
 * costs ~220 us under TCG, so the poll sleeps between reads.
 */
bool npfnic_wait_quiesced(struct npfnic *nic, void __iomem *ctrl, u32 busy, const char *what)
{
	u32 v;
	int err;

	err = read_poll_timeout(ioread32, v, !(v & busy) || v == U32_MAX, 1000,
				NPFNIC_QUIESCE_TIMEOUT_MS * USEC_PER_MSEC, false, ctrl);
	if (!err && v != U32_MAX)
		return true;
	atomic64_inc(&nic->quiesce_timeouts);
	dev_warn(&nic->pdev->dev, "%s still busy after %u ms (reads %#x): its memory is leaked\n",
		 what, NPFNIC_QUIESCE_TIMEOUT_MS, v);
	return false;
}

/*
 * Every vector counts its interrupts for the diagnostics, then does its job:
 * 0 misc, 1..4 queue pairs, then page requests, invalidation completions,
 * the backup ring and the DIAG_ECHO rounds.
 */
static irqreturn_t npfnic_irq(int irq, void *data)
{
	struct npfnic_vec *v = data;
	struct npfnic *nic = v->nic;
	int vec = v->vec;

	atomic_inc(&nic->irq_count[vec]);
	switch (vec) {
	case NPFNIC_MISC_VECTOR:
		return npfnic_misc_irq(irq, nic);
	case NPFNIC_PRQ_VECTOR:
		return npfnic_prq_irq(nic);
	case NPFNIC_INVQ_VECTOR:
		return npfnic_invq_irq(nic);
	case NPFNIC_BACKUP_VECTOR:
		return npfnic_backup_irq(nic);
	case NPFNIC_DIAG_ECHO_VECTOR:
		return npfnic_echo_irq(nic);
	default:
		if (vec - 1 < NPFNIC_QP_MAX)
			return npfnic_qp_irq(irq, &nic->qps[vec - 1]);
		return IRQ_HANDLED;
	}
}

/* Writing a vector number makes the device fire that MSI-X vector. */
static ssize_t diag_irq_store(struct device *dev, struct device_attribute *attr,
			      const char *buf, size_t len)
{
	struct npfnic *nic = dev_get_drvdata(dev);
	unsigned int vec;
	int err;

	err = kstrtouint(buf, 0, &vec);
	if (err)
		return err;
	if (vec >= nic->nvecs)
		return -EINVAL;
	iowrite32(vec, nic->bar0 + NPFNIC_REG_DIAG_IRQ);
	return len;
}
static DEVICE_ATTR_WO(diag_irq);

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
 * Writing "LEN SEED" has the device write its diagnostic pattern into a
 * coherent buffer the driver allocated; reading shows the last verdict. A
 * DMA still running (one an earlier write gave up on) makes the write fail
 * with EBUSY. A DMA that does not finish in time is aborted; the buffer is
 * freed only once the device reports no byte will be written any more,
 * else it is leaked.
 */
static ssize_t diag_dma_store(struct device *dev, struct device_attribute *attr,
			      const char *buf, size_t len)
{
	struct npfnic *nic = dev_get_drvdata(dev);
	unsigned int n, seed, i, status;
	dma_addr_t addr;
	u8 *data;
	int err = 0;

	if (sscanf(buf, "%u %i", &n, &seed) != 2 || n == 0 || n > PAGE_SIZE * 4)
		return -EINVAL;
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
	return err ? err : len;
}

static ssize_t diag_dma_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct npfnic *nic = dev_get_drvdata(dev);
	ssize_t ret;

	mutex_lock(&nic->diag_lock);
	ret = sysfs_emit(buf, "%s", nic->diag_result[0] ? nic->diag_result : "none\n");
	mutex_unlock(&nic->diag_lock);
	return ret;
}
static DEVICE_ATTR_RW(diag_dma);

/*
 * Writing "WHAT Q" feeds the device bad input: bad_desc, bad_tail and
 * bad_ring for queue pair Q; with a translating rx_policy also bad_pte
 * (for pair Q), bad_pasid, bad_prgi, prsp_storm and inv_unmapped (Q may
 * be left out for those); with backup, bad_backup_status, bad_backup_queue
 * and bad_backup_desc corrupt the next backup entry as the driver reads it.
 */
static ssize_t inject_store(struct device *dev, struct device_attribute *attr,
			    const char *buf, size_t len)
{
	struct npfnic *nic = dev_get_drvdata(dev);
	unsigned int q = 0;
	char what[24];
	int err;

	if (sscanf(buf, "%23s %u", what, &q) < 1)
		return -EINVAL;
	err = npfnic_inject(nic, what, q);
	return err ? err : len;
}
static DEVICE_ATTR_WO(inject);

/* Writing 1 unmaps and frees every RX buffer page (drop and backup policies). */
static ssize_t cool_store(struct device *dev, struct device_attribute *attr,
			  const char *buf, size_t len)
{
	struct npfnic *nic = dev_get_drvdata(dev);
	unsigned int v;
	int err;

	err = kstrtouint(buf, 0, &v);
	if (err)
		return err;
	if (v != 1)
		return -EINVAL;
	err = npfnic_cool(nic);
	return err ? err : len;
}
static DEVICE_ATTR_WO(cool);

static ssize_t rx_policy_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%s\n", npfnic_policy_name(dev_get_drvdata(dev)));
}
static DEVICE_ATTR_RO(rx_policy);

/*
 * Writing N runs N DIAG_ECHO rounds: interrupt, work item, doorbell (the
 * floor of the fault path); reading shows the rounds answered in the run.
 */
static ssize_t diag_echo_store(struct device *dev, struct device_attribute *attr,
			       const char *buf, size_t len)
{
	unsigned int n, gap_us = 0;
	int err;

	/* "ROUNDS [GAP_US]": the device waits GAP_US before each round. */
	if (sscanf(buf, "%u %u", &n, &gap_us) < 1)
		return -EINVAL;
	err = npfnic_diag_echo(dev_get_drvdata(dev), n, gap_us);
	return err ? err : len;
}

static ssize_t diag_echo_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct npfnic *nic = dev_get_drvdata(dev);

	return sysfs_emit(buf, "%d\n", atomic_read(&nic->echo_round));
}
static DEVICE_ATTR_RW(diag_echo);

static struct attribute *npfnic_attrs[] = {
	&dev_attr_diag_irq.attr,
	&dev_attr_diag_dma.attr,
	&dev_attr_inject.attr,
	&dev_attr_cool.attr,
	&dev_attr_rx_policy.attr,
	&dev_attr_diag_echo.attr,
	NULL,
};
ATTRIBUTE_GROUPS(npfnic);

static void npfnic_free_irqs(struct npfnic *nic, int n)
{
	while (--n >= 0)
		free_irq(pci_irq_vector(nic->pdev, n), &nic->vecs[n]);
}

static int npfnic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct npfnic *nic;
	u32 ident, version;
	int err, i;

	nic = devm_kzalloc(&pdev->dev, sizeof(*nic), GFP_KERNEL);
	if (!nic)
		return -ENOMEM;
	nic->pdev = pdev;
	mutex_init(&nic->diag_lock);
	for (i = 0; i < NPFNIC_QP_MAX; i++) {
		nic->qps[i].nic = nic;
		nic->qps[i].idx = i;
	}
	for (i = 0; i < NPFNIC_MSIX_VECTORS; i++) {
		nic->vecs[i].nic = nic;
		nic->vecs[i].vec = i;
	}

	err = pcim_enable_device(pdev);
	if (err)
		return dev_err_probe(&pdev->dev, err, "enable device\n");
	err = pcim_iomap_regions(pdev, BIT(NPFNIC_REG_BAR), DRV_NAME);
	if (err)
		return dev_err_probe(&pdev->dev, err, "map BAR0\n");
	nic->bar0 = pcim_iomap_table(pdev)[NPFNIC_REG_BAR];

	err = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (err)
		return dev_err_probe(&pdev->dev, err, "64-bit DMA\n");
	pci_set_master(pdev);

	/* BAR reads are fine at probe; the datapath never reads the BAR. */
	ident = ioread32(nic->bar0 + NPFNIC_REG_ID);
	version = ioread32(nic->bar0 + NPFNIC_REG_VERSION);
	if (ident != NPFNIC_MAGIC || (version >> 16) != (NPFNIC_INTERFACE_VERSION >> 16)) {
		dev_err(&pdev->dev, "ID %#x version %#x, want %#x version %#x\n",
			ident, version, NPFNIC_MAGIC, NPFNIC_INTERFACE_VERSION);
		return -ENODEV;
	}

	nic->nvecs = pci_alloc_irq_vectors(pdev, 2, NPFNIC_MSIX_VECTORS, PCI_IRQ_MSIX);
	if (nic->nvecs < 0)
		return dev_err_probe(&pdev->dev, nic->nvecs, "MSI-X vectors\n");
	pci_set_drvdata(pdev, nic);

	err = npfnic_npf_probe(nic);
	if (err)
		goto err_vectors;
	err = npfnic_eth_probe(nic);
	if (err)
		goto err_npf;

	for (i = 0; i < nic->nvecs; i++) {
		const char *name = devm_kasprintf(&pdev->dev, GFP_KERNEL, "npfnic-%s-%d",
						  pci_name(pdev), i);

		err = name ? request_irq(pci_irq_vector(pdev, i), npfnic_irq, 0, name,
					 &nic->vecs[i]) : -ENOMEM;
		if (err) {
			dev_err(&pdev->dev, "request IRQ for vector %d: %d\n", i, err);
			npfnic_free_irqs(nic, i);
			goto err_eth;
		}
	}

	err = register_netdev(nic->netdev);
	if (err)
		goto err_irqs;

	dev_info(&pdev->dev,
		 "npfnic bound: %s %pM, %d MSI-X vectors, ATS %s, PRI %s, PASID %s, rx_policy %s\n",
		 nic->netdev->name, nic->netdev->dev_addr, nic->nvecs,
		 nic->ats_pos ? "yes" : "no", nic->pri_pos ? "yes" : "no",
		 pci_find_ext_capability(pdev, PCI_EXT_CAP_ID_PASID) ? "yes" : "no",
		 npfnic_policy_name(nic));
	return 0;

err_irqs:
	npfnic_free_irqs(nic, nic->nvecs);
err_eth:
	npfnic_eth_remove(nic);
err_npf:
	npfnic_npf_remove(nic);
err_vectors:
	pci_free_irq_vectors(pdev);
	return err;
}

static void npfnic_remove(struct pci_dev *pdev)
{
	struct npfnic *nic = pci_get_drvdata(pdev);

	unregister_netdev(nic->netdev);
	npfnic_free_irqs(nic, nic->nvecs);
	npfnic_eth_remove(nic);
	npfnic_npf_remove(nic);
	pci_free_irq_vectors(pdev);
}

static const struct pci_device_id npfnic_ids[] = {
	{ PCI_DEVICE(NPFNIC_PCI_VENDOR_ID, NPFNIC_PCI_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, npfnic_ids);

static struct pci_driver npfnic_driver = {
	.name = DRV_NAME,
	.id_table = npfnic_ids,
	.probe = npfnic_probe,
	.remove = npfnic_remove,
	.dev_groups = npfnic_groups,
};
module_pci_driver(npfnic_driver);

MODULE_DESCRIPTION("npfnic virtual NIC with network page faults");
MODULE_LICENSE("GPL");
