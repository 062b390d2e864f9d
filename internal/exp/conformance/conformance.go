// Package conformance is rdma-core's own test suite as the judge of
// npfnic's RDMA device (`npfnic exp conformance`, issue 24): it runs the
// suite that ships with Debian's rdma-core (pyverbs, run_tests.py) in a
// guest with npfnic and in a guest with rdma_rxe, one after the other,
// reads unittest's verbose report into a result per test, sets the two
// devices side by side, and judges the goals: no failure and no
// error on npfnic, every test that passes on rxe passing on npfnic, and
// the on-demand-paging tests (test_odp) passing rather than skipping.
//
// The suite runs in one guest per device, on that device alone: each test
// creates both its sides on the one device, whose QPs reach each other
// through its loopback (rdma_rxe's, or npfnic's own). The guest is the
// conformance image (images.VariantConformance), its interface has an
// address (the rdma_cm tests need one), rdma_ucm is loaded, and 2 MiB huge
// pages are reserved (the huge-page ODP tests skip without them). The
// suite goes through runsuite.py, which runs it as run_tests.py does but
// writes unittest's report to a file of its own, every test named by its
// id; parse.go reads that report.
package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed"
)

// DefaultDevices are both sides of the matrix, npfnic first.
const DefaultDevices = "npfnic,rxe"

// DefaultSuiteTimeout bounds one run of the suite: the whole suite takes
// about two minutes on npfnic under TCG.
const DefaultSuiteTimeout = 20 * time.Minute

// Config configures Run.
type Config struct {
	// Env's Images and LogDir are required; its Trace records the npfnic
	// guest's device.
	runner.Env
	// Devices are the sides to run, in order; default DefaultDevices.
	Devices []testbed.RDMAKind
	// Patterns pick the tests (unittest -k, each a substring or a
	// shell-style pattern of the test's id; any may match); none: all.
	Patterns []string
	// MemoryMiB and CPUs are each guest's; default 1024 MiB and 1 vCPU.
	MemoryMiB, CPUs int
	// SuiteTimeout bounds one run of the suite; default
	// DefaultSuiteTimeout.
	SuiteTimeout time.Duration
	// MinAckTimeout is npfnic's floor on its RC local ACK timers
	// (testbed.RDMAGuestConfig); 0: the QPs' own.
	MinAckTimeout time.Duration
}

// ParseDevices reads "npfnic,rxe": each once.
func ParseDevices(s string) ([]testbed.RDMAKind, error) {
	var ds []testbed.RDMAKind
	for _, f := range strings.Split(s, ",") {
		k, err := testbed.ParseRDMAKind(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if slices.Contains(ds, k) {
			return nil, fmt.Errorf("device %s listed twice", k)
		}
		ds = append(ds, k)
	}
	return ds, nil
}

// Validate checks c and fills in the defaults.
func (c *Config) Validate() error {
	if len(c.Devices) == 0 {
		c.Devices, _ = ParseDevices(DefaultDevices)
	}
	for i, d := range c.Devices {
		if _, err := testbed.ParseRDMAKind(string(d)); err != nil {
			return err
		}
		if slices.Contains(c.Devices[:i], d) {
			return fmt.Errorf("device %s listed twice", d)
		}
	}
	for _, p := range c.Patterns {
		if strings.TrimSpace(p) == "" || strings.ContainsAny(p, "\n\x00") {
			return fmt.Errorf("test pattern %q: want a substring or a pattern of test ids", p)
		}
	}
	c.SuiteTimeout = cmp.Or(c.SuiteTimeout, DefaultSuiteTimeout)
	if c.SuiteTimeout < time.Minute {
		return fmt.Errorf("suite timeout %v: want at least a minute", c.SuiteTimeout)
	}
	if c.LogDir == "" {
		return errors.New("conformance: Config.LogDir is required")
	}
	return nil
}

// DeviceRun is the suite's run on one device.
type DeviceRun struct {
	Kind testbed.RDMAKind
	// Dev is the ibverbs device and GID the RoCEv2 GID index the suite
	// ran on (--dev, --gid).
	Dev string
	GID int
	// Suite is what the report told, whole or as far as it went.
	Suite Suite
	// Took is the run of the suite, boot and setup excluded.
	Took time.Duration
	// Err is why the run failed or is not whole: the guest did not boot,
	// the suite did not finish, its report lost tests. Suite may still
	// hold results.
	Err error
}

// Run boots a conformance guest for each device in turn, runs the suite
// in it and shuts it down. A device whose guest fails is reported in its
// DeviceRun and the next one runs; only the context's end stops the run.
func Run(ctx context.Context, c Config) ([]DeviceRun, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Images == nil {
		return nil, errors.New("conformance: Config.Images is required")
	}
	if err := os.RemoveAll(c.LogDir); err != nil {
		return nil, err
	}
	var runs []DeviceRun
	for _, k := range c.Devices {
		if err := ctx.Err(); err != nil {
			return runs, err
		}
		r := c.runDevice(ctx, k)
		if r.Err != nil {
			c.Logf("%s: FAILED: %v", k, runner.FirstLine(r.Err.Error()))
		}
		runs = append(runs, r)
	}
	return runs, ctx.Err()
}

// runDevice boots one device's guest, runs the suite and shuts it down.
func (c *Config) runDevice(ctx context.Context, k testbed.RDMAKind) DeviceRun {
	r := DeviceRun{Kind: k}
	dir := filepath.Join(c.LogDir, string(k))
	gc := testbed.RDMAGuestConfig{Images: c.Images, Kind: k, Variant: images.VariantConformance, Name: "conformance-" + string(k),
		MemoryMiB: c.MemoryMiB, CPUs: c.CPUs, Accel: c.Accel, LogDir: dir, MinAckTimeout: c.MinAckTimeout}
	if k == testbed.RDMANPFNIC {
		gc.Trace = c.Trace
	}
	c.Logf("%s: booting a conformance guest (%d MiB, %s)", k, cmp.Or(c.MemoryMiB, 1024), c.AccelName())
	start := time.Now()
	g, err := testbed.StartRDMAGuest(ctx, gc)
	if err != nil {
		r.Err = err
		return r
	}
	defer g.Close()
	r.Dev, r.GID = g.Dev, g.GIDIndex
	c.Logf("%s: up in %.0f s: ibverbs device %s on %s (%s), RoCEv2 GID %d", k, time.Since(start).Seconds(), g.Dev, g.IfName, g.IP, g.GIDIndex)
	out, err := RunSuite(ctx, g, SuiteOptions{Patterns: c.Patterns, Timeout: c.SuiteTimeout,
		Progress: func(format string, args ...any) { c.Logf(string(k)+": "+format, args...) }})
	r.Suite, r.Took = out.Suite, out.Took
	if werr := writeLogs(dir, out); werr != nil {
		err = errors.Join(err, werr)
	}
	if err == nil {
		if err = out.Suite.Complete(); err != nil {
			err = fmt.Errorf("the suite's report: %w", err)
		}
	}
	r.Err = err
	c.Logf("%s: %s in %.0f s", k, summary(out.Suite), r.Took.Seconds())
	return r
}

// writeLogs keeps the suite's report and what it printed beside the
// guest's logs.
func writeLogs(dir string, out SuiteOutput) error {
	return errors.Join(
		os.WriteFile(filepath.Join(dir, "suite-report.txt"), []byte(out.Report), 0o644),
		os.WriteFile(filepath.Join(dir, "suite-output.txt"), []byte(out.Output), 0o644))
}

// summary counts a suite's results by status: "273 tests: 53 ok, 212
// skip, 8 error".
func summary(s Suite) string {
	n := map[Status]int{}
	for _, r := range s.Results {
		n[r.Status]++
	}
	parts := []string{}
	for _, st := range Statuses {
		if n[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[st], st))
		}
	}
	if len(parts) == 0 {
		return "0 tests"
	}
	return fmt.Sprintf("%d tests: %s", len(s.Results), strings.Join(parts, ", "))
}
