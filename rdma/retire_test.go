package rdma_test

import (
	"testing"
	"time"

	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestSlotRetiredBeforeCompletion: by the time a completion is visible,
// its send and receive slots are user space's again (consumer_index moved
// first), so a program that posts as soon as it polls, with one slot
// (perftest's latency tests), never finds its queue full. The poller
// watches the CQ's producer index and reads the consumer index the moment
// it moves.
func TestSlotRetiredBeforeCompletion(t *testing.T) {
	a, b := pair(t, 3)
	const rounds = 300
	for i := range rounds {
		b.postRecv(t, b.rq, rdmatest.Recv{ID: uint64(i), SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}})
		sendProd, recvProd := a.scq.Producer(), b.rcq.Producer()
		a.post(t, a.sq, a.qpn, rdmatest.Send{ID: uint64(i), Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}})
		deadline := time.Now().Add(5 * time.Second)
		for sendSeen, recvSeen := false, false; !sendSeen || !recvSeen; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no completion within 5 s", i)
			}
			if !sendSeen && a.scq.Producer() != sendProd {
				sendSeen = true
				if c := a.sq.Consumer(); c != a.sq.Producer() {
					t.Fatalf("round %d: send completion visible with the send slot not retired (consumer %d, producer %d)", i, c, a.sq.Producer())
				}
			}
			if !recvSeen && b.rcq.Producer() != recvProd {
				recvSeen = true
				if c := b.rq.Consumer(); c != b.rq.Producer() {
					t.Fatalf("round %d: receive completion visible with the receive slot not retired (consumer %d, producer %d)", i, c, b.rq.Producer())
				}
			}
		}
		poll(t, a.scq, 1)
		poll(t, b.rcq, 1)
	}
}
