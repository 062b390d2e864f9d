package ibrc

import (
	"cmp"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// QPInit are the creation parameters of a QP.
type QPInit struct {
	Type           QPType // 0: TypeRC
	SendCQ, RecvCQ *CQ
	Cap            QPCap
	SigAll         bool // every send WR completes with a CQE, signaled or not
	// RecvSource, if set, supplies receive WRs when the responder needs
	// one and none was posted with PostRecv: a device whose receive queue
	// lives in guest memory, with no doorbell, takes the next entry when a
	// message arrives. It is called with the QP's lock held and must not
	// call back into the engine; it may touch the queue's memory.
	RecvSource RecvSource
}

// RecvSource returns the next receive WR of a queue. ok is false when none
// is posted. A malformed entry is returned with ok and its completion
// status (not WCSuccess): it completes with that status in its turn and
// the QP goes to the error state. wr.SGL may alias the source's buffer
// until the next call: the engine copies it.
type RecvSource func() (wr RecvWR, status WCStatus, ok bool)

type sendWQE struct {
	wr     SendWR
	length uint64
	// mtu and npkts are the path MTU the WQE is segmented by and the PSNs
	// it consumes, fixed when it starts: an SQD->SQD path MTU change
	// applies to WQEs started after it, never to the PSN layout of one
	// in flight.
	mtu      int
	npkts    int
	firstPSN uint32
	lastPSN  uint32
	started  bool // PSNs assigned: its first packet went out at least once
	// failed is the status of a local error found while sending it behind
	// outstanding WQEs: it completes with it once it is the oldest.
	failed WCStatus
}

func (w *sendWQE) isRead() bool { return w.wr.Opcode == WRRead }

func (w *sendWQE) isAtomic() bool { return w.wr.Opcode.atomic() }

// awaitsResponse: the WQE completes by its own response (READ responses,
// an atomic ACK), never by an ACK of a later PSN, and counts against the
// QP's max_rd_atomic.
// An ATOMIC WRITE is answered by a zero-length READ response, as rdma_rxe
// answers it, and held by the responder as a READ is.
func (w *sendWQE) awaitsResponse() bool {
	return w.isRead() || w.isAtomic() || w.wr.Opcode == WRAtomicWrite
}

func (o WROpcode) atomic() bool { return o == WRAtomicCmpSwp || o == WRAtomicFetchAdd }

// local: the WR touches no wire (window.go's localOp runs it).
func (o WROpcode) local() bool { return o == WRLocalInv || o == WRBindMW || o == WRRegMR }

type recvWQE struct {
	wr     RecvWR
	length uint64
}

// readRes is a responder resource: an RDMA READ or an atomic the
// responder remembers, so that a duplicate request is answered again
// without being executed again (IBA 9.7.5.1.6 and o9-29 for atomics).
type readRes struct {
	first, last uint32
	va          uint64
	length      uint64
	rkey        uint32
	mr          *MR
	mtu         int // its segmentation: the path MTU when it arrived
	valid       bool
	// atomic: an atomic executed at first, which found orig at va and
	// was acknowledged with msn.
	atomic bool
	orig   uint64
	msn    uint32
}

// QP is a queue pair: RC, UC or UD (QPInit.Type).
type QP struct {
	e    *Transport
	pd   *PD
	num  uint32
	init QPInit

	// mu guards the rest: the QP's state and its requester, completer
	// and responder, which run under it on whichever goroutine drives the
	// QP (a verb, a received frame, a timer, a page response, the
	// transmit pump), memory region accesses included but for the copies
	// of SEND and WRITE data, made with it let go (buildData,
	// placeUnlocked; the package's Locking). It is the QP's
	// alone: QPs never wait for each other's (see the package's Locking).
	// Let go of it with unlock, unlockRead or release, never mu.Unlock:
	// they hand back a turn the pump could not give (turnDue). (The
	// copies let it go with mu.Unlock and take it back before going on,
	// as waitPlaced's Wait does: the turn waits for their release.)
	mu sync.Mutex
	// turnDue: the transmit pump came for q's turn and found mu taken (a
	// copy of q's own on another goroutine); whoever holds mu puts q back
	// in the turns as it lets go (release). Not under mu: the pump sets
	// it without mu.
	turnDue atomic.Bool
	// placed is signalled (under mu) when a request packet's copy into
	// guest memory, made with mu let go, ends (resp.placing).
	placed *sync.Cond
	attr   QPAttr
	state  QPState
	gen    uint64 // bumped on reset/destroy: stale callbacks check it
	dead   bool
	path   rocev2.Path
	mtu    int
	faults uint8 // in-flight page requests: bit role*2+write

	sq []*sendWQE
	rq []*recvWQE
	// sendsDone counts the send WRs that completed, signaled or not, since
	// the QP was created (see SendsCompleted).
	sendsDone uint64

	req  reqState
	comp compState
	resp respState
}

type reqState struct {
	psn          uint32 // next PSN to send
	high         uint32 // first PSN never sent
	next         int    // index in sq of the WQE being sent
	offset       uint64 // bytes of sq[next] already covered by sent PSNs (RC, UC)
	readsOut     int    // READ and atomic WQEs started and not completed
	rnrWait      bool
	rnrPSN       uint32
	rnrNAKed     bool // the peer RNR NAKed rnrPSN and acknowledged nothing since
	rnrTimer     clock.Timer
	stalled      bool // gathering payload faulted; waiting for the page
	timer        clock.Timer
	timerTok     *int
	timerDue     time.Time // when timer times out (restartTimer moves it)
	lastSent     uint64    // where the engine queued the last request packet (Transport.send)
	retryCnt     uint8
	rnrRetry     uint8
	startedRetry bool
	retryPSN     uint32
	ackNext      bool // set AckReq on the next packet (first after a retry)
	// building: a goroutine is building a data packet with the lock let
	// go (buildData); cursorGen counts setCursor's moves, so that it
	// finds whether a retry moved the cursor meanwhile.
	building  bool
	cursorGen uint32
	draining  bool
	drained   bool
}

type compState struct {
	psn       uint32 // oldest unacknowledged PSN
	readFault bool   // dropping READ responses until a page arrives
}

type respState struct {
	psn      uint32 // expected PSN
	msn      uint32
	inMsg    rocev2.OpFlags // Send or Write while a multi-packet message is open
	wqe      *recvWQE       // receive WQE of the SEND in progress
	offset   uint64
	wMR      *MR
	wVA      uint64
	wResid   uint64
	wLen     uint64
	sentNAK  bool
	reads    []readRes
	readNext int
	stall    *readStall
	backlog  [][]byte
	commEst  bool
	// faulted is set while a receive fault at faultPSN waits for its
	// retransmission to be placed (the trace's RCResume).
	faulted  bool
	faultPSN uint32
	// held (FaultHold): a receive fault holds the request at psn, first
	// in backlog, with what arrived after it, until its page request
	// completes; frame is the request being executed, which a fault
	// holds.
	held  bool
	frame []byte
	// replaying: the requests that waited behind a READ or a held fault
	// are being executed (replayBacklog); requests that arrive meanwhile
	// (while one of them is placed with the lock let go) wait behind
	// the rest.
	replaying bool
	// placing: a request packet's data is being copied into guest
	// memory with the QP's lock let go (placeUnlocked).
	placing bool
	// dropMsg (UC): a packet of the message in progress was lost or
	// refused, so the rest of it is dropped until a First packet starts
	// the next message (IBA 9.7.7; UC never NAKs).
	dropMsg bool
}

const maxBacklog = 64

// maxHeld bounds the requests a receive fault holds (FaultHold): twice a
// requester's default window (Config.MaxUnackedPSNs), so that a peer like
// this engine never has one dropped while a page is on its way; at most
// 1 MiB per QP at a 4096-byte MTU.
const maxHeld = 256

// unreportedFaultRetry is how long a stalled requester waits before
// retrying a fault when the engine has no PageRequester.
const unreportedFaultRetry = 100 * time.Microsecond

// CreateQP creates an RC QP in the RESET state.
func (pd *PD) CreateQP(init QPInit) (*QP, error) { return pd.createQP(init, 0) }

// CreateQPNum is CreateQP with the QP number chosen by the caller (2 to
// 2^24-1, or 1 for the GSI QP, a UD QP), as a device whose driver names
// its QPs does; a number in use is ErrResourceInUse.
func (pd *PD) CreateQPNum(num uint32, init QPInit) (*QP, error) {
	if num < 1 || num > psnMask || num == 1 && init.Type != TypeUD {
		return nil, ErrInvalidArg
	}
	return pd.createQP(init, num)
}

func (pd *PD) createQP(init QPInit, num uint32) (*QP, error) {
	if init.Type == 0 {
		init.Type = TypeRC
	}
	if init.SendCQ == nil || init.RecvCQ == nil || init.Cap.MaxSendWR <= 0 || init.Cap.MaxRecvWR <= 0 ||
		transitions[init.Type] == nil {
		return nil, ErrInvalidArg
	}
	if init.Cap.MaxSendSGE <= 0 {
		init.Cap.MaxSendSGE = 1
	}
	if init.Cap.MaxRecvSGE <= 0 {
		init.Cap.MaxRecvSGE = 1
	}
	e := pd.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if num != 0 {
		if e.qps[num] != nil {
			return nil, ErrResourceInUse
		}
	} else {
		for e.qps[e.nextQPN] != nil || e.nextQPN < 2 || e.nextQPN > psnMask {
			e.nextQPN = (e.nextQPN + 1) & psnMask
		}
		num = e.nextQPN
		e.nextQPN = (e.nextQPN + 1) & psnMask
	}
	q := &QP{e: e, pd: pd, num: num, init: init}
	q.attr.PKey = 0xffff
	e.qps[q.num] = q
	return q, nil
}

// unlock releases q.mu and delivers what q's work queued: frames and
// callbacks (flush).
func (q *QP) unlock() {
	q.release()
	q.e.flush()
}

// unlockRead is unlock for the verbs that only look at q, which queue
// nothing: it flushes only when it handed q's turn back.
func (q *QP) unlockRead() {
	if q.release() {
		q.e.flush()
	}
}

// release releases q.mu, first giving q back its place in the transmit
// turns if the pump found it busy meanwhile (turnDue). It reports whether
// it did. The pump may set turnDue just before the Unlock, after the
// check: so it looks again once mu is let go, and takes mu back to hand
// the turn over unless another goroutine holds it, which will then. With
// the pump's own second look (pump), no turn is lost.
func (q *QP) release() bool {
	handed := false
	for {
		if q.turnDue.Swap(false) && !q.dead {
			q.e.txWaitFor(q)
			handed = true
		}
		q.mu.Unlock()
		if !q.turnDue.Load() || !q.mu.TryLock() {
			return handed
		}
	}
}

// pullRecv takes the next receive WR from the QP's RecvSource into rq when
// rq is empty. It reports whether rq has a WR now; false with the QP in
// ERR when the source returned a malformed entry (completed here with its
// status, and the requester NAKed).
func (q *QP) pullRecv() bool {
	if len(q.rq) > 0 {
		return true
	}
	if q.init.RecvSource == nil {
		return false
	}
	wr, st, ok := q.init.RecvSource()
	if !ok {
		return false
	}
	if st != WCSuccess || len(wr.SGL) > q.init.Cap.MaxRecvSGE {
		if st == WCSuccess {
			st = WCLocLenErr
		}
		q.init.RecvCQ.push(WC{WRID: wr.ID, Status: st, Opcode: WCRecv, QPN: q.num})
		q.e.stats.ErrNakSent.Add(1)
		q.sendAck(q.resp.psn, rocev2.NAKSyndrome(rocev2.NAKRemoteOp))
		q.moveToErr()
		return false
	}
	wr.SGL = append([]SGE(nil), wr.SGL...)
	q.rq = append(q.rq, &recvWQE{wr: wr, length: sglLen(wr.SGL)})
	return true
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.num }

// Type returns the QP's transport service.
func (q *QP) Type() QPType { return q.init.Type }

// unreliable: UC or UD, whose requester never waits for an answer and
// whose responder never sends one.
func (q *QP) unreliable() bool { return q.init.Type != TypeRC }

// Query returns the QP's attributes, with State its current state.
func (q *QP) Query() QPAttr {
	q.mu.Lock()
	defer q.unlockRead()
	a := q.attr
	a.State = q.state
	return a
}

// Destroy removes the QP; outstanding work is dropped without completions.
//
// Under q's lock, so nothing of q runs meanwhile: its timers and page
// requests find it dead (gen, dead) when they come, a frame that found
// it in the table before it went finds it dead, and it leaves the
// transmit turns (txForget, under txqMu), so a pump that took it from
// them before finds it dead and skips it.
func (q *QP) Destroy() error {
	e := q.e
	q.mu.Lock()
	defer q.unlock()
	if q.dead {
		return ErrDestroyed
	}
	q.reset()
	q.dead = true
	e.mu.Lock()
	if e.qps[q.num] == q {
		delete(e.qps, q.num)
	}
	e.mu.Unlock()
	e.txForget(q)
	return nil
}

type transition struct{ req, opt AttrMask }

// transitions is the IBA QP state transition table (IBA 11.2.1.2 Table 91;
// Linux ib_modify_qp_is_ok) for RC, UC and UD, without alternate paths,
// port numbers and path migration. Any state may go to RESET and ERR.
var transitions = map[QPType]map[[2]QPState]transition{
	TypeRC: {
		{StateReset, StateReset}: {},
		{StateReset, StateInit}:  {req: AttrPKey | AttrAccessFlags},
		{StateInit, StateInit}:   {opt: AttrPKey | AttrAccessFlags},
		{StateInit, StateRTR}: {
			req: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
			opt: AttrAccessFlags | AttrPKey,
		},
		{StateRTR, StateRTS}: {
			req: AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic,
			opt: AttrAccessFlags | AttrMinRNRTimer,
		},
		{StateRTS, StateRTS}: {opt: AttrAccessFlags | AttrMinRNRTimer},
		{StateRTS, StateSQD}: {},
		{StateSQD, StateRTS}: {opt: AttrAccessFlags | AttrMinRNRTimer},
		{StateSQD, StateSQD}: {opt: AttrAccessFlags | AttrMinRNRTimer | AttrPKey | AttrAV | AttrTimeout |
			AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic | AttrMaxDestRdAtomic | AttrPathMTU},
		{StateSQE, StateRTS}: {opt: AttrAccessFlags | AttrMinRNRTimer},
	},
	TypeUC: {
		{StateReset, StateReset}: {},
		{StateReset, StateInit}:  {req: AttrPKey | AttrAccessFlags},
		{StateInit, StateInit}:   {opt: AttrPKey | AttrAccessFlags},
		{StateInit, StateRTR}:    {req: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN, opt: AttrAccessFlags | AttrPKey},
		{StateRTR, StateRTS}:     {req: AttrSQPSN, opt: AttrAccessFlags},
		{StateRTS, StateRTS}:     {opt: AttrAccessFlags},
		{StateRTS, StateSQD}:     {},
		{StateSQD, StateRTS}:     {opt: AttrAccessFlags},
		{StateSQD, StateSQD}:     {opt: AttrAccessFlags | AttrPKey | AttrAV | AttrPathMTU},
		{StateSQE, StateRTS}:     {opt: AttrAccessFlags},
	},
	// UD: the path MTU is the driver's (the port's active MTU), not the
	// consumer's, so it is optional wherever the Q_Key may change.
	TypeUD: {
		{StateReset, StateReset}: {},
		{StateReset, StateInit}:  {req: AttrPKey | AttrQKey, opt: AttrPathMTU},
		{StateInit, StateInit}:   {opt: AttrPKey | AttrQKey | AttrPathMTU},
		{StateInit, StateRTR}:    {opt: AttrPKey | AttrQKey | AttrPathMTU},
		{StateRTR, StateRTS}:     {req: AttrSQPSN, opt: AttrQKey | AttrPathMTU},
		{StateRTS, StateRTS}:     {opt: AttrQKey | AttrPathMTU},
		{StateRTS, StateSQD}:     {},
		{StateSQD, StateRTS}:     {opt: AttrQKey | AttrPathMTU},
		{StateSQD, StateSQD}:     {opt: AttrPKey | AttrQKey | AttrPathMTU},
		{StateSQE, StateRTS}:     {opt: AttrQKey | AttrPathMTU},
	},
}

// CheckTransition reports whether the IBA table of QP type t allows moving
// from cur to next with the attributes in mask (AttrState aside).
func CheckTransition(t QPType, cur, next QPState, mask AttrMask) error {
	mask &^= AttrState
	if next == StateReset || next == StateErr {
		if mask != 0 {
			return fmt.Errorf("%w: %v->%v takes no attributes (mask %#x)", ErrInvalidModify, cur, next, mask)
		}
		return nil
	}
	tr, ok := transitions[t][[2]QPState{cur, next}]
	if !ok {
		return fmt.Errorf("%w: %v %v->%v", ErrInvalidModify, t, cur, next)
	}
	if mask&tr.req != tr.req {
		return fmt.Errorf("%w: %v %v->%v requires mask %#x, missing %#x", ErrInvalidModify, t, cur, next, tr.req, tr.req&^mask)
	}
	if extra := mask &^ (tr.req | tr.opt); extra != 0 {
		return fmt.Errorf("%w: %v %v->%v does not take mask bits %#x", ErrInvalidModify, t, cur, next, extra)
	}
	return nil
}

// ModifyQP changes the QP's state and attributes as ibv_modify_qp does.
// Without AttrState in mask the QP keeps its state (if the table allows
// that state to itself).
func (q *QP) ModifyQP(attr *QPAttr, mask AttrMask) error {
	q.mu.Lock()
	defer q.unlock()
	if q.dead {
		return ErrDestroyed
	}
	next := q.state
	if mask&AttrState != 0 {
		next = attr.State
	}
	if next > StateErr {
		return ErrInvalidArg
	}
	if err := CheckTransition(q.init.Type, q.state, next, mask); err != nil {
		return err
	}
	if err := validateAttr(attr, mask); err != nil {
		return err
	}
	a := &q.attr
	setIf(mask, AttrAccessFlags, &a.AccessFlags, attr.AccessFlags)
	setIf(mask, AttrPKey, &a.PKey, attr.PKey)
	setIf(mask, AttrQKey, &a.QKey, attr.QKey)
	setIf(mask, AttrAV, &a.AV, attr.AV)
	setIf(mask, AttrPathMTU, &a.PathMTU, attr.PathMTU)
	setIf(mask, AttrDestQPN, &a.DestQPN, attr.DestQPN)
	setIf(mask, AttrRQPSN, &a.RQPSN, attr.RQPSN)
	setIf(mask, AttrSQPSN, &a.SQPSN, attr.SQPSN)
	setIf(mask, AttrMaxDestRdAtomic, &a.MaxDestRdAtomic, attr.MaxDestRdAtomic)
	setIf(mask, AttrMinRNRTimer, &a.MinRNRTimer, attr.MinRNRTimer)
	setIf(mask, AttrTimeout, &a.Timeout, attr.Timeout)
	setIf(mask, AttrRetryCnt, &a.RetryCnt, attr.RetryCnt)
	setIf(mask, AttrRNRRetry, &a.RNRRetry, attr.RNRRetry)
	setIf(mask, AttrMaxRdAtomic, &a.MaxRdAtomic, attr.MaxRdAtomic)
	// The requester's retry budgets restart only when the consumer sets them.
	setIf(mask, AttrRetryCnt, &q.req.retryCnt, attr.RetryCnt)
	setIf(mask, AttrRNRRetry, &q.req.rnrRetry, attr.RNRRetry)
	if q.init.Type == TypeUD {
		// Each WR names its own path; the MTU bounds the messages.
		q.mtu = cmp.Or(a.PathMTU, MTU4096).Bytes()
	} else if mask&(AttrAV|AttrPathMTU|AttrDestQPN) != 0 {
		q.setPath()
	}
	prev := q.state
	switch next {
	case StateReset:
		q.reset()
	case StateErr:
		q.moveToErr()
	case StateRTR:
		if prev == StateInit {
			q.resp = respState{psn: a.RQPSN, reads: make([]readRes, max(1, int(a.MaxDestRdAtomic)))}
		}
		q.state = next
	case StateRTS:
		q.state = next
		if prev == StateRTR {
			q.req.psn, q.req.high, q.comp.psn = a.SQPSN, a.SQPSN, a.SQPSN
			q.req.retryCnt, q.req.rnrRetry = a.RetryCnt, a.RNRRetry
		}
		q.req.draining, q.req.drained = false, false
		q.reqProgress()
	case StateSQD:
		q.state = next
		if prev == StateRTS {
			q.req.draining, q.req.drained = true, false
			q.checkDrained()
		}
	default:
		q.state = next
	}
	return nil
}

// setIf copies v to *dst when mask has bit: how ModifyQP applies the
// attributes its mask names.
func setIf[T any](mask, bit AttrMask, dst *T, v T) {
	if mask&bit != 0 {
		*dst = v
	}
}

func validateAttr(a *QPAttr, mask AttrMask) error {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrInvalidArg, what) }
	if mask&AttrPathMTU != 0 && a.PathMTU.Bytes() == 0 {
		return bad("path MTU")
	}
	if mask&AttrDestQPN != 0 && a.DestQPN > psnMask {
		return bad("dest QPN")
	}
	if mask&AttrRQPSN != 0 && a.RQPSN > psnMask || mask&AttrSQPSN != 0 && a.SQPSN > psnMask {
		return bad("PSN wider than 24 bits")
	}
	if mask&AttrRetryCnt != 0 && a.RetryCnt > 7 || mask&AttrRNRRetry != 0 && a.RNRRetry > 7 {
		return bad("retry count above 7")
	}
	if mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 || mask&AttrTimeout != 0 && a.Timeout > 31 {
		return bad("timer code above 31")
	}
	if mask&AttrAV != 0 {
		if _, ok := rocev2.IPv4FromGID(a.AV.DGID); !ok {
			return bad("DGID is not IPv4-mapped (only RoCEv2 over IPv4 is supported)")
		}
	}
	if mask&AttrAccessFlags != 0 && a.AccessFlags&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic) != 0 {
		return bad("access flags")
	}
	return nil
}

func (q *QP) setPath() {
	a := &q.attr
	ip, _ := rocev2.IPv4FromGID(a.AV.DGID)
	sport := a.AV.SrcPort
	if sport == 0 {
		// Flow entropy from the QP pair, in the range Linux uses for RoCEv2.
		h := q.num*0x9e3779b1 ^ a.DestQPN
		sport = uint16(0xc000 | (h^h>>14)&0x3fff)
	}
	src := q.e.ipv4()
	if a.AV.SrcIP != ([4]byte{}) {
		src = a.AV.SrcIP
	}
	q.path = rocev2.Path{
		SrcMAC: q.e.cfg.MAC, DstMAC: a.AV.DestMAC,
		SrcIP: src, DstIP: ip,
		SrcPort: sport, TTL: a.AV.HopLimit, TrafficClass: a.AV.TrafficClass,
	}
	q.mtu = a.PathMTU.Bytes()
}

// reset returns the QP to RESET: queues emptied without completions.
func (q *QP) reset() {
	q.stopTimers()
	q.gen++
	q.state = StateReset
	q.sq, q.rq = nil, nil
	q.req = reqState{}
	q.comp = compState{}
	q.resp = respState{}
	q.faults = 0
	q.attr = QPAttr{PKey: 0xffff}
	q.path = rocev2.Path{}
	q.mtu = 0
}

func (q *QP) stopTimers() {
	if q.req.timer != nil {
		q.req.timer.Stop()
		q.req.timer, q.req.timerTok = nil, nil
	}
	if q.req.rnrTimer != nil {
		q.req.rnrTimer.Stop()
		q.req.rnrTimer = nil
	}
}

// moveToErr puts the QP in the error state and flushes all work requests.
func (q *QP) moveToErr() {
	q.stopTimers()
	q.state = StateErr
	q.req.rnrWait, q.req.stalled = false, false
	for len(q.sq) > 0 {
		q.completeHead(WCWRFlushErr)
	}
	for _, r := range q.rq {
		q.init.RecvCQ.push(WC{WRID: r.wr.ID, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.num})
	}
	q.rq = nil
	q.resp.wqe, q.resp.stall, q.resp.backlog, q.resp.held = nil, nil, nil, false
}

// packets is the number of PSNs a message of n bytes takes at path MTU
// mtu: one for an empty message. An mtu of 0 (a QP with no path, which
// only states that never packetise have) counts one packet per message
// rather than dividing by zero.
func packets(n uint64, mtu int) int {
	if n == 0 || mtu <= 0 {
		return 1
	}
	return int((n + uint64(mtu) - 1) / uint64(mtu))
}

// sglLen is the message length an SGL describes.
func sglLen(sgl []SGE) uint64 {
	var n uint64
	for _, s := range sgl {
		n += uint64(s.Length)
	}
	return n
}

// PostSend queues a send work request.
func (q *QP) PostSend(wr SendWR) error {
	if len(wr.SGL) > q.init.Cap.MaxSendSGE {
		return fmt.Errorf("%w: %d SGEs, QP takes %d", ErrInvalidArg, len(wr.SGL), q.init.Cap.MaxSendSGE)
	}
	if err := q.init.Type.canPost(wr.Opcode); err != nil {
		return err
	}
	n := sglLen(wr.SGL)
	if wr.Opcode.atomic() && (n != AtomicSize || wr.Flags&SendInline != 0) {
		return fmt.Errorf("%w: %v returns %d bytes into an SGL, not %d", ErrInvalidArg, wr.Opcode, AtomicSize, n)
	}
	if wr.Opcode == WRAtomicWrite {
		// Its operand travels in the WR, whatever the QP's inline limit.
		if len(wr.Inline) != AtomicSize || len(wr.SGL) > 0 {
			return fmt.Errorf("%w: ATOMIC_WRITE of %d bytes, not %d", ErrInvalidArg, len(wr.Inline), AtomicSize)
		}
		n = AtomicSize
	} else if wr.Flags&SendInline != 0 {
		switch {
		case wr.Opcode == WRRead:
			return fmt.Errorf("%w: inline RDMA READ", ErrInvalidArg)
		case len(wr.SGL) > 0:
			return fmt.Errorf("%w: inline WR with an SGL", ErrInvalidArg)
		case len(wr.Inline) > q.init.Cap.MaxInline:
			return fmt.Errorf("%w: %d bytes inline, QP takes %d", ErrInvalidArg, len(wr.Inline), q.init.Cap.MaxInline)
		}
		n = uint64(len(wr.Inline))
	} else if len(wr.Inline) > 0 {
		return fmt.Errorf("%w: inline data without SendInline", ErrInvalidArg)
	}
	if n > MaxMsgSize {
		return fmt.Errorf("%w: message of %d bytes", ErrInvalidArg, n)
	}
	q.mu.Lock()
	defer q.unlock()
	switch {
	case q.dead:
		return ErrDestroyed
	case q.state == StateReset || q.state == StateInit || q.state == StateRTR:
		return fmt.Errorf("%w: PostSend in %v", ErrInvalidState, q.state)
	case len(q.sq) >= q.init.Cap.MaxSendWR:
		return ErrQueueFull
	}
	if q.state == StateErr {
		// Flushed, never packetised: a QP that went to ERR from RESET or
		// INIT never had a path (no MTU to segment by).
		q.init.SendCQ.push(WC{WRID: wr.ID, Status: WCWRFlushErr, Opcode: wcOpcode(wr.Opcode), QPN: q.num})
		q.sendsDone++
		return nil
	}
	wr.SGL = append([]SGE(nil), wr.SGL...)
	wr.Inline = append([]byte(nil), wr.Inline...)
	w := &sendWQE{wr: wr, length: n}
	q.sq = append(q.sq, w)
	q.reqProgress()
	return nil
}

// PostRecv queues a receive work request.
func (q *QP) PostRecv(wr RecvWR) error {
	if len(wr.SGL) > q.init.Cap.MaxRecvSGE {
		return fmt.Errorf("%w: %d SGEs, QP takes %d", ErrInvalidArg, len(wr.SGL), q.init.Cap.MaxRecvSGE)
	}
	n := sglLen(wr.SGL)
	q.mu.Lock()
	defer q.unlock()
	switch {
	case q.dead:
		return ErrDestroyed
	case q.state == StateReset:
		return fmt.Errorf("%w: PostRecv in RESET", ErrInvalidState)
	case len(q.rq) >= q.init.Cap.MaxRecvWR:
		return ErrQueueFull
	}
	if q.state == StateErr {
		q.init.RecvCQ.push(WC{WRID: wr.ID, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.num})
		return nil
	}
	wr.SGL = append([]SGE(nil), wr.SGL...)
	q.rq = append(q.rq, &recvWQE{wr: wr, length: n})
	return nil
}

func wcOpcode(o WROpcode) WCOpcode {
	switch o {
	case WRWrite, WRWriteImm:
		return WCRDMAWrite
	case WRRead:
		return WCRDMARead
	case WRAtomicCmpSwp:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	case WRAtomicWrite:
		return WCAtomicWrite
	case WRBindMW:
		return WCBindMW
	case WRLocalInv:
		return WCLocalInv
	case WRRegMR:
		return WCRegMR
	}
	return WCSend
}

// receive dispatches a decoded packet to the responder or the requester.
func (q *QP) receive(p *rocev2.Packet, frame []byte) error {
	if q.resp.placing && p.BTH.Opcode.Has(rocev2.Request) {
		// The request before it is being placed: it comes after.
		q.waitPlaced()
		if q.dead {
			q.e.stats.RxNoQP.Add(1)
			return errDiscard("no such QP")
		}
	}
	if q.state == StateReset || q.state == StateInit || q.state == StateErr {
		q.e.stats.RxDiscarded.Add(1)
		return errDiscard("QP in " + q.state.String())
	}
	if p.BTH.Opcode.Service() != q.init.Type.service() {
		q.e.stats.RxDiscarded.Add(1)
		return errDiscard(p.BTH.Opcode.String() + " to a " + q.init.Type.String() + " QP")
	}
	if q.init.Type == TypeUD {
		return q.receiveDatagram(p)
	}
	if ip, _ := rocev2.IPv4FromGID(q.attr.AV.DGID); p.SrcIP4() != ip {
		q.e.stats.RxDiscarded.Add(1)
		return errDiscard("source is not the QP's peer")
	}
	if p.DstIP4() != q.path.SrcIP {
		q.e.stats.RxDiscarded.Add(1)
		return errDiscard("destination is not the QP's address")
	}
	if p.BTH.PKey&0x7fff != q.attr.PKey&0x7fff || p.BTH.PKey&0x8000 == 0 && q.attr.PKey&0x8000 == 0 {
		q.e.stats.RxDiscarded.Add(1)
		return errDiscard("P_Key mismatch")
	}
	if q.init.Type == TypeUC {
		return q.respondUC(p)
	}
	if p.BTH.Opcode.Has(rocev2.Request) {
		return q.respond(p, frame)
	}
	if q.state == StateRTR {
		q.e.stats.RxDiscarded.Add(1)
		return errDiscard("response to a QP that is not sending")
	}
	return q.complete(p)
}

// pageRequest raises a page request for the fault at va of the packet at
// psn, unless one of the same kind is in flight, and records the fault in
// the trace. resolved runs under q's lock when it completes.
func (q *QP) pageRequest(role Role, mem Memory, va, span uint64, psn uint32, write bool, resolved func(ok bool)) {
	bit := uint8(1) << (uint8(role)*2 + b2u(write))
	if q.faults&bit != 0 {
		return
	}
	q.faults |= bit
	e := q.e
	e.stats.PageRequests.Add(1)
	detected := clock.Nanotime()
	e.cfg.Trace.Emit(trace.Fault, trace.TrackRC, va, trace.RCFaultB(q.num, psn, role == RoleResponder))
	gen := q.gen
	done := func(ok bool) {
		q.mu.Lock()
		defer q.unlock()
		if !ok {
			e.stats.PageRequestErrors.Add(1)
		}
		if q.gen != gen || q.dead {
			return
		}
		q.faults &^= bit
		if resolved != nil {
			resolved(ok)
		}
	}
	if e.cfg.Pager == nil {
		// Nobody to ask: the memory resolves faults by itself; try again
		// after a pause rather than spinning.
		e.clk.AfterFunc(unreportedFaultRetry, func() { done(true) })
		return
	}
	r := PageRequest{QPN: q.num, Role: role, Mem: mem, VA: va, Write: write, PSN: psn, Detected: detected, Span: max(span, 1)}
	pager := e.cfg.Pager
	e.defer_(func() { pager.RequestPage(r, done) })
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// SendsCompleted is the number of send WRs the QP has completed since it
// was created, signaled or not, with or without a completion (including
// flushed ones). Send WRs complete in order, so a consumer of a send queue
// can free that many entries, the unsignaled ones too. It does not go back
// when the QP is reset, whose WRs vanish without completing.
func (q *QP) SendsCompleted() uint64 {
	q.mu.Lock()
	defer q.unlockRead()
	return q.sendsDone
}

// PSNs returns the next PSN the requester will send (new work) and the
// PSN the responder expects.
func (q *QP) PSNs() (send, expect uint32) {
	q.mu.Lock()
	defer q.unlockRead()
	return q.req.high, q.resp.psn
}
