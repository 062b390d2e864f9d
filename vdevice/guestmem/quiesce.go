package guestmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// The quiesce contract, as guest memory sees it.
//
// A Stream is one of the device's DMA engines that the driver can stop: a
// queue pair's instance, the backup ring, the page request queue, the
// invalidation queue, a diagnostic DMA. The engine brackets each unit of
// work that touches guest memory (a frame, a descriptor, a queue entry)
// with Begin and End, and makes the accesses of that unit through the
// Stream. Stop forbids new units and never waits; Quiesced reports (and
// Done signals) that the stream is stopped and every admitted unit has
// ended, which is when the device may tell the driver "this queue's memory
// is yours again". Stopping therefore needs neither a lock held across
// guest memory nor any timing, and a register write that stops an engine
// returns at once, on whatever goroutine it arrives.
//
// The late-DMA detector checks the contract independently of the engines'
// bracketing, so a path that forgets Begin is caught rather than trusted:
//   - a write through a Stream that has quiesced is late;
//   - a write, through any path, into a fenced range is late. A driver
//     model in tests fences the memory it took back after the handshake,
//     and any later Own of an overlapping range (the driver handing that
//     memory to an engine again) lifts the fence. With FenceOnQuiesce, a
//     Stream also fences the ranges it owns (Own) when it quiesces, unless
//     a live stream owns them. That is for tests whose driver model never
//     recycles a ring as something no stream owns: a real guest frees a
//     ring and may post the same page as an RX buffer, which no stream
//     Owns, so in a VM the fence would refuse a correct write. There the
//     first rule is the check.
//
// A late write is refused (guest memory is left as it was), counted in
// LateWrites and remembered in LateLog; tests fail on any.

// ErrStopped is returned by accesses through a Stream that has quiesced.
var ErrStopped = errors.New("guestmem: DMA stream stopped")

// lateLogSize bounds the late writes remembered for diagnosis.
const lateLogSize = 16

// LateWrite describes one refused late write.
type LateWrite struct {
	Stream string // "" for a write that did not come through a Stream
	IOVA   uint64
	Len    int
	Fenced bool // into a fenced range (else: through a quiesced Stream)
}

func (l LateWrite) String() string {
	why := "after its stream quiesced"
	if l.Fenced {
		why = "into fenced memory"
	}
	who := l.Stream
	if who == "" {
		who = "device"
	}
	return fmt.Sprintf("late DMA write by %s: %d bytes at %#x %s", who, l.Len, l.IOVA, why)
}

// fence is one range of guest memory the device must not write.
type fence struct{ start, end uint64 }

// detector is the Memory's late-write state.
type detector struct {
	nFences atomic.Int32 // len(fences), read without mu on every write
	mu      sync.Mutex
	fences  []fence // sorted by start, non-overlapping
	late    atomic.Uint64
	log     []LateWrite
	// owners are the streams that Own ranges and have not quiesced: a
	// stream that quiesces fences none of the memory a live one owns.
	owners map[*Stream]struct{}
	// fenceOnQuiesce: quiescing streams fence what they own.
	fenceOnQuiesce atomic.Bool
}

// FenceOnQuiesce makes every Stream of m fence the ranges it owns when it
// quiesces (see the contract above: for driver models in tests only).
func (m *Memory) FenceOnQuiesce(on bool) { m.det.fenceOnQuiesce.Store(on) }

// Fence marks [iova, iova+size) as taken back by the driver: any device
// write into it is late until an engine Owns it again.
func (m *Memory) Fence(iova, size uint64) {
	if size == 0 || iova+size < iova {
		return
	}
	d := &m.det
	d.mu.Lock()
	d.fences = addRange(d.fences, fence{iova, iova + size})
	d.nFences.Store(int32(len(d.fences)))
	d.mu.Unlock()
}

// Unfence lifts every fence inside [iova, iova+size).
func (m *Memory) Unfence(iova, size uint64) {
	if size == 0 || iova+size < iova {
		return
	}
	d := &m.det
	if d.nFences.Load() == 0 {
		return
	}
	d.mu.Lock()
	d.fences = cutRange(d.fences, fence{iova, iova + size})
	d.nFences.Store(int32(len(d.fences)))
	d.mu.Unlock()
}

// LateWrites is the number of late writes refused since New (or
// ResetLateWrites).
func (m *Memory) LateWrites() uint64 { return m.det.late.Load() }

// LateLog returns the first late writes refused (at most 16).
func (m *Memory) LateLog() []LateWrite {
	d := &m.det
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]LateWrite(nil), d.log...)
}

// ResetLateWrites clears the detector's count, log and fences, as a device
// reset does.
func (m *Memory) ResetLateWrites() {
	d := &m.det
	d.mu.Lock()
	d.fences, d.log = nil, nil
	d.nFences.Store(0)
	d.late.Store(0)
	d.mu.Unlock()
}

// lateFenced reports whether a write of n bytes at iova hits a fence, and
// records it if so. The common case (no fence) is one atomic load.
func (m *Memory) lateFenced(stream string, iova uint64, n int) bool {
	d := &m.det
	if d.nFences.Load() == 0 || n == 0 {
		return false
	}
	end := iova + uint64(n)
	if end < iova {
		return false // the access itself faults on overflow
	}
	d.mu.Lock()
	hit := overlaps(d.fences, fence{iova, end})
	d.mu.Unlock()
	if hit {
		m.recordLate(LateWrite{Stream: stream, IOVA: iova, Len: n, Fenced: true})
	}
	return hit
}

func (m *Memory) recordLate(l LateWrite) {
	d := &m.det
	d.late.Add(1)
	d.mu.Lock()
	if len(d.log) < lateLogSize {
		d.log = append(d.log, l)
	}
	d.mu.Unlock()
}

// lateError is what a refused late write returns to the engine.
func lateError(iova uint64, n int) error {
	return &FaultError{IOVA: iova, Len: n, Write: true, Reason: FaultLate}
}

// addRange inserts r into the sorted, non-overlapping set fs, merging.
func addRange(fs []fence, r fence) []fence {
	out := make([]fence, 0, len(fs)+1)
	for _, f := range fs {
		switch {
		case f.end < r.start || f.start > r.end:
			out = append(out, f)
		default:
			r.start, r.end = min(r.start, f.start), max(r.end, f.end)
		}
	}
	out = append(out, r)
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// cutRange removes r from the set fs.
func cutRange(fs []fence, r fence) []fence {
	out := fs[:0:0]
	for _, f := range fs {
		if f.end <= r.start || f.start >= r.end {
			out = append(out, f)
			continue
		}
		if f.start < r.start {
			out = append(out, fence{f.start, r.start})
		}
		if f.end > r.end {
			out = append(out, fence{r.end, f.end})
		}
	}
	return out
}

// overlaps reports whether r intersects any range of the sorted set fs.
func overlaps(fs []fence, r fence) bool {
	i := sort.Search(len(fs), func(i int) bool { return fs[i].end > r.start })
	return i < len(fs) && fs[i].start < r.end
}

// Stream is one stoppable DMA engine's view of guest memory (see the
// quiesce contract above). Its accesses behave as the Memory's, except
// that a write after the stream quiesced is refused as late.
type Stream struct {
	m    *Memory
	name string

	// state is the units in flight (admitted, or being refused) plus
	// stoppedBit. One word, so "the last unit ended and the stream is
	// stopped" is a single observation: with a separate flag and count, an
	// End that saw the count reach 0 could read the flag only after a
	// new unit was admitted and Stop ran, and declare the stream quiesced
	// with that unit still writing.
	state    atomic.Int64
	quiesced atomic.Bool
	done     chan struct{}
	once     sync.Once

	ownMu sync.Mutex
	owned []fence // ranges fenced when the stream quiesces
	gone  bool    // fenceOwned ran: no longer among the owners (under det.mu)
}

// NewStream returns a running stream named for logs (e.g. "qp0").
func (m *Memory) NewStream(name string) *Stream {
	return &Stream{m: m, name: name, done: make(chan struct{})}
}

// Name is the stream's name.
func (s *Stream) Name() string { return s.name }

// Memory is the memory the stream accesses.
func (s *Stream) Memory() *Memory { return s.m }

// Begin admits one unit of work; false means the stream is stopped and the
// unit must not touch guest memory. Every true Begin needs one End.
func (s *Stream) Begin() bool {
	if s.state.Add(1)&stoppedBit != 0 {
		s.End()
		return false
	}
	return true
}

// End ends a unit admitted by Begin.
func (s *Stream) End() {
	if s.state.Add(-1) == stoppedBit {
		s.finish()
	}
}

// stoppedBit in Stream.state: Stop was called.
const stoppedBit = 1 << 62

// Stop admits no further unit. It does not wait: Done is closed once the
// units already admitted have ended.
func (s *Stream) Stop() {
	if s.state.Or(stoppedBit) == 0 {
		s.finish()
	}
}

// Stopped reports whether Stop was called.
func (s *Stream) Stopped() bool { return s.state.Load()&stoppedBit != 0 }

// Quiesced reports whether the stream is stopped with no unit in flight:
// from then on it never touches guest memory.
func (s *Stream) Quiesced() bool { return s.quiesced.Load() }

// Done is closed when the stream quiesces.
func (s *Stream) Done() <-chan struct{} { return s.done }

func (s *Stream) finish() {
	s.once.Do(func() {
		s.fenceOwned()
		s.quiesced.Store(true)
		close(s.done)
	})
}

// fenceOwned fences the stream's ranges, except where a live stream owns
// them: an engine instance that drains after the driver already handed the
// same memory to its successor (a disable and enable without waiting for
// BUSY) must not take it from the successor.
func (s *Stream) fenceOwned() {
	s.ownMu.Lock()
	fs := append([]fence(nil), s.owned...)
	s.ownMu.Unlock()
	d := &s.m.det
	d.mu.Lock()
	s.gone = true
	delete(d.owners, s)
	if !d.fenceOnQuiesce.Load() {
		d.mu.Unlock()
		return
	}
	for o := range d.owners {
		o.ownMu.Lock() // lock order: det.mu, then a stream's ownMu
		for _, f := range o.owned {
			fs = cutRange(fs, f)
		}
		o.ownMu.Unlock()
	}
	for _, f := range fs {
		d.fences = addRange(d.fences, f)
	}
	d.nFences.Store(int32(len(d.fences)))
	d.mu.Unlock()
}

// Own declares [iova, iova+size) the stream's own (a ring, a queue, a
// status block): it is fenced when the stream quiesces, and any fence on it
// now is lifted, since the driver just handed it to this engine.
func (s *Stream) Own(iova, size uint64) {
	if size == 0 || iova+size < iova {
		return
	}
	s.m.Unfence(iova, size)
	s.ownMu.Lock()
	s.owned = append(s.owned, fence{iova, iova + size})
	s.ownMu.Unlock()
	d := &s.m.det
	d.mu.Lock()
	if !s.gone {
		if d.owners == nil {
			d.owners = make(map[*Stream]struct{})
		}
		d.owners[s] = struct{}{}
	}
	d.mu.Unlock()
}

func (s *Stream) write(iova uint64, p []byte) error {
	if s.quiesced.Load() {
		s.m.recordLate(LateWrite{Stream: s.name, IOVA: iova, Len: len(p)})
		return lateError(iova, len(p))
	}
	return s.m.writeAs(s.name, iova, p)
}

// ReadAt reads guest memory like Memory.ReadAt; reads are never late, but
// one after the stream quiesced fails with ErrStopped so a stale engine
// does not act on memory that is no longer its own.
func (s *Stream) ReadAt(iova uint64, p []byte) error {
	if s.quiesced.Load() {
		return &FaultError{IOVA: iova, Len: len(p), Reason: FaultLate, Err: ErrStopped}
	}
	return s.m.ReadAt(iova, p)
}

// WriteAt writes guest memory like Memory.WriteAt, unless late.
func (s *Stream) WriteAt(iova uint64, p []byte) error { return s.write(iova, p) }

// WriteU32 writes v little-endian at iova, unless late.
func (s *Stream) WriteU32(iova uint64, v uint32) error {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return s.write(iova, b[:])
}

// WriteU64 writes v little-endian at iova, unless late.
func (s *Stream) WriteU64(iova uint64, v uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return s.write(iova, b[:])
}

// Draining keeps an engine's stopped streams until they quiesce, for the
// engine's BUSY bit. The zero value is empty. It is not safe for concurrent
// use: the engine's register lock guards it.
type Draining struct{ streams []*Stream }

// Add keeps s (already stopped, or about to be) until it quiesces.
func (d *Draining) Add(s *Stream) { d.streams = append(d.streams, s) }

// Busy forgets the streams that quiesced and reports whether any is left.
func (d *Draining) Busy() bool {
	live := d.streams[:0]
	for _, s := range d.streams {
		if !s.Quiesced() {
			live = append(live, s)
		}
	}
	clear(d.streams[len(live):])
	d.streams = live
	return len(live) > 0
}

// Next returns the Done channel of a stream still draining, or nil when
// none is (after forgetting those that quiesced): a waiter waits on it and
// asks again.
func (d *Draining) Next() <-chan struct{} {
	if !d.Busy() {
		return nil
	}
	return d.streams[0].Done()
}
