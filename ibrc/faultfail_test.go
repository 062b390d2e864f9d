package ibrc_test

import (
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
)

// TestFailedPageRequests: a page request that fails (the page cannot be
// made present) fails the access as an access outside the region does:
// the requester's WR completes with LOC_ACCESS_ERR, in its turn; the
// responder NAKs a SEND, WRITE or READ with a remote access error for
// the faulting PSN (a SEND's receive WR completes with LOC_ACCESS_ERR),
// under either receive-fault policy, and the QPs go to ERR.
func TestFailedPageRequests(t *testing.T) {
	const (
		src  = 64 << 10 // A's payload
		dst  = 1 << 20  // B's receive buffer, WRITE target, READ source
		rdst = 2 << 20  // A's READ target
	)
	cases := []struct {
		name   string
		policy ibrc.FaultPolicy
		evictA uint64 // offset of a page of A to evict (0: none)
		evictB uint64
		first  bool // post a good SEND first (the failing WR is not the oldest)
		wr     func(w *world) ibrc.SendWR
		want   ibrc.WCStatus
		recv   ibrc.WCStatus // B's receive completion (0: none expected)
		errNak bool          // B sent a remote access error NAK
	}{
		{name: "requester send payload", evictA: src + 4096, want: ibrc.WCLocAccessErr,
			wr: func(w *world) ibrc.SendWR { return ibrc.SendWR{Opcode: ibrc.WRSend, SGL: w.a.sge(src, 8192)} }},
		{name: "requester send payload behind an outstanding send", evictA: src + 4096, first: true, want: ibrc.WCLocAccessErr,
			wr: func(w *world) ibrc.SendWR { return ibrc.SendWR{Opcode: ibrc.WRSend, SGL: w.a.sge(src, 8192)} }},
		{name: "requester write payload", evictA: src, want: ibrc.WCLocAccessErr,
			wr: func(w *world) ibrc.SendWR {
				return ibrc.SendWR{Opcode: ibrc.WRWrite, SGL: w.a.sge(src, 100), RemoteAddr: memBase + dst, RKey: w.b.mr.RKey()}
			}},
		{name: "requester read target", evictA: rdst + 4096, want: ibrc.WCLocAccessErr,
			wr: func(w *world) ibrc.SendWR {
				return ibrc.SendWR{Opcode: ibrc.WRRead, SGL: w.a.sge(rdst, 8192), RemoteAddr: memBase + dst, RKey: w.b.mr.RKey()}
			}},
		{name: "responder send rnr", evictB: dst, want: ibrc.WCRemAccessErr, recv: ibrc.WCLocAccessErr, errNak: true,
			wr: func(w *world) ibrc.SendWR { return ibrc.SendWR{Opcode: ibrc.WRSend, SGL: w.a.sge(src, 3000)} }},
		{name: "responder send mid-message", evictB: dst + 4096, want: ibrc.WCRemAccessErr, recv: ibrc.WCLocAccessErr, errNak: true,
			wr: func(w *world) ibrc.SendWR { return ibrc.SendWR{Opcode: ibrc.WRSend, SGL: w.a.sge(src, 6000)} }},
		{name: "responder send drop", policy: ibrc.FaultDrop, evictB: dst, want: ibrc.WCRemAccessErr, recv: ibrc.WCLocAccessErr, errNak: true,
			wr: func(w *world) ibrc.SendWR { return ibrc.SendWR{Opcode: ibrc.WRSend, SGL: w.a.sge(src, 3000)} }},
		{name: "responder send hold", policy: ibrc.FaultHold, evictB: dst + 4096, want: ibrc.WCRemAccessErr, recv: ibrc.WCLocAccessErr, errNak: true,
			wr: func(w *world) ibrc.SendWR { return ibrc.SendWR{Opcode: ibrc.WRSend, SGL: w.a.sge(src, 6000)} }},
		{name: "responder write hold", policy: ibrc.FaultHold, evictB: dst + 4096, want: ibrc.WCRemAccessErr, errNak: true,
			wr: func(w *world) ibrc.SendWR {
				return ibrc.SendWR{Opcode: ibrc.WRWrite, SGL: w.a.sge(src, 8192), RemoteAddr: memBase + dst, RKey: w.b.mr.RKey()}
			}},
		{name: "responder write", evictB: dst + 4096, want: ibrc.WCRemAccessErr, errNak: true,
			wr: func(w *world) ibrc.SendWR {
				return ibrc.SendWR{Opcode: ibrc.WRWrite, SGL: w.a.sge(src, 8192), RemoteAddr: memBase + dst, RKey: w.b.mr.RKey()}
			}},
		{name: "responder write drop", policy: ibrc.FaultDrop, evictB: dst, want: ibrc.WCRemAccessErr, errNak: true,
			wr: func(w *world) ibrc.SendWR {
				return ibrc.SendWR{Opcode: ibrc.WRWrite, SGL: w.a.sge(src, 100), RemoteAddr: memBase + dst, RKey: w.b.mr.RKey()}
			}},
		{name: "responder read", evictB: dst + 4096, want: ibrc.WCRemAccessErr, errNak: true,
			wr: func(w *world) ibrc.SendWR {
				return ibrc.SendWR{Opcode: ibrc.WRRead, SGL: w.a.sge(rdst, 8192), RemoteAddr: memBase + dst, RKey: w.b.mr.RKey()}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := opts{policy: tc.policy, timeout: 10, retry: 7, rnr: 7, pagerDelay: 20 * time.Microsecond}
			if tc.first {
				// The first SEND is still unacknowledged when the second's
				// page request fails.
				o.link.Latency = 500 * time.Microsecond
			}
			w := newWorld(t, o)
			w.pager.Fail = func(ibrc.PageRequest) bool { return true }
			if tc.evictA != 0 {
				w.a.mem.Evict(memBase+tc.evictA, 1)
			}
			if tc.evictB != 0 {
				w.b.mem.Evict(memBase+tc.evictB, 1)
			}
			w.b.qp.PostRecv(ibrc.RecvWR{ID: 7, SGL: w.b.sge(dst, 8192)})
			w.b.qp.PostRecv(ibrc.RecvWR{ID: 8, SGL: w.b.sge(3<<20, 8192)})
			n := 1
			if tc.first {
				w.a.qp.PostSend(ibrc.SendWR{ID: 9, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(3<<20, 100)})
				n++
			}
			wr := tc.wr(w)
			wr.ID, wr.Flags = 1, ibrc.SendSignaled
			w.a.qp.PostSend(wr)
			w.a.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRSend, SGL: w.a.sge(3<<20, 1)})
			w.run(time.Second, func() bool { return len(w.a.wcs) == n+1 })
			got := w.a.wcs[n-1]
			if tc.first && (w.a.wcs[0].WRID != 9 || w.a.wcs[0].Status != ibrc.WCSuccess) {
				t.Fatalf("the SEND before the failing WR: %+v", w.a.wcs[0])
			}
			if got.WRID != 1 || got.Status != tc.want || w.a.wcs[n].Status != ibrc.WCWRFlushErr {
				t.Fatalf("completions %+v, want WR 1 %v then a flush", w.a.wcs, tc.want)
			}
			if w.a.qp.Query().State != ibrc.StateErr {
				t.Fatalf("requester in %v", w.a.qp.Query().State)
			}
			side := w.a
			if tc.evictB != 0 {
				side = w.b
			}
			if st := side.e.Stats(); st.PageRequestErrors != 1 || st.PageRequests != 1 {
				t.Fatalf("page requests %d, failed %d", st.PageRequests, st.PageRequestErrors)
			}
			if st := w.b.e.Stats(); (st.ErrNakSent == 1) != tc.errNak {
				t.Fatalf("responder sent %d error NAKs", st.ErrNakSent)
			}
			if tc.errNak && w.b.qp.Query().State != ibrc.StateErr {
				t.Fatalf("responder in %v", w.b.qp.Query().State)
			}
			if tc.recv != 0 {
				w.settle(10 * time.Millisecond)
				if len(w.b.rwcs) == 0 || w.b.rwcs[0].WRID != 7 || w.b.rwcs[0].Status != tc.recv {
					t.Fatalf("receive completions %+v, want WR 7 %v", w.b.rwcs, tc.recv)
				}
			}
		})
	}
}

// TestRecvFaultPolicyAtRuntime: SetRecvFaultPolicy applies from the next
// fault: under FaultDrop a receive fault is dropped (no RNR NAK, the
// requester's ACK timeout recovers), back under FaultRNRNak it is RNR
// NAKed, and both deliver the data.
func TestRecvFaultPolicyAtRuntime(t *testing.T) {
	w := newWorld(t, opts{timeout: 10, retry: 7, rnr: 7, pagerDelay: 50 * time.Microsecond})
	fill(w.a.at(0, 8192), 5)
	for i, p := range []ibrc.FaultPolicy{ibrc.FaultDrop, ibrc.FaultRNRNak} {
		w.b.e.SetRecvFaultPolicy(p)
		if got := w.b.e.RecvFaultPolicy(); got != p {
			t.Fatalf("policy %v after setting %v", got, p)
		}
		before := w.b.e.Stats()
		off := uint64(1<<20 + i*8192)
		w.b.mem.Evict(memBase+off, 1)
		w.b.qp.PostRecv(ibrc.RecvWR{ID: uint64(i), SGL: w.b.sge(off, 8192)})
		w.a.qp.PostSend(ibrc.SendWR{ID: uint64(i), Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 8192)})
		w.run(time.Second, func() bool { return len(w.a.wcs) == i+1 && len(w.b.rwcs) == i+1 })
		if w.a.wcs[i].Status != ibrc.WCSuccess || w.b.rwcs[i].Status != ibrc.WCSuccess {
			t.Fatalf("%v: %+v %+v", p, w.a.wcs[i], w.b.rwcs[i])
		}
		expectBytes(t, p.String(), w.b.at(off, 8192), w.a.at(0, 8192))
		st := w.b.e.Stats()
		drops, rnrs := st.FaultDrops-before.FaultDrops, st.RNRNakFault-before.RNRNakFault
		if p == ibrc.FaultDrop && (drops == 0 || rnrs != 0) || p == ibrc.FaultRNRNak && (drops != 0 || rnrs == 0) {
			t.Fatalf("%v: %d drops, %d RNR NAKs", p, drops, rnrs)
		}
	}
	if st := w.a.e.Stats(); st.Timeouts == 0 {
		t.Fatal("the dropped request was not recovered by a timeout")
	}
}

// TestMessageAlarm: SetMessageAlarm(n) raises one EventMessageAlarm when
// the responder has executed n more requests, whatever their kind; a new
// value replaces the countdown and 0 cancels it.
func TestMessageAlarm(t *testing.T) {
	alarms := func(n *node) int {
		k := 0
		for _, ev := range n.events {
			if ev.Type == ibrc.EventMessageAlarm {
				k++
			}
		}
		return k
	}
	for _, tc := range []struct {
		name   string
		arm    []uint64 // SetMessageAlarm calls before the messages
		msgs   int      // SENDs then executed
		alarms int      // EventMessageAlarms expected
		left   uint64   // MessageAlarm afterwards
	}{
		{"fires at the count", []uint64{3}, 3, 1, 0},
		{"not before", []uint64{4}, 3, 0, 1},
		{"once only", []uint64{1}, 3, 1, 0},
		{"replaced", []uint64{1, 5}, 3, 0, 2},
		{"cancelled", []uint64{2, 0}, 3, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, opts{timeout: 10, retry: 7, rnr: 7})
			for _, n := range tc.arm {
				w.b.e.SetMessageAlarm(n)
			}
			for i := 0; i < tc.msgs; i++ {
				w.b.qp.PostRecv(ibrc.RecvWR{ID: uint64(i), SGL: w.b.sge(uint64(i)*64, 64)})
				w.a.qp.PostSend(ibrc.SendWR{ID: uint64(i), Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 64)})
			}
			w.run(time.Second, func() bool { return len(w.a.wcs) == tc.msgs && len(w.b.rwcs) == tc.msgs })
			if got := alarms(w.b); got != tc.alarms {
				t.Errorf("%d alarms, want %d", got, tc.alarms)
			}
			if got := w.b.e.MessageAlarm(); got != tc.left {
				t.Errorf("%d requests left on the alarm, want %d", got, tc.left)
			}
			if got := alarms(w.a); got != 0 {
				t.Errorf("the requester raised %d alarms", got)
			}
		})
	}
}

// TestMessageAlarmChains: an alarm set right after one went off counts
// from the request that set that one off, so gaps of n requests chain
// exactly however late the new alarm comes; if the late requests already
// make n, the next one sets it off.
func TestMessageAlarmChains(t *testing.T) {
	for _, tc := range []struct {
		name         string
		late, gap    int // requests executed before the next SetMessageAlarm(gap)
		more, alarms int // requests then executed, alarms then seen
	}{
		{"in time", 0, 3, 3, 1},
		{"late, counted", 2, 3, 1, 1},
		{"late, not yet", 1, 4, 2, 0},
		{"late past the gap", 5, 3, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, opts{timeout: 10, retry: 7, rnr: 7})
			sent := 0
			send := func(k int) {
				for i := 0; i < k; i++ {
					w.b.qp.PostRecv(ibrc.RecvWR{ID: uint64(sent), SGL: w.b.sge(uint64(sent%64)*64, 64)})
					w.a.qp.PostSend(ibrc.SendWR{ID: uint64(sent), Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 64)})
					sent++
				}
				w.run(time.Second, func() bool { return len(w.b.rwcs) == sent })
			}
			alarms := func() int {
				k := 0
				for _, ev := range w.b.events {
					if ev.Type == ibrc.EventMessageAlarm {
						k++
					}
				}
				return k
			}
			w.b.e.SetMessageAlarm(1)
			send(1)
			if alarms() != 1 {
				t.Fatal("the first alarm did not go off")
			}
			send(tc.late)
			w.b.e.SetMessageAlarm(uint64(tc.gap))
			send(tc.more)
			if got := alarms() - 1; got != tc.alarms {
				t.Errorf("%d alarms after %d late and %d more requests for a gap of %d, want %d", got, tc.late, tc.more, tc.gap, tc.alarms)
			}
		})
	}
}

// TestRecvFaultHold: under FaultHold the responder keeps a request whose
// data faults, and those behind it, until the page arrives, then places
// them: a requester whose RNR retry count is 0 (tgt's iSER initiators)
// completes every SEND and WRITE, without an RNR NAK, a drop or a
// retransmission, while under FaultRNRNak the first RNR NAK fails it.
func TestRecvFaultHold(t *testing.T) {
	const msg = 64 << 10
	for _, tc := range []struct {
		policy ibrc.FaultPolicy
		want   ibrc.WCStatus
	}{
		{ibrc.FaultHold, ibrc.WCSuccess},
		{ibrc.FaultRNRNak, ibrc.WCRNRRetryExcErr},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			w := newWorld(t, opts{policy: tc.policy, timeout: 14, retry: 7, rnr: 0, pagerDelay: 200 * time.Microsecond})
			fill(w.a.at(0, 2*msg), 9)
			// Pages cold at the start, in the middle and at the end of
			// the SEND's buffer and of the WRITE's target.
			for _, off := range []uint64{1 << 20, 1<<20 + 5*4096, 1<<20 + msg - 4096, 2 << 20, 2<<20 + 9*4096} {
				w.b.mem.Evict(memBase+off, 1)
			}
			w.b.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: w.b.sge(1<<20, msg)})
			w.b.qp.PostRecv(ibrc.RecvWR{ID: 2, SGL: w.b.sge(3<<20, 64)})
			w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, msg)})
			w.a.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled, SGL: w.a.sge(msg, msg),
				RemoteAddr: memBase + 2<<20, RKey: w.b.mr.RKey()})
			w.a.qp.PostSend(ibrc.SendWR{ID: 3, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 64)})
			w.run(time.Second, func() bool { return len(w.a.wcs) == 3 })
			if w.a.wcs[0].Status != tc.want {
				t.Fatalf("completions %+v, want the first %v", w.a.wcs, tc.want)
			}
			sa, sb := w.a.e.Stats(), w.b.e.Stats()
			if tc.want != ibrc.WCSuccess {
				if sb.RNRNakFault == 0 {
					t.Fatal("no RNR NAK")
				}
				return
			}
			for i, c := range w.a.wcs {
				if c.Status != ibrc.WCSuccess || c.WRID != uint64(i+1) {
					t.Fatalf("completion %d: %+v", i, c)
				}
			}
			w.run(time.Second, func() bool { return len(w.b.rwcs) == 2 })
			expectBytes(t, "SEND", w.b.at(1<<20, msg), w.a.at(0, msg))
			expectBytes(t, "WRITE", w.b.at(2<<20, msg), w.a.at(msg, msg))
			if sb.FaultHolds == 0 || sb.RNRNakFault != 0 || sb.FaultDrops != 0 {
				t.Fatalf("responder: %d holds, %d RNR NAKs, %d drops", sb.FaultHolds, sb.RNRNakFault, sb.FaultDrops)
			}
			if sa.Retransmits != 0 || sa.Timeouts != 0 {
				t.Fatalf("requester: %d retransmissions, %d timeouts", sa.Retransmits, sa.Timeouts)
			}
		})
	}
}
