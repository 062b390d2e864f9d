// Package ethring is the NIC's Ethernet datapath over guest memory: the TX
// and RX descriptor rings of each queue pair, their doorbells and error
// states, the status block the device writes for the driver, interrupt
// arming and moderation, and the steering of received frames to a pair. It
// reads and writes guest memory only through guestmem, using the layouts
// defined in vdevice/hw, and talks to the outside world only through a
// port.Port. The PCI function (package npfnic, the module root) maps its registers onto the
// methods here. While the PCIe ATS capability is enabled, buffer DMA is
// translated (package ats) and translation faults become page requests
// (package pri) handled by each pair's RX policy or by stalling TX; see
// fault.go and backup.go.
//
// Threading. Register writes arrive on the vfio-user socket goroutine,
// which must never wait for guest memory (a DMA_READ reply arrives on that
// same socket), so register methods only record state and wake a device
// goroutine:
//   - each enabled queue pair has a worker goroutine that checks the rings,
//     runs the TX engine and reports the pair's errors;
//   - received frames are placed by the goroutine that calls Receive (the
//     reader of the port's Mux); when the pair a frame is steered to has
//     no RX buffer, that goroutine waits for one (see Receive), so the
//     backend's own queue absorbs bursts the way QEMU's NICs let the tap
//     queue absorb them;
//   - a control goroutine applies the status block address and link
//     changes;
//   - a pair under the backup policy has a resolve goroutine that applies
//     the driver's RX_RESOLVE writes.
//
// Enabling a pair creates a fresh instance of its rings; disabling or
// resetting retires it. A retired instance's goroutine may finish the frame
// it is moving, but never writes the status block again.
//
// Quiesce (vdevice/hw, Quiesce). Every engine that DMAs is a
// guestmem.Stream: each pair instance ("qpN"), the status block ("status",
// one per address the driver latched) and each enable of the backup ring
// ("backup"). Every guest-memory access is made through the engine's
// stream inside a Begin/End unit (one frame, one descriptor, one status
// write), and no unit stays open while it waits for anything but that
// access (a TX frame waiting for its page response ends its unit; frames
// are sent on the wire outside it). Disabling or resetting stops the
// streams and returns at once; the BUSY bits read set until the streams
// they cover have quiesced. A stream Owns the memory the driver gave it
// (rings, the status block, the backup ring), so the late-DMA detector
// fences it when the stream quiesces. Interrupts of a pair fire only
// inside a unit of its running instance, so none follows the quiesce.
package ethring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/pkthdr"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// Config sets up a Engine.
type Config struct {
	Mem *guestmem.Memory // guest memory; required
	// Port is the Ethernet engine's transmit side of the NIC's port (a
	// port.Mux Endpoint); nil leaves the link down. The port's Mux hands
	// received frames to Receive and a closed backend to PortDown.
	Port port.Sender
	// QueuePairs is the number of usable pairs, 1..hw.PairMax (0: hw.PairMax).
	QueuePairs int
	// Interrupt fires an MSI-X vector (hw.MiscVector, hw.PairVector(q)). It
	// must not block; nil drops interrupts.
	Interrupt func(vector int)
	Clock     clock.Clock // interrupt moderation; nil: real time
	Log       *slog.Logger
	// RxDropNoBuf drops a received frame whose pair has no RX buffer
	// posted (counted in rx_drops_no_buf), as a hardware NIC does, instead
	// of holding it, and the wire, until the driver posts one.
	RxDropNoBuf bool
	// Xlat translates buffer addresses while the PCIe ATS capability is
	// enabled (descriptors then carry VAs of the pair's PASID); nil: buffer
	// addresses are always IOVAs.
	Xlat *ats.Context
	// PRI raises page requests for translation faults; nil: a fault can
	// not be resolved, and the operation fails (RXD_ERROR, tx_fault_errors).
	PRI *pri.Requester
	// Trace records descriptor fetches, buffer DMA, faults, backup-ring
	// stores and resolves, frames and deferred interrupts; nil records
	// nothing.
	Trace *trace.Recorder
}

// Engine is the NIC's Ethernet engine: its queue pairs, the status block
// and the RX fault policies. Create it with New.
type Engine struct {
	mem   *guestmem.Memory
	wire  port.Sender
	log   *slog.Logger
	clock clock.Clock
	irq   func(int)
	trace *trace.Recorder
	pairs []*Pair

	enabled   atomic.Bool // CTRL.ENABLE
	busMaster atomic.Bool // PCI Command.BME: no DMA without it
	link      atomic.Bool

	// status is the status block, nil when the device has none (never
	// set, reset, or bad).
	status atomic.Pointer[statusBlock]
	// draining holds the engines (status blocks, pair instances, backup
	// rings) stopped by a disable or reset whose streams have not quiesced
	// yet: CTRL reads BUSY while any of them has DMA in flight.
	drainMu  sync.Mutex
	draining guestmem.Draining

	ctlMu       sync.Mutex // control requests, below
	ctlGen      uint64     // bumped by Reset: a pending apply is void
	statusReq   uint64     // address latched by STATUS_ADDR_HI
	statusAddr  uint64     // STATUS_ADDR_LO/HI as written (regs.go)
	statusDirty bool
	headerDirty bool // link or device error changed
	// headerQuiet asks for a header rewrite that is no misc event (the
	// backup ring enabled: backup_head starts again from 0).
	headerQuiet bool
	devErr      uint32 // NPFNIC_DEVERR_*

	tailRaise bool // raise the backup vector after the next header write

	xlat   *ats.Context
	pri    *pri.Requester
	backup backupRing
	hdrMu  sync.Mutex // orders writes of the status block header

	misc moderator
	kick chan struct{} // wakes the control goroutine
	done chan struct{}
	wg   sync.WaitGroup

	closeOnce sync.Once

	rxDropNoBuf bool
	rxw         struct {
		mu sync.Mutex
		ch chan struct{} // closed by rxWake; nil while nobody waits
	}

	rxNoQueue  atomic.Uint64
	rxDisabled atomic.Uint64
	rxGSO      rxGSOStats
}

// statusBlock is the status block at one address the driver latched, and
// the stream its writes go through.
type statusBlock struct {
	addr uint64
	dma  *guestmem.Stream
}

// write writes p at off in the block inside one unit of its stream; it
// does nothing (nil) once the block was replaced, reset or failed.
func (sb *statusBlock) write(off uint64, p []byte) error {
	if !sb.dma.Begin() {
		return nil
	}
	err := sb.dma.WriteAt(sb.addr+off, p)
	sb.dma.End()
	return err
}

// retire stops the stream of an engine the driver disabled and keeps it
// until it quiesced, for CTRL's BUSY bit. It never waits.
func (d *Engine) retire(s *guestmem.Stream) {
	s.Stop()
	d.track(s)
}

// track keeps s for CTRL's BUSY bit until it quiesced.
func (d *Engine) track(s *guestmem.Stream) {
	d.drainMu.Lock()
	d.draining.Add(s)
	d.drainMu.Unlock()
}

// Busy reports whether the datapath may still DMA (CTRL_BUSY): a status
// block is set, a pair is enabled or draining, the backup ring is enabled,
// or an engine stopped by a disable or reset has not quiesced.
func (d *Engine) Busy() bool {
	if d.status.Load() != nil || d.backup.run.Load() != nil {
		return true
	}
	for _, p := range d.pairs {
		if p.Busy() {
			return true
		}
	}
	d.drainMu.Lock()
	defer d.drainMu.Unlock()
	return d.draining.Busy()
}

// New validates c, builds the datapath and starts its control goroutine.
// The link is up when a port is attached.
func New(c Config) (*Engine, error) {
	if c.Mem == nil {
		return nil, errors.New("ethring: Config.Mem is required")
	}
	if c.QueuePairs == 0 {
		c.QueuePairs = hw.PairMax
	}
	if c.QueuePairs < 1 || c.QueuePairs > hw.PairMax {
		return nil, fmt.Errorf("ethring: %d queue pairs: want 1..%d", c.QueuePairs, hw.PairMax)
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Interrupt == nil {
		c.Interrupt = func(int) {}
	}
	d := &Engine{mem: c.Mem, wire: c.Port, log: c.Log, clock: c.Clock, irq: c.Interrupt,
		kick: make(chan struct{}, 1), done: make(chan struct{}), rxDropNoBuf: c.RxDropNoBuf,
		xlat: c.Xlat, pri: c.PRI, trace: c.Trace}
	d.backup.init(d)
	d.busMaster.Store(true)
	d.link.Store(c.Port != nil)
	d.misc.init(c.Clock, func() { d.irq(hw.MiscVector) }, c.Trace, hw.MiscVector)
	for q := 0; q < c.QueuePairs; q++ {
		d.pairs = append(d.pairs, newPair(d, q))
	}
	d.wg.Add(1)
	go d.control()
	return d, nil
}

// QueuePairs is the number of usable pairs (REG_QP_MAX).
func (d *Engine) QueuePairs() int { return len(d.pairs) }

// Pair returns pair q, or nil if q is out of range.
func (d *Engine) Pair(q int) *Pair {
	if q < 0 || q >= len(d.pairs) {
		return nil
	}
	return d.pairs[q]
}

// SetEnabled sets CTRL.ENABLE: with it clear, no pair moves frames.
func (d *Engine) SetEnabled(on bool) {
	d.enabled.Store(on)
	d.kickPairs()
	d.rxWake()
}

// Enabled reports CTRL.ENABLE.
func (d *Engine) Enabled() bool { return d.enabled.Load() }

// SetBusMaster tells the datapath whether the function may master the bus
// (PCI Command register): without it, no pair moves frames. The default is
// true.
func (d *Engine) SetBusMaster(on bool) {
	d.busMaster.Store(on)
	d.kickPairs()
	d.rxWake()
}

func (d *Engine) kickPairs() {
	for _, p := range d.pairs {
		if in := p.inst.Load(); in != nil {
			in.wake()
		}
	}
}

// running reports whether frames may move at all.
func (d *Engine) running() bool { return d.enabled.Load() && d.busMaster.Load() }

// SetStatusAddr latches the status block address (STATUS_ADDR_HI written).
// The control goroutine checks it and writes the whole block; a bad address
// raises NPFNIC_DEVERR_BAD_STATUS_ADDR.
func (d *Engine) SetStatusAddr(addr uint64) {
	d.ctlMu.Lock()
	d.statusReq, d.statusDirty = addr, true
	d.ctlMu.Unlock()
	d.wakeControl()
}

// SetLink changes the link state reported in the status block and raises
// a misc event.
func (d *Engine) SetLink(up bool) {
	if d.link.Swap(up) == up {
		return
	}
	d.ctlMu.Lock()
	d.headerDirty = true
	d.ctlMu.Unlock()
	d.wakeControl()
}

// Link reports the link state.
func (d *Engine) Link() bool { return d.link.Load() }

// ArmMisc arms the misc vector for the next misc event (MISC_IRQ_ARM).
func (d *Engine) ArmMisc() { d.misc.arm() }

// DeviceError returns the device error (NPFNIC_DEVERR_*, 0 none).
func (d *Engine) DeviceError() uint32 {
	d.ctlMu.Lock()
	defer d.ctlMu.Unlock()
	return d.devErr
}

// Reset returns the datapath to its power-on state (CTRL.RESET,
// DEVICE_RESET, client gone): every pair disabled with its registers
// cleared, CTRL.ENABLE off, the status block address forgotten, device
// errors cleared, interrupts disarmed. It does not wait for guest memory.
func (d *Engine) Reset() {
	d.enabled.Store(false)
	d.ctlMu.Lock()
	d.ctlGen++
	d.statusDirty, d.headerDirty, d.tailRaise, d.headerQuiet = false, false, false, false
	d.statusAddr = 0
	d.devErr = 0
	if sb := d.status.Swap(nil); sb != nil {
		d.retire(sb.dma)
	}
	d.ctlMu.Unlock()
	for _, p := range d.pairs {
		p.reset()
	}
	d.backup.reset()
	d.misc.reset()
	d.rxWake()
}

// Close stops every goroutine and waits for them; a Receive waiting for RX
// buffers returns. Guest memory is not touched afterwards. The port is the
// NIC's, not the datapath's: it stays open.
func (d *Engine) Close() error {
	d.closeOnce.Do(func() {
		d.Reset()
		close(d.done)
		d.wg.Wait()
	})
	return nil
}

func (d *Engine) wakeControl() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// control applies status block and link changes, which touch guest
// memory and so stay off the register path.
func (d *Engine) control() {
	defer d.wg.Done()
	for {
		select {
		case <-d.kick:
		case <-d.done:
			return
		}
		d.ctlMu.Lock()
		gen := d.ctlGen
		addr, applyStatus := d.statusReq, d.statusDirty
		header, tailRaise, quiet := d.headerDirty, d.tailRaise, d.headerQuiet
		d.statusDirty, d.headerDirty, d.tailRaise, d.headerQuiet = false, false, false, false
		d.ctlMu.Unlock()
		switch {
		case applyStatus:
			d.applyStatus(gen, addr)
		case header:
			if d.writeHeader() && !tailRaise {
				d.misc.event()
			}
		case quiet:
			d.writeHeader()
		}
		if tailRaise {
			d.backup.raise()
		}
	}
}

// applyStatus makes addr the status block: it must be aligned and every
// byte writable. The block is written in full (header and every pair's
// current state), so the driver sees a consistent block from the start.
// The block replaced, if any, is retired.
func (d *Engine) applyStatus(gen, addr uint64) {
	sb := &statusBlock{addr: addr, dma: d.mem.NewStream("status")}
	sb.dma.Own(addr, hw.StatusBlockSize)
	fail := func(why error) {
		d.log.Warn("bad status block address", "addr", addr, "err", why)
		d.noteLate(why)
		d.ctlMu.Lock()
		current := d.ctlGen == gen
		if current {
			d.status.CompareAndSwap(sb, nil)
			d.devErr = hw.DevErrBadStatusAddr
		}
		d.ctlMu.Unlock()
		if current && addr%hw.StatusBlockAlign == 0 {
			d.headerError(addr)
		}
		d.retire(sb.dma)
		d.misc.event()
	}
	if addr%hw.StatusBlockAlign != 0 {
		fail(errors.New("not 64-byte aligned"))
		return
	}
	d.ctlMu.Lock()
	if d.ctlGen != gen {
		d.ctlMu.Unlock()
		sb.dma.Stop()
		return // reset meanwhile
	}
	if d.devErr == hw.DevErrBadStatusAddr {
		d.devErr = 0 // a good block now; other device errors stand
	}
	if old := d.status.Swap(sb); old != nil {
		d.retire(old.dma)
	}
	d.ctlMu.Unlock()
	if err := d.writeHeaderAt(sb); err != nil {
		fail(err)
		return
	}
	for _, p := range d.pairs {
		if err := p.publishAll(); err != nil {
			fail(err)
			return
		}
	}
	// Pairs the function does not offer still have their part of the block.
	var zero [hw.PairStatusSize]byte
	for q := len(d.pairs); q < hw.PairMax; q++ {
		if err := sb.write(uint64(hw.StatusPairOffset(q)), zero[:]); err != nil {
			fail(err)
			return
		}
	}
}

// headerError writes the header of a status block that went bad, so the
// driver sees the device error where it can still see it (the header may
// be writable where the rest is not). The block's own stream may be
// stopped already (the first failed write retires it), so the header goes
// through a stream of its own, which CTRL's BUSY covers until it
// quiesced.
func (d *Engine) headerError(addr uint64) {
	eb := &statusBlock{addr: addr, dma: d.mem.NewStream("status")}
	d.track(eb.dma)
	d.writeHeaderAt(eb)
	eb.dma.Stop()
}

// writeHeader rewrites the header at the current status block, if any.
func (d *Engine) writeHeader() bool {
	sb := d.status.Load()
	if sb == nil {
		return true // nothing to write, but the event still happened
	}
	if err := d.writeHeaderAt(sb); err != nil {
		d.statusFault(sb, err)
		return false
	}
	return true
}

func (d *Engine) writeHeaderAt(sb *statusBlock) error {
	var h [hw.StatusHeaderSize]byte
	if d.link.Load() {
		hw.StatusLink.Put(h[:], hw.LinkUp)
	}
	d.ctlMu.Lock()
	hw.StatusError.Put(h[:], d.devErr)
	d.ctlMu.Unlock()
	d.hdrMu.Lock()
	defer d.hdrMu.Unlock()
	hw.StatusBackupHead.Put(h[:], d.backup.head())
	hw.StatusBackupFull.Put(h[:], d.backup.full.Load())
	hw.StatusTailEvents.Put(h[:], d.backup.tailEvents.Load())
	return sb.write(0, h[:])
}

// publishHeader writes one header field of the status block, if there is
// one, with the value get returns under hdrMu: concurrent publishers of
// one field then write in the order they read, so the newest value lands
// last.
func (d *Engine) publishHeader(f hw.Le32, get func() uint32) {
	sb := d.status.Load()
	if sb == nil {
		return
	}
	var b [4]byte
	d.hdrMu.Lock()
	binary.LittleEndian.PutUint32(b[:], get())
	err := sb.write(uint64(f.Offset), b[:])
	d.hdrMu.Unlock()
	if err != nil {
		d.statusFault(sb, err)
	}
}

// statusFault handles a failed write to a status block that was good when
// latched (the driver unmapped it): the device forgets it and reports
// NPFNIC_DEVERR_BAD_STATUS_ADDR.
func (d *Engine) statusFault(sb *statusBlock, err error) {
	if !d.status.CompareAndSwap(sb, nil) {
		return
	}
	d.retire(sb.dma)
	d.log.Warn("status block write failed", "addr", sb.addr, "err", err)
	d.noteLate(err)
	d.ctlMu.Lock()
	d.devErr = hw.DevErrBadStatusAddr
	d.ctlMu.Unlock()
	d.headerError(sb.addr)
	d.misc.event()
}

// noteLate logs a write the late-DMA detector refused, with the
// detector's log: it is a device bug (hw.RegLateDMA counts them).
func (d *Engine) noteLate(err error) {
	var fe *guestmem.FaultError
	if errors.As(err, &fe) && fe.Reason == guestmem.FaultLate {
		d.log.Warn("late DMA refused", "err", err, "late_writes", d.mem.LateWrites(), "log", fmt.Sprint(d.mem.LateLog()))
	}
}

// PortDown implements port.Receiver: the backend closed, the link is down.
func (d *Engine) PortDown() { d.SetLink(false) }

// Receive implements port.Receiver: it delivers one frame from the port to
// the pair steer picks among the enabled ones. Tests and benchmarks may
// call it directly. Safe for concurrent use; it does not keep frame.
//
// When that pair has no RX buffer posted, Receive waits, as QEMU stops
// reading its tap while a NIC's can_receive is false: the frame stays with
// the caller and the wire's own queue holds what follows. Each such wait
// counts one rx_wire_stall. It ends when the driver posts RX buffers on
// any pair, when a pair is enabled, disabled or fails, when the datapath
// is disabled, reset or closed, or when bus mastering goes off; the frame
// is then steered again from scratch, so a frame for a pair that stopped
// is dropped (or goes to another pair) rather than waiting for a later
// enable. With Config.RxDropNoBuf the frame is dropped at once instead.
// As with QEMU's single tap queue, a pair without buffers holds back the
// frames behind it for every pair.
func (d *Engine) Receive(frame []byte) {
	// One parse serves steering and the checksum check, however often the
	// frame is steered.
	var h pkthdr.Headers
	_ = h.Parse(frame)
	hash := flowHash(frame, &h)
	var stalled *instance // the instance this frame already counted a stall on
	for {
		if !d.running() {
			d.rxDisabled.Add(1)
			return
		}
		p := d.steer(hash)
		if p == nil {
			d.rxNoQueue.Add(1)
			return
		}
		in, noBuf := p.receive(frame, &h, !d.rxDropNoBuf)
		if !noBuf || !d.awaitRxBuffers(in, in.rxStalled, &stalled) {
			return
		}
	}
}

// awaitRxBuffers waits while in found too few RX buffers and must still
// wait for the driver to post more (stillStalled), counting the wait as
// a stall of in once per frame (stalled); it reports false when the
// engine closes, the frame then dropped. It registers for the wake-up
// before it looks, so a doorbell between the look and the wait is not
// missed.
func (d *Engine) awaitRxBuffers(in *instance, stillStalled func() bool, stalled **instance) bool {
	wake := d.rxWaitChan()
	if !stillStalled() {
		return true
	}
	if *stalled != in {
		*stalled = in
		in.rxStall()
	}
	select {
	case <-wake:
		return true
	case <-d.done:
		d.rxDisabled.Add(1)
		return false
	}
}

// rxWaitChan returns a channel that rxWake closes.
func (d *Engine) rxWaitChan() <-chan struct{} {
	d.rxw.mu.Lock()
	defer d.rxw.mu.Unlock()
	if d.rxw.ch == nil {
		d.rxw.ch = make(chan struct{})
	}
	return d.rxw.ch
}

// rxWake wakes every Receive waiting for an RX buffer, to look again. It
// never blocks and costs a lock when nobody waits.
func (d *Engine) rxWake() {
	d.rxw.mu.Lock()
	if d.rxw.ch != nil {
		close(d.rxw.ch)
		d.rxw.ch = nil
	}
	d.rxw.mu.Unlock()
}

// steer picks the pair for a frame of flow hash hash (flowHash) among the
// enabled pairs (so a driver that enabled only some pairs gets every
// frame); frames without a flow go to the first.
func (d *Engine) steer(hash uint32) *Pair {
	n := 0
	for _, p := range d.pairs {
		if p.accepting() {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	k := int(hash % uint32(n))
	for _, p := range d.pairs {
		if p.accepting() {
			if k == 0 {
				return p
			}
			k--
		}
	}
	return nil
}

// Stats is a snapshot of the datapath's counters.
type Stats struct {
	Link            bool
	Enabled         bool
	DeviceError     uint32
	Pairs           []PairStats
	RxDropsNoQueue  uint64 // frames received while no pair was enabled
	RxDropsDisabled uint64 // frames received while CTRL.ENABLE or bus mastering was off
	MiscInterrupts  uint64

	BackupHead       uint32 // backup entries filled since the ring's enable
	BackupStored     uint64 // frames stored in the backup ring
	BackupFull       uint64 // faulting frames dropped: no backup buffer posted
	BackupDropsLarge uint64 // faulting frames dropped: larger than the backup buffer
	BackupEvents     uint64 // backup vector interrupts (entries and tail events)
	TailEvents       uint32 // RX_TAIL_IRQ events since reset

	// Receive offload from the host (ReceiveGSO).
	RxGSOFrames   uint64 // super-packets received (as chains or cut into segments)
	RxGSOChains   uint64 // of those, received whole as descriptor chains (large receive)
	RxGSOSegments uint64 // the segments the others were cut into
	RxGSOCsums    uint64 // frames whose partial checksum the device completed
	RxGSOBad      uint64 // unfinished frames dropped: a request the device does not carry out
}

// Stats returns the counters.
func (d *Engine) Stats() Stats {
	s := Stats{Link: d.link.Load(), Enabled: d.enabled.Load(), DeviceError: d.DeviceError(),
		RxDropsNoQueue: d.rxNoQueue.Load(), RxDropsDisabled: d.rxDisabled.Load(),
		MiscInterrupts: d.misc.fired.Load(),
		BackupHead:     d.backup.head(), BackupStored: d.backup.stored.Load(),
		BackupFull: uint64(d.backup.full.Load()), BackupDropsLarge: d.backup.drops.Load(),
		BackupEvents: d.backup.events.Load(), TailEvents: d.backup.tailEvents.Load(),
		RxGSOFrames: d.rxGSO.frames.Load(), RxGSOChains: d.rxGSO.chains.Load(), RxGSOSegments: d.rxGSO.segments.Load(),
		RxGSOCsums: d.rxGSO.csums.Load(), RxGSOBad: d.rxGSO.bad.Load()}
	for _, p := range d.pairs {
		s.Pairs = append(s.Pairs, p.Stats())
	}
	return s
}
