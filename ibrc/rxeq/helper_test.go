package rxeq

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// testMem is guest memory for the tests: bytes at base, with a window (the
// registered buffer) outside which any access fails the test, a log of the
// writes, and injectable faults.
type testMem struct {
	t      testing.TB
	base   uint64
	b      []byte
	lo, hi uint64 // allowed accesses: [lo, hi)
	writes []span
	fail   func(addr uint64, write bool) bool
}

type span struct{ addr, n uint64 }

var errInjected = errors.New("injected fault")

func (m *testMem) access(addr uint64, p []byte, write bool) error {
	n := uint64(len(p))
	if addr < m.lo || addr > m.hi || n > m.hi-addr {
		m.t.Fatalf("access [%#x, +%d) outside the registered buffer [%#x, %#x)", addr, n, m.lo, m.hi)
	}
	if m.fail != nil && m.fail(addr, write) {
		return errInjected
	}
	off := addr - m.base
	if write {
		copy(m.b[off:], p)
		m.writes = append(m.writes, span{addr, n})
	} else {
		copy(p, m.b[off:off+n])
	}
	return nil
}

func (m *testMem) ReadAt(addr uint64, p []byte) error  { return m.access(addr, p, false) }
func (m *testMem) WriteAt(addr uint64, p []byte) error { return m.access(addr, p, true) }

// newQueueMem allocates g's buffer with guard bytes around it, the header
// written as the driver does (with the given shape, possibly lying).
func newQueueMem(t testing.TB, g Geometry) *testMem {
	const guard = 256
	m := &testMem{t: t, base: g.Base - guard, b: make([]byte, g.Size+2*guard), lo: g.Base, hi: g.Base + g.Size}
	m.setU32(g.Base+uint64(hw.RxeQueueLog2ElemSize.Offset), uint32(g.Log2ElemSize))
	m.setU32(g.Base+uint64(hw.RxeQueueIndexMask.Offset), g.Slots-1)
	return m
}

func (m *testMem) u32(addr uint64) uint32 { return binary.LittleEndian.Uint32(m.b[addr-m.base:]) }
func (m *testMem) setU32(addr uint64, v uint32) {
	binary.LittleEndian.PutUint32(m.b[addr-m.base:], v)
}
func (m *testMem) slot(g Geometry, i uint32) []byte {
	off := g.SlotAddr(i) - m.base
	return m.b[off : off+uint64(g.ElemSize())]
}

// user is librxe's end of a queue: it produces into SQ and RQ and consumes
// from CQ, with masked indices in the header.
type user struct {
	m *testMem
	g Geometry
}

func (u user) prod() uint32 { return u.m.u32(u.g.Base + uint64(hw.RxeQueueProducer.Offset)) }
func (u user) cons() uint32 { return u.m.u32(u.g.Base + uint64(hw.RxeQueueConsumer.Offset)) }
func (u user) setProd(v uint32) {
	u.m.setU32(u.g.Base+uint64(hw.RxeQueueProducer.Offset), v)
}
func (u user) setCons(v uint32) {
	u.m.setU32(u.g.Base+uint64(hw.RxeQueueConsumer.Offset), v)
}

// post fills the producer's slot with fill and advances producer_index; it
// fails the test when the queue is full.
func (u user) post(fill func(elem []byte)) {
	u.m.t.Helper()
	mask := u.g.Slots - 1
	p := u.prod() & mask
	if (p+1)&mask == u.cons()&mask {
		u.m.t.Fatal("user: queue full")
	}
	e := u.m.slot(u.g, p)
	clear(e)
	fill(e)
	u.setProd((p + 1) & mask)
}

// poll takes the next completion, if any.
func (u user) poll() (CQE, bool) {
	mask := u.g.Slots - 1
	c := u.cons() & mask
	if c == u.prod()&mask {
		return CQE{}, false
	}
	e := DecodeCQE(u.m.slot(u.g, c))
	u.setCons((c + 1) & mask)
	return e, true
}

// sendSpec is a send queue entry as librxe writes it.
type sendSpec struct {
	id                   uint64
	opcode, flags        uint32
	imm                  uint32
	raddr                uint64
	rkey                 uint32
	cmpAdd, swap         uint64 // atomics (whose rkey is in another place)
	length, numSGE       uint32
	sges                 []rawSGE
	inline               []byte
	autoLength, autoNumS bool // length/num_sge from sges/inline, as librxe sets them
}

type rawSGE struct {
	addr        uint64
	length, key uint32
}

func (s sendSpec) write(e []byte) {
	hw.RxeSendWRID.Put(e, s.id)
	hw.RxeSendOpcode.Put(e, s.opcode)
	hw.RxeSendFlags.Put(e, s.flags)
	hw.RxeSendImm.Put(e, s.imm)
	hw.PutRxeSendRemote(e, s.opcode, s.raddr, s.rkey, s.cmpAdd, s.swap)
	length, n := s.length, s.numSGE
	if s.autoLength {
		length = uint32(len(s.inline))
		for _, g := range s.sges {
			length += g.length
		}
	}
	if s.autoNumS {
		n = uint32(len(s.sges))
	}
	hw.RxeSendLength.Put(e, length)
	hw.RxeSendNumSGE.Put(e, n)
	copy(e[hw.RxeSendWQESize:], s.inline)
	writeSGEs(e[hw.RxeSendWQESize:], s.sges)
}

func writeSGEs(b []byte, sges []rawSGE) {
	for i, g := range sges {
		e := b[i*hw.RxeSGESize:]
		hw.RxeSGEAddr.Put(e, g.addr)
		hw.RxeSGELength.Put(e, g.length)
		hw.RxeSGELKey.Put(e, g.key)
	}
}

// recvSpec is a receive queue entry.
type recvSpec struct {
	id             uint64
	length, numSGE uint32
	sges           []rawSGE
	auto           bool
}

func (s recvSpec) write(e []byte) {
	hw.RxeRecvWRID.Put(e, s.id)
	length, n := s.length, s.numSGE
	if s.auto {
		length, n = 0, uint32(len(s.sges))
		for _, g := range s.sges {
			length += g.length
		}
	}
	hw.RxeRecvLength.Put(e, length)
	hw.RxeRecvNumSGE.Put(e, n)
	writeSGEs(e[hw.RxeRecvWQESize:], s.sges)
}
