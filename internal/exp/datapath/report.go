package datapath

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// metric is one measured quantity of a Result.
type metric struct {
	key, title, unit string
	get              func(Result) (float64, bool)
}

var metrics = []metric{
	{"guest_to_host_mbps", "guest->host", "Mbit/s", func(r Result) (float64, bool) {
		if r.GuestToHost == nil {
			return 0, false
		}
		return r.GuestToHost.Mbps, true
	}},
	{"host_to_guest_mbps", "host->guest", "Mbit/s", func(r Result) (float64, bool) {
		if r.HostToGuest == nil {
			return 0, false
		}
		return r.HostToGuest.Mbps, true
	}},
	{"memcached_ops_per_s", "memcached", "ops/s", func(r Result) (float64, bool) {
		if r.Memcached == nil {
			return 0, false
		}
		return r.Memcached.OpsPerSec, true
	}},
}

// Ratio is one NIC's metrics divided by another's, from the same run.
type Ratio struct {
	Num, Den string    // NIC names
	Values   []float64 // per metric, of the medians; NaN where either side has no value
	// Lo and Hi are, per metric, the lowest and highest ratio of one
	// round's values (the same round of both NICs); NaN without one.
	Lo, Hi []float64
}

// Ratios compares each NIC with every NIC before it, QEMU's NICs (the
// baselines) put first in the order of NICs and npfnic's variants after
// them as listed: npfnic/virtio whatever -nics says, and npfnic/npfnic-nolro
// for -nics npfnic-nolro,npfnic. Over several rounds it compares the
// medians (Summarize), and gives the range of the per-round ratios.
func Ratios(results []Result) []Ratio {
	rounds := map[string][]Result{}
	for _, r := range results {
		if r.Round > 0 {
			rounds[r.NIC] = append(rounds[r.NIC], r)
		}
	}
	sums := Summarize(results)
	slices.SortStableFunc(sums, func(a, b Result) int { return baselineRank(a.NIC) - baselineRank(b.NIC) })
	var out []Ratio
	for i := range sums {
		for j := 0; j < i; j++ {
			r := Ratio{Num: sums[i].NIC, Den: sums[j].NIC}
			for _, m := range metrics {
				r.Values = append(r.Values, ratioOf(m, sums[i], sums[j]))
				lo, hi := math.NaN(), math.NaN()
				for _, a := range rounds[r.Num] {
					for _, b := range rounds[r.Den] {
						if v := ratioOf(m, a, b); a.Round == b.Round && !math.IsNaN(v) {
							lo, hi = nanMin(lo, v), nanMax(hi, v)
						}
					}
				}
				r.Lo, r.Hi = append(r.Lo, lo), append(r.Hi, hi)
			}
			out = append(out, r)
		}
	}
	return out
}

// baselineRank orders QEMU's NICs first, in the order of NICs, and every
// npfnic variant after them (all the same rank: a stable sort keeps the
// order they were listed in).
func baselineRank(nic string) int {
	for i, n := range NICs {
		if n.Name == nic && n.GuestDriver != "npfnic" {
			return i
		}
	}
	return len(NICs)
}

// ratioOf is m of a over m of b; NaN where either has no value.
func ratioOf(m metric, a, b Result) float64 {
	x, okA := m.get(a)
	y, okB := m.get(b)
	if !okA || !okB || y <= 0 {
		return math.NaN()
	}
	return x / y
}

func nanMin(a, b float64) float64 {
	if math.IsNaN(a) || b < a {
		return b
	}
	return a
}

func nanMax(a, b float64) float64 {
	if math.IsNaN(a) || b > a {
		return b
	}
	return a
}

// Header describes the run for the table and the text file.
func Header(c Config) string {
	c.setDefaults()
	var names []string
	for _, n := range c.NICs {
		names = append(names, n.Name)
	}
	s := fmt.Sprintf("datapath: NICs %s; guest %d MiB, %d vCPU, %s", strings.Join(names, ", "), c.MemoryMiB, c.CPUs, c.AccelName())
	if c.Images != nil && c.Images.Kernel.Release != "" {
		s += fmt.Sprintf(", kernel %s, %s", c.Images.Kernel.Release, strings.TrimSpace(c.Images.QEMU.Version))
	}
	s += fmt.Sprintf("\niperf3 TCP %d s per direction (receiver's rate); memaslap %d s, %d connections, 10%% of gets verified",
		int(c.IperfTime.Seconds()), int(c.MemaslapTime.Seconds()), c.MemaslapConcurrency)
	if c.Rounds > 1 {
		s += fmt.Sprintf("\nmedians of %d rounds, the NICs interleaved; memaslap errors summed; load: the host's highest 1-min load average", c.Rounds)
	}
	return s
}

// Table formats the results (summarized over rounds): absolute numbers per
// NIC, then the ratios.
func Table(c Config, results []Result) string {
	ratios := Ratios(results)
	rounds := c.Rounds
	profiles := ProfileTable(results)
	results = Summarize(results)
	var b strings.Builder
	b.WriteString(Header(c) + "\n\n")
	w := len("NIC")
	for _, r := range results {
		w = max(w, len(r.Label))
	}
	for _, r := range ratios {
		w = max(w, len(r.Num+" / "+r.Den))
	}
	left := func(s string) string { return fmt.Sprintf("%-*s", w, s) }
	tw := newTabWriter(&b)
	fmt.Fprintf(tw, "%s\tguest->host\thost->guest\tmemcached\tmemaslap\tretransmits\tretransmits\tboot\thost\t\n", left("NIC"))
	fmt.Fprintf(tw, "%s\tMbit/s\tMbit/s\tops/s\terrors\tguest->host\thost->guest\ts\tload\t\n", left(""))
	var failures []string
	for _, r := range results {
		cells := []string{left(r.Label)}
		for _, m := range metrics {
			if v, ok := m.get(r); ok {
				cells = append(cells, formatValue(v))
			} else {
				cells = append(cells, "-")
			}
		}
		if r.Memcached != nil {
			cells = append(cells, fmt.Sprint(r.Memcached.Errors))
		} else {
			cells = append(cells, "-")
		}
		// The sender's TCP retransmits: frames lost between the stacks.
		for _, it := range []*workload.Iperf{r.GuestToHost, r.HostToGuest} {
			if it != nil {
				cells = append(cells, fmt.Sprint(it.Retransmits))
			} else {
				cells = append(cells, "-")
			}
		}
		if r.Boot > 0 {
			cells = append(cells, fmt.Sprintf("%.1f", r.Boot.Seconds()))
		} else {
			cells = append(cells, "-")
		}
		cells = append(cells, fmt.Sprintf("%.1f", r.HostLoad))
		fmt.Fprintf(tw, "%s\t\n", strings.Join(cells, "\t"))
		if r.Err != nil {
			failures = append(failures, fmt.Sprintf("%s FAILED: %v", r.Label, r.Err))
		}
	}
	tw.Flush()
	if len(ratios) > 0 {
		if rounds > 1 {
			b.WriteString("\nratios (same run): of the medians, and the range of the rounds' own ratios\n")
		} else {
			b.WriteString("\nratios (same run)\n")
		}
		tw = newTabWriter(&b)
		fmt.Fprintf(tw, "%s\tguest->host\thost->guest\tmemcached\t\n", left(""))
		for _, r := range ratios {
			cells := []string{left(r.Num + " / " + r.Den)}
			for k, v := range r.Values {
				switch {
				case math.IsNaN(v):
					cells = append(cells, "n/a")
				case rounds > 1 && !math.IsNaN(r.Lo[k]):
					cells = append(cells, fmt.Sprintf("%.2fx (%.2f-%.2f)", v, r.Lo[k], r.Hi[k]))
				default:
					cells = append(cells, fmt.Sprintf("%.2fx", v))
				}
			}
			fmt.Fprintf(tw, "%s\t\n", strings.Join(cells, "\t"))
		}
		tw.Flush()
	}
	cpuTable(&b, left, results)
	if profiles != "" {
		b.WriteString("\n" + profiles)
	}
	if len(failures) > 0 {
		b.WriteString("\n" + strings.Join(failures, "\n") + "\n")
	}
	return b.String()
}

// tabWriter right-aligns columns; every line's first cell has the same
// width (left-aligned labels), and the padding before it is dropped.
type tabWriter struct {
	*tabwriter.Writer
	buf strings.Builder
	out *strings.Builder
}

const tabPad = 2

func newTabWriter(out *strings.Builder) *tabWriter {
	t := &tabWriter{out: out}
	t.Writer = tabwriter.NewWriter(&t.buf, 0, 0, tabPad, ' ', tabwriter.AlignRight)
	return t
}

func (t *tabWriter) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	for _, line := range strings.SplitAfter(t.buf.String(), "\n") {
		t.out.WriteString(strings.TrimPrefix(line, strings.Repeat(" ", tabPad)))
	}
	t.buf.Reset()
	return nil
}

func formatValue(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// CSVHeader names the columns of datapath.csv.
var CSVHeader = append(append(csvFirstColumns, cpuColumns()...), "error")

var csvFirstColumns = []string{
	"nic", "label", "round",
	"guest_to_host_mbps", "host_to_guest_mbps", "memcached_ops_per_s", "memaslap_errors",
	"guest_to_host_bytes", "guest_to_host_seconds", "guest_to_host_retransmits",
	"host_to_guest_bytes", "host_to_guest_seconds", "host_to_guest_retransmits",
	"memaslap_ops", "memaslap_seconds", "memaslap_get_misses", "memaslap_verify_misses",
	"boot_seconds", "host_load", "guest_if",
	// cpuColumns follow, then "error".
}

// cpuPhase is one phase of a run whose guest CPU is measured.
type cpuPhase struct {
	key, title string
	unit       string // what the work is counted in: "MB" or "req"
	get        func(Result) *GuestCPU
	profile    func(Result) *PhaseProfile
}

var cpuPhases = []cpuPhase{
	{"g2h", "guest->host", "MB", func(r Result) *GuestCPU { return r.G2HCPU }, func(r Result) *PhaseProfile { return r.G2HProfile }},
	{"h2g", "host->guest", "MB", func(r Result) *GuestCPU { return r.H2GCPU }, func(r Result) *PhaseProfile { return r.H2GProfile }},
	{"memc", "memcached", "req", func(r Result) *GuestCPU { return r.MemcachedCPU }, func(r Result) *PhaseProfile { return r.MemcachedProfile }},
}

// cpuColumns are the CSV columns of each phase's GuestCPU.
func cpuColumns() []string {
	var out []string
	for _, p := range cpuPhases {
		u := strings.ToLower(p.unit)
		for _, c := range []string{"cpu_busy_pct", "user_pct", "sys_pct", "irq_pct", "softirq_pct", "cpu_seconds",
			"cpu_us_per_" + u, "nic_irqs", "nic_irqs_per_" + u,
			"host_vcpu_us_per_" + u, "host_qemu_us_per_" + u, "host_this_us_per_" + u} {
			out = append(out, p.key+"_"+c)
		}
	}
	return out
}

// cpuCells are a GuestCPU's CSV cells, in cpuColumns' order; empty for
// what was not measured.
func cpuCells(g *GuestCPU) []any {
	if g == nil {
		return []any{"", "", "", "", "", "", "", "", "", "", "", ""}
	}
	opt := func(v float64) any {
		if v < 0 {
			return ""
		}
		return v
	}
	return []any{g.BusyPct, g.UserPct, g.SysPct, g.IRQPct, g.SoftIRQPct, g.Seconds, opt(g.CPUMicrosPerUnit), opt(g.IRQs), opt(g.IRQsPerUnit),
		opt(g.HostVCPUMicros), opt(g.HostQEMUMicros), opt(g.HostThisMicros)}
}

// cpuTable writes the second table: per NIC and phase, where the
// guest's CPUs went (summarized results), if any phase was measured.
func cpuTable(b *strings.Builder, left func(string) string, results []Result) {
	measured := false
	for _, r := range results {
		for _, p := range cpuPhases {
			measured = measured || p.get(r) != nil
		}
	}
	if !measured {
		return
	}
	b.WriteString("\nguest CPU per phase: % of the phase's CPU time; busy = not idle; CPU µs and NIC interrupts per MB received or per request\n")
	tw := newTabWriter(b)
	phase := func(s string) string { return fmt.Sprintf("%-11s", s) } // left-aligned
	fmt.Fprintf(tw, "%s\t%s\tbusy %%\tuser %%\tsys %%\tirq %%\tsoftirq %%\tCPU µs\tNIC irqs\tper\t\n", left("NIC"), phase("phase"))
	pct := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	opt := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return formatValue(v)
	}
	for _, r := range results {
		for _, p := range cpuPhases {
			g := p.get(r)
			if g == nil {
				continue
			}
			cells := []string{left(r.Label), phase(p.title), pct(g.BusyPct), pct(g.UserPct), pct(g.SysPct), pct(g.IRQPct), pct(g.SoftIRQPct),
				opt(g.CPUMicrosPerUnit), opt(g.IRQsPerUnit), p.unit}
			fmt.Fprintf(tw, "%s\t\n", strings.Join(cells, "\t"))
		}
	}
	tw.Flush()

	host := false
	for _, r := range results {
		for _, p := range cpuPhases {
			host = host || (p.get(r) != nil && p.get(r).HostVCPUMicros >= 0)
		}
	}
	if !host {
		return
	}
	b.WriteString("\nhost CPU per phase, µs per MB received or per request: QEMU's vCPU threads, QEMU's other threads\n" +
		"(its main loop: virtio-net's backend, the vfio-user client) and this process (npfnic's device server)\n")
	tw = newTabWriter(b)
	fmt.Fprintf(tw, "%s\t%s\tvCPU µs\tQEMU µs\tthis µs\tper\t\n", left("NIC"), phase("phase"))
	for _, r := range results {
		for _, p := range cpuPhases {
			g := p.get(r)
			if g == nil || g.HostVCPUMicros < 0 {
				continue
			}
			cells := []string{left(r.Label), phase(p.title), opt(g.HostVCPUMicros), opt(g.HostQEMUMicros), opt(g.HostThisMicros), p.unit}
			fmt.Fprintf(tw, "%s\t\n", strings.Join(cells, "\t"))
		}
	}
	tw.Flush()
}

// CSVRows are the rows of datapath.csv: one per NIC and round, then, if
// there were several rounds, one per NIC with the medians (round
// "median"); empty cells for what a failed run did not measure.
func CSVRows(results []Result) [][]string {
	all := results
	multi := false
	for _, r := range results {
		multi = multi || r.Rounds > 1
	}
	if multi {
		all = append(append([]Result(nil), results...), Summarize(results)...)
	}
	var rows [][]string
	for _, r := range all {
		round := "median"
		if r.Round > 0 {
			round = fmt.Sprint(r.Round)
		}
		row := []any{r.NIC, r.Label, round}
		for _, mt := range metrics {
			if v, ok := mt.get(r); ok {
				row = append(row, v)
			} else {
				row = append(row, "")
			}
		}
		m := r.Memcached
		if m != nil {
			row = append(row, m.Errors)
		} else {
			row = append(row, "")
		}
		for _, it := range []*workload.Iperf{r.GuestToHost, r.HostToGuest} {
			if it != nil {
				row = append(row, it.Bytes, it.Seconds, it.Retransmits)
			} else {
				row = append(row, "", "", "")
			}
		}
		if m != nil {
			row = append(row, m.Ops, m.RunTime, m.GetMisses, m.VerifyMisses)
		} else {
			row = append(row, "", "", "", "")
		}
		errMsg := ""
		if r.Err != nil {
			errMsg = r.Err.Error()
		}
		row = append(row, r.Boot.Seconds(), r.HostLoad, r.GuestIf)
		for _, p := range cpuPhases {
			row = append(row, cpuCells(p.get(r))...)
		}
		row = append(row, errMsg)
		rows = append(rows, report.Row(row...))
	}
	return rows
}

// WriteOutputs writes datapath.csv (absolute numbers), datapath_ratios.csv,
// datapath.txt (the table) and datapath.png (grouped bar charts) into dir.
func WriteOutputs(dir string, c Config, results []Result) ([]string, error) {
	ratioHeader := []string{"numerator", "denominator"}
	for _, m := range metrics {
		ratioHeader = append(ratioHeader, m.key, m.key+"_round_lo", m.key+"_round_hi")
	}
	var ratioRows [][]string
	for _, r := range Ratios(results) {
		row := []any{r.Num, r.Den}
		for k := range r.Values {
			for _, v := range []float64{r.Values[k], r.Lo[k], r.Hi[k]} {
				if math.IsNaN(v) {
					row = append(row, "")
				} else {
					row = append(row, v)
				}
			}
		}
		ratioRows = append(ratioRows, report.Row(row...))
	}
	f := runner.Files{Dir: dir}
	f.CSV("datapath.csv", CSVHeader, CSVRows(results))
	f.CSV("datapath_ratios.csv", ratioHeader, ratioRows)
	if rows := profileRows(results); len(rows) > 0 {
		f.CSV("guest_profile.csv", profileHeader, rows)
	}
	f.Text("datapath.txt", Table(c, results))
	f.Charts("datapath.png", 900, 330, Charts(c.AccelName(), results)...)
	return f.Done()
}

// Charts are the figure's panels: TCP throughput per direction, memcached
// operations per second, and every metric relative to the first NIC (the
// first of QEMU's, as Ratios orders them), all summarized over rounds: the
// median, with the rounds' min-max as a whisker (a ratio's: the NIC's
// rounds over that NIC's median). A
// NIC without a value draws no bar (0).
func Charts(accel string, results []Result) []report.Chart {
	// Every round's value of each metric, per NIC.
	type key struct {
		nic string
		m   int
	}
	rounds := map[key][]float64{}
	for _, r := range results {
		if r.Round == 0 {
			continue
		}
		for i, m := range metrics {
			if v, ok := m.get(r); ok {
				rounds[key{r.NIC, i}] = append(rounds[key{r.NIC, i}], v)
			}
		}
	}
	spread := func(r Result, i int, scale float64) (lo, hi float64) {
		xs := rounds[key{r.NIC, i}]
		if len(xs) < 2 || scale <= 0 {
			return math.NaN(), math.NaN()
		}
		lo, hi = report.Spread(xs)
		return lo / scale, hi / scale
	}
	results = Summarize(results)
	value := func(m metric, r Result) float64 {
		if v, ok := m.get(r); ok {
			return v
		}
		return 0
	}
	label := func(r Result) string {
		if r.Err != nil {
			return r.Label + " (failed)"
		}
		return r.Label
	}
	runs := "same run"
	if len(results) > 0 && results[0].Rounds > 1 {
		runs = fmt.Sprintf("median of %d interleaved rounds", results[0].Rounds)
	}
	tput := report.BarChart{
		Title: "iperf3 TCP through each NIC (" + accel + " guest, " + runs + ")", YLabel: "receiver rate (Mbit/s)",
		Categories: []string{"guest to host", "host to guest"},
	}
	mc := report.BarChart{
		Title: "memcached in the guest, memaslap on the host", YLabel: "operations/s",
		Categories: []string{"memaslap get/set (9:1)"},
	}
	if len(results) > 0 && results[0].Rounds > 1 {
		tput.Title += ", whiskers: min-max"
	}
	charts := []report.Chart{}
	for _, r := range results {
		t := report.BarSeries{Name: label(r), Values: []float64{value(metrics[0], r), value(metrics[1], r)}}
		m := report.BarSeries{Name: label(r), Values: []float64{value(metrics[2], r)}}
		for i := range 2 {
			lo, hi := spread(r, i, 1)
			t.Lo, t.Hi = append(t.Lo, lo), append(t.Hi, hi)
		}
		lo, hi := spread(r, 2, 1)
		m.Lo, m.Hi = []float64{lo}, []float64{hi}
		tput.Series, mc.Series = append(tput.Series, t), append(mc.Series, m)
	}
	charts = append(charts, tput, mc)
	if len(results) > 1 {
		base := slices.MinFunc(results, func(a, b Result) int { return baselineRank(a.NIC) - baselineRank(b.NIC) })
		rel := report.BarChart{
			Title:      "relative to " + base.Label + " (" + runs + ")",
			YLabel:     "ratio",
			Categories: []string{"guest to host", "host to guest", "memcached"},
		}
		for _, r := range results {
			s := report.BarSeries{Name: label(r)}
			for i, m := range metrics {
				a, okA := m.get(r)
				b, okB := m.get(base)
				v, lo, hi := 0.0, math.NaN(), math.NaN()
				if okA && okB && b > 0 {
					v = a / b
					lo, hi = spread(r, i, b)
				}
				s.Values, s.Lo, s.Hi = append(s.Values, v), append(s.Lo, lo), append(s.Hi, hi)
			}
			rel.Series = append(rel.Series, s)
		}
		charts = append(charts, rel)
	}
	return charts
}
