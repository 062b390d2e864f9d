package rdma_test

import (
	"encoding/binary"
	"testing"

	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/rdma"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// statsOf is what QUERY_STATS must report for each counter, from the
// engine's Stats (whose RC part starts over at RESET with the transport).
var statsOf = map[string]func(s rdma.Stats) uint64{
	"rx_frames":           func(s rdma.Stats) uint64 { return s.RC.RxFrames },
	"tx_frames":           func(s rdma.Stats) uint64 { return s.RC.TxFrames },
	"messages_in":         func(s rdma.Stats) uint64 { return s.RC.MessagesIn },
	"retransmits":         func(s rdma.Stats) uint64 { return s.RC.Retransmits },
	"ack_timeouts":        func(s rdma.Stats) uint64 { return s.RC.Timeouts },
	"rnr_naks_rcvd":       func(s rdma.Stats) uint64 { return s.RC.RNRNakReceived },
	"rnr_naks_no_wqe":     func(s rdma.Stats) uint64 { return s.RC.RNRNakNoWQE },
	"rnr_naks_fault":      func(s rdma.Stats) uint64 { return s.RC.RNRNakFault },
	"fault_drops":         func(s rdma.Stats) uint64 { return s.RC.FaultDrops },
	"responder_faults":    func(s rdma.Stats) uint64 { return s.RC.ResponderFaults },
	"requester_faults":    func(s rdma.Stats) uint64 { return s.RC.RequesterFaults },
	"read_retries":        func(s rdma.Stats) uint64 { return s.RC.ReadRetries },
	"page_requests":       func(s rdma.Stats) uint64 { return s.RC.PageRequests },
	"page_request_errors": func(s rdma.Stats) uint64 { return s.RC.PageRequestErrors },
	"seq_naks_sent":       func(s rdma.Stats) uint64 { return s.RC.SeqNakSent },
	"err_naks_sent":       func(s rdma.Stats) uint64 { return s.RC.ErrNakSent },
	"bad_wqes":            func(s rdma.Stats) uint64 { return s.BadWQEs },
	"late_refused":        func(s rdma.Stats) uint64 { return s.LateRefused },
	"tx_dropped":          func(s rdma.Stats) uint64 { return s.RC.TxDropped },
}

// queryStats runs QUERY_STATS with buf and count; it returns the status.
func (n *node) queryStats(t *testing.T, handle uint32, buf uint64, count uint32) uint32 {
	t.Helper()
	c := rdmatest.NewCmd(hw.RDMACmdQueryStats, handle)
	hw.RDMAQueryStatsBuf.Put(c[:], buf)
	hw.RDMAQueryStatsCount.Put(c[:], count)
	st, _, err := n.d.Run(c)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestQueryStats: QUERY_STATS writes the counters in hw.RDMACounters'
// order, as the engine counts them (after a SEND with a receive fault and
// a malformed receive entry, so most are not zero); a count below the
// number writes only that many, one above it the number; the counters
// start over at RDMA_CTRL RESET; a bad buffer or a handle other than 0
// fails the command without writing.
func TestQueryStats(t *testing.T) {
	a, b := pair(t, 3)
	// A SEND whose buffer faults (the engine without PRI retries it) and
	// a SEND that meets a malformed receive entry.
	page := b.as.Unmap(bufVA + 0x40000)
	b.x.Flush()
	b.postRecv(t, b.rq, rdmatest.Recv{ID: 3, SGL: []rdmatest.SGE{{Addr: bufVA + 0x40000, Length: 4096, LKey: mrKey}}})
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: 3000, LKey: mrKey}}})
	waitFor(t, "a receive fault", func() bool { return b.e.Stats().RC.RNRNakFault > 0 })
	b.as.SetLeaf(bufVA+0x40000, page)
	poll(t, a.scq, 1)
	poll(t, b.rcq, 1)
	b.rq.Produce(func(s []byte) {
		rdmatest.Recv{ID: 4}.Encode(s)
		hw.RxeRecvNumSGE.Put(s, 0xffff_ffff)
	})
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 2, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: 10, LKey: mrKey}}})
	poll(t, a.scq, 1)
	poll(t, b.rcq, 1)

	n := uint32(len(hw.RDMACounters))
	buf := b.g.Alloc(8*int(n)+64, 8)
	sentinel := func() {
		for i := range 8*int(n) + 64 {
			b.g.Bytes(buf+uint64(i), 1)[0] = 0xa5
		}
	}
	read := func(k int) []uint64 {
		v := make([]uint64, k)
		for i := range v {
			v[i] = binary.LittleEndian.Uint64(b.g.Bytes(buf+uint64(8*i), 8))
		}
		return v
	}
	untouched := func(from int) bool {
		for _, x := range b.g.Bytes(buf+uint64(from), 8*int(n)+64-from) {
			if x != 0xa5 {
				return false
			}
		}
		return true
	}
	check := func(when string) {
		t.Helper()
		sentinel()
		if st := b.queryStats(t, 0, buf, n+5); st != hw.RDMACmdOK {
			t.Fatalf("%s: status %d", when, st)
		}
		s := b.e.Stats()
		for i, v := range read(int(n)) {
			name := hw.RDMACounters[i].Name
			if want := statsOf[name](s); v != want {
				t.Errorf("%s: %s = %d, want %d", when, name, v, want)
			}
		}
		if !untouched(8 * int(n)) {
			t.Fatalf("%s: written past the counters", when)
		}
	}
	check("after traffic")
	v := read(int(n))
	nonzero := 0
	for _, x := range v {
		if x != 0 {
			nonzero++
		}
	}
	if s := b.e.Stats(); s.BadWQEs != 1 || s.RC.RNRNakFault == 0 || s.RC.MessagesIn != 1 || nonzero < 6 {
		t.Fatalf("traffic left %d bad WQEs, %d fault RNR NAKs, %d messages; %d counters not zero", s.BadWQEs, s.RC.RNRNakFault, s.RC.MessagesIn, nonzero)
	}

	sentinel()
	if st := b.queryStats(t, 0, buf, 3); st != hw.RDMACmdOK || !untouched(24) || read(3)[0] != v[0] {
		t.Fatalf("count 3: status %d, %v", st, read(3))
	}

	for _, tc := range []struct {
		name   string
		handle uint32
		buf    uint64
		count  uint32
		want   uint32
	}{
		{"misaligned", 0, buf + 4, n, hw.RDMACmdErrParam},
		{"outside guest memory", 0, 0x10, n, hw.RDMACmdErrParam},
		{"wraps", 0, ^uint64(7), 2, hw.RDMACmdErrParam},
		{"far outside", 0, atstest.DefaultBase + 1<<40, n, hw.RDMACmdErrParam},
		{"handle", 1, buf, n, hw.RDMACmdErrHandle},
		{"count 0, no buffer", 0, 0x10, 0, hw.RDMACmdOK},
	} {
		sentinel()
		if st := b.queryStats(t, tc.handle, tc.buf, tc.count); st != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, st, tc.want)
		}
		if !untouched(0) {
			t.Errorf("%s: the buffer was written", tc.name)
		}
	}

	// A buffer that runs past the end of guest RAM is not written at all.
	end := uint64(atstest.DefaultBase + 32<<20 - 8)
	copy(b.g.Bytes(end, 8), "unwritten")
	if st := b.queryStats(t, 0, end, n); st != hw.RDMACmdErrParam || string(b.g.Bytes(end, 8)) != "unwritte" {
		t.Errorf("partly outside: status %d, last bytes of RAM %q", st, b.g.Bytes(end, 8))
	}

	if err := b.d.Reset(); err != nil {
		t.Fatal(err)
	}
	b.d.Enable()
	sentinel()
	if st := b.queryStats(t, 0, buf, n); st != hw.RDMACmdOK {
		t.Fatalf("after RESET: status %d", st)
	}
	for i, x := range read(int(n)) {
		if x != 0 {
			t.Errorf("after RESET: %s = %d", hw.RDMACounters[i].Name, x)
		}
	}
}
