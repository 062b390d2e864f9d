package rdma_test

import (
	"bytes"
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

// TestResizeCQ: RESIZE_CQ moves the completions user space has not
// polled to the new ring's first slots, later ones follow them there,
// the old ring is not written again, and a ring too small for what is
// pending is refused with the CQ left as it was.
func TestResizeCQ(t *testing.T) {
	a, b := pair(t, 3)
	send := func(id uint64) {
		a.buf.Write(0, pattern(32, byte(id)))
		a.post(t, a.sq, a.qpn, rdmatest.Send{ID: id, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 32, LKey: mrKey}}})
		poll(t, a.scq, 1)
	}
	for i := range 5 {
		b.postRecv(t, b.rq, rdmatest.Recv{ID: uint64(10 + i), SGL: []rdmatest.SGE{{Addr: bufVA + 0x8000, Length: 64, LKey: mrKey}}})
	}
	for id := range uint64(3) {
		send(id)
	}
	waitFor(t, "three receive completions", func() bool { return b.rcq.Producer() == 3 })
	if c := poll(t, b.rcq, 1)[0]; c.WRID != 10 {
		t.Fatalf("first receive %+v", c)
	}
	small := rdmatest.NewQueue(b.g, 2, 6) // one usable slot: two are pending
	if st, _, _ := b.d.Run(rdmatest.ResizeCQ(recvCQ, small)); st != hw.RDMACmdErrParam {
		t.Fatalf("RESIZE_CQ to a ring too small: status %d, want PARAM", st)
	}
	big := rdmatest.NewQueue(b.g, 1024, 6)
	b.must(t, rdmatest.ResizeCQ(recvCQ, big))
	oldSlots := append([]byte(nil), b.g.Bytes(b.rcq.Base, 384+256*64)...)
	if p, c := big.Producer(), big.Consumer(); p != 2 || c != 0 {
		t.Fatalf("new ring's producer %d consumer %d, want 2 and 0", p, c)
	}
	send(3)
	for i, c := range poll(t, big, 3) {
		if c.Status != ibrc.WCSuccess || c.WRID != uint64(11+i) {
			t.Fatalf("completion %d on the new ring: %+v", i, c)
		}
	}
	if !bytes.Equal(b.g.Bytes(b.rcq.Base, 384+256*64), oldSlots) {
		t.Fatal("the old ring was written after RESIZE_CQ")
	}
}

// TestResizeCQBelowPostedUDSends: UD sends posted just before RESIZE_CQ
// count as pending on their CQ, so shrinking it below them is refused, as
// rdma-core's test_resize_cq expects: it posts the sends and resizes
// without polling in between.
func TestResizeCQBelowPostedUDSends(t *testing.T) {
	pa, pb := port.Pipe(256)
	a, b := newNode(t, pa, 1), newNode(t, pb, 2)
	const aUD, bUD = 0x400, 0x500
	asq, _ := a.udQP(t, aUD)
	b.udQP(t, bUD)
	for round := range 20 {
		small := rdmatest.NewQueue(a.g, 4, 6) // three usable slots
		a.must(t, rdmatest.ResizeCQ(sendCQ, small))
		a.scq = small
		for i := range 3 {
			a.post(t, asq, aUD, rdmatest.Send{ID: uint64(i), Opcode: hw.IBVWRSend, Flags: sig, UD: udTo(b, bUD, udQKey, 0)})
		}
		tiny := rdmatest.NewQueue(a.g, 2, 6)
		if st, _, _ := a.d.Run(rdmatest.ResizeCQ(sendCQ, tiny)); st != hw.RDMACmdErrParam {
			t.Fatalf("round %d: RESIZE_CQ below three posted UD sends: status %d, want PARAM", round, st)
		}
		for i, c := range poll(t, small, 3) {
			if c.Status != ibrc.WCSuccess || c.WRID != uint64(i) {
				t.Fatalf("round %d: completion %d %+v", round, i, c)
			}
		}
	}
}
