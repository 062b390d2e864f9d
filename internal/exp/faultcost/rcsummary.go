package faultcost

import (
	"math"
	"time"

	"github.com/npfnic/npfnic/vdevice/trace"
)

// Rows of the RC breakdown: the consecutive stages of a receive fault,
// then the spans the Ethernet half and the papers compare with.
const (
	RCRowNAK       = iota // detected -> RNR NAK sent
	RCRowQueue            // RNR NAK sent (drop: detected) -> page request queued
	RCRowInterrupt        // queued -> interrupt
	RCRowResolve          // interrupt -> page response: the guest
	RCRowWait             // page response -> retransmission received: the sender
	RCRowAccept           // retransmission received -> accepted: the device resumes
	RCRowTotal            // detected -> accepted
	RCRowRoundTrip        // detected -> page response (what the floor compares with)
	RCRowDevice           // detected -> interrupt: the device's share before the guest runs
	RCRowBackoff          // RNR NAK sent -> retransmission received: the sender's back-off
	RCNumRows
)

// RCRowNames are the rows' names and what they span.
var RCRowNames = [RCNumRows][2]string{
	{"nak", "detected -> RNR NAK sent"},
	{"queue", "RNR NAK sent -> page request queued"},
	{"interrupt", "queued -> interrupt"},
	{"resolve", "interrupt -> page response (the guest)"},
	{"wait", "page response -> retransmission received"},
	{"accept", "retransmission received -> accepted"},
	{"total", "detected -> retransmission accepted"},
	{"round trip", "detected -> page response"},
	{"device", "detected -> interrupt (the device)"},
	{"backoff", "RNR NAK sent -> retransmission received (the sender)"},
}

// RCRowSpan is what row spans under policy (drop sends no RNR NAK).
func RCRowSpan(policy string, row int) string {
	if policy == "drop" && row == RCRowQueue {
		return "detected -> page request queued"
	}
	return RCRowNames[row][1]
}

// RCRowApplies reports whether row measures something under policy.
func RCRowApplies(policy string, row int) bool {
	return policy != "drop" || row != RCRowNAK && row != RCRowBackoff
}

// RCBreakdown is the per-stage distribution of RC receive faults.
type RCBreakdown struct {
	// Faults counts every fault; Receive those of the responder (the
	// rows are theirs), Requester the others.
	Faults, Receive, Requester int
	// Resumed: receive faults whose retransmission was accepted;
	// Refaulted: whose retransmission faulted again (at the same PSN) and
	// counts as a new fault; Unresolved: neither (the trace ended, lost
	// events, or the QP went away).
	Resumed, Refaulted, Unresolved int
	// NAKs are the RNR NAKs sent for the receive faults, Early the
	// retransmissions that came before the page (each NAKed again or
	// dropped); MaxNAKs is the most one fault took.
	NAKs, Early, MaxNAKs int
	Rows                 [RCNumRows]Dist
}

// NewRCBreakdown summarises faults.
func NewRCBreakdown(faults []trace.RCTimeline) RCBreakdown {
	var b RCBreakdown
	var rows [RCNumRows][]time.Duration
	add := func(row int, from, to trace.Event) {
		if from.Kind != 0 && to.Kind != 0 {
			rows[row] = append(rows[row], time.Duration(max(to.TS-from.TS, 0)))
		}
	}
	for _, tl := range faults {
		b.Faults++
		if !tl.Responder {
			b.Requester++
			continue
		}
		b.Receive++
		switch {
		case tl.Resume.Kind != 0:
			b.Resumed++
		case tl.Refaulted:
			b.Refaulted++
		default:
			b.Unresolved++
		}
		b.NAKs += tl.NAKs
		b.Early += tl.Early
		b.MaxNAKs = max(b.MaxNAKs, tl.NAKs)
		add(RCRowNAK, tl.Fault, tl.NAK)
		if tl.NAK.Kind != 0 {
			add(RCRowQueue, tl.NAK, tl.Request)
		} else {
			add(RCRowQueue, tl.Fault, tl.Request)
		}
		add(RCRowInterrupt, tl.Request, tl.IRQ)
		add(RCRowResolve, tl.IRQ, tl.Response)
		add(RCRowWait, tl.Response, tl.Retransmit)
		add(RCRowAccept, tl.Retransmit, tl.Resume)
		add(RCRowTotal, tl.Fault, tl.Resume)
		add(RCRowRoundTrip, tl.Fault, tl.Response)
		add(RCRowDevice, tl.Fault, tl.IRQ)
		add(RCRowBackoff, tl.NAK, tl.Retransmit)
	}
	for i := range rows {
		b.Rows[i] = NewDist(rows[i])
	}
	return b
}

// RCRoundRatios takes every round's p50 round trip (detected -> page
// response) of the receive faults over the p50 of the same round's floor.
func RCRoundRatios(rounds []RCRound) []RoundRatio {
	out := make([]RoundRatio, 0, len(rounds))
	for i, r := range rounds {
		rt := NewRCBreakdown(r.Faults).Rows[RCRowRoundTrip]
		rr := RoundRatio{Round: i + 1, RoundTrip: rt, Floor: NewDist(r.Echo), Ratio: math.NaN()}
		if rt.N > 0 && rr.Floor.N > 0 && rr.Floor.P50 > 0 {
			rr.Ratio = float64(rt.P50) / float64(rr.Floor.P50)
		}
		out = append(out, rr)
	}
	return out
}

// Reference is a published figure of a fault's cost, for the tables.
type Reference struct {
	Source string // the paper, figure or table
	What   string // the span it measures, in this experiment's terms
	Value  string // as published
}

// References are the published numbers the RC (and Ethernet) stages are
// set beside: seed 000 is Lesokhin et al., "Page Fault Support for
// Network Controllers", ASPLOS'17 (Mellanox Connect-IB firmware, minor
// faults, the sending side); seed 002 is TeRM, FAST'24 (an RNIC's ODP
// fault on an RDMA READ of 4 KB, a major CPU fault from an SSD, averages).
var References = []Reference{
	{"seed 000 Table 4 (ASPLOS'17), 4 KB message", "detected -> transmission resumed", "p50 215 us, p95 250 us, p99 261 us, max 464 us"},
	{"seed 000 Table 4 (ASPLOS'17), 4 MB message (1024 pages)", "detected -> transmission resumed", "p50 352 us, p95 431 us, p99 440 us, max 687 us"},
	{"seed 000 Sec. 4 / Fig. 3(a) (ASPLOS'17)", "a minor NPF of a 4 KB message, mean", "220 us, 90% of it in the NIC's firmware"},
	{"seed 002 Fig. 4 (1a) (FAST'24)", "stall QP & trigger interrupt (RNR NAK): detected -> interrupt", "127.37 us (hardware)"},
	{"seed 002 Fig. 4 (1b)+(1c)", "CPU page fault (major) + update RNIC page table: interrupt -> response", "242.34 + 74.17 = 316.51 us"},
	{"seed 002 Fig. 4 (1d)", "resume QP: response -> resumed", "128.86 us (hardware)"},
	{"seed 002 Fig. 4, sum / Sec. 3.2", "detected -> resumed, major / minor CPU fault", "570.74 us / 431.22 us"},
}
