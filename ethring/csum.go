package ethring

import (
	"encoding/binary"

	"github.com/npfnic/npfnic/vdevice/pkthdr"
)

// Internet checksums (RFC 1071): the arithmetic, the RX check and the TX
// checksum offload. The headers come from pkthdr; nothing here allocates
// or reads outside the slice it is given.

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

// pseudoSum is the exact sum of the transport pseudo-header of f, whose
// headers h describes: addresses, protocol and the transport length l4Len.
func pseudoSum(f []byte, h *pkthdr.Headers, l4Len int) uint64 {
	return csumAdd(0, h.Addrs(f)) + uint64(h.Proto) + uint64(l4Len)
}

// rxCsumOK reports whether f, whose headers h describes, is an IPv4 or
// IPv6 datagram (not a fragment) carrying TCP or UDP whose checksum is
// present and correct. Ethernet padding after the datagram is not summed.
// A datagram with an IPv6 routing header is not verified: its
// pseudo-header takes the final destination from the routing header.
func rxCsumOK(f []byte, h *pkthdr.Headers) bool {
	if !h.IsTCP() && !h.IsUDP() || h.IPv6Ext&pkthdr.ExtRouting != 0 || h.IPEnd < h.L4+h.L4HdrLen || h.IPEnd > len(f) {
		return false
	}
	seg := f[h.L4:h.IPEnd]
	if h.IsUDP() {
		ulen := int(binary.BigEndian.Uint16(seg[udpLen:]))
		if ulen < pkthdr.UDPHdrLen || ulen > len(seg) || binary.BigEndian.Uint16(seg[udpCsum:]) == 0 {
			return false // bad length, or no checksum (IPv4) to verify
		}
		seg = seg[:ulen]
	}
	return csumFold(pseudoSum(f, h, len(seg))+csumAdd(0, seg)) == 0xffff
}

// UDP header fields, as offsets into the header.
const (
	udpLen  = 4
	udpCsum = 6
)

// txCsum applies a CHECKSUM_PARTIAL request to f: the ones' complement sum
// from start to the end of the frame, folded and complemented, stored at
// start+offset (0 becomes 0xffff for UDP, where 0 means no checksum). It
// reports false, leaving f alone, when the checksum field does not lie
// inside f.
func txCsum(f []byte, start, offset int) bool {
	pos := start + offset
	if pos+2 > len(f) {
		return false
	}
	s := ^csumFold(csumAdd(0, f[start:]))
	if s == 0 {
		var h pkthdr.Headers
		if _ = h.Parse(f); h.L4 == start && h.Proto == pkthdr.ProtoUDP {
			s = 0xffff
		}
	}
	binary.BigEndian.PutUint16(f[pos:], s)
	return true
}
