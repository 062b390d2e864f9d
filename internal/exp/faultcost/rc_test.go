package faultcost

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// rcTrace builds the device trace of n RC receive faults as npfnic's RDMA
// engine records them against an rxe sender: fault i at PSN 100+4i is
// detected at t0, NAKed after nak, queued after queue, interrupted 1 µs
// later, answered after resolve, retransmitted after wait and accepted 3 µs
// after that; the first also gets an early retransmission NAKed again.
func rcTrace(n int, nak, queue, resolve, wait func(i int) int64) []trace.Event {
	const qpn, peer = 0x10, 0x13
	var ev []trace.Event
	add := func(ts int64, k trace.Kind, tr trace.Track, a, b uint64) {
		ev = append(ev, trace.Event{TS: ts, Kind: k, Track: tr, A: a, B: b})
	}
	for i := range n {
		t0 := int64(i+1) * 1_000_000_000
		psn := uint64(100 + 4*i)
		page := uint64(0x7f00_0000_0000 + i*0x1000)
		add(t0-100, trace.RCRx, trace.TrackRC, qpn, 0x01<<24|psn)
		add(t0, trace.Fault, trace.TrackRC, page+0x400, trace.RCFaultB(qpn, uint32(psn), true))
		tNAK := t0 + nak(i)
		if nak(i) >= 0 {
			add(tNAK, trace.RCTx, trace.TrackRC, 0x2c<<32|peer, 0x11<<24|psn)
		} else {
			tNAK = t0
		}
		tq := tNAK + queue(i)
		add(tq, trace.PageRequest, trace.TrackPRI, uint64(i%64), page)
		add(tq+1_000, trace.IRQ, trace.TrackIRQ, hw.PRQVectorDefault, 0)
		if i == 0 {
			add(tq+1_500, trace.RCRx, trace.TrackRC, qpn, 0x01<<24|psn)
			if nak(i) >= 0 {
				add(tq+1_600, trace.RCTx, trace.TrackRC, 0x2c<<32|peer, 0x11<<24|psn)
			}
		}
		tr := tq + 1_000 + resolve(i)
		add(tr, trace.PageResponse, trace.TrackPRI, uint64(i%64), 0)
		tw := tr + wait(i)
		add(tw, trace.RCRx, trace.TrackRC, qpn, 0x01<<24|psn)
		add(tw+3_000, trace.RCResume, trace.TrackRC, qpn, psn)
	}
	return ev
}

func constant(d int64) func(int) int64 { return func(int) int64 { return d } }

// TestRCBreakdown: the stages come out of a synthetic trace as built, the
// round trip and the device's share as their sums, the NAKs and early
// retransmissions counted; under drop there is no NAK row and the queue
// stage starts at the fault.
func TestRCBreakdown(t *testing.T) {
	ev := rcTrace(100, constant(5_000), constant(2_000), func(i int) int64 { return int64(i+1) * 10_000 }, constant(8_000_000))
	faults := trace.RCTimelines(ev, hw.PRQVectorDefault)
	bd := NewRCBreakdown(faults)
	if bd.Receive != 100 || bd.Resumed != 100 || bd.Refaulted != 0 || bd.Unresolved != 0 || bd.NAKs != 101 || bd.MaxNAKs != 2 || bd.Early != 1 {
		t.Fatalf("counts: %+v", bd)
	}
	for _, tc := range []struct {
		row      int
		p50, max time.Duration
	}{
		{RCRowNAK, 5 * time.Microsecond, 5 * time.Microsecond},
		{RCRowQueue, 2 * time.Microsecond, 2 * time.Microsecond},
		{RCRowInterrupt, time.Microsecond, time.Microsecond},
		{RCRowResolve, 500 * time.Microsecond, time.Millisecond},
		{RCRowWait, 8 * time.Millisecond, 8 * time.Millisecond},
		{RCRowAccept, 3 * time.Microsecond, 3 * time.Microsecond},
		{RCRowDevice, 8 * time.Microsecond, 8 * time.Microsecond},
		{RCRowRoundTrip, 508 * time.Microsecond, 1008 * time.Microsecond},
		{RCRowTotal, 8511 * time.Microsecond, 9011 * time.Microsecond},
		{RCRowBackoff, 8503 * time.Microsecond, 9003 * time.Microsecond},
	} {
		if d := bd.Rows[tc.row]; d.N != 100 || d.P50 != tc.p50 || d.Max != tc.max {
			t.Errorf("%s: n %d p50 %v max %v, want 100, %v, %v", RCRowNames[tc.row][0], d.N, d.P50, d.Max, tc.p50, tc.max)
		}
	}

	drop := NewRCBreakdown(trace.RCTimelines(rcTrace(10, constant(-1), constant(7_000), constant(100_000), constant(60_000_000)), hw.PRQVectorDefault))
	if drop.Rows[RCRowNAK].N != 0 || drop.NAKs != 0 || drop.Rows[RCRowQueue].P50 != 7*time.Microsecond || drop.Rows[RCRowWait].P50 != 60*time.Millisecond {
		t.Errorf("drop: %+v", drop)
	}
	if RCRowApplies("drop", RCRowNAK) || RCRowApplies("drop", RCRowBackoff) || !RCRowApplies("drop", RCRowQueue) || !RCRowApplies("rnr", RCRowNAK) {
		t.Error("RCRowApplies")
	}
	if RCRowSpan("drop", RCRowQueue) != "detected -> page request queued" || RCRowSpan("rnr", RCRowQueue) != RCRowNames[RCRowQueue][1] {
		t.Error("RCRowSpan")
	}

	// A requester's fault is counted apart, a refault and an unresolved
	// fault are not resumed.
	mixed := append([]trace.RCTimeline{{Responder: false}, {Responder: true, Refaulted: true}, {Responder: true}}, faults[:2]...)
	if b := NewRCBreakdown(mixed); b.Faults != 5 || b.Requester != 1 || b.Receive != 4 || b.Resumed != 2 || b.Refaulted != 1 || b.Unresolved != 1 {
		t.Errorf("mixed: %+v", b)
	}
}

func TestRCRoundRatios(t *testing.T) {
	faults := trace.RCTimelines(rcTrace(4, constant(1_000), constant(1_000), constant(97_000), constant(1_000_000)), hw.PRQVectorDefault)
	rounds := []RCRound{
		{Faults: faults[:2], Echo: []time.Duration{50 * time.Microsecond}},
		{Faults: faults[2:], Echo: []time.Duration{25 * time.Microsecond}},
		{Faults: nil, Echo: []time.Duration{time.Microsecond}},
	}
	rs := RCRoundRatios(rounds)
	if len(rs) != 3 || rs[0].Ratio != 2 || rs[1].Ratio != 4 || !math.IsNaN(rs[2].Ratio) {
		t.Fatalf("%+v", rs)
	}
	if med, lo, hi, ok := RatioSummary(rs); !ok || med != 3 || lo != 2 || hi != 4 {
		t.Errorf("summary %v %v %v %v", med, lo, hi, ok)
	}
}

func TestRCConfigValidate(t *testing.T) {
	base := func() RCConfig { return RCConfig{Env: runner.Env{Images: &images.Artifacts{}, LogDir: "x"}} }
	c := base()
	if err := c.Validate(); err != nil || c.Policy != "rnr" || c.Traffic != RCTrafficCold || c.Size != DefaultRCSize ||
		c.Iters != DefaultRCIters || c.Cycles != DefaultRCCycles || c.Rounds != DefaultRounds || c.EchoGap != DefaultRCEchoGap || c.RatePPM != 0 {
		t.Fatalf("defaults: %v %+v", err, c)
	}
	c = base()
	c.Traffic = RCTrafficRNPF
	if err := c.Validate(); err != nil || c.RatePPM != DefaultRCRatePPM || c.Iters != DefaultRCRNPFIters {
		t.Fatalf("rnpf defaults: %v %+v", err, c)
	}
	for _, bad := range []func(*RCConfig){
		func(c *RCConfig) { c.LogDir = "" },
		func(c *RCConfig) { c.Policy = "backup" },
		func(c *RCConfig) { c.Traffic = "iperf" },
		func(c *RCConfig) { c.RatePPM = 100 }, // cold traffic
		func(c *RCConfig) { c.Traffic, c.RatePPM = RCTrafficRNPF, 2_000_000 },
		func(c *RCConfig) { c.Size = 16 << 20 },
		func(c *RCConfig) { c.Iters = 2 },
		func(c *RCConfig) { c.Cycles, c.Rounds = 3, 5 },
		func(c *RCConfig) { c.EchoRounds = 2 },
		func(c *RCConfig) { c.EchoGap = time.Hour },
		func(c *RCConfig) { c.DriverParams = "fault_delay_us" },
		func(c *RCConfig) { c.DriverParams = "../x=1" },
		func(c *RCConfig) { c.DriverParams = "fault_ahead=0" },
		func(c *RCConfig) { c.DriverParams = "fault_delay_us=-1" },
		func(c *RCConfig) { c.Sender = "mlx5" },
		func(c *RCConfig) { c.Prefault = []int{0} },
		func(c *RCConfig) { c.Prefault = []int{1, 16, 1} },
		func(c *RCConfig) { c.Prefault = []int{MaxRCPrefault + 1} },
	} {
		c := base()
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
	if p, err := parseParams(" fault_delay_us=100  fault_ahead=0 "); err != nil || len(p) != 2 || p[0] != [2]string{"fault_delay_us", "100"} {
		t.Errorf("parseParams: %v %v", p, err)
	}
	c = base()
	c.Images = nil // Validate is the user's choices, before the images are built
	if err := c.Validate(); err != nil {
		t.Errorf("Validate without images: %v", err)
	}
	if _, err := RunRC(context.Background(), c); err == nil || !strings.Contains(err.Error(), "Images") {
		t.Errorf("RunRC without images: %v, want an error naming Images", err)
	}
	c = base()
	c.Sender, c.Prefault = RCSenderNPFNIC, []int{1, 4, MaxRCPrefault}
	if err := c.Validate(); err != nil || c.senderKind() != testbed.RDMANPFNIC || len(c.arms()) != 3 {
		t.Errorf("npfnic sender, a sweep: %v %+v", err, c)
	}
	if c = base(); c.Validate() != nil || c.Sender != RCSenderRxe || c.senderKind() != testbed.RDMARxe || !slices.Equal(c.arms(), []int{0}) {
		t.Errorf("default sender and arms: %+v %v", c, c.arms())
	}
	c = base()
	c.DriverParams = "fault_delay_us=250"
	if d, err := c.faultDelay(); err != nil || d != 250*time.Microsecond || c.Validate() != nil {
		t.Errorf("fault_delay_us=250: %v %v", d, err)
	}
}

func TestStatDelta(t *testing.T) {
	if d := statDelta(map[string]int64{"a": 3, "b": 1}, map[string]int64{"a": 5, "c": 2}); d["a"] != 2 || d["c"] != 2 || len(d) != 2 {
		t.Errorf("delta %v", d)
	}
}

// rcResult is a run of two rounds over a synthetic trace.
func rcResult() (RCConfig, *RCResult) {
	ev := rcTrace(40, constant(5_000), constant(2_000), func(i int) int64 { return int64(300+i) * 1_000 }, constant(8_000_000))
	faults := trace.RCTimelines(ev, hw.PRQVectorDefault)
	echo := []time.Duration{100 * time.Microsecond, 120 * time.Microsecond, 140 * time.Microsecond}
	r := &RCResult{
		Rounds: []RCRound{{Faults: faults[:20], Echo: echo}, {Faults: faults[20:], Echo: echo}},
		Faults: faults, Echo: append(append([]time.Duration(nil), echo...), echo...), Cycles: 4,
		PRI:       pri.Stats{Groups: 40, Requests: 40, Success: 40},
		Driver:    map[string]int64{"responder_faults": 41, "rnr_naks_fault": 41, "odp_faults": 40},
		DriverEnd: map[string]int64{"odp_fault_p50_ns": 204800, "odp_fault_p99_ns": 4_000_000},
		Rxe:       map[string]int64{"rcvd_rnr_err": 41},
		Bandwidth: []float64{4.5, 4.4, 4.6, 4.2},
		Events:    ev,
	}
	return RCConfig{Cycles: 4, Rounds: 2}, r
}

func TestRCTable(t *testing.T) {
	c, r := rcResult()
	s := RCTable(c, r)
	for _, want := range []string{
		"RC receive faults: 40 (retransmission accepted 40, faulted again 0, unresolved 0), 41 RNR NAKs",
		"detected -> RNR NAK sent", "RNR NAK sent -> page request queued", "page response -> retransmission received",
		"floor", "round trip / floor", "the device's share (detected -> interrupt, RNR NAK included): p50 8.00 us",
		"round trip / floor: median", "rnr_naks_fault +41", "rcvd_rnr_err +41", "p50 205 us, p99 4000 us",
		"median 4.5 MB/s over 4 cycles", "seed 000 Table 4", "p50 215 us", "seed 002 Fig. 4 (1a)", "127.37 us",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "no RC receive fault") || strings.Contains(s, "warnings") {
		t.Errorf("table:\n%s", s)
	}
	c.Policy = "drop"
	if s := RCTable(c, r); strings.Contains(s, "detected -> RNR NAK sent") || !strings.Contains(s, "detected -> page request queued") {
		t.Errorf("drop table:\n%s", s)
	}
	if s := RCTable(RCConfig{}, &RCResult{}); !strings.Contains(s, "no RC receive fault") || !strings.Contains(s, "no floor") {
		t.Errorf("empty table:\n%s", s)
	}
	if err := CheckRC(&RCResult{}); err == nil {
		t.Error("CheckRC of nothing")
	}
	if err := CheckRC(r); err != nil {
		t.Error(err)
	}
}

func TestCompareTable(t *testing.T) {
	_, r := rcResult()
	eth := &Result{
		Records: []pri.Record{
			rec(hw.FaultKindRxBuf, pri.OutcomeSuccess, 1000, 11_600, 12_100, 842_000, 0),
			rec(hw.FaultKindRxBuf, pri.OutcomeSuccess, 5000, 15_600, 16_100, 846_000, 0),
		},
		Echo: []time.Duration{497 * time.Microsecond},
	}
	s := CompareTable("TCG", "drop", eth, "rnr", r)
	if !strings.Contains(s, "Ethernet RX (drop)") || !strings.Contains(s, "RC receive (rnr)") {
		t.Errorf("heading:\n%s", s)
	}
	// Each row: its name, then the Ethernet cell, then the RC cell.
	for _, want := range [][3]string{
		{"detected -> RNR NAK sent", "-", "5.00 / 5.00"},
		{"detected -> page request queued", "10.6 / 10.6", "7.00 / 7.00"},
		{"round trip, detected -> page response", "841 / 841", "327 / 347"},
		{"page response -> resumed (RC: retransmission accepted)", "-", "8003 / 8003"},
		{"floor, DIAG_ECHO interrupt -> doorbell", "497 / 497", "120 / 140"},
		{"round trip / floor (p50)", "1.69x", "2.73x"},
		{"faults", "2", "40"},
	} {
		found := false
		for _, l := range strings.Split(s, "\n") {
			rest, ok := strings.CutPrefix(l, want[0])
			if !ok {
				continue
			}
			f := strings.Split(strings.TrimSpace(rest), "  ")
			var cells []string
			for _, x := range f {
				if x = strings.TrimSpace(x); x != "" {
					cells = append(cells, x)
				}
			}
			found = len(cells) == 2 && cells[0] == want[1] && cells[1] == want[2]
			break
		}
		if !found {
			t.Errorf("comparison: no row %q with %q, %q:\n%s", want[0], want[1], want[2], s)
		}
	}
	if s := CompareTable("TCG", "backup", nil, "rnr", r); !strings.Contains(s, "Ethernet RX (not run)") {
		t.Errorf("without Ethernet:\n%s", s)
	}
}

func TestWriteRCOutputs(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("NPFNIC_FAULTCOST_TEST_DIR"); d != "" {
		dir = d
	}
	c, r := rcResult()
	files, err := WriteRCOutputs(dir, c, r)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"fault-cost-rc-faults.csv", "fault-cost-rc.csv", "fault-cost-rc-rounds.csv", "fault-cost-rc-echo.csv",
		"fault-cost-rc.txt", "fault-cost-rc-cycles.csv", "fault-cost-rc.png", "fault-cost-rc-timeline.png"}
	if len(files) != len(want) {
		t.Fatalf("files %v", files)
	}
	for i, f := range files {
		if filepath.Base(f) != want[i] {
			t.Errorf("file %d: %s, want %s", i, f, want[i])
		}
		fi, err := os.Stat(f)
		if err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "fault-cost-rc-faults.csv"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 41 || !strings.HasPrefix(lines[0], "qpn,psn,side,naks,early,refaulted,rnr_nak_sent_us,page_request_queued_us") ||
		!strings.HasPrefix(lines[1], "0x10,0x64,responder,2,1,false,5,7,8,") {
		t.Errorf("faults CSV:\n%s", strings.Join(lines[:2], "\n"))
	}
	tl, ok := MedianRCFault(r)
	if !ok || tl.PSN != 100+4*19 {
		t.Errorf("median fault %+v %v", tl, ok)
	}
	if _, ok := MedianRCFault(&RCResult{Faults: r.Faults}); ok {
		t.Error("a median fault without events")
	}
}

// prefaultCycles: two cycles at 1 (16 faults of one NAK each, 1 ms
// apiece, 16 page requests) and two at 16 (one fault, two NAKs: the
// first retransmission came early), the second with one unresolved fault.
func prefaultCycles() []RCCycle {
	ms := func(int) int64 { return 1_000_000 - 12_000 }
	cold := trace.RCTimelines(rcTrace(16, constant(5_000), constant(2_000), ms, constant(0)), hw.PRQVectorDefault)
	one := trace.RCTimelines(rcTrace(1, constant(5_000), constant(2_000), ms, constant(0)), hw.PRQVectorDefault)
	stuck := one[0]
	stuck.Resume = trace.Event{}
	return []RCCycle{
		{Round: 1, Prefault: 1, Faults: cold, PageRequests: 16, Groups: 16, Bandwidth: 3},
		{Round: 1, Prefault: 16, Faults: one, PageRequests: 16, Groups: 1, Bandwidth: 40},
		{Round: 2, Prefault: 16, Faults: append(slices.Clone(one), stuck), PageRequests: 16, Groups: 2, Bandwidth: 30},
		{Round: 2, Prefault: 1, Faults: cold, PageRequests: 16, Groups: 16, Bandwidth: 5},
	}
}

// TestPrefaultRows: each value's cycles summed per cycle (faults, NAKs,
// stalled time over the resumed faults), medians and ranges over the
// cycles, ascending by value; the table and CSV carry them.
func TestPrefaultRows(t *testing.T) {
	rows := PrefaultRows(prefaultCycles())
	if len(rows) != 2 || rows[0].Prefault != 1 || rows[1].Prefault != 16 {
		t.Fatalf("rows %+v", rows)
	}
	r1, r16 := rows[0], rows[1]
	if r1.Cycles != 2 || r1.Faults != (Spread{16, 16, 16}) || r1.PageRequests != (Spread{16, 16, 16}) || r1.NAKs.Median != 17 ||
		math.Abs(r1.StalledMs.Median-16) > 0.05 || r1.Total.N != 32 || r1.Unresolved != 0 || r1.Bandwidth != 4 {
		t.Errorf("prefault 1: %+v", r1)
	}
	if r16.Faults != (Spread{1.5, 1, 2}) || r16.Unresolved != 1 || math.Abs(r16.StalledMs.Median-1) > 0.05 || r16.Total.N != 2 || r16.Bandwidth != 35 {
		t.Errorf("prefault 16: %+v", r16)
	}
	c := RCConfig{Size: 65536, Sender: RCSenderNPFNIC, Prefault: []int{1, 16}}
	tab := PrefaultTable(c, rows)
	for _, want := range []string{"odp_prefault_pages swept: one cold 65536 B receive buffer per cycle (16 pages)", "1.5 (1-2)", "stalled on faults, ms"} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	hdr, csv := PrefaultCSV(rows)
	if len(csv) != 2 || len(csv[0]) != len(hdr) || csv[1][0] != "16" || csv[1][5] != "1.5" || csv[1][17] != "1" {
		t.Errorf("CSV %v %v", hdr, csv)
	}
	hdr, cyc := CyclesCSV(prefaultCycles())
	if len(cyc) != 4 || len(cyc[0]) != len(hdr) || cyc[2][2] != "2" || cyc[0][3] != "16" {
		t.Errorf("cycles CSV %v %v", hdr, cyc)
	}
	if len(PrefaultCharts(c, rows[:1])) != 0 || len(PrefaultCharts(c, rows)) != 2 {
		t.Error("charts: want none for one value, two for a sweep")
	}
}

// TestWriteRCOutputsPrefault: a sweep adds its CSV and figure, the table
// its rows and the sender's name.
func TestWriteRCOutputsPrefault(t *testing.T) {
	dir := t.TempDir()
	c, r := rcResult()
	c.Prefault, c.Sender, c.Size = []int{1, 16}, RCSenderNPFNIC, 65536
	r.PerCycle = prefaultCycles()
	r.Rxe = map[string]int64{"rnr_naks_rcvd": 17}
	files, err := WriteRCOutputs(dir, c, r)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	for _, want := range []string{"fault-cost-rc-prefault.csv", "fault-cost-rc-prefault.png"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s in %v", want, names)
		}
	}
	tab := RCTable(c, r)
	for _, want := range []string{"npfnic (ODP) <- a second npfnic", "odp_prefault_pages swept", "the sending npfnic", "rnr_naks_rcvd +17"} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}
