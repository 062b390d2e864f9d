package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/internal/exp/rnrsweep"
	"github.com/npfnic/npfnic/internal/exp/runner"
)

// expRNR is `npfnic exp rnr`: the receive-fault frequency sweep of the RC
// transport on a simulated link (see package internal/exp/rnrsweep for
// the model).
var expRNR = experiment{
	name: "rnr",
	about: "RC throughput against the receive-fault rate on a simulated link, in virtual time: RNR NAK\n" +
		"against drop-and-timeout, for minor and major fault resolution times (Lesokhin et al.,\n" +
		"ASPLOS'17, Fig. 10 right). Two ibrc engines, no guests; a few seconds of host CPU.",
	flags: func(fs *flag.FlagSet) expSetup {
		c := rnrsweep.DefaultConfig()
		rates := fs.String("rates", runner.JoinFloats(c.FaultRates), "receive fault probabilities per packet, comma-separated")
		res := fs.String("resolution", runner.JoinDurations(c.Resolutions), "page-fault resolution times (minor, major), comma-separated")
		fs.IntVar(&c.MsgSize, "msg-size", c.MsgSize, "SEND message size in bytes")
		mtu := fs.Int("mtu", c.MTU.Bytes(), "path MTU in bytes (256, 512, 1024, 2048, 4096)")
		fs.Float64Var(&c.LinkGbps, "gbps", c.LinkGbps, "link rate in Gb/s")
		fs.DurationVar(&c.Latency, "latency", c.Latency, "one-way link latency")
		timeout := fs.Uint("ack-timeout", uint(c.Timeout), "local ACK timeout code: 4.096us x 2^code")
		fs.IntVar(&c.RNRTimer, "rnr-timer", c.RNRTimer, "RNR NAK timer code 0-31; -1 picks the smallest timer >= the resolution")
		fs.IntVar(&c.MinFaults, "faults-per-point", c.MinFaults, "aim for this many faults per point")
		maxMiB := fs.Int64("max-mib", c.MaxBytes>>20, "most MiB sent per point")
		minMiB := fs.Int64("min-mib", c.MinBytes>>20, "least MiB sent per point")
		fs.IntVar(&c.Window, "window", c.Window, "PSNs in flight per QP")
		fs.Uint64Var(&c.Seed, "seed", c.Seed, "fault injection seed")
		return func(x expRun) (expRunFunc, error) {
			var err error
			if c.FaultRates, err = runner.ParseFloats(*rates, "rate"); err != nil {
				return nil, fmt.Errorf("-rates: %w", err)
			}
			if c.Resolutions, err = runner.ParseDurations(*res); err != nil {
				return nil, fmt.Errorf("-resolution: %w", err)
			}
			c.MTU = 0
			var mtus []string
			for m := ibrc.MTU256; m <= ibrc.MTU4096; m++ {
				mtus = append(mtus, fmt.Sprint(m.Bytes()))
				if m.Bytes() == *mtu {
					c.MTU = m
				}
			}
			if c.MTU == 0 {
				return nil, fmt.Errorf("-mtu %d: want %s", *mtu, strings.Join(mtus, ", "))
			}
			if *timeout < 1 || *timeout > 31 {
				return nil, fmt.Errorf("-ack-timeout %d: want 1 to 31", *timeout)
			}
			c.Timeout = uint8(*timeout)
			c.MinBytes, c.MaxBytes = *minMiB<<20, *maxMiB<<20
			if err := c.Validate(); err != nil {
				return nil, err
			}
			c.Progress = rnrsweep.ProgressTo(x.Progress, "")
			return func(ctx context.Context, _ expGuests) (*runner.Outcome, error) {
				// An interrupted sweep reports the points it finished.
				base, points, err := rnrsweep.Run(ctx, c)
				if base.MBps == 0 {
					return nil, err
				}
				return rnrsweep.Report(c, base, points), err
			}, nil
		}
	},
}
