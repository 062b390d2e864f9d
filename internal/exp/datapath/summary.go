package datapath

import (
	"fmt"
	"time"

	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// Summarize reduces Run's per-round results to one Result per NIC, in the
// order the NICs first appear: the median of each measurement over the
// rounds that made it, memaslap's errors and misses summed, the highest
// host load, and Err set if any round failed. Summaries (Round 0) pass
// through unchanged.
func Summarize(results []Result) []Result {
	order, byNIC := report.Group(results, func(r Result) string { return r.NIC })
	out := make([]Result, 0, len(order))
	for _, n := range order {
		rs := byNIC[n]
		if len(rs) == 1 && rs[0].Round == 0 {
			out = append(out, rs[0])
			continue
		}
		out = append(out, summarize(rs))
	}
	return out
}

func summarize(rs []Result) Result {
	s := Result{NIC: rs[0].NIC, Label: rs[0].Label, Rounds: len(rs)}
	var boots []float64
	var g2h, h2g []*workload.Iperf
	var mcs []*workload.Memaslap
	var failed []Result
	var g2hCPU, h2gCPU, mcCPU []*GuestCPU
	for _, r := range rs {
		for _, p := range []struct {
			x  *GuestCPU
			to *[]*GuestCPU
		}{{r.G2HCPU, &g2hCPU}, {r.H2GCPU, &h2gCPU}, {r.MemcachedCPU, &mcCPU}} {
			if p.x != nil {
				*p.to = append(*p.to, p.x)
			}
		}
		if r.Boot > 0 {
			boots = append(boots, float64(r.Boot))
		}
		if r.GuestToHost != nil {
			g2h = append(g2h, r.GuestToHost)
		}
		if r.HostToGuest != nil {
			h2g = append(h2g, r.HostToGuest)
		}
		if r.Memcached != nil {
			mcs = append(mcs, r.Memcached)
		}
		if r.GuestIf != "" {
			s.GuestIf = r.GuestIf
		}
		s.HostLoad = max(s.HostLoad, r.HostLoad)
		if r.Err != nil {
			failed = append(failed, r)
		}
	}
	if len(boots) > 0 {
		s.Boot = time.Duration(report.Median(boots))
	}
	s.GuestToHost, s.HostToGuest = medianIperf(g2h), medianIperf(h2g)
	s.G2HCPU, s.H2GCPU, s.MemcachedCPU = medianGuestCPU(g2hCPU), medianGuestCPU(h2gCPU), medianGuestCPU(mcCPU)
	if len(mcs) > 0 {
		m := &workload.Memaslap{}
		var ops, secs, tps, net []float64
		for _, x := range mcs {
			ops, secs, tps, net = append(ops, float64(x.Ops)), append(secs, x.RunTime), append(tps, x.OpsPerSec), append(net, x.NetMBps)
			m.Gets += x.Gets
			m.Sets += x.Sets
			m.GetMisses += x.GetMisses
			m.VerifyMisses += x.VerifyMisses
			m.VerifyFail += x.VerifyFail
			m.Errors += x.Errors
			for _, l := range x.ErrorLines {
				if len(m.ErrorLines) < workload.MaxErrorLines {
					m.ErrorLines = append(m.ErrorLines, l)
				}
			}
		}
		m.Ops, m.RunTime, m.OpsPerSec, m.NetMBps = int64(report.Median(ops)), report.Median(secs), report.Median(tps), report.Median(net)
		s.Memcached = m
	}
	switch {
	case len(failed) == 0:
	case len(rs) == 1:
		s.Err = failed[0].Err
	default:
		s.Err = fmt.Errorf("%d of %d rounds failed; round %d: %w", len(failed), len(rs), failed[0].Round, failed[0].Err)
	}
	return s
}

func medianIperf(xs []*workload.Iperf) *workload.Iperf {
	if len(xs) == 0 {
		return nil
	}
	if len(xs) == 1 {
		return xs[0]
	}
	var mbps, bytes, secs, sent, retr []float64
	for _, x := range xs {
		mbps, bytes, secs = append(mbps, x.Mbps), append(bytes, float64(x.Bytes)), append(secs, x.Seconds)
		sent, retr = append(sent, float64(x.SentBytes)), append(retr, float64(x.Retransmits))
	}
	return &workload.Iperf{Mbps: report.Median(mbps), Bytes: int64(report.Median(bytes)), Seconds: report.Median(secs), SentBytes: int64(report.Median(sent)), Retransmits: int(report.Median(retr))}
}
