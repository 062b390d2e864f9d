package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reclaim on demand, for on-demand paging tests: a process's anonymous
// memory is paged out (process_madvise MADV_PAGEOUT) while a device maps
// it, so the kernel invalidates the device's translations (mmu
// notifiers) and the device faults the pages back in. Anonymous pages
// need swap to be paged out: zram-swap makes a compressed RAM disk the
// swap device.

// swapHeader returns the first page of a Linux swap area (mkswap's
// "SWAPSPACE2" format, version 1) for a device of size bytes.
func swapHeader(size int64) ([]byte, error) {
	const page = 4096
	pages := size / page
	if pages < 10 {
		return nil, fmt.Errorf("swap device of %d bytes: want at least 10 pages", size)
	}
	h := make([]byte, page)
	// union swap_header.info, after 1024 bytes of boot block:
	// version, last_page, nr_badpages, uuid[16], volume_name[16].
	binary.LittleEndian.PutUint32(h[1024:], 1)
	binary.LittleEndian.PutUint32(h[1028:], uint32(pages-1))
	copy(h[page-10:], "SWAPSPACE2")
	return h, nil
}

// zramSwap sizes /dev/zram0 (the zram module must be loaded), writes a
// swap header to it and swaps on it.
func zramSwap(mib uint32) error {
	size := int64(mib) << 20
	if err := os.WriteFile("/sys/block/zram0/disksize", []byte(strconv.FormatInt(size, 10)), 0); err != nil {
		return fmt.Errorf("zram0 disksize (is the zram module loaded?): %w", err)
	}
	h, err := swapHeader(size)
	if err != nil {
		return err
	}
	f, err := os.OpenFile("/dev/zram0", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(h, 0); err != nil {
		f.Close()
		return fmt.Errorf("swap header: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	p, err := unix.BytePtrFromString("/dev/zram0")
	if err != nil {
		return err
	}
	if _, _, e := unix.Syscall(unix.SYS_SWAPON, uintptr(unsafe.Pointer(p)), 0, 0); e != 0 {
		return fmt.Errorf("swapon /dev/zram0: %w", e)
	}
	fmt.Printf("swap on /dev/zram0: %d MiB\n", mib)
	return nil
}

// anonRanges lists the private writable mappings without a file in a
// /proc/PID/maps listing (heap, anonymous mmaps, stacks).
func anonRanges(maps io.Reader) ([][2]uint64, error) {
	var r [][2]uint64
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || len(f[1]) < 4 || f[1][1] != 'w' || f[1][3] != 'p' {
			continue
		}
		if len(f) >= 6 && !strings.HasPrefix(f[5], "[") {
			continue // a file mapping
		}
		if len(f) >= 6 && (f[5] == "[vvar]" || f[5] == "[vdso]" || f[5] == "[vsyscall]") {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("maps line %q", sc.Text())
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || b <= a {
			return nil, fmt.Errorf("maps line %q", sc.Text())
		}
		r = append(r, [2]uint64{a, b})
	}
	return r, sc.Err()
}

// vmstat reads one counter of /proc/vmstat.
func vmstat(name string) uint64 {
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return 0
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if k, v, ok := bytes.Cut(l, []byte(" ")); ok && string(k) == name {
			n, _ := strconv.ParseUint(string(v), 10, 64)
			return n
		}
	}
	return 0
}

// pageout pages out pid's anonymous memory every interval for duration
// (one round if duration is 0), or until the process ends, and reports the
// pages swapped out.
func pageout(pid int, interval, duration time.Duration) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	out0 := vmstat("pswpout")
	rounds := 0
	for start, ended := time.Now(), false; !ended; {
		maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
		if errors.Is(err, fs.ErrNotExist) {
			fmt.Printf("pageout: process %d ended\n", pid)
			break
		}
		if err != nil {
			return err
		}
		ranges, err := anonRanges(maps)
		maps.Close()
		if err != nil {
			return err
		}
		// struct iovec {base, len} of the other process's addresses,
		// which are no pointers of this one.
		iov := make([]uint64, 0, 2*len(ranges))
		for _, r := range ranges {
			iov = append(iov, r[0], r[1]-r[0])
		}
		for len(iov) > 0 {
			n := min(len(iov)/2, 1024) // UIO_MAXIOV
			_, _, e := unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])),
				uintptr(n), unix.MADV_PAGEOUT, 0, 0)
			if e == unix.ESRCH {
				fmt.Printf("pageout: process %d ended\n", pid)
				ended = true
				break
			}
			// EINVAL, ENOMEM: a range unmapped meanwhile; the next round sees it.
			if e != 0 && e != unix.EINVAL && e != unix.ENOMEM {
				return fmt.Errorf("process_madvise MADV_PAGEOUT: %w", e)
			}
			iov = iov[2*n:]
		}
		rounds++
		if duration == 0 || time.Since(start) >= duration {
			break
		}
		if !ended {
			time.Sleep(interval)
		}
	}
	fmt.Printf("pageout: %d rounds, %d pages swapped out\n", rounds, vmstat("pswpout")-out0)
	return nil
}
