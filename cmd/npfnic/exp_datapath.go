package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/npfnic/npfnic/internal/exp/datapath"
	"github.com/npfnic/npfnic/internal/exp/runner"
)

// expDatapath is `npfnic exp datapath`: see package internal/exp/datapath.
var expDatapath = experiment{
	name: "datapath", guests: true,
	about: "Boots the same guest once per NIC and measures, through each, iperf3 TCP\n" +
		"guest->host and host->guest and memcached under memaslap; prints absolute numbers\n" +
		"and ratios. The host end of each link is a tap inside a network namespace created\n" +
		"for the run. Needs root, iperf3 and libmemcached-tools on the host.",
	rounds: datapath.DefaultRounds, roundsHelp: "repeat the NICs this many times, interleaved, and report medians (a shared host is noisy)",
	memory: datapath.DefaultMemoryMiB, memoryHelp: "guest memory in MiB (the same for every NIC)",
	flags: func(fs *flag.FlagSet) expSetup {
		nics := fs.String("nics", datapath.NICNames(), "NICs to measure, comma-separated, in this order: "+datapath.AllNICNames())
		iperfTime := fs.Duration("time", datapath.DefaultIperfTime, "length of each iperf3 run (one per direction), whole seconds")
		slapTime := fs.Duration("memaslap-time", datapath.DefaultMemaslapTime, "length of the memaslap run, whole seconds")
		conc := fs.Int("memaslap-conns", datapath.DefaultMemaslapConcurrency, "memaslap connections")
		profile := fs.Bool("guest-profile", false, "boot the guests with the kernel's tick profiler (profile=N) and print, per phase and NIC, the kernel's CPU µs per MB or request by function; guest_profile.csv has every function")
		return func(x expRun) (expRunFunc, error) {
			list, err := datapath.LookupNICs(*nics)
			if err != nil {
				return nil, fmt.Errorf("-nics: %w", err)
			}
			c := datapath.Config{
				Env: x.Env, NICs: list, MemoryMiB: x.MemoryMiB, CPUs: x.CPUs,
				IperfTime: *iperfTime, MemaslapTime: *slapTime, MemaslapConcurrency: *conc, Rounds: x.Rounds,
				GuestProfile: *profile,
			}
			if err := c.Validate(); err != nil {
				return nil, err
			}
			return func(ctx context.Context, g expGuests) (*runner.Outcome, error) {
				g.into(&c.Env)
				results, err := datapath.Run(ctx, c)
				return datapath.Report(c, results), err
			}, nil
		}
	},
}
