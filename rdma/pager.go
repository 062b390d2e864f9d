package rdma

// The fault path of memory regions (interface 2.5, on-demand paging), top
// to bottom: the RC engine's access to a region's page does not translate
// (mrMem returns an xlatFault) → ibrc applies its policy (the responder's
// RNR NAK or drop, the requester's stall or dropped READ response) and
// raises a page request (ibrc.PageRequester) → priPager queues it as a
// one-page group through PRI without waiting → a waiter takes the page
// response → done(true) lets ibrc retry the access, done(false) fails it
// (LOC_ACCESS_ERR at the requester, a remote access error NAK at the
// responder). Invalidation is not on this path: ats drops translations
// without looking at outstanding page requests.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// PageRequests is the function's page request interface as the RDMA
// engine uses it; *pri.Requester implements it.
type PageRequests interface {
	TrySubmit(r pri.Request) (*pri.Group, error)
	// MaxGroupPages is the most pages one group may ask for (the PRI
	// allocation and the queue's size); 0 while PRI is disabled.
	MaxGroupPages() int
}

const (
	// busyRetry is the pause before a page request that PRI had no room
	// for (credits, a group index, queue space) is offered again: it is
	// never dropped, and the engine's goroutines never wait for PRI.
	busyRetry = 50 * time.Microsecond
	// busMasterRetry is the pause before an access refused for lack of bus
	// mastering is retried: no page request can resolve that, and nothing
	// fails because the driver toggled the bit.
	busMasterRetry = 100 * time.Microsecond
)

// priPager is the ibrc.PageRequester of one ibrc.Transport (one RESET's
// objects): it turns a fault into a PRI page request group of the faulting
// page, in the region's PASID, with the QPN as the NIC context the driver
// sees (queue = QPN & 0xffff, desc = QPN) and the kind of the side that
// faulted: FAULT_KIND_RC_RECV for the responder, FAULT_KIND_RC_SEND for
// the requester.
//
// Threading. RequestPage runs on whatever goroutine flushed the ibrc
// engine's output (the port's reader, the worker, a timer) outside the
// engine's locks; it never waits: PRI's TrySubmit, or a retry on the
// engine's clock. Each group queued gets a waiter goroutine that calls
// done with the response. done is never called from RequestPage itself.
//
// Lifetime. When RESET replaces the ibrc engine (or the engine closes) its
// pager stops: waiters return at once without calling done (the QPs that
// asked are destroyed; ibrc's done would find them dead anyway), and
// retries pending on the clock are not made. The groups stay outstanding
// in PRI until the driver answers them or PRI resets; an answer then
// matches a group nobody waits for, which is harmless. A PRI reset (or a
// Response Failure, or the function reset) abandons groups: their waiters
// see the group done with an error and fail the access.
type priPager struct {
	e    *Engine
	pri  PageRequests
	stop chan struct{}
	once sync.Once
}

func newPriPager(e *Engine, p PageRequests) *priPager {
	return &priPager{e: e, pri: p, stop: make(chan struct{})}
}

// close stops the pager (see Lifetime).
func (p *priPager) close() { p.once.Do(func() { close(p.stop) }) }

func (p *priPager) stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// RequestPage implements ibrc.PageRequester.
func (p *priPager) RequestPage(r ibrc.PageRequest, done func(ok bool)) {
	m, _ := r.Mem.(*mrMem)
	if m == nil {
		// Not a region's memory: nothing to ask for.
		p.e.tasks.start(func() { done(false) })
		return
	}
	kind := uint16(hw.FaultKindRCSend)
	if r.Role == ibrc.RoleResponder {
		kind = hw.FaultKindRCRecv
	}
	detected := r.Detected
	if detected == 0 {
		detected = clock.Nanotime()
	}
	// ibrc traced the fault when it took it (trace.Fault on TrackRC).
	req := pri.Request{PASID: m.pasid, PASIDValid: true, Pages: prefaultPages(r.VA, r.Span, p.maxPages()),
		Write: r.Write, Queue: uint16(r.QPN), Desc: r.QPN, Kind: kind, Detected: detected}
	p.submit(req, done)
}

// maxPages is how many pages one fault's group may ask for now:
// RDMA_PREFAULT, within what PRI can take in one group.
func (p *priPager) maxPages() int {
	n := int(p.e.prefault.Load())
	if g := p.pri.MaxGroupPages(); g > 0 {
		n = min(n, g)
	}
	return max(n, 1)
}

// prefaultPages lists the pages a fault at va asks for: va's page and the
// ones after it the request touches (span bytes from va), in order
// (whole-request prefault: one fault, one RNR NAK, for a cold buffer), at
// most limit.
func prefaultPages(va, span uint64, limit int) []uint64 {
	first := va &^ (hw.XlatPageSize - 1)
	end := va + span // the request's end, exclusive
	if span == 0 || end < va {
		end = va + 1
	}
	n := int(min((end-first+hw.XlatPageSize-1)/hw.XlatPageSize, uint64(limit)))
	pages := make([]uint64, 0, n)
	for i := range n {
		pages = append(pages, first+uint64(i)*hw.XlatPageSize)
	}
	return pages
}

// submit offers req to PRI: a group queued gets a waiter; no room now is
// retried after busyRetry; bus mastering off retries the access after
// busMasterRetry; anything else (PRI disabled, stopped, no usable queue,
// closed) fails the access at once.
func (p *priPager) submit(req pri.Request, done func(bool)) {
	if p.stopped() {
		return
	}
	if !p.e.busMaster.Load() {
		p.later(busMasterRetry, func() { done(true) })
		return
	}
	g, err := p.pri.TrySubmit(req)
	switch {
	case err == nil:
		p.wait(g, done)
	case errors.Is(err, pri.ErrBusy):
		p.later(busyRetry, func() { p.submit(req, done) })
	case errors.Is(err, pri.ErrNoBusMaster):
		p.later(busMasterRetry, func() { done(true) })
	default:
		p.e.tasks.start(func() { done(false) })
	}
}

// later runs f after d on the engine's clock, unless the pager stopped.
func (p *priPager) later(d time.Duration, f func()) {
	p.e.cfg.Clock.AfterFunc(d, func() {
		if !p.stopped() {
			f()
		}
	})
}

// wait starts g's waiter: done(true) for Success, done(false) for Invalid
// Request or an abandoned group (Response Failure, PRI or function reset).
// The group's timing is recorded at the response (pri.Group.Finish): the
// retried access that ends the fault happens inside ibrc later, and the
// trace shows it (trace.RCResume, trace.RCTimelines).
func (p *priPager) wait(g *pri.Group, done func(bool)) {
	p.e.tasks.start(func() {
		select {
		case <-g.Done():
		case <-p.stop:
			return
		}
		err := g.Wait(context.Background())
		g.Finish()
		done(err == nil)
	})
}

// tasks are the goroutines the pagers started (waiters, failures handed to
// ibrc): Close waits for them, and tests count them. Call init first.
type tasks struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   sync.Cond // n reached 0
}

func (t *tasks) init() { t.idle.L = &t.mu }

// start runs f on a goroutine of its own unless the engine closed.
func (t *tasks) start(f func()) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.n++
	t.mu.Unlock()
	go func() {
		defer t.end()
		f()
	}()
}

func (t *tasks) end() {
	t.mu.Lock()
	if t.n--; t.n == 0 {
		t.idle.Broadcast()
	}
	t.mu.Unlock()
}

// closeAndWait starts no more goroutines and waits for those running.
func (t *tasks) closeAndWait() {
	t.mu.Lock()
	t.closed = true
	for t.n > 0 {
		t.idle.Wait()
	}
	t.mu.Unlock()
}

// running returns the number of goroutines running.
func (t *tasks) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}
