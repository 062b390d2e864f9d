package ethring

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// lroOn sets PAIR_CTRL_RX_LRO on pair q, which is enabled.
func (g *guest) lroOn(q int) { g.qpReg(q, hw.PairCtrl, hw.PairCtrlEnable|hw.PairCtrlRxLRO) }

// checkChain checks that the n descriptors from counter c0 hold want as
// one large-receive chain: buffers filled in order to bufLen, the first
// descriptor with the GSO bit, the chain length and gso_size mss, the
// others with RXD_CONT.
func (g *guest) checkChain(q int, c0 uint32, n int, bufLen int, want []byte, v6 bool, mss int) {
	g.t.Helper()
	gp := &g.pairs[q]
	var got []byte
	rem := len(want)
	for k := 0; k < n; k++ {
		d := g.rxDesc(q, (c0+uint32(k))&(gp.rxSize-1))
		part := min(bufLen, rem)
		rem -= part
		st, plen, gso := hw.RxDescStatus.Get(d), int(hw.RxDescPktLen.Get(d)), int(hw.RxDescGSOSize.Get(d))
		wantSt, wantGSO := uint16(hw.RxdDone|hw.RxdCont), 0
		if k == 0 {
			wantSt = hw.RxdDone | hw.RxdCsumOK | hw.RxdGSOTCP4 | uint16(n)<<hw.RxdChainShift
			if v6 {
				wantSt = hw.RxdDone | hw.RxdCsumOK | hw.RxdGSOTCP6 | uint16(n)<<hw.RxdChainShift
			}
			wantGSO = mss
		}
		if st != wantSt || plen != part || gso != wantGSO {
			g.t.Fatalf("chain descriptor %d of %d: status %#x pkt_len %d gso_size %d, want %#x %d %d",
				k, n, st, plen, gso, wantSt, part, wantGSO)
		}
		got = append(got, g.bytes(hw.RxDescAddr.Get(d), plen)...)
	}
	if rem != 0 {
		g.t.Fatalf("%d bytes left over a chain of %d", rem, n)
	}
	mustEqual(g.t, "chain", got, want)
}

// TestReceiveLRO: a super-packet from the host arrives whole over a chain
// of RX descriptors when the driver asked for it and the chain can be
// written; otherwise it is cut into segments as without large receive,
// and no descriptor beyond the ones posted is ever written.
func TestReceiveLRO(t *testing.T) {
	v4 := pkt{payload: pattern(65535-20-32, 1), seq: 7, id: 3, psh: true, tsOpt: true}
	v6 := pkt{v6: true, payload: pattern(60000, 2), seq: 9, psh: true, fin: true}
	vlan := pkt{vlan: true, payload: pattern(10000, 3), cwr: true}
	small := pkt{payload: pattern(1000, 4), psh: true}
	for _, tc := range []struct {
		name      string
		p         pkt
		mss       int
		ring      uint32
		bufLen    uint16
		post      int  // buffers posted before the super-packet (0: the ring)
		noLRO     bool // the driver leaves PAIR_CTRL_RX_LRO clear
		dropNoBuf bool
		firstBuf  uint16 // buf_len of the first posted buffer, if not 0
		zeroBuf   int    // post buffer k (k > 0) with buf_len 0
		skip      int    // small frames received (and reposted) first: the chain wraps
		chain     int    // descriptors of the chain; 0: cut into segments
	}{
		{name: "IPv4 64 KiB", p: v4, mss: 1448, ring: 64, bufLen: bufSize, chain: 33},
		{name: "IPv6 60000 bytes", p: v6, mss: 1428, ring: 64, bufLen: bufSize, chain: 30},
		{name: "IPv4 with a VLAN tag, CWR", p: vlan, mss: 1448, ring: 16, bufLen: bufSize, chain: 5},
		{name: "fits one buffer", p: small, mss: 500, ring: 8, bufLen: bufSize, chain: 1},
		{name: "buffers of 1500 bytes", p: v4, mss: 1448, ring: 64, bufLen: 1500, chain: 44},
		{name: "chain cut by the ring's wrap", p: v4, mss: 1448, ring: 64, bufLen: bufSize, skip: 50, chain: 33},
		{name: "driver did not ask", p: v4, mss: 1448, ring: 64, bufLen: bufSize, noLRO: true},
		{name: "more than RX_CHAIN_MAX buffers", p: v4, mss: 900, ring: 128, bufLen: 1024},
		{name: "first buffer too small for the headers", p: vlan, mss: 1448, ring: 16, bufLen: bufSize, firstBuf: 40},
		{name: "a buffer of 0 bytes", p: vlan, mss: 1448, ring: 16, bufLen: bufSize, zeroBuf: 2},
		{name: "ring nearly full, frames dropped without buffers", p: v4, mss: 1448, ring: 64, bufLen: bufSize, post: 10, dropNoBuf: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1, dropNoBuf: tc.dropNoBuf})
			g.setupPair(0, 8, tc.ring)
			if !tc.noLRO {
				g.lroOn(0)
			}
			// Descriptors never posted carry a sentinel the device must leave.
			for s := uint32(0); s < tc.ring; s++ {
				hw.RxDescStatus.Put(g.rxDesc(0, s), 0xeeee)
			}
			post := tc.post
			if post == 0 {
				post = int(tc.ring)
			}
			g.postRX(0, post, tc.bufLen)
			if tc.firstBuf != 0 {
				hw.RxDescBufLen.Put(g.rxDesc(0, 0), tc.firstBuf)
			}
			if tc.zeroBuf != 0 {
				hw.RxDescBufLen.Put(g.rxDesc(0, uint32(tc.zeroBuf)), 0)
			}
			for i := 0; i < tc.skip; i++ {
				g.d.Receive(frame(100, uint16(i)))
			}
			if tc.skip > 0 {
				g.postRX(0, tc.skip, tc.bufLen)
			}
			f, gso := hostSuperPacket(t, tc.p, tc.mss)
			g.d.ReceiveGSO(f, gso)
			s, ps := g.d.Stats(), g.d.Stats().Pairs[0]
			c0 := uint32(tc.skip)
			if tc.chain > 0 {
				if s.RxGSOChains != 1 || s.RxGSOSegments != 0 || ps.RxLROFrames != 1 || ps.RxLRODescs != uint64(tc.chain) {
					t.Fatalf("not one chain of %d: stats %+v", tc.chain, s)
				}
				if h := g.qstatus(0).RxHead; h != c0+uint32(tc.chain) {
					t.Fatalf("rx_head %d, want %d", h, c0+uint32(tc.chain))
				}
				g.checkChain(0, c0, tc.chain, int(tc.bufLen), tc.p.build(t), tc.p.v6, tc.mss)
			} else {
				want := tsoExpect(t, tc.p, tc.mss)
				if s.RxGSOChains != 0 || ps.RxLROFrames != 0 || s.RxGSOSegments != uint64(len(want)) {
					t.Fatalf("a chain where %d segments were due: stats %+v", len(want), s)
				}
				// Every segment that found a buffer is as without large receive.
				for c := c0; c != g.qstatus(0).RxHead; c++ {
					d := g.rxDesc(0, c&(tc.ring-1))
					if st := hw.RxDescStatus.Get(d); st&hw.RxdDone == 0 || st&^(hw.RxdDone|hw.RxdCsumOK) != 0 {
						t.Fatalf("segment descriptor %d status %#x", c, st)
					}
				}
				if tc.firstBuf == 0 && tc.zeroBuf == 0 {
					n := min(len(want), post)
					got, _ := g.receivedFrames(0)
					if len(got) != n {
						t.Fatalf("%d frames received, want %d", len(got), n)
					}
					for i := range got {
						mustEqual(t, "segment", got[i], want[i])
					}
				}
			}
			for c := c0 + uint32(post); c < tc.ring; c++ {
				if st := hw.RxDescStatus.Get(g.rxDesc(0, c)); st != 0xeeee {
					t.Fatalf("descriptor %d, never posted, written: status %#x", c, st)
				}
			}
		})
	}
}

// TestReceiveLROWaitsForBuffers: with too few buffers posted for the
// chain, the wire waits for the driver (one wire stall) rather than cut
// the super-packet, and the chain lands once the driver posted enough;
// with the whole ring posted and still too small, it is cut into segments
// the driver takes as they come.
func TestReceiveLROWaitsForBuffers(t *testing.T) {
	p := pkt{payload: pattern(40000, 5), psh: true}
	t.Run("waits", func(t *testing.T) {
		g := newGuest(t, guestOpts{pairs: 1})
		g.setupPair(0, 8, 64)
		g.lroOn(0)
		g.postRX(0, 10, bufSize)
		f, gso := hostSuperPacket(t, p, 1448)
		done := make(chan struct{})
		go func() { g.d.ReceiveGSO(f, gso); close(done) }()
		g.waitFor("a wire stall", func() bool { return g.qstatus(0).RxWireStalls == 1 })
		if h := g.qstatus(0).RxHead; h != 0 {
			t.Fatalf("rx_head %d while the chain waits", h)
		}
		g.postRX(0, 30, bufSize)
		<-done
		if s := g.d.Stats(); s.RxGSOChains != 1 || s.RxGSOSegments != 0 {
			t.Fatalf("stats %+v", s)
		}
		g.checkChain(0, 0, 20, bufSize, p.build(t), false, 1448)
	})
	t.Run("ring too small", func(t *testing.T) {
		g := newGuest(t, guestOpts{pairs: 1})
		g.setupPair(0, 8, 16)
		g.lroOn(0)
		g.postRX(0, 16, bufSize)
		f, gso := hostSuperPacket(t, p, 1448)
		done := make(chan struct{})
		go func() { g.d.ReceiveGSO(f, gso); close(done) }()
		want := tsoExpect(t, p, 1448)
		var got [][]byte
		for c := uint32(0); len(got) < len(want); {
			g.waitFor("a segment", func() bool { return g.qstatus(0).RxHead != c })
			for ; c != g.qstatus(0).RxHead; c++ {
				got = append(got, append([]byte(nil), g.rxFrame(0, c)...))
				g.postRX(0, 1, bufSize)
			}
		}
		<-done
		for i := range want {
			mustEqual(t, "segment", got[i], want[i])
		}
		if s := g.d.Stats(); s.RxGSOChains != 0 || s.RxGSOSegments != uint64(len(want)) {
			t.Fatalf("stats %+v", s)
		}
	})
}

// TestLROFinish: the checksums of a super-packet are finished whole, from
// whatever the host left in them.
func TestLROFinish(t *testing.T) {
	for _, p := range []pkt{
		{payload: pattern(30000, 1), tsOpt: true},
		{v6: true, payload: pattern(30001, 2)},
		{vlan: true, payload: pattern(3, 3), fin: true},
	} {
		want := p.build(t)
		f, _ := hostSuperPacket(t, p, 1448)
		f[p.l4Off()+tcpCsum] ^= 0x5a // the seed is not trusted
		if !p.v6 {
			f[p.l3Off()+ipv4Csum] ^= 0xa5
		}
		tp, ok := tsoParse(f, p.v6, p.l4Off())
		if !ok {
			t.Fatalf("%+v does not parse", p)
		}
		lroFinish(f, &tp)
		if !bytes.Equal(f, want) {
			t.Fatalf("finished %x..., want %x...", head(f[p.l3Off():]), head(want[p.l3Off():]))
		}
		if !rxCsumOK(f, &tp.Headers) {
			t.Fatal("rxCsumOK refuses the finished frame")
		}
	}
}

// TestPairCtrlLRO: PAIR_CTRL_RX_LRO reads back, takes effect at every
// write, and a reset clears it.
func TestPairCtrlLRO(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 8)
	p := g.d.Pair(0)
	if v := p.ReadReg(hw.PairCtrl); v&hw.PairCtrlRxLRO != 0 {
		t.Fatalf("CTRL %#x before the bit was written", v)
	}
	g.lroOn(0)
	if v := p.ReadReg(hw.PairCtrl); v&(hw.PairCtrlRxLRO|hw.PairCtrlEnable) != hw.PairCtrlRxLRO|hw.PairCtrlEnable {
		t.Fatalf("CTRL %#x after RX_LRO", v)
	}
	g.qpReg(0, hw.PairCtrl, hw.PairCtrlEnable)
	if v := p.ReadReg(hw.PairCtrl); v&hw.PairCtrlRxLRO != 0 {
		t.Fatalf("CTRL %#x after clearing RX_LRO", v)
	}
	g.lroOn(0)
	g.d.Reset()
	if v := p.ReadReg(hw.PairCtrl); v&hw.PairCtrlRxLRO != 0 {
		t.Fatalf("CTRL %#x after a reset", v)
	}
}

// TestLRONeverBeyondPosted: for random rings, posted counts, buffer sizes
// and super-packets, the device writes no descriptor the driver did not
// post, no buffer byte beyond a posted buffer's buf_len, and rx_head never
// passes the tail; a chain, when there is one, covers the frame exactly.
func TestLRONeverBeyondPosted(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 11))
	chains := 0
	for iter := 0; iter < 150; iter++ {
		ring := uint32(8) << rng.IntN(5) // 8..128
		post := 1 + rng.IntN(int(ring))
		p := pkt{v6: rng.IntN(2) == 1, payload: pattern(1+rng.IntN(60000), uint8(iter)), psh: true}
		mss := 500 + rng.IntN(949)
		g := newGuest(t, guestOpts{pairs: 1, dropNoBuf: true})
		g.setupPair(0, 8, ring)
		g.lroOn(0)
		gp := &g.pairs[0]
		for s := uint32(0); s < ring; s++ {
			hw.RxDescStatus.Put(g.rxDesc(0, s), 0xeeee)
			b := g.bytes(gp.rxBufs[s], bufSize)
			for i := range b {
				b[i] = 0xa5
			}
		}
		g.postRX(0, post, bufSize)
		lens := make([]int, ring)
		for s := 0; s < post; s++ {
			lens[s] = rng.IntN(bufSize + 1)
			if rng.IntN(3) > 0 {
				lens[s] = bufSize - rng.IntN(64)
			}
			hw.RxDescBufLen.Put(g.rxDesc(0, uint32(s)), uint16(lens[s]))
		}
		f, gso := hostSuperPacket(t, p, mss)
		flen := len(f)
		g.d.ReceiveGSO(f, gso)
		head := g.qstatus(0).RxHead
		if head > uint32(post) {
			t.Fatalf("iter %d: rx_head %d beyond the %d posted", iter, head, post)
		}
		for s := uint32(0); s < ring; s++ {
			d := g.rxDesc(0, s)
			if int(s) >= post {
				if st := hw.RxDescStatus.Get(d); st != 0xeeee {
					t.Fatalf("iter %d: descriptor %d never posted, written: status %#x", iter, s, st)
				}
			}
			b := g.bytes(gp.rxBufs[s], bufSize)
			for i := lens[s]; i < bufSize; i++ {
				if b[i] != 0xa5 {
					t.Fatalf("iter %d: buffer %d (buf_len %d, posted %v) written at %d", iter, s, lens[s], int(s) < post, i)
				}
			}
		}
		if ps := g.d.Stats().Pairs[0]; ps.RxLROFrames == 1 {
			chains++
			d := g.rxDesc(0, 0)
			n := int(hw.RxDescStatus.Get(d) >> hw.RxdChainShift)
			sum := 0
			for k := 0; k < n; k++ {
				sum += int(hw.RxDescPktLen.Get(g.rxDesc(0, uint32(k))))
			}
			if n < 1 || n > hw.RxChainMax || uint32(n) != head || sum != flen {
				t.Fatalf("iter %d: chain of %d with rx_head %d holds %d bytes of %d", iter, n, head, sum, flen)
			}
		}
	}
	if chains < 10 || chains > 140 {
		t.Fatalf("%d chains in 150 tries: the cases do not exercise both paths", chains)
	}
	t.Logf("%d chains, %d cut into segments", chains, 150-chains)
}
