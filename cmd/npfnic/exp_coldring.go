package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/exp/coldring"
	"github.com/npfnic/npfnic/internal/exp/runner"
)

var expColdRing = experiment{
	name: "cold-ring", guests: true,
	about: "Seed 000 Figure 4 on npfnic: memcached in a guest, memaslap on the host through a\n" +
		"tap in a network namespace. Every run reloads the driver with rx_policy and rx_ring_size,\n" +
		"so its RX ring starts cold. (a) memaslap throughput per second from the cold start with a\n" +
		"64-entry ring; (b) seconds for 10,000 operations against the ring size, off (no\n" +
		"translation) beside pin; (c) with -fault-ahead, backup again with the driver's fault_ahead\n" +
		"swept (seed 004 Figure 11's shape). -fault-ahead-zero drop,backup also runs those policies\n" +
		"in (a) and (b) with fault_ahead=0, the paper's driver, beside npfnic's default (64), as\n" +
		"arms of their own (\"drop fa=0\"). Rounds run the arms in a rotating order; the\n" +
		"tables show medians with the rounds' min-max. Runs record the driver's fault and\n" +
		"translation counters and TCP retransmissions. Needs root, iperf3 and libmemcached-tools.",
	rounds: coldring.DefaultRounds, roundsHelp: coldRingRoundsHelp,
	memory: 1024, memoryHelp: "guest memory in MiB",
	flags: func(fs *flag.FlagSet) expSetup {
		f := addColdRingFlags(fs, coldRingDefaults{startup: coldring.DefaultStartupTime, cap: coldring.DefaultCap, sizes: "16,32,64,128,256,512"})
		return func(x expRun) (expRunFunc, error) {
			c, err := f.config(x.Env, x.Rounds)
			if err != nil {
				return nil, err
			}
			c.MemoryMiB, c.CPUs = x.MemoryMiB, x.CPUs
			if err := c.Validate(); err != nil {
				return nil, err
			}
			return func(ctx context.Context, g expGuests) (*runner.Outcome, error) {
				g.into(&c.Env)
				results, err := coldring.Run(ctx, c)
				return coldring.Report(c, results), err
			}, nil
		}
	},
}

const coldRingRoundsHelp = "repeat every part this many times (the policies' order rotated each round) and report medians with the rounds' min-max"

// coldRingFlags are the experiment's flags, shared with npfnic demo.
type coldRingFlags struct {
	policies, sizes *string
	startup, cap    *time.Duration
	ring, ops       *int
	conns           *int
	startupRounds   *int
	extra, ahead    *string
	aheadZero       *string
	skipA, skipB    *bool
}

// coldRingDefaults are what exp cold-ring and demo differ in (zero:
// the experiment's own default).
type coldRingDefaults struct {
	policies      string
	startup, cap  time.Duration
	sizes         string
	ops           int
	startupRounds int
	// aheadZero is -fault-ahead-zero's default.
	aheadZero string
}

func addColdRingFlags(fs *flag.FlagSet, d coldRingDefaults) *coldRingFlags {
	return &coldRingFlags{
		policies:      fs.String("policies", cmp.Or(d.policies, strings.Join(coldring.Policies, ",")), "RX policies to compare, comma-separated: off (no translation), pin, drop, backup"),
		sizes:         fs.String("sizes", d.sizes, "RX ring sizes of part (b), comma-separated"),
		startup:       fs.Duration("startup-time", d.startup, "length of each part (a) run: memaslap throughput from the cold start (whole seconds)"),
		ring:          fs.Int("startup-ring", coldring.DefaultStartupRing, "RX ring size of part (a)"),
		ops:           fs.Int("ops", cmp.Or(d.ops, coldring.DefaultOps), "memaslap operations per part (b) run"),
		cap:           fs.Duration("cap", d.cap, "longest a part (b) run may take; slower runs are recorded as capped"),
		conns:         fs.Int("memaslap-conns", coldring.DefaultConns, "memaslap connections"),
		startupRounds: fs.Int("startup-rounds", d.startupRounds, "run part (a) in only the first this many rounds (0: every round)"),
		extra:         fs.String("driver-params", "", "extra npfnic.ko parameters for every load, e.g. fault_delay_us=100"),
		ahead:         fs.String("fault-ahead", "", "part (c): also run backup with the driver's fault_ahead at each of these values, comma-separated (e.g. 0,1,4,16,64), against pin"),
		aheadZero:     fs.String("fault-ahead-zero", d.aheadZero, "parts (a) and (b): also run these policies (drop, backup; comma-separated) with the driver's fault_ahead=0, the paper's driver, as arms of their own beside npfnic's default"),
		skipA:         fs.Bool("skip-startup", false, "leave out part (a)"),
		skipB:         fs.Bool("skip-sweep", false, "leave out part (b)"),
	}
}

func (f *coldRingFlags) config(env runner.Env, rounds int) (coldring.Config, error) {
	sizes, err := runner.ParseInts(*f.sizes, "ring size")
	if sizes, err = runner.NonEmpty(sizes, err, "ring sizes"); err != nil {
		return coldring.Config{}, fmt.Errorf("-sizes: %w", err)
	}
	ahead, err := runner.ParseInts(*f.ahead, "number")
	if err != nil {
		return coldring.Config{}, fmt.Errorf("-fault-ahead: %w", err)
	}
	return coldring.Config{
		Env: env, Policies: runner.ParseList(*f.policies), Sizes: sizes,
		StartupTime: *f.startup, StartupRing: *f.ring, Ops: *f.ops, Cap: *f.cap,
		Conns: *f.conns, Rounds: rounds, StartupRounds: *f.startupRounds, DriverExtra: *f.extra,
		FaultAhead: ahead, FaultAheadZero: runner.ParseList(*f.aheadZero), SkipStartup: *f.skipA, SkipSweep: *f.skipB,
	}, nil
}
