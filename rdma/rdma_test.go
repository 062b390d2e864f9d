package rdma_test

import (
	"bytes"
	"github.com/npfnic/npfnic/rdma"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rxeq"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

const sig = hw.IBVSendSignaled

// TestTransfers: each operation between two engines cabled by a pipe, with
// the data checked byte for byte at the far end and both completions field
// by field, at MTU 1024 and 4096, single and multi-packet.
func TestTransfers(t *testing.T) {
	for _, mtu := range []uint8{3, 5} { // 1024, 4096
		a, b := pair(t, mtu)
		for i, tc := range []struct {
			name   string
			op     uint32
			n      int
			inline bool
			imm    uint32
			sges   int
		}{
			{"send", hw.IBVWRSend, 100, false, 0, 1},
			{"send 2 SGEs multi-packet", hw.IBVWRSend, 20000, false, 0, 2},
			{"send imm inline", hw.IBVWRSendWithImm, 40, true, 0xa1b2c3d4, 0},
			{"write", hw.IBVWRRDMAWrite, 9000, false, 0, 1},
			{"write imm", hw.IBVWRRDMAWriteWithImm, 5000, false, 77, 3},
			{"read", hw.IBVWRRDMARead, 12345, false, 0, 2},
			{"zero-length send", hw.IBVWRSend, 0, false, 0, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				src, dst := 0x1000*(i*8+1), 0x80000+0x1000*(i*8)
				data := pattern(tc.n, byte(i+int(mtu)))
				// The bytes start at a's buffer for SEND/WRITE, b's for READ.
				from, to := a.buf, b.buf
				if tc.op == hw.IBVWRRDMARead {
					from, to = b.buf, a.buf
					src, dst = dst, src
				}
				from.Write(src, data)
				w := rdmatest.Send{ID: uint64(1000 + i), Opcode: tc.op, Flags: sig, Imm: tc.imm, AutoLength: true, NumSGE: -1}
				local := src // where a's SGEs point
				if tc.op == hw.IBVWRRDMARead {
					local = dst
					w.RemoteAddr, w.RKey = bufVA+uint64(src), mrKey
				} else if tc.op != hw.IBVWRSend && tc.op != hw.IBVWRSendWithImm {
					w.RemoteAddr, w.RKey = bufVA+uint64(dst), mrKey
				}
				if tc.inline {
					w.Flags |= hw.IBVSendInline
					w.Inline = data
				} else if tc.sges > 0 {
					per := (tc.n + tc.sges - 1) / tc.sges
					for off := 0; off < tc.n; off += per {
						w.SGL = append(w.SGL, rdmatest.SGE{Addr: bufVA + uint64(local+off), Length: uint32(min(per, tc.n-off)), LKey: mrKey})
					}
				}
				recvs := tc.op == hw.IBVWRSend || tc.op == hw.IBVWRSendWithImm || tc.op == hw.IBVWRRDMAWriteWithImm
				if recvs {
					// Two SGEs, the first short, so the message spans them.
					b.postRecv(t, b.rq, rdmatest.Recv{ID: uint64(2000 + i), SGL: []rdmatest.SGE{
						{Addr: bufVA + uint64(dst), Length: 64, LKey: mrKey},
						{Addr: bufVA + uint64(dst) + 64, Length: 64 << 10, LKey: mrKey}}})
				}
				a.post(t, a.sq, a.qpn, w)
				wantOp := map[uint32]ibrc.WCOpcode{hw.IBVWRSend: ibrc.WCSend, hw.IBVWRSendWithImm: ibrc.WCSend,
					hw.IBVWRRDMAWrite: ibrc.WCRDMAWrite, hw.IBVWRRDMAWriteWithImm: ibrc.WCRDMAWrite, hw.IBVWRRDMARead: ibrc.WCRDMARead}[tc.op]
				got := poll(t, a.scq, 1)[0]
				want := rxeq.CQE{WRID: w.ID, Opcode: wantOp, ByteLen: uint32(tc.n), QPNum: a.qpn, PortNum: 1}
				if got != want {
					t.Errorf("sender completion %+v, want %+v", got, want)
				}
				if recvs {
					got := poll(t, b.rcq, 1)[0]
					want := rxeq.CQE{WRID: uint64(2000 + i), Opcode: ibrc.WCRecv, ByteLen: uint32(tc.n), QPNum: b.qpn,
						PortNum: 1, Flags: ibrc.WCFlags(hw.IBVWCGRH)}
					if tc.imm != 0 {
						want.Imm, want.Flags = tc.imm, want.Flags|ibrc.WCWithImm
					}
					if tc.op == hw.IBVWRRDMAWriteWithImm {
						want.Opcode = ibrc.WCRecvRDMAImm
					}
					if got != want {
						t.Errorf("receiver completion %+v, want %+v", got, want)
					}
				}
				quiet(t, b.rcq)
				if got := to.Read(dst, tc.n); !bytes.Equal(got, data) {
					t.Errorf("data differs at the far end (%d bytes)", tc.n)
				}
				if b.rq.Consumer() != b.rq.Producer() || a.sq.Consumer() != a.sq.Producer() {
					t.Errorf("slots not retired: SQ %d/%d RQ %d/%d", a.sq.Consumer(), a.sq.Producer(), b.rq.Consumer(), b.rq.Producer())
				}
			})
		}
		if a.eth.n.Load() != 0 || b.eth.n.Load() != 0 {
			t.Errorf("RoCEv2 frames reached Ethernet: %d, %d", a.eth.n.Load(), b.eth.n.Load())
		}
	}
}

// TestUnsignaledAndCQArm: an unsignaled WRITE makes no completion but
// retires its slot; CQ_ARM posts one CQ_COMP per arm (solicited-only arms
// ignore unsolicited receives), and EQ_ARM raises the vector once.
func TestUnsignaledAndCQArm(t *testing.T) {
	a, b := pair(t, 3)
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRRDMAWrite, RemoteAddr: bufVA, RKey: mrKey,
		AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 10, LKey: mrKey}}},
		rdmatest.Send{ID: 2, Opcode: hw.IBVWRRDMAWrite, Flags: sig, RemoteAddr: bufVA, RKey: mrKey,
			AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 10, LKey: mrKey}}})
	if c := poll(t, a.scq, 1)[0]; c.WRID != 2 {
		t.Fatalf("completion of wr %d, want only the signaled 2", c.WRID)
	}
	quiet(t, a.scq)
	if a.sq.Consumer() != 2 {
		t.Fatalf("SQ consumer %d, want 2", a.sq.Consumer())
	}

	hw.Offsets(b.e).RegWrite(hw.RegEQArm, 1)
	hw.Offsets(b.e).RegWrite(hw.RegCQArm, recvCQ|hw.RDMACQArmSolicited)
	send := func(id uint64, flags uint32) {
		b.postRecv(t, b.rq, rdmatest.Recv{ID: id, SGL: []rdmatest.SGE{{Addr: bufVA + 0x1000, Length: 100, LKey: mrKey}}})
		a.post(t, a.sq, a.qpn, rdmatest.Send{ID: id, Opcode: hw.IBVWRSend, Flags: flags, AutoLength: true, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 10, LKey: mrKey}}})
		poll(t, b.rcq, 1)
	}
	send(10, 0)
	if evs := b.d.Events(); len(evs) != 0 || b.irqs.Load() != 0 {
		t.Fatalf("unsolicited receive raised %+v, %d interrupts", evs, b.irqs.Load())
	}
	send(11, hw.IBVSendSolicited)
	ev := b.waitEvent(t, hw.RDMAEventCQComp, recvCQ)
	if b.irqs.Load() != 1 {
		t.Errorf("%d interrupts, want 1", b.irqs.Load())
	}
	_ = ev
	send(12, hw.IBVSendSolicited) // not armed again: no event
	if evs := b.d.Events(); len(evs) != 0 {
		t.Fatalf("events without an arm: %+v", evs)
	}
	hw.Offsets(b.e).RegWrite(hw.RegCQArm, recvCQ)
	send(13, 0)
	b.waitEvent(t, hw.RDMAEventCQComp, recvCQ)
	if b.irqs.Load() != 1 {
		t.Errorf("%d interrupts without EQ_ARM, want still 1", b.irqs.Load())
	}
}

// TestBadWQEs: hostile send entries complete in their turn with their
// status, move only their QP to ERR (QP_FATAL with the status), flush what
// follows, and leave another QP of the same engine working.
func TestBadWQEs(t *testing.T) {
	good := func(id uint64) rdmatest.Send {
		return rdmatest.Send{ID: id, Opcode: hw.IBVWRRDMAWrite, Flags: sig, RemoteAddr: bufVA, RKey: mrKey,
			AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}}
	}
	for _, tc := range []struct {
		name string
		bad  rdmatest.Send
		st   ibrc.WCStatus
	}{
		{"local invalidate opcode", rdmatest.Send{ID: 9, Opcode: hw.IBVWRLocalInv, Flags: sig}, ibrc.WCLocQPOpErr},
		{"atomic into 4 bytes", rdmatest.Send{ID: 9, Opcode: hw.IBVWRAtomicFetchAdd, Flags: sig, RemoteAddr: bufVA, RKey: mrKey,
			AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 4, LKey: mrKey}}}, ibrc.WCLocLenErr},
		{"atomic to a QP without remote atomic", rdmatest.Send{ID: 9, Opcode: hw.IBVWRAtomicCmpAndSwp, Flags: sig, RemoteAddr: bufVA, RKey: mrKey,
			AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 8, LKey: mrKey}}}, ibrc.WCRemInvReqErr},
		{"undefined opcode", rdmatest.Send{ID: 9, Opcode: 0xdead, Flags: sig}, ibrc.WCLocQPOpErr},
		{"bad lkey", rdmatest.Send{ID: 9, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: 0x999}}}, ibrc.WCLocProtErr},
		{"SGE past the MR", rdmatest.Send{ID: 9, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: bufVA + bufSize - 16, Length: 64, LKey: mrKey}}}, ibrc.WCLocProtErr},
		{"SGE outside any mapping", rdmatest.Send{ID: 9, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: 0x1000, Length: 64, LKey: mrKey}}}, ibrc.WCLocProtErr},
		{"length over the SGEs", rdmatest.Send{ID: 9, Opcode: hw.IBVWRSend, Flags: sig, Length: 1000, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}}, ibrc.WCLocLenErr},
		{"too many SGEs", rdmatest.Send{ID: 9, Opcode: hw.IBVWRSend, Flags: sig, Length: 64, NumSGE: 1 << 20,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}}, ibrc.WCLocQPOpErr},
		{"inline over the limit", rdmatest.Send{ID: 9, Opcode: hw.IBVWRSend, Flags: sig | hw.IBVSendInline, Length: 4000}, ibrc.WCLocLenErr},
		{"inline read", rdmatest.Send{ID: 9, Opcode: hw.IBVWRRDMARead, Flags: sig | hw.IBVSendInline, Length: 4}, ibrc.WCLocQPOpErr},
		{"lkey of another PD", rdmatest.Send{ID: 9, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKeyOtherPD}}}, ibrc.WCLocProtErr},
		{"READ into a region without local write", rdmatest.Send{ID: 9, Opcode: hw.IBVWRRDMARead, Flags: sig, RemoteAddr: bufVA, RKey: mrKey,
			AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKeyReadOnly}}}, ibrc.WCLocProtErr},
		{"rkey of another PD", rdmatest.Send{ID: 9, Opcode: hw.IBVWRRDMAWrite, Flags: sig, RemoteAddr: bufVA, RKey: mrKeyOtherPD,
			AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}}, ibrc.WCRemAccessErr},
		{"WRITE to a region without remote write", rdmatest.Send{ID: 9, Opcode: hw.IBVWRRDMAWrite, Flags: sig, RemoteAddr: bufVA, RKey: mrKeyReadOnly,
			AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}}, ibrc.WCRemAccessErr},
		{"remote key wrong", rdmatest.Send{ID: 9, Opcode: hw.IBVWRRDMAWrite, Flags: sig, RemoteAddr: bufVA, RKey: 0x5555,
			AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}}, ibrc.WCRemAccessErr},
		{"remote range past the MR", rdmatest.Send{ID: 9, Opcode: hw.IBVWRRDMARead, Flags: sig, RemoteAddr: bufVA + bufSize - 8, RKey: mrKey,
			AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}}, ibrc.WCRemAccessErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, 3)
			// A second QP on a, connected to a second QP on b.
			sq2, _ := a.createQP(t, 0x300)
			b.createQP(t, 0x301)
			a.connect(t, 0x300, b, 0x301, 3)
			b.connect(t, 0x301, a, 0x300, 3)

			a.post(t, a.sq, a.qpn, good(1), tc.bad, good(3))
			got := poll(t, a.scq, 3)
			if got[0].WRID != 1 || got[0].Status != ibrc.WCSuccess {
				t.Errorf("entry before the bad one: %+v", got[0])
			}
			if got[1].WRID != 9 || got[1].Status != tc.st || got[1].QPNum != a.qpn {
				t.Errorf("bad entry completed %+v, want status %v", got[1], tc.st)
			}
			if got[2].WRID != 3 || got[2].Status != ibrc.WCWRFlushErr {
				t.Errorf("entry after the bad one: %+v, want flushed", got[2])
			}
			ev := a.waitEvent(t, hw.RDMAEventQPFatal, a.qpn)
			if ev.Info != uint32(tc.st) {
				t.Errorf("QP_FATAL info %d, want %d", ev.Info, tc.st)
			}
			_, q, _ := a.d.Run(rdmatest.NewCmd(hw.RDMACmdQueryQP, a.qpn))
			if s := hw.RDMAQueryQPState.Get(q[:]); s != hw.RDMAQPErr {
				t.Errorf("QP state %d, want ERR", s)
			}
			// The other QP still works.
			a.post(t, sq2, 0x300, good(50))
			if c := poll(t, a.scq, 1)[0]; c.WRID != 50 || c.Status != ibrc.WCSuccess || c.QPNum != 0x300 {
				t.Errorf("other QP: %+v", c)
			}
		})
	}
}

// TestGarbageRings: producer indices beyond the ring and random slots, in
// a send queue and in a receive queue, never make the device panic or
// touch memory outside the rings and the MR: each QP fails alone with an
// error completion and QP_FATAL, the peer's WR completes with an error,
// and the device's consumer indices stay slot numbers.
func TestGarbageRings(t *testing.T) {
	a, b := pair(t, 3)
	for _, n := range []*node{a, b} {
		// Everything but the rings, the CQs and the MR's pages is fenced:
		// a stray write anywhere else is counted.
		n.g.Mem.Fence(0, n.g.Base)
		n.g.Mem.Fence(n.g.Base+uint64(len(n.g.RAM)), 1<<40)
	}
	for i := range a.sq.Slots {
		copy(a.sq.Slot(i), pattern(1<<a.sq.Log2, byte(i)))
	}
	a.sq.SetProducer(0xffff_fff7)
	hw.Offsets(a.e).RegWrite(hw.RegSQDoorbell, a.qpn)
	a.waitEvent(t, hw.RDMAEventQPFatal, a.qpn)
	// 0xffff_fff7 masked is 55 posted entries: the first fails, the rest
	// are flushed.
	for i, c := range poll(t, a.scq, 55) {
		if c.Status == ibrc.WCSuccess || i > 0 && c.Status != ibrc.WCWRFlushErr {
			t.Errorf("garbage send entry %d completed %+v", i, c)
		}
	}
	quiet(t, a.scq)
	if c := a.sq.Consumer(); c >= a.sq.Slots {
		t.Errorf("SQ consumer_index %#x", c)
	}

	// b's receive ring is garbage: a SEND into it fails b's QP, and a's
	// second QP's SEND is NAKed.
	sq2, _ := a.createQP(t, 0x300)
	_, rq2 := b.createQP(t, 0x301)
	a.connect(t, 0x300, b, 0x301, 3)
	b.connect(t, 0x301, a, 0x300, 3)
	for i := range rq2.Slots {
		copy(rq2.Slot(i), pattern(1<<rq2.Log2, byte(i*3)))
		hw.RxeRecvNumSGE.Put(rq2.Slot(i), 0x4000_0000+uint32(i))
	}
	rq2.SetProducer(0x1234_5677)
	a.post(t, sq2, 0x300, rdmatest.Send{ID: 77, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}})
	if c := poll(t, a.scq, 1)[0]; c.WRID != 77 || c.Status != ibrc.WCRemOpErr {
		t.Errorf("send into a garbage receive queue: %+v, want REM_OP_ERR", c)
	}
	b.waitEvent(t, hw.RDMAEventQPFatal, 0x301)
	// 0x1234_5677 masked is the number of entries posted: the first
	// fails, the rest are flushed (whenever the engine runs, so their
	// completions are awaited), each a malformed entry counted before its
	// completion is written.
	posted := int(0x1234_5677 & (rq2.Slots - 1))
	for i, c := range poll(t, b.rcq, posted) {
		if c.QPNum != 0x301 || i == 0 && c.Status != ibrc.WCLocQPOpErr || i > 0 && c.Status != ibrc.WCWRFlushErr {
			t.Errorf("garbage receive entry %d: %+v, want LOC_QP_OP_ERR then WR_FLUSH_ERR", i, c)
		}
	}
	if got := b.e.Stats().BadWQEs; got != uint64(posted) {
		t.Errorf("receiver counted %d bad WQEs, want %d", got, posted)
	}
	for _, n := range []*node{a, b} {
		if late := n.g.Mem.LateWrites(); late != 0 {
			t.Errorf("%d writes outside the rings and the MR: %v", late, n.g.Mem.LateLog())
		}
	}
	if s := b.e.Stats().RC; s.RxMalformed != 0 || s.RxBadICRC != 0 {
		t.Errorf("malformed frames on the wire: %+v", s)
	}
}

// TestCQOverrun: a CQ user space does not poll overruns: CQ_ERR, once.
func TestCQOverrun(t *testing.T) {
	a, b := pair(t, 3)
	small := rdmatest.NewQueue(a.g, 4, 6)
	a.must(t, rdmatest.CreateCQ(9, small))
	sq, _ := rdmatest.NewQueue(a.g, 16, 9), rdmatest.NewQueue(a.g, 16, 7)
	rq := rdmatest.NewQueue(a.g, 16, 7)
	a.must(t, rdmatest.CreateQP(0x400, rdmatest.QPSpec{PD: pdn, SQ: sq, RQ: rq, SendCQ: 9, RecvCQ: 9, MaxSendSGE: 1, MaxRecvSGE: 1}))
	b.createQP(t, 0x401)
	a.connect(t, 0x400, b, 0x401, 3)
	b.connect(t, 0x401, a, 0x400, 3)
	for i := range 6 {
		a.post(t, sq, 0x400, rdmatest.Send{ID: uint64(i), Opcode: hw.IBVWRRDMAWrite, Flags: sig, RemoteAddr: bufVA, RKey: mrKey,
			AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 8, LKey: mrKey}}})
	}
	a.waitEvent(t, hw.RDMAEventCQErr, 9)
	if n := len(poll(t, small, 3)); n != 3 {
		t.Fatalf("%d completions before the overrun, want 3", n)
	}
	if st, _, _ := a.d.Run(rdmatest.NewCmd(hw.RDMACmdDestroyCQ, 9)); st != hw.RDMACmdErrBusy {
		t.Errorf("DESTROY_CQ with a QP on it: status %d, want BUSY", st)
	}
}

// TestCQArmDuringPass: a CQ_ARM that reaches the device while a worker
// pass is already under way, before a completion lands in that pass, arms
// that completion: the CQ_COMP event comes. Applying the arm only at the
// next pass lost it, and ibv_rc_pingpong -e (which re-arms and then waits
// for its next completion) hung on npfnic against rdma_rxe.
func TestCQArmDuringPass(t *testing.T) {
	a, b := pair(t, 3)
	hw.Offsets(a.e).RegWrite(hw.RegEQArm, 1)
	var once sync.Once
	rdma.SetTestBeforeDrain(a.e, func() {
		if a.e.Stats().RC.RxFrames > 0 { // the ACK is in: its completion drains in this pass
			once.Do(func() { hw.Offsets(a.e).RegWrite(hw.RegCQArm, sendCQ) })
		}
	})
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRRDMAWrite, Flags: sig, RemoteAddr: bufVA, RKey: mrKey,
		AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 10, LKey: mrKey}}})
	if c := poll(t, a.scq, 1)[0]; c.WRID != 1 {
		t.Fatalf("completion %+v", c)
	}
	a.waitEvent(t, hw.RDMAEventCQComp, sendCQ)
	_ = b
}

// TestCQArmWithUnpolledCompletion: CQ_ARM is a posted write, and librxe
// polls right after ibv_req_notify_cq returns, so a completion can land
// after user space polled the CQ empty and before the device applies the
// arm. An arm that finds completions user space has not consumed posts
// CQ_COMP at once (for a solicited-only arm: one of them solicited or an
// error); one that finds the CQ drained waits for the next completion.
// Armed only for the next completion, ibv_rc_pingpong -e on npfnic against
// rdma_rxe hung with the RECV completion unpolled in its CQ.
func TestCQArmWithUnpolledCompletion(t *testing.T) {
	a, b := pair(t, 3)
	hw.Offsets(a.e).RegWrite(hw.RegEQArm, 1)
	cqComps := func(n *node, cqn uint32) int {
		k := 0
		for _, ev := range n.d.Events() {
			if ev.Type == hw.RDMAEventCQComp && ev.Handle == cqn {
				k++
			}
		}
		return k
	}
	landed := func(q *rdmatest.Queue, prod uint32) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for q.Producer() != prod {
			if time.Now().After(deadline) {
				t.Fatalf("producer index %d, want %d", q.Producer(), prod)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	write := rdmatest.Send{ID: 1, Opcode: hw.IBVWRRDMAWrite, Flags: sig, RemoteAddr: bufVA, RKey: mrKey,
		AutoLength: true, NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 10, LKey: mrKey}}}
	a.post(t, a.sq, a.qpn, write)
	landed(a.scq, 1) // not polled
	hw.Offsets(a.e).RegWrite(hw.RegCQArm, sendCQ)
	a.waitEvent(t, hw.RDMAEventCQComp, sendCQ)
	poll(t, a.scq, 1)

	// Drained: the arm waits for the next completion, which raises it.
	hw.Offsets(a.e).RegWrite(hw.RegCQArm, sendCQ)
	time.Sleep(20 * time.Millisecond)
	if k := cqComps(a, sendCQ); k != 0 {
		t.Fatalf("%d CQ_COMP events for an arm over a drained CQ", k)
	}
	write.ID = 2
	a.post(t, a.sq, a.qpn, write)
	a.waitEvent(t, hw.RDMAEventCQComp, sendCQ)
	poll(t, a.scq, 1)

	// Solicited only: an unpolled plain receive does not raise it, an
	// unpolled solicited one does.
	hw.Offsets(b.e).RegWrite(hw.RegEQArm, 1)
	b.postRecv(t, b.rq, rdmatest.Recv{ID: 10, SGL: []rdmatest.SGE{{Addr: bufVA + 0x1000, Length: 64, LKey: mrKey}}},
		rdmatest.Recv{ID: 11, SGL: []rdmatest.SGE{{Addr: bufVA + 0x2000, Length: 64, LKey: mrKey}}})
	send := rdmatest.Send{ID: 3, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: 10, LKey: mrKey}}}
	a.post(t, a.sq, a.qpn, send)
	landed(b.rcq, 1)
	hw.Offsets(b.e).RegWrite(hw.RegCQArm, recvCQ|hw.RDMACQArmSolicited)
	time.Sleep(20 * time.Millisecond)
	if k := cqComps(b, recvCQ); k != 0 {
		t.Fatalf("%d CQ_COMP events for a solicited arm over an unsolicited completion", k)
	}
	// That arm is spent by the solicited completion that comes next,
	// which then stays unpolled.
	send.ID, send.Flags = 4, sig|hw.IBVSendSolicited
	a.post(t, a.sq, a.qpn, send)
	landed(b.rcq, 2)
	b.waitEvent(t, hw.RDMAEventCQComp, recvCQ)
	time.Sleep(20 * time.Millisecond)
	if k := cqComps(b, recvCQ); k != 0 {
		t.Fatalf("%d more CQ_COMP events for one arm", k)
	}
	hw.Offsets(b.e).RegWrite(hw.RegCQArm, recvCQ|hw.RDMACQArmSolicited)
	b.waitEvent(t, hw.RDMAEventCQComp, recvCQ)
	poll(t, a.scq, 2)
	poll(t, b.rcq, 2)
}
