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

	"github.com/npfnic/npfnic/internal/exp/coldring"
)

// coldRingFlags are the experiment's flags, shared with npfnic demo.
type coldRingFlags struct {
	policies, sizes *string
	startup, cap    *time.Duration
	ring, ops       *int
	conns, rounds   *int
	startupRounds   *int
	extra, ahead    *string
	skipA, skipB    *bool
}

// coldRingDefaults are what exp cold-ring and demo differ in.
type coldRingDefaults struct {
	startup, cap          time.Duration
	sizes                 string
	rounds, startupRounds int
}

func addColdRingFlags(fs *flag.FlagSet, d coldRingDefaults) *coldRingFlags {
	return &coldRingFlags{
		policies:      fs.String("policies", strings.Join(coldring.Policies, ","), "RX policies to compare, comma-separated: off (no translation), pin, drop, backup"),
		sizes:         fs.String("sizes", d.sizes, "RX ring sizes of part (b), comma-separated"),
		startup:       fs.Duration("startup-time", d.startup, "length of each part (a) run: memaslap throughput from the cold start (whole seconds)"),
		ring:          fs.Int("startup-ring", coldring.DefaultStartupRing, "RX ring size of part (a)"),
		ops:           fs.Int("ops", coldring.DefaultOps, "memaslap operations per part (b) run"),
		cap:           fs.Duration("cap", d.cap, "longest a part (b) run may take; slower runs are recorded as capped"),
		conns:         fs.Int("conns", coldring.DefaultConns, "memaslap connections"),
		rounds:        fs.Int("rounds", d.rounds, "repeat every part this many times (the policies' order rotated each round) and report medians with the rounds' min-max"),
		startupRounds: fs.Int("startup-rounds", d.startupRounds, "run part (a) in only the first this many rounds (0: every round)"),
		extra:         fs.String("driver-params", "", "extra npfnic.ko parameters for every load, e.g. fault_delay_us=100"),
		ahead:         fs.String("fault-ahead", "", "part (c): also run backup with the driver's fault_ahead at each of these values, comma-separated (e.g. 0,1,4,16,64), against pin"),
		skipA:         fs.Bool("skip-startup", false, "leave out part (a)"),
		skipB:         fs.Bool("skip-sweep", false, "leave out part (b)"),
	}
}

func (f *coldRingFlags) config() (coldring.Config, error) {
	sizes, err := coldring.ParseSizes(*f.sizes)
	if err != nil {
		return coldring.Config{}, fmt.Errorf("-sizes: %w", err)
	}
	ahead, err := coldring.ParseInts(*f.ahead)
	if err != nil {
		return coldring.Config{}, fmt.Errorf("-fault-ahead: %w", err)
	}
	return coldring.Config{
		Policies: coldring.ParsePolicies(*f.policies), Sizes: sizes,
		StartupTime: *f.startup, StartupRing: *f.ring, Ops: *f.ops, Cap: *f.cap,
		Conns: *f.conns, Rounds: *f.rounds, StartupRounds: *f.startupRounds, DriverExtra: *f.extra,
		FaultAhead: ahead, SkipStartup: *f.skipA, SkipSweep: *f.skipB,
	}, nil
}

// runExpColdRing runs `npfnic exp cold-ring`: see internal/exp/coldring.
func runExpColdRing(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("npfnic exp cold-ring", flag.ContinueOnError)
	opt := addImageFlags(fs)
	out := fs.String("out", "out/exp/cold-ring", "output directory: CSV, PNG, the table and the guests' logs")
	f := addColdRingFlags(fs, coldRingDefaults{
		startup: coldring.DefaultStartupTime, cap: coldring.DefaultCap, sizes: "16,32,64,128,256,512",
		rounds: coldring.DefaultRounds,
	})
	mem := fs.Int("m", 1024, "guest memory in MiB")
	quiet := addQuietFlag(fs)
	tf := addTraceFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic exp cold-ring [flags]\n\n"+
			"Seed 000 Figure 4 on npfnic: memcached in a TCG guest, memaslap on the host through a\n"+
			"tap in a network namespace. Every run reloads the driver with rx_policy and rx_ring_size,\n"+
			"so its RX ring starts cold. (a) memaslap throughput per second from the cold start with a\n"+
			"64-entry ring; (b) seconds for 10,000 operations against the ring size, off (no\n"+
			"translation) beside pin; (c) with -fault-ahead, backup again with the driver's fault_ahead\n"+
			"swept (seed 004 Figure 11's shape). Rounds run the policies in a rotating order; the\n"+
			"tables show medians with the rounds' min-max. Runs record the driver's fault and\n"+
			"translation counters and TCP retransmissions. Needs root, iperf3 and libmemcached-tools.\n\n")
		fs.PrintDefaults()
	}
	start := time.Now()
	progress, err := parseExpFlags(fs, args, quiet, start)
	if err != nil {
		return err
	}
	c, err := f.config()
	if err != nil {
		return err
	}
	c.MemoryMiB = *mem
	c.LogDir = filepath.Join(*out, "logs")
	c.Progress = progress
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
	_, err = runColdRing(ctx, c, *out, start, "")
	return errors.Join(err, tf.write(c.Trace, os.Stdout))
}

// runColdRing runs the experiment, prints the table with indent and
// writes the outputs.
func runColdRing(ctx context.Context, c coldring.Config, out string, start time.Time, indent string) ([]string, error) {
	results, runErr := coldring.Run(ctx, c)
	var files []string
	if len(results) > 0 {
		table := coldring.Table(c, results)
		if indent != "" {
			table = indentWith(table, indent)
		}
		fmt.Print("\n" + table)
		var err error
		files, err = coldring.WriteOutputs(out, c, results)
		if err != nil {
			return nil, err
		}
		fmt.Printf("\n%swrote %s (guest logs in %s) in %.0fs\n", indent, strings.Join(files, ", "), c.LogDir, time.Since(start).Seconds())
	}
	if runErr != nil {
		return files, runErr
	}
	failed := 0
	for _, r := range results {
		if r.Err != nil {
			failed++
		}
	}
	if failed > 0 {
		return files, errors.New(fmt.Sprint(failed, " of ", len(results), " runs failed (see above and the logs)"))
	}
	return files, nil
}

func indentWith(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + l + "\n")
	}
	return b.String()
}
