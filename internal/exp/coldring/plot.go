package coldring

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/npfnic/npfnic/internal/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Every policy has its colour (internal/report's palette, as in every
// figure) and marker; its fault_ahead=0 arm (seed 000's driver) has the
// same colour, the hollow marker and a dashed line.
var policyStyle = map[string]report.Style{
	"pin":    {Color: report.Palette[0], Shape: draw.CircleGlyph{}, Dashes: report.Solid},
	"drop":   {Color: report.Palette[1], Shape: draw.PyramidGlyph{}, Dashes: report.Solid},
	"backup": {Color: report.Palette[2], Shape: draw.BoxGlyph{}, Dashes: report.Solid},
	"off":    {Color: report.Palette[6], Shape: draw.PlusGlyph{}, Dashes: report.Dotted},
}

var policyLabel = map[string]string{
	"pin": "pin (buffers pre-mapped)", "drop": "drop on rNPF", "backup": "backup ring", "off": "off (no translation)",
}

// styled is an arm's style and legend label; the label says the
// fault_ahead of both arms of a policy when the figure has both (zero
// says whether it does).
func styled(a Arm, zero bool) (report.Style, string) {
	st, ok := policyStyle[a.Policy]
	if !ok {
		st = report.SeriesStyle(4)
	}
	l, ok := policyLabel[a.Policy]
	if !ok {
		l = a.Policy
	}
	switch {
	case a.FaultAhead == 0:
		l += ", fault_ahead 0 (seed 000's driver)"
		st.Shape, st.Dashes = report.Hollow(st.Shape), report.Dashed
	case a.FaultAhead != DefaultAhead:
		l += fmt.Sprintf(", fault_ahead %d", a.FaultAhead)
		st.Shape, st.Dashes = report.Hollow(st.Shape), report.DashDot
	case zero:
		l += fmt.Sprintf(", fault_ahead %d (npfnic's default)", DriverDefaultAhead)
	}
	return st, l
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

// startupPlot is Figure 4(a): ops/s against time from the cold start,
// the medians with the rounds' min-max shaded.
func startupPlot(c Config, st []StartupSummary) (*plot.Plot, error) {
	runs := ""
	if n := st[0].Rounds; n > 1 {
		runs = fmt.Sprintf(", median of %d rounds, shaded: min-max", n)
	}
	p := report.NewPlot(fmt.Sprintf("(a) startup from a cold RX ring of %d entries (npfnic, %s guest%s)", st[0].RingSize, c.AccelName(), runs),
		"time since memaslap started (s)", "memcached operations/s")
	var arms []Arm
	for _, s := range st {
		arms = append(arms, s.Arm())
	}
	zero := hasZero(arms)
	for _, s := range st {
		if len(s.Bins) == 0 {
			continue
		}
		style, label := styled(s.Arm(), zero[s.Policy])
		xys := make(plotter.XYs, len(s.Bins))
		xs := make([]float64, len(s.Bins))
		for i, v := range s.Bins {
			xs[i] = float64(i + 1)
			xys[i] = plotter.XY{X: xs[i], Y: v}
		}
		if s.Rounds-s.Failed > 1 && len(s.Lo) == len(s.Bins) {
			if err := report.AddBand(p, xs, s.Lo, s.Hi, style.Color); err != nil {
				return nil, err
			}
		}
		if err := style.AddLine(p, label, xys); err != nil {
			return nil, err
		}
	}
	p.X.Min, p.Y.Min = 0, 0
	if p.Y.Max <= 0 {
		p.Y.Max = 1
	}
	p.Y.Max *= 1.05
	p.X.Tick.Marker, p.Y.Tick.Marker = wholeTicks{}, wholeTicks{}
	return p, nil
}

// sweepPlot is Figure 4(b): seconds for the operations against RX ring
// size, both axes logarithmic, the medians with the rounds' min-max as
// error bars; capped runs are drawn at the cap with a large hollow
// triangle and the cap as a grey dashed line.
func sweepPlot(c Config, cells []SweepCell) (*plot.Plot, error) {
	rounds := ""
	if c.Rounds > 1 {
		rounds = fmt.Sprintf(", median of %d rounds, bars: min-max", c.Rounds)
	}
	p := report.NewPlot(fmt.Sprintf("(b) time for %d memaslap operations from a cold RX ring%s", c.Ops, rounds),
		"RX ring size (entries)", "seconds (log scale)")
	p.X.Scale, p.Y.Scale = report.LogScale{}, report.LogScale{}
	arms, sizes := axes(cells)
	zero := hasZero(arms)
	var ticks []plot.Tick
	for _, n := range sizes {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: fmt.Sprint(n)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	ymin, ymax := math.Inf(1), 0.0
	for _, arm := range arms {
		var line report.SpreadXYs
		var capped plotter.XYs
		for _, s := range cells {
			if s.Arm() != arm || !s.Done() || s.Seconds <= 0 {
				continue
			}
			lo, hi := s.Seconds, s.Seconds
			if s.Runs-s.Failed > 1 && s.Lo > 0 {
				lo, hi = s.Lo, s.Hi
			}
			line.Add(float64(s.RingSize), s.Seconds, lo, hi)
			if s.LowerBound {
				capped = append(capped, plotter.XY{X: float64(s.RingSize), Y: s.Seconds})
			}
			ymin, ymax = math.Min(ymin, lo), math.Max(ymax, hi)
		}
		if len(line.XYs) == 0 {
			continue
		}
		style, label := styled(arm, zero[arm.Policy])
		if err := line.Draw(p, label, style); err != nil {
			return nil, err
		}
		if len(capped) > 0 {
			cp, err := plotter.NewScatter(capped)
			if err != nil {
				return nil, err
			}
			cp.Color, cp.Shape, cp.Radius = style.Color, draw.TriangleGlyph{}, vg.Points(6)
			p.Add(cp)
			p.Legend.Add(arm.Name()+": capped, did not finish", cp)
		}
	}
	if ymax == 0 {
		return p, nil
	}
	capS := c.Cap.Seconds()
	if err := report.AddReference(p, fmt.Sprintf("cap (%.0f s)", capS), report.Dashed,
		plotter.XYs{{X: float64(sizes[0]) / 1.3, Y: capS}, {X: float64(sizes[len(sizes)-1]) * 1.3, Y: capS}}); err != nil {
		return nil, err
	}
	p.X.Min, p.X.Max = float64(sizes[0])/1.3, float64(sizes[len(sizes)-1])*1.3
	p.Y.Min = math.Min(ymin, capS) / 1.3
	p.Y.Max = math.Max(ymax, capS) * 1.3
	p.Y.Tick.Marker = logTicks{}
	return p, nil
}

// SavePNG draws the panels that have data, stacked, into path (and its
// SVG).
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
	return report.SavePlots(path, 1040, 400, plots)
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
	faults.Y.Scale, faults.Y.Tick.Marker = report.LogScale{}, logTicks{}
	top := report.NewPlot(fmt.Sprintf("time for %d memaslap operations from the cold start%s", c.Ops, rounds),
		"fault_ahead N", "seconds")
	bottom := report.NewPlot("backup relative to pin's median (bars: backup's rounds): the paper's goal is <= 1.1x",
		"fault_ahead N", "backup / pin")
	for _, p := range []*plot.Plot{faults, top, bottom} {
		p.X.Scale = report.LogScale{}
		p.X.Tick.Marker = aheadTicks(ns)
		p.X.Min, p.X.Max = float64(ns[0]+1)/1.3, float64(ns[len(ns)-1]+1)*1.3
	}
	ratios := AheadRatios(sweep, ahead)
	ymax, rmax, rmin, fmax := 0.0, 1.1, 1.0, 1.0
	for i, size := range sizes {
		style := report.SeriesStyle(i)
		col := style.Color
		var line, rel report.SpreadXYs
		var fs, ideal plotter.XYs
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
				// The rounds' range over pin's median.
				lo, hi := r.Ratio*s.Lo/s.Seconds, r.Ratio*s.Hi/s.Seconds
				if math.IsNaN(lo) || math.IsNaN(hi) || s.Seconds <= 0 {
					lo, hi = r.Ratio, r.Ratio
				}
				rel.Add(x, r.Ratio, lo, hi)
				rmax, rmin = math.Max(rmax, hi), math.Min(rmin, lo)
			}
		}
		if len(line.XYs) == 0 {
			continue
		}
		if err := line.Draw(top, fmt.Sprintf("backup, ring %d", size), style); err != nil {
			return err
		}
		if err := style.AddLine(faults, fmt.Sprintf("ring %d", size), fs); err != nil {
			return err
		}
		il, err := plotter.NewLine(ideal)
		if err != nil {
			return err
		}
		il.Color, il.Width, il.Dashes = col, vg.Points(1), report.Dotted
		faults.Add(il)
		faults.Legend.Add(fmt.Sprintf("ring %d / (N+1)", size), il)
		if p, ok := pin[size]; ok {
			pl, err := plotter.NewLine(plotter.XYs{{X: top.X.Min, Y: p.Seconds}, {X: top.X.Max, Y: p.Seconds}})
			if err != nil {
				return err
			}
			pl.Color, pl.Width, pl.Dashes = col, vg.Points(1), report.Dashed
			top.Add(pl)
			top.Legend.Add(fmt.Sprintf("pin, ring %d (median)", size), pl)
			ymax = math.Max(ymax, p.Seconds)
		}
		if len(rel.XYs) > 0 {
			if err := rel.Draw(bottom, fmt.Sprintf("ring %d", size), style); err != nil {
				return err
			}
		}
	}
	if err := report.AddReference(bottom, "1.1x (goal)", report.Dashed, plotter.XYs{{X: bottom.X.Min, Y: 1.1}, {X: bottom.X.Max, Y: 1.1}}); err != nil {
		return err
	}
	top.Y.Min, top.Y.Max = 0, ymax*1.05
	bottom.Y.Min, bottom.Y.Max = math.Min(rmin, 0.9)-0.05, math.Max(rmax, 1.1)*1.05
	faults.Y.Min, faults.Y.Max = 0.5, fmax*1.5
	return report.SavePlots(path, 1040, 360, []*plot.Plot{faults, top, bottom})
}
