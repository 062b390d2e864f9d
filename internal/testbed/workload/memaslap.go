package workload

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/hostnet"
)

// MemaslapBinary finds memaslap; Debian's libmemcached-tools (1.1)
// installs it as memcaslap.
func MemaslapBinary() (string, error) {
	for _, n := range []string{"memaslap", "memcaslap"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", errors.New("neither memaslap nor memcaslap is installed (Debian package libmemcached-tools)")
}

// RunMemaslap drives memcached at server (the guest's address, port
// MemcachedPort) from namespace ns for d, with conc connections on one
// thread, verifying a tenth of the values it gets, and returns its summary.
func RunMemaslap(ctx context.Context, ns *hostnet.Namespace, server string, d time.Duration, conc int) (*Memaslap, error) {
	bin, err := MemaslapBinary()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d+runSlack)
	defer cancel()
	cmd := ns.Command(ctx, bin, "-s", fmt.Sprintf("%s:%d", server, MemcachedPort),
		"-T", "1", "-c", strconv.Itoa(conc), "-t", fmt.Sprintf("%ds", int(d/time.Second)),
		"-w", "1k", "-v", "0.1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	res, err := ParseMemaslap(stdout.String(), stderr.String())
	if err != nil {
		return nil, fmt.Errorf("%w (exit: %v)\nstdout: %s\nstderr: %s", err, runErr, tailString(stdout.String(), 1500), tailString(stderr.String(), 1500))
	}
	if runErr != nil {
		return nil, fmt.Errorf("%s: %v\nstderr: %s", bin, runErr, tailString(stderr.String(), 1500))
	}
	if min := 0.8 * d.Seconds(); res.RunTime < min {
		// memaslap stops early when every connection dropped.
		res.Errors++
		res.ErrorLines = append(res.ErrorLines, fmt.Sprintf("ran %.1fs of %.0fs: connections dropped", res.RunTime, d.Seconds()))
	}
	return res, nil
}

// MemaslapRun is one memaslap run against memcached in the guest.
type MemaslapRun struct {
	// Wall is the time from starting memaslap to its exit (or to the cap).
	Wall time.Duration
	// Capped is set when memaslap did not finish within the cap and was
	// killed.
	Capped bool
	// Periods are its periodic statistics (-S), in order.
	Periods []Period
	// Summary is its final summary; nil when it printed none (capped).
	Summary *Memaslap
	// ExitErr is memaslap's exit error (nil: exit 0).
	ExitErr        error
	Stdout, Stderr string
}

// MemaslapOptions is one memaslap invocation.
type MemaslapOptions struct {
	// Time runs memaslap for this long (-t, whole seconds); else Ops
	// operations (-x).
	Time time.Duration
	Ops  int
	// Conns is the number of connections (-c), on one thread; default 16.
	Conns int
	// StatEvery is the period of its statistics (-S, whole seconds); 0
	// prints none.
	StatEvery time.Duration
	// Cap kills memaslap after this long; required.
	Cap time.Duration
	// CapIsEnd makes reaching the cap the normal end of the run (a
	// wall-clock window), not a failure to finish.
	CapIsEnd bool
	// OnPeriod is called for each period as memaslap prints it.
	OnPeriod func(Period)
}

// StreamMemaslap runs memaslap in namespace ns against memcached at server
// (the guest's address, port MemcachedPort): gets and sets 9:1 (memaslap's
// default), a 1k window per connection, 10% of gets verified, its periodic
// statistics handed to o.OnPeriod as they arrive. Its output goes through
// stdbuf -oL (when the host has it) so periods arrive as they are printed.
func StreamMemaslap(ctx context.Context, ns *hostnet.Namespace, server string, o MemaslapOptions) (*MemaslapRun, error) {
	bin, err := MemaslapBinary()
	if err != nil {
		return nil, err
	}
	if o.Conns == 0 {
		o.Conns = 16
	}
	if o.Cap <= 0 {
		return nil, errors.New("memaslap: no cap")
	}
	args := []string{"-s", fmt.Sprintf("%s:%d", server, MemcachedPort), "-T", "1", "-c", strconv.Itoa(o.Conns), "-w", "1k", "-v", "0.1"}
	if o.Time > 0 {
		args = append(args, "-t", fmt.Sprintf("%ds", int(o.Time/time.Second)))
	} else {
		args = append(args, "-x", strconv.Itoa(o.Ops))
	}
	if o.StatEvery > 0 {
		args = append(args, "-S", fmt.Sprintf("%ds", int(o.StatEvery/time.Second)))
	}
	argv := append([]string{bin}, args...)
	if sb, err := exec.LookPath("stdbuf"); err == nil {
		argv = append([]string{sb, "-oL"}, argv...)
	}
	cctx, cancel := context.WithTimeout(ctx, o.Cap)
	defer cancel()
	cmd := ns.Command(cctx, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	var parser PeriodParser
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		stdout.WriteString(line + "\n")
		if p, ok := parser.LineAt(line, time.Since(start)); ok && o.OnPeriod != nil {
			o.OnPeriod(p)
		}
	}
	runErr := cmd.Wait()
	r := &MemaslapRun{Wall: time.Since(start), Periods: parser.Periods(), ExitErr: runErr,
		Stdout: stdout.String(), Stderr: stderr.String()}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	if cctx.Err() != nil {
		r.Capped = !o.CapIsEnd
		r.Wall = o.Cap
		return r, nil
	}
	if s, err := ParseMemaslap(r.Stdout, r.Stderr); err == nil {
		r.Summary = s
	} else {
		return r, fmt.Errorf("%w (exit: %v)\nstdout: %s\nstderr: %s", err, runErr, tailString(r.Stdout, 1500), tailString(r.Stderr, 1500))
	}
	return r, nil
}
