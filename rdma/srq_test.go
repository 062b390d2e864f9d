package rdma_test

import (
	"bytes"
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

// srqRig is a pair whose b has an SRQ and two QPs that take from it,
// each connected to a QP of a.
type srqRig struct {
	a, b       *node
	srq        *rdmatest.Queue
	aQPs, bQPs [2]uint32
	aSQs       [2]*rdmatest.Queue
}

const srqn = 5

func newSRQRig(t *testing.T, limit uint32) *srqRig {
	t.Helper()
	pa, pb := port.Pipe(256)
	r := &srqRig{a: newNode(t, pa, 1), b: newNode(t, pb, 2), aQPs: [2]uint32{0x200, 0x201}, bQPs: [2]uint32{0x300, 0x301}}
	r.srq = rdmatest.NewQueue(r.b.g, 16, 7)
	r.b.must(t, rdmatest.CreateSRQ(srqn, pdn, r.srq, 2, limit))
	for i := range 2 {
		r.aSQs[i], _ = r.a.createQP(t, r.aQPs[i])
		r.b.must(t, rdmatest.CreateQPSRQ(r.bQPs[i], srqn, rdmatest.QPSpec{PD: pdn, SQ: rdmatest.NewQueue(r.b.g, 64, 9),
			SendCQ: sendCQ, RecvCQ: recvCQ, MaxSendSGE: 4, MaxInline: 64}))
		r.a.connect(t, r.aQPs[i], r.b, r.bQPs[i], 3)
		r.b.connect(t, r.bQPs[i], r.a, r.aQPs[i], 3)
	}
	return r
}

// post puts receive entries of 4 KiB each, at 64 KiB + 4 KiB × id of b's
// buffer, into the SRQ.
func (r *srqRig) post(t *testing.T, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		if err := r.srq.Produce(rdmatest.Recv{ID: id, SGL: []rdmatest.SGE{{Addr: bufVA + 0x10000 + 0x1000*id, Length: 0x1000, LKey: mrKey}}}.Encode); err != nil {
			t.Fatal(err)
		}
	}
}

// send has a's QP i SEND n bytes of pattern seed.
func (r *srqRig) send(t *testing.T, i int, id uint64, n int, seed byte) {
	t.Helper()
	r.a.buf.Write(int(id)*0x1000, pattern(n, seed))
	r.a.post(t, r.aSQs[i], r.aQPs[i], rdmatest.Send{ID: id, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA + 0x1000*id, Length: uint32(n), LKey: mrKey}}})
}

// TestSRQ: two QPs take their receives from one SRQ, in the order SENDs
// arrive whichever QP they reach; each entry is retired as it is taken;
// the armed limit posts one SRQ_LIMIT event; the SRQ cannot go while a QP
// uses it; a QP in error flushes what it took, never the SRQ's entries.
func TestSRQ(t *testing.T) {
	r := newSRQRig(t, 2)
	a, b := r.a, r.b
	r.post(t, 1, 2, 3, 4)
	r.send(t, 0, 1, 100, 0x11)
	r.send(t, 1, 2, 200, 0x22)
	r.send(t, 0, 3, 300, 0x33)
	poll(t, a.scq, 3)
	// Entries go to SENDs in the order they arrive, whichever QP: the
	// three SENDs (told apart by length) took entries 1..3 between them.
	seen := map[uint64]bool{}
	for _, c := range poll(t, b.rcq, 3) {
		k := int(c.ByteLen / 100) // 1, 2 or 3: which SEND
		qp := r.bQPs[0]
		if k == 2 {
			qp = r.bQPs[1]
		}
		if c.Status != ibrc.WCSuccess || c.WRID < 1 || c.WRID > 3 || seen[c.WRID] || c.QPNum != qp || c.ByteLen != uint32(100*k) {
			t.Fatalf("receive %+v: want one of entries 1-3, once, on QP %#x", c, qp)
		}
		seen[c.WRID] = true
		if !bytes.Equal(b.buf.Read(0x10000+0x1000*int(c.WRID), 100*k), pattern(100*k, byte(0x11*k))) {
			t.Errorf("SEND %d landed wrong in entry %d", k, c.WRID)
		}
	}
	if c := r.srq.Consumer(); c != 3 {
		t.Errorf("SRQ consumer_index %d after 3 entries taken, want 3", c)
	}
	// 4 posted, 3 taken: 1 left, under the limit CREATE_SRQ armed (arm 0).
	if ev := b.waitEvent(t, hw.RDMAEventSRQLimit, srqn); ev.Info != 0 {
		t.Errorf("SRQ_LIMIT of CREATE_SRQ's arm: info %d, want 0", ev.Info)
	}
	// Armed again by MODIFY_SRQ (its first): the next take fires it, as
	// arm 1.
	b.must(t, rdmatest.ModifySRQ(srqn, 2))
	r.post(t, 5)
	r.send(t, 1, 5, 50, 0x55)
	if c := poll(t, b.rcq, 1)[0]; c.WRID != 4 || c.Status != ibrc.WCSuccess {
		t.Fatalf("receive after re-arming: %+v", c)
	}
	if ev := b.waitEvent(t, hw.RDMAEventSRQLimit, srqn); ev.Info != 1 {
		t.Errorf("SRQ_LIMIT of MODIFY_SRQ's arm: info %d, want 1", ev.Info)
	}

	if st, _, _ := b.d.Run(rdmatest.NewCmd(hw.RDMACmdDestroySRQ, srqn)); st != hw.RDMACmdErrBusy {
		t.Errorf("DESTROY_SRQ with QPs attached: status %d, want BUSY", st)
	}
	// QP 0 to ERR: nothing it took is pending, and the SRQ's last entry
	// stays posted for QP 1.
	b.must(t, rdmatest.ModifyQP(r.bQPs[0], rdmatest.Modify{Mask: hw.RDMAQPAttrState, State: hw.RDMAQPErr}))
	quiet(t, b.rcq)
	r.send(t, 1, 6, 64, 0x44)
	if c := poll(t, b.rcq, 1)[0]; c.Status != ibrc.WCSuccess || c.WRID != 5 || c.QPNum != r.bQPs[1] {
		t.Fatalf("the SRQ's last entry after the other QP's error: %+v", c)
	}
	for _, q := range r.bQPs {
		b.must(t, rdmatest.NewCmd(hw.RDMACmdDestroyQP, q))
	}
	b.must(t, rdmatest.NewCmd(hw.RDMACmdDestroySRQ, srqn))
}

// TestSRQBadInput: commands with bad parameters fail as the datasheet
// says; a malformed SRQ entry fails the QP that took it alone; a ring that
// cannot be read posts SRQ_ERR.
func TestSRQBadInput(t *testing.T) {
	r := newSRQRig(t, 0)
	b := r.b
	q := rdmatest.NewQueue(b.g, 16, 7)
	for _, c := range []struct {
		name string
		cmd  rdmatest.Cmd
		want uint32
	}{
		{"SRQN past the table", rdmatest.CreateSRQ(hw.RDMAMaxSRQ, pdn, q, 2, 0), hw.RDMACmdErrHandle},
		{"SRQN in use", rdmatest.CreateSRQ(srqn, pdn, q, 2, 0), hw.RDMACmdErrHandle},
		{"no SGE", rdmatest.CreateSRQ(6, pdn, q, 0, 0), hw.RDMACmdErrParam},
		{"limit of the whole ring", rdmatest.CreateSRQ(6, pdn, q, 2, 16), hw.RDMACmdErrParam},
		{"modify unknown", rdmatest.ModifySRQ(7, 1), hw.RDMACmdErrHandle},
		{"modify past the ring", rdmatest.ModifySRQ(srqn, 16), hw.RDMACmdErrParam},
		{"QP on an unknown SRQ", rdmatest.CreateQPSRQ(0x400, 9, rdmatest.QPSpec{PD: pdn, SQ: rdmatest.NewQueue(b.g, 64, 9),
			SendCQ: sendCQ, RecvCQ: recvCQ, MaxSendSGE: 1}), hw.RDMACmdErrParam},
		{"QP of another PD", rdmatest.CreateQPSRQ(0x400, srqn, rdmatest.QPSpec{PD: pdn + 1, SQ: rdmatest.NewQueue(b.g, 64, 9),
			SendCQ: sendCQ, RecvCQ: recvCQ, MaxSendSGE: 1}), hw.RDMACmdErrParam},
		{"destroy unknown", rdmatest.NewCmd(hw.RDMACmdDestroySRQ, 8), hw.RDMACmdErrHandle},
	} {
		if st, _, err := b.d.Run(c.cmd); err != nil || st != c.want {
			t.Errorf("%s: status %d (%v), want %d", c.name, st, err, c.want)
		}
	}

	// An entry with more SGEs than the SRQ takes fails the QP that took
	// it (QP 0); QP 1 takes the next one.
	if err := r.srq.Produce(rdmatest.Recv{ID: 1, SGL: make([]rdmatest.SGE, 3)}.Encode); err != nil {
		t.Fatal(err)
	}
	r.post(t, 2)
	r.send(t, 0, 1, 64, 1)
	if c := poll(t, b.rcq, 1)[0]; c.WRID != 1 || c.Status == ibrc.WCSuccess || c.QPNum != r.bQPs[0] {
		t.Fatalf("malformed SRQ entry: %+v", c)
	}
	b.waitEvent(t, hw.RDMAEventQPFatal, r.bQPs[0])
	r.send(t, 1, 2, 64, 2)
	if c := poll(t, b.rcq, 1)[0]; c.WRID != 2 || c.Status != ibrc.WCSuccess || c.QPNum != r.bQPs[1] {
		t.Fatalf("the next entry, for the other QP: %+v", c)
	}

	// A ring outside guest memory: SRQ_ERR at the first take, and its QP
	// answers with RNR NAKs rather than take anything.
	bad := &rdmatest.Queue{Base: 1 << 50, Slots: 16, Log2: 7}
	b.must(t, rdmatest.CreateSRQ(9, pdn, bad, 1, 0))
	b.must(t, rdmatest.CreateQPSRQ(0x400, 9, rdmatest.QPSpec{PD: pdn, SQ: rdmatest.NewQueue(b.g, 64, 9),
		SendCQ: sendCQ, RecvCQ: recvCQ, MaxSendSGE: 1}))
	sq, _ := r.a.createQP(t, 0x202)
	r.a.connect(t, 0x202, b, 0x400, 3)
	b.connect(t, 0x400, r.a, 0x202, 3)
	r.a.post(t, sq, 0x202, rdmatest.Send{ID: 9, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: 8, LKey: mrKey}}})
	b.waitEvent(t, hw.RDMAEventSRQErr, 9)
	if b.e.Stats().RC.RNRNakNoWQE == 0 {
		t.Error("no RNR NAK from the QP of a broken SRQ")
	}
}
