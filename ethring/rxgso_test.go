package ethring

import (
	"bytes"
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

// hostSuperPacket is p as the host kernel hands a TAP reader with receive
// offloads a TCP super-packet: IP lengths over the whole packet, the TCP
// checksum field holding the pseudo-header seed (NEEDS_CSUM), and the GSO
// request that goes with it.
func hostSuperPacket(t testing.TB, p pkt, mss int) ([]byte, port.GSOInfo) {
	f := p.partial(p.build(t))
	typ := port.GSOTCPv4
	if p.v6 {
		typ = port.GSOTCPv6
	}
	if p.cwr {
		typ |= port.GSOECN
	}
	hlen := p.l4Off() + 20
	if p.tsOpt {
		hlen += 12
	}
	return f, port.GSOInfo{Type: typ, HdrLen: hlen, GSOSize: mss, CsumStart: p.l4Off(), CsumOffset: 16, NeedsCsum: true}
}

// receivedFrames returns the frames the pair received, in order, with
// their status bits.
func (g *guest) receivedFrames(q int) ([][]byte, []uint16) {
	var frames [][]byte
	var status []uint16
	for c := uint32(0); c != g.qstatus(q).RxHead; c++ {
		frames = append(frames, append([]byte(nil), g.rxFrame(q, c)...))
		status = append(status, hw.RxDescStatus.Get(g.rxDesc(q, c&(g.pairs[q].rxSize-1))))
	}
	return frames, status
}

// TestReceiveGSO: a super-packet from the host becomes exactly the
// segments the device's own TSO makes of it (lengths, IPv4 IDs, sequence
// numbers, flags and checksums as gopacket builds them), each received
// with RXD_CSUM_OK; a frame with a partial checksum gets its checksum.
func TestReceiveGSO(t *testing.T) {
	for _, tc := range gsoCases {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1})
			g.setupPair(0, 8, 64)
			g.postRX(0, 64, bufSize)
			f, gso := hostSuperPacket(t, tc.p, tc.mss)
			g.d.ReceiveGSO(f, gso)
			want := tsoExpect(t, tc.p, tc.mss)
			got, status := g.receivedFrames(0)
			if len(got) != len(want) {
				t.Fatalf("%d frames received, want %d segments; stats %+v", len(got), len(want), g.d.Stats())
			}
			for i := range want {
				mustEqual(t, "segment", got[i], want[i])
				if status[i] != hw.RxdDone|hw.RxdCsumOK {
					t.Fatalf("segment %d status %#x", i, status[i])
				}
			}
			if s := g.d.Stats(); s.RxGSOFrames != 1 || s.RxGSOSegments != uint64(len(want)) || s.RxGSOBad != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
	for _, p := range []pkt{
		{payload: pattern(1000, 1), psh: true},
		{udp: true, payload: pattern(1400, 2)},
		{v6: true, udp: true, vlan: true, payload: pattern(77, 3)},
	} {
		g := newGuest(t, guestOpts{pairs: 1})
		g.setupPair(0, 8, 8)
		g.postRX(0, 1, bufSize)
		want := p.build(t)
		g.d.ReceiveGSO(p.partial(want), port.GSOInfo{NeedsCsum: true, CsumStart: p.l4Off(), CsumOffset: p.csumOff()})
		got, status := g.receivedFrames(0)
		if len(got) != 1 || !bytes.Equal(got[0], want) || status[0] != hw.RxdDone|hw.RxdCsumOK {
			t.Fatalf("partial checksum of %+v: received %d frames, status %v; stats %+v", p, len(got), status, g.d.Stats())
		}
		if s := g.d.Stats(); s.RxGSOCsums != 1 {
			t.Fatalf("rx_gso_csums %d", s.RxGSOCsums)
		}
	}
}

// TestReceiveGSORejected: a request the device does not carry out drops
// the frame whole (not a segment of it reaches the ring), counts it, and
// the next frame is received as usual.
func TestReceiveGSORejected(t *testing.T) {
	v4 := pkt{payload: pattern(5000, 1)}
	v6 := pkt{v6: true, payload: pattern(5000, 2)}
	udp := pkt{udp: true, payload: pattern(100, 3)}
	for _, tc := range []struct {
		name string
		p    pkt
		edit func(f []byte, g *port.GSOInfo) []byte
	}{
		{"mss 0", v4, func(f []byte, g *port.GSOInfo) []byte { g.GSOSize = 0; return f }},
		{"segments longer than a frame", v4, func(f []byte, g *port.GSOInfo) []byte { g.GSOSize = 1500; return f }},
		{"csum_start not at TCP", v4, func(f []byte, g *port.GSOInfo) []byte { g.CsumStart = 14; return f }},
		{"csum_offset not the TCP checksum", v4, func(f []byte, g *port.GSOInfo) []byte { g.CsumOffset = 6; return f }},
		{"segmentation without NEEDS_CSUM", v4, func(f []byte, g *port.GSOInfo) []byte { g.NeedsCsum = false; return f }},
		{"TCPv4 request on IPv6", v6, func(f []byte, g *port.GSOInfo) []byte { g.Type = port.GSOTCPv4; return f }},
		{"TCPv6 request on IPv4", v4, func(f []byte, g *port.GSOInfo) []byte { g.Type = port.GSOTCPv6; return f }},
		{"UDP segmentation", v4, func(f []byte, g *port.GSOInfo) []byte { g.Type = 3; return f }},
		{"not TCP", udp, func(f []byte, g *port.GSOInfo) []byte { g.CsumStart = udp.l4Off(); return f }},
		{"truncated headers", v4, func(f []byte, g *port.GSOInfo) []byte { return f[:40] }},
		{"checksum field outside the frame", udp, func(f []byte, g *port.GSOInfo) []byte {
			*g = port.GSOInfo{NeedsCsum: true, CsumStart: len(f) - 1, CsumOffset: 0}
			return f
		}},
		{"partial checksum on a frame longer than MaxFrame", pkt{payload: pattern(3000, 4)}, func(f []byte, g *port.GSOInfo) []byte {
			*g = port.GSOInfo{NeedsCsum: true, CsumStart: 34, CsumOffset: 16}
			return f
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1})
			g.setupPair(0, 8, 8)
			g.postRX(0, 8, bufSize)
			f, gso := hostSuperPacket(t, tc.p, 1448)
			f = tc.edit(f, &gso)
			g.d.ReceiveGSO(f, gso)
			if s := g.d.Stats(); s.RxGSOBad != 1 || s.Pairs[0].RxFrames != 0 {
				t.Fatalf("stats %+v: want the request refused and nothing received", s)
			}
			next := frame(100, 5)
			g.d.Receive(next)
			got, _ := g.receivedFrames(0)
			if len(got) != 1 || !bytes.Equal(got[0], next) {
				t.Fatalf("the next frame: received %d frames", len(got))
			}
		})
	}
}

// TestReceiveGSOWaitsForBuffers: segments beyond the posted buffers wait
// for the driver (back-pressure to the host, as for single frames), and
// arrive in order once it posts more.
func TestReceiveGSOWaitsForBuffers(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 16)
	g.postRX(0, 3, bufSize)
	p := pkt{payload: pattern(10*1448, 7), seq: 99, psh: true}
	f, gso := hostSuperPacket(t, p, 1448)
	done := make(chan struct{})
	go func() {
		g.d.ReceiveGSO(f, gso)
		close(done)
	}()
	g.waitFor("a wire stall after 3 segments", func() bool {
		s := g.d.Stats().Pairs[0]
		return s.RxFrames == 3 && s.RxWireStalls >= 1
	})
	g.postRX(0, 7, bufSize)
	<-done
	want := tsoExpect(t, p, 1448)
	got, _ := g.receivedFrames(0)
	if len(got) != len(want) {
		t.Fatalf("%d frames, want %d", len(got), len(want))
	}
	for i := range want {
		mustEqual(t, "segment", got[i], want[i])
	}
}

// FuzzReceiveGSO: whatever the header and frame, ReceiveGSO neither
// panics nor hands the ring anything but frames of at most MaxFrame bytes,
// and every segment it cuts from a TCP super-packet carries a correct
// checksum.
func FuzzReceiveGSO(f *testing.F) {
	for _, tc := range gsoCases[:3] {
		sp, gso := hostSuperPacket(f, tc.p, tc.mss)
		f.Add(sp, uint8(gso.Type), uint16(gso.GSOSize), uint16(gso.CsumStart), uint16(gso.CsumOffset), true)
	}
	u := pkt{udp: true, payload: pattern(50, 1)}
	f.Add(u.partial(u.build(f)), uint8(0), uint16(0), uint16(u.l4Off()), uint16(6), true)
	g := newGuest(f, guestOpts{pairs: 1, dropNoBuf: true})
	g.setupPair(0, 8, 64)
	f.Fuzz(func(t *testing.T, frame []byte, typ uint8, mss, start, off uint16, needsCsum bool) {
		g.t = t // the guest's helpers fail this input, not the F
		before := g.d.Stats()
		head := g.qstatus(0).RxHead
		g.postRX(0, 64-int(g.pairs[0].rxTail-head), bufSize)
		gso := port.GSOInfo{Type: port.GSOType(typ), GSOSize: int(mss), CsumStart: int(start), CsumOffset: int(off), NeedsCsum: needsCsum}
		g.d.ReceiveGSO(frame, gso)
		after := g.d.Stats()
		for c := head; c != g.qstatus(0).RxHead; c++ {
			got := g.rxFrame(0, c)
			if len(got) > hw.MaxFrame {
				t.Fatalf("a %d-byte frame reached the ring", len(got))
			}
			if after.RxGSOFrames > before.RxGSOFrames && !frameCsumOK(got) {
				t.Fatalf("segment %d has a bad checksum: % x", c-head, got)
			}
		}
		if s := after.Pairs[0]; s.Error != 0 {
			t.Fatalf("pair error %d", s.Error)
		}
	})
}
