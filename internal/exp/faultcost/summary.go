package faultcost

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// Dist is a latency distribution.
type Dist struct {
	N                             int
	Mean, P50, P90, P99, Max, Min time.Duration
}

// NewDist summarises samples (any order).
func NewDist(xs []time.Duration) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	return Dist{N: len(s), Mean: sum / time.Duration(len(s)), Min: s[0], Max: s[len(s)-1],
		P50: Percentile(s, 50), P90: Percentile(s, 90), P99: Percentile(s, 99)}
}

// Percentile of sorted samples, nearest rank.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}

// Stage rows of the breakdown: pri's stages, the round trip a fault costs
// before the device may retry (detected → response), which is what the
// floor compares with, and the device's own share of it (detected →
// interrupt: everything before the guest runs).
const (
	RowQueue     = pri.StageQueue
	RowInterrupt = pri.StageInterrupt
	RowResolve   = pri.StageResolve
	RowResume    = pri.StageResume
	RowTotal     = pri.StageTotal
	RowRoundTrip = pri.NumStages
	RowDevice    = pri.NumStages + 1
	NumRows      = pri.NumStages + 2
)

// RowNames are the rows' names and what they span.
var RowNames = [NumRows][2]string{
	{"queue", "detected -> queued"},
	{"interrupt", "queued -> interrupt"},
	{"resolve", "interrupt -> response (the guest)"},
	{"resume", "response -> done"},
	{"total", "detected -> done"},
	{"round trip", "detected -> response"},
	{"device", "detected -> interrupt (the device)"},
}

// DeviceP99Goal is the goal for the device's share of a fault at p99.
const DeviceP99Goal = 10 * time.Microsecond

// RowApplies reports whether row measures a cost of a fault of kind (a
// Breakdown's Kind) under policy. Under drop an RX buffer fault is done
// when the next frame finds the slot mapped, which is whenever the sender
// retransmits: not a cost of the fault, so resume and total are left out
// (for "all" too, which mixes them in).
func RowApplies(policy, kind string, row int) bool {
	if policy == "drop" && (kind == KindName(hw.FaultKindRxBuf) || kind == "all") {
		return row != RowResume && row != RowTotal
	}
	return true
}

// Breakdown is the per-stage distribution of one kind of fault.
type Breakdown struct {
	Kind   string // "RX", "TX", "all", ...
	Faults int    // groups
	Pages  int
	// Outcomes: groups that ended after a Success or an Invalid Request
	// response, and groups whose operation finished before any response
	// was read (pri.OutcomeAbandoned: under the backup policy the driver
	// places the frame and writes RX_RESOLVE, which may reach the device
	// before the page response; or a reset or Response Failure).
	Success, Invalid, NoResponse int
	Rows                         [NumRows]Dist
}

// KindName names a hw.FaultKind*.
func KindName(k uint16) string {
	switch k {
	case hw.FaultKindRxBuf:
		return "RX buffer"
	case hw.FaultKindTxBuf:
		return "TX buffer"
	case hw.FaultKindRxDesc:
		return "RX ring"
	case hw.FaultKindTxDesc:
		return "TX ring"
	case hw.FaultKindRCRecv:
		return "RC receive"
	case hw.FaultKindRCSend:
		return "RC send"
	}
	return "kind " + strconv.Itoa(int(k))
}

// RoundTrip is a record's detected -> response interval.
func RoundTrip(r pri.Record) (time.Duration, bool) {
	return span(r, pri.StampDetected, pri.StampResponse)
}

// span is the interval between two of a record's stamps (false if one is
// missing; 0 if they are out of order).
func span(r pri.Record, from, to int) (time.Duration, bool) {
	a, b := r.Stamps[from], r.Stamps[to]
	if a == 0 || b == 0 {
		return 0, false
	}
	return time.Duration(max(b-a, 0)), true
}

// Breakdowns splits records by fault kind (in kind order) and adds "all"
// when there is more than one kind.
func Breakdowns(recs []pri.Record) []Breakdown {
	byKind := map[uint16][]pri.Record{}
	var kinds []uint16
	for _, r := range recs {
		if _, ok := byKind[r.Kind]; !ok {
			kinds = append(kinds, r.Kind)
		}
		byKind[r.Kind] = append(byKind[r.Kind], r)
	}
	slices.Sort(kinds)
	var out []Breakdown
	for _, k := range kinds {
		out = append(out, breakdown(KindName(k), byKind[k]))
	}
	if len(kinds) > 1 {
		out = append(out, breakdown("all", recs))
	}
	return out
}

func breakdown(kind string, recs []pri.Record) Breakdown {
	b := Breakdown{Kind: kind, Faults: len(recs)}
	var rows [NumRows][]time.Duration
	for _, r := range recs {
		b.Pages += r.Pages
		switch r.Outcome {
		case pri.OutcomeSuccess:
			b.Success++
		case pri.OutcomeInvalid:
			b.Invalid++
		default:
			b.NoResponse++
		}
		for s := 0; s < pri.NumStages; s++ {
			if d, ok := r.Interval(s); ok {
				rows[s] = append(rows[s], d)
			}
		}
		if d, ok := RoundTrip(r); ok {
			rows[RowRoundTrip] = append(rows[RowRoundTrip], d)
		}
		if d, ok := span(r, pri.StampDetected, pri.StampInterrupt); ok {
			rows[RowDevice] = append(rows[RowDevice], d)
		}
	}
	for i := range rows {
		b.Rows[i] = NewDist(rows[i])
	}
	return b
}

// RoundTrips are the detected -> response intervals of recs of one kind
// (0: every kind).
func RoundTrips(recs []pri.Record, kind uint16) []time.Duration {
	var out []time.Duration
	for _, r := range recs {
		if kind != 0 && r.Kind != kind {
			continue
		}
		if d, ok := RoundTrip(r); ok {
			out = append(out, d)
		}
	}
	return out
}

// RoundRatio is one round's fault round trip against its own floor.
type RoundRatio struct {
	Round     int // from 1
	RoundTrip Dist
	Floor     Dist
	// Ratio is RoundTrip.P50 / Floor.P50 (NaN when either is missing).
	Ratio float64
}

// RoundRatios takes every round's p50 round trip of the faults of kind (0:
// every kind) over the p50 of the same round's floor.
func RoundRatios(rounds []Round, kind uint16) []RoundRatio {
	out := make([]RoundRatio, 0, len(rounds))
	for i, r := range rounds {
		rr := RoundRatio{Round: i + 1, RoundTrip: NewDist(RoundTrips(r.Records, kind)), Floor: NewDist(r.Echo), Ratio: math.NaN()}
		if rr.RoundTrip.N > 0 && rr.Floor.N > 0 && rr.Floor.P50 > 0 {
			rr.Ratio = float64(rr.RoundTrip.P50) / float64(rr.Floor.P50)
		}
		out = append(out, rr)
	}
	return out
}

// RatioSummary is the median and the range of the rounds' ratios; ok is
// false when no round has one.
func RatioSummary(rs []RoundRatio) (median, lo, hi float64, ok bool) {
	var xs []float64
	for _, r := range rs {
		if !math.IsNaN(r.Ratio) {
			xs = append(xs, r.Ratio)
		}
	}
	if len(xs) == 0 {
		return math.NaN(), math.NaN(), math.NaN(), false
	}
	lo, hi = report.Spread(xs)
	return report.Median(xs), lo, hi, true
}
