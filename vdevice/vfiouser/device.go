// Package vfiouser serves one virtual PCI function to a vfio-user client
// (QEMU's vfio-user-pci) over a UNIX socket. It owns the protocol: message
// codec, the socket loop, the client's DMA regions (mapped into the guest
// memory the device brings), interrupt eventfds, reset, and
// disconnect/reconnect. The device model plugs in through the Device
// interface and never sees the wire format.
//
// Threading: client requests are handled one at a time, in order, on the
// goroutine that reads the socket; device callbacks (RegionRead,
// RegionWrite, Reset) run there and must not block on guest memory that is
// only reachable through DMA_READ/DMA_WRITE, because the reply to those
// arrives on that same socket. Device work that touches guest memory runs
// on the device's own goroutines.
package vfiouser

import "github.com/npfnic/npfnic/vdevice/guestmem"

// Standard VFIO PCI region indexes (linux/vfio.h).
const (
	RegionBAR0   = 0
	RegionBAR1   = 1
	RegionBAR2   = 2
	RegionBAR3   = 3
	RegionBAR4   = 4
	RegionBAR5   = 5
	RegionROM    = 6
	RegionConfig = 7
	RegionVGA    = 8
	// NumPCIRegions is VFIO_PCI_NUM_REGIONS; QEMU needs at least this many.
	NumPCIRegions = 9
)

// Standard VFIO PCI IRQ indexes.
const (
	IRQIntx = 0
	IRQMSI  = 1
	IRQMSIX = 2
	IRQErr  = 3
	IRQReq  = 4
	// NumPCIIRQs is VFIO_PCI_NUM_IRQS.
	NumPCIIRQs = 5
)

// Region describes one device region. A zero Size means "not implemented".
type Region struct {
	Size  uint64
	Flags uint32 // RegionFlagRead | RegionFlagWrite | RegionFlagMmap
	// MmapFD is passed to the client when Flags has RegionFlagMmap; the
	// client maps it at offset 0. Sparse, if set, restricts mmap to the
	// listed windows (VFIO_REGION_INFO_CAP_SPARSE_MMAP).
	MmapFD int
	Sparse []SparseArea
}

// IRQ describes one interrupt index.
type IRQ struct {
	Count uint32
	Flags uint32 // IRQInfoEventfd | IRQInfoMaskable | IRQInfoAutomasked | IRQInfoNoResize
}

// Info is the static shape of a device.
type Info struct {
	Regions []Region // indexed by VFIO region index
	IRQs    []IRQ    // indexed by VFIO IRQ index
	// Reset advertises VFIO_DEVICE_FLAGS_RESET.
	Reset bool
}

// Device is what a device model implements.
type Device interface {
	// Info returns the region and IRQ layout. It must not change.
	Info() Info
	// RegionRead fills p from region index at offset. The server has already
	// checked that the range lies inside the region and that it is readable.
	RegionRead(index int, offset uint64, p []byte) error
	// RegionWrite applies p to region index at offset (range checked).
	RegionWrite(index int, offset uint64, p []byte) error
	// Reset performs a device reset (VFIO_USER_DEVICE_RESET).
	Reset() error
	// Memory is the guest memory the device DMAs through. The device
	// builds it with itself, so its engines exist and work before any
	// client connects; the server maps each client's DMA regions into it
	// and unmaps them when the client goes. One server serves a device.
	Memory() *guestmem.Memory
	// Attach hands the device the server's interrupt delivery, once,
	// before any client connects. It stays valid across clients.
	Attach(h Host)
}

// Disconnecter is optionally implemented by devices that want to know when
// a client goes away (its memory is already unmapped when this runs).
type Disconnecter interface {
	ClientDisconnected()
}

// Host is what the server provides to the device.
type Host struct {
	IRQ Interrupts
}

// Interrupts delivers device interrupts to the client's eventfds.
type Interrupts interface {
	// Trigger fires vector of whichever interrupt mode the client set up:
	// MSI-X if any MSI-X vector has an eventfd, else MSI, else INTx (vector
	// 0). A vector without an eventfd (or masked) becomes pending and fires
	// when the client assigns or unmasks it.
	Trigger(vector int) error
	// TriggerIndex fires sub-index sub of a specific IRQ index (e.g. IRQErr).
	TriggerIndex(index, sub int) error
	// Pending reports the pending bit of one interrupt (the MSI-X PBA).
	Pending(index, sub int) bool
}
