package rnrsweep

import (
	"math"
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/internal/report"
)

// The figure has its SVG and the palette's colours only.
func TestFigure(t *testing.T) {
	c := smallConfig()
	base := Result{MBps: 3000, Relative: 1}
	var points []Result
	for i, res := range c.Resolutions {
		for _, rec := range c.Recoveries {
			for _, rate := range c.FaultRates {
				mbps := 3000 * math.Pow(rate, 0.5) / float64(i+1)
				if rec == ibrc.FaultDrop {
					mbps /= 20
				}
				points = append(points, Result{FaultRate: rate, Resolution: res, Recovery: rec, MBps: mbps, Relative: mbps / base.MBps})
			}
		}
	}
	_, png, err := WriteOutputs(t.TempDir(), c, base, points)
	if err != nil {
		t.Fatal(err)
	}
	if err := report.CheckFigure(png); err != nil {
		t.Error(err)
	}
}
