package pkthdr

import (
	"encoding/binary"
	"errors"
	"testing"
)

// spec describes a test frame; build lays it out byte by byte, so the
// tests do not depend on the parser (or gopacket) to know where headers go.
type spec struct {
	tags      []uint16 // VLAN tag types, outer first
	etherType uint16   // 0: IPv4, or IPv6 with v6
	v6        bool
	version   byte // 0: 4 or 6
	ipOpts    int  // IPv4 option bytes (NOPs), a multiple of 4
	ihl       int  // 0: from ipOpts
	frag      uint16
	totalLen  int   // IPv4 total length, IPv6 payload length; -1: computed
	ext       []ext // IPv6 extension headers, in order
	proto     byte  // 0: TCP
	doff      int   // TCP data offset in bytes; 0: 20
	sport     uint16
	dport     uint16
	payload   int
}

type ext struct {
	nh   byte // which header this is
	len  int  // bytes, a multiple of 8 (fragment: 8)
	frag uint16
}

func (s spec) build() []byte {
	f := make([]byte, 12, 256)
	for i := range f {
		f[i] = byte(0x50 + i)
	}
	et := s.etherType
	if et == 0 {
		et = EtherTypeIPv4
		if s.v6 {
			et = EtherTypeIPv6
		}
	}
	for i, t := range s.tags {
		f = binary.BigEndian.AppendUint16(f, t)
		f = binary.BigEndian.AppendUint16(f, uint16(100+i))
	}
	f = binary.BigEndian.AppendUint16(f, et)
	l3 := len(f)
	if et != EtherTypeIPv4 && et != EtherTypeIPv6 {
		return append(f, make([]byte, s.payload)...)
	}
	proto := s.proto
	if proto == 0 {
		proto = ProtoTCP
	}
	first := proto
	if len(s.ext) > 0 {
		first = s.ext[0].nh
	}
	ver := s.version
	if s.v6 {
		if ver == 0 {
			ver = 6
		}
		f = append(f, ver<<4, 0, 0, 0, 0, 0, first, 64)
		for i := range 32 {
			f = append(f, byte(0xa0+i))
		}
		for i, e := range s.ext {
			nh := proto
			if i+1 < len(s.ext) {
				nh = s.ext[i+1].nh
			}
			h := make([]byte, e.len)
			h[0] = nh
			if e.nh == ProtoFragment {
				binary.BigEndian.PutUint16(h[2:], e.frag)
			} else {
				h[1] = byte(e.len/8 - 1)
			}
			f = append(f, h...)
		}
	} else {
		if ver == 0 {
			ver = 4
		}
		ihl := s.ihl
		if ihl == 0 {
			ihl = 20 + s.ipOpts
		}
		f = append(f, ver<<4|byte(ihl/4), 0, 0, 0, 0x12, 0x34)
		f = binary.BigEndian.AppendUint16(f, s.frag)
		f = append(f, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2)
		for range s.ipOpts {
			f = append(f, 1)
		}
	}
	l4 := len(f)
	switch proto {
	case ProtoTCP:
		doff := s.doff
		if doff == 0 {
			doff = 20
		}
		f = binary.BigEndian.AppendUint16(f, s.sport)
		f = binary.BigEndian.AppendUint16(f, s.dport)
		f = append(f, 0, 0, 0, 1, 0, 0, 0, 2, byte(doff/4)<<4, 0x10, 1, 0, 0, 0, 0, 0)
		for len(f) < l4+doff {
			f = append(f, 1)
		}
	case ProtoUDP:
		f = binary.BigEndian.AppendUint16(f, s.sport)
		f = binary.BigEndian.AppendUint16(f, s.dport)
		f = binary.BigEndian.AppendUint16(f, uint16(8+s.payload))
		f = append(f, 0, 0)
	}
	for i := range s.payload {
		f = append(f, byte(i))
	}
	n := s.totalLen
	if s.v6 {
		if n < 0 {
			n = len(f) - l3 - IPv6HdrLen
		}
		binary.BigEndian.PutUint16(f[l3+4:], uint16(n))
	} else if len(f) >= l3+4 {
		if n < 0 {
			n = len(f) - l3
		}
		binary.BigEndian.PutUint16(f[l3+2:], uint16(n))
	}
	return f
}

var parseCases = []struct {
	name string
	s    spec
	cut  int // bytes removed from the end
	want Headers
	err  error
}{
	{name: "TCP over IPv4",
		s:    spec{sport: 40000, dport: 5201, payload: 10, totalLen: -1},
		want: Headers{L3: 14, EtherType: EtherTypeIPv4, IPVersion: 4, IPHdrLen: 20, IPEnd: 64, Proto: ProtoTCP, L4: 34, L4HdrLen: 20, SrcPort: 40000, DstPort: 5201}},
	{name: "UDP over IPv4 with options, one 802.1Q tag",
		s:    spec{tags: []uint16{EtherTypeVLAN}, ipOpts: 8, proto: ProtoUDP, sport: 5353, dport: 4000, payload: 3, totalLen: -1},
		want: Headers{L3: 18, EtherType: EtherTypeIPv4, VLANTags: 1, IPVersion: 4, IPHdrLen: 28, IPEnd: 57, Proto: ProtoUDP, L4: 46, L4HdrLen: 8, SrcPort: 5353, DstPort: 4000}},
	{name: "QinQ: 802.1ad outer, 802.1Q inner",
		s:    spec{tags: []uint16{EtherTypeQinQ, EtherTypeVLAN}, sport: 1, dport: 2, totalLen: -1},
		want: Headers{L3: 22, EtherType: EtherTypeIPv4, VLANTags: 2, IPVersion: 4, IPHdrLen: 20, IPEnd: 62, Proto: ProtoTCP, L4: 42, L4HdrLen: 20, SrcPort: 1, DstPort: 2}},
	{name: "two 802.1Q tags",
		s:    spec{tags: []uint16{EtherTypeVLAN, EtherTypeVLAN}, v6: true, proto: ProtoUDP, sport: 7, dport: 8, totalLen: -1},
		want: Headers{L3: 22, EtherType: EtherTypeIPv6, VLANTags: 2, IPVersion: 6, IPHdrLen: 40, IPEnd: 70, Proto: ProtoUDP, L4: 62, L4HdrLen: 8, SrcPort: 7, DstPort: 8}},
	{name: "three tags: the third is left unparsed",
		s:    spec{tags: []uint16{EtherTypeQinQ, EtherTypeVLAN, EtherTypeVLAN}, totalLen: -1},
		want: Headers{L3: 22, EtherType: EtherTypeVLAN, VLANTags: 2}},
	{name: "ARP",
		s:    spec{etherType: 0x0806, totalLen: -1},
		want: Headers{L3: 14, EtherType: 0x0806}},
	{name: "TCP with options, total length 0 (TSO)",
		s:    spec{doff: 32, payload: 100},
		want: Headers{L3: 14, EtherType: EtherTypeIPv4, IPVersion: 4, IPHdrLen: 20, IPEnd: 14, Proto: ProtoTCP, L4: 34, L4HdrLen: 32}},
	{name: "IPv4 first fragment",
		s:    spec{frag: 0x2000, proto: ProtoUDP, sport: 9, dport: 9, totalLen: -1},
		want: Headers{L3: 14, EtherType: EtherTypeIPv4, IPVersion: 4, IPHdrLen: 20, IPEnd: 42, MoreFragments: true, Proto: ProtoUDP, L4: 34}},
	{name: "IPv4 later fragment",
		s:    spec{frag: 0x0003, proto: ProtoUDP, payload: 16, totalLen: -1},
		want: Headers{L3: 14, EtherType: EtherTypeIPv4, IPVersion: 4, IPHdrLen: 20, IPEnd: 58, FragOffset: 24, Proto: ProtoUDP, L4: 34}},
	{name: "IPv4 don't fragment is whole",
		s:    spec{frag: 0x4000, proto: ProtoUDP, sport: 3, dport: 4, totalLen: -1},
		want: Headers{L3: 14, EtherType: EtherTypeIPv4, IPVersion: 4, IPHdrLen: 20, IPEnd: 42, Proto: ProtoUDP, L4: 34, L4HdrLen: 8, SrcPort: 3, DstPort: 4}},
	{name: "IPv6 hop-by-hop, routing, destination options",
		s: spec{v6: true, ext: []ext{{nh: ProtoHopByHop, len: 8}, {nh: ProtoRouting, len: 24}, {nh: ProtoDestOpts, len: 16}},
			sport: 80, dport: 443, totalLen: -1},
		want: Headers{L3: 14, EtherType: EtherTypeIPv6, IPVersion: 6, IPHdrLen: 40, IPEnd: 122, IPv6Ext: ExtHopByHop | ExtRouting | ExtDestOpts,
			Proto: ProtoTCP, L4: 102, L4HdrLen: 20, SrcPort: 80, DstPort: 443}},
	{name: "IPv6 fragment",
		s:    spec{v6: true, ext: []ext{{nh: ProtoFragment, len: 8, frag: 0x0001}}, proto: ProtoUDP, totalLen: -1},
		want: Headers{L3: 14, EtherType: EtherTypeIPv6, IPVersion: 6, IPHdrLen: 40, IPEnd: 70, IPv6Ext: ExtFragment, MoreFragments: true, Proto: ProtoUDP, L4: 62}},
	{name: "IPv6 later fragment after destination options",
		s:    spec{v6: true, ext: []ext{{nh: ProtoDestOpts, len: 8}, {nh: ProtoFragment, len: 8, frag: 0x0010}}, payload: 8, totalLen: -1},
		want: Headers{L3: 14, EtherType: EtherTypeIPv6, IPVersion: 6, IPHdrLen: 40, IPEnd: 98, IPv6Ext: ExtDestOpts | ExtFragment, FragOffset: 16, Proto: ProtoTCP, L4: 70}},
	{name: "IPv6 atomic fragment is whole",
		s:    spec{v6: true, ext: []ext{{nh: ProtoFragment, len: 8}}, proto: ProtoUDP, sport: 5, dport: 6, totalLen: -1},
		want: Headers{L3: 14, EtherType: EtherTypeIPv6, IPVersion: 6, IPHdrLen: 40, IPEnd: 70, IPv6Ext: ExtFragment, Proto: ProtoUDP, L4: 62, L4HdrLen: 8, SrcPort: 5, DstPort: 6}},
	{name: "RoCEv2",
		s:    spec{proto: ProtoUDP, sport: 49152, dport: UDPPortRoCEv2, payload: BTHLen + 4, totalLen: -1},
		want: Headers{L3: 14, EtherType: EtherTypeIPv4, IPVersion: 4, IPHdrLen: 20, IPEnd: 58, Proto: ProtoUDP, L4: 34, L4HdrLen: 8, SrcPort: 49152, DstPort: UDPPortRoCEv2}},
	{name: "another transport",
		s:    spec{proto: 1, payload: 8, totalLen: -1},
		want: Headers{L3: 14, EtherType: EtherTypeIPv4, IPVersion: 4, IPHdrLen: 20, IPEnd: 42, Proto: 1, L4: 34}},

	{name: "shorter than Ethernet", s: spec{etherType: 0x0806}, cut: 1, err: ErrTruncated},
	{name: "empty", s: spec{etherType: 0x0806}, cut: 14, err: ErrTruncated},
	{name: "VLAN tag cut", s: spec{tags: []uint16{EtherTypeVLAN}, etherType: 0x0806}, cut: 1, err: ErrTruncated},
	{name: "IPv4 header cut",
		s: spec{proto: 1, ipOpts: 4}, cut: 1, err: ErrTruncated,
		want: Headers{L3: 14, EtherType: EtherTypeIPv4}},
	{name: "IPv4 version 6",
		s: spec{version: 6, proto: 1}, err: ErrIPVersion,
		want: Headers{L3: 14, EtherType: EtherTypeIPv4}},
	{name: "IPv4 IHL 4",
		s: spec{ihl: 16, proto: 1, payload: 8}, err: ErrIPv4HdrLen,
		want: Headers{L3: 14, EtherType: EtherTypeIPv4}},
	{name: "IPv6 version 4",
		s: spec{v6: true, version: 4, proto: 1}, err: ErrIPVersion,
		want: Headers{L3: 14, EtherType: EtherTypeIPv6}},
	{name: "IPv6 extension header cut",
		s: spec{v6: true, ext: []ext{{nh: ProtoRouting, len: 16}}, proto: 1}, cut: 1, err: ErrTruncated,
		want: Headers{L3: 14, EtherType: EtherTypeIPv6, IPVersion: 6, IPHdrLen: 40, IPEnd: 54}},
	{name: "TCP header cut", s: spec{}, cut: 1, err: ErrTruncated,
		want: Headers{L3: 14, EtherType: EtherTypeIPv4, IPVersion: 4, IPHdrLen: 20, IPEnd: 14, Proto: ProtoTCP, L4: 34}},
	{name: "TCP options cut", s: spec{doff: 24}, cut: 1, err: ErrTruncated,
		want: Headers{L3: 14, EtherType: EtherTypeIPv4, IPVersion: 4, IPHdrLen: 20, IPEnd: 14, Proto: ProtoTCP, L4: 34}},
	{name: "TCP data offset 16", s: spec{doff: 16, payload: 4}, err: ErrTCPDataOffset,
		want: Headers{L3: 14, EtherType: EtherTypeIPv4, IPVersion: 4, IPHdrLen: 20, IPEnd: 14, Proto: ProtoTCP, L4: 34}},
	{name: "UDP header cut", s: spec{proto: ProtoUDP}, cut: 1, err: ErrTruncated,
		want: Headers{L3: 14, EtherType: EtherTypeIPv4, IPVersion: 4, IPHdrLen: 20, IPEnd: 14, Proto: ProtoUDP, L4: 34}},
}

// caseFrame is a parse case's frame, cut as the case asks.
func caseFrame(i int) []byte {
	f := parseCases[i].s.build()
	return f[:len(f)-parseCases[i].cut]
}

func TestParse(t *testing.T) {
	for i, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			f := caseFrame(i)
			var h Headers
			err := h.Parse(f)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if h != tc.want {
				t.Fatalf("% x\n got %+v\nwant %+v", f, h, tc.want)
			}
			checkInside(t, f, &h)
		})
	}
}

// checkInside: whatever the frame, every header Headers reports lies
// inside it.
func checkInside(t *testing.T, f []byte, h *Headers) {
	t.Helper()
	n := len(f)
	if h.L3 > n || h.L4 > n || h.L4+h.L4HdrLen > n || int(h.VLANTags) > MaxVLANTags {
		t.Fatalf("outside a %d-byte frame: %+v", n, h)
	}
	if h.IPVersion != 0 && (h.L3+h.IPHdrLen > n || h.L4 != 0 && h.L4 < h.L3+h.IPHdrLen || len(h.Addrs(f)) == 0) {
		t.Fatalf("IP header outside a %d-byte frame: %+v", n, h)
	}
	if h.IPVersion == 0 && (h.L4 != 0 || h.Addrs(f) != nil) {
		t.Fatalf("transport without IP: %+v", h)
	}
	if off, ok := h.BTHOffset(n); ok && off+BTHLen > n {
		t.Fatalf("BTH at %d outside a %d-byte frame", off, n)
	}
}

func TestHelpers(t *testing.T) {
	for _, tc := range []struct {
		name           string
		s              spec
		cut            int
		tcp, udp, frag bool
		roce           bool
		bth            int
		addrs          int
	}{
		{name: "TCP", s: spec{dport: UDPPortRoCEv2}, tcp: true, addrs: 8},
		{name: "RoCEv2", s: spec{proto: ProtoUDP, dport: UDPPortRoCEv2, payload: BTHLen}, udp: true, roce: true, bth: 42, addrs: 8},
		{name: "RoCEv2 behind QinQ",
			s:   spec{tags: []uint16{EtherTypeQinQ, EtherTypeVLAN}, proto: ProtoUDP, dport: UDPPortRoCEv2, payload: BTHLen},
			udp: true, roce: true, bth: 50, addrs: 8},
		{name: "RoCEv2 without a whole BTH", s: spec{proto: ProtoUDP, dport: UDPPortRoCEv2, payload: BTHLen}, cut: 1, udp: true, roce: true, addrs: 8},
		{name: "UDP to another port", s: spec{proto: ProtoUDP, dport: 4792, payload: BTHLen}, udp: true, addrs: 8},
		{name: "UDP fragment to 4791", s: spec{proto: ProtoUDP, dport: UDPPortRoCEv2, frag: 0x2000, payload: BTHLen}, frag: true, addrs: 8},
		{name: "IPv6 UDP", s: spec{v6: true, proto: ProtoUDP, dport: UDPPortRoCEv2, payload: BTHLen}, udp: true, roce: true, bth: 62, addrs: 32},
		{name: "ARP", s: spec{etherType: 0x0806}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.s.build()
			f = f[:len(f)-tc.cut]
			var h Headers
			_ = h.Parse(f)
			bth, ok := h.BTHOffset(len(f))
			if h.IsTCP() != tc.tcp || h.IsUDP() != tc.udp || h.IsFragment() != tc.frag ||
				h.IsUDPDstPort(UDPPortRoCEv2) != tc.roce || bth != tc.bth || ok != (tc.bth != 0) || len(h.Addrs(f)) != tc.addrs {
				t.Fatalf("%+v: tcp %v udp %v frag %v roce %v bth %d %v addrs %d", h, h.IsTCP(), h.IsUDP(), h.IsFragment(),
					h.IsUDPDstPort(UDPPortRoCEv2), bth, ok, len(h.Addrs(f)))
			}
		})
	}
}

// TestParseDoesNotAllocate: not for any case, error or not.
func TestParseDoesNotAllocate(t *testing.T) {
	for i := range parseCases {
		f := caseFrame(i)
		var h Headers
		if n := testing.AllocsPerRun(100, func() { _ = h.Parse(f) }); n != 0 {
			t.Errorf("%s: %v allocations", parseCases[i].name, n)
		}
	}
}
