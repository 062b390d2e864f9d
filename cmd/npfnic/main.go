// Command npfnic serves the npfnic virtual NIC to QEMU over vfio-user, builds
// the guest images, boots guests with the NIC and runs the experiments.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// command is one subcommand: "npfnic NAME" or "npfnic exp NAME".
type command struct {
	name    string
	run     func(ctx context.Context, args []string) error
	summary string
}

// commands and experiments are every subcommand, in the order help lists
// them (by name). They are two tables here, not init() functions spread
// over the files that implement them: one look shows all the binary does,
// a name is listed once, and nothing depends on the order in which Go runs
// the files' init functions.
var commands = []command{
	{"boot", runBoot, "boot a guest with an npfnic device and attach to its console"},
	{"demo", runDemo, "boot a guest with an npfnic device, bind the driver and exercise the device (the README's main job)"},
	{"exp", runExp, "run an experiment (npfnic exp help)"},
	{"images", runImages, "build (or check) the QEMU, kernel, driver and initramfs images"},
	{"serve", runServe, "serve one npfnic device on a vfio-user socket"},
	{"trace", runTrace, "read a device trace (-trace): page fault stage latencies, and one fault drawn as a PNG"},
}

var experiments = []command{
	{"cold-ring", expColdRing.run, "Lesokhin et al. ASPLOS'17, Figure 4: memcached from a cold RX ring under pin, drop and backup; time for 10,000 ops vs ring size"},
	{"datapath", expDatapath.run, "the same TCG guest through QEMU's e1000e, QEMU's virtio-net and npfnic: iperf3 both ways, memcached/memaslap"},
	{"fault-cost", expFaultCost.run, "Lesokhin et al. ASPLOS'17, Figure 3/Table 4: per-stage cost of a network page fault (p50/p99) against an interrupt+doorbell floor"},
	{"rdma", expRDMA.run, "unmodified perftest between two TCG guests: rdma_rxe and npfnic paired every way, bandwidth and latency against rxe-rxe"},
	{"rnpf-rate", expRNPFRate.run, "Lesokhin et al. ASPLOS'17, Figure 10: stream throughput against the rate of synthetic receive faults, minor and major: TCP with the backup ring vs drop (left), or with -transport rc ib_send_bw --odp with RNR NAK vs drop (right)"},
	{"rnr", expRNR.run, "RC throughput vs receive-fault rate: RNR NAK vs drop-and-timeout (Lesokhin et al. ASPLOS'17, Fig. 10 right)"},
}

// lookup finds name in a table.
func lookup(table []command, name string) (command, bool) {
	for _, c := range table {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: npfnic COMMAND [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(os.Stderr, "\nnpfnic COMMAND -h shows a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "help" || os.Args[1] == "--help" {
		usage()
		os.Exit(2)
	}
	cmd, ok := lookup(commands, os.Args[1])
	if !ok {
		fmt.Fprintf(os.Stderr, "npfnic: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	ctx := interruptible()
	if err := cmd.run(ctx, os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "npfnic %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// interruptible returns a context cancelled by the first SIGINT or
// SIGTERM: boot and the experiments then shut their guests down and remove
// what they created. A second signal kills every VM at once and exits.
// QEMU and the device servers die with this process in any case (package
// internal/testbed/child), even on SIGKILL.
func interruptible() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "\r\nnpfnic: %v: stopping (again to kill at once)\r\n", s)
		cancel()
		<-sigs
		vm.KillAll()
		os.Exit(130)
	}()
	return ctx
}

func runExp(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" {
		var lines []string
		for _, e := range experiments {
			lines = append(lines, fmt.Sprintf("  %-12s %s", e.name, e.summary))
		}
		fmt.Fprintf(os.Stderr, "usage: npfnic exp NAME [flags]\n\nexperiments:\n%s\n", strings.Join(lines, "\n"))
		return flag.ErrHelp
	}
	e, ok := lookup(experiments, args[0])
	if !ok {
		return fmt.Errorf("unknown experiment %q (npfnic exp help lists them)", args[0])
	}
	return e.run(ctx, args[1:])
}
