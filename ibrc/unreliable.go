package ibrc

import (
	"fmt"

	"github.com/npfnic/npfnic/ibrc/rocev2"
)

// The unreliable services (IBA 9.8, 9.7.7). UC runs RC's SENDs and RDMA
// WRITEs over a connection with no acknowledgement: a send WR completes
// once its last packet is queued for the wire, and the responder drops the
// rest of a message it cannot take (a lost packet, a missing receive WR,
// a bad R_Key, a fault) and starts again at the next message's First
// packet. UD sends one-packet SENDs, each to the QP and Q_Key its WR
// names, along the path of its address handle; the receiver checks the
// Q_Key and places the GRH area and the payload. Neither ever NAKs nor
// retransmits: a receive fault drops the message (and still asks for the
// page, so a later message finds it present), which is why RC's RNR NAK is
// the fault handling seed 000 builds on.

// canPost reports whether a QP of type t takes send WRs of opcode o.
func (t QPType) canPost(o WROpcode) error {
	switch {
	case o.local():
		if t == TypeUD {
			return fmt.Errorf("%w: %v on a UD QP", ErrInvalidArg, o)
		}
		return nil
	case o > WRAtomicFetchAdd && (o != WRAtomicWrite && o != WRSendWithInv || t != TypeRC):
		return fmt.Errorf("%w: opcode %v on a %v QP", ErrInvalidArg, o, t)
	case t == TypeUC && (o == WRRead || o.atomic()):
		return fmt.Errorf("%w: %v on a UC QP", ErrInvalidArg, o)
	case t == TypeUD && o != WRSend && o != WRSendImm:
		return fmt.Errorf("%w: %v on a UD QP", ErrInvalidArg, o)
	}
	return nil
}

// sentUnreliable completes a UC or UD send WR whose last packet was just
// queued: nothing will acknowledge it.
func (q *QP) sentUnreliable() {
	q.comp.psn = q.req.psn
	q.completeHead(WCSuccess)
}

// dropMessage is what a UC responder does instead of a NAK: drop the rest
// of the message in progress. A SEND's receive WR stays posted for the
// next message, as if this one never arrived.
func (q *QP) dropMessage(why string) error {
	q.e.stats.RxDiscarded.Add(1)
	q.resp.dropMsg = true
	q.resp.inMsg = 0
	q.resp.wqe, q.resp.offset = nil, 0
	return errDiscard(why)
}

// respondUC handles a request packet on a UC QP.
func (q *QP) respondUC(p *rocev2.Packet) error {
	e := q.e
	if !q.resp.commEst {
		q.resp.commEst = true
		if q.state == StateRTR {
			e.event(Event{Type: EventCommEstablished, QPN: q.num})
		}
	}
	op := p.BTH.Opcode
	if p.BTH.PSN != q.resp.psn || q.resp.dropMsg {
		// Packets were lost (or the message is being dropped): a
		// message's First packet starts afresh, anything else waits
		// for one.
		if !op.Has(rocev2.First) {
			q.resp.psn = psnAdd(p.BTH.PSN, 1)
			return q.dropMessage("UC packet of a message being dropped")
		}
		q.resp.dropMsg, q.resp.inMsg = false, 0
		q.resp.wqe, q.resp.offset = nil, 0
	}
	q.resp.psn = psnAdd(p.BTH.PSN, 1)
	switch q.resp.inMsg {
	case rocev2.Send, rocev2.Write:
		if !op.Has(q.resp.inMsg) || op.Has(rocev2.First) {
			return q.dropMessage("UC opcode out of sequence")
		}
	default:
		if !op.Has(rocev2.First) {
			return q.dropMessage("UC message without its First packet")
		}
	}
	if op.Has(rocev2.Write) && q.attr.AccessFlags&AccessRemoteWrite == 0 {
		return q.dropMessage("UC WRITE without remote write access")
	}
	n := len(p.Payload)
	switch {
	case !op.Has(rocev2.Last) && n != q.mtu, !op.Has(rocev2.First) && op.Has(rocev2.Last) && n == 0, n > q.mtu:
		return q.dropMessage("UC payload length")
	}
	if op.Has(rocev2.Send) {
		q.execSend(p)
	} else {
		q.execWrite(p)
	}
	return nil
}

// datagramPath is the path of a UD SEND: its address handle's, from the
// port's address unless the handle names its source.
func (q *QP) datagramPath(av *AddressVector, dst [4]byte, dqpn uint32) rocev2.Path {
	src := q.e.ipv4()
	if av.SrcIP != ([4]byte{}) {
		src = av.SrcIP
	}
	sport := av.SrcPort
	if sport == 0 {
		h := q.num*0x9e3779b1 ^ dqpn
		sport = uint16(0xc000 | (h^h>>14)&0x3fff)
	}
	return rocev2.Path{SrcMAC: q.e.cfg.MAC, DstMAC: av.DestMAC, SrcIP: src, DstIP: dst,
		SrcPort: sport, TTL: av.HopLimit, TrafficClass: av.TrafficClass}
}

// sendDatagram sends w, the oldest send WR of a UD QP, and completes it.
// false when it could not (no transmit room, a fault stall, an error).
func (q *QP) sendDatagram(w *sendWQE) bool {
	if !q.e.txRoom(q) {
		return false
	}
	d := &w.wr.UD
	dst, ok := rocev2.IPv4FromGID(d.AV.DGID)
	switch {
	case !ok:
		q.failHead(WCLocQPOpErr) // only RoCEv2 over IPv4 is carried
		return false
	case w.length > uint64(q.mtu):
		// IBA C10-93.1.1: a UD message over the port's MTU sends no
		// packet and reports no error (rdma_rxe completes it so too).
		w.started = true
		q.req.next++
		q.sentUnreliable()
		return true
	}
	qkey := d.QKey
	if qkey&ControlledQKey != 0 {
		qkey = q.attr.QKey
	}
	op := rocev2.OpUDSendOnly
	h := rocev2.Headers{
		BTH:  rocev2.BTH{PKey: q.attr.PKey, DestQP: d.QPN & psnMask, PSN: q.req.psn, SolicitedEvent: w.wr.Flags&SendSolicited != 0},
		DETH: rocev2.DETH{QKey: qkey, SrcQP: q.num},
	}
	if w.wr.Opcode == WRSendImm {
		op, h.ImmDt.Data = rocev2.OpUDSendOnlyImm, w.wr.Imm
	}
	h.BTH.Opcode = op
	path := q.datagramPath(&d.AV, dst, h.BTH.DestQP)
	psn := q.req.psn
	frame, err := rocev2.BuildFrame(&path, &h, int(w.length), func(p []byte) error {
		if w.wr.Flags&SendInline != 0 {
			copy(p, w.wr.Inline)
			return nil
		}
		return q.gather(w.wr.SGL, 0, p)
	})
	if err != nil {
		q.localFault(err, w, 0, psn, false, &q.req.stalled, q.reqProgress)
		return false
	}
	w.started, w.mtu, w.npkts, w.firstPSN, w.lastPSN = true, q.mtu, 1, psn, psn
	q.req.psn = psnAdd(psn, 1)
	q.req.high = q.req.psn
	q.req.next++
	q.e.stats.DataPackets.Add(1)
	q.e.send(frame)
	q.sentUnreliable()
	return true
}

// receiveDatagram places a UD SEND: the Q_Key checked, the GRH area and
// the payload scattered into the next receive WR, the completion naming
// the sender's QP. A message that cannot be placed is dropped, as UD
// does; one longer than its buffer completes that WR with a length error.
func (q *QP) receiveDatagram(p *rocev2.Packet) error {
	e := q.e
	switch {
	case p.BTH.PKey&0x7fff != q.attr.PKey&0x7fff:
		e.stats.RxDiscarded.Add(1)
		return errDiscard("P_Key mismatch")
	case p.DETH.QKey != q.attr.QKey:
		e.stats.RxDiscarded.Add(1)
		return errDiscard("Q_Key mismatch")
	case len(p.Payload) > MTU4096.Bytes():
		e.stats.RxDiscarded.Add(1)
		return errDiscard("UD payload longer than any MTU")
	}
	if !q.pullRecv() {
		e.stats.RxDiscarded.Add(1)
		return errDiscard("no receive WR for a UD SEND")
	}
	w := q.rq[0]
	n := uint64(GRHSize + len(p.Payload))
	wc := WC{WRID: w.wr.ID, Opcode: WCRecv, QPN: q.num, SrcQP: p.DETH.SrcQP}
	if n > w.length {
		q.rq = q.rq[1:]
		wc.Status = WCLocLenErr
		q.init.RecvCQ.push(wc)
		return nil
	}
	var grh [GRHSize]byte
	copy(grh[GRHSize-20:], p.IPv4.Contents) // RoCEv2 over IPv4: the header in the last 20 bytes
	err := q.scatter(w.wr.SGL, 0, grh[:])
	if err == nil {
		err = q.scatter(w.wr.SGL, GRHSize, p.Payload)
	}
	if err != nil {
		if va, _, ok := AsFault(err); ok {
			// Nothing asks UD to send again: the message is lost, and
			// the page is on its way for the next one.
			e.stats.ResponderFaults.Add(1)
			e.stats.FaultDrops.Add(1)
			q.pageRequest(RoleResponder, faultMem(err), va, sglSpan(w.wr.SGL, va), p.BTH.PSN, true, nil)
			return errDiscard("UD receive fault")
		}
		// A receive WR outside its regions is the consumer's error, as
		// on RC: it completes with it and the QP goes to ERR.
		q.rq = q.rq[1:]
		wc.Status = WCLocProtErr
		q.init.RecvCQ.push(wc)
		q.moveToErr()
		return nil
	}
	q.rq = q.rq[1:]
	wc.ByteLen, wc.Flags, wc.Solicited = uint32(n), WCGRH, p.BTH.SolicitedEvent
	if p.BTH.Opcode.Has(rocev2.HasImmDt) {
		wc.Imm, wc.Flags = p.ImmDt.Data, wc.Flags|WCWithImm
	}
	q.init.RecvCQ.push(wc)
	e.messageExecuted()
	return nil
}
