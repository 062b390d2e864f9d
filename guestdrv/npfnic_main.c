// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic: driver for the npfnic virtual PCIe NIC (served to QEMU over
 * vfio-user). This part binds to the device, maps BAR0, enables bus
 * mastering and MSI-X with a counting handler per vector that dispatches to
 * the Ethernet side (npfnic_eth.c, npfnic_eth_txrx.c), the translation
 * engine (npfnic_xlat.c), the page-fault machinery (npfnic_npf.c and the
 * files it names) or the diagnostics (npfnic_diag.c).
 * Once the netdev is registered, the RDMA device (npfnic_ib.c) goes on top
 * of it, and comes off first at remove.
 *
 * The PCI function has two sysfs files, both user knobs in the way ethtool
 * settings are: rx_policy (read) says which RX fault policy the bound
 * driver runs, since the kernel ignores an unknown module parameter and a
 * user must be able to tell; cool (write 1) takes every RX buffer page
 * away, so the next frames fault as on a cold start: the cold-ring and
 * fault-cost experiments are built on it, and a user measuring their own
 * workload flips it the same way. Knobs for tests and driver development
 * (diag_irq, diag_dma, diag_echo, inject, rnpf_rate_ppm) are in debugfs
 * instead, under npfnic/<BDF>/, which the diagnostics create at probe and
 * remove at remove, and the module creates and removes npfnic/ itself.
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
 * the backup ring, the DIAG_ECHO rounds and the RDMA events.
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
		return npfnic_xlat_prq_irq(nic);
	case NPFNIC_INVQ_VECTOR:
		return npfnic_xlat_invq_irq(nic);
	case NPFNIC_BACKUP_VECTOR:
		return npfnic_backup_irq(nic);
	case NPFNIC_DIAG_ECHO_VECTOR:
		return npfnic_echo_irq(nic);
	case NPFNIC_RDMA_VECTOR:
		return npfnic_ib_irq(nic);
	default:
		if (vec - 1 < NPFNIC_PAIR_MAX)
			return npfnic_qp_irq(irq, &nic->qps[vec - 1]);
		return IRQ_HANDLED;
	}
}

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

static struct attribute *npfnic_attrs[] = {
	&dev_attr_cool.attr,
	&dev_attr_rx_policy.attr,
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
	for (i = 0; i < NPFNIC_PAIR_MAX; i++) {
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
	nic->version = version;

	nic->nvecs = pci_alloc_irq_vectors(pdev, 2, NPFNIC_MSIX_VECTORS, PCI_IRQ_MSIX);
	if (nic->nvecs < 0)
		return dev_err_probe(&pdev->dev, nic->nvecs, "MSI-X vectors\n");
	pci_set_drvdata(pdev, nic);

	err = npfnic_npf_probe(nic);
	if (err)
		goto err_vectors;
	err = npfnic_xlat_probe(nic);
	if (err)
		goto err_npf;
	err = npfnic_eth_probe(nic);
	if (err)
		goto err_xlat;

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

	/* RDMA is a second personality: the NIC works on without it. */
	err = npfnic_ib_probe(nic);
	if (err)
		dev_warn(&pdev->dev, "no RDMA device: %d\n", err);
	npfnic_diag_probe(nic);
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
err_xlat:
	npfnic_xlat_remove(nic);
err_npf:
	npfnic_npf_remove(nic);
err_vectors:
	pci_free_irq_vectors(pdev);
	return err;
}

static void npfnic_remove(struct pci_dev *pdev)
{
	struct npfnic *nic = pci_get_drvdata(pdev);

	/* No test knob may reach a device going away: writes in progress end first. */
	npfnic_diag_remove(nic);
	/* Disassociates live RDMA contexts; the netdev it stands on goes next. */
	npfnic_ib_remove(nic);
	unregister_netdev(nic->netdev);
	npfnic_free_irqs(nic, nic->nvecs);
	npfnic_eth_remove(nic);
	npfnic_xlat_remove(nic);
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

static int __init npfnic_init(void)
{
	int err;

	npfnic_diag_init();
	err = pci_register_driver(&npfnic_driver);
	if (err)
		npfnic_diag_exit();
	return err;
}
module_init(npfnic_init);

static void __exit npfnic_exit(void)
{
	pci_unregister_driver(&npfnic_driver);
	npfnic_diag_exit();
}
module_exit(npfnic_exit);

MODULE_DESCRIPTION("npfnic virtual NIC with network page faults");
MODULE_LICENSE("GPL");
