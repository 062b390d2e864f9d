package trace

import "sort"

// RCTimeline is one RC memory-region fault read from a trace (seed 000
// §4): the access that faulted, the RNR NAK the responder answered it
// with, the page request, its interrupt and response, and then the
// sender's retransmission of the faulting PSN arriving and being accepted.
// Events not found are left zero (Kind 0): a requester's fault has no NAK,
// retransmission nor resume; under the responder's drop policy there is no
// NAK; a READ response that stalled resumes without a retransmission.
type RCTimeline struct {
	QPN, PSN  uint32
	Responder bool
	// Fault is the access that faulted (Fault on TrackRC).
	Fault Event
	// NAK is the first RNR NAK sent for the fault's PSN (RCTx).
	NAK Event
	// Request is the page request group queued for the fault's page
	// (PageRequest), IRQ the first interrupt on the page request vector at
	// or after it, Response the driver's answer to the group.
	Request, IRQ, Response Event
	// Retransmit is the first request packet of the fault's QPN and PSN
	// received after the response (RCRx), Resume the responder executing
	// it (RCResume): the retransmission accepted.
	Retransmit, Resume Event
	// NAKs counts the RNR NAKs sent for the PSN while the fault was open:
	// the first, and one for each retransmission that came before the
	// page did (Early counts those retransmissions).
	NAKs, Early int
	// Refaulted is set when a new fault at the same QPN and PSN came
	// before any resume (the retransmission faulted on another page, or
	// the page went again): this fault ends there, without Resume.
	Refaulted bool
}

// RCStageNames name the events of RCTimeline.Stages.
var RCStageNames = []string{"fault detected", "RNR NAK sent", "page request queued", "interrupt raised",
	"page response", "retransmission received", "retransmission accepted"}

// Stages are the timeline's events in the order the device meets them.
func (tl RCTimeline) Stages() []Event {
	return []Event{tl.Fault, tl.NAK, tl.Request, tl.IRQ, tl.Response, tl.Retransmit, tl.Resume}
}

// Timeline is the fault's path in the form trace.Timelines gives.
func (tl RCTimeline) Timeline() Timeline {
	return Timeline{Fault: tl.Fault, Request: tl.Request, IRQ: tl.IRQ, Response: tl.Response, Resume: tl.Resume}
}

// maxOpenRC bounds the faults an RCFaults keeps open: beyond it the oldest
// is given up (a QP destroyed with its fault outstanding never resumes).
const maxOpenRC = 4096

// RCFaults pairs the events of RC faults as they come: Add every event of
// a trace in order (from Snapshot, Since or ReadJSON, in pieces if need
// be), Take the faults that ended. It pairs:
//   - a Fault on TrackRC opens a fault (a new one at the same QPN, PSN and
//     side ends the open one as Refaulted);
//   - a PageRequest goes to the oldest open fault of its page without one,
//     an IRQ on the page request vector to every open fault whose request
//     has no interrupt yet, a PageResponse to the fault of its PRG index;
//     a requester's fault ends at its response;
//   - an RNR NAK sent (RCTx) goes to the open responder faults of its PSN
//     (the NAK carries the peer's QPN, not the faulting QP's, so it is
//     matched by PSN alone);
//   - a request packet received (RCRx) at an open responder fault's QPN
//     and PSN is its retransmission once the response came, an early one
//     before;
//   - an RCResume of the fault's QPN and PSN ends it.
//
// The zero value is not usable: use NewRCFaults.
type RCFaults struct {
	vector uint64
	open   []*RCTimeline
	done   []RCTimeline
}

// NewRCFaults pairs RC faults whose page requests are announced on
// prqVector.
func NewRCFaults(prqVector uint64) *RCFaults { return &RCFaults{vector: prqVector} }

// Add takes the next event.
func (f *RCFaults) Add(e Event) {
	switch e.Kind {
	case Fault:
		if e.Track != TrackRC {
			return
		}
		qpn, psn, resp := e.RCFault()
		if i := f.index(func(t *RCTimeline) bool { return t.QPN == qpn && t.PSN == psn && t.Responder == resp }); i >= 0 {
			f.open[i].Refaulted = true
			f.end(i)
		}
		if len(f.open) >= maxOpenRC {
			f.end(0)
		}
		f.open = append(f.open, &RCTimeline{QPN: qpn, PSN: psn, Responder: resp, Fault: e})
	case PageRequest:
		if i := f.index(func(t *RCTimeline) bool { return t.Request.Kind == 0 && t.Fault.A&pageMask == e.B&pageMask }); i >= 0 {
			f.open[i].Request = e
		}
	case IRQ:
		if e.A != f.vector {
			return
		}
		for _, t := range f.open {
			if t.Request.Kind != 0 && t.IRQ.Kind == 0 {
				t.IRQ = e
			}
		}
	case PageResponse:
		i := f.index(func(t *RCTimeline) bool { return t.Request.Kind != 0 && t.Response.Kind == 0 && t.Request.A == e.A })
		if i < 0 {
			return
		}
		f.open[i].Response = e
		if !f.open[i].Responder {
			f.end(i)
		}
	case RCTx:
		if !e.RNRNak() {
			return
		}
		_, _, psn, _ := e.RCPacketInfo()
		for _, t := range f.open {
			if t.Responder && t.PSN == psn {
				if t.NAK.Kind == 0 {
					t.NAK = e
				}
				t.NAKs++
			}
		}
	case RCRx:
		if !e.RCRequest() {
			return
		}
		qpn, _, psn, _ := e.RCPacketInfo()
		for _, t := range f.open {
			if !t.Responder || t.QPN != qpn || t.PSN != psn {
				continue
			}
			switch {
			case t.Response.Kind == 0:
				t.Early++
			case t.Retransmit.Kind == 0:
				t.Retransmit = e
			}
		}
	case RCResume:
		if i := f.index(func(t *RCTimeline) bool {
			return t.Responder && uint64(t.QPN) == e.A && uint64(t.PSN) == e.B
		}); i >= 0 {
			f.open[i].Resume = e
			f.end(i)
		}
	}
}

// index is the oldest open fault that match accepts, or -1.
func (f *RCFaults) index(match func(*RCTimeline) bool) int {
	for i, t := range f.open {
		if match(t) {
			return i
		}
	}
	return -1
}

// end moves open fault i to the ended ones.
func (f *RCFaults) end(i int) {
	f.done = append(f.done, *f.open[i])
	f.open = append(f.open[:i], f.open[i+1:]...)
}

// Open is the number of faults still open.
func (f *RCFaults) Open() int { return len(f.open) }

// Take returns the faults that ended since the last Take, in the order
// they were detected.
func (f *RCFaults) Take() []RCTimeline {
	out := f.done
	f.done = nil
	sort.SliceStable(out, func(i, j int) bool { return out[i].Fault.TS < out[j].Fault.TS })
	return out
}

// Flush ends every open fault as it is (events the trace lost, or the end
// of a run) and returns them with the others Take would, in the order they
// were detected.
func (f *RCFaults) Flush() []RCTimeline {
	for len(f.open) > 0 {
		f.end(0)
	}
	return f.Take()
}

// RCTimelines pairs every RC fault of events (in time order, as Snapshot
// and ReadJSON return them) with its stages (RCFaults), in the order they
// were detected; faults the trace ends before are included as they are.
func RCTimelines(events []Event, prqVector uint64) []RCTimeline {
	f := NewRCFaults(prqVector)
	for _, e := range events {
		f.Add(e)
	}
	return f.Flush()
}
