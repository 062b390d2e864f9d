package faultcost

import (
	"slices"
	"strconv"
	"time"

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

// Stage rows of the breakdown: pri's stages plus the round trip a fault
// costs before the device may retry (detected → response), which is what
// the floor compares with.
const (
	RowQueue     = pri.StageQueue
	RowInterrupt = pri.StageInterrupt
	RowResolve   = pri.StageResolve
	RowResume    = pri.StageResume
	RowTotal     = pri.StageTotal
	RowRoundTrip = pri.NumStages
	NumRows      = pri.NumStages + 1
)

// RowNames are the rows' names and what they span.
var RowNames = [NumRows][2]string{
	{"queue", "detected -> queued"},
	{"interrupt", "queued -> interrupt"},
	{"resolve", "interrupt -> response"},
	{"resume", "response -> done"},
	{"total", "detected -> done"},
	{"round trip", "detected -> response"},
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
	d, r2 := r.Stamps[pri.StampDetected], r.Stamps[pri.StampResponse]
	if d == 0 || r2 == 0 {
		return 0, false
	}
	if r2 < d {
		return 0, true
	}
	return time.Duration(r2 - d), true
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
