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
	"sort"
	"strings"
	"syscall"

	"github.com/npfnic/npfnic/internal/testbed/vm"
)

type command struct {
	run     func(ctx context.Context, args []string) error
	summary string
}

var commands = map[string]command{
	"images": {runImages, "build (or check) the QEMU, kernel, driver and initramfs images"},
	"boot":   {runBoot, "boot a guest with an npfnic device and attach to its console"},
	"serve":  {runServe, "serve one npfnic device on a vfio-user socket"},
	"exp":    {runExp, "run an experiment (npfnic exp help)"},
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: npfnic COMMAND [flags]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nnpfnic COMMAND -h shows a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "help" || os.Args[1] == "--help" {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
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

// experiments are the "npfnic exp NAME" subcommands.
var experiments = map[string]command{}

func runExp(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" {
		names := make([]string, 0, len(experiments))
		for n, e := range experiments {
			names = append(names, fmt.Sprintf("  %-12s %s", n, e.summary))
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: npfnic exp NAME [flags]\n\nexperiments:\n%s\n", strings.Join(names, "\n"))
		return flag.ErrHelp
	}
	e, ok := experiments[args[0]]
	if !ok {
		return fmt.Errorf("unknown experiment %q (npfnic exp help lists them)", args[0])
	}
	return e.run(ctx, args[1:])
}
