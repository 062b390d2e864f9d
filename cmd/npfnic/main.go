// Command npfnic serves the npfnic virtual NIC to QEMU over vfio-user, builds
// the guest images, boots guests with the NIC and runs the experiments.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	{"exp", runExp, "run an experiment (npfnic exp -h lists them)"},
	{"images", runImages, "build (or check) the QEMU, kernel, driver and initramfs images"},
	{"serve", runServe, "serve one npfnic device on a vfio-user socket"},
	{"trace", runTrace, "read a device trace (-trace): page fault stage latencies, and one fault drawn as a PNG"},
	{"version", runVersion, "print the module version, VCS revision and Go version (also --version)"},
}

var experiments = []command{
	{"cold-ring", expColdRing.run, "Lesokhin et al. ASPLOS'17, Figure 4: memcached from a cold RX ring under pin, drop and backup; time for 10,000 ops vs ring size"},
	{"conformance", expConformance.run, "rdma-core's own test suite on npfnic and on rdma_rxe, side by side: every test's status, npfnic's failures and missing features"},
	{"datapath", expDatapath.run, "the same guest through QEMU's e1000e, QEMU's virtio-net and npfnic: iperf3 both ways, memcached/memaslap"},
	{"fault-cost", expFaultCost.run, "Lesokhin et al. ASPLOS'17, Figure 3/Table 4: per-stage cost of a network page fault (p50/p99) against an interrupt+doorbell floor"},
	{"mpi", expMPI.run, "seed 000's Figure 9 and Table 6: Open MPI over UCX between two guests, copying, pinning and NPF"},
	{"overcommit", expOvercommit.run, "seed 000's Table 5: RDMA servers whose registered memory exceeds the guest's, pinned and on demand"},
	{"rdma", expRDMA.run, "unmodified perftest between two guests: rdma_rxe and npfnic paired every way, bandwidth and latency against rxe-rxe"},
	{"rnpf-rate", expRNPFRate.run, "Lesokhin et al. ASPLOS'17, Figure 10: stream throughput against the rate of synthetic receive faults, minor and major: TCP with the backup ring vs drop (left), or with -transport rc ib_send_bw --odp with RNR NAK vs drop (right)"},
	{"rnr", expRNR.run, "RC throughput vs receive-fault rate: RNR NAK vs drop-and-timeout (Lesokhin et al. ASPLOS'17, Fig. 10 right)"},
	{"storage", expStorage.run, "seed 000's Figure 8: tgt over iSER in a memory-limited cgroup, pinned and NPF (odp=all)"},
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

// stdout and stderr are where the command line's own output goes: usage,
// help, errors and the version. Tests replace them.
var (
	stdout io.Writer = os.Stdout
	stderr io.Writer = os.Stderr
)

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: npfnic COMMAND [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\n'npfnic help COMMAND' or 'npfnic COMMAND -h' shows a command's flags;\n"+
		"'npfnic exp -h' lists the experiments. Exit status: 0 done, 1 failed, 2 bad command line.\n")
}

func main() {
	ctx := interruptible()
	os.Exit(interruptedStatus(ctx, run(ctx, os.Args[1:])))
}

// interruptedStatus is the exit status of a command that ended with
// status: 130, as a shell reports a command SIGINT ended, when a signal
// stopped it before it finished its job (the results it gathered are
// written, and run.json says the run was interrupted).
func interruptedStatus(ctx context.Context, status int) int {
	if status != 0 && ctx.Err() != nil {
		return 130
	}
	return status
}

// run runs the command line args (without the program name) and returns
// the exit status: 0 when the command did its job or printed the help
// asked for, 1 when it failed, 2 when the command line is wrong (the
// error and a hint on stderr; the usage on stdout is one -h away).
func run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		usage(stderr)
		return exit("", errUsageShown)
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name, args = "help", args[1:]
	case "help":
		args = args[1:]
	case "-version", "--version":
		name, args = "version", args[1:]
	default:
		args = args[1:]
	}
	var err error
	path := name
	switch c, ok := lookup(commands, name); {
	case name == "help":
		err = runHelp(ctx, args)
	case ok:
		err = c.run(ctx, args)
	case strings.HasPrefix(name, "-"):
		path, err = "", usageErrorf("flag provided but not defined: %s", name)
	default:
		path, err = "", usageErrorf("unknown command %q", name)
	}
	return exit(path, err)
}

// exit reports err of the command path ("boot", "exp rnr", "" for npfnic
// itself) on stderr and returns the exit status.
func exit(path string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errUsageShown) {
		return 2
	}
	var pe *pathError
	if errors.As(err, &pe) {
		path, err = pe.path, pe.err
	}
	prog := strings.TrimSpace("npfnic " + path)
	if errors.Is(err, context.Canceled) {
		// What an interrupted experiment gathered is written already.
		fmt.Fprintf(stderr, "%s: interrupted\n", prog)
		return 1
	}
	fmt.Fprintf(stderr, "%s: %v\n", prog, err)
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "run '%s -h' for usage\n", prog)
		return 2
	}
	return 1
}

// runHelp is "npfnic help [COMMAND [NAME]]": the usage of npfnic, of a
// command, or of an experiment, on stdout.
func runHelp(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" || strings.HasPrefix(args[0], "-") && len(args) == 1 {
		usage(stdout)
		return nil
	}
	c, ok := lookup(commands, args[0])
	if !ok {
		return usageErrorf("unknown command %q", args[0])
	}
	if args[0] == "exp" && len(args) > 1 {
		return c.run(ctx, append([]string{"help"}, args[1:]...))
	}
	if len(args) > 1 {
		return usageErrorf("unexpected argument %q after %s", args[1], args[0])
	}
	return c.run(ctx, []string{"-h"})
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

// runExp is "npfnic exp NAME [flags]"; "npfnic exp" alone, -h or help
// lists the experiments, "npfnic exp help NAME" shows one's usage.
func runExp(ctx context.Context, args []string) error {
	list := func(w io.Writer) {
		fmt.Fprintf(w, "usage: npfnic exp NAME [flags]\n\nexperiments:\n")
		for _, e := range experiments {
			fmt.Fprintf(w, "  %-12s %s\n", e.name, e.summary)
		}
		fmt.Fprintf(w, "\n'npfnic exp NAME -h' shows an experiment's flags.\n")
	}
	if len(args) == 0 {
		list(stderr)
		return errUsageShown
	}
	name := args[0]
	switch {
	case name == "-h" || name == "-help" || name == "--help" || name == "help" && len(args) == 1:
		list(stdout)
		return flag.ErrHelp
	case name == "help":
		if len(args) > 2 {
			return usageErrorf("unexpected argument %q after help %s", args[2], args[1])
		}
		name, args = args[1], []string{args[1], "-h"}
	case strings.HasPrefix(name, "-"):
		return usageErrorf("%s: flags go after the experiment's name (npfnic exp NAME %s)", name, name)
	}
	e, ok := lookup(experiments, name)
	if !ok {
		names := make([]string, len(experiments))
		for i, e := range experiments {
			names[i] = e.name
		}
		return usageErrorf("unknown experiment %q (want %s)", name, strings.Join(names, ", "))
	}
	if err := e.run(ctx, args[1:]); err != nil {
		return &pathError{path: "exp " + name, err: err}
	}
	return nil
}
