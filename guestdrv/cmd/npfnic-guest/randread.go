package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/npfnic/npfnic/internal/blockpat"
)

// randRead is fio's random read job (rw=randread, direct=1, numjobs=JOBS
// per device, iodepth 1, time_based) cut down to what the storage
// experiment needs, with every block checked: JOBS readers per device
// each read BS bytes at a random BS-aligned offset of the whole device
// with O_DIRECT (through no page cache of this guest), and check them
// against blockpat's pattern. The first warm of the run only warms the
// target's cache; the bytes read in the rest (run) are the result. It
// prints one line, "randread bs B jobs J devices D warm_bytes N bytes N
// ms N ios N", and fails on the first block that is not the pattern.
// (fio is not in the images: bookworm's links librbd, librados and
// glusterfs; see images.GuestPackages.)
func randRead(bs, jobs int, warm, run time.Duration, devs []string, out io.Writer) error {
	if bs < 4096 || bs%4096 != 0 || bs > 64<<20 || jobs < 1 || jobs > 64 || run <= 0 || len(devs) == 0 {
		return fmt.Errorf("randread: block %d (4 KiB to 64 MiB, a multiple of 4 KiB), %d jobs (1-64), %v, %d devices", bs, jobs, run, len(devs))
	}
	type job struct {
		f      *os.File
		blocks int64
	}
	var js []job
	for _, d := range devs {
		for range jobs {
			f, err := os.OpenFile(d, os.O_RDONLY|syscall.O_DIRECT, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			size, err := f.Seek(0, io.SeekEnd)
			if err != nil {
				return err
			}
			if size < int64(bs) {
				return fmt.Errorf("randread: %s has %d bytes, less than a block of %d", d, size, bs)
			}
			js = append(js, job{f, size / int64(bs)})
		}
	}
	start := time.Now()
	measure, end := start.Add(warm), start.Add(warm+run)
	var mu sync.Mutex
	var warmBytes, bytes, ios int64
	var firstErr error
	var wg sync.WaitGroup
	for i, j := range js {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// O_DIRECT wants an aligned buffer: a mapping is page-aligned.
			buf, err := syscall.Mmap(-1, 0, bs, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
			if err == nil {
				defer syscall.Munmap(buf)
			}
			r := rand.New(rand.NewPCG(uint64(i)+1, uint64(start.UnixNano())))
			for err == nil {
				now := time.Now()
				if now.After(end) {
					break
				}
				off := r.Int64N(j.blocks) * int64(bs)
				var n int
				if n, err = j.f.ReadAt(buf, off); err == nil && n != bs {
					err = fmt.Errorf("short read: %d of %d bytes", n, bs)
				}
				if err == nil {
					err = blockpat.Check(buf, off)
				}
				if err != nil {
					err = fmt.Errorf("%s at %d: %w", j.f.Name(), off, err)
					break
				}
				mu.Lock()
				if now.Before(measure) {
					warmBytes += int64(bs)
				} else {
					bytes += int64(bs)
					ios++
				}
				mu.Unlock()
			}
			mu.Lock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	ms := time.Since(measure).Milliseconds()
	fmt.Fprintf(out, "randread bs %d jobs %d devices %d warm_bytes %d bytes %d ms %d ios %d\n", bs, jobs, len(devs), warmBytes, bytes, ms, ios)
	return nil
}

// fillPattern writes mib MiB of blockpat's pattern to file (a RAM disk).
func fillPattern(file string, mib int) error {
	if mib < 1 {
		return errors.New("fill-pattern: want 1 MiB or more")
	}
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := blockpat.Write(f, int64(mib)<<20); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
