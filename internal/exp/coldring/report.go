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
	if len(c.FaultAheadZero) > 0 {
		s += fmt.Sprintf("\n\"fa=0\" arms load it with fault_ahead=0, seed 000's driver: a resolved RX fault backs only its own slot; the others with npfnic's default, fault_ahead=%d: the next %d cold slots too",
			DriverDefaultAhead, DriverDefaultAhead)
	}
	if c.Rounds > 1 {
		s += fmt.Sprintf("\nmedians of %d rounds: each round runs every arm at a ring size back to back, the order rotated by one each round", c.Rounds)
		if c.StartupRounds < c.Rounds && !c.SkipStartup {
			s += fmt.Sprintf("; part (a) in the first %d", c.StartupRounds)
		}
	}
	return s
}

// Table formats both parts: (a) per arm, (b) time against ring size with
// the ratios to pin and the goals, and part (c) if it ran.
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
				fmt.Fprintf(tw, "%s\tFAILED\t\t\t\t\t\t\t\t\t\n", s.Arm().Name())
				continue
			}
			tth := "never"
			if s.TimeToHalf > 0 {
				tth = fmt.Sprint(s.TimeToHalf)
			} else if s.TimeToHalf == 0 {
				tth = "-"
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", s.Arm().Name(), s.Ops, s.Mean, tth, s.ZeroSeconds,
				s.RxFaults, s.BackupPkts, s.FaultDrops, s.HostRetrans, s.GuestRetrans)
		}
		tw.Flush()
		b.WriteString("ops/s per second:\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.AlignRight)
		for _, s := range st {
			cells := []string{s.Arm().Name()}
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
		arms, sizes := axes(cells)
		type key struct {
			a Arm
			n int
		}
		at := map[key]SweepCell{}
		for _, s := range cells {
			at[key{s.Arm(), s.RingSize}] = s
		}
		type col struct {
			a    Arm
			base string
		}
		ratios := map[col]map[int]SweepRatio{}
		for _, r := range Ratios(cells) {
			k := col{r.Arm(), r.Base}
			if ratios[k] == nil {
				ratios[k] = map[int]SweepRatio{}
			}
			ratios[k][r.RingSize] = r
		}
		var rcols []col
		base := Baseline(cells)
		baseArm, off := Arm{base, DefaultAhead}, Arm{"off", DefaultAhead}
		for _, a := range arms {
			if a != baseArm && !(a == off && base == "pin") {
				rcols = append(rcols, col{a, base})
			}
		}
		if base == "pin" && slices.Contains(arms, off) {
			rcols = append([]col{{baseArm, "off"}}, rcols...)
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		hdr := []string{"ring"}
		for _, a := range arms {
			hdr = append(hdr, a.Name()+" s")
		}
		for _, rc := range rcols {
			hdr = append(hdr, rc.a.Name()+"/"+rc.base)
		}
		fmt.Fprintf(tw, "%s\t\n", strings.Join(hdr, "\t"))
		for _, n := range sizes {
			row := []string{fmt.Sprint(n)}
			for _, a := range arms {
				row = append(row, cellText(at[key{a, n}], c.Rounds > 1))
			}
			for _, rc := range rcols {
				row = append(row, ratioText(ratios[rc][n]))
			}
			fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
		}
		tw.Flush()
		cell := func(a Arm, n int) (SweepCell, bool) { s, ok := at[key{a, n}]; return s, ok }
		b.WriteString("counters (medians): rx_faults / rx_backup_pkts / rx_fault_drops / TCP retransmits host+guest\n")
		counterTable(&b, arms, sizes, cell, func(s SweepCell) string {
			return fmt.Sprintf("%.0f/%.0f/%.0f/%.0f", s.RxFaults, s.BackupPkts, s.FaultDrops, s.HostRetrans+s.GuestRetrans)
		})
		b.WriteString("translation (medians): atc_hits / atc_misses / tx_faults, and the driver's load in s (before the measured window)\n")
		counterTable(&b, arms, sizes, cell, func(s SweepCell) string {
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
			j := job{part: r.Part, policy: r.Policy, ring: r.RingSize, ahead: r.FaultAhead}
			failures = append(failures, fmt.Sprintf("%s round %d FAILED: %v", j, r.Round, runner.FirstLine(r.Err.Error())))
		}
	}
	if len(failures) > 0 {
		b.WriteString("\n" + strings.Join(failures, "\n") + "\n")
	}
	return b.String()
}

// Goals reports against the experiment's goals (not asserted), for each
// arm of backup and drop: backup within 1.1x of pin at every ring size;
// drop visibly pathological (seed 000's drop, fault_ahead=0, is; npfnic's
// default fault_ahead is meant to cure it).
func Goals(cells []SweepCell) string {
	base := Baseline(cells)
	if base != "pin" {
		return ""
	}
	type tally struct{ yes, no []string }
	var arms []Arm
	by := map[Arm]*tally{}
	for _, r := range Ratios(cells) {
		if math.IsNaN(r.Ratio) || r.Base != "pin" || (r.Policy != "backup" && r.Policy != "drop") {
			continue
		}
		t := by[r.Arm()]
		if t == nil {
			t = &tally{}
			by[r.Arm()] = t
			arms = append(arms, r.Arm())
		}
		yes := r.Ratio <= 1.1
		if r.Policy == "drop" {
			yes = r.LowerBound || r.Ratio >= 2
		}
		if yes {
			t.yes = append(t.yes, fmt.Sprint(r.RingSize))
		} else {
			t.no = append(t.no, fmt.Sprintf("%d (%.2fx)", r.RingSize, r.Ratio))
		}
	}
	if len(arms) == 0 {
		return ""
	}
	// backup's arms first, then drop's, each in run order.
	slices.SortStableFunc(arms, func(a, b Arm) int { return strings.Compare(a.Policy, b.Policy) })
	var b strings.Builder
	b.WriteString("goals (on the medians):\n")
	for _, a := range arms {
		t := by[a]
		if a.Policy == "backup" {
			if len(t.no) == 0 {
				fmt.Fprintf(&b, "  %s within 1.1x of pin: MET at every ring size (%s)\n", a.Name(), strings.Join(t.yes, ", "))
			} else {
				fmt.Fprintf(&b, "  %s within 1.1x of pin: MISSED at %s (met at %s)\n", a.Name(), strings.Join(t.no, ", "), orNone(t.yes))
			}
			continue
		}
		if len(t.no) == 0 {
			fmt.Fprintf(&b, "  %s pathological (>= 2x pin or capped): yes at every ring size (%s)\n", a.Name(), strings.Join(t.yes, ", "))
		} else {
			fmt.Fprintf(&b, "  %s pathological (>= 2x pin or capped): at %s; not at %s\n", a.Name(), orNone(t.yes), strings.Join(t.no, ", "))
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

func counterTable(b *strings.Builder, arms []Arm, sizes []int, at func(Arm, int) (SweepCell, bool), text func(SweepCell) string) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := []string{"ring"}
	for _, a := range arms {
		hdr = append(hdr, a.Name())
	}
	fmt.Fprintf(tw, "%s\t\n", strings.Join(hdr, "\t"))
	for _, n := range sizes {
		row := []string{fmt.Sprint(n)}
		for _, a := range arms {
			s, ok := at(a, n)
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

// axes lists the arms (in first-seen order) and ring sizes (ascending).
func axes(cells []SweepCell) ([]Arm, []int) {
	var ps []Arm
	var ns []int
	seenP, seenN := map[Arm]bool{}, map[int]bool{}
	for _, c := range cells {
		if !seenP[c.Arm()] {
			seenP[c.Arm()] = true
			ps = append(ps, c.Arm())
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
	return report.Row(s.Policy, s.RingSize, aheadText(s.FaultAhead), c.Ops, secs, lo, hi, s.LowerBound, s.Runs, s.Capped, s.Failed,
		s.RxFaults, s.Prefaulted, s.BackupPkts, s.FaultDrops, s.TxFaults, s.ATCHits, s.ATCMisses,
		s.HostRetrans, s.GuestRetrans, s.LoadSeconds)
}

// aheadText is a fault_ahead for a CSV: blank for the driver's default.
func aheadText(n int) string {
	if n == DefaultAhead {
		return ""
	}
	return fmt.Sprint(n)
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
		row := []any{r.Part, r.Policy, r.RingSize, aheadText(r.FaultAhead), r.Round, r.Ops, r.Seconds, r.Capped, r.MemaslapErrors,
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
// counters), cold-ring-startup.csv (part a: ops/s per second and arm),
// cold-ring-ops.csv (part b: medians, spreads and ratios per arm),
// cold-ring-ahead.csv and cold-ring-ahead.png (part c, when it ran),
// cold-ring.txt (the tables) and cold-ring.png (parts a and b).
func WriteOutputs(dir string, c Config, results []Result) ([]string, error) {
	f := runner.Files{Dir: dir}
	f.CSV("cold-ring-runs.csv", RunsHeader(), RunsRows(results))
	if st := Startup(results); len(st) > 0 {
		var rows [][]string
		for _, s := range st {
			for i, v := range s.Bins {
				rows = append(rows, report.Row(s.Policy, aheadText(s.FaultAhead), s.RingSize, i+1, v))
			}
		}
		f.CSV("cold-ring-startup.csv", []string{"policy", "fault_ahead", "ring_size", "second", "ops_per_s"}, rows)
	}
	if cells := Sweep(results); len(cells) > 0 {
		type key struct {
			a Arm
			n int
		}
		ratios := map[key]SweepRatio{}
		for _, r := range Ratios(cells) {
			ratios[key{r.Arm(), r.RingSize}] = r
		}
		var rows [][]string
		for _, s := range cells {
			ratio, base, lb := "", "", false
			if r, ok := ratios[key{s.Arm(), s.RingSize}]; ok && !math.IsNaN(r.Ratio) {
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
