// Package report owns the output of experiments: CSV tables and figures
// (line charts with several series and an optional logarithmic x axis,
// grouped bar charts with the rounds' min-max), drawn with gonum/plot so
// that every experiment's figures look alike and are readable: title, axis
// labels with units, a colour-blind-safe palette with a marker and a dash
// pattern per series (style.go), the legend outside the data, a PNG and
// an SVG of each (figure.go), checked by CheckFigure and CheckBars.
package report

import (
	"encoding/csv"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WriteCSV writes header and rows to path (creating its directory).
func WriteCSV(path string, header []string, rows [][]string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.Write(header); err != nil {
		f.Close()
		return err
	}
	for i, r := range rows {
		if len(r) != len(header) {
			f.Close()
			return fmt.Errorf("report: row %d has %d fields, header %d", i, len(r), len(header))
		}
	}
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Row formats values for WriteCSV: floats with %g, everything else with %v.
func Row(vals ...any) []string {
	r := make([]string, len(vals))
	for i, v := range vals {
		switch x := v.(type) {
		case float64:
			r[i] = strconv.FormatFloat(x, 'g', 6, 64)
		case float32:
			r[i] = strconv.FormatFloat(float64(x), 'g', 6, 32)
		default:
			r[i] = fmt.Sprint(v)
		}
	}
	return r
}

// Series is one named line of a LineChart, in its SeriesStyle; Dashed
// draws it dashed whatever its place.
type Series struct {
	Name   string
	X, Y   []float64
	Dashed bool
}

// LineChart is a line plot with points.
type LineChart struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	Series                []Series
	YMin                  *float64 // fixes the lower end of the y axis (e.g. 0)
}

// BarChart is a grouped bar chart: one group per category along x, one
// bar per series in each group. The y axis leaves room above the
// highest bar and range.
type BarChart struct {
	Title, XLabel, YLabel string
	Categories            []string
	Series                []BarSeries
}

// BarSeries is one named set of bars, a value per category; Lo and Hi,
// if set, are each value's range (the rounds' min-max), drawn as a
// whisker on its bar (NaN: none).
type BarSeries struct {
	Name   string
	Values []float64
	Lo, Hi []float64
}

// Chart is a LineChart or a BarChart.
type Chart interface {
	// Plot is the chart as a gonum plot.
	Plot() (*plot.Plot, error)
}

var white color.Color = color.White

// headroom is the share of a bar chart's y range left above its
// highest bar or range.
const headroom = 0.08

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Label.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.TextStyle.Font.Size = vg.Points(11)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.ThumbnailWidth = vg.Points(28)
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = gridGrey, gridGrey
	p.Add(g)
	return p
}

// Plot implements Chart.
func (c LineChart) Plot() (*plot.Plot, error) {
	p := newPlot(c.Title, c.XLabel, c.YLabel)
	if c.LogX {
		p.X.Scale = LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if c.LogY {
		p.Y.Scale = LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	for i, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("report: series %q has %d x and %d y", s.Name, len(s.X), len(s.Y))
		}
		xys := make(plotter.XYs, 0, len(s.X))
		for j := range s.X {
			if c.LogX && s.X[j] <= 0 || c.LogY && s.Y[j] <= 0 || math.IsNaN(s.Y[j]) || math.IsInf(s.Y[j], 0) {
				continue // not drawable on this scale
			}
			xys = append(xys, plotter.XY{X: s.X[j], Y: s.Y[j]})
		}
		if len(xys) == 0 {
			continue
		}
		st := SeriesStyle(i)
		if s.Dashed {
			st.Dashes = Dashed
		}
		if err := st.AddLine(p, s.Name, xys); err != nil {
			return nil, err
		}
	}
	// A log axis with nothing drawable on it (every run of the panel
	// failed: gonum then leaves it +Inf to -Inf, and draws it from -1)
	// spans one decade, empty: gonum's log ticks panic on the other.
	if c.LogX && !(p.X.Min > 0 && p.X.Min <= p.X.Max) {
		p.X.Min, p.X.Max = 1, 10
	}
	if c.LogY && !(p.Y.Min > 0 && p.Y.Min <= p.Y.Max) {
		p.Y.Min, p.Y.Max = 1, 10
	}
	if c.LogX {
		// Room around the data so the decade ticks at the ends show.
		p.X.Min /= 1.3
		p.X.Max *= 1.3
	}
	if c.YMin != nil {
		p.Y.Min = *c.YMin
		if p.Y.Max <= p.Y.Min {
			p.Y.Max = p.Y.Min + 1
		}
	}
	return p, nil
}

// Plot implements Chart.
func (c BarChart) Plot() (*plot.Plot, error) {
	p := newPlot(c.Title, c.XLabel, c.YLabel)
	n := len(c.Series)
	if n == 0 {
		return nil, errors.New("report: bar chart without series")
	}
	w := vg.Points(math.Max(4, 60/float64(n)))
	top := 0.0
	for i, s := range c.Series {
		if len(s.Values) != len(c.Categories) {
			return nil, fmt.Errorf("report: series %q has %d values for %d categories", s.Name, len(s.Values), len(c.Categories))
		}
		if s.Lo != nil && len(s.Lo) != len(s.Values) || s.Hi != nil && len(s.Hi) != len(s.Values) {
			return nil, fmt.Errorf("report: series %q has %d values, %d lows and %d highs", s.Name, len(s.Values), len(s.Lo), len(s.Hi))
		}
		b, err := plotter.NewBarChart(plotter.Values(s.Values), w)
		if err != nil {
			return nil, err
		}
		b.Color = Color(i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(b)
		p.Legend.Add(s.Name, b)
		for _, v := range append(slices.Clone(s.Values), s.Hi...) {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				top = math.Max(top, v)
			}
		}
		if s.Lo != nil || s.Hi != nil {
			p.Add(&barRanges{offset: b.Offset, width: w / 2, lo: s.Lo, hi: s.Hi})
		}
	}
	p.NominalX(c.Categories...)
	// Each group in the middle of a slot of its own.
	p.X.Min, p.X.Max = -0.5, float64(len(c.Categories))-0.5
	p.Y.Min = math.Min(0, p.Y.Min)
	if top <= 0 {
		top = 1
	}
	p.Y.Max = math.Max(p.Y.Max, top) + headroom*(math.Max(p.Y.Max, top)-p.Y.Min)
	return p, nil
}

// barRanges draws a whisker from lo to hi on each bar of one series.
type barRanges struct {
	offset, width vg.Length
	lo, hi        []float64
}

func (r *barRanges) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	sty := draw.LineStyle{Color: color.Black, Width: vg.Points(1)}
	for i := range max(len(r.lo), len(r.hi)) {
		lo, hi := math.NaN(), math.NaN()
		if i < len(r.lo) {
			lo = r.lo[i]
		}
		if i < len(r.hi) {
			hi = r.hi[i]
		}
		if math.IsNaN(lo) || math.IsNaN(hi) {
			continue
		}
		x := trX(float64(i)) + r.offset
		y0, y1 := trY(lo), trY(hi)
		c.StrokeLine2(sty, x, y0, x, y1)
		c.StrokeLine2(sty, x-r.width/2, y0, x+r.width/2, y0)
		c.StrokeLine2(sty, x-r.width/2, y1, x+r.width/2, y1)
	}
}

// SavePNG draws the charts stacked vertically into a figure (SaveFigure:
// the PNG path and its SVG) of width by height pixels per chart.
func SavePNG(path string, width, height int, charts ...Chart) error {
	if len(charts) == 0 {
		return errors.New("report: no chart")
	}
	plots := make([]*plot.Plot, len(charts))
	for i, c := range charts {
		p, err := c.Plot()
		if err != nil {
			return err
		}
		plots[i] = p
	}
	return SavePlots(path, width, height, plots)
}

// SpreadXYs are a line's points, each with its spread (the rounds'
// min-max) as a y error bar.
type SpreadXYs struct {
	plotter.XYs
	plotter.YErrors
}

// Add appends the point (x, y) spread from lo to hi.
func (s *SpreadXYs) Add(x, y, lo, hi float64) {
	s.XYs = append(s.XYs, plotter.XY{X: x, Y: y})
	s.YErrors = append(s.YErrors, struct{ Low, High float64 }{y - lo, hi - y})
}

// Draw adds the line to p in st, its points' error bars in st's colour,
// named in the legend.
func (s SpreadXYs) Draw(p *plot.Plot, name string, st Style) error {
	if err := st.AddLine(p, name, s.XYs); err != nil {
		return err
	}
	bars, err := plotter.NewYErrorBars(s)
	if err != nil {
		return err
	}
	bars.Color, bars.Width = st.Color, vg.Points(1.2)
	p.Add(bars)
	return nil
}

// AddBand adds to p the range of a line: a band from lo to hi at xs,
// filled with col faded (Faded). Points whose lo or hi is NaN break it.
func AddBand(p *plot.Plot, xs, lo, hi []float64, col color.Color) error {
	if len(xs) != len(lo) || len(xs) != len(hi) {
		return fmt.Errorf("report: band of %d x, %d lo, %d hi", len(xs), len(lo), len(hi))
	}
	flush := func(run []int) error {
		if len(run) < 2 {
			return nil
		}
		var pts plotter.XYs
		for _, i := range run {
			pts = append(pts, plotter.XY{X: xs[i], Y: hi[i]})
		}
		for k := len(run) - 1; k >= 0; k-- {
			pts = append(pts, plotter.XY{X: xs[run[k]], Y: lo[run[k]]})
		}
		poly, err := plotter.NewPolygon(pts)
		if err != nil {
			return err
		}
		poly.Color = Faded(col)
		poly.LineStyle.Width = 0
		p.Add(poly)
		return nil
	}
	var run []int
	for i := range xs {
		if math.IsNaN(lo[i]) || math.IsNaN(hi[i]) {
			if err := flush(run); err != nil {
				return err
			}
			run = run[:0]
			continue
		}
		run = append(run, i)
	}
	return flush(run)
}

// NewPlot is a plot with the title, axis labels, legend font and grid
// every chart of the experiments has.
func NewPlot(title, x, y string) *plot.Plot { return newPlot(title, x, y) }

// HostLoad is the host's 1-minute load average (0 if unknown): experiments
// record it beside their measurements, since these machines are shared.
func HostLoad() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
