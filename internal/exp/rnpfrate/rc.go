package rnpfrate

// The RC half (seed 000 Figure 10, right): Debian's unmodified ib_send_bw
// streams SENDs from a sender in one TCG guest into npfnic in another
// (testbed.StartRDMAPair: npfnic's guest A serves with --odp, so its
// buffers are on-demand paged; the sender's guest B, without ODP, is the
// client). The sender is a second npfnic (its requester waits out an RNR
// NAK's timer, IBA's table, to the microsecond) or rdma_rxe (at least a
// jiffy), each on its own pair of guests, one after the other.
// The driver injects synthetic receive faults per message the device
// executed into an ODP MR (rnpf_rate_ppm: a random mapped page of the MR
// evicted as an invalidation would), so that the next SEND into that page
// takes the whole fault path: translation fault, page request, driver,
// page response. The responder answers the fault with an RNR NAK (policy
// rnr; the sender retransmits after its RNR timer) or drops the packet
// (policy drop; the sender retransmits after its local ACK timeout).
//
// One ib_send_bw runs for all the points of a policy in a round (a
// session), so its memory region is warmed once, at rate 0, before the
// first window, like the paper's receive ring that is "pre-faulted at
// startup"; after every window at a non-zero rate the rate goes back to 0
// and the evicted pages fault back (rewarm) before the next window. A
// window is measured on the device's counters, read at its two ends:
// messages_in (the SENDs npfnic's responder executed) over the window's
// time is the throughput, and the sender's own counters say what it saw.
// The rounds interleave as in the Ethernet half: the policy order rotates
// every round, the rates go up on odd rounds and down on even ones.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// Perftest's transport timers on the sender (perftest_parameters.h:
// DEF_QP_TIME, MIN_RNR_TIMER) and rdma_rxe's handling of them.
const (
	// PerftestQPTimeout is perftest's local ACK timeout code: 4.096 µs ·
	// 2^14 ≈ 67 ms, how long rxe waits before it retransmits what a drop
	// lost.
	PerftestQPTimeout = 14
	// PerftestMinRNRTimer is the RNR timer code perftest gives its QPs,
	// 0.64 ms, which npfnic's RNR NAKs carry; rxe waits at least one
	// jiffy (4 ms at the guest kernel's HZ=250) before each RNR retry.
	PerftestMinRNRTimer = 12
)

// rcWarmWindow is one look at a session while it warms: messages must
// flow through it without a fault. rcWarmTries bounds the looks.
const (
	rcWarmWindow = time.Second
	rcWarmTries  = 30
	// rcPort is the first perftest port; every session takes the next,
	// so that a server left behind never answers a later client.
	rcPort = 18900
)

// RCCounters are what the counters of both guests grew by during a window.
type RCCounters struct {
	// npfnic (rdma statistic: the device's and the driver's counters).
	Messages          int64 // messages_in: SENDs the responder executed
	Injected, Skipped int64 // odp_rnpf_injected, odp_rnpf_skipped
	Faults            int64 // responder_faults
	RNRNaks           int64 // rnr_naks_fault
	FaultDrops        int64 // fault_drops
	NoWQENaks         int64 // rnr_naks_no_wqe: a SEND found no receive posted
	FaultErrors       int64 // page_request_errors + odp_fault_errors
	// The sender's (rxe's names; a sending npfnic's in senderCounters).
	SenderRNR           int64 // rcvd_rnr_err: RNR NAKs received
	SenderRetries       int64 // completer_retry_err: retransmissions started (ACK timeouts)
	SenderRetryExceeded int64 // retry_exceeded_err + retry_rnr_exceeded_err: the sender gave up
}

// senderCounters are the sender's counters of RNR NAKs received, ACK
// timeouts and given-up retries, by the sender's kind. npfnic counts no
// exhausted retries apart: its QP goes to the error state, which
// perftest reports.
var senderCounters = map[string][3][]string{
	SenderRxe:    {{"rcvd_rnr_err"}, {"completer_retry_err"}, {"retry_exceeded_err", "retry_rnr_exceeded_err"}},
	SenderNPFNIC: {{"rnr_naks_rcvd"}, {"ack_timeouts"}, nil},
}

// RCCountersOf is the growth of the counters between two readings of
// npfnic's (npf) and the sender's (snd, of kind sender) rdma statistic;
// a counter that went backwards counts from 0.
func RCCountersOf(npf0, npf1, snd0, snd1 map[string]int64, sender string) RCCounters {
	d := func(before, after map[string]int64, names ...string) int64 {
		var sum int64
		for _, k := range names {
			if after[k] < before[k] {
				sum += after[k]
			} else {
				sum += after[k] - before[k]
			}
		}
		return sum
	}
	return RCCounters{
		Messages: d(npf0, npf1, "messages_in"), Injected: d(npf0, npf1, "odp_rnpf_injected"),
		Skipped: d(npf0, npf1, "odp_rnpf_skipped"), Faults: d(npf0, npf1, "responder_faults"),
		RNRNaks: d(npf0, npf1, "rnr_naks_fault"), FaultDrops: d(npf0, npf1, "fault_drops"),
		NoWQENaks:   d(npf0, npf1, "rnr_naks_no_wqe"),
		FaultErrors: d(npf0, npf1, "page_request_errors", "odp_fault_errors"),
		SenderRNR:   d(snd0, snd1, senderCounters[sender][0]...), SenderRetries: d(snd0, snd1, senderCounters[sender][1]...),
		SenderRetryExceeded: d(snd0, snd1, senderCounters[sender][2]...),
	}
}

// Rate is the injected faults per million messages (0 without messages).
func (k RCCounters) Rate() float64 {
	if k.Messages == 0 {
		return 0
	}
	return float64(k.Injected) * testbed.PPM / float64(k.Messages)
}

// RCResult is one window at one point.
type RCResult struct {
	Point
	Round int
	// MsgSize is the SEND size, Seconds the window's length.
	MsgSize int
	Seconds float64
	// Counters grew by this during the window.
	Counters RCCounters
	// Rewarm is the faults it took to map back what the window left
	// evicted (outside the measurement).
	Rewarm   int64
	HostLoad float64
	Err      error
}

// MsgsPerSec is the SENDs npfnic executed per second of the window.
func (r RCResult) MsgsPerSec() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Counters.Messages) / r.Seconds
}

// MBps is the window's throughput in 10^6 bytes per second, as perftest
// counts (0 for a failed window).
func (r RCResult) MBps() float64 {
	if r.Err != nil {
		return 0
	}
	return r.MsgsPerSec() * float64(r.MsgSize) / 1e6
}

// RunRC runs the RC half and returns every window's result; a failed
// window does not stop the others (look at RCResult.Err). Each sender
// runs on its own pair of guests, its logs in LogDir/SENDER; the pair is
// booted once and again if one dies; a session whose perftest ended
// starts again for the next point.
func RunRC(ctx context.Context, c Config) ([]RCResult, error) {
	if err := c.ready(TransportRC); err != nil {
		return nil, err
	}
	var results []RCResult
	for _, sender := range c.Senders {
		sc := c
		sc.LogDir = filepath.Join(c.LogDir, sender)
		c.Logf("sender %s", sender)
		rs, err := sc.runSender(ctx, sender)
		results = append(results, rs...)
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

// senderKind is the kind of the sending guest.
func senderKind(sender string) testbed.RDMAKind {
	if sender == SenderNPFNIC {
		return testbed.RDMANPFNIC
	}
	return testbed.RDMARxe
}

// runSender runs every point with one sender.
func (c *Config) runSender(ctx context.Context, sender string) ([]RCResult, error) {
	var (
		session setup[*testbed.RDMAPair, *rcSession]
		port    = rcPort
		results []RCResult
	)
	stop := func(s *rcSession) { s.stop(ctx) }
	err := runner.Loop[*testbed.RDMAPair, Point]{
		Env:       &c.Env,
		Transport: runner.RC(&c.Env, testbed.RDMAPairConfig{A: testbed.RDMANPFNIC, B: senderKind(sender), Name: "rnpfrc", MemoryMiB: c.MemoryMiB, CPUs: c.CPUs}),
		Steps:     c.plan(),
		Run: func(ctx context.Context, pair *testbed.RDMAPair, st runner.Step[Point], label string) error {
			st.Arm.Sender = sender
			r := RCResult{Point: st.Arm, Round: st.Round, MsgSize: c.MsgSize}
			s, err := session.ensure(pair, st, func() (*rcSession, error) {
				port++
				return c.startSession(ctx, pair, st.Arm.Policy, st.Round, port, len(c.points(st.Arm.Policy, st.Round)), sender)
			}, stop)
			if r.Err = err; err == nil {
				c.measureRC(ctx, pair, s, &r, label)
				if s.exited() {
					c.Logf("%s: ib_send_bw ended (outputs in %s)", label, s.logBase)
					session.release(stop)
				}
			}
			r.HostLoad = report.HostLoad()
			results = append(results, r)
			return r.Err
		},
		Release: func(context.Context, *testbed.RDMAPair) { session.release(stop) },
	}.Go(ctx)
	return results, err
}

// ReportRC is what the runner prints and writes of the RC half, with the
// virtual-time sweep beside it when sim is set.
func ReportRC(c Config, results []RCResult, sim *Sim) *runner.Outcome {
	write := func(dir string, c Config, results []RCResult) ([]string, error) {
		return WriteRCOutputs(dir, c, results, sim)
	}
	return runner.Jobs(c, results, func(r RCResult) error { return r.Err }, "windows", c.LogDir, RCTable, write)
}

// rcSession is one ib_send_bw between the pair, running while a round
// measures one policy.
type rcSession struct {
	pair    *testbed.RDMAPair
	sender  string
	done    chan struct{} // closed once both sides exited
	err     error         // RunClientServer's, once done
	logBase string        // where the outputs go
	stopped bool
}

// exited reports whether perftest is no longer running.
func (s *rcSession) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// sessionTime is how long a session's ib_send_bw is asked to run: far
// more than its points need; stop ends it.
func (c *Config) sessionTime(points int) time.Duration {
	return time.Duration(points+2)*(c.Time+30*time.Second) + 2*time.Minute
}

// startSession sets the policy, minor faults and rate 0, starts
// ib_send_bw from the sender into npfnic and waits until its memory
// region is warm: messages flow with no fault.
func (c *Config) startSession(ctx context.Context, pair *testbed.RDMAPair, policy string, round, port, points int, sender string) (*rcSession, error) {
	npf, snd := pair.A, pair.B
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, set := range []func() error{
		func() error { return npf.SetRecvFault(sctx, policy) },
		func() error { return npf.SetFaultDelay(sctx, 0) },
		func() error { return npf.SetRNPFRate(sctx, 0) },
	} {
		if err := set(); err != nil {
			return nil, err
		}
	}
	pt := workload.Perftest{Tool: "ib_send_bw", Size: c.MsgSize, Duration: c.sessionTime(points), Port: port}
	s := &rcSession{pair: pair, done: make(chan struct{}), sender: sender,
		logBase: filepath.Join(c.LogDir, fmt.Sprintf("round%d-%s-port%d", round, policy, port))}
	c.Logf("%s: ib_send_bw --odp -s %d from %s into npfnic (port %d), warming its memory region at rate 0", policy, c.MsgSize, sender, port)
	go func() {
		defer close(s.done)
		// Bounded by perftest's own duration (and a margin), not by ctx: stop
		// ends it.
		rctx, rcancel := context.WithTimeout(context.Background(), pt.Duration+2*time.Minute)
		defer rcancel()
		res, err := pair.Perftest(rctx, npf, snd, testbed.PerftestRun{Perftest: pt, Side: testbed.ODPOn(npf), Logf: c.Logf})
		s.err = err
		_ = os.MkdirAll(filepath.Dir(s.logBase), 0o755)
		_ = os.WriteFile(s.logBase+"-server.txt", []byte(res.ServerOut), 0o644)
		_ = os.WriteFile(s.logBase+"-client.txt", []byte(res.ClientOut), 0o644)
	}()
	n, err := c.warmRC(ctx, s)
	if err != nil {
		s.stop(ctx)
		return nil, fmt.Errorf("warming ib_send_bw's memory region: %w", err)
	}
	c.Logf("%s: memory region warm after %d faults", policy, n)
	return s, nil
}

// stop ends the session's perftest on both guests and waits until
// RunClientServer returned. A nil session is fine.
func (s *rcSession) stop(ctx context.Context) {
	if s == nil || s.stopped {
		return
	}
	s.stopped = true
	if !s.exited() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		for _, g := range s.pair.Guests() {
			_, _ = g.Kill(sctx, "ib_send_bw")
		}
		cancel()
	}
	select {
	case <-s.done:
	case <-time.After(time.Minute):
	}
}

// sessionError says why a session ended.
func (s *rcSession) sessionError() error {
	if s.err != nil {
		return fmt.Errorf("ib_send_bw ended: %s (outputs in %s-*.txt)", runner.FirstLine(s.err.Error()), s.logBase)
	}
	return fmt.Errorf("ib_send_bw ended (outputs in %s-*.txt)", s.logBase)
}

// warmRC waits until a window of rcWarmWindow sees messages and no
// fault, and returns the faults it saw before.
func (c *Config) warmRC(ctx context.Context, s *rcSession) (int64, error) {
	var faults int64
	npf := s.pair.A
	for range rcWarmTries {
		if s.exited() {
			return faults, s.sessionError()
		}
		a, _, err := statistic(ctx, npf)
		if err != nil {
			return faults, err
		}
		if err := sleep(ctx, s, rcWarmWindow); err != nil {
			return faults, err
		}
		b, _, err := statistic(ctx, npf)
		if err != nil {
			return faults, err
		}
		k := RCCountersOf(a, b, nil, nil, s.sender)
		faults += k.Faults
		if k.Messages > 0 && k.Faults == 0 {
			return faults, nil
		}
	}
	return faults, fmt.Errorf("no window of %v without a fault (or without a message) at rate 0 in %d tries; %d faults", rcWarmWindow, rcWarmTries, faults)
}

// sleep waits d, or less if the context ends or the session's perftest
// exits (an error, either way).
func sleep(ctx context.Context, s *rcSession, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return s.sessionError()
	}
}

// statistic reads a guest's rdma statistic and returns it with the time
// of the reading: the middle of the call.
func statistic(ctx context.Context, g *testbed.RDMAGuest) (map[string]int64, time.Time, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t0 := time.Now()
	st, err := g.Statistic(sctx)
	t1 := time.Now()
	if err != nil {
		return nil, t1, fmt.Errorf("rdma statistic on %s: %w", g.Kind, err)
	}
	return st, t0.Add(t1.Sub(t0) / 2), nil
}

// statistics reads npfnic's and the sender's rdma statistic, in that
// order or (sndFirst) the other, and returns them with the time of
// npfnic's reading, which times a window.
func statistics(ctx context.Context, npf, snd *testbed.RDMAGuest, sndFirst bool) (n, x map[string]int64, t time.Time, err error) {
	if sndFirst {
		if x, _, err = statistic(ctx, snd); err != nil {
			return nil, nil, t, err
		}
	}
	if n, t, err = statistic(ctx, npf); err != nil || sndFirst {
		return n, x, t, err
	}
	x, _, err = statistic(ctx, snd)
	return n, x, t, err
}

// measureRC measures one window at r's point and fills in r; afterwards
// the rate is back at 0, faults are minor, and the region is warm again.
func (c *Config) measureRC(ctx context.Context, pair *testbed.RDMAPair, s *rcSession, r *RCResult, label string) {
	npf, snd := pair.A, pair.B
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if r.PPM > 0 {
		if r.Err = inject(sctx, npf, r.Point, c.MajorDelay); r.Err != nil {
			return
		}
	}
	r.Err = func() error {
		n0, x0, t0, err := statistics(ctx, npf, snd, false)
		if err != nil {
			return err
		}
		c.Logf("%s: %v window ...", label, c.Time)
		if err := sleep(ctx, s, c.Time); err != nil {
			return err
		}
		// The sender first: npfnic's readings time the window, which
		// then holds all that the sender counted in it.
		n1, x1, t1, err := statistics(ctx, npf, snd, true)
		if err != nil {
			return err
		}
		r.Seconds = t1.Sub(t0).Seconds()
		r.Counters = RCCountersOf(n0, n1, x0, x1, s.sender)
		if s.exited() {
			return s.sessionError()
		}
		return nil
	}()
	if r.Err == nil {
		k := r.Counters
		c.Logf("%s: %.2f MB/s (%.0f messages/s); %d faults injected (%.0f ppm of %d messages), %d skipped; responder faults %d, RNR NAKs %d, drops %d; %s: RNR NAKs %d, retries %d, gave up %d",
			label, r.MBps(), r.MsgsPerSec(), k.Injected, k.Rate(), k.Messages, k.Skipped, k.Faults, k.RNRNaks, k.FaultDrops, s.sender, k.SenderRNR, k.SenderRetries, k.SenderRetryExceeded)
		if k.FaultErrors > 0 || k.SenderRetryExceeded > 0 {
			r.Err = fmt.Errorf("%d faults failed, the sender gave up %d times", k.FaultErrors, k.SenderRetryExceeded)
		}
	}
	if r.PPM == 0 {
		return
	}
	// Back to rate 0 and minor faults, and fault back what is still
	// evicted, so that the next window starts warm.
	if err := injectNone(sctx, npf); err != nil && r.Err == nil {
		r.Err = err
	}
	if s.exited() {
		return
	}
	if n, err := c.warmRC(ctx, s); err != nil && r.Err == nil {
		r.Err = fmt.Errorf("rewarming the memory region: %w", err)
	} else {
		r.Rewarm = n
	}
}

// rcHeaderLines describe the RC half (Header's counterpart).
func rcHeaderLines(c Config) string {
	return fmt.Sprintf("rNPF-rate sweep, RC (seed 000 Figure 10, right): ib_send_bw --odp, %d-byte SENDs from %s into npfnic (%s guests, a pair per sender),\n"+
		"one perftest per policy and round, the throughput of %v windows on npfnic's counters (messages_in);\n"+
		"synthetic receive faults per message (driver rnpf_rate_ppm: a random mapped page of the ODP MR evicted, as an invalidation would);\n"+
		"the responder answers a receive fault with an RNR NAK (rnr) or drops it (drop). The sender: after a drop, perftest's ACK timeout\n"+
		"(qp_timeout %d: 4.096 µs · 2^%d ≈ %.0f ms); after an RNR NAK, perftest's min_rnr_timer %d (0.64 ms), which npfnic waits to the microsecond\n"+
		"and rxe rounds up to at least 4 ms per RNR retry (a jiffy, HZ=250);\n"+
		"minor faults resolved at once, major after fault_delay_us = %v; memory region warmed at rate 0 before every window; median of %d rounds (min-max)\n",
		c.MsgSize, strings.Join(c.Senders, " and "), c.AccelName(), c.Time, PerftestQPTimeout, PerftestQPTimeout, 4.096e-3*float64(int(1)<<PerftestQPTimeout), PerftestMinRNRTimer, c.MajorDelay, c.Rounds)
}
