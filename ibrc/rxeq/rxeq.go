// Package rxeq is the device's side of rdma_rxe's user-space queues: the
// send and receive queues that Debian's librxe fills and the completion
// queues it polls, which on npfnic live in guest memory and are read and
// written by the device itself (kernel bypass). It owns the device's private
// indices of those queues, reading and validating work queue entries into
// ibrc work requests (SQ, RQ) and writing completions (CQ), all in the
// formats of vdevice/hw's rxe tables (the kernel's
// include/uapi/rdma/rdma_user_rxe.h). It owns neither the QP semantics
// (package ibrc: the entries become ibrc.SendWR and ibrc.RecvWR, and the
// engine checks their keys against its memory regions and PDs) nor where
// the memory is: every access goes through a Memory, which the NIC backs
// with a guestmem.Stream or with ats's translated access.
//
// Trust. Everything in a queue is written by user space and is untrusted:
// indices, opcodes, flags, lengths, SGE counts, addresses and keys. The
// device never trusts the queue header's log2_elem_size and index_mask but
// uses the Geometry the driver registered, checked by NewSQ, NewRQ and
// NewCQ; it keeps its own index (consumer for SQ and RQ, producer for CQ)
// and never reads it back; it masks the peer's index; and every slot it
// reads or writes lies inside the registered buffer, so no value in the
// ring can move an access outside it. A malformed entry is fetched like
// any other and reported as a *WQEError with the IBV_WC status it completes
// with, in its turn; an access to the queue that fails (a *RingError)
// leaves the index where it was, so a fetch that faulted on a page can be
// retried once the page is back. Nothing panics, whatever the memory holds.
//
// Memory order (x86-64). librxe writes an entry, then stores
// producer_index with release order, and loads the device's indices with
// acquire order. The device loads producer_index and then reads the entry
// (SQ, RQ), and writes a completion and then producer_index (CQ), each as a
// separate Memory call in program order: under x86-TSO loads are not
// reordered with older loads nor stores with older stores. A Memory must
// not reorder its calls either; guestmem and ats take a lock per access,
// which also keeps the Go compiler from moving one call's memory accesses
// across another's. An index is a naturally aligned
// 32-bit field, and a queue has at most MaxSlots (65536) slots, so a valid
// index fits in its low 16 bits: even a copy that splits the 4 bytes into
// 16-bit halves (Go's memmove does) loads or stores a whole old or new
// index, and the upper half, which only a misbehaving producer sets, is
// masked off. An entry is copied once and parsed from the copy, so user
// space rewriting a slot while the device reads it yields one well-formed
// or malformed entry, never a mix the checks did not see.
//
// Threading. An SQ, RQ or CQ is not safe for concurrent use: the NIC drives
// each from one goroutine at a time (the QP's or CQ's, under the engine's
// lock). Only Memory calls may block.
package rxeq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// Memory is the device's access to the address space a queue lives in
// (guest IOVAs through a guestmem.Stream, or a process's VAs through ats).
// An access may cross pages; the implementation splits it as it must.
type Memory interface {
	ReadAt(addr uint64, p []byte) error
	WriteAt(addr uint64, p []byte) error
}

// Device limits on a registered queue.
const (
	// MaxSlots bounds a queue's slots, so that valid indices fit 16 bits
	// (see the package documentation's memory order).
	MaxSlots = 1 << 16
	// MaxLog2ElemSize bounds a queue's element size (64 KiB).
	MaxLog2ElemSize = 16
	// Align is the alignment of a queue's buffer.
	Align = 8

	maxElem = 1 << MaxLog2ElemSize
)

// Geometry is what the driver registered for one queue: its buffer and how
// the buffer is cut into slots. It is the only source of the queue's shape;
// the copy librxe reads in the queue header is never consulted.
type Geometry struct {
	Base         uint64 // address of struct rxe_queue_buf, Align-aligned
	Size         uint64 // bytes registered at Base
	Slots        uint32 // a power of two, 2..MaxSlots; index_mask is Slots-1
	Log2ElemSize uint8  // each slot is 1 << Log2ElemSize bytes
}

// ErrConfig reports a Geometry or limits the device refuses to register.
var ErrConfig = errors.New("rxeq: invalid queue registration")

// ElemSize is the size of one slot.
func (g Geometry) ElemSize() int { return 1 << g.Log2ElemSize }

// SlotAddr is the address of slot i (masked).
func (g Geometry) SlotAddr(i uint32) uint64 {
	return g.Base + hw.RxeQueueHeaderSize + uint64(i&(g.Slots-1))<<g.Log2ElemSize
}

// check validates g for elements that need at least minElem bytes. The
// bounds keep every product below 2^33, so nothing here overflows.
func (g Geometry) check(minElem int) error {
	switch {
	case g.Slots < 2 || g.Slots > MaxSlots || bits.OnesCount32(g.Slots) != 1:
		return fmt.Errorf("%w: %d slots (a power of two, 2 to %d)", ErrConfig, g.Slots, MaxSlots)
	case g.Log2ElemSize > MaxLog2ElemSize || g.ElemSize() < minElem:
		return fmt.Errorf("%w: element size 2^%d, entries need %d bytes (at most 2^%d)", ErrConfig, g.Log2ElemSize, minElem, MaxLog2ElemSize)
	case g.Base%Align != 0:
		return fmt.Errorf("%w: buffer at %#x not %d-byte aligned", ErrConfig, g.Base, Align)
	}
	need := uint64(hw.RxeQueueHeaderSize) + uint64(g.Slots)<<g.Log2ElemSize
	switch {
	case g.Size < need:
		return fmt.Errorf("%w: buffer of %d bytes, %d slots of %d need %d", ErrConfig, g.Size, g.Slots, g.ElemSize(), need)
	case g.Size-1 > ^g.Base: // compare without adding: Base+Size must not pass 2^64
		return fmt.Errorf("%w: buffer [%#x, +%#x) wraps the address space", ErrConfig, g.Base, g.Size)
	}
	return nil
}

// RingError is an access to a queue's own memory (an index or a slot) that
// failed: the queue can not go on, and the QP or CQ goes to the error
// state. The queue's index did not move.
type RingError struct {
	Op   string // what the device was doing: "load producer_index", "read slot", ...
	Addr uint64
	Err  error
}

func (e *RingError) Error() string { return fmt.Sprintf("rxeq: %s at %#x: %v", e.Op, e.Addr, e.Err) }

func (e *RingError) Unwrap() error { return e.Err }

// ring is one queue's geometry and memory, with the index access both
// sides share.
type ring struct {
	mem  Memory
	g    Geometry
	mask uint32
	idx  [4]byte
}

func (r *ring) load(f hw.Le32, what string) (uint32, error) {
	addr := r.g.Base + uint64(f.Offset)
	if err := r.mem.ReadAt(addr, r.idx[:]); err != nil {
		return 0, &RingError{"load " + what, addr, err}
	}
	return binary.LittleEndian.Uint32(r.idx[:]) & r.mask, nil
}

func (r *ring) store(f hw.Le32, what string, v uint32) error {
	addr := r.g.Base + uint64(f.Offset)
	binary.LittleEndian.PutUint32(r.idx[:], v)
	if err := r.mem.WriteAt(addr, r.idx[:]); err != nil {
		return &RingError{"store " + what, addr, err}
	}
	return nil
}

// consumer is the device's end of a queue user space produces into (SQ,
// RQ, SRQ). Entries are fetched in order and retired in order: fetch is
// the next slot to read, cons the next to retire (what consumer_index
// says), and cons <= fetch <= the producer's index, modulo the ring.
type consumer struct {
	ring
	fetch, cons uint32
	elem        []byte // the slot being parsed: its first len(elem) bytes
}

func newConsumer(mem Memory, g Geometry, minElem int) (consumer, error) {
	if err := g.check(minElem); err != nil {
		return consumer{}, err
	}
	return consumer{ring: ring{mem: mem, g: g, mask: g.Slots - 1}, elem: make([]byte, minElem)}, nil
}

// next copies the next posted slot into c.elem and moves the fetch index
// past it; ok is false when nothing more is posted.
func (c *consumer) next() (slot uint32, ok bool, err error) {
	prod, err := c.load(hw.RxeQueueProducer, "producer_index")
	if err != nil {
		return 0, false, err
	}
	// Posted and fetched counts from the retire index: a producer index
	// moved backwards (or anywhere) only makes fewer or stale slots
	// available, never more than the ring holds.
	if (c.fetch-c.cons)&c.mask >= (prod-c.cons)&c.mask {
		return 0, false, nil
	}
	slot = c.fetch
	addr := c.g.SlotAddr(slot)
	if err := c.mem.ReadAt(addr, c.elem); err != nil {
		return 0, false, &RingError{"read slot", addr, err}
	}
	c.fetch = (c.fetch + 1) & c.mask
	return slot, true, nil
}

// ErrNotFetched is returned by Retire when every fetched entry is retired
// already: a caller bug, not a guest's.
var ErrNotFetched = errors.New("rxeq: retire without a fetched entry")

func (c *consumer) retire() error {
	if c.cons == c.fetch {
		return ErrNotFetched
	}
	next := (c.cons + 1) & c.mask
	if err := c.store(hw.RxeQueueConsumer, "consumer_index", next); err != nil {
		return err
	}
	c.cons = next
	return nil
}

// Outstanding is the number of entries fetched and not yet retired.
func (c *consumer) Outstanding() int { return int((c.fetch - c.cons) & c.mask) }

// Posted is the number of entries posted and not yet fetched, from the
// producer index as it is now (masked: never more than the ring holds).
func (c *consumer) Posted() (int, error) {
	prod, err := c.load(hw.RxeQueueProducer, "producer_index")
	if err != nil {
		return 0, err
	}
	return int((prod - c.fetch) & c.mask), nil
}

// Geometry returns the registered geometry.
func (r *ring) Geometry() Geometry { return r.g }
