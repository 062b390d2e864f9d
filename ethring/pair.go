package ethring

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// Pair is one queue pair: a TX ring and an RX ring sharing an MSI-X vector
// and a part of the status block.
type Pair struct {
	d *Engine
	q int

	regMu          sync.Mutex // the register file below
	txBase, rxBase uint64
	txSize, rxSize uint32
	enabled        bool
	rxPolicy       uint32 // hw.RxPolicy*
	pasid          uint32
	bmSize         uint32
	notifyAddr     uint64 // PAIR_NOTIFY_LO/HI

	// lro is PAIR_CTRL_RX_LRO, as last written (rxlro.go).
	lro atomic.Bool

	// inst is the running instance, nil while disabled.
	inst atomic.Pointer[instance]
	// draining are the streams of retired instances that had not quiesced
	// when last looked at (under regMu): PAIR_CTRL reads BUSY meanwhile.
	draining guestmem.Draining

	statusMu sync.Mutex // orders this pair's status block writes
	rxMu     sync.Mutex // one frame placed at a time
	irq      moderator
	st       pairCounters

	txBufMu    sync.Mutex
	txBufSpare *txBuf // the TX gather buffer of the last retired instance
}

// pairCounters are the device-side statistics of a pair, cumulative
// across enables (the guest-visible ones live in the instance).
type pairCounters struct {
	txFrames, txBytes, txDropsBadLen, txSendErrors  atomic.Uint64
	txTSOFrames, txTSOSegments, txCsumOffloads      atomic.Uint64
	rxFrames, rxBytes, rxDropsNoBuf, rxDropsTooBig  atomic.Uint64
	rxDropsStopped, rxWireStalls, rxCsumOK          atomic.Uint64
	rxFaults, rxBackup, rxFaultDrops, rxFaultErrors atomic.Uint64
	txFaults, txFaultErrors, rxBadResolves          atomic.Uint64
	rxResolves                                      atomic.Uint64
	rxLROFrames, rxLRODescs                         atomic.Uint64
}

func newPair(d *Engine, q int) *Pair {
	p := &Pair{d: d, q: q}
	p.irq.init(d.clock, p.fireIRQ, d.trace, hw.PairVector(q))
	p.irq.pollArm = p.pollArm
	return p
}

// fireIRQ raises the pair's vector inside a unit of its running instance:
// a moderation timer that expires after the pair was disabled, or an
// event of a retired instance, raises nothing, so no interrupt follows
// the quiesce the driver waited for.
func (p *Pair) fireIRQ() {
	in := p.inst.Load()
	if in == nil || !in.dma.Begin() {
		return
	}
	// The driver's poll after this interrupt reclaims at least what the
	// status block says now, which is no more than the head.
	in.txIRQHead.Store(in.tx.head.Load())
	p.d.irq(hw.PairVector(p.q))
	in.dma.End()
}

// Busy reports whether the pair may still DMA (PAIR_CTRL_BUSY): it is
// enabled, or an instance it retired has a unit in flight.
func (p *Pair) Busy() bool {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	return p.enabled || p.draining.Busy()
}

// Index is the pair's number.
func (p *Pair) Index() int { return p.q }

// ReadReg reads the pair's register at off (hw.QP*); write-only and
// unassigned registers read 0.
func (p *Pair) ReadReg(off uint32) uint32 {
	switch off {
	case hw.PairITR:
		return uint32(p.irq.getITR() / time.Microsecond)
	case hw.PairTxIRQDelay:
		return uint32(p.irq.getLazyDelay() / time.Microsecond)
	}
	p.regMu.Lock()
	defer p.regMu.Unlock()
	switch off {
	case hw.PairTxBaseLo:
		return uint32(p.txBase)
	case hw.PairTxBaseHi:
		return uint32(p.txBase >> 32)
	case hw.PairTxSize:
		return p.txSize
	case hw.PairRxBaseLo:
		return uint32(p.rxBase)
	case hw.PairRxBaseHi:
		return uint32(p.rxBase >> 32)
	case hw.PairRxSize:
		return p.rxSize
	case hw.PairCtrl:
		v := uint32(0)
		if p.lro.Load() {
			v = hw.PairCtrlRxLRO
		}
		if p.enabled {
			return v | hw.PairCtrlEnable | hw.PairCtrlBusy
		}
		if p.draining.Busy() {
			return v | hw.PairCtrlBusy
		}
		return v
	case hw.PairRxPolicy:
		return p.rxPolicy
	case hw.PairPASID:
		return p.pasid
	case hw.PairBmSize:
		return p.bmSize
	case hw.PairNotifyLo:
		return uint32(p.notifyAddr)
	case hw.PairNotifyHi:
		return uint32(p.notifyAddr >> 32)
	}
	return 0
}

// WriteReg writes v to the pair's register at off (hw.QP*). It never
// touches guest memory, so it is safe on the vfio-user socket goroutine.
func (p *Pair) WriteReg(off, v uint32) {
	switch off {
	case hw.PairTxTail:
		p.doorbell(true, v)
		return
	case hw.PairRxTail:
		p.doorbell(false, v)
		return
	case hw.PairIRQArm:
		if v&1 != 0 {
			p.irq.arm()
		}
		return
	case hw.PairITR:
		p.irq.setITR(time.Duration(v) * time.Microsecond)
		return
	case hw.PairTxIRQDelay:
		p.irq.setLazyDelay(time.Duration(v) * time.Microsecond)
		return
	case hw.PairRxResolve:
		if in := p.inst.Load(); in != nil {
			in.queueResolve(v)
		}
		return
	case hw.PairRxTailIRQ:
		if in := p.inst.Load(); in != nil && v&1 != 0 {
			in.tailIRQ.Store(true)
		}
		return
	}
	p.regMu.Lock()
	defer p.regMu.Unlock()
	switch off {
	case hw.PairTxBaseLo:
		p.txBase = p.txBase&^0xffffffff | uint64(v)
	case hw.PairTxBaseHi:
		p.txBase = p.txBase&0xffffffff | uint64(v)<<32
	case hw.PairTxSize:
		p.txSize = v
	case hw.PairRxBaseLo:
		p.rxBase = p.rxBase&^0xffffffff | uint64(v)
	case hw.PairRxBaseHi:
		p.rxBase = p.rxBase&0xffffffff | uint64(v)<<32
	case hw.PairRxSize:
		p.rxSize = v
	case hw.PairRxPolicy:
		p.rxPolicy = v
	case hw.PairPASID:
		p.pasid = v
	case hw.PairBmSize:
		p.bmSize = v
	case hw.PairNotifyLo:
		p.notifyAddr = p.notifyAddr&^0xffffffff | uint64(v)
	case hw.PairNotifyHi:
		p.notifyAddr = p.notifyAddr&0xffffffff | uint64(v)<<32
	case hw.PairCtrl:
		p.lro.Store(v&hw.PairCtrlRxLRO != 0)
		on := v&hw.PairCtrlEnable != 0
		switch {
		case on && !p.enabled:
			p.enabled = true
			p.start()
		case !on && p.enabled:
			p.enabled = false
			p.stop()
		}
	}
}

// start latches the ring registers into a new instance and starts its
// worker. Caller holds regMu.
func (p *Pair) start() {
	in := newInstance(p, p.txBase, p.txSize, p.rxBase, p.rxSize)
	in.latchFaults(p.rxPolicy, p.pasid, p.bmSize)
	in.latchNotify(p.notifyAddr)
	if old := p.inst.Swap(in); old != nil {
		p.retireLocked(old)
	}
	p.d.wg.Add(1)
	go in.run()
	if in.policy == hw.RxPolicyBackup {
		p.d.wg.Add(1)
		go in.resolveLoop()
	}
	p.d.rxWake() // a wire reader waiting for buffers steers again
}

// stop retires the running instance. Caller holds regMu.
func (p *Pair) stop() {
	if old := p.inst.Swap(nil); old != nil {
		p.retireLocked(old)
	}
}

// retireLocked retires in and keeps its stream until it quiesced, for
// PAIR_CTRL's and CTRL's BUSY bits. It never waits. Caller holds regMu.
func (p *Pair) retireLocked(in *instance) {
	in.retire()
	p.draining.Add(in.dma)
	p.d.track(in.dma)
}

// getTxBuf returns the spare TX buffer, or a new one. A retiring
// instance's worker may still be moving a frame when the next instance
// starts, so each instance owns its buffer until its worker ends.
func (p *Pair) getTxBuf() *txBuf {
	p.txBufMu.Lock()
	b := p.txBufSpare
	p.txBufSpare = nil
	p.txBufMu.Unlock()
	if b == nil {
		b = new(txBuf)
	}
	return b
}

// putTxBuf keeps b for the next instance.
func (p *Pair) putTxBuf(b *txBuf) {
	p.txBufMu.Lock()
	p.txBufSpare = b
	p.txBufMu.Unlock()
}

// reset disables the pair and returns its registers to zero.
func (p *Pair) reset() {
	p.regMu.Lock()
	p.stop()
	p.txBase, p.rxBase, p.txSize, p.rxSize, p.enabled = 0, 0, 0, 0, false
	p.rxPolicy, p.pasid, p.bmSize, p.notifyAddr = 0, 0, 0, 0
	p.lro.Store(false)
	p.regMu.Unlock()
	p.irq.reset()
}

// accepting reports whether received frames may be steered here.
func (p *Pair) accepting() bool {
	in := p.inst.Load()
	return in != nil && in.err.Load() == 0
}

// doorbell validates a new tail against the ring's head: it may neither
// move backwards nor post more than SIZE entries beyond the head. The
// device advances the head before it tells the driver about it, so the
// head seen here is never behind the driver's view.
func (p *Pair) doorbell(tx bool, tail uint32) {
	in := p.inst.Load()
	if in == nil || in.err.Load() != 0 {
		return // a stopped pair ignores doorbells
	}
	r := &in.rx
	if tx {
		r = &in.tx
	}
	if !r.valid {
		return // the worker reports the bad ring
	}
	old := r.tail.Load()
	if !in.moveTail(r, tail) {
		return
	}
	if tx {
		in.wake()
		return
	}
	p.d.rxWake()
	if tail != old && in.tailIRQ.CompareAndSwap(true, false) {
		p.d.backup.tailEvent()
	}
}

// Stats returns the pair's counters.
func (p *Pair) Stats() PairStats {
	// RxResolves is loaded first: the resolve goroutine counts a write's
	// effects (RxBadResolves among them) before the write itself, so
	// a caller that sees a write handled also sees what it did.
	resolves := p.st.rxResolves.Load()
	s := PairStats{
		TxFrames: p.st.txFrames.Load(), TxBytes: p.st.txBytes.Load(),
		TxDropsBadLen: p.st.txDropsBadLen.Load(), TxSendErrors: p.st.txSendErrors.Load(),
		TxTSOFrames: p.st.txTSOFrames.Load(), TxTSOSegments: p.st.txTSOSegments.Load(),
		TxCsumOffloads: p.st.txCsumOffloads.Load(),
		RxFrames:       p.st.rxFrames.Load(), RxBytes: p.st.rxBytes.Load(),
		RxDropsNoBuf: p.st.rxDropsNoBuf.Load(), RxDropsTooBig: p.st.rxDropsTooBig.Load(),
		RxDropsStopped: p.st.rxDropsStopped.Load(), RxWireStalls: p.st.rxWireStalls.Load(),
		RxCsumOK:   p.st.rxCsumOK.Load(),
		Interrupts: p.irq.fired.Load(),
		RxFaults:   p.st.rxFaults.Load(), RxBackup: p.st.rxBackup.Load(),
		RxFaultDrops: p.st.rxFaultDrops.Load(), RxFaultErrors: p.st.rxFaultErrors.Load(),
		TxFaults: p.st.txFaults.Load(), TxFaultErrors: p.st.txFaultErrors.Load(),
		RxBadResolves: p.st.rxBadResolves.Load(), RxResolves: resolves,
		RxLROFrames: p.st.rxLROFrames.Load(), RxLRODescs: p.st.rxLRODescs.Load(),
	}
	if in := p.inst.Load(); in != nil {
		s.Enabled = true
		e := in.err.Load()
		s.Error, s.ErrorInfo = uint32(e>>32), uint32(e)
		s.TxHead, s.TxTail = in.tx.head.Load(), in.tx.tail.Load()
		s.RxHead, s.RxTail = in.rx.head.Load(), in.rx.tail.Load()
		s.RxPolicy, s.RxHeadOffset = in.policy, in.headOffsetA.Load()
	}
	return s
}

// PairStats are one pair's counters and state.
type PairStats struct {
	Enabled                                        bool
	Error, ErrorInfo                               uint32 // NPFNIC_QERR_* of the running instance
	TxHead, TxTail, RxHead, RxTail                 uint32
	TxFrames, TxBytes, TxDropsBadLen, TxSendErrors uint64 // TxFrames, TxBytes: frames on the wire (TSO segments)
	TxTSOFrames, TxTSOSegments                     uint64 // super-packets segmented, and the frames they became
	TxCsumOffloads                                 uint64 // frames checksummed for the driver (not TSO)
	RxFrames, RxBytes, RxDropsNoBuf, RxDropsTooBig uint64
	RxDropsStopped                                 uint64 // frames steered here while the pair stopped
	RxWireStalls                                   uint64 // times the wire waited for this pair's RX buffers
	RxCsumOK                                       uint64 // frames delivered with NPFNIC_RXD_CSUM_OK
	Interrupts                                     uint64

	// Network page faults (interface 2.2).
	RxPolicy      uint32 // of the running instance
	RxHeadOffset  uint32 // backup policy: descriptors used past rx_head
	RxFaults      uint64 // RX buffer translation faults
	RxBackup      uint64 // frames stored in the backup ring
	RxFaultDrops  uint64 // frames dropped on a fault
	RxFaultErrors uint64 // descriptors completed with RXD_ERROR
	TxFaults      uint64 // TX stalls for a page request
	TxFaultErrors uint64 // TX frames dropped: untranslatable buffer
	RxBadResolves uint64 // RX_RESOLVE writes naming no pending rNPF (ignored)
	// RxResolves counts RX_RESOLVE writes handled (applied or ignored);
	// it moves after their effects are published.
	RxResolves uint64

	// Large receive (interface 2.11): super-packets received as chains,
	// and the descriptors those chains took. RxFrames counts each chain
	// once.
	RxLROFrames, RxLRODescs uint64
}

// ring is one descriptor ring of an instance.
type ring struct {
	base  uint64
	size  uint32
	mask  uint32
	valid bool          // base and size passed the register checks
	head  atomic.Uint32 // consumed (TX) or filled (RX), free-running
	tail  atomic.Uint32 // posted by the driver, free-running
	dc    descCache     // owned by the engine of this ring
	// trace and track record the ring's descriptor fetches.
	trace *trace.Recorder
	track trace.Track
}

// instance is a pair between one enable and the next disable: the latched
// rings, their heads and tails, the guest-visible counters and the error
// state. Its worker goroutine lives as long as it does.
type instance struct {
	p      *Pair
	tx, rx ring
	// dma is the instance's view of guest memory: every access of its
	// engines goes through it, in units (see Quiesce in the package doc).
	dma *guestmem.Stream

	// err is NPFNIC_QERR_* << 32 | error_info; set once, by fail.
	err     atomic.Uint64
	errMu   sync.Mutex // errWhy; never held across guest memory
	errWhy  error
	retired atomic.Bool
	stopCh  chan struct{}
	kick    chan struct{}
	// ctx ends when the instance retires: a TX fault waiting for its page
	// response gives up then.
	ctx    context.Context
	cancel context.CancelFunc

	faultState
	notify notifyArea

	// Guest-visible counters (free-running u32, like the heads).
	rxDropsNoBuf, rxDropsTooBig, txDropsBadLen atomic.Uint32
	txTSOFrames, rxWireStalls                  atomic.Uint32
	rxFaultsG, rxBackupG, rxFaultDropsG        atomic.Uint32
	txFaultsG, txFaultErrorsG                  atomic.Uint32

	// txIRQHead is tx.head when the pair's interrupt last fired: TX
	// descriptors completed beyond it may still wait for the driver.
	txIRQHead atomic.Uint32

	lro     lroScratch              // large receive, under the pair's rxMu
	txb     *txBuf                  // TX gather buffer, reused for every frame
	scratch [guestmem.PageSize]byte // ring check reads
}

func newInstance(p *Pair, txBase uint64, txSize uint32, rxBase uint64, rxSize uint32) *instance {
	in := &instance{p: p, stopCh: make(chan struct{}), kick: make(chan struct{}, 1), txb: p.getTxBuf(),
		dma: p.d.mem.NewStream(fmt.Sprintf("qp%d", p.q))}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	in.tx = ring{base: txBase, size: txSize, mask: txSize - 1, valid: ringOK(txBase, txSize, hw.TxDescSize),
		trace: p.d.trace, track: trace.PairTx(p.q)}
	in.rx = ring{base: rxBase, size: rxSize, mask: rxSize - 1, valid: ringOK(rxBase, rxSize, hw.RxDescSize),
		trace: p.d.trace, track: trace.PairRx(p.q)}
	// The rings are the driver's memory handed to this instance: fenced
	// when it quiesces. Buffers are the driver's to fence (in tests).
	for _, r := range []*ring{&in.tx, &in.rx} {
		if r.valid {
			in.dma.Own(r.base, uint64(r.size)*descSize)
		}
	}
	return in
}

// ringOK checks what the registers alone can tell: size a power of two in
// range, base aligned to a descriptor, no wrap around the address space.
func ringOK(base uint64, size uint32, desc int) bool {
	return size >= hw.RingSizeMin && size <= hw.RingSizeMax && size&(size-1) == 0 &&
		base%uint64(desc) == 0 && base+uint64(size)*uint64(desc) > base
}

func (in *instance) wake() {
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

func (in *instance) retire() {
	if in.retired.CompareAndSwap(false, true) {
		in.dma.Stop()
		close(in.stopCh)
		in.cancel()
		in.p.d.rxWake() // a wire reader waiting for its buffers steers again
	}
}

// fail puts the pair into queue error code with info; the first error
// wins. The worker reports it (status block, misc interrupt) and stops.
func (in *instance) fail(code, info uint32, why error) {
	in.p.d.noteLate(why)
	in.errMu.Lock()
	if in.err.Load() == 0 {
		in.errWhy = why
		in.err.Store(uint64(code)<<32 | uint64(info))
	}
	in.errMu.Unlock()
	in.wake()
	in.p.d.rxWake()
}

// mayRun reports whether the engines may move frames now.
func (in *instance) mayRun() bool {
	return !in.retired.Load() && in.err.Load() == 0 && in.p.d.running()
}

// run is the instance's worker: it checks the rings, publishes the pair's
// fresh state, then runs the TX engine whenever woken, until the instance
// is retired or fails.
func (in *instance) run() {
	d := in.p.d
	defer d.wg.Done()
	defer in.p.putTxBuf(in.txb)
	switch {
	case !in.tx.valid:
		in.fail(hw.QErrBadRing, 0, fmt.Errorf("TX ring base %#x size %d invalid", in.tx.base, in.tx.size))
	case !in.rx.valid:
		in.fail(hw.QErrBadRing, 0, fmt.Errorf("RX ring base %#x size %d invalid", in.rx.base, in.rx.size))
	case !in.dma.Begin():
		return // retired before it started
	default:
		if err := in.checkRing(&in.tx, hw.TxDescSize); err != nil {
			in.fail(hw.QErrBadRing, 0, fmt.Errorf("TX ring: %w", err))
		} else if err := in.checkRing(&in.rx, hw.RxDescSize); err != nil {
			in.fail(hw.QErrBadRing, 0, fmt.Errorf("RX ring: %w", err))
		} else if err := in.checkNotify(); err != nil {
			in.failNotify(err)
		}
		in.dma.End()
	}
	// Heads, counters and error start from zero in the status block.
	if in.p.inst.Load() == in {
		in.p.publishAllReport()
	}
	for {
		if in.err.Load() != 0 {
			in.report()
			return
		}
		if in.mayRun() {
			in.txRun()
		}
		select {
		case <-in.kick:
		case <-in.stopCh:
			return
		case <-d.done:
			return
		}
	}
}

// checkRing reads the whole ring once, page by page, so a ring that is
// not entirely in guest memory fails at enable rather than at some later
// doorbell.
func (in *instance) checkRing(r *ring, desc int) error {
	return guestmem.SplitPages(r.base, int(r.size)*desc, func(a uint64, _, n int) error {
		return in.dma.ReadAt(a, in.scratch[:n])
	})
}

// report publishes the queue error and raises the misc event.
func (in *instance) report() {
	p := in.p
	if p.inst.Load() != in {
		return // disabled meanwhile: the driver no longer cares
	}
	p.publishAllReport()
	e := in.err.Load()
	in.errMu.Lock()
	why := in.errWhy
	in.errMu.Unlock()
	p.d.log.Warn("queue error: pair stopped", "pair", p.q, "error", e>>32, "info", uint32(e), "why", why)
	p.d.misc.event()
}

// publish writes one field of this instance's status to the status block,
// unless the instance was retired or there is no block.
func (in *instance) publish(f hw.Le32, v uint32) {
	in.publishFrom(f, func() uint32 { return v })
}

// count adds one to the status block counter c and publishes it as field
// f. The value is read under statusMu: counts on several goroutines (wire
// stalls of concurrent Receive calls) publish in order, and the field
// never goes back to an older value, which a value taken before the lock
// could write over a newer one.
func (in *instance) count(f hw.Le32, c *atomic.Uint32) {
	c.Add(1)
	in.publishFrom(f, c.Load)
}

func (in *instance) publishFrom(f hw.Le32, get func() uint32) {
	p := in.p
	var err error
	var b [4]byte
	p.statusMu.Lock()
	binary.LittleEndian.PutUint32(b[:], get())
	sb := p.d.status.Load()
	if p.inst.Load() == in && sb != nil {
		err = sb.write(uint64(hw.StatusPairOffset(p.q)+f.Offset), b[:])
	}
	p.statusMu.Unlock()
	if err != nil {
		p.d.statusFault(sb, err)
	}
}

// publishAllReport is publishAll, turning a failed write into the status
// block's fault.
func (p *Pair) publishAllReport() {
	sb := p.d.status.Load()
	if err := p.publishAll(); err != nil && sb != nil {
		p.d.statusFault(sb, err)
	}
}

// publishAll writes the pair's whole status part from the current
// instance (zeros while disabled).
func (p *Pair) publishAll() error {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	sb := p.d.status.Load()
	if sb == nil {
		return nil
	}
	var b [hw.PairStatusSize]byte
	if in := p.inst.Load(); in != nil {
		hw.PairStatusTxHead.Put(b[:], in.tx.head.Load())
		hw.PairStatusRxHead.Put(b[:], in.rx.head.Load())
		e := in.err.Load()
		hw.PairStatusError.Put(b[:], uint32(e>>32))
		hw.PairStatusErrorInfo.Put(b[:], uint32(e))
		hw.PairStatusRxDropsNoBuf.Put(b[:], in.rxDropsNoBuf.Load())
		hw.PairStatusRxDropsTooBig.Put(b[:], in.rxDropsTooBig.Load())
		hw.PairStatusTxDropsBadLen.Put(b[:], in.txDropsBadLen.Load())
		hw.PairStatusTxTSOFrames.Put(b[:], in.txTSOFrames.Load())
		hw.PairStatusRxWireStalls.Put(b[:], in.rxWireStalls.Load())
		hw.PairStatusRxFaults.Put(b[:], in.rxFaultsG.Load())
		hw.PairStatusRxBackup.Put(b[:], in.rxBackupG.Load())
		hw.PairStatusRxFaultDrops.Put(b[:], in.rxFaultDropsG.Load())
		hw.PairStatusTxFaults.Put(b[:], in.txFaultsG.Load())
		hw.PairStatusTxFaultErrors.Put(b[:], in.txFaultErrorsG.Load())
		hw.PairStatusRxHeadOffset.Put(b[:], in.headOffsetA.Load())
		hw.PairStatusRxBmIndex.Put(b[:], in.bmIndexA.Load())
	}
	return sb.write(uint64(hw.StatusPairOffset(p.q)), b[:])
}
