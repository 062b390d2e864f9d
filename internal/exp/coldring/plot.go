package coldring

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"slices"

	"github.com/npfnic/npfnic/internal/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Colours per policy, the same in both panels (internal/report's palette).
var policyColor = map[string]color.Color{"pin": report.Color(0), "drop": report.Color(1), "backup": report.Color(2), "off": report.Color(7)}

var policyShape = map[string]draw.GlyphDrawer{
	"pin": draw.CircleGlyph{}, "drop": draw.CrossGlyph{}, "backup": draw.SquareGlyph{}, "off": draw.RingGlyph{},
}

var policyLabel = map[string]string{
	"pin": "pin (buffers pre-mapped)", "drop": "drop on rNPF", "backup": "backup ring", "off": "off (no translation)",
}

// styled is an arm's colour, marker, dashes and legend label: the
// policy's colour, and a fault_ahead arm's line dashed; the label says
// the fault_ahead of both arms of a policy when the figure has both
// (zero says whether it does).
func styled(a Arm, zero bool) (color.Color, draw.GlyphDrawer, []vg.Length, string) {
	c, ok := policyColor[a.Policy]
	if !ok {
		c = color.Black
	}
	g, ok := policyShape[a.Policy]
	if !ok {
		g = draw.TriangleGlyph{}
	}
	l, ok := policyLabel[a.Policy]
	if !ok {
		l = a.Policy
	}
	var dashes []vg.Length
	switch {
	case a.FaultAhead == 0:
		l += ", fault_ahead 0 (seed 000's driver)"
		dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	case a.FaultAhead != DefaultAhead:
		l += fmt.Sprintf(", fault_ahead %d", a.FaultAhead)
		dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	case zero:
		l += fmt.Sprintf(", fault_ahead %d (npfnic's default)", DriverDefaultAhead)
	}
	return c, g, dashes, l
}

// hasZero reports, per policy, whether arms has its fault_ahead=0 arm.
func hasZero(arms []Arm) map[string]bool {
	z := map[string]bool{}
	for _, a := range arms {
		if a.FaultAhead == 0 {
			z[a.Policy] = true
		}
	}
	return z
}

// startupPlot is Figure 4(a): ops/s against time from the cold start.
func startupPlot(c Config, st []StartupSummary) (*plot.Plot, error) {
	runs := ""
	if n := st[0].Rounds; n > 1 {
		runs = fmt.Sprintf(", median of %d rounds", n)
	}
	p := report.NewPlot(fmt.Sprintf("(a) startup from a cold RX ring of %d entries (npfnic, %s guest%s)", st[0].RingSize, c.AccelName(), runs),
		"time since memaslap started (s)", "memcached operations/s")
	p.Legend.Top, p.Legend.Left = true, false
	var arms []Arm
	for _, s := range st {
		arms = append(arms, s.Arm())
	}
	zero := hasZero(arms)
	for _, s := range st {
		if len(s.Bins) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.Bins))
		for i, v := range s.Bins {
			xys[i] = plotter.XY{X: float64(i + 1), Y: v}
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		col, shape, dashes, label := styled(s.Arm(), zero[s.Policy])
		l.Color, pts.Color, pts.Shape, l.Dashes = col, col, shape, dashes
		l.Width, pts.Radius = vg.Points(1.6), vg.Points(2.5)
		p.Add(l, pts)
		p.Legend.Add(label, l, pts)
	}
	p.X.Min, p.Y.Min = 0, 0
	if p.Y.Max <= 0 {
		p.Y.Max = 1
	}
	p.Y.Max *= 1.25 // room for the legend
	p.X.Tick.Marker, p.Y.Tick.Marker = wholeTicks{}, wholeTicks{}
	return p, nil
}

// sweepPlot is Figure 4(b): seconds for the operations against RX ring
// size, both axes logarithmic; capped runs are drawn at the cap with an
// upward triangle and the cap as a dashed line.
func sweepPlot(c Config, cells []SweepCell) (*plot.Plot, error) {
	p := report.NewPlot(fmt.Sprintf("(b) time for %d memaslap operations from a cold RX ring", c.Ops),
		"RX ring size (entries)", "seconds (log scale)")
	p.Legend.Top, p.Legend.Left = true, true
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	arms, sizes := axes(cells)
	zero := hasZero(arms)
	var ticks []plot.Tick
	for _, n := range sizes {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: fmt.Sprint(n)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	ymin, ymax := math.Inf(1), 0.0
	for _, arm := range arms {
		var done, capped plotter.XYs
		for _, s := range cells {
			if s.Arm() != arm || !s.Done() || s.Seconds <= 0 {
				continue
			}
			done = append(done, plotter.XY{X: float64(s.RingSize), Y: s.Seconds})
			if s.LowerBound {
				capped = append(capped, plotter.XY{X: float64(s.RingSize), Y: s.Seconds})
			}
			ymin, ymax = math.Min(ymin, s.Seconds), math.Max(ymax, s.Seconds)
		}
		if len(done) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(done)
		if err != nil {
			return nil, err
		}
		col, shape, dashes, label := styled(arm, zero[arm.Policy])
		l.Color, pts.Color, pts.Shape, l.Dashes = col, col, shape, dashes
		l.Width, pts.Radius = vg.Points(1.6), vg.Points(2.8)
		p.Add(l, pts)
		p.Legend.Add(label, l, pts)
		if len(capped) > 0 {
			cp, err := plotter.NewScatter(capped)
			if err != nil {
				return nil, err
			}
			cp.Color, cp.Shape, cp.Radius = col, draw.TriangleGlyph{}, vg.Points(5)
			p.Add(cp)
			p.Legend.Add(arm.Name()+": capped, did not finish", cp)
		}
	}
	if ymax == 0 {
		return p, nil
	}
	capS := c.Cap.Seconds()
	line, err := plotter.NewLine(plotter.XYs{{X: float64(sizes[0]), Y: capS}, {X: float64(sizes[len(sizes)-1]), Y: capS}})
	if err != nil {
		return nil, err
	}
	line.Color = color.Gray{0x80}
	line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	p.Add(line)
	p.Legend.Add(fmt.Sprintf("cap (%.0f s)", capS), line)
	p.X.Min, p.X.Max = float64(sizes[0])/1.3, float64(sizes[len(sizes)-1])*1.3
	p.Y.Min = math.Min(ymin, capS) / 1.5
	p.Y.Max = math.Max(ymax, capS) * 4 // room for the legend
	p.Y.Tick.Marker = logTicks{}
	return p, nil
}

// SavePNG draws the panels that have data, stacked, into path.
func SavePNG(path string, c Config, results []Result) error {
	c.setDefaults()
	var plots []*plot.Plot
	if st := Startup(results); len(st) > 0 {
		p, err := startupPlot(c, st)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	if cells := Sweep(results); len(cells) > 0 {
		p, err := sweepPlot(c, cells)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	if len(plots) == 0 {
		return errors.New("coldring: nothing to plot")
	}
	return report.SavePlots(path, 820, 400, plots)
}

// wholeTicks are gonum's default ticks labelled without decimals when
// they are whole numbers.
type wholeTicks struct{}

func (wholeTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" && ts[i].Value == math.Trunc(ts[i].Value) {
			ts[i].Label = fmt.Sprintf("%.0f", ts[i].Value)
		}
	}
	return ts
}

// logTicks label 1, 2 and 5 times each power of ten in range.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	if min <= 0 || max <= min {
		return ts
	}
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < min || v > max {
				continue
			}
			ts = append(ts, plot.Tick{Value: v, Label: strconvG(v)})
		}
	}
	return ts
}

func strconvG(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", v)
}

// Part (c) is drawn in the shape of seed 004 Figure 11 (latency against
// the fault knob, absolute and as the slowdown against the fault-free
// case), with what the knob acts on above it: the receive faults per cold
// start against fault_ahead, one line per ring size with ring/(N+1)
// dotted; the time for the operations, with pin's median as a dashed line
// of the same colour; and backup/pin with the 1.1x goal. N sits at N+1 on
// a logarithmic axis, so 0 has a place.

// aheadTicks label N at N+1.
type aheadTicks []int

func (t aheadTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for _, n := range t {
		ts = append(ts, plot.Tick{Value: float64(n + 1), Label: fmt.Sprint(n)})
	}
	return ts
}

// SaveAheadPNG draws part (c) into path.
func SaveAheadPNG(path string, c Config, sweep, ahead []SweepCell) error {
	c.setDefaults()
	var ns, sizes []int
	for _, s := range ahead {
		if !slices.Contains(ns, s.FaultAhead) {
			ns = append(ns, s.FaultAhead)
		}
		if !slices.Contains(sizes, s.RingSize) {
			sizes = append(sizes, s.RingSize)
		}
	}
	if len(ns) == 0 {
		return errors.New("coldring: no fault-ahead runs to plot")
	}
	slices.Sort(ns)
	slices.Sort(sizes)
	pin := map[int]SweepCell{}
	for _, s := range sweep {
		if s.Policy == "pin" && s.Done() && !s.LowerBound {
			pin[s.RingSize] = s
		}
	}
	rounds := ""
	if c.Rounds > 1 {
		rounds = fmt.Sprintf(", median of %d rounds, bars: min-max", c.Rounds)
	}
	faults := report.NewPlot("(c) backup from a cold ring with fault ahead: receive faults per cold start (medians)",
		"fault_ahead N (a resolved RX fault backs the next N cold slots)", "rx_faults (log scale)")
	faults.Y.Scale, faults.Y.Tick.Marker = plot.LogScale{}, logTicks{}
	top := report.NewPlot(fmt.Sprintf("time for %d memaslap operations from the cold start%s", c.Ops, rounds),
		"fault_ahead N", "seconds")
	bottom := report.NewPlot("backup relative to pin (medians): the paper's goal is <= 1.1x",
		"fault_ahead N", "backup / pin")
	for _, p := range []*plot.Plot{faults, top, bottom} {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = aheadTicks(ns)
		p.X.Min, p.X.Max = float64(ns[0]+1)/1.3, float64(ns[len(ns)-1]+1)*1.3
		p.Legend.Top, p.Legend.Left = true, false
	}
	ratios := AheadRatios(sweep, ahead)
	ymax, rmax, rmin, fmax := 0.0, 1.2, 1.0, 1.0
	for i, size := range sizes {
		col := report.Color(i)
		var line report.SpreadXYs
		var rel, fs, ideal plotter.XYs
		for k, s := range ahead {
			if s.RingSize != size || !s.Done() {
				continue
			}
			x := float64(s.FaultAhead + 1)
			line.Add(x, s.Seconds, s.Lo, s.Hi)
			ymax = math.Max(ymax, s.Hi)
			fs = append(fs, plotter.XY{X: x, Y: math.Max(s.RxFaults, 0.8)})
			ideal = append(ideal, plotter.XY{X: x, Y: math.Ceil(float64(size) / float64(min(s.FaultAhead, size-1)+1))})
			fmax = math.Max(fmax, s.RxFaults)
			if r := ratios[k]; !math.IsNaN(r.Ratio) {
				rel = append(rel, plotter.XY{X: x, Y: r.Ratio})
				rmax, rmin = math.Max(rmax, r.Ratio), math.Min(rmin, r.Ratio)
			}
		}
		if len(line.XYs) == 0 {
			continue
		}
		if err := line.Draw(top, fmt.Sprintf("backup, ring %d", size), col, false); err != nil {
			return err
		}
		fl, fp, err := plotter.NewLinePoints(fs)
		if err != nil {
			return err
		}
		fl.Color, fp.Color, fp.Shape = col, col, draw.CircleGlyph{}
		fl.Width, fp.Radius = vg.Points(1.6), vg.Points(3)
		il, err := plotter.NewLine(ideal)
		if err != nil {
			return err
		}
		il.Color, il.Width = col, vg.Points(1)
		il.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		faults.Add(fl, fp, il)
		faults.Legend.Add(fmt.Sprintf("ring %d", size), fl, fp)
		faults.Legend.Add(fmt.Sprintf("ring %d / (N+1)", size), il)
		if p, ok := pin[size]; ok {
			pl, err := plotter.NewLine(plotter.XYs{{X: top.X.Min, Y: p.Seconds}, {X: top.X.Max, Y: p.Seconds}})
			if err != nil {
				return err
			}
			pl.Color, pl.Width = col, vg.Points(1.2)
			pl.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			top.Add(pl)
			top.Legend.Add(fmt.Sprintf("pin, ring %d", size), pl)
			ymax = math.Max(ymax, p.Seconds)
		}
		if len(rel) > 0 {
			rl, rp, err := plotter.NewLinePoints(rel)
			if err != nil {
				return err
			}
			rl.Color, rp.Color, rp.Shape = col, col, draw.CircleGlyph{}
			rl.Width, rp.Radius = vg.Points(1.6), vg.Points(3)
			bottom.Add(rl, rp)
			bottom.Legend.Add(fmt.Sprintf("ring %d", size), rl, rp)
		}
	}
	goal, err := plotter.NewLine(plotter.XYs{{X: bottom.X.Min, Y: 1.1}, {X: bottom.X.Max, Y: 1.1}})
	if err != nil {
		return err
	}
	goal.Color = color.Gray{0x60}
	goal.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	bottom.Add(goal)
	bottom.Legend.Add("1.1x (goal)", goal)
	top.Y.Min, top.Y.Max = 0, ymax*1.45 // room for the legend
	bottom.Y.Min, bottom.Y.Max = math.Min(rmin, 0.8)-0.05, rmax*1.15
	faults.Y.Min, faults.Y.Max = 0.5, fmax*8
	faults.Legend.Top, faults.Legend.Left = true, false
	return report.SavePlots(path, 820, 360, []*plot.Plot{faults, top, bottom})
}
