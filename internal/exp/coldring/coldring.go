// Package coldring is the cold-ring experiment (npfnic exp cold-ring),
// seed 000 §5 Figure 4, on npfnic with real guest TCP: memcached in a TCG
// guest whose npfnic driver translates its RX buffers lazily, memaslap on
// the host through a tap in a network namespace.
//
//   - Part (a), startup: memaslap throughput in 1 s bins from a cold start
//     (a fresh driver load) with a small RX ring (64 entries), for each RX
//     policy: pin (every buffer mapped beforehand: the baseline), drop (a
//     frame whose buffer faults is dropped) and backup (it goes to the
//     backup ring and is copied into place once the fault is resolved).
//   - Part (b), ring size: the time memaslap takes for a fixed number of
//     operations (10,000) from a cold start, against the RX ring size, for
//     each policy, and off (no translation at all: the NIC before page
//     faults) beside pin; a run that does not finish within the cap (drop
//     may never finish) is recorded as capped.
//   - Part (c), fault ahead (optional, Config.FaultAhead): part (b)'s
//     backup again with the driver's fault_ahead set to each N swept, so
//     that a resolved RX fault also backs the next N cold slots (seed 004's
//     PI4/PIA prefault policies), against the same rounds' pin: seed 004
//     Figure 11's shape, time and slowdown against the knob.
//
// npfnic's driver backs the next 64 cold slots of a ring once it resolved
// a fault (fault_ahead=64), so drop no longer shows seed 000's pathology
// on a cold ring; seed 000's driver backed only the faulting slot. With
// Config.FaultAheadZero, parts (a) and (b) also run the policies listed
// with the driver's fault_ahead=0, the paper's driver, as arms of their
// own beside the default ("drop fa=0" beside "drop"): the pathology and
// what fault-ahead does about it, in the same tables and figures.
//
// Every run reloads the driver (rmmod, insmod with rx_policy and
// rx_ring_size): that is the cold start. Runs record the driver's fault
// counters (ethtool -S), the TCP retransmissions of both ends and how
// long the load took (outside the measured window).
//
// Single runs on a shared 2-core host vary by tens of percent, so the
// experiment runs in rounds (default 5) and reports medians with their
// min-max: every round runs every arm (and N) at a ring size back to
// back, in an order rotated by one each round, and the ring sizes
// ascending in odd rounds and descending in even ones, so that neither a
// drift of the host nor the run after a lossy one lines up with one
// policy. The host's TCP does not carry what it learnt in one run into the
// next (net.ipv4.tcp_no_metrics_save=1 in its namespace). The runs go
// through package runner's loop, on one guest rebooted if it dies.
package coldring

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

// Policies are the RX policies of the experiment, in the order the first
// round runs them: off (no translation) is the plain NIC that pin, the
// fault-free optimum of the paper, is compared with.
var Policies = []string{"off", "pin", "drop", "backup"}

// Config is one run of the experiment.
type Config struct {
	// Env's Images and LogDir are required.
	runner.Env
	// Policies to compare; default Policies. "off" (no translation, the
	// datapath before page faults) is accepted too.
	Policies []string
	// StartupTime is the length of each part (a) run (whole seconds);
	// default 60 s. StartupRing is its RX ring size; default 64.
	StartupTime time.Duration
	StartupRing int
	// Sizes are the RX ring sizes of part (b); default 16..512.
	Sizes []int
	// Ops is memaslap's operation count in part (b); default 10,000.
	Ops int
	// Cap bounds one part (b) run; default 60 s.
	Cap time.Duration
	// Conns is memaslap's connection count; default 16.
	Conns int
	// Rounds repeats every part, policies interleaved; default 5.
	// StartupRounds limits part (a), the long one, to the first rounds;
	// default every round.
	Rounds, StartupRounds int
	// FaultAhead, if set, adds part (c): backup at every ring size with
	// the driver's fault_ahead at each of these values. It needs part (b)
	// with pin, the reference. Part (b)'s backup runs with the driver's
	// default fault_ahead.
	FaultAhead []int
	// FaultAheadZero lists policies (drop, backup: those that fault on
	// RX) that parts (a) and (b) also run with the driver's fault_ahead=0,
	// seed 000's driver, as arms of their own; each must be in Policies.
	FaultAheadZero []string
	// SkipStartup and SkipSweep leave out part (a) or (b).
	SkipStartup, SkipSweep bool
	// DriverExtra is appended to every insmod (e.g. "fault_delay_us=100").
	DriverExtra string
	// MemoryMiB and CPUs are the guest's; default 1024 MiB and 1 vCPU.
	MemoryMiB, CPUs int
}

// Defaults.
const (
	DefaultStartupTime = 60 * time.Second
	DefaultStartupRing = 64
	DefaultOps         = 10000
	DefaultCap         = 60 * time.Second
	DefaultConns       = 16
	DefaultRounds      = 5
)

// DriverDefaultAhead is the fault_ahead npfnic.ko loads with when none is
// given (guestdrv/npfnic_npf.c; a test checks they agree): what the arms
// without a fault_ahead of their own run with.
const DriverDefaultAhead = 64

// MaxFaultAhead is the largest fault_ahead the driver takes (its largest
// ring size).
const MaxFaultAhead = 4096

// DefaultSizes are the ring sizes of Figure 4(b).
var DefaultSizes = []int{16, 32, 64, 128, 256, 512}

func (c *Config) setDefaults() {
	if len(c.Policies) == 0 {
		c.Policies = slices.Clone(Policies)
	}
	c.StartupTime = cmp.Or(c.StartupTime, DefaultStartupTime)
	c.StartupRing = cmp.Or(c.StartupRing, DefaultStartupRing)
	if len(c.Sizes) == 0 {
		c.Sizes = slices.Clone(DefaultSizes)
	}
	c.Ops = cmp.Or(c.Ops, DefaultOps)
	c.Cap = cmp.Or(c.Cap, DefaultCap)
	c.Conns = cmp.Or(c.Conns, DefaultConns)
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	if c.StartupRounds == 0 || c.StartupRounds > c.Rounds {
		c.StartupRounds = c.Rounds
	}
	c.MemoryMiB = cmp.Or(c.MemoryMiB, 1024)
	c.CPUs = cmp.Or(c.CPUs, 1)
}

// Validate checks what a user chose (after defaults), before any image
// is built; Run also needs Images.
func (c *Config) Validate() error {
	c.setDefaults()
	if c.LogDir == "" {
		return errors.New("coldring: Config.LogDir is required")
	}
	seen := map[string]bool{}
	for _, p := range c.Policies {
		switch p {
		case "off", "pin", "drop", "backup":
		default:
			return fmt.Errorf("unknown policy %q (want off, pin, drop, backup)", p)
		}
		if seen[p] {
			return fmt.Errorf("policy %q listed twice", p)
		}
		seen[p] = true
	}
	ringOK := func(n int) bool { return n >= 8 && n <= 4096 && n&(n-1) == 0 }
	if !ringOK(c.StartupRing) {
		return fmt.Errorf("startup ring %d: want a power of two from 8 to 4096", c.StartupRing)
	}
	for _, s := range c.Sizes {
		if !ringOK(s) {
			return fmt.Errorf("ring size %d: want a power of two from 8 to 4096", s)
		}
	}
	if c.StartupTime < time.Second || c.StartupTime > time.Hour || c.StartupTime%time.Second != 0 {
		return fmt.Errorf("startup time %v: want whole seconds from 1 s to 1 h", c.StartupTime)
	}
	if c.Ops < 1 || c.Cap < time.Second || c.Conns < 1 || c.Conns > 1024 || c.Rounds < 1 || c.Rounds > 100 || c.StartupRounds < 0 {
		return fmt.Errorf("ops %d, cap %v, conns %d, rounds %d out of range", c.Ops, c.Cap, c.Conns, c.Rounds)
	}
	if c.SkipStartup && c.SkipSweep {
		return errors.New("both parts skipped")
	}
	seenN := map[int]bool{}
	for _, n := range c.FaultAhead {
		if n < 0 || n > MaxFaultAhead {
			return fmt.Errorf("fault_ahead %d: want 0 to %d", n, MaxFaultAhead)
		}
		if seenN[n] {
			return fmt.Errorf("fault_ahead %d listed twice", n)
		}
		seenN[n] = true
	}
	if len(c.FaultAhead) > 0 && (c.SkipSweep || !slices.Contains(c.Policies, "pin")) {
		return errors.New("the fault-ahead sweep (part c) is judged against pin: it needs part (b) with pin")
	}
	seen = map[string]bool{}
	for _, p := range c.FaultAheadZero {
		switch {
		case p != "drop" && p != "backup":
			return fmt.Errorf("fault_ahead=0 arm %q: want drop or backup (off and pin never fault on RX)", p)
		case !slices.Contains(c.Policies, p):
			return fmt.Errorf("fault_ahead=0 arm %q: the policy is not among those run (%s)", p, strings.Join(c.Policies, ", "))
		case seen[p]:
			return fmt.Errorf("fault_ahead=0 arm %q listed twice", p)
		case p == "backup" && slices.Contains(c.FaultAhead, 0) && !c.SkipSweep:
			return errors.New("backup with fault_ahead=0 is both an arm of part (b) and part (c)'s N=0: drop one")
		}
		seen[p] = true
	}
	return nil
}

// Arm is what the runs of a part compare: an RX policy with the driver's
// fault_ahead (DefaultAhead: the driver's own, DriverDefaultAhead).
type Arm struct {
	Policy     string
	FaultAhead int
}

// Name is the arm's name in tables and progress lines: the policy, with
// " fa=N" when the arm sets fault_ahead.
func (a Arm) Name() string {
	if a.FaultAhead == DefaultAhead {
		return a.Policy
	}
	return fmt.Sprintf("%s fa=%d", a.Policy, a.FaultAhead)
}

// Arms are the arms of parts (a) and (b) in the order the first round
// runs them: every policy, each followed by its fault_ahead=0 arm if it
// has one.
func (c *Config) Arms() []Arm {
	var arms []Arm
	for _, p := range c.Policies {
		arms = append(arms, Arm{p, DefaultAhead})
		if slices.Contains(c.FaultAheadZero, p) {
			arms = append(arms, Arm{p, 0})
		}
	}
	return arms
}

// Part names the parts of the experiment.
const (
	PartStartup = "startup" // (a)
	PartSweep   = "ops"     // (b)
	PartAhead   = "ahead"   // (c)
)

// DefaultAhead marks a run with the driver's own fault_ahead (no
// parameter passed).
const DefaultAhead = -1

// Result is one run: one cold start with one policy and ring size.
type Result struct {
	Part     string
	Policy   string
	RingSize int
	Round    int
	// FaultAhead is the driver's fault_ahead of the run (part c, and the
	// fault_ahead=0 arms of parts a and b), or DefaultAhead.
	FaultAhead int
	// LoadSeconds is how long the driver's load took (rmmod, insmod,
	// interface up: pin maps its buffers there), before the measured
	// window.
	LoadSeconds float64
	// Bins are ops/s per second (part a).
	Bins []float64
	// Ops is the operations memaslap completed (its summary; for a capped
	// run the sum of its periods, usually unknown: 0).
	Ops int64
	// Seconds is the wall time of memaslap (part b: to finish Ops, or
	// the cap).
	Seconds float64
	// Capped: memaslap did not finish within the cap (part b).
	Capped bool
	// MemaslapErrors counts what memaslap reported as failed.
	MemaslapErrors int
	// Stats is ethtool -S after the run (since the driver load).
	Stats map[string]uint64
	// HostRetrans and GuestRetrans are the TCP segments each end
	// retransmitted during the run; HostTimeouts the host's RTO expiries.
	HostRetrans, GuestRetrans, HostTimeouts int64
	HostLoad                                float64
	Err                                     error
}

// Arm is the run's arm.
func (r Result) Arm() Arm { return Arm{r.Policy, r.FaultAhead} }

// Failed reports a run that measured nothing usable.
func (r Result) Failed() bool { return r.Err != nil }

// Run runs the experiment and returns every run's result; a failed run
// does not stop the others (look at Result.Err). The guest is booted once
// and rebooted if it dies.
func Run(ctx context.Context, c Config) ([]Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Images == nil {
		return nil, errors.New("coldring: Config.Images is required")
	}
	var results []Result
	err := runner.Loop[*testbed.Testbed, job]{
		Env:       &c.Env,
		Transport: runner.Ethernet(&c.Env, testbed.Config{Name: "coldring", MemoryMiB: c.MemoryMiB, CPUs: c.CPUs}, runner.ForgetTCPMetrics),
		Steps:     c.jobs(),
		Run: func(ctx context.Context, tb *testbed.Testbed, s runner.Step[job], label string) error {
			j := s.Arm
			r := Result{Part: j.part, Policy: j.policy, RingSize: j.ring, Round: s.Round, FaultAhead: j.ahead}
			runOne(ctx, &c, tb, &r, label)
			r.HostLoad = report.HostLoad()
			results = append(results, r)
			return r.Err
		},
	}.Go(ctx)
	return results, err
}

// Report is what the runner prints and writes of a run.
func Report(c Config, results []Result) *runner.Outcome {
	return runner.Jobs(c, results, func(r Result) error { return r.Err }, "runs", c.LogDir, Table, WriteOutputs)
}

// job is one run to do in a round.
type job struct {
	part   string
	policy string
	ring   int
	ahead  int // fault_ahead, or DefaultAhead
}

func (j job) String() string {
	s := fmt.Sprintf("(%s) %s ring %d", partLetter(j.part), j.policy, j.ring)
	if j.ahead != DefaultAhead {
		s += fmt.Sprintf(" fault_ahead %d", j.ahead)
	}
	return s
}

// jobs lists every run in order. Each round runs part (a) for every arm
// (Arms), then, per ring size, part (b) for every arm and part (c) for
// every fault_ahead back to back; the order of those rotates by one each
// round, and the ring sizes go up in odd rounds and down in even ones.
func (c *Config) jobs() []runner.Step[job] {
	var arms []job
	for _, a := range c.Arms() {
		arms = append(arms, job{part: PartSweep, policy: a.Policy, ahead: a.FaultAhead})
	}
	for _, n := range c.FaultAhead {
		arms = append(arms, job{part: PartAhead, policy: "backup", ahead: n})
	}
	return runner.Rounds(c.Rounds, func(round int) []job {
		var jobs []job
		if !c.SkipStartup && round <= c.StartupRounds {
			for _, a := range runner.Rotate(c.Arms(), round) {
				jobs = append(jobs, job{PartStartup, a.Policy, c.StartupRing, a.FaultAhead})
			}
		}
		if c.SkipSweep {
			return jobs
		}
		for _, s := range runner.Alternate(c.Sizes, round) {
			for _, a := range runner.Rotate(arms, round) {
				a.ring = s
				jobs = append(jobs, a)
			}
		}
		return jobs
	})
}

func partLetter(part string) string {
	switch part {
	case PartStartup:
		return "a"
	case PartAhead:
		return "c"
	}
	return "b"
}

// runOne does one cold start: reload the driver, run memaslap, read the
// counters.
func runOne(ctx context.Context, c *Config, tb *testbed.Testbed, r *Result, label string) {
	extra := c.DriverExtra
	if r.FaultAhead != DefaultAhead {
		extra = strings.TrimSpace(testbed.FaultAheadParam(r.FaultAhead) + " " + extra)
	}
	params := testbed.DriverParams(r.Policy, r.RingSize, extra)
	load := time.Now()
	if err := tb.LoadDriver(ctx, params); err != nil {
		r.Err = err
		return
	}
	r.LoadSeconds = time.Since(load).Seconds()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := tb.CheckPolicy(sctx, r.Policy); err != nil {
		cancel()
		r.Err = err
		return
	}
	if r.FaultAhead != DefaultAhead {
		// The kernel ignores unknown parameters: a driver without the
		// knob would run every N as 0.
		if n, err := tb.FaultAhead(sctx); err != nil || n != r.FaultAhead {
			cancel()
			r.Err = fmt.Errorf("asked for fault_ahead=%d, the driver reports %d (%v)", r.FaultAhead, n, err)
			return
		}
	}
	// Leftovers of an earlier (capped) run would count in this one.
	if err := tb.KillHostSockets(sctx); err != nil {
		c.Logf("%s: ss -K: %v", label, runner.FirstLine(err.Error()))
	}
	retrans := tb.CountTCPRetrans(sctx)
	cancel()
	o := workload.MemaslapOptions{Conns: c.Conns}
	var line []string
	if r.Part == PartStartup {
		// A wall-clock window from the launch: memaslap's own clock
		// (-t) starts only once its connections are up, which from a
		// cold ring may take long; it is stopped at the window's end.
		o.Time, o.StatEvery = c.StartupTime, time.Second
		o.Cap, o.CapIsEnd = c.StartupTime+1500*time.Millisecond, true
		o.OnPeriod = func(p workload.Period) {
			line = append(line, strconv.FormatInt(p.Ops, 10))
			if len(line) == 5 {
				c.Logf("%s: t=%4.1fs (memaslap's clock %ds) ops/s %s", label, p.Arrival.Seconds(), p.Second, strings.Join(line, " "))
				line = line[:0]
			}
		}
		c.Logf("%s: insmod npfnic.ko %s; memaslap for %d s from the cold start ...", label, params, int(c.StartupTime/time.Second))
	} else {
		o.Ops, o.Cap = c.Ops, c.Cap
		c.Logf("%s: insmod npfnic.ko %s; memaslap -x %d from the cold start (cap %.0f s) ...", label, params, c.Ops, c.Cap.Seconds())
	}
	// A heartbeat for long runs.
	hctx, hcancel := context.WithCancel(ctx)
	start := time.Now()
	go func() {
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
				if r.Part == PartSweep {
					c.Logf("%s: %.0f s, still running", label, time.Since(start).Seconds())
				}
			}
		}
	}()
	m, err := tb.Memaslap(ctx, o)
	hcancel()
	if m != nil {
		tb.SaveLog("memaslap.log", fmt.Sprintf("=== %s: %s\n%s\n--- stderr\n%s\n", label, params, m.Stdout, m.Stderr))
	}
	// Counters even for a failed run: they say what happened.
	sctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if st, serr := tb.Ethtool(sctx); serr == nil {
		r.Stats = st
	} else if err == nil {
		err = fmt.Errorf("ethtool -S: %w", serr)
	}
	k := retrans(sctx)
	r.HostRetrans, r.GuestRetrans, r.HostTimeouts = k.Host, k.Guest, k.HostTimeouts
	if err != nil {
		r.Err = fmt.Errorf("memaslap: %w", err)
		return
	}
	r.Seconds = m.Wall.Seconds()
	r.Capped = m.Capped
	if m.Summary != nil {
		r.Ops = m.Summary.Ops
		r.MemaslapErrors = m.Summary.Errors
	} else {
		// Killed at the cap: count what it complained about (e.g.
		// "Failed to write, and not due to blocking.": a connection
		// that died).
		for _, l := range strings.Split(m.Stderr, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "WARNING: Could not set CPU Affinity") {
				r.MemaslapErrors++
			}
		}
	}
	if r.Part == PartStartup {
		// The operations within the window, from the launch.
		r.Bins = workload.Bins(m.Periods, int(c.StartupTime/time.Second))
		r.Ops = int64(sum(r.Bins))
	}
	how := fmt.Sprintf("%d ops in %.1f s", r.Ops, r.Seconds)
	if r.Capped {
		how = fmt.Sprintf("CAPPED after %.0f s (%d ops seen)", r.Seconds, r.Ops)
	}
	if r.MemaslapErrors > 0 {
		how += fmt.Sprintf(", %d memaslap errors", r.MemaslapErrors)
	}
	c.Logf("%s: %s (load %.1f s); rx_faults %d, rx_prefaulted %d, rx_backup_pkts %d, rx_fault_drops %d, tx_faults %d, atc_hits %d, atc_misses %d; TCP retransmits host %d guest %d",
		label, how, r.LoadSeconds, r.Stats["rx_faults"], r.Stats["rx_prefaulted"], r.Stats["rx_backup_pkts"], r.Stats["rx_fault_drops"],
		r.Stats["tx_faults"], r.Stats["atc_hits"], r.Stats["atc_misses"], r.HostRetrans, r.GuestRetrans)
}
