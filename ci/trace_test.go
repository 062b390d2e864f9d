package ci

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// TestTraceFaultInGuest: the device's event trace of a real guest. The
// driver runs the drop policy on a cold ring, the host pings the guest,
// the ring is cooled (invalidations) and pinged again; in the trace file
// every fault whose stages are all there went through them in order (fault
// detected, page request queued, PRQ interrupt, page response, the frame
// placed in the same descriptor after the response), and the events
// around them (doorbells, descriptor fetches, ATC misses and walks, DMA,
// invalidations) were recorded. The fault is drawn as docs/driver.md's
// picture is.
func TestTraceFaultInGuest(t *testing.T) {
	a := needImages(t)
	rec, err := trace.New(1 << 18)
	if err != nil {
		t.Fatal(err)
	}
	dir := logDir(t, "trace")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tb, err := testbed.Start(ctx, testbed.Config{Images: a, Name: "trace", LogDir: dir, Trace: rec})
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	t.Cleanup(tb.Close)
	t.Logf("guest (%s) booted in %.1fs", tb.Accel, tb.Boot.Seconds())
	loadPolicy(t, tb, "drop", 64)
	ping := func() {
		t.Helper()
		// Under drop a request that meets a cold buffer is lost; later
		// ones find the page the driver mapped meanwhile.
		pr, err := tb.NS.Ping(ctx, tb.GuestIP, 8, 150*time.Millisecond, time.Second)
		if err != nil {
			t.Fatalf("ping: %v", err)
		}
		if pr.Received == 0 {
			t.Fatalf("no echo reply of %d", pr.Sent)
		}
	}
	ping()
	if err := tb.WriteSysfs(ctx, "cool", "1"); err != nil {
		t.Fatal(err)
	}
	ping()

	path := filepath.Join(dir, "trace.json")
	if err := rec.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	events, lost, err := trace.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lost != 0 {
		t.Fatalf("the ring overwrote %d events of a short run", lost)
	}
	seen := map[trace.Kind]int{}
	for _, e := range events {
		seen[e.Kind]++
	}
	for _, k := range []trace.Kind{trace.Doorbell, trace.DescFetch, trace.ATCMiss, trace.Walk, trace.Fault,
		trace.PageRequest, trace.PageResponse, trace.IRQ, trace.DMAWrite, trace.RxFrame, trace.TxFrame,
		trace.Invalidate, trace.InvalidateDone} {
		if seen[k] == 0 {
			t.Errorf("no %s event in the trace of a guest run (%v)", k, seen)
		}
	}
	var complete []trace.Timeline
	for _, tl := range trace.Timelines(events, hw.PRQVectorDefault) {
		if !tl.Complete() {
			continue
		}
		complete = append(complete, tl)
		st := tl.Stages()
		for i := 1; i < len(st); i++ {
			if st[i].TS < st[i-1].TS {
				t.Errorf("fault on %s descriptor %d: %s at %d ns, before %s at %d ns", tl.Fault.Track.Name(), tl.Fault.B,
					trace.StageNames[i], st[i].TS, trace.StageNames[i-1], st[i-1].TS)
			}
		}
	}
	if len(complete) == 0 {
		t.Fatalf("no fault with all its stages among %d events (%v)", len(events), seen)
	}
	t.Logf("%d events, %d faults with every stage; first: %+v", len(events), len(complete), complete[0])
	png := filepath.Join(dir, "fault.png")
	if err := report.FaultTimeline(png, "npfnic: one page fault in a guest", events, complete[0]); err != nil {
		t.Fatal(err)
	}
}
