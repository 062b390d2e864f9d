package ibrc_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
)

// TestSendSegmentation sends messages around the MTU boundaries, with and
// without immediate data, and checks contents, lengths and completions.
func TestSendSegmentation(t *testing.T) {
	sizes := []int{0, 1, 3, 1023, 1024, 1025, 2048, 10*1024 + 3}
	for _, imm := range []bool{false, true} {
		t.Run(fmt.Sprintf("imm=%v", imm), func(t *testing.T) {
			w := newWorld(t, opts{})
			for i, sz := range sizes {
				off := uint64(i) * 16384
				fill(w.a.at(off, sz), uint64(i))
				if err := w.b.qp.PostRecv(ibrc.RecvWR{ID: uint64(i), SGL: w.b.sge(off, 16384)}); err != nil {
					t.Fatal(err)
				}
				wr := ibrc.SendWR{ID: uint64(100 + i), Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(off, sz)}
				if imm {
					wr.Opcode, wr.Imm = ibrc.WRSendImm, 0xdead0000|uint32(i)
				}
				if err := w.a.qp.PostSend(wr); err != nil {
					t.Fatal(err)
				}
			}
			w.run(time.Second, func() bool { return len(w.a.wcs) == len(sizes) && len(w.b.rwcs) == len(sizes) })
			for i, sz := range sizes {
				s, r := w.a.wcs[i], w.b.rwcs[i]
				if s.Status != ibrc.WCSuccess || s.WRID != uint64(100+i) || s.Opcode != ibrc.WCSend || s.ByteLen != uint32(sz) {
					t.Fatalf("send completion %d: %+v", i, s)
				}
				if r.Status != ibrc.WCSuccess || r.WRID != uint64(i) || r.Opcode != ibrc.WCRecv || r.ByteLen != uint32(sz) {
					t.Fatalf("recv completion %d: %+v", i, r)
				}
				if imm != (r.Flags&ibrc.WCWithImm != 0) || imm && r.Imm != 0xdead0000|uint32(i) {
					t.Fatalf("recv completion %d immediate: %+v", i, r)
				}
				off := uint64(i) * 16384
				expectBytes(t, fmt.Sprintf("message %d", i), w.b.at(off, sz), w.a.at(off, sz))
			}
			st := w.a.e.Stats()
			// 0,1,3,1023,1024 bytes: 1 packet each; 1025, 2048: 2; 10243: 11.
			if st.DataPackets != 5+2+2+11 || st.Retransmits != 0 {
				t.Fatalf("data packets %d retransmits %d, want 20 and 0", st.DataPackets, st.Retransmits)
			}
			// ACKs are coalesced: one per message (AckReq on its last
			// packet) plus one per 16 PSNs inside long messages.
			if acks := w.b.e.Stats().Acks; acks < uint64(len(sizes)) || acks > uint64(len(sizes))+2 {
				t.Fatalf("%d ACKs for %d messages in 20 packets", acks, len(sizes))
			}
		})
	}
}

// TestWriteAndRead checks RDMA WRITE (with and without immediate) and RDMA
// READ, including multi-packet READ response reassembly and a zero-length
// READ.
func TestWriteAndRead(t *testing.T) {
	w := newWorld(t, opts{})
	const sz = 5*1024 + 17
	fill(w.a.at(0, sz), 1)
	fill(w.b.at(1<<20, sz), 2)
	rkeyB := w.b.mr.RKey()
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 9, SGL: nil})
	posts := []ibrc.SendWR{
		{ID: 1, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, sz), RemoteAddr: memBase + 65536, RKey: rkeyB},
		{ID: 2, Opcode: ibrc.WRWriteImm, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 100), RemoteAddr: memBase + 200000, RKey: rkeyB, Imm: 77},
		{ID: 3, Opcode: ibrc.WRRead, Flags: ibrc.SendSignaled, SGL: w.a.sge(2<<20, sz), RemoteAddr: memBase + 1<<20, RKey: rkeyB},
		{ID: 4, Opcode: ibrc.WRRead, Flags: ibrc.SendSignaled, RemoteAddr: memBase, RKey: rkeyB},
	}
	for _, p := range posts {
		if err := w.a.qp.PostSend(p); err != nil {
			t.Fatal(err)
		}
	}
	w.run(time.Second, func() bool { return len(w.a.wcs) == 4 && len(w.b.rwcs) == 1 })
	wantOp := []ibrc.WCOpcode{ibrc.WCRDMAWrite, ibrc.WCRDMAWrite, ibrc.WCRDMARead, ibrc.WCRDMARead}
	for i, c := range w.a.wcs {
		if c.Status != ibrc.WCSuccess || c.WRID != uint64(i+1) || c.Opcode != wantOp[i] {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	expectBytes(t, "RDMA WRITE", w.b.at(65536, sz), w.a.at(0, sz))
	expectBytes(t, "RDMA WRITE with immediate", w.b.at(200000, 100), w.a.at(0, 100))
	expectBytes(t, "RDMA READ", w.a.at(2<<20, sz), w.b.at(1<<20, sz))
	r := w.b.rwcs[0]
	if r.Opcode != ibrc.WCRecvRDMAImm || r.Imm != 77 || r.WRID != 9 || r.ByteLen != 100 {
		t.Fatalf("write-with-immediate receive completion: %+v", r)
	}
}

// TestRNRNoReceiveWQE: a SEND before any receive is posted is RNR NAKed and
// retried after the RNR timer until the receive appears.
func TestRNRNoReceiveWQE(t *testing.T) {
	w := newWorld(t, opts{minRNR: 14, rnr: 7}) // 1.28 ms
	fill(w.a.at(0, 3000), 3)
	w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 3000)})
	w.settle(5 * time.Millisecond)
	if len(w.a.wcs) != 0 {
		t.Fatalf("completed without a receive: %+v", w.a.wcs)
	}
	nak := w.b.e.Stats().RNRNakNoWQE
	if nak < 3 || nak > 5 {
		t.Fatalf("%d RNR NAKs in 5 ms at 1.28 ms, want 3-5", nak)
	}
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 2, SGL: w.b.sge(0, 4096)})
	w.run(10*time.Millisecond, func() bool { return len(w.a.wcs) == 1 && len(w.b.rwcs) == 1 })
	if w.a.wcs[0].Status != ibrc.WCSuccess {
		t.Fatalf("%+v", w.a.wcs[0])
	}
	expectBytes(t, "after RNR", w.b.at(0, 3000), w.a.at(0, 3000))
	if got := w.a.e.Stats().RNRNakReceived; got != nak {
		t.Fatalf("requester saw %d RNR NAKs, responder sent %d", got, nak)
	}
}

// TestRNRRetryExceeded: rnr_retry RNR NAKs in a row end the WQE with
// RNR_RETRY_EXC_ERR and flush the rest.
func TestRNRRetryExceeded(t *testing.T) {
	w := newWorld(t, opts{minRNR: 1, rnr: 3})
	w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, SGL: w.a.sge(0, 10)})
	w.a.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRSend, SGL: w.a.sge(0, 10)})
	w.run(time.Second, func() bool { return len(w.a.wcs) == 2 })
	if w.a.wcs[0].Status != ibrc.WCRNRRetryExcErr || w.a.wcs[1].Status != ibrc.WCWRFlushErr {
		t.Fatalf("completions %+v", w.a.wcs)
	}
	if n := w.b.e.Stats().RNRNakNoWQE; n != 4 {
		t.Fatalf("%d RNR NAKs, want 1 + rnr_retry(3)", n)
	}
	if s := w.a.qp.Query().State; s != ibrc.StateErr {
		t.Fatalf("QP state %v after RNR retry exhaustion", s)
	}
	// Work posted in ERR is flushed at once.
	w.a.qp.PostSend(ibrc.SendWR{ID: 3, Opcode: ibrc.WRSend})
	w.a.poll()
	if len(w.a.wcs) != 3 || w.a.wcs[2].Status != ibrc.WCWRFlushErr || w.a.wcs[2].WRID != 3 {
		t.Fatalf("post in ERR: %+v", w.a.wcs)
	}
}

// TestRNRRetryInfinite: rnr_retry = 7 retries for as long as it takes,
// here across a 655.36 ms timer (timer code 0) that costs no wall time.
func TestRNRRetryInfinite(t *testing.T) {
	w := newWorld(t, opts{minRNR: 0, rnr: 7})
	w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 10)})
	w.settle(5 * time.Second)
	if len(w.a.wcs) != 0 {
		t.Fatalf("%+v", w.a.wcs)
	}
	if n := w.b.e.Stats().RNRNakNoWQE; n < 8 || n > 9 {
		t.Fatalf("%d RNR NAKs in 5 s at 655.36 ms, want 8-9", n)
	}
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: w.b.sge(0, 64)})
	w.run(time.Second, func() bool { return len(w.a.wcs) == 1 })
	if w.a.wcs[0].Status != ibrc.WCSuccess {
		t.Fatalf("%+v", w.a.wcs)
	}
}

// TestRetryExceeded: with every frame from A lost, the local ACK timer
// fires retry_cnt+1 times and the WQE completes with RETRY_EXC_ERR.
func TestRetryExceeded(t *testing.T) {
	for _, retry := range []uint8{0, 3, 7} {
		t.Run(fmt.Sprint("retry_cnt=", retry), func(t *testing.T) {
			w := newWorld(t, opts{retry: retry, timeout: 10, link: ibrctest.LinkConfig{
				Filter: func(side int, n uint64, f []byte) ibrctest.Action {
					if side == 0 {
						return ibrctest.Drop
					}
					return ibrctest.Deliver
				}}})
			w.b.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: w.b.sge(0, 64)})
			w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 10)})
			w.a.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRRead, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 10), RemoteAddr: memBase, RKey: w.b.mr.RKey()})
			start := w.clk.Elapsed()
			w.run(10*time.Second, func() bool { return len(w.a.wcs) == 2 })
			if w.a.wcs[0].Status != ibrc.WCRetryExcErr || w.a.wcs[1].Status != ibrc.WCWRFlushErr {
				t.Fatalf("%+v", w.a.wcs)
			}
			st := w.a.e.Stats()
			if st.Timeouts != uint64(retry) {
				t.Fatalf("%d timeouts retransmitted, want %d", st.Timeouts, retry)
			}
			// Each attempt waits 4.096 µs × 2^10 = 4.19 ms.
			want := time.Duration(retry+1) * 4194304 * time.Nanosecond
			if el := w.clk.Elapsed() - start; el < want || el > want+time.Millisecond {
				t.Fatalf("gave up after %v, want about %v", el, want)
			}
		})
	}
}

// TestInline sends SENDs and an RDMA WRITE with immediate whose payload is
// carried in the WR (SendInline), across the MTU, and checks that PostSend
// copied the payload and refuses what inline can not be.
func TestInline(t *testing.T) {
	w := newWorld(t, opts{})
	sizes := []int{0, 1, 100, 1024, 2048}
	var want [][]byte
	for i, sz := range sizes {
		data := make([]byte, sz)
		fill(data, uint64(40+i))
		want = append(want, append([]byte(nil), data...))
		if err := w.b.qp.PostRecv(ibrc.RecvWR{ID: uint64(i), SGL: w.b.sge(uint64(i)*4096, 4096)}); err != nil {
			t.Fatal(err)
		}
		if err := w.a.qp.PostSend(ibrc.SendWR{ID: uint64(100 + i), Opcode: ibrc.WRSend,
			Flags: ibrc.SendSignaled | ibrc.SendInline, Inline: data}); err != nil {
			t.Fatal(err)
		}
		for j := range data {
			data[j] ^= 0xff // the WR owns a copy
		}
	}
	wdata := []byte("written inline")
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 99})
	if err := w.a.qp.PostSend(ibrc.SendWR{ID: 200, Opcode: ibrc.WRWriteImm, Flags: ibrc.SendSignaled | ibrc.SendInline,
		Inline: wdata, RemoteAddr: memBase + 1<<20, RKey: w.b.mr.RKey(), Imm: 5}); err != nil {
		t.Fatal(err)
	}
	w.run(time.Second, func() bool { return len(w.a.wcs) == len(sizes)+1 && len(w.b.rwcs) == len(sizes)+1 })
	for i, sz := range sizes {
		s, r := w.a.wcs[i], w.b.rwcs[i]
		if s.Status != ibrc.WCSuccess || s.WRID != uint64(100+i) || r.Status != ibrc.WCSuccess || r.ByteLen != uint32(sz) {
			t.Fatalf("message %d: send %+v recv %+v", i, s, r)
		}
		expectBytes(t, fmt.Sprintf("inline message %d", i), w.b.at(uint64(i)*4096, sz), want[i])
	}
	if s, r := w.a.wcs[len(sizes)], w.b.rwcs[len(sizes)]; s.Status != ibrc.WCSuccess || r.Opcode != ibrc.WCRecvRDMAImm || r.Imm != 5 {
		t.Fatalf("inline write: send %+v recv %+v", s, r)
	}
	expectBytes(t, "inline write", w.b.at(1<<20, len(wdata)), wdata)

	for _, bad := range []ibrc.SendWR{
		{Opcode: ibrc.WRRead, Flags: ibrc.SendInline, RemoteAddr: memBase, RKey: w.b.mr.RKey()},
		{Opcode: ibrc.WRSend, Flags: ibrc.SendInline, Inline: make([]byte, 2049)},
		{Opcode: ibrc.WRSend, Flags: ibrc.SendInline, Inline: []byte{1}, SGL: w.a.sge(0, 1)},
		{Opcode: ibrc.WRSend, Inline: []byte{1}},
	} {
		if err := w.a.qp.PostSend(bad); !errors.Is(err, ibrc.ErrInvalidArg) {
			t.Errorf("PostSend(%+v) = %v, want ErrInvalidArg", bad, err)
		}
	}
}

// TestInlineRetransmit: a lost packet of an inline SEND is sent again from
// the WR's own copy of the payload.
func TestInlineRetransmit(t *testing.T) {
	dropped := 0
	w := newWorld(t, opts{retry: 3, link: linkDropFirst(func(f []byte) bool {
		dropped++
		return dropped == 2 // the second packet of the message
	})})
	data := make([]byte, 2000)
	fill(data, 9)
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: w.b.sge(0, 4096)})
	if err := w.a.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled | ibrc.SendInline, Inline: data}); err != nil {
		t.Fatal(err)
	}
	w.run(time.Second, func() bool { return len(w.a.wcs) == 1 && len(w.b.rwcs) == 1 })
	if w.a.wcs[0].Status != ibrc.WCSuccess || w.b.rwcs[0].ByteLen != 2000 || w.a.e.Stats().Retransmits == 0 {
		t.Fatalf("send %+v recv %+v retransmits %d", w.a.wcs[0], w.b.rwcs[0], w.a.e.Stats().Retransmits)
	}
	expectBytes(t, "retransmitted inline message", w.b.at(0, 2000), data)
}

// TestSendsCompleted counts unsignaled WRs with the signaled ones, and
// flushed ones, so a send queue's consumer can free every completed slot.
func TestSendsCompleted(t *testing.T) {
	w := newWorld(t, opts{})
	for i := range 4 {
		w.b.qp.PostRecv(ibrc.RecvWR{ID: uint64(i), SGL: w.b.sge(uint64(i)*4096, 4096)})
	}
	for i := range 3 {
		if err := w.a.qp.PostSend(ibrc.SendWR{ID: uint64(i), Opcode: ibrc.WRSend, SGL: w.a.sge(0, 100)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := w.a.qp.SendsCompleted(); n != 0 {
		t.Fatalf("%d completed before the wire ran", n)
	}
	w.run(time.Second, func() bool { return w.a.qp.SendsCompleted() == 3 })
	if len(w.a.wcs) != 0 {
		t.Fatalf("unsignaled sends produced completions: %+v", w.a.wcs)
	}
	w.a.qp.PostSend(ibrc.SendWR{ID: 3, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 100)})
	w.run(time.Second, func() bool { return len(w.a.wcs) == 1 })
	if n := w.a.qp.SendsCompleted(); n != 4 {
		t.Fatalf("%d completed after 4 sends", n)
	}
	// Into the error state: queued WRs flush, and later posts complete at once.
	for i := range 2 {
		w.a.qp.PostSend(ibrc.SendWR{ID: uint64(10 + i), Opcode: ibrc.WRSend, SGL: w.a.sge(0, 100)})
	}
	if err := w.a.qp.ModifyQP(&ibrc.QPAttr{State: ibrc.StateErr}, ibrc.AttrState); err != nil {
		t.Fatal(err)
	}
	w.a.qp.PostSend(ibrc.SendWR{ID: 12, Opcode: ibrc.WRSend, SGL: w.a.sge(0, 100)})
	if n := w.a.qp.SendsCompleted(); n != 7 {
		t.Fatalf("%d completed after 2 flushed and 1 posted in ERR, want 7", n)
	}
}
