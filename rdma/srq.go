package rdma

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rxeq"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// srq is a shared receive queue: the device's end of an rxe ring of
// receive entries that the QPs attached to it take from. An entry is
// retired the moment a QP takes it (rdma_rxe's order): from then on it is
// the QP's, completed (or flushed) on its receive CQ, and the SRQ's ring
// slot is user space's again.
type srq struct {
	n      uint32
	pdn    uint32
	maxSGE int
	slots  uint32
	dma    *guestmem.Stream // the ring's accesses
	refs   int              // QPs attached (the worker's)

	// mu guards the ring and the limit: the receive paths of its QPs take
	// entries under their ibrc QPs' locks, MODIFY_SRQ arms the limit on
	// the worker. Lock order: an ibrc QP's lock, then mu.
	mu     sync.Mutex
	ring   *rxeq.RQ
	limit  uint32 // armed: SRQ_LIMIT once fewer entries are posted; 0 none
	mods   uint32 // MODIFY_SRQ commands run: the arm's number (CREATE_SRQ's is 0)
	broken bool   // the ring could not be read: no more entries
	// limitHit and errHit are events for the worker to post; firedArm
	// is the number of the arm limitHit reports.
	limitHit, errHit atomic.Bool
	firedArm         atomic.Uint32
	badWQEs          *atomic.Uint64
	wake             func()
}

// next is the ibrc.RecvSource of every QP attached: the next posted
// entry, retired at once, its SGL copied out of the ring's scratch before
// another QP's take reuses it.
func (s *srq) next() (ibrc.RecvWR, ibrc.WCStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken || !s.dma.Begin() {
		return ibrc.RecvWR{}, 0, false
	}
	defer s.dma.End()
	w, ok, err := s.ring.Fetch()
	if !ok {
		if err != nil {
			s.fail()
		}
		return ibrc.RecvWR{}, 0, false
	}
	if rerr := s.ring.Retire(); rerr != nil {
		s.fail() // the entry was read whole: it still goes to the QP
	}
	var we *rxeq.WQEError
	if errors.As(err, &we) {
		s.badWQEs.Add(1)
		return ibrc.RecvWR{ID: we.WRID}, we.Status(), true
	}
	w.WR.SGL = append([]ibrc.SGE(nil), w.WR.SGL...)
	if s.limit != 0 && !s.broken {
		switch n, err := s.ring.Posted(); {
		case err != nil:
			s.fail()
		case uint32(n) < s.limit:
			s.limit = 0
			s.firedArm.Store(s.mods)
			s.limitHit.Store(true)
			s.wake()
		}
	}
	return w.WR, ibrc.WCSuccess, true
}

// fail stops the SRQ for good: a ring that cannot be read or written
// gives no more entries (its QPs answer SENDs with RNR NAKs).
func (s *srq) fail() {
	if !s.broken {
		s.broken = true
		s.errHit.Store(true)
		s.wake()
	}
}

func (w *worker) createSRQ(n uint32, b []byte) uint32 {
	if n >= hw.RDMAMaxSRQ || w.srqs[n] != nil {
		return hw.RDMACmdErrHandle
	}
	g, ok := geometry(hw.RDMACreateSRQBuf.Get(b), hw.RDMACreateSRQSlots.Get(b), hw.RDMACreateSRQLog2Elem.Get(b), hw.RDMAMaxQPWR)
	maxSGE, limit := int(hw.RDMACreateSRQMaxSGE.Get(b)), hw.RDMACreateSRQLimit.Get(b)
	if !ok || maxSGE < 1 || maxSGE > hw.RDMAMaxSGE || limit >= g.Slots {
		return hw.RDMACmdErrParam
	}
	s := &srq{n: n, pdn: hw.RDMACreateSRQPD.Get(b), maxSGE: maxSGE, slots: g.Slots, limit: limit,
		badWQEs: &w.e.stats.badWQEs, wake: w.e.wake}
	s.dma = w.e.cfg.Mem.NewStream(streamName("srq", n))
	ring, err := rxeq.NewRQ(s.dma, g, maxSGE)
	if err != nil {
		return hw.RDMACmdErrParam
	}
	s.ring = ring
	s.dma.Own(g.Base, g.Size)
	w.e.addStream(s.dma)
	w.srqs[n] = s
	return hw.RDMACmdOK
}

func (w *worker) modifySRQ(n uint32, b []byte) uint32 {
	if n >= hw.RDMAMaxSRQ || w.srqs[n] == nil {
		return hw.RDMACmdErrHandle
	}
	s := w.srqs[n]
	limit := hw.RDMAModifySRQLimit.Get(b)
	if limit >= s.slots {
		return hw.RDMACmdErrParam
	}
	s.mu.Lock()
	s.limit = limit
	s.mods++
	s.mu.Unlock()
	return hw.RDMACmdOK
}

func (w *worker) destroySRQ(n uint32) uint32 {
	if n >= hw.RDMAMaxSRQ || w.srqs[n] == nil {
		return hw.RDMACmdErrHandle
	}
	s := w.srqs[n]
	if s.refs > 0 {
		return hw.RDMACmdErrBusy
	}
	w.srqs[n] = nil
	w.e.retire(s.dma)
	w.wait(s.dma.Done())
	return hw.RDMACmdOK
}

// srqEvents posts the SRQ events the receive paths left for the worker.
func (w *worker) srqEvents() {
	for _, s := range w.srqs {
		if s == nil {
			continue
		}
		if s.limitHit.Swap(false) {
			w.postEvent(hw.RDMAEventSRQLimit, s.n, s.firedArm.Load())
		}
		if s.errHit.Swap(false) {
			w.e.stats.ringErrors.Add(1)
			w.postEvent(hw.RDMAEventSRQErr, s.n, 0)
		}
	}
}
