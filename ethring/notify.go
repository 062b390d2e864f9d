package ethring

import (
	"fmt"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// Notification in memory (interface 2.14, hw.NotifyDoc). Under QEMU each
// register write costs the guest's vCPU a message to this server; with a
// notify area the driver stores its RX tail and its interrupt arm in
// memory, and the device reads them when it needs to: when it runs out of
// RX buffers, and when a completion wants an interrupt the vector is not
// armed for. The device asks for a doorbell (rx_kick) only when it is
// about to wait for buffers.

// notifyArea is an instance's notify area, latched at enable.
type notifyArea struct {
	addr uint64 // 0: none
	// kicked: rx_kick is 1 in guest memory. Under the pair's rxMu.
	kicked bool
	// armSeen is the irq_arm value last taken as an arm. Under the
	// pair's moderator lock (only pollArm reads and writes it).
	armSeen uint32
}

// latchNotify takes the pair's notify address at enable. The backup
// policy keeps its doorbells: its RX tail events hang on them.
func (in *instance) latchNotify(addr uint64) {
	if addr != 0 && in.policy != hw.RxPolicyBackup {
		in.notify.addr = addr
		in.dma.Own(addr, hw.PairNotifySize)
	}
}

// checkNotify is run's check at enable: the area is aligned and the device
// can read and write it (a fenced load is a locked read-modify-write).
// It stores nothing: the driver zeroed the area, and the RX path may
// already have set rx_kick. Caller holds a unit of in.dma.
func (in *instance) checkNotify() error {
	a := in.notify.addr
	if a == 0 {
		return nil
	}
	if a%hw.PairNotifyAlign != 0 || a+hw.PairNotifySize < a {
		return fmt.Errorf("not %d-byte aligned", hw.PairNotifyAlign)
	}
	for _, f := range []hw.Le32{hw.PairNotifyRxTail, hw.PairNotifyRxKick} {
		if _, err := in.dma.LoadU32Fenced(a + uint64(f.Offset)); err != nil {
			return err
		}
	}
	return nil
}

// failNotify stops the pair on a notify area the device can not use.
func (in *instance) failNotify(err error) {
	in.fail(hw.QErrBadNotify, 0, fmt.Errorf("notify area %#x: %w", in.notify.addr, err))
}

// moveTail moves ring r's tail forward to tail, checked against the
// head as a doorbell is: it may neither move backwards nor post more than
// SIZE entries beyond the head (NPFNIC_QERR_BAD_TAIL). With a notify area
// the RX tail has two writers, the driver's doorbell and the device's
// read of rx_tail, and a posted doorbell may arrive after the device read
// a newer rx_tail: a tail behind the current one, but not behind the
// head, is then stale and ignored. It reports whether the tail is valid.
func (in *instance) moveTail(r *ring, tail uint32) bool {
	stale := r == &in.rx && in.notify.addr != 0
	for {
		head, old := r.head.Load(), r.tail.Load()
		posted := tail - head
		if stale && posted <= r.size && int32(tail-old) < 0 {
			return true
		}
		if posted > r.size || posted < old-head {
			in.fail(hw.QErrBadTail, tail, fmt.Errorf("tail %d with head %d, previous tail %d, size %d", tail, head, old, r.size))
			return false
		}
		if r.tail.CompareAndSwap(old, tail) {
			return true
		}
	}
}

// pullRxTail takes rx_tail from the notify area. Caller holds rxMu and a
// unit of in.dma; false: the pair failed.
func (in *instance) pullRxTail() bool {
	v, err := in.dma.LoadU32Fenced(in.notify.addr + uint64(hw.PairNotifyRxTail.Offset))
	if err != nil {
		in.failNotify(err)
		return false
	}
	return in.moveTail(&in.rx, v)
}

// rxRefill is called when fewer RX buffers are posted than a frame needs
// (enough tells): it reads rx_tail, and if that is not enough, sets
// rx_kick and reads rx_tail once more, so that either the device sees the
// driver's new tail or the driver sees rx_kick and rings RX_TAIL. It
// reports whether there are enough buffers now. Caller holds rxMu and a
// unit of in.dma.
func (in *instance) rxRefill(enough func(tail uint32) bool) bool {
	if in.notify.addr == 0 || !in.pullRxTail() {
		return false
	}
	if enough(in.rx.tail.Load()) {
		in.rxUnkick()
		return true
	}
	if !in.notify.kicked {
		if err := in.dma.StoreU32Fenced(in.notify.addr+uint64(hw.PairNotifyRxKick.Offset), 1); err != nil {
			in.failNotify(err)
			return false
		}
		in.notify.kicked = true
	}
	if !in.pullRxTail() || !enough(in.rx.tail.Load()) {
		return false
	}
	in.rxUnkick()
	return true
}

// rxUnkick clears rx_kick once the device has buffers again. Caller holds
// rxMu and a unit of in.dma.
func (in *instance) rxUnkick() {
	if !in.notify.kicked {
		return
	}
	if err := in.dma.StoreU32Fenced(in.notify.addr+uint64(hw.PairNotifyRxKick.Offset), 0); err != nil {
		in.failNotify(err)
		return
	}
	in.notify.kicked = false
}

// pollArm is the moderator's look at irq_arm: whether the driver stored
// a new count since the last one taken. The fenced load orders it after
// the status block write of the completion that asks, as the driver
// orders its look at the status block after its store of irq_arm.
// Called under the moderator's lock.
func (p *Pair) pollArm() bool {
	in := p.inst.Load()
	if in == nil || in.notify.addr == 0 || !in.dma.Begin() {
		return false
	}
	v, err := in.dma.LoadU32Fenced(in.notify.addr + uint64(hw.PairNotifyIRQArm.Offset))
	in.dma.End()
	if err != nil {
		in.failNotify(err)
		return false
	}
	if v == in.notify.armSeen {
		return false
	}
	in.notify.armSeen = v
	return true
}
