package coldring

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
)

// Header describes the run.
func Header(c Config) string {
	c.setDefaults()
	s := fmt.Sprintf("cold ring (Lesokhin et al., ASPLOS'17, Figure 4) on npfnic: memcached in a %s guest (%d MiB, %d vCPU), memaslap on the host, %d connections, get:set 9:1",
		c.AccelName(), c.MemoryMiB, c.CPUs, c.Conns)
	if c.Images != nil && c.Images.Kernel.Release != "" {
		s += fmt.Sprintf("; kernel %s", c.Images.Kernel.Release)
	}
	s += "\nevery run starts cold: rmmod + insmod npfnic.ko rx_policy=P rx_ring_size=N"
	if c.DriverExtra != "" {
		s += " " + c.DriverExtra
	}
	if c.Rounds > 1 {
		s += fmt.Sprintf("\nmedians of %d rounds: each round runs every policy at a ring size back to back, the order rotated by one each round", c.Rounds)
		if c.StartupRounds < c.Rounds && !c.SkipStartup {
			s += fmt.Sprintf("; part (a) in the first %d", c.StartupRounds)
		}
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
		fmt.Fprintf(&b, "\n(a) startup from a cold ring of %d entries, %d s of memaslap, 1 s bins", st[0].RingSize, int(c.StartupTime/1e9))
		if st[0].Rounds > 1 {
			fmt.Fprintf(&b, ", medians of %d rounds", st[0].Rounds)
		}
		b.WriteString("\n")
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
		fmt.Fprintf(&b, "\n(b) seconds for %d memaslap operations from a cold ring (cap %.0f s; >= marks a capped run)", c.Ops, c.Cap.Seconds())
		if c.Rounds > 1 {
			b.WriteString("; median (fastest-slowest round), ratios of the medians")
		}
		b.WriteString("\n")
		policies, sizes := axes(cells)
		at := map[string]SweepCell{}
		for _, s := range cells {
			at[fmt.Sprint(s.Policy, s.RingSize)] = s
		}
		ratios := map[string]SweepRatio{}
		for _, r := range Ratios(cells) {
			ratios[fmt.Sprint(r.Policy, "/", r.Base, r.RingSize)] = r
		}
		type col struct{ p, base string }
		var rcols []col
		base := Baseline(cells)
		for _, p := range policies {
			if p != base && !(p == "off" && base == "pin") {
				rcols = append(rcols, col{p, base})
			}
		}
		if base == "pin" && slices.Contains(policies, "off") {
			rcols = append([]col{{"pin", "off"}}, rcols...)
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		hdr := []string{"ring"}
		for _, p := range policies {
			hdr = append(hdr, p+" s")
		}
		for _, rc := range rcols {
			hdr = append(hdr, rc.p+"/"+rc.base)
		}
		fmt.Fprintf(tw, "%s\t\n", strings.Join(hdr, "\t"))
		for _, n := range sizes {
			row := []string{fmt.Sprint(n)}
			for _, p := range policies {
				row = append(row, cellText(at[fmt.Sprint(p, n)], c.Rounds > 1))
			}
			for _, rc := range rcols {
				row = append(row, ratioText(ratios[fmt.Sprint(rc.p, "/", rc.base, n)]))
			}
			fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
		}
		tw.Flush()
		b.WriteString("counters (medians): rx_faults / rx_backup_pkts / rx_fault_drops / TCP retransmits host+guest\n")
		counterTable(&b, policies, sizes, at, func(s SweepCell) string {
			return fmt.Sprintf("%.0f/%.0f/%.0f/%.0f", s.RxFaults, s.BackupPkts, s.FaultDrops, s.HostRetrans+s.GuestRetrans)
		})
		b.WriteString("translation (medians): atc_hits / atc_misses / tx_faults, and the driver's load in s (before the measured window)\n")
		counterTable(&b, policies, sizes, at, func(s SweepCell) string {
			return fmt.Sprintf("%.0f/%.0f/%.0f %.2fs", s.ATCHits, s.ATCMisses, s.TxFaults, s.LoadSeconds)
		})
		b.WriteString(Goals(cells))
	}
	if ahead := Ahead(results); len(ahead) > 0 {
		b.WriteString(AheadTable(c, cells, ahead))
	}
	var failures []string
	for _, r := range results {
		if r.Err != nil {
			failures = append(failures, fmt.Sprintf("(%s) %s ring %d round %d FAILED: %v", partLetter(r.Part), r.Policy, r.RingSize, r.Round, runner.FirstLine(r.Err.Error())))
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
		if math.IsNaN(r.Ratio) || r.Base != "pin" {
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
	b.WriteString("goals (on the medians):\n")
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

func counterTable(b *strings.Builder, policies []string, sizes []int, at map[string]SweepCell, text func(SweepCell) string) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := append([]string{"ring"}, policies...)
	fmt.Fprintf(tw, "%s\t\n", strings.Join(hdr, "\t"))
	for _, n := range sizes {
		row := []string{fmt.Sprint(n)}
		for _, p := range policies {
			s, ok := at[fmt.Sprint(p, n)]
			if !ok || !s.Done() {
				row = append(row, "-")
				continue
			}
			row = append(row, text(s))
		}
		fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
	}
	tw.Flush()
}

// AheadTable formats part (c): per ring size and fault_ahead, the time
// with its spread, the ratio to pin's median, the faults and the slots
// backed ahead, and the goal.
func AheadTable(c Config, sweep, ahead []SweepCell) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n(c) backup with fault_ahead N (a resolved RX fault backs the next N cold slots too): seconds for %d operations", c.Ops)
	if c.Rounds > 1 {
		b.WriteString(", median (fastest-slowest round)")
	}
	b.WriteString("\n")
	pin := map[int]SweepCell{}
	for _, s := range sweep {
		if s.Policy == "pin" {
			pin[s.RingSize] = s
		}
	}
	ratios := AheadRatios(sweep, ahead)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "ring\tN\tbackup s\tpin s\tbackup/pin\trx_faults\trx_prefaulted\trx_backup_pkts\trx_fault_drops\t\n")
	for i, s := range ahead {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t\n", s.RingSize, s.FaultAhead, cellText(s, c.Rounds > 1),
			cellText(pin[s.RingSize], c.Rounds > 1), ratioText(ratios[i]), s.RxFaults, s.Prefaulted, s.BackupPkts, s.FaultDrops)
	}
	tw.Flush()
	b.WriteString(AheadGoals(ratios))
	return b.String()
}

// AheadGoals reports, per fault_ahead, the ring sizes at which backup
// stayed within 1.1x of pin (medians).
func AheadGoals(ratios []SweepRatio) string {
	var ns []int
	met := map[int][]string{}
	missed := map[int][]string{}
	for _, r := range ratios {
		if math.IsNaN(r.Ratio) {
			continue
		}
		if _, ok := met[r.FaultAhead]; !ok {
			if _, ok := missed[r.FaultAhead]; !ok {
				ns = append(ns, r.FaultAhead)
			}
		}
		if r.Ratio <= 1.1 && !r.LowerBound {
			met[r.FaultAhead] = append(met[r.FaultAhead], fmt.Sprint(r.RingSize))
		} else {
			missed[r.FaultAhead] = append(missed[r.FaultAhead], fmt.Sprintf("%d (%.2fx)", r.RingSize, r.Ratio))
		}
	}
	if len(ns) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("goal, backup within 1.1x of pin (medians):\n")
	for _, n := range ns {
		if len(missed[n]) == 0 {
			fmt.Fprintf(&b, "  fault_ahead %d: MET at every ring size (%s)\n", n, strings.Join(met[n], ", "))
		} else {
			fmt.Fprintf(&b, "  fault_ahead %d: MISSED at %s (met at %s)\n", n, strings.Join(missed[n], ", "), orNone(met[n]))
		}
	}
	return b.String()
}

// cellText is a cell's median, with the rounds' range when spread is set.
func cellText(s SweepCell, spread bool) string {
	switch {
	case s.Runs == 0:
		return "-"
	case !s.Done():
		return "FAILED"
	case s.LowerBound:
		return fmt.Sprintf(">=%.0f", s.Seconds)
	}
	if spread && s.Runs-s.Failed > 1 {
		return fmt.Sprintf("%.2f (%.2f-%.2f)", s.Seconds, s.Lo, s.Hi)
	}
	return fmt.Sprintf("%.2f", s.Seconds)
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

func cellHeader() []string {
	return []string{"policy", "ring_size", "fault_ahead", "ops", "seconds", "seconds_min", "seconds_max", "seconds_is_lower_bound",
		"runs", "capped", "failed", "rx_faults", "rx_prefaulted", "rx_backup_pkts", "rx_fault_drops", "tx_faults",
		"atc_hits", "atc_misses", "host_tcp_retrans", "guest_tcp_retrans", "load_seconds"}
}

// cellRow is a cell's medians (and spread) for a CSV.
func cellRow(c Config, s SweepCell) []string {
	secs, lo, hi := "", "", ""
	if s.Done() {
		secs, lo, hi = fmt.Sprintf("%.4g", s.Seconds), fmt.Sprintf("%.4g", s.Lo), fmt.Sprintf("%.4g", s.Hi)
	}
	ahead := ""
	if s.FaultAhead != DefaultAhead {
		ahead = fmt.Sprint(s.FaultAhead)
	}
	return report.Row(s.Policy, s.RingSize, ahead, c.Ops, secs, lo, hi, s.LowerBound, s.Runs, s.Capped, s.Failed,
		s.RxFaults, s.Prefaulted, s.BackupPkts, s.FaultDrops, s.TxFaults, s.ATCHits, s.ATCMisses,
		s.HostRetrans, s.GuestRetrans, s.LoadSeconds)
}

// CounterNames are the ethtool -S counters every run records in the CSV.
var CounterNames = []string{
	"rx_faults", "rx_backup_pkts", "rx_fault_drops", "tx_faults", "tx_fault_errors", "backup_full",
	"page_requests", "page_groups", "invalidations", "atc_hits", "atc_misses",
	"fault_lat_p50_ns", "fault_lat_p99_ns", "backup_lat_p50_ns", "backup_lat_p99_ns", "rx_prefaulted",
}

// RunsHeader names the columns of cold-ring-runs.csv.
func RunsHeader() []string {
	h := []string{"part", "policy", "ring_size", "fault_ahead", "round", "ops", "seconds", "capped", "memaslap_errors",
		"host_tcp_retrans", "guest_tcp_retrans", "host_tcp_timeouts", "load_seconds"}
	h = append(h, CounterNames...)
	return append(h, "host_load", "error")
}

// RunsRows are one row per run.
func RunsRows(results []Result) [][]string {
	var rows [][]string
	for _, r := range results {
		ahead := ""
		if r.FaultAhead != DefaultAhead {
			ahead = fmt.Sprint(r.FaultAhead)
		}
		row := []any{r.Part, r.Policy, r.RingSize, ahead, r.Round, r.Ops, r.Seconds, r.Capped, r.MemaslapErrors,
			r.HostRetrans, r.GuestRetrans, r.HostTimeouts, r.LoadSeconds}
		for _, n := range CounterNames {
			if v, ok := r.Stats[n]; ok {
				row = append(row, v)
			} else {
				row = append(row, "")
			}
		}
		msg := ""
		if r.Err != nil {
			msg = runner.FirstLine(r.Err.Error())
		}
		row = append(row, r.HostLoad, msg)
		rows = append(rows, report.Row(row...))
	}
	return rows
}

// WriteOutputs writes into dir: cold-ring-runs.csv (every run with its
// counters), cold-ring-startup.csv (part a: ops/s per second and policy),
// cold-ring-ops.csv (part b: medians, spreads and ratios),
// cold-ring-ahead.csv and cold-ring-ahead.png (part c, when it ran),
// cold-ring.txt (the tables) and cold-ring.png (parts a and b).
func WriteOutputs(dir string, c Config, results []Result) ([]string, error) {
	f := runner.Files{Dir: dir}
	f.CSV("cold-ring-runs.csv", RunsHeader(), RunsRows(results))
	if st := Startup(results); len(st) > 0 {
		var rows [][]string
		for _, s := range st {
			for i, v := range s.Bins {
				rows = append(rows, report.Row(s.Policy, s.RingSize, i+1, v))
			}
		}
		f.CSV("cold-ring-startup.csv", []string{"policy", "ring_size", "second", "ops_per_s"}, rows)
	}
	if cells := Sweep(results); len(cells) > 0 {
		ratios := map[string]SweepRatio{}
		for _, r := range Ratios(cells) {
			ratios[fmt.Sprint(r.Policy, r.RingSize)] = r
		}
		var rows [][]string
		for _, s := range cells {
			ratio, base, lb := "", "", false
			if r, ok := ratios[fmt.Sprint(s.Policy, s.RingSize)]; ok && !math.IsNaN(r.Ratio) {
				ratio, base, lb = fmt.Sprintf("%.4g", r.Ratio), r.Base, r.LowerBound
			}
			rows = append(rows, append(cellRow(c, s), ratio, base, fmt.Sprint(lb)))
		}
		f.CSV("cold-ring-ops.csv", append(cellHeader(), "ratio", "ratio_to", "ratio_is_lower_bound"), rows)
		if ahead := Ahead(results); len(ahead) > 0 {
			var rows [][]string
			for i, r := range AheadRatios(cells, ahead) {
				ratio := ""
				if !math.IsNaN(r.Ratio) {
					ratio = fmt.Sprintf("%.4g", r.Ratio)
				}
				rows = append(rows, append(cellRow(c, ahead[i]), ratio, fmt.Sprint(r.LowerBound)))
			}
			f.CSV("cold-ring-ahead.csv", append(cellHeader(), "ratio_to_pin", "ratio_is_lower_bound"), rows)
			f.PNG("cold-ring-ahead.png", func(p string) error { return SaveAheadPNG(p, c, cells, ahead) })
		}
	}
	f.Text("cold-ring.txt", Table(c, results))
	f.PNG("cold-ring.png", func(p string) error { return SavePNG(p, c, results) })
	return f.Done()
}
