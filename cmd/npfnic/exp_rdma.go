package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/npfnic/npfnic/internal/exp/rdmaperf"
	"github.com/npfnic/npfnic/internal/exp/runner"
)

// expRDMA is `npfnic exp rdma`: see internal/exp/rdmaperf.
var expRDMA = experiment{
	name: "rdma", guests: true,
	about: "Unmodified perftest (ib_write_bw, ib_send_bw, ib_read_bw at 64 KiB, ib_send_lat at 64 B,\n" +
		"ib_atomic_lat; ib_write_bw and ib_send_lat connected by rdma_cm (-R); ib_send_bw at 1 KiB\n" +
		"and ib_send_lat over UD (-c UD)) between two guests cabled back to back through QEMU's\n" +
		"stream netdev, for each pairing of rdma_rxe and npfnic, and iperf3 TCP over the same NICs.\n" +
		"One pair is up at a time, booted anew each round, the pairs' order rotated (-all-booted:\n" +
		"every pair up for the whole run). Prints medians with min-max and the ratio to rxe-rxe,\n" +
		"judges the goals, writes CSV and PNG. Needs root.",
	rounds: rdmaperf.DefaultRounds, roundsHelp: "rounds; each runs every test on every pair, the pairs' order rotated",
	memory: 1024, memoryHelp: "memory of each guest in MiB",
	flags: func(fs *flag.FlagSet) expSetup {
		pairs := fs.String("pairs", rdmaperf.DefaultPairs, "pairings to measure, SERVER-CLIENT, each rxe (rdma_rxe over virtio-net) or npfnic")
		iters := fs.Int("iters", rdmaperf.DefaultIters, "perftest iterations per test (-n)")
		allBooted := fs.Bool("all-booted", false, "keep every pair booted for the whole run (the design before issue 28) instead of one pair up at a time, booted anew each round")
		return func(x expRun) (expRunFunc, error) {
			ps, err := rdmaperf.ParsePairs(*pairs)
			if err != nil {
				return nil, fmt.Errorf("-pairs: %w", err)
			}
			c := rdmaperf.Config{Env: x.Env, Pairs: ps, Rounds: x.Rounds, Iters: *iters, MemoryMiB: x.MemoryMiB, CPUs: x.CPUs,
				AllBooted: *allBooted}
			if err := c.Validate(); err != nil {
				return nil, err
			}
			return func(ctx context.Context, g expGuests) (*runner.Outcome, error) {
				g.into(&c.Env)
				results, err := rdmaperf.Run(ctx, c)
				return rdmaperf.Report(c, results), err
			}, nil
		}
	},
}
