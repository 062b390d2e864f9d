// Package faultcost is the fault-cost experiment (npfnic exp fault-cost),
// in the style of seed 000 Figure 3(a) and Table 4: the breakdown of a
// network page fault into its stages, as the device measures them, next to
// the floor of the same path without any page to resolve.
//
// A TCG guest runs the npfnic driver with a faulting RX policy (backup by
// default). The experiment repeatedly cools the RX ring (sysfs cool: every
// RX buffer unmapped and freed, with invalidations) and drives TCP through
// the NIC both ways (iperf3 with a fixed byte count), so that RX buffers
// fault and are resolved (and TX buffers, when the driver maps them
// lazily). The device model, served in this process, records every page
// request group's timestamps (package pri: detected → queued → interrupt →
// response → done). Then DIAG_ECHO runs N rounds: the device raises an
// interrupt and times the driver's answer, written from process context
// to a register — an interrupt plus a doorbell, nothing resolved: the
// floor of a fault's round trip (detected → response). The driver's own
// view (ethtool -S fault_lat_*, fault_sched_p50_ns, fault_map_p50_ns,
// backup_lat_*) is recorded beside it.
//
// A shared host's load moves both the faults and the floor, so a ratio of
// the two is only meaningful when they are measured together: the run is
// split into rounds, each with its share of the cycles and of the floor's
// rounds (the floor first on even rounds, last on odd ones), and the ratio
// is taken per round and summarised by its median and spread.
//
// The RC half (rc.go) measures an RC receive fault the same way, on a pair
// of guests; both halves run their rounds on package runner's loop
// (rounds.go), each with its own workload, measurements and figure.
package faultcost

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// Config is one run.
type Config struct {
	// Env's Images and LogDir are required.
	runner.Env
	// Policy is the driver's rx_policy: backup (default), drop or pin.
	Policy string
	// RingSize is rx_ring_size; default 256.
	RingSize int
	// Cycles is how many times the ring is cooled and traffic driven;
	// default 20, split evenly over the rounds.
	Cycles int
	// Rounds interleave faults and floor: each round runs its share of
	// the cycles and of the DIAG_ECHO rounds; default 5.
	Rounds int
	// Bytes is what iperf3 moves each way per cycle; default 1 MiB.
	Bytes int
	// Traffic is "iperf" (default: TCP both ways, bursts of faults after
	// each cool, RX and TX) or "ping" (Pings echo requests 100 ms apart
	// per cycle: isolated RX faults, one at a time).
	Traffic string
	Pings   int
	// EchoRounds is the number of DIAG_ECHO rounds over the whole run
	// (split over the rounds); default 2000, 200 with ping traffic; -1
	// measures no floor.
	EchoRounds int
	// EchoGap is the pause the device takes before each DIAG_ECHO round,
	// so the floor is measured in the guest state the faults meet: back to
	// back (0) under iperf's bursts, an idle guest (default 50 ms) between
	// ping's isolated faults.
	EchoGap time.Duration
	// DriverExtra is appended to insmod (e.g. "fault_delay_us=100" for
	// emulated major faults).
	DriverExtra string
	// MemoryMiB and CPUs are the guest's; default 1024 MiB and 1 vCPU.
	MemoryMiB, CPUs int
}

// Defaults.
const (
	DefaultPolicy     = "backup"
	DefaultRingSize   = 256
	DefaultCycles     = 20
	DefaultRounds     = 5
	DefaultBytes      = 1 << 20
	DefaultEchoRounds = 2000
	// DefaultPingEchoGap spaces DIAG_ECHO rounds under ping traffic.
	DefaultPingEchoGap = 50 * time.Millisecond
)

func (c *Config) setDefaults() {
	c.Policy = cmp.Or(c.Policy, DefaultPolicy)
	c.RingSize = cmp.Or(c.RingSize, DefaultRingSize)
	c.Cycles = cmp.Or(c.Cycles, DefaultCycles)
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	c.Bytes = cmp.Or(c.Bytes, DefaultBytes)
	c.Traffic = cmp.Or(c.Traffic, "iperf")
	if c.EchoRounds == 0 {
		c.EchoRounds = DefaultEchoRounds
		if c.Traffic == "ping" {
			c.EchoRounds = DefaultEchoRounds / 10
		}
	}
	if c.EchoGap == 0 && c.Traffic == "ping" {
		c.EchoGap = DefaultPingEchoGap
	}
	c.Pings = cmp.Or(c.Pings, 10)
}

// Validate checks what a user chose (after defaults), before any image
// is built; Run also needs Images.
func (c *Config) Validate() error {
	c.setDefaults()
	if c.LogDir == "" {
		return errors.New("faultcost: Config needs LogDir")
	}
	switch c.Policy {
	case "pin", "drop", "backup":
	default:
		return fmt.Errorf("policy %q: want backup, drop or pin", c.Policy)
	}
	if c.RingSize < 8 || c.RingSize > 4096 || c.RingSize&(c.RingSize-1) != 0 {
		return fmt.Errorf("ring size %d: want a power of two from 8 to 4096", c.RingSize)
	}
	if c.Traffic != "iperf" && c.Traffic != "ping" {
		return fmt.Errorf("traffic %q: want iperf or ping", c.Traffic)
	}
	if c.Rounds < 1 || c.Rounds > 100 || c.Cycles < c.Rounds {
		return fmt.Errorf("%d rounds of %d cycles: want 1 to 100 rounds and at least one cycle each", c.Rounds, c.Cycles)
	}
	if c.EchoRounds > 0 && c.EchoRounds < c.Rounds {
		return fmt.Errorf("%d DIAG_ECHO rounds for %d rounds: want at least one each", c.EchoRounds, c.Rounds)
	}
	if c.Cycles < 1 || c.Cycles > 10000 || c.Bytes < 1024 || c.EchoRounds < -1 || c.EchoRounds > hw.DiagEchoMax ||
		c.EchoGap < 0 || c.EchoGap > hw.DiagEchoGapMax*time.Microsecond {
		return fmt.Errorf("cycles %d, bytes %d, echo rounds %d, echo gap %v out of range", c.Cycles, c.Bytes, c.EchoRounds, c.EchoGap)
	}
	return nil
}

// Round is what one round measured: its faults and its floor.
type Round struct {
	Records []pri.Record
	Echo    []time.Duration
}

// Result is what one run measured.
type Result struct {
	// Rounds are the rounds in order; Records and Echo are all of them.
	Rounds []Round
	// Records are the device's fault records of this run.
	Records []pri.Record
	// RecorderDropped is how many records the device's recorder lost,
	// Overwritten how many fell out of its ring before the snapshot.
	RecorderDropped, Overwritten uint64
	// Echo are the DIAG_ECHO round trips (device-measured).
	Echo []time.Duration
	// EchoUnmatched counts answers that matched no round.
	EchoUnmatched uint64
	// PRI is the device's PRI counters over the run (differences).
	PRI pri.Stats
	// Driver is ethtool -S at the end.
	Driver map[string]uint64
	// Cycles is how many cool + traffic cycles ran.
	Cycles int
	// Params are the driver's module parameters.
	Params string
	// Errors met along the way that did not stop the run.
	Warnings []string
}

// Run runs the experiment.
func Run(ctx context.Context, c Config) (*Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Images == nil {
		return nil, errors.New("faultcost: Config needs Images")
	}
	w := &ethRun{c: &c, res: &Result{Rounds: make([]Round, c.Rounds)}}
	// One fault per cooled slot, as the experiment is defined: no
	// fault ahead (the driver's default backs 64 slots per fault).
	extra := strings.TrimSpace(testbed.FaultAheadParam(0) + " " + c.DriverExtra)
	w.res.Params = testbed.DriverParams(c.Policy, c.RingSize, extra)
	c.Logf("%d rounds of %d cycles (cool the RX ring, %s) and %d DIAG_ECHO rounds (interrupt -> process context -> doorbell)",
		c.Rounds, c.Cycles/c.Rounds, c.trafficText(), max(c.EchoRounds/c.Rounds, 0))
	t := runner.Ethernet(&c.Env, testbed.Config{Name: "faultcost", Subnet: 2, MemoryMiB: c.MemoryMiB, CPUs: c.CPUs}, w.start)
	if err := runRounds(ctx, &c.Env, t, c.Rounds, w); err != nil {
		return nil, err
	}
	for _, r := range w.res.Rounds {
		w.res.Records = append(w.res.Records, r.Records...)
		w.res.Echo = append(w.res.Echo, r.Echo...)
	}
	return w.res, nil
}

// ethRun is the Ethernet half's workload: the guest's driver faulting on
// a cooled RX ring, and where the device's counters stood once it loaded.
type ethRun struct {
	c   *Config
	res *Result
	tb  *testbed.Testbed
	dev *npfnic.NIC
	// since is when the device's records start to count; seen keeps
	// each record once (a snapshot holds older ones too).
	since             int64
	seen              map[[pri.NumStamps]int64]bool
	pri0              pri.Stats
	count0, dropped0  uint64
	taken, echoBefore int
}

// start loads the driver on a new guest and notes the device's counters.
func (w *ethRun) start(ctx context.Context, tb *testbed.Testbed) error {
	dev, ok := tb.Device.(*npfnic.NIC)
	if !ok {
		return fmt.Errorf("faultcost: the in-process device is a %T, not an npfnic NIC", tb.Device)
	}
	w.c.Logf("insmod npfnic.ko %s", w.res.Params)
	if err := tb.LoadDriver(ctx, w.res.Params); err != nil {
		return err
	}
	if err := tb.CheckPolicy(ctx, w.c.Policy); err != nil {
		return err
	}
	if _, err := tb.Guest(ctx, "iperf3", "-s", "-D", "-p", strconv.Itoa(workload.IperfPort)); err != nil {
		return fmt.Errorf("guest iperf3 server: %w", err)
	}
	rec := dev.PRI().Recorder()
	echo, _ := dev.EchoRoundTrips()
	*w = ethRun{c: w.c, res: w.res, tb: tb, dev: dev, since: clock.Nanotime(), seen: map[[pri.NumStamps]int64]bool{},
		pri0: dev.PRI().Stats(), count0: rec.Count(), dropped0: rec.Dropped(), echoBefore: len(echo)}
	return nil
}

func (w *ethRun) cycles(ctx context.Context, tb *testbed.Testbed, round int) error {
	rr := &w.res.Rounds[round-1]
	for range w.c.Cycles / w.c.Rounds {
		if err := ctx.Err(); err != nil {
			return err
		}
		w.res.Cycles++
		if err := w.c.cycle(ctx, tb, w.res.Cycles, w.res); err != nil {
			// The round goes on without its other cycles.
			w.res.Warnings = append(w.res.Warnings, err.Error())
			return err
		}
		// Take the records now: the recorder's ring holds the last
		// pri.DefaultRecords only. A record enters the ring when its
		// fault finishes, so a snapshot also holds older ones: keep
		// each once, keyed by its stamps.
		for _, r := range w.dev.PRI().Recorder().Snapshot() {
			if r.Stamps[pri.StampDetected] < w.since || w.seen[r.Stamps] {
				continue
			}
			w.seen[r.Stamps] = true
			rr.Records = append(rr.Records, r)
			w.taken++
		}
	}
	w.c.Logf("round %d/%d: %d fault records", round, w.c.Rounds, len(rr.Records))
	return nil
}

func (w *ethRun) floor(ctx context.Context, tb *testbed.Testbed, round int) error {
	rr := &w.res.Rounds[round-1]
	rr.Echo = append(rr.Echo, floorRound(ctx, tb, w.dev, w.c.EchoRounds/w.c.Rounds, w.c.EchoGap, round, w.c.Logf, &w.res.Warnings)...)
	return nil
}

// finish adds what the device and the driver counted on this guest.
func (w *ethRun) finish(ctx context.Context, tb *testbed.Testbed) {
	rec := w.dev.PRI().Recorder()
	w.res.RecorderDropped += rec.Dropped() - w.dropped0
	if n := rec.Count() - w.count0; n > uint64(w.taken) {
		w.res.Overwritten += n - uint64(w.taken)
	}
	w.res.PRI = priAdd(w.res.PRI, w.dev.PRI().Stats(), w.pri0)
	_, w.res.EchoUnmatched = w.dev.EchoRoundTrips()
	if st, err := tb.Ethtool(ctx); err == nil {
		w.res.Driver = st
	} else {
		w.res.Warnings = append(w.res.Warnings, "ethtool -S: "+err.Error())
	}
	if dumped, err := tb.Shell(ctx, "dmesg | tail -n 50"); err == nil {
		tb.SaveLog("dmesg-tail.txt", dumped)
	}
}

// cycle cools the RX ring and drives the traffic once; traffic that fails
// is a warning, a cool that fails ends the run.
func (c *Config) cycle(ctx context.Context, tb *testbed.Testbed, i int, res *Result) error {
	if err := tb.WriteSysfs(ctx, "cool", "1"); err != nil {
		return fmt.Errorf("cycle %d: cool: %w", i, err)
	}
	if c.Traffic == "ping" {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		pr, err := tb.NS.Ping(pctx, tb.GuestIP, c.Pings, 100*time.Millisecond, 2*time.Second)
		cancel()
		if err == nil && pr.Received < pr.Sent {
			err = fmt.Errorf("%d of %d echo requests answered", pr.Received, pr.Sent)
		}
		if err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("cycle %d: ping: %v", i, err))
		}
		return nil
	}
	for _, rev := range []bool{false, true} {
		if err := hostIperf(ctx, tb, c.Bytes, rev); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("cycle %d: %v", i, err))
			c.Logf("cycle %d: %v", i, runner.FirstLine(err.Error()))
		}
	}
	return nil
}

func (c *Config) trafficText() string {
	if c.Traffic == "ping" {
		return fmt.Sprintf("%d pings 100 ms apart (isolated RX faults)", c.Pings)
	}
	return fmt.Sprintf("iperf3 %d KiB host->guest and guest->host", c.Bytes>>10)
}

// hostIperf moves n bytes host -> guest (or guest -> host with reverse)
// through iperf3 run in the host namespace against the guest's server.
func hostIperf(ctx context.Context, tb *testbed.Testbed, n int, reverse bool) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	argv := []string{"iperf3", "-c", tb.GuestIP, "-p", strconv.Itoa(workload.IperfPort), "-n", strconv.Itoa(n), "--connect-timeout", "10000"}
	if reverse {
		argv = append(argv, "-R")
	}
	var err error
	for try := 0; try < 3; try++ {
		// The guest's iperf3 server answers one client at a time and may
		// still be finishing the previous test: retry shortly.
		if _, err = tb.NS.Run(ctx, argv...); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(300 * time.Millisecond):
		}
	}
	dir := "host->guest"
	if reverse {
		dir = "guest->host"
	}
	return fmt.Errorf("iperf3 %s: %w", dir, err)
}

// debugfs is the driver's debugfs knobs of the npfnic function in a guest.
type debugfs interface {
	WriteDebugfs(ctx context.Context, name, value string) error
	ReadDebugfs(ctx context.Context, name string) (string, error)
}

// echo starts rounds DIAG_ECHO rounds through the driver's debugfs file and
// waits until the device has timed them (samples counts the device's
// round trips) or the device gave up (no progress for 5 s).
// floorRound runs one round's share of the DIAG_ECHO floor (rounds round
// trips, gap apart) through tb's driver and returns those dev timed; a
// failure is reported and kept as a warning.
func floorRound(ctx context.Context, tb debugfs, dev *npfnic.NIC, rounds int, gap time.Duration, round int,
	warn func(format string, args ...any), warnings *[]string) []time.Duration {
	if rounds <= 0 {
		return nil
	}
	samples := func() int { r, _ := dev.EchoRoundTrips(); return len(r) }
	n0 := samples()
	if err := echo(ctx, tb, rounds, gap, samples); err != nil {
		*warnings = append(*warnings, fmt.Sprintf("round %d: diag_echo: %v", round, err))
		warn("round %d: diag_echo: %v", round, err)
	}
	if all, _ := dev.EchoRoundTrips(); len(all) > n0 {
		return all[n0:]
	}
	return nil
}

func echo(ctx context.Context, tb debugfs, rounds int, gap time.Duration, samples func() int) error {
	n0 := samples()
	if err := tb.WriteDebugfs(ctx, "diag_echo", fmt.Sprintf("%d %d", rounds, gap.Microseconds())); err != nil {
		return err
	}
	last, lastMove := n0, time.Now()
	for {
		n := samples()
		if n-n0 >= rounds {
			return nil
		}
		if n != last {
			last, lastMove = n, time.Now()
		}
		if time.Since(lastMove) > 5*time.Second+gap {
			answered, _ := tb.ReadDebugfs(ctx, "diag_echo")
			return fmt.Errorf("%d rounds asked, the device timed %d; no progress for 5 s (debugfs diag_echo reads %q)", rounds, n-n0, answered)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
