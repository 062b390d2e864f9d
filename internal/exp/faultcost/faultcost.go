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
package faultcost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// Config is one run.
type Config struct {
	Images *images.Artifacts
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
	// LogDir keeps the guest's logs; required.
	LogDir string
	// Progress receives one line per step; nil is quiet.
	Progress io.Writer
	// Trace records the device's events over the whole run (package
	// trace); nil records nothing. The caller writes it out.
	Trace *trace.Recorder
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
	if c.Policy == "" {
		c.Policy = DefaultPolicy
	}
	if c.RingSize == 0 {
		c.RingSize = DefaultRingSize
	}
	if c.Cycles == 0 {
		c.Cycles = DefaultCycles
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultRounds
	}
	if c.Bytes == 0 {
		c.Bytes = DefaultBytes
	}
	if c.Traffic == "" {
		c.Traffic = "iperf"
	}
	if c.EchoRounds == 0 {
		c.EchoRounds = DefaultEchoRounds
		if c.Traffic == "ping" {
			c.EchoRounds = DefaultEchoRounds / 10
		}
	}
	if c.EchoGap == 0 && c.Traffic == "ping" {
		c.EchoGap = DefaultPingEchoGap
	}
	if c.Pings == 0 {
		c.Pings = 10
	}
}

// Validate checks a configuration (after defaults).
func (c *Config) Validate() error {
	c.setDefaults()
	if c.Images == nil || c.LogDir == "" {
		return errors.New("faultcost: Config needs Images and LogDir")
	}
	switch c.Policy {
	case "pin", "drop", "backup":
	default:
		return fmt.Errorf("faultcost: policy %q: want backup, drop or pin", c.Policy)
	}
	if c.RingSize < 8 || c.RingSize > 4096 || c.RingSize&(c.RingSize-1) != 0 {
		return fmt.Errorf("faultcost: ring size %d: want a power of two from 8 to 4096", c.RingSize)
	}
	if c.Traffic != "iperf" && c.Traffic != "ping" {
		return fmt.Errorf("faultcost: traffic %q: want iperf or ping", c.Traffic)
	}
	if c.Rounds < 1 || c.Rounds > 100 || c.Cycles < c.Rounds {
		return fmt.Errorf("faultcost: %d rounds of %d cycles: want 1 to 100 rounds and at least one cycle each", c.Rounds, c.Cycles)
	}
	if c.EchoRounds > 0 && c.EchoRounds < c.Rounds {
		return fmt.Errorf("faultcost: %d DIAG_ECHO rounds for %d rounds: want at least one each", c.EchoRounds, c.Rounds)
	}
	if c.Cycles < 1 || c.Cycles > 10000 || c.Bytes < 1024 || c.EchoRounds < -1 || c.EchoRounds > hw.DiagEchoMax ||
		c.EchoGap < 0 || c.EchoGap > hw.DiagEchoGapMax*time.Microsecond {
		return fmt.Errorf("faultcost: cycles %d, bytes %d, echo rounds %d, echo gap %v out of range", c.Cycles, c.Bytes, c.EchoRounds, c.EchoGap)
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
	if err := testbed.CheckHost(); err != nil {
		return nil, fmt.Errorf("faultcost: %w", err)
	}
	if reaped := testbed.ReapStale(); len(reaped) > 0 {
		c.progress("removed leftovers of an earlier run: %s", strings.Join(reaped, ", "))
	}
	tb, err := testbed.Start(ctx, testbed.Config{
		Images: c.Images, Name: "faultcost", LogDir: c.LogDir, Subnet: 2, Progress: c.progress, Trace: c.Trace,
	})
	if err != nil {
		return nil, err
	}
	defer tb.Close()
	dev, ok := tb.Device.(*npfnic.NIC)
	if !ok {
		return nil, fmt.Errorf("faultcost: the in-process device is a %T, not an npfnic NIC", tb.Device)
	}
	// One fault per cooled slot, as the experiment is defined: no
	// fault ahead (the driver's default backs 64 slots per fault).
	extra := strings.TrimSpace(testbed.FaultAheadParam(0) + " " + c.DriverExtra)
	res := &Result{Params: testbed.DriverParams(c.Policy, c.RingSize, extra)}
	c.progress("insmod npfnic.ko %s", res.Params)
	if err := tb.LoadDriver(ctx, res.Params); err != nil {
		return nil, err
	}
	if err := tb.CheckPolicy(ctx, c.Policy); err != nil {
		return nil, err
	}
	if _, err := tb.Guest(ctx, "iperf3", "-s", "-D", "-p", strconv.Itoa(workload.IperfPort)); err != nil {
		return nil, fmt.Errorf("guest iperf3 server: %w", err)
	}
	engine := dev.PRI()
	rec := engine.Recorder()
	since := clock.Nanotime()
	pri0 := engine.Stats()
	count0, dropped0 := rec.Count(), rec.Dropped()

	// Each round runs its share of the cycles and of the floor's rounds,
	// the floor last on odd rounds and first on even ones, so that faults
	// and floor see the same (shared) host.
	echoBefore, _ := dev.EchoRoundTrips()
	c.progress("%d rounds of %d cycles (cool the RX ring, %s) and %d DIAG_ECHO rounds (interrupt -> process context -> doorbell)",
		c.Rounds, c.Cycles/c.Rounds, c.trafficText(), max(c.EchoRounds/c.Rounds, 0))
	var recs []pri.Record
	seen := map[[pri.NumStamps]int64]bool{}
	cycle := 0
	for round := 1; round <= c.Rounds; round++ {
		var rr Round
		floor := func() {
			rr.Echo = append(rr.Echo, floorRound(ctx, tb, dev, c.EchoRounds/c.Rounds, c.EchoGap, round, c.progress, &res.Warnings)...)
		}
		if round%2 == 0 {
			floor()
		}
		for range c.Cycles / c.Rounds {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			cycle++
			if err := c.cycle(ctx, tb, cycle, res); err != nil {
				return nil, err
			}
			// Take the records now: the recorder's ring holds the last
			// pri.DefaultRecords only. A record enters the ring when its
			// fault finishes, so a snapshot also holds older ones: keep
			// each once, keyed by its stamps.
			for _, r := range rec.Snapshot() {
				if r.Stamps[pri.StampDetected] < since || seen[r.Stamps] {
					continue
				}
				seen[r.Stamps] = true
				recs = append(recs, r)
				rr.Records = append(rr.Records, r)
			}
			res.Cycles = cycle
		}
		if round%2 == 1 {
			floor()
		}
		res.Rounds = append(res.Rounds, rr)
		c.progress("round %d/%d: %d fault records, %d echo rounds", round, c.Rounds, len(rr.Records), len(rr.Echo))
	}
	res.Records = recs
	res.RecorderDropped = rec.Dropped() - dropped0
	if n := rec.Count() - count0; n > uint64(len(res.Records)) {
		res.Overwritten = n - uint64(len(res.Records))
	}
	pri1 := engine.Stats()
	res.PRI = pri.Stats{
		Groups: pri1.Groups - pri0.Groups, Requests: pri1.Requests - pri0.Requests,
		Success: pri1.Success - pri0.Success, Invalid: pri1.Invalid - pri0.Invalid,
		Failures: pri1.Failures - pri0.Failures, Unexpected: pri1.Unexpected - pri0.Unexpected,
		Abandoned: pri1.Abandoned - pri0.Abandoned, Waits: pri1.Waits - pri0.Waits,
	}
	all, unmatched := dev.EchoRoundTrips()
	if len(all) >= len(echoBefore) {
		res.Echo = all[len(echoBefore):]
	}
	res.EchoUnmatched = unmatched
	if st, err := tb.Ethtool(ctx); err == nil {
		res.Driver = st
	} else {
		res.Warnings = append(res.Warnings, "ethtool -S: "+err.Error())
	}
	if dumped, err := tb.Shell(ctx, "dmesg | tail -n 50"); err == nil {
		tb.SaveLog("dmesg-tail.txt", dumped)
	}
	return res, nil
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
			c.progress("cycle %d: %v", i, firstLine(err.Error()))
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

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}
