package pri_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/pri/pritest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestRoundTrip: a group's entries reach the driver with every field, the
// producer index and the interrupt follow, and a Success response
// completes the group with its timing recorded.
func TestRoundTrip(t *testing.T) {
	ev := newEnv(t, envOpts{})
	r := req(0x7000_1000, 0x7000_2fff, 0x7000_9000)
	r.Detected = clock.Nanotime()
	g := mustSubmit(t, ev.e, r)
	if tail := ev.drv.PRQTail(); tail != 3 {
		t.Fatalf("prq_tail %d, want 3", tail)
	}
	if n := ev.irq.count(hw.PRQVectorDefault); n != 1 {
		t.Fatalf("%d interrupts on the PRQ vector", n)
	}
	gs := ev.groups(t, 1)
	want := []uint64{0x7000_1000, 0x7000_2000, 0x7000_9000}
	for i, e := range gs[0] {
		flags := uint16(hw.PRQRead | hw.PRQWrite | hw.PRQPASIDValid)
		if i == 2 {
			flags |= hw.PRQLast
		}
		if e.Addr != want[i] || e.PASID != 3 || e.PRGI != g.PRGI() || e.Flags != flags || e.Queue != 2 ||
			e.Kind != hw.FaultKindTxBuf || e.Desc != 17 || e.Stamp != r.Detected {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	if err := ev.drv.Respond(pritest.ResponseFor(gs[0], hw.PRSPSuccess)); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, g); err != nil || g.Code() != pri.Success {
		t.Fatalf("result %v code %v", err, g.Code())
	}
	g.Finish()
	g.Finish() // only the first counts
	eventually(t, "prspq_head", func() bool { return ev.drv.RspHead() == 1 })
	recs := ev.e.Recorder().Snapshot()
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	rec := recs[0]
	for i := 1; i < pri.NumStamps; i++ {
		if rec.Stamps[i] == 0 || rec.Stamps[i] < rec.Stamps[pri.StampDetected] {
			t.Fatalf("stamps %v", rec.Stamps)
		}
	}
	if rec.Pages != 3 || rec.Kind != hw.FaultKindTxBuf || rec.Queue != 2 || rec.Outcome != pri.OutcomeSuccess {
		t.Fatalf("record %+v", rec)
	}
	if s := ev.e.Stats(); s.Groups != 1 || s.Requests != 3 || s.Success != 1 || s.Outstanding != 0 || s.Credits != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestInvalidRequest: the operation fails with an error the caller can
// tell apart.
func TestInvalidRequest(t *testing.T) {
	ev := newEnv(t, envOpts{})
	g := mustSubmit(t, ev.e, req(0x1000))
	gs := ev.groups(t, 1)
	if err := ev.drv.Respond(pritest.ResponseFor(gs[0], hw.PRSPInvalidRequest)); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, g); !errors.Is(err, pri.ErrInvalidRequest) || g.Code() != pri.InvalidRequest {
		t.Fatalf("result %v", err)
	}
	g.Finish()
	if rec := ev.e.Recorder().Snapshot(); len(rec) != 1 || rec[0].Outcome != pri.OutcomeInvalid {
		t.Fatalf("records %+v", rec)
	}
}

// TestBackPressure: with the allocation used up the next requester waits
// (it is not dropped) until a response returns credits; TrySubmit says
// busy; a cancelled wait leaks nothing.
func TestBackPressure(t *testing.T) {
	ev := newEnv(t, envOpts{capacity: 8, alloc: 4})
	a := mustSubmit(t, ev.e, req(0x1000, 0x2000))
	mustSubmit(t, ev.e, req(0x3000, 0x4000))
	if _, err := ev.e.TrySubmit(req(0x5000)); !errors.Is(err, pri.ErrBusy) {
		t.Fatalf("TrySubmit with no credits: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ev.e.Submit(ctx, req(0x5000)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Submit: %v", err)
	}
	type res struct {
		g   *pri.Group
		err error
	}
	got := make(chan res, 1)
	go func() {
		g, err := ev.e.Submit(ctxT(t), req(0x5000))
		got <- res{g, err}
	}()
	if !blocked(got) {
		t.Fatal("a requester over the allocation was not held back")
	}
	if s := ev.e.Stats(); s.Credits != 4 || s.Waits < 2 {
		t.Fatalf("stats %+v", s)
	}
	gs := ev.groups(t, 2)
	var ga pritest.Group
	for _, g := range gs {
		if g[0].PRGI == a.PRGI() {
			ga = g
		}
	}
	if err := ev.drv.Respond(pritest.ResponseFor(ga, hw.PRSPSuccess)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held-back requester never proceeded")
	}
	if s := ev.e.Stats(); s.Credits != 3 || s.Outstanding != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestQueueFullBackPressure: a full page request queue holds requesters
// back until the driver returns slots.
func TestQueueFullBackPressure(t *testing.T) {
	ev := newEnv(t, envOpts{prq: 8})
	ev.drv.HoldSlots(true)
	for i := range 8 {
		mustSubmit(t, ev.e, req(uint64(i)*4096))
	}
	ev.groups(t, 8)
	got := make(chan error, 1)
	go func() {
		_, err := ev.e.Submit(ctxT(t), req(0x100000))
		got <- err
	}()
	if !blocked(got) {
		t.Fatal("a requester with the queue full was not held back")
	}
	if _, err := ev.e.TrySubmit(req(0x200000)); !errors.Is(err, pri.ErrBusy) {
		t.Fatalf("TrySubmit with the queue full: %v", err)
	}
	ev.drv.ReleaseSlots()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if gs := ev.groups(t, 1); gs[0][0].Addr != 0x100000 || gs[0][0].Offset != 8 {
		t.Fatalf("entry after the wrap: %+v", gs[0][0])
	}
}

// TestPRGIs: group indexes are unique among outstanding groups; all 512 in
// use holds the next requester back.
func TestPRGIs(t *testing.T) {
	ev := newEnv(t, envOpts{capacity: 1024, prq: 4096, rsp: 64})
	seen := map[uint16]*pri.Group{}
	for i := range hw.PRGIMax {
		g := mustSubmit(t, ev.e, req(uint64(i)*4096))
		if seen[g.PRGI()] != nil || g.PRGI() >= hw.PRGIMax {
			t.Fatalf("PRGI %d reused or out of range", g.PRGI())
		}
		seen[g.PRGI()] = g
	}
	if _, err := ev.e.TrySubmit(req(0)); !errors.Is(err, pri.ErrBusy) {
		t.Fatalf("513th group: %v", err)
	}
	got := make(chan *pri.Group, 1)
	go func() {
		g, err := ev.e.Submit(ctxT(t), req(0))
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	if !blocked(got) {
		t.Fatal("513th group not held back")
	}
	gs := ev.groups(t, hw.PRGIMax)
	if err := ev.drv.Respond(pritest.ResponseFor(gs[100], hw.PRSPSuccess)); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g == nil || g.PRGI() != gs[100][0].PRGI {
		t.Fatal("the freed index was not the one reused")
	}
}

// TestSubmitErrors: requests PRI can never carry fail at once.
func TestSubmitErrors(t *testing.T) {
	ev := newEnv(t, envOpts{capacity: 16, alloc: 4, prq: 8})
	for _, tc := range []struct {
		name  string
		pages int
		err   error
	}{
		{"empty", 0, pri.ErrEmpty},
		{"over the allocation", 5, pri.ErrTooLarge},
		{"at the allocation", 4, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req()
			for i := range tc.pages {
				r.Pages = append(r.Pages, uint64(i)*4096)
			}
			g, err := ev.e.TrySubmit(r)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if err == nil && g == nil {
				t.Fatal("no group")
			}
		})
	}
	if n := ev.e.MaxGroupPages(); n != 4 {
		t.Fatalf("MaxGroupPages %d", n)
	}
	ev2 := newEnv(t, envOpts{capacity: 32, prq: 8})
	if _, err := ev2.e.TrySubmit(req(make([]uint64, 9)...)); !errors.Is(err, pri.ErrTooLarge) {
		t.Fatalf("group larger than the queue: %v", err)
	}
}

// TestEnableResetStopped walks the capability's state machine: Enable,
// disable with requests outstanding (Stopped only once they complete),
// Reset with Enable clear (abandons them), and a new allocation latched at
// the next enable.
func TestEnableResetStopped(t *testing.T) {
	ev := newEnv(t, envOpts{noEnable: true, capacity: 16, alloc: 2})
	if !ev.space.PRIStopped() {
		t.Fatal("Stopped clear at power-on")
	}
	if _, err := ev.e.TrySubmit(req(0x1000)); !errors.Is(err, pri.ErrDisabled) {
		t.Fatalf("submit with PRI disabled: %v", err)
	}
	ev.setPRI(true)
	if ev.space.PRIStopped() {
		t.Fatal("Stopped set after enable")
	}
	g1 := mustSubmit(t, ev.e, req(0x1000))
	g2 := mustSubmit(t, ev.e, req(0x2000))

	// Disable: no new requests; Stopped waits for the outstanding ones.
	ev.setPRI(false)
	if _, err := ev.e.TrySubmit(req(0x3000)); !errors.Is(err, pri.ErrDisabled) {
		t.Fatalf("submit after disable: %v", err)
	}
	if ev.space.PRIStopped() {
		t.Fatal("Stopped set with requests outstanding")
	}
	gs := ev.groups(t, 2)
	if err := ev.drv.Respond(pritest.ResponseFor(gs[0], hw.PRSPSuccess)); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, g1); err != nil {
		t.Fatal(err)
	}
	if ev.space.PRIStopped() {
		t.Fatal("Stopped set with one request outstanding")
	}
	// Reset while Enable is clear abandons the other one.
	ev.resetPRI()
	if err := waitDone(t, g2); !errors.Is(err, pri.ErrReset) {
		t.Fatalf("after PRI reset: %v", err)
	}
	if !ev.space.PRIStopped() {
		t.Fatal("Stopped clear after reset")
	}
	if s := ev.e.Stats(); s.Outstanding != 0 || s.Credits != 0 || s.Abandoned != 1 {
		t.Fatalf("stats %+v", s)
	}
	// A late response for the abandoned group is unexpected.
	if err := ev.drv.Respond(pritest.ResponseFor(gs[1], hw.PRSPSuccess)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "UPRGI", func() bool { return ev.space.PRIStatus()&pcie.PRIStatusUPRGI != 0 })

	// The allocation may change while disabled and is latched at enable.
	ev.setAlloc(3)
	ev.setPRI(true)
	if ev.space.PRIStopped() {
		t.Fatal("Stopped set after re-enable")
	}
	if s := ev.e.Stats(); s.Allocation != 3 {
		t.Fatalf("allocation %d, want 3", s.Allocation)
	}
	// Disable with nothing outstanding: Stopped at once.
	ev2 := newEnv(t, envOpts{})
	ev2.setPRI(false)
	if !ev2.space.PRIStopped() {
		t.Fatal("Stopped clear after disabling an idle PRI")
	}
}

// TestResetIgnoredWhileEnabled: the engine ignores PRIReset while Enable
// is set.
func TestResetIgnoredWhileEnabled(t *testing.T) {
	ev := newEnv(t, envOpts{})
	g := mustSubmit(t, ev.e, req(0x1000))
	ev.e.PRIReset()
	if !blocked(g.Done()) {
		t.Fatal("reset with Enable set abandoned a request")
	}
}

// TestResponseFailure: a Response Failure sets the status bit, abandons
// every outstanding group, and stops PRI until software clears the bit and
// enables PRI again; responses in between are ignored.
func TestResponseFailure(t *testing.T) {
	ev := newEnv(t, envOpts{})
	a := mustSubmit(t, ev.e, req(0x1000))
	b := mustSubmit(t, ev.e, req(0x2000, 0x3000))
	gs := ev.groups(t, 2)
	if err := ev.drv.Respond(pritest.ResponseFor(gs[0], hw.PRSPResponseFailure)); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*pri.Group{a, b} {
		if err := waitDone(t, g); !errors.Is(err, pri.ErrResponseFailure) {
			t.Fatalf("group %d: %v", g.PRGI(), err)
		}
	}
	st := ev.space.PRIStatus()
	if st&pcie.PRIStatusRF == 0 || st&pcie.PRIStatusStopped == 0 {
		t.Fatalf("PRI status %#x after Response Failure", st)
	}
	if _, err := ev.e.TrySubmit(req(0x4000)); !errors.Is(err, pri.ErrStopped) {
		t.Fatalf("submit while stopped: %v", err)
	}
	if err := ev.drv.Respond(pritest.ResponseFor(gs[1], hw.PRSPSuccess)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ignored response", func() bool { return ev.e.Stats().Ignored == 1 })
	if ev.space.PRIStatus()&pcie.PRIStatusUPRGI != 0 {
		t.Fatal("UPRGI for a response after Response Failure")
	}
	// Re-enabling without clearing Response Failure does not restart PRI.
	ev.setPRI(false)
	ev.setPRI(true)
	if _, err := ev.e.TrySubmit(req(0x4000)); !errors.Is(err, pri.ErrStopped) {
		t.Fatalf("submit with Response Failure still set: %v", err)
	}
	ev.clearPRIStatus(pcie.PRIStatusRF)
	ev.setPRI(false)
	ev.setPRI(true)
	g := mustSubmit(t, ev.e, req(0x4000))
	gs = ev.groups(t, 1)
	if err := ev.drv.Respond(pritest.ResponseFor(gs[0], hw.PRSPSuccess)); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, g); err != nil {
		t.Fatal(err)
	}
	if s := ev.e.Stats(); s.Failures != 1 || s.Abandoned != 1 || s.Success != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestUnexpectedResponses: responses that match no outstanding group are
// counted, set UPRGI and change nothing else; a malformed code is counted
// and leaves the group outstanding.
func TestUnexpectedResponses(t *testing.T) {
	for _, tc := range []struct {
		name          string
		pasidRequired bool
		resp          func(g pritest.Group) pritest.Response
		unexpected    bool // else malformed
	}{
		{"unknown PRGI", false, func(g pritest.Group) pritest.Response {
			r := pritest.ResponseFor(g, 0)
			r.PRGI = (r.PRGI + 7) % hw.PRGIMax
			return r
		}, true},
		{"PRGI out of range", false, func(g pritest.Group) pritest.Response {
			r := pritest.ResponseFor(g, 0)
			r.PRGI = 0xffff
			return r
		}, true},
		{"PASID mismatch", false, func(g pritest.Group) pritest.Response {
			r := pritest.ResponseFor(g, 0)
			r.PASID++
			return r
		}, true},
		{"PASID missing when required", true, func(g pritest.Group) pritest.Response {
			r := pritest.ResponseFor(g, 0)
			r.PASIDValid = false
			return r
		}, true},
		{"reserved code", false, func(g pritest.Group) pritest.Response { return pritest.ResponseFor(g, 7) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := newEnv(t, envOpts{pasidRequired: tc.pasidRequired})
			g := mustSubmit(t, ev.e, req(0x1000))
			gs := ev.groups(t, 1)
			if err := ev.drv.Respond(tc.resp(gs[0])); err != nil {
				t.Fatal(err)
			}
			eventually(t, "response consumed", func() bool { return ev.drv.RspHead() == 1 })
			s := ev.e.Stats()
			uprgi := ev.space.PRIStatus()&pcie.PRIStatusUPRGI != 0
			if tc.unexpected {
				if s.Unexpected != 1 || !uprgi || ev.drv.Unexpected() != 1 {
					t.Fatalf("unexpected %d, UPRGI %v, status count %d", s.Unexpected, uprgi, ev.drv.Unexpected())
				}
			} else if s.Malformed != 1 || uprgi {
				t.Fatalf("malformed %d, UPRGI %v", s.Malformed, uprgi)
			}
			if !blocked(g.Done()) || s.Outstanding != 1 {
				t.Fatal("the group was affected")
			}
			// UPRGI is RW1C; the real response still completes the group.
			ev.clearPRIStatus(pcie.PRIStatusUPRGI)
			if err := ev.drv.Respond(pritest.ResponseFor(gs[0], hw.PRSPSuccess)); err != nil {
				t.Fatal(err)
			}
			if err := waitDone(t, g); err != nil {
				t.Fatal(err)
			}
			// A second response for it is unexpected.
			if err := ev.drv.Respond(pritest.ResponseFor(gs[0], hw.PRSPSuccess)); err != nil {
				t.Fatal(err)
			}
			eventually(t, "duplicate counted", func() bool { return ev.space.PRIStatus()&pcie.PRIStatusUPRGI != 0 })
		})
	}
}

// TestQueueDisableAbandons: turning the queues off ends every outstanding
// group (no response can arrive any more).
func TestQueueDisableAbandons(t *testing.T) {
	ev := newEnv(t, envOpts{})
	g := mustSubmit(t, ev.e, req(0x1000))
	hw.Offsets(ev.e).RegWrite(hw.RegPRICtrl, 0)
	if err := waitDone(t, g); !errors.Is(err, pri.ErrNoQueue) {
		t.Fatalf("after queue disable: %v", err)
	}
	if _, err := ev.e.TrySubmit(req(0x1000)); !errors.Is(err, pri.ErrNoQueue) {
		t.Fatalf("submit with the queues off: %v", err)
	}
	ev.drv.Enable()
	g = mustSubmit(t, ev.e, req(0x1000))
	ev.e.Reset()
	if err := waitDone(t, g); !errors.Is(err, pri.ErrReset) {
		t.Fatalf("after function reset: %v", err)
	}
	if v, _ := hw.Offsets(ev.e).RegRead(hw.RegPRQVector); v != hw.PRQVectorDefault {
		t.Fatalf("PRQ_VECTOR %d after reset", v)
	}
}

// TestVectorAndIRQErrors: the PRQ vector is configurable, and an
// interrupt the host cannot deliver is counted without losing the request.
func TestVectorAndIRQErrors(t *testing.T) {
	ev := newEnv(t, envOpts{})
	hw.Offsets(ev.e).RegWrite(hw.RegPRICtrl, 0)
	ev.drv.Vector = 7
	ev.drv.Enable()
	ev.irq.fail = true
	mustSubmit(t, ev.e, req(0x1000))
	if ev.irq.count(7) != 1 || ev.e.Stats().IRQErrors != 1 {
		t.Fatalf("vector 7 fired %d times, %d errors", ev.irq.count(7), ev.e.Stats().IRQErrors)
	}
	ev.groups(t, 1)
}

// TestBusMaster: no responses are read without bus mastering.
func TestBusMaster(t *testing.T) {
	ev := newEnv(t, envOpts{})
	g := mustSubmit(t, ev.e, req(0x1000))
	gs := ev.groups(t, 1)
	ev.cfgWrite16(pcie.OffCommand, pcie.CmdMemory)
	if err := ev.drv.Respond(pritest.ResponseFor(gs[0], hw.PRSPSuccess)); err != nil {
		t.Fatal(err)
	}
	if !blocked(g.Done()) {
		t.Fatal("response read without bus mastering")
	}
	ev.cfgWrite16(pcie.OffCommand, pcie.CmdMemory|pcie.CmdBusMaster)
	ev.e.Kick()
	if err := waitDone(t, g); err != nil {
		t.Fatal(err)
	}
}

// TestClose fails outstanding and waiting requesters.
func TestClose(t *testing.T) {
	ev := newEnv(t, envOpts{capacity: 1})
	g := mustSubmit(t, ev.e, req(0x1000))
	got := make(chan error, 1)
	go func() {
		_, err := ev.e.Submit(context.Background(), req(0x2000))
		got <- err
	}()
	if !blocked(got) {
		t.Fatal("not held back")
	}
	ev.e.Close()
	if err := waitDone(t, g); !errors.Is(err, pri.ErrClosed) {
		t.Fatalf("outstanding group after Close: %v", err)
	}
	if err := <-got; !errors.Is(err, pri.ErrClosed) {
		t.Fatalf("waiting requester after Close: %v", err)
	}
}

// TestDisableWhileWaiting: a requester held back for queue space when
// Enable is cleared does not issue its request afterwards.
func TestDisableWhileWaiting(t *testing.T) {
	ev := newEnv(t, envOpts{prq: 8})
	ev.drv.HoldSlots(true)
	var gs []*pri.Group
	for i := range 8 {
		gs = append(gs, mustSubmit(t, ev.e, req(uint64(i)*4096)))
	}
	got := make(chan error, 1)
	go func() {
		_, err := ev.e.Submit(ctxT(t), req(0x100000))
		got <- err
	}()
	if !blocked(got) {
		t.Fatal("not held back")
	}
	ev.setPRI(false)
	if err := <-got; !errors.Is(err, pri.ErrDisabled) {
		t.Fatalf("held-back request after disable: %v", err)
	}
	if ev.space.PRIStopped() {
		t.Fatal("Stopped with 8 requests outstanding")
	}
	groups := ev.groups(t, 8)
	ev.drv.ReleaseSlots()
	var rs []pritest.Response
	for _, g := range groups {
		rs = append(rs, pritest.ResponseFor(g, hw.PRSPSuccess))
	}
	if err := ev.drv.Respond(rs...); err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if err := waitDone(t, g); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "Stopped", ev.space.PRIStopped)
	if tail := ev.drv.PRQTail(); tail != 8 {
		t.Fatalf("%d requests issued, want 8", tail)
	}
}
