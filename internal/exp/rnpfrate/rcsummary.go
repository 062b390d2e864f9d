package rnpfrate

import (
	"fmt"
	"math"
	"slices"

	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed"
)

// RCCell is one point of the RC half over its rounds.
type RCCell struct {
	Point
	// Runs and Failed count the rounds.
	Runs, Failed int
	// MBps is the median throughput, Lo and Hi the slowest and fastest
	// round; Rel is MBps relative to the optimum (NaN without one).
	MBps, Lo, Hi, Rel float64
	// Medians over the rounds that ran: messages per second, the
	// measured fault rate (ppm of the messages), and the counters.
	MsgsPerSec, MeasuredPPM                                                  float64
	Injected, Skipped, Faults, RNRNaks, FaultDrops, SenderRNR, SenderRetries float64
	// CostPerFault is how much longer the stream took per injected fault
	// than the optimum, in ms: (1/mps − 1/mps₀) · messages / faults. It is
	// the time the sender stood still for a fault: its RNR wait or ACK
	// timeout, the packets it resent, and the fault's resolution. NaN
	// without faults or an optimum.
	CostPerFault float64
	msgs         float64 // median messages per window
}

// Done reports whether the cell has a measurement.
func (c RCCell) Done() bool { return c.Runs > c.Failed }

// RCSummary is the RC half's cells and each sender's optimum.
type RCSummary struct {
	Cells []RCCell
	// Senders are the senders in the order they ran.
	Senders []string
	// Optima are each sender's.
	Optima map[string]RCOptimum
}

// RCOptimum is the median throughput of every window of a sender at
// rate 0, of either policy (without a fault the policy does nothing),
// Lo and Hi their spread, Runs how many; MsgsPerSec their median message
// rate. 0 without a rate-0 window.
type RCOptimum struct {
	MBps, Lo, Hi, MsgsPerSec float64
	Runs                     int
}

// SummarizeRC groups the windows by point, in the order the points first
// ran, and takes every cell relative to its sender's optimum.
func SummarizeRC(results []RCResult) RCSummary {
	order, by := report.Group(results, func(r RCResult) Point { return r.Point })
	senders, bySender := report.Group(results, func(r RCResult) string { return r.Sender })
	sum := RCSummary{Senders: senders, Optima: map[string]RCOptimum{}}
	for _, snd := range senders {
		var opt, optMsgs []float64
		for _, r := range bySender[snd] {
			if r.PPM == 0 && r.Err == nil {
				opt, optMsgs = append(opt, r.MBps()), append(optMsgs, r.MsgsPerSec())
			}
		}
		if len(opt) > 0 {
			o := RCOptimum{MBps: report.Median(opt), MsgsPerSec: report.Median(optMsgs), Runs: len(opt)}
			o.Lo, o.Hi = report.Spread(opt)
			sum.Optima[snd] = o
		}
	}
	for _, p := range order {
		opt := sum.Optima[p.Sender]
		c := RCCell{Point: p, Runs: len(by[p]), Rel: math.NaN(), CostPerFault: math.NaN()}
		var mbps, mps, ppm, msgs, inj, skip, faults, naks, drops, xrnr, xretry []float64
		for _, r := range by[p] {
			if r.Err != nil {
				c.Failed++
				continue
			}
			k := r.Counters
			mbps, mps, ppm = append(mbps, r.MBps()), append(mps, r.MsgsPerSec()), append(ppm, k.Rate())
			msgs, inj, skip = append(msgs, float64(k.Messages)), append(inj, float64(k.Injected)), append(skip, float64(k.Skipped))
			faults, naks, drops = append(faults, float64(k.Faults)), append(naks, float64(k.RNRNaks)), append(drops, float64(k.FaultDrops))
			xrnr, xretry = append(xrnr, float64(k.SenderRNR)), append(xretry, float64(k.SenderRetries))
		}
		if len(mbps) > 0 {
			m := report.Median
			c.MBps, c.MsgsPerSec, c.MeasuredPPM, c.msgs = m(mbps), m(mps), m(ppm), m(msgs)
			c.Lo, c.Hi = report.Spread(mbps)
			c.Injected, c.Skipped, c.Faults = m(inj), m(skip), m(faults)
			c.RNRNaks, c.FaultDrops, c.SenderRNR, c.SenderRetries = m(naks), m(drops), m(xrnr), m(xretry)
			if opt.MBps > 0 {
				c.Rel = c.MBps / opt.MBps
			}
			if p.PPM > 0 && c.Injected > 0 && c.MsgsPerSec > 0 && opt.MsgsPerSec > 0 {
				c.CostPerFault = (1/c.MsgsPerSec - 1/opt.MsgsPerSec) * c.msgs / c.Injected * 1e3
			}
		}
		sum.Cells = append(sum.Cells, c)
	}
	return sum
}

// findRC returns the cell of a point; rate 0 is found for any fault kind.
func findRC(cells []RCCell, sender, policy, fault string, ppm int) (RCCell, bool) {
	if ppm == 0 {
		fault = ""
	}
	for _, c := range cells {
		if c.Sender == sender && c.Policy == policy && c.PPM == ppm && c.Fault == fault && c.Done() {
			return c, true
		}
	}
	return RCCell{}, false
}

// RCRatio is RNR NAK against drop at one sender, fault kind and rate.
type RCRatio struct {
	Sender    string
	Fault     string // "" at rate 0
	PPM       int
	RNR, Drop float64 // median MB/s (NaN: not measured)
	Ratio     float64 // RNR / Drop (NaN: not measured; +Inf: drop is 0)
}

// RCRatios lists, for each sender, RNR / drop at rate 0, then for each
// fault kind at each rate, ascending.
func RCRatios(cells []RCCell) []RCRatio {
	var ppms []int
	var senders []string
	for _, c := range cells {
		if c.PPM > 0 && !slices.Contains(ppms, c.PPM) {
			ppms = append(ppms, c.PPM)
		}
		if !slices.Contains(senders, c.Sender) {
			senders = append(senders, c.Sender)
		}
	}
	slices.Sort(ppms)
	var out []RCRatio
	for _, snd := range senders {
		out = append(out, senderRatios(cells, snd, ppms)...)
	}
	return out
}

// senderRatios are RCRatios of one sender.
func senderRatios(cells []RCCell, sender string, ppms []int) []RCRatio {
	one := func(fault string, ppm int) RCRatio {
		r := RCRatio{Sender: sender, Fault: fault, PPM: ppm, RNR: math.NaN(), Drop: math.NaN(), Ratio: math.NaN()}
		a, aok := findRC(cells, sender, testbed.RecvFaultRNR, fault, ppm)
		b, bok := findRC(cells, sender, testbed.RecvFaultDrop, fault, ppm)
		if aok {
			r.RNR = a.MBps
		}
		if bok {
			r.Drop = b.MBps
		}
		if g := newGoal("", 0, r.RNR, r.Drop, aok && bok); g.Measured {
			r.Ratio = g.Ratio
		}
		return r
	}
	out := []RCRatio{one("", 0)}
	for _, f := range Faults {
		for _, ppm := range ppms {
			out = append(out, one(f, ppm))
		}
	}
	return out
}

// RCGoalMin is the goal of RNR NAK over drop at a 1% rate of minor
// faults, by sender: 20× with npfnic on both sides (its requester waits
// the NAK's 0.64 ms), 5× with rxe sending (it waits a jiffy or more).
var RCGoalMin = map[string]float64{SenderNPFNIC: 20, SenderRxe: 5}

// RCGoals are the issues' goals for the RC half, RNR NAK at least
// RCGoalMin × drop at a 1% fault rate with minor faults for each sender
// that ran, and the same ratio for major faults and at 10%, as
// information (Min 0).
func RCGoals(cells []RCCell) []Goal {
	var goals []Goal
	var senders []string
	for _, c := range cells {
		if !slices.Contains(senders, c.Sender) {
			senders = append(senders, c.Sender)
		}
	}
	for _, snd := range senders {
		for _, f := range Faults {
			for _, g := range []struct {
				ppm int
				min float64
			}{{10000, RCGoalMin[snd]}, {100000, 0}} {
				if f != "minor" {
					g.min = 0
				}
				a, aok := findRC(cells, snd, testbed.RecvFaultRNR, f, g.ppm)
				b, bok := findRC(cells, snd, testbed.RecvFaultDrop, f, g.ppm)
				goals = append(goals, newGoal(fmt.Sprintf("%s->npfnic, %g%% %s: rnr / drop", snd, float64(g.ppm)/1e4, f), g.min, a.MBps, b.MBps, aok && bok))
			}
		}
	}
	return goals
}
