package ethring

import (
	"fmt"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// rxSlot is a posted RX buffer picked for a frame.
type rxSlot struct {
	c      uint32 // free-running counter of the descriptor
	desc   uint64 // guest address of the descriptor
	addr   uint64 // guest address of the buffer
	bufLen int
}

// receive places one frame into the pair's next posted RX buffer. The
// three steps are kept apart because the page-fault work inserts address
// translation (and the backup ring) between picking a descriptor and
// writing the data:
//
//	pick     the next posted descriptor, checked against the frame
//	place    the frame into the buffer (DMA)
//	complete pkt_len and status into the descriptor, then rx_head, then
//	         the interrupt
//
// With hold set, a frame for which no buffer is posted is neither placed
// nor counted: receive returns the instance and noBuf, and the caller
// waits for the driver (Datapath.Receive). Without it the frame is dropped
// and counted in rx_drops_no_buf.
func (p *Pair) receive(frame []byte, hold bool) (in *instance, noBuf bool) {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	in = p.inst.Load()
	if in == nil || !in.mayRun() {
		p.st.rxDropsStopped.Add(1)
		return in, false
	}
	s, ok, noBuf := in.rxPick(len(frame), hold)
	if !ok {
		return in, noBuf
	}
	if !in.rxPlace(s, frame) {
		return in, false
	}
	status := uint16(hw.RxdDone)
	if rxCsumOK(frame) {
		status |= hw.RxdCsumOK
		p.st.rxCsumOK.Add(1)
	}
	in.rxComplete(s, len(frame), status)
	return in, false
}

// rxPick returns the next posted buffer if the frame fits it. A frame
// too big for the buffer is dropped and counted; so is a frame without a
// buffer, unless hold is set: then noBuf is reported and nothing counted.
// Frames are never queued inside the device.
func (in *instance) rxPick(n int, hold bool) (s rxSlot, ok, noBuf bool) {
	p, r := in.p, &in.rx
	head, tail := r.head.Load(), r.tail.Load()
	if head == tail {
		if hold {
			return rxSlot{}, false, true
		}
		p.st.rxDropsNoBuf.Add(1)
		in.publish(hw.QPStatusRxDropsNoBuf, in.rxDropsNoBuf.Add(1))
		return rxSlot{}, false, false
	}
	desc, err := r.dc.get(p.d.mem, r, head, tail)
	if err != nil {
		in.fail(hw.QErrBadRing, head&r.mask, fmt.Errorf("RX descriptor %d: %w", head&r.mask, err))
		return rxSlot{}, false, false
	}
	s = rxSlot{c: head, desc: r.base + uint64(head&r.mask)*descSize,
		addr: hw.RxDescAddr.Get(desc), bufLen: int(hw.RxDescBufLen.Get(desc))}
	if n > s.bufLen || n > hw.MaxFrame {
		p.st.rxDropsTooBig.Add(1)
		in.publish(hw.QPStatusRxDropsTooBig, in.rxDropsTooBig.Add(1))
		return rxSlot{}, false, false
	}
	return s, true, false
}

// rxStalled reports whether a frame steered to this instance must wait:
// it is still the pair's running instance, may run, and has no buffer.
func (in *instance) rxStalled() bool {
	return in.p.inst.Load() == in && in.mayRun() && in.rx.head.Load() == in.rx.tail.Load()
}

// rxStall counts one stall of the wire on this instance.
func (in *instance) rxStall() {
	in.p.st.rxWireStalls.Add(1)
	in.publish(hw.QPStatusRxWireStalls, in.rxWireStalls.Add(1))
}

// rxPlace writes the frame into the slot's buffer.
func (in *instance) rxPlace(s rxSlot, frame []byte) bool {
	if err := dmaWrite(in.p.d.mem, s.addr, frame); err != nil {
		slot := s.c & in.rx.mask
		in.fail(hw.QErrBadDesc, slot, fmt.Errorf("RX descriptor %d buffer %#x+%d: %w", slot, s.addr, len(frame), err))
		return false
	}
	return true
}

// rxComplete hands the buffer back: the descriptor's device fields first,
// then rx_head (the driver reads a descriptor only below rx_head), then the
// interrupt.
func (in *instance) rxComplete(s rxSlot, n int, status uint16) {
	p, r := in.p, &in.rx
	var wb [descSize]byte
	hw.RxDescPktLen.Put(wb[:], uint16(n))
	hw.RxDescStatus.Put(wb[:], status)
	// Only pkt_len, status and rsvd: addr and buf_len belong to the driver.
	off := hw.RxDescPktLen.Offset
	if err := p.d.mem.WriteAt(s.desc+uint64(off), wb[off:]); err != nil {
		slot := s.c & r.mask
		in.fail(hw.QErrBadRing, slot, fmt.Errorf("RX descriptor %d write-back: %w", slot, err))
		return
	}
	head := s.c + 1
	r.head.Store(head)
	p.st.rxFrames.Add(1)
	p.st.rxBytes.Add(uint64(n))
	in.publish(hw.QPStatusRxHead, head)
	p.irq.event()
}
