package report

import (
	"fmt"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/npfnic/npfnic/vdevice/trace"
)

// Every way of saving a figure writes the PNG and its SVG twin, of the
// same size, drawn in the palette.
func TestFiguresHavePNGAndSVGInThePalette(t *testing.T) {
	dir := t.TempDir()
	zero := 0.0
	line := LineChart{Title: "lines", XLabel: "x", YLabel: "y", YMin: &zero}
	for i := range 9 { // more series than colours
		line.Series = append(line.Series, Series{Name: "s" + strconv.Itoa(i), X: []float64{1, 2, 3}, Y: []float64{float64(i), float64(i + 1), float64(2 * i)}, Dashed: i == 8})
	}
	bar := BarChart{Title: "bars", YLabel: "µs", Categories: []string{"a", "b"},
		Series: []BarSeries{{Name: "p50", Values: []float64{1, 2}, Lo: []float64{0.5, 1.5}, Hi: []float64{1.5, 3}}, {Name: "p99", Values: []float64{2, 4}}}}
	band := NewPlot("band", "x", "y")
	if err := AddBand(band, []float64{1, 2, 3, 4}, []float64{1, 2, math.NaN(), 2}, []float64{2, 3, math.NaN(), 4}, Color(1)); err != nil {
		t.Fatal(err)
	}
	var spread SpreadXYs
	spread.Add(1, 2, 1, 3)
	spread.Add(2, 3, 2.5, 4)
	if err := spread.Draw(band, "median, bars: min-max", SeriesStyle(1)); err != nil {
		t.Fatal(err)
	}
	if err := AddReference(band, "goal", Dashed, plotter.XYs{{X: 1, Y: 2.5}, {X: 4, Y: 2.5}}); err != nil {
		t.Fatal(err)
	}
	events := []trace.Event{
		{TS: 1000, Kind: trace.RxFrame, Track: trace.PairRx(0)},
		{TS: 2000, Kind: trace.Fault, Track: trace.PairRx(0)},
		{TS: 2500, Kind: trace.PageRequest, Track: trace.TrackPRI},
		{TS: 3000, Dur: 800, Kind: trace.Walk, Track: trace.TrackATS},
		{TS: 4000, Kind: trace.IRQ, Track: trace.TrackIRQ},
		{TS: 9000, Kind: trace.PageResponse, Track: trace.TrackPRI},
		{TS: 9500, Kind: trace.RxFrame, Track: trace.PairRx(0)},
	}
	stages := []trace.Event{events[1], events[2], events[4], events[5], events[6]}
	for _, tc := range []struct {
		name          string
		width, height int // of the whole figure
		save          func(path string) error
	}{
		{"charts.png", 800, 3 * 300, func(p string) error { return SavePNG(p, 800, 300, line, bar, line) }},
		{"plots.png", 700, 2 * 250, func(p string) error { return SavePlots(p, 700, 250, []*plot.Plot{band, band}) }},
		{"sub/timeline.png", 1100, 2 * 420, func(p string) error {
			return FaultStages(p, "a fault", events, stages, []string{"fault", "request", "irq", "response", "resumed"}, 2)
		}},
		{"hand.png", 500, 200, func(p string) error {
			return SaveFigure(p, 500, 200, func(c draw.Canvas) error {
				DrawPlot(c, band, LegendWidth(band), 0)
				return nil
			})
		}},
	} {
		path := filepath.Join(dir, tc.name)
		if err := tc.save(path); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := CheckFigure(path); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if b := img.Bounds(); b.Dx() != tc.width || b.Dy() != tc.height {
			t.Errorf("%s: %v, want %dx%d", tc.name, b, tc.width, tc.height)
		}
		svg, err := os.ReadFile(SVGPath(path))
		if err != nil {
			t.Fatal(err)
		}
		// 96 pixels an inch, 72 points.
		want := regexp.MustCompile(`viewBox="0 0 ` + strconv.Itoa(tc.width*3/4) + ` ` + strconv.Itoa(tc.height*3/4) + `"`)
		if !want.Match(svg) {
			t.Errorf("%s: SVG %.300s: want %s", tc.name, svg, want)
		}
	}
	if err := SaveFigure(filepath.Join(dir, "x.svg"), 10, 10, func(draw.Canvas) error { return nil }); err == nil {
		t.Error("SaveFigure took a path that is not a .png")
	}
}

// CheckFigure refuses a colour outside the palette, a figure without its
// SVG, and one without a series.
func TestCheckFigureRefuses(t *testing.T) {
	dir := t.TempDir()
	off := NewPlot("tab10's red", "x", "y")
	l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
	if err != nil {
		t.Fatal(err)
	}
	l.Color = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	off.Add(l)
	empty := NewPlot("nothing", "x", "y")
	for _, tc := range []struct {
		name, want string
		p          *plot.Plot
		noSVG      bool
	}{
		{"off.png", "colours outside the palette: #d62728", off, false},
		{"empty.png", "no colour of the palette", empty, false},
		{"alone.png", "no such file", empty, true},
	} {
		path := filepath.Join(dir, tc.name)
		if err := SavePlots(path, 300, 200, []*plot.Plot{tc.p}); err != nil {
			t.Fatal(err)
		}
		if tc.noSVG {
			os.Remove(SVGPath(path))
		}
		if err := CheckFigure(path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CheckFigure %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestSeriesStylesDistinct(t *testing.T) {
	for i := range len(Palette) {
		s := SeriesStyle(i)
		for j := range i {
			o := SeriesStyle(j)
			if s.Color == o.Color {
				t.Errorf("series %d and %d share a colour", i, j)
			}
			if s.Shape == o.Shape {
				t.Errorf("series %d and %d share a marker", i, j)
			}
		}
		if i < 4 {
			for j := range i {
				if equalDashes(s.Dashes, SeriesStyle(j).Dashes) {
					t.Errorf("series %d and %d share a dash pattern", i, j)
				}
			}
		}
		if !InPalette(nrgba(s.Color)) {
			t.Errorf("series %d: %v outside the palette", i, s.Color)
		}
	}
	for _, g := range []struct{ filled, hollow draw.GlyphDrawer }{
		{draw.CircleGlyph{}, draw.RingGlyph{}}, {draw.BoxGlyph{}, draw.SquareGlyph{}}, {draw.PyramidGlyph{}, draw.TriangleGlyph{}}, {draw.CrossGlyph{}, draw.CrossGlyph{}},
	} {
		if Hollow(g.filled) != g.hollow {
			t.Errorf("Hollow(%T) = %T, want %T", g.filled, Hollow(g.filled), g.hollow)
		}
	}
}

func equalDashes(a, b []vg.Length) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func nrgba(c color.Color) color.NRGBA { return color.NRGBAModel.Convert(c).(color.NRGBA) }

// No bar, nor its range, reaches the top of its axis.
func TestBarsNotClipped(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name   string
		series []BarSeries
		top    float64
	}{
		{"values", []BarSeries{{Name: "a", Values: []float64{1, 5, 3}}}, 5},
		{"a range above the highest bar", []BarSeries{{Name: "a", Values: []float64{1, 5, 3}, Lo: []float64{0.5, 4, 2}, Hi: []float64{1.5, 6, 9}}}, 9},
		{"ranges with gaps", []BarSeries{{Name: "a", Values: []float64{1, 5, 3}, Lo: []float64{nan, 4, nan}, Hi: []float64{nan, 7, nan}}, {Name: "b", Values: []float64{2, 2, 2}}}, 7},
		{"zeros", []BarSeries{{Name: "a", Values: []float64{0, 0, 0}}}, 0},
		{"large", []BarSeries{{Name: "a", Values: []float64{1e6, 2.5e6, 3}}, {Name: "b", Values: []float64{1, 1, 1}, Hi: []float64{1, 1, 2.6e6}, Lo: []float64{1, 1, 1}}}, 2.6e6},
	} {
		c := BarChart{Title: tc.name, Categories: []string{"x", "y", "z"}, Series: tc.series}
		if err := CheckBars(c); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		p, err := c.Plot()
		if err != nil {
			t.Fatal(err)
		}
		if p.Y.Max < tc.top*(1+headroom/2) || p.Y.Min > 0 {
			t.Errorf("%s: y axis %g to %g, want 0 to above %g", tc.name, p.Y.Min, p.Y.Max, tc.top)
		}
	}
	bad := BarChart{Categories: []string{"x"}, Series: []BarSeries{{Name: "a", Values: []float64{1}, Hi: []float64{1, 2}}}}
	if _, err := bad.Plot(); err == nil {
		t.Error("ranges of the wrong length accepted")
	}
}

// The legend goes right of the data: its text starts right of the
// x axis' last tick label.
func TestLegendOutsideTheData(t *testing.T) {
	p := NewPlot("legend", "x", "y")
	if err := SeriesStyle(0).AddLine(p, "the series", plotter.XYs{{X: 0, Y: 0}, {X: 10, Y: 10}}); err != nil {
		t.Fatal(err)
	}
	p.X.Min, p.X.Max = 0, 10
	p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 10, Label: "TEN"}})
	path := filepath.Join(t.TempDir(), "l.png")
	if err := SavePlots(path, 600, 300, []*plot.Plot{p}); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(SVGPath(path))
	if err != nil {
		t.Fatal(err)
	}
	x := func(text string) float64 {
		m := regexp.MustCompile(`<text x="([0-9.e+-]+)"[^>]*>` + text + `</text>`).FindSubmatch(svg)
		if m == nil {
			t.Fatalf("no text %q in the SVG", text)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	if tick, legend := x("TEN"), x("the series"); legend <= tick {
		t.Errorf("legend text at x=%g, the last tick label at %g: want the legend right of the data", legend, tick)
	}
}

// Every kind of a trace's events has a style of its own in a timeline,
// in the palette (or Grey, for the background).
func TestKindStylesDistinct(t *testing.T) {
	seen := map[string]trace.Kind{}
	for k := trace.Kind(1); !strings.HasPrefix(k.String(), "kind("); k++ {
		col, shape := kindStyle(k)
		c := nrgba(col)
		if !InPalette(c) && col != Grey {
			t.Errorf("%s: %v outside the palette", k, col)
		}
		key := fmt.Sprintf("%v %T", c, shape)
		if other, ok := seen[key]; ok {
			t.Errorf("%s and %s drawn alike (%s)", k, other, key)
		}
		seen[key] = k
	}
	if len(seen) < 20 {
		t.Errorf("only %d kinds", len(seen))
	}
}

// A logarithmic axis' label does not squeeze its plot: the data reach
// up to the title, as on a linear axis.
func TestLogAxisLabelRoom(t *testing.T) {
	for _, tc := range []struct{ min, max, x, want float64 }{
		{1, 100, 10, 0.5}, {1, 100, 50.5, 0.5}, {1, 1000, 100, 2.0 / 3}, {0.001, 0.1, 0.01, 0.5},
	} {
		if got := (LogScale{}).Normalize(tc.min, tc.max, tc.x); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Normalize(%g, %g, %g) = %g, want %g", tc.min, tc.max, tc.x, got, tc.want)
		}
	}
	lin := LineChart{Title: "t", XLabel: "x", YLabel: "a long label on the y axis, as long as some are", Series: []Series{{Name: "s", X: []float64{1, 2, 3}, Y: []float64{0.001, 0.1, 0.9}}}}
	log := lin
	log.LogX, log.LogY = true, true
	c := draw.New(sized{nil, 800, 400})
	var tops []float64
	for _, ch := range []LineChart{lin, log} {
		p, err := ch.Plot()
		if err != nil {
			t.Fatal(err)
		}
		tops = append(tops, float64(p.DataCanvas(c).Max.Y))
	}
	if tops[1] < tops[0]-1 {
		t.Errorf("the data reach up to %g on logarithmic axes, %g on linear ones", tops[1], tops[0])
	}
}
