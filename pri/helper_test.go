package pri_test

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/pri/pritest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// irqs records triggered vectors and wakes a waiting driver.
type irqs struct {
	mu   sync.Mutex
	n    map[int]int
	wake chan struct{}
	fail bool
}

func newIRQs() *irqs { return &irqs{n: map[int]int{}, wake: make(chan struct{}, 1)} }

func (q *irqs) Trigger(v int) error {
	q.mu.Lock()
	q.n[v]++
	fail := q.fail
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	if fail {
		return errors.New("no eventfd")
	}
	return nil
}

func (q *irqs) count(v int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n[v]
}

type env struct {
	g     *atstest.Guest
	space *pcie.Space
	e     *pri.Requester
	drv   *pritest.Driver
	irq   *irqs
}

type envOpts struct {
	capacity      uint32 // PRI Outstanding Page Request Capacity (default 64)
	alloc         uint32 // allocation written before enabling (default capacity)
	prq, rsp      uint32 // queue sizes (default 64, 16)
	pasidRequired bool
	noEnable      bool // leave PRI Enable clear
	noDriver      bool
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	if o.capacity == 0 {
		o.capacity = 64
	}
	if o.alloc == 0 {
		o.alloc = o.capacity
	}
	if o.prq == 0 {
		o.prq = 64
	}
	if o.rsp == 0 {
		o.rsp = 16
	}
	space, err := pcie.Build(pcie.Config{
		VendorID: hw.VendorID, DeviceID: hw.DeviceID, ClassCode: hw.ClassCode,
		PRI:   &pcie.PRI{OutstandingCapacity: o.capacity, PASIDRequired: o.pasidRequired},
		PASID: &pcie.PASID{MaxWidth: 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := &env{g: atstest.NewGuest(t, 4<<20), space: space, irq: newIRQs()}
	e, err := pri.New(pri.Config{Mem: ev.g.Mem, Caps: space, IRQ: ev.irq})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ev.e = e
	space.SetHooks(pcie.Hooks{PRIControl: e.PRIControl, PRIReset: e.PRIReset})
	ev.cfgWrite16(pcie.OffCommand, pcie.CmdBusMaster|pcie.CmdMemory)
	ev.setAlloc(o.alloc)
	if !o.noEnable {
		ev.setPRI(true)
	}
	if !o.noDriver {
		ev.drv = pritest.NewDriver(ev.g, hw.Offsets(e), o.prq, o.rsp)
	}
	return ev
}

func (ev *env) cfgWrite16(off int, v uint16) {
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], v)
	if err := ev.space.Write(off, b[:]); err != nil {
		panic(err)
	}
}

// PRI capability registers, as offsets from its start.
const (
	priCtrl   = 0x04
	priStatus = 0x06
	priAlloc  = 0x0c
)

func (ev *env) setPRI(enable bool) {
	v := uint16(0)
	if enable {
		v = pcie.PRICtrlEnable
	}
	ev.cfgWrite16(ev.space.Layout().PRI+priCtrl, v)
}

func (ev *env) resetPRI() { ev.cfgWrite16(ev.space.Layout().PRI+priCtrl, pcie.PRICtrlReset) }

func (ev *env) clearPRIStatus(bits uint16) { ev.cfgWrite16(ev.space.Layout().PRI+priStatus, bits) }

func (ev *env) setAlloc(n uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], n)
	if err := ev.space.Write(ev.space.Layout().PRI+priAlloc, b[:]); err != nil {
		panic(err)
	}
}

func req(pages ...uint64) pri.Request {
	return pri.Request{PASID: 3, PASIDValid: true, Pages: pages, Write: true, Queue: 2, Desc: 17, Kind: hw.FaultKindTxBuf}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustSubmit(t testing.TB, e *pri.Requester, r pri.Request) *pri.Group {
	t.Helper()
	g, err := e.Submit(ctxT(t), r)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return g
}

// groups waits until the driver has read n groups.
func (ev *env) groups(t testing.TB, n int) []pritest.Group {
	t.Helper()
	var out []pritest.Group
	poll(func() bool {
		out = append(out, ev.drv.Groups()...)
		return len(out) >= n
	})
	if len(out) != n {
		t.Fatalf("driver saw %d groups, want %d", len(out), n)
	}
	return out
}

func waitDone(t testing.TB, g *pri.Group) error {
	t.Helper()
	select {
	case <-g.Done():
		return g.Wait(context.Background())
	case <-time.After(10 * time.Second):
		t.Fatal("group never completed")
		return nil
	}
}

// eventually polls cond for up to 10 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !poll(cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// poll reports whether cond becomes true within 10 s. It yields to the
// engine's goroutines before it starts sleeping: the engine usually
// answers within microseconds, and a time.Sleep of any length under a
// millisecond costs about 1.3 ms on Linux (the runtime's timers wait in
// epoll with millisecond resolution), which made FuzzPageResponses run at
// a few hundred inputs per second.
func poll(cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for spins := 0; !cond(); spins++ {
		if time.Now().After(deadline) {
			return cond()
		}
		if spins < 1000 {
			runtime.Gosched()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
	return true
}

// blocked reports whether ch stays open for a while.
func blocked[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return false
	case <-time.After(50 * time.Millisecond):
		return true
	}
}
