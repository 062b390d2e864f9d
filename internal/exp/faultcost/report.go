package faultcost

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// DriverStats are the driver's fault counters and latency percentiles
// (ethtool -S) the table shows.
var DriverStats = []string{
	"rx_faults", "tx_faults", "rx_backup_pkts", "rx_fault_drops", "page_requests", "page_groups",
	"prsp_success", "prsp_invalid", "prsp_failure", "invalidations", "cools", "atc_hits", "atc_misses",
	"fault_lat_p50_ns", "fault_lat_p99_ns", "fault_sched_p50_ns", "fault_map_p50_ns",
	"backup_lat_p50_ns", "backup_lat_p99_ns",
}

// writeStage adds one stage's row: its name, span and distribution.
func writeStage(tw io.Writer, name, span string, d Dist) {
	fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", name, span, d.N, us(d.P50), us(d.P90), us(d.P99), us(d.Max), us(d.Mean))
}

// writeFloor adds the DIAG_ECHO floor's row and, where neither has a zero
// statistic, the round trip's ratio to it.
func writeFloor(tw io.Writer, floor, rt Dist) {
	if floor.N == 0 {
		return
	}
	writeStage(tw, "floor", "DIAG_ECHO irq -> doorbell", floor)
	if rt.N > 0 && floor.P50 > 0 && floor.P90 > 0 && floor.P99 > 0 && floor.Mean > 0 {
		fmt.Fprintf(tw, "ratio\tround trip / floor\t\t%.2fx\t%.2fx\t%.2fx\t\t%.2fx\t\n",
			float64(rt.P50)/float64(floor.P50), float64(rt.P90)/float64(floor.P90), float64(rt.P99)/float64(floor.P99), float64(rt.Mean)/float64(floor.Mean))
	}
}

// deviceGoalText is the device's share (span) against DeviceP99Goal, or
// nothing without samples.
func deviceGoalText(dev Dist, span string) string {
	if dev.N == 0 {
		return ""
	}
	verdict := "MET"
	if dev.P99 > DeviceP99Goal {
		verdict = "MISSED"
	}
	return fmt.Sprintf("the device's share (%s): p50 %s us, p99 %s us; goal p99 <= %s us: %s\n",
		span, us(dev.P50), us(dev.P99), us(DeviceP99Goal), verdict)
}

func us(d time.Duration) string {
	v := float64(d) / 1e3
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// roundsLine says what each of rounds ran: its share of cycles of
// traffic and of echo DIAG_ECHO rounds gap apart (planned over planned
// rounds).
func roundsLine(rounds, cycles, planned, echo int, traffic string, gap time.Duration) string {
	return fmt.Sprintf("%d rounds, each of %d cycles (%s) and %d DIAG_ECHO rounds (%v before each; last on odd rounds, first on even ones)\n",
		rounds, cycles/planned, traffic, max(echo/planned, 0), gap)
}

// Table formats the breakdowns next to the floor.
func Table(c Config, r *Result) string {
	c.setDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "fault cost (Lesokhin et al., ASPLOS'17, Figure 3 / Table 4 style) on npfnic, %s guest, insmod npfnic.ko %s\n", c.AccelName(), r.Params)
	b.WriteString(roundsLine(len(r.Rounds), c.Cycles, c.Rounds, c.EchoRounds, "cool the RX ring with sysfs cool, "+c.trafficText(), c.EchoGap))
	fmt.Fprintf(&b, "device-measured stages of each page request group over all rounds; microseconds\n")
	floor := NewDist(r.Echo)
	for _, bd := range Breakdowns(r.Records) {
		fmt.Fprintf(&b, "\n%s faults: %d groups, %d pages (ended after a Success response %d, Invalid %d; finished before any response %d)\n",
			bd.Kind, bd.Faults, bd.Pages, bd.Success, bd.Invalid, bd.NoResponse)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "stage\tspan\tn\tp50\tp90\tp99\tmax\tmean\t\n")
		for i, d := range bd.Rows {
			if !RowApplies(c.Policy, bd.Kind, i) {
				continue
			}
			writeStage(tw, RowNames[i][0], RowNames[i][1], d)
		}
		writeFloor(tw, floor, bd.Rows[RowRoundTrip])
		tw.Flush()
		b.WriteString(deviceGoalText(bd.Rows[RowDevice], "detected -> interrupt"))
	}
	b.WriteString(roundsText(r))
	if len(r.Records) == 0 {
		b.WriteString("\nno fault records: the device saw no page faults\n")
		if floor.N > 0 {
			fmt.Fprintf(&b, "floor (DIAG_ECHO irq -> doorbell, %d rounds): p50 %s us, p99 %s us\n", floor.N, us(floor.P50), us(floor.P99))
		}
	}
	if floor.N == 0 {
		b.WriteString("\nno DIAG_ECHO round trips: no floor\n")
	}
	if r.EchoUnmatched > 0 {
		fmt.Fprintf(&b, "DIAG_ECHO answers matching no round: %d\n", r.EchoUnmatched)
	}
	fmt.Fprintf(&b, "device PRI during the run: %d groups, %d page requests, %d Success, %d Invalid, %d abandoned (reset or Response Failure), %d unexpected responses\n",
		r.PRI.Groups, r.PRI.Requests, r.PRI.Success, r.PRI.Invalid, r.PRI.Abandoned, r.PRI.Unexpected)
	if r.Overwritten > 0 || r.RecorderDropped > 0 {
		fmt.Fprintf(&b, "device recorder: %d records fell out of its ring, %d lost to racing writers\n", r.Overwritten, r.RecorderDropped)
	}
	if len(r.Driver) > 0 {
		b.WriteString("\ndriver (ethtool -S):\n")
		var cells []string
		for _, n := range DriverStats {
			v, ok := r.Driver[n]
			if !ok {
				continue
			}
			if strings.HasSuffix(n, "_ns") {
				cells = append(cells, fmt.Sprintf("%s %s us", strings.TrimSuffix(n, "_ns"), us(time.Duration(v))))
			} else {
				cells = append(cells, fmt.Sprintf("%s %d", n, v))
			}
		}
		for i := 0; i < len(cells); i += 4 {
			b.WriteString("  " + strings.Join(cells[i:min(i+4, len(cells))], ", ") + "\n")
		}
	}
	if len(r.Warnings) > 0 {
		b.WriteString("\nwarnings:\n  " + strings.Join(r.Warnings, "\n  ") + "\n")
	}
	return b.String()
}

// Report is what the runner prints and writes of a run (nil: none).
func Report(c Config, r *Result) *runner.Outcome {
	if r == nil {
		return nil
	}
	o := &runner.Outcome{
		Table: Table(c, r),
		Write: func(dir string) ([]string, error) { return WriteOutputs(dir, c, r) },
		Logs:  c.LogDir,
	}
	if len(r.Records) == 0 {
		o.Failed = fmt.Errorf("no page faults were recorded (is the driver's rx_policy %s taking effect?)", c.Policy)
	}
	return o
}

// WriteOutputs writes fault-cost-records.csv (every fault: kind, pages,
// outcome and stage durations), fault-cost-echo.csv (every DIAG_ECHO round
// trip), fault-cost.csv (the breakdown with the floor),
// fault-cost-rounds.csv (every round's round trip, floor and ratio),
// fault-cost.txt and fault-cost.png into dir.
func WriteOutputs(dir string, c Config, r *Result) ([]string, error) {
	var records [][]string
	for _, rec := range r.Records {
		row := []any{KindName(rec.Kind), rec.Queue, rec.Pages, outcomeName(rec.Outcome)}
		for s := 0; s < pri.NumStages; s++ {
			if d, ok := rec.Interval(s); ok {
				row = append(row, float64(d)/1e3)
			} else {
				row = append(row, "")
			}
		}
		if d, ok := RoundTrip(rec); ok {
			row = append(row, float64(d)/1e3)
		} else {
			row = append(row, "")
		}
		records = append(records, report.Row(row...))
	}
	hdr := []string{"kind", "queue", "pages", "outcome"}
	for _, n := range pri.StageNames {
		hdr = append(hdr, n+"_us")
	}
	hdr = append(hdr, "round_trip_us")
	floor := NewDist(r.Echo)
	var stages [][]string
	for _, bd := range Breakdowns(r.Records) {
		for i, d := range bd.Rows {
			if RowApplies(c.Policy, bd.Kind, i) {
				stages = append(stages, report.Row(append([]any{bd.Kind, RowNames[i][0], RowNames[i][1]}, distCells(d, floor)...)...))
			}
		}
	}
	if floor.N > 0 {
		stages = append(stages, report.Row(append([]any{"floor", "diag_echo", "interrupt -> doorbell"}, distCells(floor, floor)...)...))
	}
	var rounds [][]string
	for _, x := range RoundRatios(r.Rounds, 0) {
		rx := RoundRatios(r.Rounds[x.Round-1:x.Round], hw.FaultKindRxBuf)[0]
		rounds = append(rounds, report.Row(x.Round, x.RoundTrip.N, us1(x.RoundTrip.P50), rx.RoundTrip.N, us1(rx.RoundTrip.P50), x.Floor.N, us1(x.Floor.P50), x.Ratio, rx.Ratio))
	}
	f := runner.Files{Dir: dir}
	f.CSV("fault-cost-records.csv", hdr, records)
	f.CSV("fault-cost-echo.csv", echoHeader, echoRows(r.Echo))
	f.CSV("fault-cost.csv", append([]string{"kind"}, distHeader...), stages)
	f.Text("fault-cost.txt", Table(c, r))
	f.CSV("fault-cost-rounds.csv", []string{"round", "faults", "round_trip_p50_us", "rx_faults", "rx_round_trip_p50_us", "floor_n", "floor_p50_us", "ratio_all", "ratio_rx"}, rounds)
	if charts := Charts(c, r); len(charts) > 0 {
		f.Charts("fault-cost.png", 1000, 380, charts...)
	}
	return f.Done()
}

// echoHeader and echoRows are the CSV of every DIAG_ECHO round trip.
var echoHeader = []string{"round", "round_trip_us"}

func echoRows(echo []time.Duration) [][]string {
	var rows [][]string
	for i, d := range echo {
		rows = append(rows, report.Row(i+1, float64(d)/1e3))
	}
	return rows
}

// distHeader and distCells are a breakdown CSV's columns from the stage's
// name on: the distribution in µs and its p50 over the floor's.
var distHeader = []string{"stage", "span", "n", "p50_us", "p90_us", "p99_us", "max_us", "mean_us", "p50_over_floor_p50"}

func distCells(d, floor Dist) []any {
	ratio := ""
	if floor.P50 > 0 && d.N > 0 {
		ratio = fmt.Sprintf("%.4g", float64(d.P50)/float64(floor.P50))
	}
	return []any{d.N, us1(d.P50), us1(d.P90), us1(d.P99), us1(d.Max), us1(d.Mean), ratio}
}

// roundsText is every round's RX (or, without RX faults, any) fault round
// trip against the same round's floor, and the median ratio.
func roundsText(r *Result) string {
	kind := uint16(hw.FaultKindRxBuf)
	what := "RX buffer fault round trip (detected -> response)"
	if len(RoundTrips(r.Records, kind)) == 0 {
		kind, what = 0, "every fault round trip (detected -> response)"
	}
	return roundsTable(what, RoundRatios(r.Rounds, kind))
}

// roundsTable is every round's fault round trip (what) against that
// round's floor, and the median ratio; nothing without a ratio.
func roundsTable(what string, rs []RoundRatio) string {
	med, lo, hi, ok := RatioSummary(rs)
	if !ok {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nper round, %s against that round's floor, p50:\n", what)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "round\tfaults\tround trip us\tfloor us\tratio\t\n")
	for _, x := range rs {
		ratio := "-"
		if !math.IsNaN(x.Ratio) {
			ratio = fmt.Sprintf("%.2fx", x.Ratio)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t\n", x.Round, x.RoundTrip.N, us(x.RoundTrip.P50), us(x.Floor.P50), ratio)
	}
	tw.Flush()
	fmt.Fprintf(&b, "round trip / floor: median %.2fx over the rounds (%.2f-%.2f)\n", med, lo, hi)
	return b.String()
}

func us1(d time.Duration) float64 { return float64(d) / 1e3 }

func outcomeName(o pri.Outcome) string {
	switch o {
	case pri.OutcomeSuccess:
		return "success"
	case pri.OutcomeInvalid:
		return "invalid"
	case pri.OutcomeAbandoned:
		return "no_response"
	}
	return fmt.Sprint(o)
}

// Charts: p50 and p99 of every stage per fault kind, with the floor
// (DIAG_ECHO), and the CDFs of the fault round trips against the floor.
func Charts(c Config, r *Result) []report.Chart {
	var charts []report.Chart
	floor := NewDist(r.Echo)
	bds := Breakdowns(r.Records)
	if len(bds) > 0 {
		// One chart per percentile: p99 dwarfs p50 on a shared axis.
		for _, q := range []struct {
			name string
			get  func(Dist) time.Duration
		}{{"p50", func(d Dist) time.Duration { return d.P50 }}, {"p99", func(d Dist) time.Duration { return d.P99 }}} {
			bar := report.BarChart{
				Title:  q.name + " of each page fault stage (device-measured, " + c.AccelName() + " guest) and of the interrupt+doorbell floor",
				YLabel: q.name + " (microseconds)",
			}
			for i := range RowNames {
				bar.Categories = append(bar.Categories, RowNames[i][0])
			}
			bar.Categories = append(bar.Categories, "floor")
			for _, bd := range bds {
				if bd.Kind == "all" {
					continue
				}
				s := report.BarSeries{Name: bd.Kind + " faults"}
				for i, d := range bd.Rows {
					if RowApplies(c.Policy, bd.Kind, i) {
						s.Values = append(s.Values, us1(q.get(d)))
					} else {
						s.Values = append(s.Values, 0)
					}
				}
				s.Values = append(s.Values, us1(q.get(floor)))
				bar.Series = append(bar.Series, s)
			}
			charts = append(charts, bar)
		}
	}
	cdf := report.LineChart{
		Title:  "fault round trip (detected -> response) against the DIAG_ECHO floor",
		XLabel: "microseconds (log scale)", YLabel: "fraction of events", LogX: true,
	}
	for _, k := range []uint16{hw.FaultKindRxBuf, hw.FaultKindTxBuf} {
		if xs := RoundTrips(r.Records, k); len(xs) > 0 {
			cdf.Series = append(cdf.Series, cdfSeries(KindName(k)+" fault round trip", xs, false))
		}
	}
	if len(r.Echo) > 0 {
		cdf.Series = append(cdf.Series, cdfSeries("DIAG_ECHO interrupt -> doorbell (floor)", r.Echo, true))
	}
	if len(cdf.Series) > 0 {
		// A log scale only when the values span more than a decade or so
		// (its ticks are at powers of ten).
		lo, hi := math.Inf(1), 0.0
		for _, s := range cdf.Series {
			for _, x := range s.X {
				lo, hi = math.Min(lo, x), math.Max(hi, x)
			}
		}
		if hi < 20*lo {
			cdf.LogX, cdf.XLabel = false, "microseconds"
		}
		zero := 0.0
		cdf.YMin = &zero
		charts = append(charts, cdf)
	}
	return charts
}

// cdfSeries draws the empirical CDF with at most 50 points.
func cdfSeries(name string, xs []time.Duration, dashed bool) report.Series {
	s := slices.Clone(xs)
	slices.Sort(s)
	step := max(1, len(s)/50)
	out := report.Series{Name: name, Dashed: dashed}
	for i := 0; i < len(s); i += step {
		out.X = append(out.X, max(us1(s[i]), 0.01))
		out.Y = append(out.Y, float64(i+1)/float64(len(s)))
	}
	if last := len(s) - 1; (len(s)-1)%step != 0 {
		out.X = append(out.X, max(us1(s[last]), 0.01))
		out.Y = append(out.Y, 1)
	}
	return out
}
