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
func (p *Pair) receive(frame []byte) {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	in := p.inst.Load()
	if in == nil || !in.mayRun() {
		p.st.rxDropsStopped.Add(1)
		return
	}
	s, ok := in.rxPick(len(frame))
	if !ok {
		return
	}
	if !in.rxPlace(s, frame) {
		return
	}
	in.rxComplete(s, len(frame))
}

// rxPick returns the next posted buffer if the frame fits it. Without a
// buffer, or with one too small, the frame is dropped and counted: frames
// are never queued inside the device.
func (in *instance) rxPick(n int) (rxSlot, bool) {
	p, r := in.p, &in.rx
	head, tail := r.head.Load(), r.tail.Load()
	if head == tail {
		p.st.rxDropsNoBuf.Add(1)
		in.publish(hw.QPStatusRxDropsNoBuf, in.rxDropsNoBuf.Add(1))
		return rxSlot{}, false
	}
	desc, err := r.dc.get(p.d.mem, r, head, tail)
	if err != nil {
		in.fail(hw.QErrBadRing, head&r.mask, fmt.Errorf("RX descriptor %d: %w", head&r.mask, err))
		return rxSlot{}, false
	}
	s := rxSlot{c: head, desc: r.base + uint64(head&r.mask)*descSize,
		addr: hw.RxDescAddr.Get(desc), bufLen: int(hw.RxDescBufLen.Get(desc))}
	if n > s.bufLen || n > hw.MaxFrame {
		p.st.rxDropsTooBig.Add(1)
		in.publish(hw.QPStatusRxDropsTooBig, in.rxDropsTooBig.Add(1))
		return rxSlot{}, false
	}
	return s, true
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
func (in *instance) rxComplete(s rxSlot, n int) {
	p, r := in.p, &in.rx
	var wb [descSize]byte
	hw.RxDescPktLen.Put(wb[:], uint16(n))
	hw.RxDescStatus.Put(wb[:], hw.RxdDone)
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
