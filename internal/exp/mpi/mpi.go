// Package mpi is seed 000's MPI experiment (`npfnic exp mpi`, §6.2,
// Figure 9 and Table 6): Open MPI over UCX between two guests cabled back
// to back, one rank each, running npfnic-mpibench (IMB-MPI1's PingPong,
// Sendrecv, Exchange and Allreduce with off_cache, and a b_eff-like
// effective bandwidth; not IMB, which Debian does not package) in the
// paper's three configurations — copying (UCX's buffered copy only),
// pinning (UCX's pin-down registration cache) and NPF (the same cache
// over on-demand-paging regions: nothing pinned) — for each pairing of
// implementations asked (npfnic with npfnic; npfnic with rdma_rxe, whose
// rank pins as it has no ODP). The configurations run in rounds, rotated,
// through package runner's loop; the tables give medians with the
// rounds' range beside the paper's figures.
package mpi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// Pair is a pairing of RDMA implementations: mpirun and rank 0 on
// Server, rank 1 on Client.
type Pair = runner.Pair

// ParsePairs reads "npfnic-npfnic,npfnic-rxe".
func ParsePairs(s string) ([]Pair, error) { return runner.ParsePairs(s) }

// Defaults.
const (
	DefaultPairs  = "npfnic-npfnic,npfnic-rxe"
	DefaultRounds = 3
	// DefaultIters bounds each benchmark's iterations at a size: the
	// working set's buffers take turns, so a round reaches this many.
	DefaultIters = 40
)

// DefaultSizes are the messages of Figure 9's x axis that a TCG guest
// gets through in minutes: 4 KiB (eager in every configuration) to 1 MiB.
var DefaultSizes = []int{4096, 16384, 65536, 262144, 1 << 20}

// Benchmarks are npfnic-mpibench's, in its order.
var Benchmarks = []string{"PingPong", "Sendrecv", "Exchange", "Allreduce"}

// Config configures Run.
type Config struct {
	runner.Env
	Pairs   []Pair               // default DefaultPairs
	Configs []workload.MPIConfig // default all three
	Rounds  int                  // default DefaultRounds
	Sizes   []int                // default DefaultSizes
	Iters   int                  // default DefaultIters
	// WorkingSet is off_cache's per direction in bytes; default 16 MiB.
	WorkingSet int
	// BEffMax is b_eff's largest message; default 256 KiB. 0 < BEffIters
	// (default 10) times each size and method.
	BEffMax, BEffIters int
	NoBEff             bool
	// MemoryMiB and CPUs are each guest's; default 1024 MiB and 1 vCPU.
	MemoryMiB, CPUs int
}

// Validate checks c and fills in the defaults.
func (c *Config) Validate() error {
	if len(c.Pairs) == 0 {
		c.Pairs, _ = ParsePairs(DefaultPairs)
	}
	for _, p := range c.Pairs {
		if p.Server != testbed.RDMANPFNIC {
			return fmt.Errorf("pair %s: mpirun runs on the first guest, which must be npfnic (its rank is the one the configurations are about)", p)
		}
	}
	if len(c.Configs) == 0 {
		c.Configs = workload.MPIConfigs
	}
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	c.Iters = cmp.Or(c.Iters, DefaultIters)
	if len(c.Sizes) == 0 {
		c.Sizes = DefaultSizes
	}
	c.WorkingSet = cmp.Or(c.WorkingSet, 16<<20)
	c.BEffMax = cmp.Or(c.BEffMax, 256<<10)
	c.BEffIters = cmp.Or(c.BEffIters, 10)
	if c.Rounds < 1 || c.Iters < 4 || c.BEffIters < 1 || c.BEffMax < 4096 {
		return fmt.Errorf("%d rounds, %d iterations, b_eff %d iterations up to %d bytes: want at least 1, 4, 1 and 4096",
			c.Rounds, c.Iters, c.BEffIters, c.BEffMax)
	}
	for _, s := range c.Sizes {
		if s < 4 || s > 64<<20 {
			return fmt.Errorf("message size %d: want 4 B to 64 MiB", s)
		}
	}
	if c.LogDir == "" {
		return errors.New("mpi: Config.LogDir is required")
	}
	return nil
}

// Result is one mpirun: a configuration on a pair in a round.
type Result struct {
	Pair   Pair
	Config workload.MPIConfig
	Round  int
	Out    workload.MPIOutput
	Took   time.Duration
	// Faults are the ODP faults npfnic counted during the run, on the
	// pair's npfnics together: pages the NIC faulted in (npf), none
	// where nothing is on demand; -1 where they could not be read.
	Faults int
	Err    error
}

// arm is one mpirun of a round.
type arm struct {
	i      int // the pair's index
	pair   Pair
	config workload.MPIConfig
}

func (a arm) String() string { return a.pair.String() + " " + string(a.config) }

// runTimeout bounds one mpirun, its start-up on both guests included.
const runTimeout = 15 * time.Minute

// Run boots every pair (on the MPI image), then runs each round's
// configurations on each pair, both rotated per round.
func Run(ctx context.Context, c Config) ([]Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var results []Result
	bench := workload.MPIBench{Benchmarks: Benchmarks, Sizes: c.Sizes, WorkingSet: c.WorkingSet,
		MaxIters: c.Iters, Budget: c.Iters * 1 << 20, BEff: !c.NoBEff, BEffMax: c.BEffMax, BEffIters: c.BEffIters}
	err := runner.Loop[*runner.Pairs, arm]{
		Env: &c.Env,
		Transport: runner.PairsTransport(&c.Env, c.Pairs, func(i int, _ Pair) testbed.RDMAPairConfig {
			return testbed.RDMAPairConfig{Name: "mpi" + fmt.Sprint(i), Variant: images.VariantMPI,
				MemoryMiB: c.MemoryMiB, CPUs: c.CPUs}
		}),
		Steps: runner.Rounds(c.Rounds, func(round int) []arm {
			var arms []arm
			for _, i := range runner.Rotate(runner.Indexes(len(c.Pairs)), round) {
				for _, cf := range runner.Rotate(c.Configs, round) {
					arms = append(arms, arm{i, c.Pairs[i], cf})
				}
			}
			return arms
		}),
		Run: func(ctx context.Context, ps *runner.Pairs, s runner.Step[arm], label string) error {
			a := s.Arm
			r := Result{Pair: a.pair, Config: a.config, Round: s.Round, Faults: -1}
			if r.Err = ps.Err[a.i]; r.Err == nil {
				p := ps.Up[a.i]
				before := faults(ctx, p)
				rctx, cancel := context.WithTimeout(ctx, runTimeout)
				var res testbed.MPIRunResult
				res, r.Err = p.MPI(rctx, workload.MPIRun{Config: a.config, Bench: bench})
				cancel()
				if after := faults(ctx, p); before >= 0 && after >= 0 {
					r.Faults = after - before
				}
				r.Out, r.Took = res.Parsed, res.Took
				log := filepath.Join(ps.Dirs[a.i], fmt.Sprintf("round%d-%s.txt", s.Round, a.config))
				out := res.Output
				if r.Err != nil {
					// The npfnics' RC counters (retransmits, timeouts, faults)
					// go beside a failed run's output.
					out += deviceStats(ctx, p)
				}
				if werr := os.WriteFile(log, []byte(out), 0o644); werr != nil && r.Err == nil {
					r.Err = werr
				}
			}
			if r.Err == nil {
				c.Logf("%s: %d results in %.0f s, b_eff %.2f MB/s, %d ODP faults", label, len(r.Out.Results), r.Took.Seconds(), r.Out.BEff, r.Faults)
			}
			results = append(results, r)
			return r.Err
		},
	}.Go(ctx)
	return results, err
}

// faults are the ODP faults of the pair's npfnics together; -1 if one
// cannot be read.
func faults(ctx context.Context, p *testbed.RDMAPair) int {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n := 0
	for _, g := range p.Guests() {
		if g.Kind != testbed.RDMANPFNIC {
			continue
		}
		f, err := g.ODPFaults(ctx)
		if err != nil {
			return -1
		}
		n += f
	}
	return n
}

// deviceStats is every npfnic's rdma statistic of the pair, for a log.
func deviceStats(ctx context.Context, p *testbed.RDMAPair) string {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var b strings.Builder
	for _, g := range p.Guests() {
		if g.Kind != testbed.RDMANPFNIC {
			continue
		}
		out, err := g.Shell(ctx, "rdma statistic show link "+g.Dev+"/1")
		fmt.Fprintf(&b, "\n%s %s after the failure: %s%v\n", g.Kind, g.IP, out, err)
	}
	return b.String()
}
