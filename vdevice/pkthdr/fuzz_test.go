package pkthdr

import (
	"encoding/binary"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/npfnic/npfnic/internal/fuzzseed"
)

// go's fuzz workers die silently; keep what the runtime says (ci/fuzz.sh).
func init() { fuzzseed.KeepCrashOutput() }

// oracleLayer is one header gopacket decoded, and where.
type oracleLayer struct {
	typ gopacket.LayerType
	l   gopacket.DecodingLayer
	off int
}

// oracle decodes frame with gopacket's layers as its DecodingLayerParser
// does (BenchmarkGopacketDLP), but with a new layer for every header: the
// parser's one layer per type would let an inner header (IP in IP), or
// one that failed to decode, overwrite the outer one compared.
func oracle(frame []byte) []oracleLayer {
	var out []oracleLayer
	typ, data := layers.LayerTypeEthernet, frame
	for len(data) > 0 {
		var l gopacket.DecodingLayer
		switch typ {
		case layers.LayerTypeEthernet:
			l = &layers.Ethernet{}
		case layers.LayerTypeDot1Q:
			l = &layers.Dot1Q{}
		case layers.LayerTypeIPv4:
			l = &layers.IPv4{}
		case layers.LayerTypeIPv6:
			l = &layers.IPv6{}
		case layers.LayerTypeIPv6Fragment:
			l = &layers.IPv6Fragment{}
		case layers.LayerTypeIPv6HopByHop, layers.LayerTypeIPv6Routing, layers.LayerTypeIPv6Destination:
			l = &layers.IPv6ExtensionSkipper{}
		case layers.LayerTypeTCP:
			l = &layers.TCP{}
		case layers.LayerTypeUDP:
			l = &layers.UDP{}
		default:
			return out
		}
		if l.DecodeFromBytes(data, gopacket.NilDecodeFeedback) != nil {
			return out
		}
		out = append(out, oracleLayer{typ, l, cap(frame) - cap(data)}) // data may be cut short, never moved
		typ, data = l.NextLayerType(), l.LayerPayload()
	}
	return out
}

// FuzzParse: whatever the frame, Parse does not panic, everything it
// reports lies inside the frame, and where gopacket decodes the IPv4,
// IPv6, TCP or UDP header of a frame Parse agrees on where it lies and what
// it says.
func FuzzParse(f *testing.F) {
	for i, tc := range parseCases {
		f.Add(caseFrame(i))
		full := tc.s.build()
		for _, n := range []int{13, 17, 21, 25, 33, 37, 45, 53, 61, 73, 85, 101} {
			if n < len(full) {
				f.Add(full[:n])
			}
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var h Headers
		err := h.Parse(frame)
		checkInside(t, frame, &h)
		if len(frame) < EthHdrLen && (err != ErrTruncated || h != Headers{}) {
			t.Fatalf("%d-byte frame: %+v, %v", len(frame), h, err)
		}
		crossCheck(t, frame, &h, err)
	})
}

// crossCheck compares h (and err) with what gopacket decodes from frame.
// Parse deliberately differs where gopacket decodes beyond it: more than
// two VLAN tags, IP headers whose version disagrees with the EtherType (it
// does not look), IP after the EtherType 0xffff (its raw IP), and
// transports behind headers other than the IPv6 extension headers (IPsec
// AH, an inner IP header).
func crossCheck(t *testing.T, frame []byte, h *Headers, err error) {
	t.Helper()
	ls := oracle(frame)
	fail := func(what string, got, want any) {
		t.Helper()
		var names []gopacket.LayerType
		for _, l := range ls {
			names = append(names, l.typ)
		}
		t.Fatalf("%s: Parse says %v, gopacket %v\nframe % x\nParse %+v, %v\ngopacket %v", what, got, want, frame, *h, err, names)
	}
	i := 1
	for i < len(ls) && ls[i].typ == layers.LayerTypeDot1Q {
		i++
	}
	tags := i - 1
	if len(ls) == 0 || tags > MaxVLANTags || i == len(ls) {
		return
	}
	l3 := ls[i].off
	if binary.BigEndian.Uint16(frame[l3-2:]) == 0xffff {
		return
	}
	version := map[gopacket.LayerType]uint8{layers.LayerTypeIPv4: 4, layers.LayerTypeIPv6: 6}[ls[i].typ]
	if version == 0 {
		return
	}
	if l3 != h.L3 || tags != int(h.VLANTags) {
		fail("IP header at", h.L3, l3)
	}
	if frame[l3]>>4 != version {
		if err != ErrIPVersion {
			fail("version", err, frame[l3]>>4)
		}
		return
	}
	if h.IPVersion != version {
		fail("IP version", h.IPVersion, version)
	}
	var wantExt ExtHeaders
	switch ip := ls[i].l.(type) {
	case *layers.IPv4:
		switch {
		case h.IPHdrLen != int(ip.IHL)*4:
			fail("IPv4 header length", h.IPHdrLen, int(ip.IHL)*4)
		case h.Proto != uint8(ip.Protocol):
			fail("protocol", h.Proto, ip.Protocol)
		case h.FragOffset != int(ip.FragOffset)*8 || h.MoreFragments != (ip.Flags&layers.IPv4MoreFragments != 0):
			fail("fragment", []any{h.FragOffset, h.MoreFragments}, []any{ip.FragOffset, ip.Flags})
		case binary.BigEndian.Uint16(frame[l3+2:]) != 0 && h.IPEnd != l3+int(ip.Length):
			fail("end", h.IPEnd, l3+int(ip.Length))
		}
	case *layers.IPv6:
		if ip.HopByHop != nil {
			wantExt |= ExtHopByHop
		}
		if h.IPEnd != l3+IPv6HdrLen+int(ip.Length) {
			fail("end", h.IPEnd, l3+IPv6HdrLen+int(ip.Length))
		}
	}
	// The IPv6 extension headers gopacket went through, which Parse skips
	// too (it may go further, not bounding them by the payload length).
	var frag *layers.IPv6Fragment // the last one: an atomic one may precede it
	for i++; i < len(ls); i++ {
		switch ls[i].typ {
		case layers.LayerTypeIPv6HopByHop:
			wantExt |= ExtHopByHop
		case layers.LayerTypeIPv6Routing:
			wantExt |= ExtRouting
		case layers.LayerTypeIPv6Destination:
			wantExt |= ExtDestOpts
		case layers.LayerTypeIPv6Fragment:
			wantExt |= ExtFragment
			frag = ls[i].l.(*layers.IPv6Fragment)
		default:
			goto transport
		}
	}
transport:
	if h.IPv6Ext&wantExt != wantExt {
		fail("IPv6 extension headers", h.IPv6Ext, wantExt)
	}
	if frag != nil && (h.FragOffset != int(frag.FragmentOffset)*8 || h.MoreFragments != frag.MoreFragments) {
		fail("IPv6 fragment", []any{h.FragOffset, h.MoreFragments}, []any{frag.FragmentOffset, frag.MoreFragments})
	}
	if i == len(ls) {
		return
	}
	switch l4 := ls[i].l.(type) {
	case *layers.TCP:
		if h.L4 != ls[i].off || !h.IsTCP() {
			fail("TCP header at", h.L4, ls[i].off)
		}
		if h.L4HdrLen != int(l4.DataOffset)*4 || h.SrcPort != uint16(l4.SrcPort) || h.DstPort != uint16(l4.DstPort) {
			fail("TCP header", []any{h.L4HdrLen, h.SrcPort, h.DstPort}, []any{l4.DataOffset, l4.SrcPort, l4.DstPort})
		}
	case *layers.UDP:
		if h.L4 != ls[i].off || !h.IsUDP() {
			fail("UDP header at", h.L4, ls[i].off)
		}
		if h.SrcPort != uint16(l4.SrcPort) || h.DstPort != uint16(l4.DstPort) {
			fail("UDP ports", []any{h.SrcPort, h.DstPort}, []any{l4.SrcPort, l4.DstPort})
		}
	}
}

// TestCrossCheckSeeds runs the cross-check over the parse cases, so a
// plain go test exercises it; it also makes sure gopacket does decode
// their transport headers, or the fuzzer would be comparing nothing.
func TestCrossCheckSeeds(t *testing.T) {
	for i, tc := range parseCases {
		f := caseFrame(i)
		var h Headers
		err := h.Parse(f)
		crossCheck(t, f, &h, err)
		if tc.err == nil && h.L4HdrLen != 0 {
			ls := oracle(f)
			if last := ls[len(ls)-1].typ; last != layers.LayerTypeTCP && last != layers.LayerTypeUDP {
				t.Errorf("%s: gopacket decoded up to %v", tc.name, last)
			}
		}
	}
}
