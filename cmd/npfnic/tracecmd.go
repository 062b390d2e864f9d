package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// runTrace implements `npfnic trace FILE`: it reads a device trace
// (-trace of serve, boot and the experiments), pairs every page request
// with its fault, interrupt, response and resume (trace.Timelines; for RC
// receive faults trace.RCTimelines, with the RNR NAK and the
// retransmission), prints the stage latencies over all of them and one
// fault's stages, and draws that fault as a PNG.
func runTrace(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("npfnic trace", flag.ContinueOnError)
	out := fs.String("out", "", "draw the chosen fault's timeline into this PNG, and an SVG beside it (default: FILE with .png)")
	pick := fs.String("fault", "median", "which fault to draw: median (the round trip nearest the median), slowest, first, or its number in the list")
	vector := fs.Int("prq-vector", hw.PRQVectorDefault, "the MSI-X vector page requests are announced on (the driver's PRQ_VECTOR)")
	dir := fs.String("dir", "", "only faults of Ethernet RX buffers (rx), TX buffers (tx), or RC receive faults (rc); default rx and tx, or rc when the trace has no Ethernet fault")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic trace [flags] FILE\n\n"+
			"Reads a device trace written by -trace (npfnic serve, boot, exp ...), finds every page\n"+
			"fault's stages (detected, page request queued, interrupt raised, page response, resumed;\n"+
			"for RC receive faults also the RNR NAK and the retransmission received and accepted),\n"+
			"prints their latencies (p50/p99) and one fault's timeline, and draws that fault as a PNG.\n"+
			"The trace itself opens in Perfetto (ui.perfetto.dev) or chrome://tracing.\n\n")
		fs.PrintDefaults()
	}
	files, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch len(files) {
	case 0:
		return usageErrorf("no trace file named: npfnic trace [flags] FILE")
	case 1:
	default:
		return usageErrorf("want one trace file, got %d: %q", len(files), files)
	}
	if *out != "" {
		if err := checkOutFile("-out", *out); err != nil {
			return err
		}
	}
	if *dir != "" && *dir != "rx" && *dir != "tx" && *dir != "rc" {
		return usageErrorf("-dir %q: want rx, tx or rc", *dir)
	}
	if *pick != "median" && *pick != "slowest" && *pick != "first" {
		if n, err := strconv.Atoi(*pick); err != nil || n < 1 {
			return usageErrorf("-fault %q: want median, slowest, first or a fault's number (1, 2, ...)", *pick)
		}
	}
	path := files[0]
	events, lost, err := trace.ReadFile(path)
	if err != nil {
		return err
	}
	counts := map[trace.Kind]int{}
	for _, e := range events {
		counts[e.Kind]++
	}
	fmt.Printf("%s: %d events", path, len(events))
	if lost > 0 {
		fmt.Printf(" (%d older ones overwritten)", lost)
	}
	fmt.Println()
	var kinds []string
	for k, n := range counts {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	fmt.Printf("  %s\n", strings.Join(kinds, ", "))
	if a := trace.CountAccesses(events); a.RxFrames+a.TxFrames > 0 {
		fmt.Printf("  per 1000 Ethernet frames (%d received, %d sent): %.2f BAR reads, %.1f doorbells, %.1f interrupts\n",
			a.RxFrames, a.TxFrames, a.PerThousandFrames(a.BARReads), a.PerThousandFrames(a.Doorbells), a.PerThousandFrames(a.IRQs))
	}

	var complete []trace.Timeline
	if *dir != "rc" {
		for _, tl := range trace.Timelines(events, uint64(*vector)) {
			if tl.Complete() && tl.Fault.Track != trace.TrackRC && (*dir == "" || strings.HasSuffix(tl.Fault.Track.Name(), " "+*dir)) {
				complete = append(complete, tl)
			}
		}
	}
	if len(complete) == 0 && *dir == "" || *dir == "rc" {
		if rc := completeRC(events, uint64(*vector)); len(rc) > 0 || *dir == "rc" {
			return traceRC(rc, events, *pick, *out, path)
		}
	}
	if len(complete) == 0 {
		return errors.New("no complete fault in the trace (fault, page request, interrupt, response and resume)")
	}
	fmt.Printf("\n%d faults with every stage; µs between stages (the resume of a frame the backup ring saved\n"+
		"may come before the page response, as the driver resolves it first):\n\n", len(complete))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tp50\tp99\tmax\t")
	for i := 1; i < len(trace.StageNames); i++ {
		d := stageDeltas(complete, i-1, i)
		fmt.Fprintf(tw, "%s → %s\t%.1f\t%.1f\t%.1f\t\n", trace.StageNames[i-1], trace.StageNames[i],
			quantile(d, 0.5), quantile(d, 0.99), quantile(d, 1))
	}
	share := stageDeltas(complete, 0, 2)
	fmt.Fprintf(tw, "the device's share, %s → %s\t%.1f\t%.1f\t%.1f\t\n", trace.StageNames[0], trace.StageNames[2],
		quantile(share, 0.5), quantile(share, 0.99), quantile(share, 1))
	tw.Flush()

	tl, n, err := pickFault(complete, *pick)
	if err != nil {
		return err
	}
	fmt.Printf("\nfault %d of %d (%s): %s at VA %#x, descriptor %d\n", n, len(complete), *pick, tl.Fault.Track.Name(), tl.Fault.A, tl.Fault.B)
	for i, s := range tl.Stages() {
		fmt.Printf("  %+10.1f µs  %s (%s)\n", float64(s.TS-tl.Fault.TS)/1000, trace.StageNames[i], s.Kind)
	}
	png := *out
	if png == "" {
		png = strings.TrimSuffix(path, ".json") + ".png"
	}
	title := fmt.Sprintf("npfnic: one page fault (%s, descriptor %d)", tl.Fault.Track.Name(), tl.Fault.B)
	if err := report.FaultTimeline(png, title, events, tl); err != nil {
		return err
	}
	fmt.Printf("\nwrote %s and %s\n", png, report.SVGPath(png))
	return nil
}

// stageDeltas is the time from stage a to stage b of every timeline, in µs.
func stageDeltas(tls []trace.Timeline, a, b int) []float64 {
	d := make([]float64, len(tls))
	for i, tl := range tls {
		st := tl.Stages()
		d[i] = float64(st[b].TS-st[a].TS) / 1000
	}
	sort.Float64s(d)
	return d
}

// quantile of sorted xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(q*float64(len(xs)) + 0.5)
	return xs[min(max(i-1, 0), len(xs)-1)]
}

// pickFault chooses the fault to draw; n counts from 1.
func pickFault(tls []trace.Timeline, how string) (trace.Timeline, int, error) {
	roundTrip := func(tl trace.Timeline) int64 { return tl.Resume.TS - tl.Fault.TS }
	switch how {
	case "first":
		return tls[0], 1, nil
	case "slowest", "median":
		idx := make([]int, len(tls))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return roundTrip(tls[idx[a]]) < roundTrip(tls[idx[b]]) })
		i := idx[len(idx)-1]
		if how == "median" {
			i = idx[(len(idx)-1)/2]
		}
		return tls[i], i + 1, nil
	}
	var n int
	if _, err := fmt.Sscanf(how, "%d", &n); err != nil || n < 1 || n > len(tls) {
		return trace.Timeline{}, 0, fmt.Errorf("-fault %q: want median, slowest, first or 1..%d", how, len(tls))
	}
	return tls[n-1], n, nil
}

// completeRC are the RC receive faults of events whose every stage was
// found but the RNR NAK (none under the drop policy).
func completeRC(events []trace.Event, vector uint64) []trace.RCTimeline {
	var out []trace.RCTimeline
	for _, tl := range trace.RCTimelines(events, vector) {
		complete := tl.Responder && !tl.Refaulted
		for i, s := range tl.Stages() {
			if s.Kind == 0 && trace.RCStageNames[i] != "RNR NAK sent" {
				complete = false
			}
		}
		if complete {
			out = append(out, tl)
		}
	}
	return out
}

// traceRC is runTrace for RC receive faults: their stages, one fault's
// timeline and its picture.
func traceRC(tls []trace.RCTimeline, events []trace.Event, pick, out, path string) error {
	if len(tls) == 0 {
		return errors.New("no complete RC receive fault in the trace (fault, page request, interrupt, response, retransmission received and accepted)")
	}
	fmt.Printf("\n%d RC receive faults with every stage; µs between stages (no RNR NAK under the drop policy):\n\n", len(tls))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tn\tp50\tp99\tmax\t")
	deltas := func(a, b int) []float64 {
		var d []float64
		for _, tl := range tls {
			st := tl.Stages()
			if st[a].Kind != 0 && st[b].Kind != 0 {
				d = append(d, float64(st[b].TS-st[a].TS)/1000)
			}
		}
		sort.Float64s(d)
		return d
	}
	row := func(name string, d []float64) {
		if len(d) > 0 {
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t\n", name, len(d), quantile(d, 0.5), quantile(d, 0.99), quantile(d, 1))
		}
	}
	names := trace.RCStageNames
	for i := 1; i < len(names); i++ {
		from := i - 1
		if from == 1 && len(deltas(0, 1)) == 0 { // no NAK: from the fault
			from = 0
		}
		row(names[from]+" → "+names[i], deltas(from, i))
	}
	row("the device's share, "+names[0]+" → "+names[3], deltas(0, 3))
	row("round trip, "+names[0]+" → "+names[4], deltas(0, 4))
	row("total, "+names[0]+" → "+names[6], deltas(0, 6))
	tw.Flush()

	generic := make([]trace.Timeline, len(tls))
	for i, tl := range tls {
		generic[i] = tl.Timeline()
	}
	_, n, err := pickFault(generic, pick)
	if err != nil {
		return err
	}
	tl := tls[n-1]
	fmt.Printf("\nfault %d of %d (%s): QPN %#x, PSN %#x, VA %#x; %d RNR NAKs, %d retransmissions before the page\n",
		n, len(tls), pick, tl.QPN, tl.PSN, tl.Fault.A, tl.NAKs, tl.Early)
	for i, s := range tl.Stages() {
		if s.Kind != 0 {
			fmt.Printf("  %+10.1f µs  %s (%s)\n", float64(s.TS-tl.Fault.TS)/1000, names[i], s.Kind)
		}
	}
	png := out
	if png == "" {
		png = strings.TrimSuffix(path, ".json") + ".png"
	}
	title := fmt.Sprintf("npfnic: one RC receive fault (QPN %#x, PSN %#x)", tl.QPN, tl.PSN)
	if err := report.FaultStages(png, title, events, tl.Stages(), names, 3); err != nil {
		return err
	}
	fmt.Printf("\nwrote %s and %s\n", png, report.SVGPath(png))
	return nil
}
