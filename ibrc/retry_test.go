package ibrc_test

import (
	"testing"

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
