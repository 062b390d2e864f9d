package pkthdr

import (
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// benchFrames are what the receive path sees most (a full-size TCP
// segment), what the other features add (QinQ, IPv6 extension headers,
// RoCEv2) and a runt.
var benchFrames = []struct {
	name string
	s    spec
	cut  int
}{
	{"TCPv4-1500B", spec{payload: 1500 - 54, totalLen: -1}, 0},
	{"UDPv4-QinQ", spec{tags: []uint16{EtherTypeQinQ, EtherTypeVLAN}, proto: ProtoUDP, payload: 64, totalLen: -1}, 0},
	{"TCPv6-ext", spec{v6: true, ext: []ext{{nh: ProtoHopByHop, len: 8}, {nh: ProtoDestOpts, len: 8}}, doff: 32, payload: 64, totalLen: -1}, 0},
	{"RoCEv2", spec{proto: ProtoUDP, dport: UDPPortRoCEv2, payload: 256, totalLen: -1}, 0},
	{"truncated-TCP", spec{totalLen: -1}, 8},
}

func BenchmarkParse(b *testing.B) {
	for _, bf := range benchFrames {
		f := bf.s.build()
		f = f[:len(f)-bf.cut]
		b.Run(bf.name, func(b *testing.B) {
			b.ReportAllocs()
			var sink int
			var h Headers
			for b.Loop() {
				_ = h.Parse(f)
				sink += h.L4
			}
			if sink == 0 {
				b.Fatal("no transport header found")
			}
		})
	}
}

// BenchmarkGopacketDLP decodes the same frames with gopacket's
// DecodingLayerParser, its layers preallocated and reused (its fastest
// use), reaching the same headers as Parse: Ethernet, Dot1Q, IPv4, IPv6
// with its extension headers, TCP, UDP.
func BenchmarkGopacketDLP(b *testing.B) {
	for _, bf := range benchFrames {
		f := bf.s.build()
		f = f[:len(f)-bf.cut]
		b.Run(bf.name, func(b *testing.B) {
			var (
				eth   layers.Ethernet
				dot1q layers.Dot1Q
				ip4   layers.IPv4
				ip6   layers.IPv6
				ext   layers.IPv6ExtensionSkipper
				frag  layers.IPv6Fragment
				tcp   layers.TCP
				udp   layers.UDP
			)
			p := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &dot1q, &ip4, &ip6, &ext, &frag, &tcp, &udp)
			p.IgnoreUnsupported = true // the payload after TCP or UDP
			decoded := make([]gopacket.LayerType, 0, 16)
			b.ReportAllocs()
			var sink int
			for b.Loop() {
				_ = p.DecodeLayers(f, &decoded)
				sink += len(decoded)
			}
			if sink == 0 {
				b.Fatal("nothing decoded")
			}
		})
	}
}
