package ibrc_test

import (
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rocev2"
)

// readRequests records the RDMA READ requests on the wire.
type readRequests struct {
	d    *rocev2.Decoder
	reqs []rocev2.Packet
}

func (r *readRequests) WriteFrame(_ time.Time, f []byte) error {
	if p, err := r.d.Decode(f); err == nil && p.BTH.Opcode == rocev2.OpReadRequest {
		r.reqs = append(r.reqs, *p)
	}
	return nil
}

// TestReadRetryStaysInTheRequest: a READ longer than the window is asked
// for in parts; when a response's target faults, the READ is asked again
// from that response on, but never past the PSNs the part it repeats
// asked for, with the VA and length of that rest: rdma_rxe's responder
// drops a repeated READ that reaches beyond the one it remembers (class
// D), and the requester then times out until its retries run out (MPI's
// 1 MiB gets from an rdma_rxe peer under odp=all failed so).
func TestReadRetryStaysInTheRequest(t *testing.T) {
	const (
		length = 512 << 10
		dst    = 1 << 20
		mtu    = 1024
	)
	rec := &readRequests{d: rocev2.NewDecoder()}
	w := newWorld(t, opts{capture: rec, timeout: 14, retry: 7, rnr: 7, pagerDelay: 100 * time.Microsecond})
	fill(w.b.at(0, length), 3)
	for _, off := range []uint64{40 << 10, 300 << 10, length - 4096} {
		w.a.mem.Evict(memBase+dst+off, 1)
	}
	w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRRead, Flags: ibrc.SendSignaled, SGL: w.a.sge(dst, length),
		RemoteAddr: memBase, RKey: w.b.mr.RKey()})
	w.run(time.Second, func() bool { return len(w.a.wcs) == 1 })
	if c := w.a.wcs[0]; c.Status != ibrc.WCSuccess {
		t.Fatalf("READ completed %+v", c)
	}
	expectBytes(t, "READ", w.a.at(dst, length), w.b.at(0, length))
	if st := w.a.e.Stats(); st.RequesterFaults == 0 || st.Timeouts != 0 {
		t.Fatalf("%d faults, %d timeouts: want faults and no timeout", st.RequesterFaults, st.Timeouts)
	}
	first := rec.reqs[0].BTH.PSN
	high := first // the next PSN no request asked for yet
	repeats := 0
	for _, p := range rec.reqs {
		k := (p.RETH.DMALength + mtu - 1) / mtu
		off := uint64(p.BTH.PSN-first) * mtu
		if p.RETH.VA != memBase+off {
			t.Fatalf("READ request at PSN +%d asks for VA %#x, want %#x", p.BTH.PSN-first, p.RETH.VA, memBase+off)
		}
		end := p.BTH.PSN + k
		if int32(p.BTH.PSN-high) < 0 {
			repeats++
			if int32(end-high) > 0 {
				t.Fatalf("READ asked again at PSN +%d for %d packets, past +%d, the PSNs asked for so far", p.BTH.PSN-first, k, high-first)
			}
			continue
		}
		high = end
	}
	if repeats == 0 {
		t.Fatal("no READ was asked again")
	}
}
