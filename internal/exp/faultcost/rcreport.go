package faultcost

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// RCTable formats the RC breakdown beside the floor and the papers.
func RCTable(c RCConfig, r *RCResult) string {
	c.setDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "RC receive fault cost (Lesokhin et al., ASPLOS'17, Sec. 4: RNR NAK) on npfnic, %s guests: npfnic (ODP) <- %s; policy %s\n", c.AccelName(), c.senderName(), c.Policy)
	b.WriteString(roundsLine(len(r.Rounds), c.Cycles, c.Rounds, c.EchoRounds, c.trafficText(), c.EchoGap))
	if c.DriverParams != "" {
		fmt.Fprintf(&b, "driver parameters: %s\n", c.DriverParams)
	}
	if r.Load != [2]float64{} {
		fmt.Fprintf(&b, "host load (1 min) %.1f at the start, %.1f at the end\n", r.Load[0], r.Load[1])
	}
	fmt.Fprintf(&b, "device-measured stages of each receive fault, from the device's trace (trace.RCTimelines); microseconds\n")
	bd := NewRCBreakdown(r.Faults)
	fmt.Fprintf(&b, "\nRC receive faults: %d (retransmission accepted %d, faulted again %d, unresolved %d), %d RNR NAKs sent for them (at most %d for one), %d retransmissions before the page; %d requester faults\n",
		bd.Receive, bd.Resumed, bd.Refaulted, bd.Unresolved, bd.NAKs, bd.MaxNAKs, bd.Early, bd.Requester)
	floor := NewDist(r.Echo)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "stage\tspan\tn\tp50\tp90\tp99\tmax\tmean\t\n")
	for i, d := range bd.Rows {
		if !RCRowApplies(c.Policy, i) {
			continue
		}
		writeStage(tw, RCRowNames[i][0], RCRowSpan(c.Policy, i), d)
	}
	writeFloor(tw, floor, bd.Rows[RCRowRoundTrip])
	tw.Flush()
	b.WriteString(deviceGoalText(bd.Rows[RCRowDevice], "detected -> interrupt, RNR NAK included"))
	if len(c.Prefault) > 0 {
		b.WriteString("\n" + PrefaultTable(c, PrefaultRows(r.PerCycle)))
	}
	b.WriteString(rcRoundsText(r))
	if bd.Receive == 0 {
		b.WriteString("\nno RC receive fault in the trace\n")
	}
	if floor.N == 0 {
		b.WriteString("\nno DIAG_ECHO round trips: no floor\n")
	}
	if r.EchoUnmatched > 0 {
		fmt.Fprintf(&b, "DIAG_ECHO answers matching no round: %d\n", r.EchoUnmatched)
	}
	if r.TraceMissed > 0 {
		fmt.Fprintf(&b, "the trace's ring overwrote %d events before they were read: faults open then are unresolved\n", r.TraceMissed)
	}
	fmt.Fprintf(&b, "device PRI during the run: %d groups, %d page requests, %d Success, %d Invalid, %d abandoned, %d unexpected responses\n",
		r.PRI.Groups, r.PRI.Requests, r.PRI.Success, r.PRI.Invalid, r.PRI.Abandoned, r.PRI.Unexpected)
	if len(r.Bandwidth) > 0 {
		lo, hi := slices.Min(r.Bandwidth), slices.Max(r.Bandwidth)
		fmt.Fprintf(&b, "ib_send_bw (the sender's side, the cycle's average): median %.1f MB/s over %d cycles (%.1f-%.1f)\n", report.Median(r.Bandwidth), len(r.Bandwidth), lo, hi)
	}
	writeStats := func(title string, names []string, st map[string]int64) {
		var cells []string
		for _, n := range names {
			if v, ok := st[n]; ok {
				cells = append(cells, fmt.Sprintf("%s %+d", n, v))
			}
		}
		if len(cells) == 0 {
			return
		}
		b.WriteString("\n" + title + "\n")
		for i := 0; i < len(cells); i += 4 {
			b.WriteString("  " + strings.Join(cells[i:min(i+4, len(cells))], ", ") + "\n")
		}
	}
	writeStats("npfnic (rdma statistic, over the run):", RCDriverStats, r.Driver)
	if p50, ok := r.DriverEnd["odp_fault_p50_ns"]; ok {
		fmt.Fprintf(&b, "  the driver's fault latency (PRQ interrupt -> response doorbell, its histogram since load): p50 %s us, p99 %s us\n",
			us(time.Duration(p50)), us(time.Duration(r.DriverEnd["odp_fault_p99_ns"])))
	}
	if c.Sender == RCSenderNPFNIC {
		writeStats("the sending npfnic (rdma statistic, over the run):", RCSenderStats, r.Rxe)
	} else {
		writeStats("rdma_rxe, the sender (rdma statistic, over the run):", RCRxeStats, r.Rxe)
	}
	b.WriteString("\npublished figures (seed 000: Lesokhin et al., ASPLOS'17; seed 002: TeRM, FAST'24):\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, ref := range References {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", ref.Source, ref.What, ref.Value)
	}
	tw.Flush()
	if len(r.Warnings) > 0 {
		b.WriteString("\nwarnings:\n  " + strings.Join(r.Warnings, "\n  ") + "\n")
	}
	return b.String()
}

// rcRoundsText is every round's round trip against its floor.
func rcRoundsText(r *RCResult) string {
	return roundsTable("receive fault round trip (detected -> page response)", RCRoundRatios(r.Rounds))
}

// compareRow is one line of the comparison: the Ethernet row and the RC
// row that measure the same span (-1: none).
var compareRows = []struct {
	name    string
	eth, rc int
}{
	{"detected -> RNR NAK sent", -1, RCRowNAK},
	{"detected -> page request queued", RowQueue, -2}, // RC: nak + queue, computed
	{"queued -> interrupt", RowInterrupt, RCRowInterrupt},
	{"the device's share, detected -> interrupt", RowDevice, RCRowDevice},
	{"interrupt -> page response (the guest)", RowResolve, RCRowResolve},
	{"round trip, detected -> page response", RowRoundTrip, RCRowRoundTrip},
	{"page response -> resumed (RC: retransmission accepted)", RowResume, -3}, // RC: wait + accept, computed
	{"  of which the sender's back-off, response -> retransmission received", -1, RCRowWait},
	{"  of which the device, retransmission received -> accepted", -1, RCRowAccept},
	{"total, detected -> resumed", RowTotal, RCRowTotal},
}

// rcSpan computes RC spans that are sums of rows, per fault.
func rcSpan(faults []trace.RCTimeline, which int) Dist {
	var xs []time.Duration
	for _, tl := range faults {
		if !tl.Responder {
			continue
		}
		var from, to trace.Event
		switch which {
		case -2:
			from, to = tl.Fault, tl.Request
		case -3:
			from, to = tl.Response, tl.Resume
		}
		if from.Kind != 0 && to.Kind != 0 {
			xs = append(xs, time.Duration(max(to.TS-from.TS, 0)))
		}
	}
	return NewDist(xs)
}

// CompareTable sets the RC receive fault beside the Ethernet RX buffer
// fault (nil: not run) and the published figures. ethPolicy is the
// Ethernet run's rx_policy.
func CompareTable(accel, ethPolicy string, eth *Result, rcPolicy string, rc *RCResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "the same fault's stages on both transports (p50 / p99, microseconds; device-measured, %s guests)\n", accel)
	var ethBD *Breakdown
	if eth != nil {
		for _, bd := range Breakdowns(eth.Records) {
			if bd.Kind == KindName(hw.FaultKindRxBuf) {
				bd := bd
				ethBD = &bd
			}
		}
	}
	rcBD := NewRCBreakdown(rc.Faults)
	cell := func(d Dist) string {
		if d.N == 0 {
			return "-"
		}
		return us(d.P50) + " / " + us(d.P99)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	ethHead := "Ethernet RX (" + ethPolicy + ")"
	if ethBD == nil {
		ethHead = "Ethernet RX (not run)"
	}
	fmt.Fprintf(tw, "stage\t%s\tRC receive (%s)\t\n", ethHead, rcPolicy)
	for _, row := range compareRows {
		e, r := "-", "-"
		if ethBD != nil && row.eth >= 0 && RowApplies(ethPolicy, ethBD.Kind, row.eth) {
			e = cell(ethBD.Rows[row.eth])
		}
		switch {
		case row.rc >= 0 && RCRowApplies(rcPolicy, row.rc):
			r = cell(rcBD.Rows[row.rc])
		case row.rc < -1:
			r = cell(rcSpan(rc.Faults, row.rc))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", row.name, e, r)
	}
	ef, rf := "-", cell(NewDist(rc.Echo))
	if eth != nil {
		ef = cell(NewDist(eth.Echo))
	}
	fmt.Fprintf(tw, "floor, DIAG_ECHO interrupt -> doorbell\t%s\t%s\t\n", ef, rf)
	ratio := func(rt, floor Dist) string {
		if rt.N == 0 || floor.N == 0 || floor.P50 == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", float64(rt.P50)/float64(floor.P50))
	}
	er := "-"
	if ethBD != nil {
		er = ratio(ethBD.Rows[RowRoundTrip], NewDist(eth.Echo))
	}
	fmt.Fprintf(tw, "round trip / floor (p50)\t%s\t%s\t\n", er, ratio(rcBD.Rows[RCRowRoundTrip], NewDist(rc.Echo)))
	faults := "-"
	if ethBD != nil {
		faults = fmt.Sprint(ethBD.Faults)
	}
	fmt.Fprintf(tw, "faults\t%s\t%d\t\n", faults, rcBD.Receive)
	tw.Flush()
	return b.String()
}

// ReportRC is what the runner prints and writes of an RC run (nil:
// none).
func ReportRC(c RCConfig, r *RCResult) *runner.Outcome {
	if r == nil {
		return nil
	}
	return &runner.Outcome{
		Table:  RCTable(c, r),
		Write:  func(dir string) ([]string, error) { return WriteRCOutputs(dir, c, r) },
		Failed: CheckRC(r),
		Logs:   c.LogDir,
	}
}

// ReportBoth is what the runner prints and writes of the RC half (r), after
// the Ethernet half's (eth, nil if it did not run), and of the two side by
// side: CompareTable, in fault-cost-compare.txt.
func ReportBoth(c Config, eth *Result, rc RCConfig, r *RCResult) *runner.Outcome {
	if r == nil {
		return Report(c, eth)
	}
	o := ReportRC(rc, r)
	compare := CompareTable(rc.AccelName(), c.Policy, eth, rc.Policy, r)
	o.Table += "\n" + compare
	writeRC := o.Write
	o.Write = func(dir string) ([]string, error) {
		f := runner.Files{Dir: dir}
		if eth != nil {
			f.Add(WriteOutputs(dir, c, eth))
		}
		f.Add(writeRC(dir))
		f.Text("fault-cost-compare.txt", compare)
		return f.Done()
	}
	if e := Report(c, eth); e != nil {
		o.Table = e.Table + "\n" + o.Table
		o.Logs = e.Logs + " and " + o.Logs
		o.Failed = cmp.Or(e.Failed, o.Failed)
	}
	return o
}

// WriteRCOutputs writes fault-cost-rc-faults.csv (every fault: QPN, PSN,
// side, NAKs, each stage), fault-cost-rc.csv (the breakdown with the
// floor), fault-cost-rc-rounds.csv, fault-cost-rc-echo.csv,
// fault-cost-rc-cycles.csv (every cycle), with a prefault sweep
// fault-cost-rc-prefault.csv and .png (PrefaultTable's rows),
// fault-cost-rc.txt, fault-cost-rc.png (the stages' p50 and p99, their
// distributions) and fault-cost-rc-timeline.png (the median fault the
// trace still holds) into dir.
func WriteRCOutputs(dir string, c RCConfig, r *RCResult) ([]string, error) {
	hdr := []string{"qpn", "psn", "side", "naks", "early", "refaulted"}
	for _, n := range trace.RCStageNames[1:] {
		hdr = append(hdr, strings.ReplaceAll(strings.ToLower(n), " ", "_")+"_us")
	}
	var faults [][]string
	for _, tl := range r.Faults {
		side := "responder"
		if !tl.Responder {
			side = "requester"
		}
		row := []any{fmt.Sprintf("%#x", tl.QPN), fmt.Sprintf("%#x", tl.PSN), side, tl.NAKs, tl.Early, tl.Refaulted}
		// Each stage as the time since the fault was detected.
		for _, s := range tl.Stages()[1:] {
			if s.Kind == 0 {
				row = append(row, "")
			} else {
				row = append(row, float64(s.TS-tl.Fault.TS)/1e3)
			}
		}
		faults = append(faults, report.Row(row...))
	}
	floor := NewDist(r.Echo)
	var stages [][]string
	for i, d := range NewRCBreakdown(r.Faults).Rows {
		if RCRowApplies(c.Policy, i) {
			stages = append(stages, report.Row(append([]any{RCRowNames[i][0], RCRowSpan(c.Policy, i)}, distCells(d, floor)...)...))
		}
	}
	if floor.N > 0 {
		stages = append(stages, report.Row(append([]any{"floor", "DIAG_ECHO interrupt -> doorbell"}, distCells(floor, floor)...)...))
	}
	var rounds [][]string
	for _, x := range RCRoundRatios(r.Rounds) {
		rounds = append(rounds, report.Row(x.Round, x.RoundTrip.N, us1(x.RoundTrip.P50), x.Floor.N, us1(x.Floor.P50), x.Ratio))
	}
	f := runner.Files{Dir: dir}
	f.CSV("fault-cost-rc-faults.csv", hdr, faults)
	f.CSV("fault-cost-rc.csv", distHeader, stages)
	f.CSV("fault-cost-rc-rounds.csv", []string{"round", "faults", "round_trip_p50_us", "floor_n", "floor_p50_us", "ratio"}, rounds)
	f.CSV("fault-cost-rc-echo.csv", echoHeader, echoRows(r.Echo))
	f.Text("fault-cost-rc.txt", RCTable(c, r))
	hdr, cycles := CyclesCSV(r.PerCycle)
	f.CSV("fault-cost-rc-cycles.csv", hdr, cycles)
	if len(c.Prefault) > 0 {
		rows := PrefaultRows(r.PerCycle)
		hdr, sweep := PrefaultCSV(rows)
		f.CSV("fault-cost-rc-prefault.csv", hdr, sweep)
		if charts := PrefaultCharts(c, rows); len(charts) > 0 {
			f.Charts("fault-cost-rc-prefault.png", 1100, 380, charts...)
		}
	}
	if charts := RCCharts(c, r); len(charts) > 0 {
		f.Charts("fault-cost-rc.png", 1100, 380, charts...)
	}
	if tl, ok := MedianRCFault(r); ok {
		title := fmt.Sprintf("npfnic: one RC receive fault (QPN %#x, PSN %#x, %d RNR NAKs)", tl.QPN, tl.PSN, tl.NAKs)
		f.PNG("fault-cost-rc-timeline.png", func(p string) error {
			return report.FaultStages(p, title, r.Events, tl.Stages(), trace.RCStageNames, 3)
		})
	}
	return f.Done()
}

// MedianRCFault is the resumed receive fault of median total time among
// those whose events r.Events still holds (false: none).
func MedianRCFault(r *RCResult) (trace.RCTimeline, bool) {
	if len(r.Events) == 0 {
		return trace.RCTimeline{}, false
	}
	oldest := r.Events[0].TS
	var tls []trace.RCTimeline
	for _, tl := range r.Faults {
		if tl.Responder && tl.Resume.Kind != 0 && tl.Fault.TS >= oldest {
			tls = append(tls, tl)
		}
	}
	if len(tls) == 0 {
		return trace.RCTimeline{}, false
	}
	sort.SliceStable(tls, func(i, j int) bool {
		return tls[i].Resume.TS-tls[i].Fault.TS < tls[j].Resume.TS-tls[j].Fault.TS
	})
	return tls[(len(tls)-1)/2], true
}

// RCCharts: p50 and p99 of every stage (the device's, then the guest's
// and the sender's beside the floor), and the distributions
// of the device's share, the guest's, the sender's back-off, the round
// trip and the total against the floor.
func RCCharts(c RCConfig, r *RCResult) []report.Chart {
	bd := NewRCBreakdown(r.Faults)
	if bd.Receive == 0 {
		return nil
	}
	floor := NewDist(r.Echo)
	// Two scales: the device's stages take microseconds, the guest's and
	// the sender's milliseconds.
	bars := func(title, unit string, scale float64, rows []int, withFloor bool) report.BarChart {
		bar := report.BarChart{Title: title, YLabel: unit}
		p50 := report.BarSeries{Name: "p50"}
		p99 := report.BarSeries{Name: "p99"}
		for _, row := range rows {
			if !RCRowApplies(c.Policy, row) {
				continue
			}
			bar.Categories = append(bar.Categories, RCRowNames[row][0])
			p50.Values = append(p50.Values, float64(bd.Rows[row].P50)/scale)
			p99.Values = append(p99.Values, float64(bd.Rows[row].P99)/scale)
		}
		if withFloor {
			bar.Categories = append(bar.Categories, "floor")
			p50.Values = append(p50.Values, float64(floor.P50)/scale)
			p99.Values = append(p99.Values, float64(floor.P99)/scale)
		}
		bar.Series = []report.BarSeries{p50, p99}
		return bar
	}
	device := bars("RC receive fault: the device's stages (device-measured, "+c.AccelName()+" guests)", "microseconds", 1e3,
		[]int{RCRowNAK, RCRowQueue, RCRowInterrupt, RCRowDevice, RCRowAccept}, false)
	rest := bars("the guest's and the sender's stages, the round trip, the whole fault, and the interrupt+doorbell floor", "milliseconds", 1e6,
		[]int{RCRowResolve, RCRowWait, RCRowRoundTrip, RCRowTotal}, true)

	cdf := report.LineChart{
		Title:  "distributions: the device's share, the guest's, the sender's back-off, the whole fault, and the floor",
		XLabel: "microseconds (log scale)", YLabel: "fraction of faults", LogX: true,
	}
	stageSeries := func(name string, from, to func(trace.RCTimeline) trace.Event) {
		var xs []time.Duration
		for _, tl := range r.Faults {
			if a, b := from(tl), to(tl); tl.Responder && a.Kind != 0 && b.Kind != 0 {
				xs = append(xs, time.Duration(max(b.TS-a.TS, 0)))
			}
		}
		if len(xs) > 0 {
			cdf.Series = append(cdf.Series, cdfSeries(name, xs, false))
		}
	}
	fault := func(tl trace.RCTimeline) trace.Event { return tl.Fault }
	stageSeries("device: detected -> interrupt", fault, func(tl trace.RCTimeline) trace.Event { return tl.IRQ })
	stageSeries("guest: interrupt -> page response", func(tl trace.RCTimeline) trace.Event { return tl.IRQ }, func(tl trace.RCTimeline) trace.Event { return tl.Response })
	stageSeries("sender: page response -> retransmission", func(tl trace.RCTimeline) trace.Event { return tl.Response }, func(tl trace.RCTimeline) trace.Event { return tl.Retransmit })
	stageSeries("round trip: detected -> page response", fault, func(tl trace.RCTimeline) trace.Event { return tl.Response })
	stageSeries("total: detected -> retransmission accepted", fault, func(tl trace.RCTimeline) trace.Event { return tl.Resume })
	if len(r.Echo) > 0 {
		cdf.Series = append(cdf.Series, cdfSeries("DIAG_ECHO interrupt -> doorbell (floor)", r.Echo, true))
	}
	zero := 0.0
	cdf.YMin = &zero
	return []report.Chart{device, rest, cdf}
}

// errNoFaults is what a run without a single RC receive fault returns.
var errNoFaults = errors.New("no RC receive fault was recorded")

// CheckRC reports a run that measured nothing.
func CheckRC(r *RCResult) error {
	if NewRCBreakdown(r.Faults).Receive == 0 {
		return errNoFaults
	}
	return nil
}
