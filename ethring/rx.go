package ethring

import (
	"fmt"

	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/pkthdr"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// rxSlot is a posted RX buffer picked for a frame.
type rxSlot struct {
	c      uint32 // free-running counter of the descriptor
	desc   uint64 // guest address of the descriptor
	addr   uint64 // guest address of the buffer
	bufLen int
}

// receive places one frame, whose headers h describes (Receive parses
// them once), into the pair's next posted RX buffer. The steps are kept
// apart because address translation (and the backup ring) sit between
// picking a descriptor and completing it:
//
//	pick      the descriptor at head+head_offset, checked against the frame
//	place     the frame into the buffer (translated DMA); a translation
//	          fault goes to the pair's RX policy (fault.go)
//	complete  pkt_len and status into the descriptor, then rx_head (unless
//	          rNPFs are pending), then the interrupt
//
// With hold set, a frame for which no buffer is posted is neither placed
// nor counted: receive returns the instance and noBuf, and the caller
// waits for the driver (Engine.Receive). Without it the frame is dropped
// and counted in rx_drops_no_buf. Under the backup policy with rNPFs
// pending, the driver has not been told about the frames since the oldest
// one and so can not post more buffers: a frame without a buffer then goes
// to the backup ring instead (Figure 6).
func (p *Pair) receive(frame []byte, h *pkthdr.Headers, hold bool) (in *instance, noBuf bool) {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	in = p.inst.Load()
	if in == nil || !in.mayRun() || !in.dma.Begin() {
		p.st.rxDropsStopped.Add(1)
		return in, false
	}
	// One unit for the whole frame: descriptor fetch, buffer DMA (also
	// translated), write-back, the backup store and the interrupt.
	defer in.dma.End()
	s, ok, noBuf := in.rxPick(frame, h, hold)
	if !ok {
		return in, noBuf
	}
	if err := in.bufDMA(s.addr, frame, true); err != nil {
		if f := asFault(err); f != nil {
			in.rxFault(s, frame, h, f, clock.Nanotime())
			return in, false
		}
		slot := s.c & in.rx.mask
		in.fail(hw.QErrBadDesc, slot, fmt.Errorf("RX descriptor %d buffer %#x+%d: %w", slot, s.addr, len(frame), err))
		return in, false
	}
	status := uint16(hw.RxdDone)
	if rxCsumOK(frame, h) {
		status |= hw.RxdCsumOK
		p.st.rxCsumOK.Add(1)
	}
	in.finishRx(s.c)
	in.rxComplete(s, len(frame), status)
	return in, false
}

// rxPick returns the descriptor at head+head_offset if it is posted and
// the frame fits its buffer. A frame too big for the buffer is dropped and
// counted; so is a frame without a buffer, unless hold is set (noBuf is
// then reported and nothing counted) or the backup policy takes it.
// Frames are never queued inside the device. Caller holds rxMu.
func (in *instance) rxPick(frame []byte, h *pkthdr.Headers, hold bool) (s rxSlot, ok, noBuf bool) {
	p, r := in.p, &in.rx
	c, tail := r.head.Load()+in.headOffset, r.tail.Load()
	if int32(tail-c) <= 0 && in.rxRefill(func(t uint32) bool { return int32(t-c) > 0 }) {
		tail = r.tail.Load()
	}
	if int32(tail-c) <= 0 {
		switch {
		case in.headOffset > 0 && in.policy == hw.RxPolicyBackup:
			in.rxToBackup(frame, h, c, nil, 0)
		case hold:
			return rxSlot{}, false, true
		default:
			p.st.rxDropsNoBuf.Add(1)
			in.count(hw.PairStatusRxDropsNoBuf, &in.rxDropsNoBuf)
			p.d.trace.Emit(trace.RxDrop, trace.PairRx(p.q), uint64(c), trace.DropNoBuffer)
		}
		return rxSlot{}, false, false
	}
	desc, err := r.dc.get(in.dma, r, c, tail)
	if err != nil {
		in.fail(hw.QErrBadRing, c&r.mask, fmt.Errorf("RX descriptor %d: %w", c&r.mask, err))
		return rxSlot{}, false, false
	}
	in.rxUnkick()
	s = rxSlot{c: c, desc: r.base + uint64(c&r.mask)*descSize,
		addr: hw.RxDescAddr.Get(desc), bufLen: int(hw.RxDescBufLen.Get(desc))}
	if n := len(frame); n > s.bufLen || n > hw.MaxFrame {
		p.st.rxDropsTooBig.Add(1)
		in.count(hw.PairStatusRxDropsTooBig, &in.rxDropsTooBig)
		p.d.trace.Emit(trace.RxDrop, trace.PairRx(p.q), uint64(c), trace.DropTooBig)
		return rxSlot{}, false, false
	}
	return s, true, false
}

// rxStalled reports whether a frame steered to this instance must wait:
// it is still the pair's running instance, may run, and has no buffer at
// head with no rNPF pending.
func (in *instance) rxStalled() bool {
	return in.p.inst.Load() == in && in.mayRun() && in.headOffsetA.Load() == 0 &&
		in.rx.head.Load() == in.rx.tail.Load()
}

// rxStall counts one stall of the wire on this instance.
func (in *instance) rxStall() {
	in.p.st.rxWireStalls.Add(1)
	in.count(hw.PairStatusRxWireStalls, &in.rxWireStalls)
}

// rxComplete hands the buffer back: the descriptor's device fields first,
// then rx_head (the driver reads a descriptor only below rx_head), then the
// interrupt. With rNPFs pending the head stays on the oldest one and only
// head_offset moves (Figure 6); resolve moves the head later. Caller holds
// rxMu.
func (in *instance) rxComplete(s rxSlot, n int, status uint16) {
	p, r := in.p, &in.rx
	var wb [descSize]byte
	hw.RxDescPktLen.Put(wb[:], uint16(n))
	hw.RxDescStatus.Put(wb[:], status)
	// Only pkt_len, status and rsvd: addr and buf_len belong to the driver.
	off := hw.RxDescPktLen.Offset
	if err := in.dma.WriteAt(s.desc+uint64(off), wb[off:]); err != nil {
		slot := s.c & r.mask
		in.fail(hw.QErrBadRing, slot, fmt.Errorf("RX descriptor %d write-back: %w", slot, err))
		return
	}
	if n > 0 {
		p.st.rxFrames.Add(1)
		p.st.rxBytes.Add(uint64(n))
		p.d.trace.Emit(trace.RxFrame, trace.PairRx(p.q), uint64(s.c), uint64(n))
	}
	if in.headOffset > 0 {
		in.setHeadOffset(in.headOffset + 1)
		return
	}
	head := s.c + 1
	r.head.Store(head)
	in.publish(hw.PairStatusRxHead, head)
	p.irq.event()
}
