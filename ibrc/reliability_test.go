package ibrc_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
)

// workload posts n messages A->B mixing SEND, SEND with immediate, RDMA
// WRITE with immediate and RDMA READ, of random sizes up to 3.5 MTUs, and
// checks on completion that every message arrived exactly once, in order,
// intact.
type workload struct {
	w     *world
	n     int
	sizes []int
	ops   []ibrc.WROpcode
}

const slot = 4096

func newWorkload(w *world, n int, seed uint64) *workload {
	r := rand.New(rand.NewPCG(seed, 1))
	wl := &workload{w: w, n: n}
	ops := []ibrc.WROpcode{ibrc.WRSend, ibrc.WRSendImm, ibrc.WRWriteImm, ibrc.WRRead}
	for i := 0; i < n; i++ {
		sz := r.IntN(3584 + 1)
		if r.IntN(8) == 0 {
			sz = 0
		}
		wl.sizes = append(wl.sizes, sz)
		wl.ops = append(wl.ops, ops[r.IntN(len(ops))])
	}
	return wl
}

// Regions (offsets in each node's memory): A sources at [0, n*slot), B
// receive buffers and WRITE targets at [1 MiB, ...), B READ sources at
// [2 MiB, ...), A READ destinations at [2 MiB, ...).
func (wl *workload) post(t *testing.T) {
	a, b := wl.w.a, wl.w.b
	for i := 0; i < wl.n; i++ {
		off := uint64(i * slot)
		fill(a.at(off, slot), uint64(i)+1000)
		fill(b.at(2<<20+off, slot), uint64(i)+5000)
		if wl.ops[i] != ibrc.WRRead {
			if err := b.qp.PostRecv(ibrc.RecvWR{ID: uint64(i), SGL: b.sge(1<<20+off, slot)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < wl.n; i++ {
		off := uint64(i * slot)
		wr := ibrc.SendWR{ID: uint64(i), Opcode: wl.ops[i], Flags: ibrc.SendSignaled, Imm: uint32(i)}
		switch wl.ops[i] {
		case ibrc.WRRead:
			wr.SGL = a.sge(2<<20+off, wl.sizes[i])
			wr.RemoteAddr, wr.RKey = memBase+2<<20+off, b.mr.RKey()
		case ibrc.WRWriteImm:
			wr.SGL = a.sge(off, wl.sizes[i])
			wr.RemoteAddr, wr.RKey = memBase+1<<20+off, b.mr.RKey()
		default:
			// Two SGEs, to exercise gathering across them.
			h := wl.sizes[i] / 3
			wr.SGL = append(a.sge(off, h), a.sge(off+uint64(h), wl.sizes[i]-h)...)
		}
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
}

func (wl *workload) nRecv() int {
	k := 0
	for _, op := range wl.ops {
		if op != ibrc.WRRead {
			k++
		}
	}
	return k
}

func (wl *workload) done() bool {
	return len(wl.w.a.wcs) >= wl.n && len(wl.w.b.rwcs) >= wl.nRecv()
}

func (wl *workload) check(t *testing.T) {
	t.Helper()
	a, b := wl.w.a, wl.w.b
	if len(a.wcs) != wl.n || len(b.rwcs) != wl.nRecv() {
		t.Fatalf("%d send and %d receive completions, want %d and %d", len(a.wcs), len(b.rwcs), wl.n, wl.nRecv())
	}
	k := 0
	for i := 0; i < wl.n; i++ {
		c := a.wcs[i]
		if c.WRID != uint64(i) || c.Status != ibrc.WCSuccess {
			t.Fatalf("send completion %d out of order or failed: %+v", i, c)
		}
		off := uint64(i * slot)
		sz := wl.sizes[i]
		switch wl.ops[i] {
		case ibrc.WRRead:
			expectBytes(t, fmt.Sprintf("READ %d", i), a.at(2<<20+off, sz), b.at(2<<20+off, sz))
			continue
		default:
			expectBytes(t, fmt.Sprintf("%v %d", wl.ops[i], i), b.at(1<<20+off, sz), a.at(off, sz))
		}
		r := b.rwcs[k]
		k++
		if r.WRID != uint64(i) || r.Status != ibrc.WCSuccess || int(r.ByteLen) != sz {
			t.Fatalf("receive completion for message %d out of order, duplicated or wrong: %+v", i, r)
		}
		hasImm := wl.ops[i] != ibrc.WRSend
		if hasImm != (r.Flags&ibrc.WCWithImm != 0) || hasImm && r.Imm != uint32(i) {
			t.Fatalf("receive completion %d immediate: %+v", i, r)
		}
	}
}

// TestImpairedLink runs the mixed workload over links that lose, duplicate
// and reorder frames in both directions and over receive buffers that
// fault, and checks exactly-once in-order intact delivery plus that the
// recovery paths actually ran.
func TestImpairedLink(t *testing.T) {
	type want struct{ timeouts, seqNaks, rnrFault, dups, reqFaults bool }
	cases := []struct {
		name           string
		link           ibrctest.LinkConfig
		faultB, faultA float64
		policy         ibrc.FaultPolicy
		psnA           uint32
		want           want
	}{
		{name: "loss", link: ibrctest.LinkConfig{Loss: 0.03, Seed: 1}, want: want{seqNaks: true, dups: true}},
		{name: "duplication", link: ibrctest.LinkConfig{Dup: 0.05, Seed: 2}, want: want{dups: true}},
		{name: "reordering", link: ibrctest.LinkConfig{Reorder: 0.05, Seed: 3}, want: want{seqNaks: true, dups: true}},
		{name: "all", link: ibrctest.LinkConfig{Loss: 0.02, Dup: 0.02, Reorder: 0.02, Seed: 4}, want: want{seqNaks: true, dups: true}},
		{name: "receive-faults-rnr", faultB: 0.05, want: want{rnrFault: true}},
		{name: "receive-faults-drop", faultB: 0.02, policy: ibrc.FaultDrop, want: want{timeouts: true}},
		{name: "all-faults-and-loss", link: ibrctest.LinkConfig{Loss: 0.01, Dup: 0.01, Reorder: 0.01, Seed: 5},
			faultA: 0.02, faultB: 0.03, want: want{timeouts: true, rnrFault: true, reqFaults: true}},
		{name: "psn-wrap", link: ibrctest.LinkConfig{Loss: 0.02, Seed: 6}, faultB: 0.02, psnA: 1<<24 - 300,
			want: want{timeouts: true, rnrFault: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, opts{link: tc.link, policy: tc.policy, retry: 7, rnr: 7, minRNR: 3, psnA: tc.psnA, maxUnacked: 64})
			wl := newWorkload(w, 240, 42)
			wl.post(t)
			if tc.faultB > 0 {
				w.b.mem.SetFaultRate(tc.faultB, false, 11)
			}
			if tc.faultA > 0 {
				w.a.mem.SetFaultRate(tc.faultA, false, 12)
			}
			w.run(60*time.Second, wl.done)
			w.settle(50 * time.Millisecond) // late duplicates must not produce more completions
			wl.check(t)
			sa, sb := w.a.e.Stats(), w.b.e.Stats()
			t.Logf("requester %+v", sa)
			t.Logf("responder %+v", sb)
			if tc.want.timeouts && sa.Timeouts == 0 {
				t.Errorf("timeouts %d, want some: %v", sa.Timeouts, tc.want.timeouts)
			}
			if tc.want.seqNaks && sb.SeqNakSent == 0 {
				t.Errorf("no PSN sequence error NAK sent")
			}
			if tc.want.rnrFault != (sb.RNRNakFault > 0) {
				t.Errorf("RNR NAKs for faults %d, want some: %v", sb.RNRNakFault, tc.want.rnrFault)
			}
			if tc.want.rnrFault && sa.RNRNakReceived == 0 {
				t.Errorf("requester saw no RNR NAK")
			}
			if tc.want.dups && sb.DupRequests == 0 {
				t.Errorf("no duplicate request seen")
			}
			if tc.want.reqFaults && sa.RequesterFaults == 0 {
				t.Errorf("no requester-side fault")
			}
			if tc.policy == ibrc.FaultDrop && (sb.FaultDrops == 0 || sb.RNRNakFault != 0) {
				t.Errorf("drop policy: %d drops, %d RNR NAKs", sb.FaultDrops, sb.RNRNakFault)
			}
			if tc.link.Loss+tc.link.Reorder > 0 || tc.faultB > 0 {
				if sa.Retransmits == 0 {
					t.Errorf("no retransmission")
				}
			}
			sent, _ := w.a.qp.PSNs()
			_, expect := w.b.qp.PSNs()
			if sent != expect {
				t.Errorf("requester next PSN %#x, responder expects %#x", sent, expect)
			}
			if tc.psnA != 0 && sent >= tc.psnA {
				t.Errorf("PSN did not wrap: started at %#x, now %#x", tc.psnA, sent)
			}
		})
	}
}
