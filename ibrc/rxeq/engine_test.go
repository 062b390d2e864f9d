package rxeq

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/vdevice/hw"
)

const (
	mrBase = 0x7f0000000000
	mrSize = 1 << 20
)

// rxeNode is one side of TestThroughEngine: an ibrc engine with one RC QP
// whose send, receive and completion queues are rxe queues in "guest
// memory", and librxe's ends of those queues.
type rxeNode struct {
	e          *ibrc.Transport
	mem        *ibrctest.Mem
	mr         *ibrc.MR
	scq, rcq   *ibrc.CQ
	qp         *ibrc.QP
	sq         *SQ
	rq         *RQ
	cq         *CQ
	usq, urq   user
	ucq        user
	cqes       []CQE     // polled by user space
	bad        *WQEError // a malformed send entry, completed in its turn
	sqFailures int
	sendsDone  uint64 // send WRs of the engine whose slots were retired
}

func newRxeNode(t *testing.T, clk clock.Clock, link *ibrctest.Link, side int, mac [6]byte, ip [4]byte) *rxeNode {
	n := &rxeNode{}
	n.e = ibrc.New(ibrc.Config{Port: link.Port(side), Clock: clk, MAC: mac, IPv4: ip})
	link.Attach(side, n.e.HandleFrame)
	pd := n.e.CreatePD()
	n.mem = ibrctest.NewMem(mrBase, mrSize, 4096)
	var err error
	if n.mr, err = pd.RegisterMR(n.mem, mrBase, mrSize, ibrc.AccessLocalWrite|ibrc.AccessRemoteWrite|ibrc.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	n.scq, _ = n.e.CreateCQ(64)
	n.rcq, _ = n.e.CreateCQ(64)
	lim := SendLimits{MaxSGE: 4, MaxInline: 64}
	if n.qp, err = pd.CreateQP(ibrc.QPInit{SendCQ: n.scq, RecvCQ: n.rcq, Cap: ibrc.QPCap{MaxSendWR: 16, MaxRecvWR: 16,
		MaxSendSGE: lim.MaxSGE, MaxRecvSGE: 2, MaxInline: lim.MaxInline}}); err != nil {
		t.Fatal(err)
	}
	sg := Geometry{Base: 0x10000, Size: hw.RxeQueueHeaderSize + 16*512, Slots: 16, Log2ElemSize: 9}
	rg := Geometry{Base: 0x20000, Size: hw.RxeQueueHeaderSize + 16*128, Slots: 16, Log2ElemSize: 7}
	cg := Geometry{Base: 0x30000, Size: hw.RxeQueueHeaderSize + 32*64, Slots: 32, Log2ElemSize: 6}
	n.usq, n.urq, n.ucq = user{newQueueMem(t, sg), sg}, user{newQueueMem(t, rg), rg}, user{newQueueMem(t, cg), cg}
	if n.sq, err = NewSQ(n.usq.m, sg, lim); err != nil {
		t.Fatal(err)
	}
	if n.rq, err = NewRQ(n.urq.m, rg, 2); err != nil {
		t.Fatal(err)
	}
	if n.cq, err = NewCQ(n.ucq.m, cg); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *rxeNode) connect(t *testing.T, peer *rxeNode, peerMAC [6]byte, peerIP [4]byte) {
	for _, m := range []struct {
		a    ibrc.QPAttr
		mask ibrc.AttrMask
	}{
		{ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff, AccessFlags: ibrc.AccessRemoteWrite | ibrc.AccessRemoteRead},
			ibrc.AttrState | ibrc.AttrPKey | ibrc.AttrAccessFlags},
		{ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: ibrc.MTU1024, DestQPN: peer.qp.Num(), MaxDestRdAtomic: 4,
			AV: ibrc.AddressVector{DestMAC: peerMAC, DGID: rocev2.GIDFromIPv4(peerIP)}},
			ibrc.AttrState | ibrc.AttrPathMTU | ibrc.AttrDestQPN | ibrc.AttrRQPSN | ibrc.AttrMaxDestRdAtomic | ibrc.AttrMinRNRTimer | ibrc.AttrAV},
		{ibrc.QPAttr{State: ibrc.StateRTS, Timeout: 8, RetryCnt: 3, RNRRetry: 3, MaxRdAtomic: 4},
			ibrc.AttrState | ibrc.AttrSQPSN | ibrc.AttrTimeout | ibrc.AttrRetryCnt | ibrc.AttrRNRRetry | ibrc.AttrMaxRdAtomic},
	} {
		if err := n.qp.ModifyQP(&m.a, m.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// pump is the device's part the next layer will wire into the NIC: it
// moves posted entries into the engine and the engine's completions into
// the rxe completion queue, retiring the entries they complete.
func (n *rxeNode) pump(t *testing.T) {
	for n.bad == nil {
		w, ok, err := n.sq.Fetch()
		if !ok {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		switch {
		case errors.As(err, &n.bad):
			// Completed below, after the entries before it.
		case err != nil:
			t.Fatal(err)
		default:
			if err := n.qp.PostSend(w.WR); err != nil {
				t.Fatalf("PostSend(%+v): %v", w.WR, err)
			}
		}
	}
	for {
		w, ok, err := n.rq.Fetch()
		if !ok || err != nil {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		if err := n.qp.PostRecv(w.WR); err != nil {
			t.Fatalf("PostRecv(%+v): %v", w.WR, err)
		}
	}
	// Completions into the rxe CQ; receive slots retire one per
	// completion, send slots by the engine's count, which has the
	// unsignaled WRs too.
	var wcs [8]ibrc.WC
	for _, cq := range []*ibrc.CQ{n.scq, n.rcq} {
		for k := cq.Poll(wcs[:]); k > 0; k = cq.Poll(wcs[:]) {
			for _, wc := range wcs[:k] {
				if err := n.cq.Push(CQEFromWC(wc)); err != nil {
					t.Fatal(err)
				}
				if cq == n.rcq {
					if err := n.rq.Retire(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	for done := n.qp.SendsCompleted(); n.sendsDone < done; n.sendsDone++ {
		if err := n.sq.Retire(); err != nil {
			t.Fatal(err)
		}
	}
	if n.bad != nil && n.sq.Outstanding() == 1 {
		if err := n.cq.Push(CQEFromWC(n.bad.WC(n.qp.Num()))); err != nil {
			t.Fatal(err)
		}
		if err := n.sq.Retire(); err != nil {
			t.Fatal(err)
		}
		if err := n.qp.ModifyQP(&ibrc.QPAttr{State: ibrc.StateErr}, ibrc.AttrState); err != nil {
			t.Fatal(err)
		}
		n.bad = nil
		n.sqFailures++
	}
	for e, ok := n.ucq.poll(); ok; e, ok = n.ucq.poll() {
		n.cqes = append(n.cqes, e)
	}
}

// TestThroughEngine: entries as librxe writes them go through rxeq into
// two ibrc engines and back out as rxe completions: SEND with two SGEs,
// inline SEND with immediate data, RDMA WRITE, RDMA WRITE with immediate
// data, RDMA READ, and an atomic the device refuses.
func TestThroughEngine(t *testing.T) {
	clk := clock.NewVirtual(time.Unix(1700000000, 0))
	link := ibrctest.NewLink(ibrctest.LinkConfig{Clock: clk, BitsPerSecond: 10e9, Latency: 2 * time.Microsecond})
	macA, macB := [6]byte{2, 0, 0, 0, 0, 0xa}, [6]byte{2, 0, 0, 0, 0, 0xb}
	ipA, ipB := [4]byte{192, 0, 2, 1}, [4]byte{192, 0, 2, 2}
	a, b := newRxeNode(t, clk, link, 0, macA, ipA), newRxeNode(t, clk, link, 1, macB, ipB)
	a.connect(t, b, macB, ipB)
	b.connect(t, a, macA, ipA)

	src := a.mem.Bytes()
	for i := range 8192 {
		src[i] = byte(i*13 + 1)
	}
	copy(b.mem.Bytes()[0x8000:], "read me back")
	lkA, rkB := a.mr.LKey(), b.mr.RKey()
	for i := range 3 {
		b.urq.post(recvSpec{id: uint64(0x100 + i), sges: []rawSGE{{mrBase + uint64(i)*0x1000, 0x800, b.mr.LKey()},
			{mrBase + uint64(i)*0x1000 + 0x800, 0x800, b.mr.LKey()}}, auto: true}.write)
	}
	sig := uint32(hw.IBVSendSignaled)
	posts := []sendSpec{
		{id: 1, opcode: hw.IBVWRSend, flags: sig, sges: []rawSGE{{mrBase, 2000, lkA}, {mrBase + 4096, 1000, lkA}}, autoLength: true, autoNumS: true},
		{id: 2, opcode: hw.IBVWRSendWithImm, flags: sig | hw.IBVSendInline, imm: 0x11223344, inline: []byte("inline!"), autoLength: true},
		{id: 3, opcode: hw.IBVWRRDMAWrite, raddr: mrBase + 0x10000, rkey: rkB, sges: []rawSGE{{mrBase, 3000, lkA}}, autoLength: true, autoNumS: true},
		{id: 4, opcode: hw.IBVWRRDMAWriteWithImm, flags: sig, imm: 7, raddr: mrBase + 0x20000, rkey: rkB, sges: []rawSGE{{mrBase + 100, 10, lkA}}, autoLength: true, autoNumS: true},
		{id: 5, opcode: hw.IBVWRRDMARead, flags: sig, raddr: mrBase + 0x8000, rkey: rkB, sges: []rawSGE{{mrBase + 0x9000, 12, lkA}}, autoLength: true, autoNumS: true},
		{id: 6, opcode: hw.IBVWRAtomicFetchAdd, flags: sig, raddr: mrBase, rkey: rkB, sges: []rawSGE{{mrBase, 4, lkA}}, autoLength: true, autoNumS: true},
	}
	for _, p := range posts {
		a.usq.post(p.write)
	}
	done := func() bool {
		a.pump(t)
		b.pump(t)
		return len(a.cqes) == len(posts)-1 && len(b.cqes) == 3
	}
	if !done() {
		clk.RunUntil(clk.Elapsed()+time.Second, done)
	}
	if !done() {
		t.Fatalf("completions: A %d of %d, B %d of 3", len(a.cqes), len(posts)-1, len(b.cqes))
	}
	wantA := []struct {
		id uint64
		st ibrc.WCStatus
		op ibrc.WCOpcode
	}{{1, ibrc.WCSuccess, ibrc.WCSend}, {2, ibrc.WCSuccess, ibrc.WCSend}, // 3: an unsignaled WRITE
		{4, ibrc.WCSuccess, ibrc.WCRDMAWrite}, {5, ibrc.WCSuccess, ibrc.WCRDMARead}, {6, ibrc.WCLocLenErr, ibrc.WCFetchAdd}}
	for i, e := range a.cqes {
		if e.WRID != wantA[i].id || e.Status != wantA[i].st || e.Opcode != wantA[i].op || e.QPNum != a.qp.Num() ||
			e.SrcQP != 0 || e.PortNum != 1 || e.Flags&wcGRH != 0 {
			t.Errorf("A completion %d: %+v", i, e)
		}
	}
	wantB := []struct {
		len, imm uint32
		op       ibrc.WCOpcode
	}{{3000, 0, ibrc.WCRecv}, {7, 0x11223344, ibrc.WCRecv}, {10, 7, ibrc.WCRecvRDMAImm}}
	for i, e := range b.cqes {
		w := wantB[i]
		if e.WRID != uint64(0x100+i) || e.Status != ibrc.WCSuccess || e.Opcode != w.op || e.ByteLen != w.len ||
			(w.imm != 0) != (e.Flags&ibrc.WCWithImm != 0) || e.Imm != w.imm || e.Flags&wcGRH == 0 || e.QPNum != b.qp.Num() {
			t.Errorf("B completion %d: %+v, want %+v", i, e, w)
		}
	}
	dst := b.mem.Bytes()
	if !bytes.Equal(dst[:2000], src[:2000]) || !bytes.Equal(dst[2000:3000], src[4096:5096]) {
		t.Error("SEND payload differs")
	}
	if string(dst[0x1000:0x1007]) != "inline!" {
		t.Errorf("inline SEND payload %q", dst[0x1000:0x1007])
	}
	if !bytes.Equal(dst[0x10000:0x10000+3000], src[:3000]) || !bytes.Equal(dst[0x20000:0x2000a], src[100:110]) {
		t.Error("RDMA WRITE payload differs")
	}
	if string(src[0x9000:0x900c]) != "read me back" {
		t.Errorf("RDMA READ brought %q", src[0x9000:0x900c])
	}
	if a.sqFailures != 1 || a.sq.Outstanding() != 0 || b.rq.Outstanding() != 0 ||
		a.usq.cons() != a.usq.prod() || b.urq.cons() != b.urq.prod() {
		t.Fatalf("queues not drained: failures %d, SQ %d/%d, RQ %d/%d", a.sqFailures, a.usq.cons(), a.usq.prod(), b.urq.cons(), b.urq.prod())
	}
}
