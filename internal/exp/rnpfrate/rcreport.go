package rnpfrate

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/npfnic/npfnic/internal/exp/rnrsweep"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
)

// RCHeader says what the RC half measured and how.
func RCHeader(c Config) string {
	c.setDefaults()
	return rcHeaderLines(c)
}

// RCTable formats the cells, the optimum, RNR / drop at every rate and
// the goals.
func RCTable(c Config, results []RCResult) string {
	sum := SummarizeRC(results)
	var b strings.Builder
	tw := startTable(&b, RCHeader(c), "sender\tpolicy\tfaults\trate\tMB/s\t(min-max)\tx opt\tmsgs/s\tmeasured\tinjected\tskipped\tfaults\tRNR NAKs\tdrops\tsender RNR\tsender retries\tms/fault\tfailed")
	for _, s := range sum.Cells {
		fault := s.Fault
		if fault == "" {
			fault = "-"
		}
		if !s.Done() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tFAILED\t\t\t\t\t\t\t\t\t\t\t\t\t%d/%d\t\n", s.Sender, s.Policy, fault, RateText(s.PPM), s.Failed, s.Runs)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t(%.2f-%.2f)\t%s\t%.0f\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\t\n",
			s.Sender, s.Policy, fault, RateText(s.PPM), s.MBps, s.Lo, s.Hi, relText(s.Rel), s.MsgsPerSec, measuredText(s.MeasuredPPM),
			s.Injected, s.Skipped, s.Faults, s.RNRNaks, s.FaultDrops, s.SenderRNR, s.SenderRetries, msText(s.CostPerFault), rcFailedText(s))
	}
	tw.Flush()
	for _, snd := range sum.Senders {
		if o, ok := sum.Optima[snd]; ok {
			fmt.Fprintf(&b, "\noptimum from %s (every rate-0 window, both policies): %.2f MB/s (%.2f-%.2f, %d windows), %.0f messages/s",
				snd, o.MBps, o.Lo, o.Hi, o.Runs, o.MsgsPerSec)
		}
	}
	b.WriteString("\n\nRNR NAK / drop (medians):\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "sender\trate\tfaults\trnr MB/s\tdrop MB/s\trnr/drop\t\n")
	for _, r := range RCRatios(sum.Cells) {
		fault := r.Fault
		if fault == "" {
			fault = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Sender, RateText(r.PPM), fault, mbText(r.RNR), mbText(r.Drop), ratioText(r.Ratio))
	}
	tw.Flush()
	b.WriteString("\ngoals (on the medians):\n")
	b.WriteString(GoalsText(RCGoals(sum.Cells)))
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(&b, "\nround %d, %s failed: %s", r.Round, r.Point, runner.FirstLine(r.Err.Error()))
		}
	}
	return b.String()
}

func measuredText(ppm float64) string {
	if ppm == 0 {
		return "0"
	}
	return fmt.Sprintf("%.2g", ppm/1e6)
}

func msText(ms float64) string { return orDash(ms, "%.1f") }
func mbText(v float64) string  { return orDash(v, "%.2f") }

func rcFailedText(s RCCell) string { return failedOf(s.Failed, s.Runs) }

// RCRunsHeader names the columns of rnpf-rate-rc-runs.csv.
func RCRunsHeader() []string {
	return []string{"round", "sender", "policy", "faults", "rate", "rate_ppm", "msg_bytes", "seconds", "messages", "mbps", "msgs_per_sec",
		"rnpf_injected", "rnpf_skipped", "measured_ppm", "responder_faults", "rnr_naks_fault", "fault_drops", "rnr_naks_no_wqe",
		"fault_errors", "sender_rnr_naks", "sender_ack_timeouts", "sender_retry_exceeded", "rewarm_faults", "host_load", "error"}
}

// RCRunsRows are every window with its counters.
func RCRunsRows(results []RCResult) [][]string {
	var rows [][]string
	for _, r := range results {
		errText := runner.ErrCell(r.Err)
		k := r.Counters
		rows = append(rows, report.Row(r.Round, r.Sender, r.Policy, r.Fault, RateText(r.PPM), r.PPM, r.MsgSize, r.Seconds, k.Messages, r.MBps(), r.MsgsPerSec(),
			k.Injected, k.Skipped, k.Rate(), k.Faults, k.RNRNaks, k.FaultDrops, k.NoWQENaks,
			k.FaultErrors, k.SenderRNR, k.SenderRetries, k.SenderRetryExceeded, r.Rewarm, r.HostLoad, errText))
	}
	return rows
}

// RCCellsHeader names the columns of rnpf-rate-rc.csv.
func RCCellsHeader() []string {
	return []string{"sender", "policy", "faults", "rate", "rate_ppm", "runs", "failed", "mbps_median", "mbps_min", "mbps_max", "rel_optimum",
		"rnr_over_drop", "msgs_per_sec", "measured_ppm", "rnpf_injected", "rnpf_skipped", "responder_faults", "rnr_naks_fault", "fault_drops",
		"sender_rnr_naks", "sender_ack_timeouts", "cost_per_fault_ms"}
}

// RCCellsRows are the medians per point, each with RNR / drop at its
// fault kind and rate.
func RCCellsRows(cells []RCCell) [][]string {
	ratio := map[[3]any]float64{}
	for _, r := range RCRatios(cells) {
		ratio[[3]any{r.Sender, r.Fault, r.PPM}] = r.Ratio
	}
	var rows [][]string
	for _, s := range cells {
		q, ok := ratio[[3]any{s.Sender, s.Fault, s.PPM}]
		if !ok {
			q = math.NaN()
		}
		rows = append(rows, report.Row(s.Sender, s.Policy, s.Fault, RateText(s.PPM), s.PPM, s.Runs, s.Failed, s.MBps, s.Lo, s.Hi, s.Rel,
			q, s.MsgsPerSec, s.MeasuredPPM, s.Injected, s.Skipped, s.Faults, s.RNRNaks, s.FaultDrops, s.SenderRNR, s.SenderRetries, s.CostPerFault))
	}
	return rows
}

// WriteRCOutputs writes into dir: rnpf-rate-rc-runs.csv (every window
// with its counters), rnpf-rate-rc.csv (medians per point),
// rnpf-rate-rc.txt (the table) and rnpf-rate-rc.png (the figure, with the
// virtual-time sweep beside it if sim is set); and sim's own outputs
// (`npfnic exp rnr`'s rnr.csv and rnr.png) in dir/rnr-sim.
func WriteRCOutputs(dir string, c Config, results []RCResult, sim *Sim) ([]string, error) {
	sum := SummarizeRC(results)
	f := runner.Files{Dir: dir}
	f.CSV("rnpf-rate-rc-runs.csv", RCRunsHeader(), RCRunsRows(results))
	f.CSV("rnpf-rate-rc.csv", RCCellsHeader(), RCCellsRows(sum.Cells))
	f.Text("rnpf-rate-rc.txt", RCTable(c, results))
	if sim != nil {
		f.Add(rnrsweep.Report(sim.Config, sim.Base, sim.Points).Write(filepath.Join(dir, "rnr-sim")))
	}
	f.PNG("rnpf-rate-rc.png", func(p string) error { return SaveRCPlot(p, c, sum, sim) })
	return f.Done()
}
