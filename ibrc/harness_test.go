package ibrc_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/vdevice/trace"
)

const (
	memBase = 0x7f0000000000
	memSize = 4 << 20
)

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	ipA  = [4]byte{192, 0, 2, 1} // TEST-NET-1: simulated only
	ipB  = [4]byte{192, 0, 2, 2}
)

type node struct {
	e        *ibrc.Transport
	pd       *ibrc.PD
	mem      *ibrctest.Mem
	mr       *ibrc.MR
	scq, rcq *ibrc.CQ
	qp       *ibrc.QP
	wcs      []ibrc.WC // polled send completions
	rwcs     []ibrc.WC // polled receive completions
	events   []ibrc.Event
}

type world struct {
	t     testing.TB
	clk   *clock.Virtual
	link  *ibrctest.Link
	pager *ibrctest.Pager
	a, b  *node
}

type opts struct {
	link           ibrctest.LinkConfig
	mtu            ibrc.MTU
	timeout        uint8
	retry, rnr     uint8
	minRNR         uint8
	psnA, psnB     uint32 // start PSNs of A's and B's send queues
	policy         ibrc.FaultPolicy
	pagerDelay     time.Duration
	access         ibrc.Access // QP access flags (both sides)
	noConnect      bool
	capture        ibrc.FrameWriter
	maxUnacked     int
	sendWR, recvW  int
	noPager        bool
	traceA, traceB *trace.Recorder
	qpType         ibrc.QPType // 0: RC
	qkey           uint32      // UD: both QPs' Q_Key
}

func defaults(o *opts) {
	if o.mtu == 0 {
		o.mtu = ibrc.MTU1024
	}
	if o.timeout == 0 {
		o.timeout = 8 // 1.05 ms
	}
	if o.pagerDelay == 0 {
		o.pagerDelay = 30 * time.Microsecond
	}
	if o.access == 0 {
		o.access = ibrc.AccessLocalWrite | ibrc.AccessRemoteWrite | ibrc.AccessRemoteRead
	}
	if o.link.BitsPerSecond == 0 {
		o.link.BitsPerSecond = 10e9
	}
	if o.link.Latency == 0 {
		o.link.Latency = 2 * time.Microsecond
	}
	if o.sendWR == 0 {
		o.sendWR = 1024
	}
	if o.recvW == 0 {
		o.recvW = 1024
	}
}

func newWorld(t testing.TB, o opts) *world {
	t.Helper()
	defaults(&o)
	w := &world{t: t, clk: clock.NewVirtual(time.Unix(1700000000, 0))}
	o.link.Clock = w.clk
	w.link = ibrctest.NewLink(o.link)
	w.pager = &ibrctest.Pager{Clock: w.clk, Delay: o.pagerDelay}
	mk := func(side int, mac [6]byte, ip [4]byte) *node {
		n := &node{}
		port := w.link.Port(side)
		if o.capture != nil {
			port = &ibrc.CapturePort{Port: port, W: o.capture, Now: w.clk.Now}
		}
		cfg := ibrc.Config{Port: port, Clock: w.clk, MAC: mac, IPv4: ip, Pager: w.pager,
			RecvFaultPolicy: o.policy, MaxUnackedPSNs: o.maxUnacked,
			OnEvent: func(ev ibrc.Event) { n.events = append(n.events, ev) }}
		if o.noPager {
			cfg.Pager = nil
		}
		cfg.Trace = o.traceA
		if side == 1 {
			cfg.Trace = o.traceB
		}
		n.e = ibrc.New(cfg)
		w.link.Attach(side, n.e.HandleFrame)
		n.pd = n.e.CreatePD()
		n.mem = ibrctest.NewMem(memBase, memSize, 4096)
		var err error
		n.mr, err = n.pd.RegisterMR(n.mem, memBase, memSize, ibrc.AccessLocalWrite|ibrc.AccessRemoteWrite|ibrc.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		n.scq, _ = n.e.CreateCQ(4096)
		n.rcq, _ = n.e.CreateCQ(4096)
		n.qp, err = n.pd.CreateQP(ibrc.QPInit{Type: o.qpType, SendCQ: n.scq, RecvCQ: n.rcq,
			Cap: ibrc.QPCap{MaxSendWR: o.sendWR, MaxRecvWR: o.recvW, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 2048}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	w.a = mk(0, macA, ipA)
	w.b = mk(1, macB, ipB)
	if !o.noConnect {
		connect(t, w.a, w.b, macB, ipB, o.psnA, o.psnB, o)
		connect(t, w.b, w.a, macA, ipA, o.psnB, o.psnA, o)
	}
	return w
}

func connect(t testing.TB, n, peer *node, peerMAC [6]byte, peerIP [4]byte, sqpsn, rqpsn uint32, o opts) {
	t.Helper()
	q := n.qp
	must := func(a ibrc.QPAttr, m ibrc.AttrMask) {
		t.Helper()
		if err := q.ModifyQP(&a, m); err != nil {
			t.Fatal(err)
		}
	}
	switch o.qpType {
	case ibrc.TypeUD:
		must(ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff, QKey: o.qkey}, ibrc.AttrState|ibrc.AttrPKey|ibrc.AttrQKey)
		must(ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: o.mtu}, ibrc.AttrState|ibrc.AttrPathMTU)
		must(ibrc.QPAttr{State: ibrc.StateRTS, SQPSN: sqpsn}, ibrc.AttrState|ibrc.AttrSQPSN)
		return
	case ibrc.TypeUC:
		must(ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff, AccessFlags: o.access}, ibrc.AttrState|ibrc.AttrPKey|ibrc.AttrAccessFlags)
		must(ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: o.mtu, DestQPN: peer.qp.Num(), RQPSN: rqpsn,
			AV: ibrc.AddressVector{DestMAC: peerMAC, DGID: rocev2.GIDFromIPv4(peerIP)}},
			ibrc.AttrState|ibrc.AttrPathMTU|ibrc.AttrDestQPN|ibrc.AttrRQPSN|ibrc.AttrAV)
		must(ibrc.QPAttr{State: ibrc.StateRTS, SQPSN: sqpsn}, ibrc.AttrState|ibrc.AttrSQPSN)
		return
	}
	must(ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff, AccessFlags: o.access}, ibrc.AttrState|ibrc.AttrPKey|ibrc.AttrAccessFlags)
	must(ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: o.mtu, DestQPN: peer.qp.Num(), RQPSN: rqpsn,
		MaxDestRdAtomic: 16, MinRNRTimer: o.minRNR,
		AV: ibrc.AddressVector{DestMAC: peerMAC, DGID: rocev2.GIDFromIPv4(peerIP)}},
		ibrc.AttrState|ibrc.AttrPathMTU|ibrc.AttrDestQPN|ibrc.AttrRQPSN|ibrc.AttrMaxDestRdAtomic|ibrc.AttrMinRNRTimer|ibrc.AttrAV)
	must(ibrc.QPAttr{State: ibrc.StateRTS, SQPSN: sqpsn, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnr, MaxRdAtomic: 8},
		ibrc.AttrState|ibrc.AttrSQPSN|ibrc.AttrTimeout|ibrc.AttrRetryCnt|ibrc.AttrRNRRetry|ibrc.AttrMaxRdAtomic)
}

// poll drains both CQs of n into its slices.
func (n *node) poll() {
	buf := make([]ibrc.WC, 64)
	for {
		k := n.scq.Poll(buf)
		n.wcs = append(n.wcs, buf[:k]...)
		if k == 0 {
			break
		}
	}
	for {
		k := n.rcq.Poll(buf)
		n.rwcs = append(n.rwcs, buf[:k]...)
		if k == 0 {
			break
		}
	}
}

// run advances virtual time until cond holds (checked after every event)
// or limit passes; it fails the test on timeout.
func (w *world) run(limit time.Duration, cond func() bool) {
	w.t.Helper()
	deadline := w.clk.Elapsed() + limit
	check := func() bool {
		w.a.poll()
		w.b.poll()
		return cond()
	}
	if check() {
		return
	}
	w.clk.RunUntil(deadline, check)
	if !check() {
		w.t.Fatalf("condition not reached after %v of virtual time (pending events %d)", limit, w.clk.Pending())
	}
}

// settle runs the clock until nothing is scheduled (bounded).
func (w *world) settle(limit time.Duration) {
	w.clk.RunUntil(w.clk.Elapsed()+limit, nil)
	w.a.poll()
	w.b.poll()
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func (n *node) at(off uint64, l int) []byte { return n.mem.Bytes()[off : off+uint64(l)] }

func (n *node) sge(off uint64, l int) []ibrc.SGE {
	return []ibrc.SGE{{Addr: memBase + off, Length: uint32(l), LKey: n.mr.LKey()}}
}

func expectBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: contents differ at byte %d of %d", what, i, len(want))
	}
}

// linkDropFirst returns a link config that drops frames from A for which
// drop returns true.
func linkDropFirst(drop func(f []byte) bool) ibrctest.LinkConfig {
	return ibrctest.LinkConfig{Filter: func(side int, n uint64, f []byte) ibrctest.Action {
		if side == 0 && drop(f) {
			return ibrctest.Drop
		}
		return ibrctest.Deliver
	}}
}
