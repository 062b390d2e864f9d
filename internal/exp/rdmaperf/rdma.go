// Package rdmaperf is the RDMA experiment (`npfnic exp rdma`): Debian's
// unmodified perftest between two TCG guests cabled back to back, for each
// pairing of RC implementations — rdma_rxe with rdma_rxe (the baseline:
// the transport runs on the emulated guest CPU), npfnic with rdma_rxe, and
// npfnic with npfnic (the transport runs in the device) — bandwidth of
// SEND, RDMA WRITE and RDMA READ at 64 KiB and SEND latency at 64 bytes,
// in interleaved rounds, reported as medians with their spread and as
// ratios to rxe↔rxe.
package rdmaperf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// Pair is a pairing of RC implementations: Server runs the perftest
// server, Client connects to it.
type Pair struct {
	Server, Client testbed.RDMAKind
}

func (p Pair) String() string { return string(p.Server) + "-" + string(p.Client) }

// ParsePairs reads "rxe-rxe,npfnic-rxe,...".
func ParsePairs(s string) ([]Pair, error) {
	var out []Pair
	for _, f := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(f), "-")
		if !ok {
			return nil, fmt.Errorf("pair %q: want SERVER-CLIENT, each rxe or npfnic", f)
		}
		ka, err := testbed.ParseRDMAKind(a)
		if err != nil {
			return nil, err
		}
		kb, err := testbed.ParseRDMAKind(b)
		if err != nil {
			return nil, err
		}
		out = append(out, Pair{ka, kb})
	}
	return out, nil
}

// DefaultPairs are the three pairings of the table.
const DefaultPairs = "rxe-rxe,npfnic-rxe,npfnic-npfnic"

// Test is one perftest measurement.
type Test struct {
	Name string
	// Latency tests report the typical latency in µs; the others the
	// average bandwidth in MB/s.
	Latency bool
	Run     workload.Perftest
}

// Tests are the experiment's measurements.
var Tests = []Test{
	{Name: "write_bw 64K", Run: workload.Perftest{Tool: "ib_write_bw", Size: 65536}},
	{Name: "send_bw 64K", Run: workload.Perftest{Tool: "ib_send_bw", Size: 65536}},
	{Name: "read_bw 64K", Run: workload.Perftest{Tool: "ib_read_bw", Size: 65536}},
	{Name: "send_lat 64B", Latency: true, Run: workload.Perftest{Tool: "ib_send_lat", Size: 64}},
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
	Images *images.Artifacts
	Pairs  []Pair // default DefaultPairs
	Rounds int    // default DefaultRounds
	Iters  int    // perftest -n, default DefaultIters
	LogDir string // required
	// Progress receives one line per step; nil is quiet.
	Progress io.Writer
	// Trace records the first npfnic's events (package trace); nil: none.
	Trace *trace.Recorder
}

// Validate checks c and fills in the defaults.
func (c *Config) Validate() error {
	if len(c.Pairs) == 0 {
		c.Pairs, _ = ParsePairs(DefaultPairs)
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultRounds
	}
	if c.Iters == 0 {
		c.Iters = DefaultIters
	}
	if c.Rounds < 1 || c.Iters < 5 {
		return fmt.Errorf("rdma: %d rounds of %d iterations: want at least 1 and 5", c.Rounds, c.Iters)
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

// Run boots every pair (all stay up, so the rounds interleave them), then
// runs each round's tests with the pairs in an order rotated per round.
// A pair that cannot boot or set up RDMA is reported in every result of
// it; the others go on.
func Run(ctx context.Context, c Config) ([]Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	up := make([]*testbed.RDMAPair, len(c.Pairs))
	bootErr := make([]error, len(c.Pairs))
	defer func() {
		for _, p := range up {
			if p != nil {
				p.Close()
			}
		}
	}()
	tr := c.Trace
	for i, pr := range c.Pairs {
		c.progress("pair %s: booting", pr)
		up[i], bootErr[i] = testbed.StartRDMAPair(ctx, testbed.RDMAPairConfig{
			Images: c.Images, A: pr.Server, B: pr.Client, Name: "rdma" + fmt.Sprint(i),
			LogDir: filepath.Join(c.LogDir, pr.String()), Trace: tr,
			Progress: func(f string, args ...any) { c.progress("  "+f, args...) },
		})
		if bootErr[i] != nil {
			c.progress("pair %s: %v", pr, bootErr[i])
		} else if pr.Server == testbed.RDMANPFNIC || pr.Client == testbed.RDMANPFNIC {
			tr = nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	var results []Result
	// Each run has a port of its own: a run that timed out may leave its
	// server listening.
	port := 18515
	for round := 1; round <= c.Rounds; round++ {
		for _, t := range Tests {
			for k := range c.Pairs {
				i := (k + round - 1) % len(c.Pairs)
				r := Result{Pair: c.Pairs[i], Test: t.Name, Round: round}
				if bootErr[i] != nil {
					r.Err = bootErr[i]
				} else {
					port++
					r.Value, r.Err = c.measure(ctx, up[i], c.Pairs[i], round, t, port)
				}
				if r.Err != nil {
					c.progress("round %d/%d %s %s: %v", round, c.Rounds, r.Pair, t.Name, firstLine(r.Err))
				} else {
					c.progress("round %d/%d %s %s: %.2f %s", round, c.Rounds, r.Pair, t.Name, r.Value, unit(t))
				}
				results = append(results, r)
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
			}
		}
	}
	return results, nil
}

func (c *Config) measure(ctx context.Context, p *testbed.RDMAPair, pr Pair, round int, t Test, port int) (float64, error) {
	run := t.Run
	run.Iters = c.Iters
	run.Port = port
	tctx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	res, err := p.Perftest(tctx, p.A, p.B, testbed.PerftestRun{Perftest: run, Logf: c.progress})
	// Both sides' outputs stay beside the guests' logs.
	base := filepath.Join(c.LogDir, pr.String(), fmt.Sprintf("round%d-%s", round, strings.ReplaceAll(t.Name, " ", "-")))
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

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}
