package rnpfrate

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed"
)

// The figures are Figure 10's shape: throughput against the fault rate on
// a logarithmic axis (rate 0 drawn one decade left of the smallest rate),
// absolute on the left axis and relative to the optimum on the right one,
// one line per policy and fault kind, each point the median with its
// rounds' min-max as an error bar, the optimum a dashed line across. The
// Ethernet optimum is pin; RC's is rate 0. Beside the RC measurement,
// `npfnic exp rnr` in virtual time: throughput relative to no faults
// against the fault rate per packet, both axes logarithmic, for its two
// resolution times.

// policyColor colours a policy of either transport, as in every figure
// (internal/report's palette): pin blue, drop vermillion, what keeps the
// stream going (backup, RNR NAK) bluish green.
var policyColor = map[string]color.Color{
	"pin":                report.Palette[0],
	"drop":               report.Palette[1], // also testbed.RecvFaultDrop
	"backup":             report.Palette[2],
	testbed.RecvFaultRNR: report.Palette[2],
}

// policyShape marks a policy's points; a major fault's are hollow.
var policyShape = map[string]draw.GlyphDrawer{
	"drop":               draw.PyramidGlyph{}, // also testbed.RecvFaultDrop
	"backup":             draw.BoxGlyph{},
	testbed.RecvFaultRNR: draw.BoxGlyph{},
}

// curveStyle is the style of a policy's curve of a fault kind (or of a
// slower resolution: second): minor faults solid with filled markers,
// major ones dotted with hollow ones.
func curveStyle(policy string, second bool) report.Style {
	st := report.Style{Color: policyColor[policy], Shape: policyShape[policy], Dashes: report.Solid}
	if st.Color == nil {
		st.Color = report.Palette[len(report.Palette)-1]
	}
	if st.Shape == nil {
		st.Shape = draw.CircleGlyph{}
	}
	if second {
		st.Shape, st.Dashes = report.Hollow(st.Shape), report.Dotted
	}
	return st
}

var optimumColor = report.Grey

// zeroXOf is where rate 0 sits on the logarithmic axis: a decade below
// the smallest rate of ppms.
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

// ratePoint is one cell of a curve: its rate, median and spread.
type ratePoint struct {
	Point
	y, lo, hi float64
	done      bool
}

// panel is one measurement's figure: its labels, its optimum and its
// cells.
type panel struct {
	title, xLabel, yLabel string
	titleSize             float64
	optimum               float64
	optimumLabel          string
	optimumColor          color.Color
	policies              []string
	// name labels a policy's curve of a fault kind.
	name   func(policy, fault string) string
	points []ratePoint
}

// plot draws the panel.
func (pn panel) plot() (*plot.Plot, error) {
	ppms := make([]int, len(pn.points))
	for i, s := range pn.points {
		ppms[i] = s.PPM
	}
	zero := zeroXOf(ppms)
	xOf := func(ppm int) float64 {
		if ppm == 0 {
			return zero
		}
		return float64(ppm) / testbed.PPM
	}
	p := report.NewPlot(pn.title, pn.xLabel, pn.yLabel)
	p.Title.TextStyle.Font.Size = vg.Points(pn.titleSize)
	p.X.Scale = report.LogScale{}
	p.X.Tick.Marker = rateTicks{zero}
	maxX := zero
	for _, s := range pn.points {
		maxX = math.Max(maxX, xOf(s.PPM))
	}
	if pn.optimum > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: zero, Y: pn.optimum}, {X: maxX, Y: pn.optimum}})
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = pn.optimumColor, vg.Points(1.5)
		l.Dashes = report.Dashed
		p.Add(l)
		p.Legend.Add(pn.optimumLabel, l)
	}
	drawn := 0
	for _, policy := range pn.policies {
		for _, fault := range Faults {
			var line report.SpreadXYs
			for _, s := range pn.points {
				if s.Policy == policy && s.done && (s.PPM == 0 || s.Fault == fault) {
					line.Add(xOf(s.PPM), s.y, s.lo, s.hi)
				}
			}
			// A curve of rate 0 alone is not one of this fault kind.
			if len(line.XYs) < 2 {
				continue
			}
			if err := line.Draw(p, pn.name(policy, fault), curveStyle(policy, fault == "major")); err != nil {
				return nil, err
			}
			drawn++
		}
	}
	if drawn == 0 && pn.optimum == 0 {
		return nil, errors.New("rnpfrate: nothing to plot")
	}
	p.Y.Min = 0
	p.Y.Max *= 1.08
	p.X.Min, p.X.Max = zero/1.6, maxX*1.6
	return p, nil
}

// SavePlot draws the Ethernet figure into a PNG.
func SavePlot(path string, c Config, cells []Cell) error {
	c.setDefaults()
	pn := panel{
		title:     fmt.Sprintf("TCP stream into npfnic with synthetic rNPFs (%s guest, median of %d rounds, bars: min-max)", c.AccelName(), c.Rounds),
		titleSize: 12, xLabel: "rNPFs per received packet", yLabel: "throughput (Mbit/s)",
		optimumLabel: "pin (the optimum: no rNPF possible)", optimumColor: policyColor["pin"],
		policies: []string{"drop", "backup"},
		name: func(policy, fault string) string {
			return fmt.Sprintf("%s, %s faults", map[string]string{"drop": "drop", "backup": "backup ring"}[policy], fault)
		},
	}
	for _, s := range cells {
		if s.Policy == "pin" {
			if s.Done() {
				pn.optimum = s.Mbps
			}
			pn.points = append(pn.points, ratePoint{Point: s.Point})
			continue
		}
		pn.points = append(pn.points, ratePoint{s.Point, s.Mbps, s.Lo, s.Hi, s.Done()})
	}
	p, err := pn.plot()
	if err != nil {
		return err
	}
	return savePanels(path, 1150, 560, []optimumPlot{{p, pn.optimum}}, "relative to pin", nil)
}

// SaveRCPlot draws the RC figure into a PNG; without sim, only its left
// panel.
//
// Each sender gets its panel, stacked: npfnic's requester and rxe wait
// out an RNR NAK so differently that one scale would hide a curve.
func SaveRCPlot(path string, c Config, sum RCSummary, sim *Sim) error {
	c.setDefaults()
	var lefts []optimumPlot
	for _, snd := range sum.Senders {
		opt := sum.Optima[snd].MBps
		pn := panel{
			title:     fmt.Sprintf("ib_send_bw --odp, %d-byte SENDs, %s into npfnic (%s guests): median of %d rounds, bars min-max", c.MsgSize, senderText(snd), c.AccelName(), c.Rounds),
			titleSize: 11, xLabel: "synthetic receive faults per message (asked for)", yLabel: "throughput (MB/s)",
			optimum: opt, optimumLabel: "the optimum: rate 0", optimumColor: optimumColor,
			policies: RCPolicies,
			name: func(policy, fault string) string {
				kind := "minor faults"
				if fault == "major" {
					kind = fmt.Sprintf("major faults (%s)", durationText(c.MajorDelay))
				}
				return rcName(policy) + ", " + kind
			},
		}
		for _, s := range sum.Cells {
			if s.Sender == snd {
				pn.points = append(pn.points, ratePoint{s.Point, s.MBps, s.Lo, s.Hi, s.Done()})
			}
		}
		p, err := pn.plot()
		if err != nil {
			return err
		}
		lefts = append(lefts, optimumPlot{p, opt})
	}
	if len(lefts) == 0 {
		return errors.New("rnpfrate: nothing to plot")
	}
	var right *plot.Plot
	if sim != nil {
		var err error
		if right, err = simPanel(sim); err != nil {
			return err
		}
	}
	return savePanels(path, 1150, 580, lefts, "relative to the optimum", right)
}

// senderText names an RC sender in a title.
func senderText(sender string) string {
	if sender == SenderRxe {
		return "rdma_rxe"
	}
	return "a second " + sender
}

// optimumPlot is a panel and its optimum (0: none), for its relative
// axis.
type optimumPlot struct {
	p       *plot.Plot
	optimum float64
}

// rcName is an RC policy's name in the legend.
func rcName(policy string) string {
	if policy == testbed.RecvFaultRNR {
		return "RNR NAK"
	}
	return "drop (ACK timeout)"
}

// savePanels draws the left panels stacked, each with an axis relative
// to its optimum (none at 0) on its right, and right beside them (if
// set) into a figure (a PNG and its SVG) of width (720 pixels wider with
// right) by height pixels per left panel, each legend right of its
// panel.
func savePanels(path string, width, height int, lefts []optimumPlot, relLabel string, right *plot.Plot) error {
	if right != nil {
		width += 720
	}
	return report.SaveFigure(path, width, height*len(lefts), func(c draw.Canvas) error {
		dc := draw.Crop(c, vg.Points(8), -vg.Points(8), vg.Points(6), -vg.Points(6))
		leftArea := dc
		if right != nil {
			split := dc.Min.X + (dc.Max.X-dc.Min.X)*0.6
			leftArea = draw.Crop(dc, 0, split-dc.Max.X, 0, 0)
			report.DrawPlot(draw.Crop(dc, split-dc.Min.X+vg.Points(12), 0, 0, 0), right, report.LegendWidth(right), 0)
		}
		var ps []*plot.Plot
		for _, l := range lefts {
			ps = append(ps, l.p)
		}
		lw := report.LegendWidth(ps...)
		h := (leftArea.Max.Y - leftArea.Min.Y) / vg.Length(len(lefts))
		for i, l := range lefts {
			// Top to bottom.
			top := leftArea.Max.Y - vg.Length(i)*h
			area := leftArea
			area.Min.Y, area.Max.Y = top-h, top
			if i > 0 {
				area.Max.Y -= vg.Points(10)
			}
			// The relative axis needs room the plot does not know
			// about, between it and its legend.
			var rightAxis vg.Length
			if l.optimum > 0 {
				rightAxis = vg.Points(62)
			}
			inner := report.DrawPlot(area, l.p, lw, rightAxis)
			if l.optimum > 0 {
				drawRelativeAxis(l.p, inner, l.optimum, relLabel)
			}
		}
		return nil
	})
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

// simPanel is `npfnic exp rnr`'s sweep, relative to its fault-free run.
func simPanel(sim *Sim) (*plot.Plot, error) {
	sc := sim.Config
	p := report.NewPlot(fmt.Sprintf("virtual time, npfnic exp rnr: %g Gb/s, %d KiB SENDs, MTU %d", sc.LinkGbps, sc.MsgSize>>10, sc.MTU.Bytes()),
		"receive faults per packet", "throughput relative to no faults")
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Scale, p.Y.Scale = report.LogScale{}, report.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
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
			policy := testbed.RecvFaultRNR
			if rec == ibrc.FaultDrop {
				policy = testbed.RecvFaultDrop
			}
			name := fmt.Sprintf("%s, faults resolved in %v", rcName(policy), durationText(res))
			if err := curveStyle(policy, i > 0).AddLine(p, name, xys); err != nil {
				return nil, err
			}
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
