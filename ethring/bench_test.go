package ethring

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

var benchSizes = []struct {
	name string
	n    int
}{{"64B", 64}, {"1500B", 1500}}

// BenchmarkDatapath forwards frames through the device datapath: each
// frame comes from the wire into the next RX buffer in memfd-backed guest
// memory, the "driver" turns every filled RX buffer into a TX descriptor
// pointing at the same buffer (no copy in the guest), and the TX engine
// gathers it and sends it back out. Every frame crosses guest memory twice
// (one DMA write, one DMA read), as in BenchmarkCopyFloor.
//
// "threaded" runs it as deployed: the far end's sender and receiver, the
// wire reader, the TX worker and a polling driver are separate goroutines,
// so it measures goroutine hand-offs too (on a loaded 2-core machine,
// mostly those). "inline" drives the same RX and TX engines from one
// goroutine in batches of 32, which is the per-frame cost of the device
// code itself.
//
// The TSO cases send one 64 KiB TCP/IPv4 super-packet per iteration (16
// descriptors of 4 KiB, mss 1448, 46 segments): the TX engine gathers it,
// segments it and checksums every segment. Gbit/s there is TCP payload,
// what iperf3 would count.
func BenchmarkDatapath(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run("inline/"+sz.name, func(b *testing.B) { benchInline(b, sz.n) })
	}
	b.Run("inline/TSO-64KiB", benchTSOInline)
	b.Run("threaded/TSO-64KiB", benchTSOThreaded)
	for _, sz := range benchSizes {
		b.Run("threaded/"+sz.name, func(b *testing.B) {
			const ring = 256
			g := newGuest(b, guestOpts{pairs: 1, depth: ring})
			g.setupPair(0, ring, ring)
			g.postRX(0, ring, bufSize)
			g.benchRxTail.Store(ring)
			f := frame(sz.n, 1)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { // the far end sends b.N frames
				defer wg.Done()
				for i := 0; i < b.N; i++ {
					// Only into a posted buffer: the device drops frames
					// it has no buffer for, and this measures the
					// datapath, not drops.
					for uint32(i) >= g.benchRxTail.Load() {
						runtime.Gosched()
					}
					if g.peer.Send(f) != nil {
						return
					}
				}
			}()
			got := make(chan int, 1)
			go func() { // and receives them back
				defer wg.Done()
				buf := make([]byte, port.MaxFrameLen)
				n := 0
				for n < b.N {
					if _, err := g.peer.Recv(buf); err != nil {
						break
					}
					n++
				}
				got <- n
			}()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			g.forward(b.N)
			n := <-got
			elapsed := time.Since(start)
			b.StopTimer()
			if n != b.N {
				b.Fatalf("%d of %d frames came back", n, b.N)
			}
			pps := float64(b.N) / elapsed.Seconds()
			b.ReportMetric(pps, "pkts/s")
			b.ReportMetric(pps*float64(sz.n)*8/1e9, "Gbit/s")
			g.peer.Close()
			wg.Wait()
			if st := g.qstatus(0); st.Error != 0 || st.RxDropsNoBuf != 0 {
				b.Fatalf("status %v", st)
			}
		})
	}
}

func benchInline(b *testing.B, size int) {
	const ring, batch = 256, 32
	g := newGuest(b, guestOpts{pairs: 1, depth: ring})
	g.setupPair(0, ring, ring)
	in := g.inlinePair(0)
	g.postRX(0, ring, bufSize)
	gp := &g.pairs[0]
	mask := gp.txSize - 1
	f := frame(size, 1)
	out := make([]byte, port.MaxFrameLen)
	var c uint32 // frames forwarded
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		for i := 0; i < n; i++ {
			g.d.Receive(f)
		}
		for i := uint32(0); i < uint32(n); i++ {
			rd := g.rxDesc(0, (c+i)&mask)
			td := g.bytes(gp.txRing+uint64((c+i)&mask)*hw.TxDescSize, hw.TxDescSize)
			hw.TxDescAddr.Put(td, hw.RxDescAddr.Get(rd))
			hw.TxDescLen.Put(td, hw.RxDescPktLen.Get(rd))
			hw.TxDescFlags.Put(td, hw.TxdEOP)
		}
		c += uint32(n)
		// The TX tail is stored directly rather than rung, so the worker
		// stays asleep and the engine runs here.
		in.tx.tail.Store(c)
		in.txRun()
		for i := 0; i < n; i++ {
			if _, err := g.peer.Recv(out); err != nil {
				b.Fatal(err)
			}
		}
		g.qpReg(0, hw.PairRxTail, c+ring)
		done += n
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if st := g.qstatus(0); st.Error != 0 || st.RxDropsNoBuf != 0 || st.TxHead != c {
		b.Fatalf("status %v", st)
	}
	pps := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(pps, "pkts/s")
	b.ReportMetric(pps*float64(size)*8/1e9, "Gbit/s")
}

// tsoBench is a 64 KiB TCP/IPv4 super-packet in guest memory.
type tsoBench struct {
	addr    uint64
	len     int
	payload int
	segs    int // segments on the wire
	descs   int // descriptors per super-packet
}

const (
	tsoBenchMSS  = 1448
	tsoBenchDesc = 4096
)

func (g *guest) setupTSO(tb testing.TB) tsoBench {
	p := pkt{payload: pattern(65536-14-20-32, 1), psh: true, tsOpt: true}
	f := superPacket(tb, p)
	addr := g.alloc(uint64(len(f)), 4096)
	copy(g.bytes(addr, len(f)), f)
	return tsoBench{addr: addr, len: len(f), payload: len(p.payload),
		segs:  (len(p.payload) + tsoBenchMSS - 1) / tsoBenchMSS,
		descs: (len(f) + tsoBenchDesc - 1) / tsoBenchDesc}
}

// postTSO writes the super-packet's descriptors at pair q's TX tail (the
// caller rings or stores the tail).
func (g *guest) postTSO(q int, t tsoBench) {
	gp := &g.pairs[q]
	for off := 0; off < t.len; off += tsoBenchDesc {
		n := min(tsoBenchDesc, t.len-off)
		var flags uint16
		if off == 0 {
			flags = hw.TxdTSO4 | hw.TxdCsum
		}
		if off+n == t.len {
			flags |= hw.TxdEOP
		}
		slot := gp.txTail & (gp.txSize - 1)
		g.writeTxDesc(q, slot, t.addr+uint64(off), uint16(n), flags)
		if off == 0 {
			d := g.bytes(gp.txRing+uint64(slot)*hw.TxDescSize, hw.TxDescSize)
			hw.TxDescMSS.Put(d, tsoBenchMSS)
			hw.TxDescCsumStart.Put(d, 34)
			hw.TxDescCsumOffset.Put(d, 16)
		}
		gp.txTail++
	}
}

func reportTSO(b *testing.B, t tsoBench, elapsed time.Duration) {
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "superpkts/s")
	b.ReportMetric(float64(b.N*t.segs)/elapsed.Seconds(), "segs/s")
	b.ReportMetric(float64(b.N*t.payload)*8/1e9/elapsed.Seconds(), "Gbit/s")
}

// benchTSOInline runs the TX engine on the benchmark's goroutine, one
// super-packet per iteration, and takes its segments off the cable.
func benchTSOInline(b *testing.B) {
	g := newGuest(b, guestOpts{pairs: 1, depth: 64})
	g.setupPair(0, 256, 8)
	in := g.inlinePair(0)
	t := g.setupTSO(b)
	out := make([]byte, port.MaxFrameLen)
	b.ReportAllocs()
	b.SetBytes(int64(t.payload))
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		g.postTSO(0, t)
		in.tx.tail.Store(g.pairs[0].txTail) // the worker stays asleep
		in.txRun()
		for j := 0; j < t.segs; j++ {
			if _, err := g.peer.Recv(out); err != nil {
				b.Fatal(err)
			}
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if st := g.qstatus(0); st.Error != 0 || st.TxDropsBadLen != 0 || st.TxTSOFrames != uint32(b.N) {
		b.Fatalf("status %v", st)
	}
	reportTSO(b, t, elapsed)
}

// benchTSOThreaded posts super-packets as a driver does (doorbells, ring
// space from the status block) while the pair's worker segments them and
// another goroutine drains the cable.
func benchTSOThreaded(b *testing.B) {
	const ring = 256
	g := newGuest(b, guestOpts{pairs: 1, depth: 64})
	g.setupPair(0, ring, 8)
	t := g.setupTSO(b)
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, port.MaxFrameLen)
		n := 0
		for n < b.N*t.segs {
			if _, err := g.peer.Recv(buf); err != nil {
				break
			}
			n++
		}
		got <- n
	}()
	gp := &g.pairs[0]
	b.ReportAllocs()
	b.SetBytes(int64(t.payload))
	b.ResetTimer()
	start := time.Now()
	lastProgress := start
	for posted := 0; posted < b.N; {
		txHead := hw.PairStatusTxHead.Get(g.bytes(g.status+uint64(hw.StatusPairOffset(0)), hw.PairStatusSize))
		if gp.txTail-txHead+uint32(t.descs) <= ring {
			g.postTSO(0, t)
			g.qpReg(0, hw.PairTxTail, gp.txTail)
			posted++
			lastProgress = time.Now()
			continue
		}
		if time.Since(lastProgress) > 10*time.Second {
			b.Fatalf("TX stalled at %d/%d; stats %+v", posted, b.N, g.d.Stats())
		}
		runtime.Gosched()
	}
	n := <-got
	elapsed := time.Since(start)
	b.StopTimer()
	if n != b.N*t.segs {
		b.Fatalf("%d of %d segments", n, b.N*t.segs)
	}
	reportTSO(b, t, elapsed)
	g.peer.Close()
}

// forward is the benchmark's driver: it polls the status block, posts a TX
// descriptor for every filled RX buffer, and gives RX buffers back once
// their TX completed (slot i of both rings shares buffer i, so the RX tail
// is simply the TX head plus the ring size).
func (g *guest) forward(frames int) {
	gp := &g.pairs[0]
	mask := gp.txSize - 1
	var rxSeen, txDone uint32
	lastProgress := time.Now()
	for txDone != uint32(frames) {
		st := g.bytes(g.status+uint64(hw.StatusPairOffset(0)), hw.PairStatusSize)
		rxHead, txHead := hw.PairStatusRxHead.Get(st), hw.PairStatusTxHead.Get(st)
		progress := false
		if rxHead != rxSeen {
			for c := rxSeen; c != rxHead; c++ {
				rd := g.rxDesc(0, c&mask)
				td := g.bytes(gp.txRing+uint64(c&mask)*hw.TxDescSize, hw.TxDescSize)
				hw.TxDescAddr.Put(td, hw.RxDescAddr.Get(rd))
				hw.TxDescLen.Put(td, hw.RxDescPktLen.Get(rd))
				hw.TxDescFlags.Put(td, hw.TxdEOP)
			}
			rxSeen = rxHead
			g.qpReg(0, hw.PairTxTail, rxSeen)
			progress = true
		}
		if txHead != txDone {
			txDone = txHead
			g.qpReg(0, hw.PairRxTail, txDone+gp.rxSize)
			g.benchRxTail.Store(txDone + gp.rxSize)
			progress = true
		}
		if progress {
			lastProgress = time.Now()
			continue
		}
		if time.Since(lastProgress) > 10*time.Second {
			g.t.Fatalf("forwarding stalled at %d/%d; stats %+v", txDone, frames, g.d.Stats())
		}
		runtime.Gosched() // two shared cores: let the device goroutines run
	}
}

// BenchmarkCopyFloor is the floor under BenchmarkDatapath: the same two
// copies per frame (wire buffer into the guest buffer, guest buffer out to
// a wire buffer) with plain copy() on the same memfd-backed buffers.
func BenchmarkCopyFloor(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			g := newGuest(b, guestOpts{pairs: 1})
			g.setupPair(0, 256, 256)
			in := frame(sz.n, 1)
			out := make([]byte, port.MaxFrameLen)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				buf := g.bytes(g.pairs[0].rxBufs[i&255], sz.n)
				copy(buf, in)
				copy(out, buf)
			}
			elapsed := time.Since(start)
			pps := float64(b.N) / elapsed.Seconds()
			b.ReportMetric(pps, "pkts/s")
			b.ReportMetric(pps*float64(sz.n)*8/1e9, "Gbit/s")
		})
	}
}

// TestHotPathAllocations: after warm-up, moving a frame costs no
// allocation, in either direction.
func TestHotPathAllocations(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 64, 64)
	in := g.inlinePair(0)
	g.postRX(0, 64, bufSize)
	f := frame(1500, 1)
	if n := testing.AllocsPerRun(50, func() {
		g.d.Receive(f)
		g.qpReg(0, hw.PairRxTail, in.rx.head.Load()+64)
	}); n != 0 {
		t.Errorf("RX: %v allocations per frame", n)
	}
	// TX, run synchronously: post without the doorbell (the worker stays
	// asleep) and drive the engine from here.
	gp := &g.pairs[0]
	buf := make([]byte, port.MaxFrameLen)
	tx := func() {
		slot := gp.txTail & (gp.txSize - 1)
		g.writeTxDesc(0, slot, gp.txBufs[slot], 1500, hw.TxdEOP)
		gp.txTail++
		in.tx.tail.Store(gp.txTail)
		in.txRun()
		if _, err := g.peer.Recv(buf); errors.Is(err, port.ErrClosed) {
			t.Fatal(err)
		}
	}
	for i := 0; i < 64; i++ {
		tx() // warm up the cable's frame slots
	}
	if n := testing.AllocsPerRun(50, tx); n != 0 {
		t.Errorf("TX: %v allocations per frame", n)
	}

	// RX of a TCP frame whose checksum the device verifies.
	tcp := pkt{payload: pattern(1400, 1)}.build(t)
	if n := testing.AllocsPerRun(50, func() {
		g.d.Receive(tcp)
		g.qpReg(0, hw.PairRxTail, in.rx.head.Load()+64)
	}); n != 0 {
		t.Errorf("RX with checksum: %v allocations per frame", n)
	}
	if d := g.rxDesc(0, (in.rx.head.Load()-1)&63); hw.RxDescStatus.Get(d) != hw.RxdDone|hw.RxdCsumOK {
		t.Fatalf("RX status %#x", hw.RxDescStatus.Get(d))
	}

	// TX checksum offload.
	p := pkt{udp: true, payload: pattern(1000, 2)}
	partial := p.partial(p.build(t))
	csumBuf := g.alloc(uint64(len(partial)), 64)
	copy(g.bytes(csumBuf, len(partial)), partial)
	if n := testing.AllocsPerRun(50, func() {
		slot := gp.txTail & (gp.txSize - 1)
		g.writeTxDesc(0, slot, csumBuf, uint16(len(partial)), hw.TxdEOP|hw.TxdCsum)
		d := g.bytes(gp.txRing+uint64(slot)*hw.TxDescSize, hw.TxDescSize)
		hw.TxDescCsumStart.Put(d, 34)
		hw.TxDescCsumOffset.Put(d, 6)
		gp.txTail++
		in.tx.tail.Store(gp.txTail)
		in.txRun()
		if _, err := g.peer.Recv(buf); errors.Is(err, port.ErrClosed) {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("TX checksum: %v allocations per frame", n)
	}

	// TSO: one 64 KiB super-packet, 46 segments.
	tso := g.setupTSO(t)
	superPkt := func() {
		g.postTSO(0, tso)
		in.tx.tail.Store(gp.txTail)
		in.txRun()
		for j := 0; j < tso.segs; j++ {
			if _, err := g.peer.Recv(buf); errors.Is(err, port.ErrClosed) {
				t.Fatal(err)
			}
		}
	}
	superPkt() // warm up the cable's slots for full-size segments
	if n := testing.AllocsPerRun(10, superPkt); n != 0 {
		t.Errorf("TSO: %v allocations per super-packet", n)
	}
	if st := g.qstatus(0); st.Error != 0 || st.TxDropsBadLen != 0 || st.TxTSOFrames != 12 {
		t.Fatalf("status %v", st)
	}
}
