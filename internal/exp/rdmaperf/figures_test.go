package rdmaperf

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
)

// The figure has its SVG and the palette's colours only; every bar has
// its rounds' min-max, and none reaches the top of its axis.
func TestFigure(t *testing.T) {
	c := Config{Env: runner.Env{LogDir: t.TempDir()}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var results []Result
	for round := 1; round <= 3; round++ {
		for _, tt := range Tests {
			v := 100 + 10*float64(round)
			results = append(results, Result{Pair: c.Pairs[0], Test: tt.Name, Round: round, Value: v / 10},
				Result{Pair: c.Pairs[1], Test: tt.Name, Round: round, Err: errors.New("no ibverbs device")},
				Result{Pair: c.Pairs[2], Test: tt.Name, Round: round, Value: v})
		}
	}
	files, err := WriteOutputs(c.LogDir, c, results)
	if err != nil {
		t.Fatal(err)
	}
	n, err := report.CheckFigures(files)
	if err != nil {
		t.Error(err)
	}
	if n != 1 {
		t.Errorf("%d figures in %v", n, files)
	}
	chs := charts(c, Summarize(c, results))
	// RC bandwidth, UD bandwidth and latency, every test in one of them.
	if len(chs) != 3 {
		t.Fatalf("%d panels", len(chs))
	}
	n = 0
	for i, ch := range chs {
		b := ch.(report.BarChart)
		n += len(b.Categories)
		for _, cat := range b.Categories {
			if ud := strings.HasPrefix(cat, "UD ") && !strings.Contains(cat, "_lat"); ud != (i == 1) {
				t.Errorf("%q in panel %d, %q", cat, i, b.Title)
			}
		}
	}
	if n != len(Tests) {
		t.Errorf("%d bars per pair in the panels, %d tests", n, len(Tests))
	}
	for _, ch := range chs {
		b := ch.(report.BarChart)
		if err := report.CheckBars(b); err != nil {
			t.Error(err)
		}
		for _, s := range b.Series {
			for i, v := range s.Values {
				lo, hi := s.Lo[i], s.Hi[i]
				if v == 0 { // the failed pair
					if !math.IsNaN(lo) || !math.IsNaN(hi) {
						t.Errorf("%s %s: a range %v..%v without a value", b.Title, s.Name, lo, hi)
					}
					continue
				}
				if !(lo < v && v < hi) {
					t.Errorf("%s %s: %v not inside its range %v..%v", b.Title, s.Name, v, lo, hi)
				}
			}
		}
	}
}
