package ethring

import "encoding/binary"

// Internet checksums (RFC 1071) and the header parsing the offloads need.
// Nothing here allocates or reads outside the slice it is given.

// csumAdd adds the big-endian 16-bit words of b to acc, an exact (unfolded)
// sum; a trailing odd byte counts as the high byte of a last word. b must
// start at an even offset of the data being summed. The exact sum of the
// 32-bit words is congruent to the ones' complement sum of the 16-bit words
// modulo 0xffff, which is what csumFold reduces, and cannot overflow 64
// bits for any frame.
func csumAdd(acc uint64, b []byte) uint64 {
	for len(b) >= 32 {
		v0 := binary.BigEndian.Uint64(b)
		v1 := binary.BigEndian.Uint64(b[8:])
		v2 := binary.BigEndian.Uint64(b[16:])
		v3 := binary.BigEndian.Uint64(b[24:])
		acc += v0>>32 + v0&0xffffffff + v1>>32 + v1&0xffffffff +
			v2>>32 + v2&0xffffffff + v3>>32 + v3&0xffffffff
		b = b[32:]
	}
	for len(b) >= 4 {
		acc += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

// csumFold reduces an exact sum to the 16-bit ones' complement sum (not
// complemented).
func csumFold(acc uint64) uint16 {
	for acc>>16 != 0 {
		acc = acc&0xffff + acc>>16
	}
	return uint16(acc)
}

// IP protocol numbers and Ethernet types the offloads look at.
const (
	protoTCP = 6
	protoUDP = 17

	etherIPv4  = 0x0800
	etherIPv6  = 0x86dd
	etherVLAN  = 0x8100
	etherQinQ  = 0x88a8
	ethHdrLen  = 14
	vlanTagLen = 4

	tcpFlagFIN = 0x01
	tcpFlagPSH = 0x08
	tcpFlagCWR = 0x80
)

// ipHdrs locates the headers of an IP frame.
type ipHdrs struct {
	l3, l4 int  // offsets of the IP header and of the transport header
	v6     bool // IPv6 (else IPv4)
	proto  byte // transport protocol (IPv6: after hop-by-hop and destination options)
	frag   bool // an IPv4 fragment (MF or an offset) or an IPv6 fragment header
	end    int  // end of the IP datagram according to its length field
}

// parseIP parses Ethernet, at most one VLAN tag (802.1Q or 802.1ad) and an
// IPv4 header or an IPv6 header followed by any hop-by-hop and destination
// options headers. ok is false for anything else, or when a header does not
// fit in f. end may lie beyond f: callers check it.
func parseIP(f []byte) (h ipHdrs, ok bool) {
	if len(f) < ethHdrLen {
		return h, false
	}
	et := binary.BigEndian.Uint16(f[12:])
	l3 := ethHdrLen
	if et == etherVLAN || et == etherQinQ {
		if len(f) < ethHdrLen+vlanTagLen {
			return h, false
		}
		et = binary.BigEndian.Uint16(f[16:])
		l3 += vlanTagLen
	}
	h.l3 = l3
	switch et {
	case etherIPv4:
		if len(f) < l3+20 || f[l3]>>4 != 4 {
			return h, false
		}
		ihl := int(f[l3]&0x0f) * 4
		if ihl < 20 || len(f) < l3+ihl {
			return h, false
		}
		h.proto = f[l3+9]
		h.frag = binary.BigEndian.Uint16(f[l3+6:])&0x3fff != 0
		h.l4 = l3 + ihl
		h.end = l3 + int(binary.BigEndian.Uint16(f[l3+2:]))
	case etherIPv6:
		if len(f) < l3+40 || f[l3]>>4 != 6 {
			return h, false
		}
		h.v6 = true
		h.end = l3 + 40 + int(binary.BigEndian.Uint16(f[l3+4:]))
		nh, off := f[l3+6], l3+40
		for nh == 0 || nh == 60 { // hop-by-hop, destination options
			if len(f) < off+8 {
				return h, false
			}
			nh, off = f[off], off+(int(f[off+1])+1)*8
		}
		if off > len(f) {
			return h, false
		}
		h.proto, h.l4 = nh, off
		h.frag = nh == 44
	default:
		return h, false
	}
	return h, true
}

// pseudoSum is the exact sum of the transport pseudo-header: addresses,
// protocol and the transport length l4Len.
func pseudoSum(f []byte, h ipHdrs, l4Len int) uint64 {
	var acc uint64
	if h.v6 {
		acc = csumAdd(0, f[h.l3+8:h.l3+40])
	} else {
		acc = csumAdd(0, f[h.l3+12:h.l3+20])
	}
	return acc + uint64(h.proto) + uint64(l4Len)
}

// rxCsumOK reports whether f is an unfragmented IPv4 or IPv6 frame carrying
// TCP or UDP whose checksum is present and correct. Ethernet padding after
// the IP datagram is not summed.
func rxCsumOK(f []byte) bool {
	h, ok := parseIP(f)
	if !ok || h.frag || (h.proto != protoTCP && h.proto != protoUDP) || h.end < h.l4 || h.end > len(f) {
		return false
	}
	seg := f[h.l4:h.end]
	if h.proto == protoTCP {
		if len(seg) < 20 {
			return false
		}
	} else {
		if len(seg) < 8 {
			return false
		}
		ulen := int(binary.BigEndian.Uint16(seg[4:]))
		if ulen < 8 || ulen > len(seg) || binary.BigEndian.Uint16(seg[6:]) == 0 {
			return false // bad length, or no checksum (IPv4) to verify
		}
		seg = seg[:ulen]
	}
	return csumFold(pseudoSum(f, h, len(seg))+csumAdd(0, seg)) == 0xffff
}

// txCsum applies a CHECKSUM_PARTIAL request to f: the ones' complement sum
// from start to the end of the frame, folded and complemented, stored at
// start+offset (0 becomes 0xffff for UDP). It reports false, leaving f
// alone, when the checksum field does not lie inside f.
func txCsum(f []byte, start, offset int) bool {
	pos := start + offset
	if pos+2 > len(f) {
		return false
	}
	s := ^csumFold(csumAdd(0, f[start:]))
	if s == 0 {
		if h, ok := parseIP(f); ok && h.proto == protoUDP && h.l4 == start {
			s = 0xffff
		}
	}
	binary.BigEndian.PutUint16(f[pos:], s)
	return true
}

// tsoMaxHdr bounds the headers TSO copies into every segment: Ethernet
// with a VLAN tag, the largest IPv4 header, the largest TCP header (IPv6
// options headers are allowed as long as everything fits).
const tsoMaxHdr = ethHdrLen + vlanTagLen + 60 + 60

// tsoHdrs is a validated TSO super-packet.
type tsoHdrs struct {
	ipHdrs
	hlen int // Ethernet + IP + TCP headers, copied into every segment
}

// tsoParse checks that f is a TCP super-packet over IPv4 (v6 false) or
// IPv6 whose TCP header starts at csumStart.
func tsoParse(f []byte, v6 bool, csumStart int) (tsoHdrs, bool) {
	h, ok := parseIP(f)
	if !ok || h.v6 != v6 || h.proto != protoTCP || h.frag || h.l4 != csumStart || len(f) < h.l4+20 {
		return tsoHdrs{}, false
	}
	doff := int(f[h.l4+12]>>4) * 4
	hlen := h.l4 + doff
	if doff < 20 || hlen > len(f) || hlen > tsoMaxHdr {
		return tsoHdrs{}, false
	}
	return tsoHdrs{h, hlen}, true
}

// tsoSegments cuts the super-packet f (validated by tsoParse) into
// segments of at most mss payload bytes and calls send with each, in
// order. It works in place: segment i's headers are written just before
// its payload, over payload bytes already sent, so the payload is never
// copied; hdr (at least tsoMaxHdr bytes) keeps the original headers. f is
// clobbered. send must not keep the segment. It returns the number of
// segments.
func tsoSegments(f []byte, t tsoHdrs, mss int, hdr []byte, send func([]byte)) int {
	hlen, l3, l4 := t.hlen, t.l3, t.l4
	tmpl := hdr[:hlen]
	copy(tmpl, f[:hlen])
	payload := len(f) - hlen
	n := max(1, (payload+mss-1)/mss)
	id0 := binary.BigEndian.Uint16(tmpl[l3+4:])
	seq0 := binary.BigEndian.Uint32(tmpl[l4+4:])
	flags0 := tmpl[l4+13]
	// The addresses do not change from segment to segment.
	addrs := pseudoSum(tmpl, t.ipHdrs, 0)
	for i := 0; i < n; i++ {
		plen := min(mss, payload-i*mss)
		s := f[i*mss : hlen+i*mss+plen]
		if i > 0 {
			copy(s, tmpl)
		}
		if t.v6 {
			binary.BigEndian.PutUint16(s[l3+4:], uint16(hlen-l3-40+plen))
		} else {
			ihl := l4 - l3
			binary.BigEndian.PutUint16(s[l3+2:], uint16(hlen-l3+plen))
			binary.BigEndian.PutUint16(s[l3+4:], id0+uint16(i))
			binary.BigEndian.PutUint16(s[l3+10:], 0)
			binary.BigEndian.PutUint16(s[l3+10:], ^csumFold(csumAdd(0, s[l3:l3+ihl])))
		}
		binary.BigEndian.PutUint32(s[l4+4:], seq0+uint32(i*mss))
		fl := flags0
		if i != n-1 {
			fl &^= tcpFlagFIN | tcpFlagPSH
		}
		if i != 0 {
			fl &^= tcpFlagCWR
		}
		s[l4+13] = fl
		binary.BigEndian.PutUint16(s[l4+16:], 0)
		tcp := s[l4:]
		binary.BigEndian.PutUint16(s[l4+16:], ^csumFold(addrs+uint64(len(tcp))+csumAdd(0, tcp)))
		send(s)
	}
	return n
}

// tsoGSOFits reports whether the super-packet f (validated by tsoParse)
// can go whole to a port that segments it: its IP length must fit the
// 16-bit length field the host's segmentation reads (hw.MaxTSOFrame allows
// an IPv4 datagram a few bytes over 64 KiB; such a frame is segmented by
// the device instead).
func tsoGSOFits(f []byte, t tsoHdrs) bool {
	if t.v6 {
		return len(f)-t.l3-40 <= 0xffff
	}
	return len(f)-t.l3 <= 0xffff
}

// tsoGSOPrepare readies the super-packet f (validated by tsoParse, and
// tsoGSOFits) for the host kernel to segment, the way QEMU's e1000e
// prepares one for a TAP with a virtio-net header: the IPv4 total length
// or IPv6 payload length is set to the whole datagram and the IPv4 header
// checksum recomputed (the guest's stack may leave both zero, and the
// host's IP input checks them when it delivers the super-packet without
// segmenting it), and the TCP checksum field is seeded with the
// pseudo-header sum over the whole TCP length, not complemented, which is
// what VIRTIO_NET_HDR_F_NEEDS_CSUM and the kernel's TCP segmentation
// (it adjusts the seed by each segment's length) expect. The guest's seed
// is ignored, as the device's own segmentation ignores it. It returns the
// number of segments the host will cut.
func tsoGSOPrepare(f []byte, t tsoHdrs, mss int) int {
	l3, l4 := t.l3, t.l4
	if t.v6 {
		binary.BigEndian.PutUint16(f[l3+4:], uint16(len(f)-l3-40))
	} else {
		binary.BigEndian.PutUint16(f[l3+2:], uint16(len(f)-l3))
		binary.BigEndian.PutUint16(f[l3+10:], 0)
		binary.BigEndian.PutUint16(f[l3+10:], ^csumFold(csumAdd(0, f[l3:l4])))
	}
	binary.BigEndian.PutUint16(f[l4+16:], csumFold(pseudoSum(f, t.ipHdrs, len(f)-l4)))
	payload := len(f) - t.hlen
	return max(1, (payload+mss-1)/mss)
}
