package report

import (
	"bytes"
	"encoding/csv"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteCSV(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "t.csv")
	rows := [][]string{Row(0.01, "rnr", 3), Row(float32(1.5), "drop, timeout", 7)}
	if err := WriteCSV(p, []string{"rate", "mode", "n"}, rows); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(recs) != 3 || recs[1][0] != "0.01" || recs[2][1] != "drop, timeout" || recs[2][0] != "1.5" {
		t.Fatalf("%v %q", err, recs)
	}
	if err := WriteCSV(p, []string{"a"}, [][]string{{"1", "2"}}); err == nil {
		t.Fatal("ragged row accepted")
	}
}

func TestSavePNG(t *testing.T) {
	zero := 0.0
	line := LineChart{Title: "throughput vs fault rate", XLabel: "fault rate", YLabel: "MB/s", LogX: true, YMin: &zero,
		Series: []Series{
			{Name: "a", X: []float64{1e-4, 1e-3, 1e-2}, Y: []float64{100, 90, 50}},
			{Name: "b (skips x<=0)", X: []float64{0, 1e-3, 1e-2}, Y: []float64{100, 40, 5}, Dashed: true},
		}}
	bar := BarChart{Title: "bars", YLabel: "µs", Categories: []string{"x", "y", "z"},
		Series: []BarSeries{{Name: "p50", Values: []float64{1, 2, 3}}, {Name: "p99", Values: []float64{2, 4, 9}}}}
	p := filepath.Join(t.TempDir(), "c.png")
	if err := SavePNG(p, 800, 400, line, bar); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 800 || b.Dy() != 800 {
		t.Fatalf("image %v, want 800x800", b)
	}
	bad := LineChart{Series: []Series{{X: []float64{1}, Y: nil}}}
	if err := SavePNG(p, 10, 10, bad); err == nil {
		t.Fatal("mismatched series accepted")
	}
	if err := SavePNG(p, 10, 10, BarChart{Categories: []string{"a"}, Series: []BarSeries{{Values: []float64{1, 2}}}}); err == nil {
		t.Fatal("mismatched bars accepted")
	}
}

// TestSavePNGNothingDrawable: a log-scale panel whose every point is
// off its scale or missing (an experiment whose runs all failed) is
// drawn empty, not a panic in gonum's log ticks.
func TestSavePNGNothingDrawable(t *testing.T) {
	for _, c := range []LineChart{
		{Title: "no series", LogX: true, LogY: true},
		{Title: "failed runs", LogX: true, Series: []Series{{Name: "npf", X: []float64{0}, Y: []float64{5}}}},
		{Title: "zeros", LogY: true, Series: []Series{{Name: "npf", X: []float64{1, 2}, Y: []float64{0, 0}}}},
	} {
		if err := SavePNG(filepath.Join(t.TempDir(), "c.png"), 400, 300, c); err != nil {
			t.Fatalf("%s: %v", c.Title, err)
		}
	}
}
