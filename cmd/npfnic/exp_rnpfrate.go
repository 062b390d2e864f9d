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
	policies := fs.String("policies", strings.Join(rnpfrate.Policies, ","), "RX policies, comma-separated: pin (the optimum), drop, backup")
	rates := fs.String("rates", "0,1e-4,1e-3,1e-2,1e-1", "synthetic rNPFs per received packet, comma-separated")
	faults := fs.String("faults", strings.Join(rnpfrate.Faults, ","), "fault kinds, comma-separated: minor (resolved at once), major (after -major-delay)")
	major := fs.Duration("major-delay", rnpfrate.DefaultMajorDelay, "how long a major fault takes to resolve (the driver's fault_delay_us)")
	runTime := fs.Duration("time", rnpfrate.DefaultTime, "length of each iperf3 run (whole seconds)")
	rounds := fs.Int("rounds", rnpfrate.DefaultRounds, "repeat everything this many times (policies interleaved) and report medians with min-max")
	extra := fs.String("driver-params", "", "extra npfnic.ko parameters for every load, e.g. atc_entries=4096")
	mem := fs.Int("m", 1024, "guest memory in MiB")
	quiet := addQuietFlag(fs)
	tf := addTraceFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic exp rnpf-rate [flags]\n\n"+
			"Lesokhin et al., ASPLOS'17, Figure 10 (left) on npfnic: iperf3 TCP from the host into a TCG guest\n"+
			"whose driver takes the translation of a random posted RX buffer away at the given rate per\n"+
			"received packet (a real invalidation), so the device faults on it and the fault goes through\n"+
			"page request, driver and page response. Throughput against the rate for the backup ring and\n"+
			"drop, minor and major faults, relative to pin (no fault possible). The ring is warmed before\n"+
			"every run. Prints a table with medians, min-max and the counters; writes CSV and PNG.\n"+
			"Needs root and iperf3. The defaults take about 12 minutes under TCG.\n\n")
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
		MajorDelay: *major, Time: *runTime, Rounds: *rounds, DriverExtra: *extra, MemoryMiB: *mem,
		LogDir: filepath.Join(*out, "logs"), Progress: progress,
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
