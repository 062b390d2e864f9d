// Package npfnic is the npfnic PCI function: it assembles the configuration
// space (with ATS, PRI and PASID), the BAR0 register file defined in
// package hw and the MSI-X BAR, and implements vfiouser.Device on top of
// them. BAR0 is routed by the register table (bar0.go): the function
// decodes its identification and diagnostic registers itself and hands
// every other register to the engine that owns it (ethring the Ethernet
// datapath's, whose rings, status block and interrupts live there; ats and
// pri theirs); the function contributes the MAC address, the link (up when
// a wire is attached), the MSI-X vector routing and the resets. It also owns
// the function's address translation (package ats: the ATS register block,
// the ATS and PASID capability enables) and page request interface
// (package pri: the PRI register block and capability), which the Ethernet
// datapath and the RDMA engine's memory regions fault through (one page
// request queue for both), and the DIAG_ECHO interrupt/doorbell round trip that is
// the floor a fault's cost is compared with.
//
// Device work that touches guest memory (the diagnostic DMA) runs on its own
// goroutine through the guest-memory layer, never inside a request handler,
// so a fault or a slow DMA_WRITE round trip can not stall the vfio-user
// socket.
package npfnic

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ethring"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/rdma"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/trace"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// Options configure the function. Zero values take the defaults.
type Options struct {
	ATSInvalidateQueueDepth int    // default 32
	PRIOutstandingCapacity  uint32 // default 256
	PASIDWidth              int    // default 20
	Logger                  *slog.Logger

	// Wire is the Ethernet port; nil leaves the link down. The NIC owns it
	// and closes it in Close.
	Wire port.Port
	// MAC is the station address; default DefaultMAC(MACSeed).
	MAC     net.HardwareAddr
	MACSeed string
	// QueuePairs is the number of queue pairs offered, 1..hw.PairMax
	// (default hw.PairMax).
	QueuePairs int
	// RxDropNoBuf drops received frames for which the driver posted no
	// buffer instead of pausing the wire until it does (ethring.Config).
	RxDropNoBuf bool
	// ATCCapacity is the device's default translation cache size in 4 KiB
	// pages (ats.DefaultCapacity when 0); the driver may change it with
	// ATC_CAPACITY.
	ATCCapacity int
	// Trace records what the engines do (package trace); nil records
	// nothing.
	Trace *trace.Recorder
	// RDMAMinAckTimeout is the RDMA engine's floor on the RC local ACK
	// timer (ibrc.Config.MinAckTimeout); 0: none, the QPs' own timeouts.
	RDMAMinAckTimeout time.Duration
	// Mem is the guest memory the function DMAs through; nil: a new,
	// empty one. A vfio-user server maps each client's DMA regions into
	// it (Memory); tests map their own RAM.
	Mem *guestmem.Memory
}

// DefaultMAC derives a locally administered unicast address in QEMU's
// 52:54:00 range from seed, so a device keeps its address across restarts
// (seed it with something stable, such as the socket path) and two devices
// with different seeds almost surely differ.
func DefaultMAC(seed string) net.HardwareAddr {
	h := fnv.New32a()
	h.Write([]byte(seed))
	v := h.Sum32()
	return net.HardwareAddr{0x52, 0x54, 0x00, byte(v >> 16), byte(v >> 8), byte(v)}
}

// NIC is the PCI function. Create it with New.
type NIC struct {
	cfg *pcie.Space
	log *slog.Logger
	mem *guestmem.Memory

	host     vfiouser.Host // the client's interrupts, once attached
	attached atomic.Bool

	mu        sync.Mutex // diagnostic registers and MSI-X table
	scratch   uint32
	dmaAddr   uint64
	dmaLen    uint32
	dmaSeed   uint32
	msixTable []byte

	dmaStatus atomic.Uint32
	lateSeen  atomic.Uint64           // LATE_DMA count last logged
	dmaRun    atomic.Pointer[diagRun] // the last diagnostic DMA started
	dmaWG     sync.WaitGroup

	mac        net.HardwareAddr
	wire       port.Port // the backend, read through mux once attached
	mux        *port.Mux
	queuePairs int
	// The engines, built by New: the Ethernet datapath, the RDMA engine,
	// and the address translation and page request interface both fault
	// through.
	dp         *ethring.Engine
	rdma       *rdma.Engine // RC over RoCEv2 (BlockRDMA)
	xlat       *ats.Context
	pri        *pri.Requester
	blocks     [hw.BlockCount]hw.RegisterBlock // BAR0's owners (bar0.go)
	trace      *trace.Recorder
	partialLog rateLimit
	closeOnce  sync.Once

	echo diagEcho
}

// New validates o and builds the function with every engine running.
//
// Address translation, page requests and the Ethernet datapath are built
// here, over the function's own guest memory, not when a client attaches:
// a NIC that exists works, nothing in it is nil, and an engine that cannot
// be built is New's error rather than a log line and a missing engine. The
// memory is empty until a vfio-user server maps the client's DMA regions
// into it (vfiouser.Device.Memory), and Attach only hands over the
// client's interrupts, so it cannot fail. Building the engines in Attach
// instead, and letting it fail, would keep every engine optional until a
// client came and every use of one behind a nil check.
func New(o Options) (*NIC, error) {
	if o.ATSInvalidateQueueDepth == 0 {
		o.ATSInvalidateQueueDepth = 32
	}
	if o.PRIOutstandingCapacity == 0 {
		o.PRIOutstandingCapacity = 256
	}
	if o.PASIDWidth == 0 {
		o.PASIDWidth = 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.QueuePairs == 0 {
		o.QueuePairs = hw.PairMax
	}
	if o.QueuePairs < 1 || o.QueuePairs > hw.PairMax {
		return nil, fmt.Errorf("nic: %d queue pairs: want 1..%d", o.QueuePairs, hw.PairMax)
	}
	if o.MAC == nil {
		o.MAC = DefaultMAC(o.MACSeed)
	}
	if len(o.MAC) != 6 || o.MAC[0]&1 != 0 {
		return nil, fmt.Errorf("nic: MAC %v is not a unicast Ethernet address", o.MAC)
	}
	if o.ATCCapacity < 0 || o.ATCCapacity > hw.ATCCapacityMax {
		return nil, fmt.Errorf("nic: ATC capacity %d: want 1..%d, or 0 for %d", o.ATCCapacity, hw.ATCCapacityMax, ats.DefaultCapacity)
	}
	if o.Mem == nil {
		o.Mem = guestmem.New()
	}
	cfg, err := pcie.Build(pcie.Config{
		VendorID: hw.VendorID, DeviceID: hw.DeviceID, Revision: hw.Revision,
		ClassCode: hw.ClassCode, SubsysVendorID: hw.SubsysVendorID, SubsysID: hw.SubsysID,
		InterruptPin: 1,
		BARs: [6]pcie.BAR{
			hw.RegBAR:  {Size: hw.RegBARSize, Is64: true},
			hw.MSIXBAR: {Size: hw.MSIXBARSize, Is64: true},
		},
		MSIX: &pcie.MSIX{
			Vectors:  hw.MSIXVectors,
			TableBAR: hw.MSIXBAR, TableOffset: hw.MSIXTableOffset,
			PBABAR: hw.MSIXBAR, PBAOffset: hw.MSIXPBAOffset,
		},
		ATS:   &pcie.ATS{InvalidateQueueDepth: o.ATSInvalidateQueueDepth, PageAlignedRequest: true},
		PRI:   &pcie.PRI{OutstandingCapacity: o.PRIOutstandingCapacity},
		PASID: &pcie.PASID{MaxWidth: o.PASIDWidth},
	})
	if err != nil {
		return nil, fmt.Errorf("nic: %w", err)
	}
	n := &NIC{cfg: cfg, log: o.Logger, mem: o.Mem, msixTable: make([]byte, hw.MSIXVectors*pcie.MSIXEntrySize),
		mac: append(net.HardwareAddr(nil), o.MAC...), wire: o.Wire, queuePairs: o.QueuePairs, trace: o.Trace}
	n.echo.init(n)
	n.resetMSIXTable()
	if err := n.buildEngines(o); err != nil {
		return nil, err
	}
	n.routeBlocks()
	cfg.SetHooks(pcie.Hooks{
		Command: func(old, new uint16) {
			n.log.Debug("command register", "old", old, "new", new)
			bme := new&pcie.CmdBusMaster != 0
			n.dp.SetBusMaster(bme)
			n.rdma.SetBusMaster(bme)
			if bme && old&pcie.CmdBusMaster == 0 {
				n.xlat.Kick()
				n.pri.Kick()
			}
		},
		ATSControl: func(en bool, stu uint8) {
			n.log.Info("ATS control", "enabled", en, "stu", stu)
			n.xlat.ATSControl(en, stu)
		},
		PRIControl: func(en bool) {
			n.log.Info("PRI control", "enabled", en)
			n.pri.PRIControl(en)
		},
		PRIReset: func() {
			n.log.Info("PRI reset")
			n.pri.PRIReset()
		},
		PASIDControl: func(en bool) {
			n.log.Info("PASID control", "enabled", en)
			n.xlat.PASIDControl(en)
		},
	})
	n.log.Info("datapath ready", "mac", n.mac.String(), "queue_pairs", n.queuePairs, "wire", fmt.Sprint(n.wire))
	return n, nil
}

// buildEngines builds address translation, page requests, the RDMA engine
// and the Ethernet datapath on the function's port; if one fails, those built before it are
// closed and the port is left to the caller.
func (n *NIC) buildEngines(o Options) error {
	x, err := ats.New(ats.Config{Mem: n.mem, Caps: n.cfg, Capacity: o.ATCCapacity,
		Interrupt: n.interrupt, Log: n.log.With("part", "ats"), Trace: o.Trace})
	if err != nil {
		return fmt.Errorf("nic: address translation: %w", err)
	}
	e, err := pri.New(pri.Config{Mem: n.mem, Caps: n.cfg, IRQ: triggerFunc(n.trigger), Log: n.log.With("part", "pri"),
		Trace: o.Trace})
	if err != nil {
		x.Close()
		return fmt.Errorf("nic: page requests: %w", err)
	}
	var mac [6]byte
	copy(mac[:], n.mac)
	rc, err := rdma.New(rdma.Config{Mem: n.mem, Xlat: x, PRI: e, MAC: mac, Interrupt: n.interrupt,
		Log: n.log.With("part", "rdma"), Trace: o.Trace, MinAckTimeout: o.RDMAMinAckTimeout})
	if err != nil {
		e.Close()
		x.Close()
		return fmt.Errorf("nic: RDMA engine: %w", err)
	}
	dp, err := n.plugEngines(ethring.Config{
		Mem: n.mem, QueuePairs: n.queuePairs, RxDropNoBuf: o.RxDropNoBuf,
		Interrupt: n.interrupt, Log: n.log.With("part", "ethring"), Xlat: x, PRI: e, Trace: o.Trace,
	}, rc)
	if err != nil {
		rc.Close()
		e.Close()
		x.Close()
		return fmt.Errorf("nic: Ethernet datapath: %w", err)
	}
	dp.SetBusMaster(n.cfg.BusMaster())
	rc.SetBusMaster(n.cfg.BusMaster())
	n.dp, n.xlat, n.pri, n.rdma = dp, x, e, rc
	return nil
}

// Config exposes the configuration space to the device model's parts.
func (n *NIC) Config() *pcie.Space { return n.cfg }

// Info implements vfiouser.Device.
func (n *NIC) Info() vfiouser.Info {
	regions := make([]vfiouser.Region, vfiouser.NumPCIRegions)
	rw := uint32(vfiouser.RegionFlagRead | vfiouser.RegionFlagWrite)
	regions[hw.RegBAR] = vfiouser.Region{Size: hw.RegBARSize, Flags: rw}
	regions[hw.MSIXBAR] = vfiouser.Region{Size: hw.MSIXBARSize, Flags: rw}
	regions[vfiouser.RegionConfig] = vfiouser.Region{Size: pcie.Size, Flags: rw}
	irqs := make([]vfiouser.IRQ, vfiouser.NumPCIIRQs)
	irqs[vfiouser.IRQIntx] = vfiouser.IRQ{Count: 1, Flags: vfiouser.IRQInfoEventfd | vfiouser.IRQInfoMaskable | vfiouser.IRQInfoAutomasked}
	irqs[vfiouser.IRQMSI] = vfiouser.IRQ{Count: 0, Flags: vfiouser.IRQInfoEventfd} // no MSI capability
	irqs[vfiouser.IRQMSIX] = vfiouser.IRQ{Count: hw.MSIXVectors, Flags: vfiouser.IRQInfoEventfd}
	irqs[vfiouser.IRQErr] = vfiouser.IRQ{Count: 1, Flags: vfiouser.IRQInfoEventfd}
	irqs[vfiouser.IRQReq] = vfiouser.IRQ{Count: 1, Flags: vfiouser.IRQInfoEventfd}
	return vfiouser.Info{Regions: regions, IRQs: irqs, Reset: true}
}

// Memory implements vfiouser.Device: the guest memory every engine of the
// function DMAs through.
func (n *NIC) Memory() *guestmem.Memory { return n.mem }

// Attach implements vfiouser.Device: interrupts go to the client's
// eventfds from here on.
func (n *NIC) Attach(h vfiouser.Host) {
	n.host = h
	n.attached.Store(true)
}

// errNoClient is an interrupt fired before Attach handed over the
// client's.
var errNoClient = errors.New("nic: no client interrupts attached")

// trigger fires MSI-X vector v on the client's eventfds.
func (n *NIC) trigger(v int) error {
	if !n.attached.Load() {
		return errNoClient
	}
	n.trace.Emit(trace.IRQ, trace.TrackIRQ, uint64(v), 0)
	return n.host.IRQ.Trigger(v)
}

// triggerFunc adapts a trigger function to pri.Interrupts.
type triggerFunc func(vector int) error

func (f triggerFunc) Trigger(vector int) error { return f(vector) }

// interrupt routes a vector of an engine to the client's MSI-X eventfds;
// one fired before a client attached is dropped.
func (n *NIC) interrupt(v int) {
	if err := n.trigger(v); err != nil && err != errNoClient {
		n.log.Warn("interrupt failed", "vector", v, "err", err)
	}
}

// Ethernet returns the Ethernet engine, for tests and statistics.
func (n *NIC) Ethernet() *ethring.Engine { return n.dp }

// RDMA returns the RDMA engine, for tests and statistics.
func (n *NIC) RDMA() *rdma.Engine { return n.rdma }

// ATS returns the function's address translation, for tests, statistics
// and experiments.
func (n *NIC) ATS() *ats.Context { return n.xlat }

// PRI returns the function's page request interface; its Recorder holds
// the stage timing of every fault.
func (n *NIC) PRI() *pri.Requester { return n.pri }

// MAC returns the station address.
func (n *NIC) MAC() net.HardwareAddr { return append(net.HardwareAddr(nil), n.mac...) }

// ClientDisconnected implements vfiouser.Disconnecter: every engine stops
// (the client's memory is already gone, so any DMA still in flight faults
// harmlessly) and is waited for, bounded; config space is kept for the
// next client, which resets the device anyway, and translation and PRI
// follow its enables so the two agree.
func (n *NIC) ClientDisconnected() {
	n.log.Info("client gone; queues stopped, device state kept")
	n.abortDMA()
	n.rdma.Reset() // before translation: its regions never pass through
	n.resetFaults()
	n.dp.Reset()
	n.waitQuiesced("client disconnect")
}

// resetFaults returns translation, PRI and the echo diagnostic to their
// reset state, with the ATS, PASID and PRI enables taken from config space:
// outstanding page requests are abandoned, so a TX queue stalled on one
// lets go. It stops their DMA without waiting (see waitQuiesced).
func (n *NIC) resetFaults() {
	n.echo.reset()
	n.pri.Reset()
	n.xlat.Reset()
}

// Close stops the engines and closes the port. The NIC is unusable
// afterwards.
func (n *NIC) Close() error {
	var err error
	n.closeOnce.Do(func() {
		n.echo.reset()
		n.pri.Close()
		n.dp.Close() // before the port: a Receive waiting for RX buffers holds the port's reader
		n.rdma.Close()
		err = n.closePort()
		n.xlat.Close()
	})
	return err
}

// Reset implements vfiouser.Device (DEVICE_RESET, a function reset): config
// space and registers return to their power-on values; a diagnostic DMA in
// flight is aborted (its status reads ABORTED once it stopped).
//
// Config space is reset first and every engine then takes its enables from
// it (the reset runs no config hooks). Every engine's DMA is stopped, and
// the reply waits until all have quiesced, for at most
// hw.QuiesceTimeoutMS: a unit may be waiting for the client itself (remote
// DMA over this very socket), so the wait is bounded and a timeout logged.
func (n *NIC) Reset() error {
	n.cfg.Reset()
	n.mu.Lock()
	n.scratch, n.dmaAddr, n.dmaLen, n.dmaSeed = 0, 0, 0, 0
	n.resetMSIXTable()
	n.mu.Unlock()
	if !n.abortDMA() {
		n.dmaStatus.Store(hw.DiagDMAStatusIdle)
	}
	// RDMA first: its regions' accesses translate or fail, and none is
	// to begin while translation goes to its reset state.
	n.rdma.Reset()
	n.resetFaults()
	n.dp.Reset()
	n.dp.SetBusMaster(n.cfg.BusMaster())
	n.rdma.SetBusMaster(n.cfg.BusMaster())
	n.waitQuiesced("device reset")
	return nil
}

// resetMSIXTable sets every vector's Mask bit, the power-on state (PCI 3.0
// 6.8.2.9). Caller holds n.mu or owns n.
func (n *NIC) resetMSIXTable() {
	for i := range n.msixTable {
		n.msixTable[i] = 0
	}
	for v := 0; v < hw.MSIXVectors; v++ {
		n.msixTable[v*pcie.MSIXEntrySize+12] = 1
	}
}

// WaitDMA blocks until no diagnostic DMA goroutine runs (tests, shutdown).
func (n *NIC) WaitDMA() { n.dmaWG.Wait() }

// RegionRead implements vfiouser.Device.
func (n *NIC) RegionRead(index int, off uint64, p []byte) error {
	switch index {
	case vfiouser.RegionConfig:
		return n.cfg.Read(int(off), p)
	case hw.RegBAR:
		n.readRegs(off, p)
		if n.trace.On() {
			var v uint64
			for i := range min(len(p), 8) {
				v |= uint64(p[i]) << (8 * i)
			}
			n.trace.Emit(trace.RegRead, trace.TrackDevice, off, v)
		}
		return nil
	case hw.MSIXBAR:
		n.readMSIX(off, p)
		return nil
	}
	return unix.EINVAL
}

// RegionWrite implements vfiouser.Device.
func (n *NIC) RegionWrite(index int, off uint64, p []byte) error {
	switch index {
	case vfiouser.RegionConfig:
		return n.cfg.Write(int(off), p)
	case hw.RegBAR:
		n.writeRegs(off, p)
		return nil
	case hw.MSIXBAR:
		n.writeMSIX(off, p)
		return nil
	}
	return unix.EINVAL
}

func (n *NIC) readMSIX(off uint64, p []byte) {
	for i := range p {
		a := off + uint64(i)
		switch {
		case a >= hw.MSIXTableOffset && a < hw.MSIXTableOffset+uint64(len(n.msixTable)):
			n.mu.Lock()
			p[i] = n.msixTable[a-hw.MSIXTableOffset]
			n.mu.Unlock()
		case a >= hw.MSIXPBAOffset && a < hw.MSIXPBAOffset+uint64((hw.MSIXVectors+63)/64*8):
			bit := (a - hw.MSIXPBAOffset) * 8
			var v byte
			for j := uint64(0); j < 8 && bit+j < hw.MSIXVectors; j++ {
				if n.attached.Load() && n.host.IRQ.Pending(vfiouser.IRQMSIX, int(bit+j)) {
					v |= 1 << j
				}
			}
			p[i] = v
		default:
			p[i] = 0
		}
	}
}

func (n *NIC) writeMSIX(off uint64, p []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, v := range p {
		a := off + uint64(i)
		if a >= hw.MSIXTableOffset && a < hw.MSIXTableOffset+uint64(len(n.msixTable)) {
			e := a - hw.MSIXTableOffset
			if e%pcie.MSIXEntrySize >= 12 && e%pcie.MSIXEntrySize != 12 {
				continue // Vector Control bits 31:1 are reserved
			}
			if e%pcie.MSIXEntrySize == 12 {
				v &= 1
			}
			n.msixTable[e] = v
		}
		// The PBA is read-only.
	}
}
