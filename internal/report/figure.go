package report

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Figures are written twice: a PNG to look at, and the same drawing as
// SVG beside it (SVGPath), to scale or to put in a paper. Legends go
// outside the data, right of it, so that they never cover a point.

// dpi is the PNGs' resolution: a figure of width pixels is width/96
// inches wide in both files.
const dpi = 96

// SVGPath is the SVG twin of a figure's PNG path.
func SVGPath(png string) string { return strings.TrimSuffix(png, filepath.Ext(png)) + ".svg" }

// sized is a canvas with a size: the PNG and the SVG canvases drawn at
// once.
type sized struct {
	vg.Canvas
	w, h vg.Length
}

func (s sized) Size() (w, h vg.Length) { return s.w, s.h }

// SaveFigure draws a figure of width by height pixels with drawFig and
// writes it to path, a PNG, and to SVGPath(path) (creating the
// directory).
func SaveFigure(path string, width, height int, drawFig func(draw.Canvas) error) error {
	if !strings.EqualFold(filepath.Ext(path), ".png") {
		return fmt.Errorf("report: figure %s: want a .png path (its .svg goes beside it)", path)
	}
	if width <= 0 || height <= 0 {
		return fmt.Errorf("report: figure %s: %dx%d pixels", path, width, height)
	}
	w, h := vg.Length(width)*vg.Inch/dpi, vg.Length(height)*vg.Inch/dpi
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi))
	svg := vgsvg.New(w, h)
	// A white background in both (the PNG's is white already).
	dc := draw.New(sized{vg.MultiCanvas(img, svg), w, h})
	dc.SetColor(white)
	dc.Fill(dc.Rectangle.Path())
	if err := drawFig(dc); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := writeFile(path, vgimg.PngCanvas{Canvas: img}); err != nil {
		return err
	}
	return writeFile(SVGPath(path), svg)
}

func writeFile(path string, w io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// legendGap is the room between a plot and its legend.
var legendGap = vg.Points(10)

// LegendWidth is the room the widest legend of ps takes right of its
// plot (0 for none), for DrawPlot: stacked plots share one, so that their
// axes line up.
func LegendWidth(ps ...*plot.Plot) vg.Length {
	var w vg.Length
	for _, p := range ps {
		r := p.Legend.Rectangle(draw.Canvas{})
		if dx := r.Max.X - r.Min.X; dx > 0 {
			w = vg.Length(math.Max(float64(w), float64(dx+legendGap+vg.Points(4))))
		}
	}
	return w
}

// DrawPlot draws p into c with its legend outside the data: in the
// rightmost lw of c (LegendWidth, or more), its top level with the top of
// the data. skip is room left between the plot and the legend (for an
// axis drawn by hand there). It returns the canvas the plot took.
func DrawPlot(c draw.Canvas, p *plot.Plot, lw, skip vg.Length) draw.Canvas {
	pc := draw.Crop(c, 0, -(lw + skip), 0, 0)
	drawBeside(c, pc, p, lw)
	return pc
}

// drawBeside draws p into pc and its legend into the rightmost lw of c,
// from the top of p's data down. The title is centred over the plot,
// within c: a title wider than the plot may reach over the legend.
func drawBeside(c, pc draw.Canvas, p *plot.Plot, lw vg.Length) {
	legend, title := p.Legend, p.Title.Text
	p.Legend = plot.NewLegend()
	if title != "" {
		sty := p.Title.TextStyle
		h := sty.Rectangle(title).Size().Y + p.Title.Padding
		w := sty.Width(title)
		x := pc.Center().X
		x = max(x, c.Min.X+w/2)
		x = min(x, c.Max.X-w/2)
		c.FillText(sty, vg.Point{X: x, Y: pc.Max.Y + sty.FontExtents().Descent}, title)
		pc.Max.Y -= h
		c.Max.Y -= h
		p.Title.Text = ""
	}
	p.Draw(pc)
	top := p.DataCanvas(pc).Max.Y
	p.Legend, p.Title.Text = legend, title
	if lw > 0 {
		lc := c
		lc.Min.X = c.Max.X - lw + legendGap
		lc.Max.Y = top
		legend.Top, legend.Left, legend.XOffs, legend.YOffs = true, true, 0, 0
		if legend.Padding == 0 {
			legend.Padding = vg.Points(2)
		}
		legend.Draw(lc)
	}
}

// SavePlots draws gonum plots stacked vertically into a figure (SaveFigure)
// of width by height pixels per plot, each legend right of its plot.
func SavePlots(path string, width, height int, plots []*plot.Plot) error {
	if len(plots) == 0 {
		return errors.New("report: no plot")
	}
	return SaveFigure(path, width, height*len(plots), func(dc draw.Canvas) error {
		DrawStacked(dc, plots)
		return nil
	})
}

// DrawStacked draws plots stacked vertically into dc, their axes aligned
// and their legends right of them.
func DrawStacked(dc draw.Canvas, plots []*plot.Plot) {
	lw := LegendWidth(plots...)
	grid := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		grid[i] = []*plot.Plot{p}
	}
	// Aligned as if there were no legend, then drawn with one: every
	// tile loses the same width.
	legends := make([]plot.Legend, len(plots))
	for i, p := range plots {
		legends[i] = p.Legend
		p.Legend = plot.NewLegend()
	}
	t := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10), PadY: vg.Points(14)}
	canv := plot.Align(grid, t, draw.Crop(dc, 0, -lw, 0, 0))
	for i, p := range plots {
		p.Legend = legends[i]
		// The legends line up at the right of the figure.
		c := canv[i][0]
		c.Min.X, c.Max.X = dc.Min.X, dc.Max.X
		drawBeside(c, canv[i][0], p, lw)
	}
}
