package ethring

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// notifyWord is the guest's view of one word of a notify area, accessed
// as the driver does (WRITE_ONCE/READ_ONCE of an aligned le32).
func (g *guest) notifyWord(area uint64, f hw.Le32) *uint32 {
	return (*uint32)(unsafe.Pointer(&g.bytes(area+uint64(f.Offset), 4)[0]))
}

// setupNotifyPair is setupPair with a zeroed notify area at area (one
// is allocated if area is 0), latched at enable; it returns the area.
func (g *guest) setupNotifyPair(q int, txSize, rxSize uint32, area uint64) uint64 {
	if area == 0 {
		area = g.alloc(hw.PairNotifySize, hw.PairNotifyAlign)
	}
	g.qpReg(q, hw.PairNotifyLo, uint32(area))
	g.qpReg(q, hw.PairNotifyHi, uint32(area>>32))
	g.setupPair(q, txSize, rxSize)
	return area
}

// postRXNotify posts n buffers as postRX does, but stores the tail in the
// notify area and rings RX_TAIL only if the device asks (rx_kick); it
// reports whether it rang.
func (g *guest) postRXNotify(q int, area uint64, n int, bufLen uint16) bool {
	g.writeRxDescs(q, n, bufLen)
	gp := &g.pairs[q]
	atomic.StoreUint32(g.notifyWord(area, hw.PairNotifyRxTail), gp.rxTail) // a full barrier on x86
	if atomic.LoadUint32(g.notifyWord(area, hw.PairNotifyRxKick)) == 0 {
		return false
	}
	g.qpReg(q, hw.PairRxTail, gp.rxTail)
	return true
}

func TestNotifyRxTail(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1, dropNoBuf: true})
	area := g.setupNotifyPair(0, 8, 8, 0)
	kick := func() uint32 { return atomic.LoadUint32(g.notifyWord(area, hw.PairNotifyRxKick)) }
	recv := func(seed uint16) { g.d.Receive(frame(100, seed)) }

	if g.postRXNotify(0, area, 3, bufSize) {
		t.Fatal("rang RX_TAIL with rx_kick 0 at enable")
	}
	for i := range 3 {
		recv(uint16(i))
	}
	if st := g.qstatus(0); st.RxHead != 3 || st.RxDropsNoBuf != 0 || kick() != 0 {
		t.Fatalf("3 frames into 3 buffers posted in memory only: %v, rx_kick %d", st, kick())
	}
	mustEqual(t, "third frame", g.rxFrame(0, 2), frame(100, 2))

	// Out of buffers: the frame is dropped and the device asks for a
	// doorbell.
	recv(3)
	if st := g.qstatus(0); st.RxHead != 3 || st.RxDropsNoBuf != 1 || kick() != 1 {
		t.Fatalf("a frame without a buffer: %v, rx_kick %d; want a drop and rx_kick 1", st, kick())
	}
	if !g.postRXNotify(0, area, 2, bufSize) {
		t.Fatal("did not ring RX_TAIL with rx_kick 1")
	}
	recv(4)
	if st := g.qstatus(0); st.RxHead != 4 || kick() != 0 {
		t.Fatalf("after the doorbell: %v, rx_kick %d; want the frame placed and rx_kick 0", st, kick())
	}
	// The tail the device read from memory is 5; a posted doorbell that
	// arrives late with an older tail (not behind the head) is stale.
	g.qpReg(0, hw.PairRxTail, 4)
	recv(5)
	if st := g.qstatus(0); st.RxHead != 5 || st.Error != 0 {
		t.Fatalf("after a stale doorbell: %v", st)
	}

	// A tail behind the head is still an error, from either writer.
	g.qpReg(0, hw.PairRxTail, 2)
	g.waitFor("BAD_TAIL from a doorbell behind the head", func() bool { return g.qstatus(0).Error == hw.QErrBadTail })
}

func TestNotifyRxTailChecked(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1, dropNoBuf: true})
	area := g.setupNotifyPair(0, 8, 8, 0)
	// More than the ring beyond the head, stored in memory: the device
	// checks it when it reads it, as a doorbell.
	atomic.StoreUint32(g.notifyWord(area, hw.PairNotifyRxTail), 9)
	g.d.Receive(frame(100, 1))
	g.waitFor("BAD_TAIL", func() bool { return g.qstatus(0).Error == hw.QErrBadTail })
	if st := g.qstatus(0); st.ErrorInfo != 9 || st.RxHead != 0 {
		t.Fatalf("%v: want error_info 9 and nothing received", st)
	}
}

func TestNotifyIRQArm(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1, virtual: true, dropNoBuf: true})
	area := g.setupNotifyPair(0, 8, 64, 0)
	g.postRXNotify(0, area, 64, bufSize)
	v := hw.PairVector(0)
	var arms uint32
	arm := func() { arms++; atomic.StoreUint32(g.notifyWord(area, hw.PairNotifyIRQArm), arms) }
	after := func(us int) { g.clk.RunUntil(g.clk.Elapsed()+time.Duration(us)*time.Microsecond, nil) }
	check := func(what string, want int) {
		t.Helper()
		if got := g.irq.count(v); got != want {
			t.Fatalf("%s: %d interrupts, want %d", what, got, want)
		}
	}
	g.qpReg(0, hw.PairIRQArm, 1) // the driver arms by register at enable
	g.d.Receive(frame(60, 1))
	check("armed by IRQ_ARM", 1)
	g.d.Receive(frame(60, 2))
	check("disarmed", 1)

	// An arm stored while a completion is outstanding does not fire for
	// it (the driver looks at the status block after its store): the
	// next completion fires at once.
	arm()
	after(1000)
	check("armed in memory after the completion", 1)
	g.d.Receive(frame(60, 3))
	check("the next completion", 2)

	// The same count again is no new arm, however long it stays.
	g.d.Receive(frame(60, 4))
	after(1000)
	check("irq_arm unchanged", 2)
	arm()
	arm()
	g.d.Receive(frame(60, 5))
	g.d.Receive(frame(60, 6))
	check("two stores, one arm", 3)

	// IRQ_ARM still works beside the area, and fires for what is
	// outstanding.
	g.qpReg(0, hw.PairIRQArm, 1)
	check("IRQ_ARM with a completion outstanding", 4)
}

func TestNotifyBadArea(t *testing.T) {
	for _, tc := range []struct {
		name   string
		area   func(g *guest) uint64
		policy uint32
		want   uint32 // pair error
	}{
		{"misaligned", func(g *guest) uint64 { return g.alloc(32, 16) + 4 }, hw.RxPolicyPin, hw.QErrBadNotify},
		{"outside guest memory", func(*guest) uint64 { return guestIOVA + guestSize }, hw.RxPolicyPin, hw.QErrBadNotify},
		{"wraps", func(*guest) uint64 { return ^uint64(0) &^ 15 }, hw.RxPolicyPin, hw.QErrBadNotify},
		// The backup policy keeps its doorbells: the area is not latched,
		// so not even a bad one is touched.
		{"backup policy ignores it", func(*guest) uint64 { return guestIOVA + guestSize }, hw.RxPolicyBackup, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1, dropNoBuf: true})
			g.qpReg(0, hw.PairRxPolicy, tc.policy)
			g.qpReg(0, hw.PairBmSize, 8)
			g.setupNotifyPair(0, 8, 8, tc.area(g))
			if tc.want != 0 {
				g.waitFor("the pair's error", func() bool { return g.qstatus(0).Error == tc.want })
				return
			}
			g.postRX(0, 1, bufSize)
			g.d.Receive(frame(100, 1))
			if st := g.qstatus(0); st.Error != 0 || st.RxHead != 1 {
				t.Fatalf("%v: want the frame received by doorbell alone", st)
			}
		})
	}
}

// TestNotifyAfterDisable: once the pair is disabled and quiesced, the
// device neither reads the area's tail nor writes rx_kick: the driver may
// free it.
func TestNotifyAfterDisable(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1, dropNoBuf: true})
	area := g.setupNotifyPair(0, 8, 8, 0)
	g.d.Receive(frame(100, 1)) // no buffer: rx_kick 1
	if atomic.LoadUint32(g.notifyWord(area, hw.PairNotifyRxKick)) != 1 {
		t.Fatal("rx_kick not set")
	}
	g.qpReg(0, hw.PairCtrl, 0)
	g.waitFor("the pair quiesced", func() bool { return g.d.Pair(0).ReadReg(hw.PairCtrl)&hw.PairCtrlBusy == 0 })
	g.mem.Fence(area, hw.PairNotifySize)
	atomic.StoreUint32(g.notifyWord(area, hw.PairNotifyRxTail), 8)
	atomic.StoreUint32(g.notifyWord(area, hw.PairNotifyRxKick), 7)
	for i := range 10 {
		g.d.Receive(frame(100, uint16(2+i)))
	}
	if n := g.mem.LateWrites(); n != 0 {
		t.Fatalf("%d late writes: %v", n, g.mem.LateLog())
	}
	if got := atomic.LoadUint32(g.notifyWord(area, hw.PairNotifyRxKick)); got != 7 {
		t.Fatalf("rx_kick %d after disable, want the driver's 7", got)
	}
	if st := g.qstatus(0); st.RxHead != 0 {
		t.Fatalf("%v: frames received after disable", st)
	}
}

// FuzzNotifyRxTail drives one pair with a notify area through a sequence
// of driver actions, some of them hostile: proper refills (the tail stored
// in memory, RX_TAIL rung when rx_kick asks), arbitrary tails stored in
// rx_tail, arbitrary RX_TAIL doorbells, and frames from the wire. Whatever
// the sequence: no panic; while the pair runs, the device's tail is never
// more than the ring beyond its head; the pair stops only with BAD_TAIL or
// BAD_DESC, and only after a hostile tail was offered; and with only
// proper refills, a frame that finds a buffer posted (in memory alone, or
// rung for) is placed, and every frame is placed or counted as dropped.
func FuzzNotifyRxTail(f *testing.F) {
	f.Add([]byte{0x00, 0x13, 0x23, 0x33, 0x00, 0x33, 0x33})
	f.Add([]byte{0x33, 0x00, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x01, 0x33})
	f.Add([]byte{0x11, 0x7f, 0x33, 0x22, 0x80, 0x33})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		const size = 8
		g := newGuest(t, guestOpts{pairs: 1, dropNoBuf: true})
		area := g.setupNotifyPair(0, 8, size, 0)
		gp := &g.pairs[0]
		hostile := false
		var frames, placed uint32
		for i, op := range ops {
			head := g.qstatus(0).RxHead
			arg := uint32(int8(op & 0xf0))
			switch op & 0x0f % 4 {
			case 0: // a proper refill of what the device consumed
				g.postRXNotify(0, area, int(size-(gp.rxTail-head)), bufSize)
			case 1: // a tail stored in rx_tail, maybe not what was posted
				v := head + arg>>4
				hostile = hostile || v-head > size || v != gp.rxTail
				atomic.StoreUint32(g.notifyWord(area, hw.PairNotifyRxTail), v)
			case 2: // an RX_TAIL doorbell, maybe not what was posted
				v := head + arg>>4
				hostile = hostile || v-head > size || v != gp.rxTail
				g.qpReg(0, hw.PairRxTail, v)
			default: // a frame from the wire
				g.d.Receive(frame(100, uint16(i)))
				frames++
				// A buffer the driver posted, in memory alone, takes it.
				if got := g.qstatus(0).RxHead; !hostile && gp.rxTail != head && got != head+1 {
					t.Fatalf("op %d: %d buffers posted, rx_head %d -> %d: the frame was not placed", i, gp.rxTail-head, head, got)
				}
			}
			st := g.qstatus(0)
			if s := g.d.Pair(0).Stats(); st.Error == 0 && s.RxTail-s.RxHead > size {
				t.Fatalf("op %d: device tail %d, head %d: beyond the ring", i, s.RxTail, s.RxHead)
			}
			switch st.Error {
			case 0:
			case hw.QErrBadTail, hw.QErrBadDesc:
				if !hostile {
					t.Fatalf("op %d: pair stopped (%v) with only proper refills", i, st)
				}
				return
			default:
				t.Fatalf("op %d: pair stopped with error %d", i, st.Error)
			}
			placed = st.RxHead
		}
		if hostile {
			return
		}
		st := g.qstatus(0)
		if placed+st.RxDropsNoBuf != frames {
			t.Fatalf("%d frames: %d placed, %d dropped for want of a buffer: some lost", frames, placed, st.RxDropsNoBuf)
		}
	})
}
