package testbed

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// rshLog is where the second guest's remote shell for mpirun logs.
const rshLog = "/tmp/npfnic-rsh.log"

// MPIRunResult is what one mpirun between the pair printed.
type MPIRunResult struct {
	// Output is mpirun's: the benchmark's lines (rank 0's stdout) and both
	// ranks' stderr.
	Output string
	// Parsed is the benchmark's results.
	Parsed workload.MPIOutput
	// Took is mpirun's time, its start-up on both guests included.
	Took time.Duration
}

// MPI runs Open MPI between the pair (an image with Open MPI:
// images.VariantMPI), rank 0 on A, where mpirun runs, and rank 1 on B,
// whose orted mpirun starts through npfnic-guest's remote shell, which
// the first run starts on B. run's hosts, subnet and devices are the
// pair's. Under workload.MPINPF every npfnic of the pair runs with
// npfnic.ko's odp=all for the run, and with odp=explicit, the default,
// again after it.
func (p *RDMAPair) MPI(ctx context.Context, run workload.MPIRun) (MPIRunResult, error) {
	run.Hosts = [2]string{p.A.IP, p.B.IP}
	run.Subnet = rdmaSubnet + "0/24"
	run.Devices = []string{p.A.Dev}
	if p.B.Dev != p.A.Dev {
		run.Devices = append(run.Devices, p.B.Dev)
	}
	argv, err := run.Argv()
	if err != nil {
		return MPIRunResult{}, err
	}
	if err := p.startRSH(ctx); err != nil {
		return MPIRunResult{}, err
	}
	if run.Config == workload.MPINPF {
		for _, g := range p.Guests() {
			if g.Kind != RDMANPFNIC {
				continue
			}
			if err := setODPParam(ctx, g, "all"); err != nil {
				return MPIRunResult{}, err
			}
			defer setODPParam(context.WithoutCancel(ctx), g, "explicit")
		}
	}
	// mpirun ends a little before ctx does, so that one that hangs is
	// reported with what it printed.
	limit := time.Duration(0)
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		limit = max(left-min(left/4, 20*time.Second), time.Millisecond)
	}
	start := time.Now()
	r, err := p.A.VM.ExecWithin(ctx, limit, argv...)
	res := MPIRunResult{Output: r.Stdout + r.Stderr, Took: time.Since(start)}
	switch {
	case err != nil:
		return res, err
	case r.TimedOut:
		return res, fmt.Errorf("mpirun still running after %v, killed:\n%s", limit.Round(time.Second), res.Output)
	case r.Exit != 0:
		return res, fmt.Errorf("mpirun: exit %d:\n%s", r.Exit, res.Output)
	}
	if res.Parsed, err = workload.ParseMPIBench(res.Output); err != nil {
		return res, fmt.Errorf("%w:\n%s", err, res.Output)
	}
	return res, nil
}

// startRSH names both guests and starts B's remote shell for mpirun,
// once per boot of B, and waits until it listens.
func (p *RDMAPair) startRSH(ctx context.Context) error {
	if p.rsh != nil && !p.rsh.Exited() {
		return nil
	}
	// Open MPI names nodes by host name, and orted crashes on the
	// kernel's "(none)": each guest gets one.
	for i, g := range p.Guests() {
		if _, err := g.shell(ctx, fmt.Sprintf("echo mpi-%c-%s > /proc/sys/kernel/hostname", 'a'+i, g.Kind)); err != nil {
			return err
		}
	}
	g := workload.GuestRunner{VM: p.B.VM, Name: string(p.B.Kind) + " " + p.B.IP}
	// The daemon lives as long as the pair: not bound to this ctx.
	p.rsh = workload.StartDaemon(context.WithoutCancel(ctx), g, "npfnic-guest rsh-serve", rshLog,
		fmt.Sprintf("exec npfnic-guest rsh-serve %s >%s 2>&1", p.B.IP, rshLog))
	return p.rsh.WaitFor(ctx, 30*time.Second, "npfnic-guest rsh "+p.B.IP+" echo ready", func(out string, exit int) error {
		if exit != 0 || !strings.Contains(out, "ready") {
			return fmt.Errorf("rsh to %s: exit %d: %s", p.B.IP, exit, strings.TrimSpace(out))
		}
		return nil
	})
}
