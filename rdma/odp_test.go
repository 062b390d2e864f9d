package rdma_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/pri/pritest"
	"github.com/npfnic/npfnic/rdma"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// The on-demand paging tests (interface 2.5): two engines back to back,
// each faulting through a page request interface of its own that a
// pritest driver model answers, mapping the page into the PASID's page
// tables first. A node's buffer is mapped whole; evict takes a page out.

const (
	startPSN = 100 // both QPs' first PSN (node.connect)
	minRNR   = 1   // the QPs' min_rnr_timer (node.connect)
)

// checkGroup checks a page request group: one page, the region's PASID,
// the access and the QP that faulted.
func checkGroup(t *testing.T, g pritest.Group, kind uint16, va uint64, write bool, qpn uint32) {
	t.Helper()
	if len(g) != 1 {
		t.Fatalf("group of %d pages, want 1: %+v", len(g), g)
	}
	e := g[0]
	if e.Kind != kind || e.PASID != pasid || e.Flags&hw.PRQPASIDValid == 0 || e.Addr != va ||
		(e.Flags&hw.PRQWrite != 0) != write || e.Flags&hw.PRQRead == 0 || e.Queue != uint16(qpn) || e.Desc != qpn {
		t.Fatalf("page request %+v; want kind %d, PASID %d valid, VA %#x, write %v, queue/desc QPN %#x", e, kind, pasid, va, write, qpn)
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// TestODPResponderFaults: a SEND into a receive buffer, or an RDMA WRITE
// into a target, whose page is missing: the responder answers with an RNR
// NAK carrying its min_rnr_timer for the faulting packet's PSN (the first,
// or one in the middle of the message), asks for the page (RC_RECV, W, the
// region's PASID, the page's VA, the QPN), and once the driver answered,
// accepts the sender's retransmission: the data lands intact, with one
// page request.
func TestODPResponderFaults(t *testing.T) {
	const dst = 0x20000
	for _, tc := range []struct {
		name    string
		op      uint32
		size    int
		missing uint64 // offset of the missing page from dst
		pkt     uint32 // index of the packet that faults (MTU 1024)
	}{
		{"send", hw.IBVWRSend, 3000, 0, 0},
		{"send mid-message", hw.IBVWRSend, 8000, 4096, 4},
		{"write", hw.IBVWRRDMAWrite, 3000, 0, 0},
		{"write mid-message", hw.IBVWRRDMAWrite, 8000, 4096, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, tap := odpPair(t, 0)
			data := pattern(tc.size, 3)
			a.buf.Write(0, data)
			va := b.evict(dst + tc.missing)
			if tc.op == hw.IBVWRSend {
				b.postRecv(t, b.rq, rdmatest.Recv{ID: 7, SGL: []rdmatest.SGE{{Addr: bufVA + dst, Length: 8192, LKey: mrKey}}})
			}
			a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: tc.op, Flags: sig, AutoLength: true, NumSGE: -1,
				RemoteAddr: bufVA + dst, RKey: mrKey, SGL: []rdmatest.SGE{{Addr: bufVA, Length: uint32(tc.size), LKey: mrKey}}})
			g := b.nextGroup(t)
			checkGroup(t, g, hw.FaultKindRCRecv, va, true, b.qpn)
			waitFor(t, "an RNR NAK on the wire", func() bool { return len(tap.rnrNaks()) > 0 })
			for _, n := range tap.rnrNaks() {
				if n.syn.Value() != minRNR || n.psn != startPSN+tc.pkt {
					t.Fatalf("RNR NAK timer %d PSN %d, want %d and %d", n.syn.Value(), n.psn, minRNR, startPSN+tc.pkt)
				}
			}
			if c, ok := a.scq.Poll(); ok {
				t.Fatalf("completion before the page response: %+v", c)
			}
			b.answer(t, g, hw.PRSPSuccess)
			if c := poll(t, a.scq, 1)[0]; c.WRID != 1 || c.Status != ibrc.WCSuccess {
				t.Fatalf("sender: %+v", c)
			}
			if tc.op == hw.IBVWRSend {
				if c := poll(t, b.rcq, 1)[0]; c.WRID != 7 || c.Status != ibrc.WCSuccess || c.ByteLen != uint32(tc.size) {
					t.Fatalf("receiver: %+v", c)
				}
			}
			if !bytes.Equal(b.buf.Read(dst, tc.size), data) {
				t.Fatal("data differs")
			}
			st := b.e.Stats().RC
			if st.ResponderFaults == 0 || st.RNRNakFault == 0 || st.PageRequests != 1 || st.PageRequestErrors != 0 || st.FaultDrops != 0 {
				t.Fatalf("responder: %d faults, %d RNR NAKs, %d page requests (%d failed), %d drops",
					st.ResponderFaults, st.RNRNakFault, st.PageRequests, st.PageRequestErrors, st.FaultDrops)
			}
			if n := len(b.groupsSeen()); n != 1 {
				t.Fatalf("%d page requests reached the driver", n)
			}
			if a.e.Stats().RC.RNRNakReceived == 0 {
				t.Fatal("the sender counted no RNR NAK")
			}
		})
	}
}

// TestODPFaultTimeline: the device's trace of a receive fault in the
// middle of a SEND reads as one RC fault timeline (trace.RCTimelines):
// the fault at the packet's PSN, the RNR NAK for it, the page request, the
// response, the retransmission of that PSN, and the responder accepting
// it, in that order; the page request group's detection stamp is the
// fault's.
func TestODPFaultTimeline(t *testing.T) {
	if !trace.Compiled {
		t.Skip("built with npfnic_notrace")
	}
	const dst, size = 0x20000, 8000
	tr, _ := trace.New(1 << 14)
	a, b, tap := odpPairTraced(t, 0, tr)
	data := pattern(size, 5)
	a.buf.Write(0, data)
	b.evict(dst + 4096)
	b.postRecv(t, b.rq, rdmatest.Recv{ID: 7, SGL: []rdmatest.SGE{{Addr: bufVA + dst, Length: 8192, LKey: mrKey}}})
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: size, LKey: mrKey}}})
	g := b.nextGroup(t)
	// The driver maps the page before it responds, and the device walks
	// the tables itself: a retransmission between the two is placed
	// before the response, a valid order, but not the one this timeline
	// checks. The sender waits until the device took the response.
	tap.gate.Lock()
	b.answer(t, g, hw.PRSPSuccess)
	waitFor(t, "the page response in the trace", func() bool {
		ev, _ := tr.Snapshot()
		return slices.ContainsFunc(ev, func(e trace.Event) bool { return e.Kind == trace.PageResponse })
	})
	tap.gate.Unlock()
	if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCSuccess {
		t.Fatalf("sender: %+v", c)
	}
	if !bytes.Equal(b.buf.Read(dst, size), data) {
		t.Fatal("data differs")
	}
	ev, _ := tr.Snapshot()
	tls := trace.RCTimelines(ev, hw.PRQVectorDefault)
	if len(tls) != 1 {
		t.Fatalf("%d RC fault timelines, want 1: %+v", len(tls), tls)
	}
	tl := tls[0]
	if tl.QPN != b.qpn || tl.PSN != startPSN+4 || !tl.Responder || tl.Refaulted || tl.NAKs < 1 {
		t.Fatalf("timeline %+v: want QPN %#x, PSN %d, responder, at least one NAK", tl, b.qpn, startPSN+4)
	}
	// No interrupt in this model: every other stage, in order.
	last := int64(0)
	for i, s := range tl.Stages() {
		if trace.RCStageNames[i] == "interrupt raised" {
			continue
		}
		if s.Kind == 0 || s.TS < last {
			t.Fatalf("%s: %+v (after %d)", trace.RCStageNames[i], s, last)
		}
		last = s.TS
	}
	// The group's detection stamp is taken with the fault, just before it
	// is traced. Its record is the pager's waiter's (pri.Group.Finish),
	// written after the response on a goroutine of its own, which the
	// retransmission does not wait for: the page was mapped before the
	// response, so the SEND may complete first.
	waitFor(t, "the page request group's record", func() bool { return len(b.odp.pri.Recorder().Snapshot()) > 0 })
	recs := b.odp.pri.Recorder().Snapshot()
	if len(recs) != 1 {
		t.Fatalf("%d pri records, want 1", len(recs))
	}
	if d := recs[0].Stamps[pri.StampDetected]; d == 0 || d > tl.Fault.TS || tl.Fault.TS-d > int64(time.Millisecond) {
		t.Fatalf("detected at %d, the fault traced at %d", d, tl.Fault.TS)
	}
}

// TestODPRequesterFaults: a send whose payload page is missing stalls its
// send queue (nothing past the fault reaches the peer) until the response
// to its page request (RC_SEND, R); an RDMA READ response whose target
// page is missing is dropped, the page requested (RC_SEND, W), and the
// rest of the READ requested again. The data arrives intact.
func TestODPRequesterFaults(t *testing.T) {
	const (
		src = 0x10000 // a's payload, or b's READ source
		dst = 0x30000 // b's receive buffer or WRITE target, or a's READ target
	)
	for _, tc := range []struct {
		name    string
		op      uint32
		missing uint64 // offset of a's missing page
		write   bool
	}{
		{"send first page", hw.IBVWRSend, src, false},
		{"send mid-message", hw.IBVWRSend, src + 4096, false},
		{"write payload", hw.IBVWRRDMAWrite, src + 4096, false},
		{"read target", hw.IBVWRRDMARead, dst + 4096, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _ := odpPair(t, 0)
			const size = 8000
			data := pattern(size, 5)
			from, to := a, b
			if tc.op == hw.IBVWRRDMARead {
				from, to = b, a
			}
			from.buf.Write(src, data)
			va := a.evict(tc.missing)
			if tc.op == hw.IBVWRSend {
				b.postRecv(t, b.rq, rdmatest.Recv{ID: 7, SGL: []rdmatest.SGE{{Addr: bufVA + dst, Length: 8192, LKey: mrKey}}})
			}
			w := rdmatest.Send{ID: 1, Opcode: tc.op, Flags: sig, AutoLength: true, NumSGE: -1, RKey: mrKey,
				RemoteAddr: bufVA + dst, SGL: []rdmatest.SGE{{Addr: bufVA + src, Length: size, LKey: mrKey}}}
			if tc.op == hw.IBVWRRDMARead {
				w.RemoteAddr, w.SGL[0].Addr = bufVA+src, bufVA+dst
			}
			a.post(t, a.sq, a.qpn, w)
			g := a.nextGroup(t)
			checkGroup(t, g, hw.FaultKindRCSend, va, tc.write, a.qpn)
			if tc.op != hw.IBVWRRDMARead {
				time.Sleep(10 * time.Millisecond)
				if st := b.e.Stats().RC; st.MessagesIn != 0 {
					t.Fatalf("the peer executed %d messages while the send queue was stalled", st.MessagesIn)
				}
			}
			if c, ok := a.scq.Poll(); ok {
				t.Fatalf("completion before the page response: %+v", c)
			}
			a.answer(t, g, hw.PRSPSuccess)
			if c := poll(t, a.scq, 1)[0]; c.WRID != 1 || c.Status != ibrc.WCSuccess {
				t.Fatalf("requester: %+v", c)
			}
			if tc.op == hw.IBVWRSend {
				if c := poll(t, b.rcq, 1)[0]; c.Status != ibrc.WCSuccess || c.ByteLen != size {
					t.Fatalf("receiver: %+v", c)
				}
			}
			if !bytes.Equal(to.buf.Read(dst, size), data) {
				t.Fatal("data differs")
			}
			st := a.e.Stats().RC
			if st.RequesterFaults == 0 || st.PageRequests != 1 || st.PageRequestErrors != 0 {
				t.Fatalf("requester: %d faults, %d page requests (%d failed)", st.RequesterFaults, st.PageRequests, st.PageRequestErrors)
			}
			if tc.op == hw.IBVWRRDMARead && st.ReadRetries == 0 {
				t.Fatal("the READ was not requested again")
			}
			if b.e.Stats().RC.PageRequests != 0 {
				t.Fatal("the peer raised page requests")
			}
		})
	}
}

// TestODPFailures: a page request answered with Invalid Request, or a
// fault while PRI is disabled (no page request at all), fails the access
// with the errors of an access outside the region: IBV_WC_LOC_ACCESS_ERR
// for the requester's own work request; a remote access error NAK from the
// responder (IBV_WC_REM_ACCESS_ERR at the sender; a SEND's receive entry
// completes with IBV_WC_LOC_ACCESS_ERR). The QP that failed reports
// QP_FATAL and page_request_errors counts the failure.
func TestODPFailures(t *testing.T) {
	const (
		src = 0x10000
		dst = 0x30000
	)
	cases := []struct {
		name      string
		op        uint32
		faulting  int    // 0: a (the requester), 1: b (the responder)
		missing   uint64 // offset of the missing page on the faulting node
		want      ibrc.WCStatus
		recv      bool // b's receive entry completes with LOC_ACCESS_ERR
		fatalInfo ibrc.WCStatus
	}{
		{name: "requester send payload", op: hw.IBVWRSend, missing: src, want: ibrc.WCLocAccessErr, fatalInfo: ibrc.WCLocAccessErr},
		{name: "requester read target", op: hw.IBVWRRDMARead, missing: dst, want: ibrc.WCLocAccessErr, fatalInfo: ibrc.WCLocAccessErr},
		{name: "responder send", op: hw.IBVWRSend, faulting: 1, missing: dst, want: ibrc.WCRemAccessErr, recv: true, fatalInfo: ibrc.WCLocAccessErr},
		{name: "responder write", op: hw.IBVWRRDMAWrite, faulting: 1, missing: dst + 4096, want: ibrc.WCRemAccessErr},
		{name: "responder read source", op: hw.IBVWRRDMARead, faulting: 1, missing: src + 4096, want: ibrc.WCRemAccessErr},
	}
	for _, mode := range []string{"invalid request", "pri disabled"} {
		for _, tc := range cases {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				a, b, _ := odpPair(t, 0)
				n := []*node{a, b}[tc.faulting]
				va := n.evict(tc.missing)
				if mode == "pri disabled" {
					n.setPRI(false)
				}
				b.postRecv(t, b.rq, rdmatest.Recv{ID: 7, SGL: []rdmatest.SGE{{Addr: bufVA + dst, Length: 8192, LKey: mrKey}}})
				w := rdmatest.Send{ID: 1, Opcode: tc.op, Flags: sig, AutoLength: true, NumSGE: -1, RKey: mrKey,
					RemoteAddr: bufVA + dst, SGL: []rdmatest.SGE{{Addr: bufVA + src, Length: 8000, LKey: mrKey}}}
				if tc.op == hw.IBVWRRDMARead {
					w.RemoteAddr, w.SGL[0].Addr = bufVA+src, bufVA+dst
				}
				a.post(t, a.sq, a.qpn, w)
				if mode == "invalid request" {
					g := n.nextGroup(t)
					kind := uint16(hw.FaultKindRCSend)
					write := tc.op == hw.IBVWRRDMARead
					if tc.faulting == 1 {
						kind, write = hw.FaultKindRCRecv, tc.op != hw.IBVWRRDMARead
					}
					checkGroup(t, g, kind, va, write, n.qpn)
					n.answer(t, g, hw.PRSPInvalidRequest)
				}
				if c := poll(t, a.scq, 1)[0]; c.WRID != 1 || c.Status != tc.want {
					t.Fatalf("requester completion %+v, want status %v", c, tc.want)
				}
				if tc.recv {
					if c := poll(t, b.rcq, 1)[0]; c.WRID != 7 || c.Status != ibrc.WCLocAccessErr {
						t.Fatalf("receive completion %+v, want LOC_ACCESS_ERR", c)
					}
				}
				if tc.fatalInfo != 0 {
					if ev := n.waitEvent(t, hw.RDMAEventQPFatal, n.qpn); ev.Info != uint32(tc.fatalInfo) {
						t.Fatalf("QP_FATAL info %d, want %d", ev.Info, tc.fatalInfo)
					}
				}
				if tc.want == ibrc.WCRemAccessErr {
					a.waitEvent(t, hw.RDMAEventQPAccessErr, a.qpn)
				}
				if st := n.e.Stats().RC; st.PageRequestErrors != 1 {
					t.Fatalf("page_request_errors %d, want 1", st.PageRequestErrors)
				}
				if mode == "pri disabled" {
					n.noGroup(t)
				}
			})
		}
	}
}

// TestODPDropPolicy: under RDMA_RECV_FAULT = DROP a receive fault sends
// no RNR NAK; the request is dropped (fault_drops), the page requested,
// and the sender's retransmission after its ACK timeout succeeds. Set back
// to RNR at run time, the next fault is RNR NAKed.
func TestODPDropPolicy(t *testing.T) {
	a, b, tap := odpPair(t, 0)
	b.serve(t)
	hw.Offsets(b.e).RegWrite(hw.RegRDMARecvFault, hw.RDMARecvFaultDrop)
	if v, _ := hw.Offsets(b.e).RegRead(hw.RegRDMARecvFault); v != hw.RDMARecvFaultDrop {
		t.Fatalf("RDMA_RECV_FAULT reads %d", v)
	}
	data := pattern(3000, 9)
	a.buf.Write(0, data)
	for i, policy := range []uint32{hw.RDMARecvFaultDrop, hw.RDMARecvFaultRNR} {
		hw.Offsets(b.e).RegWrite(hw.RegRDMARecvFault, policy)
		before := b.e.Stats().RC
		naks := len(tap.rnrNaks())
		dst := uint64(0x20000 + i*0x2000)
		b.evict(dst)
		b.postRecv(t, b.rq, rdmatest.Recv{ID: uint64(i), SGL: []rdmatest.SGE{{Addr: bufVA + dst, Length: 4096, LKey: mrKey}}})
		a.post(t, a.sq, a.qpn, rdmatest.Send{ID: uint64(i), Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 3000, LKey: mrKey}}})
		if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCSuccess {
			t.Fatalf("sender: %+v", c)
		}
		if c := poll(t, b.rcq, 1)[0]; c.Status != ibrc.WCSuccess || c.ByteLen != 3000 {
			t.Fatalf("receiver: %+v", c)
		}
		if !bytes.Equal(b.buf.Read(int(dst), 3000), data) {
			t.Fatal("data differs")
		}
		st := b.e.Stats().RC
		drops, rnrs, newNaks := st.FaultDrops-before.FaultDrops, st.RNRNakFault-before.RNRNakFault, len(tap.rnrNaks())-naks
		if policy == hw.RDMARecvFaultDrop && (drops == 0 || rnrs != 0 || newNaks != 0) ||
			policy == hw.RDMARecvFaultRNR && (drops != 0 || rnrs == 0 || newNaks == 0) {
			t.Fatalf("policy %d: %d drops, %d RNR NAKs counted, %d on the wire", policy, drops, rnrs, newNaks)
		}
		if policy == hw.RDMARecvFaultDrop && a.e.Stats().RC.Timeouts == 0 {
			t.Fatal("the dropped SEND was recovered without an ACK timeout")
		}
	}
}

// TestRecvFaultRegister: RDMA_RECV_FAULT keeps bits 1:0 (the rest reads
// 0, and 3, no policy, reads RNR), survives RDMA_CTRL = RESET (the new
// transport takes it), and DEVICE_RESET returns it to RNR.
func TestRecvFaultRegister(t *testing.T) {
	a, _ := pair(t, 3)
	if v, _ := hw.Offsets(a.e).RegRead(hw.RegRDMARecvFault); v != hw.RDMARecvFaultRNR {
		t.Fatalf("reset value %d", v)
	}
	for _, tc := range []struct {
		write  uint32
		read   uint32
		policy ibrc.FaultPolicy
	}{
		{0xffff_fffe, hw.RDMARecvFaultHold, ibrc.FaultHold},
		{0xffff_ffff, hw.RDMARecvFaultRNR, ibrc.FaultRNRNak},
		{0x8000_0001, hw.RDMARecvFaultDrop, ibrc.FaultDrop},
	} {
		hw.Offsets(a.e).RegWrite(hw.RegRDMARecvFault, tc.write)
		if v, _ := hw.Offsets(a.e).RegRead(hw.RegRDMARecvFault); v != tc.read {
			t.Fatalf("after writing %#x: %#x, want %#x", tc.write, v, tc.read)
		}
		if p := rdma.RCRecvFaultPolicy(a.e); p != tc.policy {
			t.Fatalf("after writing %#x: transport policy %v, want %v", tc.write, p, tc.policy)
		}
	}
	if err := a.d.Reset(); err != nil {
		t.Fatal(err)
	}
	if v, _ := hw.Offsets(a.e).RegRead(hw.RegRDMARecvFault); v != hw.RDMARecvFaultDrop {
		t.Fatalf("after RDMA_CTRL RESET: %d", v)
	}
	if p := rdma.RCRecvFaultPolicy(a.e); p != ibrc.FaultDrop {
		t.Fatalf("transport policy after RESET %v", p)
	}
	a.e.Reset()
	waitFor(t, "the engine to quiesce", func() bool { return !a.e.Busy() })
	if v, _ := hw.Offsets(a.e).RegRead(hw.RegRDMARecvFault); v != hw.RDMARecvFaultRNR {
		t.Fatalf("after DEVICE_RESET: %d", v)
	}
	if p := rdma.RCRecvFaultPolicy(a.e); p != ibrc.FaultRNRNak {
		t.Fatalf("transport policy after DEVICE_RESET %v", p)
	}
}

// TestODPBackPressure: with room for one outstanding page request, a
// second fault of the node (its responder's while its requester waits)
// waits in the device until the first is answered, is never dropped, and
// both transfers complete.
func TestODPBackPressure(t *testing.T) {
	a, b, _ := odpPair(t, 1)
	const (
		src = 0x10000
		dst = 0x30000
	)
	a.buf.Write(src, pattern(3000, 1))
	b.buf.Write(src, pattern(3000, 2))
	vaRecv, vaSend := b.evict(dst), b.evict(src)
	a.postRecv(t, a.rq, rdmatest.Recv{ID: 8, SGL: []rdmatest.SGE{{Addr: bufVA + dst, Length: 4096, LKey: mrKey}}})
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRRDMAWrite, Flags: sig, AutoLength: true, NumSGE: -1,
		RemoteAddr: bufVA + dst, RKey: mrKey, SGL: []rdmatest.SGE{{Addr: bufVA + src, Length: 3000, LKey: mrKey}}})
	b.post(t, b.sq, b.qpn, rdmatest.Send{ID: 2, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA + src, Length: 3000, LKey: mrKey}}})
	waitFor(t, "both faults", func() bool {
		st := b.e.Stats().RC
		return st.ResponderFaults > 0 && st.RequesterFaults > 0
	})
	g1 := b.nextGroup(t)
	b.noGroup(t) // the other waits for a credit
	b.answer(t, g1, hw.PRSPSuccess)
	g2 := b.nextGroup(t)
	b.answer(t, g2, hw.PRSPSuccess)
	got := map[uint64]uint16{g1[0].Addr: g1[0].Kind, g2[0].Addr: g2[0].Kind}
	if got[vaRecv] != hw.FaultKindRCRecv || got[vaSend] != hw.FaultKindRCSend {
		t.Fatalf("page requests %+v %+v", g1, g2)
	}
	if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCSuccess {
		t.Fatalf("WRITE: %+v", c)
	}
	if c := poll(t, b.scq, 1)[0]; c.Status != ibrc.WCSuccess {
		t.Fatalf("SEND: %+v", c)
	}
	if c := poll(t, a.rcq, 1)[0]; c.Status != ibrc.WCSuccess {
		t.Fatalf("receive: %+v", c)
	}
	if !bytes.Equal(b.buf.Read(dst, 3000), pattern(3000, 1)) || !bytes.Equal(a.buf.Read(dst, 3000), pattern(3000, 2)) {
		t.Fatal("data differs")
	}
}

// TestODPQuiesce: DEREG_MR, DESTROY_QP, RDMA_CTRL RESET and a PRI reset
// while the node has page requests outstanding for both its responder (a
// WRITE into it) and its requester (a SEND from it): nothing panics, no
// waiter is left behind once the requests are answered or abandoned (and
// at once after RESET, which does not wait for answers), and no DMA
// reaches the region's pages afterwards, even when the driver answers
// Success (mapping the pages) after the command completed.
func TestODPQuiesce(t *testing.T) {
	const (
		src = 0x10000
		dst = 0x30000
	)
	for _, tc := range []struct {
		name   string
		action func(t *testing.T, b *node)
		answer bool // the driver answers the requests afterwards
		// waitersGo: the waiters end without an answer.
		waitersGo bool
	}{
		{"dereg mr", func(t *testing.T, b *node) { b.must(t, rdmatest.NewCmd(hw.RDMACmdDeregMR, mrKey)) }, true, false},
		{"destroy qp", func(t *testing.T, b *node) { b.must(t, rdmatest.NewCmd(hw.RDMACmdDestroyQP, b.qpn)) }, true, false},
		{"rdma reset", func(t *testing.T, b *node) {
			if err := b.d.Reset(); err != nil {
				t.Fatal(err)
			}
		}, true, true},
		{"pri reset", func(t *testing.T, b *node) { b.odp.pri.Reset() }, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _ := odpPair(t, 0)
			a.buf.Write(src, pattern(3000, 1))
			b.evict(dst)
			b.evict(src)
			a.postRecv(t, a.rq, rdmatest.Recv{ID: 8, SGL: []rdmatest.SGE{{Addr: bufVA + dst, Length: 4096, LKey: mrKey}}})
			a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRRDMAWrite, Flags: sig, AutoLength: true, NumSGE: -1,
				RemoteAddr: bufVA + dst, RKey: mrKey, SGL: []rdmatest.SGE{{Addr: bufVA + src, Length: 3000, LKey: mrKey}}})
			b.post(t, b.sq, b.qpn, rdmatest.Send{ID: 2, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
				SGL: []rdmatest.SGE{{Addr: bufVA + src, Length: 3000, LKey: mrKey}}})
			gs := []pritest.Group{b.nextGroup(t), b.nextGroup(t)}
			// A group is in the queue just before its waiter starts.
			waitFor(t, "a waiter for each of the 2 groups", func() bool { return rdma.PagerTasks(b.e) == 2 })
			tc.action(t, b)
			// The region's pages are the driver's again.
			for _, p := range b.buf.Pages() {
				b.g.Mem.Fence(p, 4096)
			}
			if tc.waitersGo {
				waitFor(t, "the waiters to end", func() bool { return rdma.PagerTasks(b.e) == 0 })
			}
			if tc.answer {
				for _, g := range gs {
					b.answer(t, g, hw.PRSPSuccess)
				}
			}
			waitFor(t, "the waiters to end", func() bool { return rdma.PagerTasks(b.e) == 0 })
			// The peer's retransmissions come and go meanwhile.
			time.Sleep(20 * time.Millisecond)
			if late := b.g.Mem.LateWrites(); late != 0 {
				t.Fatalf("%d late writes: %v", late, b.g.Mem.LateLog())
			}
			if tc.name == "pri reset" {
				// Abandoned requests fail their accesses: the SEND with
				// LOC_ACCESS_ERR, or flushed if the responder's failure
				// (a remote access NAK) moved the QP to ERR first. (The
				// peer's WRITE fails with REM_ACCESS_ERR in that order, or
				// else by its retries, as a QP in ERR answers nothing.)
				if c := poll(t, b.scq, 1)[0]; c.Status != ibrc.WCLocAccessErr && c.Status != ibrc.WCWRFlushErr {
					t.Fatalf("SEND from the abandoned page: %+v", c)
				}
				if st := b.e.Stats().RC; st.PageRequestErrors != 2 {
					t.Fatalf("%d page requests failed, want 2", st.PageRequestErrors)
				}
			}
		})
	}
}

// TestMsgAlarmRegister: RDMA_MSG_ALARM = 3 posts one MSG_ALARM event once
// the responder executed three more requests, not before; the register
// reads the requests still to go, and RDMA_CTRL RESET cancels it.
func TestMsgAlarmRegister(t *testing.T) {
	a, b := pair(t, 3)
	left := func() uint32 {
		v, _ := hw.Offsets(b.e).RegRead(hw.RegRDMAMsgAlarm)
		return v
	}
	hw.Offsets(b.e).RegWrite(hw.RegRDMAMsgAlarm, 3)
	send := func(id uint64) {
		t.Helper()
		b.postRecv(t, b.rq, rdmatest.Recv{ID: id, SGL: []rdmatest.SGE{{Addr: bufVA + 0x10000, Length: 4096, LKey: mrKey}}})
		a.post(t, a.sq, a.qpn, rdmatest.Send{ID: id, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 100, LKey: mrKey}}})
		if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCSuccess {
			t.Fatalf("send %d: %+v", id, c)
		}
		poll(t, b.rcq, 1)
	}
	send(1)
	send(2)
	if v := left(); v != 1 {
		t.Fatalf("after two requests the alarm reads %d, want 1", v)
	}
	for _, ev := range b.d.Events() {
		if ev.Type == hw.RDMAEventMsgAlarm {
			t.Fatalf("MSG_ALARM after two of three requests: %+v", ev)
		}
	}
	send(3)
	b.waitEvent(t, hw.RDMAEventMsgAlarm, 0)
	if v := left(); v != 0 {
		t.Fatalf("after the alarm it reads %d", v)
	}
	hw.Offsets(b.e).RegWrite(hw.RegRDMAMsgAlarm, 5)
	if err := b.d.Reset(); err != nil {
		t.Fatal(err)
	}
	if v := left(); v != 0 {
		t.Fatalf("RDMA_CTRL RESET left the alarm at %d", v)
	}
}

// TestODPPrefault: RDMA_PREFAULT pages per fault. A 64 KiB SEND into a
// cold receive buffer, or a 64 KiB RDMA WRITE into a cold target, of 16
// missing pages: with RDMA_PREFAULT 1 each page is a fault and a page
// request of its own; with 16, the first fault asks for all 16 pages the
// request touches in one group, and nothing faults again; the PRI
// allocation bounds a group (8 credits: two groups of 8). The data lands
// intact either way. The register clamps what is written to
// 1..RDMA_MAX_PREFAULT and keeps its value across RDMA_CTRL RESET.
func TestODPPrefault(t *testing.T) {
	const dst, size = 0x40000, 65536
	for _, tc := range []struct {
		name     string
		op       uint32
		prefault uint32
		alloc    uint32
		groups   []int // pages of each group the driver sees, in order
	}{
		{"send, one page a fault", hw.IBVWRSend, 1, 0, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{"send, the whole request", hw.IBVWRSend, 16, 0, []int{16}},
		{"write, the whole request", hw.IBVWRRDMAWrite, 64, 0, []int{16}},
		{"write, within the PRI allocation", hw.IBVWRRDMAWrite, 16, 8, []int{8, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _ := odpPair(t, tc.alloc)
			hw.Offsets(b.e).RegWrite(hw.RegRDMAPrefault, tc.prefault)
			data := pattern(size, 9)
			a.buf.Write(0, data)
			for off := uint64(0); off < size; off += 4096 {
				b.evict(dst + off)
			}
			b.serve(t)
			if tc.op == hw.IBVWRSend {
				b.postRecv(t, b.rq, rdmatest.Recv{ID: 7, SGL: []rdmatest.SGE{{Addr: bufVA + dst, Length: size, LKey: mrKey}}})
			}
			a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: tc.op, Flags: sig, AutoLength: true, NumSGE: -1,
				RemoteAddr: bufVA + dst, RKey: mrKey, SGL: []rdmatest.SGE{{Addr: bufVA, Length: size, LKey: mrKey}}})
			if c := poll(t, a.scq, 1)[0]; c.WRID != 1 || c.Status != ibrc.WCSuccess {
				t.Fatalf("sender: %+v", c)
			}
			if !bytes.Equal(b.buf.Read(dst, size), data) {
				t.Fatal("data differs")
			}
			var got []int
			for _, g := range b.groupsSeen() {
				got = append(got, len(g))
			}
			if !slices.Equal(got, tc.groups) {
				t.Fatalf("page request groups of %v pages, want %v", got, tc.groups)
			}
			if st := b.e.Stats().RC; st.PageRequests != uint64(len(tc.groups)) || st.PageRequestErrors != 0 {
				t.Fatalf("%d page requests (%d failed), want %d", st.PageRequests, st.PageRequestErrors, len(tc.groups))
			}
		})
	}
	t.Run("register", func(t *testing.T) {
		_, b, _ := odpPair(t, 0)
		regs := hw.Offsets(b.e)
		for _, c := range []struct{ write, read uint32 }{{0, 1}, {7, 7}, {hw.RDMAMaxPrefault + 1, hw.RDMAMaxPrefault}} {
			regs.RegWrite(hw.RegRDMAPrefault, c.write)
			if v, _ := regs.RegRead(hw.RegRDMAPrefault); v != c.read {
				t.Errorf("RDMA_PREFAULT written %d reads %d, want %d", c.write, v, c.read)
			}
		}
		if err := b.d.Reset(); err != nil {
			t.Fatal(err)
		}
		if v, _ := regs.RegRead(hw.RegRDMAPrefault); v != hw.RDMAMaxPrefault {
			t.Errorf("RDMA_PREFAULT after RDMA_CTRL RESET reads %d, want %d", v, hw.RDMAMaxPrefault)
		}
	})
}

// TestODPImplicit: a region registered with FLAG_IMPLICIT (interface 2.10)
// covers the PASID's whole address space: a WRITE at any address with its
// key faults the missing page in through a page request and lands, and
// one beyond the translated 48 bits, or wrapping past 2^64, fails with
// REM_ACCESS_ERR without a page request.
func TestODPImplicit(t *testing.T) {
	const (
		implicitKey = 0x7700
		dst         = 0x30000
	)
	for _, tc := range []struct {
		name   string
		remote uint64
		fault  bool
		want   ibrc.WCStatus
	}{
		{"fault in", bufVA + dst, true, ibrc.WCSuccess},
		{"beyond 48 bits", 1 << 48, false, ibrc.WCRemAccessErr},
		{"wrapping", ^uint64(0) - 1000, false, ibrc.WCRemAccessErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _ := odpPair(t, 0)
			reg := rdmatest.RegMR(implicitKey, pdn, 0, 0, access|hw.RDMAAccessOnDemand, pasid)
			hw.RDMACmdFlags.Put(reg[:], hw.RDMACmdFlagImplicit)
			b.must(t, reg)
			data := pattern(3000, 9)
			a.buf.Write(0, data)
			va := b.evict(dst)
			a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRRDMAWrite, Flags: sig, AutoLength: true, NumSGE: -1,
				RemoteAddr: tc.remote, RKey: implicitKey, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 3000, LKey: mrKey}}})
			if tc.fault {
				g := b.nextGroup(t)
				checkGroup(t, g, hw.FaultKindRCRecv, va, true, b.qpn)
				b.answer(t, g, hw.PRSPSuccess)
			}
			if c := poll(t, a.scq, 1)[0]; c.WRID != 1 || c.Status != tc.want {
				t.Fatalf("completion %+v, want status %v", c, tc.want)
			}
			if !tc.fault {
				b.noGroup(t)
				return
			}
			if !bytes.Equal(b.buf.Read(dst, len(data)), data) {
				t.Fatal("data differs")
			}
			b.must(t, rdmatest.NewCmd(hw.RDMACmdDeregMR, implicitKey))
		})
	}
}
