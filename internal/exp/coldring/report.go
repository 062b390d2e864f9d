package coldring

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/npfnic/npfnic/internal/report"
)

// Header describes the run.
func Header(c Config) string {
	c.setDefaults()
	s := fmt.Sprintf("cold ring (Lesokhin et al., ASPLOS'17, Figure 4) on npfnic: memcached in a TCG guest (%d MiB, %d vCPU), memaslap on the host, %d connections, get:set 9:1",
		c.MemoryMiB, c.CPUs, c.Conns)
	if c.Images != nil && c.Images.Kernel.Release != "" {
		s += fmt.Sprintf("; kernel %s", c.Images.Kernel.Release)
	}
	s += "\nevery run starts cold: rmmod + insmod npfnic.ko rx_policy=P rx_ring_size=N"
	if c.DriverExtra != "" {
		s += " " + c.DriverExtra
	}
	if c.Rounds > 1 {
		s += fmt.Sprintf("\nmedians of %d rounds, policies interleaved", c.Rounds)
	}
	return s
}

// Table formats both parts: (a) per policy, (b) time against ring size with
// the ratios to pin and the goals.
func Table(c Config, results []Result) string {
	c.setDefaults()
	var b strings.Builder
	b.WriteString(Header(c) + "\n")
	if st := Startup(results); len(st) > 0 {
		fmt.Fprintf(&b, "\n(a) startup from a cold ring of %d entries, %d s of memaslap, 1 s bins\n", st[0].RingSize, int(c.StartupTime/1e9))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "policy\tops\tmean ops/s\tt(50%% of %s) s\tidle s\trx_faults\tbackup pkts\tfault drops\tretrans host\tretrans guest\t\n", Baseline(Sweep(results)))
		for _, s := range st {
			if s.Failed == s.Rounds {
				fmt.Fprintf(tw, "%s\tFAILED\t\t\t\t\t\t\t\t\t\n", s.Policy)
				continue
			}
			tth := "never"
			if s.TimeToHalf > 0 {
				tth = fmt.Sprint(s.TimeToHalf)
			} else if s.TimeToHalf == 0 {
				tth = "-"
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", s.Policy, s.Ops, s.Mean, tth, s.ZeroSeconds,
				s.RxFaults, s.BackupPkts, s.FaultDrops, s.HostRetrans, s.GuestRetrans)
		}
		tw.Flush()
		b.WriteString("ops/s per second:\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.AlignRight)
		for _, s := range st {
			cells := []string{s.Policy}
			for _, v := range s.Bins {
				cells = append(cells, fmt.Sprintf("%.0f", v))
			}
			fmt.Fprintf(tw, "%s\t\n", strings.Join(cells, "\t"))
		}
		tw.Flush()
	}
	cells := Sweep(results)
	if len(cells) > 0 {
		fmt.Fprintf(&b, "\n(b) seconds for %d memaslap operations from a cold ring (cap %.0f s; >= marks a capped run)\n", c.Ops, c.Cap.Seconds())
		policies, sizes := axes(cells)
		at := map[string]SweepCell{}
		for _, s := range cells {
			at[fmt.Sprint(s.Policy, s.RingSize)] = s
		}
		ratios := map[string]SweepRatio{}
		for _, r := range Ratios(cells) {
			ratios[fmt.Sprint(r.Policy, r.RingSize)] = r
		}
		base := Baseline(cells)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		hdr := []string{"ring"}
		for _, p := range policies {
			hdr = append(hdr, p+" s")
		}
		for _, p := range policies {
			if p != base {
				hdr = append(hdr, p+"/"+base)
			}
		}
		fmt.Fprintf(tw, "%s\t\n", strings.Join(hdr, "\t"))
		for _, n := range sizes {
			row := []string{fmt.Sprint(n)}
			for _, p := range policies {
				row = append(row, cellText(at[fmt.Sprint(p, n)]))
			}
			for _, p := range policies {
				if p != base {
					row = append(row, ratioText(ratios[fmt.Sprint(p, n)]))
				}
			}
			fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
		}
		tw.Flush()
		b.WriteString("counters (medians): rx_faults / rx_backup_pkts / rx_fault_drops / TCP retransmits host+guest\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		hdr = []string{"ring"}
		hdr = append(hdr, policies...)
		fmt.Fprintf(tw, "%s\t\n", strings.Join(hdr, "\t"))
		for _, n := range sizes {
			row := []string{fmt.Sprint(n)}
			for _, p := range policies {
				s, ok := at[fmt.Sprint(p, n)]
				if !ok || !s.Done() {
					row = append(row, "-")
					continue
				}
				row = append(row, fmt.Sprintf("%.0f/%.0f/%.0f/%.0f", s.RxFaults, s.BackupPkts, s.FaultDrops, s.HostRetrans+s.GuestRetrans))
			}
			fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
		}
		tw.Flush()
		b.WriteString(Goals(cells))
	}
	var failures []string
	for _, r := range results {
		if r.Err != nil {
			failures = append(failures, fmt.Sprintf("(%s) %s ring %d round %d FAILED: %v", partLetter(r.Part), r.Policy, r.RingSize, r.Round, firstLine(r.Err.Error())))
		}
	}
	if len(failures) > 0 {
		b.WriteString("\n" + strings.Join(failures, "\n") + "\n")
	}
	return b.String()
}

// Goals reports against the experiment's goals (not asserted): backup
// within 1.1x of pin at every ring size; drop visibly pathological.
func Goals(cells []SweepCell) string {
	base := Baseline(cells)
	if base != "pin" {
		return ""
	}
	var backupOK, backupMiss, dropBad, dropNot []string
	for _, r := range Ratios(cells) {
		if math.IsNaN(r.Ratio) {
			continue
		}
		switch r.Policy {
		case "backup":
			if r.Ratio <= 1.1 {
				backupOK = append(backupOK, fmt.Sprint(r.RingSize))
			} else {
				backupMiss = append(backupMiss, fmt.Sprintf("%d (%.2fx)", r.RingSize, r.Ratio))
			}
		case "drop":
			if r.LowerBound || r.Ratio >= 2 {
				dropBad = append(dropBad, fmt.Sprint(r.RingSize))
			} else {
				dropNot = append(dropNot, fmt.Sprintf("%d (%.2fx)", r.RingSize, r.Ratio))
			}
		}
	}
	var b strings.Builder
	b.WriteString("goals:\n")
	if len(backupOK)+len(backupMiss) > 0 {
		if len(backupMiss) == 0 {
			fmt.Fprintf(&b, "  backup within 1.1x of pin: MET at every ring size (%s)\n", strings.Join(backupOK, ", "))
		} else {
			fmt.Fprintf(&b, "  backup within 1.1x of pin: MISSED at %s (met at %s)\n", strings.Join(backupMiss, ", "), orNone(backupOK))
		}
	}
	if len(dropBad)+len(dropNot) > 0 {
		if len(dropNot) == 0 {
			fmt.Fprintf(&b, "  drop pathological (>= 2x pin or capped): yes at every ring size (%s)\n", strings.Join(dropBad, ", "))
		} else {
			fmt.Fprintf(&b, "  drop pathological (>= 2x pin or capped): at %s; not at %s\n", orNone(dropBad), strings.Join(dropNot, ", "))
		}
	}
	return b.String()
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func cellText(s SweepCell) string {
	switch {
	case s.Runs == 0:
		return "-"
	case !s.Done():
		return "FAILED"
	case s.LowerBound:
		return fmt.Sprintf(">=%.0f", s.Seconds)
	}
	return fmt.Sprintf("%.1f", s.Seconds)
}

func ratioText(r SweepRatio) string {
	if r.Policy == "" || math.IsNaN(r.Ratio) {
		return "n/a"
	}
	if r.LowerBound {
		return fmt.Sprintf(">=%.1fx", r.Ratio)
	}
	return fmt.Sprintf("%.2fx", r.Ratio)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// axes lists the policies (in first-seen order) and ring sizes (ascending).
func axes(cells []SweepCell) ([]string, []int) {
	var ps []string
	var ns []int
	seenP, seenN := map[string]bool{}, map[int]bool{}
	for _, c := range cells {
		if !seenP[c.Policy] {
			seenP[c.Policy] = true
			ps = append(ps, c.Policy)
		}
		if !seenN[c.RingSize] {
			seenN[c.RingSize] = true
			ns = append(ns, c.RingSize)
		}
	}
	sort.Ints(ns)
	return ps, ns
}

// CounterNames are the ethtool -S counters every run records in the CSV.
var CounterNames = []string{
	"rx_faults", "rx_backup_pkts", "rx_fault_drops", "tx_faults", "tx_fault_errors", "backup_full",
	"page_requests", "page_groups", "invalidations", "atc_hits", "atc_misses",
	"fault_lat_p50_ns", "fault_lat_p99_ns", "backup_lat_p50_ns", "backup_lat_p99_ns",
}

// RunsHeader names the columns of cold-ring-runs.csv.
func RunsHeader() []string {
	h := []string{"part", "policy", "ring_size", "round", "ops", "seconds", "capped", "memaslap_errors",
		"host_tcp_retrans", "guest_tcp_retrans", "host_tcp_timeouts"}
	h = append(h, CounterNames...)
	return append(h, "host_load", "error")
}

// RunsRows are one row per run.
func RunsRows(results []Result) [][]string {
	var rows [][]string
	for _, r := range results {
		row := []any{r.Part, r.Policy, r.RingSize, r.Round, r.Ops, r.Seconds, r.Capped, r.MemaslapErrors,
			r.HostRetrans, r.GuestRetrans, r.HostTimeouts}
		for _, n := range CounterNames {
			if v, ok := r.Stats[n]; ok {
				row = append(row, v)
			} else {
				row = append(row, "")
			}
		}
		msg := ""
		if r.Err != nil {
			msg = firstLine(r.Err.Error())
		}
		row = append(row, r.HostLoad, msg)
		rows = append(rows, report.Row(row...))
	}
	return rows
}

// WriteOutputs writes into dir: cold-ring-runs.csv (every run with its
// counters), cold-ring-startup.csv (part a: ops/s per second and policy),
// cold-ring-ops.csv (part b: medians and ratios), cold-ring.txt (the
// table) and cold-ring.png (both panels).
func WriteOutputs(dir string, c Config, results []Result) ([]string, error) {
	var files []string
	p := filepath.Join(dir, "cold-ring-runs.csv")
	if err := report.WriteCSV(p, RunsHeader(), RunsRows(results)); err != nil {
		return nil, err
	}
	files = append(files, p)
	if st := Startup(results); len(st) > 0 {
		var rows [][]string
		for _, s := range st {
			for i, v := range s.Bins {
				rows = append(rows, report.Row(s.Policy, s.RingSize, i+1, v))
			}
		}
		p := filepath.Join(dir, "cold-ring-startup.csv")
		if err := report.WriteCSV(p, []string{"policy", "ring_size", "second", "ops_per_s"}, rows); err != nil {
			return nil, err
		}
		files = append(files, p)
	}
	if cells := Sweep(results); len(cells) > 0 {
		ratios := map[string]SweepRatio{}
		for _, r := range Ratios(cells) {
			ratios[fmt.Sprint(r.Policy, r.RingSize)] = r
		}
		var rows [][]string
		for _, s := range cells {
			ratio, lb := "", false
			if r, ok := ratios[fmt.Sprint(s.Policy, s.RingSize)]; ok && !math.IsNaN(r.Ratio) {
				ratio, lb = fmt.Sprintf("%.4g", r.Ratio), r.LowerBound
			}
			secs := ""
			if s.Done() {
				secs = fmt.Sprintf("%.4g", s.Seconds)
			}
			rows = append(rows, report.Row(s.Policy, s.RingSize, c.Ops, secs, s.LowerBound, s.Runs, s.Capped, s.Failed,
				ratio, lb, s.RxFaults, s.BackupPkts, s.FaultDrops, s.HostRetrans, s.GuestRetrans))
		}
		p := filepath.Join(dir, "cold-ring-ops.csv")
		hdr := []string{"policy", "ring_size", "ops", "seconds", "seconds_is_lower_bound", "runs", "capped", "failed",
			"ratio_to_" + Baseline(cells), "ratio_is_lower_bound", "rx_faults", "rx_backup_pkts", "rx_fault_drops", "host_tcp_retrans", "guest_tcp_retrans"}
		if err := report.WriteCSV(p, hdr, rows); err != nil {
			return nil, err
		}
		files = append(files, p)
	}
	p = filepath.Join(dir, "cold-ring.txt")
	if err := os.WriteFile(p, []byte(Table(c, results)), 0o644); err != nil {
		return nil, err
	}
	files = append(files, p)
	p = filepath.Join(dir, "cold-ring.png")
	if err := SavePNG(p, c, results); err != nil {
		return nil, err
	}
	return append(files, p), nil
}
