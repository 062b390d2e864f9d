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

	"github.com/npfnic/npfnic/internal/exp/rdmaperf"
)

// runExpRDMA runs `npfnic exp rdma`: see internal/exp/rdmaperf.
func runExpRDMA(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("npfnic exp rdma", flag.ContinueOnError)
	opt := addImageFlags(fs)
	out := fs.String("out", "out/exp/rdma", "output directory: CSV, PNG, the table and the guests' logs")
	pairs := fs.String("pairs", rdmaperf.DefaultPairs, "pairings to measure, SERVER-CLIENT, each rxe (rdma_rxe over virtio-net) or npfnic")
	rounds := fs.Int("rounds", rdmaperf.DefaultRounds, "rounds; each runs every test on every pair, the pairs' order rotated")
	iters := fs.Int("iters", rdmaperf.DefaultIters, "perftest iterations per test (-n)")
	quiet := addQuietFlag(fs)
	tf := addTraceFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic exp rdma [flags]\n\n"+
			"Unmodified perftest (ib_write_bw, ib_send_bw, ib_read_bw at 64 KiB, ib_send_lat at 64 B)\n"+
			"between two TCG guests cabled back to back through QEMU's stream netdev, for each pairing\n"+
			"of rdma_rxe and npfnic. All pairs stay booted and the rounds interleave them. Prints medians\n"+
			"with min-max and the ratio to rxe-rxe, judges the goals, writes CSV and PNG. Needs root.\n\n")
		fs.PrintDefaults()
	}
	start := time.Now()
	progress, err := parseExpFlags(fs, args, quiet, start)
	if err != nil {
		return err
	}
	ps, err := rdmaperf.ParsePairs(*pairs)
	if err != nil {
		return fmt.Errorf("-pairs: %w", err)
	}
	c := rdmaperf.Config{Pairs: ps, Rounds: *rounds, Iters: *iters, LogDir: filepath.Join(*out, "logs"), Progress: progress}
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
	results, runErr := rdmaperf.Run(ctx, c)
	if len(results) > 0 {
		fmt.Print("\n" + rdmaperf.Table(c, results))
		files, err := rdmaperf.WriteOutputs(*out, c, results)
		if err != nil {
			return err
		}
		fmt.Printf("\nwrote %s (guest logs in %s) in %.0fs\n", strings.Join(files, ", "), c.LogDir, time.Since(start).Seconds())
	}
	if err := tf.write(c.Trace, os.Stdout); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	for _, cell := range rdmaperf.Summarize(c, results) {
		if cell.OK == 0 {
			return errors.New("some pairs measured nothing (see failures above)")
		}
	}
	return nil
}
