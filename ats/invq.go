package ats

import (
	"context"
	"errors"
	"sync"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// invQueue is the ATS register block and the invalidation queue's state.
// Register accesses (socket goroutine) only record values and wake the
// queue goroutine, which does every guest-memory access.
//
// Quiesce: each ATS_CTRL enable starts an instance with its own
// guestmem.Stream (dma); the queue goroutine's status, descriptor and
// completion accesses and every page-table walk of that instance's PASID
// table are units of it. Reset, disable and Close only Stop the stream
// (never waiting on the socket goroutine), and ATS_CTRL reads BUSY until
// every stopped instance has quiesced.
type invQueue struct {
	mu  sync.Mutex
	reg [(hw.ATSRegEnd - hw.XlatRegBase) / 4]uint32 // shadow of the RW registers

	gen    uint64 // bumped by every enable, disable and reset
	on     bool   // ATS_CTRL.ENABLE
	fresh  bool   // enabled; the goroutine has not probed guest memory yet
	status uint64 // latched status block IOVA; 0: none or bad
	base   uint64 // latched queue IOVA
	size   uint32 // latched queue entries; 0: no usable queue
	head   uint32 // descriptors consumed
	tail   uint32 // last doorbell value
	vector int
	halted bool

	errCode, errInfo uint32
	errDirty         bool // error not yet written to the status block

	dma      *guestmem.Stream  // the enabled instance's DMA; nil while disabled
	draining guestmem.Draining // stopped instances not known to have quiesced

	kick chan struct{}
	quit chan struct{}
	wg   sync.WaitGroup
}

func (q *invQueue) init() {
	q.kick = make(chan struct{}, 1)
	q.quit = make(chan struct{})
	q.resetRegsLocked()
	q.wg.Add(1)
}

func (q *invQueue) stop() {
	q.mu.Lock()
	q.stopDMALocked()
	select {
	case <-q.quit:
	default:
		close(q.quit)
	}
	q.mu.Unlock()
	q.wg.Wait()
}

func (q *invQueue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// stopDMALocked stops the enabled instance's DMA, if any, without waiting
// for its unit in flight.
func (q *invQueue) stopDMALocked() {
	if q.dma == nil {
		return
	}
	q.dma.Stop()
	q.draining.Add(q.dma)
	q.dma = nil
}

// busyLocked reports ATS_CTRL.BUSY: an instance is enabled, or a stopped
// one may still have a unit in flight.
func (q *invQueue) busyLocked() bool {
	return q.draining.Busy() || q.dma != nil
}

func (q *invQueue) resetRegsLocked() {
	q.stopDMALocked()
	clear(q.reg[:])
	q.reg[(hw.RegInvqVector-hw.XlatRegBase)/4] = hw.InvqVectorDefault
	q.gen++
	q.on, q.fresh, q.halted, q.errDirty = false, false, false, false
	q.status, q.base, q.size, q.head, q.tail = 0, 0, 0, 0, 0
	q.errCode, q.errInfo = 0, 0
}

func (q *invQueue) reset() {
	q.mu.Lock()
	q.resetRegsLocked()
	q.mu.Unlock()
}

func (q *invQueue) r(off uint32) uint32 { return q.reg[(off-hw.XlatRegBase)/4] }

// setErrorLocked records the first error; halt stops the queue.
func (q *invQueue) setErrorLocked(code, info uint32, halt bool) {
	if q.errCode == 0 {
		q.errCode, q.errInfo, q.errDirty = code, info, true
	}
	if halt {
		q.halted = true
	}
}

// Blocks implements hw.RegisterBlock.
func (c *Context) Blocks() []hw.Block { return []hw.Block{hw.BlockATS} }

// ReadRegister implements hw.RegisterBlock for the ATS block. It never
// blocks on guest memory.
func (c *Context) ReadRegister(r hw.Register, _ int) (v uint32, ok bool) {
	off := r.Offset
	switch off {
	case hw.RegATCHits:
		return uint32(c.hits.Load() - c.hitsBase.Load()), true
	case hw.RegATCMisses:
		return uint32(c.misses.Load() - c.missesBase.Load()), true
	case hw.RegATCCapacity:
		return uint32(c.Capacity()), true
	}
	q := &c.q
	q.mu.Lock()
	defer q.mu.Unlock()
	switch off {
	case hw.RegATSCtrl:
		if q.on {
			v = hw.ATSCtrlEnable
		}
		if q.busyLocked() {
			v |= hw.ATSCtrlBusy
		}
		return v, true
	case hw.RegATSError:
		return q.errCode, true
	}
	return q.r(off), true
}

// WriteRegister implements hw.RegisterBlock for the ATS block. It never
// blocks on guest memory or DMA: enabling latches the registers and
// installs the PASID table, and the queue goroutine probes guest memory
// afterwards.
func (c *Context) WriteRegister(r hw.Register, _ int, v uint32) (ok bool) {
	off := r.Offset
	switch off {
	case hw.RegATCCapacity:
		if v > hw.ATCCapacityMax {
			c.log.Warn("ATC_CAPACITY out of range; ignored", "value", v)
			return true
		}
		c.SetCapacity(int(v))
		return true
	}
	q := &c.q
	q.mu.Lock()
	switch off {
	case hw.RegATSCtrl:
		if v&hw.ATSCtrlReset != 0 {
			q.resetRegsLocked()
			q.mu.Unlock()
			c.resetRegCounters()
			c.SetCapacity(0)
			c.ClearPASIDTable()
			return true
		}
		en := v&hw.ATSCtrlEnable != 0
		if en == q.on {
			q.mu.Unlock()
			return true
		}
		if !en {
			q.gen++
			q.on, q.fresh = false, false
			q.stopDMALocked()
			q.mu.Unlock()
			c.ClearPASIDTable()
			return true
		}
		c.enableLocked()
		q.mu.Unlock()
		q.wake()
		return true
	case hw.RegInvqTail:
		q.tail = v
		q.mu.Unlock()
		q.wake()
		return true
	case hw.RegATSError:
		q.mu.Unlock()
		return true
	}
	q.reg[(off-hw.XlatRegBase)/4] = v
	q.mu.Unlock()
	return true
}

// enableLocked latches the ATS registers (ATS_CTRL.ENABLE written 1).
// Checks that need no guest memory happen here; the queue goroutine probes
// the memory.
func (c *Context) enableLocked() {
	q := &c.q
	q.stopDMALocked()
	q.dma = c.mem.NewStream("ats")
	q.gen++
	q.on, q.fresh, q.halted, q.errDirty = true, true, false, false
	q.errCode, q.errInfo = 0, 0
	q.head, q.tail = 0, 0
	q.vector = int(q.r(hw.RegInvqVector))

	q.status = uint64(q.r(hw.RegATSStatusHi))<<32 | uint64(q.r(hw.RegATSStatusLo))
	if q.status == 0 || q.status%hw.XlatStatusAlign != 0 {
		q.status = 0
		q.setErrorLocked(hw.ATSErrBadStatusAddr, 0, false)
	} else {
		q.dma.Own(q.status, hw.ATSStatusSize)
	}
	table := uint64(q.r(hw.RegPASIDTableHi))<<32 | uint64(q.r(hw.RegPASIDTableLo))
	// c.mu is never held while waiting for q.mu, so taking it here is safe.
	if err := c.setPASIDTable(table, q.r(hw.RegPASIDTableSize), q.dma); err != nil {
		c.ClearPASIDTable()
		q.setErrorLocked(hw.ATSErrBadPASIDTable, 0, false)
	}
	q.base = uint64(q.r(hw.RegInvqBaseHi))<<32 | uint64(q.r(hw.RegInvqBaseLo))
	q.size = q.r(hw.RegInvqSize)
	if q.base%hw.InvDescSize != 0 || q.size < hw.XlatQueueSizeMin || q.size > hw.XlatQueueSizeMax || q.size&(q.size-1) != 0 ||
		q.base+uint64(q.size)*hw.InvDescSize < q.base {
		q.size = 0
		q.setErrorLocked(hw.ATSErrBadInvq, 0, true)
	} else {
		q.dma.Own(q.base, uint64(q.size)*hw.InvDescSize)
	}
}

func (c *Context) runQueue() {
	defer c.q.wg.Done()
	for {
		select {
		case <-c.q.kick:
			c.serviceQueue()
		case <-c.q.quit:
			return
		}
	}
}

// serviceQueue runs the posted descriptors, in order, until the queue is
// empty, halted or disabled.
func (c *Context) serviceQueue() {
	q := &c.q
	q.mu.Lock()
	if !q.on || q.dma == nil {
		q.mu.Unlock()
		return
	}
	gen, fresh, dma := q.gen, q.fresh, q.dma
	q.fresh = false
	q.mu.Unlock()
	if fresh && !c.probe(gen, dma) {
		return
	}
	for {
		q.mu.Lock()
		if q.gen != gen {
			q.mu.Unlock()
			return
		}
		status, base, size, head, tail, halted := q.status, q.base, q.size, q.head, q.tail, q.halted
		errDirty, code, info, vector := q.errDirty, q.errCode, q.errInfo, q.vector
		q.errDirty = false
		q.mu.Unlock()
		if errDirty {
			if !dma.Begin() {
				return
			}
			if status != 0 {
				var b [12]byte
				hw.ATSStatusInvqHead.Put(b[:], head)
				hw.ATSStatusError.Put(b[:], code)
				hw.ATSStatusErrorInfo.Put(b[:], info)
				_ = dma.WriteAt(status, b[:])
			}
			c.irq(vector)
			dma.End()
		}
		if halted || size == 0 || head == tail || !c.busMaster() {
			return
		}
		if tail-head > size {
			c.queueError(gen, hw.ATSErrBadTail, tail)
			continue
		}
		var b [hw.InvDescSize]byte
		if !dma.Begin() {
			return
		}
		err := dma.ReadAt(base+uint64(head&(size-1))*hw.InvDescSize, b[:])
		dma.End()
		if err != nil {
			c.queueError(gen, hw.ATSErrBadInvq, head)
			continue
		}
		d := decodeInvDesc(b[:])
		if d.op == hw.InvOpWait {
			if err := d.checkWait(); err != nil {
				c.queueError(gen, hw.ATSErrBadInvDesc, head)
				continue
			}
			// Everything before this descriptor has completed (they ran in
			// order and Invalidate returns only when drained): publish the
			// head, then the completion word the driver waits on, then the
			// interrupt, all in one unit so none of them follows a stop.
			if !dma.Begin() {
				return
			}
			if !c.advance(gen, head) {
				dma.End()
				return
			}
			c.writeHead(dma, status, head+1)
			if err := dma.WriteU32(d.addr, d.data); err != nil {
				dma.End()
				c.queueError(gen, hw.ATSErrBadWaitAddr, head)
				continue
			}
			if d.flags&hw.InvFlagIRQ != 0 {
				c.irq(vector)
			}
			dma.End()
			continue
		}
		// The invalidation itself touches no guest memory (it may wait for
		// data DMA to release its translations), so it runs outside any
		// unit: a stop meanwhile quiesces at once.
		inv, err := d.invalidation()
		if err == nil {
			c.trace.Emit(trace.Invalidate, trace.TrackATS, uint64(head), inv.Addr)
			var dropped int
			dropped, err = c.Invalidate(inv)
			c.trace.Emit(trace.InvalidateDone, trace.TrackATS, uint64(head), uint64(dropped))
		}
		if err != nil {
			c.queueError(gen, hw.ATSErrBadInvDesc, head)
			continue
		}
		if !dma.Begin() {
			return
		}
		if !c.advance(gen, head) {
			dma.End()
			return
		}
		if head+1 == tail {
			c.writeHead(dma, status, head+1)
		}
		dma.End()
	}
}

// advance records that descriptor head ran. It reports false if the queue
// was disabled meanwhile.
func (c *Context) advance(gen uint64, head uint32) bool {
	q := &c.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gen != gen {
		return false
	}
	q.head = head + 1
	return true
}

// writeHead publishes the consumer index. Caller is inside a unit of dma.
func (c *Context) writeHead(dma *guestmem.Stream, status uint64, head uint32) {
	if status != 0 {
		_ = dma.WriteU32(status+uint64(hw.ATSStatusInvqHead.Offset), head)
	}
}

func (c *Context) queueError(gen uint64, code, info uint32) {
	q := &c.q
	q.mu.Lock()
	if q.gen == gen {
		q.setErrorLocked(code, info, true)
	}
	q.mu.Unlock()
	c.log.Warn("ats: invalidation queue halted", "error", code, "info", info)
}

// probe checks, once per enable, the guest memory the registers named: it
// clears the status block and reads the first and last entries of the
// PASID table and of the queue. It reports false if the instance was
// stopped before it could.
func (c *Context) probe(gen uint64, dma *guestmem.Stream) bool {
	q := &c.q
	q.mu.Lock()
	status, base, size := q.status, q.base, q.size
	q.mu.Unlock()
	c.mu.Lock()
	t := c.table
	c.mu.Unlock()

	if !dma.Begin() {
		return false
	}
	var code uint32
	halt := false
	if status != 0 {
		var zero [hw.ATSStatusSize]byte
		if err := dma.WriteAt(status, zero[:]); err != nil {
			q.mu.Lock()
			if q.gen == gen {
				q.status = 0
			}
			q.mu.Unlock()
			code = hw.ATSErrBadStatusAddr
		}
	}
	var b [hw.InvDescSize]byte
	if code == 0 && t.valid && t.dma == dma {
		last := t.base + (t.entries-1)*hw.PASIDEntrySize
		if dma.ReadAt(t.base, b[:hw.PASIDEntrySize]) != nil || dma.ReadAt(last, b[:hw.PASIDEntrySize]) != nil {
			code = hw.ATSErrBadPASIDTable
		}
	}
	if code == 0 && size != 0 {
		last := base + uint64(size-1)*hw.InvDescSize
		if dma.ReadAt(base, b[:]) != nil || dma.ReadAt(last, b[:]) != nil {
			code, halt = hw.ATSErrBadInvq, true
		}
	}
	dma.End()
	if code != 0 {
		q.mu.Lock()
		if q.gen == gen {
			q.setErrorLocked(code, 0, halt)
		}
		q.mu.Unlock()
	}
	return true
}

// invDesc is a decoded struct npfnic_inv_desc.
type invDesc struct {
	op, flags uint16
	pasid     uint32
	addr      uint64
	pages     uint64
	data      uint32
}

func decodeInvDesc(b []byte) invDesc {
	return invDesc{
		op:    hw.InvDescOp.Get(b),
		flags: hw.InvDescFlags.Get(b),
		pasid: hw.InvDescPASID.Get(b),
		addr:  hw.InvDescAddr.Get(b),
		pages: hw.InvDescPages.Get(b),
		data:  hw.InvDescData.Get(b),
	}
}

var errBadDesc = errors.New("ats: bad invalidation descriptor")

// invalidation turns a RANGE, PASID or ALL descriptor into an
// Invalidation; anything else, or unknown flags, is an error.
func (d invDesc) invalidation() (Invalidation, error) {
	if d.flags != 0 {
		return Invalidation{}, errBadDesc
	}
	switch d.op {
	case hw.InvOpRange:
		return Invalidation{Scope: ScopeRange, PASID: d.pasid, Addr: d.addr, Pages: d.pages}, nil
	case hw.InvOpPASID:
		return Invalidation{Scope: ScopePASID, PASID: d.pasid}, nil
	case hw.InvOpAll:
		return Invalidation{Scope: ScopeAll}, nil
	}
	return Invalidation{}, errBadDesc
}

func (d invDesc) checkWait() error {
	if d.flags&^hw.InvFlagIRQ != 0 || d.addr%4 != 0 {
		return errBadDesc
	}
	return nil
}

// Quiesced reports whether ATS is neither enabled (ATS_CTRL.ENABLE) nor
// has a stopped instance with a unit in flight: from then on it reads and
// writes none of the driver's translation memory (status block,
// invalidation queue, completion words, PASID and page tables). It is
// ATS_CTRL.BUSY inverted.
func (c *Context) Quiesced() bool {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	return !c.q.busyLocked()
}

// WaitQuiesced waits until every stopped ATS instance has quiesced (after
// Reset, or ATS_CTRL reset or disable), or ctx ends. An instance still
// enabled is not waited for. It must not run on a goroutine that a unit in
// flight depends on (see hw.Quiesce): bound ctx.
func (c *Context) WaitQuiesced(ctx context.Context) error {
	q := &c.q
	for {
		q.mu.Lock()
		done := q.draining.Next()
		q.mu.Unlock()
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
