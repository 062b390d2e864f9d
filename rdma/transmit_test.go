package rdma_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

// ethFrame is a frame no RC engine claims (an IPv4 ethertype that is not
// RoCEv2): the Ethernet engine's.
func ethFrame(dst, src [6]byte) []byte {
	f := make([]byte, 60)
	copy(f, dst[:])
	copy(f[6:], src[:])
	f[12], f[13] = 0x88, 0xb5 // local experimental ethertype
	return f
}

// eventually polls cond for up to d and reports whether it held.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
	return true
}

// TestMutualReads: two NICs each READ 512 KiB from the other at MTU 256,
// on four QPs at once, over a pipe that holds 256 frames each way, several
// times over. A requester asks for a window (128 PSNs) of a READ at a
// time, so four QPs' worth of responses is more than the cable buffers in
// each direction: a port reader that sends READ responses itself blocks in
// Send while its peer's does the same, and both ports stop for good,
// Ethernet too (the review saw 3 runs in 10 hang with one QP, before
// READs were windowed; here every run hung in its first round). Each
// round must complete with the right data, and Ethernet frames must cross
// both ways afterwards.
//
// The ACK timeout is 1 s rather than connect's 67 ms: under -race on a
// loaded machine the cable's 256 frames alone can take longer than that
// to drain, and the retries that follow (a timed-out requester asks
// again, and again) are RC's business, not this test's.
func TestMutualReads(t *testing.T) {
	const (
		nqp  = 4
		size = 512 << 10 // per node: 2048 responses at MTU 256
		part = size / nqp
	)
	pa, pb := port.Pipe(256)
	a, b := newNode(t, pa, 1), newNode(t, pb, 2)
	type qp struct {
		n  uint32
		sq *rdmatest.Queue
	}
	qps := map[*node][]qp{a: {{n: a.qpn, sq: a.sq}}, b: {{n: b.qpn, sq: b.sq}}}
	for i := range uint32(nqp - 1) {
		for _, n := range []*node{a, b} {
			sq, _ := n.createQP(t, n.qpn+0x10+i)
			qps[n] = append(qps[n], qp{n.qpn + 0x10 + i, sq})
		}
	}
	for i := range nqp {
		a.connectTimeout(t, qps[a][i].n, b, qps[b][i].n, 1, 18)
		b.connectTimeout(t, qps[b][i].n, a, qps[a][i].n, 1, 18)
	}
	a.buf.Write(0, pattern(size, 1))
	b.buf.Write(0, pattern(size, 2))
	for round := range 4 {
		for _, n := range []*node{a, b} {
			n.buf.Write(size, make([]byte, size))
			for i, q := range qps[n] {
				off := uint64(i * part)
				n.post(t, q.sq, q.n, rdmatest.Send{ID: uint64(round), Opcode: hw.IBVWRRDMARead, Flags: sig, AutoLength: true, NumSGE: -1,
					RemoteAddr: bufVA + off, RKey: mrKey, SGL: []rdmatest.SGE{{Addr: bufVA + size + off, Length: part, LKey: mrKey}}})
			}
		}
		for _, n := range []*node{a, b} {
			for _, c := range poll(t, n.scq, nqp) {
				if c.WRID != uint64(round) || c.Status != ibrc.WCSuccess {
					t.Fatalf("round %d: a READ of node %d: %+v", round, n.ip[3], c)
				}
			}
		}
		if !bytes.Equal(a.buf.Read(size, size), pattern(size, 2)) || !bytes.Equal(b.buf.Read(size, size), pattern(size, 1)) {
			t.Fatalf("round %d: READ data differ", round)
		}
	}
	for _, p := range [][2]*node{{a, b}, {b, a}} {
		from, to := p[0], p[1]
		before := to.eth.n.Load()
		if err := from.ethEP.Send(ethFrame(to.mac, from.mac)); err != nil {
			t.Fatal(err)
		}
		if !eventually(5*time.Second, func() bool { return to.eth.n.Load() > before }) {
			t.Fatalf("an Ethernet frame from node %d never reached node %d", from.ip[3], to.ip[3])
		}
	}
}

// TestReadResponsesDoNotBlockReceive: a peer asks for 512 KiB and takes
// none of the responses. The NIC's port reader must keep receiving
// (Ethernet frames still arrive), and RDMA_CTRL.RESET must drop what the
// old transport still had queued: once the peer reads again, it gets what
// the cable held and at most the one frame the port was taking, not the
// rest of the READ.
func TestReadResponsesDoNotBlockReceive(t *testing.T) {
	const depth = 64
	pa, pb := port.Pipe(depth)
	a := newNode(t, pa, 1)
	peer := &node{ip: [4]byte{192, 0, 2, 9}, mac: [6]byte{2, 0, 0, 0, 0, 9}, qpn: 0x109}
	a.connect(t, a.qpn, peer, peer.qpn, 1)
	path := rocev2.Path{SrcMAC: peer.mac, DstMAC: a.mac, SrcIP: peer.ip, DstIP: a.ip, SrcPort: 0xc000}
	req := rocev2.AppendFrame(nil, &path, &rocev2.Headers{
		BTH:  rocev2.BTH{Opcode: rocev2.OpReadRequest, PKey: 0xffff, DestQP: a.qpn, PSN: 100},
		RETH: rocev2.RETH{VA: bufVA, RKey: mrKey, DMALength: 512 << 10}}, nil)
	if err := pb.Send(req); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return a.e.Stats().RC.TxFrames >= depth }) {
		t.Fatalf("the READ was not answered: %+v", a.e.Stats().RC)
	}
	time.Sleep(20 * time.Millisecond) // let the cable fill
	if err := pb.Send(ethFrame(a.mac, peer.mac)); err != nil {
		t.Fatal(err)
	}
	if !eventually(2*time.Second, func() bool { return a.eth.n.Load() == 1 }) {
		t.Errorf("the port stopped receiving while the READ's responses waited for the peer")
	}

	hw.Offsets(a.e).RegWrite(hw.RegRDMACtrl, hw.RDMACtrlReset)
	if !eventually(5*time.Second, func() bool { return !a.e.Busy() }) {
		t.Fatalf("RDMA_CTRL.RESET never completed")
	}
	got := make(chan int)
	go func() {
		buf := make([]byte, port.MaxFrameLen)
		n := 0
		for {
			if _, err := pb.Recv(buf); err != nil {
				break
			}
			n++
		}
		got <- n
	}()
	time.Sleep(200 * time.Millisecond) // everything that is coming comes
	pb.Close()
	if n := <-got; n > depth+1 {
		t.Errorf("the peer received %d frames after RESET, want at most the %d the cable held and one being sent", n, depth+1)
	}
}
