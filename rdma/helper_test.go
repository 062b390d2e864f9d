package rdma_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/ibrc/rxeq"
	"github.com/npfnic/npfnic/rdma"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/trace"
)

const (
	pasid   = 1
	bufVA   = 0x7f00_0000_0000
	bufSize = 1 << 20
	mrKey   = 0x4242
	// Two more regions over the same buffer: one in another PD, one that
	// allows neither local nor remote writes.
	mrKeyOtherPD  = 0x4343
	mrKeyReadOnly = 0x4444
	pdn           = 7
	sendCQ        = 0
	recvCQ        = 1
	access        = hw.RDMAAccessLocalWrite | hw.RDMAAccessRemoteWrite | hw.RDMAAccessRemoteRead
)

// ethCounter is the default engine of a node's port: it counts what the
// RC engine did not claim.
type ethCounter struct{ n atomic.Int64 }

func (c *ethCounter) Receive([]byte) { c.n.Add(1) }
func (c *ethCounter) PortDown()      {}

// node is one NIC's RDMA engine on a port, with the driver model, one
// process's buffer registered as an MR and one QP with its queues.
type node struct {
	g     *atstest.Guest
	x     *ats.Context
	e     *rdma.Engine
	d     *rdmatest.Driver
	as    *atstest.AddressSpace
	buf   *rdmatest.Buffer
	mux   *port.Mux
	ethEP *port.Endpoint
	eth   *ethCounter
	irqs  atomic.Int64
	irq   chan struct{} // a token per interrupt, dropped when one waits already
	odp   odpState      // with nodeOpts.odp
	ip    [4]byte
	mac   [6]byte
	qpn   uint32
	sq    *rdmatest.Queue
	rq    *rdmatest.Queue
	scq   *rdmatest.Queue
	rcq   *rdmatest.Queue
}

func newNode(t testing.TB, wire port.Port, last byte) *node { return newTracedNode(t, wire, last, nil) }

// newTracedNode is newNode with the engine recording into tr.
func newTracedNode(t testing.TB, wire port.Port, last byte, tr *trace.Recorder) *node {
	return newNodeWith(t, wire, last, nodeOpts{trace: tr})
}

// nodeOpts are what a node may have besides the defaults.
type nodeOpts struct {
	trace *trace.Recorder
	// odp gives the node a page request interface (odp_helper_test.go)
	// that the engine's memory regions fault through; priAlloc is its
	// Outstanding Page Request Allocation (default 64).
	odp      bool
	priAlloc uint32
	// config changes the engine's configuration before New.
	config func(*rdma.Config)
}

func newNodeWith(t testing.TB, wire port.Port, last byte, o nodeOpts) *node {
	t.Helper()
	n := &node{ip: [4]byte{192, 0, 2, last}, mac: [6]byte{2, 0, 0, 0, 0, last}, qpn: 0x100 + uint32(last), eth: &ethCounter{},
		irq: make(chan struct{}, 1)}
	n.g = atstest.NewGuest(t, 32<<20)
	var err error
	if n.x, err = ats.New(ats.Config{Mem: n.g.Mem}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.x.Close)
	pt := n.g.NewPASIDTable(16)
	if err := n.x.SetPASIDTable(pt.Base, 16); err != nil {
		t.Fatal(err)
	}
	n.as = n.g.NewAddressSpace()
	pt.Set(pasid, n.as)
	cfg := rdma.Config{Mem: n.g.Mem, Xlat: n.x, MAC: n.mac, Interrupt: func(int) {
		n.irqs.Add(1)
		select {
		case n.irq <- struct{}{}:
		default:
		}
	}, Trace: o.trace}
	if o.odp {
		n.newPRI(t, o.priAlloc, o.trace)
		cfg.PRI = n.odp.pri
	}
	if o.config != nil {
		o.config(&cfg)
	}
	if n.e, err = rdma.New(cfg); err != nil {
		t.Fatal(err)
	}
	n.mux = port.NewMux(wire, nil)
	ep, err := n.mux.Attach("rdma", n.e.Claim)
	if err != nil {
		t.Fatal(err)
	}
	ep.Deliver(n.e)
	n.e.SetPort(ep)
	if n.ethEP, err = n.mux.Attach("ethernet", nil); err != nil {
		t.Fatal(err)
	}
	n.ethEP.Deliver(n.eth)
	if err := n.mux.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.e.Close(); n.mux.Close() })
	n.d = rdmatest.NewDriver(n.g, hw.Offsets(n.e), 64, 64)
	n.d.Enable()
	n.must(t, rdmatest.AddGID(0, rdmatest.GIDv4(n.ip)))
	n.buf = rdmatest.MapBuffer(n.g, n.as, bufVA, bufSize)
	n.must(t, rdmatest.RegMR(mrKey, pdn, bufVA, bufSize, access, pasid))
	n.must(t, rdmatest.RegMR(mrKeyOtherPD, pdn+1, bufVA, bufSize, access, pasid))
	n.must(t, rdmatest.RegMR(mrKeyReadOnly, pdn, bufVA, bufSize, hw.RDMAAccessRemoteRead, pasid))
	n.scq, n.rcq = rdmatest.NewQueue(n.g, 256, 6), rdmatest.NewQueue(n.g, 256, 6)
	n.must(t, rdmatest.CreateCQ(sendCQ, n.scq))
	n.must(t, rdmatest.CreateCQ(recvCQ, n.rcq))
	n.sq, n.rq = n.createQP(t, n.qpn)
	return n
}

func (n *node) must(t testing.TB, c rdmatest.Cmd) {
	t.Helper()
	if err := n.d.Must(c); err != nil {
		t.Fatal(err)
	}
}

func (n *node) createQP(t testing.TB, qpn uint32) (sq, rq *rdmatest.Queue) {
	t.Helper()
	sq, rq = rdmatest.NewQueue(n.g, 64, 9), rdmatest.NewQueue(n.g, 64, 7)
	n.must(t, rdmatest.CreateQP(qpn, rdmatest.QPSpec{PD: pdn, SQ: sq, RQ: rq, SendCQ: sendCQ, RecvCQ: recvCQ,
		MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64}))
	return sq, rq
}

// connect brings qpn to RTS towards peer's QP peerQPN.
func (n *node) connect(t testing.TB, qpn uint32, peer *node, peerQPN uint32, mtu uint8) {
	t.Helper()
	n.connectTimeout(t, qpn, peer, peerQPN, mtu, 14)
}

// connectTimeout is connect with the local ACK timeout's code.
func (n *node) connectTimeout(t testing.TB, qpn uint32, peer *node, peerQPN uint32, mtu, timeout uint8) {
	t.Helper()
	n.connectAccess(t, qpn, peer, peerQPN, mtu, timeout, hw.RDMAAccessRemoteWrite|hw.RDMAAccessRemoteRead)
}

// connectAccess is connectTimeout with the QP's remote access flags.
func (n *node) connectAccess(t testing.TB, qpn uint32, peer *node, peerQPN uint32, mtu, timeout uint8, access uint32) {
	t.Helper()
	n.must(t, rdmatest.ModifyQP(qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrAccessFlags,
		State: hw.RDMAQPInit, Access: access}))
	n.must(t, rdmatest.ModifyQP(qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrAV | hw.RDMAQPAttrPathMTU |
		hw.RDMAQPAttrDestQPN | hw.RDMAQPAttrRQPSN | hw.RDMAQPAttrMaxDestRdAtomic | hw.RDMAQPAttrMinRNRTimer,
		State: hw.RDMAQPRTR, PathMTU: mtu, DestQPN: peerQPN, RQPSN: 100, MaxDestRd: 4, MinRNRTimer: 1,
		DGID: rdmatest.GIDv4(peer.ip), DMAC: peer.mac}))
	n.must(t, rdmatest.ModifyQP(qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrSQPSN | hw.RDMAQPAttrTimeout |
		hw.RDMAQPAttrRetryCnt | hw.RDMAQPAttrRNRRetry | hw.RDMAQPAttrMaxQPRdAtomic,
		State: hw.RDMAQPRTS, SQPSN: 100, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}))
}

// pair is two nodes cabled by a pipe, their QPs connected at mtu.
func pair(t *testing.T, mtu uint8) (a, b *node) { return pairB(t, mtu) }

func pairB(t testing.TB, mtu uint8) (a, b *node) { return pairWith(t, mtu, nodeOpts{}) }

// pairWith is pairB with both nodes made with o.
func pairWith(t testing.TB, mtu uint8, o nodeOpts) (a, b *node) {
	pa, pb := port.Pipe(256)
	a, b = newNodeWith(t, pa, 1, o), newNodeWith(t, pb, 2, o)
	a.connect(t, a.qpn, b, b.qpn, mtu)
	b.connect(t, b.qpn, a, a.qpn, mtu)
	return a, b
}

// post writes send WQEs into sq and rings the doorbell of qpn.
func (n *node) post(t *testing.T, sq *rdmatest.Queue, qpn uint32, ws ...rdmatest.Send) {
	t.Helper()
	for _, w := range ws {
		if err := sq.Produce(w.Encode); err != nil {
			t.Fatal(err)
		}
	}
	hw.Offsets(n.e).RegWrite(hw.RegSQDoorbell, qpn)
}

func (n *node) postRecv(t *testing.T, rq *rdmatest.Queue, rs ...rdmatest.Recv) {
	t.Helper()
	for _, r := range rs {
		if err := rq.Produce(r.Encode); err != nil {
			t.Fatal(err)
		}
	}
}

// poll waits for k completions on cq.
func poll(t *testing.T, cq *rdmatest.Queue, k int) []rxeq.CQE {
	t.Helper()
	var got []rxeq.CQE
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < k {
		if e, ok := cq.Poll(); ok {
			got = append(got, e)
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions: %+v", len(got), k, got)
		}
		time.Sleep(20 * time.Microsecond)
	}
	return got
}

// quiet checks that cq stays empty for a while.
func quiet(t *testing.T, cq *rdmatest.Queue) {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	if e, ok := cq.Poll(); ok {
		t.Fatalf("unexpected completion %+v", e)
	}
}

// waitEvent waits for an event of typ on handle, returning it.
func (n *node) waitEvent(t *testing.T, typ uint8, handle uint32) rdmatest.Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var seen []rdmatest.Event
	for {
		for _, ev := range n.d.Events() {
			if ev.Type == typ && ev.Handle == handle {
				return ev
			}
			seen = append(seen, ev)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event %d on %d; saw %+v", typ, handle, seen)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}
