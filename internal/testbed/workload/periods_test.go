package workload

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func TestParsePeriodsRealOutput(t *testing.T) {
	f, err := os.Open("testdata/memaslap-S1.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParsePeriods(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Period{
		{Second: 1, Ops: 100197, OpsPerSec: 100197},
		{Second: 2, Ops: 44548, OpsPerSec: 44548},
		{Second: 3, Ops: 0, OpsPerSec: 0},
		{Second: 4, Ops: 51726, OpsPerSec: 51726},
		{Second: 5, Ops: 108781, OpsPerSec: 108781},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("periods:\n got %+v\nwant %+v", got, want)
	}
}

func TestPeriodParser(t *testing.T) {
	const block = "\x1b[1;1H\x1b[2J\nGet Statistics\n" +
		"Type     Time(s)  Ops          TPS(ops/s)   Net(M/s)   Get_miss   Min(us)  Max(us)    Avg(us)    Std_dev    Geo_dist\n" +
		"Period   1        90           90           1.0        0          12       4091       31         34.82      29.26\n" +
		"Global   %s        90           90           1.0        0          12       4091       31         34.82      29.26\n\n" +
		"Set Statistics\n" +
		"Type     Time(s)  Ops          TPS(ops/s)   Net(M/s)   Get_miss   Min(us)  Max(us)    Avg(us)    Std_dev    Geo_dist\n" +
		"Period   1        10           10           1.0        0          12       4091       31         34.82      29.26\n" +
		"Global   %s        10           10           1.0        0          12       4091       31         34.82      29.26\n\n" +
		"Total Statistics\n" +
		"Type     Time(s)  Ops          TPS(ops/s)   Net(M/s)   Get_miss   Min(us)  Max(us)    Avg(us)    Std_dev    Geo_dist\n" +
		"Period   1        %s          %s          1.0        0          12       4091       31         34.82      29.26\n" +
		"Global   %s        100          100          1.0        0          12       4091       31         34.82      29.26\n"
	fill := func(sec, ops string) string {
		return fmt.Sprintf(block, sec, sec, ops, ops, sec)
	}
	tests := []struct {
		name string
		out  string
		want []Period
	}{
		{"one period", fill("1", "100"), []Period{{1, 100, 100, 0}}},
		{"two periods, a zero one", fill("1", "100") + fill("2", "0"), []Period{{1, 100, 100, 0}, {2, 0, 0, 0}}},
		{"final summary is no period", fill("1", "7") +
			"\nTotal Statistics (100 events)\n   Min:        12\nPeriod 1 5 5\nGlobal 9 9 9\n" +
			"Run time: 1.0s Ops: 100 TPS: 100 Net_rate: 0.1M/s\n", []Period{{1, 7, 7, 0}}},
		{"truncated block", fill("1", "100") + "Total Statistics\nPeriod   1  55  55  1.0\n", []Period{{1, 100, 100, 0}}},
		{"garbage", "Period x y z\nGlobal 1 2 3\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePeriods(strings.NewReader(tc.out))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestBins(t *testing.T) {
	tests := []struct {
		name string
		in   []Period
		n    int
		want []float64
	}{
		{"in order", []Period{{1, 5, 5, 0}, {2, 6, 6, 0}, {3, 7, 7, 0}}, 3, []float64{5, 6, 7}},
		{"missing second is zero", []Period{{1, 5, 5, 0}, {3, 7, 7, 0}}, 4, []float64{5, 0, 7, 0}},
		{"periods on the same second add up", []Period{{1, 5, 5, 0}, {2, 1, 1, 0}, {2, 2, 2, 0}}, 2, []float64{5, 3}},
		{"beyond n ignored", []Period{{1, 5, 5, 0}, {9, 1, 1, 0}, {0, 3, 3, 0}}, 2, []float64{5, 0}},
		// memaslap's clock started 30 s after the launch (connections
		// held up by drops): its periods land at wall seconds 31, 32, 33.
		{"late clock start", []Period{{1, 5, 5, sec(31.1)}, {2, 6, 6, sec(32.05)}, {3, 7, 7, sec(33.4)}}, 33, append(make([]float64, 30), 5, 6, 7)},
		// A late print does not shift the others: the offset is the
		// smallest delay.
		{"one late print", []Period{{1, 5, 5, sec(1.1)}, {2, 6, 6, sec(2.9)}, {3, 7, 7, sec(3.1)}}, 3, []float64{5, 6, 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Bins(tc.in, tc.n); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
