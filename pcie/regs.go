package pcie

// Register offsets and bit definitions from the PCI Local Bus Specification
// 3.0 and the PCI Express Base Specification (5.0/6.0). Only what this device
// exposes is listed; names follow Linux's include/uapi/linux/pci_regs.h so a
// reader can cross-check them quickly.

// Size is the size of the PCI Express configuration space of one function.
const Size = 4096

// Type-0 header offsets.
const (
	OffVendorID      = 0x00
	OffDeviceID      = 0x02
	OffCommand       = 0x04
	OffStatus        = 0x06
	OffRevision      = 0x08
	OffClassProg     = 0x09
	OffCacheLineSize = 0x0c
	OffLatencyTimer  = 0x0d
	OffHeaderType    = 0x0e
	OffBIST          = 0x0f
	OffBAR0          = 0x10
	OffSubsysVendor  = 0x2c
	OffSubsysID      = 0x2e
	OffROMAddress    = 0x30
	OffCapPtr        = 0x34
	OffInterruptLine = 0x3c
	OffInterruptPin  = 0x3d

	// HeaderEnd is where the first capability may start.
	HeaderEnd = 0x40
	// ExtCapStart is the offset of the first extended capability header.
	ExtCapStart = 0x100
)

// Command register bits.
const (
	CmdIO          = 1 << 0
	CmdMemory      = 1 << 1
	CmdBusMaster   = 1 << 2
	CmdParity      = 1 << 6
	CmdSERR        = 1 << 8
	CmdIntxDisable = 1 << 10
)

// Status register bits.
const (
	StatusIntx           = 1 << 3
	StatusCapList        = 1 << 4
	StatusMasterParity   = 1 << 8
	StatusSigTargetAbort = 1 << 11
	StatusRecTargetAbort = 1 << 12
	StatusRecMasterAbort = 1 << 13
	StatusSigSystemError = 1 << 14
	StatusDetectedParity = 1 << 15

	// statusRW1C are the error bits software clears by writing 1.
	statusRW1C = StatusMasterParity | StatusSigTargetAbort | StatusRecTargetAbort |
		StatusRecMasterAbort | StatusSigSystemError | StatusDetectedParity
)

// BAR low bits.
const (
	barMemType64    = 0x4
	barPrefetchable = 0x8
)

// Capability IDs (standard list).
const (
	CapIDPM    = 0x01
	CapIDMSIX  = 0x11
	CapIDPCIe  = 0x10
	capPMSize  = 8
	capMSIXLen = 12
	capPCIeLen = 0x3c
)

// Extended capability IDs.
const (
	ExtCapIDATS   = 0x000f
	ExtCapIDPRI   = 0x0013
	ExtCapIDPASID = 0x001b
	extATSLen     = 8
	extPRILen     = 16
	extPASIDLen   = 8
)

// Power management capability (offsets from the capability start).
const (
	pmPMC            = 0x02
	pmCSR            = 0x04
	pmCSRD3hot       = 0x3
	pmCSRStateMask   = 0x3
	pmCSRNoSoftReset = 1 << 3
)

// MSI-X capability (offsets from the capability start).
const (
	msixControl = 0x02
	msixTable   = 0x04
	msixPBA     = 0x08

	MSIXCtrlEnable       = 1 << 15
	MSIXCtrlFunctionMask = 1 << 14
	msixCtrlSizeMask     = 0x7ff
	// MSIXEntrySize is the size of one MSI-X table entry.
	MSIXEntrySize = 16
	// MSIXMaxVectors is the architectural limit of MSI-X vectors.
	MSIXMaxVectors = 2048
)

// PCI Express capability (offsets from the capability start).
const (
	expFlags   = 0x02
	expDevCap  = 0x04
	expDevCtl  = 0x08
	expDevSta  = 0x0a
	expLnkCap  = 0x0c
	expLnkCtl  = 0x10
	expLnkSta  = 0x12
	expDevCap2 = 0x24
	expDevCtl2 = 0x28
	expLnkCap2 = 0x2c
	expLnkCtl2 = 0x30

	expFlagsVersion2   = 0x2
	expTypeEndpoint    = 0x0 << 4
	expDevCapRBER      = 1 << 15
	expDevCtlRelaxed   = 1 << 4
	expDevCtlNoSnoop   = 1 << 11
	expDevCtlMRRS512   = 2 << 12
	expDevCtlBCRFLR    = 1 << 15
	expDevStaRW1C      = 0x000f
	expLnkSpeed2_5GT   = 0x1
	expLnkWidthX1      = 0x1 << 4
	expDevCap2CTDis    = 1 << 4
	expLnkCap2Speed2_5 = 1 << 1
)

// ATS extended capability (offsets from the capability start).
const (
	atsCap  = 0x04
	atsCtrl = 0x06

	atsCapQueueDepthMask = 0x1f
	atsCapPageAligned    = 1 << 5
	atsCtrlSTUMask       = 0x1f
	ATSCtrlEnable        = 1 << 15
)

// PRI extended capability (offsets from the capability start).
const (
	priCtrl     = 0x04
	priStatus   = 0x06
	priCapacity = 0x08
	priAlloc    = 0x0c

	PRICtrlEnable = 1 << 0
	PRICtrlReset  = 1 << 1

	PRIStatusRF          = 1 << 0 // Response Failure, RW1C
	PRIStatusUPRGI       = 1 << 1 // Unexpected Page Request Group Index, RW1C
	PRIStatusStopped     = 1 << 8
	PRIStatusPASIDNeeded = 1 << 15 // PRG Response PASID Required
)

// PASID extended capability (offsets from the capability start).
const (
	pasidCap  = 0x04
	pasidCtrl = 0x06

	PASIDCapExec      = 1 << 1
	PASIDCapPriv      = 1 << 2
	pasidCapWidthShft = 8
	PASIDCtrlEnable   = 1 << 0
	PASIDCtrlExec     = 1 << 1
	PASIDCtrlPriv     = 1 << 2
)
