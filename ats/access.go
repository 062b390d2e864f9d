package ats

import (
	"errors"
	"runtime"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// Segment is a piece of a translated buffer: Len bytes at IOVA, never
// crossing a page, so one guestmem access covers it.
type Segment struct {
	IOVA uint64
	Len  int
}

// Access cuts buffers with guestmem.SplitPages, so a translated page must
// be exactly a guestmem page: these fail to compile if the two differ.
var _ [pageSize - guestmem.PageSize]struct{}
var _ [guestmem.PageSize - pageSize]struct{}

// inlineSegs is how many pages a Handle holds without allocating: a
// 2 KiB RX buffer or an Ethernet frame spans at most two.
const inlineSegs = 4

// Handle is a translated buffer in use. Each page's ATC entry stays
// referenced until Release, so an invalidation of any of those pages does
// not complete while the DMA is still going on. Keep a Handle only for the
// duration of the copy: never across a page request, a wait for the driver,
// or an Invalidate. A Handle must not be copied; its zero value is an empty,
// released handle.
type Handle struct {
	c      *Context
	n      int
	nseg   int
	segBuf [inlineSegs]Segment
	entBuf [inlineSegs]*entry
	segs   []Segment // used instead of segBuf beyond inlineSegs pages
	ents   []*entry
	nent   int
}

// Segments returns the IOVA pieces of the buffer in order.
func (h *Handle) Segments() []Segment {
	if h.segs != nil {
		return h.segs
	}
	return h.segBuf[:h.nseg]
}

// Len is the length of the buffer.
func (h *Handle) Len() int { return h.n }

func (h *Handle) add(s Segment, e *entry, pages int) {
	if h.segs == nil && h.nseg == inlineSegs {
		h.segs = make([]Segment, h.nseg, pages)
		copy(h.segs, h.segBuf[:])
		h.ents = make([]*entry, h.nent, pages)
		copy(h.ents, h.entBuf[:h.nent])
	}
	if h.segs != nil {
		h.segs = append(h.segs, s)
		if e != nil {
			h.ents = append(h.ents, e)
			h.nent++
		}
	} else {
		h.segBuf[h.nseg] = s
		if e != nil {
			h.entBuf[h.nent] = e
			h.nent++
		}
	}
	h.nseg++
	h.n += s.Len
}

func (h *Handle) entries() []*entry {
	if h.ents != nil {
		return h.ents
	}
	return h.entBuf[:h.nent]
}

// Release ends the use of the translations: an invalidation waiting for
// them may now complete. It is idempotent.
func (h *Handle) Release() {
	if h.c == nil {
		return
	}
	if ents := h.entries(); len(ents) > 0 {
		h.c.mu.Lock()
		h.c.releaseLocked(ents)
		h.c.mu.Unlock()
	}
	*h = Handle{}
}

// ErrRange is returned by Handle copies outside the buffer.
var ErrRange = errors.New("ats: copy outside the translated buffer")

// ReadAt copies len(p) bytes of the buffer, from offset off, into p.
func (h *Handle) ReadAt(p []byte, off int) error { return h.copyAt(p, off, false) }

// WriteAt copies p into the buffer at offset off.
func (h *Handle) WriteAt(p []byte, off int) error { return h.copyAt(p, off, true) }

// Read fills p from the start of the buffer.
func (h *Handle) Read(p []byte) error { return h.copyAt(p, 0, false) }

// Write copies p to the start of the buffer.
func (h *Handle) Write(p []byte) error { return h.copyAt(p, 0, true) }

// ReadVia and WriteVia are ReadAt and WriteAt through dma, the stream of
// the engine doing the data DMA (a queue pair's instance, say): the copy is
// then part of that engine's quiesce, and one after the engine quiesced is
// refused as late. The caller makes the copy inside a unit of dma (Begin,
// copy, End); a nil dma copies through guest memory directly.
//
// The quiesce of a translated data access is thus split at the Handle:
// the walk that made it belongs to ATS (its instance's stream), the bytes
// moved belong to the engine that asked for them.
func (h *Handle) ReadVia(dma *guestmem.Stream, p []byte, off int) error {
	return h.copyVia(dma, p, off, false)
}

// WriteVia copies p into the buffer at offset off through dma (see ReadVia).
func (h *Handle) WriteVia(dma *guestmem.Stream, p []byte, off int) error {
	return h.copyVia(dma, p, off, true)
}

func (h *Handle) copyAt(p []byte, off int, write bool) error { return h.copyVia(nil, p, off, write) }

func (h *Handle) copyVia(dma *guestmem.Stream, p []byte, off int, write bool) error {
	if h.c == nil || off < 0 || off > h.n || len(p) > h.n-off {
		return ErrRange
	}
	for _, s := range h.Segments() {
		if len(p) == 0 {
			break
		}
		if off >= s.Len {
			off -= s.Len
			continue
		}
		n := min(s.Len-off, len(p))
		var err error
		switch {
		case dma != nil && write:
			err = dma.WriteAt(s.IOVA+uint64(off), p[:n])
		case dma != nil:
			err = dma.ReadAt(s.IOVA+uint64(off), p[:n])
		case write:
			err = h.c.mem.WriteAt(s.IOVA+uint64(off), p[:n])
		default:
			err = h.c.mem.ReadAt(s.IOVA+uint64(off), p[:n])
		}
		if err != nil {
			return err
		}
		off = 0
		p = p[n:]
	}
	return nil
}

// Access translates n bytes at va in pasid's address space for a read or a
// write DMA and returns the handle holding the translations. On failure it
// returns a *Fault and holds nothing: for a resolvable fault, Fault.Pages
// lists every page of the buffer that needs a page request, and the caller
// retries Access after the page response. With ATS disabled, va is already
// an IOVA: it is only split at page boundaries (pasid is ignored).
func (c *Context) Access(pasid uint32, va uint64, n int, write bool) (Handle, error) {
	return c.access(pasid, va, n, write, false, false)
}

// TryAccess is Access for a caller that, when the buffer does not
// translate now, takes another path that meets the fault itself (the
// Ethernet engine cutting a super-packet into frames when a buffer of its
// receive chain would fault): it reports false and holds nothing, counts
// no fault and lists no pages.
func (c *Context) TryAccess(pasid uint32, va uint64, n int, write bool) (Handle, bool) {
	h, err := c.access(pasid, va, n, write, false, true)
	return h, err == nil
}

// AccessTranslated is Access for an address that is only ever translated,
// a process's virtual address in an RDMA memory region: with ATS disabled
// it fails with FaultDisabled rather than pass va through as an IOVA. The
// enable bit is read once, so an access racing a write of ATS Enable
// either translates or fails, never both.
func (c *Context) AccessTranslated(pasid uint32, va uint64, n int, write bool) (Handle, error) {
	return c.access(pasid, va, n, write, true, false)
}

// access is Access; with probe set a fault is neither counted nor given
// its pages (TryAccess).
func (c *Context) access(pasid uint32, va uint64, n int, write, mustTranslate, probe bool) (Handle, error) {
	fault := func(f *Fault) *Fault { return c.faultUnless(probe, f) }
	end := va + uint64(n)
	if n <= 0 || n > MaxAccess || end < va {
		return Handle{}, fault(&Fault{Kind: FaultAddress, PASID: pasid, VA: va, Write: write, Level: -1})
	}
	pages := int((end-1)>>pageShift - va>>pageShift + 1)
	translating := c.atsOn.Load()
	if !translating && mustTranslate {
		return Handle{}, fault(&Fault{Kind: FaultDisabled, PASID: pasid, VA: va, Write: write, Level: -1})
	}
	if translating && end > vaLimit {
		return Handle{}, fault(&Fault{Kind: FaultAddress, PASID: pasid, VA: va, Write: write, Level: -1})
	}
	if translating && pasid != 0 && !c.pasidOn.Load() {
		return Handle{}, fault(&Fault{Kind: FaultPASID, PASID: pasid, VA: va, Write: write, Level: -1})
	}
	h := Handle{c: c}
	err := guestmem.SplitPages(va, n, func(a uint64, _, l int) error {
		if !translating {
			h.add(Segment{IOVA: a, Len: l}, nil, pages)
			return nil
		}
		e, f := c.translate(pasid, a, write)
		if f != nil {
			h.Release()
			f.VA, f.Write = a, write
			if f.Kind.Resolvable() && !probe {
				f = c.collect(f, pasid, a, end, write)
			}
			return fault(f)
		}
		h.add(Segment{IOVA: e.frame + a%pageSize, Len: l}, e, pages)
		return nil
	})
	if err != nil {
		return Handle{}, err
	}
	if !translating {
		c.passthrough.Add(uint64(pages))
	}
	return h, nil
}

// faultUnless is fault, counting nothing for a probe.
func (c *Context) faultUnless(probe bool, f *Fault) *Fault {
	if probe {
		return f
	}
	return c.fault(f)
}

func (c *Context) fault(f *Fault) *Fault {
	c.faults[f.Kind].Add(1)
	return f
}

// translate returns the pinned ATC entry for the page holding va, walking
// the page tables on a miss.
func (c *Context) translate(pasid uint32, va uint64, write bool) (*entry, *Fault) {
	k := key{pasid, va >> pageShift}
	c.mu.Lock()
	if e := c.lookupLocked(k, write); e != nil {
		c.mu.Unlock()
		c.hits.Add(1)
		c.trace.Emit(trace.ATCHit, trace.TrackATS, va&^(pageSize-1), uint64(pasid))
		return e, nil
	}
	seq, t := c.seq, c.table
	c.mu.Unlock()
	c.misses.Add(1)
	c.trace.Emit(trace.ATCMiss, trace.TrackATS, va&^(pageSize-1), uint64(pasid))
	for attempt := 0; ; attempt++ {
		start := c.trace.Now()
		r, f := c.walk(t, pasid, va&^(pageSize-1))
		if c.trace.On() {
			frame := r.frame
			if f != nil {
				frame = ^uint64(0)
			}
			c.trace.Span(trace.Walk, trace.TrackATS, start, va&^(pageSize-1), frame)
		}
		if f == nil && write && !r.write {
			f = &Fault{Kind: FaultWriteProtect, PASID: pasid, VA: va, Level: -1}
		}
		c.mu.Lock()
		if c.invalidatedSince(seq, k) && !c.skipRecheckForTest {
			// The walk may have read entries the driver changed and
			// invalidated meanwhile: its result (even a fault) is stale.
			seq, t = c.seq, c.table
			c.mu.Unlock()
			c.retries.Add(1)
			if attempt >= 8 {
				runtime.Gosched()
			}
			continue
		}
		if f != nil {
			c.mu.Unlock()
			return nil, f
		}
		e := c.installLocked(k, r.frame, r.write)
		c.mu.Unlock()
		return e, nil
	}
}

// collect lists the pages of [first, end) that need a page request, given
// that the page at first faulted with f. A page that cannot be resolved
// turns the whole access into that fault.
func (c *Context) collect(f *Fault, pasid uint32, first, end uint64, write bool) *Fault {
	f.Pages = append(f.Pages, first&^(pageSize-1))
	c.mu.Lock()
	t := c.table
	c.mu.Unlock()
	for a := first&^(pageSize-1) + pageSize; a < end; a += pageSize {
		k := key{pasid, a >> pageShift}
		c.mu.Lock()
		e := c.m[k]
		cached := e != nil && (e.write || !write)
		c.mu.Unlock()
		if cached {
			continue
		}
		r, g := c.walk(t, pasid, a)
		if g == nil && write && !r.write {
			g = &Fault{Kind: FaultWriteProtect, PASID: pasid, VA: a, Level: -1}
		}
		if g == nil {
			continue
		}
		if !g.Kind.Resolvable() {
			g.Write = write
			return g
		}
		f.Pages = append(f.Pages, a)
	}
	return f
}

// Read copies len(p) bytes at va of pasid into p: Access, copy, Release.
func (c *Context) Read(pasid uint32, va uint64, p []byte) error { return c.copyVA(pasid, va, p, false) }

// Write copies p to va of pasid: Access, copy, Release.
func (c *Context) Write(pasid uint32, va uint64, p []byte) error { return c.copyVA(pasid, va, p, true) }

func (c *Context) copyVA(pasid uint32, va uint64, p []byte, write bool) error {
	h, err := c.Access(pasid, va, len(p), write)
	if err != nil {
		return err
	}
	err = h.copyAt(p, 0, write)
	h.Release()
	return err
}
