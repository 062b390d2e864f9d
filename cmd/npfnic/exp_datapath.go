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

	"github.com/npfnic/npfnic/internal/exp/datapath"
)

// runExpDatapath runs `npfnic exp datapath`: see package
// internal/exp/datapath for what it measures and how.
func runExpDatapath(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("npfnic exp datapath", flag.ContinueOnError)
	opt := addImageFlags(fs)
	out := fs.String("out", "out/datapath", "output directory: datapath.csv, datapath_ratios.csv, datapath.txt, datapath.png and the guests' logs")
	nics := fs.String("nics", datapath.NICNames(), "NICs to measure, comma-separated, in this order: "+datapath.NICNames())
	iperfTime := fs.Duration("time", datapath.DefaultIperfTime, "length of each iperf3 run (one per direction), whole seconds")
	slapTime := fs.Duration("memaslap-time", datapath.DefaultMemaslapTime, "length of the memaslap run, whole seconds")
	conc := fs.Int("memaslap-conns", datapath.DefaultMemaslapConcurrency, "memaslap connections")
	mem := fs.Int("m", datapath.DefaultMemoryMiB, "guest memory in MiB (the same for every NIC)")
	cpus := fs.Int("smp", datapath.DefaultCPUs, "guest vCPUs (the same for every NIC)")
	rounds := fs.Int("rounds", datapath.DefaultRounds, "repeat the NICs this many times, interleaved, and report medians (a shared host is noisy)")
	quiet := addQuietFlag(fs)
	tf := addTraceFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic exp datapath [flags]\n\n"+
			"Boots the same TCG guest once per NIC and measures, through each, iperf3 TCP\n"+
			"guest->host and host->guest and memcached under memaslap; prints absolute numbers\n"+
			"and ratios. The host end of each link is a tap inside a network namespace created\n"+
			"for the run. Needs root, iperf3 and libmemcached-tools on the host.\n\n")
		fs.PrintDefaults()
	}
	start := time.Now()
	progress, err := parseExpFlags(fs, args, quiet, start)
	if err != nil {
		return err
	}
	list, err := datapath.LookupNICs(*nics)
	if err != nil {
		return fmt.Errorf("-nics: %w", err)
	}
	c := datapath.Config{
		NICs: list, MemoryMiB: *mem, CPUs: *cpus,
		IperfTime: *iperfTime, MemaslapTime: *slapTime, MemaslapConcurrency: *conc, Rounds: *rounds,
		LogDir:   filepath.Join(*out, "logs"),
		Progress: progress,
	}
	if c.Trace, err = tf.recorder(); err != nil {
		return err
	}
	if c.Images, err = buildImages(ctx, opt); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if err := os.RemoveAll(c.LogDir); err != nil {
		return err
	}
	results, runErr := datapath.Run(ctx, c)
	if err := tf.write(c.Trace, os.Stdout); err != nil {
		return err
	}
	if len(results) > 0 {
		fmt.Print("\n" + datapath.Table(c, results))
		files, err := datapath.WriteOutputs(*out, c, results)
		if err != nil {
			return err
		}
		fmt.Printf("\nwrote %s (guest logs in %s) in %.0fs\n", strings.Join(files, ", "), c.LogDir, time.Since(start).Seconds())
	}
	if runErr != nil {
		return runErr
	}
	var failed []string
	for _, r := range datapath.Summarize(results) {
		if r.Err != nil {
			failed = append(failed, r.NIC)
		}
	}
	if len(failed) > 0 {
		return errors.New("failed NICs: " + strings.Join(failed, ", ") + " (see above and their logs)")
	}
	return nil
}
