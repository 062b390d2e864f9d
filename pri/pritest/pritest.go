// Package pritest is a Go model of the driver side of the page request
// interface, for tests and benchmarks without a VM: it programs the PRI
// registers, reads page request groups from the page request queue in
// guest memory (returning slots with the PRQ_HEAD doorbell), and posts page
// responses through the page response queue, as the Linux driver does.
package pritest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// Regs is the register interface of the PRI block (pri.Requester).
type Regs interface {
	RegWrite(off, v uint32) bool
	RegRead(off uint32) (uint32, bool)
}

// Entry is one decoded page request.
type Entry struct {
	Addr   uint64
	PASID  uint32
	PRGI   uint16
	Flags  uint16
	Queue  uint16
	Kind   uint16
	Desc   uint32
	Stamp  int64
	Offset uint32 // free-running queue index of the entry
}

// Group is the entries of one page request group, the last with
// hw.PRQLast.
type Group []Entry

// Response is one page response to post.
type Response struct {
	PRGI       uint16
	PASID      uint32
	PASIDValid bool
	Code       uint16
}

// ResponseFor answers g with code, echoing its PASID.
func ResponseFor(g Group, code uint16) Response {
	e := g[len(g)-1]
	return Response{PRGI: e.PRGI, PASID: e.PASID, PASIDValid: e.Flags&hw.PRQPASIDValid != 0, Code: code}
}

// Driver is the driver side of one PRI block.
type Driver struct {
	g       *atstest.Guest
	regs    Regs
	Status  uint64
	PRQ     uint64
	PRSPQ   uint64
	PRQSize uint32
	RspSize uint32
	Vector  uint32
	Timeout time.Duration

	mu       sync.Mutex
	prqHead  uint32
	rspTail  uint32
	partial  Group // entries of a group whose LAST entry has not arrived
	consumed bool  // skip PRQ_HEAD doorbells (to test queue-full back-pressure)
}

// NewDriver allocates the status block and both queues in guest memory
// and enables the block.
func NewDriver(g *atstest.Guest, regs Regs, prqSize, rspSize uint32) *Driver {
	d := &Driver{
		g: g, regs: regs,
		Status:  g.Alloc(hw.PRIStatusSize, hw.XlatStatusAlign),
		PRQ:     g.Alloc(int(prqSize)*hw.PageReqSize, hw.XlatPageSize),
		PRSPQ:   g.Alloc(int(rspSize)*hw.PageRespSize, hw.XlatPageSize),
		PRQSize: prqSize, RspSize: rspSize,
		Vector:  hw.PRQVectorDefault,
		Timeout: 10 * time.Second,
	}
	d.Enable()
	return d
}

func (d *Driver) w(off, v uint32) { d.regs.RegWrite(off, v) }

// Enable zeroes the status block, writes every PRI register and sets
// PRI_CTRL.ENABLE.
func (d *Driver) Enable() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for off := uint64(0); off < hw.PRIStatusSize; off += 4 {
		d.g.Store32(d.Status+off, 0)
	}
	d.w(hw.RegPRIStatusLo, uint32(d.Status))
	d.w(hw.RegPRIStatusHi, uint32(d.Status>>32))
	d.w(hw.RegPRQBaseLo, uint32(d.PRQ))
	d.w(hw.RegPRQBaseHi, uint32(d.PRQ>>32))
	d.w(hw.RegPRQSize, d.PRQSize)
	d.w(hw.RegPRSPQBaseLo, uint32(d.PRSPQ))
	d.w(hw.RegPRSPQBaseHi, uint32(d.PRSPQ>>32))
	d.w(hw.RegPRSPQSize, d.RspSize)
	d.w(hw.RegPRQVector, d.Vector)
	d.w(hw.RegPRICtrl, hw.PRICtrlEnable)
	d.prqHead, d.rspTail, d.partial = 0, 0, nil
}

// Reset writes PRI_CTRL.RESET, waits for the device to quiesce, then
// programs and enables the block again.
func (d *Driver) Reset() {
	d.w(hw.RegPRICtrl, hw.PRICtrlReset)
	_ = d.WaitIdle()
	d.Enable()
}

// WaitIdle waits until PRI_CTRL.BUSY is clear (atstest.Ctrl.WaitIdle;
// atstest.ErrBusy when it does not).
func (d *Driver) WaitIdle() error { return d.ctrl().WaitIdle() }

func (d *Driver) ctrl() atstest.Ctrl {
	return atstest.Ctrl{Regs: d.regs, Reg: hw.RegPRICtrl, Reset: hw.PRICtrlReset, Busy: hw.PRICtrlBusy}
}

// Stop is the driver's teardown handshake: it writes PRI_CTRL (RESET when
// reset, else 0), waits until BUSY is clear and then takes back the status
// block and both queues: the model fences them, so any later device write
// there counts in Mem.LateWrites. When BUSY does not clear it fences
// nothing (a real driver leaks the memory) and returns atstest.ErrBusy.
func (d *Driver) Stop(reset bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ctrl().Stop(reset); err != nil {
		return err
	}
	d.g.Mem.Fence(d.Status, hw.PRIStatusSize)
	d.g.Mem.Fence(d.PRQ, uint64(d.PRQSize)*hw.PageReqSize)
	d.g.Mem.Fence(d.PRSPQ, uint64(d.RspSize)*hw.PageRespSize)
	return nil
}

// HoldSlots stops (true) or resumes returning page request slots to the
// device, to fill the queue on purpose.
func (d *Driver) HoldSlots(hold bool) {
	d.mu.Lock()
	d.consumed = hold
	d.mu.Unlock()
}

func (d *Driver) statusWord(f hw.Le32) uint32 { return d.g.Load32(d.Status + uint64(f.Offset)) }

// PRQTail is the producer index the device published.
func (d *Driver) PRQTail() uint32 { return d.statusWord(hw.PRIStatusPRQTail) }

// RspHead is the page response consumer index the device published.
func (d *Driver) RspHead() uint32 { return d.statusWord(hw.PRIStatusPRSPQHead) }

// Unexpected is the device's count of unmatched responses.
func (d *Driver) Unexpected() uint32 { return d.statusWord(hw.PRIStatusUnexpected) }

// DeviceError is an error the device reported in the PRI status block.
type DeviceError struct{ Code, Info uint32 }

func (e *DeviceError) Error() string {
	return fmt.Sprintf("pritest: device PRI error %d (info %#x)", e.Code, e.Info)
}

// Err returns the error in the status block, if any.
func (d *Driver) Err() error {
	if c := d.statusWord(hw.PRIStatusError); c != 0 {
		return &DeviceError{c, d.statusWord(hw.PRIStatusErrorInfo)}
	}
	return nil
}

// Groups reads the entries the device published since the last call and
// returns the complete groups (a group whose LAST entry has not been
// published yet is kept for the next call), then returns the slots with
// the PRQ_HEAD doorbell.
func (d *Driver) Groups() []Group {
	d.mu.Lock()
	defer d.mu.Unlock()
	tail := d.PRQTail()
	if tail == d.prqHead {
		return nil
	}
	var out []Group
	for ; d.prqHead != tail; d.prqHead++ {
		b := d.g.Bytes(d.PRQ+uint64(d.prqHead&(d.PRQSize-1))*hw.PageReqSize, hw.PageReqSize)
		e := Entry{
			Addr: hw.PageReqAddr.Get(b), PASID: hw.PageReqPASID.Get(b), PRGI: hw.PageReqPRGI.Get(b),
			Flags: hw.PageReqFlags.Get(b), Queue: hw.PageReqQueue.Get(b), Kind: hw.PageReqKind.Get(b),
			Desc: hw.PageReqDesc.Get(b), Stamp: int64(hw.PageReqStamp.Get(b)), Offset: d.prqHead,
		}
		d.partial = append(d.partial, e)
		if e.Flags&hw.PRQLast != 0 {
			out = append(out, d.partial)
			d.partial = nil
		}
	}
	if !d.consumed {
		d.w(hw.RegPRQHead, d.prqHead)
	}
	return out
}

// ReleaseSlots returns every slot read so far (after HoldSlots(true)).
func (d *Driver) ReleaseSlots() {
	d.mu.Lock()
	d.w(hw.RegPRQHead, d.prqHead)
	d.mu.Unlock()
}

// ErrTimeout is returned when the device does not make room in time.
var ErrTimeout = errors.New("pritest: page response queue full for too long")

// Respond posts responses and rings the doorbell once, waiting for room
// using the head the device publishes.
func (d *Driver) Respond(rs ...Response) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	deadline := time.Now().Add(d.Timeout)
	for i, r := range rs {
		for spins := 0; d.rspTail-d.RspHead() >= d.RspSize; spins++ {
			if i > 0 && spins == 0 {
				d.w(hw.RegPRSPQTail, d.rspTail) // let the device drain what is posted
			}
			if err := d.Err(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return ErrTimeout
			}
			runtime.Gosched()
		}
		b := d.g.Bytes(d.PRSPQ+uint64(d.rspTail&(d.RspSize-1))*hw.PageRespSize, hw.PageRespSize)
		clear(b)
		hw.PageRespPASID.Put(b, r.PASID)
		hw.PageRespPRGI.Put(b, r.PRGI)
		hw.PageRespCode.Put(b, r.Code)
		if r.PASIDValid {
			hw.PageRespFlags.Put(b, hw.PRSPPASIDValid)
		}
		d.rspTail++
	}
	d.w(hw.RegPRSPQTail, d.rspTail)
	return nil
}

// RespondRaw posts 16-byte response entries exactly as given.
func (d *Driver) RespondRaw(entries [][]byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	deadline := time.Now().Add(d.Timeout)
	for _, raw := range entries {
		for d.rspTail-d.RspHead() >= d.RspSize {
			d.w(hw.RegPRSPQTail, d.rspTail)
			if err := d.Err(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return ErrTimeout
			}
			runtime.Gosched()
		}
		b := d.g.Bytes(d.PRSPQ+uint64(d.rspTail&(d.RspSize-1))*hw.PageRespSize, hw.PageRespSize)
		clear(b)
		copy(b, raw)
		d.rspTail++
	}
	d.w(hw.RegPRSPQTail, d.rspTail)
	return nil
}

// Serve answers page request groups until ctx ends: handle returns each
// group's response code (it may map the pages first). It sleeps on wake
// (the PRQ vector's notifications) when nothing is pending, or spins when
// wake is nil.
func (d *Driver) Serve(ctx context.Context, wake <-chan struct{}, handle func(Group) uint16) error {
	for {
		groups := d.Groups()
		if len(groups) > 0 {
			rs := make([]Response, len(groups))
			for i, g := range groups {
				rs[i] = ResponseFor(g, handle(g))
			}
			if err := d.Respond(rs...); err != nil {
				return err
			}
			continue
		}
		if wake == nil {
			if ctx.Err() != nil {
				return nil
			}
			runtime.Gosched()
			continue
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil
		}
	}
}
