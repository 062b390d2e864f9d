package conformance

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// runSuitePy runs the suite in the guest (see its header).
//
//go:embed runsuite.py
var runSuitePy []byte

// In the guest: the suite (Debian's rdma-core-tests, decompressed into
// the conformance image), the runner, and its report.
const (
	TestsDir    = "/usr/share/doc/rdma-core/tests"
	guestRunner = "/tmp/npfnic-runsuite.py"
	guestReport = "/tmp/npfnic-suite-report.txt"
)

// hugePages are the 2 MiB pages reserved in the guest for the huge-page
// ODP tests (each maps one or two).
const hugePages = 16

// progressEvery is how often RunSuite reports how far the suite got.
const progressEvery = 15 * time.Second

// SuiteOptions configures RunSuite.
type SuiteOptions struct {
	// Patterns are unittest's -k: none runs every test.
	Patterns []string
	// Timeout bounds the suite; 0: the context's deadline.
	Timeout time.Duration
	// Progress, if set, receives how far the suite got, every
	// progressEvery.
	Progress func(format string, args ...any)
}

// SuiteOutput is a run of the suite.
type SuiteOutput struct {
	// Suite is the report, parsed; Report is its text, Output what the
	// runner and the tests printed (stdout, then stderr).
	Suite          Suite
	Report, Output string
	Took           time.Duration
}

// RunSuite runs rdma-core's test suite on an RDMA guest's device, its GID
// and port 1, in a guest of the conformance image: it readies the guest
// (rdma_ucm for the rdma_cm tests, huge pages), copies the runner in and
// runs it, reading the report as it grows for the progress lines. The
// suite's own failures are results, not errors; an error is a guest that
// could not run it, or a suite that did not finish in time (what it
// reported so far is returned).
func RunSuite(ctx context.Context, g *testbed.RDMAGuest, o SuiteOptions) (SuiteOutput, error) {
	var out SuiteOutput
	if err := g.VM.LoadModules(ctx, "rdma_ucm"); err != nil {
		return out, fmt.Errorf("rdma_ucm: %w", err)
	}
	if _, err := g.Shell(ctx, fmt.Sprintf("echo %d > /proc/sys/vm/nr_hugepages", hugePages)); err != nil {
		return out, err
	}
	if err := g.VM.Put(ctx, guestRunner, runSuitePy, 0o644); err != nil {
		return out, err
	}
	argv := append([]string{"python3", guestRunner, "--tests-dir", TestsDir, "--report", guestReport},
		SuiteArgs(g.Dev, g.GIDIndex, o.Patterns)...)
	start := time.Now()
	done := make(chan struct{})
	var r vm.Result
	var err error
	go func() {
		defer close(done)
		r, err = g.VM.ExecWithin(ctx, o.Timeout, argv...)
	}()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick.C:
			if o.Progress == nil {
				continue
			}
			line := "python loads the suite's modules"
			if rep, gerr := g.VM.Get(ctx, guestReport); gerr == nil && len(rep) > 0 {
				line = progressLine(Parse(string(rep)))
			}
			o.Progress("%s after %.0f s", line, time.Since(start).Seconds())
		}
	}
	out.Took = time.Since(start)
	out.Output = r.Stdout + r.Stderr
	if err != nil {
		return out, err
	}
	// The report, whole or as far as the suite went.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	rep, gerr := g.VM.Get(rctx, guestReport)
	if gerr != nil {
		return out, fmt.Errorf("the suite's report: %w (exit %d: %s)", gerr, r.Exit, lastLine(out.Output))
	}
	out.Report = string(rep)
	out.Suite = Parse(out.Report)
	switch {
	case r.TimedOut:
		return out, fmt.Errorf("the suite did not finish in %v: killed", o.Timeout)
	case r.Exit != 0 && out.Suite.Ran < 0:
		return out, fmt.Errorf("the suite's runner exited %d without its summary: %s", r.Exit, lastLine(out.Output))
	}
	return out, nil
}

// SuiteArgs are run_tests.py's arguments for a device: --dev, --port 1,
// --gid, then unittest's -k for each pattern.
func SuiteArgs(dev string, gid int, patterns []string) []string {
	args := []string{"--dev", dev, "--port", "1", "--gid", strconv.Itoa(gid)}
	for _, p := range patterns {
		args = append(args, "-k", p)
	}
	return args
}

// progressLine tells how far a report got: "120 of 273 tests: 30 ok, 85
// skip, 5 error", the test still running apart.
func progressLine(s Suite) string {
	running := ""
	if n := len(s.Results); n > 0 && s.Results[n-1].Detail == unfinished {
		running = "; running " + s.Results[n-1].ID
		s.Results = s.Results[:n-1]
	}
	line := summary(s) + running
	if s.Announced >= 0 {
		line = strings.Replace(line, " tests:", fmt.Sprintf(" of %d tests:", s.Announced), 1)
	}
	return line
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
