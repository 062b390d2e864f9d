package trace

import (
	"reflect"
	"testing"
)

// rcPacket is an RCTx or RCRx event as RCPacket records it.
func rcPacket(ts int64, k Kind, qpn uint32, op uint8, psn uint32, syndrome uint8) Event {
	return Event{TS: ts, Kind: k, Track: TrackRC, A: uint64(syndrome)<<32 | uint64(qpn), B: uint64(op)<<24 | uint64(psn)}
}

const (
	opSendFirst  = 0x00
	opSendMiddle = 0x01
	opAck        = 0x11
	rnrSyndrome  = 0x2c // RNR NAK, timer 12
	ackSyndrome  = 0x1f
)

func TestRCFaultB(t *testing.T) {
	for _, tc := range []struct {
		qpn, psn uint32
		resp     bool
	}{{0x11, 0, true}, {0xffffff, 0xffffff, false}, {0x123456, 0xabcdef, true}} {
		e := Event{Kind: Fault, Track: TrackRC, B: RCFaultB(tc.qpn, tc.psn, tc.resp)}
		if q, p, r := e.RCFault(); q != tc.qpn || p != tc.psn || r != tc.resp {
			t.Errorf("RCFaultB(%#x, %#x, %v) reads back %#x, %#x, %v", tc.qpn, tc.psn, tc.resp, q, p, r)
		}
		if e.B >= 1<<53 {
			t.Errorf("B %#x does not survive a JSON number", e.B)
		}
	}
	nak := rcPacket(0, RCTx, 0x20, opAck, 7, rnrSyndrome)
	if !nak.RNRNak() || nak.RCRequest() {
		t.Errorf("an RNR NAK: RNRNak %v, RCRequest %v", nak.RNRNak(), nak.RCRequest())
	}
	if ack := rcPacket(0, RCTx, 0x20, opAck, 7, ackSyndrome); ack.RNRNak() {
		t.Error("an ACK reads as an RNR NAK")
	}
	if nakSeq := rcPacket(0, RCTx, 0x20, opAck, 7, 0x60); nakSeq.RNRNak() {
		t.Error("a PSN sequence error NAK reads as an RNR NAK")
	}
	if send := rcPacket(0, RCRx, 0x10, opSendMiddle, 7, 0); !send.RCRequest() || send.RNRNak() {
		t.Error("a SEND middle is not a request")
	}
}

// TestRCTimelines builds the trace of RC faults as the device records
// them and checks the stages each one gets.
func TestRCTimelines(t *testing.T) {
	const (
		vec  = 5
		qpn  = 0x10 // npfnic's QP
		peer = 0x13 // the sender's QP: the NAKs' destination
		page = 0x7f00_0000_3000
	)
	fault := func(ts int64, va uint64, qpn, psn uint32, resp bool) Event {
		return Event{TS: ts, Kind: Fault, Track: TrackRC, A: va, B: RCFaultB(qpn, psn, resp)}
	}
	ev := func(ts int64, k Kind, tr Track, a, b uint64) Event {
		return Event{TS: ts, Kind: k, Track: tr, A: a, B: b}
	}
	at := func(ts ...int64) []int64 { return ts }
	for _, tc := range []struct {
		name   string
		events []Event
		want   [][]int64 // per fault, the stages' timestamps (0: missing)
		check  func(t *testing.T, tls []RCTimeline)
	}{
		{
			name: "rnr: NAK, request, interrupt, response, an early retransmission NAKed again, then the one accepted",
			events: []Event{
				rcPacket(10, RCRx, qpn, opSendMiddle, 100, 0), // the packet that faults
				fault(12, page+0x10, qpn, 100, true),
				rcPacket(15, RCTx, peer, opAck, 100, rnrSyndrome),
				ev(18, PageRequest, TrackPRI, 3, page),
				ev(19, IRQ, TrackIRQ, 1, 0), // another vector
				ev(20, IRQ, TrackIRQ, vec, 0),
				rcPacket(30, RCRx, qpn, opSendMiddle, 100, 0), // early
				rcPacket(31, RCTx, peer, opAck, 100, rnrSyndrome),
				rcPacket(32, RCRx, qpn, opSendMiddle, 101, 0), // dropped after the NAK
				ev(40, PageResponse, TrackPRI, 3, 0),
				rcPacket(50, RCRx, qpn, opSendFirst, 96, 0), // rxe starts over at the message's first PSN: duplicates
				rcPacket(51, RCTx, peer, opAck, 99, ackSyndrome),
				rcPacket(60, RCRx, qpn, opSendMiddle, 100, 0),
				ev(61, RCResume, TrackRC, qpn, 100),
				rcPacket(62, RCRx, qpn, opSendMiddle, 100, 0), // a later duplicate: not this fault's
			},
			want: [][]int64{at(12, 15, 18, 20, 40, 60, 61)},
			check: func(t *testing.T, tls []RCTimeline) {
				tl := tls[0]
				if tl.QPN != qpn || tl.PSN != 100 || !tl.Responder || tl.NAKs != 2 || tl.Early != 1 || tl.Refaulted {
					t.Errorf("got %+v", tl)
				}
				if tl.Timeline().Resume.TS != 61 || tl.Timeline().Request.TS != 18 {
					t.Errorf("Timeline: %+v", tl.Timeline())
				}
			},
		},
		{
			name: "drop: no NAK; the retransmission after the ACK timeout",
			events: []Event{
				fault(1, page, qpn, 7, true),
				ev(2, PageRequest, TrackPRI, 0, page),
				ev(3, IRQ, TrackIRQ, vec, 0),
				ev(4, PageResponse, TrackPRI, 0, 0),
				rcPacket(5, RCRx, qpn, opSendFirst, 6, 0),
				rcPacket(6, RCRx, qpn, opSendMiddle, 7, 0),
				ev(7, RCResume, TrackRC, qpn, 7),
			},
			want: [][]int64{at(1, 0, 2, 3, 4, 6, 7)},
		},
		{
			name: "two QPs fault at once: each its own request (by page), response (by PRG index) and resume",
			events: []Event{
				fault(1, page, qpn, 7, true),
				rcPacket(2, RCTx, peer, opAck, 7, rnrSyndrome),
				fault(3, page+0x1000, 0x11, 900, true),
				rcPacket(4, RCTx, 0x14, opAck, 900, rnrSyndrome),
				ev(5, PageRequest, TrackPRI, 1, page),
				ev(6, PageRequest, TrackPRI, 2, page+0x1000),
				ev(7, IRQ, TrackIRQ, vec, 0),
				ev(8, PageResponse, TrackPRI, 2, 0),
				ev(9, PageResponse, TrackPRI, 1, 0),
				rcPacket(10, RCRx, 0x11, opSendMiddle, 900, 0),
				ev(11, RCResume, TrackRC, 0x11, 900),
				rcPacket(12, RCRx, qpn, opSendMiddle, 7, 0),
				ev(13, RCResume, TrackRC, qpn, 7),
			},
			want: [][]int64{at(1, 2, 5, 7, 9, 12, 13), at(3, 4, 6, 7, 8, 10, 11)},
		},
		{
			name: "a refault at the same PSN ends the first without a resume; a requester fault ends at its response",
			events: []Event{
				fault(1, page, qpn, 7, true),
				ev(2, PageRequest, TrackPRI, 0, page),
				ev(3, IRQ, TrackIRQ, vec, 0),
				ev(4, PageResponse, TrackPRI, 0, 0),
				rcPacket(5, RCRx, qpn, opSendMiddle, 7, 0),
				fault(6, page+0x1000, qpn, 7, true), // the same packet, the next page
				ev(7, PageRequest, TrackPRI, 1, page+0x1000),
				fault(8, page+0x5000, qpn, 300, false), // the requester's own payload
				ev(9, PageRequest, TrackPRI, 2, page+0x5000),
				ev(10, IRQ, TrackIRQ, vec, 0),
				ev(11, PageResponse, TrackPRI, 2, 0),
				ev(12, PageResponse, TrackPRI, 1, 0),
				rcPacket(13, RCRx, qpn, opSendMiddle, 7, 0),
				ev(14, RCResume, TrackRC, qpn, 7),
			},
			want: [][]int64{at(1, 0, 2, 3, 4, 5, 0), at(6, 0, 7, 10, 12, 13, 14), at(8, 0, 9, 10, 11, 0, 0)},
			check: func(t *testing.T, tls []RCTimeline) {
				if !tls[0].Refaulted || tls[1].Refaulted || tls[2].Responder {
					t.Errorf("refaulted %v %v, responder %v", tls[0].Refaulted, tls[1].Refaulted, tls[2].Responder)
				}
			},
		},
		{
			name: "Ethernet faults and a fault the trace ends before",
			events: []Event{
				ev(1, Fault, PairRx(0), page, 3),
				ev(2, PageRequest, TrackPRI, 0, page),
				fault(3, page+0x2000, qpn, 7, true),
				ev(4, PageRequest, TrackPRI, 1, page+0x2000),
			},
			want: [][]int64{at(3, 0, 4, 0, 0, 0, 0)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RCTimelines(tc.events, vec)
			if len(got) != len(tc.want) {
				t.Fatalf("%d faults, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, tl := range got {
				var ts []int64
				for _, s := range tl.Stages() {
					ts = append(ts, s.TS)
				}
				if !reflect.DeepEqual(ts, tc.want[i]) {
					t.Errorf("fault %d: stages at %v, want %v (%v)", i, ts, tc.want[i], RCStageNames)
				}
			}
			if tc.check != nil {
				tc.check(t, got)
			}
			// Fed in pieces, with Take between them, the same faults come out.
			f := NewRCFaults(vec)
			var pieces []RCTimeline
			for i, e := range tc.events {
				f.Add(e)
				if i%3 == 2 {
					pieces = append(pieces, f.Take()...)
				}
			}
			pieces = append(pieces, f.Flush()...)
			if len(pieces) != len(got) || f.Open() != 0 {
				t.Fatalf("in pieces: %d faults, %d open; at once %d", len(pieces), f.Open(), len(got))
			}
		})
	}
}

// TestTimelinesRC: trace.Timelines resumes an RC receive fault at its
// RCResume, so npfnic trace shows RC faults beside the Ethernet ones.
func TestTimelinesRC(t *testing.T) {
	const vec = 5
	events := []Event{
		{TS: 1, Kind: Fault, Track: TrackRC, A: 0x5010, B: RCFaultB(0x10, 42, true)},
		{TS: 2, Kind: PageRequest, Track: TrackPRI, A: 0, B: 0x5000},
		{TS: 3, Kind: IRQ, Track: TrackIRQ, A: vec},
		{TS: 4, Kind: RCResume, Track: TrackRC, A: 0x10, B: 42}, // before the response: not this one
		{TS: 5, Kind: PageResponse, Track: TrackPRI, A: 0},
		{TS: 6, Kind: RCResume, Track: TrackRC, A: 0x11, B: 42}, // another QP
		{TS: 7, Kind: RCResume, Track: TrackRC, A: 0x10, B: 42},
	}
	tls := Timelines(events, vec)
	if len(tls) != 1 || !tls[0].Complete() || tls[0].Resume.TS != 7 {
		t.Fatalf("%+v", tls)
	}
}

func TestSince(t *testing.T) {
	needTrace(t)
	r, _ := New(8)
	ev, next, missed := r.Since(0)
	if len(ev) != 0 || next != 0 || missed != 0 {
		t.Fatalf("empty: %d events, next %d, missed %d", len(ev), next, missed)
	}
	for i := range 5 {
		r.Emit(Doorbell, TrackDevice, uint64(i), 0)
	}
	ev, next, missed = r.Since(0)
	if len(ev) != 5 || next != 5 || missed != 0 || ev[0].A != 0 || ev[4].A != 4 {
		t.Fatalf("5 events: %d, next %d, missed %d", len(ev), next, missed)
	}
	for i := 5; i < 20; i++ {
		r.Emit(Doorbell, TrackDevice, uint64(i), 0)
	}
	// From 5 on: the ring holds 12..19, so 5..11 are missed.
	ev, next, missed = r.Since(next)
	if len(ev) != 8 || next != 20 || missed != 7 || ev[0].A != 12 || ev[7].A != 19 {
		t.Fatalf("after overwriting: %d events from %d, next %d, missed %d", len(ev), ev[0].A, next, missed)
	}
	if ev, next, missed = r.Since(next); len(ev) != 0 || next != 20 || missed != 0 {
		t.Fatalf("nothing new: %d events, next %d, missed %d", len(ev), next, missed)
	}
	if ev, _, _ = r.Since(100); len(ev) != 0 {
		t.Fatalf("from beyond the end: %d events", len(ev))
	}
	var nilRec *Recorder
	if ev, next, _ = nilRec.Since(3); ev != nil || next != 3 {
		t.Fatal("a nil recorder")
	}
}
