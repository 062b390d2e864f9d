package ethring

import (
	"testing"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestQueueErrors drives pair 0 into each queue error and checks the
// status block (error, error_info), the misc interrupt, that pair 0 stops,
// that pair 1 is unaffected, and that disabling and re-enabling pair 0
// clears the error.
func TestQueueErrors(t *testing.T) {
	const outside = guestIOVA + guestSize + 0x10000
	type env struct {
		g  *guest
		gp *guestPair
	}
	for _, tc := range []struct {
		name    string
		provoke func(e env) // pair 0 is set up (8/8) unless enable is set
		enable  bool        // provoke enables pair 0 itself
		code    uint32
		info    uint32
		drainTx int // good frames pair 0 sent before failing
	}{
		{name: "TX buffer outside guest memory", code: hw.QErrBadDesc, info: 2, drainTx: 2, provoke: func(e env) {
			e.g.postTX(0, frame(60, 1))
			e.g.postTX(0, frame(60, 2))
			e.g.writeTxDesc(0, 2, outside, 60, hw.TxdEOP)
			e.g.qpReg(0, hw.PairTxTail, 3)
		}},
		{name: "TX buffer crossing the end of guest memory", code: hw.QErrBadDesc, info: 0, provoke: func(e env) {
			e.g.writeTxDesc(0, 0, guestIOVA+guestSize-30, 60, hw.TxdEOP)
			e.g.qpReg(0, hw.PairTxTail, 1)
		}},
		{name: "TX buffer at address wrapping 2^64", code: hw.QErrBadDesc, info: 0, provoke: func(e env) {
			e.g.writeTxDesc(0, 0, ^uint64(0)-10, 60, hw.TxdEOP)
			e.g.qpReg(0, hw.PairTxTail, 1)
		}},
		{name: "RX buffer outside guest memory", code: hw.QErrBadDesc, info: 1, provoke: func(e env) {
			e.g.postRX(0, 8, bufSize)
			hw.RxDescAddr.Put(e.g.rxDesc(0, 1), outside)
			e.g.d.Receive(frame(60, 1))
			e.g.d.Receive(frame(60, 1))
		}},
		{name: "TX ring beyond guest memory", enable: true, code: hw.QErrBadRing, provoke: func(e env) {
			e.g.enable(0, outside, 8, e.gp.rxRing, 8)
		}},
		{name: "RX ring crossing the end of guest memory", enable: true, code: hw.QErrBadRing, provoke: func(e env) {
			e.g.enable(0, e.gp.txRing, 8, guestIOVA+guestSize-64, 8)
		}},
		{name: "TX size not a power of two", enable: true, code: hw.QErrBadRing, provoke: func(e env) {
			e.g.enable(0, e.gp.txRing, 12, e.gp.rxRing, 8)
		}},
		{name: "RX size below minimum", enable: true, code: hw.QErrBadRing, provoke: func(e env) {
			e.g.enable(0, e.gp.txRing, 8, e.gp.rxRing, 4)
		}},
		{name: "RX size above maximum", enable: true, code: hw.QErrBadRing, provoke: func(e env) {
			e.g.enable(0, e.gp.txRing, 8, e.gp.rxRing, 8192)
		}},
		{name: "size zero", enable: true, code: hw.QErrBadRing, provoke: func(e env) {
			e.g.enable(0, e.gp.txRing, 0, e.gp.rxRing, 8)
		}},
		{name: "ring base misaligned", enable: true, code: hw.QErrBadRing, provoke: func(e env) {
			e.g.enable(0, e.gp.txRing+8, 8, e.gp.rxRing, 8)
		}},
		{name: "ring wrapping the address space", enable: true, code: hw.QErrBadRing, provoke: func(e env) {
			e.g.enable(0, ^uint64(0)-0xff, 8, e.gp.rxRing, 8)
		}},
		{name: "TX tail backwards", code: hw.QErrBadTail, info: 1, drainTx: 2, provoke: func(e env) {
			e.g.postTX(0, frame(60, 1))
			e.g.postTX(0, frame(60, 2))
			e.g.waitFor("tx_head 2", func() bool { return e.g.qstatus(0).TxHead == 2 })
			e.g.qpReg(0, hw.PairTxTail, 1)
		}},
		{name: "TX tail more than SIZE beyond head", code: hw.QErrBadTail, info: 9, provoke: func(e env) {
			e.g.qpReg(0, hw.PairTxTail, 9)
		}},
		{name: "TX tail far behind (wraps)", code: hw.QErrBadTail, info: 0xffffffff, provoke: func(e env) {
			e.g.qpReg(0, hw.PairTxTail, 0xffffffff)
		}},
		{name: "RX tail backwards", code: hw.QErrBadTail, info: 2, provoke: func(e env) {
			e.g.postRX(0, 4, bufSize)
			e.g.qpReg(0, hw.PairRxTail, 2)
		}},
		{name: "RX tail more than SIZE beyond head", code: hw.QErrBadTail, info: 13, provoke: func(e env) {
			e.g.postRX(0, 4, bufSize)
			e.g.d.Receive(frame(60, 1))
			e.g.qpReg(0, hw.PairRxTail, 13) // head 1, size 8: at most 9
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 2, depth: 256})
			// Frames from the wire go to pair 1 only once pair 0 stopped;
			// inject pair 0's frames directly instead.
			g.setupPair(1, 8, 8)
			g.postRX(1, 8, bufSize)
			gp := &g.pairs[0]
			if tc.enable {
				gp.txRing = g.alloc(8*hw.TxDescSize, 4096)
				gp.rxRing = g.alloc(8*hw.RxDescSize, 4096)
			} else {
				g.setupPair(0, 8, 8)
			}
			g.d.ArmMisc()
			// Steer everything received to pair 0 while provoking.
			g.qpReg(1, hw.PairCtrl, 0)
			tc.provoke(env{g, gp})
			g.waitFor("queue error", func() bool { return g.qstatus(0).Error != 0 })
			if st := g.qstatus(0); st.Error != tc.code || st.ErrorInfo != tc.info {
				t.Fatalf("status %v, want error %d info %d", st, tc.code, tc.info)
			}
			g.waitFor("misc interrupt", func() bool { return g.irq.count(hw.MiscVector) == 1 })
			for i := 0; i < tc.drainTx; i++ {
				g.recvPeer()
			}
			// Pair 0 is stopped: doorbells and frames are ignored.
			txHead := g.qstatus(0).TxHead
			g.qpReg(0, hw.PairTxTail, txHead+1)
			if st := g.d.Stats().Pairs[0]; st.Error != tc.code {
				t.Fatalf("device state %+v", st)
			}
			// Pair 1 keeps running, and now takes every received frame.
			g.qpReg(1, hw.PairCtrl, hw.PairCtrlEnable)
			g.pairs[1].txTail, g.pairs[1].rxTail = 0, 0
			g.postRX(1, 8, bufSize)
			f := frame(80, 9)
			g.postTX(1, f)
			mustEqual(t, "pair 1 TX", g.recvPeer(), f)
			g.peer.Send(f)
			g.waitFor("pair 1 RX", func() bool { return g.qstatus(1).RxHead == 1 })
			mustEqual(t, "pair 1 RX", g.rxFrame(1, 0), f)
			if st := g.qstatus(1); st.Error != 0 {
				t.Fatalf("pair 1 status %v", st)
			}
			if g.qstatus(0).TxHead != txHead {
				t.Fatal("stopped pair 0 consumed descriptors")
			}
			// Disable and re-enable with good rings: the error is gone.
			g.qpReg(0, hw.PairCtrl, 0)
			g.setupPair(0, 8, 8)
			g.waitFor("error cleared", func() bool { st := g.qstatus(0); return st.Error == 0 && st.TxHead == 0 })
			g.postTX(0, f)
			mustEqual(t, "pair 0 TX after re-enable", g.recvPeer(), f)
		})
	}
}

func TestStatusBlockAddress(t *testing.T) {
	for _, tc := range []struct {
		name       string
		addr       func(g *guest) uint64
		headerSeen bool // the header is writable, so the error shows there
	}{
		{"outside guest memory", func(g *guest) uint64 { return 0x40 }, false},
		{"misaligned", func(g *guest) uint64 { return g.status + 8 }, false},
		{"crossing the end of guest memory", func(g *guest) uint64 { return guestIOVA + guestSize - 64 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 2})
			g.setupPair(0, 8, 8)
			g.d.ArmMisc()
			addr := tc.addr(g)
			g.d.SetStatusAddr(addr)
			g.waitFor("device error", func() bool { return g.d.DeviceError() == hw.DevErrBadStatusAddr })
			g.waitFor("misc interrupt", func() bool { return g.irq.count(hw.MiscVector) == 1 })
			if tc.headerSeen {
				if got := g.u32(addr + uint64(hw.StatusError.Offset)); got != hw.DevErrBadStatusAddr {
					t.Fatalf("header error %d", got)
				}
			}
			// Traffic without a status block does not crash anything.
			g.postTX(0, frame(60, 1))
			g.recvPeer()
			// CTRL.RESET clears the error; a good address works again.
			g.d.Reset()
			if g.d.DeviceError() != 0 {
				t.Fatal("reset kept the device error")
			}
			g.setupStatus()
			g.d.SetEnabled(true)
			g.setupPair(0, 8, 8)
			g.postTX(0, frame(60, 2))
			g.recvPeer()
			g.waitFor("tx_head", func() bool { return g.qstatus(0).TxHead == 1 })
			if g.u32(g.status+uint64(hw.StatusError.Offset)) != 0 {
				t.Fatal("header error after reset")
			}
		})
	}
}

// TestStatusBlockUnmapped: the driver's status block disappears while the
// device writes to it.
func TestStatusBlockUnmapped(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 8)
	g.d.ArmMisc()
	g.mem.UnmapAll()
	// No buffer: the wire reader stalls, and its rx_wire_stalls write
	// faults (the reader stays blocked until Close).
	g.peer.Send(frame(60, 1))
	g.waitFor("device error", func() bool { return g.d.DeviceError() == hw.DevErrBadStatusAddr })
	g.waitFor("misc interrupt", func() bool { return g.irq.count(hw.MiscVector) == 1 })
}

// TestInterruptArming: a vector fires only when armed, once per arm, and
// arming with a completion outstanding fires at once.
func TestInterruptArming(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1, virtual: true})
	g.setupPair(0, 8, 64)
	g.postRX(0, 64, bufSize)
	v := hw.PairVector(0)
	rx := func() { g.d.Receive(frame(60, 1)) } // synchronous: the event is counted on return
	steps := []struct {
		name string
		do   func()
		want int
	}{
		{"completion while disarmed", rx, 0},
		{"arm with a completion outstanding", func() { g.qpReg(0, hw.PairIRQArm, 1) }, 1},
		{"completion after the interrupt", rx, 1},
		{"another", rx, 1},
		{"re-arm fires for them", func() { g.qpReg(0, hw.PairIRQArm, 1) }, 2},
		{"arm with nothing outstanding", func() { g.qpReg(0, hw.PairIRQArm, 1) }, 2},
		{"arm twice", func() { g.qpReg(0, hw.PairIRQArm, 1) }, 2},
		{"the next completion fires", rx, 3},
		{"and only once", rx, 3},
		{"arm writes without bit 0 do nothing", func() { g.qpReg(0, hw.PairIRQArm, 2) }, 3},
	}
	for _, s := range steps {
		s.do()
		if got := g.irq.count(v); got != s.want {
			t.Fatalf("%s: %d interrupts, want %d", s.name, got, s.want)
		}
	}
	// A TX completion fires the same vector.
	g.qpReg(0, hw.PairIRQArm, 1)
	g.postTX(0, frame(60, 2))
	g.recvPeer()
	g.waitFor("TX interrupt", func() bool { return g.irq.count(v) == 4 })
	if g.irq.count(hw.MiscVector) != 0 {
		t.Fatal("misc vector fired")
	}
}

// TestITR checks moderation on a virtual clock: at most one interrupt per
// window, and a completion inside the window fires at its end.
func TestITR(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1, virtual: true})
	g.setupPair(0, 8, 256)
	g.postRX(0, 256, bufSize)
	v := hw.PairVector(0)
	g.qpReg(0, hw.PairITR, 100)
	if g.d.Pair(0).ReadReg(hw.PairITR) != 100 {
		t.Fatal("ITR readback")
	}
	rx := func() { g.d.Receive(frame(60, 1)) }
	at := func(us int) { g.clk.RunUntil(time.Duration(us)*time.Microsecond, nil) }
	arm := func() { g.qpReg(0, hw.PairIRQArm, 1) }
	check := func(what string, want int) {
		t.Helper()
		if got := g.irq.count(v); got != want {
			t.Fatalf("%s: %d interrupts, want %d", what, got, want)
		}
	}
	arm()
	rx()
	check("first completion, no earlier interrupt", 1)
	arm()
	at(10)
	for i := 0; i < 50; i++ {
		rx()
	}
	check("inside the window", 1)
	at(99)
	check("just before the window ends", 1)
	at(100)
	check("at the window's end", 2)
	arm()
	at(250)
	rx()
	check("after the window", 3)
	// Inside the next window the driver does not re-arm: nothing fires
	// even when the window ends.
	at(260)
	rx()
	at(400)
	check("disarmed at the window's end", 3)
	// ITR 0: every armed completion fires at once.
	g.qpReg(0, hw.PairITR, 0)
	for i := 0; i < 3; i++ {
		arm()
		check("armed with the earlier completion outstanding", 4+i)
		rx()
	}
	check("ITR 0", 6)
	// 1000 completions in 1 ms with ITR 100 and a driver that re-arms
	// after each interrupt: about 10 interrupts, never more than 11.
	g.qpReg(0, hw.PairITR, 100)
	at(1000)
	base := g.irq.count(v)
	arm()
	seen := base
	for i := 0; i < 1000; i++ {
		at(1000 + i)
		rx()
		g.postRX(0, 1, bufSize)
		if n := g.irq.count(v); n != seen { // NAPI: poll, then re-arm
			seen = n
			arm()
		}
	}
	at(2100)
	if n := g.irq.count(v) - base; n < 9 || n > 12 {
		t.Fatalf("%d interrupts for 1000 completions over 1 ms at ITR 100us", n)
	}
}

// lazyWaiting reports whether a lazy completion waits for its interrupt.
func (m *moderator) lazyWaiting() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lazy
}

// TestTxIRQDelay: under TX_IRQ_DELAY a TX completion's interrupt waits
// for the delay or for an RX completion, and comes at once when half the
// TX ring completed since the last interrupt (hw.TxIRQDelayDoc).
func TestTxIRQDelay(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1, virtual: true})
	g.setupPair(0, 8, 64)
	g.postRX(0, 64, bufSize)
	v := hw.PairVector(0)
	g.qpReg(0, hw.PairTxIRQDelay, 500)
	if got := g.d.Pair(0).ReadReg(hw.PairTxIRQDelay); got != 500 {
		t.Fatalf("TX_IRQ_DELAY reads %d, want 500", got)
	}
	m := &g.d.Pair(0).irq
	var sent uint32
	tx := func() {
		t.Helper()
		g.postTX(0, frame(60, 2))
		g.recvPeer()
		sent++
		g.waitFor("tx_head", func() bool { return g.qstatus(0).TxHead == sent })
	}
	txLazy := func() {
		t.Helper()
		tx()
		g.waitFor("the lazy completion", m.lazyWaiting)
	}
	after := func(us int) { g.clk.RunUntil(g.clk.Elapsed()+time.Duration(us)*time.Microsecond, nil) }
	check := func(what string, want int) {
		t.Helper()
		if got := g.irq.count(v); got != want {
			t.Fatalf("%s: %d interrupts, want %d", what, got, want)
		}
	}
	g.qpReg(0, hw.PairIRQArm, 1)
	txLazy()
	check("a TX completion alone", 0)
	after(499)
	check("just before the delay ends", 0)
	after(1)
	check("when the delay ends", 1)

	g.qpReg(0, hw.PairIRQArm, 1)
	txLazy()
	g.d.Receive(frame(60, 1))
	check("an RX completion takes the TX one along", 2)
	after(1000)
	check("nothing left for the delay", 2)

	// The last interrupt came at tx_head 2; at 6 half of the 8-entry
	// ring completed since: that completion is urgent.
	g.qpReg(0, hw.PairIRQArm, 1)
	for i := 0; i < 3; i++ {
		txLazy()
	}
	check("three TX completions in an 8-entry ring", 2)
	tx()
	g.waitFor("the urgent interrupt", func() bool { return g.irq.count(v) == 3 })

	// TX_IRQ_DELAY 0: urgent again.
	g.qpReg(0, hw.PairTxIRQDelay, 0)
	g.qpReg(0, hw.PairIRQArm, 1)
	tx()
	g.waitFor("an interrupt at once", func() bool { return g.irq.count(v) == 4 })
}
