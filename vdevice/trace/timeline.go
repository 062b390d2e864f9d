package trace

// Timeline is one page request's path through the device, read from a
// trace: the fault that raised it, the group queued for the driver, the
// interrupt that announced it, the driver's response, and the event that
// shows the device going on with the faulted buffer (Resume: for an RX
// buffer the frame completed into that descriptor, or the rNPF resolved
// when the frame went to the backup ring; for a TX buffer the next frame
// sent from that queue; for an RC receive fault its RCResume, the
// retransmission accepted). Events not found are left zero (Kind 0).
// RCTimelines adds what is particular to RC: the RNR NAK and the
// retransmission's arrival.
type Timeline struct {
	Fault, Request, IRQ, Response, Resume Event
}

// Complete reports whether every stage was found.
func (tl Timeline) Complete() bool {
	return tl.Fault.Kind != 0 && tl.Request.Kind != 0 && tl.IRQ.Kind != 0 &&
		tl.Response.Kind != 0 && tl.Resume.Kind != 0
}

// Stages are the timeline's events in the order the device goes through
// them.
func (tl Timeline) Stages() []Event {
	return []Event{tl.Fault, tl.Request, tl.IRQ, tl.Response, tl.Resume}
}

// StageNames name Stages.
var StageNames = []string{"fault detected", "page request queued", "interrupt raised", "page response", "resumed"}

const pageMask = ^uint64(4095)

// Timelines pairs every page request in events (in time order, as
// Snapshot and ReadJSON return them) with the latest fault of its page
// before it, the first interrupt on prqVector at or after it, its response
// (the next one of its PRG index), and the resume after the response. A
// request whose fault the ring no longer holds is left out.
func Timelines(events []Event, prqVector uint64) []Timeline {
	var out []Timeline
	lastFault := map[uint64]int{} // page -> index of its latest fault
	for i, e := range events {
		switch e.Kind {
		case Fault:
			lastFault[e.A&pageMask] = i
		case PageRequest:
			fi, ok := lastFault[e.B]
			if !ok {
				continue
			}
			delete(lastFault, e.B)
			tl := Timeline{Fault: events[fi], Request: e}
			tl.IRQ = find(events[i+1:], func(x Event) bool { return x.Kind == IRQ && x.A == prqVector })
			j := index(events[i+1:], func(x Event) bool { return x.Kind == PageResponse && x.A == e.A })
			if j >= 0 {
				j += i + 1
				tl.Response = events[j]
				tl.Resume = resume(events[fi], events[fi+1:], events[j+1:])
			}
			out = append(out, tl)
		}
	}
	return out
}

// resume finds what shows the device going on with fault f's buffer.
// sinceFault holds the events after the fault (where the backup store of
// the frame is, and its resolve, which the driver may write before or
// after its page response); afterResponse those after the response.
func resume(f Event, sinceFault, afterResponse []Event) Event {
	if f.Track == TrackRC {
		qpn, psn, _ := f.RCFault()
		return find(afterResponse, func(x Event) bool {
			return x.Kind == RCResume && x.A == uint64(qpn) && x.B == uint64(psn)
		})
	}
	if f.Track >= trackQP && (f.Track-trackQP)%2 == 1 { // a TX queue
		return find(afterResponse, func(x Event) bool { return x.Kind == TxFrame && x.Track == f.Track })
	}
	i := index(sinceFault, func(x Event) bool { return x.Kind == BackupStore && x.A == f.B })
	if i >= 0 {
		bit := sinceFault[i].B
		return find(sinceFault[i+1:], func(x Event) bool { return x.Kind == BackupResolve && x.A == bit })
	}
	return find(afterResponse, func(x Event) bool {
		return x.Kind == RxFrame && x.Track == f.Track && x.A == f.B
	})
}

func index(events []Event, match func(Event) bool) int {
	for i, e := range events {
		if match(e) {
			return i
		}
	}
	return -1
}

func find(events []Event, match func(Event) bool) Event {
	if i := index(events, match); i >= 0 {
		return events[i]
	}
	return Event{}
}
