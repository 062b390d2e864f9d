package main

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// hostileCase is one thing user space does to its own rings that librxe
// never would, with what npfnic's device contract says comes of it
// (hw.RxeQueuesDoc, the IBV_WC_* docs of hw.RxeValues): want is the
// outcome in the words run describes it with.
type hostileCase struct {
	name string
	want string
	// rxe is what rdma_rxe (Debian's 6.1.192) does instead, as measured
	// with it as the local device (npfnic-rdma-hostile -rxe-safe on an
	// rxe guest against an npfnic server). unsafeOnRxe marks a case that
	// makes rdma_rxe's kernel read past the entry or its tables: -rxe-safe
	// skips it.
	rxe         string
	unsafeOnRxe bool
	run         func(e *caseEnv) (string, error)
}

// sendCase posts a hostile send entry, then a well-formed RDMA WRITE
// behind it: the first completes with want, the second is flushed, and
// nothing reaches the server (its canary check).
func sendCase(name string, want uint32, rxe string, bad func(e *caseEnv) sendWQE) hostileCase {
	return sendCaseThen(name, want, rxe, bad, func(e *caseEnv) sendWQE { return e.goodWrite(0) })
}

// sendCaseThen is sendCase with another well-formed entry behind the
// hostile one.
func sendCaseThen(name string, want uint32, rxe string, bad, next func(e *caseEnv) sendWQE) hostileCase {
	return hostileCase{name: name, want: statusName(want) + " WR_FLUSH_ERR", rxe: rxe, run: func(e *caseEnv) (string, error) {
		w, n := bad(e), next(e)
		w.id, n.id = 1, 2
		if err := e.post(w, n); err != nil {
			return "", err
		}
		return e.completions(e.scq.q, 2, 1, 2), nil
	}}
}

// send64 is a signaled SEND of 64 bytes from sgl.
func send64(e *caseEnv, sgl ...sge) sendWQE {
	return sendWQE{opcode: hw.IBVWRSend, flags: hw.IBVSendSignaled, sgl: sgl}.sum()
}

// recvCase posts a hostile receive entry and a well-formed one behind it,
// and has the server SEND 64 bytes: the hostile entry completes with want,
// the next is flushed, and the server's SEND completes with peer (the NAK
// the device answered with).
func recvCase(name string, want, peer uint32, rxe string, bad func(e *caseEnv) recvWQE) hostileCase {
	return hostileCase{name: name, want: "recv " + statusName(want) + " WR_FLUSH_ERR; peer SENT " + statusName(peer), rxe: rxe,
		run: func(e *caseEnv) (string, error) {
			r := bad(e)
			r.id = 1
			e.postRecv(r, recvWQE{id: 2, sgl: []sge{e.lsge(scratch, recvSize)}}.sum())
			return e.peerSend(64, 2, 1, 2)
		}}
}

// peerSend has the server SEND length bytes and describes the n receive
// completions that follow and the server's own completion.
func (e *caseEnv) peerSend(length, n int, ids ...uint64) (string, error) {
	f, err := e.o.call("SEND %d 5", length)
	if err != nil {
		return "", err
	}
	return "recv " + e.completions(e.rcq.q, n, ids...) + "; peer " + strings.Join(f, " "), nil
}

// garbage fills every slot of q with b.
func garbage(q *queue, b byte) {
	for i := range q.slots {
		s := q.slot(i)
		for j := range s {
			s[j] = b
		}
	}
}

const garbageID = 0xa5a5a5a5a5a5a5a5

// caseSlots is the slot count of a case QP's queues: 8 entries asked, the
// next power of two above (rdma_rxe and npfnic's driver alike).
const caseSlots = 16

// oopsRxe is what a send opcode with bit 31 set does to rdma_rxe
// (6.1.192): req_next_wqe indexes its opcode table with the opcode as a
// signed int, and the kernel oopses on the read (measured with the
// garbage opcode 0xa5a5a5a5 of sq-producer-over-garbage; RDX in the oops
// is 10 × that, sign-extended, + 2).
const oopsRxe = "oopses in req_next_wqe (a negative index into its opcode table)"

// unsafeOnRxe marks c as one that makes rdma_rxe read past the entry or
// its tables.
func unsafeOnRxe(c hostileCase) hostileCase {
	c.unsafeOnRxe = true
	return c
}

// cases is every case, in the order they run, the well-formed one last.
var cases = slices.Concat(rcCases, udCases, srqCases, lastCases)

// rcCases are the cases on the RC QP, its rings and CQs.
var rcCases = []hostileCase{
	// Keys and ranges of the local SGEs.
	sendCase("send-bad-lkey", hw.IBVWCLocProtErr, "LOC_QP_OP_ERR", func(e *caseEnv) sendWQE {
		s := e.lsge(srcArea, 64)
		s.lkey ^= 0x5a5a00
		return send64(e, s)
	}),
	sendCase("send-sge-past-mr", hw.IBVWCLocProtErr, "", func(e *caseEnv) sendWQE {
		return send64(e, e.lsge(mrLen-16, 64))
	}),
	sendCase("send-lkey-of-other-pd", hw.IBVWCLocProtErr, "LOC_QP_OP_ERR", func(e *caseEnv) sendWQE {
		return send64(e, sge{addr: e.other.addr + srcArea, length: 64, lkey: e.other.lkey})
	}),
	sendCase("send-sge-wraps", hw.IBVWCLocProtErr, "", func(e *caseEnv) sendWQE {
		return send64(e, sge{addr: ^uint64(0) - 15, length: 64, lkey: e.mr.lkey})
	}),
	// Opcodes librxe never writes.
	sendCase("opcode-0x55", hw.IBVWCLocQPOpErr, "", func(e *caseEnv) sendWQE {
		w := send64(e, e.lsge(srcArea, 64))
		w.opcode = 0x55
		return w
	}),
	sendCase("opcode-0xff", hw.IBVWCLocQPOpErr, "", func(e *caseEnv) sendWQE {
		w := send64(e, e.lsge(srcArea, 64))
		w.opcode = 0xff
		return w
	}),
	unsafeOnRxe(sendCase("opcode-send-high-bit", hw.IBVWCLocQPOpErr, oopsRxe, func(e *caseEnv) sendWQE {
		w := send64(e, e.lsge(srcArea, 64))
		w.opcode = 0x8000_0000 | hw.IBVWRSend
		return w
	})),
	// Counts and lengths.
	sendCase("num-sge-over-max", hw.IBVWCLocQPOpErr, "", func(e *caseEnv) sendWQE {
		n := int(e.qp.caps.maxSendSGE) + 1
		w := sendWQE{opcode: hw.IBVWRRDMAWrite, flags: hw.IBVSendSignaled, remoteAddr: e.rmr.addr + writeArea, rkey: e.rmr.rkey}
		for i := range n {
			w.sgl = append(w.sgl, e.lsge(srcArea+16*i, 16))
		}
		return w.sum()
	}),
	sendCase("num-sge-huge", hw.IBVWCLocQPOpErr, "", func(e *caseEnv) sendWQE {
		w := send64(e, e.lsge(srcArea, 64))
		w.numSGE = 0xffff_ffff
		return w
	}),
	sendCase("inline-over-max", hw.IBVWCLocLenErr, "sends the bytes (no max_inline_data check): SUCCESS", func(e *caseEnv) sendWQE {
		n := int(e.qp.caps.maxInline) + 1
		w := sendWQE{opcode: hw.IBVWRSend, flags: hw.IBVSendSignaled | hw.IBVSendInline, inline: make([]byte, n)}
		return w.sum()
	}),
	unsafeOnRxe(sendCase("inline-huge", hw.IBVWCLocLenErr, "would copy dma.length bytes out of the slot", func(e *caseEnv) sendWQE {
		w := sendWQE{opcode: hw.IBVWRSend, flags: hw.IBVSendSignaled | hw.IBVSendInline, inline: make([]byte, 8)}.sum()
		w.length = 0x7fff_ffff
		return w
	})),
	sendCase("inline-read", hw.IBVWCLocQPOpErr, "LOC_PROT_ERR", func(e *caseEnv) sendWQE {
		return sendWQE{opcode: hw.IBVWRRDMARead, flags: hw.IBVSendSignaled | hw.IBVSendInline, remoteAddr: e.rmr.addr + writeArea,
			rkey: e.rmr.rkey, inline: make([]byte, 8)}.sum()
	}),
	sendCase("length-over-sges", hw.IBVWCLocLenErr, "LOC_QP_OP_ERR", func(e *caseEnv) sendWQE {
		w := send64(e, e.lsge(srcArea, 64))
		w.length = 4096
		return w
	}),
	sendCase("length-over-2^31", hw.IBVWCLocLenErr, "LOC_QP_OP_ERR", func(e *caseEnv) sendWQE {
		w := send64(e, e.lsge(srcArea, 64))
		w.length = 0x8000_0001
		return w
	}),
	// Remote keys and ranges: the server NAKs.
	sendCase("write-bad-rkey", hw.IBVWCRemAccessErr, "", func(e *caseEnv) sendWQE {
		w := e.goodWrite(0)
		w.rkey ^= 0x5a5a00
		return w
	}),
	sendCase("write-past-remote-mr", hw.IBVWCRemAccessErr, "", func(e *caseEnv) sendWQE {
		w := e.goodWrite(0)
		w.remoteAddr = e.rmr.end() - 16
		return w
	}),
	sendCase("write-remote-addr-wraps", hw.IBVWCRemAccessErr, "", func(e *caseEnv) sendWQE {
		w := e.goodWrite(0)
		w.remoteAddr = ^uint64(0) - 15
		return w
	}),
	sendCase("read-bad-rkey", hw.IBVWCRemAccessErr, "", func(e *caseEnv) sendWQE {
		return sendWQE{opcode: hw.IBVWRRDMARead, flags: hw.IBVSendSignaled, remoteAddr: e.rmr.addr + writeArea,
			rkey: e.rmr.rkey ^ 0x5a5a00, sgl: []sge{e.lsge(writeArea, 64)}}.sum()
	}),
	// The READ's data would land past the client's region. The device
	// finds out when the response arrives, after it may have sent what
	// follows (a WRITE behind it may land: flushed means "not completed",
	// not "not executed"), so a READ follows it, whose response must not
	// land once the QP is in error.
	sendCaseThen("read-into-sge-past-mr", hw.IBVWCLocProtErr, "", func(e *caseEnv) sendWQE {
		return sendWQE{opcode: hw.IBVWRRDMARead, flags: hw.IBVSendSignaled, remoteAddr: e.rmr.addr + writeArea,
			rkey: e.rmr.rkey, sgl: []sge{e.lsge(mrLen-16, 64)}}.sum()
	}, func(e *caseEnv) sendWQE {
		return sendWQE{opcode: hw.IBVWRRDMARead, flags: hw.IBVSendSignaled, remoteAddr: e.rmr.addr + scratch,
			rkey: e.rmr.rkey, sgl: []sge{e.lsge(writeArea, 64)}}.sum()
	}),
	// Atomics librxe would refuse to post, and one the server refuses.
	sendCase("atomic-into-4-bytes", hw.IBVWCLocLenErr, "", func(e *caseEnv) sendWQE {
		return sendWQE{opcode: hw.IBVWRAtomicFetchAdd, flags: hw.IBVSendSignaled, remoteAddr: e.rmr.addr + atomicWord,
			rkey: e.rmr.rkey, compareAdd: 1, sgl: []sge{e.lsge(scratch, 4)}}.sum()
	}),
	sendCase("atomic-misaligned", hw.IBVWCRemInvReqErr, "", func(e *caseEnv) sendWQE {
		return sendWQE{opcode: hw.IBVWRAtomicFetchAdd, flags: hw.IBVSendSignaled, remoteAddr: e.rmr.addr + atomicWord + 4,
			rkey: e.rmr.rkey, compareAdd: 1, sgl: []sge{e.lsge(scratch, 8)}}.sum()
	}),
	sendCase("atomic-bad-rkey", hw.IBVWCRemAccessErr, "", func(e *caseEnv) sendWQE {
		return sendWQE{opcode: hw.IBVWRAtomicCmpAndSwp, flags: hw.IBVSendSignaled, remoteAddr: e.rmr.addr + atomicWord,
			rkey: e.rmr.rkey ^ 0x5a5a00, sgl: []sge{e.lsge(scratch, 8)}}.sum()
	}),
	{name: "atomics", want: atomicsWant, run: atomics},
	// Receive entries: the server's SEND finds them.
	recvCase("recv-bad-lkey", hw.IBVWCLocProtErr, hw.IBVWCRemOpErr, "LOC_QP_OP_ERR", func(e *caseEnv) recvWQE {
		s := e.lsge(scratch, recvSize)
		s.lkey ^= 0x5a5a00
		return recvWQE{sgl: []sge{s}}.sum()
	}),
	recvCase("recv-too-short", hw.IBVWCLocLenErr, hw.IBVWCRemInvReqErr, "LOC_QP_OP_ERR, and the sender gets REM_OP_ERR", func(e *caseEnv) recvWQE {
		return recvWQE{sgl: []sge{e.lsge(scratch, 16)}}.sum()
	}),
	recvCase("recv-num-sge-huge", hw.IBVWCLocQPOpErr, hw.IBVWCRemOpErr, "flushes the entry (WR_FLUSH_ERR) rather than fail it", func(e *caseEnv) recvWQE {
		r := recvWQE{sgl: []sge{e.lsge(scratch, recvSize)}}.sum()
		r.numSGE = 0xffff_ffff
		return r
	}),
	// Indices and queue headers.
	{name: "sq-producer-high-bits", want: "SUCCESS; peer has it", run: func(e *caseEnv) (string, error) {
		// A well-formed WRITE in slot 0, published as 0xbeef0001: the
		// device masks the index to 1.
		e.goodWrite(1).put(e.qp.sq.slot(0))
		e.qp.sq.storeProducer(0xbeef_0000 | 1)
		if err := e.v.doorbell(e.qp); err != nil {
			return "", err
		}
		return e.completions(e.scq.q, 1, 1) + "; " + e.checkPeer(writeArea, 64), nil
	}},
	{name: "sq-producer-over-garbage", want: fmt.Sprintf("LOC_QP_OP_ERR WR_FLUSH_ERR×%d", caseSlots-2), unsafeOnRxe: true,
		rxe: oopsRxe, run: func(e *caseEnv) (string, error) {
			// Every slot garbage and producer_index 0xffffffff: the masked
			// index posts all but one slot; the first fails, the rest flush.
			garbage(e.qp.sq, 0xa5)
			e.qp.sq.storeProducer(0xffff_ffff)
			if err := e.v.doorbell(e.qp); err != nil {
				return "", err
			}
			n := int(e.qp.sq.slots - 1)
			ids := make([]uint64, n)
			for i := range ids {
				ids[i] = garbageID
			}
			return e.completions(e.scq.q, n, ids...), nil
		}},
	{name: "rq-producer-over-garbage", want: fmt.Sprintf("recv LOC_QP_OP_ERR WR_FLUSH_ERR×%d; peer SENT REM_OP_ERR", caseSlots-2),
		rxe: "flushes every entry, the garbage one first", run: func(e *caseEnv) (string, error) {
			garbage(e.qp.rq, 0xa5)
			e.qp.rq.storeProducer(0xffff_ffff)
			n := int(e.qp.rq.slots - 1)
			ids := make([]uint64, n)
			for i := range ids {
				ids[i] = garbageID
			}
			return e.peerSend(64, n, ids...)
		}},
	{name: "queue-headers-garbage", want: "SUCCESS; peer has it", run: func(e *caseEnv) (string, error) {
		// log2_elem_size and index_mask are librxe's copy of the shape:
		// the device uses what the driver registered.
		for _, q := range []*queue{e.qp.sq, e.qp.rq, e.scq.q, e.rcq.q} {
			hw.RxeQueueLog2ElemSize.Put(q.buf, 0xffff_ffff)
			hw.RxeQueueIndexMask.Put(q.buf, 0x7)
		}
		if err := e.post(e.goodWrite(1)); err != nil {
			return "", err
		}
		return e.completions(e.scq.q, 1, 1) + "; " + e.checkPeer(writeArea, 64), nil
	}},
	{name: "cq-consumer-high-bits", want: "SUCCESS; peer has it", run: func(e *caseEnv) (string, error) {
		e.scq.q.storeConsumer(0xdead_0000 | e.scq.q.cons)
		if err := e.post(e.goodWrite(1)); err != nil {
			return "", err
		}
		return e.completions(e.scq.q, 1, 1) + "; " + e.checkPeer(writeArea, 64), nil
	}},
	{name: "cq-consumer-claims-full", want: "CQ_ERR event, no completion written; peer has it",
		run: func(e *caseEnv) (string, error) {
			// consumer_index one past the producer's: the ring reads
			// full, so the completion can not be written.
			q := e.scq.q
			q.storeConsumer((q.loadProducer() + 1) & q.mask())
			if err := e.post(e.goodWrite(1)); err != nil {
				return "", err
			}
			s := "CQ_ERR event"
			if _, err := e.v.waitEvent(e.wait, func(ev asyncEv) bool {
				return ev.typ == eventCQErr && ev.element == e.scq.user
			}); err != nil {
				s = "no CQ_ERR event"
			}
			if p := q.loadProducer() & q.mask(); p != q.cons {
				s += fmt.Sprintf(", producer_index moved to %d", p)
			} else {
				s += ", no completion written"
			}
			return s + "; " + e.checkPeer(writeArea, 64), nil
		}},
}

// lastCases run after every other: RC work cut short, then well-formed
// traffic.
var lastCases = []hostileCase{
	// Well-formed work cut short: the consumer moves the QP to the error
	// state (MODIFY_QP) while its READs are in flight, then destroys it.
	{name: "modify-err-inflight", want: modifyErrWant, run: modifyErrInflight},
	// The well-formed traffic, on a fresh QP after all of the above.
	{name: "good-traffic", want: "send SUCCESS, peer got it; write SUCCESS, peer has it; read SUCCESS, bytes right; " +
		"recv SUCCESS, bytes right; peer SENT SUCCESS", run: goodTraffic},
}

// goodTraffic is what librxe would do: a SEND the server checks, an RDMA
// WRITE the server checks, an RDMA READ of the server's canary, and a
// SEND from the server into a receive.
func goodTraffic(e *caseEnv) (string, error) {
	var out []string
	// SEND 512 bytes into the server's first receive.
	if err := e.post(sendWQE{id: 1, opcode: hw.IBVWRSend, flags: hw.IBVSendSignaled, sgl: []sge{e.lsge(srcArea, 512)}}.sum()); err != nil {
		return "", err
	}
	s := "send " + e.completions(e.scq.q, 1, 1)
	if _, err := e.o.call("RECV 512 %d", srcSeed); err != nil {
		s += ", peer: " + err.Error()
	} else {
		s += ", peer got it"
	}
	out = append(out, s)
	// RDMA WRITE 1000 bytes, in two SGEs.
	if err := e.post(sendWQE{id: 2, opcode: hw.IBVWRRDMAWrite, flags: hw.IBVSendSignaled, remoteAddr: e.rmr.addr + writeArea,
		rkey: e.rmr.rkey, sgl: []sge{e.lsge(srcArea, 600), e.lsge(srcArea+600, 400)}}.sum()); err != nil {
		return "", err
	}
	out = append(out, "write "+e.completions(e.scq.q, 1, 2)+", "+e.checkPeer(writeArea, 1000))
	// RDMA READ 256 bytes of the server's untouched last area.
	if err := e.post(sendWQE{id: 3, opcode: hw.IBVWRRDMARead, flags: hw.IBVSendSignaled, remoteAddr: e.rmr.addr + scratch,
		rkey: e.rmr.rkey, sgl: []sge{e.lsge(writeArea, 256)}}.sum()); err != nil {
		return "", err
	}
	s = "read " + e.completions(e.scq.q, 1, 3)
	got := e.buf[mrOff+writeArea : mrOff+writeArea+256]
	if i := firstNot(got, mrOff+scratch, canary); i >= 0 {
		s += fmt.Sprintf(", byte %d wrong", i)
	} else {
		s += ", bytes right"
	}
	fillCanary(got, mrOff+writeArea)
	out = append(out, s)
	// The server SENDs 300 bytes into a receive.
	e.postRecv(recvWQE{id: 4, sgl: []sge{e.lsge(scratch, recvSize)}}.sum())
	s, err := e.peerSend(300, 1, 4)
	if err != nil {
		return "", err
	}
	b := e.buf[mrOff+scratch : mrOff+scratch+300]
	if i := firstNot(b, 0, func(i int) byte { return pattern(5, i) }); i >= 0 {
		s = strings.Replace(s, ";", fmt.Sprintf(", byte %d wrong;", i), 1)
	} else {
		s = strings.Replace(s, ";", ", bytes right;", 1)
	}
	out = append(out, s)
	return strings.Join(out, "; "), nil
}

// The READs and receives of modify-err-inflight, and what it expects: the
// READs complete in order, the first k (any k) SUCCESS with the server's
// bytes in place and the rest WR_FLUSH_ERR; the receives are flushed.
const (
	inflightReads, inflightRecvs, inflightSlot = 6, 4, 256
)

var modifyErrWant = fmt.Sprintf("reads in order SUCCESS… WR_FLUSH_ERR…, bytes right; recv WR_FLUSH_ERR×%d", inflightRecvs)

// modifyErrInflight posts receives and RDMA READs of the server's canary
// (its last area) into the client's READ target, moves the QP to ERR at
// once, with READs and their responses in flight, and checks every
// completion. Which READs finish first is a race; that they complete in
// order, each success with its bytes, and that everything else is
// flushed is not. The case's QP is destroyed after it (caseEnv.close)
// and nothing may land in the client's buffer afterwards (clientHarm).
func modifyErrInflight(e *caseEnv) (string, error) {
	for i := range inflightRecvs {
		e.postRecv(recvWQE{id: uint64(100 + i), sgl: []sge{e.lsge(scratch+i*inflightSlot, inflightSlot)}}.sum())
	}
	ws := make([]sendWQE, inflightReads)
	for i := range ws {
		ws[i] = sendWQE{id: uint64(1 + i), opcode: hw.IBVWRRDMARead, flags: hw.IBVSendSignaled,
			remoteAddr: e.rmr.addr + scratch + uint64(i*inflightSlot), rkey: e.rmr.rkey,
			sgl: []sge{e.lsge(writeArea+i*inflightSlot, inflightSlot)}}.sum()
	}
	if err := e.post(ws...); err != nil {
		return "", err
	}
	if err := e.v.modifyQP(e.qp, qpAttr{mask: hw.RDMAQPAttrState, state: qpsErr}); err != nil {
		return "", fmt.Errorf("modify to ERR: %w", err)
	}
	sends := e.scq.q.pollN(inflightReads, e.wait)
	recvs := e.rcq.q.pollN(inflightRecvs, e.wait)
	target := e.buf[mrOff+writeArea : mrOff+writeArea+inflightReads*inflightSlot]
	defer fillCanary(target, mrOff+writeArea)
	ok := len(sends) == inflightReads
	flushed := false
	for i, c := range sends {
		switch {
		case c.wrID != uint64(1+i):
			ok = false
		case c.status == hw.IBVWCSuccess && !flushed:
			b := target[i*inflightSlot : (i+1)*inflightSlot]
			if firstNot(b, mrOff+scratch+i*inflightSlot, canary) >= 0 {
				ok = false
			}
		case c.status == hw.IBVWCWRFlushErr:
			flushed = true
		default:
			ok = false
		}
	}
	r := "recv " + describe(recvs, inflightRecvs, []uint64{100, 101, 102, 103})
	if !ok {
		var ids []uint64
		for i := range inflightReads {
			ids = append(ids, uint64(1+i))
		}
		return "reads " + describe(sends, inflightReads, ids) + " (out of order, wrong bytes or status); " + r, nil
	}
	return "reads in order SUCCESS… WR_FLUSH_ERR…, bytes right; " + r, nil
}

// atomicWord is the server's word the atomics change: in its canary
// area, 8-byte aligned, so that its check after the case finds it back
// only if each atomic ran once, as asked.
const atomicWord = scratch + 64

const atomicsWant = "FETCH_ADD SUCCESS orig right; CMP_SWAP SUCCESS orig right; CMP_SWAP SUCCESS orig right"

// atomics adds to the server's canary word, swaps it back (comparing with
// the sum), then compares with a wrong value, which changes nothing: each
// returns the word as it was before it ran.
func atomics(e *caseEnv) (string, error) {
	var b [8]byte
	fillCanary(b[:], mrOff+atomicWord)
	orig := binary.LittleEndian.Uint64(b[:])
	const add = 0x0102_0304_0506_0708
	res := func(i int) int { return scratch + 8*i }
	ws := []sendWQE{
		{id: 1, opcode: hw.IBVWRAtomicFetchAdd, compareAdd: add, sgl: []sge{e.lsge(res(0), 8)}},
		{id: 2, opcode: hw.IBVWRAtomicCmpAndSwp, compareAdd: orig + add, swap: orig, sgl: []sge{e.lsge(res(1), 8)}},
		{id: 3, opcode: hw.IBVWRAtomicCmpAndSwp, compareAdd: ^orig, swap: 0, sgl: []sge{e.lsge(res(2), 8)}},
	}
	for i := range ws {
		ws[i].flags, ws[i].remoteAddr, ws[i].rkey = hw.IBVSendSignaled, e.rmr.addr+atomicWord, e.rmr.rkey
		ws[i] = ws[i].sum()
	}
	if err := e.post(ws...); err != nil {
		return "", err
	}
	got := e.scq.q.pollN(len(ws), e.wait)
	names := map[uint32]string{hw.IBVWCFetchAdd: "FETCH_ADD", hw.IBVWCCompSwap: "CMP_SWAP"}
	want := []uint64{orig, orig + add, orig}
	var out []string
	for i, c := range got {
		s := names[c.opcode] + " " + statusName(c.status)
		if c.wrID != ws[i].id {
			s += fmt.Sprintf("#%#x", c.wrID)
		}
		v := binary.LittleEndian.Uint64(e.buf[mrOff+res(i):])
		if v == want[i] {
			s += " orig right"
		} else {
			s += fmt.Sprintf(" orig %#x, want %#x", v, want[i])
		}
		out = append(out, s)
	}
	if len(got) < len(ws) {
		out = append(out, fmt.Sprintf("(only %d of %d completions)", len(got), len(ws)))
	}
	return strings.Join(out, "; "), nil
}
