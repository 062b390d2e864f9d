package ats

import (
	"encoding/binary"
	"fmt"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// key names one cached translation: a page of a PASID's address space.
type key struct {
	pasid uint32
	vpn   uint64 // VA >> 12
}

// dmSlots is the size of Context.dm: the pages of a few MiB of buffers
// of one address space, each in a slot of its own.
const dmSlots = 1024

// slot is k's place in Context.dm.
func (k key) slot() int { return int((k.vpn ^ uint64(k.pasid)*0x9e37) % dmSlots) }

// entry is one ATC entry. All fields are guarded by Context.mu.
type entry struct {
	key   key
	frame uint64 // IOVA of the page
	write bool
	// refs counts the handles using this translation now. An entry leaves
	// the map when it is invalidated, evicted or replaced; if refs is not
	// zero then, it is dead and stays in Context.draining until the last
	// handle releases it, so a later invalidation of its range still waits
	// for it.
	refs       int32
	dead       bool
	prev, next *entry // LRU list, only while in the map
}

type pasidTable struct {
	base, entries uint64
	valid         bool
	// dma is the ATS enable instance the table was latched by: walks read
	// through it, inside one of its units, so ATS_CTRL reset or disable can
	// tell when no walk reads the driver's tables any more. Nil for a table
	// set through SetPASIDTable (no register block, nothing to quiesce).
	dma *guestmem.Stream
}

// read reads the driver's translation structures for a walk. Concrete
// types on both branches keep p from escaping (no allocation per walk).
func (t *pasidTable) read(c *Context, iova uint64, p []byte) error {
	if t.dma != nil {
		return t.dma.ReadAt(iova, p)
	}
	return c.mem.ReadAt(iova, p)
}

func (t *pasidTable) readU64(c *Context, iova uint64) (uint64, error) {
	var b [8]byte
	if err := t.read(c, iova, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// Scope selects what an Invalidation drops.
type Scope uint8

// Invalidation scopes.
const (
	ScopeRange Scope = iota + 1 // Pages pages of PASID from Addr
	ScopePASID                  // every translation of PASID
	ScopeAll                    // every translation
)

// Invalidation describes translations to drop.
type Invalidation struct {
	Scope Scope
	PASID uint32
	Addr  uint64 // ScopeRange: first VA, 4 KiB aligned
	Pages uint64 // ScopeRange: number of pages, at least 1
}

func (inv Invalidation) String() string {
	switch inv.Scope {
	case ScopeRange:
		return fmt.Sprintf("pasid %d pages [%#x,+%d)", inv.PASID, inv.Addr, inv.Pages)
	case ScopePASID:
		return fmt.Sprintf("pasid %d", inv.PASID)
	case ScopeAll:
		return "all"
	}
	return "invalid"
}

// invRecord is a normalised invalidation: pages [first, end) of pasid, or
// all of pasid, or everything.
type invRecord struct {
	scope      Scope
	pasid      uint32
	first, end uint64 // VPNs
}

func (r invRecord) covers(k key) bool {
	switch r.scope {
	case ScopeAll:
		return true
	case ScopePASID:
		return k.pasid == r.pasid
	case ScopeRange:
		return k.pasid == r.pasid && k.vpn >= r.first && k.vpn < r.end
	}
	return false
}

// normalize validates inv and widens a range to the Smallest Translation
// Unit the ATS control register sets: translations and invalidations cover
// at least 2^STU pages, aligned.
func (c *Context) normalize(inv Invalidation) (invRecord, error) {
	switch inv.Scope {
	case ScopeAll:
		return invRecord{scope: ScopeAll}, nil
	case ScopePASID:
		if inv.PASID >= hw.PASIDTableMax {
			return invRecord{}, ErrBadPASID
		}
		return invRecord{scope: ScopePASID, pasid: inv.PASID}, nil
	case ScopeRange:
		if inv.PASID >= hw.PASIDTableMax {
			return invRecord{}, ErrBadPASID
		}
		const maxVPN = vaLimit >> pageShift
		if inv.Addr%pageSize != 0 || inv.Pages == 0 || inv.Addr >= vaLimit || inv.Pages > maxVPN-inv.Addr>>pageShift {
			return invRecord{}, ErrBadInvalidate
		}
		first := inv.Addr >> pageShift
		end := first + inv.Pages
		g := uint64(1) << c.stu.Load()
		first &^= g - 1
		end = min((end+g-1)&^(g-1), maxVPN)
		return invRecord{scope: ScopeRange, pasid: inv.PASID, first: first, end: end}, nil
	}
	return invRecord{}, ErrBadInvalidate
}

// Invalidate drops the translations inv names and returns once no DMA uses
// any of them: every handle that holds a dropped translation (dropped now or
// by an earlier invalidation or flush) has been released. Access calls made
// after it returns walk the page tables again. It returns how many ATC
// entries it dropped. Invalidating a range that was never mapped or never
// cached is not an error: it drops nothing.
//
// Invalidate blocks: never call it from the vfio-user socket goroutine, nor
// while holding a Handle.
func (c *Context) Invalidate(inv Invalidation) (int, error) {
	rec, err := c.normalize(inv)
	if err != nil {
		return 0, err
	}
	c.invalidations.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.dropLocked(rec)
	waited := false
	for !c.skipDrainForTest && c.busyLocked(rec) {
		waited = true
		c.waiters++
		c.drained.Wait()
		c.waiters--
	}
	if waited {
		c.invWaits.Add(1)
	}
	return n, nil
}

// dropLocked logs rec for racing walks and removes the entries it covers.
func (c *Context) dropLocked(rec invRecord) int {
	c.seq++
	c.invLog[c.seq%invLogSize] = rec
	var victims []*entry
	if rec.scope == ScopeRange && rec.end-rec.first <= uint64(len(c.m)) {
		for vpn := rec.first; vpn < rec.end; vpn++ {
			if e := c.m[key{rec.pasid, vpn}]; e != nil {
				victims = append(victims, e)
			}
		}
	} else {
		for k, e := range c.m {
			if rec.covers(k) {
				victims = append(victims, e)
			}
		}
	}
	for _, e := range victims {
		c.removeLocked(e)
	}
	c.dropped.Add(uint64(len(victims)))
	return len(victims)
}

// busyLocked reports whether a dropped entry covered by rec is still in use.
func (c *Context) busyLocked(rec invRecord) bool {
	for e := range c.draining {
		if rec.covers(e.key) {
			return true
		}
	}
	return false
}

// Flush empties the ATC without waiting for in-flight DMA. It is for state
// changes that promise no completion (ATS or PASID enable changes, a new
// PASID table, reset); a later Invalidate still waits for every dropped
// entry in its range.
func (c *Context) Flush() {
	c.mu.Lock()
	c.flushLocked()
	c.mu.Unlock()
}

func (c *Context) flushLocked() {
	c.flushes.Add(1)
	c.dropLocked(invRecord{scope: ScopeAll})
}

// invalidatedSince reports whether an invalidation since sequence number
// seq may have covered k, in which case a walk begun at seq may have read
// page-table entries the driver has since changed and invalidated.
func (c *Context) invalidatedSince(seq uint64, k key) bool {
	if c.seq == seq {
		return false
	}
	if c.seq-seq > invLogSize {
		return true
	}
	for s := seq + 1; s <= c.seq; s++ {
		if c.invLog[s%invLogSize].covers(k) {
			return true
		}
	}
	return false
}

// lookupLocked returns the usable cached translation of k, pinned, or nil.
func (c *Context) lookupLocked(k key, write bool) *entry {
	slot := &c.dm[k.slot()]
	e := *slot
	if e == nil || e.key != k {
		if e = c.m[k]; e != nil {
			*slot = e
		}
	}
	if e == nil || write && !e.write {
		return nil
	}
	e.refs++
	c.touchLocked(e)
	return e
}

// installLocked caches a fresh walk result for k and returns it pinned. A
// cached entry that disagrees with the walk (a read-only translation the
// driver has since made writable, or a remapped page not yet invalidated)
// is replaced: the walk read the tables after the entry was made.
func (c *Context) installLocked(k key, frame uint64, write bool) *entry {
	if e := c.m[k]; e != nil {
		if e.frame == frame && e.write == write {
			e.refs++
			c.touchLocked(e)
			return e
		}
		c.removeLocked(e)
	}
	for len(c.m) >= c.capacity && c.evictLocked() {
	}
	e := &entry{key: k, frame: frame, write: write, refs: 1}
	c.m[k] = e
	c.dm[k.slot()] = e
	e.prev, e.next = &c.lru, c.lru.next
	e.prev.next, e.next.prev = e, e
	return e
}

func (c *Context) touchLocked(e *entry) {
	if c.lru.next == e {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = &c.lru, c.lru.next
	e.prev.next, e.next.prev = e, e
}

// removeLocked takes e out of the map; an entry still in use goes on
// draining until its last handle is released.
func (c *Context) removeLocked(e *entry) {
	delete(c.m, e.key)
	if slot := &c.dm[e.key.slot()]; *slot == e {
		*slot = nil
	}
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	if e.refs > 0 {
		e.dead = true
		c.draining[e] = struct{}{}
	}
}

// evictLocked drops the least recently used entry no handle holds and
// reports whether it found one. When the tail is all pinned the cache
// briefly holds more than its capacity rather than stall a DMA; it shrinks
// back on later inserts.
func (c *Context) evictLocked() bool {
	e := c.lru.prev
	for i := 0; i < evictScan && e != &c.lru; i++ {
		if e.refs == 0 {
			c.removeLocked(e)
			c.evictions.Add(1)
			return true
		}
		e = e.prev
	}
	return false
}

// releaseLocked drops one reference of each entry.
func (c *Context) releaseLocked(ents []*entry) {
	wake := false
	for _, e := range ents {
		e.refs--
		if e.refs == 0 && e.dead {
			delete(c.draining, e)
			wake = true
		}
	}
	if wake && c.waiters > 0 {
		c.drained.Broadcast()
	}
}

// Capacity is the number of ATC entries in force.
func (c *Context) Capacity() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.capacity
}

// SetCapacity changes the number of ATC entries (0: the capacity the
// Context was created with) and evicts down to it; entries in use by DMA
// stay until released, as with any eviction.
func (c *Context) SetCapacity(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n <= 0 {
		n = c.defaultCapacity
	}
	c.capacity = n
	for len(c.m) > c.capacity && c.evictLocked() {
	}
}
