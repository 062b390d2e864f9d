package ibrc

import (
	"encoding/binary"

	"github.com/npfnic/npfnic/ibrc/rocev2"
)

// complete handles a response (ACK, NAK, READ response) for the requester.
func (q *QP) complete(p *rocev2.Packet) error {
	e := q.e
	psn := p.BTH.PSN
	// Nothing may answer a PSN that was never sent.
	if psnDiff(psn, q.req.high) >= 0 {
		e.stats.ResponseDiscards.Add(1)
		return errDiscard("response for a PSN not sent")
	}
	op := p.BTH.Opcode
	switch {
	case op == rocev2.OpAck:
		syn := p.AETH.Syndrome
		switch {
		case syn.IsACK():
			if psnDiff(psn, q.comp.psn) < 0 {
				e.stats.ResponseDiscards.Add(1)
				break
			}
			q.ackUpTo(psn)
		case syn.IsRNRNAK():
			q.onRNRNak(psn, syn.Value())
		case syn.IsNAK():
			q.onNak(psn, syn.Value())
		default:
			e.stats.ResponseDiscards.Add(1)
			return errDiscard("reserved AETH syndrome")
		}
	case op == rocev2.OpAtomicAck:
		q.onAtomicAck(p)
	case op.Has(rocev2.Read | rocev2.Response):
		q.onReadResponse(p)
	default:
		e.stats.RxDiscarded.Add(1)
		return errDiscard("unexpected response " + op.String())
	}
	if q.state == StateRTS || q.state == StateSQD {
		q.reqProgress()
	}
	return nil
}

// ackUpTo completes what an ACK (or the implicit ACK in a NAK) for psn
// covers. It returns false when it found the responses of a READ lost and
// started a retry instead.
func (q *QP) ackUpTo(psn uint32) bool {
	progress := false
	ok := true
	for q.outstanding() {
		w := q.sq[0]
		if w.awaitsResponse() {
			if psnDiff(psn, w.firstPSN) >= 0 {
				// The responder went past the READ or atomic: its
				// responses were lost.
				ok = false
			}
			break
		}
		if psnDiff(psn, w.lastPSN) >= 0 {
			q.comp.psn = psnAdd(w.lastPSN, 1)
			q.completeHead(WCSuccess)
			progress = true
			continue
		}
		if psnDiff(psn, q.comp.psn) >= 0 {
			q.comp.psn = psnAdd(psn, 1)
			progress = true
		}
		break
	}
	if progress {
		q.onProgress()
	}
	if !ok {
		q.retryCounted(q.comp.psn)
	}
	return ok
}

// onProgress resets the retry state after the responder acknowledged
// something new.
func (q *QP) onProgress() {
	q.req.retryCnt = q.attr.RetryCnt
	q.req.rnrRetry = q.attr.RNRRetry
	q.req.startedRetry = false
	q.req.rnrNAKed = false
	if psnDiff(q.comp.psn, q.req.psn) > 0 {
		// Acknowledged beyond where a retry had rewound to.
		q.setCursor(q.comp.psn)
	}
	q.restartTimer()
	q.checkDrained()
}

// retryCounted retransmits from psn for a sequence error, charging
// retry_cnt; a repeat for the same PSN before any progress is ignored.
func (q *QP) retryCounted(psn uint32) {
	if q.req.startedRetry && q.req.retryPSN == psn {
		return
	}
	if q.req.retryCnt == 0 {
		q.failHead(WCRetryExcErr)
		return
	}
	q.req.retryCnt--
	q.req.startedRetry = true
	q.req.retryPSN = psn
	q.retryFrom(psn)
}

func (q *QP) onRNRNak(psn uint32, timer uint8) {
	e := q.e
	if psnDiff(psn, q.comp.psn) < 0 || q.req.rnrWait && q.req.rnrPSN == psn {
		e.stats.ResponseDiscards.Add(1)
		return
	}
	e.stats.RNRNakReceived.Add(1)
	if psnDiff(psn, q.comp.psn) > 0 && !q.ackUpTo(psnAdd(psn, -1)) {
		return
	}
	if !q.outstanding() {
		return
	}
	if q.req.rnrRetry == 0 {
		q.failHead(WCRNRRetryExcErr)
		return
	}
	if q.req.rnrRetry != 7 {
		q.req.rnrRetry--
	}
	q.req.rnrWait = true
	q.req.rnrPSN = psn
	q.req.rnrNAKed = true
	q.setCursor(psn)
	if q.req.timer != nil {
		q.req.timer.Stop()
		q.req.timer, q.req.timerTok = nil, nil
	}
	gen := q.gen
	q.req.rnrTimer = e.clk.AfterFunc(rocev2.RNRTimer(timer), func() {
		q.mu.Lock()
		defer q.unlock()
		if q.gen != gen || !q.req.rnrWait {
			return
		}
		q.req.rnrWait = false
		q.req.rnrTimer = nil
		if q.state != StateRTS && q.state != StateSQD {
			return
		}
		q.req.startedRetry = false
		// A delayed or duplicated copy of the NAKed request may have
		// been accepted and acknowledged meanwhile: go back no further
		// than the oldest unacknowledged PSN, or a PSN the peer already
		// took would be reused.
		from := q.req.rnrPSN
		if psnDiff(q.comp.psn, from) > 0 {
			from = q.comp.psn
		}
		q.retryFrom(from)
	})
}

func (q *QP) onNak(psn uint32, code uint8) {
	e := q.e
	if psnDiff(psn, q.comp.psn) < 0 {
		e.stats.ResponseDiscards.Add(1)
		return
	}
	if psnDiff(psn, q.comp.psn) > 0 && !q.ackUpTo(psnAdd(psn, -1)) {
		return
	}
	if code == rocev2.NAKPSNSeqError {
		e.stats.SeqNakReceived.Add(1)
		if q.req.rnrNAKed && psn == q.req.rnrPSN {
			// The packets sent after the one the peer RNR NAKed reached
			// it out of sequence, and it says so (rdma_rxe does): the
			// same condition again, which the RNR timer's retry answers
			// (or did). It costs no transport retry: charged on every
			// RNR wait, it ended QPs whose rnr_retry is infinite.
			return
		}
		if q.outstanding() {
			q.retryCounted(psn)
		}
		return
	}
	e.stats.ErrNakReceived.Add(1)
	st := WCRemOpErr
	switch code {
	case rocev2.NAKInvalidRequest:
		st = WCRemInvReqErr
	case rocev2.NAKRemoteAccess:
		st = WCRemAccessErr
	}
	q.failHead(st)
}

// implicitAck completes the SENDs and WRITEs before psn, which a READ
// response or an atomic ACK for psn acknowledges.
func (q *QP) implicitAck(psn uint32) {
	progress := false
	for q.outstanding() && !q.sq[0].awaitsResponse() && psnDiff(psn, q.sq[0].lastPSN) > 0 {
		q.comp.psn = psnAdd(q.sq[0].lastPSN, 1)
		q.completeHead(WCSuccess)
		progress = true
	}
	if progress {
		q.onProgress()
	}
}

// responseStart begins the handling of a READ response or an atomic ACK
// for psn: none is taken while the last one's fault waits for its page,
// and the SENDs and WRITEs before it are acknowledged by it.
func (q *QP) responseStart(psn uint32) bool {
	if q.comp.readFault {
		q.e.stats.ResponseDiscards.Add(1)
		return false
	}
	q.implicitAck(psn)
	return true
}

// scatterResponse places a response's data (a READ response's payload, an
// atomic's original value) at message offset off of w's SGL and reports
// whether it landed. A fault drops it and every response after it until
// the page is present, then asks again from the oldest unacknowledged PSN
// (RC cannot pause a responder); a responder answers an atomic asked again
// from the result it kept, without executing it twice.
func (q *QP) scatterResponse(w *sendWQE, off uint64, psn uint32, data []byte) bool {
	err := q.scatter(w.wr.SGL, off, data)
	if err == nil {
		return true
	}
	q.localFault(err, w, off, psn, true, &q.comp.readFault, func() {
		if q.outstanding() && (q.state == StateRTS || q.state == StateSQD) {
			q.e.stats.ReadRetries.Add(1)
			q.req.startedRetry = false
			q.retryFrom(q.comp.psn)
		}
	})
	return false
}

// onAtomicAck completes an atomic with the original value its responder
// found, written into the WQE's SGL.
func (q *QP) onAtomicAck(p *rocev2.Packet) {
	e := q.e
	psn := p.BTH.PSN
	if !q.responseStart(psn) {
		return
	}
	if !q.outstanding() || !q.sq[0].isAtomic() || psnDiff(psn, q.comp.psn) < 0 || psnDiff(psn, q.sq[0].firstPSN) != 0 {
		e.stats.ResponseDiscards.Add(1) // stale, duplicate or for a PSN that is no atomic
		return
	}
	w := q.sq[0]
	if !p.AETH.Syndrome.IsACK() {
		q.failHead(WCBadRespErr)
		return
	}
	var orig [AtomicSize]byte
	binary.LittleEndian.PutUint64(orig[:], p.AtomicAckETH.OrigRemData)
	if !q.scatterResponse(w, 0, psn, orig[:]) {
		return
	}
	q.comp.psn = psnAdd(psn, 1)
	q.completeHead(WCSuccess)
	q.onProgress()
}

func (q *QP) onReadResponse(p *rocev2.Packet) {
	e := q.e
	psn := p.BTH.PSN
	if !q.responseStart(psn) {
		return
	}
	if !q.outstanding() || !q.sq[0].isRead() && q.sq[0].wr.Opcode != WRAtomicWrite {
		e.stats.ResponseDiscards.Add(1)
		return
	}
	w := q.sq[0]
	if psnDiff(psn, w.firstPSN) < 0 || psnDiff(psn, w.lastPSN) > 0 || psnDiff(psn, q.comp.psn) < 0 {
		e.stats.ResponseDiscards.Add(1) // stale or duplicate
		return
	}
	if psnDiff(psn, q.comp.psn) > 0 {
		// Responses before this one were lost.
		e.stats.ReadRetries.Add(1)
		q.retryCounted(q.comp.psn)
		return
	}
	op := p.BTH.Opcode
	if op.Has(rocev2.HasAETH) && !p.AETH.Syndrome.IsACK() {
		q.failHead(WCBadRespErr)
		return
	}
	if w.wr.Opcode == WRAtomicWrite {
		// Done once its one zero-length response arrives.
		if op != rocev2.OpReadRespOnly || len(p.Payload) != 0 {
			q.failHead(WCBadRespErr)
			return
		}
		q.comp.psn = psnAdd(psn, 1)
		q.completeHead(WCSuccess)
		q.onProgress()
		return
	}
	// A READ longer than the window is asked for in parts (windowRoom),
	// each answered First..Last: a Last before the WQE's last PSN is a
	// part's end, and a whole MTU like any other response before it.
	off := uint64(psnDiff(psn, w.firstPSN)) * uint64(w.mtu)
	rem := w.length - off
	n := uint64(len(p.Payload))
	end := psn == w.lastPSN
	if end && (!op.Has(rocev2.Last) || n != rem) || !end && n != uint64(w.mtu) {
		q.failHead(WCBadRespErr)
		return
	}
	if !q.scatterResponse(w, off, psn, p.Payload) {
		return
	}
	q.comp.psn = psnAdd(psn, 1)
	if end {
		q.completeHead(WCSuccess)
	}
	q.onProgress()
}
