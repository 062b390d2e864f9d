// Package clock owns time for every engine of the device: the Clock
// interface the transport and moderation timers come from, the real clock
// for live use, Virtual, a deterministic discrete-event clock for tests and
// simulations (where a 655 ms RNR timer costs no wall time), and Nanotime,
// the one timestamp that fault records, page requests and the datapath
// share.
package clock

import (
	"container/heap"
	"sync"
	"time"
)

// Timer is a pending callback; Stop cancels it and reports whether it was
// still pending.
type Timer interface {
	Stop() bool
}

// Clock tells the time and runs callbacks after a delay. Callbacks run on a
// goroutine of the clock's choosing and must do their own locking.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

var epoch = time.Now()

// Nanotime is the device's timestamp: monotonic nanoseconds since the
// process started. Fault detection in the datapath and every stage stamp of
// a page request group use it, so their differences are stage latencies.
func Nanotime() int64 { return int64(time.Since(epoch)) }

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Virtual is a discrete-event clock: time advances only when Run, RunUntil
// or Step executes the next scheduled callback. Callbacks scheduled for the
// same instant run in the order they were scheduled. Callbacks run on the
// goroutine that drives the clock and may schedule further callbacks.
type Virtual struct {
	mu    sync.Mutex
	epoch time.Time
	now   time.Duration
	seq   uint64
	q     eventHeap
}

// NewVirtual returns a virtual clock reading epoch.
func NewVirtual(epoch time.Time) *Virtual { return &Virtual{epoch: epoch} }

// Now returns the virtual time.
func (v *Virtual) Now() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.epoch.Add(v.now)
}

// Elapsed returns the virtual time since the epoch.
func (v *Virtual) Elapsed() time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

type event struct {
	at    time.Duration
	seq   uint64
	f     func()
	index int // in the heap, -1 once fired or stopped
	v     *Virtual
}

// Stop cancels the callback.
func (e *event) Stop() bool {
	e.v.mu.Lock()
	defer e.v.mu.Unlock()
	if e.index < 0 {
		return false
	}
	heap.Remove(&e.v.q, e.index)
	return true
}

// AfterFunc schedules f at Now()+d (negative d counts as 0).
func (v *Virtual) AfterFunc(d time.Duration, f func()) Timer {
	v.mu.Lock()
	defer v.mu.Unlock()
	if d < 0 {
		d = 0
	}
	v.seq++
	e := &event{at: v.now + d, seq: v.seq, f: f, v: v}
	heap.Push(&v.q, e)
	return e
}

// Pending returns the number of scheduled callbacks.
func (v *Virtual) Pending() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.q)
}

// Step runs the earliest callback, advancing time to it; it returns false
// when nothing is scheduled.
func (v *Virtual) Step() bool {
	v.mu.Lock()
	if len(v.q) == 0 {
		v.mu.Unlock()
		return false
	}
	e := heap.Pop(&v.q).(*event)
	v.now = e.at
	v.mu.Unlock()
	e.f()
	return true
}

// RunUntil runs callbacks scheduled up to and including the virtual time
// since epoch t, or until stop returns true (checked after each callback;
// nil means never), then sets the time to t if it got there. It returns the
// number of callbacks run.
func (v *Virtual) RunUntil(t time.Duration, stop func() bool) int {
	n := 0
	for {
		v.mu.Lock()
		if len(v.q) == 0 || v.q[0].at > t {
			if v.now < t {
				v.now = t
			}
			v.mu.Unlock()
			return n
		}
		e := heap.Pop(&v.q).(*event)
		v.now = e.at
		v.mu.Unlock()
		e.f()
		n++
		if stop != nil && stop() {
			return n
		}
	}
}

// Run runs callbacks until none is scheduled or stop returns true.
func (v *Virtual) Run(stop func() bool) int {
	n := 0
	for v.Step() {
		n++
		if stop != nil && stop() {
			break
		}
	}
	return n
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *eventHeap) Push(x any) {
	e := x.(*event)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}
