package ethring

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/internal/testutil"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

// guest is a test driver: guest memory in a memfd (mapped into the device's
// guestmem exactly as a vfio-user client's RAM is, and mapped again here as
// the guest's view), rings and buffers carved out of it, and the datapath
// under test wired to an in-memory cable whose far end is peer.
type guest struct {
	t    testing.TB
	mem  *guestmem.Memory
	ram  []byte // the guest's view of its memory
	iova uint64 // IOVA of ram[0]
	next uint64 // bump allocator, offset into ram
	d    *Engine
	mux  *port.Mux // the port the datapath is plugged into
	peer *port.PipePort
	irq  *irqCounter
	clk  *clock.Virtual // nil: real clock
	fd   int            // the memfd, to map it again after an unmap

	benchRxTail atomic.Uint32 // RX tail as posted by the benchmark's driver

	status uint64
	pairs  [hw.PairMax]guestPair
}

type guestPair struct {
	txRing, rxRing uint64
	txSize, rxSize uint32
	txTail, rxTail uint32
	txBufs, rxBufs []uint64 // one per slot
}

const (
	guestIOVA = 0x10_0000
	guestSize = 4 << 20
	bufSize   = 2048
)

type guestOpts struct {
	pairs     int
	virtual   bool      // a virtual clock for interrupt moderation
	depth     int       // pipe depth
	dropNoBuf bool      // Config.RxDropNoBuf
	wire      port.Port // the device's wire instead of the in-memory cable (peer is then nil)
}

func newGuest(t testing.TB, o guestOpts) *guest {
	t.Helper()
	fd, err := unix.MemfdCreate("guest-ram", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, guestSize); err != nil {
		t.Fatal(err)
	}
	mem := guestmem.New()
	if err := mem.MapFD(guestIOVA, guestSize, fd, 0, guestmem.ProtRead|guestmem.ProtWrite); err != nil {
		t.Fatal(err)
	}
	ram, err := unix.Mmap(fd, 0, guestSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	if o.depth == 0 {
		o.depth = 64
	}
	var devEnd port.Port
	var peer *port.PipePort
	if o.wire != nil {
		devEnd = o.wire
	} else {
		devEnd, peer = port.Pipe(o.depth)
	}
	g := &guest{t: t, mem: mem, ram: ram, iova: guestIOVA, peer: peer, irq: &irqCounter{}, fd: fd}
	cfg := Config{Mem: mem, QueuePairs: o.pairs, Interrupt: g.irq.fire, RxDropNoBuf: o.dropNoBuf}
	if o.virtual {
		g.clk = clock.NewVirtual(time.Unix(1000, 0))
		cfg.Clock = g.clk
	}
	g.d, g.mux = plugIn(t, devEnd, cfg)
	t.Cleanup(func() {
		g.d.Close()
		g.mux.Close()
		if peer != nil {
			peer.Close()
		}
		mem.UnmapAll()
		unix.Munmap(ram)
		unix.Close(fd)
	})
	g.setupStatus()
	g.d.SetEnabled(true)
	return g
}

type irqCounter struct {
	mu sync.Mutex
	n  [hw.MSIXVectors]int
}

func (c *irqCounter) fire(v int) {
	c.mu.Lock()
	c.n[v]++
	c.mu.Unlock()
}

func (c *irqCounter) count(v int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[v]
}

// alloc returns the IOVA of size fresh bytes aligned to align.
func (g *guest) alloc(size, align uint64) uint64 {
	g.next = (g.next + align - 1) &^ (align - 1)
	off := g.next
	g.next += size
	if g.next > uint64(len(g.ram)) {
		g.t.Fatalf("guest memory exhausted")
	}
	return g.iova + off
}

func (g *guest) bytes(iova uint64, n int) []byte {
	off := iova - g.iova
	return g.ram[off : off+uint64(n)]
}

func (g *guest) u32(iova uint64) uint32 { return binary.LittleEndian.Uint32(g.bytes(iova, 4)) }

// qpReg writes pair q's register.
func (g *guest) qpReg(q int, off, v uint32) { g.d.Pair(q).WriteReg(off, v) }

// setupStatus places the status block and waits until the device wrote it.
func (g *guest) setupStatus() {
	g.status = g.alloc(hw.StatusBlockSize, hw.StatusBlockAlign)
	for i := range g.bytes(g.status, hw.StatusBlockSize) {
		g.bytes(g.status, hw.StatusBlockSize)[i] = 0xee
	}
	g.d.SetStatusAddr(g.status)
	g.waitFor("status block written", func() bool { return g.u32(g.status+hw.StatusBlockSize-4) == 0 })
}

// setupPair allocates rings of the given sizes, one buffer per slot,
// and enables the pair with its vector armed.
func (g *guest) setupPair(q int, txSize, rxSize uint32) {
	gp := &g.pairs[q]
	*gp = guestPair{txSize: txSize, rxSize: rxSize}
	gp.txRing = g.alloc(uint64(txSize)*hw.TxDescSize, 4096)
	gp.rxRing = g.alloc(uint64(rxSize)*hw.RxDescSize, 4096)
	for i := uint32(0); i < txSize; i++ {
		gp.txBufs = append(gp.txBufs, g.alloc(bufSize, 64))
	}
	for i := uint32(0); i < rxSize; i++ {
		gp.rxBufs = append(gp.rxBufs, g.alloc(bufSize, 64))
	}
	g.enable(q, gp.txRing, txSize, gp.rxRing, rxSize)
}

// inlinePair swaps pair q's freshly enabled instance for an identical one
// without a worker goroutine and returns it, so a test or benchmark can run
// the engines from its own goroutine (storing the TX tail and calling
// txRun) without the worker running them at the same time.
func (g *guest) inlinePair(q int) *instance {
	p := g.d.Pair(q)
	p.regMu.Lock()
	defer p.regMu.Unlock()
	old := p.inst.Load()
	in := newInstance(p, old.tx.base, old.tx.size, old.rx.base, old.rx.size)
	in.tx.head.Store(old.tx.head.Load())
	in.tx.tail.Store(old.tx.tail.Load())
	in.rx.head.Store(old.rx.head.Load())
	in.rx.tail.Store(old.rx.tail.Load())
	p.inst.Store(in)
	old.retire()
	return in
}

func (g *guest) enable(q int, txBase uint64, txSize uint32, rxBase uint64, rxSize uint32) {
	g.qpReg(q, hw.PairTxBaseLo, uint32(txBase))
	g.qpReg(q, hw.PairTxBaseHi, uint32(txBase>>32))
	g.qpReg(q, hw.PairTxSize, txSize)
	g.qpReg(q, hw.PairRxBaseLo, uint32(rxBase))
	g.qpReg(q, hw.PairRxBaseHi, uint32(rxBase>>32))
	g.qpReg(q, hw.PairRxSize, rxSize)
	g.qpReg(q, hw.PairCtrl, hw.PairCtrlEnable)
	gp := &g.pairs[q]
	gp.txTail, gp.rxTail = 0, 0
}

// qstatus reads pair q's part of the status block.
func (g *guest) qstatus(q int) qpStatus {
	b := g.bytes(g.status+uint64(hw.StatusPairOffset(q)), hw.PairStatusSize)
	return qpStatus{
		TxHead: hw.PairStatusTxHead.Get(b), RxHead: hw.PairStatusRxHead.Get(b),
		Error: hw.PairStatusError.Get(b), ErrorInfo: hw.PairStatusErrorInfo.Get(b),
		RxDropsNoBuf: hw.PairStatusRxDropsNoBuf.Get(b), RxDropsTooBig: hw.PairStatusRxDropsTooBig.Get(b),
		TxDropsBadLen: hw.PairStatusTxDropsBadLen.Get(b),
		TxTSOFrames:   hw.PairStatusTxTSOFrames.Get(b), RxWireStalls: hw.PairStatusRxWireStalls.Get(b),
	}
}

type qpStatus struct {
	TxHead, RxHead, Error, ErrorInfo           uint32
	RxDropsNoBuf, RxDropsTooBig, TxDropsBadLen uint32
	TxTSOFrames, RxWireStalls                  uint32
}

// postTX writes descriptors for one frame made of segs (each copied into a
// slot buffer) and rings the doorbell.
func (g *guest) postTX(q int, segs ...[]byte) {
	gp := &g.pairs[q]
	for i, s := range segs {
		slot := gp.txTail & (gp.txSize - 1)
		buf := gp.txBufs[slot]
		copy(g.bytes(buf, len(s)), s)
		var flags uint16
		if i == len(segs)-1 {
			flags = hw.TxdEOP
		}
		g.writeTxDesc(q, slot, buf, uint16(len(s)), flags)
		gp.txTail++
	}
	g.qpReg(q, hw.PairTxTail, gp.txTail)
}

func (g *guest) writeTxDesc(q int, slot uint32, addr uint64, n, flags uint16) {
	d := g.bytes(g.pairs[q].txRing+uint64(slot)*hw.TxDescSize, hw.TxDescSize)
	hw.TxDescAddr.Put(d, addr)
	hw.TxDescLen.Put(d, n)
	hw.TxDescFlags.Put(d, flags)
	hw.TxDescMSS.Put(d, 0)
	hw.TxDescCsumStart.Put(d, 0)
	hw.TxDescCsumOffset.Put(d, 0)
}

// postRX posts n buffers of bufLen bytes and rings the doorbell.
func (g *guest) postRX(q int, n int, bufLen uint16) {
	g.writeRxDescs(q, n, bufLen)
	g.qpReg(q, hw.PairRxTail, g.pairs[q].rxTail)
}

// writeRxDescs fills the next n RX descriptors with buffers of bufLen
// bytes (clearing their device fields) and moves the guest's tail.
func (g *guest) writeRxDescs(q int, n int, bufLen uint16) {
	gp := &g.pairs[q]
	for i := 0; i < n; i++ {
		slot := gp.rxTail & (gp.rxSize - 1)
		d := g.rxDesc(q, slot)
		hw.RxDescAddr.Put(d, gp.rxBufs[slot])
		hw.RxDescBufLen.Put(d, bufLen)
		hw.RxDescPktLen.Put(d, 0)
		hw.RxDescStatus.Put(d, 0)
		gp.rxTail++
	}
}

func (g *guest) rxDesc(q int, slot uint32) []byte {
	return g.bytes(g.pairs[q].rxRing+uint64(slot)*hw.RxDescSize, hw.RxDescSize)
}

// rxFrame returns the frame in the RX descriptor at counter c.
func (g *guest) rxFrame(q int, c uint32) []byte {
	gp := &g.pairs[q]
	d := g.rxDesc(q, c&(gp.rxSize-1))
	if hw.RxDescStatus.Get(d)&hw.RxdDone == 0 {
		g.t.Fatalf("pair %d RX descriptor %d not done", q, c)
	}
	return g.bytes(hw.RxDescAddr.Get(d), int(hw.RxDescPktLen.Get(d)))
}

func (g *guest) waitFor(what string, cond func() bool) {
	g.t.Helper()
	testutil.WaitFor(g.t, what, cond, func() any { return g.d.Stats() })
}

// recvPeer receives one frame at the far end of the cable.
func (g *guest) recvPeer() []byte {
	g.t.Helper()
	buf := make([]byte, port.MaxFrameLen)
	type res struct {
		n   int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		n, err := g.peer.Recv(buf)
		ch <- res{n, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			g.t.Fatal(r.err)
		}
		return buf[:r.n]
	case <-time.After(5 * time.Second):
		g.t.Fatalf("no frame on the wire; stats %+v", g.d.Stats())
	}
	return nil
}

// frame builds a test frame of n bytes whose contents depend on seed: an
// IPv4/UDP header (so steering hashes it by ports) and a patterned payload.
func frame(n int, seed uint16) []byte {
	f := make([]byte, n)
	for i := range f {
		f[i] = byte(int(seed)*7 + i*13)
	}
	if n >= 42 {
		copy(f[0:6], []byte{0x52, 0x54, 0, 0, 0, 1})
		copy(f[6:12], []byte{0x52, 0x54, 0, 0, 0, 2})
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		f[14] = 0x45
		binary.BigEndian.PutUint16(f[20:], 0) // not a fragment
		f[23] = 17
		binary.BigEndian.PutUint16(f[34:], seed)
		binary.BigEndian.PutUint16(f[36:], 9)
	}
	return f
}

func mustEqual(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes % x..., want %d bytes % x...", what, len(got), head(got), len(want), head(want))
	}
}

func head(b []byte) []byte { return b[:min(len(b), 24)] }

func (s qpStatus) String() string {
	return fmt.Sprintf("tx_head=%d rx_head=%d error=%d/%d drops nobuf=%d toobig=%d badlen=%d tso=%d stalls=%d",
		s.TxHead, s.RxHead, s.Error, s.ErrorInfo, s.RxDropsNoBuf, s.RxDropsTooBig, s.TxDropsBadLen,
		s.TxTSOFrames, s.RxWireStalls)
}

// plugIn builds a datapath as the NIC does: the default engine of a Mux
// over backend, which reads it from here on.
func plugIn(t testing.TB, backend port.Port, cfg Config) (*Engine, *port.Mux) {
	t.Helper()
	mux := port.NewMux(backend, nil)
	ep, err := mux.Attach("ethernet", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Port = ep
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ep.Deliver(d)
	if err := mux.Start(); err != nil {
		t.Fatal(err)
	}
	return d, mux
}
