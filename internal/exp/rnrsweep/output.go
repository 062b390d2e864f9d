package rnrsweep

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
)

// ProgressTo is a Config.Progress that writes a line per point to w,
// each starting with prefix.
func ProgressTo(w io.Writer, prefix string) func(done, total int, r Result) {
	return func(done, total int, r Result) {
		fmt.Fprintf(w, "%s[%d/%d] rate %-7g %-5v resolution %-6v %9.2f MB/s  (%d faults, %d RNR NAKs, %d timeouts; %v wall)\n",
			prefix, done, total, r.FaultRate, r.Recovery, r.Resolution, r.MBps, r.Faults, r.RNRNaks, r.Timeouts, r.Wall.Round(time.Millisecond))
	}
}

// Report is what the runner prints and writes of a sweep.
func Report(c Config, base Result, points []Result) *runner.Outcome {
	return &runner.Outcome{
		Table: Table(c, base, points),
		Write: func(dir string) ([]string, error) {
			csvPath, pngPath, err := WriteOutputs(dir, c, base, points)
			if err != nil {
				return nil, err
			}
			return []string{csvPath, pngPath}, nil
		},
	}
}

// CSVHeader names the columns of the CSV: one row per point, the model
// parameters repeated on every row so the file describes itself.
var CSVHeader = []string{
	"fault_rate", "resolution_us", "recovery", "rnr_timer_code", "rnr_timer_us", "throughput_MBps",
	"relative_to_no_faults", "messages", "bytes", "sim_time_s", "faults", "rnr_naks", "timeouts",
	"retransmitted_packets", "link_Gbps", "latency_us", "mtu", "msg_bytes", "ack_timeout_us",
}

func (c Config) row(r Result) []string {
	return report.Row(r.FaultRate, us(r.Resolution), r.Recovery.String(), r.RNRTimer, us(rnrTimer(r.RNRTimer)), r.MBps,
		r.Relative, r.Messages, r.Bytes, r.SimTime.Seconds(), r.Faults, r.RNRNaks, r.Timeouts, r.Retrans,
		c.LinkGbps, us(c.Latency), c.MTU.Bytes(), c.MsgSize, us(ackTimeout(c.Timeout)))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Pair is the two recoveries at one fault rate and resolution.
type Pair struct {
	FaultRate  float64
	Resolution time.Duration
	RNR, Drop  *Result
}

// Ratio is RNR throughput over drop-and-timeout throughput.
func (p Pair) Ratio() float64 {
	if p.RNR == nil || p.Drop == nil || p.Drop.MBps == 0 {
		return 0
	}
	return p.RNR.MBps / p.Drop.MBps
}

// Pairs groups the points by resolution and fault rate.
func Pairs(points []Result) []Pair {
	var out []Pair
	idx := map[[2]float64]int{}
	for i := range points {
		r := &points[i]
		k := [2]float64{float64(r.Resolution), r.FaultRate}
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, Pair{FaultRate: r.FaultRate, Resolution: r.Resolution})
		}
		if r.Recovery == ibrc.FaultDrop {
			out[j].Drop = r
		} else {
			out[j].RNR = r
		}
	}
	return out
}

// Table formats the sweep as the text table `npfnic exp rnr` prints.
func Table(c Config, base Result, points []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "RC SEND stream, %s\n", c.Describe())
	fmt.Fprintf(&b, "no faults: %.1f MB/s\n", base.MBps)
	fmt.Fprintf(&b, "%-10s %-11s %12s %12s %9s %8s %9s\n", "fault", "resolution", "RNR MB/s", "drop MB/s", "ratio", "RNR NAKs", "timeouts")
	// A point not run (an interrupted sweep) shows as "-", never as 0.
	cell := func(r *Result, format string, v func(*Result) any) string {
		if r == nil {
			return "-"
		}
		return fmt.Sprintf(format, v(r))
	}
	for _, p := range Pairs(points) {
		ratio := "-"
		if p.RNR != nil && p.Drop != nil && p.Drop.MBps > 0 {
			ratio = fmt.Sprintf("%.1fx", p.Ratio())
		}
		fmt.Fprintf(&b, "%-10g %-11v %12s %12s %9s %8s %9s\n", p.FaultRate, p.Resolution,
			cell(p.RNR, "%.1f", func(r *Result) any { return r.MBps }),
			cell(p.Drop, "%.2f", func(r *Result) any { return r.MBps }), ratio,
			cell(p.RNR, "%d", func(r *Result) any { return r.RNRNaks }),
			cell(p.Drop, "%d", func(r *Result) any { return r.Timeouts }))
	}
	return b.String()
}

// WriteOutputs writes rnr.csv and rnr.png into dir and returns their paths.
func WriteOutputs(dir string, c Config, base Result, points []Result) (csvPath, pngPath string, err error) {
	rows := [][]string{c.row(base)}
	for _, r := range points {
		rows = append(rows, c.row(r))
	}
	csvPath = filepath.Join(dir, "rnr.csv")
	if err := report.WriteCSV(csvPath, CSVHeader, rows); err != nil {
		return "", "", err
	}
	var abs, rel []report.Series
	for _, res := range c.Resolutions {
		for _, rec := range c.Recoveries {
			name := fmt.Sprintf("RNR NAK, resolution %v", res)
			if rec == ibrc.FaultDrop {
				name = fmt.Sprintf("drop + ACK timeout, resolution %v", res)
			}
			var s, sr report.Series
			s.Name, sr.Name = name, name
			s.Dashed = rec == ibrc.FaultDrop
			sr.Dashed = s.Dashed
			for _, r := range points {
				if r.Resolution == res && r.Recovery == rec {
					s.X, s.Y = append(s.X, r.FaultRate), append(s.Y, r.MBps)
					sr.X, sr.Y = append(sr.X, r.FaultRate), append(sr.Y, r.Relative)
				}
			}
			abs, rel = append(abs, s), append(rel, sr)
		}
	}
	if len(c.FaultRates) > 0 {
		lo, hi := c.FaultRates[0], c.FaultRates[0]
		for _, r := range c.FaultRates {
			lo, hi = min(lo, r), max(hi, r)
		}
		abs = append(abs, report.Series{Name: "no faults", X: []float64{lo, hi}, Y: []float64{base.MBps, base.MBps}})
	}
	title := fmt.Sprintf("RC throughput vs receive-fault rate (%s)", c.Describe())
	pngPath = filepath.Join(dir, "rnr.png")
	err = report.SavePNG(pngPath, 1250, 520,
		report.LineChart{Title: title, XLabel: "receive faults per packet (probability)", YLabel: "throughput (MB/s)", LogX: true, LogY: true, Series: abs},
		report.LineChart{Title: "relative to the fault-free stream", XLabel: "receive faults per packet (probability)", YLabel: "throughput / no-fault throughput", LogX: true, LogY: true, Series: rel},
	)
	return csvPath, pngPath, err
}
