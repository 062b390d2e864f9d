package faultcost

import (
	"testing"

	"github.com/npfnic/npfnic/internal/report"
)

// Every figure has its SVG and the palette's colours only, and no bar
// reaches the top of its axis.
func TestFigures(t *testing.T) {
	rcc, rcr := rcResult()
	for _, tc := range []struct {
		name   string
		write  func(dir string) ([]string, error)
		charts []report.Chart
		want   int
	}{
		{"ethernet", func(dir string) ([]string, error) { return WriteOutputs(dir, Config{}, sampleResult()) }, Charts(Config{}, sampleResult()), 1},
		{"rc", func(dir string) ([]string, error) { return WriteRCOutputs(dir, rcc, rcr) }, RCCharts(rcc, rcr), 2},
	} {
		files, err := tc.write(t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		n, err := report.CheckFigures(files)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if n != tc.want {
			t.Errorf("%s: %d figures in %v, want %d", tc.name, n, files, tc.want)
		}
		bars := 0
		for _, c := range tc.charts {
			if b, ok := c.(report.BarChart); ok {
				bars++
				if err := report.CheckBars(b); err != nil {
					t.Errorf("%s: %v", tc.name, err)
				}
				for _, cat := range b.Categories {
					if cat == "" {
						t.Errorf("%s: %q has an empty category (room for a legend inside)", tc.name, b.Title)
					}
				}
			}
		}
		if bars != 2 {
			t.Errorf("%s: %d bar charts, want 2", tc.name, bars)
		}
	}
}
