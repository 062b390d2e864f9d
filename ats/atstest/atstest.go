// Package atstest is a Go model of the driver side of address translation,
// for tests and benchmarks of the device without a VM: guest RAM in a memfd
// (mapped into a guestmem.Memory as QEMU's RAM is, and mapped again as the
// guest's own view), a page allocator, PASID tables and 4-level I/O page
// tables built in that RAM, and a driver for the invalidation queue that
// posts descriptors through the ATS registers and waits for the WAIT
// completion as the Linux driver does.
//
// The guest view is written with atomic 64-bit stores (the kernel's
// WRITE_ONCE): the device reads the same bytes through its own mapping.
package atstest

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// Guest is guest RAM: Size bytes at IOVA Base.
type Guest struct {
	Mem  *guestmem.Memory
	RAM  []byte // the guest's view
	Base uint64

	mu   sync.Mutex
	next uint64 // bump allocator (offset into RAM)
	free []uint64
}

// DefaultBase is the IOVA of guest RAM in NewGuest.
const DefaultBase = 0x10_0000

// NewGuest creates size bytes of guest RAM (a multiple of 4 KiB) at
// DefaultBase, backed by a memfd that guestmem maps with MapFD. The mappings
// are released when t ends.
func NewGuest(t testing.TB, size int) *Guest {
	t.Helper()
	g, err := newGuest(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.close)
	return g
}

func newGuest(size int) (*Guest, error) {
	if size <= 0 || size%hw.XlatPageSize != 0 {
		return nil, errors.New("atstest: guest size must be a positive multiple of 4 KiB")
	}
	fd, err := unix.MemfdCreate("atstest-ram", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return nil, err
	}
	view, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	mem := guestmem.New()
	if err := mem.MapFD(DefaultBase, uint64(size), fd, 0, guestmem.ProtRead|guestmem.ProtWrite); err != nil {
		_ = unix.Munmap(view)
		return nil, err
	}
	return &Guest{Mem: mem, RAM: view, Base: DefaultBase}, nil
}

func (g *Guest) close() {
	g.Mem.UnmapAll()
	_ = unix.Munmap(g.RAM)
}

// Contains reports whether [iova, iova+n) is guest RAM.
func (g *Guest) Contains(iova uint64, n int) bool {
	return iova >= g.Base && iova-g.Base <= uint64(len(g.RAM)) && uint64(n) <= uint64(len(g.RAM))-(iova-g.Base)
}

// Bytes returns the guest's view of [iova, iova+n).
func (g *Guest) Bytes(iova uint64, n int) []byte {
	if !g.Contains(iova, n) {
		panic(fmt.Sprintf("atstest: [%#x,+%d) outside guest RAM", iova, n))
	}
	off := iova - g.Base
	return g.RAM[off : off+uint64(n) : off+uint64(n)]
}

// Alloc returns n zeroed bytes aligned to align (a power of two), never
// freed.
func (g *Guest) Alloc(n int, align uint64) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	off := (g.next + align - 1) &^ (align - 1)
	if off+uint64(n) > uint64(len(g.RAM)) {
		panic("atstest: guest RAM exhausted")
	}
	g.next = off + uint64(n)
	clear(g.RAM[off : off+uint64(n)])
	return g.Base + off
}

// AllocPage returns a zeroed 4 KiB page, reusing freed ones.
func (g *Guest) AllocPage() uint64 {
	g.mu.Lock()
	if n := len(g.free); n > 0 {
		p := g.free[n-1]
		g.free = g.free[:n-1]
		g.mu.Unlock()
		clear(g.Bytes(p, hw.XlatPageSize))
		return p
	}
	g.mu.Unlock()
	return g.Alloc(hw.XlatPageSize, hw.XlatPageSize)
}

// FreePage returns a page to AllocPage.
func (g *Guest) FreePage(p uint64) {
	g.mu.Lock()
	g.free = append(g.free, p)
	g.mu.Unlock()
}

func (g *Guest) word64(iova uint64) *uint64 {
	if iova%8 != 0 {
		panic("atstest: misaligned 64-bit access")
	}
	return (*uint64)(unsafe.Pointer(&g.Bytes(iova, 8)[0]))
}

func (g *Guest) word32(iova uint64) *uint32 {
	if iova%4 != 0 {
		panic("atstest: misaligned 32-bit access")
	}
	return (*uint32)(unsafe.Pointer(&g.Bytes(iova, 4)[0]))
}

// Store64 and Load64 access an aligned little-endian word of the guest view
// atomically (amd64 is little-endian).
func (g *Guest) Store64(iova, v uint64) { atomic.StoreUint64(g.word64(iova), v) }

// Load64 reads an aligned 64-bit word atomically.
func (g *Guest) Load64(iova uint64) uint64 { return atomic.LoadUint64(g.word64(iova)) }

// Store32 writes an aligned 32-bit word atomically.
func (g *Guest) Store32(iova uint64, v uint32) { atomic.StoreUint32(g.word32(iova), v) }

// Load32 reads an aligned 32-bit word atomically.
func (g *Guest) Load32(iova uint64) uint32 { return atomic.LoadUint32(g.word32(iova)) }

// PASIDTable is a PASID table in guest RAM.
type PASIDTable struct {
	g       *Guest
	Base    uint64
	Entries uint32
}

// NewPASIDTable allocates a table of entries entries (a power of two).
func (g *Guest) NewPASIDTable(entries uint32) *PASIDTable {
	n := int(entries) * hw.PASIDEntrySize
	n = (n + hw.XlatPageSize - 1) &^ (hw.XlatPageSize - 1)
	return &PASIDTable{g: g, Base: g.Alloc(n, hw.XlatPageSize), Entries: entries}
}

// EntryAddr is the IOVA of pasid's entry.
func (p *PASIDTable) EntryAddr(pasid uint32) uint64 {
	return p.Base + uint64(pasid)*hw.PASIDEntrySize + uint64(hw.PASIDEntryRoot.Offset)
}

// Set makes pasid valid with the given address space.
func (p *PASIDTable) Set(pasid uint32, as *AddressSpace) {
	p.SetRaw(pasid, as.Root|hw.PASIDEntryValid)
}

// SetRaw writes pasid's root field as is (for malformed-entry tests).
func (p *PASIDTable) SetRaw(pasid uint32, root uint64) { p.g.Store64(p.EntryAddr(pasid), root) }

// Clear makes pasid's entry invalid.
func (p *PASIDTable) Clear(pasid uint32) { p.SetRaw(pasid, 0) }

// AddressSpace is one PASID's 4-level I/O page table. Its methods are not
// safe for concurrent use on the same AddressSpace (as the kernel holds a
// lock around its page-table updates).
type AddressSpace struct {
	g    *Guest
	Root uint64 // IOVA of the level-4 table
}

// NewAddressSpace allocates an empty level-4 table.
func (g *Guest) NewAddressSpace() *AddressSpace {
	return &AddressSpace{g: g, Root: g.AllocPage()}
}

func index(va uint64, level int) uint64 {
	return va >> (hw.XlatPageShift + uint(level-1)*hw.XlatLevelBits) & (hw.XlatPTEEntries - 1)
}

// EntryAddr returns the IOVA of the entry for va at level (4..1),
// allocating missing tables on the way (intermediate entries are present
// and writable).
func (as *AddressSpace) EntryAddr(va uint64, level int) uint64 {
	table := as.Root
	for l := hw.XlatLevels; l > level; l-- {
		ea := table + index(va, l)*hw.PTESize
		pte := as.g.Load64(ea)
		if pte&hw.PTEPresent == 0 {
			next := as.g.AllocPage()
			pte = next | hw.PTEPresent | hw.PTEWrite
			as.g.Store64(ea, pte)
		}
		table = pte & hw.PTEAddrMask
	}
	return table + index(va, level)*hw.PTESize
}

// Map maps the page at va to the page at IOVA frame, writable or not, and
// returns the previous leaf entry.
func (as *AddressSpace) Map(va, frame uint64, write bool) (old uint64) {
	pte := frame&hw.PTEAddrMask | hw.PTEPresent
	if write {
		pte |= hw.PTEWrite
	}
	return as.SetLeaf(va, pte)
}

// SetLeaf writes va's leaf entry as is and returns the previous one.
func (as *AddressSpace) SetLeaf(va, pte uint64) (old uint64) {
	ea := as.EntryAddr(va, 1)
	old = as.g.Load64(ea)
	as.g.Store64(ea, pte)
	return old
}

// Unmap clears va's leaf entry and returns the previous one. The caller
// must invalidate before reusing the old page.
func (as *AddressSpace) Unmap(va uint64) (old uint64) { return as.SetLeaf(va, 0) }

// Driver programs the ATS registers of a device and runs its invalidation
// queue, as the guest driver does.
type Driver struct {
	g      *Guest
	regs   Regs
	Table  *PASIDTable
	Status uint64 // IOVA of the ATS status block
	Queue  uint64 // IOVA of the invalidation queue
	Size   uint32

	mu      sync.Mutex
	tail    uint32
	waitSeq uint32
	wait    uint64 // IOVA of the completion word
	Timeout time.Duration
}

// Regs is the register interface of the ATS block (ats.Context).
type Regs interface {
	RegWrite(off, v uint32) bool
	RegRead(off uint32) (uint32, bool)
}

// NewDriver allocates a PASID table with tableEntries entries, a status
// block and an invalidation queue of queueSize entries, programs the
// registers and enables the block.
func (g *Guest) NewDriver(regs Regs, tableEntries, queueSize uint32) *Driver {
	d := &Driver{
		g: g, regs: regs,
		Table:   g.NewPASIDTable(tableEntries),
		Status:  g.Alloc(hw.ATSStatusSize, hw.XlatStatusAlign),
		Queue:   g.Alloc(int(queueSize)*hw.InvDescSize, hw.XlatPageSize),
		Size:    queueSize,
		wait:    g.Alloc(8, 8),
		Timeout: 10 * time.Second,
	}
	d.Enable()
	return d
}

func (d *Driver) w(off, v uint32) { d.regs.RegWrite(off, v) }

// Enable writes every ATS register and sets ATS_CTRL.ENABLE.
func (d *Driver) Enable() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for off := uint64(0); off < hw.ATSStatusSize; off += 4 {
		d.g.Store32(d.Status+off, 0)
	}
	d.w(hw.RegATSStatusLo, uint32(d.Status))
	d.w(hw.RegATSStatusHi, uint32(d.Status>>32))
	d.w(hw.RegPASIDTableLo, uint32(d.Table.Base))
	d.w(hw.RegPASIDTableHi, uint32(d.Table.Base>>32))
	d.w(hw.RegPASIDTableSize, d.Table.Entries)
	d.w(hw.RegInvqBaseLo, uint32(d.Queue))
	d.w(hw.RegInvqBaseHi, uint32(d.Queue>>32))
	d.w(hw.RegInvqSize, d.Size)
	// The completion word is the driver's own memory, handed over again.
	d.g.Mem.Unfence(d.wait, 8)
	d.w(hw.RegATSCtrl, hw.ATSCtrlEnable)
	d.tail = 0
}

// Reset writes ATS_CTRL.RESET, which drops the device's translations and
// clears its errors, waits for the device to quiesce, then programs and
// enables the block again.
func (d *Driver) Reset() {
	d.w(hw.RegATSCtrl, hw.ATSCtrlReset)
	_ = d.WaitIdle()
	d.Enable()
}

// ErrBusy is returned when a block's BUSY bit does not clear within
// hw.QuiesceTimeoutMS.
var ErrBusy = errors.New("atstest: control register stays BUSY")

// Ctrl is the control register of one of the device's DMA blocks (ATS_CTRL,
// PRI_CTRL) as a driver model drives it through the quiesce handshake
// (hw.Quiesce): write, then wait for BUSY to clear.
type Ctrl struct {
	Regs             Regs
	Reg, Reset, Busy uint32
}

// WaitIdle polls the register until BUSY is clear, for at most
// hw.QuiesceTimeoutMS.
func (c Ctrl) WaitIdle() error {
	read := func() uint32 { v, _ := c.Regs.RegRead(c.Reg); return v }
	if _, ok := hw.AwaitQuiesced(read, c.Busy); !ok {
		return fmt.Errorf("%w (register %#x)", ErrBusy, c.Reg)
	}
	return nil
}

// Stop writes RESET (when reset) or 0 and waits until BUSY is clear: after
// a nil return the block no longer touches the memory it was given.
func (c Ctrl) Stop(reset bool) error {
	v := uint32(0)
	if reset {
		v = c.Reset
	}
	c.Regs.RegWrite(c.Reg, v)
	return c.WaitIdle()
}

// WaitIdle waits until ATS_CTRL.BUSY is clear (Ctrl.WaitIdle).
func (d *Driver) WaitIdle() error { return d.ctrl().WaitIdle() }

func (d *Driver) ctrl() Ctrl {
	return Ctrl{Regs: d.regs, Reg: hw.RegATSCtrl, Reset: hw.ATSCtrlReset, Busy: hw.ATSCtrlBusy}
}

// Stop is the driver's teardown handshake: it writes ATS_CTRL (RESET when
// reset, else 0), waits until BUSY is clear and then takes back the memory
// it gave the device (status block, invalidation queue, completion word):
// the model fences it, so any later device write there counts in
// Mem.LateWrites. When BUSY does not clear it fences nothing (a real
// driver leaks the memory) and returns ErrBusy.
func (d *Driver) Stop(reset bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ctrl().Stop(reset); err != nil {
		return err
	}
	d.g.Mem.Fence(d.Status, hw.ATSStatusSize)
	d.g.Mem.Fence(d.Queue, uint64(d.Size)*hw.InvDescSize)
	d.g.Mem.Fence(d.wait, 8)
	return nil
}

// Desc is an invalidation descriptor to post.
type Desc struct {
	Op, Flags uint16
	PASID     uint32
	Addr      uint64
	Pages     uint64
	Data      uint32
}

// Range, PASID and All are the three invalidations.
func Range(pasid uint32, va, pages uint64) Desc {
	return Desc{Op: hw.InvOpRange, PASID: pasid, Addr: va, Pages: pages}
}

// PASID invalidates every translation of pasid.
func PASID(pasid uint32) Desc { return Desc{Op: hw.InvOpPASID, PASID: pasid} }

// All invalidates every translation.
func All() Desc { return Desc{Op: hw.InvOpAll} }

// Encode writes d as a struct npfnic_inv_desc.
func (x Desc) Encode(b []byte) {
	clear(b[:hw.InvDescSize])
	hw.InvDescOp.Put(b, x.Op)
	hw.InvDescFlags.Put(b, x.Flags)
	hw.InvDescPASID.Put(b, x.PASID)
	hw.InvDescAddr.Put(b, x.Addr)
	hw.InvDescPages.Put(b, x.Pages)
	hw.InvDescData.Put(b, x.Data)
}

// ErrTimeout is returned when the device does not complete in time.
var ErrTimeout = errors.New("atstest: invalidation did not complete in time")

// Post writes descs to the queue and rings the doorbell, without waiting.
// It waits for room using the head the device writes to the status block.
func (d *Driver) Post(descs ...Desc) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.postLocked(descs)
}

func (d *Driver) postLocked(descs []Desc) error {
	deadline := time.Now().Add(d.Timeout)
	for _, x := range descs {
		for d.tail-d.g.Load32(d.Status+uint64(hw.ATSStatusInvqHead.Offset)) >= d.Size {
			if err := d.Err(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return ErrTimeout
			}
			runtime.Gosched()
		}
		slot := d.Queue + uint64(d.tail&(d.Size-1))*hw.InvDescSize
		x.Encode(d.g.Bytes(slot, hw.InvDescSize))
		d.tail++
	}
	d.w(hw.RegInvqTail, d.tail)
	return nil
}

// Sync posts descs followed by a WAIT descriptor and returns once the device
// wrote its completion: every translation the descriptors dropped is then
// unused by any DMA.
func (d *Driver) Sync(descs ...Desc) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.waitSeq++
	seq := d.waitSeq
	all := append(descs[:len(descs):len(descs)], Desc{Op: hw.InvOpWait, Addr: d.wait, Data: seq})
	if err := d.postLocked(all); err != nil {
		return err
	}
	deadline := time.Now().Add(d.Timeout)
	for spins := 0; d.g.Load32(d.wait) != seq; spins++ {
		if err := d.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return ErrTimeout
		}
		if spins < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
	return nil
}

// DeviceError is an error the device reported in the ATS status block.
type DeviceError struct{ Code, Info uint32 }

func (e *DeviceError) Error() string {
	return fmt.Sprintf("atstest: device ATS error %d (info %#x)", e.Code, e.Info)
}

// Err returns the error in the status block, if any.
func (d *Driver) Err() error {
	if code := d.g.Load32(d.Status + uint64(hw.ATSStatusError.Offset)); code != 0 {
		return &DeviceError{code, d.g.Load32(d.Status + uint64(hw.ATSStatusErrorInfo.Offset))}
	}
	return nil
}
