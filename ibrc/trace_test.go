package ibrc_test

import (
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// TestFaultTrace: with Config.Trace, a fault that raises a page request is
// a Fault on TrackRC naming the QP, the PSN of the packet whose data
// faulted and the side, and its PageRequest carries the same PSN and its
// detection time; a responder's fault ends in an RCResume of that QP and
// PSN once the retransmission (or the stalled READ response) went through,
// under either receive-fault policy, also when the PSNs wrap.
func TestFaultTrace(t *testing.T) {
	if !trace.Compiled {
		t.Skip("built with npfnic_notrace")
	}
	const (
		src  = 64 << 10
		dst  = 1 << 20
		rdst = 2 << 20
		psnA = 0xfffffe // A's send queue: the fault's PSN wraps
	)
	for _, tc := range []struct {
		name           string
		policy         ibrc.FaultPolicy
		evictA, evictB uint64
		wr             func(w *world) ibrc.SendWR
		psn            uint32 // of the faulting packet
		responder      bool
	}{
		{name: "send mid-message, rnr", evictB: dst + 4096, psn: psnA + 4 - 1<<24, responder: true,
			wr: func(w *world) ibrc.SendWR { return ibrc.SendWR{Opcode: ibrc.WRSend, SGL: w.a.sge(src, 6000)} }},
		{name: "write, drop", policy: ibrc.FaultDrop, evictB: dst, psn: psnA, responder: true,
			wr: func(w *world) ibrc.SendWR {
				return ibrc.SendWR{Opcode: ibrc.WRWrite, SGL: w.a.sge(src, 100), RemoteAddr: memBase + dst, RKey: w.b.mr.RKey()}
			}},
		{name: "read response stalls", evictB: dst + 4096, psn: psnA + 4 - 1<<24, responder: true,
			wr: func(w *world) ibrc.SendWR {
				return ibrc.SendWR{Opcode: ibrc.WRRead, SGL: w.a.sge(rdst, 8192), RemoteAddr: memBase + dst, RKey: w.b.mr.RKey()}
			}},
		{name: "requester payload", evictA: src + 4096, psn: psnA + 4 - 1<<24,
			wr: func(w *world) ibrc.SendWR { return ibrc.SendWR{Opcode: ibrc.WRSend, SGL: w.a.sge(src, 8192)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ra, _ := trace.New(1024)
			rb, _ := trace.New(1024)
			w := newWorld(t, opts{policy: tc.policy, timeout: 10, retry: 7, rnr: 7, psnA: psnA, traceA: ra, traceB: rb})
			var reqs []ibrc.PageRequest
			w.pager.Fail = func(r ibrc.PageRequest) bool { reqs = append(reqs, r); return false }
			if tc.evictA != 0 {
				w.a.mem.Evict(memBase+tc.evictA, 1)
			}
			if tc.evictB != 0 {
				w.b.mem.Evict(memBase+tc.evictB, 1)
			}
			w.b.qp.PostRecv(ibrc.RecvWR{ID: 7, SGL: w.b.sge(dst, 8192)})
			wr := tc.wr(w)
			wr.ID, wr.Flags = 1, ibrc.SendSignaled
			before := time.Now()
			w.a.qp.PostSend(wr)
			w.run(time.Second, func() bool { return len(w.a.wcs) == 1 })
			if w.a.wcs[0].Status != ibrc.WCSuccess {
				t.Fatalf("completion %+v", w.a.wcs[0])
			}
			rec, qp := rb, w.b.qp
			if !tc.responder {
				rec, qp = ra, w.a.qp
			}
			ev, _ := rec.Snapshot()
			var faults, resumes []trace.Event
			for _, e := range ev {
				switch {
				case e.Kind == trace.Fault && e.Track == trace.TrackRC:
					faults = append(faults, e)
				case e.Kind == trace.RCResume:
					resumes = append(resumes, e)
				}
			}
			if len(faults) != 1 || len(reqs) != 1 {
				t.Fatalf("%d faults traced, %d page requests: %+v", len(faults), len(reqs), ev)
			}
			f, r := faults[0], reqs[0]
			qpn, psn, resp := f.RCFault()
			if qpn != qp.Num() || psn != tc.psn || resp != tc.responder || f.A&^4095 != r.VA&^4095 {
				t.Errorf("fault: QPN %#x PSN %#x responder %v VA %#x; want %#x %#x %v %#x", qpn, psn, resp, f.A, qp.Num(), tc.psn, tc.responder, r.VA)
			}
			if r.PSN != tc.psn || r.QPN != qp.Num() || r.Detected == 0 || r.Detected > f.TS || f.TS-r.Detected > int64(time.Since(before)) {
				t.Errorf("page request: %+v against the fault at %d", r, f.TS)
			}
			switch {
			case !tc.responder && len(resumes) != 0:
				t.Errorf("a requester's fault resumed: %+v", resumes)
			case tc.responder && (len(resumes) != 1 || resumes[0].A != uint64(qp.Num()) || resumes[0].B != uint64(tc.psn) || resumes[0].TS < f.TS):
				t.Errorf("resumes %+v, want one of QPN %#x PSN %#x after the fault", resumes, qp.Num(), tc.psn)
			}
		})
	}
}
