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

	"github.com/npfnic/npfnic/internal/exp/faultcost"
)

// runExpFaultCost runs `npfnic exp fault-cost`: see internal/exp/faultcost.
func runExpFaultCost(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("npfnic exp fault-cost", flag.ContinueOnError)
	opt := addImageFlags(fs)
	out := fs.String("out", "out/exp/fault-cost", "output directory: CSV, PNG, the table and the guests' logs")
	transport := fs.String("transport", "eth", "eth (RX and TX buffers of the Ethernet rings), rc (RC receives into npfnic's ODP memory from an rdma_rxe guest: RNR NAK), or both (one after the other, then the two side by side)")
	policy := fs.String("policy", faultcost.DefaultPolicy, "eth: the driver's rx_policy: backup, drop or pin")
	ring := fs.Int("ring", faultcost.DefaultRingSize, "eth: the driver's rx_ring_size")
	cycles := fs.Int("cycles", faultcost.DefaultCycles, "cycles over all rounds (eth: cool the RX ring and drive traffic; rc: one ib_send_bw into npfnic)")
	rounds := fs.Int("rounds", faultcost.DefaultRounds, "rounds, each with its share of the cycles and of the floor's DIAG_ECHO rounds: the ratio is taken per round")
	bytes := fs.Int("bytes", faultcost.DefaultBytes, "eth: bytes iperf3 moves each way per cycle")
	traffic := fs.String("traffic", "iperf", "eth: traffic per cycle: iperf (TCP both ways: bursts of RX faults and TX faults) or ping (isolated RX faults)")
	pings := fs.Int("pings", 10, "eth: echo requests per cycle with -traffic ping")
	echo := fs.Int("echo", 0, fmt.Sprintf("DIAG_ECHO rounds for the interrupt+doorbell floor (default eth %d, %d with -traffic ping; rc %d; -1: none)", faultcost.DefaultEchoRounds, faultcost.DefaultEchoRounds/10, faultcost.DefaultRCEchoRounds))
	echoGap := fs.Duration("echo-gap", 0, fmt.Sprintf("pause before each DIAG_ECHO round (default eth 0, %v with -traffic ping; rc %v: an idle guest, as isolated faults find it)", faultcost.DefaultPingEchoGap, faultcost.DefaultRCEchoGap))
	extra := fs.String("driver-params", "", "extra npfnic.ko parameters, e.g. fault_delay_us=100 (emulated major faults); rc writes them to /sys/module/npfnic/parameters")
	rcPolicy := fs.String("rc-policy", faultcost.DefaultRCPolicy, "rc: the responder's receive-fault policy (debugfs rdma_recv_fault): rnr or drop")
	rcTraffic := fs.String("rc-traffic", faultcost.RCTrafficCold, "rc: cold (a fresh ib_send_bw --odp server per cycle: every page of its receive buffer faults once) or rnpf (the driver evicts a page per -rc-rate messages)")
	rcSize := fs.Int("rc-size", faultcost.DefaultRCSize, "rc: ib_send_bw message size (-s)")
	rcIters := fs.Int("rc-iters", 0, fmt.Sprintf("rc: ib_send_bw messages per cycle (-n; default %d, %d with -rc-traffic rnpf)", faultcost.DefaultRCIters, faultcost.DefaultRCRNPFIters))
	rcRate := fs.Int("rc-rate", 0, fmt.Sprintf("rc: rnpf_rate_ppm with -rc-traffic rnpf (default %d)", faultcost.DefaultRCRatePPM))
	rcPoll := fs.Bool("rc-poll", false, "rc: npfnic's ib_send_bw busy-polls its CQ (default: it waits on completion events, -e, leaving its guest idle)")
	quiet := addQuietFlag(fs)
	tf := addTraceFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic exp fault-cost [flags]\n\n"+
			"The cost of a network page fault, stage by stage (Lesokhin et al., ASPLOS'17, Figure 3 / Table 4).\n"+
			"-transport eth: a TCG guest cools its RX ring again and again while TCP runs both ways; the\n"+
			"device (served in this process) timestamps every page request group: detected, queued,\n"+
			"interrupt, response, done. -transport rc: an rdma_rxe guest sends into npfnic's cold ODP\n"+
			"memory; from the device's trace, each receive fault: detected, RNR NAK sent, page request\n"+
			"queued, interrupt, response, retransmission received and accepted. DIAG_ECHO measures an\n"+
			"interrupt plus a doorbell from process context, the floor of a fault's round trip,\n"+
			"interleaved with the faults in rounds. Prints p50/p99 per stage beside the floor, the\n"+
			"device's own share, the ratio per round and the papers' figures; CSV + PNG. Needs root.\n\n")
		fs.PrintDefaults()
	}
	start := time.Now()
	progress, err := parseExpFlags(fs, args, quiet, start)
	if err != nil {
		return err
	}
	runEth, runRC := false, false
	switch *transport {
	case "eth":
		runEth = true
	case "rc":
		runRC = true
	case "both":
		runEth, runRC = true, true
	default:
		return fmt.Errorf("-transport %q: want eth, rc or both", *transport)
	}
	c := faultcost.Config{
		Policy: *policy, RingSize: *ring, Cycles: *cycles, Rounds: *rounds, Bytes: *bytes, Traffic: *traffic, Pings: *pings, EchoRounds: *echo, EchoGap: *echoGap, DriverExtra: *extra,
		LogDir: filepath.Join(*out, "logs"), Progress: progress,
	}
	rc := faultcost.RCConfig{
		Policy: *rcPolicy, Traffic: *rcTraffic, Size: *rcSize, Iters: *rcIters, RatePPM: *rcRate, Cycles: *cycles, Rounds: *rounds,
		EchoRounds: *echo, EchoGap: *echoGap, Poll: *rcPoll, DriverParams: *extra, LogDir: filepath.Join(*out, "logs-rc"), Progress: progress,
	}
	if c.Trace, err = tf.recorder(); err != nil {
		return err
	}
	rc.Trace = c.Trace
	if c.Images, err = buildImages(ctx, opt); err != nil {
		return err
	}
	rc.Images = c.Images
	if runEth {
		if err := c.Validate(); err != nil {
			return err
		}
	}
	if runRC {
		if err := rc.Validate(); err != nil {
			return err
		}
	}
	var (
		res   *faultcost.Result
		rcRes *faultcost.RCResult
		files []string
	)
	if runEth {
		if err := os.RemoveAll(c.LogDir); err != nil {
			return err
		}
		res, err = faultcost.Run(ctx, c)
		if err != nil {
			return errors.Join(err, tf.write(c.Trace, os.Stdout))
		}
		fmt.Print("\n" + faultcost.Table(c, res))
		f, err := faultcost.WriteOutputs(*out, c, res)
		if err != nil {
			return err
		}
		files = append(files, f...)
	}
	if runRC {
		if err := os.RemoveAll(rc.LogDir); err != nil {
			return err
		}
		rcRes, err = faultcost.RunRC(ctx, rc)
		if err != nil {
			return errors.Join(err, tf.write(c.Trace, os.Stdout))
		}
		fmt.Print("\n" + faultcost.RCTable(rc, rcRes))
		f, err := faultcost.WriteRCOutputs(*out, rc, rcRes)
		if err != nil {
			return err
		}
		files = append(files, f...)
		cmp := faultcost.CompareTable(c.Policy, res, rc.Policy, rcRes)
		fmt.Print("\n" + cmp)
		p := filepath.Join(*out, "fault-cost-compare.txt")
		if err := os.WriteFile(p, []byte(cmp), 0o644); err != nil {
			return err
		}
		files = append(files, p)
	}
	if werr := tf.write(c.Trace, os.Stdout); werr != nil {
		return werr
	}
	fmt.Printf("\nwrote %s in %.0fs\n", strings.Join(files, ", "), time.Since(start).Seconds())
	if res != nil && len(res.Records) == 0 {
		return fmt.Errorf("no page faults were recorded (is the driver's rx_policy %s taking effect?)", c.Policy)
	}
	if rcRes != nil {
		return faultcost.CheckRC(rcRes)
	}
	return nil
}
