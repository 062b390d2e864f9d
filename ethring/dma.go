package ethring

import (
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// descSize is the size of TX and RX descriptors alike; the array below
// fails to compile if the layouts in hw ever differ.
const descSize = hw.TxDescSize

var _ [hw.TxDescSize - hw.RxDescSize]struct{}
var _ [hw.RxDescSize - hw.TxDescSize]struct{}

// descCacheLen is how many descriptors one ring read fetches at most.
const descCacheLen = 32

// descCache holds descriptors read ahead in one guest memory access. It is
// keyed by the free-running ring counter, not the slot: it only ever holds
// descriptors the driver posted (below the tail at the time of the read),
// which the driver may not rewrite until the device consumed them, so an
// entry stays valid until the head passes it, even across ring wraps.
type descCache struct {
	buf   [descCacheLen * descSize]byte
	start uint32 // counter of the first cached descriptor
	n     uint32
}

// get returns the descriptor at counter c (which must be below
// tail), reading ahead up to the tail, the ring's end, a page boundary or
// descCacheLen descriptors, whichever comes first.
func (dc *descCache) get(m *guestmem.Stream, r *ring, c, tail uint32) ([]byte, error) {
	if c-dc.start < dc.n {
		off := (c - dc.start) * descSize
		return dc.buf[off : off+descSize], nil
	}
	slot := c & r.mask
	addr := r.base + uint64(slot)*descSize
	n := min(uint64(tail-c), uint64(r.size-slot), (guestmem.PageSize-addr%guestmem.PageSize)/descSize, descCacheLen)
	dc.n = 0
	if err := m.ReadAt(addr, dc.buf[:n*descSize]); err != nil {
		return nil, err
	}
	dc.start, dc.n = c, uint32(n)
	r.trace.Emit(trace.DescFetch, r.track, uint64(c), n)
	return dc.buf[:descSize], nil
}
