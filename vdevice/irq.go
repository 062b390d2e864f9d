package vdevice

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

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
	// An eventfd only refuses a write when its counter would overflow, in
	// which case the interrupt is already signalled.
	if _, err := unix.Write(l.fd, eventfdOne[:]); err != nil && err != unix.EAGAIN {
		return fmt.Errorf("vdevice: signal IRQ %d/%d: %w", index, sub, err)
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
