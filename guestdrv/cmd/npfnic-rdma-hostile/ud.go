package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// The server's UD QP. A UD case asks for one (UDQP) beside the case's RC
// QP: a fresh UD QP with a random Q_Key and its udRecvs receive entries
// posted in the receive area (where the RC QP's are: a UD case sends the
// RC QP nothing). The client learns its QPN, Q_Key and the Ethernet
// address its GID is on, and SENDs to it with its own UD QPs; UDRECV and
// UDNONE check what arrived.

// grhSize is the GRH area that precedes a UD receive's payload: for
// RoCEv2 over IPv4, 20 zero bytes and the packet's IPv4 header.
const grhSize = 40

// udRecvs are the receive entries of the server's UD QP, wr_ids 0 up.
const udRecvs = 4

// udOverhead is what a UD SEND's IPv4 packet carries besides its
// payload: the IPv4 header, UDP, BTH, DETH and the ICRC.
const udOverhead = 20 + 8 + 12 + 8 + 4

func (s *server) newUD() error {
	s.dropUD()
	var err error
	if s.udCQ, err = s.v.createCQ(4, 64); err != nil {
		return err
	}
	if s.ud, err = s.v.createQPKind(5, s.pd, s.udCQ, s.udCQ, qpCaps{maxSendWR: 4, maxRecvWR: udRecvs, maxSendSGE: 1, maxRecvSGE: 1},
		qpKind{typ: qptUD}); err != nil {
		return err
	}
	for i := range udRecvs {
		s.ud.rq.post(recvWQE{id: uint64(i), sgl: []sge{{addr: s.mr.addr + recvArea + uint64(i*recvSize), length: recvSize, lkey: s.mr.lkey}}}.sum().put)
	}
	s.udQKey = rand.Uint32()&0x7fff_ffff | 1 // not a controlled Q_Key, not 0
	s.udNext = 0
	return s.v.readyUD(s.ud, s.udQKey, rand.Uint32()&0xffffff)
}

func (s *server) dropUD() {
	if s.ud != nil {
		s.v.destroyQP(s.ud)
	}
	if s.udCQ != nil {
		s.v.destroyCQ(s.udCQ)
	}
	s.ud, s.udCQ = nil, nil
}

// checkUDRecv checks that the next receive entry of the UD QP (the first
// not yet taken) completed with a UD SEND of length bytes of
// pattern(seed) from QP srcQP of the client: byte_len counts the GRH
// area, which holds 20 zero bytes and the packet's IPv4 header, then the
// payload. The entry's bytes become canary again.
func (s *server) checkUDRecv(length, seed int, srcQP uint32) error {
	if s.ud == nil || length <= 0 || grhSize+length > recvSize || s.udNext >= udRecvs {
		return fmt.Errorf("UDRECV of %d bytes without a UD QP, too long, or past its receives", length)
	}
	got := s.udCQ.q.pollN(1, completionWait)
	if len(got) == 0 {
		return errors.New("no UD receive completed")
	}
	c, i := got[0], s.udNext
	s.udNext++
	off := mrOff + recvArea + int(i)*recvSize
	b := s.buf[off : off+grhSize+length]
	// Whatever the entry (or the one that completed instead) took is
	// reported here, once.
	defer fillCanary(s.buf[off:off+recvSize], off)
	if c.wrID < udRecvs && c.wrID != i {
		o := mrOff + recvArea + int(c.wrID)*recvSize
		defer fillCanary(s.buf[o:o+recvSize], o)
	}
	if c.status != hw.IBVWCSuccess || c.wrID != i || c.opcode != hw.IBVWCRecv || c.byteLen != uint32(grhSize+length) ||
		c.srcQP != srcQP || c.qpNum != s.ud.qpn {
		return fmt.Errorf("UD receive completed %s, wr_id %d (want %d), opcode %d, %d bytes (want %d), src_qp %#x (want %#x), qp_num %#x",
			statusName(c.status), c.wrID, i, c.opcode, c.byteLen, grhSize+length, c.srcQP, srcQP, c.qpNum)
	}
	if err := checkGRH(b[:grhSize], s.peerGID, s.gid, length); err != nil {
		return err
	}
	if j := firstNot(b[grhSize:], 0, func(j int) byte { return pattern(seed, j) }); j >= 0 {
		return fmt.Errorf("UD payload byte %d is %#x, want %#x", j, b[grhSize+j], pattern(seed, j))
	}
	if j := firstNot(s.buf[off+grhSize+length:off+recvSize], off+grhSize+length, canary); j >= 0 {
		return fmt.Errorf("the UD receive buffer's byte %d, past the message, written", grhSize+length+j)
	}
	return nil
}

// checkGRH checks the GRH area of a UD SEND of length bytes from the
// client's IPv4 address (its GID src) to the server's (dst): 20 zero
// bytes, then a valid IPv4 header of a UDP packet of that length.
func checkGRH(g []byte, src, dst [16]byte, length int) error {
	if i := firstNot(g[:20], 0, func(int) byte { return 0 }); i >= 0 {
		return fmt.Errorf("GRH area byte %d is %#x, not 0", i, g[i])
	}
	ip := g[20:grhSize]
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	switch {
	case ip[0] != 0x45:
		return fmt.Errorf("GRH area: IPv4 version and length %#x, want 0x45", ip[0])
	case int(binary.BigEndian.Uint16(ip[2:])) != udOverhead+length:
		return fmt.Errorf("GRH area: IPv4 total length %d, want %d", binary.BigEndian.Uint16(ip[2:]), udOverhead+length)
	case ip[9] != 17:
		return fmt.Errorf("GRH area: IPv4 protocol %d, want 17 (UDP)", ip[9])
	case [4]byte(ip[12:16]) != [4]byte(src[12:]) || [4]byte(ip[16:20]) != [4]byte(dst[12:]):
		return fmt.Errorf("GRH area: IPv4 %d.%d.%d.%d to %d.%d.%d.%d, want the client's to the server's", ip[12], ip[13], ip[14], ip[15],
			ip[16], ip[17], ip[18], ip[19])
	case sum != 0xffff:
		return fmt.Errorf("GRH area: IPv4 header checksum wrong (sum %#x)", sum)
	}
	return nil
}

// udQuiet is how long checkNoRecv waits for a receive that must not come.
const udQuiet = 300 * time.Millisecond

// checkNoRecv checks that neither the UD QP nor the case's RC QP has
// received anything more.
func (s *server) checkNoRecv() error {
	if s.udCQ != nil {
		if got := s.udCQ.q.pollN(1, udQuiet); len(got) > 0 {
			c := got[0]
			return fmt.Errorf("the UD QP received: %s, wr_id %d, %d bytes, src_qp %#x", statusName(c.status), c.wrID, c.byteLen, c.srcQP)
		}
	}
	if s.rcq != nil {
		if c, ok := s.rcq.q.poll(); ok {
			return fmt.Errorf("the RC QP received: %s, wr_id %d, %d bytes", statusName(c.status), c.wrID, c.byteLen)
		}
	}
	return nil
}
