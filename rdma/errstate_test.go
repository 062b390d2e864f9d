package rdma_test

import (
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestSendOnQPErrWithoutPath: user space moves a fresh QP to ERR (from
// RESET or INIT, which the core allows) and rings its send doorbell; the
// QP never had a path MTU. Every entry completes flushed and the engine
// goes on serving the other QP (the division by the zero MTU once ended
// the server's process).
func TestSendOnQPErrWithoutPath(t *testing.T) {
	for _, tc := range []struct {
		name string
		via  []uint8
	}{
		{"RESET to ERR", []uint8{hw.RDMAQPErr}},
		{"INIT to ERR", []uint8{hw.RDMAQPInit, hw.RDMAQPErr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, 3)
			const qpn = 0x300
			sq, _ := a.createQP(t, qpn)
			for _, st := range tc.via {
				m := rdmatest.Modify{Mask: hw.RDMAQPAttrState, State: st}
				if st == hw.RDMAQPInit {
					m.Mask |= hw.RDMAQPAttrAccessFlags
				}
				a.must(t, rdmatest.ModifyQP(qpn, m))
			}
			sig := uint32(ibrc.SendSignaled)
			sgl := []rdmatest.SGE{{Addr: bufVA, Length: 4096, LKey: mrKey}}
			a.post(t, sq, qpn,
				rdmatest.Send{ID: 1, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1, SGL: sgl},
				rdmatest.Send{ID: 2, Opcode: hw.IBVWRRDMAWrite, Flags: sig, AutoLength: true, NumSGE: -1, SGL: sgl, RemoteAddr: bufVA, RKey: mrKey},
				rdmatest.Send{ID: 3, Opcode: hw.IBVWRRDMARead, Flags: sig, AutoLength: true, NumSGE: -1, SGL: sgl, RemoteAddr: bufVA, RKey: mrKey})
			for i, c := range poll(t, a.scq, 3) {
				if c.Status != ibrc.WCWRFlushErr || c.WRID != uint64(i+1) || c.QPNum != qpn {
					t.Errorf("completion %d: %+v, want WR flushed on QP %#x", i, c, qpn)
				}
			}
			// The connected QP still works.
			b.postRecv(t, b.rq, rdmatest.Recv{ID: 9, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}})
			a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 4, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
				SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}})
			if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCSuccess || c.WRID != 4 {
				t.Fatalf("SEND on the connected QP: %+v", c)
			}
			if c := poll(t, b.rcq, 1)[0]; c.Status != ibrc.WCSuccess || c.WRID != 9 {
				t.Fatalf("its receive: %+v", c)
			}
		})
	}
}
