package rdma_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

// TestLoopback: two QPs of one device connected to each other (as
// rdma-core's tests connect them) move SENDs, WRITEs, READs and atomics
// without the wire: the device on the cable's other end receives none of
// their frames.
func TestLoopback(t *testing.T) {
	pa, pb := port.Pipe(256)
	a, other := newNode(t, pa, 1), newNode(t, pb, 2)
	const qp2, atomicKey = 0x200, 0x4545
	_, rq2 := a.createQP(t, qp2)
	remote := uint32(hw.RDMAAccessRemoteWrite | hw.RDMAAccessRemoteRead | hw.RDMAAccessRemoteAtomic)
	a.connectAccess(t, a.qpn, a, qp2, 3, 14, remote)
	a.connectAccess(t, qp2, a, a.qpn, 3, 14, remote)
	a.must(t, rdmatest.RegMR(atomicKey, pdn, bufVA, bufSize, access|hw.RDMAAccessRemoteAtomic, pasid))

	const src, dst, readBack, word, orig = 0, 0x10000, 0x20000, 0x30000, 0x40000
	msg := pattern(5000, 0x3c)
	a.buf.Write(src, msg)
	a.buf.Write(word, binary.LittleEndian.AppendUint64(nil, 40))
	sge := func(off, n int) []rdmatest.SGE {
		return []rdmatest.SGE{{Addr: bufVA + uint64(off), Length: uint32(n), LKey: mrKey}}
	}
	a.postRecv(t, rq2, rdmatest.Recv{ID: 7, Length: 8192, SGL: sge(dst, 8192)})
	a.post(t, a.sq, a.qpn,
		rdmatest.Send{ID: 1, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1, SGL: sge(src, len(msg))},
		rdmatest.Send{ID: 2, Opcode: hw.IBVWRRDMAWrite, Flags: sig, RemoteAddr: bufVA + dst + 8192, RKey: mrKey,
			AutoLength: true, NumSGE: -1, SGL: sge(src, len(msg))},
		rdmatest.Send{ID: 3, Opcode: hw.IBVWRRDMARead, Flags: sig, RemoteAddr: bufVA + src, RKey: mrKey,
			AutoLength: true, NumSGE: -1, SGL: sge(readBack, len(msg))},
		rdmatest.Send{ID: 4, Opcode: hw.IBVWRAtomicFetchAdd, Flags: sig, RemoteAddr: bufVA + word, RKey: atomicKey,
			CompareAdd: 2, AutoLength: true, NumSGE: -1, SGL: sge(orig, 8)})
	got := poll(t, a.scq, 4)
	wantOp := []ibrc.WCOpcode{ibrc.WCSend, ibrc.WCRDMAWrite, ibrc.WCRDMARead, ibrc.WCFetchAdd}
	for i, c := range got {
		if c.Status != ibrc.WCSuccess || c.WRID != uint64(i+1) || c.Opcode != wantOp[i] {
			t.Fatalf("send completion %d: %+v", i, c)
		}
	}
	if r := poll(t, a.rcq, 1)[0]; r.Status != ibrc.WCSuccess || r.WRID != 7 || r.ByteLen != uint32(len(msg)) || r.QPNum != qp2 {
		t.Fatalf("receive completion %+v", r)
	}
	for _, c := range []struct {
		what string
		off  int
	}{{"SEND", dst}, {"WRITE", dst + 8192}, {"READ", readBack}} {
		if !bytes.Equal(a.buf.Read(c.off, len(msg)), msg) {
			t.Errorf("%s over loopback: bytes differ", c.what)
		}
	}
	if v := binary.LittleEndian.Uint64(a.buf.Read(word, 8)); v != 42 {
		t.Errorf("FETCH_AND_ADD 2 to 40 left %d", v)
	}
	if v := binary.LittleEndian.Uint64(a.buf.Read(orig, 8)); v != 40 {
		t.Errorf("FETCH_AND_ADD returned %d, want 40", v)
	}
	if st := a.e.Stats(); st.Loopback == 0 {
		t.Errorf("no frame looped back: %+v", st)
	}
	if n := other.e.Stats().RxFrames; n != 0 {
		t.Errorf("the device on the cable's other end received %d RoCE frames of a loopback connection", n)
	}
}
