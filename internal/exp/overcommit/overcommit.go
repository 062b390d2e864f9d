// Package overcommit is seed 000's memory overcommitment experiment
// (`npfnic exp overcommit`, §6.1, Table 5) at the scale where npfnic's
// faults live: several RDMA servers in one npfnic guest
// (npfnic-overcommit, guestdrv/mpi/overcommit.c), each registering a
// region whose sizes together exceed the guest's memory while the
// working sets its clients in the peer guest WRITE into fit. Pinned,
// registration takes every page of a region, so the guest runs out after
// the first few servers; on demand (explicit ODP, and the same unmodified
// server under npfnic.ko's odp=all), a region costs the pages the NIC
// faults in, and all run. The paper ran four memcached VMs whose guest
// memory was pinned for SR-IOV; here the unit is a process in one guest,
// whose registered memory is the server's whole buffer. For 1 to
// Instances servers and each registration, rotated per round, the table
// gives how many started and their aggregate throughput.
package overcommit

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

// Defaults.
const (
	DefaultRounds    = 2
	DefaultInstances = 4
	// DefaultRegionMiB is each server's region: the default 1024 MiB
	// guest has about 760 MiB available, so two fit pinned and three do
	// not; four of them register 1280 MiB.
	DefaultRegionMiB = 320
	// DefaultWSMiB is each client's working set: four fit.
	DefaultWSMiB   = 32
	DefaultSeconds = 10
)

// Config configures Run.
type Config struct {
	runner.Env
	Regs      []workload.OvercommitReg // default all three
	Rounds    int
	Instances int // the steps run 1 to Instances servers
	// Region and WS are each server's bytes registered and written.
	Region, WS int64
	Seconds    float64 // each client's run
	// Client is the peer guest's implementation: npfnic (default) or rxe.
	Client testbed.RDMAKind
	// MemoryMiB and CPUs are each guest's; default 1024 MiB and 1 vCPU.
	MemoryMiB, CPUs int
}

// Validate checks c and fills in the defaults.
func (c *Config) Validate() error {
	if len(c.Regs) == 0 {
		c.Regs = workload.OvercommitRegs
	}
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	c.Instances = cmp.Or(c.Instances, DefaultInstances)
	c.Region = cmp.Or(c.Region, DefaultRegionMiB<<20)
	c.WS = cmp.Or(c.WS, DefaultWSMiB<<20)
	c.Seconds = cmp.Or(c.Seconds, DefaultSeconds)
	c.Client = cmp.Or(c.Client, testbed.RDMANPFNIC)
	if c.Rounds < 1 || c.Instances < 1 || c.Instances > 16 || c.WS < 64<<10 || c.WS > c.Region || c.Seconds <= 0 {
		return fmt.Errorf("%d rounds, %d instances, working set %d of %d bytes, %g s: want at least 1 round, 1 to 16 instances, 64 KiB to the region, over 0 s",
			c.Rounds, c.Instances, c.WS, c.Region, c.Seconds)
	}
	if c.LogDir == "" {
		return errors.New("overcommit: Config.LogDir is required")
	}
	return nil
}

// Result is one step: a registration with n servers in a round.
type Result struct {
	Reg       workload.OvercommitReg
	Instances int
	Round     int
	Out       testbed.OvercommitResult
	Took      time.Duration
	Err       error
}

type arm struct {
	reg workload.OvercommitReg
	n   int
}

func (a arm) String() string { return fmt.Sprintf("%s x%d", a.reg, a.n) }

// Run boots the pair (npfnic serving, the client's kind beside it) and
// runs every step of each round: the registrations rotated, 1 to
// Instances servers each.
func Run(ctx context.Context, c Config) ([]Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var results []Result
	err := runner.Loop[*testbed.RDMAPair, arm]{
		Env: &c.Env,
		Transport: runner.RC(&c.Env, testbed.RDMAPairConfig{A: testbed.RDMANPFNIC, B: c.Client, Name: "overcommit",
			Variant: images.VariantMPI, MemoryMiB: c.MemoryMiB, CPUs: c.CPUs}),
		Steps: runner.Rounds(c.Rounds, func(round int) []arm {
			var arms []arm
			for _, r := range runner.Rotate(c.Regs, round) {
				for n := 1; n <= c.Instances; n++ {
					arms = append(arms, arm{r, n})
				}
			}
			return arms
		}),
		Run: func(ctx context.Context, p *testbed.RDMAPair, s runner.Step[arm], label string) error {
			r := Result{Reg: s.Arm.reg, Instances: s.Arm.n, Round: s.Round}
			start := time.Now()
			rctx, cancel := context.WithTimeout(ctx, time.Duration(s.Arm.n)*4*time.Minute)
			r.Out, r.Err = p.Overcommit(rctx, testbed.OvercommitRun{Reg: r.Reg, Instances: r.Instances,
				Region: c.Region, WS: c.WS, Seconds: c.Seconds})
			cancel()
			r.Took = time.Since(start)
			log := filepath.Join(c.LogDir, fmt.Sprintf("round%d-%s-%d.txt", s.Round, r.Reg, r.Instances))
			text := strings.Join(append(append([]string{}, r.Out.Failed...), r.Out.Logs...), "\n")
			if werr := os.WriteFile(log, []byte(text), 0o644); werr != nil && r.Err == nil {
				r.Err = werr
			}
			if r.Err == nil {
				c.Logf("%s: %d of %d started, %.2f MB/s together, MemAvailable %d -> %d MiB, %d ODP faults",
					label, r.Out.Started, r.Instances, r.Out.Aggregate, r.Out.AvailBefore, r.Out.AvailServing, r.Out.Faults)
			}
			results = append(results, r)
			return r.Err
		},
	}.Go(ctx)
	return results, err
}
