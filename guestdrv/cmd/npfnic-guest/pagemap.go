package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// /proc/PID/pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pagemapPresent = 1 << 63
	pagemapSwapped = 1 << 62
	pagemapPFNMask = 1<<55 - 1
)

// decodePagemap returns the page frame number of a pagemap entry.
func decodePagemap(entry uint64) (uint64, error) {
	if entry&pagemapPresent == 0 {
		if entry&pagemapSwapped != 0 {
			return 0, errors.New("page is swapped out")
		}
		return 0, errors.New("page not present")
	}
	pfn := entry & pagemapPFNMask
	if pfn == 0 {
		// The kernel hides PFNs from processes without CAP_SYS_ADMIN.
		return 0, errors.New("pagemap hides the frame number (run as root)")
	}
	return pfn, nil
}

// physAddr translates a virtual address given its page's pagemap entry.
func physAddr(entry, va uint64, pageSize uint64) (uint64, error) {
	pfn, err := decodePagemap(entry)
	if err != nil {
		return 0, err
	}
	return pfn*pageSize + va%pageSize, nil
}

// contiguous checks that the frames follow each other, so one DMA address
// covers the whole buffer.
func contiguous(pfns []uint64) error {
	for i := 1; i < len(pfns); i++ {
		if pfns[i] != pfns[0]+uint64(i) {
			return fmt.Errorf("page %d is at frame %#x, not %#x: buffer not physically contiguous (use LEN <= page size)", i, pfns[i], pfns[0]+uint64(i))
		}
	}
	return nil
}

// allocDMABuffer maps, faults in and locks a page-aligned buffer of at least
// n bytes and returns it with its guest-physical address.
func allocDMABuffer(n int) ([]byte, uint64, error) {
	page := os.Getpagesize()
	size := (n + page - 1) / page * page
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, 0, fmt.Errorf("mmap buffer: %w", err)
	}
	if err := unix.Mlock(buf); err != nil {
		unix.Munmap(buf)
		return nil, 0, fmt.Errorf("mlock buffer: %w", err)
	}
	for i := 0; i < size; i += page {
		buf[i] = 0 // own each page: no shared zero page
	}
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		unix.Munmap(buf)
		return nil, 0, err
	}
	defer pm.Close()
	va := uint64(uintptr(unsafe.Pointer(&buf[0])))
	pfns := make([]uint64, size/page)
	var first uint64
	for i := range pfns {
		var e [8]byte
		v := va + uint64(i*page)
		if _, err := pm.ReadAt(e[:], int64(v/uint64(page))*8); err != nil {
			unix.Munmap(buf)
			return nil, 0, fmt.Errorf("read pagemap: %w", err)
		}
		entry := binary.LittleEndian.Uint64(e[:])
		if pfns[i], err = decodePagemap(entry); err != nil {
			unix.Munmap(buf)
			return nil, 0, err
		}
		if i == 0 {
			first, _ = physAddr(entry, v, uint64(page))
		}
	}
	if err := contiguous(pfns); err != nil {
		unix.Munmap(buf)
		return nil, 0, err
	}
	return buf, first, nil
}

func unixMunmap(b []byte) { unix.Munmap(b) }
