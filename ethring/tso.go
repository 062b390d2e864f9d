package ethring

import (
	"encoding/binary"

	"github.com/npfnic/npfnic/vdevice/pkthdr"
)

// TCP segmentation offload: checking a super-packet against the TSO
// contract (hw.OffloadsDoc), cutting it into segments, or readying it for
// a host that cuts it (GSO). Nothing here allocates or reads outside the
// frame.

// Header fields TSO rewrites, as offsets into their header.
const (
	ipv4TotalLen   = 2
	ipv4ID         = 4
	ipv4Csum       = 10
	ipv6PayloadLen = 4
	tcpSeq         = 4
	tcpFlags       = 13
	tcpCsum        = 16

	tcpFlagFIN = 0x01
	tcpFlagPSH = 0x08
	tcpFlagCWR = 0x80
)

// tsoMaxHdr bounds the headers TSO copies into every segment: Ethernet
// with a VLAN tag, the largest IPv4 header, the largest TCP header (IPv6
// options headers are allowed as long as everything fits).
const tsoMaxHdr = pkthdr.EthHdrLen + pkthdr.VLANTagLen + pkthdr.IPv4MaxHdrLen + pkthdr.TCPMaxHdrLen

// tsoExtAllowed are the IPv6 extension headers the TSO contract allows: a
// routing header would put the pseudo-header's destination elsewhere, and
// a fragment header does not belong in a super-packet.
const tsoExtAllowed = pkthdr.ExtHopByHop | pkthdr.ExtDestOpts

// tsoHdrs is a validated TSO super-packet.
type tsoHdrs struct {
	pkthdr.Headers
	hlen int // Ethernet + IP + TCP headers, copied into every segment
}

// tsoParse checks that f is a TCP super-packet over IPv4 (v6 false) or
// IPv6 as the TSO contract allows (at most one VLAN tag; of the IPv6
// extension headers only hop-by-hop and destination options) whose TCP
// header starts at csumStart.
func tsoParse(f []byte, v6 bool, csumStart int) (tsoHdrs, bool) {
	var h pkthdr.Headers
	err := h.Parse(f)
	version := uint8(4)
	if v6 {
		version = 6
	}
	if err != nil || h.IPVersion != version || h.VLANTags > 1 || h.IPv6Ext&^tsoExtAllowed != 0 ||
		!h.IsTCP() || h.L4 != csumStart {
		return tsoHdrs{}, false
	}
	hlen := h.L4 + h.L4HdrLen
	if hlen > tsoMaxHdr {
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
	hlen, l3, l4 := t.hlen, t.L3, t.L4
	tmpl := hdr[:hlen]
	copy(tmpl, f[:hlen])
	payload := len(f) - hlen
	n := max(1, (payload+mss-1)/mss)
	id0 := binary.BigEndian.Uint16(tmpl[l3+ipv4ID:])
	seq0 := binary.BigEndian.Uint32(tmpl[l4+tcpSeq:])
	flags0 := tmpl[l4+tcpFlags]
	// The addresses do not change from segment to segment.
	addrs := pseudoSum(tmpl, &t.Headers, 0)
	for i := 0; i < n; i++ {
		plen := min(mss, payload-i*mss)
		s := f[i*mss : hlen+i*mss+plen]
		if i > 0 {
			copy(s, tmpl)
		}
		if t.IPVersion == 6 {
			binary.BigEndian.PutUint16(s[l3+ipv6PayloadLen:], uint16(hlen-l3-pkthdr.IPv6HdrLen+plen))
		} else {
			binary.BigEndian.PutUint16(s[l3+ipv4TotalLen:], uint16(hlen-l3+plen))
			binary.BigEndian.PutUint16(s[l3+ipv4ID:], id0+uint16(i))
			ipv4HdrCsum(s, t.L3, t.L4)
		}
		binary.BigEndian.PutUint32(s[l4+tcpSeq:], seq0+uint32(i*mss))
		fl := flags0
		if i != n-1 {
			fl &^= tcpFlagFIN | tcpFlagPSH
		}
		if i != 0 {
			fl &^= tcpFlagCWR
		}
		s[l4+tcpFlags] = fl
		binary.BigEndian.PutUint16(s[l4+tcpCsum:], 0)
		tcp := s[l4:]
		binary.BigEndian.PutUint16(s[l4+tcpCsum:], ^csumFold(addrs+uint64(len(tcp))+csumAdd(0, tcp)))
		send(s)
	}
	return n
}

// ipv4HdrCsum recomputes the checksum of the IPv4 header f[l3:l4].
func ipv4HdrCsum(f []byte, l3, l4 int) {
	binary.BigEndian.PutUint16(f[l3+ipv4Csum:], 0)
	binary.BigEndian.PutUint16(f[l3+ipv4Csum:], ^csumFold(csumAdd(0, f[l3:l4])))
}

// tsoGSOFits reports whether the super-packet f (validated by tsoParse)
// can go whole to a port that segments it: its IP length must fit the
// 16-bit length field the host's segmentation reads (hw.MaxTSOFrame allows
// an IPv4 datagram a few bytes over 64 KiB; such a frame is segmented by
// the device instead).
func tsoGSOFits(f []byte, t tsoHdrs) bool {
	if t.IPVersion == 6 {
		return len(f)-t.L3-pkthdr.IPv6HdrLen <= 0xffff
	}
	return len(f)-t.L3 <= 0xffff
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
	l3, l4 := t.L3, t.L4
	if t.IPVersion == 6 {
		binary.BigEndian.PutUint16(f[l3+ipv6PayloadLen:], uint16(len(f)-l3-pkthdr.IPv6HdrLen))
	} else {
		binary.BigEndian.PutUint16(f[l3+ipv4TotalLen:], uint16(len(f)-l3))
		ipv4HdrCsum(f, l3, l4)
	}
	binary.BigEndian.PutUint16(f[l4+tcpCsum:], csumFold(pseudoSum(f, &t.Headers, len(f)-l4)))
	payload := len(f) - t.hlen
	return max(1, (payload+mss-1)/mss)
}
