package coldring

import (
	"math"
	"slices"

	"github.com/npfnic/npfnic/internal/report"
)

// SweepCell is part (b) for one policy and ring size over its rounds.
type SweepCell struct {
	Policy   string
	RingSize int
	// Seconds is the median time for the operations; a capped run counts
	// as the cap (a lower bound), and LowerBound says the median is one.
	Seconds    float64
	LowerBound bool
	// Runs, Capped and Failed count the rounds.
	Runs, Capped, Failed int
	// Medians of the counters over the rounds that ran.
	RxFaults, BackupPkts, FaultDrops float64
	HostRetrans, GuestRetrans        float64
}

// Done reports whether the cell has a measurement.
func (s SweepCell) Done() bool { return s.Runs > s.Failed }

// Sweep summarizes part (b): one cell per ring size and policy, in the
// order sizes then policies first appear.
func Sweep(results []Result) []SweepCell {
	type key struct {
		p string
		n int
	}
	var order []key
	by := map[key][]Result{}
	for _, r := range results {
		if r.Part != PartSweep {
			continue
		}
		k := key{r.Policy, r.RingSize}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	slices.SortStableFunc(order, func(a, b key) int { return a.n - b.n })
	var out []SweepCell
	for _, k := range order {
		rs := by[k]
		c := SweepCell{Policy: k.p, RingSize: k.n, Runs: len(rs)}
		type val struct {
			v      float64
			capped bool
		}
		var vals []val
		var faults, backup, drops, hr, gr []float64
		for _, r := range rs {
			if r.Err != nil {
				c.Failed++
				continue
			}
			if r.Capped {
				c.Capped++
			}
			vals = append(vals, val{r.Seconds, r.Capped})
			faults = append(faults, float64(r.Stats["rx_faults"]))
			backup = append(backup, float64(r.Stats["rx_backup_pkts"]))
			drops = append(drops, float64(r.Stats["rx_fault_drops"]))
			hr = append(hr, float64(r.HostRetrans))
			gr = append(gr, float64(r.GuestRetrans))
		}
		if len(vals) > 0 {
			slices.SortStableFunc(vals, func(a, b val) int {
				switch {
				case a.v < b.v:
					return -1
				case a.v > b.v:
					return 1
				}
				return 0
			})
			// The upper median: a capped value (a lower bound) sorts at
			// the cap, so the median is a lower bound when it lands on one.
			m := vals[len(vals)/2]
			c.Seconds, c.LowerBound = m.v, m.capped
			if len(vals)%2 == 0 {
				lo := vals[len(vals)/2-1]
				c.Seconds = (lo.v + m.v) / 2
				c.LowerBound = lo.capped || m.capped
			}
			c.RxFaults, c.BackupPkts, c.FaultDrops = report.Median(faults), report.Median(backup), report.Median(drops)
			c.HostRetrans, c.GuestRetrans = report.Median(hr), report.Median(gr)
		}
		out = append(out, c)
	}
	return out
}

// SweepRatio is one policy's time relative to pin at one ring size.
type SweepRatio struct {
	Policy   string
	RingSize int
	// Ratio is Seconds(policy) / Seconds(pin); NaN when either is missing.
	Ratio float64
	// LowerBound: the policy's time is a lower bound (capped), so is
	// the ratio.
	LowerBound bool
}

// Ratios divides every non-pin policy's time by pin's at the same ring
// size (the baseline is "off" when pin was not run).
func Ratios(cells []SweepCell) []SweepRatio {
	base := "pin"
	has := false
	for _, c := range cells {
		has = has || c.Policy == "pin"
	}
	if !has {
		base = "off"
	}
	baseAt := map[int]SweepCell{}
	for _, c := range cells {
		if c.Policy == base {
			baseAt[c.RingSize] = c
		}
	}
	var out []SweepRatio
	for _, c := range cells {
		if c.Policy == base {
			continue
		}
		r := SweepRatio{Policy: c.Policy, RingSize: c.RingSize, Ratio: math.NaN()}
		b, ok := baseAt[c.RingSize]
		if ok && b.Done() && c.Done() && b.Seconds > 0 && !b.LowerBound {
			r.Ratio = c.Seconds / b.Seconds
			r.LowerBound = c.LowerBound
		}
		out = append(out, r)
	}
	return out
}

// Baseline is the policy ratios are taken against.
func Baseline(cells []SweepCell) string {
	for _, c := range cells {
		if c.Policy == "pin" {
			return "pin"
		}
	}
	return "off"
}

// StartupSummary is part (a) for one policy: bins are the per-second
// medians over rounds.
type StartupSummary struct {
	Policy   string
	RingSize int
	Rounds   int
	Failed   int
	Bins     []float64
	// Ops is the median total; Mean its average rate.
	Ops  float64
	Mean float64
	// ZeroSeconds counts bins without any operation.
	ZeroSeconds int
	// TimeToHalf is the first second at which throughput reached half of
	// the baseline's steady state (the median of the baseline's second
	// half); -1 if never, 0 unknown.
	TimeToHalf                       int
	RxFaults, BackupPkts, FaultDrops float64
	HostRetrans, GuestRetrans        float64
}

// Startup summarizes part (a), one entry per policy in run order.
func Startup(results []Result) []StartupSummary {
	var order []string
	by := map[string][]Result{}
	for _, r := range results {
		if r.Part != PartStartup {
			continue
		}
		if _, ok := by[r.Policy]; !ok {
			order = append(order, r.Policy)
		}
		by[r.Policy] = append(by[r.Policy], r)
	}
	var out []StartupSummary
	for _, p := range order {
		rs := by[p]
		s := StartupSummary{Policy: p, RingSize: rs[0].RingSize, Rounds: len(rs)}
		var bins [][]float64
		var ops, faults, backup, drops, hr, gr []float64
		for _, r := range rs {
			if r.Err != nil {
				s.Failed++
				continue
			}
			bins = append(bins, r.Bins)
			ops = append(ops, float64(r.Ops))
			faults = append(faults, float64(r.Stats["rx_faults"]))
			backup = append(backup, float64(r.Stats["rx_backup_pkts"]))
			drops = append(drops, float64(r.Stats["rx_fault_drops"]))
			hr = append(hr, float64(r.HostRetrans))
			gr = append(gr, float64(r.GuestRetrans))
		}
		if len(bins) > 0 {
			n := 0
			for _, b := range bins {
				n = max(n, len(b))
			}
			s.Bins = make([]float64, n)
			for i := range s.Bins {
				var xs []float64
				for _, b := range bins {
					if i < len(b) {
						xs = append(xs, b[i])
					}
				}
				s.Bins[i] = report.Median(xs)
				if s.Bins[i] == 0 {
					s.ZeroSeconds++
				}
			}
			s.Ops = report.Median(ops)
			if n > 0 {
				s.Mean = sum(s.Bins) / float64(n)
			}
			s.RxFaults, s.BackupPkts, s.FaultDrops = report.Median(faults), report.Median(backup), report.Median(drops)
			s.HostRetrans, s.GuestRetrans = report.Median(hr), report.Median(gr)
		}
		out = append(out, s)
	}
	// Time to half of the baseline's steady state.
	base := -1
	for i, s := range out {
		if s.Policy == "pin" || (base < 0 && s.Policy == "off") {
			base = i
		}
	}
	if base >= 0 && len(out[base].Bins) > 0 {
		b := out[base].Bins
		steady := report.Median(b[len(b)/2:])
		for i := range out {
			out[i].TimeToHalf = -1
			for j, v := range out[i].Bins {
				if steady > 0 && v >= steady/2 {
					out[i].TimeToHalf = j + 1
					break
				}
			}
		}
	}
	return out
}

func sum(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t
}
