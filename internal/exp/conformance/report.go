package conformance

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed"
)

// Report is what the runner prints and writes of a run: nil if no
// device reported anything.
func Report(c Config, runs []DeviceRun) *runner.Outcome {
	if len(runs) == 0 {
		return nil
	}
	o := &runner.Outcome{
		Table: Table(c, runs),
		Write: func(dir string) ([]string, error) { return WriteOutputs(dir, c, runs) },
		Failed: runner.Failures(runner.CountFailed(runs, func(r DeviceRun) error { return r.Err }),
			len(runs), "devices' runs of the suite"),
		Logs: c.LogDir,
	}
	return o
}

// statusesOf are the statuses worth a line: the four always, the rare
// two when some device has one.
func statusesOf(m Matrix) []Status {
	sts := []Status{StatusOK, StatusSkip, StatusFail, StatusError}
	for _, st := range []Status{StatusXFail, StatusXPass} {
		for d := range m.Devices {
			if m.Counts(d)[st] > 0 && !slices.Contains(sts, st) {
				sts = append(sts, st)
			}
		}
	}
	return sts
}

// heading says what ran.
func heading(c Config) string {
	s := fmt.Sprintf("rdma-core's test suite (Debian's python3-pyverbs, run_tests.py) in one %s guest per device", c.AccelName())
	if len(c.Patterns) > 0 {
		s += ", the tests matching -k " + strings.Join(c.Patterns, " -k ")
	}
	return s
}

// Table prints the counts per status and device, the goals, and the
// tests behind them.
func Table(c Config, runs []DeviceRun) string {
	m := NewMatrix(runs)
	var b strings.Builder
	b.WriteString(heading(c) + "\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, cell func(d int, r DeviceRun) string) {
		cells := []string{name}
		for d, r := range runs {
			cells = append(cells, cell(d, r))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	row("", func(_ int, r DeviceRun) string { return string(r.Kind) })
	row("device (--dev, --gid)", func(_ int, r DeviceRun) string {
		if r.Dev == "" {
			return "-"
		}
		return fmt.Sprintf("%s, %d", r.Dev, r.GID)
	})
	row("tests", func(d int, _ DeviceRun) string { return fmt.Sprint(m.Reported(d)) })
	for _, st := range statusesOf(m) {
		row(string(st), func(d int, _ DeviceRun) string { return fmt.Sprint(m.Counts(d)[st]) })
	}
	row("suite time", func(_ int, r DeviceRun) string { return fmt.Sprintf("%.0f s", r.Took.Seconds()) })
	tw.Flush()
	b.WriteString("\n")
	goals := Judge(m)
	for _, g := range goals {
		b.WriteString(g.String() + "\n")
	}
	list := func(title string, lines []string) {
		if len(lines) > 0 {
			fmt.Fprintf(&b, "\n%s (%d):\n  %s\n", title, len(lines), strings.Join(lines, "\n  "))
		}
	}
	list("npfnic's failures and errors", goals[0].Tests)
	list("passing on rxe, not on npfnic", goals[1].Tests)
	list("ODP tests not passing on npfnic", goals[2].Tests)
	list("npfnic's skips that rxe does not take", OnlySkips(m, testbed.RDMANPFNIC, testbed.RDMARxe))
	list("rxe's skips that npfnic does not take", OnlySkips(m, testbed.RDMARxe, testbed.RDMANPFNIC))
	var failed []string
	for _, r := range runs {
		if r.Err != nil {
			failed = append(failed, fmt.Sprintf("%s: %s", r.Kind, runner.FirstLine(r.Err.Error())))
		}
	}
	list("runs that failed", failed)
	return b.String()
}

// Markdown is the matrix as Markdown: the counts, the goals, and the
// rows that tell the devices apart or run at all (Row.Interesting).
func Markdown(c Config, runs []DeviceRun) string {
	m := NewMatrix(runs)
	var b strings.Builder
	b.WriteString("# rdma-core's test suite on " + joinKinds(m.Devices) + "\n\n" + strings.TrimSuffix(heading(c), ".") + ".\n\n")
	head := "| |"
	rule := "|---|"
	for _, d := range m.Devices {
		head += " " + string(d) + " |"
		rule += "---:|"
	}
	b.WriteString(head + "\n" + rule + "\n")
	b.WriteString("| tests |")
	for d := range m.Devices {
		fmt.Fprintf(&b, " %d |", m.Reported(d))
	}
	b.WriteString("\n")
	for _, st := range statusesOf(m) {
		fmt.Fprintf(&b, "| %s |", st)
		for d := range m.Devices {
			fmt.Fprintf(&b, " %d |", m.Counts(d)[st])
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, g := range Judge(m) {
		b.WriteString("- " + mdEscape(g.String()) + "\n")
	}
	var rows []Row
	for _, r := range m.Rows {
		if r.Interesting() {
			rows = append(rows, r)
		}
	}
	fmt.Fprintf(&b, "\n## The tests that run, or skip for different reasons (%d of %d)\n\n", len(rows), len(m.Rows))
	b.WriteString("The other tests skip on every device for the same reason (conformance.csv has them all).\n\n")
	b.WriteString(strings.Replace(head, "| |", "| test |", 1) + "\n" + strings.ReplaceAll(rule, "---:", "---") + "\n")
	for _, r := range rows {
		b.WriteString("| " + mdEscape(strings.TrimPrefix(r.ID, "tests.")) + " |")
		for _, c := range r.Cells {
			b.WriteString(" " + mdEscape(c.String()) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func joinKinds(ks []testbed.RDMAKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, " and ")
}

// mdEscape keeps a cell one cell: pipes escaped, no line breaks.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;").Replace(s)
}

// WriteOutputs writes conformance.csv (every test on every device),
// conformance.md (the counts, goals and interesting rows),
// conformance.txt (the table) and conformance.png (the tests per status,
// and per module those that pass and fail).
func WriteOutputs(dir string, c Config, runs []DeviceRun) ([]string, error) {
	m := NewMatrix(runs)
	header := []string{"test", "module"}
	for _, d := range m.Devices {
		header = append(header, string(d)+"_status", string(d)+"_detail")
	}
	var rows [][]string
	for _, r := range m.Rows {
		row := []string{r.ID, Module(r.ID)}
		for _, c := range r.Cells {
			row = append(row, string(c.Status), c.Detail)
		}
		rows = append(rows, row)
	}
	f := runner.Files{Dir: dir}
	f.CSV("conformance.csv", header, rows)
	f.Text("conformance.md", Markdown(c, runs))
	f.Text("conformance.txt", Table(c, runs))
	if len(m.Rows) > 0 {
		f.Charts("conformance.png", 1400, 420, charts(m)...)
	}
	return f.Done()
}

// charts are the tests per status and device, and per module the tests
// each device passes and fails (modules where some test ran).
func charts(m Matrix) []report.Chart {
	sts := statusesOf(m)
	byStatus := report.BarChart{Title: "rdma-core's test suite: tests per status", XLabel: "status", YLabel: "tests"}
	for _, st := range sts {
		byStatus.Categories = append(byStatus.Categories, string(st))
	}
	for d, k := range m.Devices {
		s := report.BarSeries{Name: string(k)}
		n := m.Counts(d)
		for _, st := range sts {
			s.Values = append(s.Values, float64(n[st]))
		}
		byStatus.Series = append(byStatus.Series, s)
	}
	byModule := report.BarChart{Title: "tests that pass, and that fail or err, per module (modules where a test ran)", XLabel: "module (test_...)", YLabel: "tests"}
	type tally struct{ ok, bad []float64 }
	var modules []string
	counts := map[string]*tally{}
	for _, r := range m.Rows {
		mod := Module(r.ID)
		t := counts[mod]
		if t == nil {
			t = &tally{ok: make([]float64, len(m.Devices)), bad: make([]float64, len(m.Devices))}
			counts[mod] = t
			modules = append(modules, mod)
		}
		for d, c := range r.Cells {
			switch {
			case c.Status == StatusOK || c.Status == StatusXFail:
				t.ok[d]++
			case failing(c.Status):
				t.bad[d]++
			}
		}
	}
	modules = slices.DeleteFunc(modules, func(mod string) bool {
		t := counts[mod]
		return slices.Max(t.ok) == 0 && slices.Max(t.bad) == 0
	})
	for _, mod := range modules {
		byModule.Categories = append(byModule.Categories, strings.TrimPrefix(mod, "test_"))
	}
	if len(modules) == 0 {
		return []report.Chart{byStatus}
	}
	// Each device's two bars side by side: its passes, then its failures.
	for d, k := range m.Devices {
		for _, bad := range []bool{false, true} {
			s := report.BarSeries{Name: string(k) + map[bool]string{false: " ok", true: " fail/error"}[bad]}
			for _, mod := range modules {
				v := counts[mod].ok[d]
				if bad {
					v = counts[mod].bad[d]
				}
				s.Values = append(s.Values, v)
			}
			byModule.Series = append(byModule.Series, s)
		}
	}
	return []report.Chart{byStatus, byModule}
}
