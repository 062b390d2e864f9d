package report

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Every figure of the experiments draws its series with the styles
// defined here, so that they read alike and read without colour: a
// colour-blind-safe palette, and for each series a marker and a dash
// pattern of its own as well as a colour.

// Palette is Okabe and Ito's colour-blind-safe palette ("Color Universal
// Design", 2002) less its yellow, too pale on white for a line: blue,
// vermillion, bluish green, orange, reddish purple, sky blue, black.
// No data series is drawn in any other colour (CheckFigure).
var Palette = []color.Color{
	color.RGBA{0x00, 0x72, 0xb2, 0xff}, // blue
	color.RGBA{0xd5, 0x5e, 0x00, 0xff}, // vermillion
	color.RGBA{0x00, 0x9e, 0x73, 0xff}, // bluish green
	color.RGBA{0xe6, 0x9f, 0x00, 0xff}, // orange
	color.RGBA{0xcc, 0x79, 0xa7, 0xff}, // reddish purple
	color.RGBA{0x56, 0xb4, 0xe9, 0xff}, // sky blue
	color.RGBA{0x00, 0x00, 0x00, 0xff}, // black
}

// Grey draws what is not a measurement: references (a cap, a goal, an
// optimum) and the background events of a timeline.
var Grey color.Color = color.RGBA{0x77, 0x77, 0x77, 0xff}

// gridGrey is the grid's colour.
var gridGrey color.Color = color.Gray{Y: 0xdd}

// Color is the i-th colour of the palette.
func Color(i int) color.Color { return Palette[i%len(Palette)] }

// Faded is c at a quarter of its opacity: the fill of a range (the
// rounds' min-max) around a line drawn in c.
func Faded(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	return color.NRGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0x40}
}

// Shapes are the markers of series in order: filled ones first, then
// hollow ones and strokes. Hollow gives a filled marker's outline.
var Shapes = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}, draw.CrossGlyph{},
	draw.RingGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PlusGlyph{},
}

// Hollow is the outline of a filled marker (circle, box, pyramid), for a
// variant of the series it marks; other markers are returned as they are.
func Hollow(g draw.GlyphDrawer) draw.GlyphDrawer {
	switch g.(type) {
	case draw.CircleGlyph:
		return draw.RingGlyph{}
	case draw.BoxGlyph:
		return draw.SquareGlyph{}
	case draw.PyramidGlyph:
		return draw.TriangleGlyph{}
	}
	return g
}

// Dash patterns of series lines, in order: solid, dashed, dotted,
// dash-dotted.
var (
	Solid   []vg.Length
	Dashed  = []vg.Length{vg.Points(6), vg.Points(3)}
	Dotted  = []vg.Length{vg.Points(1.5), vg.Points(2)}
	DashDot = []vg.Length{vg.Points(7), vg.Points(2.5), vg.Points(1.5), vg.Points(2.5)}
	dashes  = [][]vg.Length{Solid, Dashed, Dotted, DashDot}
)

// Style is how one series is drawn: its line's colour and dashes, its
// markers' shape.
type Style struct {
	Color  color.Color
	Shape  draw.GlyphDrawer
	Dashes []vg.Length
}

// SeriesStyle is the style of a figure's i-th series: the i-th colour,
// marker and dash pattern, so that any two of a figure's first seven
// series differ in all three.
func SeriesStyle(i int) Style {
	return Style{Color: Color(i), Shape: Shapes[i%len(Shapes)], Dashes: dashes[i%len(dashes)]}
}

// Line and marker sizes of every series.
const (
	lineWidth   = 1.6
	glyphRadius = 3
)

// Apply styles a series' line and markers (either may be nil).
func (s Style) Apply(l *plotter.Line, pts *plotter.Scatter) {
	if l != nil {
		l.Color, l.Width, l.Dashes = s.Color, vg.Points(lineWidth), s.Dashes
	}
	if pts != nil {
		pts.Color, pts.Shape, pts.Radius = s.Color, s.Shape, vg.Points(glyphRadius)
	}
}

// AddLine adds a series to p drawn in s through xys, with its markers,
// named in the legend (no entry for an empty name).
func (s Style) AddLine(p *plot.Plot, name string, xys plotter.XYer) error {
	l, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	s.Apply(l, pts)
	p.Add(l, pts)
	if name != "" {
		p.Legend.Add(name, l, pts)
	}
	return nil
}

// AddReference adds a grey line through xys (a cap, a goal, an optimum),
// named in the legend.
func AddReference(p *plot.Plot, name string, dashes []vg.Length, xys plotter.XYer) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color, l.Width, l.Dashes = Grey, vg.Points(1.3), dashes
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}

// LogScale is gonum's logarithmic scale for an axis, but with the axis'
// label placed where it is drawn. gonum sizes a plot around its axis
// labels as if each sat at the value halfway between the axis' ends
// (Norm(0.5*(Min+Max))), which on a logarithmic axis lies near its top
// or right end: a label's box then sticks out there and squeezes the
// data into part of the plot. This scale maps exactly that value to the
// middle, where the label is drawn; any other value, as LogScale does.
type LogScale struct{}

// Normalize implements plot.Normalizer.
func (LogScale) Normalize(min, max, x float64) float64 {
	if x == 0.5*(min+max) {
		return 0.5
	}
	return plot.LogScale{}.Normalize(min, max, x)
}
