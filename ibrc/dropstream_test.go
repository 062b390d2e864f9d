package ibrc_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/ibrc/rocev2"
)

// streamSim is `npfnic exp rnpf-rate -transport rc` between two engines:
// A is ib_send_bw's client, keeping depth 1 KiB SENDs outstanding
// (perftest's tx depth); B is its server, with rx receives posted into the
// 4 slots of one page (perftest cycles receives through a page) and each
// reposted as it completes. evict, when set, is asked after every message
// B executed whether to evict the receive page, as the driver's
// rnpf_rate_ppm does.
type streamSim struct {
	w          *world
	depth, rx  int
	posted     uint64
	reposted   int
	evictions  int
	evict      func() bool
	lastRecv   int
	lastSendWC int
}

// recvPage is the offset of B's receive page in its memory.
const recvPage = 1 << 20

func newStreamSim(t *testing.T, o opts, depth, rx int) *streamSim {
	t.Helper()
	s := &streamSim{w: newWorld(t, o), depth: depth, rx: rx}
	for i := 0; i < rx; i++ {
		s.postRecv(i)
	}
	s.top()
	return s
}

func (s *streamSim) postRecv(i int) {
	if err := s.w.b.qp.PostRecv(ibrc.RecvWR{ID: uint64(i), SGL: s.w.b.sge(recvPage+uint64(i%4)*1024, 1024)}); err != nil {
		s.w.t.Fatal(err)
	}
}

// top posts SENDs until depth are outstanding.
func (s *streamSim) top() {
	for s.posted-s.w.a.qp.SendsCompleted() < uint64(s.depth) {
		if err := s.w.a.qp.PostSend(ibrc.SendWR{ID: s.posted, Opcode: ibrc.WRSend, SGL: s.w.a.sge(0, 1024)}); err != nil {
			s.w.t.Fatal(err)
		}
		s.posted++
	}
}

// step reposts, evicts and tops up after an event; it returns A's first
// failed completion, if any.
func (s *streamSim) step() *ibrc.WC {
	for ; s.lastRecv < len(s.w.b.rwcs); s.lastRecv++ {
		s.postRecv(s.reposted + s.rx)
		s.reposted++
		if s.evict != nil && s.evict() && s.w.b.mem.Present(memBase+recvPage) {
			s.w.b.mem.Evict(memBase+recvPage, 1)
			s.evictions++
		}
	}
	for ; s.lastSendWC < len(s.w.a.wcs); s.lastSendWC++ {
		if wc := s.w.a.wcs[s.lastSendWC]; wc.Status != ibrc.WCSuccess {
			return &wc
		}
	}
	s.top()
	return nil
}

// runFor runs the stream for d of virtual time or until A fails, and
// returns A's failed completion (nil: none).
func (s *streamSim) runFor(d time.Duration) *ibrc.WC {
	var failed *ibrc.WC
	s.w.clk.RunUntil(s.w.clk.Elapsed()+d, func() bool {
		s.w.a.poll()
		s.w.b.poll()
		failed = s.step()
		return failed != nil
	})
	return failed
}

// perftestOpts are the transport attributes perftest gives its QPs (local
// ACK timeout 14: 67 ms; retry_cnt 7; rnr_retry 7; min RNR timer 12) over
// a wire of about the pair's rate, with the drop receive-fault policy and
// page requests resolved after pager.
func perftestOpts(pager time.Duration) opts {
	return opts{timeout: 14, retry: 7, rnr: 7, minRNR: 12, policy: ibrc.FaultDrop, pagerDelay: pager,
		link: ibrctest.LinkConfig{BitsPerSecond: 100e6, Latency: 50 * time.Microsecond}}
}

// TestDropStreamFaultCostsOneTimeout: the rNPF-rate RC experiment's drop
// windows (10% and 0.1% of messages evict the receive page, minor and
// major faults) and the rewarm at rate 0 after them, as in its runs: some
// 140 faults and 130 timeouts in 10 s at 10%. Each eviction costs
// the stream exactly one fault and one ACK timeout: the retransmission
// after it finds the page present, executes, and its ACK is progress,
// which gives the requester its retry_cnt back. So the requester never
// runs out of retries, however many faults come one after another, as
// long as a page request takes less than the ACK timeout.
func TestDropStreamFaultCostsOneTimeout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pager  time.Duration
		rate   float64
		window time.Duration
	}{
		{"minor 10%", time.Millisecond, 0.1, time.Second},
		{"major 10%", 10 * time.Millisecond, 0.1, time.Second},
		{"major 0.1%", 10 * time.Millisecond, 0.001, 2 * time.Second},
		{"slower than a timeout", 60 * time.Millisecond, 0.1, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStreamSim(t, perftestOpts(tc.pager), 128, 512)
			rng := rand.New(rand.NewPCG(1, 2))
			s.evict = func() bool { return rng.Float64() < tc.rate }
			if wc := s.runFor(tc.window); wc != nil {
				t.Fatalf("the requester failed in the window: %+v", *wc)
			}
			s.evict = nil // rate 0: the rewarm
			before := len(s.w.b.rwcs)
			if wc := s.runFor(time.Second); wc != nil {
				t.Fatalf("the requester failed in the rewarm: %+v", *wc)
			}
			sa, sb := s.w.a.e.Stats(), s.w.b.e.Stats()
			t.Logf("%d messages, %d evictions; requester: %d timeouts, %d retransmits; responder: %d faults, %d drops, %d page requests",
				len(s.w.b.rwcs), s.evictions, sa.Timeouts, sa.Retransmits, sb.ResponderFaults, sb.FaultDrops, sb.PageRequests)
			if s.evictions < 5 {
				t.Fatalf("only %d evictions: the window tests nothing", s.evictions)
			}
			if sb.ResponderFaults != uint64(s.evictions) || sb.PageRequests != uint64(s.evictions) || sa.Timeouts != uint64(s.evictions) {
				t.Errorf("%d evictions cost %d faults, %d page requests and %d timeouts, want one each",
					s.evictions, sb.ResponderFaults, sb.PageRequests, sa.Timeouts)
			}
			if len(s.w.b.rwcs)-before < 10000 {
				t.Errorf("%d messages in the second at rate 0", len(s.w.b.rwcs)-before)
			}
		})
	}
}

// TestDropStreamPageOutlastsRetries: under the drop policy only the
// requester's ACK timeout recovers a fault, and its retry counter gives
// it the original and retry_cnt retransmissions, one per timeout from the
// last progress. A page request that is not back by the last of them (7 ×
// 67 ms) ends the stream with RETRY_EXC_ERR, and rightly so (the counter
// counts timeouts without forward progress): every retransmission lands on
// the page that is still absent, so the responder executes nothing past
// the faulting PSN and has nothing to acknowledge. It asks for the page
// once, not once per retransmission. A page request back before the last
// retry costs one timeout per 67 ms it took, and the stream goes on. This
// is the npfnic sender's RETRY_EXC_ERR in the rNPF-rate RC experiment: its
// failed windows counted more faults than evictions (retransmissions that
// found the page still absent), so page requests took over a timeout there.
func TestDropStreamPageOutlastsRetries(t *testing.T) {
	timeout := rocev2.LocalAckTimeout(14)
	for _, tc := range []struct {
		name     string
		pager    time.Duration
		timeouts uint64 // the requester's ACK timeouts (retries)
		giveUp   bool
	}{
		{"within one timeout", timeout / 2, 1, false},
		{"three timeouts", 5 * timeout / 2, 3, false},
		{"within the last retry", 13 * timeout / 2, 7, false},
		{"outlasts the retries", 9 * timeout, 7, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStreamSim(t, perftestOpts(tc.pager), 128, 512)
			if wc := s.runFor(100 * time.Millisecond); wc != nil {
				t.Fatalf("failed before the fault: %+v", *wc)
			}
			s.w.b.mem.Evict(memBase+recvPage, 1)
			_, expect := s.w.b.qp.PSNs()
			executed := len(s.w.b.rwcs)
			wc := s.runFor(2 * time.Second)
			sa, sb := s.w.a.e.Stats(), s.w.b.e.Stats()
			t.Logf("requester: %d timeouts, %d retransmits; responder: %d faults, %d drops, %d page requests; failed %+v",
				sa.Timeouts, sa.Retransmits, sb.ResponderFaults, sb.FaultDrops, sb.PageRequests, wc)
			if sb.PageRequests != 1 {
				t.Errorf("%d page requests for one absent page", sb.PageRequests)
			}
			if sa.Timeouts != tc.timeouts {
				t.Errorf("%d timeouts, want %d", sa.Timeouts, tc.timeouts)
			}
			if !tc.giveUp {
				if wc != nil {
					t.Fatalf("the requester gave up: %+v", *wc)
				}
				if sb.ResponderFaults != tc.timeouts {
					t.Errorf("%d faults, want %d: the original and every retransmission but the last", sb.ResponderFaults, tc.timeouts)
				}
				return
			}
			if wc == nil || wc.Status != ibrc.WCRetryExcErr {
				t.Fatalf("the requester's completion %+v, want RETRY_EXC_ERR", wc)
			}
			// The original and retry_cnt retransmissions all faulted, and
			// nothing past the faulting PSN executed.
			if sb.ResponderFaults != 8 || sb.FaultDrops != 8 {
				t.Errorf("%d faults, %d drops: want the original and its 7 retransmissions", sb.ResponderFaults, sb.FaultDrops)
			}
			if _, now := s.w.b.qp.PSNs(); now != expect || len(s.w.b.rwcs) != executed {
				t.Errorf("the responder moved on from PSN %#x to %#x (%d messages) while the requester saw no progress",
					expect, now, len(s.w.b.rwcs)-executed)
			}
		})
	}
}
