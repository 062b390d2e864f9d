package overcommit

import (
	"cmp"
	"fmt"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// Paper is seed 000's Table 5: the aggregate throughput of 1 to 4
// memcached VMs in thousands of transactions a second ("N/A": they could
// not run), by configuration.
var Paper = map[workload.OvercommitReg][]string{
	workload.OvercommitPinned: {"185", "310", "N/A", "N/A"},
	workload.OvercommitODP:    {"186", "311", "407", "484"},
}

// Cell is a step's median over the rounds that ran it.
type Cell struct {
	Started         float64 // the median count of servers that started
	MBps, Lo, Hi    float64 // their aggregate throughput: median, min, max
	Faults          float64
	AvailServingMiB float64
	N               int
}

// Step is the cell of a registration with n servers.
func Step(results []Result, reg workload.OvercommitReg, n int) Cell {
	var started, mbps, faults, avail []float64
	for _, r := range results {
		if r.Err != nil || r.Reg != reg || r.Instances != n {
			continue
		}
		started = append(started, float64(r.Out.Started))
		mbps = append(mbps, r.Out.Aggregate)
		faults = append(faults, float64(r.Out.Faults))
		avail = append(avail, float64(r.Out.AvailServing))
	}
	if len(mbps) == 0 {
		return Cell{N: 0}
	}
	lo, hi := report.Spread(mbps)
	return Cell{Started: report.Median(started), MBps: report.Median(mbps), Lo: lo, Hi: hi,
		Faults: report.Median(faults), AvailServingMiB: report.Median(avail), N: len(mbps)}
}

func (c Cell) String() string {
	if c.N == 0 {
		return "-"
	}
	s := fmt.Sprintf("%.0f: %.3g", c.Started, c.MBps)
	if c.N > 1 {
		s += fmt.Sprintf(" (%.3g-%.3g)", c.Lo, c.Hi)
	}
	return s
}

// Table prints Table 5: for each registration and count of servers, how
// many started and their aggregate MB/s, beside the paper's.
func Table(c Config, results []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "npfnic-overcommit servers in one %d MiB %s npfnic guest, each registering %d MiB of which its client (%s guest)\n",
		cmp.Or(c.MemoryMiB, 1024), c.AccelName(), c.Region>>20, c.Client)
	fmt.Fprintf(&b, "RDMA WRITEs %d MiB (64 KiB WRITEs, 8 outstanding, %g s); median of %d rounds (min-max)\n", c.WS>>20, c.Seconds, c.Rounds)
	b.WriteString("TCG time is not hardware time: compare the counts and ratios, not MB/s, with the paper's.\n")
	b.WriteString("\nTable 5: servers started of those asked: aggregate MB/s (10^6)\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	head := []string{"registration"}
	for n := 1; n <= c.Instances; n++ {
		head = append(head, fmt.Sprintf("%d servers", n))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, reg := range c.Regs {
		row := []string{string(reg)}
		for n := 1; n <= c.Instances; n++ {
			row = append(row, Step(results, reg, n).String())
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	for _, reg := range []workload.OvercommitReg{workload.OvercommitPinned, workload.OvercommitODP} {
		name := map[workload.OvercommitReg]string{workload.OvercommitPinned: "seed 000 pinning (memcached VMs, ktps)",
			workload.OvercommitODP: "seed 000 NPF (memcached VMs, ktps)"}[reg]
		row := []string{name}
		for n := 1; n <= c.Instances; n++ {
			v := "-"
			if n <= len(Paper[reg]) {
				v = Paper[reg][n-1]
			}
			row = append(row, v)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
	b.WriteString("\nMemAvailable in the servers' guest with the servers started (MiB), and its ODP faults per step (medians)\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, reg := range c.Regs {
		row := []string{string(reg)}
		for n := 1; n <= c.Instances; n++ {
			if s := Step(results, reg, n); s.N > 0 {
				row = append(row, fmt.Sprintf("%.0f MiB, %.0f faults", s.AvailServingMiB, s.Faults))
			} else {
				row = append(row, "-")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
	var why []string
	for _, r := range results {
		if r.Err == nil && r.Round == 1 && len(r.Out.Failed) > 0 {
			why = append(why, fmt.Sprintf("  %s with %d: %s", r.Reg, r.Instances, strings.Join(r.Out.Failed, "; ")))
		}
	}
	if len(why) > 0 {
		b.WriteString("\nservers that did not start (round 1):\n" + strings.Join(why, "\n") + "\n")
	}
	b.WriteString(runner.FailureList(results, func(r Result) (string, error) {
		return fmt.Sprintf("%s with %d round %d", r.Reg, r.Instances, r.Round), r.Err
	}))
	return b.String()
}

// Report is what the runner prints and writes of a run.
func Report(c Config, results []Result) *runner.Outcome {
	return runner.Jobs(c, results, func(r Result) error { return r.Err }, "steps", c.LogDir, Table, WriteOutputs)
}

// WriteOutputs writes overcommit.csv (every step of every round),
// overcommit.txt (the table) and overcommit.png (servers started and
// aggregate throughput against servers asked, a line per registration).
func WriteOutputs(dir string, c Config, results []Result) ([]string, error) {
	var rows [][]string
	for _, r := range results {
		e := runner.ErrCell(r.Err)
		rows = append(rows, report.Row(r.Round, string(r.Reg), r.Instances, r.Out.Started, r.Out.Aggregate,
			r.Out.AvailBefore, r.Out.AvailServing, r.Out.Faults, strings.Join(r.Out.Failed, "; "), e))
	}
	f := runner.Files{Dir: dir}
	f.CSV("overcommit.csv", []string{"round", "registration", "servers", "started", "MBps", "avail_before_MiB",
		"avail_serving_MiB", "odp_faults", "not_started", "error"}, rows)
	f.Text("overcommit.txt", Table(c, results))
	zero := 0.0
	started := report.LineChart{Title: "servers started (median of rounds)", XLabel: "servers asked", YLabel: "servers started", YMin: &zero}
	tput := report.LineChart{Title: "aggregate throughput (Table 5; median of rounds)", XLabel: "servers asked", YLabel: "MB/s", YMin: &zero}
	for _, reg := range c.Regs {
		s := report.Series{Name: string(reg)}
		t := report.Series{Name: string(reg)}
		for n := 1; n <= c.Instances; n++ {
			if v := Step(results, reg, n); v.N > 0 && !math.IsNaN(v.MBps) {
				s.X, s.Y = append(s.X, float64(n)), append(s.Y, v.Started)
				t.X, t.Y = append(t.X, float64(n)), append(t.Y, v.MBps)
			}
		}
		started.Series = append(started.Series, s)
		tput.Series = append(tput.Series, t)
	}
	f.Charts("overcommit.png", 900, 900, started, tput)
	return f.Done()
}
