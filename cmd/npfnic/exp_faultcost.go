package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/npfnic/npfnic/internal/exp/faultcost"
	"github.com/npfnic/npfnic/internal/exp/runner"
)

// expFaultCost is `npfnic exp fault-cost`: see internal/exp/faultcost.
var expFaultCost = experiment{
	name: "fault-cost", guests: true,
	about: "The cost of a network page fault, stage by stage (Lesokhin et al., ASPLOS'17, Figure 3 / Table 4).\n" +
		"-transport eth: a guest cools its RX ring again and again while TCP runs both ways; the\n" +
		"device (served in this process) timestamps every page request group: detected, queued,\n" +
		"interrupt, response, done. -transport rc: an rdma_rxe guest sends into npfnic's cold ODP\n" +
		"memory; from the device's trace, each receive fault: detected, RNR NAK sent, page request\n" +
		"queued, interrupt, response, retransmission received and accepted. DIAG_ECHO measures an\n" +
		"interrupt plus a doorbell from process context, the floor of a fault's round trip,\n" +
		"interleaved with the faults in rounds. Prints p50/p99 per stage beside the floor, the\n" +
		"device's own share, the ratio per round and the papers' figures; CSV + PNG. Needs root.",
	memory: 1024, memoryHelp: "guest memory in MiB (rc: of each guest)",
	rounds: faultcost.DefaultRounds, roundsHelp: "rounds, each with its share of the cycles and of the floor's DIAG_ECHO rounds: the ratio is taken per round",
	flags: func(fs *flag.FlagSet) expSetup {
		transport := fs.String("transport", "eth", "eth (RX and TX buffers of the Ethernet rings), rc (RC receives into npfnic's ODP memory from an rdma_rxe guest: RNR NAK), or both (one after the other, then the two side by side)")
		policy := fs.String("policy", faultcost.DefaultPolicy, "eth: the driver's rx_policy: backup, drop or pin")
		ring := fs.Int("ring", faultcost.DefaultRingSize, "eth: the driver's rx_ring_size")
		cycles := fs.Int("cycles", faultcost.DefaultCycles, "cycles over all rounds (eth: cool the RX ring and drive traffic; rc: one ib_send_bw into npfnic)")
		bytes := fs.Int("bytes", faultcost.DefaultBytes, "eth: bytes iperf3 moves each way per cycle")
		traffic := fs.String("traffic", "iperf", "eth: traffic per cycle: iperf (TCP both ways: bursts of RX faults and TX faults) or ping (isolated RX faults)")
		pings := fs.Int("pings", 10, "eth: echo requests per cycle with -traffic ping")
		echo := fs.Int("echo", 0, fmt.Sprintf("DIAG_ECHO rounds for the interrupt+doorbell floor (default eth %d, %d with -traffic ping; rc %d; -1: none)", faultcost.DefaultEchoRounds, faultcost.DefaultEchoRounds/10, faultcost.DefaultRCEchoRounds))
		echoGap := fs.Duration("echo-gap", 0, fmt.Sprintf("pause before each DIAG_ECHO round (default eth 0, %v with -traffic ping; rc %v: an idle guest, as isolated faults find it)", faultcost.DefaultPingEchoGap, faultcost.DefaultRCEchoGap))
		extra := fs.String("driver-params", "", "extra npfnic.ko parameters, e.g. fault_delay_us=100 (emulated major faults); rc writes them to /sys/module/npfnic/parameters")
		rcPolicy := fs.String("rc-policy", faultcost.DefaultRCPolicy, "rc: the responder's receive-fault policy (debugfs rdma_recv_fault): rnr or drop")
		rcTraffic := fs.String("rc-traffic", faultcost.RCTrafficCold, "rc: cold (a fresh ib_send_bw --odp server per cycle: every page of its receive buffer faults once) or rnpf (the driver evicts a page per -rc-rate messages)")
		rcSize := fs.Int("rc-msg-size", faultcost.DefaultRCSize, "rc: ib_send_bw message size (-s)")
		rcIters := fs.Int("rc-iters", 0, fmt.Sprintf("rc: ib_send_bw messages per cycle (-n; default %d, %d with -rc-traffic rnpf)", faultcost.DefaultRCIters, faultcost.DefaultRCRNPFIters))
		rcRate := fs.Int("rc-rate", 0, fmt.Sprintf("rc: rnpf_rate_ppm with -rc-traffic rnpf (default %d)", faultcost.DefaultRCRatePPM))
		rcPoll := fs.Bool("rc-poll", false, "rc: npfnic's ib_send_bw busy-polls its CQ (default: it waits on completion events, -e, leaving its guest idle)")
		sender := fs.String("sender", faultcost.RCSenderRxe, "rc: the sending guest: rxe (rdma_rxe, which waits at least a jiffy per RNR NAK) or npfnic (a second npfnic, which waits the NAK's timer)")
		prefault := fs.String("rc-prefault", "", fmt.Sprintf("rc: odp_prefault_pages values to sweep, comma-separated (1..%d; each runs -cycles cycles; default: the driver's, untouched)", faultcost.MaxRCPrefault))
		return func(x expRun) (expRunFunc, error) {
			runEth, runRC := *transport == "eth" || *transport == "both", *transport == "rc" || *transport == "both"
			if !runEth && !runRC {
				return nil, fmt.Errorf("-transport %q: want eth, rc or both", *transport)
			}
			c := faultcost.Config{
				Env: x.Env, Policy: *policy, RingSize: *ring, Cycles: *cycles, Rounds: x.Rounds, Bytes: *bytes, Traffic: *traffic, Pings: *pings,
				EchoRounds: *echo, EchoGap: *echoGap, DriverExtra: *extra, MemoryMiB: x.MemoryMiB, CPUs: x.CPUs,
			}
			rc := faultcost.RCConfig{
				Env: x.Env, Policy: *rcPolicy, Traffic: *rcTraffic, Size: *rcSize, Iters: *rcIters, RatePPM: *rcRate, Cycles: *cycles, Rounds: x.Rounds,
				EchoRounds: *echo, EchoGap: *echoGap, Poll: *rcPoll, DriverParams: *extra, MemoryMiB: x.MemoryMiB, CPUs: x.CPUs, Sender: *sender,
			}
			if *prefault != "" {
				var err error
				if rc.Prefault, err = runner.ParseInts(*prefault, "odp_prefault_pages"); err != nil {
					return nil, err
				}
			}
			rc.LogDir = filepath.Join(x.Out, "logs-rc")
			if err := validateBoth(runEth, c.Validate, runRC, rc.Validate); err != nil {
				return nil, err
			}
			return func(ctx context.Context, g expGuests) (*runner.Outcome, error) {
				g.into(&c.Env)
				g.into(&rc.Env)
				var res *faultcost.Result
				if runEth {
					var err error
					if res, err = faultcost.Run(ctx, c); err != nil || !runRC {
						return faultcost.Report(c, res), err
					}
				}
				rcRes, err := faultcost.RunRC(ctx, rc)
				return faultcost.ReportBoth(c, res, rc, rcRes), err
			}, nil
		}
	},
}

// validateBoth validates the halves that run.
func validateBoth(eth bool, validateEth func() error, rc bool, validateRC func() error) error {
	if eth {
		if err := validateEth(); err != nil {
			return err
		}
	}
	if rc {
		return validateRC()
	}
	return nil
}
