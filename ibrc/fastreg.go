package ibrc

import (
	"fmt"
)

// Fast registration (IBA 10.6.3.7, "Fast Register Physical MR"): a kernel
// consumer allocates a region once (ib_alloc_mr), and then registers it
// through its send queue as often as it needs, with a page list it wrote
// beforehand (IB_WR_REG_MR), and frees it again with LOCAL_INV or by a
// peer's SEND with Invalidate. Storage ULPs (nvme-rdma, iSER, SRP) register
// each I/O's buffer so and hand the R_Key to the peer.
//
// A FastMR is the allocated region: its index (key >> 8) stays, each
// registration gives it a new key byte. Each registration is an MR of its
// own, installed under its key while the FastMR is valid; invalidation
// deregisters that MR, so an access that found the old registration (a
// WRITE between two of its packets) finds it dead and never reaches the
// pages of the next. The rules are rdma_rxe's (rxe_reg_fast_mr,
// rxe_invalidate_mr): only a free region is registered, only by a QP of
// its PD, only its key byte changes.

// WRRegMR (IB_WR_REG_MR, kernel consumers only) registers the FastMR of
// Reg.Key >> 8; WRLocalInv and WRSendWithInv naming a FastMR's key free it.
const WRRegMR WROpcode = 0x20

// WCRegMR is a REG_MR's completion (Linux 6.1's IB_WC_REG_MR).
const WCRegMR WCOpcode = 8

// FastReg is a REG_MR work request's registration.
type FastReg struct {
	IOVA      uint64
	Length    uint64
	Key       uint32 // the region's keys from now on: its index, a new key byte
	Access    Access
	PageShift uint8 // pages of 1 << PageShift bytes
	NPages    uint32
}

// Fast registration's page sizes: 4 KiB to 1 GiB.
const (
	FastRegMinPageShift = 12
	FastRegMaxPageShift = 30
)

// PageLister reads a FastMR's page list when a REG_MR runs: it returns the
// memory the registration reaches (its addresses IOVA..IOVA+Length mapped
// onto the list's first NPages pages), a snapshot, so the consumer may
// rewrite the list once the REG_MR completed.
type PageLister interface {
	Pages(r FastReg) (Memory, error)
}

// FastMR is a region allocated for fast registration.
type FastMR struct {
	pd       *PD
	index    uint32
	maxPages uint32
	pages    PageLister
	// Under the engine's mu:
	key  uint32 // the last registration's (or the allocation's) key
	cur  *MR    // the registration in force; nil: free
	gone bool
}

// AllocFastMR creates a free region for fast registration whose index is
// key >> 8 (unique among the engine's fast regions and not a key of a
// registered region's index), for page lists of up to maxPages pages.
func (pd *PD) AllocFastMR(pages PageLister, key uint32, maxPages uint32) (*FastMR, error) {
	if pages == nil || key>>8 == 0 || maxPages == 0 {
		return nil, ErrInvalidArg
	}
	e := pd.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fast[key>>8] != nil {
		return nil, ErrResourceInUse
	}
	f := &FastMR{pd: pd, index: key >> 8, maxPages: maxPages, pages: pages, key: key}
	e.fast[f.index] = f
	return f, nil
}

// Key returns the region's key now.
func (f *FastMR) Key() uint32 {
	f.pd.e.mu.RLock()
	defer f.pd.e.mu.RUnlock()
	return f.key
}

// Valid reports whether a registration is in force.
func (f *FastMR) Valid() bool {
	f.pd.e.mu.RLock()
	defer f.pd.e.mu.RUnlock()
	return f.cur != nil
}

// Dealloc destroys the region: its registration is deregistered (waiting
// for the accesses in flight, as Deregister does) and no REG_MR finds it.
func (f *FastMR) Dealloc() {
	e := f.pd.e
	e.mu.Lock()
	if e.fast[f.index] == f {
		delete(e.fast, f.index)
	}
	f.gone = true
	m := f.cur
	f.cur = nil
	e.mu.Unlock()
	if m != nil {
		_ = m.Deregister()
	}
}

// fastRegister runs a REG_MR of q's.
func (q *QP) fastRegister(r *FastReg) error {
	e := q.e
	e.mu.RLock()
	f := e.fast[r.Key>>8]
	busy := f != nil && f.cur != nil
	e.mu.RUnlock()
	switch {
	case f == nil:
		return fmt.Errorf("%w: no fast registration region %#x", ErrInvalidArg, r.Key)
	case f.pd != q.pd:
		return fmt.Errorf("%w: region of another PD", ErrInvalidArg)
	case busy:
		return fmt.Errorf("%w: region %#x registered already", ErrInvalidArg, r.Key)
	case r.NPages == 0 || r.NPages > f.maxPages:
		return fmt.Errorf("%w: %d pages for a region of %d", ErrInvalidArg, r.NPages, f.maxPages)
	case r.PageShift < FastRegMinPageShift || r.PageShift > FastRegMaxPageShift:
		return fmt.Errorf("%w: page shift %d", ErrInvalidArg, r.PageShift)
	case r.Length == 0 || r.IOVA+r.Length < r.IOVA:
		return fmt.Errorf("%w: length %d at %#x", ErrInvalidArg, r.Length, r.IOVA)
	case r.IOVA&(1<<r.PageShift-1)+r.Length > uint64(r.NPages)<<r.PageShift:
		return fmt.Errorf("%w: %d bytes beyond %d pages", ErrInvalidArg, r.Length, r.NPages)
	case r.Access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && r.Access&AccessLocalWrite == 0:
		return fmt.Errorf("%w: remote write without local write", ErrInvalidArg)
	case r.Access&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessMWBind) != 0:
		return fmt.Errorf("%w: access %#x", ErrInvalidArg, r.Access)
	}
	// The page list is read outside the tables' lock: it is guest memory.
	mem, err := f.pages.Pages(*r)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if f.gone || f.cur != nil || e.mrs[r.Key] != nil {
		return fmt.Errorf("%w: region %#x changed under its REG_MR", ErrInvalidArg, r.Key)
	}
	m := &MR{pd: f.pd, mem: mem, va: r.IOVA, length: r.Length, access: r.Access, key: r.Key}
	e.mrs[r.Key] = m
	f.cur, f.key = m, r.Key
	return nil
}

// invalidateFast frees the fast region rkey is the key of, if it is one:
// handled reports whether rkey names a fast region at all (its index), and
// err why it could not be freed.
func (q *QP) invalidateFast(rkey uint32) (handled bool, err error) {
	e := q.e
	e.mu.Lock()
	f := e.fast[rkey>>8]
	if f == nil {
		e.mu.Unlock()
		return false, nil
	}
	if f.cur == nil || f.key != rkey || f.pd != q.pd {
		e.mu.Unlock()
		return true, fmt.Errorf("%w: no registration %#x", ErrInvalidArg, rkey)
	}
	m := f.cur
	f.cur = nil
	e.mu.Unlock()
	// Deregister waits for the accesses in flight: from the completion on,
	// nothing reaches the registration's pages.
	_ = m.Deregister()
	return true, nil
}

// PagedMemory is a fast registration's memory: IOVA..IOVA+Length of the
// registration mapped onto its page list, whose addresses are in Backing
// (the device's bus addresses). The list is the REG_MR's snapshot.
type PagedMemory struct {
	Backing Memory
	reg     FastReg
	pages   []uint64
}

// NewPagedMemory maps r onto pages (at least r.NPages, each page aligned;
// the caller checked r as fastRegister does).
func NewPagedMemory(backing Memory, r FastReg, pages []uint64) (*PagedMemory, error) {
	if uint64(len(pages)) < uint64(r.NPages) {
		return nil, fmt.Errorf("%w: %d pages listed, %d used", ErrInvalidArg, len(pages), r.NPages)
	}
	mask := uint64(1)<<r.PageShift - 1
	for i, p := range pages[:r.NPages] {
		if p&mask != 0 {
			return nil, fmt.Errorf("%w: page %d at %#x is not aligned to its size", ErrInvalidArg, i, p)
		}
	}
	return &PagedMemory{Backing: backing, reg: r, pages: append([]uint64(nil), pages[:r.NPages]...)}, nil
}

func (m *PagedMemory) ReadAt(va uint64, p []byte) error {
	return m.each(va, len(p), func(addr uint64, lo, hi int) error { return m.Backing.ReadAt(addr, p[lo:hi]) })
}

func (m *PagedMemory) WriteAt(va uint64, p []byte) error {
	return m.each(va, len(p), func(addr uint64, lo, hi int) error { return m.Backing.WriteAt(addr, p[lo:hi]) })
}

// each calls f for the piece of [va, va+n) in each page: its bus address
// and its bounds in the caller's buffer. The MR's bounds were checked by
// the lookup, so va is in the registration.
func (m *PagedMemory) each(va uint64, n int, f func(addr uint64, lo, hi int) error) error {
	shift := m.reg.PageShift
	size := uint64(1) << shift
	base := m.reg.IOVA &^ (size - 1) // the first page's first address
	if va < m.reg.IOVA || uint64(n) > m.reg.Length || va-m.reg.IOVA > m.reg.Length-uint64(n) {
		return fmt.Errorf("%w: %d bytes at %#x outside the registration", errMRDead, n, va)
	}
	for done := 0; done < n; {
		off := va + uint64(done) - base
		page := off >> shift
		in := off & (size - 1)
		k := int(min(uint64(n-done), size-in))
		if err := f(m.pages[page]+in, done, done+k); err != nil {
			return err
		}
		done += k
	}
	return nil
}
