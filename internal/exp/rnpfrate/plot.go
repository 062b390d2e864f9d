package rnpfrate

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/npfnic/npfnic/internal/testbed"
)

// The figure is Figure 10's shape: throughput against the rNPF rate on a
// logarithmic axis (rate 0 drawn one decade left of the smallest rate),
// absolute on the left axis and relative to pin on the right one, one
// line per policy and fault kind, each point the median with its rounds'
// min-max as an error bar, pin a dashed line across.

var policyColor = map[string]color.Color{
	"pin":    color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	"drop":   color.RGBA{0xd6, 0x27, 0x28, 0xff},
	"backup": color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
}

// zeroX is where rate 0 sits on the logarithmic axis: a decade below the
// smallest rate measured.
func zeroX(cells []Cell) float64 {
	ppms := make([]int, len(cells))
	for i, c := range cells {
		ppms[i] = c.PPM
	}
	return zeroXOf(ppms)
}

// zeroXOf is zeroX of the rates in ppm.
func zeroXOf(ppms []int) float64 {
	min := 1.0
	for _, ppm := range ppms {
		if ppm > 0 {
			min = math.Min(min, float64(ppm)/testbed.PPM)
		}
	}
	return math.Pow(10, math.Floor(math.Log10(min))-1)
}

// rateTicks marks the decades, and rate 0 at zero.
type rateTicks struct{ zero float64 }

func (t rateTicks) Ticks(min, max float64) []plot.Tick {
	ticks := []plot.Tick{{Value: t.zero, Label: "0"}}
	for e := math.Log10(t.zero) + 1; math.Pow(10, e) <= max*1.0001; e++ {
		v := math.Pow(10, e)
		ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf("%g", v)})
	}
	return ticks
}

// withSpread is a line's points with their min-max as y errors.
type withSpread struct {
	plotter.XYs
	plotter.YErrors
}

// SavePlot draws the figure into a PNG.
func SavePlot(path string, c Config, cells []Cell) error {
	c.setDefaults()
	zero := zeroX(cells)
	xOf := func(ppm int) float64 {
		if ppm == 0 {
			return zero
		}
		return float64(ppm) / testbed.PPM
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("TCP stream into npfnic with synthetic rNPFs (TCG guest, median of %d rounds, bars: min-max)", c.Rounds)
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.X.Label.Text = "rNPFs per received packet"
	p.Y.Label.Text = "throughput (Mbit/s)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = rateTicks{zero}
	p.Legend.Top, p.Legend.Left = false, true
	p.Legend.YOffs = vg.Points(30)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Add(plotter.NewGrid())

	var pin float64
	maxX := zero
	for _, s := range cells {
		maxX = math.Max(maxX, xOf(s.PPM))
		if s.Policy == "pin" && s.Done() {
			pin = s.Mbps
		}
	}
	if pin > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: zero, Y: pin}, {X: maxX, Y: pin}})
		if err != nil {
			return err
		}
		l.Color, l.Width = policyColor["pin"], vg.Points(1.6)
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(l)
		p.Legend.Add("pin (the optimum: no rNPF possible)", l)
	}
	drawn := 0
	for _, policy := range []string{"drop", "backup"} {
		for _, fault := range Faults {
			var line withSpread
			for _, s := range cells {
				if s.Policy != policy || !s.Done() || s.PPM != 0 && s.Fault != fault {
					continue
				}
				line.XYs = append(line.XYs, plotter.XY{X: xOf(s.PPM), Y: s.Mbps})
				line.YErrors = append(line.YErrors, struct{ Low, High float64 }{s.Mbps - s.Lo, s.Hi - s.Mbps})
			}
			// A curve of rate 0 alone is not one of this fault kind.
			if len(line.XYs) < 2 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(line.XYs)
			if err != nil {
				return err
			}
			col := policyColor[policy]
			l.Color, pts.Color = col, col
			l.Width = vg.Points(1.6)
			pts.Radius = vg.Points(3)
			pts.Shape = draw.CircleGlyph{}
			if fault == "major" {
				l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
				pts.Shape = draw.SquareGlyph{}
			}
			bars, err := plotter.NewYErrorBars(line)
			if err != nil {
				return err
			}
			bars.Color = col
			p.Add(l, pts, bars)
			name := map[string]string{"drop": "drop", "backup": "backup ring"}[policy]
			p.Legend.Add(fmt.Sprintf("%s, %s faults", name, fault), l, pts)
			drawn++
		}
	}
	if drawn == 0 && pin == 0 {
		return errors.New("rnpfrate: nothing to plot")
	}
	p.Y.Min = 0
	p.Y.Max *= 1.08
	p.X.Min, p.X.Max = zero/1.6, maxX*1.6

	const dpi = 96
	w, h := vg.Length(1000)*vg.Inch/dpi, vg.Length(560)*vg.Inch/dpi
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	dc = draw.Crop(dc, vg.Points(8), -vg.Points(8), vg.Points(6), -vg.Points(6))
	// The right axis needs room the plot does not know about.
	const rightAxis = 62
	inner := draw.Crop(dc, 0, -vg.Points(rightAxis), 0, 0)
	p.Draw(inner)
	if pin > 0 {
		drawRelativeAxis(p, inner, pin, "relative to pin")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// drawRelativeAxis draws, right of p's data area, an axis of the same
// y values divided by pin (the optimum), titled label.
func drawRelativeAxis(p *plot.Plot, c draw.Canvas, pin float64, label string) {
	da := p.DataCanvas(c)
	_, ty := p.Transforms(&da)
	x := da.Max.X
	line := draw.LineStyle{Color: color.Black, Width: vg.Points(0.5)}
	da.StrokeLine2(line, x, da.Min.Y, x, da.Max.Y)
	tick := p.Y.Tick.Label
	tick.XAlign, tick.YAlign = draw.XLeft, draw.YCenter
	for _, t := range (plot.DefaultTicks{}).Ticks(p.Y.Min/pin, p.Y.Max/pin) {
		y := ty(t.Value * pin)
		if y < da.Min.Y || y > da.Max.Y {
			continue
		}
		if t.IsMinor() {
			da.StrokeLine2(line, x, y, x+vg.Points(3), y)
			continue
		}
		da.StrokeLine2(line, x, y, x+vg.Points(6), y)
		c.FillText(tick, vg.Point{X: x + vg.Points(8), Y: y}, t.Label)
	}
	title := p.Y.Label.TextStyle
	title.Rotation = -math.Pi / 2
	title.XAlign, title.YAlign = draw.XCenter, draw.YCenter
	c.FillText(title, vg.Point{X: x + vg.Points(46), Y: (da.Min.Y + da.Max.Y) / 2}, label)
}
