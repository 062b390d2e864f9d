package trace

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

func TestRingKeepsNewest(t *testing.T) {
	needTrace(t)
	for _, tc := range []struct {
		capacity, emitted int
		wantFirst         uint64
		wantLost          uint64
	}{
		{capacity: 4, emitted: 0},
		{capacity: 4, emitted: 3, wantFirst: 0},
		{capacity: 4, emitted: 4, wantFirst: 0},
		{capacity: 4, emitted: 5, wantFirst: 1, wantLost: 1},
		{capacity: 4, emitted: 11, wantFirst: 7, wantLost: 7},
		{capacity: 1, emitted: 3, wantFirst: 2, wantLost: 2},
	} {
		r, err := New(tc.capacity)
		if err != nil {
			t.Fatal(err)
		}
		for i := range tc.emitted {
			r.Emit(RxFrame, PairRx(0), uint64(i), 60)
		}
		ev, lost := r.Snapshot()
		if want := min(tc.capacity, tc.emitted); len(ev) != want || lost != tc.wantLost {
			t.Fatalf("cap %d, %d emitted: %d events, %d lost; want %d, %d", tc.capacity, tc.emitted, len(ev), lost, want, tc.wantLost)
		}
		for i, e := range ev {
			if e.A != tc.wantFirst+uint64(i) {
				t.Fatalf("cap %d, %d emitted: event %d is #%d, want #%d", tc.capacity, tc.emitted, i, e.A, tc.wantFirst+uint64(i))
			}
			if i > 0 && e.TS < ev[i-1].TS {
				t.Fatalf("timestamps go back: %d after %d", e.TS, ev[i-1].TS)
			}
		}
	}
}

func TestNewRejectsBadCapacity(t *testing.T) {
	for _, n := range []int{-1, 1<<28 + 1} {
		if _, err := New(n); err == nil {
			t.Errorf("New(%d) accepted", n)
		}
	}
	r, err := New(0)
	if err != nil || len(r.ring) != DefaultCapacity {
		t.Fatalf("New(0): %v, %d slots", err, len(r.ring))
	}
}

// A nil recorder is what every engine holds when tracing is off: its hooks
// must do nothing and allocate nothing.
func TestNilRecorderIsFree(t *testing.T) {
	var r *Recorder
	if r.On() {
		t.Fatal("nil recorder is on")
	}
	allocs := testing.AllocsPerRun(100, func() {
		r.Emit(Fault, PairRx(1), 0x1000, 3)
		r.Span(Walk, TrackATS, r.Now(), 0x1000, 0x2000)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per hook when off", allocs)
	}
	if ev, lost := r.Snapshot(); ev != nil || lost != 0 {
		t.Fatal("nil recorder has events")
	}
}

func TestOnRecorderDoesNotAllocate(t *testing.T) {
	needTrace(t)
	r, _ := New(16)
	allocs := testing.AllocsPerRun(100, func() {
		r.Emit(DMAWrite, PairRx(0), 0x1000, 1500)
		r.Span(Walk, TrackATS, r.Now(), 0x1000, 0x2000)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per event when on", allocs)
	}
}

func TestConcurrentEmitters(t *testing.T) {
	needTrace(t)
	r, _ := New(1 << 11)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				r.Emit(TxFrame, PairTx(g), uint64(i), 1)
			}
		}()
	}
	wg.Wait()
	ev, lost := r.Snapshot()
	if len(ev) != 1<<11 || lost != 4000-1<<11 {
		t.Fatalf("%d events, %d lost", len(ev), lost)
	}
	// Each emitter's events stay in its own order.
	last := map[Track]uint64{}
	seen := map[Track]bool{}
	for _, e := range ev {
		if seen[e.Track] && e.A <= last[e.Track] {
			t.Fatalf("track %s: #%d after #%d", e.Track.Name(), e.A, last[e.Track])
		}
		seen[e.Track], last[e.Track] = true, e.A
	}
}

func TestJSONRoundTrip(t *testing.T) {
	events := []Event{
		{TS: 1_000, Kind: Doorbell, Track: PairRx(0), A: 0x1008, B: 17},
		{TS: 1_500, Kind: DescFetch, Track: PairRx(0), A: 16, B: 1},
		{TS: 2_001, Kind: ATCMiss, Track: TrackATS, A: 0x7fff_ffff_f000, B: 0},
		{TS: 2_002, Dur: 950, Kind: Walk, Track: TrackATS, A: 0x7fff_ffff_f000, B: ^uint64(0)},
		{TS: 3_000, Kind: Fault, Track: PairRx(0), A: 0xffff_ffff_ffff_f123, B: 16},
		{TS: 3_100, Kind: PageRequest, Track: TrackPRI, A: 5, B: 0x7fff_ffff_f000},
		{TS: 3_200, Kind: IRQ, Track: TrackIRQ, A: 8},
		{TS: 900_000_000_123, Kind: PageResponse, Track: TrackPRI, A: 5, B: 0},
		{TS: 900_000_000_200, Kind: Invalidate, Track: TrackATS, A: 3, B: 0x4000},
		{TS: 900_000_000_300, Kind: InvalidateDone, Track: TrackATS, A: 3, B: 1},
		{TS: 900_000_001_000, Kind: BackupStore, Track: TrackBackup, A: 17, B: 2},
		{TS: 900_000_001_001, Kind: BackupResolve, Track: TrackBackup, A: 2, B: 18},
		{TS: 900_000_002_000, Kind: RxFrame, Track: PairRx(3), A: 16, B: 1514},
		{TS: 900_000_002_001, Kind: TxFrame, Track: PairTx(7), A: 1, B: 60},
		{TS: 900_000_002_002, Kind: RxDrop, Track: PairRx(0), A: 1, B: DropFault},
		{TS: 900_000_002_003, Kind: IRQDeferred, Track: TrackIRQ, A: 1},
		{TS: 900_000_002_004, Kind: DMARead, Track: PairTx(0), A: 0x10_0000, B: 64},
		{TS: 900_000_002_005, Kind: DMAWrite, Track: PairRx(0), A: 0x10_0000, B: 64},
		{TS: 900_000_002_006, Kind: ATCHit, Track: TrackATS, A: 0x1000, B: 1},
		{TS: 900_000_002_007, Kind: RCTx, Track: TrackRC, A: 0x21_000112, B: 0x11_00abcd},
		{TS: 900_000_002_008, Kind: RCRx, Track: TrackRC, A: 0x000113, B: 0x04_00abce},
		{TS: 900_000_002_009, Kind: CQE, Track: TrackRC, A: 3, B: 0x0580},
		{TS: 900_000_002_010, Kind: RDMAEvent, Track: TrackRC, A: 2, B: 3},
		{TS: 900_000_002_011, Kind: Fault, Track: TrackRC, A: 0x7f00_1234_5000, B: RCFaultB(0xffffff, 0xfedcba, true)},
		{TS: 900_000_002_012, Kind: RCResume, Track: TrackRC, A: 0x112, B: 0xfedcba},
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, events, 42); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(buf.Bytes()) {
		t.Fatalf("not JSON:\n%s", buf.String())
	}
	got, lost, err := ReadJSON(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if lost != 42 || !reflect.DeepEqual(got, events) {
		t.Fatalf("round trip: lost %d\n got %+v\nwant %+v", lost, got, events)
	}
}

// TestChromeFormat checks what a viewer relies on: every record has a
// phase, a timestamp, pid and tid; every track used is named; async slices
// open and close in pairs under one name and id.
func TestChromeFormat(t *testing.T) {
	needTrace(t)
	r, _ := New(64)
	r.Emit(PageRequest, TrackPRI, 1, 0x1000)
	r.Emit(Invalidate, TrackATS, 9, 0x1000)
	r.Emit(IRQ, TrackIRQ, 8, 0)
	r.Emit(InvalidateDone, TrackATS, 9, 0)
	r.Emit(PageResponse, TrackPRI, 1, 0)
	r.Span(Walk, TrackATS, r.Now(), 0x1000, 0x5000)
	path := filepath.Join(t.TempDir(), "t.json")
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	data, _ := readAll(t, path)
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	named := map[float64]string{}
	open := map[string]int{}
	for i, e := range doc.TraceEvents {
		ph, _ := e["ph"].(string)
		if ph == "" || e["pid"] == nil {
			t.Fatalf("record %d lacks ph or pid: %v", i, e)
		}
		switch ph {
		case "M":
			if e["name"] == "thread_name" {
				named[e["tid"].(float64)] = e["args"].(map[string]any)["name"].(string)
			}
			continue
		case "b", "e":
			key := e["name"].(string) + "/" + e["id"].(string)
			if ph == "b" {
				open[key]++
			} else if open[key]--; open[key] < 0 {
				t.Fatalf("slice %s ends before it begins", key)
			}
		case "i", "X":
		default:
			t.Fatalf("record %d: phase %q", i, ph)
		}
		if e["ts"] == nil || e["tid"] == nil {
			t.Fatalf("record %d lacks ts or tid: %v", i, e)
		}
		if _, ok := named[e["tid"].(float64)]; !ok {
			t.Fatalf("record %d on an unnamed track %v", i, e["tid"])
		}
	}
	for k, n := range open {
		if n != 0 {
			t.Fatalf("slice %s left open", k)
		}
	}
	if named[float64(TrackPRI)] != "pri" || named[float64(TrackATS)] != "ats" {
		t.Fatalf("track names: %v", named)
	}
}

func TestTrackNames(t *testing.T) {
	for tr, want := range map[Track]string{
		TrackDevice: "device", TrackATS: "ats", TrackPRI: "pri", TrackIRQ: "interrupts",
		TrackBackup: "backup ring", TrackRC: "rc", PairRx(0): "qp0 rx", PairTx(0): "qp0 tx", PairRx(7): "qp7 rx", PairTx(7): "qp7 tx",
	} {
		if got := tr.Name(); got != want {
			t.Errorf("track %d: %q, want %q", tr, got, want)
		}
	}
}

func TestReadJSONRejects(t *testing.T) {
	for _, doc := range []string{
		`not json`,
		`{"traceEvents":[{"name":"no such kind","ph":"i","ts":1,"pid":1,"tid":0,"args":{}}]}`,
		`{"traceEvents":[{"name":"fault","ph":"i","ts":1,"pid":1,"tid":0,"args":{"va":"0x1"}}]}`,
		`{"traceEvents":[{"name":"fault","ph":"i","ts":"x","pid":1,"tid":0,"args":{"va":"0x1","desc":1}}]}`,
		`{"traceEvents":[{"name":"fault","ph":"i","ts":1,"pid":1,"tid":0,"args":{"va":"zz","desc":1}}]}`,
	} {
		if _, _, err := ReadJSON(bytes.NewReader([]byte(doc))); err == nil {
			t.Errorf("accepted %s", doc)
		}
	}
}

func BenchmarkEmit(b *testing.B) {
	on, _ := New(1 << 16)
	for _, bc := range []struct {
		name string
		r    *Recorder
	}{{"off", nil}, {"on", on}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				bc.r.Emit(RxFrame, PairRx(0), uint64(i), 60)
			}
		})
	}
}

func readAll(t *testing.T, path string) ([]byte, error) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data, nil
}

// needTrace skips a test of recording in a build without the hooks.
func needTrace(t *testing.T) {
	if !Compiled {
		t.Skip("built with npfnic_notrace: nothing is recorded")
	}
}

// TestRCPacket: the BTH's QPN, opcode and PSN, and the AETH syndrome of
// the opcodes that carry one; a frame too short records nothing.
func TestRCPacket(t *testing.T) {
	needTrace(t)
	r, _ := New(16)
	bth := func(op byte, qpn, psn uint32, aeth ...byte) []byte {
		f := make([]byte, 42) // Ethernet, IPv4, UDP
		f = append(f, op, 0, 0xff, 0xff, 0, byte(qpn>>16), byte(qpn>>8), byte(qpn), 0x80, byte(psn>>16), byte(psn>>8), byte(psn))
		return append(f, aeth...)
	}
	r.RCPacket(RCTx, bth(0x04, 0x112, 0xabcdef), 42)         // SEND Only
	r.RCPacket(RCRx, bth(0x11, 0x113, 7, 0x2e, 0, 0, 1), 42) // ACK with an RNR NAK syndrome
	r.RCPacket(RCRx, bth(0x11, 0x113, 7), 42)                // ACK cut before its AETH
	r.RCPacket(RCRx, bth(0x04, 0x113, 7)[:50], 42)           // BTH cut short: nothing
	ev, _ := r.Snapshot()
	want := []Event{
		{Kind: RCTx, Track: TrackRC, A: 0x112, B: 0x04<<24 | 0xabcdef},
		{Kind: RCRx, Track: TrackRC, A: 0x2e<<32 | 0x113, B: 0x11<<24 | 7},
		{Kind: RCRx, Track: TrackRC, A: 0x113, B: 0x11<<24 | 7},
	}
	if len(ev) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(ev), len(want), ev)
	}
	for i := range want {
		ev[i].TS = 0
		if ev[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, ev[i], want[i])
		}
	}
}

func TestCountAccesses(t *testing.T) {
	ev := func(k Kind) Event { return Event{Kind: k} }
	events := []Event{ev(RxFrame), ev(RxFrame), ev(RxFrame), ev(TxFrame), ev(RegRead),
		ev(Doorbell), ev(Doorbell), ev(IRQ), ev(DMAWrite)}
	a := CountAccesses(events)
	want := Accesses{RxFrames: 3, TxFrames: 1, BARReads: 1, Doorbells: 2, IRQs: 1}
	if a != want {
		t.Fatalf("CountAccesses = %+v, want %+v", a, want)
	}
	for _, tc := range []struct {
		n    uint64
		want float64
	}{{a.BARReads, 250}, {a.Doorbells, 500}, {0, 0}} {
		if got := a.PerThousandFrames(tc.n); got != tc.want {
			t.Errorf("PerThousandFrames(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if got := (Accesses{BARReads: 5}).PerThousandFrames(5); got != 0 {
		t.Errorf("no frames: %v, want 0", got)
	}
}
