package ibrc_test

import (
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rocev2"
)

// TestSeqNakAfterRNRNakCostsNoRetry: rdma_rxe, out of receive WQEs, RNR
// NAKs a PSN and then NAKs the packets that followed it as out of
// sequence, for the same PSN. Many such rounds, with the RNR timer firing
// before or after the sequence NAK arrives, spend no transport retry
// (rnr_retry 7 waits forever), and the SENDs complete once the peer takes
// them. Before, each round cost one, and the QP ended with RETRY_EXC_ERR
// after retry_cnt rounds.
func TestSeqNakAfterRNRNakCostsNoRetry(t *testing.T) {
	v := newVictimWith(t, victimOpts{virtual: true, retry: 2, rnrRetry: 7})
	for id := uint64(1); id <= 2; id++ {
		if err := v.qp.PostSend(ibrc.SendWR{ID: id, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled,
			SGL: []ibrc.SGE{{Addr: memBase, Length: 10, LKey: v.mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := v.responses(t); len(got) != 2 || got[0].BTH.PSN != 5 || got[1].BTH.PSN != 6 {
		t.Fatalf("the SENDs: %+v", got)
	}
	nak := func(syn rocev2.Syndrome) []byte {
		return v.frame(rocev2.OpAck, 5, nil, func(h *rocev2.Headers) { h.AETH.Syndrome = syn })
	}
	for round := 0; round < 10; round++ {
		v.e.HandleFrame(nak(rocev2.RNRNAKSyndrome(1)))
		if round%2 == 1 {
			v.clk.Step() // the RNR timer first: the retry has begun
		}
		v.e.HandleFrame(nak(rocev2.NAKSyndrome(rocev2.NAKPSNSeqError)))
		if round%2 == 0 {
			v.clk.Step()
		}
		var psns []uint32
		for _, p := range v.responses(t) {
			psns = append(psns, p.BTH.PSN)
		}
		if s := v.qp.Query().State; s != ibrc.StateRTS {
			t.Fatalf("round %d: QP in %v", round, s)
		}
		if len(psns) != 2 || psns[0] != 5 {
			t.Fatalf("round %d: PSNs %v sent, want both SENDs once again (5 6)", round, psns)
		}
	}
	v.e.HandleFrame(v.frame(rocev2.OpAck, 6, nil, func(h *rocev2.Headers) { h.AETH.Syndrome = rocev2.ACKSyndrome(31) }))
	var wc [4]ibrc.WC
	if n := v.cq.Poll(wc[:]); n != 2 || wc[0].Status != ibrc.WCSuccess || wc[1].Status != ibrc.WCSuccess {
		t.Fatalf("completions: %+v", wc[:n])
	}
	if st := v.e.Stats(); st.RNRNakReceived != 10 || st.SeqNakReceived != 10 {
		t.Fatalf("%d RNR NAKs and %d sequence NAKs counted, want 10 each", st.RNRNakReceived, st.SeqNakReceived)
	}
}

// Retries against a slow peer (issue 22, found by the RDMA soak between
// npfnic and rdma_rxe in two TCG guests): a retry is owed to a packet that
// left and went unanswered, never to the port's backlog. Before, the
// local ACK timer ran from queueing: each expiry queued the window again
// behind the copies still waiting, and the QP ended with RETRY_EXC_ERR
// while the peer acknowledged everything that reached it.

// postHeld posts one signaled 10-byte SEND on v's QP.
func postHeld(t *testing.T, v *victim) {
	t.Helper()
	if err := v.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled,
		SGL: []ibrc.SGE{{Addr: memBase, Length: 10, LKey: v.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
}

// expireHeld lets the local ACK timer expire ten times, more than v's
// retry_cnt of 2 allows, and checks that none retried.
func expireHeld(t *testing.T, v *victim) {
	t.Helper()
	for i := 0; i < 10; i++ {
		if !v.clk.Step() {
			var wc [4]ibrc.WC
			n := v.cq.Poll(wc[:])
			t.Fatalf("expiry %d: no timer armed; QP in %v, completions %+v", i, v.qp.Query().State, wc[:n])
		}
	}
	st := v.e.Stats()
	var wc [4]ibrc.WC
	if n := v.cq.Poll(wc[:]); n != 0 || st.Timeouts != 0 || st.Retransmits != 0 || st.TxFrames != 1 {
		t.Fatalf("timer expiries behind a held port: completions %+v, %d timeouts, %d retransmits, %d frames queued",
			wc[:n], st.Timeouts, st.Retransmits, st.TxFrames)
	}
}

// retriesOnceLeft checks that, once the SEND left, an unanswered expiry
// retransmits it as before, and that its ACK completes it.
func retriesOnceLeft(t *testing.T, v *victim) {
	t.Helper()
	v.clk.Step()
	if st := v.e.Stats(); st.Timeouts != 1 || st.Retransmits != 1 {
		t.Fatalf("after the port sent it: %d timeouts, %d retransmits; want 1 each", st.Timeouts, st.Retransmits)
	}
	v.e.HandleFrame(v.frame(rocev2.OpAck, 5, nil, func(h *rocev2.Headers) { h.AETH.Syndrome = rocev2.ACKSyndrome(31) }))
	var wc [4]ibrc.WC
	if n := v.cq.Poll(wc[:]); n != 1 || wc[0].Status != ibrc.WCSuccess {
		t.Fatalf("after the ACK: %+v", wc[:n])
	}
}

// TestTimerWaitsForBlockedPort: a port whose SendFrame blocks (a stream
// socket to a peer that reads slowly) holds the SEND; the timer's
// expiries meanwhile neither retry nor spend retry_cnt.
func TestTimerWaitsForBlockedPort(t *testing.T) {
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	var mu sync.Mutex
	var sent int
	port := ibrc.PortFunc(func(f []byte) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
		mu.Lock()
		sent++
		mu.Unlock()
		return nil
	})
	v := newVictimWith(t, victimOpts{virtual: true, retry: 2, port: port})
	done := make(chan struct{})
	go func() {
		// This goroutine's unlock hands the packet to the port, which
		// holds it.
		postHeld(t, v)
		close(done)
	}()
	<-entered
	expireHeld(t, v)
	close(gate)
	<-done
	mu.Lock()
	if sent != 1 {
		t.Fatalf("%d frames reached the port, want the one SEND", sent)
	}
	mu.Unlock()
	retriesOnceLeft(t, v)
}

// leavingPort is a PacedPort that takes every frame and tells the engine
// it left only when the test says so (FrameLeft), as package rdma's transmit
// goroutine does once the stream took it.
type leavingPort struct{ frames int }

func (p *leavingPort) SendFrame([]byte) error { p.frames++; return nil }
func (p *leavingPort) Pull()                  {}

// TestTimerWaitsForPacedPort: a PacedPort took the SEND but has not put it
// on the wire; the timer waits for FrameLeft before it counts a retry.
func TestTimerWaitsForPacedPort(t *testing.T) {
	port := &leavingPort{}
	v := newVictimWith(t, victimOpts{virtual: true, retry: 2, port: port})
	postHeld(t, v)
	if port.frames != 1 {
		t.Fatalf("the port took %d frames, want the SEND", port.frames)
	}
	expireHeld(t, v)
	v.e.FrameLeft()
	retriesOnceLeft(t, v)
}

// TestMinAckTimeout: with a floor of 1 s, a QP asking for 67 ms (timeout
// 14, ibv_rc_pingpong's) retransmits after 1 s, and one asking for more
// keeps its own; the retries still run out. Emulated peers stall longer
// than seven 67 ms retries, and the programs cannot set the timeout.
func TestMinAckTimeout(t *testing.T) {
	for _, tc := range []struct {
		floor, want time.Duration
	}{
		{0, rocev2.LocalAckTimeout(14)},
		{time.Second, time.Second},
		{time.Millisecond, rocev2.LocalAckTimeout(14)},
	} {
		v := newVictimWith(t, victimOpts{virtual: true, retry: 1, minAck: tc.floor})
		postHeld(t, v)
		start := v.clk.Elapsed()
		if !v.clk.Step() {
			t.Fatalf("floor %v: no timer armed", tc.floor)
		}
		if got := v.clk.Elapsed() - start; got != tc.want {
			t.Errorf("floor %v: the timer ran %v, want %v", tc.floor, got, tc.want)
		}
		if st := v.e.Stats(); st.Timeouts != 1 || st.Retransmits != 1 {
			t.Errorf("floor %v: %d timeouts, %d retransmits after the first expiry", tc.floor, st.Timeouts, st.Retransmits)
		}
		v.clk.Step()
		var wc [4]ibrc.WC
		if n := v.cq.Poll(wc[:]); n < 1 || wc[0].Status != ibrc.WCRetryExcErr {
			t.Errorf("floor %v: after retry_cnt 1 ran out: %+v", tc.floor, wc[:n])
		}
	}
}
