// Package ats owns address translation for the device's DMA: it turns a
// (PASID, VA) that a descriptor carries into guest IOVAs that guestmem can
// copy to and from. It walks the driver's per-PASID I/O page tables in guest
// memory, caches translations in a device-side translation cache (the ATC),
// and carries out the driver's invalidations, whose completion it reports
// only once no DMA uses a dropped translation any more.
//
// The guest-memory formats (PASID table, page tables, invalidation queue,
// status block) and the registers are defined in vdevice/hw
// (translation.go) and summarised here:
//
//   - PASID table: PASID_TABLE_SIZE entries of 16 bytes (struct
//     npfnic_pasid_entry), 4 KiB aligned; root = V (bit 0) | IOVA of the
//     level-4 table (bits 51:12).
//   - Page tables: x86-64 style, 4 levels of 512 little-endian 64-bit
//     entries, 4 KiB pages, 48-bit VAs. P (bit 0) present, W (bit 1)
//     writable at every level, bits 51:12 the next table or the page, bits
//     63:52 reserved in a present entry, bits 11:2 ignored.
//   - Invalidation queue: a ring of 32-byte struct npfnic_inv_desc (RANGE,
//     PASID, ALL, WAIT) with a tail doorbell (INVQ_TAIL); the device writes
//     its head into the ATS status block and, for WAIT, the descriptor's
//     data to its completion word.
//
// Translation API. Context.Access translates a whole buffer into page-sized
// IOVA segments and returns a Handle that holds one in-flight reference per
// ATC entry it used; the caller does its DMA through the handle (or through
// guestmem with the segments) and then calls Release. A translation that
// cannot be made is a *Fault, which says whether a page request would
// resolve it (not present, write to read-only) or whether the operation
// must simply fail (bad PASID, address out of range, a table outside guest
// memory, reserved bits).
//
// The invalidation guarantee is structural, not timed: an invalidation
// removes the matching entries from the ATC under the ATC lock (so no new
// access can find them), then waits until every removed or earlier-removed
// entry in its range has no in-flight reference; a page-table walk that
// raced with an invalidation it may have missed is discarded and redone (a
// sequence log of recent invalidations, as Linux's mmu_interval_notifier
// read_begin/read_retry). So once Invalidate returns, or a WAIT descriptor's
// completion is written, no DMA is using, or will ever use, a translation
// the invalidation dropped.
//
// With the PCIe ATS capability's Enable bit clear nothing is translated:
// descriptors carry IOVAs, Access only splits them at page boundaries and
// the ATC stays empty.
//
// Threading: register writes and capability hooks may arrive on the
// vfio-user socket goroutine and never wait for guest memory or for DMA;
// the invalidation queue runs on its own goroutine.
package ats

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// Caps is the part of the PCIe configuration space translation depends on;
// *pcie.Space implements it.
type Caps interface {
	ATSEnabled() bool
	ATSSTU() uint8
	PASIDEnabled() bool
	BusMaster() bool
}

// Config sets up a Context.
type Config struct {
	Mem *guestmem.Memory // guest memory; required
	// Caps gives the initial ATS and PASID enables and the Bus Master bit
	// the invalidation queue obeys. Nil: ATS and PASID enabled, bus
	// mastering on (tests and tools without a configuration space).
	Caps Caps
	// Capacity is the number of ATC entries (one 4 KiB page each),
	// 1..hw.ATCCapacityMax; 0 means DefaultCapacity.
	Capacity int
	// Interrupt fires an MSI-X vector (INVQ_VECTOR). It must not block;
	// nil drops interrupts.
	Interrupt func(vector int)
	Log       *slog.Logger
	// Trace records ATC hits and misses, walks and invalidations; nil
	// records nothing.
	Trace *trace.Recorder
}

// DefaultCapacity is the ATC size when Config.Capacity is 0.
const DefaultCapacity = 1024

// MaxAccess is the longest buffer one Access translates.
const MaxAccess = 1 << 20

const (
	pageSize  = hw.XlatPageSize
	pageShift = hw.XlatPageShift
	vaLimit   = uint64(1) << hw.XlatVABits
	// invLogSize is how many recent invalidations a racing walk can be
	// checked against before it is simply redone.
	invLogSize = 64
	// evictScan bounds the LRU scan for an unpinned victim.
	evictScan = 16
)

// Stats are cumulative counters.
type Stats struct {
	Hits, Misses      uint64                // ATC lookups per page
	Walks             uint64                // page-table walks (misses, retries and fault probes)
	WalkRetries       uint64                // walks redone because an invalidation raced with them
	Evictions         uint64                // LRU evictions
	Passthrough       uint64                // pages not translated (ATS disabled)
	Faults            [numFaultKinds]uint64 // indexed by FaultKind
	Invalidations     uint64                // Invalidate calls (queue descriptors included)
	Dropped           uint64                // ATC entries dropped by invalidations and flushes
	InvalidationWaits uint64                // invalidations that had to wait for in-flight DMA
	Flushes           uint64                // whole-cache flushes (enable changes, table changes, reset)
	Entries           int                   // entries in the ATC now
	Draining          int                   // dropped entries still used by in-flight DMA
}

// Context is the translation state of one PCI function. Create it with New.
type Context struct {
	mem      *guestmem.Memory
	caps     Caps
	irq      func(int)
	log      *slog.Logger
	capacity int // guarded by mu
	// defaultCapacity is Config.Capacity, what ATC_CAPACITY 0 restores.
	defaultCapacity int

	atsOn   atomic.Bool
	pasidOn atomic.Bool
	stu     atomic.Uint32

	mu    sync.Mutex
	table pasidTable
	m     map[key]*entry
	// dm indexes m directly by page, in front of the map (a hash of the
	// key for every page a DMA touches was a tenth of the RC engine's
	// CPU): a slot holds an entry only while it is in m (removeLocked
	// clears it), so a hit there is a hit in m.
	dm       [dmSlots]*entry
	lru      entry // sentinel: lru.next is the most recently used
	draining map[*entry]struct{}
	seq      uint64
	invLog   [invLogSize]invRecord
	drained  sync.Cond // signalled when a draining entry loses its last reference
	waiters  int

	trace *trace.Recorder

	hits, misses, walks, retries, evictions, passthrough atomic.Uint64
	// hitsBase and missesBase are hits and misses at the last reset: the
	// ATC_HITS and ATC_MISSES registers count from there (Stats does not).
	hitsBase, missesBase                      atomic.Uint64
	faults                                    [numFaultKinds]atomic.Uint64
	invalidations, dropped, invWaits, flushes atomic.Uint64

	q invQueue

	// skipDrainForTest makes Invalidate return without waiting for
	// in-flight DMA: a deliberately broken device, so the stress test can
	// show that its checker catches stale uses. Only tests set it.
	skipDrainForTest bool
	// skipRecheckForTest makes a walk that raced with an invalidation
	// install its possibly stale result: the other half of the guarantee,
	// broken on purpose for the same negative control.
	skipRecheckForTest bool
}

// New returns a Context with an empty ATC and no PASID table; its
// invalidation queue goroutine runs until Close.
func New(cfg Config) (*Context, error) {
	if cfg.Mem == nil {
		return nil, errors.New("ats: Config.Mem is required")
	}
	if cfg.Capacity < 0 || cfg.Capacity > hw.ATCCapacityMax {
		return nil, fmt.Errorf("ats: ATC capacity %d: want 1..%d, or 0 for %d", cfg.Capacity, hw.ATCCapacityMax, DefaultCapacity)
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Interrupt == nil {
		cfg.Interrupt = func(int) {}
	}
	c := &Context{
		mem:             cfg.Mem,
		trace:           cfg.Trace,
		caps:            cfg.Caps,
		irq:             cfg.Interrupt,
		log:             cfg.Log,
		capacity:        cfg.Capacity,
		defaultCapacity: cfg.Capacity,
		m:               make(map[key]*entry, cfg.Capacity),
		draining:        make(map[*entry]struct{}),
	}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	c.drained.L = &c.mu
	if cfg.Caps != nil {
		c.atsOn.Store(cfg.Caps.ATSEnabled())
		c.pasidOn.Store(cfg.Caps.PASIDEnabled())
		c.stu.Store(uint32(cfg.Caps.ATSSTU()))
	} else {
		c.atsOn.Store(true)
		c.pasidOn.Store(true)
	}
	c.q.init()
	go c.runQueue()
	return c, nil
}

// Close stops the invalidation queue goroutine and the ATS instance's DMA.
// Translation keeps working for tables set through SetPASIDTable.
func (c *Context) Close() {
	c.q.stop()
}

// ATSControl applies a write of the ATS capability's control register (the
// pcie.Hooks.ATSControl hook). Any change of Enable empties the ATC: a
// disabled function may not cache translations, and one enabled again
// starts from nothing. It does not wait for in-flight DMA.
func (c *Context) ATSControl(enabled bool, stu uint8) {
	c.stu.Store(uint32(stu & 0x1f))
	if c.atsOn.Swap(enabled) != enabled {
		c.Flush()
	}
}

// PASIDControl applies a change of the PASID capability's Enable bit: with
// it clear, only PASID 0 translates.
func (c *Context) PASIDControl(enabled bool) {
	if c.pasidOn.Swap(enabled) != enabled {
		c.Flush()
	}
}

// ATSEnabled reports whether Access translates.
func (c *Context) ATSEnabled() bool { return c.atsOn.Load() }

// SetPASIDTable registers the PASID table at IOVA base with entries
// entries (a power of two, 1..hw.PASIDTableMax, base 4 KiB aligned) and
// empties the ATC. Entries are read when a translation misses, so a table
// outside guest memory shows up as FaultTable on access.
func (c *Context) SetPASIDTable(base uint64, entries uint32) error {
	return c.setPASIDTable(base, entries, nil)
}

// setPASIDTable installs a table whose walks read through dma (nil: guest
// memory directly).
func (c *Context) setPASIDTable(base uint64, entries uint32, dma *guestmem.Stream) error {
	if base%pageSize != 0 || entries == 0 || entries > hw.PASIDTableMax || entries&(entries-1) != 0 ||
		base+uint64(entries)*hw.PASIDEntrySize < base {
		return ErrBadPASIDTable
	}
	c.mu.Lock()
	c.table = pasidTable{base: base, entries: uint64(entries), valid: true, dma: dma}
	c.flushLocked()
	c.mu.Unlock()
	return nil
}

// ClearPASIDTable unregisters the PASID table (every translated access then
// faults with FaultPASID) and empties the ATC.
func (c *Context) ClearPASIDTable() {
	c.mu.Lock()
	c.table = pasidTable{}
	c.flushLocked()
	c.mu.Unlock()
}

// Errors of the direct (non-queue) API.
var (
	ErrBadPASIDTable = errors.New("ats: PASID table misaligned or of bad size")
	ErrBadInvalidate = errors.New("ats: invalidation range empty, misaligned or beyond 48-bit VAs")
	ErrBadPASID      = errors.New("ats: PASID out of range")
)

// Stats returns the counters.
func (c *Context) Stats() Stats {
	s := Stats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Walks: c.walks.Load(), WalkRetries: c.retries.Load(),
		Evictions: c.evictions.Load(), Passthrough: c.passthrough.Load(),
		Invalidations: c.invalidations.Load(), Dropped: c.dropped.Load(), InvalidationWaits: c.invWaits.Load(),
		Flushes: c.flushes.Load(),
	}
	for i := range s.Faults {
		s.Faults[i] = c.faults[i].Load()
	}
	c.mu.Lock()
	s.Entries, s.Draining = len(c.m), len(c.draining)
	c.mu.Unlock()
	return s
}

// Reset is a function reset of translation: no PASID table, the
// invalidation queue disabled and its registers cleared, the ATC empty,
// and the ATS and PASID enables taken again from the configuration space
// (which the PCI function resets first, or keeps). It stops the ATS
// instance's DMA and does not wait for it: Quiesced and WaitQuiesced tell
// when no walk, completion or status write is left.
func (c *Context) Reset() {
	c.q.reset()
	c.resetRegCounters()
	c.SetCapacity(0)
	c.ClearPASIDTable()
	c.syncCaps()
}

// syncCaps applies the configuration space's ATS and PASID enables as the
// capability hooks would: a reset that rewrote config space without its
// hooks must not leave translation on behind an Enable bit that reads 0.
func (c *Context) syncCaps() {
	if c.caps == nil {
		return
	}
	c.ATSControl(c.caps.ATSEnabled(), c.caps.ATSSTU())
	c.PASIDControl(c.caps.PASIDEnabled())
}

// Kick makes the invalidation queue look at its doorbell again; the PCI
// function calls it when bus mastering is turned on, since the queue does
// no DMA without it.
func (c *Context) Kick() { c.q.wake() }

func (c *Context) busMaster() bool { return c.caps == nil || c.caps.BusMaster() }

// resetRegCounters makes ATC_HITS and ATC_MISSES count from zero again.
func (c *Context) resetRegCounters() {
	c.hitsBase.Store(c.hits.Load())
	c.missesBase.Store(c.misses.Load())
}
