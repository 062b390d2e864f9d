package ibrc

import (
	"errors"
	"sync"

	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// respond handles a request packet (SEND, RDMA WRITE, RDMA READ, atomics).
func (q *QP) respond(p *rocev2.Packet, frame []byte) error {
	e := q.e
	if !q.resp.commEst {
		q.resp.commEst = true
		if q.state == StateRTR {
			e.event(Event{Type: EventCommEstablished, QPN: q.num})
		}
	}
	if q.resp.held || q.resp.replaying {
		// A receive fault holds the request before this one, or the
		// requests that waited are being executed: this one waits
		// behind them, in the requester's order.
		return q.waitBehind(frame)
	}
	return q.respondInOrder(p, frame)
}

// respondInOrder handles a request packet whose turn has come: the ones
// before it were executed, or are held with it behind them.
func (q *QP) respondInOrder(p *rocev2.Packet, frame []byte) error {
	e := q.e
	if q.resp.stall != nil {
		if q.replayRead(p) {
			return nil
		}
		// A READ is still being answered (or waits for a page): later
		// requests wait behind it, as their responses follow its own.
		return q.waitBehind(frame)
	}
	q.resp.frame = frame // what a receive fault holds under FaultHold
	defer func() { q.resp.frame = nil }()
	psn := p.BTH.PSN
	d := psnDiff(psn, q.resp.psn)
	if d > 0 {
		if q.resp.sentNAK {
			e.stats.OutOfSeqDropped.Add(1)
			return errDiscard("out of sequence after a NAK")
		}
		q.resp.sentNAK = true
		e.stats.SeqNakSent.Add(1)
		q.sendAck(q.resp.psn, rocev2.NAKSyndrome(rocev2.NAKPSNSeqError))
		return nil
	}
	if d < 0 {
		q.duplicate(p)
		return nil
	}
	q.resp.sentNAK = false
	op := p.BTH.Opcode
	// Opcode sequence (IBA 9.7.5.1.1... C9-83): a message in progress
	// continues with the same operation.
	switch q.resp.inMsg {
	case rocev2.Send, rocev2.Write:
		if !op.Has(q.resp.inMsg) || op.Has(rocev2.First) {
			return q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
		}
	default:
		if !op.Has(rocev2.First) {
			return q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
		}
	}
	acc := q.attr.AccessFlags
	switch {
	case op.Has(rocev2.Write) && acc&AccessRemoteWrite == 0, op.Has(rocev2.Read) && acc&AccessRemoteRead == 0,
		op.Has(rocev2.AtomicWrite) && acc&AccessRemoteWrite == 0,
		op.Has(rocev2.Atomic) && acc&AccessRemoteAtomic == 0:
		return q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
	}
	// Payload length: First and Middle packets carry exactly one MTU, Last
	// packets 1..MTU, Only packets 0..MTU.
	n := len(p.Payload)
	switch {
	case op.Has(rocev2.Read), op.Has(rocev2.Atomic):
		if n != 0 {
			return q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
		}
	case op.Has(rocev2.AtomicWrite):
		if n != AtomicSize {
			return q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
		}
	case !op.Has(rocev2.Last):
		if n != q.mtu {
			return q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
		}
	case !op.Has(rocev2.First):
		if n == 0 || n > q.mtu {
			return q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
		}
	default:
		if n > q.mtu {
			return q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
		}
	}
	switch {
	case op.Has(rocev2.Send):
		q.execSend(p)
	case op.Has(rocev2.Write):
		q.execWrite(p)
	case op.Has(rocev2.Atomic):
		q.execAtomic(p)
	case op.Has(rocev2.AtomicWrite):
		q.execAtomicWrite(p)
	default:
		q.execRead(p)
	}
	return nil
}

// classC answers an invalid request with a NAK and moves the QP to ERR
// (IBA 9.9.3.1.3: responder class C errors). A SEND in progress completes
// with st.
func (q *QP) classC(code uint8, st WCStatus) error {
	if q.unreliable() {
		return q.dropMessage("UC request refused: " + st.String())
	}
	q.e.stats.ErrNakSent.Add(1)
	q.sendAck(q.resp.psn, rocev2.NAKSyndrome(code))
	if w := q.resp.wqe; w != nil && len(q.rq) > 0 && q.rq[0] == w {
		q.rq = q.rq[1:]
		q.init.RecvCQ.push(WC{WRID: w.wr.ID, Status: st, Opcode: WCRecv, QPN: q.num})
		q.resp.wqe = nil
	}
	q.moveToErr()
	return nil
}

// sendAck sends an ACK or NAK for psn with the current MSN; nothing on an
// unreliable QP, which never answers.
func (q *QP) sendAck(psn uint32, syn rocev2.Syndrome) {
	if q.unreliable() {
		return
	}
	if syn.IsACK() {
		q.e.stats.Acks.Add(1)
	}
	h := rocev2.Headers{
		BTH:  rocev2.BTH{Opcode: rocev2.OpAck, PKey: q.attr.PKey, DestQP: q.attr.DestQPN, PSN: psn},
		AETH: rocev2.AETH{Syndrome: syn, MSN: q.resp.msn},
	}
	f, _ := rocev2.BuildFrame(&q.path, &h, 0, func([]byte) error { return nil })
	q.e.send(f)
}

// rnrNak tells the requester to back off and retransmit psn later; a UC
// responder, which cannot, drops the message.
func (q *QP) rnrNak(psn uint32) {
	if q.unreliable() {
		q.dropMessage("UC receiver not ready")
		return
	}
	q.resp.sentNAK = true // drop what follows silently until psn returns
	q.sendAck(psn, rocev2.RNRNAKSyndrome(q.attr.MinRNRTimer))
}

// inSeqDone advances the expected PSN past an executed packet and ACKs it
// when asked to; the packet that had faulted ends its fault.
func (q *QP) inSeqDone(p *rocev2.Packet) {
	op := p.BTH.Opcode
	if q.resp.faulted && p.BTH.PSN == q.resp.faultPSN {
		q.resp.faulted = false
		q.e.cfg.Trace.Emit(trace.RCResume, trace.TrackRC, uint64(q.num), uint64(p.BTH.PSN))
	}
	q.resp.psn = psnAdd(p.BTH.PSN, 1)
	switch {
	case op.Has(rocev2.Last):
		q.resp.inMsg = 0
		q.resp.msn = (q.resp.msn + 1) & psnMask
		q.e.messageExecuted()
	case op.Has(rocev2.First):
		q.resp.inMsg = op.Flags() & (rocev2.Send | rocev2.Write)
	}
	if p.BTH.AckReq {
		q.sendAck(p.BTH.PSN, rocev2.ACKSyndrome(rocev2.CreditsInvalid))
	}
}

// recvFault handles a translation fault while placing request data.
func (q *QP) recvFault(p *rocev2.Packet, mem Memory, va, span uint64) {
	e := q.e
	e.stats.ResponderFaults.Add(1)
	psn := p.BTH.PSN
	q.resp.faulted, q.resp.faultPSN = true, psn
	q.pageRequest(RoleResponder, mem, va, span, psn, true, func(ok bool) {
		if q.resp.held {
			q.releaseHeld(psn, ok)
		} else if !ok {
			q.recvFaultFailed(psn)
		}
	})
	if q.unreliable() {
		// Nothing will send it again: the message is lost, and the
		// page is on its way for the next one.
		e.stats.FaultDrops.Add(1)
		q.resp.faulted = false
		q.dropMessage("UC receive fault")
		return
	}
	switch e.RecvFaultPolicy() {
	case FaultDrop:
		e.stats.FaultDrops.Add(1)
		q.resp.sentNAK = true // no sequence-error NAK: only the timeout recovers
		return
	case FaultHold:
		if q.resp.frame != nil {
			e.stats.FaultHolds.Add(1)
			q.resp.held = true
			q.resp.backlog = append([][]byte{append([]byte(nil), q.resp.frame...)}, q.resp.backlog...)
			return
		}
	}
	e.stats.RNRNakFault.Add(1)
	q.rnrNak(p.BTH.PSN)
}

// waitBehind keeps a request that arrived while an earlier one is held
// (a READ being answered, a receive fault under FaultHold) for when that
// one is done; past maxBacklog (maxHeld behind a fault) it is dropped,
// and the requester's timeout sends it again.
func (q *QP) waitBehind(frame []byte) error {
	limit := maxBacklog
	if q.resp.held || q.resp.replaying {
		limit = maxHeld
	}
	if len(q.resp.backlog) < limit {
		q.resp.backlog = append(q.resp.backlog, append([]byte(nil), frame...))
		return nil
	}
	q.e.stats.OutOfSeqDropped.Add(1)
	return errDiscard("responder backlog full")
}

// releaseHeld executes the requests a receive fault held once its page
// request completed: the faulting one first, placed now that its page is
// there, or failed with a remote access error if the page could not be
// made present.
func (q *QP) releaseHeld(psn uint32, ok bool) {
	if !q.resp.held {
		return
	}
	q.resp.held = false
	if !ok {
		q.resp.backlog = nil
		q.recvFaultFailed(psn)
		return
	}
	q.replayBacklog()
}

// recvFaultFailed fails the request whose data could not be placed at psn
// because its page request failed: a remote access error NAK for that PSN
// (a SEND's receive WR completes with WCLocAccessErr) and the QP to ERR,
// as for an access outside the region. The requester is waiting out an
// RNR NAK or its ACK timeout meanwhile, so the NAK goes out now. Nothing
// happens if the responder moved past psn since (another path made the
// page present and the retransmission was placed) or left the states
// that respond.
func (q *QP) recvFaultFailed(psn uint32) {
	switch {
	case q.state == StateReset || q.state == StateInit || q.state == StateErr:
		return
	case q.resp.psn != psn || q.resp.stall != nil:
		return
	}
	q.classC(rocev2.NAKRemoteAccess, WCLocAccessErr)
}

// placeUnlocked runs place, the copy of a request's data into guest
// memory, with q's lock let go, so that the QP's requester, completer and
// verbs go on meanwhile; the responder's state moves on only after it
// (its caller's). The request packets of q that arrive meanwhile, on
// other goroutines, wait for it (waitPlaced), so packets are placed and
// completed in PSN order. live is false when q was reset, destroyed or
// put in a state that does not respond meanwhile: the packet is then
// dropped, as it would have been had it come after. Caller holds q.mu.
func (q *QP) placeUnlocked(place func() error) (err error, live bool) {
	gen := q.gen
	q.resp.placing = true
	q.mu.Unlock()
	err = place()
	q.mu.Lock()
	if q.gen == gen {
		// Else reset meanwhile: resp, placing included, is no longer
		// this packet's (a QP set up again may be placing already).
		q.resp.placing = false
	}
	if q.placed != nil {
		q.placed.Broadcast()
	}
	live = q.gen == gen && !q.dead && (q.state == StateRTR || q.state == StateRTS || q.state == StateSQD)
	return err, live
}

// waitPlaced waits until no request packet of q is being placed
// (placeUnlocked). Caller holds q.mu.
func (q *QP) waitPlaced() {
	for q.resp.placing {
		if q.placed == nil {
			q.placed = sync.NewCond(&q.mu)
		}
		q.placed.Wait()
	}
}

func (q *QP) execSend(p *rocev2.Packet) {
	op := p.BTH.Opcode
	if op.Has(rocev2.First) {
		if !q.pullRecv() {
			if q.state == StateErr {
				return
			}
			q.e.stats.RNRNakNoWQE.Add(1)
			q.rnrNak(p.BTH.PSN)
			return
		}
		q.resp.wqe = q.rq[0]
		q.resp.offset = 0
	}
	w := q.resp.wqe
	if q.resp.offset+uint64(len(p.Payload)) > w.length {
		q.classC(rocev2.NAKInvalidRequest, WCLocLenErr)
		return
	}
	off := q.resp.offset // read under the lock: the copy runs without it
	err, live := q.placeUnlocked(func() error { return q.scatter(w.wr.SGL, off, p.Payload) })
	if !live {
		return
	}
	if err != nil {
		if va, _, ok := AsFault(err); ok {
			q.recvFault(p, faultMem(err), va, sglSpan(w.wr.SGL, va))
			return
		}
		q.classC(rocev2.NAKRemoteOp, WCLocProtErr)
		return
	}
	q.resp.offset += uint64(len(p.Payload))
	if op.Has(rocev2.Last) {
		if sendInvalidates(p) && q.invalidate(p.IETH.RKey) != nil {
			q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
			return
		}
		q.rq = q.rq[1:]
		wc := WC{WRID: w.wr.ID, Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(q.resp.offset), QPN: q.num}
		if op.Has(rocev2.HasImmDt) {
			wc.Imm, wc.Flags = p.ImmDt.Data, WCWithImm
		}
		if sendInvalidates(p) {
			wc.Imm, wc.Flags = p.IETH.RKey, WCWithInv
		}
		wc.Solicited = p.BTH.SolicitedEvent
		q.init.RecvCQ.push(wc)
		q.resp.wqe = nil
	}
	q.inSeqDone(p)
}

func (q *QP) execWrite(p *rocev2.Packet) {
	op := p.BTH.Opcode
	n := uint64(len(p.Payload))
	mr, va, resid := q.resp.wMR, q.resp.wVA, q.resp.wResid
	if op.Has(rocev2.First) {
		r := &p.RETH
		l := uint64(r.DMALength)
		if l > MaxMsgSize || op.Has(rocev2.Last) && l != n || !op.Has(rocev2.Last) && l <= n {
			q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
			return
		}
		mr = nil
		if l > 0 {
			if mr = q.lookupRemote(r.RKey, AccessRemoteWrite, r.VA, l); mr == nil {
				q.classC(rocev2.NAKRemoteAccess, WCRemAccessErr)
				return
			}
		}
		va, resid = r.VA, l
		q.resp.wLen = l
	} else if mr != nil && mr.dead.Load() {
		// Deregistered between the packets of this WRITE: the rest of
		// the message has nowhere to go.
		q.classC(rocev2.NAKRemoteAccess, WCRemAccessErr)
		return
	}
	if n > resid || op.Has(rocev2.Last) && n != resid {
		q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	imm := op.Has(rocev2.HasImmDt)
	if imm && !q.pullRecv() {
		if q.state == StateErr {
			return
		}
		q.e.stats.RNRNakNoWQE.Add(1)
		q.rnrNak(p.BTH.PSN)
		return
	}
	if n > 0 {
		// A region deregistered since (errMRDead) fails as above.
		err, live := q.placeUnlocked(func() error { return mr.writeAt(va, p.Payload) })
		if !live {
			return
		}
		if err != nil {
			if fva, _, ok := AsFault(err); ok {
				// The WRITE goes on to its last byte: resid from va.
				q.recvFault(p, mr.mem, fva, va+resid-fva)
				return
			}
			q.classC(rocev2.NAKRemoteAccess, WCRemAccessErr)
			return
		}
	}
	q.resp.wMR, q.resp.wVA, q.resp.wResid = mr, va+n, resid-n
	if imm {
		w := q.rq[0]
		q.rq = q.rq[1:]
		q.init.RecvCQ.push(WC{WRID: w.wr.ID, Status: WCSuccess, Opcode: WCRecvRDMAImm,
			ByteLen: uint32(q.resp.wLen), Imm: p.ImmDt.Data, Flags: WCWithImm, QPN: q.num, Solicited: p.BTH.SolicitedEvent})
	}
	q.inSeqDone(p)
}

func (q *QP) execRead(p *rocev2.Packet) {
	r := &p.RETH
	l := uint64(r.DMALength)
	if l > MaxMsgSize {
		q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	var mr *MR
	if l > 0 {
		if mr = q.lookupRemote(r.RKey, AccessRemoteRead, r.VA, l); mr == nil {
			q.classC(rocev2.NAKRemoteAccess, WCRemAccessErr)
			return
		}
	}
	npkts := packets(l, q.mtu)
	res := readRes{first: p.BTH.PSN, last: psnAdd(p.BTH.PSN, npkts-1), va: r.VA, length: l, rkey: r.RKey, mr: mr, mtu: q.mtu, valid: true}
	q.resp.reads[q.resp.readNext] = res
	q.resp.readNext = (q.resp.readNext + 1) % len(q.resp.reads)
	q.resp.psn = psnAdd(res.last, 1)
	q.resp.msn = (q.resp.msn + 1) & psnMask
	q.e.messageExecuted()
	q.answerRead(res, res.first)
}

// readStall is the READ being answered: its responses from psn on are
// still to go out, a turn at a time as the transmit path has room
// (readStep), or they wait for the page of psn's data (fault). It is all
// a READ holds, whatever length the peer asked for. Requests that arrive
// meanwhile wait behind it (backlog): responses go out in PSN order.
type readStall struct {
	res  readRes
	from uint32 // the PSN this answer started at: its First response
	psn  uint32 // the next response
	// fault: waiting for the page of psn's data; resume: psn's data
	// faulted, and its response going out ends the fault (the trace's
	// RCResume).
	fault, resume bool
}

// answerRead starts sending the responses of res from PSN from on (a new
// READ, or a duplicate asking again from there).
func (q *QP) answerRead(res readRes, from uint32) {
	q.resp.stall = &readStall{res: res, from: from, psn: from}
	q.readStep()
}

// replayRead handles a duplicate of the READ being answered: its
// responses start again from the PSN asked for, as the requester has what
// came before. Re-executing it after the READ (the backlog) would send
// again all the responses the requester did not ask for again, as many
// as the READ has, and a requester whose ACK timeout is shorter than a
// long READ takes would ask again for each, which buries the link.
func (q *QP) replayRead(p *rocev2.Packet) bool {
	st := q.resp.stall
	psn := p.BTH.PSN
	if st.fault || p.BTH.Opcode != rocev2.OpReadRequest || psnDiff(psn, q.resp.psn) >= 0 ||
		psnDiff(psn, st.res.first) < 0 || psnDiff(psn, st.res.last) > 0 || p.RETH.RKey != st.res.rkey {
		return false
	}
	q.e.stats.DupRequests.Add(1)
	st.from, st.psn = psn, psn
	return true
}

// readStep sends the next responses of the READ being answered, at most
// readBurst and only while the transmit path has room; the transmit side
// gives it its next turn (txTurn). A response's data is read only when it
// is about to go out, from a region that is still registered: once the
// region is deregistered the READ ends with a remote access error, as it
// would have begun with one. A fault reading the data stalls the READ
// until the page arrives.
func (q *QP) readStep() {
	e := q.e
	st := q.resp.stall
	res := &st.res
	for range readBurst {
		if res.mr != nil && res.mr.dead.Load() {
			q.readGone(st.psn)
			return
		}
		if !e.txRoom(q) {
			return
		}
		psn := st.psn
		// Offsets are the READ's own segmentation: the path MTU may have
		// changed since (SQD), and res's range was checked for this one.
		off := uint64(psnDiff(psn, res.first)) * uint64(res.mtu)
		n := min(uint64(res.mtu), res.length-off)
		first, last := psn == st.from, psn == res.last
		h := rocev2.Headers{BTH: rocev2.BTH{Opcode: rocev2.ReadRespOpcode(first, last), PKey: q.attr.PKey, DestQP: q.attr.DestQPN, PSN: psn}}
		h.AETH = rocev2.AETH{Syndrome: rocev2.ACKSyndrome(rocev2.CreditsInvalid), MSN: q.resp.msn}
		f, err := rocev2.AppendFrameFill(e.frameBuf(), &q.path, &h, int(n), func(b []byte) error {
			if len(b) == 0 {
				return nil
			}
			return res.mr.readAt(res.va+off, b)
		})
		if err != nil {
			if errors.Is(err, errMRDead) {
				q.readGone(psn) // deregistered since the check above
				return
			}
			if va, _, ok := AsFault(err); ok {
				e.stats.ResponderFaults.Add(1)
				st.fault = true
				q.pageRequest(RoleResponder, res.mr.mem, va, res.va+res.length-va, psn, false, func(ok bool) { q.resumeRead(ok) })
				return
			}
			q.resp.stall = nil
			e.stats.ErrNakSent.Add(1)
			q.sendAck(psn, rocev2.NAKSyndrome(rocev2.NAKRemoteOp))
			q.moveToErr()
			return
		}
		e.send(f)
		if st.resume {
			st.resume = false
			e.cfg.Trace.Emit(trace.RCResume, trace.TrackRC, uint64(q.num), uint64(psn))
		}
		if last {
			q.resp.stall = nil
			return
		}
		st.psn = psnAdd(psn, 1)
	}
	e.txWaitFor(q)
}

// readGone ends the READ being answered at psn because its region was
// deregistered: a remote access NAK, as the READ would have begun with.
func (q *QP) readGone(psn uint32) {
	q.resp.stall = nil
	q.e.stats.ErrNakSent.Add(1)
	q.sendAck(psn, rocev2.NAKSyndrome(rocev2.NAKRemoteAccess))
	q.moveToErr()
}

// readTurn continues the READ being answered and, once it is done, the
// requests that waited behind it.
func (q *QP) readTurn() {
	if st := q.resp.stall; st == nil || st.fault {
		return
	}
	q.readStep()
	q.replayBacklog()
}

// replayBacklog executes, in order, the requests that waited behind a
// READ being answered or a held receive fault, until one of them holds
// the responder again.
func (q *QP) replayBacklog() {
	if q.resp.stall != nil || q.resp.held || q.resp.replaying || len(q.resp.backlog) == 0 {
		return
	}
	d := q.e.decoder()
	defer q.e.putDecoder(d)
	gen := q.gen
	q.resp.replaying = true
	for q.resp.stall == nil && !q.resp.held && len(q.resp.backlog) > 0 && q.state != StateErr {
		f := q.resp.backlog[0]
		q.resp.backlog = q.resp.backlog[1:]
		pkt, err := d.Decode(f)
		if err == nil {
			q.respondInOrder(pkt, f)
		}
		if q.gen != gen {
			return // reset while a request was placed: resp is the new QP's
		}
	}
	q.resp.replaying = false
}

// resumeRead continues a READ whose data faulted once the page request
// completed.
func (q *QP) resumeRead(ok bool) {
	st := q.resp.stall
	if st == nil || !st.fault || q.state == StateErr || q.state == StateReset {
		return
	}
	st.fault = false
	if !ok {
		q.resp.stall = nil
		q.e.stats.ErrNakSent.Add(1)
		q.sendAck(st.psn, rocev2.NAKSyndrome(rocev2.NAKRemoteAccess))
		q.moveToErr()
		return
	}
	st.resume = true
	q.readTurn()
}

// duplicate handles a request with a PSN before the expected one: SENDs
// and WRITEs are re-acknowledged (C9-105), READs re-executed from the
// requested PSN if the request is still among the remembered ones.
func (q *QP) duplicate(p *rocev2.Packet) {
	e := q.e
	e.stats.DupRequests.Add(1)
	op := p.BTH.Opcode
	psn := p.BTH.PSN
	if op.Has(rocev2.Read) {
		for _, r := range q.resp.reads {
			if r.valid && psnDiff(psn, r.first) >= 0 && psnDiff(psn, r.last) <= 0 && r.rkey == p.RETH.RKey {
				q.answerRead(r, psn)
				return
			}
		}
		return
	}
	if op.Has(rocev2.AtomicWrite) {
		// Answered again, never written again.
		for _, r := range q.resp.reads {
			if r.valid && r.first == psn && r.length == 0 && r.rkey == p.RETH.RKey && r.va == p.RETH.VA {
				q.answerRead(r, psn)
				return
			}
		}
		return
	}
	if op.Has(rocev2.Atomic) {
		for _, r := range q.resp.reads {
			if r.valid && r.atomic && r.first == psn && r.rkey == p.AtomicETH.RKey && r.va == p.AtomicETH.VA {
				q.atomicAck(psn, r.msn, r.orig)
				return
			}
		}
		return // forgotten: the requester's retries run out, as for a READ
	}
	if p.BTH.AckReq {
		q.sendAck(psnAdd(q.resp.psn, -1), rocev2.ACKSyndrome(rocev2.CreditsInvalid))
	}
}

// execAtomic executes a CMP_AND_SWP or FETCH_AND_ADD: the 8 aligned bytes
// at the request's address are read, changed and written back under the
// engine's atomic lock, so that atomics of all QPs on this device are
// atomic with respect to one another (IBV_ATOMIC_HCA). A fault on either
// access changes nothing (the write is the last step) and is answered as a
// WRITE's is: the retransmission executes it once the page is present. The
// original value is remembered with the responder's READs, for duplicates.
func (q *QP) execAtomic(p *rocev2.Packet) {
	e := q.e
	a := &p.AtomicETH
	if a.VA%AtomicSize != 0 {
		q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	mr := q.lookupRemote(a.RKey, AccessRemoteAtomic, a.VA, AtomicSize)
	if mr == nil {
		q.classC(rocev2.NAKRemoteAccess, WCRemAccessErr)
		return
	}
	orig, err := e.atomicRMW(mr, a.VA, func(v uint64) uint64 {
		if p.BTH.Opcode == rocev2.OpFetchAdd {
			return v + a.SwapOrAdd
		}
		if v == a.CompareDat {
			return a.SwapOrAdd
		}
		return v
	})
	if err != nil {
		q.accessFailed(p, mr, err)
		return
	}
	psn := p.BTH.PSN
	res := q.executedOnce(psn, readRes{first: psn, last: psn, va: a.VA, length: AtomicSize, rkey: a.RKey,
		valid: true, atomic: true, orig: orig})
	q.atomicAck(psn, res.msn, orig)
}

// accessFailed answers a request whose access to mr failed with err: a
// fault with an RNR NAK (recvFault), anything else as a remote access
// error.
func (q *QP) accessFailed(p *rocev2.Packet, mr *MR, err error) {
	if va, _, ok := AsFault(err); ok {
		q.recvFault(p, mr.mem, va, AtomicSize)
		return
	}
	q.classC(rocev2.NAKRemoteAccess, WCRemAccessErr)
}

// executedOnce records that the one-packet request at psn that res
// describes (an atomic, an ATOMIC WRITE) executed: it ends the fault the
// request had, moves the expected PSN and the MSN on, and keeps res, with
// its MSN, among the READ resources for a duplicate. It returns res as
// kept.
func (q *QP) executedOnce(psn uint32, res readRes) readRes {
	if q.resp.faulted && psn == q.resp.faultPSN {
		q.resp.faulted = false
		q.e.cfg.Trace.Emit(trace.RCResume, trace.TrackRC, uint64(q.num), uint64(psn))
	}
	q.resp.psn = psnAdd(psn, 1)
	q.resp.msn = (q.resp.msn + 1) & psnMask
	res.msn = q.resp.msn
	q.resp.reads[q.resp.readNext] = res
	q.resp.readNext = (q.resp.readNext + 1) % len(q.resp.reads)
	q.e.messageExecuted()
	return res
}

// execAtomicWrite writes an ATOMIC WRITE's 8 bytes as one store (under
// the device's atomic lock, as an atomic's read-modify-write) and answers
// with a zero-length READ response, kept among the READ resources so a
// duplicate is answered again without a second write.
func (q *QP) execAtomicWrite(p *rocev2.Packet) {
	e := q.e
	r := &p.RETH
	if r.DMALength != AtomicSize || r.VA%AtomicSize != 0 {
		q.classC(rocev2.NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	mr := q.lookupRemote(r.RKey, AccessRemoteWrite, r.VA, AtomicSize)
	if mr == nil {
		q.classC(rocev2.NAKRemoteAccess, WCRemAccessErr)
		return
	}
	e.atomicMu.Lock()
	err := mr.writeAt(r.VA, p.Payload)
	e.atomicMu.Unlock()
	if err != nil {
		q.accessFailed(p, mr, err)
		return
	}
	psn := p.BTH.PSN
	q.answerRead(q.executedOnce(psn, readRes{first: psn, last: psn, va: r.VA, rkey: r.RKey, mtu: q.mtu, valid: true}), psn)
}

// atomicAck answers the atomic at psn with the value it found.
func (q *QP) atomicAck(psn, msn uint32, orig uint64) {
	q.e.stats.Acks.Add(1)
	h := rocev2.Headers{
		BTH:          rocev2.BTH{Opcode: rocev2.OpAtomicAck, PKey: q.attr.PKey, DestQP: q.attr.DestQPN, PSN: psn},
		AETH:         rocev2.AETH{Syndrome: rocev2.ACKSyndrome(rocev2.CreditsInvalid), MSN: msn},
		AtomicAckETH: rocev2.AtomicAckETH{OrigRemData: orig},
	}
	f, _ := rocev2.BuildFrame(&q.path, &h, 0, func([]byte) error { return nil })
	q.e.send(f)
}
