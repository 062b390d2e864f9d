// Package hw is the single definition of the npfnic hardware interface as
// the guest driver sees it: PCI identity, BAR layout, register offsets and
// values, and the diagnostic DMA pattern. The C header the Linux driver
// includes (guestdrv/npfnic_hw.h) is generated from the tables in this
// package by `go generate ./vdevice/hw`; a test fails when it is stale.
//
// To add a register: add its constant below and a row to Registers (and, for
// named values, to Values); then run go generate.
package hw

//go:generate go run ./internal/genheader -o ../../guestdrv/npfnic_hw.h

// PCI identity.
const (
	VendorID       = 0x4e50 // "NP"
	DeviceID       = 0x4e46 // "NF"
	Revision       = 1
	ClassCode      = 0x020000 // network controller, Ethernet
	SubsysVendorID = VendorID
	SubsysID       = 0x0001
)

// BAR layout. BAR0 is the register file; the MSI-X table and PBA live in
// their own BAR so the register file never overlaps what QEMU emulates.
const (
	RegBAR          = 0 // 64-bit, non-prefetchable
	RegBARSize      = 64 << 10
	MSIXBAR         = 2 // 64-bit, non-prefetchable
	MSIXBARSize     = 4096
	MSIXTableOffset = 0x000
	MSIXPBAOffset   = 0x800
	// MSIXVectors is the number of MSI-X vectors the function exposes.
	MSIXVectors = 8
)

// Identification values.
const (
	// Magic is the value of REG_ID ("NFPN" in little-endian bytes).
	Magic = 0x4e50464e
	// InterfaceVersion is REG_VERSION: major in bits 31:16, minor in 15:0.
	// Bump the major for incompatible register changes.
	InterfaceVersion = 1<<16 | 0
)

// Register offsets in BAR0. All registers are 32 bits wide.
const (
	RegID            = 0x0000 // RO: Magic
	RegVersion       = 0x0004 // RO: InterfaceVersion
	RegScratch       = 0x0008 // RW: reads back the last value written
	RegDiagIRQ       = 0x0010 // WO: writing N fires MSI-X vector N
	RegDiagDMAAddrLo = 0x0020 // RW: DMA target IOVA, bits 31:0
	RegDiagDMAAddrHi = 0x0024 // RW: DMA target IOVA, bits 63:32
	RegDiagDMALen    = 0x0028 // RW: byte count (1..DiagDMAMaxLen)
	RegDiagDMASeed   = 0x002c // RW: pattern seed
	RegDiagDMACtrl   = 0x0030 // WO: write DiagDMACtrlStart to start
	RegDiagDMAStatus = 0x0034 // RO: DiagDMAStatus*
)

// Register values.
const (
	DiagDMACtrlStart = 1

	DiagDMAStatusIdle     = 0 // never started since reset
	DiagDMAStatusBusy     = 1 // running
	DiagDMAStatusDone     = 2 // all bytes written
	DiagDMAStatusFault    = 3 // target not inside guest memory (no byte outside it was written)
	DiagDMAStatusBadLen   = 4 // LEN is 0 or above DiagDMAMaxLen
	DiagDMAStatusNoMaster = 5 // bus mastering disabled in the Command register

	// DiagDMAMaxLen bounds one diagnostic DMA.
	DiagDMAMaxLen = 1 << 20
)

// DiagPattern is byte i of the diagnostic DMA pattern for seed: a cheap
// integer hash (all arithmetic modulo 2^32) so that a byte written at the
// wrong offset, or with the wrong seed, almost surely differs. The C header
// carries the same function; keep both in step (the header test checks).
func DiagPattern(seed, i uint32) uint8 {
	x := seed + i*0x9e3779b1
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	return uint8(x)
}

// DiagPatternC is the C body of DiagPattern, emitted into the header.
const DiagPatternC = `static inline unsigned char npfnic_diag_pattern(unsigned int seed, unsigned int i)
{
	unsigned int x = seed + i * 0x9e3779b1u;

	x ^= x >> 16;
	x *= 0x85ebca6bu;
	x ^= x >> 13;
	return (unsigned char)x;
}`

// Register describes one register for documentation and the C header.
type Register struct {
	Name   string // C name suffix: NPFNIC_REG_<Name>
	Offset uint32
	Access string // RO, RW, WO
	Doc    string
}

// Registers lists BAR0's registers in offset order.
var Registers = []Register{
	{"ID", RegID, "RO", "magic NPFNIC_MAGIC"},
	{"VERSION", RegVersion, "RO", "interface version, major << 16 | minor"},
	{"SCRATCH", RegScratch, "RW", "reads back the last value written"},
	{"DIAG_IRQ", RegDiagIRQ, "WO", "write a vector number: the device fires that MSI-X vector"},
	{"DIAG_DMA_ADDR_LO", RegDiagDMAAddrLo, "RW", "diagnostic DMA target address, bits 31:0"},
	{"DIAG_DMA_ADDR_HI", RegDiagDMAAddrHi, "RW", "diagnostic DMA target address, bits 63:32"},
	{"DIAG_DMA_LEN", RegDiagDMALen, "RW", "diagnostic DMA length in bytes"},
	{"DIAG_DMA_SEED", RegDiagDMASeed, "RW", "diagnostic DMA pattern seed"},
	{"DIAG_DMA_CTRL", RegDiagDMACtrl, "WO", "write NPFNIC_DIAG_DMA_CTRL_START to start"},
	{"DIAG_DMA_STATUS", RegDiagDMAStatus, "RO", "NPFNIC_DIAG_DMA_STATUS_*"},
}

// Value is a named constant exported to C as NPFNIC_<Name>.
type Value struct {
	Name  string
	Value uint64
	Doc   string
}

// Values lists the constants exported to the C header besides registers.
var Values = []Value{
	{"PCI_VENDOR_ID", VendorID, ""},
	{"PCI_DEVICE_ID", DeviceID, ""},
	{"PCI_REVISION", Revision, ""},
	{"PCI_CLASS", ClassCode, "base class, sub class, prog-if"},
	{"REG_BAR", RegBAR, "BAR holding the register file"},
	{"REG_BAR_SIZE", RegBARSize, ""},
	{"MSIX_BAR", MSIXBAR, "BAR holding the MSI-X table and PBA"},
	{"MSIX_TABLE_OFFSET", MSIXTableOffset, ""},
	{"MSIX_PBA_OFFSET", MSIXPBAOffset, ""},
	{"MSIX_VECTORS", MSIXVectors, ""},
	{"MAGIC", Magic, "value of NPFNIC_REG_ID"},
	{"INTERFACE_VERSION", InterfaceVersion, "value of NPFNIC_REG_VERSION"},
	{"DIAG_DMA_CTRL_START", DiagDMACtrlStart, ""},
	{"DIAG_DMA_STATUS_IDLE", DiagDMAStatusIdle, ""},
	{"DIAG_DMA_STATUS_BUSY", DiagDMAStatusBusy, ""},
	{"DIAG_DMA_STATUS_DONE", DiagDMAStatusDone, ""},
	{"DIAG_DMA_STATUS_FAULT", DiagDMAStatusFault, "target outside guest memory"},
	{"DIAG_DMA_STATUS_BAD_LEN", DiagDMAStatusBadLen, ""},
	{"DIAG_DMA_STATUS_NO_MASTER", DiagDMAStatusNoMaster, "bus mastering disabled"},
	{"DIAG_DMA_MAX_LEN", DiagDMAMaxLen, ""},
}
