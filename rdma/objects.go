package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rxeq"
	"github.com/npfnic/npfnic/vdevice/guestmem"
)

// cq is a completion queue: the ibrc engine's queue of completions, which
// the worker moves into the rxe completion queue in guest memory.
type cq struct {
	n       uint32
	dma     *guestmem.Stream // the rxe ring's writes
	ring    *rxeq.CQ
	rc      *ibrc.CQ
	pending atomic.Bool // the engine added completions
	arm     uint8       // armAny, armSolicited or 0
	broken  bool        // overran or its ring failed: no more completions (CQ_ERR posted)
	refs    int         // QPs that use it
	// solEnd is the producer index just past the last completion that
	// satisfies a solicited-only arm (solicited, or an error); hasSol
	// says there was one.
	solEnd uint32
	hasSol bool
}

// qp is a queue pair: the ibrc QP, the device's ends of its rxe send and
// receive queues, and what the worker knows of its completions.
type qp struct {
	n      uint32
	pdn    uint32
	dma    *guestmem.Stream // the rxe rings' accesses
	rc     *ibrc.QP
	sq     *rxeq.SQ
	sqG    rxeq.Geometry
	rqG    rxeq.Geometry
	lim    rxeq.SendLimits
	rsge   int
	sigAll bool
	scq    *cq
	rcq    *cq
	srq    *srq // receives come from it, not from rq (nil)

	// signaled has, for each send WR handed to the engine and not yet
	// completed, whether its success makes a completion (IBV_SEND_SIGNALED
	// or sq_sig_all): the engine signals every WR, so that each retires
	// its slot in order, and the worker drops the unsignaled successes.
	signaled []bool
	bad      *rxeq.WQEError // a malformed send entry, completed in its turn
	sqBroken bool           // the send ring could not be read

	// rqMu guards the receive ring, which the ibrc engine's receive path
	// fetches from (RecvSource, under the ibrc QP's lock) while the worker
	// retires and flushes. Lock order: the ibrc QP's lock, then rqMu.
	rqMu     sync.Mutex
	rq       *rxeq.RQ
	rqBroken atomic.Bool
	// badWQEs is the engine's count of malformed entries (Stats.BadWQEs),
	// which the receive path adds to.
	badWQEs *atomic.Uint64

	errStatus ibrc.WCStatus // the first error that completed on it
	userErr   bool          // MODIFY_QP moved it to ERR: no QP_FATAL
	fatalSent bool
}

// nextRecv is the QP's ibrc.RecvSource: the next entry of its rxe receive
// queue, read when a message needs one.
func (q *qp) nextRecv() (ibrc.RecvWR, ibrc.WCStatus, bool) {
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.rqBroken.Load() || !q.dma.Begin() {
		return ibrc.RecvWR{}, 0, false
	}
	defer q.dma.End()
	w, ok, err := q.rq.Fetch()
	if !ok {
		if err != nil {
			q.rqBroken.Store(true)
		}
		return ibrc.RecvWR{}, 0, false
	}
	var we *rxeq.WQEError
	if errors.As(err, &we) {
		q.badWQEs.Add(1)
		return ibrc.RecvWR{ID: we.WRID}, we.Status(), true
	}
	return w.WR, ibrc.WCSuccess, true
}

// retireRecv returns the oldest fetched receive slot to user space.
func (q *qp) retireRecv() error {
	if q.srq != nil {
		return nil // retired when taken
	}
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if !q.dma.Begin() {
		return guestmem.ErrStopped
	}
	defer q.dma.End()
	return q.rq.Retire()
}

// mr is a memory region.
type mr struct {
	key uint32
	pdn uint32
	rc  *ibrc.MR
	mem *mrMem
	// fast: a region for fast registration (ALLOC_MR) instead of rc; its
	// registrations reach the pages of their lists through mem, which is
	// physical.
	fast *ibrc.FastMR
}

// destroy ends the region: no key reaches it, and no copy through it
// starts; the caller waits for its stream's copies in flight.
func (m *mr) destroy(e *Engine) {
	if m.fast != nil {
		m.fast.Dealloc()
	} else {
		_ = m.rc.Deregister()
	}
	e.retire(m.mem.dma)
}

// fastPages reads a fast registration region's page list, which ALLOC_MR
// placed, when a REG_MR of it runs (ibrc.PageLister): the list's bytes and
// the pages the registration reaches both go through the region's stream,
// so DEREG_MR stops them like any region's.
type fastPages struct {
	mem  *mrMem
	list uint64 // IOVA of max __le64 page addresses
	max  uint32
}

func (f *fastPages) Pages(r ibrc.FastReg) (ibrc.Memory, error) {
	if r.NPages > f.max {
		return nil, fmt.Errorf("rdma: REG_MR of %d pages, region of %d", r.NPages, f.max)
	}
	buf := make([]byte, 8*int(r.NPages))
	if err := f.mem.ReadAt(f.list, buf); err != nil {
		return nil, err
	}
	pages := make([]uint64, r.NPages)
	for i := range pages {
		pages[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	return ibrc.NewPagedMemory(f.mem, r, pages)
}

// mrMem is a memory region's bytes as the ibrc engine reaches them: every
// access translated by ats in the region's PASID and copied through the
// region's stream, so that DEREG_MR can stop it and wait for the copies in
// flight. A fault a page request can resolve is an ibrc fault (Faulter);
// any other failure is an access error.
// window is a memory window the driver allocated (ALLOC_MW).
type window struct {
	rc  *ibrc.MW
	pdn uint32
}

type mrMem struct {
	e     *Engine
	xlat  *ats.Context
	pasid uint32
	// physical: the region's addresses are IOVAs, reached as the rings
	// are (REG_MR's FLAG_PHYSICAL: the kernel's DMA MR), not a process's
	// virtual addresses translated in pasid.
	physical bool
	dma      *guestmem.Stream
}

func (m *mrMem) ReadAt(va uint64, p []byte) error  { return m.access(va, p, false) }
func (m *mrMem) WriteAt(va uint64, p []byte) error { return m.access(va, p, true) }

// errMRGone is an access to a region being deregistered (or reset).
var errMRGone = errors.New("rdma: memory region deregistered")

// errNoTranslation is an access to a region while ATS is disabled: its
// addresses are a process's virtual addresses, never IOVAs, so the device
// does not pass them through.
var errNoTranslation = errors.New("rdma: memory region access with ATS disabled")

func (m *mrMem) access(va uint64, p []byte, write bool) error {
	if len(p) == 0 {
		return nil
	}
	if !m.dma.Begin() {
		m.e.stats.lateRefused.Add(1)
		return errMRGone
	}
	defer m.dma.End()
	if !m.e.busMaster.Load() {
		return &ibrc.FaultError{VA: va, Write: write} // retried once bus mastering is back
	}
	if m.physical {
		if write {
			return m.dma.WriteAt(va, p)
		}
		return m.dma.ReadAt(va, p)
	}
	for len(p) > 0 {
		n := min(len(p), ats.MaxAccess)
		h, err := m.xlat.AccessTranslated(m.pasid, va, n, write)
		if err != nil {
			var f *ats.Fault
			switch {
			case errors.As(err, &f) && f.NeedsPageRequest():
				return &xlatFault{f}
			case errors.As(err, &f) && f.Kind == ats.FaultDisabled:
				return errNoTranslation
			}
			return err
		}
		if write {
			err = h.WriteVia(m.dma, p[:n], 0)
		} else {
			err = h.ReadVia(m.dma, p[:n], 0)
		}
		h.Release()
		if err != nil {
			return err
		}
		va += uint64(n)
		p = p[n:]
	}
	return nil
}

// xlatFault is a translation fault of a memory region that a page request
// can resolve: ibrc's RNR NAK and stall paths take it (ibrc.Faulter).
type xlatFault struct{ f *ats.Fault }

func (x *xlatFault) Fault() (uint64, bool) { return x.f.VA, x.f.Write }
func (x *xlatFault) Error() string         { return x.f.Error() }
func (x *xlatFault) Unwrap() error         { return x.f }

var _ ibrc.Faulter = (*xlatFault)(nil)
