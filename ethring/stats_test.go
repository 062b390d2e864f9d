package ethring

import (
	"sync"
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestStatsSeeResolveEffects: a caller that sees an RX_RESOLVE counted in
// RxResolves must also see what it did. On a pair without the backup
// policy every RX_RESOLVE is ignored, so no snapshot may show more
// resolves than bad resolves. FuzzRxBackup waits on RxResolves and then
// reads RxBadResolves; when Stats loaded the two in the other order, a
// snapshot taken between the device's two increments showed the write
// handled but not ignored (CI, input bc7904041ca46362).
func TestStatsSeeResolveEffects(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 8)
	p := g.d.Pair(0)
	const writes = 2000000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range writes {
			p.WriteReg(hw.PairRxResolve, 0)
		}
	}()
	for {
		s := p.Stats()
		if s.RxResolves > s.RxBadResolves {
			t.Fatalf("snapshot shows %d RX_RESOLVE writes handled but only %d ignored, on a pair where every one is ignored",
				s.RxResolves, s.RxBadResolves)
		}
		if s.RxResolves == writes {
			break
		}
	}
	wg.Wait()
}
