package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/npfnic/npfnic/internal/exp/conformance"
	"github.com/npfnic/npfnic/internal/exp/runner"
)

// expConformance is `npfnic exp conformance`: see internal/exp/conformance.
var expConformance = experiment{
	name: "conformance", guests: true,
	about: "rdma-core's own test suite (Debian's python3-pyverbs tests, run_tests.py) on npfnic and on\n" +
		"rdma_rxe, each in a conformance guest of its own, one after the other (about 2 to 3 minutes\n" +
		"each under TCG). Sets every test's status side by side, judges the goals (no failure or error\n" +
		"on npfnic, every test that passes on rxe passing on npfnic, the ODP tests passing), lists\n" +
		"npfnic's failures and the skips rxe does not take, writes CSV, Markdown and PNG. Needs root.",
	memory: 1024, memoryHelp: "memory of each guest in MiB",
	flags: func(fs *flag.FlagSet) expSetup {
		devices := fs.String("devices", conformance.DefaultDevices, "the devices to run the suite on, in order: npfnic, rxe (rdma_rxe over virtio-net) or both")
		var patterns patternList
		fs.Var(&patterns, "k", "run only the tests whose id (tests.MODULE.CLASS.METHOD) matches `PATTERN`, a substring or a\n"+
			"shell-style pattern (unittest -k); repeat for more")
		timeout := fs.Duration("suite-timeout", conformance.DefaultSuiteTimeout, "longest run of the suite on one device")
		return func(x expRun) (expRunFunc, error) {
			ds, err := conformance.ParseDevices(*devices)
			if err != nil {
				return nil, fmt.Errorf("-devices: %w", err)
			}
			c := conformance.Config{Env: x.Env, Devices: ds, Patterns: patterns, MemoryMiB: x.MemoryMiB, CPUs: x.CPUs,
				SuiteTimeout: *timeout}
			if err := c.Validate(); err != nil {
				return nil, err
			}
			return func(ctx context.Context, g expGuests) (*runner.Outcome, error) {
				g.into(&c.Env)
				runs, err := conformance.Run(ctx, c)
				return conformance.Report(c, runs), err
			}, nil
		}
	},
}

// patternList is a repeatable string flag.
type patternList []string

func (p *patternList) String() string { return strings.Join(*p, " ") }

func (p *patternList) Set(s string) error {
	*p = append(*p, s)
	return nil
}
