package main

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What the ODP churner does to its own address space: fork (with a child
// that watches its copy of the region), munmap part of the region, and
// map fresh memory at the same addresses.

// childJob is everything a forked child touches, prepared by the parent:
// the child of a Go program has one thread and a runtime it must not
// enter (no allocation, no stack growth, no scheduler), so it runs only
// nosplit code over memory that exists before the fork, and raw system
// calls.
type childJob struct {
	// watch: the child snapshots mem into snap (after writing mark into
	// the first word of every page of its copy, when mark != 0), waits
	// for a byte or EOF on pipe, compares and exits 0 if its copy did not
	// change, 1 + the first changed page if it did (at most 250). Without
	// watch it exits 0 at once.
	watch     bool
	mem, snap []byte
	mark      uint64
	pipe      [2]int32 // read end, write end
	buf       [1]byte
}

// run is the child. It never returns.
//
//go:nosplit
//go:norace
func (j *childJob) run() {
	if !j.watch {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(j.pipe[1]), 0, 0)
	if j.mark != 0 {
		for off := 0; off+8 <= len(j.mem); off += odpPage {
			*(*uint64)(unsafe.Pointer(&j.mem[off])) = j.mark
		}
	}
	copy(j.snap, j.mem)
	for {
		_, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(j.pipe[0]), uintptr(unsafe.Pointer(&j.buf[0])), 1)
		if e != syscall.EINTR {
			break
		}
	}
	status := uintptr(0)
	if len(j.snap) == len(j.mem) {
		for i := range j.mem {
			if j.mem[i] != j.snap[i] {
				status = uintptr(1 + min(i/odpPage, 249))
				break
			}
		}
	}
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, status, 0, 0)
}

// forkedChild is a child of forkWatch.
type forkedChild struct {
	pid  int
	pipe int // write end; -1 once told
}

// forkWatch forks the process; the child does j (see childJob). snap
// must be as long as mem, and neither may be in the Go heap's moving
// parts (mappings are fine).
func forkWatch(j *childJob) (*forkedChild, error) {
	if j.watch && len(j.snap) != len(j.mem) {
		return nil, fmt.Errorf("fork: snapshot of %d bytes for %d", len(j.snap), len(j.mem))
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	j.pipe = [2]int32{int32(p[0]), int32(p[1])}
	pid, err := rawFork(j)
	unix.Close(p[0])
	if err != nil {
		unix.Close(p[1])
		return nil, err
	}
	return &forkedChild{pid: pid, pipe: p[1]}, nil
}

// rawFork is fork(2) from a Go program: this thread's signals blocked
// across the clone, so the child starts with every signal blocked and no
// Go signal handler ever runs in it.
func rawFork(j *childJob) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &all, &old); err != nil {
		return 0, fmt.Errorf("fork: block signals: %w", err)
	}
	pid, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if pid == 0 && e == 0 {
		j.run()
	}
	unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	if e != 0 {
		return 0, fmt.Errorf("fork: %w", e)
	}
	return int(pid), nil
}

// wait tells the child to compare (if it watches) and returns its exit
// status.
func (c *forkedChild) wait() (int, error) {
	if c.pipe >= 0 {
		unix.Write(c.pipe, []byte{1})
		unix.Close(c.pipe)
		c.pipe = -1
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(c.pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("wait for child %d: %w", c.pid, err)
		}
		break
	}
	if !ws.Exited() {
		return 0, fmt.Errorf("child %d did not exit: %v", c.pid, ws)
	}
	return ws.ExitStatus(), nil
}

// unmapRange munmaps b (whole pages), leaving the mapping around it.
func unmapRange(b []byte) error {
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0); e != 0 {
		return fmt.Errorf("munmap: %w", e)
	}
	return nil
}

// mapFixed maps fresh anonymous memory at b's addresses, which must be
// unmapped: MAP_FIXED_NOREPLACE, so that whatever the kernel put into the
// hole meanwhile (the rings of a QP created since, the Go runtime's
// memory) is an error, not silently replaced.
func mapFixed(b []byte) error {
	addr := uintptr(unsafe.Pointer(&b[0]))
	r, _, e := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(len(b)), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uintptr(0), 0)
	if e == unix.EEXIST {
		return fmt.Errorf("mmap at %#x: something else is mapped there now", addr)
	}
	if e != 0 {
		return fmt.Errorf("mmap MAP_FIXED_NOREPLACE: %w", e)
	}
	if r != addr {
		return fmt.Errorf("mmap MAP_FIXED at %#x mapped %#x", addr, r)
	}
	return nil
}
