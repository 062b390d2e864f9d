// Package rnrsweep owns the receive-fault frequency experiment: RC stream
// throughput (an ib_send_bw-like SEND stream) against the probability that
// a receive DMA faults, for the two recoveries a responder can use — RNR
// NAK (the requester backs off for min_rnr_timer and retransmits from the
// faulting PSN, seed 000 §4) and drop (the requester only recovers by its
// local ACK timeout) — and for page-fault resolution times from minor
// (tens of µs) to major (ms). It produces the data of seed 000 Figure 10
// (right) and seed 004 Figure 11.
//
// Model. Two ibrc engines run over an ibrctest.Link on a virtual clock, so
// the numbers are simulated time, independent of the host. The link is
// full duplex at LinkGbps with Latency one way; every frame occupies its
// bytes plus 24 bytes of preamble, FCS and gap, so the goodput ceiling is
// MTU/(MTU+82) of the line rate. The receiver's buffers are paged memory in
// which every packet's DMA finds its page absent with probability
// FaultRate (independently per access: a retransmission can fault again);
// a fault raises a page request that completes after Resolution, making
// the page present. The RNR NAK carries the smallest IB timer code at
// least Resolution (or the fixed code RNRTimer). The local ACK timeout is
// 4.096 µs × 2^Timeout (default 14, 67 ms, perftest's default).
package rnrsweep

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/clock"
)

// Config parameterizes the sweep.
type Config struct {
	FaultRates  []float64       // probability per receive DMA (one packet)
	Resolutions []time.Duration // page request service time
	Recoveries  []ibrc.FaultPolicy
	MsgSize     int      // bytes per SEND
	MTU         ibrc.MTU // path MTU
	LinkGbps    float64
	Latency     time.Duration // one way
	Timeout     uint8         // local ACK timeout code
	RNRTimer    int           // RNR NAK timer code, -1: smallest >= the resolution
	MinFaults   int           // aim for this many faults per point
	MinBytes    int64         // send at least this much per point
	MaxBytes    int64         // and at most this much
	SendDepth   int           // SENDs outstanding
	RecvDepth   int           // receives posted
	Window      int           // PSNs in flight per QP
	Seed        uint64
	// Progress, if set, is called after each point.
	Progress func(done, total int, r Result)
}

// DefaultConfig returns the configuration of `npfnic exp rnr`.
func DefaultConfig() Config {
	return Config{
		FaultRates:  []float64{1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1},
		Resolutions: []time.Duration{50 * time.Microsecond, 2 * time.Millisecond},
		Recoveries:  []ibrc.FaultPolicy{ibrc.FaultRNRNak, ibrc.FaultDrop},
		MsgSize:     64 << 10,
		MTU:         ibrc.MTU4096,
		LinkGbps:    25,
		Latency:     2 * time.Microsecond,
		Timeout:     14,
		RNRTimer:    -1,
		MinFaults:   40,
		MinBytes:    64 << 20,
		MaxBytes:    1 << 30,
		SendDepth:   16,
		RecvDepth:   64,
		Window:      128,
		Seed:        1,
	}
}

// Result is one point of the sweep.
type Result struct {
	FaultRate  float64
	Resolution time.Duration
	Recovery   ibrc.FaultPolicy
	RNRTimer   uint8
	Messages   int
	Bytes      int64
	SimTime    time.Duration
	MBps       float64 // 10^6 bytes per simulated second of message payload
	Relative   float64 // MBps over the fault-free run's
	Faults     uint64  // receive faults
	RNRNaks    uint64
	Timeouts   uint64
	Retrans    uint64 // retransmitted packets
	Wall       time.Duration
}

// Describe returns the model parameters in one line (for titles and logs).
func (c Config) Describe() string {
	return fmt.Sprintf("%g Gb/s link, %v one-way latency, MTU %d, %d KiB SENDs, local ACK timeout %.3g ms",
		c.LinkGbps, c.Latency, c.MTU.Bytes(), c.MsgSize>>10, float64(rocev2.LocalAckTimeout(c.Timeout))/1e6)
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.MTU.Bytes() == 0:
		return errors.New("bad MTU")
	case c.MsgSize <= 0 || c.MsgSize > 1<<30:
		return errors.New("message size out of range")
	case c.LinkGbps <= 0 || c.Latency < 0:
		return errors.New("bad link model")
	case c.Timeout == 0 || c.Timeout > 31:
		return errors.New("local ACK timeout code must be 1-31")
	case c.RNRTimer > 31:
		return errors.New("RNR timer code must be 0-31 (or -1)")
	case c.SendDepth <= 0 || c.RecvDepth <= 0 || c.MinBytes <= 0 || c.MaxBytes < c.MinBytes:
		return errors.New("bad depths or byte bounds")
	}
	for _, r := range c.FaultRates {
		if !(r >= 0 && r < 1) {
			return fmt.Errorf("fault rate %g not in [0,1)", r)
		}
	}
	return nil
}

// Run runs the fault-free baseline and every (resolution, recovery, rate)
// point. It returns the baseline and the points in that order.
func Run(ctx context.Context, c Config) (base Result, points []Result, err error) {
	if err := c.Validate(); err != nil {
		return base, nil, err
	}
	total := 1 + len(c.Resolutions)*len(c.Recoveries)*len(c.FaultRates)
	base, err = RunPoint(c, 0, c.Resolutions[0], ibrc.FaultRNRNak)
	if err != nil {
		return base, nil, err
	}
	base.Relative = 1
	if c.Progress != nil {
		c.Progress(1, total, base)
	}
	for _, res := range c.Resolutions {
		for _, rec := range c.Recoveries {
			for _, rate := range c.FaultRates {
				if err := ctx.Err(); err != nil {
					return base, points, err
				}
				r, err := RunPoint(c, rate, res, rec)
				if err != nil {
					return base, points, err
				}
				r.Relative = r.MBps / base.MBps
				points = append(points, r)
				if c.Progress != nil {
					c.Progress(1+len(points), total, r)
				}
			}
		}
	}
	return base, points, nil
}

// bytesFor is how much a point sends: enough for about MinFaults faults.
func (c Config) bytesFor(rate float64) int64 {
	b := c.MinBytes
	if rate > 0 {
		want := float64(c.MinFaults) / rate * float64(c.MTU.Bytes())
		b = int64(math.Min(math.Max(want, float64(c.MinBytes)), float64(c.MaxBytes)))
	}
	return b
}

// RunPoint streams SENDs from one engine to the other with the given
// receive fault rate, resolution time and recovery.
func RunPoint(c Config, rate float64, resolution time.Duration, rec ibrc.FaultPolicy) (Result, error) {
	wall := time.Now()
	r := Result{FaultRate: rate, Resolution: resolution, Recovery: rec}
	msgs := int((c.bytesFor(rate) + int64(c.MsgSize) - 1) / int64(c.MsgSize))
	r.Messages = msgs
	r.Bytes = int64(msgs) * int64(c.MsgSize)
	if c.RNRTimer < 0 {
		r.RNRTimer = rocev2.RNRTimerCode(resolution)
	} else {
		r.RNRTimer = uint8(c.RNRTimer)
	}

	clk := clock.NewVirtual(time.Unix(0, 0))
	link := ibrctest.NewLink(ibrctest.LinkConfig{Clock: clk, BitsPerSecond: c.LinkGbps * 1e9, Latency: c.Latency})
	pager := &ibrctest.Pager{Clock: clk, Delay: resolution}
	const base = 0x10000000
	macs := [2][6]byte{{2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2}}
	ips := [2][4]byte{{192, 0, 2, 1}, {192, 0, 2, 2}}
	type side struct {
		e   *ibrc.Transport
		mem *ibrctest.Mem
		mr  *ibrc.MR
		cq  *ibrc.CQ
		qp  *ibrc.QP
	}
	var s [2]side
	for i := range s {
		s[i].e = ibrc.New(ibrc.Config{Port: link.Port(i), Clock: clk, MAC: macs[i], IPv4: ips[i], Pager: pager,
			RecvFaultPolicy: rec, MaxUnackedPSNs: c.Window})
		link.Attach(i, s[i].e.HandleFrame)
		pd := s[i].e.CreatePD()
		depth := c.SendDepth
		if i == 1 {
			depth = c.RecvDepth
		}
		s[i].mem = ibrctest.NewMem(base, depth*c.MsgSize, 4096)
		var err error
		if s[i].mr, err = pd.RegisterMR(s[i].mem, base, uint64(depth*c.MsgSize), ibrc.AccessLocalWrite); err != nil {
			return r, err
		}
		s[i].cq, _ = s[i].e.CreateCQ(4 * (c.SendDepth + c.RecvDepth))
		if s[i].qp, err = pd.CreateQP(ibrc.QPInit{SendCQ: s[i].cq, RecvCQ: s[i].cq,
			Cap: ibrc.QPCap{MaxSendWR: c.SendDepth, MaxRecvWR: c.RecvDepth}}); err != nil {
			return r, err
		}
	}
	for i := range s {
		p := 1 - i
		q := s[i].qp
		steps := []struct {
			a ibrc.QPAttr
			m ibrc.AttrMask
		}{
			{ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff}, ibrc.AttrState | ibrc.AttrPKey | ibrc.AttrAccessFlags},
			{ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: c.MTU, DestQPN: s[p].qp.Num(), MaxDestRdAtomic: 1, MinRNRTimer: r.RNRTimer,
				AV: ibrc.AddressVector{DestMAC: macs[p], DGID: rocev2.GIDFromIPv4(ips[p])}},
				ibrc.AttrState | ibrc.AttrPathMTU | ibrc.AttrDestQPN | ibrc.AttrRQPSN | ibrc.AttrMaxDestRdAtomic | ibrc.AttrMinRNRTimer | ibrc.AttrAV},
			{ibrc.QPAttr{State: ibrc.StateRTS, Timeout: c.Timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				ibrc.AttrState | ibrc.AttrSQPSN | ibrc.AttrTimeout | ibrc.AttrRetryCnt | ibrc.AttrRNRRetry | ibrc.AttrMaxRdAtomic},
		}
		for _, st := range steps {
			if err := q.ModifyQP(&st.a, st.m); err != nil {
				return r, err
			}
		}
	}
	snd, rcv := &s[0], &s[1]
	rcv.mem.SetFaultRate(rate, true, c.Seed^uint64(rate*1e9)^uint64(resolution))

	var (
		posted, sent, received int
		lastRecv               time.Duration
		failure                error
	)
	post := func() {
		for posted < msgs && posted-sent < c.SendDepth {
			slot := uint64(posted%c.SendDepth) * uint64(c.MsgSize)
			err := snd.qp.PostSend(ibrc.SendWR{ID: uint64(posted), Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled,
				SGL: []ibrc.SGE{{Addr: base + slot, Length: uint32(c.MsgSize), LKey: snd.mr.LKey()}}})
			if err != nil {
				failure = err
				return
			}
			posted++
		}
	}
	postRecv := func(i int) {
		slot := uint64(i%c.RecvDepth) * uint64(c.MsgSize)
		if err := rcv.qp.PostRecv(ibrc.RecvWR{ID: uint64(i),
			SGL: []ibrc.SGE{{Addr: base + slot, Length: uint32(c.MsgSize), LKey: rcv.mr.LKey()}}}); err != nil {
			failure = err
		}
	}
	for i := 0; i < c.RecvDepth; i++ {
		postRecv(i)
	}
	wc := make([]ibrc.WC, 64)
	snd.cq.SetNotify(func() {
		for n := snd.cq.Poll(wc); n > 0; n = snd.cq.Poll(wc) {
			for _, w := range wc[:n] {
				if w.Status != ibrc.WCSuccess {
					failure = fmt.Errorf("rnrsweep: send %d completed with %v", w.WRID, w.Status)
					return
				}
				sent++
			}
		}
		post()
	})
	rwc := make([]ibrc.WC, 64)
	posts := c.RecvDepth
	rcv.cq.SetNotify(func() {
		for n := rcv.cq.Poll(rwc); n > 0; n = rcv.cq.Poll(rwc) {
			for _, w := range rwc[:n] {
				if w.Status != ibrc.WCSuccess || int(w.ByteLen) != c.MsgSize {
					failure = fmt.Errorf("rnrsweep: receive %d completed with %v (%d bytes)", w.WRID, w.Status, w.ByteLen)
					return
				}
				received++
				lastRecv = clk.Elapsed()
				if posts < msgs {
					postRecv(posts)
					posts++
				}
			}
		}
	})
	post()
	clk.Run(func() bool { return failure != nil || received == msgs && sent == msgs })
	if failure != nil {
		return r, failure
	}
	if received != msgs {
		return r, fmt.Errorf("rnrsweep: stalled after %d of %d messages", received, msgs)
	}
	r.SimTime = lastRecv
	r.MBps = float64(r.Bytes) / lastRecv.Seconds() / 1e6
	ss, rs := snd.e.Stats(), rcv.e.Stats()
	r.Faults = rs.ResponderFaults
	r.RNRNaks = rs.RNRNakFault + rs.RNRNakNoWQE
	r.Timeouts = ss.Timeouts
	r.Retrans = ss.Retransmits
	r.Wall = time.Since(wall)
	return r, nil
}

func rnrTimer(code uint8) time.Duration   { return rocev2.RNRTimer(code) }
func ackTimeout(code uint8) time.Duration { return rocev2.LocalAckTimeout(code) }
