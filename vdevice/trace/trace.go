// Package trace is the device's event trace: what every engine did and
// when (doorbells, descriptor fetches, buffer DMA, ATC hits and misses,
// page-table walks, faults, page requests and responses, invalidations,
// interrupts raised and deferred, backup-ring stores and resolves, frames
// placed and sent), recorded into a ring buffer and written out in the
// Chrome trace-event JSON format that Perfetto and chrome://tracing open
// (format.go). A driver developer sees the device's side of a run on one
// timeline; the experiments use it to explain where time goes.
//
// Cost. Tracing is off unless a Recorder is handed to the engines: every
// hook is a method on a *Recorder that may be nil, and the method does
// nothing (inlined, no allocation) when it is. Building with the tag
// npfnic_notrace makes Compiled false and removes the hooks altogether,
// which is how the fast path's cost of carrying them is measured
// (BenchmarkRxFrame with and without the tag, in docs/driver.md). When on,
// an event is 40 bytes copied into a preallocated ring under a mutex: no
// allocation, and the ring keeps the newest events, so it can run for a
// whole experiment.
//
// Timestamps are clock.Nanotime, the same clock as the fault-stage stamps
// of package pri, so a trace and the fault-cost tables agree.
package trace

import (
	"fmt"
	"sync"

	"github.com/npfnic/npfnic/internal/clock"
)

// Kind is what happened. A and B of an Event mean what the kind says.
type Kind uint8

// Event kinds.
const (
	_ Kind = iota
	// Doorbell: the driver wrote a doorbell register. A: BAR0 offset,
	// B: the value.
	Doorbell
	// DescFetch: descriptors read from a ring. A: the first descriptor's
	// free-running index, B: how many.
	DescFetch
	// DMARead, DMAWrite: buffer DMA. A: the (IO)VA, B: bytes.
	DMARead
	DMAWrite
	// ATCHit, ATCMiss: a translation looked up in the ATC. A: the VA's
	// page, B: the PASID.
	ATCHit
	ATCMiss
	// Walk: a page-table walk (a span). A: the VA's page, B: the frame
	// found, or ^0 for a fault.
	Walk
	// Fault: a translation fault an engine took. A: the VA, B: the
	// descriptor's free-running index. On TrackRC it is a memory region's
	// fault that raises a page request, taken when the RC engine's access
	// faults (before its RNR NAK or its drop), and B packs where
	// (RCFaultB): the QPN in bits 23:0, the PSN of the packet whose data
	// faulted in bits 47:24, and bit 48 set for the responder (a receive
	// fault, or the data of a READ response) and clear for the requester.
	Fault
	// PageRequest: a page request group queued for the driver (begins
	// the group's async slice). A: the PRG index, B: the first page.
	PageRequest
	// PageResponse: the driver's response to a group (ends it). A: the
	// PRG index, B: the response code.
	PageResponse
	// Invalidate: an invalidation taken from the driver's queue (begins
	// its async slice). A: its tag (the queue index), B: the first page.
	Invalidate
	// InvalidateDone: its ATC entries dropped and no DMA in flight uses
	// them any more (the driver's WAIT completes after). A: the tag, B:
	// ATC entries dropped.
	InvalidateDone
	// IRQ: an MSI-X vector fired. A: the vector.
	IRQ
	// IRQDeferred: an interrupt event held back (vector not armed, or
	// moderation). A: the vector.
	IRQDeferred
	// BackupStore: a faulted frame stored in the backup ring. A: the
	// descriptor's free-running index, B: the bitmap index.
	BackupStore
	// BackupResolve: the driver resolved an rNPF (RX_RESOLVE applied).
	// A: the bitmap index, B: rx_head after it.
	BackupResolve
	// RxFrame: a frame completed into an RX descriptor. A: its
	// free-running index, B: bytes.
	RxFrame
	// TxFrame: a frame taken from the TX ring and sent (each TSO segment
	// the device cuts is one). A: its first descriptor's free-running
	// index, B: bytes.
	TxFrame
	// RxDrop: a received frame dropped. A: the descriptor it would have
	// used, B: the reason (DropReason).
	RxDrop
	// RCTx, RCRx: an RC packet (RoCEv2) sent or received by the RDMA
	// engine. A: the destination QPN, with the AETH syndrome (ACK, NAK,
	// RNR NAK) in bits 39:32 when the packet carries one; B: the BTH
	// opcode << 24 | PSN.
	RCTx
	RCRx
	// CQE: the RDMA engine wrote a completion into a CQ's ring. A: the
	// CQN, B: the IBV_WC status << 8 | the IBV_WC opcode.
	CQE
	// RDMAEvent: the RDMA engine posted an event. A: its type
	// (NPFNIC_RDMA_EVENT_*), B: its handle.
	RDMAEvent
	// RCResume: the RC responder went past a receive fault (a Fault on
	// TrackRC with the responder bit): it executed the request packet at
	// the faulting PSN, which is the retransmission accepted after the
	// page response (the sender retries after the RNR NAK's timer, or
	// after its ACK timeout under the drop policy), or it sent the READ
	// response that had stalled. A: the QPN, B: the PSN. A fault that
	// faults again on its retransmission (a new Fault at the same QPN and
	// PSN) has no RCResume of its own.
	RCResume
	// RegRead: the driver read BAR0 (a round trip to the device, which a
	// data path should not need: what the driver needs per packet lives in
	// memory the device writes). A: the offset, B: the value read (the
	// access's bytes, little-endian, up to 8).
	RegRead
	kindCount
)

var kindNames = [kindCount]string{
	Doorbell: "doorbell", DescFetch: "desc fetch", DMARead: "DMA read", DMAWrite: "DMA write",
	ATCHit: "ATC hit", ATCMiss: "ATC miss", Walk: "walk", Fault: "fault",
	PageRequest: "page request", PageResponse: "page response",
	Invalidate: "invalidation", InvalidateDone: "invalidation done",
	IRQ: "interrupt", IRQDeferred: "interrupt deferred",
	BackupStore: "backup store", BackupResolve: "backup resolve",
	RxFrame: "rx frame", TxFrame: "tx frame", RxDrop: "rx drop",
	RCTx: "rc tx", RCRx: "rc rx", CQE: "cqe", RDMAEvent: "rdma event",
	RCResume: "rc resume", RegRead: "BAR read",
}

func (k Kind) String() string {
	if k > 0 && k < kindCount {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Reasons an RxDrop gives in B.
const (
	DropNoBuffer = iota + 1
	DropTooBig
	DropFault // the drop policy, or a full backup ring or bitmap
)

// Track is the lane an event belongs to: one per queue pair direction and
// one per engine, so a viewer shows each as a row.
type Track uint16

// Engine tracks; queue pairs' tracks come from PairRx, PairTx.
const (
	TrackDevice Track = iota // BAR0 writes that belong to no queue
	TrackATS
	TrackPRI
	TrackIRQ
	TrackBackup
	TrackRC // the RDMA engine's packets
	trackQP // first queue pair track
)

// PairRx and PairTx are queue pair q's receive and transmit tracks.
func PairRx(q int) Track { return trackQP + Track(2*q) }
func PairTx(q int) Track { return trackQP + Track(2*q+1) }

// Name is how a viewer labels the track.
func (t Track) Name() string {
	switch t {
	case TrackDevice:
		return "device"
	case TrackATS:
		return "ats"
	case TrackPRI:
		return "pri"
	case TrackIRQ:
		return "interrupts"
	case TrackBackup:
		return "backup ring"
	case TrackRC:
		return "rc"
	}
	q := int(t - trackQP)
	if q%2 == 0 {
		return fmt.Sprintf("qp%d rx", q/2)
	}
	return fmt.Sprintf("qp%d tx", q/2)
}

// Event is one record. Dur is non-zero for spans (Walk).
type Event struct {
	TS, Dur int64 // clock.Nanotime
	A, B    uint64
	Kind    Kind
	Track   Track
}

// Recorder keeps the newest events in a ring. The zero value is not
// usable: create one with New. A nil *Recorder records nothing.
type Recorder struct {
	mu    sync.Mutex
	ring  []Event
	total uint64 // events ever recorded; ring[total%len] is the next slot
}

// DefaultCapacity is the ring's size when New is given 0: 1 Mi events,
// 40 MiB, a few seconds of a fully loaded datapath and hours of faults.
const DefaultCapacity = 1 << 20

// MaxCapacity is the largest ring New takes: 10 GiB.
const MaxCapacity = 1 << 28

// New returns a recorder that keeps the newest capacity events.
func New(capacity int) (*Recorder, error) {
	if capacity == 0 {
		capacity = DefaultCapacity
	}
	if capacity < 1 || capacity > MaxCapacity {
		return nil, fmt.Errorf("trace: capacity %d: want 1..%d events", capacity, MaxCapacity)
	}
	return &Recorder{ring: make([]Event, capacity)}, nil
}

// On reports whether r records: a hook whose arguments cost something to
// compute asks first.
func (r *Recorder) On() bool { return Compiled && r != nil }

// Emit records an instant event now.
func (r *Recorder) Emit(k Kind, t Track, a, b uint64) {
	if r.On() {
		r.put(Event{TS: clock.Nanotime(), Kind: k, Track: t, A: a, B: b})
	}
}

// Span records an event that began at start (clock.Nanotime) and ends
// now.
func (r *Recorder) Span(k Kind, t Track, start int64, a, b uint64) {
	if r.On() {
		now := clock.Nanotime()
		r.put(Event{TS: start, Dur: max(now-start, 1), Kind: k, Track: t, A: a, B: b})
	}
}

// Now is clock.Nanotime when r records, 0 otherwise: the start of a span
// costs nothing when tracing is off.
func (r *Recorder) Now() int64 {
	if r.On() {
		return clock.Nanotime()
	}
	return 0
}

func (r *Recorder) put(e Event) {
	r.mu.Lock()
	r.ring[r.total%uint64(len(r.ring))] = e
	r.total++
	r.mu.Unlock()
}

// Snapshot returns the events the ring holds, oldest first, and how many
// older ones it has overwritten.
func (r *Recorder) Snapshot() (events []Event, lost uint64) {
	if r == nil {
		return nil, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint64(len(r.ring))
	if r.total <= n {
		return append([]Event(nil), r.ring[:r.total]...), 0
	}
	start := r.total % n
	events = make([]Event, 0, n)
	events = append(events, r.ring[start:]...)
	events = append(events, r.ring[:start]...)
	return events, r.total - n
}

// Since returns the events recorded from the n-th on (counting every
// event the recorder ever took, from 0), oldest first: a reader that
// follows a long run passes the next it got back, and takes each event
// once. missed is how many of the events from the n-th on the ring had
// already overwritten.
func (r *Recorder) Since(n uint64) (events []Event, next, missed uint64) {
	if r == nil {
		return nil, n, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	size := uint64(len(r.ring))
	first := n
	if r.total > size && first < r.total-size {
		first = r.total - size
	}
	if first > r.total {
		first = r.total
	}
	events = make([]Event, 0, r.total-first)
	for i := first; i < r.total; i++ {
		events = append(events, r.ring[i%size])
	}
	if first > n {
		missed = first - n
	}
	return events, r.total, missed
}

// RCFaultB packs B of a Fault on TrackRC: the QPN, the PSN of the packet
// whose data faulted, and whether the responder faulted.
func RCFaultB(qpn, psn uint32, responder bool) uint64 {
	b := uint64(qpn&psnMask) | uint64(psn&psnMask)<<24
	if responder {
		b |= 1 << 48
	}
	return b
}

// RCFault unpacks B of a Fault on TrackRC (RCFaultB).
func (e Event) RCFault() (qpn, psn uint32, responder bool) {
	return uint32(e.B & psnMask), uint32(e.B>>24) & psnMask, e.B>>48&1 != 0
}

// psnMask is 24 bits: a QPN, a PSN.
const psnMask = 1<<24 - 1

// RCPacketInfo unpacks A and B of an RCTx or RCRx event: the destination
// QPN, the BTH opcode and PSN, and the AETH syndrome (0 for a packet
// without an AETH).
func (e Event) RCPacketInfo() (qpn uint32, opcode uint8, psn uint32, syndrome uint8) {
	return uint32(e.A & psnMask), uint8(e.B >> 24), uint32(e.B & psnMask), uint8(e.A >> 32)
}

// RNRNak reports whether an RCTx or RCRx event is an RNR NAK (an
// ACKNOWLEDGE whose AETH syndrome is 001xxxxx).
func (e Event) RNRNak() bool {
	_, op, _, syn := e.RCPacketInfo()
	return (e.Kind == RCTx || e.Kind == RCRx) && op == rcAcknowledge && syn>>5 == 1
}

// RCRequest reports whether an RCTx or RCRx event is a request packet
// (SEND, RDMA WRITE, RDMA READ request: RC opcodes 0x00-0x0c; atomics are
// not carried).
func (e Event) RCRequest() bool {
	_, op, _, _ := e.RCPacketInfo()
	return (e.Kind == RCTx || e.Kind == RCRx) && op <= rcReadRequest
}

// RoCEv2 BTH and AETH, as far as RCPacket reads them.
const (
	bthLen         = 12
	rcReadRequest  = 0x0c // the last request opcode of RC (atomics aside)
	rcAcknowledge  = 0x11 // RC ACKNOWLEDGE: BTH, AETH
	rcReadRespLast = 0x0f // RC RDMA READ response last/only carry an AETH too
	rcReadRespOnly = 0x10
	rcAtomicAck    = 0x12
)

// RCPacket records an RC packet of frame as kind (RCTx, RCRx); bth is the
// offset of its BTH (pkthdr.Headers.BTHOffset). A frame too short for
// its headers records nothing.
func (r *Recorder) RCPacket(k Kind, frame []byte, bth int) {
	if !r.On() || bth < 0 || len(frame) < bth+bthLen {
		return
	}
	b := frame[bth:]
	op := uint64(b[0])
	qpn := uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	psn := uint64(b[9])<<16 | uint64(b[10])<<8 | uint64(b[11])
	switch op {
	case rcAcknowledge, rcReadRespLast, rcReadRespOnly, rcAtomicAck:
		if len(b) > bthLen {
			qpn |= uint64(b[bthLen]) << 32
		}
	}
	r.Emit(k, TrackRC, qpn, op<<24|psn)
}
