package rnpfrate

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
)

// Header says what was measured and how.
func Header(c Config) string {
	c.setDefaults()
	return fmt.Sprintf("rNPF-rate sweep (seed 000 Figure 10, left): iperf3 TCP from the host into a %s guest's npfnic, %v per run;\n"+
		"synthetic rNPFs per received packet (driver rnpf_rate_ppm: a real invalidation of a random posted RX buffer);\n"+
		"minor faults resolved at once, major after fault_delay_us = %v; ring warmed before every run; median of %d rounds (min-max)\n",
		c.AccelName(), c.Time, c.MajorDelay, c.Rounds)
}

// Table formats the cells and the goals.
func Table(c Config, results []Result) string {
	cells := Summarize(results)
	var b strings.Builder
	tw := startTable(&b, Header(c), "policy\tfaults\trate\tMbit/s\t(min-max)\tx pin\trNPF ppm\trNPFs\trx_faults\tbackup pkts\tfault drops\tretrans host\tguest\tRTOs\tµs/rNPF\tfailed")
	for _, s := range cells {
		fault, rate := s.Fault, RateText(s.PPM)
		if fault == "" {
			fault = "-"
		}
		if s.Policy == "pin" {
			rate = "-"
		}
		if !s.Done() {
			fmt.Fprintf(tw, "%s\t%s\t%s\tFAILED\t\t\t\t\t\t\t\t\t\t\t\t%d/%d\t\n", s.Policy, fault, rate, s.Failed, s.Runs)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t(%.0f-%.0f)\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\t\n",
			s.Policy, fault, rate, s.Mbps, s.Lo, s.Hi, relText(s.Rel), s.MeasuredPPM, s.Injected, s.Faults,
			s.BackupPkts, s.FaultDrops, s.HostRetrans, s.GuestRetrans, s.HostTimeouts, costText(s.CostPerRNPF), failedText(s))
	}
	tw.Flush()
	b.WriteString("\ngoals (on the medians):\n")
	b.WriteString(GoalsText(Goals(cells)))
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(&b, "\nround %d, %s failed: %s", r.Round, r.Point, runner.FirstLine(r.Err.Error()))
		}
	}
	return b.String()
}

// startTable writes header and a blank line to b, and returns a table
// below them whose first row is columns (tab-separated).
func startTable(b *strings.Builder, header, columns string) *tabwriter.Writer {
	b.WriteString(header + "\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\t\n", columns)
	return tw
}

// orDash formats v, or "-" for NaN (nothing to compare with).
func orDash(v float64, format string) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func relText(r float64) string   { return orDash(r, "%.2f") }
func costText(us float64) string { return orDash(us, "%.0f") }

// failedOf is "-", or the failed runs of all.
func failedOf(failed, runs int) string {
	if failed == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", failed, runs)
}

func failedText(s Cell) string { return failedOf(s.Failed, s.Runs) }

// RunsHeader names the columns of rnpf-rate-runs.csv.
func RunsHeader() []string {
	return []string{"round", "policy", "faults", "rate", "rate_ppm", "mbps", "bytes", "seconds",
		"rx_packets", "rnpf_injected", "rnpf_skipped", "measured_ppm", "rx_faults", "rx_backup_pkts", "rx_fault_drops", "late_dma",
		"host_retrans", "guest_retrans", "host_rtos", "iperf_retrans", "rewarm_faults", "host_load", "error"}
}

// RunsRows are every run with its counters.
func RunsRows(results []Result) [][]string {
	var rows [][]string
	for _, r := range results {
		var bytes int64
		var secs float64
		var iperfRetr int
		if r.Iperf != nil {
			bytes, secs, iperfRetr = r.Iperf.Bytes, r.Iperf.Seconds, r.Iperf.Retransmits
		}
		errText := runner.ErrCell(r.Err)
		k := r.Counters
		rows = append(rows, report.Row(r.Round, r.Policy, r.Fault, RateText(r.PPM), r.PPM, r.Mbps(), bytes, secs,
			k.RxPackets, k.Injected, k.Skipped, k.Rate(), k.Faults, k.BackupPkts, k.FaultDrops, k.LateDMA,
			r.HostRetrans, r.GuestRetrans, r.HostTimeouts, iperfRetr, r.Rewarm, r.HostLoad, errText))
	}
	return rows
}

// CellsHeader names the columns of rnpf-rate.csv.
func CellsHeader() []string {
	return []string{"policy", "faults", "rate", "rate_ppm", "runs", "failed", "mbps_median", "mbps_min", "mbps_max", "rel_pin",
		"measured_ppm", "rnpf_injected", "rx_faults", "rx_backup_pkts", "rx_fault_drops", "host_retrans", "guest_retrans", "host_rtos",
		"frames_per_sec", "cost_per_rnpf_us"}
}

// CellsRows are the medians per point.
func CellsRows(cells []Cell) [][]string {
	var rows [][]string
	for _, s := range cells {
		rows = append(rows, report.Row(s.Policy, s.Fault, RateText(s.PPM), s.PPM, s.Runs, s.Failed, s.Mbps, s.Lo, s.Hi, s.Rel,
			s.MeasuredPPM, s.Injected, s.Faults, s.BackupPkts, s.FaultDrops, s.HostRetrans, s.GuestRetrans, s.HostTimeouts,
			s.FramesPerSec, s.CostPerRNPF))
	}
	return rows
}

// WriteOutputs writes into dir: rnpf-rate-runs.csv (every run with its
// counters), rnpf-rate.csv (medians per point), rnpf-rate.txt (the table)
// and rnpf-rate.png (the figure).
func WriteOutputs(dir string, c Config, results []Result) ([]string, error) {
	cells := Summarize(results)
	f := runner.Files{Dir: dir}
	f.CSV("rnpf-rate-runs.csv", RunsHeader(), RunsRows(results))
	f.CSV("rnpf-rate.csv", CellsHeader(), CellsRows(cells))
	f.Text("rnpf-rate.txt", Table(c, results))
	f.PNG("rnpf-rate.png", func(p string) error { return SavePlot(p, c, cells) })
	return f.Done()
}
