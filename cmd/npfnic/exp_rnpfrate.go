package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/npfnic/npfnic/internal/exp/rnpfrate"
	"github.com/npfnic/npfnic/internal/exp/runner"
)

// expRNPFRate is `npfnic exp rnpf-rate`: see internal/exp/rnpfrate.
var expRNPFRate = experiment{
	name: "rnpf-rate", synopsis: "[-transport rc] [flags]", guests: true,
	about: "Lesokhin et al., ASPLOS'17, Figure 10 (left) on npfnic: iperf3 TCP from the host into a guest\n" +
		"whose driver takes the translation of a random posted RX buffer away at the given rate per\n" +
		"received packet (a real invalidation), so the device faults on it and the fault goes through\n" +
		"page request, driver and page response. Throughput against the rate for the backup ring and\n" +
		"drop, minor and major faults, relative to pin (no fault possible). The ring is warmed before\n" +
		"every run. Prints a table with medians, min-max and the counters; writes CSV and PNG.\n" +
		"Needs root and iperf3. The defaults take about 12 minutes under TCG.\n\n" +
		"With -transport rc, Figure 10 (right): ib_send_bw --odp from a second npfnic and from rdma_rxe\n" +
		"(-sender), each in its own guest, into npfnic in another, whose driver evicts a random mapped\n" +
		"page of the receive memory region at the given rate per message; the responder answers the\n" +
		"fault with an RNR NAK (rnr) or drops the packet (drop: the sender recovers by its 67 ms ACK\n" +
		"timeout). One perftest per sender, policy and round, its memory region warmed at rate 0,\n" +
		"measured in windows on the device's counters; relative to rate 0, one panel per sender, with\n" +
		"`npfnic exp rnr` (virtual time) beside them in the figure. About 15 minutes per sender.",
	rounds: rnpfrate.DefaultRounds, roundsHelp: "repeat everything this many times (policies interleaved) and report medians with min-max",
	memory: 1024, memoryHelp: "guest memory in MiB (rc: of each guest)",
	flags: func(fs *flag.FlagSet) expSetup {
		transport := fs.String("transport", rnpfrate.TransportEth, "eth (TCP: backup ring against drop) or rc (RDMA SEND: RNR NAK against drop)")
		policies := fs.String("policies", "", "policies, comma-separated: eth: pin (the optimum), drop, backup (default all three); rc: rnr, drop (default both)")
		rates := fs.String("rates", "0,1e-4,1e-3,1e-2,1e-1", "synthetic rNPFs per received packet (rc: per message), comma-separated")
		faults := fs.String("faults", strings.Join(rnpfrate.Faults, ","), "fault kinds, comma-separated: minor (resolved at once), major (after -major-delay)")
		major := fs.Duration("major-delay", rnpfrate.DefaultMajorDelay, "how long a major fault takes to resolve (the driver's fault_delay_us)")
		runTime := fs.Duration("time", 0, fmt.Sprintf("length of each iperf3 run, rc: of each measured window (whole seconds; default %v, rc %v)", rnpfrate.DefaultTime, rnpfrate.DefaultRCTime))
		extra := fs.String("driver-params", "", "extra npfnic.ko parameters for every load, e.g. atc_entries=4096 (eth only)")
		size := fs.Int("msg-size", 0, fmt.Sprintf("rc: SEND size in bytes (default %d)", rnpfrate.DefaultRCMsgSize))
		sim := fs.Bool("sim", true, "rc: also run `npfnic exp rnr` (virtual time, a few seconds) and draw it beside the measurement")
		senders := fs.String("sender", "", "rc: the sending guests, comma-separated, each on its own pair: npfnic (a second npfnic: it waits an RNR NAK's timer to the microsecond), rxe (rdma_rxe: a jiffy at least); default both")
		return func(x expRun) (expRunFunc, error) {
			r, err := rnpfrate.ParseRates(*rates)
			if err != nil {
				return nil, fmt.Errorf("-rates: %w", err)
			}
			c := rnpfrate.Config{
				Env: x.Env, Transport: *transport, Policies: runner.ParseList(*policies), Rates: r, Faults: runner.ParseList(*faults),
				MajorDelay: *major, Time: *runTime, Rounds: x.Rounds, DriverExtra: *extra, MsgSize: *size, MemoryMiB: x.MemoryMiB, CPUs: x.CPUs,
				Senders: runner.ParseList(*senders),
			}
			if *transport == rnpfrate.TransportRC {
				c.LogDir = filepath.Join(x.Out, "logs-rc")
			}
			if err := c.Validate(); err != nil {
				return nil, err
			}
			return func(ctx context.Context, g expGuests) (*runner.Outcome, error) {
				g.into(&c.Env)
				if c.Transport == rnpfrate.TransportEth {
					results, err := rnpfrate.Run(ctx, c)
					return rnpfrate.Report(c, results), err
				}
				results, err := rnpfrate.RunRC(ctx, c)
				var sw *rnpfrate.Sim
				if *sim && len(results) > 0 && ctx.Err() == nil {
					// Once the guests are gone: it takes the host's CPUs.
					var serr error
					if sw, serr = rnpfrate.RunSim(ctx, c.Progress); serr != nil {
						return nil, fmt.Errorf("the simulation beside it (npfnic exp rnr): %w", serr)
					}
				}
				return rnpfrate.ReportRC(c, results, sw), err
			}, nil
		}
	},
}
