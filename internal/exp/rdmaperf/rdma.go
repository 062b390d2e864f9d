// Package rdmaperf is the RDMA experiment (`npfnic exp rdma`): Debian's
// unmodified perftest between two TCG guests cabled back to back, for each
// pairing of implementations — rdma_rxe with rdma_rxe (the baseline: the
// transport runs on the emulated guest CPU), npfnic with rdma_rxe, and
// npfnic with npfnic (the transport runs in the device) — RC bandwidth of
// SEND, RDMA WRITE and RDMA READ at 64 KiB, SEND and atomic latency, the
// same RC connected by rdma_cm (-R), and UD SENDs (-c UD) up to the port's
// MTU, in interleaved rounds, reported as medians with their spread and as
// ratios to rxe↔rxe. Every pair stays booted for the whole run: together
// they are the bench of package runner's loop.
package rdmaperf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// Pair is a pairing of RC implementations: Server runs the perftest
// server, Client connects to it.
type Pair = runner.Pair

// ParsePairs reads "rxe-rxe,npfnic-rxe,...".
func ParsePairs(s string) ([]Pair, error) { return runner.ParsePairs(s) }

// DefaultPairs are the three pairings of the table.
const DefaultPairs = "rxe-rxe,npfnic-rxe,npfnic-npfnic"

// Test is one perftest measurement.
type Test struct {
	Name string
	// Latency tests report the typical latency in µs; the others the
	// average bandwidth in MB/s.
	Latency bool
	// UD tests send UD datagrams (-c UD), whose size is bounded by the
	// port's MTU; the others run RC.
	UD bool
	// TCP tests run iperf3 between the same two guests over the same
	// NICs instead of perftest (Run unused): the stream RDMA is held to.
	TCP bool
	Run workload.Perftest
}

// tcpTime is each TCP test's iperf3 run.
const tcpTime = 5 * time.Second

// udSize is the UD bandwidth test's message: the largest a UD SEND may be
// on the guests' 1500-byte Ethernet, whose RoCE MTU (active_mtu) is 1024
// on rdma_rxe and npfnic alike; perftest refuses a larger one ("Max
// message size in UD cannot be greater than MTU").
const udSize = 1024

// Tests are the experiment's measurements: RC connected out of band
// (perftest's TCP exchange), TCP over the same NICs (iperf3, server on the
// pair's first guest as perftest's), RC connected by rdma_cm (-R: the QPs
// are created, connected and moved to RTS through rdma_ucm, whose MADs run
// on each device's QP 1), and UD.
var Tests = []Test{
	{Name: "write_bw 64K", Run: workload.Perftest{Tool: "ib_write_bw", Size: 65536}},
	{Name: "TCP iperf3", TCP: true},
	{Name: "send_bw 64K", Run: workload.Perftest{Tool: "ib_send_bw", Size: 65536}},
	{Name: "read_bw 64K", Run: workload.Perftest{Tool: "ib_read_bw", Size: 65536}},
	{Name: "send_lat 64B", Latency: true, Run: workload.Perftest{Tool: "ib_send_lat", Size: 64}},
	{Name: "fetch_add_lat", Latency: true, Run: workload.Perftest{Tool: "ib_atomic_lat", Extra: []string{"-A", "FETCH_AND_ADD"}}},
	{Name: "cmp_swap_lat", Latency: true, Run: workload.Perftest{Tool: "ib_atomic_lat", Extra: []string{"-A", "CMP_AND_SWAP"}}},
	{Name: "write_bw 64K -R", Run: workload.Perftest{Tool: "ib_write_bw", Size: 65536, Extra: []string{"-R"}}},
	{Name: "send_lat 64B -R", Latency: true, Run: workload.Perftest{Tool: "ib_send_lat", Size: 64, Extra: []string{"-R"}}},
	{Name: "UD send_bw 1K", UD: true, Run: workload.Perftest{Tool: "ib_send_bw", Size: udSize, Extra: []string{"-c", "UD"}}},
	{Name: "UD send_lat 64B", UD: true, Latency: true, Run: workload.Perftest{Tool: "ib_send_lat", Size: 64, Extra: []string{"-c", "UD"}}},
}

// testTimeout bounds one perftest run: rxe↔rxe moves 200 × 64 KiB in
// about 2 s under TCG, so a run still going after a minute has hung.
const testTimeout = time.Minute

// Defaults.
const (
	DefaultRounds = 3
	DefaultIters  = 200 // perftest -n: about 2 s per bandwidth test between rxe guests
)

// Config configures Run.
type Config struct {
	// Env's LogDir is required; its Trace records the first npfnic's
	// events.
	runner.Env
	Pairs  []Pair // default DefaultPairs
	Rounds int    // default DefaultRounds
	Iters  int    // perftest -n, default DefaultIters
	// MemoryMiB and CPUs are each guest's; default 1024 MiB and 1 vCPU.
	MemoryMiB, CPUs int
	// AllBooted keeps every pair booted for the whole run, as before
	// issue 28. By default one pair is up at a time: each round boots each
	// pair in turn (the order rotated per round, so the rounds still
	// interleave the pairs), runs its tests and shuts it down. Idle TCG
	// guests take host CPU: on this 2-CPU host the four idle guests cut
	// the measured pair's bandwidth by 1.5 to 3.8 times and moved its
	// ratios to rxe-rxe by up to 1.9 times (docs/experiments.md).
	AllBooted bool
}

// Validate checks c and fills in the defaults.
func (c *Config) Validate() error {
	if len(c.Pairs) == 0 {
		c.Pairs, _ = ParsePairs(DefaultPairs)
	}
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	c.Iters = cmp.Or(c.Iters, DefaultIters)
	if c.Rounds < 1 || c.Iters < 5 {
		return fmt.Errorf("%d rounds of %d iterations: want at least 1 and 5", c.Rounds, c.Iters)
	}
	if c.LogDir == "" {
		return errors.New("rdma: Config.LogDir is required")
	}
	return nil
}

// Result is one test of one pair in one round.
type Result struct {
	Pair  Pair
	Test  string
	Round int
	// Value is MB/s (bandwidth) or µs (latency, typical); valid without Err.
	Value float64
	Err   error
}

// Run measures each pair alone, booted anew each round (see AllBooted),
// the pairs' order rotated per round; with AllBooted it boots every pair
// (all stay up), then runs each round's tests with the pairs in an order
// rotated per round.
// A pair that cannot boot or set up RDMA is reported in every result of
// it; the others go on. If a guest dies, every pair boots again.
func Run(ctx context.Context, c Config) ([]Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.AllBooted {
		return run(ctx, c)
	}
	var results []Result
	for round := 1; round <= c.Rounds; round++ {
		for _, i := range runner.Rotate(runner.Indexes(len(c.Pairs)), round) {
			one := c
			one.Pairs = []Pair{c.Pairs[i]}
			one.Rounds = 1
			one.LogDir = filepath.Join(c.LogDir, fmt.Sprintf("round%d-%s", round, c.Pairs[i]))
			rs, err := run(ctx, one)
			for _, r := range rs {
				r.Round = round
				results = append(results, r)
			}
			if err != nil {
				return results, err
			}
		}
	}
	return results, nil
}

// run measures c.Pairs booted together.
func run(ctx context.Context, c Config) ([]Result, error) {
	var results []Result
	// Each run has a port of its own: a run that timed out may leave its
	// server listening.
	port := 18515
	err := runner.Loop[*runner.Pairs, job]{
		Env: &c.Env,
		Transport: runner.PairsTransport(&c.Env, c.Pairs, func(i int, _ Pair) testbed.RDMAPairConfig {
			return testbed.RDMAPairConfig{Name: "rdma" + fmt.Sprint(i), MemoryMiB: c.MemoryMiB, CPUs: c.CPUs}
		}),
		Steps: runner.Rounds(c.Rounds, func(round int) []job {
			var jobs []job
			for _, t := range Tests {
				for _, i := range runner.Rotate(runner.Indexes(len(c.Pairs)), round) {
					jobs = append(jobs, job{t, i, c.Pairs[i]})
				}
			}
			return jobs
		}),
		Run: func(ctx context.Context, ps *runner.Pairs, s runner.Step[job], label string) error {
			j := s.Arm
			r := Result{Pair: j.pair, Test: j.test.Name, Round: s.Round}
			if r.Err = ps.Err[j.i]; r.Err == nil {
				port++
				r.Value, r.Err = c.measure(ctx, ps.Up[j.i], ps.Dirs[j.i], s.Round, j.test, port)
			}
			if r.Err == nil {
				c.Logf("%s: %.2f %s", label, r.Value, unit(j.test))
			}
			results = append(results, r)
			return r.Err
		},
	}.Go(ctx)
	return results, err
}

// job is one test on one pair.
type job struct {
	test Test
	i    int // the pair's index in Config.Pairs
	pair Pair
}

func (j job) String() string { return j.pair.String() + " " + j.test.Name }

func (c *Config) measure(ctx context.Context, p *testbed.RDMAPair, dir string, round int, t Test, port int) (float64, error) {
	if t.TCP {
		res, err := workload.BetweenGuestsIperf3(ctx, p.A.VM, p.B.VM, p.A.IP, port, tcpTime)
		if err != nil {
			return 0, fmt.Errorf("iperf3 %s -> %s: %w", p.B.Kind, p.A.Kind, err)
		}
		return float64(res.Bytes) / res.Seconds / 1e6, nil
	}
	run := t.Run
	run.Iters = c.Iters
	run.Port = port
	tctx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	res, err := p.Perftest(tctx, p.A, p.B, testbed.PerftestRun{Perftest: run, Logf: c.Logf})
	// Both sides' outputs stay beside the guests' logs.
	base := filepath.Join(dir, fmt.Sprintf("round%d-%s", round, strings.ReplaceAll(t.Name, " ", "-")))
	if werr := errors.Join(os.WriteFile(base+"-server.txt", []byte(res.ServerOut), 0o644),
		os.WriteFile(base+"-client.txt", []byte(res.ClientOut), 0o644)); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return 0, fmt.Errorf("%w (outputs in %s-*.txt)", err, base)
	}
	rows := res.Rows
	if t.Latency {
		if rows[0].Latency == nil {
			return 0, errors.New("no latency columns in the output")
		}
		return rows[0].Latency.Typical, nil
	}
	return rows[0].AvgMBs, nil
}

func unit(t Test) string {
	if t.Latency {
		return "µs"
	}
	return "MB/s"
}
