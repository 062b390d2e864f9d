package ibrc_test

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/internal/clock"
)

// The tests of per-QP locking (issue 23): work on one QP, its memory
// copies included, does not wait for another QP's.

// steeredWire cables two engines and delivers each frame on a goroutine
// of its destination QP, as a NIC that steers received packets to queues
// by QP would: frames for one QP arrive in order, and a QP whose receive
// is stuck holds up none of the others'. (ibrctest.Link delivers all of a
// direction's frames from one goroutine, so one stuck QP would stall the
// whole wire and prove nothing about the engine.) drop, if set, decides
// per frame sent whether the wire loses it; a full queue loses frames
// too, as RC expects of a wire.
type steeredWire struct {
	mu      sync.Mutex
	handler [2]func([]byte) error
	queues  map[[2]uint32]chan []byte // by destination side and QPN
	drop    func(side int, n uint64) bool
	sent    [2]atomic.Uint64
	wg      sync.WaitGroup
	closed  bool
}

func newSteeredWire() *steeredWire {
	return &steeredWire{queues: make(map[[2]uint32]chan []byte)}
}

func (w *steeredWire) attach(side int, h func([]byte) error) {
	w.mu.Lock()
	w.handler[side] = h
	w.mu.Unlock()
}

// port is side's transmit side.
func (w *steeredWire) port(side int) ibrc.Port {
	return ibrc.PortFunc(func(f []byte) error {
		n := w.sent[side].Add(1)
		if w.drop != nil && w.drop(side, n) {
			return nil
		}
		// The BTH follows Ethernet (14), IPv4 (20) and UDP (8) headers
		// in what the engine sends; its bytes 5-7 are the destination QP.
		const bth = 14 + 20 + 8
		if len(f) < bth+12 {
			return nil
		}
		qpn := uint32(f[bth+5])<<16 | uint32(f[bth+6])<<8 | uint32(f[bth+7])
		w.mu.Lock() // not across a wait: the send does not block
		defer w.mu.Unlock()
		if w.closed {
			return nil
		}
		select {
		case w.queueLocked(1-side, qpn) <- f:
		default: // full: lost
		}
		return nil
	})
}

// queueLocked returns the queue of side's QP qpn, and starts its
// delivery goroutine if it is new. Caller holds mu.
func (w *steeredWire) queueLocked(side int, qpn uint32) chan []byte {
	k := [2]uint32{uint32(side), qpn}
	ch := w.queues[k]
	if ch == nil {
		ch = make(chan []byte, 4096)
		w.queues[k] = ch
		h := w.handler[side]
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for f := range ch {
				_ = h(f)
			}
		}()
	}
	return ch
}

// close stops the delivery goroutines once their queues drained.
func (w *steeredWire) close() {
	w.mu.Lock()
	w.closed = true
	for _, ch := range w.queues {
		close(ch)
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// gateMem is memory whose accesses can be held: once armed, the next
// write blocks inside WriteAt (holding whatever the engine holds across
// it) until released. It counts the accesses that reached the memory.
type gateMem struct {
	ibrc.Memory
	armed    atomic.Bool
	armRead  atomic.Bool // the same for the next read
	entered  chan struct{}
	release  chan struct{}
	accesses atomic.Int64
}

func newGateMem(m ibrc.Memory) *gateMem {
	return &gateMem{Memory: m, entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gateMem) WriteAt(va uint64, p []byte) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	g.accesses.Add(1)
	return g.Memory.WriteAt(va, p)
}

func (g *gateMem) ReadAt(va uint64, p []byte) error {
	if g.armRead.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	g.accesses.Add(1)
	return g.Memory.ReadAt(va, p)
}

// within runs f and fails the test if it does not return within d, or
// returns an error; f goes on running after d (the test's cleanup lets
// go of what it waits for), and what it returns then is dropped.
func within(t *testing.T, d time.Duration, what string, f func() error) bool {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		return err == nil
	case <-time.After(d):
		t.Errorf("%s did not return within %v", what, d)
		return false
	}
}

// qpEnd is one end of a connected QP pair in the QP-locking tests.
type qpEnd struct {
	e        *ibrc.Transport
	pd       *ibrc.PD
	mem      ibrc.Memory
	raw      *ibrctest.Mem // mem's bytes
	mr       *ibrc.MR
	scq, rcq *ibrc.CQ
	qp       *ibrc.QP
}

func (q *qpEnd) sge(off uint64, n int) []ibrc.SGE {
	return []ibrc.SGE{{Addr: memBase + off, Length: uint32(n), LKey: q.mr.LKey()}}
}

// newEnd makes a QP on e with its own memory region over mem (nil: a
// fresh 1 MiB ibrctest.Mem) and its own CQs, unless scq and rcq are
// given.
func newEnd(t testing.TB, e *ibrc.Transport, pd *ibrc.PD, mem ibrc.Memory, raw *ibrctest.Mem, scq, rcq *ibrc.CQ) *qpEnd {
	t.Helper()
	if raw == nil {
		raw = ibrctest.NewMem(memBase, 1<<20, 4096)
	}
	if mem == nil {
		mem = raw
	}
	q := &qpEnd{e: e, pd: pd, mem: mem, raw: raw, scq: scq, rcq: rcq}
	var err error
	if q.mr, err = pd.RegisterMR(mem, memBase, uint64(raw.Len()), ibrc.AccessLocalWrite|ibrc.AccessRemoteWrite|ibrc.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	if q.scq == nil {
		q.scq, _ = e.CreateCQ(1024)
		q.rcq, _ = e.CreateCQ(1024)
	}
	if q.qp, err = pd.CreateQP(ibrc.QPInit{SendCQ: q.scq, RecvCQ: q.rcq,
		Cap: ibrc.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.qp.Destroy() }) // its timers stop
	return q
}

// pairUp connects x (on the engine at macA/ipA) and y (macB/ipB).
func pairUp(t testing.TB, x, y *qpEnd, o opts) {
	t.Helper()
	if o.mtu == 0 {
		o.mtu = ibrc.MTU1024
	}
	if o.access == 0 {
		o.access = ibrc.AccessLocalWrite | ibrc.AccessRemoteWrite | ibrc.AccessRemoteRead
	}
	connect(t, &node{qp: x.qp}, &node{qp: y.qp}, macB, ipB, 0, 0, o)
	connect(t, &node{qp: y.qp}, &node{qp: x.qp}, macA, ipA, 0, 0, o)
}

// twoEngines are two engines on the real clock cabled by a steeredWire.
func twoEngines(t testing.TB, w *steeredWire, pager ibrc.PageRequester) (x, y *ibrc.Transport) {
	x = ibrc.New(ibrc.Config{Port: w.port(0), MAC: macA, IPv4: ipA, Pager: pager})
	y = ibrc.New(ibrc.Config{Port: w.port(1), MAC: macB, IPv4: ipB, Pager: pager})
	w.attach(0, x.HandleFrame)
	w.attach(1, y.HandleFrame)
	return x, y
}

// waitWC polls cq for n completions within d.
func waitWC(t *testing.T, cq *ibrc.CQ, n int, d time.Duration) []ibrc.WC {
	t.Helper()
	var got []ibrc.WC
	buf := make([]ibrc.WC, 16)
	deadline := time.Now().Add(d)
	for len(got) < n {
		k := cq.Poll(buf)
		got = append(got, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions within %v: %+v", len(got), n, d, got)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	for _, c := range got {
		if c.Status != ibrc.WCSuccess {
			t.Fatalf("completion %+v", c)
		}
	}
	return got
}

// TestQPsDoNotWaitForEachOther: QP A's responder is stuck inside a write
// of a region's memory (a page of guest memory that takes its time, say)
// while QP B, on the same engines, completes SENDs, an RDMA WRITE and an
// RDMA READ both ways; the engine's counters, another QP's verbs and the
// tables stay usable meanwhile. With one lock for the whole engine held
// across the copy, B's first packet waited for A's copy. Then A's copy
// finishes and its WRITE completes.
func TestQPsDoNotWaitForEachOther(t *testing.T) {
	w := newSteeredWire()
	x, y := twoEngines(t, w, nil)
	px, py := x.CreatePD(), y.CreatePD()
	rawA := ibrctest.NewMem(memBase, 1<<20, 4096)
	gate := newGateMem(rawA)
	xa := newEnd(t, x, px, gate, rawA, nil, nil)
	ya := newEnd(t, y, py, nil, nil, nil, nil)
	xb := newEnd(t, x, px, nil, nil, nil, nil)
	yb := newEnd(t, y, py, nil, nil, nil, nil)
	pairUp(t, xa, ya, opts{}) // timeout 0: no retries while A is stuck
	pairUp(t, xb, yb, opts{timeout: 14, retry: 7, rnr: 7})
	released := false
	release := func() {
		if !released {
			released = true
			close(gate.release)
		}
	}
	t.Cleanup(func() { release(); w.close() })

	fill(ya.raw.Bytes()[:4096], 1)
	gate.armed.Store(true)
	if err := ya.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled,
		SGL: ya.sge(0, 4096), RemoteAddr: memBase + 8192, RKey: xa.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("A's WRITE never reached its memory")
	}

	// A's responder holds A's lock inside WriteAt. B's traffic, both
	// directions, every role.
	raw := func(q *qpEnd) []byte { return q.raw.Bytes() }
	fill(raw(yb)[:3000], 2)
	fill(raw(yb)[0x10000:0x10000+5000], 3)
	fill(raw(yb)[0x20000:0x20000+2500], 4)
	fill(raw(xb)[:1500], 5)
	fill(raw(xb)[0x30000:0x30000+6000], 6)
	ok := within(t, 10*time.Second, "B's verbs", func() error {
		for _, q := range []*qpEnd{xb, yb} {
			if err := q.qp.PostRecv(ibrc.RecvWR{ID: 9, SGL: q.sge(0x40000, 8192)}); err != nil {
				return err
			}
		}
		for _, p := range []struct {
			q  *qpEnd
			wr ibrc.SendWR
		}{
			{yb, ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, SGL: yb.sge(0, 3000)}},
			{yb, ibrc.SendWR{ID: 2, Opcode: ibrc.WRWrite, SGL: yb.sge(0x10000, 5000), RemoteAddr: memBase + 0x10000, RKey: xb.mr.RKey()}},
			{xb, ibrc.SendWR{ID: 3, Opcode: ibrc.WRSend, SGL: xb.sge(0, 1500)}},
			{xb, ibrc.SendWR{ID: 4, Opcode: ibrc.WRRead, SGL: xb.sge(0x20000, 2500), RemoteAddr: memBase + 0x20000, RKey: yb.mr.RKey()}},
			{xb, ibrc.SendWR{ID: 5, Opcode: ibrc.WRWrite, SGL: xb.sge(0x30000, 6000), RemoteAddr: memBase + 0x30000, RKey: yb.mr.RKey()}},
		} {
			p.wr.Flags |= ibrc.SendSignaled
			if err := p.q.qp.PostSend(p.wr); err != nil {
				return err
			}
		}
		return nil
	})
	if !ok {
		t.FailNow()
	}
	waitWC(t, yb.scq, 2, 10*time.Second)
	waitWC(t, xb.scq, 3, 10*time.Second)
	if c := waitWC(t, xb.rcq, 1, 10*time.Second); c[0].ByteLen != 3000 {
		t.Fatalf("B's SEND at x: %+v", c[0])
	}
	if c := waitWC(t, yb.rcq, 1, 10*time.Second); c[0].ByteLen != 1500 {
		t.Fatalf("B's SEND at y: %+v", c[0])
	}
	expectBytes(t, "SEND y->x", raw(xb)[0x40000:0x40000+3000], raw(yb)[:3000])
	expectBytes(t, "WRITE y->x", raw(xb)[0x10000:0x10000+5000], raw(yb)[0x10000:0x10000+5000])
	expectBytes(t, "SEND x->y", raw(yb)[0x40000:0x40000+1500], raw(xb)[:1500])
	expectBytes(t, "READ x<-y", raw(xb)[0x20000:0x20000+2500], raw(yb)[0x20000:0x20000+2500])
	expectBytes(t, "WRITE x->y", raw(yb)[0x30000:0x30000+6000], raw(xb)[0x30000:0x30000+6000])

	// Nor do the engine-wide calls wait for A.
	within(t, 5*time.Second, "Stats", func() error { _ = x.Stats(); return nil })
	within(t, 5*time.Second, "SetMessageAlarm", func() error { x.SetMessageAlarm(3); x.SetMessageAlarm(0); return nil })
	within(t, 5*time.Second, "CreateQP and Destroy", func() error {
		q, err := px.CreateQP(ibrc.QPInit{SendCQ: xb.scq, RecvCQ: xb.rcq, Cap: ibrc.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		if err != nil {
			return err
		}
		return q.Destroy()
	})
	within(t, 5*time.Second, "RegisterMR and Deregister", func() error {
		m, err := px.RegisterMR(xb.raw, memBase, 4096, ibrc.AccessLocalWrite)
		if err != nil {
			return err
		}
		return m.Deregister()
	})
	if t.Failed() {
		t.FailNow()
	}

	release()
	waitWC(t, ya.scq, 1, 10*time.Second)
	expectBytes(t, "A's WRITE", rawA.Bytes()[8192:8192+4096], ya.raw.Bytes()[:4096])
}

// TestQPGoesOnDuringItsCopy: no lock is held across a copy of guest
// memory, not even the QP's own (issue 28). While one role of QP A is
// stuck inside a copy of its region, A's verbs return and its other
// roles carry whole messages: with the responder inside the write of a
// WRITE's data, A's requester sends a WRITE and a SEND and completes
// them (their ACKs, behind the stuck frame on the wire, after it); with
// the requester inside the read of a WRITE's payload, A's
// responder places a WRITE from its peer and acknowledges it. Then the
// copy ends and its message completes too, with its data.
func TestQPGoesOnDuringItsCopy(t *testing.T) {
	for _, stuck := range []string{"responder", "requester"} {
		t.Run(stuck, func(t *testing.T) {
			xa, ya, rawA, gate, release := gatedPair(t)
			fill(rawA.Bytes()[:0x3000], 11)
			fill(ya.raw.Bytes()[:0x3000], 12)
			post := func(q, peer *qpEnd, id uint64, op ibrc.WROpcode, off uint64) error {
				return q.qp.PostSend(ibrc.SendWR{ID: id, Opcode: op, Flags: ibrc.SendSignaled,
					SGL: q.sge(off, 4096), RemoteAddr: memBase + 0x10000 + off, RKey: peer.mr.RKey()})
			}
			// The stuck copy: y's WRITE into A's region, or A's WRITE
			// from it.
			if stuck == "responder" {
				gate.armed.Store(true)
				if err := post(ya, xa, 1, ibrc.WRWrite, 0); err != nil {
					t.Fatal(err)
				}
			} else {
				// The goroutine that posts builds the packet: it
				// stays inside the read.
				gate.armRead.Store(true)
				go func() {
					if err := post(xa, ya, 1, ibrc.WRWrite, 0); err != nil {
						t.Error(err)
					}
				}()
			}
			select {
			case <-gate.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the copy never reached A's memory")
			}
			ok := within(t, 10*time.Second, "A's verbs", func() error {
				if st := xa.qp.Query().State; st != ibrc.StateRTS {
					return fmt.Errorf("A in %v", st)
				}
				if err := ya.qp.PostRecv(ibrc.RecvWR{ID: 7, SGL: ya.sge(0x40000, 4096)}); err != nil {
					return err
				}
				if stuck == "responder" {
					if err := post(xa, ya, 2, ibrc.WRWrite, 0x1000); err != nil {
						return err
					}
					return xa.qp.PostSend(ibrc.SendWR{ID: 3, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: xa.sge(0x2000, 4096)})
				}
				return post(ya, xa, 2, ibrc.WRWrite, 0x1000)
			})
			if !ok {
				t.FailNow()
			}
			if stuck == "responder" {
				// Their ACKs wait on the wire behind the frame
				// being placed (it steers all of A's frames to one
				// goroutine), so A completes them after.
				waitWC(t, ya.rcq, 1, 10*time.Second)
				expectBytes(t, "A's WRITE", ya.raw.Bytes()[0x11000:0x12000], rawA.Bytes()[0x1000:0x2000])
				expectBytes(t, "A's SEND", ya.raw.Bytes()[0x40000:0x41000], rawA.Bytes()[0x2000:0x3000])
				release()
				waitWC(t, xa.scq, 2, 10*time.Second)
				waitWC(t, ya.scq, 1, 10*time.Second)
				expectBytes(t, "the stuck WRITE", rawA.Bytes()[0x10000:0x11000], ya.raw.Bytes()[:0x1000])
				return
			}
			waitWC(t, ya.scq, 1, 10*time.Second)
			expectBytes(t, "y's WRITE", rawA.Bytes()[0x11000:0x12000], ya.raw.Bytes()[0x1000:0x2000])
			release()
			waitWC(t, xa.scq, 1, 10*time.Second)
			expectBytes(t, "the stuck WRITE", ya.raw.Bytes()[0x10000:0x11000], rawA.Bytes()[:0x1000])
		})
	}
}

// TestResetDuringCopy: a QP reset and set up again while one of its
// roles is inside a copy with the QP's lock let go. The copy's packet is
// dropped when it ends (it belongs to the QP before the reset, whose work
// vanished without completions), and the QP set up again carries
// messages, during the copy where the wire lets it and after it, with
// their completions and nothing else.
func TestResetDuringCopy(t *testing.T) {
	for _, stuck := range []string{"responder", "responder SEND", "requester"} {
		t.Run(stuck, func(t *testing.T) {
			xa, ya, rawA, gate, release := gatedPair(t)
			fill(rawA.Bytes()[:0x4000], 21)
			fill(ya.raw.Bytes()[:0x4000], 22)
			post := func(q, peer *qpEnd, id uint64, off uint64) error {
				return q.qp.PostSend(ibrc.SendWR{ID: id, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled,
					SGL: q.sge(off, 4096), RemoteAddr: memBase + 0x10000 + off, RKey: peer.mr.RKey()})
			}
			from, to := ya, xa // the WRITEs go to the stuck role's side
			switch stuck {
			case "responder":
				gate.armed.Store(true)
				if err := post(ya, xa, 1, 0); err != nil {
					t.Fatal(err)
				}
			case "responder SEND":
				if err := xa.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: xa.sge(0x40000, 4096)}); err != nil {
					t.Fatal(err)
				}
				gate.armed.Store(true)
				if err := ya.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: ya.sge(0, 4096)}); err != nil {
					t.Fatal(err)
				}
			default:
				from, to = xa, ya
				gate.armRead.Store(true)
				go func() { _ = post(xa, ya, 1, 0) }()
			}
			select {
			case <-gate.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the copy never reached A's memory")
			}
			ok := within(t, 10*time.Second, "reset and set up again", func() error {
				for _, q := range []*qpEnd{xa, ya} {
					if err := q.qp.ModifyQP(&ibrc.QPAttr{State: ibrc.StateReset}, ibrc.AttrState); err != nil {
						return err
					}
				}
				// Retries: frames of the QPs before the reset are
				// still on the wire, and draw sequence NAKs.
				pairUp(t, xa, ya, opts{timeout: 14, retry: 7, rnr: 7})
				return nil
			})
			if !ok {
				t.FailNow()
			}
			if stuck == "requester" {
				// The wire is free: the QP set up again sends while
				// the copy of the QP before it waits.
				if err := post(from, to, 2, 0x1000); err != nil {
					t.Fatal(err)
				}
				if c := waitWC(t, from.scq, 1, 10*time.Second); c[0].WRID != 2 {
					t.Fatalf("completion %+v, want WR 2's", c[0])
				}
				release()
			} else {
				// A's frames wait on the wire behind the copy.
				release()
				if err := post(from, to, 2, 0x1000); err != nil {
					t.Fatal(err)
				}
				if c := waitWC(t, from.scq, 1, 10*time.Second); c[0].WRID != 2 {
					t.Fatalf("completion %+v, want WR 2's", c[0])
				}
			}
			if err := post(from, to, 3, 0x2000); err != nil {
				t.Fatal(err)
			}
			if c := waitWC(t, from.scq, 1, 10*time.Second); c[0].WRID != 3 {
				t.Fatalf("completion %+v, want WR 3's", c[0])
			}
			for _, off := range []int{0x1000, 0x2000} {
				expectBytes(t, "a WRITE after the reset", to.raw.Bytes()[0x10000+off:0x11000+off], from.raw.Bytes()[off:off+0x1000])
			}
			time.Sleep(20 * time.Millisecond)
			buf := make([]ibrc.WC, 4)
			for _, q := range []*qpEnd{xa, ya} {
				if n := q.scq.Poll(buf); n != 0 {
					t.Fatalf("completions after the last: %+v", buf[:n])
				}
			}
			if st := xa.qp.Query().State; st != ibrc.StateRTS {
				t.Fatalf("A in %v", st)
			}
		})
	}
}

// TestDeregisterWaitsForAccess: the quiesce contract without one lock for
// the engine. A region's Deregister, while the responder is inside a
// write of its memory, returns only once that write is done, and no
// access reaches the memory after it returned: the next WRITE for the
// region is refused with a remote access error and the QP goes to ERR.
func TestDeregisterWaitsForAccess(t *testing.T) {
	w := newSteeredWire()
	x, y := twoEngines(t, w, nil)
	px, py := x.CreatePD(), y.CreatePD()
	rawA := ibrctest.NewMem(memBase, 1<<20, 4096)
	gate := newGateMem(rawA)
	xa := newEnd(t, x, px, gate, rawA, nil, nil)
	ya := newEnd(t, y, py, nil, nil, nil, nil)
	pairUp(t, xa, ya, opts{})
	t.Cleanup(w.close)

	fill(ya.raw.Bytes()[:2048], 7)
	write := func(i int) {
		t.Helper()
		if err := ya.qp.PostSend(ibrc.SendWR{ID: uint64(i), Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled,
			SGL: ya.sge(uint64(i)*1024, 1024), RemoteAddr: memBase + uint64(i)*1024, RKey: xa.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	gate.armed.Store(true)
	write(0)
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the WRITE never reached the region's memory")
	}
	var deregDone atomic.Bool
	var deregErr error
	dereg := make(chan struct{})
	go func() {
		deregErr = xa.mr.Deregister()
		deregDone.Store(true)
		close(dereg)
	}()
	time.Sleep(20 * time.Millisecond)
	if deregDone.Load() {
		t.Fatal("Deregister returned while a write of the region was in flight")
	}
	close(gate.release)
	select {
	case <-dereg:
	case <-time.After(10 * time.Second):
		t.Fatal("Deregister did not return once the write was done")
	}
	if deregErr != nil {
		t.Fatal(deregErr)
	}
	after := gate.accesses.Load()
	// The WRITE in flight was placed; the next one finds the region gone.
	write(1)
	buf := make([]ibrc.WC, 4)
	var got []ibrc.WC
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		k := ya.scq.Poll(buf)
		got = append(got, buf[:k]...)
		time.Sleep(50 * time.Microsecond)
	}
	if len(got) != 2 || got[0].Status != ibrc.WCSuccess || got[1].Status != ibrc.WCRemAccessErr {
		t.Fatalf("completions %+v: want the WRITE in flight done and the next one a remote access error", got)
	}
	expectBytes(t, "the WRITE in flight", rawA.Bytes()[:1024], ya.raw.Bytes()[:1024])
	if n := gate.accesses.Load(); n != after {
		t.Fatalf("%d accesses to the region after Deregister returned", n-after)
	}
	if !bytes.Equal(rawA.Bytes()[1024:2048], make([]byte, 1024)) {
		t.Fatal("the second WRITE reached the deregistered region")
	}
	if st := xa.qp.Query().State; st != ibrc.StateErr {
		t.Fatalf("QP in %v, want ERR", st)
	}
}

// TestParallelQPs runs several QP pairs between two engines at once, each
// end from a goroutine of its own, every operation both ways, over a wire
// that loses frames and memory that faults, with the QPs of an engine
// sharing its CQs, and the engine-wide calls made meanwhile. Run under
// -race it checks the locking; the data and completions check that the
// QPs' traffic did not mix.
func TestParallelQPs(t *testing.T) {
	const (
		qps  = 4
		ops  = 48
		slot = 8192
	)
	w := newSteeredWire()
	w.drop = func(side int, n uint64) bool { return n%97 == 0 }
	pager := &ibrctest.Pager{Clock: clock.Real{}, Delay: 50 * time.Microsecond}
	x, y := twoEngines(t, w, pager)
	engines := [2]*ibrc.Transport{x, y}
	var ends [2][qps]*qpEnd
	for s, e := range engines {
		pd := e.CreatePD()
		scq, _ := e.CreateCQ(4 * qps * ops)
		rcq, _ := e.CreateCQ(4 * qps * ops)
		for i := range qps {
			raw := ibrctest.NewMem(memBase, 4*ops*slot, 4096)
			raw.SetFaultRate(0.02, true, uint64(s*qps+i+1))
			ends[s][i] = newEnd(t, e, pd, nil, raw, scq, rcq)
		}
	}
	for i := range qps {
		pairUp(t, ends[0][i], ends[1][i], opts{timeout: 14, retry: 7, rnr: 7, minRNR: 1})
	}
	t.Cleanup(w.close)

	// A QP's region: its sources, where the peer's SENDs land, where the
	// peer's WRITEs land, where its READs land; slot k of each is op k's.
	const (
		srcArea  = 0
		recvArea = ops * slot
		wArea    = 2 * ops * slot
		rArea    = 3 * ops * slot
	)
	kind := func(k int) ibrc.WROpcode { return [3]ibrc.WROpcode{ibrc.WRSendImm, ibrc.WRWrite, ibrc.WRRead}[k%3] }
	length := func(s, i, k int) int { return 1 + (k*977+i*131+s*71)%slot }
	const sends = (ops + 2) / 3
	for s := range 2 {
		for i := range qps {
			q := ends[s][i]
			fill(q.raw.Bytes()[srcArea:srcArea+ops*slot], uint64(100+s*qps+i))
			// The peer's j-th SEND (op 3j) takes receive j.
			for j := range sends {
				if err := q.qp.PostRecv(ibrc.RecvWR{ID: uint64(j), SGL: q.sge(recvArea+uint64(j)*slot, slot)}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	// Completions come out of the shared CQs in any QP's order: a poller
	// per CQ hands each QP its own.
	type key struct {
		side int
		qpn  uint32
	}
	sendWCs, recvWCs := map[key]chan ibrc.WC{}, map[key]chan ibrc.WC{}
	for s := range 2 {
		for i := range qps {
			k := key{s, ends[s][i].qp.Num()}
			sendWCs[k], recvWCs[k] = make(chan ibrc.WC, ops), make(chan ibrc.WC, ops)
		}
	}
	stop := make(chan struct{})
	var pollers sync.WaitGroup
	for s := range 2 {
		for _, c := range []struct {
			cq *ibrc.CQ
			to map[key]chan ibrc.WC
		}{{ends[s][0].scq, sendWCs}, {ends[s][0].rcq, recvWCs}} {
			pollers.Add(1)
			go func() {
				defer pollers.Done()
				buf := make([]ibrc.WC, 32)
				for {
					n := c.cq.Poll(buf)
					for _, wc := range buf[:n] {
						c.to[key{s, wc.QPN}] <- wc
					}
					if n == 0 {
						select {
						case <-stop:
							return
						case <-time.After(50 * time.Microsecond):
						}
					}
				}
			}()
		}
		// The engine-wide calls, meanwhile.
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			for n := uint64(1); ; n++ {
				_ = engines[s].Stats()
				engines[s].SetMessageAlarm(n % 5)
				_ = ends[s][n%qps].qp.Query()
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Microsecond):
				}
			}
		}()
	}

	var workers sync.WaitGroup
	errs := make(chan error, 2*qps)
	for s := range 2 {
		for i := range qps {
			workers.Add(1)
			go func() {
				defer workers.Done()
				q, peer := ends[s][i], ends[1-s][i]
				wcs := sendWCs[key{s, q.qp.Num()}]
				next := func(k int) error {
					select {
					case wc := <-wcs:
						return checkWC(wc, uint64(k))
					case <-time.After(20 * time.Second):
						return fmt.Errorf("op %d never completed; stats %+v", k, q.e.Stats())
					}
				}
				for k := range ops {
					l := length(s, i, k)
					wr := ibrc.SendWR{ID: uint64(k), Opcode: kind(k), Flags: ibrc.SendSignaled, Imm: uint32(k)}
					switch wr.Opcode {
					case ibrc.WRSendImm:
						wr.SGL = q.sge(srcArea+uint64(k)*slot, l)
					case ibrc.WRWrite:
						wr.SGL = q.sge(srcArea+uint64(k)*slot, l)
						wr.RemoteAddr, wr.RKey = memBase+wArea+uint64(k)*slot, peer.mr.RKey()
					case ibrc.WRRead:
						wr.SGL = q.sge(rArea+uint64(k)*slot, l)
						wr.RemoteAddr, wr.RKey = memBase+srcArea+uint64(k)*slot, peer.mr.RKey()
					}
					if err := q.qp.PostSend(wr); err != nil {
						errs <- fmt.Errorf("side %d QP %d op %d: %w", s, i, k, err)
						return
					}
					if k >= 8 { // up to 8 in flight
						if err := next(k - 8); err != nil {
							errs <- fmt.Errorf("side %d QP %d: %w", s, i, err)
							return
						}
					}
				}
				for k := max(0, ops-8); k < ops; k++ {
					if err := next(k); err != nil {
						errs <- fmt.Errorf("side %d QP %d: %w", s, i, err)
						return
					}
				}
			}()
		}
	}
	workers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		close(stop)
		pollers.Wait()
		t.FailNow()
	}
	// Every SEND's receive completion, at the peer.
	for s := range 2 {
		for i := range qps {
			q, peer := ends[s][i], ends[1-s][i]
			ch := recvWCs[key{s, q.qp.Num()}]
			for range sends {
				var wc ibrc.WC
				select {
				case wc = <-ch:
				case <-time.After(20 * time.Second):
					t.Fatalf("side %d QP %d: a receive never completed", s, i)
				}
				k := int(wc.Imm)
				if wc.Status != ibrc.WCSuccess || kind(k) != ibrc.WRSendImm || wc.WRID != uint64(k/3) || int(wc.ByteLen) != length(1-s, i, k) {
					t.Fatalf("side %d QP %d: receive %+v", s, i, wc)
				}
			}
			for k := range ops {
				l := length(1-s, i, k)
				src := peer.raw.Bytes()[srcArea+k*slot : srcArea+k*slot+l]
				switch kind(k) {
				case ibrc.WRSendImm:
					j := k / 3
					expectBytes(t, "SEND", q.raw.Bytes()[recvArea+j*slot:recvArea+j*slot+l], src)
				case ibrc.WRWrite:
					expectBytes(t, "WRITE", q.raw.Bytes()[wArea+k*slot:wArea+k*slot+l], src)
				}
				// q's own READs read the peer's sources into q.
				l = length(s, i, k)
				if kind(k) == ibrc.WRRead {
					expectBytes(t, "READ", q.raw.Bytes()[rArea+k*slot:rArea+k*slot+l], peer.raw.Bytes()[srcArea+k*slot:srcArea+k*slot+l])
				}
			}
		}
	}
	close(stop)
	pollers.Wait()
	for s, e := range engines {
		st := e.Stats()
		t.Logf("side %d: %d frames sent, %d retransmitted, %d page requests, %d RNR NAKs for faults",
			s, st.TxFrames, st.Retransmits, st.PageRequests, st.RNRNakFault)
		if st.MessagesIn != uint64(qps*ops) {
			t.Errorf("side %d executed %d requests, want %d", s, st.MessagesIn, qps*ops)
		}
	}
}

// checkWC checks a send completion: op id, in order, with success.
func checkWC(wc ibrc.WC, id uint64) error {
	if wc.Status != ibrc.WCSuccess || wc.WRID != id {
		return fmt.Errorf("completion %+v, want op %d done", wc, id)
	}
	return nil
}

// gatedPort refuses frames (ErrPortFull) while full; then it passes them
// on. The test plays the port's side: PortReady once it opens.
type gatedPort struct {
	next ibrc.Port
	full atomic.Bool
}

func (p *gatedPort) SendFrame(f []byte) error {
	if p.full.Load() {
		return ibrc.ErrPortFull
	}
	return p.next.SendFrame(f)
}

// TestBusyQPDoesNotHoldUpTurns: the transmit turns do not wait for a QP
// that is busy elsewhere. QP A and then QP B wait for transmit room
// (their WRITEs filled what a port that takes nothing lets them queue),
// and A's responder is stuck inside a write of its memory on the port
// reader's goroutine, holding A's lock. When the port opens, its
// PortReady sends what waited and gives B its turns without waiting for
// A's copy, and B's WRITE completes; A's turn goes back to A, whose
// packets go out once its copy is done.
func TestBusyQPDoesNotHoldUpTurns(t *testing.T) {
	w := newSteeredWire()
	port := &gatedPort{next: w.port(0)}
	port.full.Store(true)
	x := ibrc.New(ibrc.Config{Port: port, MAC: macA, IPv4: ipA})
	y := ibrc.New(ibrc.Config{Port: w.port(1), MAC: macB, IPv4: ipB})
	w.attach(0, x.HandleFrame)
	w.attach(1, y.HandleFrame)
	px, py := x.CreatePD(), y.CreatePD()
	rawA := ibrctest.NewMem(memBase, 1<<20, 4096)
	gate := newGateMem(rawA)
	xa := newEnd(t, x, px, gate, rawA, nil, nil)
	ya := newEnd(t, y, py, nil, nil, nil, nil)
	xb := newEnd(t, x, px, nil, nil, nil, nil)
	yb := newEnd(t, y, py, nil, nil, nil, nil)
	pairUp(t, xa, ya, opts{}) // no local ACK timeout: nothing retransmits
	pairUp(t, xb, yb, opts{})
	released := false
	release := func() {
		if !released {
			released = true
			close(gate.release)
		}
	}
	t.Cleanup(func() { release(); port.full.Store(false); w.close() })

	// A's WRITE fills the transmit queue's room (64 frames) and waits for
	// a turn; B's, behind it, waits too.
	const size = 100 << 10
	fill(xa.raw.Bytes()[:size], 11)
	fill(xb.raw.Bytes()[:size], 12)
	for _, q := range []*qpEnd{xa, xb} {
		peer := ya
		if q == xb {
			peer = yb
		}
		if err := q.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled,
			SGL: q.sge(0, size), RemoteAddr: memBase, RKey: peer.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	if st := x.Stats(); st.DataPackets != 64 {
		t.Fatalf("%d packets built behind the full port, want the 64 that fit", st.DataPackets)
	}
	// A's responder takes A's lock and keeps it, inside a copy.
	fill(ya.raw.Bytes()[0x90000:0x90000+1024], 13)
	gate.armed.Store(true)
	if err := ya.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled,
		SGL: ya.sge(0x90000, 1024), RemoteAddr: memBase + 0x80000, RKey: xa.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("y's WRITE never reached A's memory")
	}

	port.full.Store(false)
	if !within(t, 10*time.Second, "PortReady", func() error { x.PortReady(); return nil }) {
		t.FailNow()
	}
	waitWC(t, xb.scq, 1, 10*time.Second)
	expectBytes(t, "B's WRITE", yb.raw.Bytes()[:size], xb.raw.Bytes()[:size])
	if n := ya.scq.Len(); n != 0 {
		t.Fatalf("y's WRITE to A completed while A's copy was held")
	}

	// A lets go of its lock and gets its turn back.
	release()
	waitWC(t, ya.scq, 1, 10*time.Second)
	waitWC(t, xa.scq, 1, 10*time.Second)
	expectBytes(t, "A's WRITE", ya.raw.Bytes()[:size], xa.raw.Bytes()[:size])
	expectBytes(t, "y's WRITE to A", rawA.Bytes()[0x80000:0x80000+1024], ya.raw.Bytes()[0x90000:0x90000+1024])
}

// pacedWire is a PacedPort in front of a steeredWire, as package rdma's
// transmitter is: SendFrame queues up to room frames and refuses more
// (ErrPortFull); a goroutine of its own puts them on the wire, tells the
// engine each one left (FrameLeft), and calls PortReady once its queue
// drained after a refusal or a Pull.
type pacedWire struct {
	e      *ibrc.Transport
	next   ibrc.Port
	frames chan []byte
	wake   chan struct{}
	owed   atomic.Bool // a refusal or a Pull waits for PortReady
	stop   chan struct{}
	done   chan struct{}
}

func newPacedWire(next ibrc.Port, room int) *pacedWire {
	return &pacedWire{next: next, frames: make(chan []byte, room), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
}

func (p *pacedWire) SendFrame(f []byte) error {
	select {
	case p.frames <- f:
		return nil
	default:
		p.Pull()
		return ibrc.ErrPortFull
	}
}

func (p *pacedWire) Pull() {
	p.owed.Store(true)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// start runs the transmit goroutine for e until close.
func (p *pacedWire) start(e *ibrc.Transport) {
	p.e = e
	go func() {
		defer close(p.done)
		for {
			select {
			case f := <-p.frames:
				p.put(f)
				continue
			default:
			}
			if p.owed.Swap(false) {
				p.e.PortReady()
				continue
			}
			select {
			case f := <-p.frames:
				p.put(f)
			case <-p.wake:
			case <-p.stop:
				return
			}
		}
	}()
}

func (p *pacedWire) put(f []byte) {
	_ = p.next.SendFrame(f)
	p.e.FrameLeft()
}

func (p *pacedWire) close() {
	close(p.stop)
	<-p.done
}

// TestPacedQPsRace: what the engine's timers and turns do for a port
// with a transmit goroutine of its own, beside per-QP work. x's PacedPort
// goroutine tells x each frame left (FrameLeft) and builds what waited
// for room (PortReady) while x's QPs stream WRITEs and answer READs over a
// wire that loses frames, their local ACK timers held to a floor
// (Config.MinAckTimeout) expiring meanwhile, QPs waiting for their turns
// are destroyed, and the engine-wide calls (SetIPv4 among them: Config
// is read without a lock but for IPv4) go on. Under -race it holds
// FrameLeft, the floor and Destroy leaving the turns to the locks the
// package's Locking names; the completions and data check the surviving
// QPs' traffic, and the destroyed QPs must not stay in the engine.
func TestPacedQPsRace(t *testing.T) {
	const (
		qps     = 3
		victims = 2
		ops     = 16
		size    = 32 << 10
		rArea   = ops * size // y: where its READs of x land
	)
	w := newSteeredWire()
	w.drop = func(side int, n uint64) bool { return n%499 == 0 }
	pw := newPacedWire(w.port(0), 32)
	const floor = 100 * time.Millisecond
	x := ibrc.New(ibrc.Config{Port: pw, MAC: macA, IPv4: ipA, MinAckTimeout: floor})
	y := ibrc.New(ibrc.Config{Port: w.port(1), MAC: macB, IPv4: ipB, MinAckTimeout: floor})
	pw.start(x)
	w.attach(0, x.HandleFrame)
	w.attach(1, y.HandleFrame)
	t.Cleanup(func() { pw.close(); w.close() }) // after the QPs' Destroy
	px, py := x.CreatePD(), y.CreatePD()
	// Timeout 10 asks for 4 ms; the floor makes it 100 ms. At 20 ms, under
	// -race on this 2-CPU machine at load 8-11, retransmitted READs and
	// WRITEs queued behind each other until QPs ran out of retries, on
	// per-QP locks and on one engine lock alike (5 of 28 runs each).
	o := opts{mtu: ibrc.MTU1024, timeout: 10, retry: 7, rnr: 7, access: ibrc.AccessLocalWrite | ibrc.AccessRemoteWrite | ibrc.AccessRemoteRead}

	var xs, ys [qps]*qpEnd
	for i := range qps {
		xs[i], ys[i] = newEnd(t, x, px, nil, nil, nil, nil), newEnd(t, y, py, nil, nil, nil, nil)
		pairUp(t, xs[i], ys[i], o)
		fill(xs[i].raw.Bytes()[:ops*size], uint64(40+i))
	}
	// The victims: x's QPs with more WRITEs than the port has room for,
	// so that they wait for turns, destroyed while the others run. Made
	// without newEnd, whose cleanup would keep them.
	victimQPs := make([]*ibrc.QP, victims)
	gone := make([]weak.Pointer[ibrc.QP], victims)
	for i := range victims {
		raw := ibrctest.NewMem(memBase, 1<<20, 4096)
		mr, err := px.RegisterMR(raw, memBase, 1<<20, ibrc.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		cq, _ := x.CreateCQ(64)
		q, err := px.CreateQP(ibrc.QPInit{SendCQ: cq, RecvCQ: cq, Cap: ibrc.QPCap{MaxSendWR: 64, MaxRecvWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		peer := newEnd(t, y, py, nil, nil, nil, nil)
		connect(t, &node{qp: q}, &node{qp: peer.qp}, macB, ipB, 0, 0, o)
		connect(t, &node{qp: peer.qp}, &node{qp: q}, macA, ipA, 0, 0, o)
		for k := range 16 {
			if err := q.PostSend(ibrc.SendWR{ID: uint64(k), Opcode: ibrc.WRWrite,
				SGL:        []ibrc.SGE{{Addr: memBase, Length: 64 << 10, LKey: mr.LKey()}},
				RemoteAddr: memBase, RKey: peer.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
		}
		victimQPs[i], gone[i] = q, weak.Make(q)
	}

	stop := make(chan struct{})
	var side sync.WaitGroup
	side.Add(2)
	go func() { // the engine-wide calls
		defer side.Done()
		for n := 0; ; n++ {
			x.SetIPv4(ipA)
			_ = x.Stats()
			_ = xs[n%qps].qp.Query()
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	go func() { // the victims go while the others run
		defer side.Done()
		time.Sleep(2 * time.Millisecond)
		for i, q := range victimQPs {
			if err := q.Destroy(); err != nil {
				t.Errorf("victim %d: %v", i, err)
			}
			victimQPs[i] = nil
			time.Sleep(time.Millisecond)
		}
	}()

	// x WRITEs its sources to y; y READs the same sources back.
	run := func(q *qpEnd, wr func(k int) ibrc.SendWR) error {
		buf := make([]ibrc.WC, 16)
		posted, done := 0, 0
		deadline := time.Now().Add(30 * time.Second)
		for done < ops {
			for posted < ops && posted-done < 4 {
				if err := q.qp.PostSend(wr(posted)); err != nil {
					return err
				}
				posted++
			}
			k := q.scq.Poll(buf)
			for _, c := range buf[:k] {
				if err := checkWC(c, uint64(done)); err != nil {
					return err
				}
				done++
			}
			if k == 0 {
				if time.Now().After(deadline) {
					return fmt.Errorf("%d of %d done after 30 s; stats %+v", done, ops, q.e.Stats())
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		return nil
	}
	errs := make(chan error, 2*qps)
	var workers sync.WaitGroup
	for i := range qps {
		workers.Add(2)
		go func() {
			defer workers.Done()
			errs <- run(xs[i], func(k int) ibrc.SendWR {
				return ibrc.SendWR{ID: uint64(k), Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled,
					SGL: xs[i].sge(uint64(k)*size, size), RemoteAddr: memBase + uint64(k)*size, RKey: ys[i].mr.RKey()}
			})
		}()
		go func() {
			defer workers.Done()
			errs <- run(ys[i], func(k int) ibrc.SendWR {
				return ibrc.SendWR{ID: uint64(k), Opcode: ibrc.WRRead, Flags: ibrc.SendSignaled,
					SGL: ys[i].sge(rArea+uint64(k)*size, size), RemoteAddr: memBase + uint64(k)*size, RKey: xs[i].mr.RKey()}
			})
		}()
	}
	workers.Wait()
	close(stop)
	side.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for s, e := range []*ibrc.Transport{x, y} {
		st := e.Stats()
		t.Logf("side %d: %d frames sent, %d retransmitted, %d timeouts, %d sequence NAKs, %d dropped",
			s, st.TxFrames, st.Retransmits, st.Timeouts, st.SeqNakReceived, st.TxDropped)
	}
	if t.Failed() {
		t.FailNow()
	}
	for i := range qps {
		src := xs[i].raw.Bytes()[:ops*size]
		expectBytes(t, "x's WRITEs", ys[i].raw.Bytes()[:ops*size], src)
		expectBytes(t, "y's READs", ys[i].raw.Bytes()[rArea:rArea+ops*size], src)
	}
	for i, g := range gone {
		deadline := time.Now().Add(5 * time.Second)
		for g.Value() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("x still holds destroyed victim %d", i)
			}
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
	}
}

// gatedPair connects two engines on a steered wire, A's memory behind a
// gate that holds every copy into or out of it until release (called at
// cleanup too); the QPs have timeout 0: no retries while A is stuck.
func gatedPair(t *testing.T) (xa, ya *qpEnd, rawA *ibrctest.Mem, gate *gateMem, release func()) {
	t.Helper()
	w := newSteeredWire()
	x, y := twoEngines(t, w, nil)
	rawA = ibrctest.NewMem(memBase, 1<<20, 4096)
	gate = newGateMem(rawA)
	xa = newEnd(t, x, x.CreatePD(), gate, rawA, nil, nil)
	ya = newEnd(t, y, y.CreatePD(), nil, nil, nil, nil)
	pairUp(t, xa, ya, opts{})
	released := false
	release = func() {
		if !released {
			released = true
			close(gate.release)
		}
	}
	t.Cleanup(func() { release(); w.close() })
	return xa, ya, rawA, gate, release
}
