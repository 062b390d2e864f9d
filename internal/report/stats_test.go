package report

import (
	"math"
	"testing"
)

func TestMedianSpread(t *testing.T) {
	for _, tc := range []struct {
		xs             []float64
		median, lo, hi float64
	}{
		{nil, 0, math.NaN(), math.NaN()},
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 3, 1, 5},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		in := append([]float64(nil), tc.xs...)
		if m := Median(tc.xs); m != tc.median {
			t.Errorf("Median(%v) = %g, want %g", tc.xs, m, tc.median)
		}
		lo, hi := Spread(tc.xs)
		same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
		if !same(lo, tc.lo) || !same(hi, tc.hi) {
			t.Errorf("Spread(%v) = %g, %g; want %g, %g", tc.xs, lo, hi, tc.lo, tc.hi)
		}
		for i := range in {
			if in[i] != tc.xs[i] {
				t.Errorf("Median reordered its input: %v", tc.xs)
			}
		}
	}
}
