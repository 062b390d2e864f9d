package rnpfrate

import (
	"cmp"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/exp/runner"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/internal/exp/rnrsweep"
)

func rcConfig(t *testing.T) Config {
	t.Helper()
	c := Config{Transport: TransportRC, Env: runner.Env{LogDir: "logs"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRCPointsAndOrder: the RC half interleaves like the Ethernet half:
// rnr and drop swap places every round, rate 0 comes first in every
// session, the other rates go up on odd rounds and down on even ones,
// minor faults before major.
func TestRCPointsAndOrder(t *testing.T) {
	c := rcConfig(t)
	for round, want := range map[int][]string{1: {"rnr", "drop"}, 2: {"drop", "rnr"}, 3: {"rnr", "drop"}} {
		if got := c.policyOrder(round); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", round, got, want)
		}
	}
	c.Rates = []float64{0.1, 0, 1e-3}
	want := []Point{{"rnr", "", 0, ""}, {"rnr", "minor", 1000, ""}, {"rnr", "minor", 100000, ""}, {"rnr", "major", 1000, ""}, {"rnr", "major", 100000, ""}}
	if got := c.points("rnr", 1); !slices.Equal(got, want) {
		t.Errorf("rnr, round 1: %v, want %v", got, want)
	}
	want = []Point{{"drop", "", 0, ""}, {"drop", "minor", 100000, ""}, {"drop", "minor", 1000, ""}, {"drop", "major", 100000, ""}, {"drop", "major", 1000, ""}}
	if got := c.points("drop", 2); !slices.Equal(got, want) {
		t.Errorf("drop, round 2: %v, want %v", got, want)
	}
	c.Faults = []string{"major"}
	if got := c.points("drop", 1); !slices.Equal(got, []Point{{"drop", "", 0, ""}, {"drop", "major", 1000, ""}, {"drop", "major", 100000, ""}}) {
		t.Errorf("major only: %v", got)
	}
	// A session is asked to run far longer than its windows take.
	if d := c.sessionTime(9); d < 9*c.Time+time.Minute {
		t.Errorf("a session of 9 windows of %v runs %v", c.Time, d)
	}
}

func TestRCCountersOf(t *testing.T) {
	npf0 := map[string]int64{"messages_in": 1000, "odp_rnpf_injected": 5, "odp_rnpf_skipped": 1, "responder_faults": 7,
		"rnr_naks_fault": 7, "fault_drops": 0, "page_request_errors": 0, "odp_fault_errors": 0}
	npf1 := map[string]int64{"messages_in": 11000, "odp_rnpf_injected": 15, "odp_rnpf_skipped": 3, "responder_faults": 18,
		"rnr_naks_fault": 19, "fault_drops": 2, "rnr_naks_no_wqe": 1, "page_request_errors": 1, "odp_fault_errors": 2}
	rxe0 := map[string]int64{"rcvd_rnr_err": 100, "completer_retry_err": 3, "retry_exceeded_err": 0}
	rxe1 := map[string]int64{"rcvd_rnr_err": 111, "completer_retry_err": 5, "retry_exceeded_err": 1, "retry_rnr_exceeded_err": 1}
	k := RCCountersOf(npf0, npf1, rxe0, rxe1, SenderRxe)
	want := RCCounters{Messages: 10000, Injected: 10, Skipped: 2, Faults: 11, RNRNaks: 12, FaultDrops: 2, NoWQENaks: 1, FaultErrors: 3,
		SenderRNR: 11, SenderRetries: 2, SenderRetryExceeded: 2}
	if k != want {
		t.Errorf("RCCountersOf = %+v, want %+v", k, want)
	}
	if r := k.Rate(); r != 1000 {
		t.Errorf("rate %g ppm, want 1000", r)
	}
	// A counter that went backwards (the device reset) counts from 0.
	if k := RCCountersOf(npf1, npf0, nil, nil, SenderRxe); k.Messages != 1000 || k.Injected != 5 {
		t.Errorf("after a reset: %+v", k)
	}
	// A sending npfnic counts under its own names.
	snd0 := map[string]int64{"rnr_naks_rcvd": 4, "ack_timeouts": 1, "rcvd_rnr_err": 1000}
	snd1 := map[string]int64{"rnr_naks_rcvd": 30, "ack_timeouts": 2, "rcvd_rnr_err": 2000}
	if k := RCCountersOf(npf0, npf1, snd0, snd1, SenderNPFNIC); k.SenderRNR != 26 || k.SenderRetries != 1 || k.SenderRetryExceeded != 0 {
		t.Errorf("npfnic sender: %+v", k)
	}
	if (RCCounters{}).Rate() != 0 {
		t.Error("a rate without messages")
	}
	r := RCResult{MsgSize: 1024, Seconds: 2, Counters: RCCounters{Messages: 20000}}
	if r.MsgsPerSec() != 10000 || math.Abs(r.MBps()-10.24) > 1e-9 {
		t.Errorf("%g messages/s, %g MB/s", r.MsgsPerSec(), r.MBps())
	}
	r.Err = errors.New("x")
	if r.MBps() != 0 {
		t.Error("a failed window has a throughput")
	}
}

// rcRun builds one successful window of 10 s of 1 KiB messages.
func rcRun(p Point, round int, mps float64, injected int64) RCResult {
	msgs := int64(mps * 10)
	k := RCCounters{Messages: msgs, Injected: injected, Faults: injected}
	if p.Policy == "rnr" {
		k.RNRNaks, k.SenderRNR = injected, injected
	} else {
		k.FaultDrops, k.SenderRetries = injected, injected
	}
	return RCResult{Point: p, Round: round, MsgSize: 1000, Seconds: 10, Counters: k}
}

// rcSweep is three rounds in which drop collapses with the rate and RNR
// less so.
func rcSweep() []RCResult {
	var rs []RCResult
	for round := 1; round <= 3; round++ {
		d := float64(round) * 100 // spread between rounds
		rs = append(rs,
			rcRun(Point{"rnr", "", 0, SenderRxe}, round, 15000+d, 0),
			rcRun(Point{"rnr", "minor", 10000, SenderRxe}, round, 10000+d, 600),
			rcRun(Point{"rnr", "minor", 100000, SenderRxe}, round, 8000+d, 700),
			rcRun(Point{"drop", "", 0, SenderRxe}, round, 14000+d, 0),
			rcRun(Point{"drop", "minor", 10000, SenderRxe}, round, 1500+d, 150),
			rcRun(Point{"drop", "minor", 100000, SenderRxe}, round, 1000+d, 100),
		)
	}
	failed := rcRun(Point{"drop", "major", 10000, SenderRxe}, 1, 0, 0)
	failed.Err = errors.New("ib_send_bw ended")
	return append(rs, failed)
}

func TestSummarizeRC(t *testing.T) {
	sum := SummarizeRC(rcSweep())
	if len(sum.Cells) != 7 {
		t.Fatalf("%d cells, want 7", len(sum.Cells))
	}
	// The optimum pools rate 0 of both policies: 14.1 … 15.3 MB/s.
	opt := sum.Optima[SenderRxe]
	if len(sum.Optima) != 1 || opt.Runs != 6 || math.Abs(opt.MBps-(14.3+15.1)/2) > 1e-9 || opt.Lo != 14.1 || opt.Hi != 15.3 || opt.MsgsPerSec != 14700 {
		t.Errorf("optimum %+v", sum)
	}
	c, ok := findRC(sum.Cells, SenderRxe, "rnr", "minor", 10000)
	if !ok || c.MBps != 10.2 || c.Lo != 10.1 || c.Hi != 10.3 || c.Runs != 3 || c.MeasuredPPM != 600*1e6/102000 {
		t.Errorf("rnr 1%% minor: %+v", c)
	}
	if want := 10.2 / opt.MBps; math.Abs(c.Rel-want) > 1e-9 {
		t.Errorf("relative to the optimum %g, want %g", c.Rel, want)
	}
	// 102000 messages took 10 s instead of 102000/14700 s: the rest is
	// the cost of 600 faults.
	if want := (10 - 102000/14700.0) / 600 * 1e3; math.Abs(c.CostPerFault-want) > 1e-9 {
		t.Errorf("%g ms per fault, want %g", c.CostPerFault, want)
	}
	if z, ok := findRC(sum.Cells, SenderRxe, "drop", "major", 0); !ok || z.MBps != 14.2 || !math.IsNaN(z.CostPerFault) {
		t.Errorf("drop at rate 0: %+v, %v", z, ok)
	}
	if f, ok := findRC(sum.Cells, SenderRxe, "drop", "major", 10000); ok || f.Done() {
		t.Errorf("a cell whose only round failed counts as measured: %+v", f)
	}
}

func TestRCRatiosAndGoals(t *testing.T) {
	sum := SummarizeRC(rcSweep())
	ratios := RCRatios(sum.Cells)
	if len(ratios) != 5 || ratios[0].PPM != 0 || ratios[0].Fault != "" {
		t.Fatalf("ratios %+v", ratios)
	}
	byKey := map[[2]any]RCRatio{}
	for _, r := range ratios {
		byKey[[2]any{r.Fault, r.PPM}] = r
	}
	if r := byKey[[2]any{"minor", 10000}]; math.Abs(r.Ratio-10.2/1.7) > 1e-9 {
		t.Errorf("1%% minor: %+v", r)
	}
	if r := byKey[[2]any{"major", 10000}]; !math.IsNaN(r.Ratio) || !math.IsNaN(r.RNR) || !math.IsNaN(r.Drop) {
		t.Errorf("1%% major has no measurement: %+v", r)
	}
	goals := RCGoals(sum.Cells)
	byText := map[string]Goal{}
	for _, g := range goals {
		byText[g.Text] = g
	}
	if g := byText["rxe->npfnic, 1% minor: rnr / drop"]; !g.Met() || g.Min != 5 {
		t.Errorf("1%% minor: %+v", g)
	}
	if g := byText["rxe->npfnic, 10% minor: rnr / drop"]; !g.Measured || g.Min != 0 || math.Abs(g.Ratio-8.2/1.2) > 1e-9 {
		t.Errorf("10%% minor: %+v", g)
	}
	if g := byText["rxe->npfnic, 1% major: rnr / drop"]; g.Measured {
		t.Errorf("1%% major: %+v", g)
	}
	// RNR at 4x drop misses the goal.
	rs := rcSweep()
	for i := range rs {
		if rs[i].Point == (Point{"rnr", "minor", 10000, SenderRxe}) {
			rs[i].Counters.Messages = 6700*10 + int64(rs[i].Round-1)*1000
		}
	}
	if txt := GoalsText(RCGoals(SummarizeRC(rs).Cells)); !regexp.MustCompile(`rxe->npfnic, 1% minor: rnr / drop +4.00x, goal >= 5x: MISSED`).MatchString(txt) {
		t.Errorf("goals:\n%s", txt)
	}
}

// fakeSim is a small virtual-time sweep: RNR keeps most of the link, drop
// collapses.
func fakeSim() *Sim {
	c := rnrsweep.DefaultConfig()
	c.FaultRates = []float64{1e-3, 1e-2}
	s := &Sim{Config: c, Base: rnrsweep.Result{MBps: 3000}}
	for _, res := range c.Resolutions {
		for _, rec := range c.Recoveries {
			for _, rate := range c.FaultRates {
				mbps := 3000 * (1 - 10*rate)
				if rec == ibrc.FaultDrop {
					mbps = 3000 * 0.01 / (rate * 100)
				}
				s.Points = append(s.Points, rnrsweep.Result{FaultRate: rate, Resolution: res, Recovery: rec, MBps: mbps, Relative: mbps / 3000})
			}
		}
	}
	return s
}

func TestRCOutputs(t *testing.T) {
	c := rcConfig(t)
	results := rcSweep()
	table := RCTable(c, results)
	for _, want := range []string{
		"1024-byte SENDs", "≈ 67 ms", "at least 4 ms per RNR retry", "fault_delay_us = 10ms",
		"(10.10-10.30)", "optimum from rxe (every rate-0 window, both policies): 14.70 MB/s (14.10-15.30, 6 windows), 14700 messages/s",
		"6.00x", "MET", "round 1, rxe->npfnic drop major 0.01 failed: ib_send_bw ended",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	rows := RCCellsRows(SummarizeRC(results).Cells)
	if len(rows) != 7 || len(rows[0]) != len(RCCellsHeader()) {
		t.Fatalf("%d cell rows of %d columns", len(rows), len(rows[0]))
	}
	// Each cell carries RNR / drop at its fault kind and rate.
	for _, r := range rows {
		if r[1] == "rnr" && r[2] == "minor" && r[3] == "0.01" && !strings.HasPrefix(r[11], "6") {
			t.Errorf("rnr 1%% minor row: %q", r)
		}
	}
	if runs := RCRunsRows(results); len(runs) != len(results) || len(runs[0]) != len(RCRunsHeader()) || runs[len(runs)-1][len(RCRunsHeader())-1] != "ib_send_bw ended" {
		t.Errorf("runs rows: %q", runs)
	}
	dir := t.TempDir()
	files, err := WriteRCOutputs(dir, c, results, fakeSim())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 6 {
		t.Fatalf("files %v", files)
	}
	for _, name := range []string{"rnpf-rate-rc.png", "rnr-sim/rnr.png"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 400 {
			t.Errorf("%s is %v", name, b)
		}
	}
	// Without the sweep, the measurement alone.
	if err := SaveRCPlot(filepath.Join(dir, "alone.png"), c, SummarizeRC(results), nil); err != nil {
		t.Fatal(err)
	}
}

// rcSweepBoth is rcSweep from rxe and the same points from a second
// npfnic, whose RNR curve stays near its optimum.
func rcSweepBoth() []RCResult {
	rs := rcSweep()
	for round := 1; round <= 3; round++ {
		d := float64(round) * 100
		rs = append(rs,
			rcRun(Point{"rnr", "", 0, SenderNPFNIC}, round, 30000+d, 0),
			rcRun(Point{"rnr", "minor", 10000, SenderNPFNIC}, round, 27000+d, 3000),
			rcRun(Point{"drop", "", 0, SenderNPFNIC}, round, 31000+d, 0),
			rcRun(Point{"drop", "minor", 10000, SenderNPFNIC}, round, 1000+d, 100),
		)
	}
	return rs
}

// TestRCTwoSenders: each sender has its optimum, ratios and goal (20x
// for npfnic, 5x for rxe), and the table and figure show both.
func TestRCTwoSenders(t *testing.T) {
	sum := SummarizeRC(rcSweepBoth())
	if !slices.Equal(sum.Senders, []string{SenderRxe, SenderNPFNIC}) || math.Abs(sum.Optima[SenderNPFNIC].MBps-30.7) > 1e-9 || sum.Optima[SenderRxe].Runs != 6 {
		t.Fatalf("senders %v, optima %+v", sum.Senders, sum.Optima)
	}
	c, ok := findRC(sum.Cells, SenderNPFNIC, "rnr", "minor", 10000)
	if !ok || math.Abs(c.Rel-27.2/30.7) > 1e-9 {
		t.Errorf("npfnic rnr 1%%: %+v", c)
	}
	byText := map[string]Goal{}
	for _, g := range RCGoals(sum.Cells) {
		byText[g.Text] = g
	}
	if g := byText["npfnic->npfnic, 1% minor: rnr / drop"]; g.Min != 20 || !g.Met() || math.Abs(g.Ratio-27.2/1.2) > 1e-9 {
		t.Errorf("npfnic goal: %+v", g)
	}
	if g := byText["rxe->npfnic, 1% minor: rnr / drop"]; g.Min != 5 || !g.Met() {
		t.Errorf("rxe goal: %+v", g)
	}
	cfg := rcConfig(t)
	table := RCTable(cfg, rcSweepBoth())
	for _, want := range []string{"from npfnic and rxe into npfnic", "optimum from npfnic", "optimum from rxe", "npfnic->npfnic, 1% minor: rnr / drop"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	path := filepath.Join(cmp.Or(os.Getenv("NPFNIC_RNPF_TEST_DIR"), t.TempDir()), "two.png")
	if err := SaveRCPlot(path, cfg, sum, nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// Two panels stacked: twice the height of one.
	if b := img.Bounds(); b.Dy() < 1000 {
		t.Errorf("two senders' figure is %v", b)
	}
}
