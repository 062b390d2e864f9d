package rdma

import (
	"errors"
	"fmt"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rxeq"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// worker is the state only the worker goroutine touches: the objects, the
// control queues' indices, and scratch buffers.
type worker struct {
	e    *Engine
	gen  uint64
	inst *instance

	cmdHead   uint32
	eqTail    uint32
	eqHead    uint32
	eqArmed   bool
	eqStopped bool // EQ error or overflow: no more events
	halted    bool // command queue or status block error: no more commands

	qps    map[uint32]*qp
	cqs    [hw.RDMAMaxCQ]*cq
	live   []*cq // cqs' entries that are not nil, for drainAll
	srqs   [hw.RDMAMaxSRQ]*srq
	mrs    map[uint32]*mr
	mws    map[uint32]*window // by index, R_Key >> 8
	pds    map[uint32]*ibrc.PD
	pdRefs map[uint32]int
	gids   [hw.RDMAMaxGID]struct {
		valid bool
		gid   [16]byte
	}

	cmd   [hw.RDMACmdSize]byte
	wcs   [64]ibrc.WC
	bells []uint32

	base     devCounts // the engine's counters at the last RESET
	statVals []uint64  // QUERY_STATS scratch
	statBuf  []byte
}

func (w *worker) init(e *Engine) {
	w.e = e
	w.qps = make(map[uint32]*qp)
	w.mrs = make(map[uint32]*mr)
	w.mws = make(map[uint32]*window)
	w.pds = make(map[uint32]*ibrc.PD)
	w.pdRefs = make(map[uint32]int)
	w.statVals = make([]uint64, 0, len(hw.RDMACounters))
	w.statBuf = make([]byte, 8*len(hw.RDMACounters))
}

// run is the worker goroutine.
func (e *Engine) run() {
	defer e.wg.Done()
	for {
		select {
		case <-e.done:
			return
		case <-e.kick:
		}
		e.w.service()
	}
}

// service does everything the register path and the RC engine asked for
// since the last pass.
func (w *worker) service() {
	e := w.e
	e.mu.Lock()
	if g := e.gen; g != w.gen {
		// A RESET's teardown touches no guest memory: it runs even
		// without bus mastering (a function reset clears it).
		e.mu.Unlock()
		w.teardown()
		w.gen = g
		e.mu.Lock()
		e.resetGen = g
		e.mu.Unlock()
		e.asyncMu.Lock()
		e.async = nil
		e.asyncMu.Unlock()
		e.mu.Lock()
	}
	if !e.busMaster.Load() {
		e.mu.Unlock()
		return // the register path's requests wait for bus mastering
	}
	inst, tail, head, arm := e.inst, e.cmdTail, e.eqHead, e.eqArm
	e.eqArm = false
	w.bells = w.bells[:0]
	for n := range e.bells {
		w.bells = append(w.bells, n)
	}
	clear(e.bells)
	arms := e.cqArms
	e.cqArms = [hw.RDMAMaxCQ]uint8{}
	e.mu.Unlock()

	if inst != w.inst {
		w.inst = inst
		w.cmdHead, w.eqTail, w.eqHead, w.eqArmed, w.eqStopped, w.halted = 0, 0, 0, false, false, false
		if inst != nil {
			w.writeStatus(0, 0) // the whole block: cmdq_head, eq_tail, error = 0
		}
	}
	if inst != nil {
		w.eqDoorbells(head, arm)
	}
	for n, a := range arms {
		if c := w.cqs[n]; c != nil && a != 0 {
			w.armCQ(c, a)
		}
	}
	w.asyncEvents()
	if inst != nil {
		w.runCommands(tail)
	}
	w.srqEvents()
	for _, n := range w.bells {
		if q := w.qps[n]; q != nil {
			w.pumpSQ(q)
		}
	}
	if h := e.testBeforeDrain.Load(); h != nil {
		(*h)()
	}
	// Completions retire slots, which lets a malformed entry complete,
	// which flushes what follows it, which makes completions: go round
	// until nothing moves (a long chain goes on in the next pass).
	for round := 0; ; round++ {
		moved := w.drainAll()
		for _, q := range w.qps {
			moved = w.checkQP(q) || moved
		}
		if !moved {
			break
		}
		if round == 64 {
			e.wake()
			break
		}
	}
}

// ---- Event queue and status block ----

// eqDoorbells applies EQ_HEAD and EQ_ARM.
func (w *worker) eqDoorbells(head uint32, arm bool) {
	if head != w.eqHead {
		if w.eqTail-head > w.inst.eqSize {
			w.fail(hw.RDMAErrBadEQHead, head)
			w.eqStopped = true
			return
		}
		w.eqHead = head
	}
	if arm {
		w.eqArmed = true
		if w.eqTail != w.eqHead {
			w.interrupt()
		}
	}
}

// interrupt raises EQ_VECTOR once, inside a unit of the control stream.
func (w *worker) interrupt() {
	in := w.inst
	if !w.eqArmed || in == nil || !in.dma.Begin() {
		return
	}
	w.eqArmed = false
	if in.vector >= 0 && in.vector < hw.MSIXVectors { // another EQ_VECTOR is the driver's loss, not a log line per event
		w.e.irq(in.vector)
	}
	in.dma.End()
}

// postEvent writes an event, moves eq_tail, and interrupts if armed.
func (w *worker) postEvent(typ uint8, handle, info uint32) {
	in := w.inst
	if in == nil || w.eqStopped {
		return
	}
	if w.eqTail-w.eqHead >= in.eqSize {
		w.eqStopped = true
		w.fail(hw.RDMAErrEQOverflow, w.eqTail)
		return
	}
	var b [hw.RDMAEventSize]byte
	hw.RDMAEventType.Put(b[:], typ)
	hw.RDMAEventHandle.Put(b[:], handle)
	hw.RDMAEventInfo.Put(b[:], info)
	hw.RDMAEventSeq.Put(b[:], w.eqTail)
	if !in.dma.Begin() {
		return
	}
	addr := in.eq + uint64(w.eqTail%in.eqSize)*hw.RDMAEventSize
	if err := in.dma.WriteAt(addr, b[:]); err != nil {
		in.dma.End()
		w.eqStopped = true
		w.fail(hw.RDMAErrBadEQ, w.eqTail)
		return
	}
	w.eqTail++
	err := in.dma.WriteU32(in.status+uint64(hw.RDMAStatusEQTail.Offset), w.eqTail)
	in.dma.End()
	if err != nil {
		w.fail(hw.RDMAErrBadStatusAddr, uint32(in.status))
		return
	}
	w.e.stats.events.Add(1)
	w.e.cfg.Trace.Emit(trace.RDMAEvent, trace.TrackRC, uint64(typ), uint64(handle))
	w.interrupt()
}

// writeStatus writes the whole status block: indices, error and info.
func (w *worker) writeStatus(code, info uint32) {
	in := w.inst
	if in == nil || !in.dma.Begin() {
		return
	}
	var b [hw.RDMAStatusSize]byte
	hw.RDMAStatusCmdqHead.Put(b[:], w.cmdHead)
	hw.RDMAStatusEQTail.Put(b[:], w.eqTail)
	hw.RDMAStatusError.Put(b[:], code)
	hw.RDMAStatusErrorInfo.Put(b[:], info)
	err := in.dma.WriteAt(in.status, b[:])
	in.dma.End()
	if err != nil && code != hw.RDMAErrBadStatusAddr {
		w.fail(hw.RDMAErrBadStatusAddr, uint32(in.status))
	} else if err != nil {
		w.halted, w.eqStopped = true, true
	}
}

// fail records an engine error (the first one sticks until RESET) in
// RDMA_ERROR and the status block. A command queue or status block error
// stops the commands; event queue errors stop the events (the caller).
func (w *worker) fail(code, info uint32) {
	e := w.e
	e.mu.Lock()
	first := e.errCode == 0
	e.mu.Unlock()
	e.log.Warn("RDMA engine error", "code", code, "info", info)
	switch code {
	case hw.RDMAErrBadCmdq, hw.RDMAErrBadCmdqTail:
		w.halted = true
	case hw.RDMAErrBadStatusAddr:
		w.halted, w.eqStopped = true, true
	}
	if !first {
		return
	}
	// The status block first, then RDMA_ERROR: a driver that sees the
	// register set finds the block written. A status block that cannot
	// be written records its own error meanwhile (fail again), which
	// this one's code then replaces in the register, as the first.
	if code != hw.RDMAErrBadStatusAddr {
		w.writeStatus(code, info)
	}
	e.mu.Lock()
	e.errCode, e.errInfo = code, info
	e.mu.Unlock()
}

// asyncEvents turns the RC engine's events into EQ events.
func (w *worker) asyncEvents() {
	e := w.e
	e.asyncMu.Lock()
	evs := e.async
	e.async = nil
	e.asyncMu.Unlock()
	for _, ev := range evs {
		switch ev.Type {
		case ibrc.EventCommEstablished:
			if w.qps[ev.QPN] != nil {
				w.postEvent(hw.RDMAEventCommEst, ev.QPN, 0)
			}
		case ibrc.EventCQError:
			for _, c := range w.cqs {
				if c != nil && c.rc == ev.CQ {
					w.drainCQ(c) // what fits goes in first; drainCQ sees the overrun
				}
			}
		case ibrc.EventMessageAlarm:
			w.postEvent(hw.RDMAEventMsgAlarm, 0, 0)
		}
	}
}

// ---- Completions ----

// listLive lists the live CQs in live, in the order of their numbers (a
// CQ's creation or destruction, not the drain of every worker pass, scans
// all of cqs).
func (w *worker) listLive() {
	w.live = w.live[:0]
	for _, c := range w.cqs {
		if c != nil {
			w.live = append(w.live, c)
		}
	}
}

// drainAll drains the CQs the engine added completions to; it reports
// whether it moved any.
func (w *worker) drainAll() bool {
	moved := false
	for _, c := range w.live {
		if c.pending.Load() {
			moved = w.drainCQ(c) || moved
		}
	}
	return moved
}

// drainCQ moves the engine's completions into the rxe CQ, retiring the
// ring slots they complete; it reports whether there were any.
func (w *worker) drainCQ(c *cq) bool {
	c.pending.Store(false)
	moved := false
	for {
		n := c.rc.Poll(w.wcs[:])
		if n == 0 {
			break
		}
		moved = true
		for _, wc := range w.wcs[:n] {
			w.complete(c, wc)
		}
	}
	if c.rc.Overflowed() {
		w.cqError(c)
	}
	return moved
}

// complete handles one engine completion on c. The work request's ring
// slot is retired before its completion is written, as rdma_rxe does: a
// program that posts again as soon as it polls the completion (perftest's
// latency tests, with one slot) must find the slot free.
func (w *worker) complete(c *cq, wc ibrc.WC) {
	q := w.qps[wc.QPN]
	if q == nil {
		return // a QP destroyed since: its slots went with it
	}
	if wc.Status != ibrc.WCSuccess && wc.Status != ibrc.WCWRFlushErr && q.errStatus == 0 {
		q.errStatus = wc.Status
	}
	if wc.Opcode&ibrc.WCRecv != 0 {
		if err := q.retireRecv(); err != nil && !errors.Is(err, rxeq.ErrNotFetched) {
			w.ringError(err)
		}
		w.push(c, rxeq.CQEFromWC(wc), wc.Solicited || wc.Status != ibrc.WCSuccess)
		return
	}
	sig := true
	if len(q.signaled) > 0 {
		sig = q.signaled[0]
		q.signaled = q.signaled[1:]
	}
	w.retireSend(q)
	if sig || wc.Status != ibrc.WCSuccess {
		w.push(c, rxeq.CQEFromWC(wc), true)
	}
}

func (w *worker) retireSend(q *qp) {
	if !q.dma.Begin() {
		return
	}
	err := q.sq.Retire()
	q.dma.End()
	if err != nil && !errors.Is(err, rxeq.ErrNotFetched) {
		q.sqBroken = true
		w.ringError(err)
	}
}

func (w *worker) ringError(err error) {
	w.e.stats.ringErrors.Add(1)
	w.e.log.Warn("rxe ring access failed", "err", err)
}

// push writes one completion into c's ring and posts CQ_COMP if c is armed
// for it (solicited: a solicited completion, or an error).
func (w *worker) push(c *cq, e rxeq.CQE, solicited bool) {
	if c.broken || !c.dma.Begin() {
		return
	}
	err := c.ring.Push(e)
	c.dma.End()
	if err != nil {
		if !errors.Is(err, rxeq.ErrCQFull) {
			w.ringError(err)
		}
		w.cqError(c)
		return
	}
	w.e.stats.cqes.Add(1)
	w.e.cfg.Trace.Emit(trace.CQE, trace.TrackRC, uint64(c.n), uint64(e.Status)<<8|uint64(e.Opcode))
	if solicited {
		c.solEnd, c.hasSol = c.ring.Producer(), true
	}
	// A CQ_ARM the driver wrote since this pass began arms this
	// completion already: armCQ finds it unpolled.
	w.takeArm(c)
	if c.arm == armAny || c.arm == armSolicited && solicited {
		c.arm = 0
		w.postEvent(hw.RDMAEventCQComp, c.n, 0)
	}
}

// takeArm applies a CQ_ARM of c that the register path recorded and no
// pass has applied yet.
func (w *worker) takeArm(c *cq) {
	e := w.e
	e.mu.Lock()
	a := e.cqArms[c.n]
	e.cqArms[c.n] = 0
	e.mu.Unlock()
	if a != 0 {
		w.armCQ(c, a)
	}
}

// armCQ applies a CQ_ARM (armAny or armSolicited) to c. CQ_ARM is a
// posted write and librxe polls the CQ as soon as ibv_req_notify_cq
// returns, so a completion may land after user space polled the CQ empty
// and before the arm reaches the device: the arm carries no consumer
// index to tell. So an arm that finds completions user space has not
// consumed yet (for a solicited-only arm, a solicited one or an error)
// posts CQ_COMP at once; if user space polls them meanwhile, the event
// finds the CQ empty, which a completion channel's consumer handles.
func (w *worker) armCQ(c *cq, a uint8) {
	if c.arm != armAny { // an arm for any completion covers a solicited-only one
		c.arm = a
	}
	if c.broken || !c.dma.Begin() {
		return
	}
	cons, err := c.ring.Consumer()
	c.dma.End()
	if err != nil {
		return // the next completion's write fails too, and posts CQ_ERR
	}
	prod, mask := c.ring.Producer(), c.ring.Geometry().Slots-1
	unpolled := cons != prod
	if c.arm == armSolicited {
		// The last solicited completion lies between consumer and producer.
		unpolled = c.hasSol && (c.solEnd-1-cons)&mask < (prod-cons)&mask
	}
	if unpolled {
		c.arm = 0
		w.postEvent(hw.RDMAEventCQComp, c.n, 0)
	}
}

// cqError stops c (it overran, or its ring failed) and posts CQ_ERR once.
func (w *worker) cqError(c *cq) {
	if c.broken {
		return
	}
	c.broken = true
	w.postEvent(hw.RDMAEventCQErr, c.n, 0)
}

// ---- Send queues ----

// pumpSQ hands the QP's posted send entries to the engine, in order, up to
// a malformed one. Entries wait in the ring while the QP is not yet in RTS
// (as rdma_rxe's requester leaves them).
func (w *worker) pumpSQ(q *qp) {
	if q.sqBroken || q.bad != nil {
		return
	}
	switch q.rc.Query().State {
	case ibrc.StateReset, ibrc.StateInit, ibrc.StateRTR:
		return
	}
	if !q.dma.Begin() {
		return
	}
	defer q.dma.End()
	for q.bad == nil {
		wqe, ok, err := q.sq.Fetch()
		if !ok {
			if err != nil {
				q.sqBroken = true
				w.ringError(err)
			}
			return
		}
		var we *rxeq.WQEError
		if errors.As(err, &we) {
			q.bad = we
			w.e.stats.badWQEs.Add(1)
			return
		}
		wr := wqe.WR
		if q.lim.UD {
			ip, ok := w.sourceIP(wqe.SGIDIndex)
			if !ok {
				q.bad = &rxeq.WQEError{Slot: wqe.Slot, WRID: wr.ID, Opcode: uint32(wr.Opcode), Kind: rxeq.BadAddress}
				w.e.stats.badWQEs.Add(1)
				return
			}
			wr.UD.AV.SrcIP = ip
		}
		sig := q.sigAll || wr.Flags&ibrc.SendSignaled != 0
		wr.Flags |= ibrc.SendSignaled
		if err := q.rc.PostSend(wr); err != nil {
			// rxeq's checks are the engine's, so this is a limit of the
			// engine's own (ibrc.ErrInvalidArg): the entry fails alone.
			q.bad = &rxeq.WQEError{Slot: wqe.Slot, WRID: wr.ID, Opcode: uint32(wr.Opcode), Kind: rxeq.BadOpcode}
			w.e.stats.badWQEs.Add(1)
			return
		}
		q.signaled = append(q.signaled, sig)
	}
}

// checkQP completes a malformed send entry in its turn, moves a QP whose
// rings failed to ERR, reports a QP that went to ERR (QP_FATAL), and
// flushes the receive entries of a QP in ERR. It reports whether it
// completed anything.
func (w *worker) checkQP(q *qp) (moved bool) {
	if q.bad != nil && q.sq.Outstanding() == 1 {
		moved = true
		bad := q.bad
		q.bad = nil
		inErr := q.rc.Query().State == ibrc.StateErr
		wc := bad.WC(q.n)
		if inErr {
			wc.Status = ibrc.WCWRFlushErr
		}
		w.retireSend(q)
		w.push(q.scq, rxeq.CQEFromWC(wc), true)
		if !inErr {
			if q.errStatus == 0 {
				q.errStatus = wc.Status
			}
			_ = q.rc.ModifyQP(&ibrc.QPAttr{State: ibrc.StateErr}, ibrc.AttrState)
		}
		w.pumpSQ(q) // what was posted after it is flushed
	}
	if (q.sqBroken || q.rqBroken.Load()) && q.rc.Query().State != ibrc.StateErr {
		if q.errStatus == 0 {
			q.errStatus = ibrc.WCFatalErr
		}
		w.e.stats.ringErrors.Add(1)
		_ = q.rc.ModifyQP(&ibrc.QPAttr{State: ibrc.StateErr}, ibrc.AttrState)
	}
	if q.rc.Query().State != ibrc.StateErr {
		return moved
	}
	// The engine pushed the completion that moved the QP to ERR before the
	// state changed (under its lock), but its CQ notification may still be
	// on its way: drain both CQs now, so the error status is known and the
	// engine's flushed receives go before what is still posted.
	moved = w.drainCQ(q.scq) || moved
	moved = w.drainCQ(q.rcq) || moved
	if !q.fatalSent && !q.userErr {
		q.fatalSent = true
		st := q.errStatus
		if st == 0 {
			st = ibrc.WCGeneralErr
		}
		switch st {
		case ibrc.WCRemInvReqErr:
			w.postEvent(hw.RDMAEventQPReqErr, q.n, uint32(st))
		case ibrc.WCRemAccessErr:
			w.postEvent(hw.RDMAEventQPAccessErr, q.n, uint32(st))
		}
		w.postEvent(hw.RDMAEventQPFatal, q.n, uint32(st))
	}
	return w.flushRQ(q) || moved
}

// flushRQ completes every posted receive entry of a QP in ERR with
// IBV_WC_WR_FLUSH_ERR, as rdma_rxe does; it reports whether there were
// any.
func (w *worker) flushRQ(q *qp) (moved bool) {
	if q.rqBroken.Load() || q.srq != nil {
		return false // an SRQ is not flushed: its entries are not the QP's
	}
	for {
		q.rqMu.Lock()
		if !q.dma.Begin() {
			q.rqMu.Unlock()
			return
		}
		r, ok, err := q.rq.Fetch()
		id := r.WR.ID
		var we *rxeq.WQEError
		if errors.As(err, &we) {
			id, err = we.WRID, nil
			w.e.stats.badWQEs.Add(1) // flushed, as pumpSQ counts a malformed send entry it flushes
		}
		if ok && err == nil {
			err = q.rq.Retire()
		}
		q.dma.End()
		q.rqMu.Unlock()
		if !ok || err != nil {
			if err != nil {
				q.rqBroken.Store(true)
				w.ringError(err)
			}
			return moved
		}
		moved = true
		w.push(q.rcq, rxeq.CQEFromWC(ibrc.WC{WRID: id, Status: ibrc.WCWRFlushErr, Opcode: ibrc.WCRecv, QPN: q.n}), true)
	}
}

// ---- Teardown ----

// teardown destroys every object (RESET, Close). Their streams were
// stopped by the register path already.
func (w *worker) teardown() {
	for n, q := range w.qps {
		_ = q.rc.Destroy()
		w.e.retire(q.dma)
		delete(w.qps, n)
	}
	for i, c := range w.cqs {
		if c != nil {
			w.e.retire(c.dma)
			w.cqs[i] = nil
		}
	}
	w.live = nil
	for i, s := range w.srqs {
		if s != nil {
			w.e.retire(s.dma)
			w.srqs[i] = nil
		}
	}
	for k, m := range w.mrs {
		m.destroy(w.e)
		delete(w.mrs, k)
	}
	for k, m := range w.mws {
		m.rc.Dealloc()
		delete(w.mws, k)
	}
	clear(w.pds)
	clear(w.pdRefs)
	w.e.mu.Lock()
	clear(w.e.liveQP)
	w.e.liveCQ = [hw.RDMAMaxCQ]bool{}
	w.e.mu.Unlock()
	for i := range w.gids {
		w.gids[i].valid = false
	}
	w.e.gids.Store(&[][4]byte{}) // a publish of the old table may have followed RESET's
	w.e.mu.Lock()
	w.e.rc.Store(w.e.newRCLocked())
	w.e.mu.Unlock()
	// The counters QUERY_STATS reports start over with the objects (the
	// new transport's are zero).
	w.base = devCounts{badWQEs: w.e.stats.badWQEs.Load(), lateRefused: w.e.stats.lateRefused.Load()}
}

func streamName(kind string, n uint32) string { return fmt.Sprintf("rdma-%s%d", kind, n) }
