package pri

import (
	"context"

	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// queues is the PRI register block and the state of the two queues. All
// of it is guarded by Requester.mu.
//
// Quiesce: each PRI_CTRL enable starts an instance with its own
// guestmem.Stream (dma). Page request writes with their status update and
// interrupt, each page response read with its consumer-index update, the
// probe and error reports are units of it; disable and reset only Stop it
// (on whatever goroutine they arrive, without waiting), and PRI_CTRL reads
// BUSY until every stopped instance has quiesced.
type queues struct {
	reg [(hw.PRIRegEnd - hw.ATSRegEnd) / 4]uint32 // shadow of the RW registers

	gen    uint64 // bumped by every enable, disable and reset
	on     bool   // PRI_CTRL.ENABLE
	fresh  bool   // enabled; guest memory not probed yet
	status uint64 // latched status block IOVA

	prqBase   uint64
	prqSize   uint32
	prqTail   uint32 // entries published (producer index)
	prqHead   uint32 // entries the driver consumed (PRQ_HEAD doorbell)
	prqVector int
	prqBad    bool // error state: no more page requests

	prspBase   uint64
	prspSize   uint32
	prspHead   uint32 // responses consumed
	prspTail   uint32 // PRSPQ_TAIL doorbell
	prspHalted bool

	errCode, errInfo uint32
	errDirty         bool
	unexpected       uint32
	unexpectedDirty  bool

	dma      *guestmem.Stream  // the enabled instance's DMA; nil while disabled
	draining guestmem.Draining // stopped instances not known to have quiesced
}

func (q *queues) resetRegs() {
	q.stopDMA()
	gen, draining := q.gen, q.draining
	*q = queues{gen: gen + 1, draining: draining}
	q.reg[(hw.RegPRQVector-hw.ATSRegEnd)/4] = hw.PRQVectorDefault
}

// stopDMA stops the enabled instance's DMA, if any, without waiting for
// its unit in flight.
func (q *queues) stopDMA() {
	if q.dma == nil {
		return
	}
	q.dma.Stop()
	q.draining.Add(q.dma)
	q.dma = nil
}

// busy reports PRI_CTRL.BUSY: an instance is enabled, or a stopped one may
// still have a unit in flight.
func (q *queues) busy() bool {
	return q.draining.Busy() || q.dma != nil
}

// Quiesced reports whether the PRI queues are neither enabled
// (PRI_CTRL.ENABLE) nor have a stopped instance with a unit in flight:
// from then on PRI reads and writes none of the driver's queues or status
// block and raises no interrupt. It is PRI_CTRL.BUSY inverted.
func (e *Requester) Quiesced() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.q.busy()
}

// WaitQuiesced waits until every stopped PRI instance has quiesced (after
// Reset, or PRI_CTRL reset or disable), or ctx ends. An instance still
// enabled is not waited for. Bound ctx: a unit in flight may wait on the
// vfio-user client (see hw.Quiesce).
func (e *Requester) WaitQuiesced(ctx context.Context) error {
	for {
		e.mu.Lock()
		done := e.q.draining.Next()
		e.mu.Unlock()
		if done == nil {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (q *queues) r(off uint32) uint32 { return q.reg[(off-hw.ATSRegEnd)/4] }

func (q *queues) setErrorLocked(code, info uint32) {
	if q.errCode == 0 {
		q.errCode, q.errInfo, q.errDirty = code, info, true
	}
}

// Kick makes the engine look at the response doorbell again; the PCI
// function calls it when bus mastering is turned on.
func (e *Requester) Kick() { e.wake() }

func (e *Requester) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// Blocks implements hw.RegisterBlock.
func (e *Requester) Blocks() []hw.Block { return []hw.Block{hw.BlockPRI} }

// ReadRegister implements hw.RegisterBlock for the PRI block. It never
// blocks on guest memory.
func (e *Requester) ReadRegister(r hw.Register, _ int) (v uint32, ok bool) {
	off := r.Offset
	e.mu.Lock()
	defer e.mu.Unlock()
	switch off {
	case hw.RegPRICtrl:
		if e.q.on {
			v = hw.PRICtrlEnable
		}
		if e.q.busy() {
			v |= hw.PRICtrlBusy
		}
		return v, true
	case hw.RegPRIError:
		return e.q.errCode, true
	}
	return e.q.r(off), true
}

// WriteRegister implements hw.RegisterBlock for the PRI block. It never
// blocks on guest memory: enabling latches the registers and the response
// goroutine probes the memory afterwards.
func (e *Requester) WriteRegister(r hw.Register, _ int, v uint32) (ok bool) {
	off := r.Offset
	e.mu.Lock()
	q := &e.q
	switch off {
	case hw.RegPRICtrl:
		switch en := v&hw.PRICtrlEnable != 0; {
		case v&hw.PRICtrlReset != 0:
			e.teardownLocked()
			q.resetRegs()
		case en && !q.on:
			e.latchLocked()
		case !en && q.on:
			e.teardownLocked()
			q.gen++
			q.on, q.fresh = false, false
			q.stopDMA()
		}
		e.notifyLocked()
	case hw.RegPRQHead:
		if q.on && !q.prqBad {
			if v-q.prqHead > q.prqTail-q.prqHead {
				q.prqBad = true
				q.setErrorLocked(hw.PRIErrBadHead, v)
			} else {
				q.prqHead = v
			}
			e.notifyLocked()
		}
	case hw.RegPRSPQTail:
		q.prspTail = v
	default:
		q.reg[(off-hw.ATSRegEnd)/4] = v
	}
	e.mu.Unlock()
	e.wake()
	return true
}

// teardownLocked abandons every outstanding group when the queues go
// away (no response can arrive any more).
func (e *Requester) teardownLocked() {
	if e.ngroups > 0 {
		e.abandonAllLocked(ErrNoQueue)
		e.stopIfIdleLocked()
	}
}

// latchLocked applies PRI_CTRL.ENABLE: checks that need no guest memory
// happen here, the response goroutine probes the memory.
func (e *Requester) latchLocked() {
	q := &e.q
	q.stopDMA()
	q.dma = e.mem.NewStream("pri")
	q.gen++
	q.on, q.fresh = true, true
	q.prqBad, q.prspHalted = false, false
	q.errCode, q.errInfo, q.errDirty = 0, 0, false
	q.unexpected, q.unexpectedDirty = 0, false
	q.prqTail, q.prqHead, q.prspHead, q.prspTail = 0, 0, 0, 0
	q.prqVector = int(q.r(hw.RegPRQVector))
	q.status = uint64(q.r(hw.RegPRIStatusHi))<<32 | uint64(q.r(hw.RegPRIStatusLo))
	if q.status == 0 || q.status%hw.XlatStatusAlign != 0 {
		// Without its producer index the driver cannot see requests.
		q.status = 0
		q.prqBad = true
		q.setErrorLocked(hw.PRIErrBadStatusAddr, 0)
	} else {
		q.dma.Own(q.status, hw.PRIStatusSize)
	}
	okRing := func(base uint64, size uint32, entry uint64) bool {
		return base%entry == 0 && size >= hw.XlatQueueSizeMin && size <= hw.XlatQueueSizeMax &&
			size&(size-1) == 0 && base+uint64(size)*entry > base
	}
	q.prqBase = uint64(q.r(hw.RegPRQBaseHi))<<32 | uint64(q.r(hw.RegPRQBaseLo))
	q.prqSize = q.r(hw.RegPRQSize)
	if !okRing(q.prqBase, q.prqSize, hw.PageReqSize) {
		q.prqBad = true
		q.prqSize = 0
		q.setErrorLocked(hw.PRIErrBadPRQ, 0)
	} else {
		q.dma.Own(q.prqBase, uint64(q.prqSize)*hw.PageReqSize)
	}
	q.prspBase = uint64(q.r(hw.RegPRSPQBaseHi))<<32 | uint64(q.r(hw.RegPRSPQBaseLo))
	q.prspSize = q.r(hw.RegPRSPQSize)
	if !okRing(q.prspBase, q.prspSize, hw.PageRespSize) {
		q.prspHalted = true
		q.prspSize = 0
		q.setErrorLocked(hw.PRIErrBadPRSPQ, 0)
	} else {
		q.dma.Own(q.prspBase, uint64(q.prspSize)*hw.PageRespSize)
	}
}

func (e *Requester) run() {
	defer e.wg.Done()
	for {
		select {
		case <-e.kick:
			e.service()
		case <-e.quit:
			return
		}
	}
}

// headBatch is how many responses the device consumes between two
// prspq_head updates in a long batch.
const headBatch = 32

// service probes freshly enabled queues, publishes errors, and consumes
// the posted page responses.
func (e *Requester) service() {
	e.mu.Lock()
	if !e.q.on || e.q.dma == nil {
		e.mu.Unlock()
		return
	}
	gen, fresh, dma := e.q.gen, e.q.fresh, e.q.dma
	e.q.fresh = false
	e.mu.Unlock()
	if fresh && !e.probe(gen, dma) {
		return
	}
	for {
		e.mu.Lock()
		q := &e.q
		if q.gen != gen {
			e.mu.Unlock()
			return
		}
		status, base, size, head, tail, halted := q.status, q.prspBase, q.prspSize, q.prspHead, q.prspTail, q.prspHalted
		errDirty, uDirty := q.errDirty, q.unexpectedDirty
		code, info, unexpected, vector := q.errCode, q.errInfo, q.unexpected, q.prqVector
		q.errDirty, q.unexpectedDirty = false, false
		e.mu.Unlock()
		if errDirty || uDirty {
			if !dma.Begin() {
				return
			}
			if status != 0 {
				var b [hw.PRIStatusSize]byte
				hw.PRIStatusError.Put(b[:], code)
				hw.PRIStatusErrorInfo.Put(b[:], info)
				hw.PRIStatusUnexpected.Put(b[:], unexpected)
				from, to := hw.PRIStatusError.Offset, hw.PRIStatusUnexpected.Offset+4
				_ = dma.WriteAt(status+uint64(from), b[from:to])
			}
			if errDirty {
				e.trigger(vector)
			}
			dma.End()
		}
		if halted || head == tail || !e.caps.BusMaster() {
			return
		}
		if tail-head > size {
			e.haltResponses(gen, hw.PRIErrBadTail, tail)
			continue
		}
		if !dma.Begin() {
			return
		}
		var b [hw.PageRespSize]byte
		if err := dma.ReadAt(base+uint64(head&(size-1))*hw.PageRespSize, b[:]); err != nil {
			dma.End()
			e.haltResponses(gen, hw.PRIErrBadPRSPQ, head)
			continue
		}
		e.respond(hw.PageRespPASID.Get(b[:]), hw.PageRespPRGI.Get(b[:]), hw.PageRespCode.Get(b[:]), hw.PageRespFlags.Get(b[:]))
		head++
		e.mu.Lock()
		if e.q.gen == gen {
			e.q.prspHead = head
		}
		e.mu.Unlock()
		if status != 0 && (head == tail || head%headBatch == 0) {
			_ = dma.WriteU32(status+uint64(hw.PRIStatusPRSPQHead.Offset), head)
		}
		dma.End()
	}
}

func (e *Requester) haltResponses(gen uint64, code, info uint32) {
	e.mu.Lock()
	if e.q.gen == gen {
		e.q.prspHalted = true
		e.q.setErrorLocked(code, info)
	}
	e.mu.Unlock()
	e.log.Warn("pri: page response queue halted", "error", code, "info", info)
}

// probe checks, once per enable, the guest memory the registers named; it
// reports false if the instance was stopped first.
// The status block write also clears the fields the response goroutine
// owns; prq_tail belongs to the submitters (and is zero: the driver
// zeroes the block before enabling).
func (e *Requester) probe(gen uint64, dma *guestmem.Stream) bool {
	e.mu.Lock()
	q := e.q
	e.mu.Unlock()
	if !dma.Begin() {
		return false
	}
	var code uint32
	prqBad, prspBad := false, false
	if q.status != 0 {
		var zero [16]byte
		if dma.WriteAt(q.status+uint64(hw.PRIStatusPRSPQHead.Offset), zero[:]) != nil {
			code, prqBad = hw.PRIErrBadStatusAddr, true
		}
	}
	var b [hw.PageReqSize]byte
	if q.prqSize != 0 && (dma.ReadAt(q.prqBase, b[:]) != nil ||
		dma.ReadAt(q.prqBase+uint64(q.prqSize-1)*hw.PageReqSize, b[:]) != nil) {
		prqBad = true
		if code == 0 {
			code = hw.PRIErrBadPRQ
		}
	}
	if q.prspSize != 0 && (dma.ReadAt(q.prspBase, b[:hw.PageRespSize]) != nil ||
		dma.ReadAt(q.prspBase+uint64(q.prspSize-1)*hw.PageRespSize, b[:hw.PageRespSize]) != nil) {
		prspBad = true
		if code == 0 {
			code = hw.PRIErrBadPRSPQ
		}
	}
	dma.End()
	if code == 0 {
		return true
	}
	e.mu.Lock()
	if e.q.gen == gen {
		if code == hw.PRIErrBadStatusAddr {
			e.q.status = 0
		}
		e.q.prqBad = e.q.prqBad || prqBad
		e.q.prspHalted = e.q.prspHalted || prspBad
		e.q.setErrorLocked(code, 0)
		e.notifyLocked()
	}
	e.mu.Unlock()
	return true
}

// respond applies one page response.
func (e *Requester) respond(pasid uint32, prgi, code uint16, flags uint32) {
	now := clock.Nanotime()
	e.mu.Lock()
	if e.failed {
		// After a Response Failure the function expects no responses.
		e.mu.Unlock()
		e.ignoredN.Add(1)
		return
	}
	var g *Group
	if prgi < hw.PRGIMax {
		g = e.groups[prgi]
	}
	if g != nil && g.pasidValid {
		if flags&hw.PRSPPASIDValid != 0 {
			if pasid != g.pasid {
				g = nil
			}
		} else if e.caps.PRIStatus()&pcie.PRIStatusPASIDNeeded != 0 {
			g = nil
		}
	}
	if g == nil {
		e.q.unexpected++
		e.q.unexpectedDirty = true
		e.mu.Unlock()
		e.unexpectedN.Add(1)
		e.caps.SetPRIUPRGI()
		return
	}
	switch Code(code) {
	case Success, InvalidRequest:
		e.removeLocked(g)
		g.stamps[StampResponse].Store(now)
		if Code(code) == Success {
			e.successN.Add(1)
			e.complete(g, Success, nil)
		} else {
			e.invalidN.Add(1)
			e.complete(g, InvalidRequest, ErrInvalidRequest)
		}
		e.stopIfIdleLocked()
		e.notifyLocked()
		e.mu.Unlock()
	case ResponseFailure:
		e.failuresN.Add(1)
		e.failed = true
		// The status first: whoever learns of the failure from a
		// group finds the capability already saying so.
		e.caps.SetPRIResponseFailure()
		e.caps.SetPRIStopped(true)
		e.removeLocked(g)
		g.stamps[StampResponse].Store(now)
		e.complete(g, ResponseFailure, ErrResponseFailure)
		e.abandonAllLocked(ErrResponseFailure)
		e.notifyLocked()
		e.mu.Unlock()
	default:
		// A reserved code: the response is malformed. The group stays
		// outstanding (a correct response may follow, or a reset ends it).
		e.mu.Unlock()
		e.malformedN.Add(1)
	}
}
