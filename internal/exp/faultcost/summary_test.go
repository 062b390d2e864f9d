package faultcost

import (
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

func TestWriteOutputs(t *testing.T) {
	r := &Result{Params: "rx_policy=backup rx_ring_size=256", Cycles: 3,
		Driver: map[string]uint64{"rx_faults": 700, "fault_lat_p50_ns": 250000, "cools": 3}}
	for i := int64(0); i < 300; i++ {
		base := 1_000_000 * (i + 1)
		r.Records = append(r.Records, rec(hw.FaultKindRxBuf, pri.OutcomeSuccess, base, base+5000, base+9000, base+250000+i*100, base+260000+i*100))
		if i%10 == 0 {
			r.Records = append(r.Records, rec(hw.FaultKindTxBuf, pri.OutcomeSuccess, base, base+5000, base+9000, base+300000, base+320000))
		}
	}
	for i := 0; i < 500; i++ {
		r.Echo = append(r.Echo, time.Duration(150000+i*50))
	}
	dir := t.TempDir()
	files, err := WriteOutputs(dir, Config{}, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 5 {
		t.Fatalf("files %v", files)
	}
	txt, _ := os.ReadFile(filepath.Join(dir, "fault-cost.txt"))
	for _, want := range []string{"RX buffer faults: 300 groups", "TX buffer faults: 30", "round trip / floor", "floor", "fault_lat_p50 250 us"} {
		if !strings.Contains(string(txt), want) {
			t.Errorf("table lacks %q:\n%s", want, txt)
		}
	}
	t.Logf("\n%s", txt)
	csv, _ := os.ReadFile(filepath.Join(dir, "fault-cost-records.csv"))
	if n := strings.Count(string(csv), "\n"); n != 331 {
		t.Errorf("records csv has %d lines, want 331", n)
	}
}

func TestTableWithoutFaults(t *testing.T) {
	txt := Table(Config{}, &Result{Echo: []time.Duration{100000, 200000}})
	if !strings.Contains(txt, "no fault records") || !strings.Contains(txt, "floor (DIAG_ECHO") {
		t.Errorf("%s", txt)
	}
}
