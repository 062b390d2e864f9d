// Package rdma is the RDMA engine of the NIC: the BlockRDMA registers,
// the command queue, the event queue and the RDMA status block of
// vdevice/hw's RDMA interface (rdma.go, RDMADoc), and the glue that runs
// the driver's queue pairs, completion queues and memory regions on an
// ibrc.Transport: rdma_rxe's user queues in guest memory (package rxeq) feed
// the engine's work requests and take its completions, and every byte of a
// memory region moves through address translation (package ats) in the
// region's PASID.
//
// What it owns: the register state of BlockRDMA; the objects the driver
// creates by command (QPs, CQs, MRs, GIDs, PDs implied by their numbers);
// the rxe rings' device-side indices; the ibrc.Transport that runs RC over
// RoCEv2 for them (replaced by RDMA_CTRL.RESET), and its counters
// (QUERY_STATS). It does not own the port, nor the page request interface:
// the NIC hands it the frames its Claim accepts (Receive), gives it a
// transmit side (Config.Port) and its PRI (Config.PRI), which the Ethernet
// datapath faults through too.
//
// Threading. ReadRegister and WriteRegister run on the vfio-user socket
// goroutine and never touch guest memory: they record what the driver wrote
// (a command tail, an EQ head, a doorbell's QPN, a CQ arm, ENABLE/RESET)
// and wake the engine's worker goroutine, which does every piece of work
// that touches the control queues or the rxe rings: it runs commands in
// order, fetches send queues into the ibrc engine, moves completions into
// the rxe CQs, retires ring slots and writes events and the status block.
// Received frames are processed on the goroutine that calls Receive (the
// port Mux's reader) inside the ibrc engine, which takes the next receive
// entry from the QP's rxe receive queue when a message needs one
// (ibrc.RecvSource: a receive queue has no doorbell); the ibrc engine's
// timers run on the clock's goroutines; a page response reaches the ibrc
// engine from a goroutine that waits for that one group (pager.go). A write
// of RDMA_RECV_FAULT reaches the running transport as an atomic, and an
// access to RDMA_MSG_ALARM takes only the transport's message alarm lock, a
// leaf: the register block waits for no ibrc QP. What the ibrc engine sends
// goes through the transmitter (transmit.go): a bounded queue and the one
// goroutine that calls the port's Send, which blocks while the peer does
// not read. Nothing else waits for the wire, so the port's reader keeps
// reading (two NICs that READ from each other wedged both readers in Send,
// Ethernet included). The transmitter paces the ibrc engine
// (ibrc.PacedPort): the READ responses and requests that did not fit are
// built, reading guest memory, on its goroutine (PortReady), not on the
// port's reader; RESET drops the old transport's queued frames. The worker
// never holds the ibrc engine's locks while it waits for anything; the only
// thing it waits for is an object's stream to quiesce (DESTROY_QP,
// DESTROY_CQ, DEREG_MR), whose units are single copies. Locks: mu (register
// state) before streamMu, the transmitter's mu and the ibrc engine's
// message alarm lock (a leaf); the transmitter's readyMu before the ibrc
// engine's locks (its txMu, then an ibrc QP's lock) before a QP's rqMu; the
// ibrc engine hands frames to the transmitter (its mu) without its QPs'
// locks; nothing is held across guest memory but the ibrc engine's locks,
// readyMu and rqMu (a ring or region copy). The ibrc engine locks per QP
// (ibrc's Locking): the receive path placing one QP's message does not wait
// for another QP's copies, nor for the transmitter building a third's READ
// responses.
//
// Trust. The driver is trusted as far as the register contract goes, and
// no further: every address, size and handle of a command is checked, and a
// command that names something bad fails with its status. User space is not
// trusted at all: the rxe rings are user-writable, so the rings' geometry is
// the one the driver registered, every index is masked, every entry is
// parsed from one copy (rxeq), and every key, PD, range and access right is
// checked against the memory regions before a byte moves (ibrc). A bad
// entry fails its own QP only. A region's addresses are a process's: they
// are only ever translated (with ATS disabled an access fails rather than
// pass them through as IOVAs), and without bus mastering nothing moves.
//
// Page faults (interface 2.5, on-demand paging; pager.go). A region's page
// that does not translate is an ibrc fault: the RC engine applies its
// policy (RNR NAK or drop at the responder, RDMA_RECV_FAULT; a stalled
// send queue or a dropped READ response at the requester) and asks for
// the page; with Config.PRI the request is a page request group through
// the function's PRI, answered by the driver's page response. RESET gives
// the new transport a pager of its own and stops the old one's waiters.
//
// Quiesce. Everything that touches guest memory is a guestmem.Stream: the
// control queues and status block of an ENABLE ("rdma"), each QP's rings
// ("rdma-qpN"), each CQ's ring ("rdma-cqN") and each memory region's data
// ("rdma-mrK", the ats Handles' copies go through it). Every access is a
// Begin/End unit. DESTROY_QP, DESTROY_CQ and DEREG_MR stop the object's
// stream and complete only once it quiesced; RESET and disabling stop
// streams from the register path without waiting; RDMA_CTRL.BUSY reads set
// while the engine is enabled, an object lives, or a stopped stream has not
// quiesced. Interrupts fire only inside a unit of the running control
// stream, so none follows the quiesce.
package rdma

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/pkthdr"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// Config sets up an Engine.
type Config struct {
	Mem  *guestmem.Memory // guest memory; required
	Xlat *ats.Context     // the function's address translation; required
	// Port is the engine's transmit side (a port.Mux Endpoint); nil drops
	// what it sends.
	Port port.Sender
	MAC  [6]byte // the port's Ethernet address
	// Interrupt fires an MSI-X vector (EQ_VECTOR). It must not block; nil
	// drops interrupts.
	Interrupt func(vector int)
	Clock     clock.Clock // the RC timers; nil: real time
	Log       *slog.Logger
	// PRI raises the page requests of memory regions' faults (on-demand
	// paging, pager.go): the NIC's page request interface. Without it,
	// Pager resolves them.
	PRI PageRequests
	// Pager resolves translation faults of memory regions when PRI is nil
	// (tests); nil too: a fault is retried after a pause and, for a
	// receive, answered with an RNR NAK meanwhile.
	Pager ibrc.PageRequester
	// MinAckTimeout is the RC transport's floor on the local ACK timer
	// (ibrc.Config.MinAckTimeout); 0: none.
	MinAckTimeout time.Duration
	// Trace records the RC packets the engine sends and receives, its
	// completions and events, and the RC transport's faults and their
	// resumes (ibrc.Config.Trace); nil records nothing.
	Trace *trace.Recorder
	// RxLanes steers received frames to that many goroutines by
	// destination QP (rxlanes.go), at most 4; 0 or 1 handles them on the
	// port's reader. Off by default: on a 2-CPU host whose cores are
	// shared the hand-offs cost more than the lanes gain (docs/rdma.md).
	RxLanes int
	// TxDirect sends a frame on the goroutine that built it when the
	// port takes it without waiting and nothing is queued ahead of it
	// (transmit.go), rather than waking the transmit goroutine for it.
	// Off by default: with a core to spare the transmit goroutine's copy
	// runs beside the next packet's building, which gains more than the
	// wake-ups cost (docs/rdma.md).
	TxDirect bool
}

// Stats counts what the engine did.
type Stats struct {
	Commands    uint64 // commands run
	Events      uint64 // events written
	Doorbells   uint64 // SQ_DOORBELL writes for live QPs
	CQEs        uint64 // completions written into rxe CQs
	BadWQEs     uint64 // malformed send or receive entries completed with an error
	RC          ibrc.Stats
	RxFrames    uint64 // frames handed to the RC engine
	RxDisabled  uint64 // frames dropped without bus mastering
	RingErrors  uint64 // rxe ring accesses that failed (QP or CQ in error)
	LateRefused uint64 // MR accesses refused because the region was going away
	Loopback    uint64 // frames to the port's own addresses, received without the wire
	TxDirect    uint64 // frames sent on the transport's goroutine, not the transmit goroutine's
}

// Engine is the RDMA engine. Create it with New.
type Engine struct {
	cfg  Config
	log  *slog.Logger
	irq  func(int)
	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	rc        atomic.Pointer[ibrc.Transport] // the transport of the current objects (replaced under mu)
	pager     atomic.Pointer[priPager]       // rc's page requester, with Config.PRI
	tasks     tasks                          // the pagers' goroutines
	busMaster atomic.Bool                    // PCI Command.BME: without it, no DMA
	prefault  atomic.Uint32                  // RDMA_PREFAULT: pages a fault asks for at most
	port      atomic.Pointer[port.Sender]    // the transmit side (SetPort)

	// mu guards the register state and what the register path hands the
	// worker. Never held across guest memory.
	mu       sync.Mutex
	regs     [(hw.RegRDMAPrefault-hw.RegRDMACtrl)/4 + 1]uint32
	enabled  bool
	inst     *instance // the latched control queues; nil while disabled
	gen      uint64    // bumped by RESET: the worker's objects are void
	errCode  uint32
	errInfo  uint32
	cmdTail  uint32
	eqHead   uint32
	eqArm    bool
	bells    map[uint32]struct{} // SQ_DOORBELL QPNs not yet served
	cqArms   [hw.RDMAMaxCQ]uint8 // CQ_ARM requests not yet applied: armAny, armSolicited
	liveQP   map[uint32]bool     // QPNs of live QPs (doorbells for others are ignored)
	liveCQ   [hw.RDMAMaxCQ]bool
	resetGen uint64 // the gen the worker has torn down to

	// streamMu guards the streams of live objects and the stopped ones
	// still draining.
	streamMu sync.Mutex
	streams  map[*guestmem.Stream]struct{}
	draining guestmem.Draining

	gids atomic.Pointer[[][4]byte] // IPv4 addresses of the GID table, for Claim

	// asyncMu guards async events raised by the ibrc engine's callbacks.
	asyncMu sync.Mutex
	async   []ibrc.Event

	w  worker      // the worker goroutine's state
	tx transmitter // the RC transport's transmit path (transmit.go)
	rx rxLanes     // the receive lanes (rxlanes.go)

	testRegMR func(*mrMem) // tests: sees each region's Memory (on the worker)
	// testBeforeDrain runs on the worker after a pass took the register
	// path's requests and before it drains completions (tests: a CQ_ARM
	// written in between).
	testBeforeDrain atomic.Pointer[func()]

	stats struct {
		commands, events, doorbells, cqes, badWQEs, rxFrames, rxDisabled, ringErrors, lateRefused, loopback, txDirect atomic.Uint64
	}
}

const (
	armAny       = 1
	armSolicited = 2
)

// instance is one ENABLE's control queues.
type instance struct {
	dma      *guestmem.Stream
	status   uint64
	cmdq     uint64
	cmdqSize uint32
	eq       uint64
	eqSize   uint32
	vector   int
}

// New validates c and starts the engine's worker.
func New(c Config) (*Engine, error) {
	e, err := newEngine(c)
	if err != nil {
		return nil, err
	}
	e.wg.Add(1)
	go e.run()
	go e.tx.run() // not waited for: its Send may block until the port closes
	e.startLanes()
	return e, nil
}

// newEngine builds the engine without its worker (fuzz targets drive the
// worker's passes themselves).
func newEngine(c Config) (*Engine, error) {
	if c.Mem == nil || c.Xlat == nil {
		return nil, errors.New("rdma: Config.Mem and Config.Xlat are required")
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	irq := c.Interrupt
	if irq == nil {
		irq = func(int) {}
	}
	e := &Engine{cfg: c, log: c.Log, irq: irq, kick: make(chan struct{}, 1), done: make(chan struct{}),
		bells: make(map[uint32]struct{}), liveQP: make(map[uint32]bool), streams: make(map[*guestmem.Stream]struct{})}
	e.regs[(hw.RegEQVector-hw.RegRDMACtrl)/4] = hw.RDMAVector
	e.regs[(hw.RegRDMAPrefault-hw.RegRDMACtrl)/4] = 1
	e.prefault.Store(1)
	e.gids.Store(&[][4]byte{})
	e.busMaster.Store(true)
	if c.Port != nil {
		e.SetPort(c.Port)
	}
	e.w.init(e)
	e.tx.init(e)
	e.tasks.init()
	e.rc.Store(e.newRCLocked()) // e is not shared yet
	return e, nil
}

// SetPort sets the transmit side (the NIC builds the engine before the
// port's Mux hands it an Endpoint). Frames sent without one are dropped.
func (e *Engine) SetPort(p port.Sender) { e.port.Store(&p) }

// errNoPort is a frame sent before SetPort.
var errNoPort = errors.New("rdma: no port")

// newRCLocked builds a transport for a fresh set of objects, with the
// receive-fault policy of RDMA_RECV_FAULT and, with Config.PRI, a pager of
// its own (the previous transport's stops). The caller stores it in rc
// before releasing mu, so that a write of RDMA_RECV_FAULT reaches either
// this transport or the register it reads. Caller holds mu.
func (e *Engine) newRCLocked() *ibrc.Transport {
	send := &txPort{t: &e.tx}
	e.tx.purge() // the frames of the transport this one replaces
	pager := e.cfg.Pager
	if e.cfg.PRI != nil {
		p := newPriPager(e, e.cfg.PRI)
		if old := e.pager.Swap(p); old != nil {
			old.close()
		}
		pager = p
	}
	rc := ibrc.New(ibrc.Config{Port: send, Clock: e.cfg.Clock, MAC: e.cfg.MAC, Pager: pager,
		RecvFaultPolicy: recvFaultPolicy(*e.reg(hw.RegRDMARecvFault)), OnEvent: e.onRCEvent, Trace: e.cfg.Trace,
		MinAckTimeout: e.cfg.MinAckTimeout})
	send.rc = rc
	return rc
}

// recvFaultPolicy is the RC engine's policy for RDMA_RECV_FAULT's value.
func recvFaultPolicy(v uint32) ibrc.FaultPolicy {
	switch v {
	case hw.RDMARecvFaultDrop:
		return ibrc.FaultDrop
	case hw.RDMARecvFaultHold:
		return ibrc.FaultHold
	}
	return ibrc.FaultRNRNak
}

// onRCEvent queues an ibrc engine's asynchronous event for the worker.
func (e *Engine) onRCEvent(ev ibrc.Event) {
	e.asyncMu.Lock()
	if len(e.async) < 4*hw.RDMAMaxQP {
		e.async = append(e.async, ev)
	}
	e.asyncMu.Unlock()
	e.wake()
}

func (e *Engine) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

func (e *Engine) reg(off uint32) *uint32 { return &e.regs[(off-hw.RegRDMACtrl)/4] }

// Blocks implements hw.RegisterBlock.
func (e *Engine) Blocks() []hw.Block { return []hw.Block{hw.BlockRDMA} }

// ReadRegister implements hw.RegisterBlock for the RDMA block. It does not
// touch guest memory.
func (e *Engine) ReadRegister(r hw.Register, _ int) (uint32, bool) {
	off := r.Offset
	e.mu.Lock()
	defer e.mu.Unlock()
	switch off {
	case hw.RegRDMACtrl:
		var v uint32
		if e.enabled {
			v |= hw.RDMACtrlEnable
		}
		if e.busyLocked() {
			v |= hw.RDMACtrlBusy
		}
		return v, true
	case hw.RegRDMAError:
		return e.errCode, true
	case hw.RegRDMAMsgAlarm:
		return uint32(min(e.rc.Load().MessageAlarm(), math.MaxUint32)), true
	}
	return *e.reg(off), true
}

// WriteRegister implements hw.RegisterBlock for the RDMA block. It records
// the value and wakes the worker; it never waits for guest memory.
func (e *Engine) WriteRegister(r hw.Register, _ int, v uint32) bool {
	off := r.Offset
	e.mu.Lock()
	switch off {
	case hw.RegRDMACtrl:
		if v&hw.RDMACtrlReset != 0 {
			e.resetLocked(false)
		} else {
			e.setEnableLocked(v&hw.RDMACtrlEnable != 0)
		}
	case hw.RegCmdqTail:
		e.cmdTail = v
	case hw.RegEQHead:
		e.eqHead = v
	case hw.RegEQArm:
		if v&1 != 0 {
			e.eqArm = true
		}
	case hw.RegSQDoorbell:
		if e.liveQP[v] {
			e.bells[v] = struct{}{}
			e.stats.doorbells.Add(1)
		}
	case hw.RegCQArm:
		cqn := v &^ hw.RDMACQArmSolicited
		if cqn < hw.RDMAMaxCQ && e.liveCQ[cqn] {
			a := uint8(armAny)
			if v&hw.RDMACQArmSolicited != 0 {
				a = armSolicited
			}
			// An arm for any completion covers a solicited-only one.
			if e.cqArms[cqn] != armAny {
				e.cqArms[cqn] = a
			}
		}
	case hw.RegRDMARecvFault:
		// Bits 1:0 are the policy (3, no policy, reads back RNR); the
		// rest is reserved and reads 0. The running transport applies it
		// from its next fault; one RESET builds reads the register.
		if v &= hw.RDMARecvFaultMask; v > hw.RDMARecvFaultHold {
			v = hw.RDMARecvFaultRNR
		}
		*e.reg(off) = v
		e.rc.Load().SetRecvFaultPolicy(recvFaultPolicy(v))
	case hw.RegRDMAMsgAlarm:
		// The running transport counts down; the one RESET builds starts
		// without an alarm.
		e.rc.Load().SetMessageAlarm(uint64(v))
	case hw.RegRDMAPrefault:
		// The pager reads it at each fault, without mu.
		v = min(max(v, 1), hw.RDMAMaxPrefault)
		*e.reg(off) = v
		e.prefault.Store(v)
	default:
		*e.reg(off) = v
	}
	e.mu.Unlock()
	e.wake()
	return true
}

// setEnableLocked latches the control queues (ENABLE set) or stops them.
// A register set the device refuses leaves the engine disabled with
// RDMA_ERROR saying why. Caller holds mu.
func (e *Engine) setEnableLocked(on bool) {
	if on == e.enabled {
		return
	}
	if !on {
		e.enabled = false
		e.stopInstanceLocked()
		return
	}
	if e.errCode != 0 {
		return // cleared by RESET only
	}
	lohi := func(lo, hi uint32) uint64 { return uint64(*e.reg(hi))<<32 | uint64(*e.reg(lo)) }
	in := &instance{
		status: lohi(hw.RegRDMAStatusLo, hw.RegRDMAStatusHi),
		cmdq:   lohi(hw.RegCmdqBaseLo, hw.RegCmdqBaseHi), cmdqSize: *e.reg(hw.RegCmdqSize),
		eq: lohi(hw.RegEQBaseLo, hw.RegEQBaseHi), eqSize: *e.reg(hw.RegEQSize),
		vector: int(*e.reg(hw.RegEQVector)),
	}
	switch {
	case in.status%hw.RDMAStatusAlign != 0 || in.status > ^uint64(0)-hw.RDMAStatusSize:
		e.errCode, e.errInfo = hw.RDMAErrBadStatusAddr, uint32(in.status)
	case !queueSizeOK(in.cmdqSize) || in.cmdq%hw.RDMACmdSize != 0 || wraps(in.cmdq, uint64(in.cmdqSize)*hw.RDMACmdSize):
		e.errCode, e.errInfo = hw.RDMAErrBadCmdq, in.cmdqSize
	case !queueSizeOK(in.eqSize) || in.eq%hw.RDMAEventSize != 0 || wraps(in.eq, uint64(in.eqSize)*hw.RDMAEventSize):
		e.errCode, e.errInfo = hw.RDMAErrBadEQ, in.eqSize
	}
	if e.errCode != 0 {
		return
	}
	in.dma = e.cfg.Mem.NewStream("rdma")
	in.dma.Own(in.status, hw.RDMAStatusSize)
	in.dma.Own(in.cmdq, uint64(in.cmdqSize)*hw.RDMACmdSize)
	in.dma.Own(in.eq, uint64(in.eqSize)*hw.RDMAEventSize)
	e.addStream(in.dma)
	e.inst = in
	e.enabled = true
	e.cmdTail, e.eqHead, e.eqArm = 0, 0, false
}

func queueSizeOK(n uint32) bool {
	return n >= hw.RDMAQueueSizeMin && n <= hw.RDMAQueueSizeMax && n&(n-1) == 0
}

// wraps reports whether [base, base+size) passes the end of the address
// space (compared without adding).
func wraps(base, size uint64) bool { return size != 0 && size-1 > ^base }

// stopInstanceLocked stops the control queues' DMA without waiting.
func (e *Engine) stopInstanceLocked() {
	if e.inst != nil {
		e.retire(e.inst.dma)
		e.inst = nil
	}
}

// resetLocked is RDMA_CTRL.RESET (and a function reset with regs): the
// engine is disabled, every object's DMA is stopped now, and the worker
// destroys the objects; errors are cleared. Caller holds mu.
func (e *Engine) resetLocked(regs bool) {
	e.enabled = false
	e.stopInstanceLocked()
	e.gen++
	e.errCode, e.errInfo = 0, 0
	e.cmdTail, e.eqHead, e.eqArm = 0, 0, false
	clear(e.bells)
	clear(e.liveQP)
	e.liveCQ = [hw.RDMAMaxCQ]bool{}
	e.cqArms = [hw.RDMAMaxCQ]uint8{}
	if regs {
		e.regs = [len(e.regs)]uint32{}
		*e.reg(hw.RegEQVector) = hw.RDMAVector
		*e.reg(hw.RegRDMAPrefault) = 1
		e.prefault.Store(1)
	}
	e.streamMu.Lock()
	for s := range e.streams {
		s.Stop()
		e.draining.Add(s)
	}
	clear(e.streams)
	e.streamMu.Unlock()
	e.gids.Store(&[][4]byte{})
}

// Reset returns the engine to its power-on state (DEVICE_RESET, client
// gone): registers cleared and every object destroyed. It does not wait
// for guest memory; Busy reports when the engine has quiesced.
func (e *Engine) Reset() {
	e.mu.Lock()
	e.resetLocked(true)
	e.mu.Unlock()
	e.wake()
}

// SetBusMaster tells the engine whether the function may master the bus
// (PCI Command register; the default is true). Without it the worker
// leaves the queues alone, received frames are dropped, and a memory
// region access (a retransmission's) is refused as a fault, which the RC
// engine retries: nothing fails because the driver toggled the bit.
func (e *Engine) SetBusMaster(on bool) {
	e.busMaster.Store(on)
	e.wake()
}

// Busy reports whether the engine may still DMA (RDMA_CTRL.BUSY).
func (e *Engine) Busy() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.busyLocked()
}

func (e *Engine) busyLocked() bool {
	if e.enabled || e.resetGen != e.gen {
		return true
	}
	e.streamMu.Lock()
	defer e.streamMu.Unlock()
	return len(e.streams) > 0 || e.draining.Busy()
}

// addStream registers a live object's stream.
func (e *Engine) addStream(s *guestmem.Stream) {
	e.streamMu.Lock()
	e.streams[s] = struct{}{}
	e.streamMu.Unlock()
}

// retire stops s and keeps it for BUSY until it quiesced.
func (e *Engine) retire(s *guestmem.Stream) {
	s.Stop()
	e.streamMu.Lock()
	if _, ok := e.streams[s]; ok {
		delete(e.streams, s)
		e.draining.Add(s)
	}
	e.streamMu.Unlock()
}

// Close stops the worker and destroys every object. Guest memory is not
// touched afterwards. It does not wait for a frame the port's Send is
// still blocked on: the transmit goroutine ends when the port lets go of
// it (close the port after the engines).
func (e *Engine) Close() error {
	select {
	case <-e.done:
		return nil
	default:
	}
	e.Reset()
	close(e.done)
	e.wg.Wait()
	e.tx.close()
	e.w.teardown()
	if p := e.pager.Load(); p != nil {
		p.close()
	}
	e.tasks.closeAndWait()
	return nil
}

// Claim reports whether a received frame is the RC engine's: RoCEv2 (UDP
// to port 4791) to one of the IPv4 addresses of the GID table. It runs on
// the port's reader for every frame and does not allocate.
func (e *Engine) Claim(frame []byte) bool {
	var h pkthdr.Headers
	if h.Parse(frame) != nil || h.IPVersion != 4 || !h.IsUDPDstPort(pkthdr.UDPPortRoCEv2) {
		return false
	}
	a := h.Addrs(frame)
	if len(a) != 8 {
		return false
	}
	dst := [4]byte(a[4:8])
	for _, ip := range *e.gids.Load() {
		if ip == dst {
			return true
		}
	}
	return false
}

// Receive implements port.Receiver: the frame goes to the RC engine (its
// QPs live until RESET, whether the control queues are enabled or not),
// unless bus mastering is off. It never blocks: a QP without a receive
// entry answers with an RNR NAK.
func (e *Engine) Receive(frame []byte) {
	if !e.busMaster.Load() {
		e.stats.rxDisabled.Add(1)
		return
	}
	e.stats.rxFrames.Add(1)
	if e.cfg.Trace.On() {
		traceRC(e.cfg.Trace, trace.RCRx, frame)
	}
	_ = e.rc.Load().HandleFrame(frame)
}

// traceRC records an RC packet of frame.
func traceRC(tr *trace.Recorder, k trace.Kind, frame []byte) {
	var h pkthdr.Headers
	if h.Parse(frame) != nil {
		return
	}
	if off, ok := h.BTHOffset(len(frame)); ok {
		tr.RCPacket(k, frame, off)
	}
}

// PortDown implements port.Receiver. RC recovers from a link that comes
// back by its retransmissions; a link gone for good runs the QPs into
// their retry limits.
func (e *Engine) PortDown() {}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	return Stats{
		Commands: e.stats.commands.Load(), Events: e.stats.events.Load(), Doorbells: e.stats.doorbells.Load(),
		CQEs: e.stats.cqes.Load(), BadWQEs: e.stats.badWQEs.Load(), RC: e.rc.Load().Stats(),
		RxFrames: e.stats.rxFrames.Load(), RxDisabled: e.stats.rxDisabled.Load(),
		RingErrors: e.stats.ringErrors.Load(), LateRefused: e.stats.lateRefused.Load(), Loopback: e.stats.loopback.Load(),
		TxDirect: e.stats.txDirect.Load(),
	}
}

// ipv4OfGID returns the IPv4 address of an IPv4-mapped GID.
func ipv4OfGID(g [16]byte) ([4]byte, bool) { return rocev2.IPv4FromGID(g) }

var le = binary.LittleEndian
