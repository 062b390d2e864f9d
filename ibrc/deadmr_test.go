package ibrc_test

import (
	"bytes"
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/ibrc/rocev2"
)

// TestWriteStopsAtDeregisteredMR: a region deregistered between the packets
// of a multi-packet RDMA WRITE takes none of the rest. The responder kept
// the region it looked up at the First packet and wrote the Middle and
// Last packets into it (a device's own fence refused them, but the
// transport itself must stop): a remote access NAK for the packet, the QP
// in ERR, the memory untouched.
func TestWriteStopsAtDeregisteredMR(t *testing.T) {
	v := newVictim(t)
	total := uint32(3 * 1024)
	first := bytes.Repeat([]byte{1}, 1024)
	v.e.HandleFrame(v.frame(rocev2.OpWriteFirst, 1000, first, func(h *rocev2.Headers) { h.RETH.DMALength = total }))
	if !bytes.Equal(v.mem.Bytes()[:1024], first) {
		t.Fatal("the First packet was not placed")
	}
	if err := v.mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	v.responses(t)
	v.e.HandleFrame(v.frame(rocev2.OpWriteMiddle, 1001, bytes.Repeat([]byte{2}, 1024), nil))
	v.e.HandleFrame(v.frame(rocev2.OpWriteLast, 1002, bytes.Repeat([]byte{3}, 1024), nil))
	if got := v.mem.Bytes()[1024:3072]; !bytes.Equal(got, make([]byte, 2048)) {
		t.Fatal("packets after the deregistration were written into the region")
	}
	rs := v.responses(t)
	if len(rs) == 0 || rs[0].AETH.Syndrome != rocev2.NAKSyndrome(rocev2.NAKRemoteAccess) || rs[0].BTH.PSN != 1001 {
		t.Fatalf("answers %+v: want a remote access NAK for PSN 1001", rs)
	}
	if st := v.qp.Query().State; st != ibrc.StateErr {
		t.Fatalf("QP in %v, want ERR", st)
	}
}

// TestPageRequestGoesToFaultingRegion: a SEND's packet lands across two
// receive SGEs in regions of different memories (address spaces); the
// second faults. Its page request names the second region's memory, where
// the page is missing, not the first one's, where the packet starts.
func TestPageRequestGoesToFaultingRegion(t *testing.T) {
	var reqs []ibrc.PageRequest
	v := &victim{dec: rocev2.NewDecoder(), path: rocev2.Path{SrcMAC: macA, DstMAC: macB, SrcIP: ipA, DstIP: ipB, SrcPort: 0xc001}}
	v.e = ibrc.New(ibrc.Config{Port: ibrc.PortFunc(func(f []byte) error { v.out = append(v.out, f); return nil }),
		MAC: macB, IPv4: ipB, Pager: ibrc.PageRequesterFunc(func(r ibrc.PageRequest, done func(bool)) { reqs = append(reqs, r) })})
	pd := v.e.CreatePD()
	const otherBase = 0x7e00_0000_0000
	memA, memB := ibrctest.NewMem(memBase, 1<<16, 4096), ibrctest.NewMem(otherBase, 1<<16, 4096)
	mrA, _ := pd.RegisterMR(memA, memBase, 1<<16, ibrc.AccessLocalWrite)
	v.mr = mrA
	mrB, _ := pd.RegisterMR(memB, otherBase, 1<<16, ibrc.AccessLocalWrite)
	memB.Evict(otherBase, 4096)
	v.cq, _ = v.e.CreateCQ(64)
	v.qp, _ = pd.CreateQP(ibrc.QPInit{SendCQ: v.cq, RecvCQ: v.cq, Cap: ibrc.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxRecvSGE: 2}})
	for _, s := range []struct {
		a ibrc.QPAttr
		m ibrc.AttrMask
	}{
		{ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff}, ibrc.AttrState | ibrc.AttrPKey | ibrc.AttrAccessFlags},
		{ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: ibrc.MTU1024, DestQPN: peerQPN, RQPSN: 1000, MaxDestRdAtomic: 4, MinRNRTimer: 7,
			AV: ibrc.AddressVector{DestMAC: macA, DGID: rocev2.GIDFromIPv4(ipA)}},
			ibrc.AttrState | ibrc.AttrPathMTU | ibrc.AttrDestQPN | ibrc.AttrRQPSN | ibrc.AttrMaxDestRdAtomic | ibrc.AttrMinRNRTimer | ibrc.AttrAV},
	} {
		if err := v.qp.ModifyQP(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: []ibrc.SGE{
		{Addr: memBase, Length: 100, LKey: mrA.LKey()}, {Addr: otherBase, Length: 4096, LKey: mrB.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	v.e.HandleFrame(v.frame(rocev2.OpSendOnly, 1000, bytes.Repeat([]byte{7}, 512), nil))
	if len(reqs) != 1 {
		t.Fatalf("%d page requests, want 1", len(reqs))
	}
	if reqs[0].Mem != memB || reqs[0].VA != otherBase {
		t.Fatalf("page request for %#x in %p, want %#x in the second region's memory %p (the first's is %p)",
			reqs[0].VA, reqs[0].Mem, uint64(otherBase), memB, memA)
	}
}
