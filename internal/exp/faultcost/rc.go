package faultcost

// The RC half (npfnic exp fault-cost -transport rc): the stages of an RC
// receive fault (seed 000 §4), measured on the device's clock from its
// trace. Two TCG guests are cabled back to back (testbed.StartRDMAPair):
// npfnic, whose driver registers on-demand paging memory regions, and the
// sender: rdma_rxe (RCConfig.Sender "rxe", the independent one) or a
// second npfnic ("npfnic", whose requester waits out the RNR NAK's timer
// to the microsecond where rxe waits at least a jiffy). Every cycle starts a fresh
// `ib_send_bw --odp` server on npfnic, so its receive buffer is cold: each
// page faults once, one after another, when rxe's SENDs first reach it
// (cold traffic); or a stream into memory the driver evicts pages of at
// random (debugfs rnpf_rate_ppm: rnpf traffic). For each receive fault the
// device records (package trace, paired by trace.RCFaults):
//
//	detected → RNR NAK sent → page request queued → interrupt raised →
//	page response → retransmission received → retransmission accepted
//
// "Accepted" is the responder executing the request packet at the
// faulting PSN (trace.RCResume); "received" is that packet's arrival, so
// response → received is the sender's back-off (the RNR timer) and
// received → accepted the device's own resume.
//
// RCConfig.Prefault sweeps the driver's odp_prefault_pages (the pages one
// fault asks for, RDMA_PREFAULT): each round runs its cycles at every
// value, in an order rotated per round, and the sweep table sets the
// faults, page requests and RNR NAKs a cold cycle took, and the time its
// transfer stood still on them, against the knob. As in the Ethernet half, DIAG_ECHO measures the
// interrupt+doorbell floor in the same guest, in the same rounds.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// RC traffic.
const (
	// RCTrafficCold: a fresh ib_send_bw --odp server every cycle: every
	// page of its receive buffer faults once (first touch of the memory).
	RCTrafficCold = "cold"
	// RCTrafficRNPF: the same, with the driver evicting a random mapped
	// page of the ODP memory regions for RatePPM of the messages received
	// (debugfs rnpf_rate_ppm): faults on pages the process still has.
	RCTrafficRNPF = "rnpf"
)

// RC defaults.
const (
	DefaultRCPolicy     = "rnr"
	DefaultRCSize       = 65536 // 16 pages: 16 faults per cold cycle
	DefaultRCIters      = 20
	DefaultRCRNPFIters  = 2000
	DefaultRCRatePPM    = 10000 // rnpf: 1% of the messages
	DefaultRCCycles     = 20
	DefaultRCEchoRounds = 200
	DefaultRCEchoGap    = 50 * time.Millisecond
	rcPerftestPort      = 18600
	// MaxRCPrefault is the largest odp_prefault_pages (the device's
	// RDMA_PREFAULT bound).
	MaxRCPrefault = hw.RDMAMaxPrefault
)

// The senders of the RC half.
const (
	RCSenderRxe    = "rxe"
	RCSenderNPFNIC = "npfnic"
)

// RCConfig is one run of the RC half.
type RCConfig struct {
	// Env's Images and LogDir are required; without a Trace the run
	// records into its own (the stages come from the trace).
	runner.Env
	// Policy is the responder's receive-fault policy (debugfs
	// rdma_recv_fault): rnr (default) or drop.
	Policy string
	// Traffic is RCTrafficCold (default) or RCTrafficRNPF.
	Traffic string
	// Size and Iters are each cycle's ib_send_bw -s and -n (default 64 KiB
	// × 20; 2000 with rnpf traffic).
	Size, Iters int
	// RatePPM is rnpf_rate_ppm with rnpf traffic (default 10000).
	RatePPM int
	// Cycles are split over Rounds (defaults 20 and 5), as in Config.
	Cycles, Rounds int
	// EchoRounds DIAG_ECHO rounds over the run (default 200; -1: no
	// floor), EchoGap before each (default 50 ms: the idle guest the
	// isolated faults find).
	EchoRounds int
	EchoGap    time.Duration
	// Poll makes npfnic's ib_send_bw busy-poll its CQ; by default it
	// sleeps on completion events (-e), so its guest's one vCPU is idle
	// when a fault's interrupt comes, as for the Ethernet half's pings.
	Poll bool
	// DriverParams are npfnic.ko parameters to set at run time (the pair
	// loads the driver with its defaults): "fault_delay_us=N" for
	// emulated major faults is the one there is.
	DriverParams string
	// MemoryMiB and CPUs are each guest's; default 1024 MiB and 1 vCPU.
	MemoryMiB, CPUs int
	// Sender is the guest that sends into npfnic's ODP memory:
	// RCSenderRxe (default) or RCSenderNPFNIC.
	Sender string
	// Prefault are the odp_prefault_pages values to run, each for Cycles
	// cycles; default the driver's own (nothing is written).
	Prefault []int
}

func (c *RCConfig) setDefaults() {
	c.Sender = cmp.Or(c.Sender, RCSenderRxe)
	c.Policy = cmp.Or(c.Policy, DefaultRCPolicy)
	c.Traffic = cmp.Or(c.Traffic, RCTrafficCold)
	c.Size = cmp.Or(c.Size, DefaultRCSize)
	if c.Iters == 0 {
		c.Iters = DefaultRCIters
		if c.Traffic == RCTrafficRNPF {
			c.Iters = DefaultRCRNPFIters
		}
	}
	if c.RatePPM == 0 && c.Traffic == RCTrafficRNPF {
		c.RatePPM = DefaultRCRatePPM
	}
	c.Cycles = cmp.Or(c.Cycles, DefaultRCCycles)
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	c.EchoRounds = cmp.Or(c.EchoRounds, DefaultRCEchoRounds)
	c.EchoGap = cmp.Or(c.EchoGap, DefaultRCEchoGap)
}

// Validate checks what a user chose (after defaults), before any image
// is built; Run also needs Images.
func (c *RCConfig) Validate() error {
	c.setDefaults()
	if c.LogDir == "" {
		return errors.New("faultcost: RCConfig needs LogDir")
	}
	if c.Policy != "rnr" && c.Policy != "drop" {
		return fmt.Errorf("RC policy %q: want rnr or drop", c.Policy)
	}
	if c.Traffic != RCTrafficCold && c.Traffic != RCTrafficRNPF {
		return fmt.Errorf("RC traffic %q: want %s or %s", c.Traffic, RCTrafficCold, RCTrafficRNPF)
	}
	if c.Traffic == RCTrafficCold && c.RatePPM != 0 {
		return fmt.Errorf("a fault rate (%d ppm) is for %s traffic", c.RatePPM, RCTrafficRNPF)
	}
	if c.Size < 1 || c.Size > 8<<20 || c.Iters < 5 || c.Iters > 1_000_000 || c.RatePPM < 0 || c.RatePPM > 1_000_000 {
		return fmt.Errorf("ib_send_bw -s %d -n %d, rate %d ppm: want 1 B to 8 MiB, 5 to 10^6 messages, 0 to 10^6 ppm", c.Size, c.Iters, c.RatePPM)
	}
	if c.Rounds < 1 || c.Rounds > 100 || c.Cycles < c.Rounds || c.Cycles > 10000 {
		return fmt.Errorf("%d rounds of %d cycles: want 1 to 100 rounds and at least one cycle each", c.Rounds, c.Cycles)
	}
	if c.EchoRounds < -1 || c.EchoRounds > hw.DiagEchoMax || c.EchoRounds > 0 && c.EchoRounds < c.Rounds ||
		c.EchoGap < 0 || c.EchoGap > hw.DiagEchoGapMax*time.Microsecond {
		return fmt.Errorf("%d DIAG_ECHO rounds %v apart for %d rounds: out of range", c.EchoRounds, c.EchoGap, c.Rounds)
	}
	if _, err := c.faultDelay(); err != nil {
		return err
	}
	if c.Sender != RCSenderRxe && c.Sender != RCSenderNPFNIC {
		return fmt.Errorf("RC sender %q: want %s or %s", c.Sender, RCSenderRxe, RCSenderNPFNIC)
	}
	seen := map[int]bool{}
	for _, n := range c.Prefault {
		if n < 1 || n > MaxRCPrefault || seen[n] {
			return fmt.Errorf("odp_prefault_pages %v: want distinct values from 1 to %d", c.Prefault, MaxRCPrefault)
		}
		seen[n] = true
	}
	return nil
}

// senderKind is the kind of guest B.
func (c *RCConfig) senderKind() testbed.RDMAKind {
	if c.Sender == RCSenderNPFNIC {
		return testbed.RDMANPFNIC
	}
	return testbed.RDMARxe
}

// arms are the odp_prefault_pages values a round runs (0: the driver's
// default, left alone).
func (c *RCConfig) arms() []int {
	if len(c.Prefault) == 0 {
		return []int{0}
	}
	return c.Prefault
}

// faultDelay reads fault_delay_us from DriverParams.
func (c *RCConfig) faultDelay() (time.Duration, error) {
	params, err := parseParams(c.DriverParams)
	if err != nil {
		return 0, err
	}
	var d time.Duration
	for _, kv := range params {
		us, err := strconv.Atoi(kv[1])
		if kv[0] != "fault_delay_us" || err != nil || us < 0 || us > 1_000_000 {
			return 0, fmt.Errorf("-driver-params %s=%s: the RC half sets fault_delay_us=N (0 to 10^6) at run time, nothing else", kv[0], kv[1])
		}
		d = time.Duration(us) * time.Microsecond
	}
	return d, nil
}

// parseParams reads "name=value name=value".
func parseParams(s string) ([][2]string, error) {
	var out [][2]string
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" || strings.ContainsAny(k, "/.") {
			return nil, fmt.Errorf("-driver-params %q: want name=value", f)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// trafficText describes a cycle.
func (c *RCConfig) trafficText() string {
	s := fmt.Sprintf("a fresh ib_send_bw --odp server on npfnic (cold memory), %d x %d B SENDs from %s", c.Iters, c.Size, c.senderName())
	if c.Traffic == RCTrafficRNPF {
		s += fmt.Sprintf(", the driver evicting a page for %d ppm of the messages (rnpf_rate_ppm)", c.RatePPM)
	}
	if !c.Poll {
		s += "; npfnic's side waits on completion events (-e)"
	}
	return s
}

// senderName names the sender for the tables.
func (c *RCConfig) senderName() string {
	if c.Sender == RCSenderNPFNIC {
		return "a second npfnic"
	}
	return "rdma_rxe"
}

// RCRound is what one round measured.
type RCRound struct {
	Faults []trace.RCTimeline
	Echo   []time.Duration
	Cycles []RCCycle
}

// RCCycle is one cycle: one cold ib_send_bw.
type RCCycle struct {
	Round int
	// Prefault is the cycle's odp_prefault_pages (0: the driver's
	// default, not set).
	Prefault int
	Faults   []trace.RCTimeline
	// PageRequests and Groups are what the device's PRI sent during the
	// cycle.
	PageRequests, Groups uint64
	Bandwidth            float64 // MB/s, the sender's average; 0: failed
}

// RCResult is what one run of the RC half measured.
type RCResult struct {
	Rounds []RCRound
	// Faults are every round's, in order.
	Faults []trace.RCTimeline
	// Echo are the DIAG_ECHO round trips of the run.
	Echo          []time.Duration
	EchoUnmatched uint64
	// TraceMissed counts events the trace's ring overwrote before the run
	// read them (the faults open then are kept as they were).
	TraceMissed uint64
	// PRI is the device's PRI counters over the run (differences).
	PRI pri.Stats
	// Driver and Rxe are the differences of npfnic's and rxe's rdma
	// statistic counters over the run; DriverEnd is npfnic's at the end
	// (its fault latency percentiles are over the driver's life).
	Driver, Rxe, DriverEnd map[string]int64
	// Bandwidth is every cycle's ib_send_bw average (client side, MB/s).
	Bandwidth []float64
	Cycles    int
	// PerCycle are the cycles, every round's, in order.
	PerCycle []RCCycle
	Warnings []string
	// Load is the host's 1-minute load average at the start and at the
	// end (these machines are shared).
	Load [2]float64
	// Events are the trace's events at the end (the newest the ring
	// holds), for the timeline of one fault.
	Events []trace.Event
}

// RDMA statistic counters the RC table shows.
var (
	RCDriverStats = []string{"messages_in", "responder_faults", "rnr_naks_fault", "fault_drops", "page_requests",
		"page_request_errors", "odp_faults", "odp_pages_mapped", "odp_fault_errors", "odp_rnpf_injected", "odp_rnpf_skipped",
		"ack_timeouts", "retransmits"}
	RCRxeStats = []string{"rcvd_rnr_err", "retry_rnr_exceeded_err", "retry_exceeded_err", "rcvd_seq_err", "completer_retry_err"}
	// RCSenderStats are a sending npfnic's.
	RCSenderStats = []string{"rnr_naks_rcvd", "retransmits", "ack_timeouts", "requester_faults", "tx_frames"}
)

// RunRC runs the RC half.
func RunRC(ctx context.Context, c RCConfig) (*RCResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Images == nil {
		return nil, errors.New("faultcost: RCConfig needs Images")
	}
	if !trace.Compiled {
		return nil, errors.New("faultcost: the RC stages come from the device trace, which this build (npfnic_notrace) leaves out")
	}
	if c.Trace == nil {
		var err error
		if c.Trace, err = trace.New(0); err != nil {
			return nil, err
		}
	}
	w := &rcRun{c: &c, res: &RCResult{Rounds: make([]RCRound, c.Rounds), Load: [2]float64{report.HostLoad()}}}
	c.Logf("%d rounds of %d cycles (%s) and %d DIAG_ECHO rounds %v apart (interrupt -> process context -> doorbell)",
		c.Rounds, c.Cycles/c.Rounds, c.trafficText(), max(c.EchoRounds/c.Rounds, 0), c.EchoGap)
	t := runner.RC(&c.Env, testbed.RDMAPairConfig{A: testbed.RDMANPFNIC, B: c.senderKind(), Name: "fcrc", MemoryMiB: c.MemoryMiB, CPUs: c.CPUs}, w.start)
	if err := runRounds(ctx, &c.Env, t, c.Rounds, w); err != nil {
		return nil, err
	}
	for _, r := range w.res.Rounds {
		w.res.Faults = append(w.res.Faults, r.Faults...)
		w.res.Echo = append(w.res.Echo, r.Echo...)
		w.res.PerCycle = append(w.res.PerCycle, r.Cycles...)
	}
	w.res.Events, _ = c.Trace.Snapshot()
	w.res.Load[1] = report.HostLoad()
	return w.res, nil
}

// rcRun is the RC half's workload: SENDs from the sender into npfnic's
// cold ODP memory, and where the counters stood once the pair was set up.
type rcRun struct {
	c      *RCConfig
	res    *RCResult
	dev    *npfnic.NIC
	faults *trace.RCFaults
	// next is the trace's first event not read yet.
	next       uint64
	npf0, rxe0 map[string]int64
	pri0       pri.Stats
}

// start sets the receive-fault policy, the fault delay and the rate on a
// new pair and notes the counters.
func (w *rcRun) start(ctx context.Context, p *testbed.RDMAPair) error {
	c, npf, rxe := w.c, p.A, p.B
	if npf.NIC == nil {
		return errors.New("faultcost: the npfnic guest's device is not served in this process")
	}
	if err := npf.SetRecvFault(ctx, c.Policy); err != nil {
		return fmt.Errorf("receive-fault policy %s: %w", c.Policy, err)
	}
	delay, _ := c.faultDelay()
	if err := npf.SetFaultDelay(ctx, delay); err != nil {
		return fmt.Errorf("fault_delay_us: %w", err)
	}
	if err := npf.SetRNPFRate(ctx, c.RatePPM); err != nil {
		return fmt.Errorf("rnpf_rate_ppm %d: %w", c.RatePPM, err)
	}
	c.Logf("npfnic %s: receive faults %s (debugfs rdma_recv_fault), rnpf_rate_ppm %d, sender %s%s", npf.Dev, c.Policy, c.RatePPM, c.Sender,
		map[bool]string{true: ", " + c.DriverParams, false: ""}[c.DriverParams != ""])
	npf0, err := npf.Statistic(ctx)
	if err != nil {
		return err
	}
	rxe0, err := rxe.Statistic(ctx)
	if err != nil {
		return err
	}
	_, next, _ := c.Trace.Since(math.MaxUint64) // from now on
	*w = rcRun{c: c, res: w.res, dev: npf.NIC, faults: trace.NewRCFaults(hw.PRQVectorDefault), next: next,
		npf0: npf0, rxe0: rxe0, pri0: npf.NIC.PRI().Stats()}
	return nil
}

// drain feeds the trace's new events to the open faults and returns the
// faults that ended.
func (w *rcRun) drain() []trace.RCTimeline {
	ev, n, missed := w.c.Trace.Since(w.next)
	w.next = n
	var out []trace.RCTimeline
	if missed > 0 {
		w.res.TraceMissed += missed
		out = append(out, w.faults.Flush()...)
	}
	for _, e := range ev {
		w.faults.Add(e)
	}
	return append(out, w.faults.Take()...)
}

// cycles runs the round's share of the cycles at every odp_prefault_pages
// value, in an order rotated per round.
func (w *rcRun) cycles(ctx context.Context, p *testbed.RDMAPair, round int) error {
	c, rr := w.c, &w.res.Rounds[round-1]
	arms := c.arms()
	total := c.Cycles * len(arms)
	for _, prefault := range runner.Rotate(arms, round) {
		if prefault > 0 {
			if err := p.A.WriteDebugfs(ctx, testbed.ODPPrefaultFile, strconv.Itoa(prefault)); err != nil {
				return fmt.Errorf("odp_prefault_pages %d: %w", prefault, err)
			}
		}
		for range c.Cycles / c.Rounds {
			if err := ctx.Err(); err != nil {
				return err
			}
			w.res.Cycles++
			cycle := w.res.Cycles
			pri0 := w.dev.PRI().Stats()
			bw, err := c.cycle(ctx, p, cycle)
			if err != nil {
				w.res.Warnings = append(w.res.Warnings, fmt.Sprintf("cycle %d: %v", cycle, runner.FirstLine(err.Error())))
			}
			if bw > 0 {
				w.res.Bandwidth = append(w.res.Bandwidth, bw)
			}
			got := w.drain()
			pri1 := w.dev.PRI().Stats()
			rr.Faults = append(rr.Faults, got...)
			rr.Cycles = append(rr.Cycles, RCCycle{Round: round, Prefault: prefault, Faults: got, Bandwidth: bw,
				PageRequests: pri1.Requests - pri0.Requests, Groups: pri1.Groups - pri0.Groups})
			resumed := 0
			for _, tl := range got {
				if tl.Resume.Kind != 0 {
					resumed++
				}
			}
			msg := fmt.Sprintf("cycle %d/%d: %d faults ended (%d accepted after their page), %d page requests, %.1f MB/s", cycle, total, len(got), resumed,
				pri1.Requests-pri0.Requests, bw)
			if prefault > 0 {
				msg = fmt.Sprintf("odp_prefault_pages %d, %s", prefault, msg)
			}
			if err != nil {
				msg += "; " + runner.FirstLine(err.Error())
			}
			c.Logf("%s", msg)
		}
	}
	return nil
}

func (w *rcRun) floor(ctx context.Context, p *testbed.RDMAPair, round int) error {
	rr := &w.res.Rounds[round-1]
	rr.Echo = append(rr.Echo, floorRound(ctx, p.A, w.dev, w.c.EchoRounds/w.c.Rounds, w.c.EchoGap, round, w.c.Logf, &w.res.Warnings)...)
	return nil
}

// finish closes the faults still open (none, normally: every cycle's
// transfer ended) and adds what the pair counted.
func (w *rcRun) finish(ctx context.Context, p *testbed.RDMAPair) {
	last := &w.res.Rounds[len(w.res.Rounds)-1]
	last.Faults = append(last.Faults, w.drain()...)
	last.Faults = append(last.Faults, w.faults.Flush()...)
	_, w.res.EchoUnmatched = w.dev.EchoRoundTrips()
	w.res.PRI = priAdd(w.res.PRI, w.dev.PRI().Stats(), w.pri0)
	if npf1, err := p.A.Statistic(ctx); err == nil {
		w.res.Driver, w.res.DriverEnd = statDelta(w.npf0, npf1), npf1
	} else {
		w.res.Warnings = append(w.res.Warnings, "npfnic rdma statistic: "+err.Error())
	}
	if rxe1, err := p.B.Statistic(ctx); err == nil {
		w.res.Rxe = statDelta(w.rxe0, rxe1)
	} else {
		w.res.Warnings = append(w.res.Warnings, "the sender's rdma statistic: "+err.Error())
	}
	for side, g := range map[string]*testbed.RDMAGuest{"a": p.A, "b": p.B} {
		if out, err := g.Shell(ctx, "dmesg | tail -n 50"); err == nil {
			_ = os.WriteFile(filepath.Join(p.LogDir, side, "dmesg-tail.txt"), []byte(out+"\n"), 0o644)
		}
	}
}

// cycle runs one ib_send_bw --odp between the guests, npfnic (A) the
// server, and returns the client's average bandwidth. The sender, npfnic
// or not, registers ordinary memory: only the receiver faults.
func (c *RCConfig) cycle(ctx context.Context, p *testbed.RDMAPair, i int) (float64, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	pt := workload.Perftest{Tool: "ib_send_bw", Size: c.Size, Iters: c.Iters, Port: rcPerftestPort + i%100}
	res, err := p.Perftest(cctx, p.A, p.B, testbed.PerftestRun{Perftest: pt, Logf: c.Logf,
		Side: func(g *testbed.RDMAGuest, q *workload.Perftest) {
			if g == p.A {
				q.ODP = true
				if !c.Poll {
					q.Extra = []string{"-e"}
				}
			}
		}})
	if err != nil {
		return 0, err
	}
	return res.Rows[len(res.Rows)-1].AvgMBs, nil
}

// statDelta is b - a for every counter of b.
func statDelta(a, b map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range b {
		d[k] = v - a[k]
	}
	return d
}
