package ethring

import (
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// descSize is the size of TX and RX descriptors alike; the array below
// fails to compile if the layouts in hw ever differ.
const descSize = hw.TxDescSize

var _ [hw.TxDescSize - hw.RxDescSize]struct{}
var _ [hw.RxDescSize - hw.TxDescSize]struct{}

// pageSize is the granule of guest memory accesses: guestmem regions are
// whole pages, so an access split at page boundaries never crosses a region
// even when a buffer spans two adjacent mappings. It is also the
// translation granule (ats splits translated buffers the same way).
const pageSize = 4096

// dmaRead copies guest memory at iova into p, page by page, through an
// engine's stream (the caller holds a unit of it).
func dmaRead(m *guestmem.Stream, iova uint64, p []byte) error {
	for len(p) > 0 {
		n := min(uint64(len(p)), pageSize-iova%pageSize)
		if err := m.ReadAt(iova, p[:n]); err != nil {
			return err
		}
		iova += n
		p = p[n:]
	}
	return nil
}

// dmaWrite copies p into guest memory at iova, page by page.
func dmaWrite(m *guestmem.Stream, iova uint64, p []byte) error {
	for len(p) > 0 {
		n := min(uint64(len(p)), pageSize-iova%pageSize)
		if err := m.WriteAt(iova, p[:n]); err != nil {
			return err
		}
		iova += n
		p = p[n:]
	}
	return nil
}

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
	n := min(uint64(tail-c), uint64(r.size-slot), (pageSize-addr%pageSize)/descSize, descCacheLen)
	dc.n = 0
	if err := m.ReadAt(addr, dc.buf[:n*descSize]); err != nil {
		return nil, err
	}
	dc.start, dc.n = c, uint32(n)
	return dc.buf[:descSize], nil
}
