package coldring

import (
	"math"
	"slices"

	"github.com/npfnic/npfnic/internal/report"
)

// SweepCell is part (b) (or (c)) for one arm and ring size over its
// rounds.
type SweepCell struct {
	Policy   string
	RingSize int
	// FaultAhead is the driver's fault_ahead (part c, and the fault_ahead=0
	// arms of part b), or DefaultAhead.
	FaultAhead int
	// Seconds is the median time for the operations; a capped run counts
	// as the cap (a lower bound), and LowerBound says the median is one.
	// Lo and Hi are the fastest and slowest round (the same convention).
	Seconds, Lo, Hi float64
	LowerBound      bool
	// Runs, Capped and Failed count the rounds.
	Runs, Capped, Failed int
	// Medians of the counters over the rounds that ran.
	RxFaults, BackupPkts, FaultDrops float64
	Prefaulted, TxFaults             float64
	ATCHits, ATCMisses               float64
	HostRetrans, GuestRetrans        float64
	// LoadSeconds is the median time the driver's load took.
	LoadSeconds float64
}

// Arm is the cell's arm.
func (s SweepCell) Arm() Arm { return Arm{s.Policy, s.FaultAhead} }

// Done reports whether the cell has a measurement.
func (s SweepCell) Done() bool { return s.Runs > s.Failed }

// cellOf summarizes the rounds of one cell.
func cellOf(policy string, ring, ahead int, rs []Result) SweepCell {
	c := SweepCell{Policy: policy, RingSize: ring, FaultAhead: ahead, Runs: len(rs), Lo: math.NaN(), Hi: math.NaN()}
	type val struct {
		v      float64
		capped bool
	}
	var vals []val
	var faults, backup, drops, pre, txf, hits, misses, hr, gr, load []float64
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
		pre = append(pre, float64(r.Stats["rx_prefaulted"]))
		txf = append(txf, float64(r.Stats["tx_faults"]))
		hits = append(hits, float64(r.Stats["atc_hits"]))
		misses = append(misses, float64(r.Stats["atc_misses"]))
		hr = append(hr, float64(r.HostRetrans))
		gr = append(gr, float64(r.GuestRetrans))
		load = append(load, r.LoadSeconds)
	}
	if len(vals) == 0 {
		return c
	}
	slices.SortStableFunc(vals, func(a, b val) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	// The upper median: a capped value (a lower bound) sorts at the cap,
	// so the median is a lower bound when it lands on one.
	m := vals[len(vals)/2]
	c.Seconds, c.LowerBound = m.v, m.capped
	if len(vals)%2 == 0 {
		lo := vals[len(vals)/2-1]
		c.Seconds = (lo.v + m.v) / 2
		c.LowerBound = lo.capped || m.capped
	}
	c.Lo, c.Hi = vals[0].v, vals[len(vals)-1].v
	c.RxFaults, c.BackupPkts, c.FaultDrops = report.Median(faults), report.Median(backup), report.Median(drops)
	c.Prefaulted, c.TxFaults = report.Median(pre), report.Median(txf)
	c.ATCHits, c.ATCMisses = report.Median(hits), report.Median(misses)
	c.HostRetrans, c.GuestRetrans = report.Median(hr), report.Median(gr)
	c.LoadSeconds = report.Median(load)
	return c
}

// cells summarizes the runs of one part: a cell per ring size and arm
// (policy and fault_ahead), ring sizes ascending, then in the order the
// rest first appears.
func cells(results []Result, part string) []SweepCell {
	type key struct {
		p     string
		n     int
		ahead int
	}
	order, by := report.Group(ofPart(results, part), func(r Result) key {
		return key{r.Policy, r.RingSize, r.FaultAhead}
	})
	slices.SortStableFunc(order, func(a, b key) int { return a.n - b.n })
	var out []SweepCell
	for _, k := range order {
		out = append(out, cellOf(k.p, k.n, k.ahead, by[k]))
	}
	return out
}

// ofPart are the results of one part.
func ofPart(results []Result, part string) []Result {
	var out []Result
	for _, r := range results {
		if r.Part == part {
			out = append(out, r)
		}
	}
	return out
}

// Sweep summarizes part (b): one cell per ring size and arm.
func Sweep(results []Result) []SweepCell { return cells(results, PartSweep) }

// Ahead summarizes part (c): one cell per ring size and fault_ahead,
// fault_ahead ascending within a size.
func Ahead(results []Result) []SweepCell {
	out := cells(results, PartAhead)
	slices.SortStableFunc(out, func(a, b SweepCell) int {
		if a.RingSize != b.RingSize {
			return a.RingSize - b.RingSize
		}
		return a.FaultAhead - b.FaultAhead
	})
	return out
}

// SweepRatio is one arm's time relative to a baseline at one ring size.
type SweepRatio struct {
	Policy   string
	RingSize int
	// FaultAhead is the cell's fault_ahead (part c and the fault_ahead=0
	// arms), or DefaultAhead.
	FaultAhead int
	// Base is the policy divided by: pin, or off when pin was not run
	// (and for pin itself).
	Base string
	// Ratio is Seconds(policy) / Seconds(base), medians over the rounds;
	// NaN when either is missing.
	Ratio float64
	// LowerBound: the policy's time is a lower bound (capped), so is
	// the ratio.
	LowerBound bool
}

// Arm is the arm divided.
func (r SweepRatio) Arm() Arm { return Arm{r.Policy, r.FaultAhead} }

func ratio(c, b SweepCell, ok bool, base string) SweepRatio {
	r := SweepRatio{Policy: c.Policy, RingSize: c.RingSize, FaultAhead: c.FaultAhead, Base: base, Ratio: math.NaN()}
	if ok && b.Done() && c.Done() && b.Seconds > 0 && !b.LowerBound {
		r.Ratio = c.Seconds / b.Seconds
		r.LowerBound = c.LowerBound
	}
	return r
}

// Ratios divides every arm's time by the baseline's at the same ring size
// (Baseline: pin, or off when pin was not run; with the driver's default
// fault_ahead), except off's when the baseline is pin: pin's is divided
// by off's instead.
func Ratios(cs []SweepCell) []SweepRatio {
	base := Baseline(cs)
	at := map[Arm]map[int]SweepCell{}
	for _, c := range cs {
		if at[c.Arm()] == nil {
			at[c.Arm()] = map[int]SweepCell{}
		}
		at[c.Arm()][c.RingSize] = c
	}
	baseArm, off := Arm{base, DefaultAhead}, Arm{"off", DefaultAhead}
	var out []SweepRatio
	for _, c := range cs {
		switch {
		case c.Arm() == baseArm && base == "pin":
			if _, ran := at[off]; ran {
				b, ok := at[off][c.RingSize]
				out = append(out, ratio(c, b, ok, "off"))
			}
		case c.Arm() != baseArm && !(c.Arm() == off && base == "pin"):
			b, ok := at[baseArm][c.RingSize]
			out = append(out, ratio(c, b, ok, base))
		}
	}
	return out
}

// AheadRatios divides every part (c) cell's time by pin's (part b) at the
// same ring size.
func AheadRatios(sweep, ahead []SweepCell) []SweepRatio {
	pin := map[int]SweepCell{}
	for _, c := range sweep {
		if c.Policy == "pin" {
			pin[c.RingSize] = c
		}
	}
	var out []SweepRatio
	for _, c := range ahead {
		b, ok := pin[c.RingSize]
		out = append(out, ratio(c, b, ok, "pin"))
	}
	return out
}

// Baseline is the policy ratios are taken against (its arm with the
// driver's default fault_ahead).
func Baseline(cells []SweepCell) string {
	for _, c := range cells {
		if c.Policy == "pin" {
			return "pin"
		}
	}
	return "off"
}

// StartupSummary is part (a) for one arm: bins are the per-second
// medians over rounds.
type StartupSummary struct {
	Policy string
	// FaultAhead is the arm's fault_ahead, or DefaultAhead.
	FaultAhead int
	RingSize   int
	Rounds     int
	Failed     int
	Bins       []float64
	// Lo and Hi are each second's smallest and largest value over the
	// rounds (the same second of every round).
	Lo, Hi []float64
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

// Arm is the summary's arm.
func (s StartupSummary) Arm() Arm { return Arm{s.Policy, s.FaultAhead} }

// Startup summarizes part (a), one entry per arm in run order.
func Startup(results []Result) []StartupSummary {
	order, by := report.Group(ofPart(results, PartStartup), Result.Arm)
	var out []StartupSummary
	for _, a := range order {
		rs := by[a]
		s := StartupSummary{Policy: a.Policy, FaultAhead: a.FaultAhead, RingSize: rs[0].RingSize, Rounds: len(rs)}
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
			s.Bins, s.Lo, s.Hi = make([]float64, n), make([]float64, n), make([]float64, n)
			for i := range s.Bins {
				var xs []float64
				for _, b := range bins {
					if i < len(b) {
						xs = append(xs, b[i])
					}
				}
				s.Bins[i] = report.Median(xs)
				s.Lo[i], s.Hi[i] = report.Spread(xs)
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
		// pin and off have no fault_ahead arms (Validate).
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
