package faultcost

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
)

func TestPercentile(t *testing.T) {
	var xs []time.Duration
	for i := 1; i <= 100; i++ {
		xs = append(xs, time.Duration(i))
	}
	tests := []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {90, 90}, {99, 99}, {100, 100}, {0, 1}, {0.5, 1}}
	for _, tc := range tests {
		if got := Percentile(xs, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty")
	}
	d := NewDist([]time.Duration{30, 10, 20})
	if d.N != 3 || d.P50 != 20 || d.Min != 10 || d.Max != 30 || d.Mean != 20 || d.P99 != 30 {
		t.Errorf("%+v", d)
	}
}

// rec builds a record with stamps at the given offsets (0: missing).
func rec(kind uint16, outcome pri.Outcome, det, q, irq, resp, done int64) pri.Record {
	return pri.Record{Stamps: [pri.NumStamps]int64{det, q, irq, resp, done}, Pages: 1, Kind: kind, Outcome: outcome}
}

func TestBreakdowns(t *testing.T) {
	recs := []pri.Record{
		rec(hw.FaultKindRxBuf, pri.OutcomeSuccess, 1000, 1010, 1020, 1220, 1230),
		rec(hw.FaultKindRxBuf, pri.OutcomeSuccess, 2000, 2010, 2030, 2430, 2440),
		rec(hw.FaultKindTxBuf, pri.OutcomeInvalid, 3000, 3005, 3010, 3110, 0),
		// A polling driver answered before the interrupt stamp.
		rec(hw.FaultKindTxBuf, pri.OutcomeAbandoned, 4000, 4005, 4100, 4050, 4060),
	}
	bds := Breakdowns(recs)
	if len(bds) != 3 || bds[0].Kind != "RX buffer" || bds[1].Kind != "TX buffer" || bds[2].Kind != "all" {
		t.Fatalf("kinds: %+v", bds)
	}
	rx := bds[0]
	if rx.Faults != 2 || rx.Success != 2 {
		t.Errorf("rx: %+v", rx)
	}
	if got := rx.Rows[RowRoundTrip]; got.N != 2 || got.Min != 220 || got.Max != 430 {
		t.Errorf("rx round trip %+v", got)
	}
	if got := rx.Rows[RowResolve]; got.Min != 200 || got.Max != 400 {
		t.Errorf("rx resolve %+v", got)
	}
	tx := bds[1]
	if tx.Invalid != 1 || tx.NoResponse != 1 {
		t.Errorf("tx outcomes %+v", tx)
	}
	if got := tx.Rows[RowTotal]; got.N != 1 {
		t.Errorf("tx total counts the record without done: %+v", got)
	}
	if got := tx.Rows[RowResolve]; got.N != 2 || got.Min != 0 {
		t.Errorf("negative resolve counts as zero: %+v", got)
	}
	if n := len(RoundTrips(recs, hw.FaultKindRxBuf)); n != 2 {
		t.Errorf("RX round trips %d", n)
	}
	if n := len(RoundTrips(recs, 0)); n != 4 {
		t.Errorf("all round trips %d", n)
	}
}

// sampleResult is three rounds of RX and TX faults with their floors: the
// device's share is 9 µs, RX round trips 250-280 µs, the floor 150-175 µs.
func sampleResult() *Result {
	r := &Result{Params: "rx_policy=backup rx_ring_size=256", Cycles: 3,
		Driver: map[string]uint64{"rx_faults": 700, "fault_lat_p50_ns": 250000, "cools": 3}}
	r.Rounds = make([]Round, 3)
	for i := int64(0); i < 300; i++ {
		base := 1_000_000 * (i + 1)
		rd := &r.Rounds[i/100]
		rx := rec(hw.FaultKindRxBuf, pri.OutcomeSuccess, base, base+5000, base+9000, base+250000+i*100, base+260000+i*100)
		rd.Records = append(rd.Records, rx)
		r.Records = append(r.Records, rx)
		if i%10 == 0 {
			tx := rec(hw.FaultKindTxBuf, pri.OutcomeSuccess, base, base+5000, base+9000, base+300000, base+320000)
			rd.Records = append(rd.Records, tx)
			r.Records = append(r.Records, tx)
		}
	}
	for i := 0; i < 500; i++ {
		e := time.Duration(150000 + i*50)
		r.Echo = append(r.Echo, e)
		r.Rounds[min(i/167, 2)].Echo = append(r.Rounds[min(i/167, 2)].Echo, e)
	}
	return r
}

func TestWriteOutputs(t *testing.T) {
	r := sampleResult()
	dir := t.TempDir()
	files, err := WriteOutputs(dir, Config{}, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 6 {
		t.Fatalf("files %v", files)
	}
	txt, _ := os.ReadFile(filepath.Join(dir, "fault-cost.txt"))
	for _, want := range []string{"RX buffer faults: 300 groups", "TX buffer faults: 30", "round trip / floor", "floor", "fault_lat_p50 250 us",
		"resume", "goal p99 <= 10.0 us: MET", "per round, RX buffer fault round trip", "median"} {
		if !strings.Contains(string(txt), want) {
			t.Errorf("table lacks %q:\n%s", want, txt)
		}
	}
	t.Logf("\n%s", txt)
	csv, _ := os.ReadFile(filepath.Join(dir, "fault-cost-records.csv"))
	if n := strings.Count(string(csv), "\n"); n != 331 {
		t.Errorf("records csv has %d lines, want 331", n)
	}
	rounds, _ := os.ReadFile(filepath.Join(dir, "fault-cost-rounds.csv"))
	if n := strings.Count(string(rounds), "\n"); n != 4 {
		t.Errorf("rounds csv has %d lines, want 4:\n%s", n, rounds)
	}
	// Under drop, RX faults have no resume or total: the table leaves
	// them out; the device's share over its goal is a miss.
	for i := range r.Records {
		r.Records[i].Stamps[pri.StampInterrupt] += 20000
	}
	txt2 := Table(Config{Policy: "drop"}, r)
	for _, bad := range []string{"response -> done", "detected -> done"} {
		if strings.Contains(txt2, bad) && strings.Count(txt2, bad) > 1 {
			t.Errorf("drop table shows %q for RX:\n%s", bad, txt2)
		}
	}
	if !strings.Contains(txt2, "goal p99 <= 10.0 us: MISSED") {
		t.Errorf("a 29 us device share met the goal:\n%s", txt2)
	}
}

func TestRowApplies(t *testing.T) {
	rx, tx := KindName(hw.FaultKindRxBuf), KindName(hw.FaultKindTxBuf)
	for _, tc := range []struct {
		policy, kind string
		row          int
		want         bool
	}{
		{"drop", rx, RowResume, false}, {"drop", rx, RowTotal, false}, {"drop", "all", RowResume, false},
		{"drop", rx, RowRoundTrip, true}, {"drop", rx, RowDevice, true}, {"drop", tx, RowResume, true},
		{"backup", rx, RowResume, true}, {"backup", "all", RowTotal, true},
	} {
		if got := RowApplies(tc.policy, tc.kind, tc.row); got != tc.want {
			t.Errorf("RowApplies(%s, %s, %s) = %v", tc.policy, tc.kind, RowNames[tc.row][0], got)
		}
	}
}

func TestRoundRatios(t *testing.T) {
	r := sampleResult()
	r.Rounds = append(r.Rounds, Round{Records: r.Rounds[0].Records}) // no floor
	rs := RoundRatios(r.Rounds, hw.FaultKindRxBuf)
	if len(rs) != 4 {
		t.Fatalf("%d rounds", len(rs))
	}
	for _, x := range rs[:3] {
		if want := float64(x.RoundTrip.P50) / float64(x.Floor.P50); x.RoundTrip.N != 100 || x.Ratio != want {
			t.Errorf("round %d: %d faults, ratio %g, want 100 and %g", x.Round, x.RoundTrip.N, x.Ratio, want)
		}
	}
	if !math.IsNaN(rs[3].Ratio) {
		t.Errorf("a round without a floor has ratio %g", rs[3].Ratio)
	}
	med, lo, hi, ok := RatioSummary(rs)
	if !ok || med != rs[1].Ratio || lo != min(rs[0].Ratio, rs[1].Ratio, rs[2].Ratio) || hi != max(rs[0].Ratio, rs[1].Ratio, rs[2].Ratio) {
		t.Errorf("summary %g (%g-%g) %v over %+v", med, lo, hi, ok, rs)
	}
	if _, _, _, ok := RatioSummary(rs[3:]); ok {
		t.Error("a summary without any ratio")
	}
}

func TestTableWithoutFaults(t *testing.T) {
	txt := Table(Config{}, &Result{Echo: []time.Duration{100000, 200000}})
	if !strings.Contains(txt, "no fault records") || !strings.Contains(txt, "floor (DIAG_ECHO") {
		t.Errorf("%s", txt)
	}
}
