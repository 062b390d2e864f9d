package faultcost

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/npfnic/npfnic/internal/report"
)

// PrefaultRow is what the cold cycles run at one odp_prefault_pages value
// took: per cycle (median and range over the cycles) the receive faults,
// the page requests the device sent for them and the RNR NAKs, the time
// the transfer stood still on faults (the sum, over the cycle's faults,
// of detected -> retransmission accepted), and every fault's total.
type PrefaultRow struct {
	Prefault, Cycles int
	Faults           Spread
	// PageRequests are the pages the device asked for, Groups the page
	// request groups they came in (one page response each).
	PageRequests, Groups Spread
	NAKs                 Spread
	// StalledMs is per cycle, in milliseconds.
	StalledMs Spread
	// Total is every resumed receive fault's detected -> accepted.
	Total Dist
	// Unresolved counts receive faults that never saw their
	// retransmission accepted (the cycle's stall leaves them out).
	Unresolved int
	// Bandwidth is the median of the cycles' ib_send_bw averages (MB/s).
	Bandwidth float64
}

// Spread is a median with the smallest and largest value.
type Spread struct{ Median, Lo, Hi float64 }

func newSpread(xs []float64) Spread {
	lo, hi := report.Spread(xs)
	return Spread{report.Median(xs), lo, hi}
}

func (s Spread) String() string {
	if s.Lo == s.Hi {
		return trimFloat(s.Median)
	}
	return fmt.Sprintf("%s (%s-%s)", trimFloat(s.Median), trimFloat(s.Lo), trimFloat(s.Hi))
}

// trimFloat prints whole numbers without decimals, others with one.
func trimFloat(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprint(int64(v))
	}
	return fmt.Sprintf("%.1f", v)
}

// PrefaultRows summarises cycles by odp_prefault_pages, ascending.
func PrefaultRows(cycles []RCCycle) []PrefaultRow {
	keys, groups := report.Group(cycles, func(c RCCycle) int { return c.Prefault })
	slices.Sort(keys)
	rows := make([]PrefaultRow, 0, len(keys))
	for _, k := range keys {
		row := PrefaultRow{Prefault: k, Cycles: len(groups[k])}
		var faults, reqs, groupsN, naks, stalled, bws []float64
		var totals []time.Duration
		for _, c := range groups[k] {
			var n, nak int
			var stall time.Duration
			for _, tl := range c.Faults {
				if !tl.Responder {
					continue
				}
				n++
				nak += tl.NAKs
				if tl.Resume.Kind == 0 {
					row.Unresolved++
					continue
				}
				d := time.Duration(max(tl.Resume.TS-tl.Fault.TS, 0))
				stall += d
				totals = append(totals, d)
			}
			faults = append(faults, float64(n))
			naks = append(naks, float64(nak))
			reqs = append(reqs, float64(c.PageRequests))
			groupsN = append(groupsN, float64(c.Groups))
			stalled = append(stalled, float64(stall)/1e6)
			if c.Bandwidth > 0 {
				bws = append(bws, c.Bandwidth)
			}
		}
		row.Faults, row.PageRequests, row.Groups = newSpread(faults), newSpread(reqs), newSpread(groupsN)
		row.NAKs, row.StalledMs = newSpread(naks), newSpread(stalled)
		row.Total = NewDist(totals)
		row.Bandwidth = report.Median(bws)
		rows = append(rows, row)
	}
	return rows
}

// PrefaultTable is the sweep: each odp_prefault_pages value's cold cycle.
func PrefaultTable(c RCConfig, rows []PrefaultRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "odp_prefault_pages swept: one cold %d B receive buffer per cycle (%d pages); per cycle, median (range) over the cycles\n",
		c.Size, (c.Size+4095)/4096)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "odp_prefault_pages\tcycles\treceive faults\tpage request groups\tpages requested\tRNR NAKs\tstalled on faults, ms\tfault total p50, us\tunresolved\tib_send_bw MB/s\t\n")
	for _, r := range rows {
		name := fmt.Sprint(r.Prefault)
		if r.Prefault == 0 {
			name = "driver default"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%.1f\t\n", name, r.Cycles, r.Faults, r.Groups, r.PageRequests, r.NAKs, r.StalledMs,
			us(r.Total.P50), r.Unresolved, r.Bandwidth)
	}
	tw.Flush()
	return b.String()
}

// PrefaultCSV is the sweep's rows as CSV.
func PrefaultCSV(rows []PrefaultRow) ([]string, [][]string) {
	hdr := []string{"odp_prefault_pages", "cycles", "faults_median", "faults_min", "faults_max", "page_groups_median", "page_requests_median", "page_requests_min",
		"page_requests_max", "rnr_naks_median", "rnr_naks_min", "rnr_naks_max", "stalled_ms_median", "stalled_ms_min", "stalled_ms_max",
		"fault_total_p50_us", "fault_total_p99_us", "unresolved", "bandwidth_mbs"}
	var out [][]string
	for _, r := range rows {
		out = append(out, report.Row(r.Prefault, r.Cycles, r.Faults.Median, r.Faults.Lo, r.Faults.Hi, r.Groups.Median, r.PageRequests.Median, r.PageRequests.Lo,
			r.PageRequests.Hi, r.NAKs.Median, r.NAKs.Lo, r.NAKs.Hi, r.StalledMs.Median, r.StalledMs.Lo, r.StalledMs.Hi,
			us1(r.Total.P50), us1(r.Total.P99), r.Unresolved, r.Bandwidth))
	}
	return hdr, out
}

// CyclesCSV is every cycle.
func CyclesCSV(cycles []RCCycle) ([]string, [][]string) {
	hdr := []string{"round", "odp_prefault_pages", "receive_faults", "page_requests", "page_groups", "rnr_naks", "stalled_ms", "bandwidth_mbs"}
	var out [][]string
	for _, c := range cycles {
		row := PrefaultRows([]RCCycle{c})[0]
		out = append(out, report.Row(c.Round, c.Prefault, row.Faults.Median, c.PageRequests, c.Groups, row.NAKs.Median, row.StalledMs.Median, c.Bandwidth))
	}
	return hdr, out
}

// PrefaultCharts: the time a cold cycle stood still on faults, and the
// faults, page request groups, pages requested and RNR NAKs it took,
// against the knob (medians, the ranges as whiskers).
func PrefaultCharts(c RCConfig, rows []PrefaultRow) []report.Chart {
	if len(rows) < 2 {
		return nil
	}
	var cats []string
	for _, r := range rows {
		cats = append(cats, fmt.Sprint(r.Prefault))
	}
	series := func(name string, get func(PrefaultRow) Spread) report.BarSeries {
		s := report.BarSeries{Name: name}
		for _, r := range rows {
			v := get(r)
			s.Values, s.Lo, s.Hi = append(s.Values, v.Median), append(s.Lo, v.Lo), append(s.Hi, v.Hi)
		}
		return s
	}
	xl := "odp_prefault_pages (pages one fault asks for)"
	stall := report.BarChart{
		Title:      fmt.Sprintf("a cold %d KiB receive: time stalled on faults per cycle (%s guests, sender %s)", c.Size/1024, c.AccelName(), c.Sender),
		XLabel:     xl,
		YLabel:     "milliseconds",
		Categories: cats,
		Series:     []report.BarSeries{series("stalled on faults (median, range)", func(r PrefaultRow) Spread { return r.StalledMs })},
	}
	counts := report.BarChart{
		Title:      "per cycle: receive faults, page request groups, pages requested and RNR NAKs",
		XLabel:     xl,
		YLabel:     "per cycle",
		Categories: cats,
		Series: []report.BarSeries{
			series("receive faults", func(r PrefaultRow) Spread { return r.Faults }),
			series("page request groups", func(r PrefaultRow) Spread { return r.Groups }),
			series("pages requested", func(r PrefaultRow) Spread { return r.PageRequests }),
			series("RNR NAKs", func(r PrefaultRow) Spread { return r.NAKs }),
		},
	}
	return []report.Chart{stall, counts}
}
