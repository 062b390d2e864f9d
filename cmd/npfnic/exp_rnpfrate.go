package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/exp/rnpfrate"
)

// runExpRNPFRate runs `npfnic exp rnpf-rate`: see internal/exp/rnpfrate.
func runExpRNPFRate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("npfnic exp rnpf-rate", flag.ContinueOnError)
	opt := addImageFlags(fs)
	out := fs.String("out", "out/exp/rnpf-rate", "output directory: CSV, PNG, the table and the guest's logs")
	transport := fs.String("transport", rnpfrate.TransportEth, "eth (TCP: backup ring against drop) or rc (RDMA SEND: RNR NAK against drop)")
	policies := fs.String("policies", "", "policies, comma-separated: eth: pin (the optimum), drop, backup (default all three); rc: rnr, drop (default both)")
	rates := fs.String("rates", "0,1e-4,1e-3,1e-2,1e-1", "synthetic rNPFs per received packet (rc: per message), comma-separated")
	faults := fs.String("faults", strings.Join(rnpfrate.Faults, ","), "fault kinds, comma-separated: minor (resolved at once), major (after -major-delay)")
	major := fs.Duration("major-delay", rnpfrate.DefaultMajorDelay, "how long a major fault takes to resolve (the driver's fault_delay_us)")
	runTime := fs.Duration("time", 0, fmt.Sprintf("length of each iperf3 run, rc: of each measured window (whole seconds; default %v, rc %v)", rnpfrate.DefaultTime, rnpfrate.DefaultRCTime))
	rounds := fs.Int("rounds", rnpfrate.DefaultRounds, "repeat everything this many times (policies interleaved) and report medians with min-max")
	extra := fs.String("driver-params", "", "extra npfnic.ko parameters for every load, e.g. atc_entries=4096 (eth only)")
	size := fs.Int("size", 0, fmt.Sprintf("rc: SEND size in bytes (default %d)", rnpfrate.DefaultRCMsgSize))
	sim := fs.Bool("sim", true, "rc: also run `npfnic exp rnr` (virtual time, a few seconds) and draw it beside the measurement")
	mem := fs.Int("m", 1024, "guest memory in MiB (rc: of each guest)")
	quiet := addQuietFlag(fs)
	tf := addTraceFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic exp rnpf-rate [-transport rc] [flags]\n\n"+
			"Lesokhin et al., ASPLOS'17, Figure 10 (left) on npfnic: iperf3 TCP from the host into a TCG guest\n"+
			"whose driver takes the translation of a random posted RX buffer away at the given rate per\n"+
			"received packet (a real invalidation), so the device faults on it and the fault goes through\n"+
			"page request, driver and page response. Throughput against the rate for the backup ring and\n"+
			"drop, minor and major faults, relative to pin (no fault possible). The ring is warmed before\n"+
			"every run. Prints a table with medians, min-max and the counters; writes CSV and PNG.\n"+
			"Needs root and iperf3. The defaults take about 12 minutes under TCG.\n\n"+
			"With -transport rc, Figure 10 (right): ib_send_bw --odp from rdma_rxe in one TCG guest into\n"+
			"npfnic in another, whose driver evicts a random mapped page of the receive memory region at\n"+
			"the given rate per message; the responder answers the fault with an RNR NAK (rnr) or drops the\n"+
			"packet (drop: the sender recovers by its 67 ms ACK timeout). One perftest per policy and round,\n"+
			"its memory region warmed at rate 0, measured in windows on the device's counters; relative to\n"+
			"rate 0, with `npfnic exp rnr` (virtual time) beside it in the figure. About 15 minutes.\n\n")
		fs.PrintDefaults()
	}
	start := time.Now()
	progress, err := parseExpFlags(fs, args, quiet, start)
	if err != nil {
		return err
	}
	r, err := rnpfrate.ParseRates(*rates)
	if err != nil {
		return fmt.Errorf("-rates: %w", err)
	}
	c := rnpfrate.Config{
		Transport: *transport, Policies: rnpfrate.ParseList(*policies), Rates: r, Faults: rnpfrate.ParseList(*faults),
		MajorDelay: *major, Time: *runTime, Rounds: *rounds, DriverExtra: *extra, MsgSize: *size, MemoryMiB: *mem,
		LogDir: filepath.Join(*out, "logs"), Progress: progress,
	}
	if *transport == rnpfrate.TransportRC {
		c.LogDir = filepath.Join(*out, "logs-rc")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Trace, err = tf.recorder(); err != nil {
		return err
	}
	if c.Images, err = buildImages(ctx, opt); err != nil {
		return err
	}
	if err := os.RemoveAll(c.LogDir); err != nil {
		return err
	}
	if c.Transport == rnpfrate.TransportRC {
		return runRNPFRateRC(ctx, c, *out, *sim, tf, start)
	}
	results, runErr := rnpfrate.Run(ctx, c)
	if err := tf.write(c.Trace, os.Stdout); err != nil {
		return err
	}
	if len(results) > 0 {
		fmt.Print("\n" + rnpfrate.Table(c, results))
		files, err := rnpfrate.WriteOutputs(*out, c, results)
		if err != nil {
			return err
		}
		fmt.Printf("\nwrote %s (guest logs in %s) in %.0fs\n", strings.Join(files, ", "), c.LogDir, time.Since(start).Seconds())
	}
	if runErr != nil {
		return runErr
	}
	failed := 0
	for _, r := range results {
		if r.Err != nil {
			failed++
		}
	}
	if failed > 0 {
		return errors.New(fmt.Sprint(failed, " of ", len(results), " runs failed (see above and the logs)"))
	}
	return nil
}

// runRNPFRateRC runs the RC half, then (with sim) `npfnic exp rnr` in
// virtual time, once the guests are gone, and writes both.
func runRNPFRateRC(ctx context.Context, c rnpfrate.Config, out string, sim bool, tf *traceFlags, start time.Time) error {
	results, runErr := rnpfrate.RunRC(ctx, c)
	if err := tf.write(c.Trace, os.Stdout); err != nil {
		return err
	}
	if len(results) == 0 {
		return runErr
	}
	var sw *rnpfrate.Sim
	if sim && ctx.Err() == nil {
		var err error
		if sw, err = rnpfrate.RunSim(ctx, c.Progress); err != nil {
			return fmt.Errorf("npfnic exp rnr: %w", err)
		}
	}
	fmt.Print("\n" + rnpfrate.RCTable(c, results))
	files, err := rnpfrate.WriteRCOutputs(out, c, results, sw)
	if err != nil {
		return err
	}
	fmt.Printf("\nwrote %s (logs in %s) in %.0fs\n", strings.Join(files, ", "), c.LogDir, time.Since(start).Seconds())
	if runErr != nil {
		return runErr
	}
	failed := 0
	for _, r := range results {
		if r.Err != nil {
			failed++
		}
	}
	if failed > 0 {
		return errors.New(fmt.Sprint(failed, " of ", len(results), " windows failed (see above and the logs)"))
	}
	return nil
}
