// Package npfnic is the npfnic PCI function: it assembles the configuration
// space (with ATS, PRI and PASID), the BAR0 register file defined in
// package hw and the MSI-X BAR, and implements vfiouser.Device on top of
// them. Besides identification, scratch and diagnostic registers, BAR0
// carries the Ethernet datapath's registers, which this package decodes
// and hands to ethring (the rings, status block and interrupts live
// there); the function contributes the MAC address, the link (up when a
// wire is attached), the MSI-X vector routing and the resets. It also owns
// the function's address translation (package ats: the ATS register block,
// the ATS and PASID capability enables) and page request interface
// (package pri: the PRI register block and capability), which the datapath
// faults through, and the DIAG_ECHO interrupt/doorbell round trip that is
// the floor a fault's cost is compared with.
//
// Device work that touches guest memory (the diagnostic DMA) runs on its own
// goroutine through the guest-memory layer, never inside a request handler,
// so a fault or a slow DMA_WRITE round trip can not stall the vfio-user
// socket.
package npfnic

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ethring"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
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
	// QueuePairs is the number of queue pairs offered, 1..hw.QPMax
	// (default hw.QPMax).
	QueuePairs int
	// RxDropNoBuf drops received frames for which the driver posted no
	// buffer instead of pausing the wire until it does (ethring.Config).
	RxDropNoBuf bool
	// ATCCapacity is the device's default translation cache size in 4 KiB
	// pages (ats.DefaultCapacity when 0); the driver may change it with
	// ATC_CAPACITY.
	ATCCapacity int
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

	host     vfiouser.Host
	attached atomic.Bool

	mu        sync.Mutex // register file and MSI-X table
	scratch   uint32
	dmaAddr   uint64
	dmaLen    uint32
	dmaSeed   uint32
	msixTable []byte

	dmaStatus atomic.Uint32
	lateSeen  atomic.Uint64           // LATE_DMA count last logged
	dmaRun    atomic.Pointer[diagRun] // the last diagnostic DMA started
	dmaWG     sync.WaitGroup

	mac         net.HardwareAddr
	wire        port.Port // the backend, read through mux once attached
	mux         *port.Mux
	queuePairs  int
	rxDropNoBuf bool
	statusAddr  uint64 // STATUS_ADDR_LO/HI as written (under mu)
	// dp is the datapath, created by Attach (it needs guest memory), with
	// the address translation and page request interface it faults through.
	dp          atomic.Pointer[ethring.Datapath]
	xlat        atomic.Pointer[ats.Context]
	pri         atomic.Pointer[pri.Engine]
	atcCapacity int
	closeOnce   sync.Once

	echo diagEcho
}

// New builds the function.
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
		o.QueuePairs = hw.QPMax
	}
	if o.QueuePairs < 1 || o.QueuePairs > hw.QPMax {
		return nil, fmt.Errorf("nic: %d queue pairs: want 1..%d", o.QueuePairs, hw.QPMax)
	}
	if o.MAC == nil {
		o.MAC = DefaultMAC(o.MACSeed)
	}
	if len(o.MAC) != 6 || o.MAC[0]&1 != 0 {
		return nil, fmt.Errorf("nic: MAC %v is not a unicast Ethernet address", o.MAC)
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
		return nil, err
	}
	n := &NIC{cfg: cfg, log: o.Logger, msixTable: make([]byte, hw.MSIXVectors*pcie.MSIXEntrySize),
		mac: append(net.HardwareAddr(nil), o.MAC...), wire: o.Wire, queuePairs: o.QueuePairs,
		rxDropNoBuf: o.RxDropNoBuf, atcCapacity: o.ATCCapacity}
	n.echo.init(n)
	n.resetMSIXTable()
	cfg.SetHooks(pcie.Hooks{
		Command: func(old, new uint16) {
			n.log.Debug("command register", "old", old, "new", new)
			bme := new&pcie.CmdBusMaster != 0
			if dp := n.dp.Load(); dp != nil {
				dp.SetBusMaster(bme)
			}
			if bme && old&pcie.CmdBusMaster == 0 {
				if x := n.xlat.Load(); x != nil {
					x.Kick()
				}
				if e := n.pri.Load(); e != nil {
					e.Kick()
				}
			}
		},
		ATSControl: func(en bool, stu uint8) {
			n.log.Info("ATS control", "enabled", en, "stu", stu)
			if x := n.xlat.Load(); x != nil {
				x.ATSControl(en, stu)
			}
		},
		PRIControl: func(en bool) {
			n.log.Info("PRI control", "enabled", en)
			if e := n.pri.Load(); e != nil {
				e.PRIControl(en)
			} else if !en {
				n.cfg.SetPRIStopped(true) // nothing can be outstanding before Attach
			}
		},
		PRIReset: func() {
			n.log.Info("PRI reset")
			if e := n.pri.Load(); e != nil {
				e.PRIReset()
			}
		},
		PASIDControl: func(en bool) {
			n.log.Info("PASID control", "enabled", en)
			if x := n.xlat.Load(); x != nil {
				x.PASIDControl(en)
			}
		},
	})
	return n, nil
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

// Attach implements vfiouser.Device. It starts the datapath: from here on
// the wire is read (frames are dropped until the driver enables a queue).
func (n *NIC) Attach(h vfiouser.Host) {
	n.host = h
	if h.Log != nil {
		n.log = h.Log
	}
	x, err := ats.New(ats.Config{Mem: h.Mem, Caps: n.cfg, Capacity: n.atcCapacity,
		Interrupt: n.interrupt, Log: n.log.With("part", "ats")})
	if err != nil {
		// Only a bad Options.ATCCapacity gets here; New checked nothing else.
		n.log.Error("address translation unavailable", "err", err)
	}
	e, err := pri.New(pri.Config{Mem: h.Mem, Caps: n.cfg, IRQ: h.IRQ, Log: n.log.With("part", "pri")})
	if err != nil {
		n.log.Error("page request interface unavailable", "err", err)
	}
	if x != nil {
		n.xlat.Store(x)
	}
	if e != nil {
		n.pri.Store(e)
	}
	dp := n.plugEthernet(ethring.Config{
		Mem: h.Mem, QueuePairs: n.queuePairs, RxDropNoBuf: n.rxDropNoBuf,
		Interrupt: n.interrupt, Log: n.log.With("part", "ethring"), Xlat: x, PRI: e,
	})
	dp.SetBusMaster(n.cfg.BusMaster())
	n.dp.Store(dp)
	n.attached.Store(true)
	n.log.Info("datapath ready", "mac", n.mac.String(), "queue_pairs", n.queuePairs, "wire", fmt.Sprint(n.wire))
}

// interrupt routes a datapath vector to the client's MSI-X eventfds.
func (n *NIC) interrupt(v int) {
	if !n.attached.Load() {
		return
	}
	if err := n.host.IRQ.Trigger(v); err != nil {
		n.log.Warn("interrupt failed", "vector", v, "err", err)
	}
}

// Datapath returns the Ethernet datapath (nil before Attach), for tests and
// statistics.
func (n *NIC) Datapath() *ethring.Datapath { return n.dp.Load() }

// ATS returns the function's address translation (nil before Attach), for
// tests, statistics and experiments.
func (n *NIC) ATS() *ats.Context { return n.xlat.Load() }

// PRI returns the function's page request interface (nil before Attach);
// its Recorder holds the stage timing of every fault.
func (n *NIC) PRI() *pri.Engine { return n.pri.Load() }

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
	n.resetFaults()
	if dp := n.dp.Load(); dp != nil {
		dp.Reset()
	}
	n.mu.Lock()
	n.statusAddr = 0
	n.mu.Unlock()
	n.waitQuiesced("client disconnect")
}

// resetFaults returns translation, PRI and the echo diagnostic to their
// reset state, with the ATS, PASID and PRI enables taken from config space:
// outstanding page requests are abandoned, so a TX queue stalled on one
// lets go. It stops their DMA without waiting (see waitQuiesced).
func (n *NIC) resetFaults() {
	n.echo.reset()
	if e := n.pri.Load(); e != nil {
		e.Reset()
	}
	if x := n.xlat.Load(); x != nil {
		x.Reset()
	}
}

// Close stops the engines and closes the port. The NIC is unusable
// afterwards.
func (n *NIC) Close() error {
	var err error
	n.closeOnce.Do(func() {
		n.echo.reset()
		if e := n.pri.Load(); e != nil {
			e.Close()
		}
		if dp := n.dp.Load(); dp != nil {
			dp.Close() // first: a Receive waiting for RX buffers holds the port's reader
		}
		err = n.closePort()
		if x := n.xlat.Load(); x != nil {
			x.Close()
		}
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
	n.statusAddr = 0
	n.resetMSIXTable()
	n.mu.Unlock()
	if !n.abortDMA() {
		n.dmaStatus.Store(hw.DiagDMAStatusIdle)
	}
	n.resetFaults()
	if dp := n.dp.Load(); dp != nil {
		dp.Reset()
		dp.SetBusMaster(n.cfg.BusMaster())
	}
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

func (n *NIC) readReg(reg uint32) uint32 {
	switch reg {
	case hw.RegID:
		return hw.Magic
	case hw.RegVersion:
		return hw.InterfaceVersion
	case hw.RegDiagDMAStatus:
		return n.diagStatus()
	case hw.RegMACLo:
		return binary.LittleEndian.Uint32(n.mac[0:4])
	case hw.RegMACHi:
		return uint32(binary.LittleEndian.Uint16(n.mac[4:6]))
	case hw.RegQPMax:
		return uint32(n.queuePairs)
	case hw.RegFeatures:
		return hw.Features
	case hw.RegCtrl:
		return n.readCtrl()
	case hw.RegLateDMA:
		return n.lateDMA()
	case hw.RegDiagEcho:
		return n.echo.rounds()
	case hw.RegDiagEchoGap:
		return n.echo.getGap()
	}
	if p, off := n.qpReg(reg); p != nil {
		return p.ReadReg(off)
	}
	if v, ok := n.readFaultReg(reg); ok {
		return v
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch reg {
	case hw.RegScratch:
		return n.scratch
	case hw.RegDiagDMAAddrLo:
		return uint32(n.dmaAddr)
	case hw.RegDiagDMAAddrHi:
		return uint32(n.dmaAddr >> 32)
	case hw.RegDiagDMALen:
		return n.dmaLen
	case hw.RegDiagDMASeed:
		return n.dmaSeed
	case hw.RegStatusAddrLo:
		return uint32(n.statusAddr)
	case hw.RegStatusAddrHi:
		return uint32(n.statusAddr >> 32)
	}
	return 0 // write-only and unassigned registers read as 0
}

// qpReg maps a BAR0 offset inside a queue pair's block to the pair and the
// offset within it; nil for other offsets and pairs not offered.
func (n *NIC) qpReg(reg uint32) (*ethring.Pair, uint32) {
	if reg < hw.QPRegBase || reg >= hw.QPBase(hw.QPMax) {
		return nil, 0
	}
	dp := n.dp.Load()
	if dp == nil {
		return nil, 0
	}
	q := int(reg-hw.QPRegBase) / hw.QPRegStride
	return dp.Pair(q), (reg - hw.QPRegBase) % hw.QPRegStride
}

// readRegs serves any size and alignment by composing the 32-bit registers
// the access touches, as a PCIe completer returning the enabled bytes.
func (n *NIC) readRegs(off uint64, p []byte) {
	var cur uint32
	curReg := ^uint64(0)
	for i := range p {
		a := off + uint64(i)
		reg := a &^ 3
		if reg != curReg {
			cur, curReg = n.readReg(uint32(reg)), reg
		}
		p[i] = byte(cur >> (8 * (a & 3)))
	}
}

// writeRegs applies 32-bit register writes; narrower writes merge into
// plain storage registers and are ignored for action registers (whose
// meaning needs the whole value).
func (n *NIC) writeRegs(off uint64, p []byte) {
	end := off + uint64(len(p))
	for reg := off &^ 3; reg < end; reg += 4 {
		lo, hi := max(reg, off), min(reg+4, end)
		var b [4]byte
		var mask uint32
		for a := lo; a < hi; a++ {
			b[a-reg] = p[a-off]
			mask |= 0xff << (8 * (a - reg))
		}
		n.writeReg(uint32(reg), binary.LittleEndian.Uint32(b[:]), mask)
	}
}

func merge(old, v, mask uint32) uint32 { return old&^mask | v&mask }

func (n *NIC) writeReg(reg, v, mask uint32) {
	full := mask == 0xffffffff
	switch reg {
	case hw.RegDiagIRQ:
		if full {
			n.diagIRQ(v)
		}
		return
	case hw.RegDiagDMACtrl:
		if full {
			n.diagCtrl(v)
		}
		return
	case hw.RegCtrl:
		n.writeCtrl(v, mask)
		return
	case hw.RegMiscIRQArm:
		if dp := n.dp.Load(); full && dp != nil && v&1 != 0 {
			dp.ArmMisc()
		}
		return
	case hw.RegDiagEchoCtrl:
		if full {
			n.echo.start(v)
		}
		return
	case hw.RegDiagEcho:
		if full {
			n.echo.answer(v)
		}
		return
	case hw.RegDiagEchoGap:
		n.echo.setGap(merge(n.echo.getGap(), v, mask))
		return
	case hw.RegStatusAddrHi:
		n.mu.Lock()
		n.statusAddr = n.statusAddr&0xffffffff | uint64(merge(uint32(n.statusAddr>>32), v, mask))<<32
		addr := n.statusAddr
		n.mu.Unlock()
		if dp := n.dp.Load(); dp != nil {
			dp.SetStatusAddr(addr)
		}
		return
	}
	if p, off := n.qpReg(reg); p != nil {
		switch off {
		case hw.QPTxTail, hw.QPRxTail, hw.QPIRQArm:
			if full { // action registers need the whole value
				p.WriteReg(off, v)
			}
		case hw.QPRxResolve, hw.QPRxTailIRQ:
			if full {
				p.WriteReg(off, v)
			}
		default:
			p.WriteReg(off, merge(p.ReadReg(off), v, mask))
		}
		return
	}
	if n.writeFaultReg(reg, v, mask) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch reg {
	case hw.RegScratch:
		n.scratch = merge(n.scratch, v, mask)
	case hw.RegDiagDMAAddrLo:
		n.dmaAddr = n.dmaAddr&^0xffffffff | uint64(merge(uint32(n.dmaAddr), v, mask))
	case hw.RegDiagDMAAddrHi:
		n.dmaAddr = n.dmaAddr&0xffffffff | uint64(merge(uint32(n.dmaAddr>>32), v, mask))<<32
	case hw.RegDiagDMALen:
		n.dmaLen = merge(n.dmaLen, v, mask)
	case hw.RegDiagDMASeed:
		n.dmaSeed = merge(n.dmaSeed, v, mask)
	case hw.RegStatusAddrLo:
		n.statusAddr = n.statusAddr&^0xffffffff | uint64(merge(uint32(n.statusAddr), v, mask))
	}
}

// readCtrl reads CTRL: ENABLE as written, BUSY while the datapath may
// still DMA (a status block, an enabled pair or backup ring, or one that
// a disable or CTRL_RESET stopped and that has not quiesced yet).
func (n *NIC) readCtrl() uint32 {
	dp := n.dp.Load()
	if dp == nil {
		return 0
	}
	var v uint32
	if dp.Enabled() {
		v |= hw.CtrlEnable
	}
	if dp.Busy() {
		v |= hw.CtrlBusy
	}
	return v
}

// lateDMA reads LATE_DMA: the late writes guest memory's detector refused
// (low 32 bits). A count that grew since the last read is logged with the
// detector's log: it means a device bug.
func (n *NIC) lateDMA() uint32 {
	if !n.attached.Load() {
		return 0
	}
	m := n.host.Mem
	late := m.LateWrites()
	if seen := n.lateSeen.Swap(late); late > seen {
		n.log.Warn("late DMA writes refused", "count", late, "log", fmt.Sprint(m.LateLog()))
	}
	return uint32(late)
}

// writeCtrl applies CTRL: RESET first (self-clearing), then ENABLE as
// written, so writing ENABLE|RESET restarts the datapath from scratch.
func (n *NIC) writeCtrl(v, mask uint32) {
	dp := n.dp.Load()
	if dp == nil {
		return
	}
	var cur uint32
	if dp.Enabled() {
		cur = hw.CtrlEnable
	}
	v = merge(cur, v, mask) &^ hw.CtrlBusy // read only
	if v&hw.CtrlReset != 0 {
		n.log.Info("datapath reset by the driver")
		dp.Reset()
		n.mu.Lock()
		n.statusAddr = 0
		n.mu.Unlock()
	}
	dp.SetEnabled(v&hw.CtrlEnable != 0)
}

func (n *NIC) diagIRQ(v uint32) {
	if !n.attached.Load() || v >= hw.MSIXVectors {
		n.log.Warn("DIAG_IRQ: no such vector", "vector", v)
		return
	}
	if err := n.host.IRQ.Trigger(int(v)); err != nil {
		n.log.Warn("DIAG_IRQ failed", "vector", v, "err", err)
	}
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
