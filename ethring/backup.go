package ethring

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// backupRing is the function's backup ring (seed 000, Figure 5 and 6): a
// small ring of pinned buffers owned by the driver's fault handling (the
// IOprovider), addressed by IOVA, into which the RX path stores a frame
// whose buffer faulted, with the metadata the driver needs to place it in
// its original buffer later: the queue, the descriptor index and the bitmap
// index. Its register file is kept apart from the running ring so that
// register writes on the vfio-user socket goroutine never wait behind a
// frame being stored (which touches guest memory).
type backupRing struct {
	d *Engine

	regMu   sync.Mutex // the register file below
	regBase uint64
	regSize uint32
	vector  atomic.Uint32
	enabled bool

	// run is the ring latched by the last enable; nil while disabled.
	run atomic.Pointer[backupRun]
	// draining are the streams of disabled runs that had not quiesced when
	// last looked at (under regMu): BACKUP_CTRL reads BUSY meanwhile.
	draining guestmem.Draining

	// Guest-visible counters in the status block header; zeroed by reset.
	full, tailEvents atomic.Uint32
	// Cumulative device statistics.
	stored, drops, events atomic.Uint64
}

// backupRun is the backup ring between one enable and the next disable.
type backupRun struct {
	base       uint64
	size, mask uint32
	valid      bool          // base and size passed the register checks
	mu         sync.Mutex    // one frame stored at a time; head
	head       atomic.Uint32 // entries filled, free-running
	tail       atomic.Uint32 // buffers posted, free-running
	failed     atomic.Bool   // stopped by DevErrBadBackupRing
	desc       [hw.BackupDescSize]byte
	// dma is this run's view of guest memory; it owns the ring.
	dma *guestmem.Stream
}

func (b *backupRing) init(d *Engine) {
	b.d = d
	b.vector.Store(hw.BackupVectorDefault)
}

// reset returns the backup ring to power-on: disabled, registers and
// guest-visible counters zero, the vector at its default.
func (b *backupRing) reset() {
	b.regMu.Lock()
	b.regBase, b.regSize, b.enabled = 0, 0, false
	b.stopLocked()
	b.regMu.Unlock()
	b.vector.Store(hw.BackupVectorDefault)
	b.full.Store(0)
	b.tailEvents.Store(0)
}

// head is the backup_head the status block shows.
func (b *backupRing) head() uint32 {
	if r := b.run.Load(); r != nil {
		return r.head.Load()
	}
	return 0
}

// backupReadReg reads a backup ring register (hw.RegBackup*); ok is false
// for other offsets.
func (d *Engine) backupReadReg(off uint32) (v uint32, ok bool) {
	b := &d.backup
	if off == hw.RegBackupVector {
		return b.vector.Load(), true
	}
	b.regMu.Lock()
	defer b.regMu.Unlock()
	switch off {
	case hw.RegBackupBaseLo:
		return uint32(b.regBase), true
	case hw.RegBackupBaseHi:
		return uint32(b.regBase >> 32), true
	case hw.RegBackupSize:
		return b.regSize, true
	case hw.RegBackupCtrl:
		if b.enabled {
			return hw.BackupCtrlEnable | hw.BackupCtrlBusy, true
		}
		if b.draining.Busy() {
			return hw.BackupCtrlBusy, true
		}
		return 0, true
	}
	return 0, false
}

// backupWriteReg writes a backup ring register; ok is false for other
// offsets. It never touches guest memory.
func (d *Engine) backupWriteReg(off, v uint32) (ok bool) {
	b := &d.backup
	switch off {
	case hw.RegBackupVector:
		if v >= hw.MSIXVectors {
			d.log.Warn("BACKUP_VECTOR out of range; ignored", "vector", v)
			return true
		}
		b.vector.Store(v)
		return true
	case hw.RegBackupTail:
		b.doorbell(v)
		return true
	}
	b.regMu.Lock()
	defer b.regMu.Unlock()
	switch off {
	case hw.RegBackupBaseLo:
		b.regBase = b.regBase&^0xffffffff | uint64(v)
	case hw.RegBackupBaseHi:
		b.regBase = b.regBase&0xffffffff | uint64(v)<<32
	case hw.RegBackupSize:
		b.regSize = v
	case hw.RegBackupCtrl:
		on := v&hw.BackupCtrlEnable != 0
		switch {
		case on && !b.enabled:
			b.enabled = true
			r := &backupRun{base: b.regBase, size: b.regSize, mask: b.regSize - 1,
				valid: ringOK(b.regBase, b.regSize, hw.BackupDescSize), dma: d.mem.NewStream("backup")}
			if r.valid {
				r.dma.Own(r.base, uint64(r.size)*hw.BackupDescSize)
			}
			b.run.Store(r)
			// The status block still shows the last run's backup_head.
			d.ctlMu.Lock()
			d.headerQuiet = true
			d.ctlMu.Unlock()
			d.wakeControl()
		case !on && b.enabled:
			b.enabled = false
			b.stopLocked()
		}
	default:
		return false
	}
	return true
}

// stopLocked retires the running backup ring: its stream stops at once and
// is kept until it quiesced, for BACKUP_CTRL's and CTRL's BUSY bits.
// Caller holds regMu.
func (b *backupRing) stopLocked() {
	r := b.run.Swap(nil)
	if r == nil {
		return
	}
	b.d.retire(r.dma)
	b.draining.Add(r.dma)
}

// doorbell takes a new BACKUP_TAIL: it may neither move backwards nor post
// more than SIZE buffers beyond the head.
func (b *backupRing) doorbell(tail uint32) {
	r := b.run.Load()
	if r == nil || r.failed.Load() {
		return
	}
	head, old := r.head.Load(), r.tail.Load()
	if posted := tail - head; !r.valid || posted > r.size || posted < old-head {
		b.fail(r, fmt.Errorf("BACKUP_TAIL %d with head %d, previous tail %d, size %d", tail, head, old, r.size))
		return
	}
	r.tail.Store(tail)
}

// fail stops the running backup ring and reports DevErrBadBackupRing.
func (b *backupRing) fail(r *backupRun, why error) {
	if !r.failed.CompareAndSwap(false, true) {
		return
	}
	d := b.d
	d.log.Warn("backup ring stopped", "err", why)
	d.noteLate(why)
	d.ctlMu.Lock()
	if d.devErr == 0 {
		d.devErr = hw.DevErrBadBackupRing
	}
	d.headerDirty = true
	d.ctlMu.Unlock()
	d.wakeControl()
}

// backupEntry is what the RX path stores with a faulting frame.
type backupEntry struct {
	queue   uint16
	desc    uint32 // free-running index of the RX descriptor
	bmIndex uint32 // free-running bitmap index
	stamp   int64  // fault detection time (clock.Nanotime)
	status  uint16 // hw.Bkd*
}

// store puts frame into the next posted backup buffer with e, publishes
// backup_head and raises the backup vector. It reports false, storing
// nothing, when the ring is off, failed, has no buffer posted, or the
// buffer is too small; the caller then drops the frame.
func (b *backupRing) store(frame []byte, e backupEntry) bool {
	r := b.run.Load()
	if r == nil || r.failed.Load() || !r.valid {
		return false
	}
	d := b.d
	r.mu.Lock()
	// One unit for the entry: descriptor, buffer, write-back, interrupt.
	if !r.dma.Begin() {
		r.mu.Unlock()
		return false
	}
	defer r.dma.End()
	head := r.head.Load()
	if head == r.tail.Load() {
		r.mu.Unlock()
		b.full.Add(1)
		d.publishHeader(hw.StatusBackupFull, b.full.Load)
		return false
	}
	slot := head & r.mask
	at := r.base + uint64(slot)*hw.BackupDescSize
	if err := r.dma.ReadAt(at, r.desc[:]); err != nil {
		r.mu.Unlock()
		b.fail(r, fmt.Errorf("backup descriptor %d: %w", slot, err))
		return false
	}
	addr, bufLen := hw.BackupDescAddr.Get(r.desc[:]), int(hw.BackupDescBufLen.Get(r.desc[:]))
	if len(frame) > bufLen {
		r.mu.Unlock()
		b.drops.Add(1)
		return false
	}
	if err := r.dma.WritePages(addr, frame); err != nil {
		r.mu.Unlock()
		b.fail(r, fmt.Errorf("backup descriptor %d buffer %#x+%d: %w", slot, addr, len(frame), err))
		return false
	}
	d.trace.Emit(trace.DMAWrite, trace.TrackBackup, addr, uint64(len(frame)))
	wb := r.desc[hw.BackupDescPktLen.Offset:]
	hw.BackupDescPktLen.Put(r.desc[:], uint16(len(frame)))
	hw.BackupDescStatus.Put(r.desc[:], e.status|hw.BkdDone)
	hw.BackupDescQueue.Put(r.desc[:], e.queue)
	hw.BackupDescDesc.Put(r.desc[:], e.desc)
	hw.BackupDescBmIndex.Put(r.desc[:], e.bmIndex)
	hw.BackupDescStamp.Put(r.desc[:], uint64(e.stamp))
	// The device fields only: addr and buf_len belong to the driver.
	if err := r.dma.WriteAt(at+uint64(hw.BackupDescPktLen.Offset), wb); err != nil {
		r.mu.Unlock()
		b.fail(r, fmt.Errorf("backup descriptor %d write-back: %w", slot, err))
		return false
	}
	r.head.Store(head + 1)
	r.mu.Unlock()
	b.stored.Add(1)
	d.publishHeader(hw.StatusBackupHead, b.head)
	b.raiseInUnit()
	return true
}

// tailEvent raises the backup vector for an RX_TAIL_IRQ request. It runs
// on the doorbell path, which must not touch guest memory, so the control
// goroutine publishes tail_events and then raises the vector.
func (b *backupRing) tailEvent() {
	b.tailEvents.Add(1)
	d := b.d
	d.ctlMu.Lock()
	d.headerDirty, d.tailRaise = true, true
	d.ctlMu.Unlock()
	d.wakeControl()
}

// raise fires the backup vector inside a unit of the running backup ring
// (none while it is disabled, so none after its quiesce). Every entry and
// tail event raises it, as in Figure 6; the driver's handler only
// schedules work, which coalesces.
func (b *backupRing) raise() {
	r := b.run.Load()
	if r == nil || !r.dma.Begin() {
		return
	}
	b.raiseInUnit()
	r.dma.End()
}

// raiseInUnit fires the backup vector. Caller holds a unit of the running
// backup ring's stream.
func (b *backupRing) raiseInUnit() {
	b.events.Add(1)
	b.d.irq(int(b.vector.Load()))
}
