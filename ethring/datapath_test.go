package ethring

import (
	"errors"
	"testing"
	"time"

	"github.com/npfnic/npfnic/vdevice/port"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

func TestTXFrames(t *testing.T) {
	for _, tc := range []struct {
		name string
		segs []int // segment lengths of one frame
	}{
		{"single 60", []int{60}},
		{"single min", []int{hw.MinFrame}},
		{"single max", []int{hw.MaxFrame}},
		{"header and payload", []int{14, 1486}},
		{"three uneven", []int{1, 700, 300}},
		{"max segments", []int{14, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80}},
		{"zero-length middle segment", []int{20, 0, 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1})
			g.setupPair(0, 32, 32)
			total := 0
			for _, n := range tc.segs {
				total += n
			}
			want := frame(total, 5)
			var segs [][]byte
			off := 0
			for _, n := range tc.segs {
				segs = append(segs, want[off:off+n])
				off += n
			}
			g.postTX(0, segs...)
			mustEqual(t, "frame on the wire", g.recvPeer(), want)
			g.waitFor("tx_head", func() bool { return g.qstatus(0).TxHead == uint32(len(segs)) })
			if st := g.qstatus(0); st.Error != 0 || st.TxDropsBadLen != 0 {
				t.Fatalf("status %v", st)
			}
		})
	}
}

// TestTXBadLength: frames the device must not send are dropped and
// counted, their descriptors consumed, and the queue keeps working.
func TestTXBadLength(t *testing.T) {
	for _, tc := range []struct {
		name string
		segs []int
	}{
		{"zero length", []int{0}},
		{"runt", []int{hw.MinFrame - 1}},
		{"oversized", []int{hw.MaxFrame + 1}},
		{"oversized gathered", []int{1000, 519}},
		{"too many segments", []int{14, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1})
			g.setupPair(0, 32, 32)
			var segs [][]byte
			for _, n := range tc.segs {
				segs = append(segs, make([]byte, n))
			}
			g.postTX(0, segs...)
			good := frame(64, 1)
			g.postTX(0, good)
			mustEqual(t, "the next frame", g.recvPeer(), good)
			g.waitFor("tx_head", func() bool { return g.qstatus(0).TxHead == uint32(len(segs)+1) })
			st := g.qstatus(0)
			if st.TxDropsBadLen != 1 || st.Error != 0 {
				t.Fatalf("status %v, want one bad-length drop and no error", st)
			}
			if s := g.d.Stats().Pairs[0]; s.TxFrames != 1 || s.TxDropsBadLen != 1 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestTXPartialFrame: a frame whose EOP is not posted yet waits for it.
func TestTXPartialFrame(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 8)
	want := frame(100, 3)
	gp := &g.pairs[0]
	copy(g.bytes(gp.txBufs[0], 50), want[:50])
	copy(g.bytes(gp.txBufs[1], 50), want[50:])
	g.writeTxDesc(0, 0, gp.txBufs[0], 50, 0)
	g.qpReg(0, hw.PairTxTail, 1)
	g.writeTxDesc(0, 1, gp.txBufs[1], 50, hw.TxdEOP)
	g.qpReg(0, hw.PairTxTail, 2)
	mustEqual(t, "frame", g.recvPeer(), want)
	g.waitFor("tx_head 2", func() bool { return g.qstatus(0).TxHead == 2 })
}

// TestTXWholeRingWithoutEOP: descriptors that fill the ring without an EOP
// can never become a frame; the device drops them instead of waiting.
func TestTXWholeRingWithoutEOP(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 8)
	gp := &g.pairs[0]
	for i := uint32(0); i < 8; i++ {
		g.writeTxDesc(0, i, gp.txBufs[i], 10, 0)
	}
	gp.txTail = 8
	g.qpReg(0, hw.PairTxTail, 8)
	g.waitFor("tx_head 8", func() bool { return g.qstatus(0).TxHead == 8 })
	if st := g.qstatus(0); st.TxDropsBadLen != 1 || st.Error != 0 {
		t.Fatalf("status %v", st)
	}
	good := frame(60, 2)
	g.postTX(0, good)
	mustEqual(t, "next frame", g.recvPeer(), good)
}

func TestRXFillsInOrder(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 16)
	g.postRX(0, 16, bufSize)
	var sent [][]byte
	for i, n := range []int{60, 1514, 14, 1518, 300, 61} {
		f := frame(n, uint16(i))
		sent = append(sent, f)
		if err := g.peer.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	g.waitFor("rx_head", func() bool { return g.qstatus(0).RxHead == uint32(len(sent)) })
	for i, f := range sent {
		mustEqual(t, "received frame", g.rxFrame(0, uint32(i)), f)
		if d := g.rxDesc(0, uint32(i)); hw.RxDescStatus.Get(d) != hw.RxdDone || hw.RxDescBufLen.Get(d) != bufSize {
			t.Fatalf("descriptor %d: status %#x buf_len %d", i, hw.RxDescStatus.Get(d), hw.RxDescBufLen.Get(d))
		}
	}
	// The next descriptor is untouched.
	if d := g.rxDesc(0, uint32(len(sent))); hw.RxDescStatus.Get(d) != 0 {
		t.Fatal("device wrote past rx_head")
	}
}

// TestRXDrops runs with Config.RxDropNoBuf, so a frame without a buffer
// is dropped rather than held (TestRXFlowControl covers the default).
func TestRXDrops(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1, dropNoBuf: true})
	g.setupPair(0, 8, 8)
	// No buffer posted: dropped, counted, not queued.
	g.peer.Send(frame(60, 1))
	g.waitFor("no-buffer drop", func() bool { return g.qstatus(0).RxDropsNoBuf == 1 })
	// A buffer too small: dropped, the buffer stays for the next frame.
	g.postRX(0, 1, 100)
	g.peer.Send(frame(101, 2))
	g.waitFor("too-big drop", func() bool { return g.qstatus(0).RxDropsTooBig == 1 })
	fits := frame(100, 3)
	g.peer.Send(fits)
	g.waitFor("rx_head 1", func() bool { return g.qstatus(0).RxHead == 1 })
	mustEqual(t, "frame that fits", g.rxFrame(0, 0), fits)
	// Longer than any Ethernet frame, even with a big buffer.
	g.postRX(0, 1, 4000)
	g.peer.Send(frame(hw.MaxFrame+1, 4))
	g.waitFor("too-big drop 2", func() bool { return g.qstatus(0).RxDropsTooBig == 2 })
	if st := g.qstatus(0); st.Error != 0 || st.RxHead != 1 || st.RxDropsNoBuf != 1 {
		t.Fatalf("status %v", st)
	}
}

// TestRingWrap runs both rings around several times, reposting as the
// driver would.
func TestRingWrap(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 8)
	g.postRX(0, 8, bufSize)
	const frames = 8*5 + 3
	for i := 0; i < frames; i++ {
		f := frame(60+i, uint16(i))
		g.postTX(0, f[:20], f[20:])
		mustEqual(t, "tx", g.recvPeer(), f)
		g.waitFor("tx_head", func() bool { return g.qstatus(0).TxHead == uint32(2*(i+1)) })
		g.peer.Send(f)
		g.waitFor("rx_head", func() bool { return g.qstatus(0).RxHead == uint32(i+1) })
		mustEqual(t, "rx", g.rxFrame(0, uint32(i)), f)
		g.postRX(0, 1, bufSize)
	}
}

// TestCounterWrap32: heads and tails are free-running u32 counters; start
// them just below 2^32 and cross zero on both rings.
func TestCounterWrap32(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 8)
	const start = 1<<32 - 5
	in := g.d.Pair(0).inst.Load()
	in.tx.head.Store(start)
	in.tx.tail.Store(start)
	in.rx.head.Store(start)
	in.rx.tail.Store(start)
	gp := &g.pairs[0]
	gp.txTail, gp.rxTail = start, start
	g.postRX(0, 8, bufSize)
	for i := 0; i < 12; i++ {
		f := frame(64, uint16(i))
		g.postTX(0, f)
		mustEqual(t, "tx", g.recvPeer(), f)
		want := uint32(start + i + 1)
		g.waitFor("tx_head", func() bool { return g.qstatus(0).TxHead == want })
		g.peer.Send(f)
		g.waitFor("rx_head", func() bool { return g.qstatus(0).RxHead == want })
		mustEqual(t, "rx", g.rxFrame(0, want-1), f)
		g.postRX(0, 1, bufSize)
	}
	if st := g.qstatus(0); st.TxHead != 7 || st.RxHead != 7 || st.Error != 0 {
		t.Fatalf("status %v, want heads 7 after wrapping", st)
	}
}

// TestSteering: flows spread over the enabled pairs, each flow stays on
// one pair, and with one pair enabled every frame goes there.
func TestSteering(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 4})
	g.setupPair(0, 8, 64)
	g.setupPair(2, 8, 64)
	g.postRX(0, 64, bufSize)
	g.postRX(2, 64, bufSize)
	const flows = 40
	for i := 0; i < flows; i++ {
		g.peer.Send(frame(64, uint16(i)))
	}
	g.waitFor("all frames", func() bool { return g.qstatus(0).RxHead+g.qstatus(2).RxHead == flows })
	if a, b := g.qstatus(0).RxHead, g.qstatus(2).RxHead; a == 0 || b == 0 {
		t.Fatalf("flows not spread: pair 0 got %d, pair 2 got %d", a, b)
	}
	// The same flow again lands where it landed before.
	for i := 0; i < 5; i++ {
		q := 0
		if g.d.steer(FlowHash(frame(64, uint16(i)))).q != q {
			q = 2
		}
		before := g.qstatus(q).RxHead
		g.peer.Send(frame(64, uint16(i)))
		g.waitFor("same pair", func() bool { return g.qstatus(q).RxHead == before+1 })
	}
	g.qpReg(2, hw.PairCtrl, 0)
	before := g.qstatus(0).RxHead
	for i := 0; i < 10; i++ {
		g.peer.Send(frame(64, uint16(i)))
	}
	g.waitFor("pair 0 takes everything", func() bool { return g.qstatus(0).RxHead == before+10 })
}

func TestDatapathDisabled(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 8)
	g.postRX(0, 8, bufSize)
	g.d.SetEnabled(false)
	g.peer.Send(frame(60, 1))
	g.waitFor("drop while disabled", func() bool { return g.d.Stats().RxDropsDisabled == 1 })
	f := frame(60, 2)
	g.postTX(0, f)
	if g.qstatus(0).TxHead != 0 {
		t.Fatal("TX ran while CTRL.ENABLE was clear")
	}
	g.d.SetEnabled(true)
	mustEqual(t, "tx after enable", g.recvPeer(), f)
	g.d.SetBusMaster(false)
	g.peer.Send(frame(60, 3))
	g.waitFor("drop without bus master", func() bool { return g.d.Stats().RxDropsDisabled == 2 })
	if g.qstatus(0).RxHead != 0 {
		t.Fatal("RX DMA without bus mastering")
	}
}

func TestLinkAndQPCount(t *testing.T) {
	d, err := New(Config{Mem: guestmem.New(), QueuePairs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Link() || d.QueuePairs() != 2 || d.Pair(2) != nil {
		t.Fatalf("link %v pairs %d", d.Link(), d.QueuePairs())
	}
	g := newGuest(t, guestOpts{pairs: 1})
	if !g.d.Link() || g.u32(g.status)&hw.LinkUp == 0 {
		t.Fatal("link should be up with a wire attached")
	}
	g.d.ArmMisc()
	g.d.SetLink(false)
	g.waitFor("link down in status", func() bool { return g.u32(g.status)&hw.LinkUp == 0 })
	g.waitFor("misc interrupt", func() bool { return g.irq.count(hw.MiscVector) == 1 })
}

func TestPairRegisters(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	p := g.d.Pair(0)
	for _, r := range []struct {
		off, v, want uint32
	}{
		{hw.PairTxBaseLo, 0x12345000, 0x12345000},
		{hw.PairTxBaseHi, 0x1, 0x1},
		{hw.PairTxSize, 64, 64},
		{hw.PairRxBaseLo, 0x6000, 0x6000},
		{hw.PairRxBaseHi, 0x2, 0x2},
		{hw.PairRxSize, 128, 128},
		{hw.PairITR, 50, 50},
		{hw.PairTxTail, 5, 0},
		{hw.PairRxTail, 5, 0},
		{hw.PairIRQArm, 1, 0},
		{0x80, 7, 0},
	} {
		p.WriteReg(r.off, r.v)
		if got := p.ReadReg(r.off); got != r.want {
			t.Errorf("register %#x: got %#x want %#x", r.off, got, r.want)
		}
	}
	g.d.Reset()
	for _, off := range []uint32{hw.PairTxBaseLo, hw.PairTxSize, hw.PairITR, hw.PairCtrl} {
		if got := p.ReadReg(off); got != 0 {
			t.Errorf("register %#x after reset: %#x", off, got)
		}
	}
}

// flakyPort fails its first Recv calls, then delivers one frame, then
// reports closed.
type flakyPort struct {
	fails int
	sent  bool
	frame []byte
}

func (p *flakyPort) Send([]byte) error { return nil }
func (p *flakyPort) Recv(buf []byte) (int, error) {
	if p.fails > 0 {
		p.fails--
		return 0, errors.New("transient")
	}
	if !p.sent {
		p.sent = true
		return copy(buf, p.frame), nil
	}
	return 0, port.ErrClosed
}
func (p *flakyPort) Close() error { return nil }

// TestWireReaderSurvivesErrors: receive errors are retried by the port's
// reader; a port that closes takes the datapath's link down.
func TestWireReaderSurvivesErrors(t *testing.T) {
	flaky := &flakyPort{fails: 3, frame: frame(60, 1)}
	d, mux := plugIn(t, flaky, Config{Mem: guestmem.New(), QueuePairs: 1})
	defer mux.Close()
	defer d.Close()
	deadline := time.Now().Add(5 * time.Second)
	for d.Link() || d.Stats().RxDropsDisabled != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("link %v stats %+v", d.Link(), d.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}
