package ethring

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// gateRemote is guest memory reachable only through DMA_READ/DMA_WRITE (a
// guestmem remote region, as a client maps it without a file descriptor).
// While the gate is shut its writes block, as a client that is slow to
// answer DMA_WRITE makes them; delay slows every write down.
type gateRemote struct {
	base    uint64
	mu      sync.Mutex
	mem     []byte
	shut    atomic.Bool
	open    chan struct{} // closed by release to let blocked writes go on
	once    sync.Once
	entered chan struct{} // one token per write that blocked
	delay   time.Duration
}

const remoteIOVA = 0x4000_0000

// mapRemote adds a remote region of size bytes at remoteIOVA.
func (g *guest) mapRemote(size int) *gateRemote {
	r := &gateRemote{base: remoteIOVA, mem: make([]byte, size), open: make(chan struct{}), entered: make(chan struct{}, 64)}
	g.mem.SetRemote(r)
	g.t.Cleanup(r.release) // registered after newGuest's: runs before Close waits
	if err := g.mem.MapRemote(remoteIOVA, uint64(size), guestmem.ProtRead|guestmem.ProtWrite); err != nil {
		g.t.Fatal(err)
	}
	return r
}

func (r *gateRemote) release() { r.once.Do(func() { close(r.open) }) }

func (r *gateRemote) ReadRemote(iova uint64, p []byte) error {
	r.mu.Lock()
	copy(p, r.mem[iova-r.base:])
	r.mu.Unlock()
	return nil
}

func (r *gateRemote) WriteRemote(iova uint64, p []byte) error {
	if r.shut.Load() {
		select {
		case r.entered <- struct{}{}:
		default:
		}
		<-r.open
	}
	if r.delay > 0 {
		time.Sleep(r.delay)
	}
	r.mu.Lock()
	copy(r.mem[iova-r.base:], p)
	r.mu.Unlock()
	return nil
}

func (r *gateRemote) snapshot() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.mem...)
}

// quiesceStop is one way the driver stops the queue pair's DMA, with the
// BUSY bit it then polls.
type quiesceStop struct {
	name  string
	stop  func(g *guest)
	busy  func(g *guest) bool
	reset bool // the status block is taken back too
}

var quiesceStops = []quiesceStop{
	{"PAIR_CTRL=0", func(g *guest) { g.qpReg(0, hw.PairCtrl, 0) },
		func(g *guest) bool { return g.d.Pair(0).ReadReg(hw.PairCtrl)&hw.PairCtrlBusy != 0 }, false},
	{"CTRL_RESET", func(g *guest) { g.d.Reset() }, func(g *guest) bool { return g.d.Busy() }, true},
}

// waitQuiesced polls BUSY as the driver does, for at most
// hw.QuiesceTimeoutMS.
func waitQuiesced(t *testing.T, g *guest, st quiesceStop) {
	t.Helper()
	deadline := time.Now().Add(hw.QuiesceTimeoutMS * time.Millisecond)
	for st.busy(g) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: BUSY still set after %d ms", st.name, hw.QuiesceTimeoutMS)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// stopReturns runs the stop on another goroutine and fails unless it
// returns at once: the register path never waits for guest memory.
func stopReturns(t *testing.T, g *guest, st quiesceStop) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		st.stop(g)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatalf("%s blocked behind a guest-memory write", st.name)
	}
}

// TestQuiesceWhileWriteBlocked is finding 1 of issue 10: a frame's buffer
// write is stuck in a remote DMA_WRITE when the driver stops the pair. The
// stop must return at once, BUSY must read set while the write is
// blocked, and once the write was released and BUSY cleared, nothing may
// land in the memory the driver then frees (ring, buffer, status block),
// nor may an interrupt of the pair fire, however much traffic arrives.
func TestQuiesceWhileWriteBlocked(t *testing.T) {
	for _, st := range quiesceStops {
		t.Run(st.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1})
			rem := g.mapRemote(64 << 10)
			g.setupPair(0, 8, 8)
			gp := &g.pairs[0]
			for i := range gp.rxBufs {
				gp.rxBufs[i] = remoteIOVA + uint64(i)*bufSize
			}
			g.qpReg(0, hw.PairIRQArm, 1)
			g.postRX(0, 8, bufSize)
			rem.shut.Store(true)
			if err := g.peer.Send(frame(100, 1)); err != nil {
				t.Fatal(err)
			}
			select {
			case <-rem.entered:
			case <-time.After(5 * time.Second):
				t.Fatal("the frame's buffer write never started")
			}
			stopReturns(t, g, st)
			if !st.busy(g) {
				t.Fatalf("%s: BUSY clear while a buffer write is in flight", st.name)
			}
			time.Sleep(2 * time.Millisecond)
			if !st.busy(g) {
				t.Fatalf("%s: BUSY cleared while the write is still blocked", st.name)
			}
			rem.release()
			waitQuiesced(t, g, st)

			// The driver frees the rings, the buffers and, after a
			// reset, the status block.
			irqs := g.irq.count(hw.PairVector(0))
			g.mem.Fence(gp.rxRing, uint64(gp.rxSize)*hw.RxDescSize)
			g.mem.Fence(gp.txRing, uint64(gp.txSize)*hw.TxDescSize)
			g.mem.Fence(remoteIOVA, 64<<10)
			if st.reset {
				g.mem.Fence(g.status, hw.StatusBlockSize)
			}
			ring := append([]byte(nil), g.bytes(gp.rxRing, int(gp.rxSize)*hw.RxDescSize)...)
			status := append([]byte(nil), g.bytes(g.status, hw.StatusBlockSize)...)
			bufs := rem.snapshot()
			for i := range 50 {
				g.peer.Send(frame(100, uint16(2+i)))
			}
			g.d.ArmMisc()
			time.Sleep(20 * time.Millisecond)
			if n := g.mem.LateWrites(); n != 0 {
				t.Fatalf("%d late writes after BUSY cleared: %v", n, g.mem.LateLog())
			}
			if !bytes.Equal(ring, g.bytes(gp.rxRing, int(gp.rxSize)*hw.RxDescSize)) {
				t.Fatal("RX ring changed after BUSY cleared")
			}
			if st.reset && !bytes.Equal(status, g.bytes(g.status, hw.StatusBlockSize)) {
				t.Fatal("status block changed after BUSY cleared")
			}
			if !bytes.Equal(bufs, rem.snapshot()) {
				t.Fatal("RX buffers changed after BUSY cleared")
			}
			if n := g.irq.count(hw.PairVector(0)); n != irqs {
				t.Fatalf("pair interrupt after BUSY cleared (%d, then %d)", irqs, n)
			}
		})
	}
}

// TestQuiesceDriverModel is the driver's teardown under traffic, round
// after round: frames stream in (their buffers behind a slow remote
// region, so one is usually in flight) and TX frames go out while the
// driver stops the pair at a random moment, polls BUSY, then fences
// everything it frees and lets traffic keep arriving. No write may be
// late, and no fenced byte may change; the next round hands the memory
// to the device again.
func TestQuiesceDriverModel(t *testing.T) {
	rounds := 25
	if testing.Short() {
		rounds = 8
	}
	for _, st := range quiesceStops {
		t.Run(st.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1, dropNoBuf: true})
			rem := g.mapRemote(64 << 10)
			rem.delay = 50 * time.Microsecond
			rem.release()
			g.setupPair(0, 16, 16)
			gp := &g.pairs[0]
			for i := range gp.rxBufs {
				gp.rxBufs[i] = remoteIOVA + uint64(i)*bufSize
			}
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { // the far end sends
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					if g.peer.Send(frame(60+i%1400, uint16(i))) != nil {
						return
					}
				}
			}()
			go func() { // and drains what the device sends
				defer wg.Done()
				buf := make([]byte, 1<<16)
				for {
					if _, err := g.peer.Recv(buf); err != nil {
						return
					}
				}
			}()
			defer func() { stop.Store(true); g.peer.Close(); wg.Wait() }()
			rng := rand.New(rand.NewPCG(1, 2))
			for round := range rounds {
				if round > 0 {
					// The driver hands the memory back: buffers unfenced,
					// rings owned again by the new instance, status block
					// latched again after a reset.
					g.mem.Unfence(remoteIOVA, 64<<10)
					if st.reset {
						g.setupStatus()
						g.d.SetEnabled(true)
					}
					g.enable(0, gp.txRing, gp.txSize, gp.rxRing, gp.rxSize)
				}
				g.qpReg(0, hw.PairIRQArm, 1)
				g.postRX(0, int(gp.rxSize), bufSize)
				for range 4 {
					g.postTX(0, frame(200, uint16(round)))
				}
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				stopReturns(t, g, st)
				waitQuiesced(t, g, st)
				g.mem.Fence(gp.rxRing, uint64(gp.rxSize)*hw.RxDescSize)
				g.mem.Fence(gp.txRing, uint64(gp.txSize)*hw.TxDescSize)
				g.mem.Fence(remoteIOVA, 64<<10)
				if st.reset {
					g.mem.Fence(g.status, hw.StatusBlockSize)
				}
				ring := append([]byte(nil), g.bytes(gp.rxRing, int(gp.rxSize)*hw.RxDescSize)...)
				status := append([]byte(nil), g.bytes(g.status, hw.StatusBlockSize)...)
				bufs := rem.snapshot()
				irqs := g.irq.count(hw.PairVector(0))
				time.Sleep(2 * time.Millisecond)
				if n := g.mem.LateWrites(); n != 0 {
					t.Fatalf("round %d: %d late writes: %v", round, n, g.mem.LateLog())
				}
				if !bytes.Equal(ring, g.bytes(gp.rxRing, int(gp.rxSize)*hw.RxDescSize)) {
					t.Fatalf("round %d: RX ring changed after BUSY cleared", round)
				}
				if st.reset && !bytes.Equal(status, g.bytes(g.status, hw.StatusBlockSize)) {
					t.Fatalf("round %d: status block changed after BUSY cleared", round)
				}
				if !bytes.Equal(bufs, rem.snapshot()) {
					t.Fatalf("round %d: RX buffers changed after BUSY cleared", round)
				}
				if n := g.irq.count(hw.PairVector(0)); n != irqs {
					t.Fatalf("round %d: pair interrupt after BUSY cleared", round)
				}
			}
			if s := g.d.Pair(0).Stats(); s.RxFrames == 0 || s.TxFrames == 0 {
				t.Fatalf("no traffic moved: %+v", s)
			}
		})
	}
}

// TestQuiesceIdlePairQuiescesAtOnce: PAIR_CTRL reads BUSY while enabled and
// clears right after a disable when no frame is in flight (the worker
// waiting for a doorbell holds no unit).
func TestQuiesceIdlePairQuiescesAtOnce(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 8)
	p := g.d.Pair(0)
	if p.ReadReg(hw.PairCtrl) != hw.PairCtrlEnable|hw.PairCtrlBusy {
		t.Fatalf("PAIR_CTRL %#x while enabled", p.ReadReg(hw.PairCtrl))
	}
	g.qpReg(0, hw.PairCtrl, 0)
	waitQuiesced(t, g, quiesceStops[0])
	if v := p.ReadReg(hw.PairCtrl); v != 0 {
		t.Fatalf("PAIR_CTRL %#x after the quiesce", v)
	}
}
