package rocev2

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// ErrNotRoCEv2 is returned for bytes that are not an IPv4/UDP/BTH packet.
var ErrNotRoCEv2 = errors.New("rocev2: not an IPv4 RoCEv2 packet")

// lrhMask is the CRC-32 state after the 8 bytes of 0xff that stand for the
// masked LRH; every ICRC starts from it.
var lrhMask = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// ICRC computes the invariant CRC of an IPv4 RoCEv2 packet. pkt runs from
// the first byte of the IPv4 header to the last byte before the ICRC (that
// is, the IPv4 total length minus 4). The result is in the representation of
// BTH.ICRC: the four bytes that go on the wire, read in network order.
func ICRC(pkt []byte) (uint32, error) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return 0, ErrNotRoCEv2
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl+8+BTHLen {
		return 0, ErrNotRoCEv2
	}
	// The headers, masked, in a copy on the stack (updateHdr keeps it
	// there: crc32.Update's argument escapes), then the rest in place.
	var hdr [60 + 8 + BTHLen]byte
	n := copy(hdr[:], pkt[:ihl+8+BTHLen])
	maskVariant(hdr[:], ihl)
	crc := updateHdr(lrhMask, hdr[:n])
	crc = crc32.Update(crc, crc32.IEEETable, pkt[n:])
	return icrcWire(crc), nil
}

// maskVariant sets the fields of an IPv4 RoCEv2 packet's headers that
// the ICRC does not cover to all ones (IBA A17.3.3), ihl the IPv4
// header's length.
func maskVariant(ip []byte, ihl int) {
	ip[1] = 0xff                      // TOS: DSCP and ECN
	ip[8] = 0xff                      // TTL
	ip[10], ip[11] = 0xff, 0xff       // header checksum
	ip[ihl+6], ip[ihl+7] = 0xff, 0xff // UDP checksum
	ip[ihl+8+4] = 0xff                // BTH FECN, BECN, reserved
}

// icrcWire is a CRC-32 as BTH.ICRC represents it: the four bytes that go
// on the wire (the CRC's little-endian bytes), read in network order.
func icrcWire(crc uint32) uint32 {
	var le [4]byte
	binary.LittleEndian.PutUint32(le[:], crc)
	return binary.BigEndian.Uint32(le[:])
}

// hdrTable is crc32.IEEETable sliced by 8, for updateHdr.
var hdrTable = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for j := 1; j < 8; j++ {
			c = t[0][c&0xff] ^ c>>8
			t[j][i] = c
		}
	}
	return t
}()

// updateHdr is crc32.Update with the IEEE table for the few dozen bytes
// of a packet's headers: without its dispatch, whose argument escapes to
// the heap, and a byte at a time only for the last few.
func updateHdr(crc uint32, p []byte) uint32 {
	crc = ^crc
	t := &hdrTable
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xff] ^ t[6][crc>>8&0xff] ^ t[7][crc&0xff]
		p = p[8:]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// ipv4Start returns the offset of the IPv4 header in an Ethernet frame
// (skipping one 802.1Q tag) and the IPv4 total length.
func ipv4Start(frame []byte) (off, total int, err error) {
	off = 14
	if len(frame) < off {
		return 0, 0, ErrNotRoCEv2
	}
	et := binary.BigEndian.Uint16(frame[12:14])
	if et == 0x8100 {
		off += 4
		if len(frame) < off {
			return 0, 0, ErrNotRoCEv2
		}
		et = binary.BigEndian.Uint16(frame[16:18])
	}
	if et != 0x0800 || len(frame) < off+20 {
		return 0, 0, ErrNotRoCEv2
	}
	total = int(binary.BigEndian.Uint16(frame[off+2 : off+4]))
	if total < 20+8+BTHLen+ICRCLen || off+total > len(frame) {
		return 0, 0, ErrNotRoCEv2
	}
	return off, total, nil
}

// FrameICRC computes the ICRC of the RoCEv2 packet in an Ethernet frame.
func FrameICRC(frame []byte) (uint32, error) {
	off, total, err := ipv4Start(frame)
	if err != nil {
		return 0, err
	}
	return ICRC(frame[off : off+total-ICRCLen])
}

// FixICRC computes the ICRC of the packet in an Ethernet frame and stores
// it in the frame's last four IPv4 payload bytes.
func FixICRC(frame []byte) error {
	off, total, err := ipv4Start(frame)
	if err != nil {
		return err
	}
	c, err := ICRC(frame[off : off+total-ICRCLen])
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(frame[off+total-ICRCLen:], c)
	return nil
}
