// Package ibrc owns the InfiniBand Reliable Connected (RC) transport of the
// NIC, carried over RoCEv2: queue pairs and their state machine, the
// requester (SEND, RDMA WRITE, RDMA READ; segmentation by path MTU; 24-bit
// PSNs; local ACK timeout and go-back-N retransmission; RNR NAK back-off
// with the IB timer table), the responder (expected PSN, duplicates,
// coalesced ACKs, NAKs, MSN, R_Key checks, READ responses), completion
// queues, and a verbs-like API to drive them.
//
// Network page faults (seed 000 §4). Every access to a memory region goes
// through the Memory interface, which may return a translation fault. When
// the responder faults while placing an incoming SEND or RDMA WRITE, it
// sends an RNR NAK carrying the QP's min_rnr_timer for that PSN, raises a
// page request through the PageRequester, and drops what follows until the
// requester retransmits from that PSN after the timer; by then the page is
// normally present and the retransmission is accepted. With
// Config.RecvFaultPolicy = FaultDrop the responder drops instead and the
// requester recovers only by its local ACK timeout (the baseline of seed
// 000 Figure 10 and seed 004 Figure 11). A requester that faults gathering
// its own payload stalls the send queue until the page arrives; one that
// faults scattering an RDMA READ response drops responses until the page
// arrives and then re-requests the rest of the READ, since RC cannot stop a
// READ responder.
//
// Seams: the engine sends whole Ethernet frames through a Port and is fed
// received frames with HandleFrame; it takes its timers from a clock.Clock
// (clock.Virtual makes tests and experiments deterministic and fast).
// Every callback it makes (port sends, page requests, CQ notifications,
// async events) happens outside its locks, on a goroutine that holds none
// of them but txMu (below), in the order they were queued, except that
// frames a full port refused go out after later callbacks. A callback may
// call back into the engine.
//
// Threading and the transmit path (transmit.go). The engine has no
// goroutine: it runs on its callers' (HandleFrame's, the verbs', its
// timers', page responses'), and whoever releases a QP's lock hands what
// was built meanwhile to the Port. None of them waits for the wire, or a
// port reader that answers a READ would wait for its peer's reader doing
// the same: a Port that cannot take a frame now returns ErrPortFull, and
// the engine holds its output until PortReady. What it holds is bounded:
// packets that carry data (READ responses, requests) are built only while
// the transmit queue has room, a READ from a cursor a burst at a time (so
// a 2 GiB READ costs its responder a cursor, and no more for its
// duplicates), and ACKs and NAKs past the queue's bound are dropped, as a
// lost frame would be. With a PacedPort, what waited for room is built
// only on the port's transmit goroutine (PortReady), so a port reader
// builds at most a burst for a READ request before it reads on.
//
// Locking (issues 23 and 28). As Linux rdma_rxe runs each QP's
// requester, responder and completer as tasks of that QP, each QP here
// has a lock of its own that its roles run under; no lock is taken by
// every QP's work for longer than a table lookup or a queue append. So
// work on one QP, its copies included, does not wait for another QP's
// copies: a port reader placing a SEND for QP B goes on while QP A's
// responder waits for a slow page of guest memory. Nor is a QP's own
// lock held across the copies of SEND and RDMA WRITE data, the bulk of
// what the engine copies: the requester takes a packet's PSN and place
// in its message under the lock and gathers its payload and ICRC with
// the lock let go, one builder per QP at a time so that packets go out
// in PSN order (buildData); the responder checks a request under the
// lock, places its data with the lock let go while the QP's later
// requests wait for it, and moves its state on, ACK and completion
// included, after (placeUnlocked). Meanwhile the QP's verbs, its
// completer and its other role go on. READ responses, atomics, UC and UD
// still copy under the QP's lock, one packet's data at a time. The one
// exception to all this is by design: packets held back for want of
// transmit room are built in turns, one QP after another, on the
// goroutine that transmits (transmit.go). The locks, in the order they
// may be taken:
//
//   - txMu: held by the one goroutine handing frames to the port and
//     running callbacks (flush, PortReady). flush only tries it (a
//     goroutine that finds it taken leaves its output to the holder), and
//     PortReady, which waits for it, is never called under another lock
//     of the engine, so nothing that holds a lock below waits for it.
//   - QP.mu: a QP's state: its queues, requester, completer, responder,
//     timers and in-flight page requests. The verbs, HandleFrame, the
//     QP's timers and its page requests' done take it; so does the
//     transmit pump, under txMu, for the QP whose turn it is, but only if
//     it is free: a QP busy elsewhere gets its turn back from its holder
//     (QP.turnDue). No goroutine holds two QPs' locks.
//   - atomicMu: one atomic's read-modify-write, under the executing QP's
//     lock, around that one region's two accesses (MR.use below).
//   - MR.use, read side: held across one access to a region's Memory.
//     Deregister takes the write side after taking the key out of the
//     table, so it waits for the accesses in flight, and an access that
//     starts after it finds the region dead: once Deregister returns,
//     nothing touches the region's memory (the quiesce contract a device
//     builds DEREG_MR on). A QP's roles take it, with the QP's lock or
//     with it let go for the copy (buildData, placeUnlocked); Deregister
//     holds no other lock of the engine while it waits.
//   - Leaves, held for a few instructions, never across memory or a
//     callback; no other lock of the engine is taken while one is held:
//     Transport.mu (an RWMutex over the tables: QPs by number, MRs by key,
//     the port's addresses; a received frame's lookup takes its read
//     side), a CQ's mu (its completions and notification), txqMu (the
//     transmit queue, queued callbacks, the QPs waiting for a turn,
//     portFull, txQueued; under it, a PacedPort's SendFrame, which only
//     queues), the message alarm's mu, decMu (the spare frame decoders)
//     and frameMu (the spare frame buffers).
//
// Counters (Stats), the receive-fault policy and FrameLeft's count are
// atomics: nothing waits for a lock to count or to read them, and a
// PacedPort's goroutine calls FrameLeft holding none. The local ACK timer
// is its QP's: armed, stopped and run under the QP's lock, where it
// compares the QP's last request frame (its place in txQueued, numbered
// under txqMu) with FrameLeft's count. Config does not change after New
// but for IPv4 (under mu), so its other fields, MinAckTimeout among them,
// are read without a lock. Destroy takes its QP out of the turns (txWait,
// under txqMu) while it holds the QP's lock, and a pump that took the QP
// before finds it dead. qplock_test.go holds the engine to all this (a QP
// stuck inside a copy while another completes its traffic, or is given
// its turns; Deregister waiting for the copy in flight; QPs in parallel
// under -race, on a plain port and on a PacedPort with its own
// goroutine), and BenchmarkParallelQPs measures it.
//
// FuzzHandleFrame builds a whole engine, memory region and connected QP
// for every input, sends its own READ and SEND, and then runs the QP's
// timers to the end of its retries, decoding every frame it sent: slower
// per input than the other fuzz targets, because a fresh victim per input
// is what keeps a crash reproducible from its input alone (make fuzz
// prints the rates).
package ibrc

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// FaultPolicy is how the responder recovers from a receive fault.
type FaultPolicy uint8

// Receive fault policies.
const (
	// FaultRNRNak sends an RNR NAK with the QP's min_rnr_timer.
	FaultRNRNak FaultPolicy = iota
	// FaultDrop drops the packet (and what follows, without a
	// PSN-sequence-error NAK), leaving recovery to the requester's
	// local ACK timeout.
	FaultDrop
	// FaultHold keeps the faulting packet, and those that follow it (up
	// to a backlog of maxBacklog), in the device until the page arrives,
	// then places them and acknowledges: the requester sees a late ACK,
	// neither an RNR NAK nor a drop. For peers that cannot take an RNR
	// NAK: tgt's iSER target accepts its connections with an RNR retry
	// count of 0, so the initiator's QP fails on the first RNR NAK.
	FaultHold
)

func (p FaultPolicy) String() string {
	switch p {
	case FaultDrop:
		return "drop"
	case FaultHold:
		return "hold"
	}
	return "rnr"
}

// Config configures a Transport.
type Config struct {
	Port  Port        // where frames go; required
	Clock clock.Clock // nil: the real clock
	MAC   [6]byte     // the port's Ethernet address
	IPv4  [4]byte     // the port's address; its GID is ::ffff:IPv4
	// Pager resolves translation faults; nil: faults are handled but not
	// reported (the Memory is expected to resolve them by itself).
	Pager PageRequester
	// RecvFaultPolicy is the responder's policy at start
	// (SetRecvFaultPolicy changes it).
	RecvFaultPolicy FaultPolicy
	// MaxUnackedPSNs bounds the PSNs in flight per QP (default 128).
	MaxUnackedPSNs int
	// AckEvery makes the requester set AckReq on every n-th PSN within
	// long messages, besides the last packet of each message (default 16).
	AckEvery int
	// MinAckTimeout is the shortest the local ACK timer runs, whatever
	// timeout a QP asks for (0: the QP's, as the IBA table gives it). A
	// peer whose CPU is emulated on a loaded host stalls for seconds, and
	// unmodified programs that cannot set the timeout (ibv_rc_pingpong's
	// is 67 ms) then spend their seven retries inside one stall and end
	// with RETRY_EXC_ERR against a peer that is alive.
	MinAckTimeout time.Duration
	// OnEvent receives asynchronous events.
	OnEvent func(Event)
	// Trace records the RC side of network page faults (package trace):
	// a Fault on TrackRC when an access raises a page request, and an
	// RCResume when the responder goes past a receive fault; nil records
	// nothing.
	Trace *trace.Recorder
}

// EventType is the kind of an asynchronous event.
type EventType uint8

// Event types.
const (
	EventCommEstablished EventType = iota
	EventSQDrained
	EventCQError
	// EventMessageAlarm: the requests SetMessageAlarm counted down were
	// executed.
	EventMessageAlarm
)

// Event is an asynchronous event.
type Event struct {
	Type EventType
	QPN  uint32
	CQ   *CQ
}

// Stats counts what an engine did. Requester counters are about packets
// this engine sent as requester; responder counters about requests it
// received.
type Stats struct {
	TxFrames, RxFrames uint64
	RxMalformed        uint64 // failed decoding or header checks
	RxBadICRC          uint64
	RxNoQP             uint64 // unknown destination QP
	RxDiscarded        uint64 // QP state, address or P_Key mismatch, unexpected opcode

	// Requester.
	DataPackets      uint64 // request packets sent, including retransmissions
	Retransmits      uint64 // request packets sent again
	Timeouts         uint64 // local ACK timeouts that retransmitted
	RNRNakReceived   uint64
	SeqNakReceived   uint64
	ErrNakReceived   uint64
	ReadRetries      uint64 // READs (and atomics) re-requested after lost or dropped responses
	RequesterFaults  uint64 // faults gathering payload or scattering READ responses
	ResponseDiscards uint64 // responses ignored: stale, duplicate, dropped during a fault

	// Responder.
	Acks            uint64 // ACKs sent (including duplicate re-ACKs)
	DupRequests     uint64
	SeqNakSent      uint64
	RNRNakNoWQE     uint64 // RNR NAKs for lack of a receive WQE
	RNRNakFault     uint64 // RNR NAKs for a receive fault
	ErrNakSent      uint64
	ResponderFaults uint64 // faults placing SEND/WRITE data or reading READ data
	FaultDrops      uint64 // requests dropped under FaultDrop
	FaultHolds      uint64 // receive faults held under FaultHold
	OutOfSeqDropped uint64 // requests dropped after a NAK was sent
	MessagesIn      uint64 // SEND, WRITE and READ requests executed

	PageRequests      uint64 // page requests raised (Config.Pager's RequestPage calls)
	PageRequestErrors uint64 // page requests that failed (done(false))

	// TxDropped counts ACKs and NAKs dropped because the transmit queue
	// was full (the port took nothing for a long while): RC recovers them
	// as it does lost frames.
	TxDropped uint64
}

// Transport is one RoCEv2 port's RC transport: protection domains, memory
// regions, CQs and QPs. Its methods are safe for concurrent use.
type Transport struct {
	cfg Config // immutable after New but for IPv4, which is under mu
	clk clock.Clock

	// mu guards the tables (see the package's Locking): held shortly,
	// and no other lock of the engine is taken while it is held.
	mu      sync.RWMutex
	qps     map[uint32]*QP
	mrs     map[uint32]*MR     // by key
	mws     map[uint32]*MW     // by index (R_Key >> 8); their state too (window.go)
	fast    map[uint32]*FastMR // by index (key >> 8); their state too (fastreg.go)
	local   [][4]byte          // addresses besides cfg.IPv4 this port answers (SetLocalIPs)
	nextQPN uint32
	nextMR  uint32
	keyTag  uint8

	decMu sync.Mutex
	decs  []*rocev2.Decoder // see decoder

	// atomicMu makes the read-modify-write of every atomic one step with
	// respect to the others, whichever QP executes it: taken under a QP's
	// lock, around two accesses to one region, and nothing else under it.
	atomicMu sync.Mutex

	stats counters
	// policy is the responder's FaultPolicy. It is an atomic so that a
	// device register write can set it without waiting for a QP, whose
	// lock is held across memory region accesses.
	policy atomic.Uint32
	// alarm is the message alarm (SetMessageAlarm); its own lock, for
	// the same reason as policy.
	alarm messageAlarm

	// The transmit path (transmit.go): output produced under the QPs'
	// locks and delivered by flush outside them.
	txMu  sync.Mutex // held by the one goroutine that flushes
	paced PacedPort  // cfg.Port, if it is one
	// txqMu guards the rest, which every QP's work appends to: held for
	// an append or a swap, never across memory, the port or a callback.
	txqMu sync.Mutex
	txq   [][]byte // frames the port has not taken yet, oldest first
	txOut int      // frames the running flush took from txq and is handing over
	cbq   []func()
	// txqSpare and cbqSpare are the arrays of the last round that flush
	// handed over whole, emptied, for the next round's txq and cbq.
	txqSpare  [][]byte
	cbqSpare  []func()
	portFull  bool  // the port refused a frame (ErrPortFull): none until PortReady
	txWait    []*QP // QPs with packets to build once there is room, in turn order
	txWaiting map[*QP]bool
	// txQueued counts the frames send queued, left those that the port
	// put on the wire or dropped: frames leave in the order they were
	// queued, so the frame queued n-th has left once left >= n.
	txQueued uint64
	left     atomic.Uint64

	// frameMu (a leaf) guards frames, the buffers RecycleFrame gave
	// back (frameBuf).
	frameMu sync.Mutex
	frames  [][]byte
}

// decMu guards decs, the decoders not in use: a decoder is one frame's
// scratch space, and frames for different QPs are decoded at once. Not
// a sync.Pool, which may drop them (and does, at random, under the race
// detector), and a decoder costs more to build than a frame to handle.
const maxFreeDecoders = 16

// decoder returns a decoder for the caller alone (putDecoder gives it
// back).
func (e *Transport) decoder() *rocev2.Decoder {
	e.decMu.Lock()
	defer e.decMu.Unlock()
	if n := len(e.decs); n > 0 {
		d := e.decs[n-1]
		e.decs = e.decs[:n-1]
		return d
	}
	return rocev2.NewDecoder()
}

// putDecoder gives back a decoder; what it decoded is no longer used.
func (e *Transport) putDecoder(d *rocev2.Decoder) {
	e.decMu.Lock()
	defer e.decMu.Unlock()
	if len(e.decs) < maxFreeDecoders {
		e.decs = append(e.decs, d)
	}
}

// New returns an engine.
func New(cfg Config) *Transport {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.MaxUnackedPSNs <= 0 {
		cfg.MaxUnackedPSNs = 128
	}
	if cfg.MaxUnackedPSNs > 1<<22 {
		cfg.MaxUnackedPSNs = 1 << 22
	}
	if cfg.AckEvery <= 0 {
		cfg.AckEvery = 16
	}
	e := &Transport{
		cfg:       cfg,
		clk:       cfg.Clock,
		decs:      []*rocev2.Decoder{rocev2.NewDecoder()},
		qps:       make(map[uint32]*QP),
		mrs:       make(map[uint32]*MR),
		mws:       make(map[uint32]*MW),
		fast:      make(map[uint32]*FastMR),
		nextQPN:   0x11,
		nextMR:    1,
		txWaiting: make(map[*QP]bool),
	}
	e.paced, _ = cfg.Port.(PacedPort)
	e.policy.Store(uint32(cfg.RecvFaultPolicy))
	return e
}

// SetRecvFaultPolicy changes the responder's receive-fault policy; it
// applies from the next fault. It does not wait for any QP.
func (e *Transport) SetRecvFaultPolicy(p FaultPolicy) { e.policy.Store(uint32(p)) }

// RecvFaultPolicy returns the responder's receive-fault policy.
func (e *Transport) RecvFaultPolicy() FaultPolicy { return FaultPolicy(e.policy.Load()) }

// messageAlarm counts executed requests down to an EventMessageAlarm.
type messageAlarm struct {
	mu    sync.Mutex
	left  uint64 // requests still to execute before the alarm; 0: disarmed
	since uint64 // requests executed since the last alarm went off, while disarmed
	fired bool   // an alarm went off and none was armed or cancelled since
	// on is left > 0 || fired, read without mu: executed requests take
	// the lock only while an alarm needs them counted.
	on atomic.Bool
}

// SetMessageAlarm arms one EventMessageAlarm after n requests executed by
// the responder (Stats.MessagesIn), counted from now, or, right after an
// alarm went off, from the request that set it off: the requests executed
// in between count towards n, so gaps chain exactly (if they already make
// n, the next request sets it off). 0 cancels. It does not wait for any
// QP.
func (e *Transport) SetMessageAlarm(n uint64) {
	a := &e.alarm
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case n == 0:
		a.left, a.fired = 0, false
	case a.fired:
		a.left = max(n-min(n, a.since), 1)
		a.fired = false
	default:
		a.left = n
	}
	a.since = 0
	a.on.Store(a.left > 0 || a.fired)
}

// MessageAlarm returns the requests still to execute before the alarm (0:
// none armed).
func (e *Transport) MessageAlarm() uint64 {
	e.alarm.mu.Lock()
	defer e.alarm.mu.Unlock()
	return e.alarm.left
}

// messageExecuted counts one executed request and the alarm down. The
// responder calls it under its QP's lock: the alarm's own lock orders the
// QPs' requests, so the count is exact whichever QPs execute them.
func (e *Transport) messageExecuted() {
	e.stats.MessagesIn.Add(1)
	a := &e.alarm
	if !a.on.Load() {
		return
	}
	a.mu.Lock()
	fire := false
	switch {
	case a.left > 0:
		a.left--
		if a.left == 0 {
			fire, a.fired, a.since = true, true, 0
		}
	case a.fired:
		a.since++
	}
	a.mu.Unlock()
	if fire {
		e.event(Event{Type: EventMessageAlarm})
	}
}

// GID returns the port's GID (IPv4-mapped).
func (e *Transport) GID() [16]byte { return rocev2.GIDFromIPv4(e.ipv4()) }

// ipv4 returns the port's own address (Config.IPv4, SetIPv4).
func (e *Transport) ipv4() [4]byte {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.cfg.IPv4
}

// Stats returns the counters. It waits for no lock: each counter is read
// on its own, so a snapshot taken while traffic runs may be a packet
// apart between counters; one taken while the engine is idle is exact.
func (e *Transport) Stats() Stats { return e.stats.snapshot() }

func (e *Transport) event(ev Event) {
	if h := e.cfg.OnEvent; h != nil {
		e.defer_(func() { h(ev) })
	}
}

// HandleFrame processes one received Ethernet frame. It returns why a frame
// was dropped without any response (nil when it was consumed, including
// when the engine answered it with a NAK). The engine does not keep frame.
func (e *Transport) HandleFrame(frame []byte) error {
	e.stats.RxFrames.Add(1)
	d := e.decoder()
	defer e.putDecoder(d) // after the QP's lock is let go: pkt is d's
	pkt, err := d.Decode(frame)
	if err != nil {
		if isICRC(err) {
			e.stats.RxBadICRC.Add(1)
		} else {
			e.stats.RxMalformed.Add(1)
		}
		return err
	}
	e.mu.RLock()
	local := e.isLocal(pkt.DstIP4())
	q := e.qps[pkt.BTH.DestQP]
	e.mu.RUnlock()
	if !local {
		e.stats.RxDiscarded.Add(1)
		return errDiscard("destination IP is not this port")
	}
	if pkt.BTH.Opcode.Has(rocev2.CNP) {
		e.stats.RxDiscarded.Add(1)
		return errDiscard("not a transport opcode: " + pkt.BTH.Opcode.String())
	}
	if q == nil {
		e.stats.RxNoQP.Add(1)
		return errDiscard("no such QP")
	}
	q.mu.Lock()
	defer q.unlock()
	if q.dead {
		// Destroyed since the lookup: as if it had not been found.
		e.stats.RxNoQP.Add(1)
		return errDiscard("no such QP")
	}
	return q.receive(pkt, frame)
}

// isLocal reports whether ip is one of the port's addresses. Caller holds
// mu (either side).
func (e *Transport) isLocal(ip [4]byte) bool {
	if ip == e.cfg.IPv4 {
		return true
	}
	for _, a := range e.local {
		if a == ip {
			return true
		}
	}
	return false
}

// SetLocalIPs sets the addresses, besides Config.IPv4, that the port
// answers: a device with a GID table accepts RC packets to every GID in it.
func (e *Transport) SetLocalIPs(ips [][4]byte) {
	e.mu.Lock()
	e.local = append(e.local[:0:0], ips...)
	e.mu.Unlock()
}

// SetIPv4 changes the port's own address (Config.IPv4), which QPs whose
// address vector names no source address send from; paths set from now on
// use it.
func (e *Transport) SetIPv4(ip [4]byte) {
	e.mu.Lock()
	e.cfg.IPv4 = ip
	e.mu.Unlock()
}

type errDiscard string

func (e errDiscard) Error() string { return "ibrc: discarded: " + string(e) }

func isICRC(err error) bool {
	for ; err != nil; err = unwrap(err) {
		if err == rocev2.ErrBadICRC {
			return true
		}
	}
	return false
}

func unwrap(err error) error {
	if u, ok := err.(interface{ Unwrap() error }); ok {
		return u.Unwrap()
	}
	return nil
}

// PD is a protection domain: QPs can use only its memory regions.
type PD struct {
	e *Transport
}

// CreatePD returns a new protection domain.
func (e *Transport) CreatePD() *PD { return &PD{e: e} }

// MR is a registered memory region: [VA, VA+Length) of Mem.
type MR struct {
	pd     *PD
	mem    Memory
	va     uint64
	length uint64
	access Access
	key    uint32
	// use is held, read side, across each access to mem (readAt,
	// writeAt), and taken, write side, by Deregister to set dead: so
	// Deregister waits for the accesses in flight, and none starts after.
	use  sync.RWMutex
	dead atomic.Bool // deregistered: accesses fail (errMRDead)
}

// errMRDead is an access to a region found dead: the same failure as a
// key that is not (or no longer) in the table.
var errMRDead = sglError("memory region deregistered")

// readAt reads the region's memory at va, unless it is deregistered.
// Caller holds no MR's lock (a QP's, or none while it copies a SEND's or
// WRITE's data).
func (m *MR) readAt(va uint64, p []byte) error {
	m.use.RLock()
	defer m.use.RUnlock()
	if m.dead.Load() {
		return errMRDead
	}
	return m.mem.ReadAt(va, p)
}

// writeAt writes the region's memory at va, unless it is deregistered.
// Caller holds no MR's lock (a QP's, or none while it copies a SEND's or
// WRITE's data).
func (m *MR) writeAt(va uint64, p []byte) error {
	m.use.RLock()
	defer m.use.RUnlock()
	if m.dead.Load() {
		return errMRDead
	}
	return m.mem.WriteAt(va, p)
}

// atomicRMW replaces the AtomicSize bytes at va (aligned, in m) by
// f(old) and returns old. Either access may fault; the write comes last,
// so a failed RMW changed nothing.
func (e *Transport) atomicRMW(m *MR, va uint64, f func(old uint64) uint64) (uint64, error) {
	var b [AtomicSize]byte
	e.atomicMu.Lock()
	defer e.atomicMu.Unlock()
	if err := m.readAt(va, b[:]); err != nil {
		return 0, err
	}
	old := binary.LittleEndian.Uint64(b[:])
	binary.LittleEndian.PutUint64(b[:], f(old))
	if err := m.writeAt(va, b[:]); err != nil {
		return 0, err
	}
	return old, nil
}

// LKey and RKey return the region's keys (equal here, as in rdma_rxe).
func (m *MR) LKey() uint32 { return m.key }
func (m *MR) RKey() uint32 { return m.key }

// RegisterMR registers [va, va+length) of mem with the given access.
// Remote write requires local write, as the IBA does.
func (pd *PD) RegisterMR(mem Memory, va, length uint64, access Access) (*MR, error) {
	return pd.registerMR(mem, va, length, access, 0)
}

// RegisterMRKey is RegisterMR with the key (lkey = rkey) chosen by the
// caller, as a device whose driver names its regions does; key 0 is not a
// key, and a key in use is ErrResourceInUse.
func (pd *PD) RegisterMRKey(mem Memory, key uint32, va, length uint64, access Access) (*MR, error) {
	if key == 0 {
		return nil, ErrInvalidArg
	}
	return pd.registerMR(mem, va, length, access, key)
}

func (pd *PD) registerMR(mem Memory, va, length uint64, access Access, key uint32) (*MR, error) {
	if mem == nil || va+length < va {
		return nil, ErrInvalidArg
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, ErrInvalidArg
	}
	e := pd.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.mrs) >= 1<<24-1 {
		return nil, ErrResourceExhaust
	}
	if key != 0 {
		if e.mrs[key] != nil {
			return nil, ErrResourceInUse
		}
	} else {
		for {
			if e.nextMR == 0 || e.nextMR >= 1<<24 {
				e.nextMR = 1
			}
			e.keyTag++
			key = e.nextMR<<8 | uint32(e.keyTag)
			e.nextMR++
			if e.mrs[key] == nil {
				break
			}
		}
	}
	m := &MR{pd: pd, mem: mem, va: va, length: length, access: access, key: key}
	e.mrs[key] = m
	return m, nil
}

// Deregister removes the region; its keys stop working at once. It waits
// for the accesses to the region's memory in flight, one packet's data
// each, and none starts after it returned: the region's memory is no
// longer the engine's. A second call waits the same way and returns
// ErrDestroyed.
func (m *MR) Deregister() error {
	e := m.pd.e
	e.mu.Lock()
	live := e.mrs[m.key] == m
	if live {
		delete(e.mrs, m.key)
	}
	e.mu.Unlock()
	// No lookup finds it now; a QP that found it before (a WRITE in
	// progress, a READ being answered, an SGL being walked) finds it dead
	// at its next access, and the accesses in flight end before this.
	m.use.Lock()
	m.dead.Store(true)
	m.use.Unlock()
	if !live {
		return ErrDestroyed
	}
	return nil
}

// lookupMR finds the region of key for an access of length bytes at va.
// The region may be deregistered as soon as this returns: its accesses
// (readAt, writeAt) check.
func (e *Transport) lookupMR(key uint32, pd *PD, need Access, va, length uint64) *MR {
	e.mu.RLock()
	m := e.mrs[key]
	e.mu.RUnlock()
	if m == nil || m.key != key || m.pd != pd || m.access&need != need {
		return nil
	}
	if va < m.va || length > m.length || va-m.va > m.length-length {
		return nil
	}
	return m
}

// CQ is a completion queue.
type CQ struct {
	e *Transport
	// mu guards the rest: the QPs that complete into the CQ push under
	// their own locks, and the consumer polls without any of the engine's.
	mu       sync.Mutex
	buf      []WC
	head, n  int
	overflow bool
	notify   func()
	pending  bool // a notification is queued
}

// CreateCQ returns a completion queue with room for depth completions.
func (e *Transport) CreateCQ(depth int) (*CQ, error) {
	if depth <= 0 {
		return nil, ErrInvalidArg
	}
	return &CQ{e: e, buf: make([]WC, depth)}, nil
}

// Poll moves up to len(out) completions into out and returns how many.
func (cq *CQ) Poll(out []WC) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	k := 0
	for k < len(out) && cq.n > 0 {
		out[k] = cq.buf[cq.head]
		cq.head = (cq.head + 1) % len(cq.buf)
		cq.n--
		k++
	}
	return k
}

// Resize gives the CQ room for depth completions, keeping those waiting;
// ErrInvalidArg if more wait than fit.
func (cq *CQ) Resize(depth int) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if depth <= 0 || depth < cq.n {
		return ErrInvalidArg
	}
	buf := make([]WC, depth)
	for i := range cq.n {
		buf[i] = cq.buf[(cq.head+i)%len(cq.buf)]
	}
	cq.buf, cq.head = buf, 0
	return nil
}

// Len returns the number of completions waiting.
func (cq *CQ) Len() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}

// Overflowed reports whether a completion was lost because the CQ was full.
func (cq *CQ) Overflowed() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.overflow
}

// SetNotify sets a function called (outside the engine's locks) after new
// completions were added.
func (cq *CQ) SetNotify(f func()) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	cq.notify = f
}

// push adds a completion. The QPs that share the CQ push under their own
// locks; cq.mu orders them.
func (cq *CQ) push(wc WC) {
	cq.mu.Lock()
	if cq.n == len(cq.buf) {
		first := !cq.overflow
		cq.overflow = true
		cq.mu.Unlock()
		if first {
			cq.e.event(Event{Type: EventCQError, CQ: cq})
		}
		return
	}
	cq.buf[(cq.head+cq.n)%len(cq.buf)] = wc
	cq.n++
	notify := cq.notify != nil && !cq.pending
	cq.pending = cq.pending || notify
	cq.mu.Unlock()
	if notify {
		cq.e.defer_(func() {
			cq.mu.Lock()
			cq.pending = false
			f := cq.notify
			cq.mu.Unlock()
			if f != nil {
				f()
			}
		})
	}
}
