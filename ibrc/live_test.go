package ibrc_test

import (
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/clock"
)

// TestRealClockConcurrent runs the engines as live use does: the real
// clock, frames delivered on timer goroutines, page requests resolved on
// others, and two goroutines posting sends at once, over a lossy link with
// receive faults. Run with -race to check the locking.
func TestRealClockConcurrent(t *testing.T) {
	clk := clock.Real{}
	link := ibrctest.NewLink(ibrctest.LinkConfig{Clock: clk, Latency: 20 * time.Microsecond, Loss: 0.01, Dup: 0.01, Seed: 9})
	pager := &ibrctest.Pager{Clock: clk, Delay: 50 * time.Microsecond}
	type side struct {
		e   *ibrc.Transport
		mem *ibrctest.Mem
		mr  *ibrc.MR
		cq  *ibrc.CQ
		qp  *ibrc.QP
	}
	var s [2]side
	var reasonsMu sync.Mutex
	reasons := map[string]int{}
	defer func() { reasonsMu.Lock(); t.Logf("drop reasons %v", reasons); reasonsMu.Unlock() }()
	macs, ips := [2][6]byte{macA, macB}, [2][4]byte{ipA, ipB}
	for i := range s {
		s[i].e = ibrc.New(ibrc.Config{Port: link.Port(i), Clock: clk, MAC: macs[i], IPv4: ips[i], Pager: pager})
		e := s[i].e
		link.Attach(i, func(f []byte) error {
			err := e.HandleFrame(f)
			if err != nil {
				reasonsMu.Lock()
				reasons[err.Error()]++
				reasonsMu.Unlock()
			}
			return err
		})
		pd := s[i].e.CreatePD()
		s[i].mem = ibrctest.NewMem(memBase, 1<<20, 4096)
		s[i].mr, _ = pd.RegisterMR(s[i].mem, memBase, 1<<20, ibrc.AccessLocalWrite)
		s[i].cq, _ = s[i].e.CreateCQ(1024)
		s[i].qp, _ = pd.CreateQP(ibrc.QPInit{SendCQ: s[i].cq, RecvCQ: s[i].cq, Cap: ibrc.QPCap{MaxSendWR: 512, MaxRecvWR: 512}})
	}
	for i := range s {
		p := 1 - i
		o := opts{timeout: 12, retry: 7, rnr: 7, minRNR: 1, mtu: ibrc.MTU1024, access: ibrc.AccessLocalWrite}
		n := &node{qp: s[i].qp}
		connect(t, n, &node{qp: s[p].qp}, macs[p], ips[p], 0, 0, o)
	}
	s[1].mem.SetFaultRate(0.02, true, 3)
	const msgs = 200
	fill(s[0].mem.Bytes()[:msgs*1024], 5)
	for i := 0; i < msgs; i++ {
		if err := s[1].qp.PostRecv(ibrc.RecvWR{ID: uint64(i), SGL: []ibrc.SGE{{Addr: memBase + uint64(i)*2048, Length: 2048, LKey: s[1].mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var recvd []ibrc.WC
	done := make(chan struct{})
	wc := make([]ibrc.WC, 32)
	s[1].cq.SetNotify(func() {
		mu.Lock()
		defer mu.Unlock()
		for n := s[1].cq.Poll(wc); n > 0; n = s[1].cq.Poll(wc) {
			recvd = append(recvd, wc[:n]...)
		}
		if len(recvd) == msgs {
			close(done)
		}
	})
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < msgs; i += 2 {
				err := s[0].qp.PostSend(ibrc.SendWR{ID: uint64(i), Opcode: ibrc.WRSendImm, Imm: uint32(i),
					SGL: []ibrc.SGE{{Addr: memBase + uint64(i)*1024, Length: 1024 + uint32(i%3), LKey: s[0].mr.LKey()}}})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		mu.Lock()
		t.Fatalf("only %d of %d messages arrived; stats %+v", len(recvd), msgs, s[0].e.Stats())
	}
	mu.Lock()
	defer mu.Unlock()
	// Two goroutines posted concurrently: the order on the wire is the post
	// order, which the receive completions must reproduce exactly once.
	seen := map[uint32]bool{}
	for k, c := range recvd {
		if c.Status != ibrc.WCSuccess || seen[c.Imm] {
			t.Fatalf("completion %d: %+v (duplicate %v)", k, c, seen[c.Imm])
		}
		seen[c.Imm] = true
		i := int(c.Imm)
		got := s[1].mem.Bytes()[c.WRID*2048 : c.WRID*2048+uint64(c.ByteLen)]
		expectBytes(t, "live message", got, s[0].mem.Bytes()[i*1024:i*1024+1024+i%3])
	}
	if st := s[1].e.Stats(); st.RNRNakFault == 0 {
		t.Errorf("no RNR NAK for a fault: %+v", st)
	}
	_ = rocev2.UDPPort
}
