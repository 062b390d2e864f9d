package report

import (
	"fmt"
	"image/color"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/npfnic/npfnic/vdevice/trace"
)

// FaultTimeline draws one page fault from a device trace (trace.Timelines)
// as a picture a person can read without a trace viewer: one row per track
// (queue pair directions, ATS, PRI, interrupts, the backup ring), every
// event of the device around the fault as a mark on its row, walks as bars,
// and the fault's stages as labelled vertical lines. The top panel shows
// the whole fault, from detection until the device used the buffer; the
// bottom one zooms into the device's own share, detection to interrupt.
func FaultTimeline(path, title string, events []trace.Event, tl trace.Timeline) error {
	return FaultStages(path, title, events, tl.Stages(), trace.StageNames, 2)
}

// FaultStages is FaultTimeline for any list of stages: stages are a
// fault's events in order, the first its detection (a zero Kind is a stage
// not found), names name them, and the zoomed panel runs from the first to
// stages[share] (the interrupt that ends the device's share). An RC fault
// draws its trace.RCTimeline this way, with its RNR NAK and retransmission.
func FaultStages(path, title string, events, stages []trace.Event, names []string, share int) error {
	if len(stages) == 0 || stages[0].Kind == 0 {
		return fmt.Errorf("report: timeline without a fault")
	}
	if len(names) != len(stages) || share < 1 || share >= len(stages) {
		return fmt.Errorf("report: %d stages, %d names, share %d", len(stages), len(names), share)
	}
	fault := stages[0]
	end := fault.TS
	for _, s := range stages {
		if s.Kind != 0 {
			end = max(end, s.TS)
		}
	}
	span := max(end-fault.TS, 10_000)
	whole, err := timelinePlot(title+": the whole fault", events, stages, names, fault.TS-span/10, end+span/10)
	if err != nil {
		return err
	}
	shareEnd := fault.TS + 5_000
	if stages[share].Kind != 0 {
		shareEnd = max(stages[share].TS, fault.TS+1_000)
	}
	zspan := shareEnd - fault.TS
	zoom, err := timelinePlot("the device's share: fault detected to "+names[share], events, stages, names, fault.TS-zspan/4, shareEnd+zspan/4)
	if err != nil {
		return err
	}
	return SavePlots(path, 1100, 420, []*plot.Plot{whole, zoom})
}

// kindStyle gives each kind of event a colour of the palette and a
// shape, the same in every picture, no two kinds alike: the fault's own
// stages in vermillion, orange, reddish purple and bluish green, the
// datapath in blue and sky blue, the queues' own work in black,
// translation in grey (background).
func kindStyle(k trace.Kind) (color.Color, draw.GlyphDrawer) {
	var (
		blue, vermillion, green, orange = Palette[0], Palette[1], Palette[2], Palette[3]
		purple, sky, black              = Palette[4], Palette[5], Palette[6]
	)
	switch k {
	case trace.Fault:
		return vermillion, draw.CircleGlyph{}
	case trace.RxDrop:
		return vermillion, draw.CrossGlyph{}
	case trace.PageRequest:
		return orange, draw.BoxGlyph{}
	case trace.IRQ:
		return purple, draw.PyramidGlyph{}
	case trace.IRQDeferred:
		return purple, draw.TriangleGlyph{}
	case trace.PageResponse:
		return green, draw.BoxGlyph{}
	case trace.RxFrame:
		return blue, draw.CircleGlyph{}
	case trace.TxFrame:
		return blue, draw.PyramidGlyph{}
	case trace.DMAWrite:
		return sky, draw.PlusGlyph{}
	case trace.DMARead:
		return sky, draw.CrossGlyph{}
	case trace.ATCHit:
		return Grey, draw.CircleGlyph{}
	case trace.ATCMiss:
		return Grey, draw.RingGlyph{}
	case trace.Walk:
		return Grey, draw.BoxGlyph{}
	case trace.Doorbell:
		return black, draw.PyramidGlyph{}
	case trace.DescFetch:
		return black, draw.BoxGlyph{}
	case trace.BackupStore:
		return green, draw.SquareGlyph{}
	case trace.BackupResolve:
		return green, draw.RingGlyph{}
	case trace.Invalidate:
		return black, draw.CrossGlyph{}
	case trace.InvalidateDone:
		return black, draw.PlusGlyph{}
	case trace.RDMAEvent:
		return purple, draw.CircleGlyph{}
	case trace.RCRx:
		return blue, draw.RingGlyph{}
	case trace.RCTx:
		return sky, draw.TriangleGlyph{}
	case trace.RCResume:
		return green, draw.CircleGlyph{}
	case trace.CQE:
		return black, draw.CircleGlyph{}
	}
	return black, draw.RingGlyph{}
}

func timelinePlot(title string, events, stages []trace.Event, names []string, from, to int64) (*plot.Plot, error) {
	p := newPlot(title, "µs since the fault was detected", "")
	us := func(ts int64) float64 { return float64(ts-stages[0].TS) / 1000 }

	var in []trace.Event
	rows := map[trace.Track]bool{}
	for _, e := range events {
		if e.TS+e.Dur >= from && e.TS <= to {
			in = append(in, e)
			rows[e.Track] = true
		}
	}
	order := make([]trace.Track, 0, len(rows))
	for t := range rows {
		order = append(order, t)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	rowOf := map[trace.Track]float64{}
	trackNames := make([]string, len(order))
	for i, t := range order {
		rowOf[t] = float64(i)
		trackNames[i] = t.Name()
	}

	byKind := map[trace.Kind]plotter.XYs{}
	var kinds []trace.Kind
	for _, e := range in {
		y := rowOf[e.Track]
		if e.Dur > 0 {
			bar, err := plotter.NewLine(plotter.XYs{{X: us(e.TS), Y: y}, {X: us(e.TS + e.Dur), Y: y}})
			if err != nil {
				return nil, err
			}
			bar.Color, _ = kindStyle(e.Kind)
			bar.Width = vg.Points(6)
			p.Add(bar)
		}
		if _, ok := byKind[e.Kind]; !ok {
			kinds = append(kinds, e.Kind)
		}
		byKind[e.Kind] = append(byKind[e.Kind], plotter.XY{X: us(e.TS), Y: y})
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	for _, k := range kinds {
		s, err := plotter.NewScatter(byKind[k])
		if err != nil {
			return nil, err
		}
		s.Color, s.Shape = kindStyle(k)
		s.Radius = vg.Points(3.5)
		p.Add(s)
		p.Legend.Add(k.String(), s)
	}

	// The stages: a dashed line each, named at the top.
	top := float64(len(order)) - 0.4
	var labels plotter.XYLabels
	// A label goes one step lower than those too close on its left.
	type placed struct {
		x     float64
		level int
	}
	var done []placed
	near := 0.2 * (us(to) - us(from))
	for i, st := range stages {
		if st.Kind == 0 || st.TS < from || st.TS > to {
			continue
		}
		x := us(st.TS)
		level := 0
		for taken := true; taken; {
			taken = false
			for _, d := range done {
				if d.level == level && x-d.x < near {
					taken, level = true, level+1
					break
				}
			}
		}
		done = append(done, placed{x, level})
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: -0.5}, {X: x, Y: top}})
		if err != nil {
			return nil, err
		}
		l.Color = Grey
		l.Dashes = Dashed
		p.Add(l)
		labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: top - 0.22*float64(level)})
		labels.Labels = append(labels.Labels, fmt.Sprintf("%s +%.1f µs", names[i], x))
	}
	if len(labels.XYs) > 0 {
		l, err := plotter.NewLabels(labels)
		if err != nil {
			return nil, err
		}
		for i := range l.TextStyle {
			l.TextStyle[i].Font.Size = vg.Points(9)
		}
		p.Add(l)
	}
	p.NominalY(trackNames...)
	p.Y.Min, p.Y.Max = -0.6, float64(len(order))-0.1
	// Room on the right for the labels of the last stages.
	p.X.Min, p.X.Max = us(from), us(to)+0.15*(us(to)-us(from))
	return p, nil
}
