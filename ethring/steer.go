package ethring

import "encoding/binary"

// FlowHash is the receive steering hash: FNV-1a over the IP addresses and,
// for TCP and UDP (unfragmented), the ports, so every frame of a flow lands
// on one pair and keeps its order. Frames that are not IPv4/IPv6 (ARP, for
// instance) hash to 0. One 802.1Q tag is skipped. It never reads past the
// frame and does not allocate.
func FlowHash(f []byte) uint32 {
	if len(f) < 14 {
		return 0
	}
	et := binary.BigEndian.Uint16(f[12:])
	l3 := 14
	if et == 0x8100 && len(f) >= 18 {
		et = binary.BigEndian.Uint16(f[16:])
		l3 = 18
	}
	var proto byte
	var addrs []byte
	l4 := -1
	switch et {
	case 0x0800:
		if len(f) < l3+20 {
			return 0
		}
		ihl := int(f[l3]&0x0f) * 4
		proto = f[l3+9]
		addrs = f[l3+12 : l3+20]
		fragment := binary.BigEndian.Uint16(f[l3+6:])&0x3fff != 0 // MF or offset
		if ihl >= 20 && !fragment {
			l4 = l3 + ihl
		}
	case 0x86dd:
		if len(f) < l3+40 {
			return 0
		}
		proto = f[l3+6]
		addrs = f[l3+8 : l3+40]
		l4 = l3 + 40
	default:
		return 0
	}
	h := uint32(2166136261)
	mix := func(b byte) { h = (h ^ uint32(b)) * 16777619 }
	mix(proto)
	for _, b := range addrs {
		mix(b)
	}
	if (proto == 6 || proto == 17) && l4 >= 0 && len(f) >= l4+4 {
		for _, b := range f[l4 : l4+4] {
			mix(b)
		}
	}
	return h
}
