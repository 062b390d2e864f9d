// Package rnpfrate is the rNPF-frequency experiment (npfnic exp
// rnpf-rate), seed 000 §6.4 Figure 10: the steady-state throughput of a
// TCP stream into a receiver whose RX ring takes synthetic receive faults
// (rNPFs) at a given rate per packet, with the backup ring against
// dropping, for minor and major faults, relative to the fault-free optimum.
//
// The stream is iperf3 from the host (a tap in a network namespace) into a
// TCG guest's npfnic. The faults take the real path: the driver
// (rnpf_rate_ppm) takes the translation of a random posted RX buffer away
// with an invalidation and completion, the device faults when it reaches
// that slot, raises a page request, and the driver answers it (at once:
// minor; after fault_delay_us: major). Pin maps every buffer beforehand and
// has no translation to take away: it is the optimum, measured once per
// round.
//
// As in the paper, the ring is warmed before measuring (an iperf3 stream
// at rate 0 until a run sees no fault), so the cold ring does not count;
// after each run at a non-zero rate the buffers still taken away are
// faulted back the same way, so no run inherits its predecessor's faults.
// Policies are loaded once per round, in turn, the order rotating by one
// every round; the rates of a policy run one after another, in ascending
// order on odd rounds and descending on even ones, so that a drift of the
// shared host (or of the guest over a boot) lines up with neither the
// policy nor the rate.
//
// That is the Ethernet half (Figure 10, left). The RC half (-transport rc,
// Figure 10, right: ib_send_bw into npfnic, RNR NAK against drop) is in
// rc.go; the two share the configuration, the plan of the rounds and the
// per-policy setup (setup.go), and run on package runner's loop.
package rnpfrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// Policies are the RX policies in the order a round loads them.
var Policies = []string{"pin", "drop", "backup"}

// RCSenders are the guests that can send into npfnic in the RC half:
// a second npfnic, whose requester waits out an RNR NAK's timer to the
// microsecond, and rdma_rxe, which waits at least a jiffy.
var RCSenders = []string{SenderNPFNIC, SenderRxe}

// The RC senders.
const (
	SenderNPFNIC = "npfnic"
	SenderRxe    = "rxe"
)

// RCPolicies are the RC responder's receive-fault policies (the driver's
// rdma_recv_fault) in the order a round runs them.
var RCPolicies = []string{testbed.RecvFaultRNR, testbed.RecvFaultDrop}

// Faults are the fault kinds: minor (resolved at once) and major (an
// emulated disk access of MajorDelay).
var Faults = []string{"minor", "major"}

// Transports: Ethernet (TCP through the backup ring or drop) and RC
// (SEND through RNR NAK or drop).
const (
	TransportEth = "eth"
	TransportRC  = "rc"
)

// DefaultRates are Figure 10's rNPF rates per packet (RC: per message),
// with 0.
var DefaultRates = []float64{0, 1e-4, 1e-3, 1e-2, 1e-1}

// Defaults.
const (
	DefaultTime   = 5 * time.Second
	DefaultRounds = 3
	// DefaultRCTime is the length of one RC measurement: about 150,000
	// messages of DefaultRCMsgSize under TCG, 15 at a rate of 10⁻⁴.
	DefaultRCTime = 10 * time.Second
	// DefaultRCMsgSize is the RC SEND size: one packet at the path MTU of
	// the cable (1024), so that a rate per message is one per packet as
	// in `npfnic exp rnr`, and the most messages per second.
	DefaultRCMsgSize = 1024
	// DefaultMajorDelay is the paper's major fault, a disk access: "T is
	// 10 milliseconds (major page fault)" (seed 000 §3).
	DefaultMajorDelay = 10 * time.Millisecond
)

// Config is one run of the experiment.
type Config struct {
	// Env's Images and LogDir are required to run.
	runner.Env
	// Transport is TransportEth (default) or TransportRC.
	Transport string
	// Policies to compare; default Policies (RC: RCPolicies). Pin is the
	// optimum every ratio is taken against; without it there are no
	// ratios. RC's optimum is rate 0.
	Policies []string
	// Rates are rNPFs per received packet (RC: per message), 0 to 1;
	// default DefaultRates. They are applied in parts per million.
	Rates []float64
	// Faults are the fault kinds to run at each non-zero rate; default
	// Faults.
	Faults []string
	// MajorDelay is fault_delay_us for major faults; default 10 ms.
	MajorDelay time.Duration
	// Time is the length of one iperf3 run (whole seconds); default 5 s.
	// RC: of one measurement window, default DefaultRCTime.
	Time time.Duration
	// Rounds repeats everything, policies interleaved; default 3.
	Rounds int
	// DriverExtra is appended to every insmod (Ethernet only).
	DriverExtra string
	// MsgSize is RC's SEND size in bytes; default DefaultRCMsgSize.
	MsgSize int
	// MemoryMiB and CPUs are the guest's (RC: each guest's); default
	// 1024 MiB and 1 vCPU.
	MemoryMiB, CPUs int
	// Senders are RC's sending guests, each run on its own pair, one
	// after the other; default RCSenders.
	Senders []string
}

func (c *Config) setDefaults() {
	c.Transport = cmp.Or(c.Transport, TransportEth)
	rc := c.Transport == TransportRC
	if len(c.Policies) == 0 {
		c.Policies = slices.Clone(Policies)
		if rc {
			c.Policies = slices.Clone(RCPolicies)
		}
	}
	if len(c.Rates) == 0 {
		c.Rates = slices.Clone(DefaultRates)
	}
	if len(c.Faults) == 0 {
		c.Faults = slices.Clone(Faults)
	}
	c.MajorDelay = cmp.Or(c.MajorDelay, DefaultMajorDelay)
	if c.Time == 0 {
		c.Time = DefaultTime
		if rc {
			c.Time = DefaultRCTime
		}
	}
	if c.MsgSize == 0 && rc {
		c.MsgSize = DefaultRCMsgSize
	}
	if len(c.Senders) == 0 && rc {
		c.Senders = slices.Clone(RCSenders)
	}
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	c.MemoryMiB = cmp.Or(c.MemoryMiB, 1024)
	c.CPUs = cmp.Or(c.CPUs, 1)
}

// Validate checks what a user chose (after defaults); Run checks the rest.
func (c *Config) Validate() error {
	c.setDefaults()
	policies, unit := Policies, "packet"
	switch c.Transport {
	case TransportEth:
		if c.MsgSize != 0 {
			return errors.New("a message size is for -transport rc")
		}
		if len(c.Senders) > 0 {
			return errors.New("senders are for -transport rc")
		}
	case TransportRC:
		policies, unit = RCPolicies, "message"
		if c.DriverExtra != "" {
			return errors.New("-transport rc loads the driver with its defaults: no extra driver parameters")
		}
		if c.MsgSize < 1 || c.MsgSize > 1<<20 {
			return fmt.Errorf("message size %d: want 1 byte to 1 MiB", c.MsgSize)
		}
		if err := unique("sender", c.Senders, RCSenders); err != nil {
			return err
		}
	default:
		return fmt.Errorf("transport %q: want %s or %s", c.Transport, TransportEth, TransportRC)
	}
	if err := unique("policy", c.Policies, policies); err != nil {
		return err
	}
	if err := unique("fault kind", c.Faults, Faults); err != nil {
		return err
	}
	seen := map[int]bool{}
	for _, r := range c.Rates {
		ppm := PPM(r)
		if r < 0 || r > 1 || (r > 0 && ppm == 0) {
			return fmt.Errorf("rate %g: want 0, or from 1e-6 to 1 per %s", r, unit)
		}
		if seen[ppm] {
			return fmt.Errorf("rate %g listed twice", r)
		}
		seen[ppm] = true
	}
	if c.MajorDelay < time.Microsecond || c.MajorDelay > time.Second {
		return fmt.Errorf("major delay %v: want 1 µs to 1 s", c.MajorDelay)
	}
	if c.Time < time.Second || c.Time > time.Hour || c.Time%time.Second != 0 {
		return fmt.Errorf("run time %v: want whole seconds from 1 s to 1 h", c.Time)
	}
	if c.Rounds < 1 || c.Rounds > 100 {
		return fmt.Errorf("rounds %d: want 1 to 100", c.Rounds)
	}
	return nil
}

func unique(what string, got, allowed []string) error {
	seen := map[string]bool{}
	for _, g := range got {
		if !slices.Contains(allowed, g) {
			return fmt.Errorf("unknown %s %q (want %s)", what, g, strings.Join(allowed, ", "))
		}
		if seen[g] {
			return fmt.Errorf("%s %q listed twice", what, g)
		}
		seen[g] = true
	}
	return nil
}

// PPM converts a rate per packet to the driver's parts per million.
func PPM(rate float64) int { return int(rate*testbed.PPM + 0.5) }

// ParseRates parses "0,1e-4,0.01" into rates per packet.
func ParseRates(s string) ([]float64, error) {
	rates, err := runner.ParseFloats(s, "rate")
	return runner.NonEmpty(rates, err, "rate")
}

// Point is what one measurement varies: the policy, the fault kind and
// the rate, and in the RC half the sender. Pin has neither rate nor kind;
// rate 0 has no kind (no fault to be minor or major), and is shared by
// both kinds' curves.
type Point struct {
	Policy string
	Fault  string // "minor", "major", or "" at rate 0 and for pin
	PPM    int
	Sender string // RC: SenderNPFNIC or SenderRxe; "" for Ethernet
}

func (p Point) String() string {
	var s string
	switch {
	case p.Policy == "pin":
		s = "pin"
	case p.PPM == 0:
		s = p.Policy + " rate 0"
	default:
		s = fmt.Sprintf("%s %s %s", p.Policy, p.Fault, RateText(p.PPM))
	}
	if p.Sender != "" {
		s = p.Sender + "->npfnic " + s
	}
	return s
}

// RateText shows a rate in ppm as a probability per packet ("1e-03").
func RateText(ppm int) string {
	if ppm == 0 {
		return "0"
	}
	return strconv.FormatFloat(float64(ppm)/testbed.PPM, 'g', 3, 64)
}

// Result is one iperf3 run at one point.
type Result struct {
	Point
	Round int
	// Iperf is the receiver's count (nil when the run failed).
	Iperf *workload.Iperf
	// Counters grew by this during the run.
	Counters testbed.RNPFCounters
	// HostRetrans and GuestRetrans are the TCP segments each end
	// retransmitted during the run; HostTimeouts the host's RTO expiries.
	HostRetrans, GuestRetrans, HostTimeouts int64
	// Rewarm is the faults it took to map back the buffers the run left
	// taken away (outside the measurement).
	Rewarm   uint64
	HostLoad float64
	Err      error
}

// Mbps is the run's throughput (0 for a failed run).
func (r Result) Mbps() float64 {
	if r.Iperf == nil {
		return 0
	}
	return r.Iperf.Mbps
}

// policyOrder is the order round loads the policies in: Policies rotated
// left by round-1.
func (c *Config) policyOrder(round int) []string { return runner.Rotate(c.Policies, round) }

// plan lists every point of every round: the policies in the round's
// order, each with its points (one driver load or perftest session).
func (c *Config) plan() []runner.Step[Point] {
	return runner.Rounds(c.Rounds, func(round int) []Point {
		var points []Point
		for _, p := range c.policyOrder(round) {
			points = append(points, c.points(p, round)...)
		}
		return points
	})
}

// ready validates c for the half that runs on transport.
func (c *Config) ready(transport string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Transport != transport {
		return fmt.Errorf("rnpfrate: -transport %s does not run here (Run is the Ethernet half, RunRC the RC one)", c.Transport)
	}
	if c.Images == nil || c.LogDir == "" {
		return errors.New("rnpfrate: Config needs Images and LogDir")
	}
	return nil
}

// points lists one round's points of policy, in the round's rate order.
func (c *Config) points(policy string, round int) []Point {
	if policy == "pin" {
		return []Point{{Policy: "pin"}}
	}
	var out []Point
	var rates []int
	for _, r := range c.Rates {
		if ppm := PPM(r); ppm == 0 {
			out = append(out, Point{Policy: policy})
		} else {
			rates = append(rates, ppm)
		}
	}
	for _, f := range c.Faults {
		for _, ppm := range runner.Alternate(rates, round) {
			out = append(out, Point{Policy: policy, Fault: f, PPM: ppm})
		}
	}
	return out
}

// Run runs the Ethernet experiment and returns every run's result; a
// failed run does not stop the others (look at Result.Err). The guest is
// booted once and rebooted if it dies. RunRC runs the RC half.
func Run(ctx context.Context, c Config) ([]Result, error) {
	if err := c.ready(TransportEth); err != nil {
		return nil, err
	}
	var loaded setup[*testbed.Testbed, string]
	var results []Result
	err := runner.Loop[*testbed.Testbed, Point]{
		Env: &c.Env,
		Transport: runner.Ethernet(&c.Env, testbed.Config{Name: "rnpfrate", MemoryMiB: c.MemoryMiB, CPUs: c.CPUs},
			runner.ForgetTCPMetrics, func(ctx context.Context, tb *testbed.Testbed) error {
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				return workload.StartGuestIperf3Server(sctx, tb.VM)
			}),
		Steps: c.plan(),
		Run: func(ctx context.Context, tb *testbed.Testbed, s runner.Step[Point], label string) error {
			r := Result{Point: s.Arm, Round: s.Round}
			_, r.Err = loaded.ensure(tb, s, func() (string, error) { return s.Arm.Policy, c.load(ctx, tb, s.Arm.Policy) }, nil)
			if r.Err == nil {
				c.measure(ctx, tb, &r, label)
			}
			r.HostLoad = report.HostLoad()
			results = append(results, r)
			return r.Err
		},
	}.Go(ctx)
	return results, err
}

// Report is what the runner prints and writes of the Ethernet half.
func Report(c Config, results []Result) *runner.Outcome {
	return runner.Jobs(c, results, func(r Result) error { return r.Err }, "runs", c.LogDir, Table, WriteOutputs)
}

// DriverParams are the module parameters of a policy's load: the rate
// starts at 0 (the ring is warmed first), backup gets the bitmap and
// backup ring a stream needs (testbed.StreamBackupParams), and large
// receive is off: the synthetic rate is per received frame, and a chain
// of 45 segments counts as one, so the figure keeps the paper's
// per-packet rate (and its runs from before large receive comparable).
func (c *Config) DriverParams(policy string) string {
	extra := testbed.RNPFRateFile + "=0 lro=0"
	if policy == "backup" {
		extra += " " + testbed.StreamBackupParams
	}
	if c.DriverExtra != "" {
		extra += " " + c.DriverExtra
	}
	return testbed.DriverParams(policy, 0, extra)
}

// load reloads the driver with policy and warms its ring.
func (c *Config) load(ctx context.Context, tb *testbed.Testbed, policy string) error {
	params := c.DriverParams(policy)
	c.Logf("%s: insmod npfnic.ko %s", policy, params)
	if err := tb.LoadDriver(ctx, params); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := tb.CheckPolicy(sctx, policy); err != nil {
		return err
	}
	n, err := c.warm(ctx, tb)
	if err != nil {
		return fmt.Errorf("warming the RX ring: %w", err)
	}
	c.Logf("%s: RX ring warm after %d faults", policy, n)
	return nil
}

// warmRun is one warming stream, and warmTries how many bursts or
// streams may still see faults before the ring counts as not warming.
// A burst is warmBurst datagrams of warmBurstSize bytes to the discard
// port, several times the default ring, paced so that the emulated guest
// keeps up.
const (
	warmRun       = 2 * time.Second
	warmTries     = 6
	warmBurst     = 4096
	warmBurstSize = 1400
	warmBurstGap  = 200 * time.Microsecond
	discardPort   = 9
)

// warm maps every posted buffer back at rate 0 and returns the faults it
// took. UDP bursts go first: under drop every cold slot loses the frame
// that finds it, and a handshake losing its SYN again and again never
// gets a TCP stream going. Then iperf3 streams until one sees no fault,
// which also warms what the bursts cannot (the guest's TCP state, the
// host's congestion window).
func (c *Config) warm(ctx context.Context, tb *testbed.Testbed) (uint64, error) {
	var total uint64
	burst := func() error {
		_, err := tb.NS.SendUDP(ctx, tb.GuestIP, discardPort, warmBurst, warmBurstSize, warmBurstGap)
		return err
	}
	stream := func() error {
		_, err := workload.HostIperf3(ctx, tb.NS, tb.GuestIP, warmRun)
		return err
	}
	for _, w := range []struct {
		what string
		run  func() error
	}{{"UDP bursts", burst}, {"iperf3 streams", stream}} {
		warmed := false
		for range warmTries {
			n, err := c.faultsDuring(ctx, tb, w.run)
			total += n
			if err != nil {
				return total, err
			}
			if n == 0 {
				warmed = true
				break
			}
		}
		if !warmed {
			return total, fmt.Errorf("still faulting after %d %s at rate 0 (%d faults)", warmTries, w.what, total)
		}
	}
	return total, nil
}

// faultsDuring runs f and returns the receive faults the device took.
func (c *Config) faultsDuring(ctx context.Context, tb *testbed.Testbed, f func() error) (uint64, error) {
	before, err := counters(ctx, tb)
	if err != nil {
		return 0, err
	}
	if err := f(); err != nil {
		return 0, err
	}
	after, err := counters(ctx, tb)
	if err != nil {
		return 0, err
	}
	return after.Since(before).Faults, nil
}

func counters(ctx context.Context, tb *testbed.Testbed) (testbed.RNPFCounters, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := tb.Ethtool(sctx)
	if err != nil {
		return testbed.RNPFCounters{}, fmt.Errorf("ethtool -S: %w", err)
	}
	return testbed.RNPFCountersOf(st), nil
}

// measure runs iperf3 at r's point and fills in r; afterwards the rate is
// back at 0, faults are minor, and the ring is warm again.
func (c *Config) measure(ctx context.Context, tb *testbed.Testbed, r *Result, label string) {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if r.Policy != "pin" {
		if r.Err = inject(sctx, tb, r.Point, c.MajorDelay); r.Err != nil {
			return
		}
	}
	before, err := counters(ctx, tb)
	if err != nil {
		r.Err = err
		return
	}
	retrans := tb.CountTCPRetrans(sctx)
	c.Logf("%s: iperf3 host -> guest for %v ...", label, c.Time)
	r.Iperf, r.Err = workload.HostIperf3(ctx, tb.NS, tb.GuestIP, c.Time)
	if after, err := counters(ctx, tb); err == nil {
		r.Counters = after.Since(before)
	} else if r.Err == nil {
		r.Err = err
	}
	k := retrans(sctx)
	r.HostRetrans, r.GuestRetrans, r.HostTimeouts = k.Host, k.Guest, k.HostTimeouts
	if r.Err == nil {
		k := r.Counters
		c.Logf("%s: %.0f Mbit/s; %d rNPFs injected (%.0f ppm of %d frames), rx_faults %d, rx_backup_pkts %d, rx_fault_drops %d; TCP retransmits host %d guest %d",
			label, r.Mbps(), k.Injected, k.Rate(), k.RxPackets, k.Faults, k.BackupPkts, k.FaultDrops, r.HostRetrans, r.GuestRetrans)
	}
	if r.Policy == "pin" || r.PPM == 0 {
		return
	}
	// Back to rate 0 and minor faults, and fault back what is still taken
	// away, so that the next run starts from a warm ring.
	if err := injectNone(sctx, tb); err != nil && r.Err == nil {
		r.Err = err
	}
	if n, err := c.warm(ctx, tb); err != nil && r.Err == nil {
		r.Err = fmt.Errorf("rewarming the RX ring: %w", err)
	} else {
		r.Rewarm = n
	}
}
