package ethring

import "github.com/npfnic/npfnic/vdevice/pkthdr"

// FlowHash is the receive steering hash of frame; see flowHash.
func FlowHash(frame []byte) uint32 {
	var h pkthdr.Headers
	_ = h.Parse(frame)
	return flowHash(frame, &h)
}

// flowHash is the receive steering hash of f, whose headers h describes:
// FNV-1a, finalized, over the transport protocol, the IP addresses and, for TCP and
// UDP datagrams that are not fragments, the ports, so every frame of a
// flow lands on one pair and keeps its order (all fragments of a datagram
// too: none of them is hashed by ports). VLAN tags and IPv6 extension
// headers are skipped as pkthdr parses them. Frames that are not IP (ARP,
// for instance) hash to 0. It does not allocate.
func flowHash(f []byte, h *pkthdr.Headers) uint32 {
	if h.IPVersion == 0 {
		return 0
	}
	v := uint32(2166136261)
	mix := func(b byte) { v = (v ^ uint32(b)) * 16777619 }
	mix(h.Proto)
	for _, b := range h.Addrs(f) {
		mix(b)
	}
	if h.IsTCP() || h.IsUDP() {
		for _, b := range f[h.L4 : h.L4+4] { // the ports
			mix(b)
		}
	}
	// FNV's multiplications never carry into a low bit: its low bits
	// are the XOR of the input's, and steer takes the hash modulo the
	// pairs. Linux gives connect() even ports, so without this
	// finalizer (MurmurHash3's) every flow from a guest's client
	// landed on the even pairs.
	v ^= v >> 16
	v *= 0x85ebca6b
	v ^= v >> 13
	v *= 0xc2b2ae35
	v ^= v >> 16
	if v == 0 {
		v = 1 // 0 is for frames that are not IP
	}
	return v
}
