package report

import (
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// What every figure of the experiments must be, for their tests.

// svgColour finds the colours an SVG of gonum's (vgsvg) draws with, and
// their opacity.
var svgColour = regexp.MustCompile(`(fill|stroke):#([0-9A-Fa-f]{6})(?:;(?:fill|stroke)-opacity:([0-9.eE+-]+))?`)

// FigureColours are the colours the SVG twin of the figure png draws
// with (black fills, vgsvg's default, are not written).
func FigureColours(png string) ([]color.NRGBA, error) {
	b, err := os.ReadFile(SVGPath(png))
	if err != nil {
		return nil, err
	}
	seen := map[color.NRGBA]bool{}
	var out []color.NRGBA
	for _, m := range svgColour.FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.ParseUint(m[2], 16, 32)
		c := color.NRGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), 0xff}
		if m[3] != "" {
			a, err := strconv.ParseFloat(m[3], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: opacity %q", SVGPath(png), m[3])
			}
			c.A = uint8(math.Round(a * 0xff))
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out, nil
}

// near: two 8-bit channels within rounding (vgsvg un-premultiplies a
// faded colour with truncation).
func near(a, b uint8) bool { d := int(a) - int(b); return d >= -2 && d <= 2 }

// Allowed reports whether c is a colour a figure may draw with: one of
// the palette's, opaque or faded (a range), Grey, the grid's, black or
// white.
func Allowed(c color.NRGBA) bool {
	ok := append(append([]color.Color{}, Palette...), Grey, gridGrey, color.Black, color.White)
	for _, a := range ok {
		r, g, b, _ := a.RGBA()
		if near(c.R, uint8(r>>8)) && near(c.G, uint8(g>>8)) && near(c.B, uint8(b>>8)) {
			return true
		}
	}
	return false
}

// InPalette reports whether c is one of Palette's colours (perhaps
// faded).
func InPalette(c color.NRGBA) bool {
	for _, a := range Palette {
		r, g, b, _ := a.RGBA()
		if near(c.R, uint8(r>>8)) && near(c.G, uint8(g>>8)) && near(c.B, uint8(b>>8)) {
			return true
		}
	}
	return false
}

// CheckFigures checks every PNG among an experiment's output files with
// CheckFigure and returns how many there were.
func CheckFigures(files []string) (figures int, err error) {
	var errs []error
	for _, f := range files {
		if strings.HasSuffix(f, ".png") {
			figures++
			errs = append(errs, CheckFigure(f))
		}
	}
	return figures, errors.Join(errs...)
}

// CheckFigure checks a figure the experiments wrote: the PNG at path
// decodes, its SVG twin is beside it, and the SVG draws with the palette
// only (Allowed), with at least one of its colours (a series).
func CheckFigure(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	cs, err := FigureColours(path)
	if err != nil {
		return err
	}
	var bad []string
	series := false
	for _, c := range cs {
		if !Allowed(c) {
			bad = append(bad, fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B))
		}
		series = series || InPalette(c) && (c.R|c.G|c.B) != 0
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: colours outside the palette: %s", SVGPath(path), strings.Join(bad, ", "))
	}
	if !series {
		return fmt.Errorf("%s: no colour of the palette: no series drawn?", SVGPath(path))
	}
	return nil
}

// CheckBars checks that no bar of c, nor its range, reaches the top of
// its y axis.
func CheckBars(c BarChart) error {
	p, err := c.Plot()
	if err != nil {
		return err
	}
	top := math.Inf(-1)
	for _, s := range c.Series {
		for _, v := range append(append(append([]float64{}, s.Values...), s.Hi...), s.Lo...) {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				top = math.Max(top, v)
			}
		}
	}
	if math.IsInf(top, -1) {
		return errors.New("report: no bar")
	}
	if top > 0 && p.Y.Max <= top {
		return fmt.Errorf("report: %q: y axis up to %g, its highest bar or range reaches %g", c.Title, p.Y.Max, top)
	}
	return nil
}
