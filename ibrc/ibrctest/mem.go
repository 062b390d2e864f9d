// Package ibrctest owns the RC engine's test doubles, which its tests and
// the simulated experiments share: Mem, an in-memory stand-in for
// unpinned, translated memory (this file), and Link, a simulated wire
// between two ports (link.go).
//
// Mem is a byte array whose pages can be absent, so that accesses fail with
// ibrc.FaultError, with fault injection by page or at random, and a
// PageRequester that makes pages present after a configurable delay on a
// clock (the page-request round trip of seed 000 Figure 3).
package ibrctest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/internal/clock"
)

// ErrOutOfRange is returned for an access outside the memory (an access
// violation, not a fault).
var ErrOutOfRange = errors.New("ibrctest: access outside memory")

// Mem is paged memory at [Base, Base+len). All pages start present. It is
// safe for concurrent use.
type Mem struct {
	mu       sync.Mutex
	base     uint64
	data     []byte
	pageSize uint64
	absent   []bool

	// Injection, see SetFaultRate.
	rng        *rand.Rand
	rate       float64
	writesOnly bool

	accesses, faults uint64
}

// NewMem returns size bytes of memory at base with the given page size (a
// power of two).
func NewMem(base uint64, size int, pageSize int) *Mem {
	if pageSize <= 0 || pageSize&(pageSize-1) != 0 {
		panic("ibrctest: page size must be a power of two")
	}
	np := (size + pageSize - 1) / pageSize
	return &Mem{base: base, data: make([]byte, size), pageSize: uint64(pageSize), absent: make([]bool, np)}
}

// Base and Len describe the range.
func (m *Mem) Base() uint64 { return m.base }
func (m *Mem) Len() int     { return len(m.data) }

// PageSize returns the page size.
func (m *Mem) PageSize() uint64 { return m.pageSize }

// SetFaultRate makes each access evict the first page it touches with
// probability rate before the access (a synthetic rNPF: the page was
// reclaimed), so that the access faults; the fault is resolved like any
// other, by a page request. With writesOnly only writes are affected.
func (m *Mem) SetFaultRate(rate float64, writesOnly bool, seed uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rate, m.writesOnly = rate, writesOnly
	m.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Evict makes the pages overlapping [va, va+n) absent.
func (m *Mem) Evict(va uint64, n int) { m.setPresent(va, n, false) }

// MakePresent makes the pages overlapping [va, va+n) present.
func (m *Mem) MakePresent(va uint64, n int) { m.setPresent(va, n, true) }

func (m *Mem) setPresent(va uint64, n int, present bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n <= 0 || va < m.base || va-m.base >= uint64(len(m.data)) {
		return
	}
	first := (va - m.base) / m.pageSize
	last := min((va-m.base+uint64(n)-1)/m.pageSize, uint64(len(m.absent)-1))
	for p := first; p <= last; p++ {
		m.absent[p] = !present
	}
}

// Present reports whether the page holding va is present.
func (m *Mem) Present(va uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if va < m.base || va-m.base >= uint64(len(m.data)) {
		return false
	}
	return !m.absent[(va-m.base)/m.pageSize]
}

// Counts returns how many accesses were made and how many faulted.
func (m *Mem) Counts() (accesses, faults uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.accesses, m.faults
}

func (m *Mem) access(va uint64, p []byte, write bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accesses++
	if va < m.base || uint64(len(p)) > uint64(len(m.data)) || va-m.base > uint64(len(m.data)-len(p)) {
		return fmt.Errorf("%w: %#x+%d", ErrOutOfRange, va, len(p))
	}
	if len(p) == 0 {
		return nil
	}
	off := va - m.base
	first, last := off/m.pageSize, (off+uint64(len(p))-1)/m.pageSize
	if m.rate > 0 && (write || !m.writesOnly) && m.rng.Float64() < m.rate {
		m.absent[first] = true
	}
	for pg := first; pg <= last; pg++ {
		if m.absent[pg] {
			m.faults++
			fva := m.base + pg*m.pageSize
			if pg == first {
				fva = va
			}
			return &ibrc.FaultError{VA: fva, Write: write}
		}
	}
	if write {
		copy(m.data[off:], p)
	} else {
		copy(p, m.data[off:])
	}
	return nil
}

var _ ibrc.Memory = (*Mem)(nil)

// ReadAt implements ibrc.Memory.
func (m *Mem) ReadAt(va uint64, p []byte) error { return m.access(va, p, false) }

// WriteAt implements ibrc.Memory.
func (m *Mem) WriteAt(va uint64, p []byte) error { return m.access(va, p, true) }

// Bytes returns the backing bytes (for tests to fill and inspect).
func (m *Mem) Bytes() []byte { return m.data }

// Pager resolves page requests for *Mem: after Delay on Clock the page is
// made present and done(true) is called. A request for memory it does not
// know, or for an address outside it, completes with done(false).
type Pager struct {
	Clock clock.Clock
	Delay time.Duration
	// Fail, when set, decides that a request fails (an invalid address).
	Fail func(r ibrc.PageRequest) bool

	mu       sync.Mutex
	requests uint64
}

// RequestPage implements ibrc.PageRequester.
func (p *Pager) RequestPage(r ibrc.PageRequest, done func(ok bool)) {
	p.mu.Lock()
	p.requests++
	p.mu.Unlock()
	m, ok := r.Mem.(*Mem)
	fail := !ok || p.Fail != nil && p.Fail(r)
	p.Clock.AfterFunc(p.Delay, func() {
		if fail {
			done(false)
			return
		}
		m.MakePresent(r.VA, 1)
		done(true)
	})
}

// Requests returns the number of page requests received.
func (p *Pager) Requests() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests
}
