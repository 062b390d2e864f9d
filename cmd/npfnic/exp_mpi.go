package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/npfnic/npfnic/internal/exp/mpi"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// expMPI is `npfnic exp mpi`: see internal/exp/mpi.
var expMPI = experiment{
	name: "mpi", guests: true,
	about: "Seed 000's Figure 9 and Table 6: Open MPI over UCX between two guests, one rank each,\n" +
		"running npfnic-mpibench (IMB-MPI1's PingPong, Sendrecv, Exchange and Allreduce with\n" +
		"off_cache, and a b_eff-like effective bandwidth; not IMB) as copying (UCX's buffered copy\n" +
		"only), pinning (UCX's pin-down registration cache) and npf (the same cache over on-demand\n" +
		"paging regions). Prints throughput against message size and b_eff beside the paper's, writes\n" +
		"CSV and PNG. Needs root.",
	rounds: mpi.DefaultRounds, roundsHelp: "rounds; each runs every configuration on every pair, rotated",
	memory: 1024, memoryHelp: "memory of each guest in MiB",
	flags: func(fs *flag.FlagSet) expSetup {
		pairs := fs.String("pairs", mpi.DefaultPairs, "pairings, FIRST-SECOND: mpirun and rank 0 on the first (npfnic), rank 1 on the second (npfnic or rxe)")
		configs := fs.String("configs", "copying,pinning,npf", "configurations to run")
		sizes := fs.String("sizes", "4096,16384,65536,262144,1048576", "message sizes in bytes")
		iters := fs.Int("iters", mpi.DefaultIters, "iterations per benchmark and size at most")
		ws := fs.Int("working-set", 16, "off_cache working set per direction in MiB")
		beffMax := fs.Int("beff-max", 256, "b_eff's largest message in KiB")
		noBEff := fs.Bool("no-beff", false, "leave out the b_eff run")
		return func(x expRun) (expRunFunc, error) {
			ps, err := mpi.ParsePairs(*pairs)
			if err != nil {
				return nil, fmt.Errorf("-pairs: %w", err)
			}
			var cfs []workload.MPIConfig
			for _, s := range strings.Split(*configs, ",") {
				cf, err := workload.ParseMPIConfig(strings.TrimSpace(s))
				if err != nil {
					return nil, fmt.Errorf("-configs: %w", err)
				}
				cfs = append(cfs, cf)
			}
			var sz []int
			for _, s := range strings.Split(*sizes, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil {
					return nil, fmt.Errorf("-sizes: %w", err)
				}
				sz = append(sz, n)
			}
			c := mpi.Config{Env: x.Env, Pairs: ps, Configs: cfs, Rounds: x.Rounds, Sizes: sz, Iters: *iters,
				WorkingSet: *ws << 20, BEffMax: *beffMax << 10, NoBEff: *noBEff, MemoryMiB: x.MemoryMiB, CPUs: x.CPUs}
			if err := c.Validate(); err != nil {
				return nil, err
			}
			return func(ctx context.Context, g expGuests) (*runner.Outcome, error) {
				g.into(&c.Env)
				results, err := mpi.Run(ctx, c)
				return mpi.Report(c, results), err
			}, nil
		}
	},
}
