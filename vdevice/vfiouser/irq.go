package vfiouser

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Interrupt delivery never blocks. The eventfds belong to the client, which
// may stop reading them (an eventfd at its maximum count blocks a writer) or
// hand over something else entirely (a pipe nobody reads). A trigger runs
// under st.mu on the connection goroutine or a device goroutine, so one
// blocked write would wedge the whole server. Therefore:
//   - SET_IRQS accepts eventfds only, and switches each to O_NONBLOCK
//     (QEMU creates them non-blocking anyway, so it sees no change);
//   - every write is preceded by a zero-timeout poll, so a client that
//     clears O_NONBLOCK again cannot make it block either (short of racing
//     its own writes between those two syscalls);
//   - EAGAIN means the counter is at its maximum: the interrupt is already
//     signalled, and the trigger is counted in saturated, not retried.

// irqLine is the state of one interrupt (one sub-index of one IRQ index).
type irqLine struct {
	fd      int // eventfd from the client, -1 when unassigned
	masked  bool
	pending bool
}

// irqState holds every interrupt's eventfd, mask and pending bit. Request
// handling mutates it; device goroutines trigger through it.
type irqState struct {
	mu    sync.Mutex
	info  []IRQ
	lines [][]irqLine
	// saturated counts triggers dropped because the eventfd was already at
	// its maximum count (the client is not reading it).
	saturated atomic.Uint64
}

var eventfdOne = [8]byte{1}

func newIRQState(info []IRQ) *irqState {
	st := &irqState{info: info, lines: make([][]irqLine, len(info))}
	for i, in := range info {
		st.lines[i] = make([]irqLine, in.Count)
		for j := range st.lines[i] {
			st.lines[i][j].fd = -1
		}
	}
	return st
}

// fire delivers one interrupt. Caller holds st.mu.
func (st *irqState) fire(index, sub int) error {
	l := &st.lines[index][sub]
	if l.fd < 0 || l.masked {
		l.pending = true
		return nil
	}
	l.pending = false
	if st.info[index].Flags&IRQInfoAutomasked != 0 {
		l.masked = true
	}
	if err := signalNonblocking(l.fd); err != nil {
		if err == unix.EAGAIN {
			st.saturated.Add(1)
			return nil
		}
		return fmt.Errorf("vdevice: signal IRQ %d/%d: %w", index, sub, err)
	}
	return nil
}

// signalNonblocking adds 1 to an eventfd without ever waiting; EAGAIN means
// the counter is at its maximum (already signalled).
func signalNonblocking(fd int) error {
	pfd := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	for {
		n, err := unix.Poll(pfd[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 || pfd[0].Revents&unix.POLLOUT == 0 {
			return unix.EAGAIN
		}
		break
	}
	for {
		_, err := unix.Write(fd, eventfdOne[:])
		if err != unix.EINTR {
			return err
		}
	}
}

// adoptEventfd checks that fd is an eventfd and makes writes to it
// non-blocking. Anything else (a pipe, a socket, a file) is refused: only
// an eventfd's write is bounded by a counter the server can reason about.
func adoptEventfd(fd int) error {
	// eventfds live on the anonymous inode, whose link names the kind.
	var buf [64]byte
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf[:])
	if err != nil {
		return err
	}
	if string(buf[:n]) != "anon_inode:[eventfd]" {
		return fmt.Errorf("vdevice: IRQ descriptor is %q, not an eventfd: %w", buf[:n], unix.EINVAL)
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if flags&unix.O_NONBLOCK == 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags|unix.O_NONBLOCK); err != nil {
			return err
		}
	}
	return nil
}

func (st *irqState) anyFD(index int) bool {
	if index >= len(st.lines) {
		return false
	}
	for i := range st.lines[index] {
		if st.lines[index][i].fd >= 0 {
			return true
		}
	}
	return false
}

// Trigger implements Interrupts.
func (st *irqState) Trigger(vector int) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.anyFD(IRQMSIX):
		return st.fireChecked(IRQMSIX, vector)
	case st.anyFD(IRQMSI):
		return st.fireChecked(IRQMSI, vector)
	case st.anyFD(IRQIntx):
		return st.fireChecked(IRQIntx, 0)
	case IRQMSIX < len(st.lines) && vector >= 0 && vector < len(st.lines[IRQMSIX]):
		// Nothing assigned yet: remember it where MSI-X will pick it up.
		st.lines[IRQMSIX][vector].pending = true
		return nil
	}
	return st.fireChecked(IRQIntx, 0)
}

func (st *irqState) fireChecked(index, sub int) error {
	if index < 0 || index >= len(st.lines) || sub < 0 || sub >= len(st.lines[index]) {
		return fmt.Errorf("vdevice: no interrupt %d/%d", index, sub)
	}
	return st.fire(index, sub)
}

// TriggerIndex implements Interrupts.
func (st *irqState) TriggerIndex(index, sub int) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.fireChecked(index, sub)
}

// Pending implements Interrupts.
func (st *irqState) Pending(index, sub int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if index < 0 || index >= len(st.lines) || sub < 0 || sub >= len(st.lines[index]) {
		return false
	}
	return st.lines[index][sub].pending
}

// set applies one SET_IRQS request. On success it owns fds; on error the
// caller closes them.
func (st *irqState) set(m IRQSet, fds []int) error {
	data := m.Flags & irqSetDataMask
	action := m.Flags & irqSetActionMask
	if m.Flags&^(irqSetDataMask|irqSetActionMask) != 0 || !oneBit(data) || !oneBit(action) {
		return unix.EINVAL
	}
	if m.Index >= uint32(len(st.info)) {
		return unix.EINVAL
	}
	info := st.info[m.Index]
	if uint64(m.Start)+uint64(m.Count) > uint64(info.Count) {
		return unix.EINVAL
	}
	if data != IRQSetDataEventfd && len(fds) != 0 {
		return unix.EINVAL
	}
	if m.Count == 0 && data != IRQSetDataNone {
		return unix.EINVAL
	}
	for _, fd := range fds {
		if err := adoptEventfd(fd); err != nil {
			return err
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	lines := st.lines[m.Index]
	sel := func(i uint32) bool { return data != IRQSetDataBool || m.Data[i] != 0 }

	switch action {
	case IRQSetActionTrigger:
		switch data {
		case IRQSetDataEventfd:
			if len(fds) != 0 && uint32(len(fds)) != m.Count {
				return unix.EINVAL
			}
			for i := uint32(0); i < m.Count; i++ {
				l := &lines[m.Start+i]
				if l.fd >= 0 {
					unix.Close(l.fd)
					l.fd = -1
				}
				if len(fds) == 0 {
					continue // de-assign
				}
				l.fd = fds[i]
				if l.pending && !l.masked {
					// The fds are ours now; a failed signal must not make
					// the caller close them again.
					_ = st.fire(int(m.Index), int(m.Start+i))
				}
			}
		case IRQSetDataNone, IRQSetDataBool:
			if m.Count == 0 { // disable the whole index
				for i := range lines {
					if lines[i].fd >= 0 {
						unix.Close(lines[i].fd)
					}
					lines[i] = irqLine{fd: -1}
				}
				return nil
			}
			for i := uint32(0); i < m.Count; i++ {
				if sel(i) {
					if err := st.fire(int(m.Index), int(m.Start+i)); err != nil {
						return err
					}
				}
			}
		}
	case IRQSetActionMask, IRQSetActionUnmask:
		if data == IRQSetDataEventfd {
			return unix.ENOTSUP // mask/unmask notification eventfds
		}
		if info.Flags&IRQInfoMaskable == 0 {
			return unix.EINVAL
		}
		for i := uint32(0); i < m.Count; i++ {
			if !sel(i) {
				continue
			}
			l := &lines[m.Start+i]
			if action == IRQSetActionMask {
				l.masked = true
				continue
			}
			l.masked = false
			if l.pending {
				if err := st.fire(int(m.Index), int(m.Start+i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func oneBit(v uint32) bool { return v != 0 && v&(v-1) == 0 }

// closeAll drops every eventfd the client gave us (disconnect). Pending bits
// are device state and survive.
func (st *irqState) closeAll() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range st.lines {
		for j := range st.lines[i] {
			l := &st.lines[i][j]
			if l.fd >= 0 {
				unix.Close(l.fd)
			}
			l.fd = -1
			l.masked = false
		}
	}
}

// reset clears pending and mask state on DEVICE_RESET; eventfds stay, as
// with a VFIO device reset.
func (st *irqState) reset() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range st.lines {
		for j := range st.lines[i] {
			st.lines[i][j].pending = false
			st.lines[i][j].masked = false
		}
	}
}
