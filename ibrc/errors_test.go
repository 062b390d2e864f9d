package ibrc_test

import (
	"errors"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
)

// TestRemoteErrors: each responder-detected error comes back as the right
// NAK, completes the WQE with the matching status, and moves both QPs to
// ERR with the rest flushed.
func TestRemoteErrors(t *testing.T) {
	cases := []struct {
		name     string
		access   ibrc.Access
		wr       func(w *world) ibrc.SendWR
		recv     int // receive buffer size (0: none posted)
		want     ibrc.WCStatus
		wantRecv ibrc.WCStatus // completion of the receive WQE, if one
		nak      bool
	}{
		{name: "bad-rkey-write", wr: func(w *world) ibrc.SendWR {
			return ibrc.SendWR{Opcode: ibrc.WRWrite, SGL: w.a.sge(0, 100), RemoteAddr: memBase, RKey: w.b.mr.RKey() ^ 0x55}
		}, want: ibrc.WCRemAccessErr},
		{name: "write-beyond-region", wr: func(w *world) ibrc.SendWR {
			return ibrc.SendWR{Opcode: ibrc.WRWrite, SGL: w.a.sge(0, 2000), RemoteAddr: memBase + memSize - 1000, RKey: w.b.mr.RKey()}
		}, want: ibrc.WCRemAccessErr},
		{name: "read-beyond-region", wr: func(w *world) ibrc.SendWR {
			return ibrc.SendWR{Opcode: ibrc.WRRead, SGL: w.a.sge(0, 2000), RemoteAddr: memBase - 8, RKey: w.b.mr.RKey()}
		}, want: ibrc.WCRemAccessErr},
		{name: "read-not-permitted-on-qp", access: ibrc.AccessLocalWrite | ibrc.AccessRemoteWrite, wr: func(w *world) ibrc.SendWR {
			return ibrc.SendWR{Opcode: ibrc.WRRead, SGL: w.a.sge(0, 10), RemoteAddr: memBase, RKey: w.b.mr.RKey()}
		}, want: ibrc.WCRemInvReqErr},
		{name: "send-longer-than-receive-buffer", recv: 1000, wr: func(w *world) ibrc.SendWR {
			return ibrc.SendWR{Opcode: ibrc.WRSend, SGL: w.a.sge(0, 3000)}
		}, want: ibrc.WCRemInvReqErr, wantRecv: ibrc.WCLocLenErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, opts{access: tc.access})
			if tc.recv > 0 {
				w.b.qp.PostRecv(ibrc.RecvWR{ID: 7, SGL: w.b.sge(0, tc.recv)})
				w.b.qp.PostRecv(ibrc.RecvWR{ID: 8, SGL: w.b.sge(0, tc.recv)})
			}
			wr := tc.wr(w)
			wr.ID, wr.Flags = 1, ibrc.SendSignaled
			w.a.qp.PostSend(wr)
			w.a.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRSend, SGL: w.a.sge(0, 1)})
			w.run(time.Second, func() bool { return len(w.a.wcs) == 2 })
			if w.a.wcs[0].Status != tc.want || w.a.wcs[1].Status != ibrc.WCWRFlushErr {
				t.Fatalf("completions %v / %v, want %v / flush", w.a.wcs[0].Status, w.a.wcs[1].Status, tc.want)
			}
			if w.a.qp.Query().State != ibrc.StateErr || w.b.qp.Query().State != ibrc.StateErr {
				t.Fatalf("states %v %v, want ERR ERR", w.a.qp.Query().State, w.b.qp.Query().State)
			}
			if st := w.b.e.Stats(); st.ErrNakSent != 1 {
				t.Fatalf("responder sent %d error NAKs", st.ErrNakSent)
			}
			if tc.recv > 0 {
				if len(w.b.rwcs) != 2 || w.b.rwcs[0].Status != tc.wantRecv || w.b.rwcs[1].Status != ibrc.WCWRFlushErr {
					t.Fatalf("receive completions %+v", w.b.rwcs)
				}
			}
		})
	}
}

// TestLocalProtectionError: an SGE outside any region fails the WQE
// locally with LOC_PROT_ERR before anything is sent.
func TestLocalProtectionError(t *testing.T) {
	w := newWorld(t, opts{})
	w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, SGL: []ibrc.SGE{{Addr: memBase, Length: 10, LKey: 0xbad}}})
	w.run(time.Millisecond, func() bool { return len(w.a.wcs) == 1 })
	if w.a.wcs[0].Status != ibrc.WCLocProtErr || w.a.e.Stats().DataPackets != 0 {
		t.Fatalf("%+v, %d packets", w.a.wcs, w.a.e.Stats().DataPackets)
	}
}

// TestStateMachine walks the QP through its states and checks the
// transition table, the verbs allowed in each state, SQD draining and the
// ERR flush.
func TestStateMachine(t *testing.T) {
	type tr struct {
		from, to ibrc.QPState
		mask     ibrc.AttrMask
		ok       bool
	}
	rtr := ibrc.AttrAV | ibrc.AttrPathMTU | ibrc.AttrDestQPN | ibrc.AttrRQPSN | ibrc.AttrMaxDestRdAtomic | ibrc.AttrMinRNRTimer
	rts := ibrc.AttrSQPSN | ibrc.AttrTimeout | ibrc.AttrRetryCnt | ibrc.AttrRNRRetry | ibrc.AttrMaxRdAtomic
	for _, c := range []tr{
		{ibrc.StateReset, ibrc.StateInit, ibrc.AttrPKey | ibrc.AttrAccessFlags, true},
		{ibrc.StateReset, ibrc.StateInit, ibrc.AttrPKey, false},
		{ibrc.StateReset, ibrc.StateRTR, rtr, false},
		{ibrc.StateInit, ibrc.StateRTR, rtr, true},
		{ibrc.StateInit, ibrc.StateRTR, rtr &^ ibrc.AttrMinRNRTimer, false},
		{ibrc.StateInit, ibrc.StateRTR, rtr | ibrc.AttrSQPSN, false},
		{ibrc.StateRTR, ibrc.StateRTS, rts, true},
		{ibrc.StateRTR, ibrc.StateRTS, rts &^ ibrc.AttrRNRRetry, false},
		{ibrc.StateRTS, ibrc.StateRTS, ibrc.AttrMinRNRTimer, true},
		{ibrc.StateRTS, ibrc.StateRTS, ibrc.AttrPathMTU, false},
		{ibrc.StateRTS, ibrc.StateSQD, 0, true},
		{ibrc.StateSQD, ibrc.StateSQD, ibrc.AttrTimeout | ibrc.AttrRetryCnt, true},
		{ibrc.StateSQD, ibrc.StateRTS, 0, true},
		{ibrc.StateSQE, ibrc.StateRTS, 0, true},
		{ibrc.StateRTR, ibrc.StateSQD, 0, false},
		{ibrc.StateErr, ibrc.StateRTS, rts, false},
		{ibrc.StateErr, ibrc.StateReset, 0, true},
		{ibrc.StateRTS, ibrc.StateErr, 0, true},
		{ibrc.StateRTS, ibrc.StateErr, ibrc.AttrTimeout, false},
	} {
		err := ibrc.CheckTransition(ibrc.TypeRC, c.from, c.to, c.mask)
		if (err == nil) != c.ok {
			t.Errorf("%v->%v mask %#x: err %v, want ok=%v", c.from, c.to, c.mask, err, c.ok)
		}
	}

	w := newWorld(t, opts{noConnect: true})
	q := w.a.qp
	if err := q.PostSend(ibrc.SendWR{Opcode: ibrc.WRSend}); !errors.Is(err, ibrc.ErrInvalidState) {
		t.Fatalf("PostSend in RESET: %v", err)
	}
	if err := q.PostRecv(ibrc.RecvWR{}); !errors.Is(err, ibrc.ErrInvalidState) {
		t.Fatalf("PostRecv in RESET: %v", err)
	}
	if err := q.ModifyQP(&ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff, AccessFlags: ibrc.AccessRemoteWrite},
		ibrc.AttrState|ibrc.AttrPKey|ibrc.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := q.PostRecv(ibrc.RecvWR{ID: 5, SGL: w.a.sge(0, 10)}); err != nil {
		t.Fatalf("PostRecv in INIT: %v", err)
	}
	bad := ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: 9}
	if err := q.ModifyQP(&bad, ibrc.AttrState|ibrc.AttrAV|ibrc.AttrPathMTU|ibrc.AttrDestQPN|ibrc.AttrRQPSN|ibrc.AttrMaxDestRdAtomic|ibrc.AttrMinRNRTimer); err == nil {
		t.Fatal("MTU 9 accepted")
	}
	if got := q.Query().State; got != ibrc.StateInit {
		t.Fatalf("failed modify changed the state to %v", got)
	}
	// Connect both, then drain A's send queue through SQD.
	o := opts{}
	defaults(&o)
	connectFromInit := func(n, peer *node, mac [6]byte, ip [4]byte) {
		if n.qp.Query().State == ibrc.StateReset {
			connect(t, n, peer, mac, ip, 0, 0, o)
			return
		}
		n.qp.ModifyQP(&ibrc.QPAttr{State: ibrc.StateReset}, ibrc.AttrState)
		connect(t, n, peer, mac, ip, 0, 0, o)
	}
	connectFromInit(w.a, w.b, macB, ipB)
	connectFromInit(w.b, w.a, macA, ipA)
	if len(w.a.rwcs) != 0 {
		t.Fatal("RESET produced completions")
	}
	for i := 0; i < 4; i++ {
		w.b.qp.PostRecv(ibrc.RecvWR{ID: uint64(i), SGL: w.b.sge(0, 8192)})
	}
	w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 5000)})
	if err := w.a.qp.ModifyQP(&ibrc.QPAttr{State: ibrc.StateSQD}, ibrc.AttrState); err != nil {
		t.Fatal(err)
	}
	w.a.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 10)})
	w.settle(10 * time.Millisecond)
	if len(w.a.wcs) != 1 || w.a.wcs[0].WRID != 1 || !w.a.qp.SQDrained() {
		t.Fatalf("SQD: completions %+v drained %v", w.a.wcs, w.a.qp.SQDrained())
	}
	drained := 0
	for _, ev := range w.a.events {
		if ev.Type == ibrc.EventSQDrained && ev.QPN == w.a.qp.Num() {
			drained++
		}
	}
	if drained != 1 {
		t.Fatalf("%d SQ drained events", drained)
	}
	if err := w.a.qp.ModifyQP(&ibrc.QPAttr{State: ibrc.StateRTS}, ibrc.AttrState); err != nil {
		t.Fatal(err)
	}
	w.run(10*time.Millisecond, func() bool { return len(w.a.wcs) == 2 })
	// ERR flushes the receive queue.
	w.b.qp.ModifyQP(&ibrc.QPAttr{State: ibrc.StateErr}, ibrc.AttrState)
	w.b.poll()
	if len(w.b.rwcs) != 4 || w.b.rwcs[2].Status != ibrc.WCWRFlushErr || w.b.rwcs[3].Status != ibrc.WCWRFlushErr {
		t.Fatalf("receive completions after ERR: %+v", w.b.rwcs)
	}
}

// TestRequesterFaults: a fault gathering a SEND's payload stalls the send
// queue until the page arrives; a fault placing a READ response drops the
// responses and re-requests the rest of the READ once the page arrives.
func TestRequesterFaults(t *testing.T) {
	w := newWorld(t, opts{pagerDelay: 500 * time.Microsecond})
	fill(w.a.at(0, 8192), 1)
	fill(w.b.at(1<<20, 8192), 2)
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: w.b.sge(0, 8192)})
	w.a.mem.Evict(memBase+4096, 1) // second page of the SEND
	w.a.mem.Evict(memBase+2<<20+4096, 1)
	w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 8192)})
	w.a.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRRead, Flags: ibrc.SendSignaled, SGL: w.a.sge(2<<20, 8192),
		RemoteAddr: memBase + 1<<20, RKey: w.b.mr.RKey()})
	w.run(50*time.Millisecond, func() bool { return len(w.a.wcs) == 2 })
	for _, c := range w.a.wcs {
		if c.Status != ibrc.WCSuccess {
			t.Fatalf("%+v", w.a.wcs)
		}
	}
	expectBytes(t, "SEND after a requester fault", w.b.at(0, 8192), w.a.at(0, 8192))
	expectBytes(t, "READ after a requester fault", w.a.at(2<<20, 8192), w.b.at(1<<20, 8192))
	st := w.a.e.Stats()
	if st.RequesterFaults != 2 || st.ReadRetries != 1 || st.Timeouts != 0 || w.pager.Requests() != 2 {
		t.Fatalf("faults %d read retries %d timeouts %d page requests %d", st.RequesterFaults, st.ReadRetries, st.Timeouts, w.pager.Requests())
	}
	// The SEND waited for its page: it cannot have completed before.
	if el := w.clk.Elapsed(); el < 1000*time.Microsecond {
		t.Fatalf("done after %v, before the two page requests could resolve", el)
	}
}

// TestResponderReadFault: a READ whose source page is absent stalls its
// responses until the page arrives; a SEND queued behind it waits and then
// completes in order.
func TestResponderReadFault(t *testing.T) {
	w := newWorld(t, opts{pagerDelay: 200 * time.Microsecond})
	fill(w.b.at(1<<20, 12000), 3)
	fill(w.a.at(0, 100), 4)
	w.b.mem.Evict(memBase+1<<20+8192, 1)
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: w.b.sge(0, 100)})
	w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRRead, Flags: ibrc.SendSignaled, SGL: w.a.sge(2<<20, 12000),
		RemoteAddr: memBase + 1<<20, RKey: w.b.mr.RKey()})
	w.a.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 100)})
	w.run(50*time.Millisecond, func() bool { return len(w.a.wcs) == 2 && len(w.b.rwcs) == 1 })
	if w.a.wcs[0].WRID != 1 || w.a.wcs[0].Status != ibrc.WCSuccess || w.a.wcs[1].Status != ibrc.WCSuccess {
		t.Fatalf("%+v", w.a.wcs)
	}
	expectBytes(t, "READ", w.a.at(2<<20, 12000), w.b.at(1<<20, 12000))
	if st := w.b.e.Stats(); st.ResponderFaults != 1 {
		t.Fatalf("responder faults %d", st.ResponderFaults)
	}
	if st := w.a.e.Stats(); st.Timeouts != 0 {
		t.Fatalf("recovery needed %d timeouts", st.Timeouts)
	}
}

// TestLostTailRecoveredByTimeout: the last packet of the only message is
// lost once; only the local ACK timeout can recover it.
func TestLostTailRecoveredByTimeout(t *testing.T) {
	big := 0
	w := newWorld(t, opts{timeout: 12, retry: 3, link: linkDropFirst(func(f []byte) bool {
		if len(f) > 1000 {
			big++
			return big == 2 // the second (last) packet of the SEND, once
		}
		return false
	})})
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: w.b.sge(0, 2048)})
	w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 2048)})
	w.run(time.Second, func() bool { return len(w.a.wcs) == 1 })
	st := w.a.e.Stats()
	if st.Timeouts != 1 || w.a.wcs[0].Status != ibrc.WCSuccess {
		t.Fatalf("timeouts %d %+v", st.Timeouts, w.a.wcs)
	}
	// 4.096 µs × 2^12 = 16.8 ms.
	if el := w.clk.Elapsed(); el < 16*time.Millisecond || el > 18*time.Millisecond {
		t.Fatalf("recovered after %v", el)
	}
}

// TestCQOverflow: a completion that does not fit is lost, the CQ says so
// and an EventCQError is raised once.
func TestCQOverflow(t *testing.T) {
	var events []ibrc.Event
	e := ibrc.New(ibrc.Config{Port: ibrc.PortFunc(func([]byte) error { return nil }), OnEvent: func(ev ibrc.Event) { events = append(events, ev) }})
	cq, _ := e.CreateCQ(1)
	pd := e.CreatePD()
	qp, _ := pd.CreateQP(ibrc.QPInit{SendCQ: cq, RecvCQ: cq, Cap: ibrc.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	qp.ModifyQP(&ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff}, ibrc.AttrState|ibrc.AttrPKey|ibrc.AttrAccessFlags)
	for i := 0; i < 3; i++ {
		qp.PostRecv(ibrc.RecvWR{ID: uint64(i)})
	}
	qp.ModifyQP(&ibrc.QPAttr{State: ibrc.StateErr}, ibrc.AttrState)
	wc := make([]ibrc.WC, 4)
	if n := cq.Poll(wc); n != 1 || wc[0].WRID != 0 || !cq.Overflowed() {
		t.Fatalf("polled %d, overflowed %v", n, cq.Overflowed())
	}
	if len(events) != 1 || events[0].Type != ibrc.EventCQError || events[0].CQ != cq {
		t.Fatalf("events %+v", events)
	}
}

// TestUnreportedFaultRetries: without a PageRequester a stalled sender
// retries on its own until the memory is present again.
func TestUnreportedFaultRetries(t *testing.T) {
	w := newWorld(t, opts{noPager: true})
	w.a.mem.Evict(memBase, 1)
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: w.b.sge(0, 100)})
	w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 100)})
	w.clk.AfterFunc(time.Millisecond, func() { w.a.mem.MakePresent(memBase, 1) })
	w.run(10*time.Millisecond, func() bool { return len(w.a.wcs) == 1 })
	if el := w.clk.Elapsed(); el < time.Millisecond || w.a.wcs[0].Status != ibrc.WCSuccess {
		t.Fatalf("completed %+v after %v", w.a.wcs[0], el)
	}
	if _, faults := w.a.mem.Counts(); faults < 5 || faults > 15 {
		t.Fatalf("%d faulting attempts in 1 ms at one per 100 µs", faults)
	}
}
