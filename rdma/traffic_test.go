package rdma_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rxeq"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// TestBadReceives: what is wrong on the receiving side completes the
// receive with its status, fails the receiver's QP, and NAKs the sender,
// whose WR completes with the matching remote error.
func TestBadReceives(t *testing.T) {
	for _, tc := range []struct {
		name           string
		recv           rdmatest.Recv
		garbage        bool // num_sge far past the limit
		recvSt, sendSt ibrc.WCStatus
	}{
		{"bad lkey", rdmatest.Recv{ID: 5, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 4096, LKey: 0x777}}}, false, ibrc.WCLocProtErr, ibrc.WCRemOpErr},
		{"SGE past the MR", rdmatest.Recv{ID: 5, SGL: []rdmatest.SGE{{Addr: bufVA + bufSize - 10, Length: 4096, LKey: mrKey}}}, false, ibrc.WCLocProtErr, ibrc.WCRemOpErr},
		{"buffer too short", rdmatest.Recv{ID: 5, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 10, LKey: mrKey}}}, false, ibrc.WCLocLenErr, ibrc.WCRemInvReqErr},
		{"garbage entry", rdmatest.Recv{ID: 5}, true, ibrc.WCLocQPOpErr, ibrc.WCRemOpErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, 3)
			b.postRecv(t, b.rq, rdmatest.Recv{ID: 4, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 4096, LKey: mrKey}}})
			if tc.garbage {
				b.rq.Produce(func(s []byte) {
					tc.recv.Encode(s)
					hw.RxeRecvNumSGE.Put(s, 0xffff_ffff)
				})
			} else {
				b.postRecv(t, b.rq, tc.recv)
			}
			b.postRecv(t, b.rq, rdmatest.Recv{ID: 6, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 4096, LKey: mrKey}}})
			send := func(id uint64) rdmatest.Send {
				return rdmatest.Send{ID: id, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
					SGL: []rdmatest.SGE{{Addr: bufVA, Length: 100, LKey: mrKey}}}
			}
			a.post(t, a.sq, a.qpn, send(1), send(2))
			got := poll(t, a.scq, 2)
			if got[0].Status != ibrc.WCSuccess || got[1].WRID != 2 || got[1].Status != tc.sendSt {
				t.Errorf("sender: %+v, %+v; want success, then %v", got[0], got[1], tc.sendSt)
			}
			r := poll(t, b.rcq, 3)
			if r[0].WRID != 4 || r[0].Status != ibrc.WCSuccess || r[1].WRID != 5 || r[1].Status != tc.recvSt ||
				r[2].WRID != 6 || r[2].Status != ibrc.WCWRFlushErr {
				t.Errorf("receiver: %+v", r)
			}
			if ev := b.waitEvent(t, hw.RDMAEventQPFatal, b.qpn); ev.Info != uint32(tc.recvSt) {
				t.Errorf("receiver QP_FATAL info %d, want %d", ev.Info, tc.recvSt)
			}
			if b.rq.Consumer() != b.rq.Producer() {
				t.Errorf("receive slots not retired: %d/%d", b.rq.Consumer(), b.rq.Producer())
			}
			// A malformed receive entry counts as a bad WQE, as a
			// malformed send entry does; a bad key is no malformed entry.
			if want := map[bool]uint64{true: 1}[tc.garbage]; b.e.Stats().BadWQEs != want {
				t.Errorf("receiver counted %d bad WQEs, want %d", b.e.Stats().BadWQEs, want)
			}
		})
	}
}

// TestRNR: a SEND that finds no receive posted is RNR NAKed and retried
// until user space posts one; nothing is lost or duplicated.
func TestRNR(t *testing.T) {
	a, b := pair(t, 3)
	data := pattern(3000, 9)
	a.buf.Write(0, data)
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: 3000, LKey: mrKey}}})
	deadline := time.Now().Add(5 * time.Second)
	for b.e.Stats().RC.RNRNakNoWQE == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK")
		}
		time.Sleep(100 * time.Microsecond)
	}
	b.postRecv(t, b.rq, rdmatest.Recv{ID: 7, SGL: []rdmatest.SGE{{Addr: bufVA + 0x10000, Length: 4096, LKey: mrKey}}})
	if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCSuccess {
		t.Fatalf("send after RNR: %+v", c)
	}
	if c := poll(t, b.rcq, 1)[0]; c.WRID != 7 || c.ByteLen != 3000 {
		t.Fatalf("receive after RNR: %+v", c)
	}
	quiet(t, b.rcq)
	if !bytes.Equal(b.buf.Read(0x10000, 3000), data) {
		t.Fatal("data differs")
	}
}

// writer keeps WRITEs (or SENDs) from a to b running until stop, counting
// completions; it returns the first error completion.
type writer struct {
	wg   sync.WaitGroup
	stop chan struct{}
	done atomic.Int64
	mu   sync.Mutex
	errs []rxeq.CQE
}

// Messages are size bytes, so a peer's DEREG_MR or DESTROY_QP most likely
// lands in the middle of one (64 packets at MTU 1024 for 64 KiB).
func runWriter(t *testing.T, a *node, op uint32, size int) *writer {
	w := &writer{stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		var id uint64
		out := 0
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			for out < 16 {
				id++
				off := uint64(id%uint64(bufSize/size)) * uint64(size)
				s := rdmatest.Send{ID: id, Opcode: op, Flags: sig, AutoLength: true, NumSGE: -1,
					SGL: []rdmatest.SGE{{Addr: bufVA + off, Length: uint32(size), LKey: mrKey}}}
				if op == hw.IBVWRRDMAWrite {
					s.RemoteAddr, s.RKey = bufVA+off, mrKey
				}
				if a.sq.Produce(s.Encode) != nil {
					break
				}
				out++
			}
			hw.Offsets(a.e).RegWrite(hw.RegSQDoorbell, a.qpn)
			for {
				c, ok := a.scq.Poll()
				if !ok {
					break
				}
				out--
				if c.Status != ibrc.WCSuccess {
					w.mu.Lock()
					w.errs = append(w.errs, c)
					w.mu.Unlock()
				} else {
					w.done.Add(1)
				}
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// awaitError waits up to d for the writer's first error completion.
func (w *writer) awaitError(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		n := len(w.errs)
		w.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (w *writer) waitDone(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for w.done.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d completions", w.done.Load())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestDestroyUnderTraffic: DEREG_MR and DESTROY_QP complete while the peer
// keeps writing into them, and once they completed no DMA touches what they
// covered: the test fences the region's pages and the QP's rings, and the
// late-DMA detector counts no write into them. Ethernet crosses the same
// port meanwhile.
func TestDestroyUnderTraffic(t *testing.T) {
	fenceBuf := func(n *node) {
		for _, p := range n.buf.Pages() {
			n.g.Mem.Fence(p, 4096)
		}
	}
	eth := make([]byte, 60)
	copy(eth, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06})
	t.Run("dereg MR", func(t *testing.T) {
		a, b := pair(t, 3)
		b.g.Mem.FenceOnQuiesce(true)
		w := runWriter(t, a, hw.IBVWRRDMAWrite, 64<<10)
		w.waitDone(t, 10)
		a.ethEP.Send(eth)
		b.must(t, rdmatest.NewCmd(hw.RDMACmdDeregMR, mrKey))
		fenceBuf(b)
		before := w.done.Load()
		// The writer keeps posting for 30 ms at least (the detector's
		// window), and until its next WRITE has met the deregistered key
		// and ended in an error completion, however loaded the host.
		time.Sleep(30 * time.Millisecond)
		w.awaitError(5 * time.Second)
		w.halt()
		if late := b.g.Mem.LateWrites(); late != 0 {
			t.Errorf("%d late writes after DEREG_MR: %v", late, b.g.Mem.LateLog())
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.errs) == 0 || w.errs[0].Status != ibrc.WCRemAccessErr {
			t.Errorf("writes after DEREG_MR: %d more succeeded, errors %+v; want a remote access error", w.done.Load()-before, w.errs)
		}
		if b.eth.n.Load() != 1 {
			t.Errorf("Ethernet frames at b: %d, want 1", b.eth.n.Load())
		}
	})
	t.Run("destroy QP", func(t *testing.T) {
		a, b := pair(t, 3)
		b.g.Mem.FenceOnQuiesce(true)
		for i := range 63 {
			b.postRecv(t, b.rq, rdmatest.Recv{ID: uint64(i), SGL: []rdmatest.SGE{{Addr: bufVA + uint64(i%64)*8192, Length: 8192, LKey: mrKey}}})
		}
		w := runWriter(t, a, hw.IBVWRSend, 8192)
		w.waitDone(t, 20)
		a.ethEP.Send(eth)
		b.must(t, rdmatest.NewCmd(hw.RDMACmdDestroyQP, b.qpn))
		fenceBuf(b)
		time.Sleep(30 * time.Millisecond)
		w.halt()
		if late := b.g.Mem.LateWrites(); late != 0 {
			t.Errorf("%d late writes after DESTROY_QP: %v", late, b.g.Mem.LateLog())
		}
		if b.eth.n.Load() != 1 {
			t.Errorf("Ethernet frames at b: %d, want 1", b.eth.n.Load())
		}
		// The QPN is free again, and the CQs can go.
		b.createQP(t, b.qpn)
		b.must(t, rdmatest.NewCmd(hw.RDMACmdDestroyQP, b.qpn))
		b.must(t, rdmatest.NewCmd(hw.RDMACmdDestroyCQ, recvCQ))
	})
}

// TestQPReset: MODIFY_QP to RESET drops the QP's work requests without
// completions and returns their slots; the QP comes back up and works.
func TestQPReset(t *testing.T) {
	a, b := pair(t, 3)
	send := func(id uint64) rdmatest.Send {
		return rdmatest.Send{ID: id, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 100, LKey: mrKey}}}
	}
	a.post(t, a.sq, a.qpn, send(1), send(2)) // b has no receive: RNR NAKs
	deadline := time.Now().Add(5 * time.Second)
	for b.e.Stats().RC.RNRNakNoWQE == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK")
		}
		time.Sleep(100 * time.Microsecond)
	}
	a.must(t, rdmatest.ModifyQP(a.qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState, State: hw.RDMAQPReset}))
	if a.sq.Consumer() != a.sq.Producer() {
		t.Fatalf("SQ slots after RESET: consumer %d, producer %d", a.sq.Consumer(), a.sq.Producer())
	}
	quiet(t, a.scq)
	a.connect(t, a.qpn, b, b.qpn, 3)
	b.postRecv(t, b.rq, rdmatest.Recv{ID: 8, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 4096, LKey: mrKey}}})
	a.post(t, a.sq, a.qpn, send(3))
	if c := poll(t, a.scq, 1)[0]; c.WRID != 3 || c.Status != ibrc.WCSuccess {
		t.Fatalf("send after RESET: %+v", c)
	}
	if c := poll(t, b.rcq, 1)[0]; c.WRID != 8 || c.ByteLen != 100 {
		t.Fatalf("receive after RESET: %+v", c)
	}
}

// TestTranslationFaultIsRNR: a receive buffer whose page is missing from
// the PASID's page tables is a translation fault in the RC engine (the
// next issue's page request path): the SEND is RNR NAKed, not failed, and
// lands once the page is mapped.
func TestTranslationFaultIsRNR(t *testing.T) {
	a, b := pair(t, 3)
	const off = 0x40000
	page := b.as.Unmap(bufVA + off)
	data := pattern(2000, 5)
	a.buf.Write(0, data)
	b.postRecv(t, b.rq, rdmatest.Recv{ID: 3, SGL: []rdmatest.SGE{{Addr: bufVA + off, Length: 4096, LKey: mrKey}}})
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: 2000, LKey: mrKey}}})
	deadline := time.Now().Add(5 * time.Second)
	for b.e.Stats().RC.RNRNakFault == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no RNR NAK for the fault: %+v", b.e.Stats().RC)
		}
		time.Sleep(100 * time.Microsecond)
	}
	quiet(t, a.scq)
	b.as.SetLeaf(bufVA+off, page)
	if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCSuccess {
		t.Fatalf("send: %+v", c)
	}
	if c := poll(t, b.rcq, 1)[0]; c.WRID != 3 || c.Status != ibrc.WCSuccess || c.ByteLen != 2000 {
		t.Fatalf("receive: %+v", c)
	}
	if !bytes.Equal(b.buf.Read(off, 2000), data) {
		t.Fatal("data differs")
	}
}

// TestRetryExhaustion: a peer that never answers ends the WR with
// RETRY_EXC_ERR after retry_cnt retransmissions, one that keeps answering
// RNR with RNR_RETRY_EXC_ERR after rnr_retry; either way the QP goes to
// ERR with QP_FATAL carrying the status.
func TestRetryExhaustion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		peerQPN uint32 // a QP b does not have: nothing answers
		st      ibrc.WCStatus
	}{
		{"no answer", 0x999, ibrc.WCRetryExcErr},
		{"receiver not ready", 0, ibrc.WCRNRRetryExcErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, 3)
			peer := b.qpn
			if tc.peerQPN != 0 {
				peer = tc.peerQPN
			}
			a.must(t, rdmatest.ModifyQP(a.qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState, State: hw.RDMAQPReset}))
			a.must(t, rdmatest.ModifyQP(a.qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrAccessFlags, State: hw.RDMAQPInit}))
			a.must(t, rdmatest.ModifyQP(a.qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrAV | hw.RDMAQPAttrPathMTU |
				hw.RDMAQPAttrDestQPN | hw.RDMAQPAttrRQPSN | hw.RDMAQPAttrMaxDestRdAtomic | hw.RDMAQPAttrMinRNRTimer,
				State: hw.RDMAQPRTR, PathMTU: 3, DestQPN: peer, RQPSN: 100, DGID: rdmatest.GIDv4(b.ip), DMAC: b.mac}))
			a.must(t, rdmatest.ModifyQP(a.qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrSQPSN | hw.RDMAQPAttrTimeout |
				hw.RDMAQPAttrRetryCnt | hw.RDMAQPAttrRNRRetry | hw.RDMAQPAttrMaxQPRdAtomic,
				State: hw.RDMAQPRTS, SQPSN: 100, Timeout: 8, RetryCnt: 2, RNRRetry: 2, MaxRdAtomic: 1}))
			a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
				SGL: []rdmatest.SGE{{Addr: bufVA, Length: 10, LKey: mrKey}}})
			if c := poll(t, a.scq, 1)[0]; c.WRID != 1 || c.Status != tc.st {
				t.Fatalf("completion %+v, want %v", c, tc.st)
			}
			if ev := a.waitEvent(t, hw.RDMAEventQPFatal, a.qpn); ev.Info != uint32(tc.st) {
				t.Errorf("QP_FATAL info %d, want %d", ev.Info, tc.st)
			}
		})
	}
}

// TestNoPassThrough: with ATS disabled a region's addresses are not taken
// for IOVAs: the access fails (LOC_PROT_ERR) instead of landing in
// whatever guest memory has that address.
func TestNoPassThrough(t *testing.T) {
	a, _ := pair(t, 3)
	a.x.ATSControl(false, 0)
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: 10, LKey: mrKey}}})
	if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCLocProtErr {
		t.Fatalf("send with ATS off: %+v, want LOC_PROT_ERR", c)
	}
}

// TestTraceRCPackets: with a recorder, the engine traces every RC packet
// it sends and receives: the SEND's packets with their QPN, opcode and
// PSNs on the sender, the same on the receiver, and the receiver's RNR
// NAK for a faulting buffer with its AETH syndrome.
func TestTraceRCPackets(t *testing.T) {
	if !trace.Compiled {
		t.Skip("built with npfnic_notrace")
	}
	ra, _ := trace.New(1 << 12)
	rb, _ := trace.New(1 << 12)
	pa, pb := port.Pipe(256)
	a, b := newTracedNode(t, pa, 1, ra), newTracedNode(t, pb, 2, rb)
	a.connect(t, a.qpn, b, b.qpn, 3)
	b.connect(t, b.qpn, a, a.qpn, 3)
	const off = 0x40000
	page := b.as.Unmap(bufVA + off)
	a.buf.Write(0, pattern(3000, 1))
	b.postRecv(t, b.rq, rdmatest.Recv{ID: 3, SGL: []rdmatest.SGE{{Addr: bufVA + off, Length: 4096, LKey: mrKey}}})
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: 3000, LKey: mrKey}}})
	deadline := time.Now().Add(5 * time.Second)
	for b.e.Stats().RC.RNRNakFault == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no RNR NAK for the fault: %+v", b.e.Stats().RC)
		}
		time.Sleep(100 * time.Microsecond)
	}
	b.as.SetLeaf(bufVA+off, page)
	if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCSuccess {
		t.Fatalf("send: %+v", c)
	}
	const (
		sendFirst = 0x00 // RC SEND First: 3000 bytes at MTU 1024 (3) are First, Middle, Last
		ack       = 0x11
		rnrNak    = 0x20 // AETH syndrome 001xxxxx
	)
	count := func(r *trace.Recorder, k trace.Kind, match func(e trace.Event) bool) int {
		ev, _ := r.Snapshot()
		n := 0
		for _, e := range ev {
			if e.Kind == k && e.Track == trace.TrackRC && match(e) {
				n++
			}
		}
		return n
	}
	isSend := func(qpn uint32) func(trace.Event) bool {
		return func(e trace.Event) bool { return uint32(e.A)&0xffffff == qpn && e.B>>24 <= 0x05 }
	}
	if n := count(ra, trace.RCTx, isSend(b.qpn)); n < 3 {
		t.Errorf("sender traced %d SEND packets to QP %#x, want the message's 3 at least", n, b.qpn)
	}
	if n := count(rb, trace.RCRx, isSend(b.qpn)); n < 3 {
		t.Errorf("receiver traced %d SEND packets, want 3 at least", n)
	}
	rnr := func(e trace.Event) bool { return e.B>>24 == ack && (e.A>>32)&0xe0 == rnrNak }
	if count(rb, trace.RCTx, rnr) == 0 || count(ra, trace.RCRx, rnr) == 0 {
		t.Errorf("the RNR NAK is missing from a trace (receiver sent %d, sender got %d)", count(rb, trace.RCTx, rnr), count(ra, trace.RCRx, rnr))
	}
}
