package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// TestTraceCommand reads a trace with three RX faults, prints their
// stages and draws the chosen one; a trace without a complete fault is an
// error, as is a fault number out of range.
func TestTraceCommand(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("NPFNIC_TRACE_TEST_DIR"); d != "" {
		dir = d
	}
	var events []trace.Event
	add := func(ts int64, k trace.Kind, tr trace.Track, a, b uint64) {
		events = append(events, trace.Event{TS: ts, Kind: k, Track: tr, A: a, B: b})
	}
	for i := range 3 {
		t0 := int64(i) * 1_000_000
		page := uint64(0x10000 + i*0x1000)
		add(t0, trace.Doorbell, trace.PairRx(0), uint64(hw.PairBase(0)+hw.PairRxTail), 8)
		add(t0+100, trace.ATCMiss, trace.TrackATS, page, 0)
		events = append(events, trace.Event{TS: t0 + 200, Dur: 800, Kind: trace.Walk, Track: trace.TrackATS, A: page, B: ^uint64(0)})
		add(t0+1_000, trace.Fault, trace.PairRx(0), page, uint64(i))
		add(t0+1_000, trace.RxDrop, trace.PairRx(0), uint64(i), trace.DropFault)
		add(t0+9_000, trace.PageRequest, trace.TrackPRI, uint64(i), page)
		add(t0+9_500, trace.IRQ, trace.TrackIRQ, hw.PRQVectorDefault, 0)
		add(t0+400_000+int64(i)*100_000, trace.PageResponse, trace.TrackPRI, uint64(i), 0)
		add(t0+600_000, trace.DMAWrite, trace.PairRx(0), page, 60)
		add(t0+600_001, trace.RxFrame, trace.PairRx(0), uint64(i), 60)
	}
	in := filepath.Join(dir, "t.json")
	write := func(path string, ev []trace.Event) {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := trace.WriteJSON(f, ev, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	write(in, events)
	for _, pick := range []string{"median", "slowest", "first", "2"} {
		png := filepath.Join(dir, pick+".png")
		if err := runTrace(context.Background(), []string{"-fault", pick, "-out", png, in}); err != nil {
			t.Fatalf("-fault %s: %v", pick, err)
		}
		if fi, err := os.Stat(png); err != nil || fi.Size() < 10_000 {
			t.Fatalf("-fault %s: PNG %v, %v", pick, fi, err)
		}
		if err := report.CheckFigure(png); err != nil {
			t.Errorf("-fault %s: %v", pick, err)
		}
	}
	if err := runTrace(context.Background(), []string{"-dir", "rx", "-out", filepath.Join(dir, "rx.png"), in}); err != nil {
		t.Errorf("-dir rx: %v", err)
	}
	if err := runTrace(context.Background(), []string{"-dir", "tx", in}); err == nil {
		t.Error("-dir tx found a fault in a trace of RX faults only")
	}
	if err := runTrace(context.Background(), []string{"-fault", "4", in}); err == nil {
		t.Error("-fault 4 of 3 accepted")
	}
	empty := filepath.Join(dir, "empty.json")
	write(empty, events[:3])
	if err := runTrace(context.Background(), []string{empty}); err == nil {
		t.Error("a trace without a complete fault gave no error")
	}
	if err := runTrace(context.Background(), []string{filepath.Join(dir, "missing.json")}); err == nil {
		t.Error("a missing file gave no error")
	}
}

// TestTraceCommandRC reads a trace of RC receive faults (as npfnic's
// RDMA engine records them with an rxe sender): with -dir rc, or by
// default when the trace has no Ethernet fault, it prints their RC stages
// and draws one with its RNR NAK and retransmission.
func TestTraceCommandRC(t *testing.T) {
	if !trace.Compiled {
		t.Skip("built with npfnic_notrace")
	}
	dir := t.TempDir()
	var events []trace.Event
	add := func(ts int64, k trace.Kind, a, b uint64) {
		tr := trace.TrackRC
		switch k {
		case trace.PageRequest, trace.PageResponse:
			tr = trace.TrackPRI
		case trace.IRQ:
			tr = trace.TrackIRQ
		case trace.ATCMiss:
			tr = trace.TrackATS
		}
		events = append(events, trace.Event{TS: ts, Kind: k, Track: tr, A: a, B: b})
	}
	const qpn, peer = 0x10, 0x13
	for i := range 3 {
		t0 := int64(i) * 100_000_000
		page := uint64(0x7f00_0000_0000 + i*0x1000)
		psn := uint64(0x1000 + 4*i)
		add(t0, trace.RCRx, qpn, 0x01<<24|psn)
		add(t0+500, trace.ATCMiss, page, 1)
		add(t0+1_000, trace.Fault, page, trace.RCFaultB(qpn, uint32(psn), true))
		add(t0+6_000, trace.RCTx, 0x2c<<32|peer, 0x11<<24|psn) // RNR NAK
		add(t0+9_000, trace.PageRequest, uint64(i), page)
		add(t0+9_500, trace.IRQ, hw.PRQVectorDefault, 0)
		add(t0+400_000+int64(i)*100_000, trace.PageResponse, uint64(i), 0)
		add(t0+8_000_000, trace.RCRx, qpn, 0x01<<24|psn)
		add(t0+8_002_000, trace.RCResume, qpn, psn)
	}
	in := filepath.Join(dir, "rc.json")
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.WriteJSON(f, events, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, args := range [][]string{{"-dir", "rc"}, nil, {"-fault", "slowest"}} {
		png := filepath.Join(dir, "rc.png")
		os.Remove(png)
		if err := runTrace(context.Background(), append(append([]string(nil), args...), "-out", png, in)); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if fi, err := os.Stat(png); err != nil || fi.Size() < 10_000 {
			t.Fatalf("%v: PNG %v, %v", args, fi, err)
		}
		if err := report.CheckFigure(png); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	if err := runTrace(context.Background(), []string{"-dir", "rx", in}); err == nil {
		t.Error("-dir rx found an Ethernet fault in a trace of RC faults")
	}
}
