package rnpfrate

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/internal/testbed"
)

// The RC figure has two panels. Left, the measurement: throughput against
// the requested fault rate per message on a logarithmic axis (rate 0 a
// decade left of the smallest rate), absolute on the left axis and
// relative to the optimum on the right one, a line per policy and fault
// kind, each point the median with its rounds' min-max as an error bar,
// the optimum a dashed line across. Right, `npfnic exp rnr` in virtual
// time: throughput relative to no faults against the fault rate per
// packet, both axes logarithmic, for its two resolution times.

var rcColor = map[string]color.Color{
	testbed.RecvFaultRNR:  color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	testbed.RecvFaultDrop: color.RGBA{0xd6, 0x27, 0x28, 0xff},
}

var optimumColor = color.RGBA{0x55, 0x55, 0x55, 0xff}

// rcName is a policy's name in the legend.
func rcName(policy string) string {
	if policy == testbed.RecvFaultRNR {
		return "RNR NAK"
	}
	return "drop (ACK timeout)"
}

// SaveRCPlot draws the RC figure into a PNG; without sim, only its left
// panel.
func SaveRCPlot(path string, c Config, sum RCSummary, sim *Sim) error {
	c.setDefaults()
	left, err := rcPanel(c, sum)
	if err != nil {
		return err
	}
	var right *plot.Plot
	if sim != nil {
		if right, err = simPanel(sim); err != nil {
			return err
		}
	}
	const dpi = 96
	width := 1000
	if right != nil {
		width = 1560
	}
	w, h := vg.Length(width)*vg.Inch/dpi, vg.Length(580)*vg.Inch/dpi
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi))
	dc := draw.Crop(draw.New(img), vg.Points(8), -vg.Points(8), vg.Points(6), -vg.Points(6))
	leftArea := dc
	if right != nil {
		split := dc.Min.X + (dc.Max.X-dc.Min.X)*0.62
		leftArea = draw.Crop(dc, 0, split-dc.Max.X, 0, 0)
		right.Draw(draw.Crop(dc, split-dc.Min.X+vg.Points(12), 0, 0, 0))
	}
	// The relative axis needs room the plot does not know about.
	const rightAxis = 62
	inner := draw.Crop(leftArea, 0, -vg.Points(rightAxis), 0, 0)
	left.Draw(inner)
	if sum.Optimum > 0 {
		drawRelativeAxis(left, inner, sum.Optimum, "relative to the optimum")
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

// rcPanel is the measurement.
func rcPanel(c Config, sum RCSummary) (*plot.Plot, error) {
	ppms := make([]int, len(sum.Cells))
	for i, s := range sum.Cells {
		ppms[i] = s.PPM
	}
	zero := zeroXOf(ppms)
	xOf := func(ppm int) float64 {
		if ppm == 0 {
			return zero
		}
		return float64(ppm) / testbed.PPM
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("ib_send_bw --odp, %d-byte SENDs, rdma_rxe into npfnic (TCG guests): median of %d rounds, bars min-max", c.MsgSize, c.Rounds)
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = "synthetic receive faults per message (asked for)"
	p.Y.Label.Text = "throughput (MB/s)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = rateTicks{zero}
	p.Legend.Top, p.Legend.Left = false, true
	p.Legend.YOffs = vg.Points(30)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Add(plotter.NewGrid())
	maxX := zero
	for _, s := range sum.Cells {
		maxX = math.Max(maxX, xOf(s.PPM))
	}
	if sum.Optimum > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: zero, Y: sum.Optimum}, {X: maxX, Y: sum.Optimum}})
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = optimumColor, vg.Points(1.4)
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(l)
		p.Legend.Add("the optimum: rate 0", l)
	}
	drawn := 0
	for _, policy := range RCPolicies {
		for _, fault := range Faults {
			var line withSpread
			for _, s := range sum.Cells {
				if s.Policy != policy || !s.Done() || s.PPM != 0 && s.Fault != fault {
					continue
				}
				line.XYs = append(line.XYs, plotter.XY{X: xOf(s.PPM), Y: s.MBps})
				line.YErrors = append(line.YErrors, struct{ Low, High float64 }{s.MBps - s.Lo, s.Hi - s.MBps})
			}
			if len(line.XYs) < 2 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(line.XYs)
			if err != nil {
				return nil, err
			}
			col := rcColor[policy]
			l.Color, pts.Color = col, col
			l.Width = vg.Points(1.6)
			pts.Radius = vg.Points(3)
			pts.Shape = draw.CircleGlyph{}
			kind := "minor faults"
			if fault == "major" {
				l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
				pts.Shape = draw.SquareGlyph{}
				kind = fmt.Sprintf("major faults (%s)", durationText(c.MajorDelay))
			}
			bars, err := plotter.NewYErrorBars(line)
			if err != nil {
				return nil, err
			}
			bars.Color = col
			p.Add(l, pts, bars)
			p.Legend.Add(rcName(policy)+", "+kind, l, pts)
			drawn++
		}
	}
	if drawn == 0 && sum.Optimum == 0 {
		return nil, errors.New("rnpfrate: nothing to plot")
	}
	p.Y.Min = 0
	p.Y.Max *= 1.08
	p.X.Min, p.X.Max = zero/1.6, maxX*1.6
	return p, nil
}

// simPanel is `npfnic exp rnr`'s sweep, relative to its fault-free run.
func simPanel(sim *Sim) (*plot.Plot, error) {
	p := plot.New()
	sc := sim.Config
	p.Title.Text = fmt.Sprintf("virtual time, npfnic exp rnr: %g Gb/s, %d KiB SENDs, MTU %d", sc.LinkGbps, sc.MsgSize>>10, sc.MTU.Bytes())
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = "receive faults per packet"
	p.Y.Label.Text = "throughput relative to no faults"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = false, true
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Add(plotter.NewGrid())
	drawn := 0
	for i, res := range sc.Resolutions {
		for _, rec := range sc.Recoveries {
			var xys plotter.XYs
			for _, r := range sim.Points {
				if r.Resolution == res && r.Recovery == rec && r.FaultRate > 0 && r.MBps > 0 && sim.Base.MBps > 0 {
					xys = append(xys, plotter.XY{X: r.FaultRate, Y: r.MBps / sim.Base.MBps})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, err
			}
			policy := testbed.RecvFaultRNR
			if rec == ibrc.FaultDrop {
				policy = testbed.RecvFaultDrop
			}
			col := rcColor[policy]
			l.Color, pts.Color = col, col
			l.Width = vg.Points(1.6)
			pts.Radius = vg.Points(3)
			pts.Shape = draw.CircleGlyph{}
			if i > 0 {
				l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
				pts.Shape = draw.SquareGlyph{}
			}
			p.Add(l, pts)
			p.Legend.Add(fmt.Sprintf("%s, faults resolved in %v", rcName(policy), durationText(res)), l, pts)
			drawn++
		}
	}
	if drawn == 0 {
		return nil, errors.New("rnpfrate: the virtual-time sweep has nothing to plot")
	}
	p.Y.Max = math.Max(p.Y.Max, 1.2)
	p.X.Min /= 1.3
	p.X.Max *= 1.3
	return p, nil
}

func durationText(d time.Duration) string {
	if d >= time.Millisecond && d%time.Millisecond == 0 {
		return fmt.Sprintf("%d ms", d/time.Millisecond)
	}
	return fmt.Sprintf("%g µs", float64(d)/float64(time.Microsecond))
}
