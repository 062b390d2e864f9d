package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/internal/exp/rnrsweep"
)

// runExpRNR runs `npfnic exp rnr`: the receive-fault frequency sweep of the
// RC transport on a simulated link (see package internal/exp/rnrsweep for the model).
func runExpRNR(ctx context.Context, args []string) error {
	c := rnrsweep.DefaultConfig()
	fs := flag.NewFlagSet("npfnic exp rnr", flag.ContinueOnError)
	out := fs.String("out", "out/rnr", "output directory for rnr.csv and rnr.png")
	rates := fs.String("rates", joinFloats(c.FaultRates), "receive fault probabilities per packet, comma-separated")
	res := fs.String("resolution", joinDurations(c.Resolutions), "page-fault resolution times (minor, major), comma-separated")
	fs.IntVar(&c.MsgSize, "msg", c.MsgSize, "SEND message size in bytes")
	mtu := fs.Int("mtu", c.MTU.Bytes(), "path MTU in bytes (256, 512, 1024, 2048, 4096)")
	fs.Float64Var(&c.LinkGbps, "gbps", c.LinkGbps, "link rate in Gb/s")
	fs.DurationVar(&c.Latency, "latency", c.Latency, "one-way link latency")
	timeout := fs.Uint("timeout", uint(c.Timeout), "local ACK timeout code: 4.096us x 2^code")
	fs.IntVar(&c.RNRTimer, "rnr-timer", c.RNRTimer, "RNR NAK timer code 0-31; -1 picks the smallest timer >= the resolution")
	fs.IntVar(&c.MinFaults, "faults", c.MinFaults, "aim for this many faults per point")
	maxMiB := fs.Int64("max-mib", c.MaxBytes>>20, "most MiB sent per point")
	minMiB := fs.Int64("min-mib", c.MinBytes>>20, "least MiB sent per point")
	fs.IntVar(&c.Window, "window", c.Window, "PSNs in flight per QP")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "fault injection seed")
	quiet := addQuietFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.FaultRates, err = parseFloats(*rates); err != nil {
		return fmt.Errorf("-rates: %w", err)
	}
	if c.Resolutions, err = parseDurations(*res); err != nil {
		return fmt.Errorf("-resolution: %w", err)
	}
	c.MTU = 0
	for m := ibrc.MTU256; m <= ibrc.MTU4096; m++ {
		if m.Bytes() == *mtu {
			c.MTU = m
		}
	}
	if *timeout > 31 {
		return fmt.Errorf("-timeout %d: must be 1-31", *timeout)
	}
	c.Timeout = uint8(*timeout)
	c.MinBytes, c.MaxBytes = *minMiB<<20, *maxMiB<<20
	if err := c.Validate(); err != nil {
		return err
	}
	start := time.Now()
	if !*quiet {
		c.Progress = func(done, total int, r rnrsweep.Result) {
			fmt.Fprintf(os.Stderr, "[%2d/%d %6.1fs] rate %-7g %-5v resolution %-6v %9.2f MB/s  (%d faults, %d RNR NAKs, %d timeouts; %v wall)\n",
				done, total, time.Since(start).Seconds(), r.FaultRate, r.Recovery, r.Resolution, r.MBps,
				r.Faults, r.RNRNaks, r.Timeouts, r.Wall.Round(time.Millisecond))
		}
	}
	base, points, err := rnrsweep.Run(ctx, c)
	if err != nil {
		return err
	}
	fmt.Print(rnrsweep.Table(c, base, points))
	csvPath, pngPath, err := rnrsweep.WriteOutputs(*out, c, base, points)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s\n", csvPath, pngPath)
	return nil
}

func joinFloats(v []float64) string {
	s := make([]string, len(v))
	for i, f := range v {
		s[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func joinDurations(v []time.Duration) string {
	s := make([]string, len(v))
	for i, d := range v {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, fmt.Errorf("negative duration %v", d)
		}
		out = append(out, d)
	}
	return out, nil
}
