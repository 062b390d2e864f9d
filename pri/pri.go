// Package pri owns the device side of the PCIe Page Request Interface:
// turning translation faults into page request groups the driver sees in a
// page request queue, the outstanding-request allocation with
// back-pressure, matching the driver's page responses to their groups, and
// the PRI capability's state machine (Enable, Reset, Stopped, Response
// Failure, UPRGI). It also timestamps every fault's stages so its cost can
// be broken down.
//
// Formats (vdevice/hw translation.go, NPFNIC_PRI_* in the C header):
//
//   - Page request queue (device to driver): a ring of PRQ_SIZE 32-byte
//     struct npfnic_page_req, one per page: page VA, PASID, PRG index,
//     R/W/LAST/PASID_VALID flags, and the NIC context the driver batches by
//     (queue, descriptor index, fault kind) plus the detection time. The
//     device publishes its producer index in the PRI status block
//     (prq_tail) after writing the entries and then raises PRQ_VECTOR; the
//     driver returns slots with the PRQ_HEAD doorbell.
//   - Page response queue (driver to device): a ring of PRSPQ_SIZE 16-byte
//     struct npfnic_page_resp {PASID, PRG index, response code, flags} with
//     the PRSPQ_TAIL doorbell; the device reports its consumer index in the
//     status block (prspq_head).
//   - PRI status block (device to driver, 64 bytes): prq_tail, prspq_head,
//     error, error_info, unexpected. The driver zeroes it before enabling
//     the block; the device writes each field when it changes.
//
// Semantics (PCIe Base Specification, Page Request Interface):
//   - A group of n pages takes n credits of the Outstanding Page Request
//     Allocation (latched when PRI is enabled) and one of 512 PRG indexes;
//     both return when its response arrives. A requester that finds no
//     credits, no free index or no queue space waits (Submit) — nothing is
//     dropped — or is told so (TrySubmit).
//   - Responses match outstanding groups by PRG index (and PASID when the
//     group had one): Success completes the group (the datapath retries),
//     Invalid Request completes it with ErrInvalidRequest (the operation
//     fails with an error status the driver sees), Response Failure sets
//     the Response Failure status bit, abandons every outstanding group,
//     and stops PRI (Stopped) until software disables and re-enables it.
//     A response matching nothing sets UPRGI and is counted and ignored.
//   - Clearing Enable stops new requests; Stopped is set once nothing is
//     outstanding. Reset (with Enable clear) abandons every outstanding
//     group.
//
// Threading: configuration hooks and register writes may arrive on the
// vfio-user socket goroutine and never wait for guest memory; responses are
// read by the engine's own goroutine; Submit runs on the faulting
// datapath's goroutine.
package pri

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// Caps is the PRI capability of the configuration space; *pcie.Space
// implements it.
type Caps interface {
	PRIEnabled() bool
	PRIAllocation() uint32
	PRIStatus() uint16
	SetPRIResponseFailure()
	SetPRIUPRGI()
	SetPRIStopped(stopped bool)
	BusMaster() bool
}

// Interrupts fires MSI-X vectors; vdevice.Interrupts implements it.
type Interrupts interface {
	Trigger(vector int) error
}

// Config sets up a Requester.
type Config struct {
	Mem  *guestmem.Memory // required
	Caps Caps             // required
	IRQ  Interrupts       // nil: no interrupts
	// Recorder receives the timing of every finished group; nil: a new
	// Recorder of DefaultRecords.
	Recorder *Recorder
	Log      *slog.Logger
	// Trace records each group as it is queued and answered; nil records
	// nothing.
	Trace *trace.Recorder
}

// Code is a PRG response code.
type Code uint16

// Response codes (PCIe PRG Response Message).
const (
	Success         Code = hw.PRSPSuccess
	InvalidRequest  Code = hw.PRSPInvalidRequest
	ResponseFailure Code = hw.PRSPResponseFailure
)

// Errors.
var (
	ErrDisabled        = errors.New("pri: PRI Enable is clear")
	ErrStopped         = errors.New("pri: PRI stopped after a Response Failure")
	ErrNoQueue         = errors.New("pri: no usable page request queue")
	ErrTooLarge        = errors.New("pri: group larger than the outstanding allocation or the queue")
	ErrEmpty           = errors.New("pri: request without pages")
	ErrBusy            = errors.New("pri: no credits, group index or queue space now")
	ErrClosed          = errors.New("pri: engine closed")
	ErrInvalidRequest  = errors.New("pri: page response Invalid Request")
	ErrResponseFailure = errors.New("pri: page request abandoned: Response Failure")
	ErrReset           = errors.New("pri: page request abandoned: PRI or device reset")
	ErrNoBusMaster     = errors.New("pri: bus mastering disabled")
)

// Request is one page request group: the pages one faulting operation
// needs, and where it faulted.
type Request struct {
	PASID      uint32
	PASIDValid bool
	Pages      []uint64 // VAs of the pages (bits 11:0 ignored), in order
	Write      bool     // write access requested for every page
	Queue      uint16   // NIC queue that faulted
	Desc       uint32   // its descriptor index
	Kind       uint16   // hw.FaultKind*
	Detected   int64    // clock.Nanotime at detection; 0: stamped by Submit
}

// Group is a page request group in flight.
type Group struct {
	e          *Requester
	prgi       uint16
	pasid      uint32
	pasidValid bool
	pages      int
	kind       uint16
	queue      uint16
	done       chan struct{}
	code       Code  // valid after done
	err        error // valid after done
	stamps     [NumStamps]atomic.Int64
	finished   atomic.Bool
}

// PRGI is the group's page request group index.
func (g *Group) PRGI() uint16 { return g.prgi }

// Done is closed when the group has its response (or was abandoned).
func (g *Group) Done() <-chan struct{} { return g.done }

// Wait waits for the response: nil for Success (retry the operation),
// ErrInvalidRequest (fail it), ErrResponseFailure, ErrReset or ErrNoQueue
// when the group was abandoned, or ctx's error. A group whose waiter gave
// up stays outstanding until its response or a reset.
func (g *Group) Wait(ctx context.Context) error {
	select {
	case <-g.done:
		return g.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Code waits for the group to complete and returns its response code
// (0xff for an abandoned group).
func (g *Group) Code() Code {
	<-g.done
	return g.code
}

// Stamp returns timestamp i (Stamp* constants), 0 if not reached.
func (g *Group) Stamp(i int) int64 { return g.stamps[i].Load() }

// Finish marks the end of the faulting operation (its DMA after the
// retry, or its error completion) and records the group's timing. Only
// the first call counts.
func (g *Group) Finish() {
	if !g.finished.CompareAndSwap(false, true) {
		return
	}
	g.stamps[StampDone].Store(clock.Nanotime())
	r := Record{Pages: g.pages, Kind: g.kind, Queue: g.queue, Outcome: OutcomeAbandoned}
	select {
	case <-g.done:
		switch {
		case g.err == nil:
			r.Outcome = OutcomeSuccess
		case errors.Is(g.err, ErrInvalidRequest):
			r.Outcome = OutcomeInvalid
		}
	default:
	}
	for i := range r.Stamps {
		r.Stamps[i] = g.stamps[i].Load()
	}
	g.e.rec.Add(r)
}

// Stats are cumulative counters and the current allocation.
type Stats struct {
	Groups      uint64 // groups queued
	Requests    uint64 // page requests written (one per page)
	Success     uint64 // responses completing a group
	Invalid     uint64
	Failures    uint64 // Response Failure responses
	Unexpected  uint64 // responses matching no outstanding group (UPRGI)
	Malformed   uint64 // responses with a reserved code, ignored
	Ignored     uint64 // responses after a Response Failure
	Abandoned   uint64 // groups ended by Response Failure, reset or queue teardown
	Waits       uint64 // submissions that had to wait (back-pressure)
	IRQErrors   uint64 // interrupts the host could not deliver
	Outstanding int    // groups awaiting a response
	Credits     uint32 // page requests outstanding
	Allocation  uint32 // Outstanding Page Request Allocation latched at enable
}

// Requester is the device side of PRI for one PCI function: it sends
// page requests in groups, takes the page responses, and times each
// fault's stages. Create it with New.
type Requester struct {
	mem  *guestmem.Memory
	caps Caps
	irq  Interrupts
	rec  *Recorder
	log  *slog.Logger
	// trace records groups queued and answered (nil: off).
	trace *trace.Recorder

	mu       sync.Mutex
	enabled  bool // PRI Enable as last applied
	failed   bool // Response Failure received since the last enable
	closed   bool
	alloc    uint32
	used     uint32
	ngroups  int
	groups   [hw.PRGIMax]*Group
	nextPRGI uint16
	changed  chan struct{} // closed and replaced whenever a waiter may proceed
	q        queues        // register block and queue state, under mu

	// writeSem (a one-token semaphore, so waiting for it honours ctx)
	// serialises page request writes: entries are published in the order
	// their slots were taken. Only submitters take it.
	writeSem chan struct{}

	groupsN, requestsN, successN, invalidN, failuresN, unexpectedN atomic.Uint64
	malformedN, ignoredN, abandonedN, waitsN, irqErrN              atomic.Uint64

	kick chan struct{}
	quit chan struct{}
	wg   sync.WaitGroup
}

// New returns an engine in the state the capability's registers give
// (normally PRI disabled); its response goroutine runs until Close.
func New(cfg Config) (*Requester, error) {
	if cfg.Mem == nil || cfg.Caps == nil {
		return nil, errors.New("pri: Config.Mem and Config.Caps are required")
	}
	if cfg.Recorder == nil {
		cfg.Recorder = NewRecorder(DefaultRecords)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	e := &Requester{
		mem: cfg.Mem, caps: cfg.Caps, irq: cfg.IRQ, rec: cfg.Recorder, log: cfg.Log, trace: cfg.Trace,
		changed:  make(chan struct{}),
		writeSem: make(chan struct{}, 1),
		kick:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
	}
	e.q.resetRegs()
	if cfg.Caps.PRIEnabled() {
		e.enabled = true
		e.alloc = cfg.Caps.PRIAllocation()
	}
	e.wg.Add(1)
	go e.run()
	return e, nil
}

// Close abandons every outstanding group, fails waiting submitters with
// ErrClosed and stops the response goroutine.
func (e *Requester) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	e.abandonAllLocked(ErrClosed)
	e.q.stopDMA()
	e.notifyLocked()
	e.mu.Unlock()
	close(e.quit)
	e.wg.Wait()
}

// Recorder returns the fault timing recorder.
func (e *Requester) Recorder() *Recorder { return e.rec }

// Stats returns the counters.
func (e *Requester) Stats() Stats {
	s := Stats{
		Groups: e.groupsN.Load(), Requests: e.requestsN.Load(), Success: e.successN.Load(),
		Invalid: e.invalidN.Load(), Failures: e.failuresN.Load(), Unexpected: e.unexpectedN.Load(),
		Malformed: e.malformedN.Load(), Ignored: e.ignoredN.Load(), Abandoned: e.abandonedN.Load(),
		Waits: e.waitsN.Load(), IRQErrors: e.irqErrN.Load(),
	}
	e.mu.Lock()
	s.Outstanding, s.Credits, s.Allocation = e.ngroups, e.used, e.alloc
	e.mu.Unlock()
	return s
}

// MaxGroupPages is the largest group Submit accepts now: the allocation
// and the page request queue size, whichever is smaller (0 when PRI or the
// queue is off). The datapath splits larger faults into several groups.
func (e *Requester) MaxGroupPages() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.enabled || !e.q.on || e.q.prqBad {
		return 0
	}
	return int(min(e.alloc, e.q.prqSize))
}

// notifyLocked wakes every waiter.
func (e *Requester) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// PRIControl applies a change of the PRI Enable bit (the
// pcie.Hooks.PRIControl hook). Enabling latches the allocation and ends a
// Response Failure stop; disabling refuses new requests and sets Stopped
// once nothing is outstanding. The hook runs only on a change of the bit,
// so an enable latches even if the engine believes PRI is already on: its
// configuration space was reset without hooks since (a function reset
// that reset the engine first).
func (e *Requester) PRIControl(enabled bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case enabled:
		e.enabled = true
		e.alloc = e.caps.PRIAllocation()
		// A Response Failure still flagged keeps the function stopped.
		e.failed = e.caps.PRIStatus()&pcie.PRIStatusRF != 0
		e.caps.SetPRIStopped(e.failed)
	case !enabled && e.enabled:
		e.enabled = false
		e.stopIfIdleLocked()
	}
	e.notifyLocked()
}

// stopIfIdleLocked sets Stopped once PRI is disabled and nothing is
// outstanding. Stopped is only ever changed under mu, so it cannot race
// with an enable.
func (e *Requester) stopIfIdleLocked() {
	if !e.enabled && e.ngroups == 0 {
		e.caps.SetPRIStopped(true)
	}
}

// PRIReset applies a write of the PRI Reset bit (pcie.Hooks.PRIReset).
// With Enable clear it abandons every outstanding group and clears the
// credit count; with Enable set it has no effect.
func (e *Requester) PRIReset() {
	e.mu.Lock()
	if e.enabled || e.caps.PRIEnabled() {
		e.mu.Unlock()
		return
	}
	e.abandonAllLocked(ErrReset)
	e.caps.SetPRIStopped(true)
	e.notifyLocked()
	e.mu.Unlock()
}

// Reset is a function reset: every group abandoned, the queues disabled
// and their registers cleared, and PRI Enable, the allocation and Stopped
// taken again from the configuration space (which the PCI function resets
// first, or keeps on a client disconnect), so engine and capability agree.
// It stops the queues' DMA without waiting: Quiesced and WaitQuiesced tell
// when none is left.
func (e *Requester) Reset() {
	e.mu.Lock()
	e.abandonAllLocked(ErrReset)
	e.enabled, e.failed, e.alloc, e.nextPRGI = false, false, 0, 0
	if e.caps.PRIEnabled() {
		e.enabled = true
		e.alloc = e.caps.PRIAllocation()
		e.failed = e.caps.PRIStatus()&pcie.PRIStatusRF != 0
	}
	e.caps.SetPRIStopped(!e.enabled || e.failed)
	e.q.resetRegs()
	e.notifyLocked()
	e.mu.Unlock()
}

// abandonAllLocked completes every outstanding group with err.
func (e *Requester) abandonAllLocked(err error) {
	for i, g := range e.groups {
		if g != nil {
			e.groups[i] = nil
			e.abandonedN.Add(1)
			e.complete(g, Code(0xff), err)
		}
	}
	e.ngroups, e.used = 0, 0
}

// complete publishes a group's result. Caller holds mu and has removed g
// from groups.
func (e *Requester) complete(g *Group, code Code, err error) {
	g.code, g.err = code, err
	if g.stamps[StampResponse].Load() == 0 {
		g.stamps[StampResponse].Store(clock.Nanotime())
	}
	e.trace.Emit(trace.PageResponse, trace.TrackPRI, uint64(g.prgi), uint64(code))
	close(g.done)
}

// removeLocked takes an outstanding group off the books.
func (e *Requester) removeLocked(g *Group) {
	e.groups[g.prgi] = nil
	e.ngroups--
	e.used -= uint32(g.pages)
}

// Submit queues a page request group and returns it once its requests are
// visible to the driver and the interrupt was raised. It waits for
// credits, a free group index and queue space (back-pressure); it fails at
// once when PRI cannot issue requests at all (ErrDisabled, ErrStopped,
// ErrNoQueue, ErrTooLarge) and with ctx's error if ctx ends first.
func (e *Requester) Submit(ctx context.Context, r Request) (*Group, error) {
	return e.submit(ctx, r, true)
}

// TrySubmit is Submit that never waits: it returns ErrBusy instead. The
// request is not remembered; the caller decides what to do (e.g. an RX
// path that must not stall reception steers the frame elsewhere and
// submits later).
func (e *Requester) TrySubmit(r Request) (*Group, error) {
	return e.submit(context.Background(), r, false)
}

// Resolve is Submit followed by Wait; it returns the group (for Finish)
// even when the response is an error.
func (e *Requester) Resolve(ctx context.Context, r Request) (*Group, error) {
	g, err := e.Submit(ctx, r)
	if err != nil {
		return nil, err
	}
	return g, g.Wait(ctx)
}

// admitLocked says whether PRI can take a group of n pages at all.
func (e *Requester) admitLocked(n int) error {
	switch {
	case e.closed:
		return ErrClosed
	case !e.enabled:
		return ErrDisabled
	case e.failed || e.caps.PRIStatus()&pcie.PRIStatusRF != 0:
		return ErrStopped
	case !e.q.on || e.q.prqBad:
		return ErrNoQueue
	case uint64(n) > uint64(e.alloc) || uint64(n) > uint64(e.q.prqSize):
		return ErrTooLarge
	}
	return nil
}

// freePRGILocked returns a free group index, round robin, or -1.
func (e *Requester) freePRGILocked() int {
	for i := range hw.PRGIMax {
		p := (int(e.nextPRGI) + i) % hw.PRGIMax
		if e.groups[p] == nil {
			e.nextPRGI = uint16((p + 1) % hw.PRGIMax)
			return p
		}
	}
	return -1
}

// waitLocked releases mu until something changes or ctx ends.
func (e *Requester) waitLocked(ctx context.Context) error {
	ch := e.changed
	e.mu.Unlock()
	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = ctx.Err()
	}
	e.mu.Lock()
	return err
}

func (e *Requester) submit(ctx context.Context, r Request, wait bool) (*Group, error) {
	detected := r.Detected
	if detected == 0 {
		detected = clock.Nanotime()
	}
	n := len(r.Pages)
	if n == 0 {
		return nil, ErrEmpty
	}
	// Take credits and a group index.
	e.mu.Lock()
	waited := false
	var prgi int
	for {
		if err := e.admitLocked(n); err != nil {
			e.mu.Unlock()
			return nil, err
		}
		if e.used+uint32(n) <= e.alloc {
			if prgi = e.freePRGILocked(); prgi >= 0 {
				break
			}
		}
		if !wait {
			e.mu.Unlock()
			return nil, ErrBusy
		}
		if !waited {
			waited = true
			e.waitsN.Add(1)
		}
		if err := e.waitLocked(ctx); err != nil {
			e.mu.Unlock()
			return nil, err
		}
	}
	g := &Group{e: e, prgi: uint16(prgi), pasid: r.PASID, pasidValid: r.PASIDValid, pages: n,
		kind: r.Kind, queue: r.Queue, done: make(chan struct{})}
	g.stamps[StampDetected].Store(detected)
	e.groups[prgi] = g
	e.ngroups++
	e.used += uint32(n)
	gen := e.q.gen
	e.mu.Unlock()

	// Take queue slots and write the requests, in order with other
	// submitters.
	if !e.acquireWrite(ctx, wait) {
		err := ErrBusy
		if wait {
			err = ctx.Err()
		}
		e.mu.Lock()
		e.dropLocked(g, err)
		e.mu.Unlock()
		return nil, err
	}
	defer func() { <-e.writeSem }()
	e.mu.Lock()
	for {
		select {
		case <-g.done: // abandoned meanwhile (reset, Response Failure)
			e.mu.Unlock()
			return nil, g.err
		default:
		}
		if !e.enabled || e.failed {
			// Enable was cleared before the requests went out: they must
			// not be issued now.
			err := ErrDisabled
			if e.failed {
				err = ErrStopped
			}
			e.dropLocked(g, err)
			e.mu.Unlock()
			return nil, err
		}
		if e.q.gen != gen || !e.q.on || e.q.prqBad {
			e.dropLocked(g, ErrNoQueue)
			e.mu.Unlock()
			return nil, ErrNoQueue
		}
		if e.q.prqTail-e.q.prqHead+uint32(n) <= e.q.prqSize {
			break
		}
		if !wait {
			e.dropLocked(g, ErrBusy)
			e.mu.Unlock()
			return nil, ErrBusy
		}
		if !waited {
			waited = true
			e.waitsN.Add(1)
		}
		if err := e.waitLocked(ctx); err != nil {
			e.dropLocked(g, err)
			e.mu.Unlock()
			return nil, err
		}
	}
	base, size, tail, status, vector, dma := e.q.prqBase, e.q.prqSize, e.q.prqTail, e.q.status, e.q.prqVector, e.q.dma
	e.mu.Unlock()

	// The entries, the producer index and the interrupt are one unit of
	// the queues' instance: none of them follows a PRI_CTRL disable or
	// reset that has reported quiesced.
	if !dma.Begin() {
		e.mu.Lock()
		e.dropLocked(g, ErrNoQueue)
		e.mu.Unlock()
		return nil, ErrNoQueue
	}
	defer dma.End()
	if !e.caps.BusMaster() {
		e.mu.Lock()
		e.dropLocked(g, ErrNoBusMaster)
		e.mu.Unlock()
		return nil, ErrNoBusMaster
	}

	var b [hw.PageReqSize]byte
	flags := uint16(hw.PRQRead)
	if r.Write {
		flags |= hw.PRQWrite
	}
	if r.PASIDValid {
		flags |= hw.PRQPASIDValid
	}
	for i, va := range r.Pages {
		f := flags
		if i == n-1 {
			f |= hw.PRQLast
		}
		hw.PageReqAddr.Put(b[:], va&^(hw.XlatPageSize-1))
		hw.PageReqPASID.Put(b[:], r.PASID)
		hw.PageReqPRGI.Put(b[:], uint16(prgi))
		hw.PageReqFlags.Put(b[:], f)
		hw.PageReqQueue.Put(b[:], r.Queue)
		hw.PageReqKind.Put(b[:], r.Kind)
		hw.PageReqDesc.Put(b[:], r.Desc)
		hw.PageReqStamp.Put(b[:], uint64(detected))
		if err := dma.WriteAt(base+uint64((tail+uint32(i))&(size-1))*hw.PageReqSize, b[:]); err != nil {
			return nil, e.queueFailed(g, gen, hw.PRIErrBadPRQ, tail+uint32(i))
		}
	}
	// Account the entries before publishing them: the driver may return
	// their slots (PRQ_HEAD) as soon as it sees the new producer index.
	e.mu.Lock()
	if e.q.gen == gen {
		e.q.prqTail = tail + uint32(n)
	}
	e.mu.Unlock()
	g.stamps[StampQueued].Store(clock.Nanotime())
	e.trace.Emit(trace.PageRequest, trace.TrackPRI, uint64(prgi), r.Pages[0]&^(hw.XlatPageSize-1))
	if err := dma.WriteU32(status+uint64(hw.PRIStatusPRQTail.Offset), tail+uint32(n)); err != nil {
		return nil, e.queueFailed(g, gen, hw.PRIErrBadStatusAddr, 0)
	}
	e.groupsN.Add(1)
	e.requestsN.Add(uint64(n))
	g.stamps[StampInterrupt].Store(clock.Nanotime())
	e.trigger(vector)
	return g, nil
}

// acquireWrite takes the right to write page requests; without wait it
// only tries.
func (e *Requester) acquireWrite(ctx context.Context, wait bool) bool {
	if !wait {
		select {
		case e.writeSem <- struct{}{}:
			return true
		default:
			return false
		}
	}
	select {
	case e.writeSem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// dropLocked takes back a group that was never delivered.
func (e *Requester) dropLocked(g *Group, err error) {
	if e.groups[g.prgi] == g {
		e.removeLocked(g)
		e.complete(g, Code(0xff), err)
		e.stopIfIdleLocked()
		e.notifyLocked()
	}
}

// queueFailed puts the page request queue in its error state after a
// write into guest memory failed, and fails the group being written.
func (e *Requester) queueFailed(g *Group, gen uint64, code, info uint32) error {
	e.mu.Lock()
	if e.q.gen == gen {
		e.q.prqBad = true
		e.q.setErrorLocked(code, info)
	}
	e.dropLocked(g, ErrNoQueue)
	e.mu.Unlock()
	e.log.Warn("pri: page request queue unusable", "error", code, "info", info)
	e.wake()
	return ErrNoQueue
}

func (e *Requester) trigger(vector int) {
	if e.irq == nil {
		return
	}
	if err := e.irq.Trigger(vector); err != nil {
		e.irqErrN.Add(1)
	}
}
