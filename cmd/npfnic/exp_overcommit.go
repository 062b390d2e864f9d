package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/npfnic/npfnic/internal/exp/overcommit"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// expOvercommit is `npfnic exp overcommit`: see internal/exp/overcommit.
var expOvercommit = experiment{
	name: "overcommit", guests: true,
	about: "Seed 000's Table 5 (memory overcommitment) at the scale of one guest: 1 to -instances RDMA\n" +
		"servers (npfnic-overcommit) in an npfnic guest, each registering -region MiB of which its client in\n" +
		"the peer guest RDMA WRITEs -ws MiB, their regions together past the guest's memory. Pinned, the\n" +
		"guest runs out after the first few; on demand (odp: IBV_ACCESS_ON_DEMAND; odp-all: the same\n" +
		"unmodified server under npfnic.ko's odp=all), all run. Prints how many started and their aggregate\n" +
		"throughput beside the paper's, writes CSV and PNG. Needs root.",
	rounds: overcommit.DefaultRounds, roundsHelp: "rounds; each runs every registration with 1 to -instances servers, rotated",
	memory: 1024, memoryHelp: "memory of each guest in MiB",
	flags: func(fs *flag.FlagSet) expSetup {
		regs := fs.String("regs", "pinned,odp,odp-all", "registrations to run: pinned, odp, odp-all")
		instances := fs.Int("instances", overcommit.DefaultInstances, "the most servers at once (the steps run 1 to this many)")
		region := fs.Int("region", overcommit.DefaultRegionMiB, "each server's registered region in MiB")
		ws := fs.Int("ws", overcommit.DefaultWSMiB, "each client's working set in MiB")
		secs := fs.Float64("t", overcommit.DefaultSeconds, "each client's run in seconds")
		client := fs.String("client", "npfnic", "the clients' guest: npfnic or rxe")
		return func(x expRun) (expRunFunc, error) {
			var rs []workload.OvercommitReg
			for _, s := range strings.Split(*regs, ",") {
				r, err := workload.ParseOvercommitReg(strings.TrimSpace(s))
				if err != nil {
					return nil, fmt.Errorf("-regs: %w", err)
				}
				rs = append(rs, r)
			}
			kind, err := testbed.ParseRDMAKind(*client)
			if err != nil {
				return nil, fmt.Errorf("-client: %w", err)
			}
			c := overcommit.Config{Env: x.Env, Regs: rs, Rounds: x.Rounds, Instances: *instances,
				Region: int64(*region) << 20, WS: int64(*ws) << 20, Seconds: *secs, Client: kind,
				MemoryMiB: x.MemoryMiB, CPUs: x.CPUs}
			if err := c.Validate(); err != nil {
				return nil, err
			}
			return func(ctx context.Context, g expGuests) (*runner.Outcome, error) {
				g.into(&c.Env)
				results, err := overcommit.Run(ctx, c)
				return overcommit.Report(c, results), err
			}, nil
		}
	},
}
