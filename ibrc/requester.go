package ibrc

import (
	"errors"
	"time"

	"github.com/npfnic/npfnic/ibrc/rocev2"
)

// reqProgress sends request packets while the QP, the window and the
// outstanding-READ limit allow.
func (q *QP) reqProgress() {
	if q.req.building {
		return // the builder's loop looks again (buildData)
	}
	for {
		if q.state != StateRTS && q.state != StateSQD {
			return
		}
		if q.req.rnrWait || q.req.stalled || q.req.next >= len(q.sq) {
			q.checkDrained()
			return
		}
		w := q.sq[q.req.next]
		if w.failed != 0 {
			return // completes in its turn (completeHead)
		}
		if !w.started {
			if q.state == StateSQD {
				q.checkDrained()
				return
			}
			if w.awaitsResponse() && q.req.readsOut >= max(1, int(q.attr.MaxRdAtomic)) {
				return
			}
			if w.wr.Flags&SendFence != 0 && q.req.readsOut > 0 {
				return
			}
		}
		if q.windowRoom(w) <= 0 {
			return
		}
		if !q.sendPacket(w) {
			return
		}
	}
}

// windowRoom is how many PSNs w may take now: the window's room for a
// SEND or WRITE packet; for a READ request, which takes the PSNs of all
// its responses at once, the PSNs it asks for (0: wait). A READ whose
// responses fit in the room asks for all of them; one that needs more
// than the whole window waits until nothing is outstanding and then asks
// for a window's worth, the rest in later requests, so fewer PSNs than
// the window (< 2^23) are ever outstanding, whatever the READ's length.
func (q *QP) windowRoom(w *sendWQE) int {
	out := int(psnDiff(q.req.psn, q.comp.psn))
	room := q.e.cfg.MaxUnackedPSNs - out
	if room <= 0 || !w.isRead() {
		return room
	}
	need := packets(w.length, q.mtu)
	if w.started {
		need = int(psnDiff(w.lastPSN, q.req.psn)) + 1
	}
	switch {
	case need <= room:
		return need
	case out == 0:
		return room
	}
	return 0
}

// sendPacket sends the next packet of w (for a READ, its next request);
// false when it could not (fault stall or error).
func (q *QP) sendPacket(w *sendWQE) bool {
	if w.wr.Opcode.local() {
		return q.localOp(w)
	}
	if q.init.Type == TypeUD {
		return q.sendDatagram(w)
	}
	if !q.e.txRoom(q) {
		return false // the transmit path gives q a turn when it has room
	}
	e := q.e
	if !w.started {
		if q.mtu <= 0 {
			// Only RTS and SQD send, and both have a path; a QP
			// without one fails rather than segment by zero.
			q.failHead(WCLocQPOpErr)
			return false
		}
		w.started = true
		w.mtu, w.npkts = q.mtu, packets(w.length, q.mtu)
		w.firstPSN = q.req.psn
		w.lastPSN = psnAdd(q.req.psn, w.npkts-1)
		if w.awaitsResponse() {
			q.req.readsOut++
		}
	}
	psn := q.req.psn
	h := rocev2.Headers{BTH: rocev2.BTH{PKey: q.attr.PKey, DestQP: q.attr.DestQPN, PSN: psn}}
	retrans := psnDiff(psn, q.req.high) < 0
	var frame []byte
	sent := false // the packet is w's last: an unreliable QP completes w
	if w.isRead() {
		off := q.req.offset
		k := q.windowRoom(w)
		if retrans {
			// Asked again, a READ reaches no further than the request
			// it repeats: the PSNs from high on were never asked for,
			// and a responder drops a repeated READ that goes beyond
			// the one it remembers (rdma_rxe does, class D), which
			// leaves the requester timing out until its retries run out.
			k = min(k, int(psnDiff(q.req.high, psn)))
		}
		n := min(w.length-off, uint64(k)*uint64(w.mtu))
		h.BTH.Opcode = rocev2.OpReadRequest
		h.RETH.RKey = w.wr.RKey
		h.RETH.VA = w.wr.RemoteAddr + off
		h.RETH.DMALength = uint32(n)
		frame, _ = rocev2.BuildFrame(&q.path, &h, 0, func([]byte) error { return nil })
		q.req.psn = psnAdd(psn, k)
		q.req.offset += n
		if q.req.offset == w.length {
			q.req.next++
			q.req.offset = 0
		}
	} else if w.wr.Opcode == WRAtomicWrite {
		h.BTH.Opcode = rocev2.OpAtomicWrite
		h.RETH = rocev2.RETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALength: AtomicSize}
		h.BTH.AckReq = true
		frame = rocev2.AppendFrame(nil, &q.path, &h, w.wr.Inline)
		q.req.psn = psnAdd(psn, 1)
		q.req.next++
	} else if w.isAtomic() {
		h.BTH.Opcode = rocev2.OpFetchAdd
		h.AtomicETH = rocev2.AtomicETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapOrAdd: w.wr.CompareAdd}
		if w.wr.Opcode == WRAtomicCmpSwp {
			h.BTH.Opcode = rocev2.OpCompareSwap
			h.AtomicETH.SwapOrAdd, h.AtomicETH.CompareDat = w.wr.Swap, w.wr.CompareAdd
		}
		h.BTH.AckReq = true
		frame, _ = rocev2.BuildFrame(&q.path, &h, 0, func([]byte) error { return nil })
		q.req.psn = psnAdd(psn, 1)
		q.req.next++
	} else {
		off := q.req.offset
		n := min(uint64(w.mtu), w.length-off)
		first, last := off == 0, off+n == w.length
		imm := w.wr.Opcode == WRSendImm || w.wr.Opcode == WRWriteImm
		switch {
		case w.wr.Opcode == WRSendWithInv && last:
			h.BTH.Opcode, h.IETH.RKey = rocev2.OpSendLastInv, w.wr.InvRKey
			if first {
				h.BTH.Opcode = rocev2.OpSendOnlyInv
			}
		case w.wr.Opcode == WRSend || w.wr.Opcode == WRSendImm || w.wr.Opcode == WRSendWithInv:
			h.BTH.Opcode = rocev2.SendOpcode(first, last, imm)
		default:
			h.BTH.Opcode = rocev2.WriteOpcode(first, last, imm)
			if first {
				h.RETH = rocev2.RETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALength: uint32(w.length)}
			}
		}
		h.BTH.Opcode = h.BTH.Opcode.On(q.init.Type.service())
		if last && imm {
			h.ImmDt.Data = w.wr.Imm
		}
		h.BTH.SolicitedEvent = last && w.wr.Flags&SendSolicited != 0
		window := q.e.cfg.MaxUnackedPSNs
		h.BTH.AckReq = q.init.Type == TypeRC && (last || q.req.ackNext ||
			int(psn)%e.cfg.AckEvery == e.cfg.AckEvery-1 ||
			int(psnDiff(psnAdd(psn, 1), q.comp.psn)) >= window)
		if w.wr.Flags&SendInline != 0 || n == 0 {
			frame, _ = rocev2.AppendFrameFill(e.frameBuf(), &q.path, &h, int(n), func(p []byte) error {
				clear(p[copy(p, w.wr.Inline[off:]):])
				return nil
			})
			q.req.psn = psnAdd(psn, 1)
			q.req.offset += n
			if last {
				q.req.next++
				q.req.offset = 0
				sent = true
			}
		} else {
			var ok bool
			if frame, ok = q.buildData(w, &h, off, n, retrans); frame == nil {
				return ok
			}
			sent = last
		}
	}
	q.req.ackNext = false
	e.stats.DataPackets.Add(1)
	if retrans {
		e.stats.Retransmits.Add(1)
	} else if psnDiff(q.req.psn, q.req.high) > 0 {
		q.req.high = q.req.psn
	}
	if seq := e.send(frame); seq != 0 {
		q.req.lastSent = seq
	}
	if q.unreliable() {
		if sent {
			q.sentUnreliable()
		}
		return true
	}
	q.armTimer()
	return true
}

// buildData builds the SEND or WRITE packet h of w that carries the n
// bytes at message offset off from w's SGL, with q's lock let go across
// the gather and the ICRC: the packet's PSN and place in w are taken
// first (the cursor moves past it, and high with it), so that the QP's
// completer, its responder and the verbs go on meanwhile. Only one
// goroutine builds a QP's packets at a time (req.building: reqProgress
// finds it set and leaves the new work to the builder, whose loop looks
// again), so they go out in PSN order. It returns the frame, with q's
// lock held again, or nil and what sendPacket returns: a QP reset,
// destroyed or out of the sending states meanwhile sends nothing (false),
// and one whose cursor a retry moved meanwhile (true: the loop goes on
// from the new cursor, which meets the error again if it lasts). A gather
// that failed puts the cursor back on the packet and handles the error as
// sendPacket always has. Caller holds q.mu.
func (q *QP) buildData(w *sendWQE, h *rocev2.Headers, off, n uint64, retrans bool) ([]byte, bool) {
	e := q.e
	psn := h.BTH.PSN
	prevHigh, ackNext := q.req.high, q.req.ackNext
	q.req.psn = psnAdd(psn, 1)
	q.req.offset += n
	if off+n == w.length {
		q.req.next++
		q.req.offset = 0
	}
	if !retrans {
		q.req.high = q.req.psn
	}
	q.req.ackNext = false
	q.req.building = true
	gen, cursor := q.gen, q.req.cursorGen
	path := q.path
	buf := e.frameBuf()
	q.mu.Unlock()
	frame, err := rocev2.AppendFrameFill(buf, &path, h, int(n), func(p []byte) error {
		return q.gather(w.wr.SGL, off, p)
	})
	q.mu.Lock()
	if q.gen != gen || q.dead {
		// Reset or destroyed: req, building included, is no longer
		// this build's (a QP set up again may be building already).
		e.RecycleFrame(frame)
		return nil, false
	}
	q.req.building = false
	if q.state != StateRTS && q.state != StateSQD {
		e.RecycleFrame(frame)
		return nil, false
	}
	if err == nil {
		return frame, true
	}
	e.RecycleFrame(frame) // AppendFrameFill gave buf back
	if q.req.cursorGen != cursor || psnDiff(psn, q.comp.psn) < 0 {
		// A retry moved the cursor, or the packet was acknowledged
		// (a retransmission): the loop goes on from where it is now.
		return nil, true
	}
	q.setCursor(psn)
	if !retrans {
		q.req.high = prevHigh
	}
	q.req.ackNext = ackNext
	if _, _, fault := AsFault(err); !fault && q.req.next > 0 {
		// A bad SGL behind outstanding WQEs: they complete first, then
		// this one with the error (in order).
		w.failed = WCLocProtErr
		return nil, false
	}
	q.localFault(err, w, off, psn, false, &q.req.stalled, q.reqProgress)
	return nil, false
}

// failHead completes the oldest WQE with an error and moves the QP to ERR.
func (q *QP) failHead(st WCStatus) {
	if q.state == StateErr {
		return
	}
	if len(q.sq) > 0 {
		q.completeHead(st)
	}
	q.moveToErr()
}

// sglFault is a translation fault of an SGL access with the region it
// hit: a packet may span SGEs of regions in different address spaces, and
// the page request goes to the one that faulted, not to the region where
// the packet starts.
type sglFault struct {
	error
	mem Memory
}

func (f *sglFault) Unwrap() error { return f.error }

// faultMem is the region of an SGL access's fault (walkSGL), nil for any
// other error.
func faultMem(err error) Memory {
	var f *sglFault
	if errors.As(err, &f) {
		return f.mem
	}
	return nil
}

// localFault handles an error of the requester's own access to w's SGL at
// message offset off for the packet at psn (gathering a payload, or
// scattering a READ response when write). A translation fault holds
// *paused until the page request completes, then runs resume, or
// completes w with LOC_ACCESS_ERR if the page cannot be made present; any
// other error is LOC_PROT_ERR.
func (q *QP) localFault(err error, w *sendWQE, off uint64, psn uint32, write bool, paused *bool, resume func()) {
	va, _, ok := AsFault(err)
	if !ok {
		q.failHead(WCLocProtErr)
		return
	}
	q.e.stats.RequesterFaults.Add(1)
	*paused = true
	q.pageRequest(RoleRequester, faultMem(err), va, sglSpan(w.wr.SGL, va), psn, write, func(ok bool) {
		*paused = false
		if !ok {
			q.failWQE(w, WCLocAccessErr)
			return
		}
		resume()
	})
}

// failWQE completes w with st in its turn: now if it is the oldest (and
// the QP goes to ERR), else once the WQEs before it completed (a payload
// that faults behind outstanding WQEs). A w that is gone (flushed, reset)
// is left alone.
func (q *QP) failWQE(w *sendWQE, st WCStatus) {
	if q.state == StateErr || len(q.sq) == 0 {
		return
	}
	if q.sq[0] == w {
		q.failHead(st)
		return
	}
	for _, x := range q.sq[1:] {
		if x == w {
			w.failed = st
			return
		}
	}
}

// gather reads len(p) bytes at message offset off of an SGL. A region
// deregistered since the lookup fails the access as one not found
// (errMRDead is an sglError).
func (q *QP) gather(sgl []SGE, off uint64, p []byte) error {
	return q.walkSGL(sgl, off, len(p), 0, func(m *MR, va uint64, lo, hi int) error {
		return m.readAt(va, p[lo:hi])
	})
}

// scatter writes p at message offset off of an SGL.
func (q *QP) scatter(sgl []SGE, off uint64, p []byte) error {
	return q.walkSGL(sgl, off, len(p), AccessLocalWrite, func(m *MR, va uint64, lo, hi int) error {
		return m.writeAt(va, p[lo:hi])
	})
}

// sglSpan is how many bytes of sgl's SGE that holds va lie from va on (1
// when none holds it): what the access that faulted at va goes on to
// touch in that SGE's region.
func sglSpan(sgl []SGE, va uint64) uint64 {
	for _, s := range sgl {
		if va >= s.Addr && va-s.Addr < uint64(s.Length) {
			return s.Addr + uint64(s.Length) - va
		}
	}
	return 1
}

type sglError string

func (e sglError) Error() string { return "ibrc: " + string(e) }

func (q *QP) walkSGL(sgl []SGE, off uint64, n int, need Access, f func(m *MR, va uint64, lo, hi int) error) error {
	done := 0
	for _, s := range sgl {
		if done == n {
			break
		}
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		k := int(min(l-off, uint64(n-done)))
		m := q.e.lookupMR(s.LKey, q.pd, need, s.Addr, l)
		if m == nil {
			return sglError("SGE outside a valid memory region")
		}
		if err := f(m, s.Addr+off, done, done+k); err != nil {
			if _, _, fault := AsFault(err); fault {
				return &sglFault{err, m.mem}
			}
			return err
		}
		done += k
		off = 0
	}
	if done != n {
		return sglError("SGL shorter than the message")
	}
	return nil
}

// completeHead removes the oldest send WQE with a completion (always for
// errors, for success when signaled).
func (q *QP) completeHead(st WCStatus) {
	w := q.sq[0]
	q.sq[0] = nil
	q.sq = q.sq[1:]
	q.sendsDone++
	if q.req.next > 0 {
		q.req.next--
	} else {
		q.req.offset = 0
	}
	if w.awaitsResponse() && w.started {
		q.req.readsOut--
	}
	if st != WCSuccess || q.init.SigAll || w.wr.Flags&SendSignaled != 0 {
		wc := WC{WRID: w.wr.ID, Status: st, Opcode: wcOpcode(w.wr.Opcode), QPN: q.num}
		if st == WCSuccess {
			wc.ByteLen = uint32(w.length)
		}
		q.init.SendCQ.push(wc)
	}
	if len(q.sq) > 0 && q.sq[0].failed != 0 && q.state != StateErr {
		q.failHead(q.sq[0].failed)
	}
}

func (q *QP) outstanding() bool { return len(q.sq) > 0 && q.sq[0].started }

// armTimer starts the local ACK timer if packets are outstanding and it is
// not running.
func (q *QP) armTimer() {
	d := q.ackTimeout()
	if d == 0 || q.req.timer != nil || q.req.rnrWait || !q.outstanding() {
		return
	}
	q.req.timerDue = q.e.clk.Now().Add(d)
	q.startTimer(d)
}

// ackTimeout is the local ACK timeout, 0 for none.
func (q *QP) ackTimeout() time.Duration {
	d := rocev2.LocalAckTimeout(q.attr.Timeout)
	if d == 0 {
		return 0
	}
	return max(d, q.e.cfg.MinAckTimeout)
}

// startTimer runs the local ACK timer for d. It times out at timerDue,
// which restartTimer moves on: a timer that fires before it starts again
// for what is left, so that an ACK costs a reading of the clock rather
// than stopping one timer and making another.
func (q *QP) startTimer(d time.Duration) {
	tok := new(int)
	q.req.timerTok = tok
	e := q.e
	q.req.timer = e.clk.AfterFunc(d, func() {
		q.mu.Lock()
		defer q.unlock()
		if q.req.timerTok != tok {
			return
		}
		if left := q.req.timerDue.Sub(e.clk.Now()); left > 0 {
			q.startTimer(left)
			return
		}
		q.req.timer, q.req.timerTok = nil, nil
		q.onTimeout()
	})
}

// restartTimer starts the local ACK timeout again from now, or stops the
// timer when nothing is outstanding.
func (q *QP) restartTimer() {
	if q.req.timer != nil {
		if d := q.ackTimeout(); d != 0 && !q.req.rnrWait && q.outstanding() {
			q.req.timerDue = q.e.clk.Now().Add(d)
			return
		}
		q.req.timer.Stop()
		q.req.timer, q.req.timerTok = nil, nil
	}
	q.armTimer()
}

func (q *QP) onTimeout() {
	if q.state != StateRTS && q.state != StateSQD || !q.outstanding() || q.req.rnrWait {
		return
	}
	if q.e.waiting(q.req.lastSent) {
		// The port has not put the QP's last packet on the wire yet (a
		// stream to a peer that reads slowly backs it up): nothing timed
		// out on the wire, and a retry would queue the window again
		// behind the copies still waiting. The timer runs again.
		q.armTimer()
		return
	}
	if q.req.retryCnt == 0 {
		q.failHead(WCRetryExcErr)
		return
	}
	q.req.retryCnt--
	q.e.stats.Timeouts.Add(1)
	q.req.startedRetry = false
	q.retryFrom(q.comp.psn)
}

// retryFrom rewinds the requester to psn and sends again from there.
func (q *QP) retryFrom(psn uint32) {
	q.setCursor(psn)
	q.req.ackNext = true
	q.restartTimer()
	q.reqProgress()
	q.armTimer()
}

// setCursor points the requester at psn: the WQE holding it and the byte
// offset of that PSN in it.
func (q *QP) setCursor(psn uint32) {
	q.req.cursorGen++
	i := 0
	for ; i < len(q.sq) && q.sq[i].started; i++ {
		w := q.sq[i]
		if psnDiff(psn, w.lastPSN) <= 0 {
			k := max(0, int(psnDiff(psn, w.firstPSN)))
			q.req.next = i
			q.req.offset = min(uint64(k)*uint64(w.mtu), w.length)
			q.req.psn = psnAdd(w.firstPSN, k)
			return
		}
	}
	q.req.next = i
	q.req.offset = 0
	q.req.psn = psn
}

func (q *QP) checkDrained() {
	if q.state != StateSQD || !q.req.draining || q.req.drained {
		return
	}
	if q.outstanding() || q.req.offset != 0 {
		return
	}
	q.req.drained = true
	q.e.event(Event{Type: EventSQDrained, QPN: q.num})
}

// SQDrained reports whether an SQD QP has no message in progress.
func (q *QP) SQDrained() bool {
	q.mu.Lock()
	defer q.unlockRead()
	return q.state == StateSQD && q.req.drained
}
