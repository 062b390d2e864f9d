package pri

import (
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"
)

// Fault timing. Every page request group carries five timestamps on the
// Now clock, and Group.Finish stores them in a Recorder: a fixed ring of
// records that writers fill without locks (a per-slot sequence number
// lets readers skip a record being overwritten). Summarize turns a
// snapshot into per-stage distributions (p50/p99), the breakdown of
// Figure 3 / Table 4 of the paper.

// Stamps of one fault, in the order they happen.
const (
	StampDetected  = iota // the datapath got the translation fault
	StampQueued           // the page requests are in the queue (before the producer index is published)
	StampInterrupt        // the MSI-X vector was raised
	StampResponse         // the device read the page response
	StampDone             // the operation finished: the DMA after a Success, or its error completion
	NumStamps
)

// Stages are the intervals between stamps.
const (
	StageQueue     = iota // detected → queued: building and writing the requests
	StageInterrupt        // queued → interrupt raised
	StageResolve          // interrupt → response: the driver (and the OS) resolving the fault
	StageResume           // response → done: retried translation and DMA
	StageTotal            // detected → done
	NumStages
)

// StageNames names the stages for reports.
var StageNames = [NumStages]string{"queue", "interrupt", "resolve", "resume", "total"}

// Outcome is how a fault ended.
type Outcome uint8

// Outcomes.
const (
	OutcomeSuccess   Outcome = iota // Success response, operation retried
	OutcomeInvalid                  // Invalid Request: the operation failed
	OutcomeAbandoned                // Response Failure, reset or queue teardown
)

// Record is the timing of one page request group.
type Record struct {
	Stamps  [NumStamps]int64 // clock.Nanotime values; 0 for a stage never reached
	Pages   int
	Kind    uint16 // hw.FaultKind*
	Queue   uint16
	Outcome Outcome
}

// Interval returns the duration of stage s, or false if a stamp is
// missing. A negative interval (a polling driver may answer before the
// interrupt stamp is taken) counts as zero.
func (r Record) Interval(s int) (time.Duration, bool) {
	var a, b int64
	switch s {
	case StageQueue:
		a, b = r.Stamps[StampDetected], r.Stamps[StampQueued]
	case StageInterrupt:
		a, b = r.Stamps[StampQueued], r.Stamps[StampInterrupt]
	case StageResolve:
		a, b = r.Stamps[StampInterrupt], r.Stamps[StampResponse]
	case StageResume:
		a, b = r.Stamps[StampResponse], r.Stamps[StampDone]
	case StageTotal:
		a, b = r.Stamps[StampDetected], r.Stamps[StampDone]
	default:
		return 0, false
	}
	if a == 0 || b == 0 {
		return 0, false
	}
	return time.Duration(max(b-a, 0)), true
}

type recSlot struct {
	// seq is 2i+1 while record i is written and 2i+2 once it is complete;
	// a writer claims the slot by moving seq from even to odd, so only one
	// writes at a time and a reader that sees the same even value before
	// and after copying the fields has a whole record.
	seq    atomic.Uint64
	stamps [NumStamps]atomic.Int64
	meta   atomic.Uint64
}

// Recorder keeps the most recent records in a fixed ring. Add never blocks
// and never allocates; it is safe for concurrent use.
type Recorder struct {
	slots   []recSlot
	mask    uint64
	next    atomic.Uint64
	dropped atomic.Uint64
}

// Dropped is the number of records lost to writers racing for one slot.
func (rc *Recorder) Dropped() uint64 { return rc.dropped.Load() }

// DefaultRecords is the ring size of the Recorder New makes.
const DefaultRecords = 1 << 14

// NewRecorder returns a recorder keeping the last n records (rounded up to
// a power of two).
func NewRecorder(n int) *Recorder {
	size := 1
	for size < n {
		size <<= 1
	}
	return &Recorder{slots: make([]recSlot, size), mask: uint64(size - 1)}
}

// Add stores r, overwriting the oldest record when the ring is full. In
// the rare case that the slot is still being written by a writer a whole
// ring behind (or was already taken by a newer record), r is dropped
// rather than torn.
func (rc *Recorder) Add(r Record) {
	i := rc.next.Add(1) - 1
	s := &rc.slots[i&rc.mask]
	old := s.seq.Load()
	if old&1 != 0 || old > 2*i || !s.seq.CompareAndSwap(old, 2*i+1) {
		rc.dropped.Add(1)
		return
	}
	for k, v := range r.Stamps {
		s.stamps[k].Store(v)
	}
	pages := uint64(min(max(r.Pages, 0), 0xffff))
	s.meta.Store(pages | uint64(r.Kind)<<16 | uint64(r.Queue)<<32 | uint64(r.Outcome)<<48)
	s.seq.Store(2*i + 2)
}

// Count is the number of records ever added.
func (rc *Recorder) Count() uint64 { return rc.next.Load() }

// Snapshot returns the records still in the ring, oldest first, skipping
// any being overwritten at that moment.
func (rc *Recorder) Snapshot() []Record {
	n := rc.next.Load()
	first := uint64(0)
	if size := uint64(len(rc.slots)); n > size {
		first = n - size
	}
	out := make([]Record, 0, n-first)
	for i := first; i < n; i++ {
		s := &rc.slots[i&rc.mask]
		seq := s.seq.Load()
		if seq != 2*i+2 {
			continue
		}
		var r Record
		for k := range r.Stamps {
			r.Stamps[k] = s.stamps[k].Load()
		}
		m := s.meta.Load()
		if s.seq.Load() != seq {
			continue
		}
		r.Pages, r.Kind, r.Queue, r.Outcome = int(m&0xffff), uint16(m>>16), uint16(m>>32), Outcome(m>>48)
		out = append(out, r)
	}
	return out
}

// Dist summarises one stage over many faults.
type Dist struct {
	N                   int
	Mean, P50, P99, Max time.Duration
}

// Summary is the per-stage breakdown of a set of faults.
type Summary struct {
	Stages [NumStages]Dist
}

// Summarize computes the distribution of every stage over the records
// that reached both of its stamps.
func Summarize(recs []Record) Summary {
	var s Summary
	for st := range NumStages {
		var d []time.Duration
		for _, r := range recs {
			if v, ok := r.Interval(st); ok {
				d = append(d, v)
			}
		}
		s.Stages[st] = distOf(d)
	}
	return s
}

func distOf(d []time.Duration) Dist {
	if len(d) == 0 {
		return Dist{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	q := func(p float64) time.Duration { return d[min(int(p*float64(len(d))), len(d)-1)] }
	return Dist{N: len(d), Mean: sum / time.Duration(len(d)), P50: q(0.50), P99: q(0.99), Max: d[len(d)-1]}
}

// Write prints the summary as a table.
func (s Summary) Write(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "%-10s %8s %12s %12s %12s %12s\n", "stage", "n", "mean", "p50", "p99", "max"); err != nil {
		return err
	}
	for st, d := range s.Stages {
		if _, err := fmt.Fprintf(w, "%-10s %8d %12v %12v %12v %12v\n", StageNames[st], d.N, d.Mean, d.P50, d.P99, d.Max); err != nil {
			return err
		}
	}
	return nil
}
