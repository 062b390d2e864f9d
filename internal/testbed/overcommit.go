package testbed

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// OvercommitRun is one step of the overcommit workload on a pair: as many
// servers as Instances on A (an npfnic), started one after the other,
// each registering Region bytes, then one client per server that started,
// on B, all at once, writing WS bytes of its server's region.
type OvercommitRun struct {
	Reg        workload.OvercommitReg
	Instances  int
	Region, WS int64
	Size       int     // bytes per WRITE; 0: 64 KiB
	Depth      int     // WRITEs outstanding per client; 0: 8
	Seconds    float64 // each client's run; 0: 10
}

// OvercommitResult is what a step measured.
type OvercommitResult struct {
	// Started is how many servers registered and served their client;
	// Failed says why each other did not (registration refused, killed
	// by the guest's out-of-memory killer).
	Started int
	Failed  []string
	// MBps are the started servers' clients' throughputs, Aggregate
	// their sum (MB of 10^6 bytes a second).
	MBps      []float64
	Aggregate float64
	// AvailBefore and AvailServing are A's MemAvailable in MiB before
	// the first server and with every server started.
	AvailBefore, AvailServing int
	// Faults are A's ODP faults during the step.
	Faults int
	// Logs are each server's output then each client's.
	Logs []string
}

// overcommitPort is the first server's TCP port.
const overcommitPort = 18600

// Overcommit runs one step. A server starts with an oom_score_adj of 1000
// and gets 0 once it listens: when the guest runs out of memory for a
// server's registration, its out-of-memory killer takes the server being
// started, not one already serving, nor the guest's agent. Under odp-all A's npfnic.ko is switched
// to odp=all for the step and back to explicit after it.
func (p *RDMAPair) Overcommit(ctx context.Context, run OvercommitRun) (OvercommitResult, error) {
	var res OvercommitResult
	if p.A.Kind != RDMANPFNIC {
		return res, errors.New("overcommit: the servers' guest (A) must be an npfnic")
	}
	if run.Instances < 1 || run.Region <= 0 || run.WS <= 0 || run.WS > run.Region {
		return res, fmt.Errorf("overcommit: %d instances of %d bytes, working set %d: want at least one, working set within the region",
			run.Instances, run.Region, run.WS)
	}
	if _, err := workload.ParseOvercommitReg(string(run.Reg)); err != nil {
		return res, err
	}
	if run.Size == 0 {
		run.Size = 64 << 10
	}
	if run.Depth == 0 {
		run.Depth = 8
	}
	if run.Seconds == 0 {
		run.Seconds = 10
	}
	if run.Reg == workload.OvercommitODPAll {
		if err := setODPParam(ctx, p.A, "all"); err != nil {
			return res, err
		}
		defer setODPParam(context.WithoutCancel(ctx), p.A, "explicit")
	}
	var err error
	if res.AvailBefore, err = memAvailableMiB(ctx, p.A); err != nil {
		return res, err
	}
	faults0, err := p.A.ODPFaults(ctx)
	if err != nil {
		return res, err
	}
	// The servers live as long as the step.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	a := workload.GuestRunner{VM: p.A.VM, Name: string(p.A.Kind) + " " + p.A.IP}
	type server struct {
		port, pid int
		d         *workload.GuestDaemon
	}
	var up []server
	for i := range run.Instances {
		s := workload.OvercommitServer{Dev: p.A.Dev, GIDIndex: p.A.GIDIndex, Port: overcommitPort + i,
			Region: run.Region, WS: run.WS, ODP: run.Reg == workload.OvercommitODP}
		log := fmt.Sprintf("/tmp/npfnic-overcommit-%d.log", s.Port)
		d := workload.StartDaemon(sctx, a, fmt.Sprintf("server %d", i+1), log,
			fmt.Sprintf("echo 1000 > /proc/self/oom_score_adj; exec %s >%s 2>&1", strings.Join(s.Args(), " "), log))
		var st workload.OvercommitServerState
		werr := d.WaitFor(ctx, 3*time.Minute, "cat "+log, func(out string, _ int) error {
			if st = workload.ParseOvercommitServer(out); st.Listening || st.Failed != "" {
				return nil
			}
			return errors.New("not listening")
		})
		switch {
		case ctx.Err() != nil:
			return res, ctx.Err()
		case werr != nil:
			res.Failed = append(res.Failed, fmt.Sprintf("server %d: %s", i+1, firstLine(werr.Error())))
		case st.Failed != "":
			res.Failed = append(res.Failed, fmt.Sprintf("server %d: %s", i+1, st.Failed))
		default:
			if _, err := p.A.shell(ctx, fmt.Sprintf("echo 0 > /proc/%d/oom_score_adj", st.PID)); err != nil {
				return res, err
			}
			up = append(up, server{s.Port, st.PID, d})
		}
	}
	if res.AvailServing, err = memAvailableMiB(ctx, p.A); err != nil {
		return res, err
	}
	// A server started early may have been killed for a later one's
	// pages: only those still running get a client.
	alive := up[:0]
	for _, s := range up {
		if s.d.Exited() {
			res.Failed = append(res.Failed, fmt.Sprintf("server on port %d: exited after it started (killed for memory?)", s.port))
			continue
		}
		alive = append(alive, s)
	}
	// Every client first writes its working set once, untimed, so that
	// on demand the pages are faulted in before any timed run; then all
	// run timed at once.
	var out []string
	clients := func(warmup int, secs float64) ([]float64, error) {
		outs := make([]string, len(alive))
		mbps := make([]float64, len(alive))
		errs := make([]error, len(alive))
		var wg sync.WaitGroup
		limit := time.Duration(secs*float64(time.Second)) + 3*time.Minute
		for i, s := range alive {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := workload.OvercommitClient{Dev: p.B.Dev, GIDIndex: p.B.GIDIndex, Server: fmt.Sprintf("%s:%d", p.A.IP, s.port),
					Size: run.Size, Depth: run.Depth, Warmup: warmup, Seconds: secs}
				r, err := p.B.VM.ExecWithin(ctx, limit, c.Args()...)
				if err != nil {
					errs[i] = err
					return
				}
				outs[i] = r.Stdout + r.Stderr
				if r.Exit != 0 || r.TimedOut {
					errs[i] = fmt.Errorf("client of port %d: exit %d (timed out %v): %s", s.port, r.Exit, r.TimedOut, strings.TrimSpace(outs[i]))
					return
				}
				if secs > 0 {
					mbps[i], errs[i] = workload.ParseOvercommitClient(outs[i])
				}
			}()
		}
		wg.Wait()
		out = append(out, outs...)
		return mbps, errors.Join(errs...)
	}
	_, werr := clients(1, 0)
	var mbps []float64
	if werr == nil {
		mbps, werr = clients(0, run.Seconds)
	}
	// The servers serve until killed, and the next step reuses their
	// ports and needs their memory back: each is gone from /proc before
	// the step ends.
	for _, s := range up {
		if err := killWait(ctx, p.A, s.pid); err != nil && werr == nil {
			werr = err
		}
		res.Logs = append(res.Logs, fmt.Sprintf("server on port %d:\n%s", s.port, s.d.LogTail(ctx, 10)))
	}
	stop()
	res.Logs = append(res.Logs, out...)
	if werr != nil {
		return res, werr
	}
	res.Started, res.MBps = len(alive), mbps
	for _, v := range mbps {
		res.Aggregate += v
	}
	faults1, err := p.A.ODPFaults(ctx)
	if err != nil {
		return res, err
	}
	res.Faults = faults1 - faults0
	return res, nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// killWait kills process pid in g and waits until it is gone.
func killWait(ctx context.Context, g *RDMAGuest, pid int) error {
	proc := fmt.Sprintf("/proc/%d/stat", pid)
	_, _ = g.shell(ctx, fmt.Sprintf("kill -9 %d", pid))
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := g.shell(ctx, "cat "+proc); err != nil {
			return nil // gone
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("process %d in %s still there a minute after kill -9", pid, g.IP)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var memAvailableRE = regexp.MustCompile(`(?m)^MemAvailable:\s+(\d+) kB`)

// MemAvailableMiB is the guest's MemAvailable (/proc/meminfo).
func (g *RDMAGuest) MemAvailableMiB(ctx context.Context) (int, error) {
	return memAvailableMiB(ctx, g)
}

func memAvailableMiB(ctx context.Context, g *RDMAGuest) (int, error) {
	out, err := g.shell(ctx, "cat /proc/meminfo")
	if err != nil {
		return 0, err
	}
	m := memAvailableRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no MemAvailable in %s's /proc/meminfo", g.IP)
	}
	kb, _ := strconv.Atoi(m[1])
	return kb >> 10, nil
}
