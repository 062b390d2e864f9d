package guestmem

// PageSize is the granule of guest memory mappings: a vfio-user client
// announces DMA regions in whole pages of the IOMMU's smallest page (4 KiB
// on every platform QEMU emulates npfnic on), so a piece of an access that
// stays inside one page also stays inside one region, even when a buffer
// spans two adjacent mappings. Engines split their buffers at it with
// SplitPages, ReadPages or WritePages.
//
// It is guestmem's own constant, not hw.XlatPageSize: this layer serves
// any device's DMA and must not depend on npfnic's register contract. The
// engines that need both to agree (ats, whose segments are the translated
// pages) assert it at compile time.
const PageSize = 1 << 12

// SplitPages calls fn for each piece of [iova, iova+n) that lies inside one
// page, in address order: at is the piece's address, off its offset from
// iova and l its length. It stops at fn's first error and returns it.
//
// A negative n, or a range that wraps past 2^64, fails with a *FaultError
// (FaultOverflow, Write false since SplitPages does not know what fn does)
// before fn is called; n == 0 calls fn never. fn does not escape, so a
// closure passed here stays on the caller's stack.
func SplitPages(iova uint64, n int, fn func(at uint64, off, l int) error) error {
	return splitPages(iova, n, false, fn)
}

// ReadPages reads len(p) bytes at iova into p, one ReadAt per page (see
// PageSize): unlike ReadAt, the buffer may span adjacent mappings.
func (s *Stream) ReadPages(iova uint64, p []byte) error {
	if inOnePage(iova, len(p)) {
		return s.ReadAt(iova, p)
	}
	return splitPages(iova, len(p), false, func(at uint64, off, l int) error {
		return s.ReadAt(at, p[off:off+l])
	})
}

// WritePages writes p at iova, one WriteAt per page (see ReadPages).
func (s *Stream) WritePages(iova uint64, p []byte) error {
	if inOnePage(iova, len(p)) {
		return s.WriteAt(iova, p)
	}
	return splitPages(iova, len(p), true, func(at uint64, off, l int) error {
		return s.WriteAt(at, p[off:off+l])
	})
}

// inOnePage reports whether n bytes at iova stay inside one page: most
// frames and descriptors do, and then ReadPages and WritePages skip the
// split (a call through a closure, about 3 ns). A piece ending exactly at
// 2^64 passes here and fails in the access's own overflow check.
func inOnePage(iova uint64, n int) bool { return uint(n) <= PageSize-uint(iova%PageSize) }

// splitPages is SplitPages with the direction its overflow error reports.
// The whole range is checked before any piece is touched, so an access that
// would wrap moves no byte. ^iova is the room between iova and 2^64-1, the
// highest end any guestmem access may have; comparing with it cannot wrap.
func splitPages(iova uint64, n int, write bool, fn func(at uint64, off, l int) error) error {
	if n < 0 || uint64(n) > ^iova {
		return &FaultError{IOVA: iova, Len: n, Write: write, Reason: FaultOverflow}
	}
	for off := 0; off < n; {
		at := iova + uint64(off)
		l := min(n-off, PageSize-int(at%PageSize))
		if err := fn(at, off, l); err != nil {
			return err
		}
		off += l
	}
	return nil
}
