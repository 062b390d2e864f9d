// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic: driver for the npfnic virtual PCIe NIC (served to QEMU over
 * vfio-user). This first version binds to the device, maps BAR0, enables
 * bus mastering and MSI-X, and reports the device's identity; the datapath
 * and the page-fault handling build on it.
 */

#include <linux/module.h>
#include <linux/pci.h>
#include <linux/io.h>

#include "npfnic_hw.h"

#define DRV_NAME "npfnic"

struct npfnic {
	struct pci_dev *pdev;
	void __iomem *bar0;
	int nvecs;
};

static int npfnic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct npfnic *nic;
	u32 ident;
	int err;

	nic = devm_kzalloc(&pdev->dev, sizeof(*nic), GFP_KERNEL);
	if (!nic)
		return -ENOMEM;
	nic->pdev = pdev;

	err = pcim_enable_device(pdev);
	if (err)
		return dev_err_probe(&pdev->dev, err, "enable device\n");
	err = pcim_iomap_regions(pdev, BIT(0), DRV_NAME);
	if (err)
		return dev_err_probe(&pdev->dev, err, "map BAR0\n");
	nic->bar0 = pcim_iomap_table(pdev)[0];

	err = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (err)
		return dev_err_probe(&pdev->dev, err, "64-bit DMA\n");
	pci_set_master(pdev);

	nic->nvecs = pci_alloc_irq_vectors(pdev, 1, NPFNIC_MSIX_VECTORS, PCI_IRQ_MSIX);
	if (nic->nvecs < 0)
		return dev_err_probe(&pdev->dev, nic->nvecs, "MSI-X vectors\n");

	/* One BAR read at probe is fine; the datapath never reads the BAR. */
	ident = ioread32(nic->bar0 + NPFNIC_REG_ID);
	if (ident != NPFNIC_MAGIC) {
		dev_err(&pdev->dev, "unexpected ID register %#x (want %#x)\n",
			ident, NPFNIC_MAGIC);
		pci_free_irq_vectors(pdev);
		return -ENODEV;
	}

	pci_set_drvdata(pdev, nic);
	dev_info(&pdev->dev, "npfnic bound: %d MSI-X vectors, ATS %s, PRI %s, PASID %s\n",
		 nic->nvecs,
		 pci_find_ext_capability(pdev, PCI_EXT_CAP_ID_ATS) ? "yes" : "no",
		 pci_find_ext_capability(pdev, PCI_EXT_CAP_ID_PRI) ? "yes" : "no",
		 pci_find_ext_capability(pdev, PCI_EXT_CAP_ID_PASID) ? "yes" : "no");
	return 0;
}

static void npfnic_remove(struct pci_dev *pdev)
{
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
};
module_pci_driver(npfnic_driver);

MODULE_DESCRIPTION("npfnic virtual NIC with network page faults");
MODULE_LICENSE("GPL");
