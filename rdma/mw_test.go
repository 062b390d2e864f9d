package rdma_test

import (
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rxeq"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestMemoryWindowsThroughRings: b binds a type 2 window onto a region
// with MW_BIND through its send queue; a writes through the window's new
// R_Key; b's LOCAL_INV ends that; bad commands fail with their status.
func TestMemoryWindowsThroughRings(t *testing.T) {
	a, b := pair(t, 3)
	const mwKey, bindMR = 0x123400, 0x5151
	b.must(t, rdmatest.RegMR(bindMR, pdn, bufVA, bufSize, hw.RDMAAccessLocalWrite|hw.RDMAAccessMWBind, pasid))
	b.must(t, rdmatest.AllocMW(mwKey, pdn, 2))
	for _, c := range []struct {
		name string
		cmd  rdmatest.Cmd
		want uint32
	}{
		{"window index in use", rdmatest.AllocMW(mwKey|7, pdn, 1), hw.RDMACmdErrHandle},
		{"window index 0", rdmatest.AllocMW(0x55, pdn, 1), hw.RDMACmdErrHandle},
		{"window of type 3", rdmatest.AllocMW(0x999900, pdn, 3), hw.RDMACmdErrParam},
		{"dealloc of no window", rdmatest.NewCmd(hw.RDMACmdDeallocMW, 0x777700), hw.RDMACmdErrHandle},
	} {
		if st, _, _ := b.d.Run(c.cmd); st != c.want {
			t.Errorf("%s: status %d, want %d", c.name, st, c.want)
		}
	}
	b.post(t, b.sq, b.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRBindMW, Flags: sig, Bind: &rdmatest.MWBind{
		Addr: bufVA + 0x4000, Length: 0x1000, MRLKey: bindMR, MWRKey: mwKey, RKey: mwKey | 0x42,
		Access: hw.RDMAAccessRemoteWrite | hw.RDMAAccessLocalWrite}})
	if c := poll(t, b.scq, 1)[0]; c.Status != ibrc.WCSuccess || c.Opcode != hw.IBVWCBindMW {
		t.Fatalf("bind %+v", c)
	}
	write := func(id uint64, rkey uint32) rxeq.CQE {
		a.buf.Write(0, pattern(64, byte(id)))
		a.post(t, a.sq, a.qpn, rdmatest.Send{ID: id, Opcode: hw.IBVWRRDMAWrite, Flags: sig, AutoLength: true, NumSGE: -1,
			RemoteAddr: bufVA + 0x4000, RKey: rkey, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}})
		return poll(t, a.scq, 1)[0]
	}
	if c := write(2, mwKey|0x42); c.Status != ibrc.WCSuccess {
		t.Fatalf("WRITE through the window: %+v", c)
	}
	b.post(t, b.sq, b.qpn, rdmatest.Send{ID: 3, Opcode: hw.IBVWRLocalInv, Flags: sig, InvRKey: mwKey | 0x42})
	if c := poll(t, b.scq, 1)[0]; c.Status != ibrc.WCSuccess || c.Opcode != hw.IBVWCLocalInv {
		t.Fatalf("LOCAL_INV %+v", c)
	}
	if c := write(4, mwKey|0x42); c.Status != ibrc.WCRemAccessErr {
		t.Fatalf("WRITE after LOCAL_INV: %+v", c)
	}
	b.must(t, rdmatest.NewCmd(hw.RDMACmdDeallocMW, mwKey|0x42))
}
