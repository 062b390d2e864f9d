package ethring

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/pkthdr"
)

// The offload tests build their packets with gopacket, which computes
// checksums and lengths itself: the device's output must match those
// packets byte for byte.

// pkt describes a test packet.
type pkt struct {
	v6, vlan, udp bool
	qinq          bool // an 802.1ad service tag outside the 802.1Q one (implies vlan)
	payload       []byte
	seq           uint32
	id            uint16 // IPv4 identification
	fin, psh, cwr bool
	ece           bool
	tsOpt         bool // TCP timestamps option (a 32-byte TCP header)
}

var (
	srcMAC = net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	dstMAC = net.HardwareAddr{0x52, 0x54, 0, 0xab, 0xcd, 0xef}
	src4   = net.IPv4(10, 0, 0, 1).To4()
	dst4   = net.IPv4(10, 0, 0, 2).To4()
	src6   = net.ParseIP("fd00::1")
	dst6   = net.ParseIP("fd00::2:3")
)

// build serializes p with correct lengths and checksums.
func (p pkt) build(t testing.TB) []byte {
	t.Helper()
	var ls []gopacket.SerializableLayer
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv4}
	ipType := layers.EthernetTypeIPv4
	if p.v6 {
		ipType = layers.EthernetTypeIPv6
	}
	eth.EthernetType = ipType
	ls = append(ls, eth)
	if p.vlan || p.qinq {
		eth.EthernetType = layers.EthernetTypeDot1Q
		if p.qinq {
			eth.EthernetType = layers.EthernetTypeQinQ
			ls = append(ls, &layers.Dot1Q{VLANIdentifier: 7, Type: layers.EthernetTypeDot1Q})
		}
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: 42, Priority: 3, Type: ipType})
	}
	proto := layers.IPProtocolTCP
	if p.udp {
		proto = layers.IPProtocolUDP
	}
	var nl gopacket.NetworkLayer
	if p.v6 {
		ip := &layers.IPv6{Version: 6, NextHeader: proto, HopLimit: 64, SrcIP: src6, DstIP: dst6, TrafficClass: 0x20}
		ls, nl = append(ls, ip), ip
	} else {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: src4, DstIP: dst4, Id: p.id,
			Flags: layers.IPv4DontFragment, TOS: 0x10}
		ls, nl = append(ls, ip), ip
	}
	if p.udp {
		u := &layers.UDP{SrcPort: 5353, DstPort: 4000}
		u.SetNetworkLayerForChecksum(nl)
		ls = append(ls, u)
	} else {
		tcp := &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: p.seq, Ack: 0x01020304, Window: 502,
			ACK: true, FIN: p.fin, PSH: p.psh, CWR: p.cwr, ECE: p.ece}
		if p.tsOpt {
			tcp.Options = []layers.TCPOption{
				{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
				{OptionType: layers.TCPOptionKindTimestamps, OptionData: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
			}
		}
		tcp.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tcp)
	}
	ls = append(ls, gopacket.Payload(p.payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...); err != nil {
		t.Fatal(err)
	}
	// Without gopacket's padding to 60 bytes: drivers hand over frames
	// unpadded, and the device sends them so.
	f := buf.Bytes()
	l3 := p.l4Off() - 20
	n := l3 + int(binary.BigEndian.Uint16(f[l3+2:]))
	if p.v6 {
		l3 = p.l4Off() - 40
		n = l3 + 40 + int(binary.BigEndian.Uint16(f[l3+4:]))
	}
	if n < len(f) {
		f = f[:n]
	}
	return append([]byte(nil), f...)
}

// l4Off is the offset of the transport header of a packet p builds.
func (p pkt) l4Off() int {
	off := 14
	if p.vlan || p.qinq {
		off += 4
	}
	if p.qinq {
		off += 4
	}
	if p.v6 {
		return off + 40
	}
	return off + 20
}

// l3Off is the offset of the IP header of a packet p builds.
func (p pkt) l3Off() int {
	if p.v6 {
		return p.l4Off() - 40
	}
	return p.l4Off() - 20
}

// IPv6 extension headers for withIPv6Ext, next header left 0.
var (
	extHopByHop  = []byte{0, 0, 1, 4, 0, 0, 0, 0} // a PadN option
	extDestOpts  = []byte{0, 0, 1, 4, 0, 0, 0, 0}
	extRouting   = []byte{0, 0, 0, 0, 0, 0, 0, 0}             // type 0, no segments left
	extAtomic    = []byte{0, 0, 0x00, 0x00, 0, 0, 0x12, 0x34} // fragment header: offset 0, no more
	extFirstFrag = []byte{0, 0, 0x00, 0x01, 0, 0, 0x12, 0x34} // offset 0, more fragments
	extLaterFrag = []byte{0, 0, 0x00, 0x08, 0, 0, 0x12, 0x34} // offset 8
)

// withIPv6Ext returns IPv6 frame f (IPv6 header at l3) with the extension
// header hdr of type nh inserted first in the chain. The transport
// checksum stays right: the pseudo-header sums the transport length, which
// the extension headers are not part of.
func withIPv6Ext(f []byte, l3 int, nh byte, hdr []byte) []byte {
	out := append([]byte(nil), f[:l3+40]...)
	out = append(out, hdr...)
	out[l3+40] = out[l3+6]
	out[l3+6] = nh
	binary.BigEndian.PutUint16(out[l3+4:], binary.BigEndian.Uint16(out[l3+4:])+uint16(len(hdr)))
	return append(out, f[l3+40:]...)
}

// frameCsumOK is rxCsumOK on f parsed on its own, as Receive parses it.
func frameCsumOK(f []byte) bool {
	var h pkthdr.Headers
	_ = h.Parse(f)
	return rxCsumOK(f, &h)
}

// csumOff is the offset of the transport checksum from the transport header.
func (p pkt) csumOff() int {
	if p.udp {
		return 6
	}
	return 16
}

// onesSum is a plain RFC 1071 sum, independent of the device's.
func onesSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// partial turns a finished packet into what Linux hands a driver with
// CHECKSUM_PARTIAL: the checksum field holds the folded pseudo-header sum.
func (p pkt) partial(want []byte) []byte {
	f := append([]byte(nil), want...)
	l4 := p.l4Off()
	l4Len := len(f) - l4
	var ph []byte
	proto := byte(6)
	if p.udp {
		proto = 17
	}
	if p.v6 {
		ph = append(append(ph, src6.To16()...), dst6.To16()...)
		ph = append(ph, byte(l4Len>>24), byte(l4Len>>16), byte(l4Len>>8), byte(l4Len), 0, 0, 0, proto)
	} else {
		ph = append(append(ph, src4...), dst4...)
		ph = append(ph, 0, proto, byte(l4Len>>8), byte(l4Len))
	}
	binary.BigEndian.PutUint16(f[l4+p.csumOff():], onesSum(ph))
	return f
}

// txOff is the offload part of a frame's first descriptor.
type txOff struct {
	flags         uint16
	mss           uint16
	start, offset uint8
}

// postTXOff posts one frame made of segs, each in freshly allocated guest
// memory (so segments may exceed bufSize), with the offload fields in the
// first descriptor, and rings the doorbell.
func (g *guest) postTXOff(q int, o txOff, segs ...[]byte) {
	gp := &g.pairs[q]
	for i, s := range segs {
		slot := gp.txTail & (gp.txSize - 1)
		addr := g.alloc(uint64(max(len(s), 1)), 64)
		copy(g.bytes(addr, len(s)), s)
		flags := uint16(0)
		if i == 0 {
			flags = o.flags
		}
		if i == len(segs)-1 {
			flags |= hw.TxdEOP
		}
		g.writeTxDesc(q, slot, addr, uint16(len(s)), flags)
		if i == 0 {
			d := g.bytes(gp.txRing+uint64(slot)*hw.TxDescSize, hw.TxDescSize)
			hw.TxDescMSS.Put(d, o.mss)
			hw.TxDescCsumStart.Put(d, o.start)
			hw.TxDescCsumOffset.Put(d, o.offset)
		}
		gp.txTail++
	}
	g.qpReg(q, hw.PairTxTail, gp.txTail)
}

// split cuts f into n nearly equal pieces (n at most len(f)).
func split(f []byte, n int) [][]byte {
	var segs [][]byte
	for i := 0; i < n; i++ {
		segs = append(segs, f[len(f)*i/n:len(f)*(i+1)/n])
	}
	return segs
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed ^ byte(i>>8)
	}
	return b
}

// udpZeroPayload returns a payload that makes p's UDP checksum compute to
// zero (its last two bytes cancel the rest of the sum).
func udpZeroPayload(t testing.TB, p pkt) []byte {
	p.payload = append(pattern(62, 9), 0, 0)
	f := p.build(t)
	c := binary.BigEndian.Uint16(f[p.l4Off()+6:]) // ^sum with the last word 0
	binary.BigEndian.PutUint16(p.payload[62:], c)
	return p.payload
}

// tcpZeroPayload is udpZeroPayload for TCP.
func tcpZeroPayload(t testing.TB, p pkt) []byte {
	p.payload = append(pattern(64, 3), 0, 0)
	f := p.build(t)
	c := binary.BigEndian.Uint16(f[p.l4Off()+16:])
	binary.BigEndian.PutUint16(p.payload[64:], c)
	return p.payload
}

// TestTXChecksumOffload: NPFNIC_TXD_CSUM frames leave with the checksum
// gopacket computes for the same packet.
func TestTXChecksumOffload(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     pkt
		nsegs int
		zero  bool   // the payload makes the sum 0 ...
		field uint16 // ... and the checksum field must then be this
	}{
		{name: "TCP over IPv4", p: pkt{payload: pattern(1000, 1), seq: 7}, nsegs: 1},
		{name: "TCP over IPv4, odd payload, 3 segments", p: pkt{payload: pattern(1401, 2), tsOpt: true}, nsegs: 3},
		{name: "UDP over IPv4", p: pkt{udp: true, payload: pattern(333, 3)}, nsegs: 2},
		{name: "TCP over IPv6", p: pkt{v6: true, payload: pattern(1200, 4)}, nsegs: 1},
		{name: "UDP over IPv6", p: pkt{v6: true, udp: true, payload: pattern(77, 5)}, nsegs: 4},
		{name: "TCP over IPv4 with VLAN", p: pkt{vlan: true, payload: pattern(1400, 6)}, nsegs: 2},
		{name: "UDP over IPv6 with VLAN", p: pkt{vlan: true, v6: true, udp: true, payload: pattern(1000, 7)}, nsegs: 1},
		{name: "TCP, no payload", p: pkt{}, nsegs: 1},
		{name: "UDP sum 0 is sent as 0xffff", p: pkt{udp: true}, nsegs: 1, zero: true, field: 0xffff},
		{name: "UDP over IPv6 sum 0 is sent as 0xffff", p: pkt{v6: true, udp: true}, nsegs: 1, zero: true, field: 0xffff},
		{name: "TCP sum 0 stays 0", p: pkt{}, nsegs: 1, zero: true, field: 0},
		{name: "TCP over IPv4 with QinQ", p: pkt{qinq: true, payload: pattern(900, 8)}, nsegs: 2},
		// The UDP rule used to see one VLAN tag only.
		{name: "UDP over QinQ sum 0 is sent as 0xffff", p: pkt{qinq: true, udp: true}, nsegs: 1, zero: true, field: 0xffff},
		{name: "UDP over IPv6 with QinQ sum 0 is sent as 0xffff", p: pkt{qinq: true, v6: true, udp: true}, nsegs: 1, zero: true, field: 0xffff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			if tc.zero {
				if p.udp {
					p.payload = udpZeroPayload(t, p)
				} else {
					p.payload = tcpZeroPayload(t, p)
				}
			}
			want := p.build(t)
			if tc.zero {
				if got := binary.BigEndian.Uint16(want[p.l4Off()+p.csumOff():]); got != tc.field {
					t.Fatalf("reference checksum %#x, want %#x: the test's zero payload is wrong", got, tc.field)
				}
			}
			g := newGuest(t, guestOpts{pairs: 1})
			g.setupPair(0, 32, 32)
			in := p.partial(want)
			g.postTXOff(0, txOff{flags: hw.TxdCsum, start: uint8(p.l4Off()), offset: uint8(p.csumOff())}, split(in, tc.nsegs)...)
			mustEqual(t, "checksummed frame", g.recvPeer(), want)
			// The same frame without the flag goes out untouched.
			g.postTX(0, in)
			mustEqual(t, "frame without offload", g.recvPeer(), in)
			g.waitFor("tx_head", func() bool { return g.qstatus(0).TxHead == uint32(tc.nsegs+1) })
			if st := g.qstatus(0); st.Error != 0 || st.TxDropsBadLen != 0 || st.TxTSOFrames != 0 {
				t.Fatalf("status %v", st)
			}
			if s := g.d.Stats().Pairs[0]; s.TxCsumOffloads != 1 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestTXChecksumOffloadBad: a checksum field outside the frame drops it.
func TestTXChecksumOffloadBad(t *testing.T) {
	for _, tc := range []struct {
		name          string
		start, offset uint8
	}{
		{"field past the end", 60, 16},
		{"field straddling the end", 54, 5},
		{"start past the end", 200, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1})
			g.setupPair(0, 32, 32)
			g.postTXOff(0, txOff{flags: hw.TxdCsum, start: tc.start, offset: tc.offset}, pattern(60, 1))
			good := frame(64, 1)
			g.postTX(0, good)
			mustEqual(t, "the next frame", g.recvPeer(), good)
			g.waitFor("tx_head", func() bool { return g.qstatus(0).TxHead == 2 })
			if st := g.qstatus(0); st.TxDropsBadLen != 1 || st.Error != 0 {
				t.Fatalf("status %v", st)
			}
		})
	}
}

// tsoExpect builds the segments a super-packet of p must become.
func tsoExpect(t testing.TB, p pkt, mss int) [][]byte {
	var out [][]byte
	n := max(1, (len(p.payload)+mss-1)/mss)
	for i := 0; i < n; i++ {
		s := p
		s.payload = p.payload[i*mss : min(len(p.payload), (i+1)*mss)]
		s.seq = p.seq + uint32(i*mss)
		s.id = p.id + uint16(i)
		s.fin = p.fin && i == n-1
		s.psh = p.psh && i == n-1
		s.cwr = p.cwr && i == 0
		out = append(out, s.build(t))
	}
	return out
}

// superPacket builds the TSO frame for p as a driver hands it over: the
// headers of the whole packet, the TCP checksum field holding whatever the
// stack left there (here: garbage, which the device must ignore), and the
// IP length fields as they come (for a frame too long for them, wrapped).
func superPacket(t testing.TB, p pkt) []byte {
	f := p.build(t)
	binary.BigEndian.PutUint16(f[p.l4Off()+16:], 0xbeef)
	return f
}

// TestTSO: super-packets become the segments gopacket builds for the same
// flow, whatever the gather and however the payload divides by mss.
func TestTSO(t *testing.T) {
	maxV6 := hw.MaxTSOFrame - (18 + 40 + 20) // payload filling MaxTSOFrame with a VLAN tag
	for _, tc := range []struct {
		name  string
		p     pkt
		mss   int
		nsegs int // descriptors
	}{
		{"IPv4, 10000 bytes at 1448", pkt{payload: pattern(10000, 1), seq: 1000, id: 77, psh: true}, 1448, 3},
		{"IPv4, FIN PSH CWR ECE, timestamps", pkt{payload: pattern(5000, 2), seq: 5, id: 1, fin: true, psh: true, cwr: true, ece: true, tsOpt: true}, 1448, 1},
		{"IPv4, exact multiple of mss", pkt{payload: pattern(4000, 3), psh: true}, 1000, 2},
		{"IPv4, less than one mss", pkt{payload: pattern(100, 4), fin: true, cwr: true}, 1448, 1},
		{"IPv4, one byte more than mss", pkt{payload: pattern(1449, 4), fin: true, cwr: true}, 1448, 2},
		{"IPv4, sequence and ID wrap", pkt{payload: pattern(8000, 5), seq: 0xffffff00, id: 0xfffe}, 1460, 4},
		{"IPv4, mss 1", pkt{payload: pattern(9, 5), psh: true}, 1, 1},
		{"IPv4, mss 9000", pkt{payload: pattern(20000, 5), psh: true}, hw.TSOMaxMSS, 5},
		{"IPv4, 64 KiB in 18 descriptors", pkt{payload: pattern(65535-20-32, 6), psh: true, tsOpt: true}, 1448, hw.TxMaxSegs},
		{"IPv6, 5000 bytes at 1440", pkt{v6: true, payload: pattern(5000, 7), seq: 42, psh: true, fin: true}, 1440, 2},
		{"IPv6, CWR, timestamps", pkt{v6: true, payload: pattern(3000, 8), cwr: true, tsOpt: true}, 1428, 1},
		{"IPv4 with VLAN", pkt{vlan: true, payload: pattern(7000, 9), psh: true, cwr: true}, 1448, 3},
		{"IPv6 with VLAN, MaxTSOFrame", pkt{vlan: true, v6: true, payload: pattern(maxV6, 10), psh: true}, 1440, hw.TxMaxSegs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1, depth: 128})
			g.setupPair(0, 32, 32)
			p := tc.p
			sp := superPacket(t, p)
			want := tsoExpect(t, p, tc.mss)
			flag := uint16(hw.TxdTSO4)
			if p.v6 {
				flag = hw.TxdTSO6
			}
			g.postTXOff(0, txOff{flags: flag | hw.TxdCsum, mss: uint16(tc.mss), start: uint8(p.l4Off()), offset: 16},
				split(sp, tc.nsegs)...)
			for i, w := range want {
				got := g.recvPeer()
				mustEqual(t, "segment", got, w)
				fl := got[p.l4Off()+13]
				last := i == len(want)-1
				if fl&tcpFlagFIN != 0 && !last || fl&tcpFlagPSH != 0 && !last || fl&tcpFlagCWR != 0 && i != 0 {
					t.Fatalf("segment %d of %d has flags %#x", i, len(want), fl)
				}
			}
			g.waitFor("tx_head", func() bool { return g.qstatus(0).TxHead == uint32(tc.nsegs) })
			g.waitFor("tx_tso_frames", func() bool { return g.qstatus(0).TxTSOFrames == 1 })
			if st := g.qstatus(0); st.Error != 0 || st.TxDropsBadLen != 0 {
				t.Fatalf("status %v", st)
			}
			s := g.d.Stats().Pairs[0]
			if s.TxTSOFrames != 1 || s.TxTSOSegments != uint64(len(want)) || s.TxFrames != uint64(len(want)) {
				t.Fatalf("stats %+v, want %d segments", s, len(want))
			}
			// The pair goes on with ordinary frames.
			f := frame(100, 3)
			g.postTX(0, f)
			mustEqual(t, "next frame", g.recvPeer(), f)
		})
	}
}

// TestTSORejected: every TSO request the device cannot honour drops the
// frame, counts it in tx_drops_bad_len, and leaves the pair working.
func TestTSORejected(t *testing.T) {
	v4 := pkt{payload: pattern(3000, 1)}
	v6 := pkt{v6: true, payload: pattern(3000, 2)}
	ok4 := txOff{flags: hw.TxdTSO4, mss: 1448, start: 34}
	for _, tc := range []struct {
		name  string
		frame func(t *testing.T) []byte
		off   txOff
		nsegs int
	}{
		{"mss 0", func(t *testing.T) []byte { return superPacket(t, v4) }, txOff{flags: hw.TxdTSO4, start: 34}, 1},
		{"mss above the maximum", func(t *testing.T) []byte { return superPacket(t, v4) }, txOff{flags: hw.TxdTSO4, mss: hw.TSOMaxMSS + 1, start: 34}, 1},
		{"both TSO flags", func(t *testing.T) []byte { return superPacket(t, v4) }, txOff{flags: hw.TxdTSO4 | hw.TxdTSO6, mss: 1448, start: 34}, 1},
		{"TSO4 on IPv6", func(t *testing.T) []byte { return superPacket(t, v6) }, txOff{flags: hw.TxdTSO4, mss: 1448, start: 54}, 1},
		{"TSO6 on IPv4", func(t *testing.T) []byte { return superPacket(t, v4) }, txOff{flags: hw.TxdTSO6, mss: 1448, start: 34}, 1},
		{"csum_start not at the TCP header", func(t *testing.T) []byte { return superPacket(t, v4) }, txOff{flags: hw.TxdTSO4, mss: 1448, start: 36}, 1},
		{"csum_start beyond the frame", func(t *testing.T) []byte { return superPacket(t, v4)[:100] }, txOff{flags: hw.TxdTSO4, mss: 1448, start: 200}, 1},
		{"UDP", func(t *testing.T) []byte { return pkt{udp: true, payload: pattern(3000, 3)}.build(t) }, ok4, 1},
		{"not IP (ARP)", func(t *testing.T) []byte {
			f := superPacket(t, v4)
			binary.BigEndian.PutUint16(f[12:], 0x0806)
			return f
		}, ok4, 1},
		{"two VLAN tags", func(t *testing.T) []byte {
			f := superPacket(t, pkt{vlan: true, payload: pattern(3000, 4)})
			// An inner 802.1Q tag where the IP header would start.
			binary.BigEndian.PutUint16(f[16:], 0x8100)
			return f
		}, txOff{flags: hw.TxdTSO4, mss: 1448, start: 38}, 1},
		{"IPv4 version field wrong", func(t *testing.T) []byte {
			f := superPacket(t, v4)
			f[14] = 0x65
			return f
		}, ok4, 1},
		{"IPv4 fragment", func(t *testing.T) []byte {
			f := superPacket(t, v4)
			f[20] |= 0x20 // MF
			return f
		}, ok4, 1},
		{"IPv4 header length below 20", func(t *testing.T) []byte {
			f := superPacket(t, v4)
			f[14] = 0x44
			return f
		}, ok4, 1},
		{"QinQ", func(t *testing.T) []byte { return superPacket(t, pkt{qinq: true, payload: pattern(3000, 4)}) },
			txOff{flags: hw.TxdTSO4, mss: 1448, start: 42}, 1},
		{"IPv6 atomic fragment header", func(t *testing.T) []byte {
			return withIPv6Ext(superPacket(t, v6), 14, pkthdr.ProtoFragment, extAtomic)
		}, txOff{flags: hw.TxdTSO6, mss: 1448, start: 62}, 1},
		{"IPv6 routing header after hop-by-hop", func(t *testing.T) []byte {
			f := withIPv6Ext(superPacket(t, v6), 14, pkthdr.ProtoRouting, extRouting)
			return withIPv6Ext(f, 14, pkthdr.ProtoHopByHop, extHopByHop)
		}, txOff{flags: hw.TxdTSO6, mss: 1448, start: 70}, 1},
		{"IPv6 routing header", func(t *testing.T) []byte {
			f := superPacket(t, v6)
			f[14+6] = 43
			return f
		}, txOff{flags: hw.TxdTSO6, mss: 1448, start: 54}, 1},
		{"TCP data offset below 5", func(t *testing.T) []byte {
			f := superPacket(t, v4)
			f[34+12] = 0x40
			return f
		}, ok4, 1},
		{"TCP header cut short", func(t *testing.T) []byte { return superPacket(t, v4)[:34+16] }, ok4, 1},
		{"TCP options past the frame", func(t *testing.T) []byte {
			f := superPacket(t, v4)[:34+24]
			f[34+12] = 0xf0 // 60-byte header in 24 bytes
			return f
		}, ok4, 1},
		{"longer than MaxTSOFrame", func(t *testing.T) []byte {
			f := superPacket(t, pkt{v6: true, vlan: true, payload: pattern(hw.MaxTSOFrame-(18+40+20)+1, 5)})
			return f
		}, txOff{flags: hw.TxdTSO6, mss: 1440, start: 58}, hw.TxMaxSegs},
		{"more than TxMaxSegs descriptors", func(t *testing.T) []byte { return superPacket(t, v4) }, ok4, hw.TxMaxSegs + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1})
			g.setupPair(0, 32, 32)
			f := tc.frame(t)
			g.postTXOff(0, tc.off, split(f, tc.nsegs)...)
			good := frame(64, 1)
			g.postTX(0, good)
			mustEqual(t, "the next frame", g.recvPeer(), good)
			g.waitFor("tx_head", func() bool { return g.qstatus(0).TxHead == uint32(tc.nsegs+1) })
			if st := g.qstatus(0); st.TxDropsBadLen != 1 || st.Error != 0 || st.TxTSOFrames != 0 {
				t.Fatalf("status %v, want one bad-length drop", st)
			}
			if s := g.d.Stats().Pairs[0]; s.TxFrames != 1 || s.TxTSOFrames != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestRXChecksumStatus: NPFNIC_RXD_CSUM_OK is set exactly for TCP and UDP
// frames whose checksum is right, and no frame is dropped for a bad one.
func TestRXChecksumStatus(t *testing.T) {
	corrupt := func(at int) func([]byte) []byte {
		return func(f []byte) []byte { f[len(f)-at] ^= 0x40; return f }
	}
	for _, tc := range []struct {
		name   string
		p      pkt
		mangle func([]byte) []byte
		ok     bool
	}{
		{name: "TCP over IPv4", p: pkt{payload: pattern(1000, 1)}, ok: true},
		{name: "UDP over IPv4", p: pkt{udp: true, payload: pattern(999, 2)}, ok: true},
		{name: "TCP over IPv6", p: pkt{v6: true, payload: pattern(1400, 3), tsOpt: true}, ok: true},
		{name: "UDP over IPv6", p: pkt{v6: true, udp: true, payload: pattern(31, 4)}, ok: true},
		{name: "TCP over IPv4 with VLAN", p: pkt{vlan: true, payload: pattern(500, 5)}, ok: true},
		{name: "UDP over IPv6 with VLAN", p: pkt{vlan: true, v6: true, udp: true, payload: pattern(500, 6)}, ok: true},
		// One parser for every feature: RX checksums used to stop at one
		// VLAN tag and at an IPv6 fragment header even when it was atomic.
		{name: "TCP over IPv4 with QinQ", p: pkt{qinq: true, payload: pattern(500, 5)}, ok: true},
		{name: "UDP over IPv6 with QinQ", p: pkt{qinq: true, v6: true, udp: true, payload: pattern(500, 6)}, ok: true},
		{name: "TCP over IPv6 with hop-by-hop and destination options", p: pkt{v6: true, payload: pattern(700, 3)},
			mangle: func(f []byte) []byte {
				f = withIPv6Ext(f, 14, pkthdr.ProtoDestOpts, extDestOpts)
				return withIPv6Ext(f, 14, pkthdr.ProtoHopByHop, extHopByHop)
			}, ok: true},
		{name: "UDP over IPv6 atomic fragment", p: pkt{v6: true, udp: true, payload: pattern(300, 4)},
			mangle: func(f []byte) []byte { return withIPv6Ext(f, 14, pkthdr.ProtoFragment, extAtomic) }, ok: true},
		{name: "UDP over IPv6 first fragment", p: pkt{v6: true, udp: true, payload: pattern(300, 4)},
			mangle: func(f []byte) []byte { return withIPv6Ext(f, 14, pkthdr.ProtoFragment, extFirstFrag) }},
		{name: "TCP over IPv6 with a routing header", p: pkt{v6: true, payload: pattern(700, 3)},
			mangle: func(f []byte) []byte { return withIPv6Ext(f, 14, pkthdr.ProtoRouting, extRouting) }},
		{name: "short UDP padded to 60 bytes", p: pkt{udp: true, payload: pattern(3, 7)},
			mangle: func(f []byte) []byte { return append(f, make([]byte, 60-len(f))...) }, ok: true},
		{name: "TCP with a sum of 0 sent as 0xffff", p: pkt{payload: pattern(64, 3)}, mangle: func(f []byte) []byte {
			// 0 and 0xffff are the same number in ones' complement.
			p := pkt{payload: append(pattern(64, 3), 0, 0)}
			p.payload = tcpZeroPayload(t, p)
			f = p.build(t)
			binary.BigEndian.PutUint16(f[p.l4Off()+16:], 0xffff)
			return f
		}, ok: true},
		{name: "TCP over IPv4 corrupted", p: pkt{payload: pattern(1000, 1)}, mangle: corrupt(1)},
		{name: "UDP over IPv4 corrupted", p: pkt{udp: true, payload: pattern(999, 2)}, mangle: corrupt(500)},
		{name: "TCP over IPv6 corrupted", p: pkt{v6: true, payload: pattern(1400, 3)}, mangle: corrupt(1400)},
		{name: "UDP over IPv6 corrupted", p: pkt{v6: true, udp: true, payload: pattern(31, 4)}, mangle: corrupt(2)},
		{name: "TCP checksum field wrong", p: pkt{payload: pattern(100, 1)}, mangle: func(f []byte) []byte {
			f[34+17]++
			return f
		}},
		{name: "IPv4 address changed", p: pkt{payload: pattern(100, 1)}, mangle: func(f []byte) []byte {
			f[14+15]++ // the pseudo-header no longer matches (the IP checksum is not the device's business)
			return f
		}},
		{name: "UDP over IPv4 without checksum", p: pkt{udp: true, payload: pattern(10, 1)}, mangle: func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[34+6:], 0)
			return f
		}},
		{name: "UDP over IPv6 with checksum 0", p: pkt{v6: true, udp: true, payload: pattern(10, 1)}, mangle: func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[54+6:], 0)
			return f
		}},
		{name: "IPv4 fragment", p: pkt{udp: true, payload: pattern(100, 1)}, mangle: func(f []byte) []byte {
			f[20] |= 0x20
			return f
		}},
		{name: "IPv4 total length beyond the frame", p: pkt{payload: pattern(100, 1)}, mangle: func(f []byte) []byte {
			return f[:len(f)-1]
		}},
		{name: "UDP length beyond the datagram", p: pkt{udp: true, payload: pattern(100, 1)}, mangle: func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[34+4:], 200)
			return f
		}},
		{name: "ICMP", p: pkt{payload: pattern(100, 1)}, mangle: func(f []byte) []byte {
			f[14+9] = 1
			return f
		}},
		{name: "ARP", p: pkt{payload: pattern(100, 1)}, mangle: func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[12:], 0x0806)
			return f
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1})
			g.setupPair(0, 8, 8)
			g.postRX(0, 1, bufSize)
			f := tc.p.build(t)
			if tc.mangle != nil {
				f = tc.mangle(f)
			}
			g.d.Receive(f)
			if st := g.qstatus(0); st.RxHead != 1 || st.Error != 0 {
				t.Fatalf("status %v: the frame was not delivered", st)
			}
			mustEqual(t, "received frame", g.rxFrame(0, 0), f)
			want := uint16(hw.RxdDone)
			if tc.ok {
				want |= hw.RxdCsumOK
			}
			if got := hw.RxDescStatus.Get(g.rxDesc(0, 0)); got != want {
				t.Fatalf("status bits %#x, want %#x", got, want)
			}
		})
	}
}

// TestCsumArithmetic compares csumAdd/csumFold with the plain sum over
// every length and alignment of a buffer (a sum must not depend on where
// the 8-byte strides fall).
func TestCsumArithmetic(t *testing.T) {
	b := pattern(300, 0x5a)
	for i := range b {
		if i%17 == 0 {
			b[i] = 0xff
		}
	}
	for start := 0; start < 8; start += 2 {
		for n := 0; start+n <= len(b); n++ {
			s := b[start : start+n]
			if got, want := csumFold(csumAdd(0, s)), onesSum(s); got != want && !(got == 0xffff && want == 0) {
				t.Fatalf("start %d len %d: %#x, want %#x", start, n, got, want)
			}
		}
	}
	if got := csumFold(csumAdd(0, []byte{0xff, 0xff, 0xff, 0xff})); got != 0xffff {
		t.Fatalf("all ones folds to %#x", got)
	}
}
