package ethring

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/pkthdr"
)

// TestRXFlowControl: frames that arrive before the driver posts buffers
// wait on the wire instead of being dropped, in order, and every time the
// wire waits it counts one rx_wire_stall.
func TestRXFlowControl(t *testing.T) {
	for _, tc := range []struct {
		name    string
		frames  int
		batch   int // buffers posted at a time
		stalls  uint32
		pairs   int
		ringLen uint32
	}{
		{"one at a time", 10, 1, 10, 1, 8},
		{"batches of 4", 20, 4, 5, 1, 8},
		{"a full ring then more", 20, 8, 3, 1, 8},
		{"more frames than the pipe holds", 200, 8, 25, 1, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: tc.pairs, depth: 64})
			g.setupPair(0, 8, tc.ringLen)
			sent := make(chan [][]byte, 1)
			go func() { // the far end sends everything at once; the pipe blocks it when full
				var fs [][]byte
				for i := 0; i < tc.frames; i++ {
					f := frame(60+i%1000, uint16(i))
					fs = append(fs, f)
					if g.peer.Send(f) != nil {
						break
					}
				}
				sent <- fs
			}()
			// No buffer yet: the wire stalls once, nothing is dropped.
			g.waitFor("first stall", func() bool { return g.qstatus(0).RxWireStalls == 1 })
			time.Sleep(2 * time.Millisecond)
			if st := g.qstatus(0); st.RxHead != 0 || st.RxDropsNoBuf != 0 {
				t.Fatalf("status %v", st)
			}
			var got [][]byte
			for done := 0; done < tc.frames; {
				n := min(tc.batch, tc.frames-done)
				// Post late, after the wire has surely waited.
				g.waitFor("stall before posting", func() bool { return g.qstatus(0).RxWireStalls == uint32(done/tc.batch+1) })
				g.postRX(0, n, bufSize)
				want := uint32(done + n)
				g.waitFor("frames placed", func() bool { return g.qstatus(0).RxHead == want })
				for c := uint32(done); c < want; c++ {
					got = append(got, append([]byte(nil), g.rxFrame(0, c)...))
				}
				done += n
			}
			fs := <-sent
			for i := range fs {
				mustEqual(t, "frame in order", got[i], fs[i])
			}
			st := g.qstatus(0)
			if st.RxDropsNoBuf != 0 || st.RxWireStalls != tc.stalls || st.Error != 0 {
				t.Fatalf("status %v, want %d stalls and no drop", st, tc.stalls)
			}
			s := g.d.Stats()
			if s.Pairs[0].RxWireStalls != uint64(tc.stalls) || s.Pairs[0].RxDropsNoBuf != 0 || s.RxDropsNoQueue != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestRXFlowControlUnblocks: a wire waiting for buffers resumes when the
// pair or the datapath stops, and the frames meant for a stopped pair are
// dropped instead of waiting for a later enable. No goroutine stays
// blocked (the race detector and Close's wait check that).
func TestRXFlowControlUnblocks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stop   func(g *guest)
		start  func(g *guest) // undo stop; nil: set up from scratch
		dropOf func(s Stats) uint64
	}{
		{"pair disabled", func(g *guest) { g.qpReg(0, hw.PairCtrl, 0) }, nil,
			func(s Stats) uint64 { return s.RxDropsNoQueue }},
		{"datapath disabled", func(g *guest) { g.d.SetEnabled(false) }, func(g *guest) { g.d.SetEnabled(true) },
			func(s Stats) uint64 { return s.RxDropsDisabled }},
		{"bus mastering off", func(g *guest) { g.d.SetBusMaster(false) }, func(g *guest) { g.d.SetBusMaster(true) },
			func(s Stats) uint64 { return s.RxDropsDisabled }},
		{"datapath reset", func(g *guest) { g.d.Reset() }, func(g *guest) { g.setupStatus(); g.d.SetEnabled(true) },
			func(s Stats) uint64 { return s.RxDropsDisabled }},
		{"queue error", func(g *guest) { g.qpReg(0, hw.PairRxTail, 0xffffffff) }, func(g *guest) { g.qpReg(0, hw.PairCtrl, 0) },
			func(s Stats) uint64 { return s.RxDropsNoQueue }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1, depth: 8})
			g.setupPair(0, 8, 8)
			const n = 5
			for i := 0; i < n; i++ {
				if err := g.peer.Send(frame(60, uint16(i))); err != nil {
					t.Fatal(err)
				}
			}
			g.waitFor("stall", func() bool { return g.qstatus(0).RxWireStalls == 1 })
			tc.stop(g)
			g.waitFor("held frames dropped", func() bool { return tc.dropOf(g.d.Stats()) == n })
			if tc.start != nil {
				tc.start(g)
			}
			// The wire reader is alive: with buffers, frames flow again.
			g.qpReg(0, hw.PairCtrl, 0)
			g.setupPair(0, 8, 8)
			g.postRX(0, 1, bufSize)
			f := frame(70, 99)
			if err := g.peer.Send(f); err != nil {
				t.Fatal(err)
			}
			g.waitFor("frame after restart", func() bool { return g.qstatus(0).RxHead == 1 })
			mustEqual(t, "frame after restart", g.rxFrame(0, 0), f)
		})
	}
}

// TestReceiveWaitsAndCloses: Receive called directly waits for a buffer,
// returns once one is posted, and a waiting Receive returns when the
// datapath closes.
func TestReceiveWaitsAndCloses(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 8)
	f := frame(80, 1)
	done := make(chan struct{})
	go func() {
		g.d.Receive(f)
		close(done)
	}()
	g.waitFor("stall", func() bool { return g.qstatus(0).RxWireStalls == 1 })
	select {
	case <-done:
		t.Fatal("Receive returned without a buffer")
	case <-time.After(5 * time.Millisecond):
	}
	g.postRX(0, 1, bufSize)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Receive still waiting after a buffer was posted")
	}
	mustEqual(t, "frame", g.rxFrame(0, 0), f)

	// Several callers wait at once; Close wakes them all.
	const waiters = 3
	returned := make(chan struct{}, waiters)
	for i := 0; i < waiters; i++ {
		go func() {
			g.d.Receive(frame(60, uint16(i)))
			returned <- struct{}{}
		}()
	}
	g.waitFor("stalls", func() bool { return g.qstatus(0).RxWireStalls == 1+waiters })
	closed := make(chan struct{})
	go func() {
		g.d.Close()
		close(closed)
	}()
	for i := 0; i < waiters; i++ {
		select {
		case <-returned:
		case <-time.After(5 * time.Second):
			t.Fatal("Close left a Receive waiting")
		}
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
}

// TestRXFlowControlOtherPairs: a wire held for one pair's buffers moves
// again when that pair gets a buffer, even while other pairs post theirs
// (their doorbells wake the reader, which finds nothing for its frame and
// waits again without counting another stall).
func TestRXFlowControlOtherPairs(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 2})
	g.setupPair(0, 8, 8)
	g.setupPair(1, 8, 8)
	// A frame steered to pair 0 (two pairs enabled).
	var f []byte
	for i := 0; ; i++ {
		f = frame(64, uint16(i))
		if g.d.steer(FlowHash(f)).q == 0 {
			break
		}
	}
	g.peer.Send(f)
	g.waitFor("stall", func() bool { return g.qstatus(0).RxWireStalls == 1 })
	for i := 0; i < 3; i++ {
		g.postRX(1, 1, bufSize)
		time.Sleep(time.Millisecond)
	}
	if st := g.qstatus(0); st.RxWireStalls != 1 || st.RxHead != 0 {
		t.Fatalf("pair 0 %v", st)
	}
	if st := g.qstatus(1); st.RxHead != 0 || st.RxWireStalls != 0 {
		t.Fatalf("pair 1 %v", st)
	}
	g.postRX(0, 1, bufSize)
	g.waitFor("frame on pair 0", func() bool { return g.qstatus(0).RxHead == 1 })
	mustEqual(t, "frame", g.rxFrame(0, 0), f)
}

// TestFlowHash: a flow hashes the same however its frames are wrapped (no,
// one or two VLAN tags of either type; IPv6 extension headers before the
// transport header) and whichever fragment of a datagram a frame is, and
// the ports count wherever the transport header lies. Steering used to
// skip one 802.1Q tag only (QinQ and 802.1ad frames hashed to 0) and took
// the first IPv6 extension header for the transport header.
func TestFlowHash(t *testing.T) {
	tcp4 := pkt{payload: pattern(100, 1)}
	tcp6 := pkt{v6: true, payload: pattern(100, 2)}
	udp4 := pkt{udp: true, payload: pattern(100, 3)}
	udp6 := pkt{v6: true, udp: true, payload: pattern(100, 4)}
	build := func(p pkt, mangle ...func([]byte) []byte) func(*testing.T) []byte {
		return func(t *testing.T) []byte {
			f := p.build(t)
			for _, m := range mangle {
				f = m(f)
			}
			return f
		}
	}
	ext := func(nh byte, hdr []byte) func([]byte) []byte {
		return func(f []byte) []byte { return withIPv6Ext(f, 14, nh, hdr) }
	}
	sport := func(p pkt, port uint16) func([]byte) []byte {
		return func(f []byte) []byte { binary.BigEndian.PutUint16(f[p.l4Off():], port); return f }
	}
	// ipv4Frag marks an IPv4 datagram as a fragment; a later one's
	// transport header is data, here changed to tell it apart.
	ipv4Frag := func(p pkt, flags uint16, later bool) func([]byte) []byte {
		return func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[p.l3Off()+6:], flags)
			if later {
				f[p.l4Off()] ^= 0xff
			}
			return f
		}
	}
	for _, tc := range []struct {
		name       string
		frame, ref func(*testing.T) []byte
		same       bool // hash equal to ref's (else different)
	}{
		{"802.1Q tag", build(pkt{vlan: true, payload: tcp4.payload}), build(tcp4), true},
		{"802.1ad tag", build(pkt{vlan: true, payload: tcp4.payload}, func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[12:], pkthdr.EtherTypeQinQ)
			return f
		}), build(tcp4), true},
		{"QinQ over IPv4", build(pkt{qinq: true, payload: tcp4.payload}), build(tcp4), true},
		{"QinQ over IPv6", build(pkt{qinq: true, v6: true, udp: true, payload: udp6.payload}), build(udp6), true},
		{"QinQ, another port", build(pkt{qinq: true, payload: tcp4.payload}, sport(pkt{qinq: true}, 1)), build(tcp4), false},
		{"IPv6 hop-by-hop", build(tcp6, ext(pkthdr.ProtoHopByHop, extHopByHop)), build(tcp6), true},
		{"IPv6 hop-by-hop, routing, destination options", build(udp6,
			ext(pkthdr.ProtoDestOpts, extDestOpts), ext(pkthdr.ProtoRouting, extRouting), ext(pkthdr.ProtoHopByHop, extHopByHop)),
			build(udp6), true},
		{"IPv6 atomic fragment", build(udp6, ext(pkthdr.ProtoFragment, extAtomic)), build(udp6), true},
		{"IPv6 destination options, another port", build(tcp6, sport(tcp6, 1), ext(pkthdr.ProtoDestOpts, extDestOpts)), build(tcp6), false},
		{"IPv6 fragments of one datagram", build(udp6, ext(pkthdr.ProtoFragment, extLaterFrag)),
			build(udp6, ext(pkthdr.ProtoFragment, extFirstFrag)), true},
		{"IPv4 fragments of one datagram", build(udp4, ipv4Frag(udp4, 0x0010, true)),
			build(udp4, ipv4Frag(udp4, 0x2000, false)), true},
		{"IPv4 unfragmented counts ports", build(udp4), build(udp4, ipv4Frag(udp4, 0x2000, false)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, ref := tc.frame(t), tc.ref(t)
			h, r := FlowHash(f), FlowHash(ref)
			if h == 0 || r == 0 || (h == r) != tc.same {
				t.Fatalf("hash %#x, reference %#x, want same %v\n% x\n% x", h, r, tc.same, f, ref)
			}
		})
	}
	arp := tcp4.build(t)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	if h := FlowHash(arp); h != 0 {
		t.Fatalf("ARP hashes to %#x", h)
	}

	// Flows that differ only in an even port (Linux's connect() takes
	// even ones) spread over 2, 3 and 4 pairs alike.
	for _, p := range []pkt{tcp4, tcp6} {
		for _, pairs := range []uint32{2, 3, 4} {
			hits := make([]int, pairs)
			for port := uint16(40000); port < 40000+2*64; port += 2 {
				f := p.build(t)
				binary.BigEndian.PutUint16(f[p.l4Off()+2:], port) // the destination: the guest's client
				hits[FlowHash(f)%pairs]++
			}
			for q, n := range hits {
				if n < 64/int(pairs)/2 {
					t.Errorf("v6 %v, %d pairs: pair %d got %d of 64 flows (%v)", p.v6, pairs, q, n, hits)
				}
			}
		}
	}
}
