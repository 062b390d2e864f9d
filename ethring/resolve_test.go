package ethring

import (
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestResolveValidation drives resolve_rNPFs with the backup state set up
// directly (head, tail, head_offset, bm_index and the bitmap as Figure 6's
// RX path leaves them) and checks which RX_RESOLVE writes are applied.
// Issue 10 finding 4: an offset at or beyond BM_SIZE aliased onto the bit
// of a pending rNPF, and an rNPF beyond RX_TAIL moved head past the tail.
func TestResolveValidation(t *testing.T) {
	type step struct {
		bit      uint32
		ok       bool
		wantHead uint32
		postTail uint32 // if nonzero: the driver then moves RX_TAIL here
	}
	for _, tc := range []struct {
		name       string
		bmSize     uint32
		bmIndex    uint32
		head, tail uint32
		headOffset uint32
		pending    []uint32 // offsets from bm_index with an rNPF
		steps      []step
	}{
		{"offset at bm_size aliases a pending bit", 1, 0, 0, 8, 4, []uint32{0},
			[]step{{bit: 3}, {bit: 1}, {bit: 0, ok: true, wantHead: 4}}},
		{"offset beyond bm_size within head_offset", 4, 10, 0, 8, 6, []uint32{0, 2},
			[]step{{bit: 14}, {bit: 15}, {bit: 12, ok: true}, {bit: 10, ok: true, wantHead: 6}}},
		{"offset half the index space away", 4, 0, 0, 8, 2, []uint32{0},
			[]step{{bit: 1 << 31}, {bit: ^uint32(0)}, {bit: 0, ok: true, wantHead: 2}}},
		{"offset beyond head_offset", 4, 0, 0, 8, 2, []uint32{0},
			[]step{{bit: 2}, {bit: 3}}},
		{"already resolved", 4, 0, 0, 8, 2, []uint32{0, 1},
			[]step{{bit: 1, ok: true}, {bit: 1}, {bit: 0, ok: true, wantHead: 2}, {bit: 0}}},
		{"rNPF beyond the tail waits for the tail", 4, 0, 0, 2, 3, []uint32{0, 2},
			[]step{{bit: 2}, {bit: 0, ok: true, wantHead: 2, postTail: 4}, {bit: 2, ok: true, wantHead: 3}}},
		{"rNPF at the tail", 4, 0, 6, 8, 3, []uint32{2},
			[]step{{bit: 2}, {bit: 2, postTail: 9}, {bit: 2, ok: true, wantHead: 9}}},
		{"bm_index wraps", 2, ^uint32(0), 5, 10, 2, []uint32{0, 1},
			[]step{{bit: 0, ok: true, wantHead: 5}, {bit: ^uint32(0), ok: true, wantHead: 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 1})
			g.qpReg(0, hw.PairRxPolicy, hw.RxPolicyBackup)
			g.qpReg(0, hw.PairBmSize, tc.bmSize)
			g.setupPair(0, 16, 16)
			in := g.inlinePair(0)
			in.latchFaults(hw.RxPolicyBackup, 0, tc.bmSize)
			p := g.d.Pair(0)
			p.rxMu.Lock()
			in.rx.head.Store(tc.head)
			in.rx.tail.Store(tc.tail)
			in.headOffset, in.bmIndex = tc.headOffset, tc.bmIndex
			for _, off := range tc.pending {
				in.bitmap[(tc.bmIndex+off)%tc.bmSize] = true
			}
			p.rxMu.Unlock()
			head := tc.head
			for i, s := range tc.steps {
				p.rxMu.Lock()
				err := in.resolve(s.bit)
				p.rxMu.Unlock()
				if (err == nil) != s.ok {
					t.Fatalf("step %d: RX_RESOLVE %d: err %v, want applied=%v", i, s.bit, err, s.ok)
				}
				if s.wantHead != 0 {
					head = s.wantHead
				}
				if got := in.rx.head.Load(); got != head {
					t.Fatalf("step %d: rx_head %d, want %d", i, got, head)
				}
				if int32(in.rx.tail.Load()-in.rx.head.Load()) < 0 {
					t.Fatalf("step %d: rx_head %d passed rx_tail %d", i, in.rx.head.Load(), in.rx.tail.Load())
				}
				if s.postTail != 0 {
					p.doorbell(false, s.postTail)
					if e := in.err.Load(); e != 0 {
						t.Fatalf("step %d: RX_TAIL %d failed the queue: error %d", i, s.postTail, e>>32)
					}
				}
			}
		})
	}
}
