// Package report owns the output of experiments: CSV tables and PNG
// charts (line charts with several series and an optional logarithmic x
// axis, grouped bar charts), drawn with gonum/plot so that every
// experiment's figures look alike and are readable: title, axis labels with
// units, legend.
package report

import (
	"encoding/csv"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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

// Series is one named line of a LineChart.
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
	// LegendLeft and LegendBottom move the legend from the top right.
	LegendLeft, LegendBottom bool
}

// BarChart is a grouped bar chart: one group per category along x, one
// bar per series in each group.
type BarChart struct {
	Title, XLabel, YLabel string
	Categories            []string
	Series                []BarSeries
	// LegendRoom adds an empty category on the right, where the legend
	// goes, so the legend never hides a bar.
	LegendRoom bool
}

// BarSeries is one named set of bars, a value per category.
type BarSeries struct {
	Name   string
	Values []float64
}

// Chart is a LineChart or a BarChart.
type Chart interface {
	plot() (*plot.Plot, error)
}

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Label.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.TextStyle.Font.Size = vg.Points(11)
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Add(plotter.NewGrid())
	return p
}

func (c LineChart) plot() (*plot.Plot, error) {
	p := newPlot(c.Title, c.XLabel, c.YLabel)
	p.Legend.Left, p.Legend.Top = c.LegendLeft, !c.LegendBottom
	if c.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	shapes := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}}
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
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		col := palette[i%len(palette)]
		l.Color, pts.Color = col, col
		l.Width = vg.Points(1.6)
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		pts.Shape = shapes[i%len(shapes)]
		pts.Radius = vg.Points(2.8)
		p.Add(l, pts)
		p.Legend.Add(s.Name, l, pts)
	}
	if c.LogX && p.X.Min > 0 {
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

func (c BarChart) plot() (*plot.Plot, error) {
	if c.LegendRoom {
		c.Categories = append(append([]string(nil), c.Categories...), "")
		series := make([]BarSeries, len(c.Series))
		for i, s := range c.Series {
			series[i] = BarSeries{Name: s.Name, Values: append(append([]float64(nil), s.Values...), 0)}
		}
		c.Series = series
	}
	p := newPlot(c.Title, c.XLabel, c.YLabel)
	n := len(c.Series)
	if n == 0 {
		return nil, errors.New("report: bar chart without series")
	}
	w := vg.Points(math.Max(4, 60/float64(n)))
	for i, s := range c.Series {
		if len(s.Values) != len(c.Categories) {
			return nil, fmt.Errorf("report: series %q has %d values for %d categories", s.Name, len(s.Values), len(c.Categories))
		}
		b, err := plotter.NewBarChart(plotter.Values(s.Values), w)
		if err != nil {
			return nil, err
		}
		b.Color = palette[i%len(palette)]
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(b)
		p.Legend.Add(s.Name, b)
	}
	p.NominalX(c.Categories...)
	p.Y.Min = math.Min(0, p.Y.Min)
	return p, nil
}

// SavePNG draws the charts stacked vertically into one PNG of width by
// height pixels per chart.
func SavePNG(path string, width, height int, charts ...Chart) error {
	if len(charts) == 0 {
		return errors.New("report: no chart")
	}
	plots := make([]*plot.Plot, len(charts))
	for i, c := range charts {
		p, err := c.plot()
		if err != nil {
			return err
		}
		plots[i] = p
	}
	return SavePlots(path, width, height, plots)
}

// SavePlots draws gonum plots stacked vertically into one PNG of width by
// height pixels per plot, for experiments that build their own plots.
func SavePlots(path string, width, height int, plots []*plot.Plot) error {
	if len(plots) == 0 {
		return errors.New("report: no plot")
	}
	const dpi = 96
	w := vg.Length(width) * vg.Inch / dpi
	h := vg.Length(height*len(plots)) * vg.Inch / dpi
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	grid := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		grid[i] = []*plot.Plot{p}
	}
	t := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10), PadY: vg.Points(14)}
	canv := plot.Align(grid, t, dc)
	for i := range grid {
		grid[i][0].Draw(canv[i][0])
	}
	return WritePNG(path, img)
}

// WritePNG writes a drawn canvas to path as a PNG (creating its
// directory), for figures laid out by hand.
func WritePNG(path string, img *vgimg.Canvas) error {
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

// Draw adds the line to p, its points and error bars in col, named in
// the legend; dotted draws it dotted with squares (the second of two
// kinds, e.g. major faults) instead of solid with circles.
func (s SpreadXYs) Draw(p *plot.Plot, name string, col color.Color, dotted bool) error {
	l, pts, err := plotter.NewLinePoints(s.XYs)
	if err != nil {
		return err
	}
	l.Color, pts.Color = col, col
	l.Width, pts.Radius = vg.Points(1.6), vg.Points(3)
	pts.Shape = draw.CircleGlyph{}
	if dotted {
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		pts.Shape = draw.SquareGlyph{}
	}
	bars, err := plotter.NewYErrorBars(s)
	if err != nil {
		return err
	}
	bars.Color = col
	p.Add(l, pts, bars)
	p.Legend.Add(name, l, pts)
	return nil
}

// Color is the i-th colour of the palette every chart uses.
func Color(i int) color.Color { return palette[i%len(palette)] }

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
