package rnpfrate

import (
	"fmt"
	"testing"

	"github.com/npfnic/npfnic/internal/report"
)

// Every figure has its SVG and the palette's colours only.
func TestFigures(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		write func(dir string) ([]string, error)
		want  int
	}{
		{"ethernet", func(dir string) ([]string, error) { return WriteOutputs(dir, c, sweep()) }, 1},
		{"rc", func(dir string) ([]string, error) { return WriteRCOutputs(dir, rcConfig(t), rcSweep(), fakeSim()) }, 2},
		{"rc without the simulation", func(dir string) ([]string, error) { return WriteRCOutputs(dir, rcConfig(t), rcSweep(), nil) }, 1},
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
	}
}

// A policy's two curves (minor and major faults) differ in marker and
// dashes; drop's differ from backup's (and RNR NAK's) in colour and
// marker.
func TestCurveStyles(t *testing.T) {
	style := func(s report.Style) string { return fmt.Sprintf("%v %T", s.Color, s.Shape) }
	for _, tc := range []struct{ a, b report.Style }{
		{curveStyle("drop", false), curveStyle("drop", true)},
		{curveStyle("backup", false), curveStyle("backup", true)},
		{curveStyle("rnr", false), curveStyle("rnr", true)},
		{curveStyle("drop", false), curveStyle("backup", false)},
		{curveStyle("drop", true), curveStyle("backup", true)},
		{curveStyle("drop", false), curveStyle("rnr", false)},
	} {
		if style(tc.a) == style(tc.b) {
			t.Errorf("two curves drawn alike: %s", style(tc.a))
		}
	}
	for _, p := range []string{"drop", "backup", "rnr"} {
		if fmt.Sprint(curveStyle(p, false).Dashes) == fmt.Sprint(curveStyle(p, true).Dashes) {
			t.Errorf("%s: minor and major faults dashed alike", p)
		}
	}
}
