package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/exp/faultcost"
)

// runExpFaultCost runs `npfnic exp fault-cost`: see internal/exp/faultcost.
func runExpFaultCost(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("npfnic exp fault-cost", flag.ContinueOnError)
	opt := addImageFlags(fs)
	out := fs.String("out", "out/exp/fault-cost", "output directory: CSV, PNG, the table and the guest's logs")
	policy := fs.String("policy", faultcost.DefaultPolicy, "the driver's rx_policy: backup, drop or pin")
	ring := fs.Int("ring", faultcost.DefaultRingSize, "the driver's rx_ring_size")
	cycles := fs.Int("cycles", faultcost.DefaultCycles, "cool the RX ring and drive traffic this many times (over all rounds)")
	rounds := fs.Int("rounds", faultcost.DefaultRounds, "rounds, each with its share of the cycles and of the floor's DIAG_ECHO rounds: the ratio is taken per round")
	bytes := fs.Int("bytes", faultcost.DefaultBytes, "bytes iperf3 moves each way per cycle")
	traffic := fs.String("traffic", "iperf", "traffic per cycle: iperf (TCP both ways: bursts of RX faults and TX faults) or ping (isolated RX faults)")
	pings := fs.Int("pings", 10, "echo requests per cycle with -traffic ping")
	echo := fs.Int("echo", 0, fmt.Sprintf("DIAG_ECHO rounds for the interrupt+doorbell floor (default %d, %d with -traffic ping; -1: none)", faultcost.DefaultEchoRounds, faultcost.DefaultEchoRounds/10))
	echoGap := fs.Duration("echo-gap", 0, fmt.Sprintf("pause before each DIAG_ECHO round (default 0, %v with -traffic ping: an idle guest, as isolated faults find it)", faultcost.DefaultPingEchoGap))
	extra := fs.String("driver-params", "", "extra npfnic.ko parameters, e.g. fault_delay_us=100 (emulated major faults)")
	quiet := addQuietFlag(fs)
	tf := addTraceFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic exp fault-cost [flags]\n\n"+
			"The cost of a network page fault, stage by stage (Lesokhin et al., ASPLOS'17, Figure 3 / Table 4): a TCG guest\n"+
			"cools its RX ring again and again while TCP runs both ways; the device (served in this\n"+
			"process) timestamps every page request group: detected, queued, interrupt, response, done.\n"+
			"DIAG_ECHO measures an interrupt plus a doorbell from process context, the floor of a\n"+
			"fault's round trip, interleaved with the faults in rounds. Prints p50/p99 per stage beside\n"+
			"the floor, the device's own share, and the ratio per round; CSV + PNG. Needs root.\n\n")
		fs.PrintDefaults()
	}
	start := time.Now()
	progress, err := parseExpFlags(fs, args, quiet, start)
	if err != nil {
		return err
	}
	c := faultcost.Config{
		Policy: *policy, RingSize: *ring, Cycles: *cycles, Rounds: *rounds, Bytes: *bytes, Traffic: *traffic, Pings: *pings, EchoRounds: *echo, EchoGap: *echoGap, DriverExtra: *extra,
		LogDir: filepath.Join(*out, "logs"), Progress: progress,
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
	res, err := faultcost.Run(ctx, c)
	if werr := tf.write(c.Trace, os.Stdout); werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	fmt.Print("\n" + faultcost.Table(c, res))
	files, err := faultcost.WriteOutputs(*out, c, res)
	if err != nil {
		return err
	}
	fmt.Printf("\nwrote %s (guest logs in %s) in %.0fs\n", strings.Join(files, ", "), c.LogDir, time.Since(start).Seconds())
	if len(res.Records) == 0 {
		return fmt.Errorf("no page faults were recorded (is the driver's rx_policy %s taking effect?)", c.Policy)
	}
	return nil
}
