package main

import (
	"bytes"
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestSendWQEPut: an entry lands in its slot as librxe writes one (the
// device's fields and rdma_rxe's starting state), lies as told, and never
// spills out of the slot.
func TestSendWQEPut(t *testing.T) {
	const slotSize = 256 // 208 bytes, then room for 3 SGEs or 48 inline bytes
	sgl := []sge{{0x7f00_0000_1000, 600, 0x1234}, {0x7f00_0000_2000, 400, 0x1234}}
	for _, tc := range []struct {
		name           string
		w              sendWQE
		length, numSGE uint32
		sges           []sge  // what the slot's SGE array holds
		inline         []byte // what the slot's inline data holds
	}{
		{name: "RDMA WRITE, two SGEs", w: sendWQE{id: 7, opcode: hw.IBVWRRDMAWrite, flags: hw.IBVSendSignaled, remoteAddr: 0x5000, rkey: 0x99, sgl: sgl, ssn: 3}.sum(),
			length: 1000, numSGE: 2, sges: sgl},
		{name: "inline SEND", w: sendWQE{id: 8, opcode: hw.IBVWRSend, flags: hw.IBVSendInline, inline: []byte("hello")}.sum(),
			length: 5, inline: []byte("hello")},
		{name: "num_sge and length lie", w: sendWQE{id: 9, opcode: hw.IBVWRSend, numSGE: 0xffff_ffff, length: 0x8000_0001, sgl: sgl[:1]},
			length: 0x8000_0001, numSGE: 0xffff_ffff, sges: sgl[:1]},
		{name: "more SGEs than the slot holds", w: sendWQE{opcode: 0x55, sgl: []sge{sgl[0], sgl[1], sgl[0], sgl[1]}}.sum(),
			length: 2000, numSGE: 4, sges: []sge{sgl[0], sgl[1], sgl[0]}},
		{name: "more inline bytes than the slot holds", w: sendWQE{opcode: hw.IBVWRSend, flags: hw.IBVSendInline, inline: bytes.Repeat([]byte{1}, 100)}.sum(),
			length: 100, inline: bytes.Repeat([]byte{1}, 48)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := bytes.Repeat([]byte{0xcc}, 2*slotSize)
			slot := buf[:slotSize:slotSize]
			tc.w.put(slot)
			if !bytes.Equal(buf[slotSize:], bytes.Repeat([]byte{0xcc}, slotSize)) {
				t.Fatalf("wrote past the slot")
			}
			w := tc.w
			for _, c := range []struct {
				name      string
				got, want uint64
			}{
				{"wr_id", hw.RxeSendWRID.Get(slot), w.id},
				{"opcode", uint64(hw.RxeSendOpcode.Get(slot)), uint64(w.opcode)},
				{"send_flags", uint64(hw.RxeSendFlags.Get(slot)), uint64(w.flags)},
				{"remote_addr", hw.RxeSendRemoteAddr.Get(slot), w.remoteAddr},
				{"rkey", uint64(hw.RxeSendRKey.Get(slot)), uint64(w.rkey)},
				{"iova", sendIOVA.Get(slot), w.remoteAddr},
				{"ssn", uint64(sendSSN.Get(slot)), uint64(w.ssn)},
				{"dma.length", uint64(hw.RxeSendLength.Get(slot)), uint64(tc.length)},
				{"dma.resid", uint64(sendResid.Get(slot)), uint64(tc.length)},
				{"dma.num_sge", uint64(hw.RxeSendNumSGE.Get(slot)), uint64(tc.numSGE)},
				{"state", uint64(sendState.Get(slot)), 0},
				{"dma.cur_sge", uint64(sendCurSGE.Get(slot)), 0},
				{"dma.sge_offset", uint64(sendSGEOffset.Get(slot)), 0},
			} {
				if c.got != c.want {
					t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
				}
			}
			data := slot[hw.RxeSendWQESize:]
			if tc.inline != nil {
				if !bytes.Equal(data[:len(tc.inline)], tc.inline) {
					t.Errorf("inline data % x", data[:len(tc.inline)])
				}
				return
			}
			for i, s := range tc.sges {
				e := data[i*hw.RxeSGESize:]
				if got := (sge{hw.RxeSGEAddr.Get(e), hw.RxeSGELength.Get(e), hw.RxeSGELKey.Get(e)}); got != s {
					t.Errorf("SGE %d = %+v, want %+v", i, got, s)
				}
			}
		})
	}
}

func TestRecvWQEPut(t *testing.T) {
	slot := bytes.Repeat([]byte{0xcc}, 128)
	r := recvWQE{id: 5, sgl: []sge{{0x1000, 1024, 7}, {0x3000, 16, 7}}}.sum()
	r.put(slot)
	if hw.RxeRecvWRID.Get(slot) != 5 || hw.RxeRecvLength.Get(slot) != 1040 || recvResid.Get(slot) != 1040 ||
		hw.RxeRecvNumSGE.Get(slot) != 2 || recvCurSGE.Get(slot) != 0 || recvSGEOffset.Get(slot) != 0 {
		t.Fatalf("receive entry % x", slot[:hw.RxeRecvWQESize])
	}
	for i, s := range r.sgl {
		e := slot[hw.RxeRecvWQESize+i*hw.RxeSGESize:]
		if got := (sge{hw.RxeSGEAddr.Get(e), hw.RxeSGELength.Get(e), hw.RxeSGELKey.Get(e)}); got != s {
			t.Errorf("SGE %d = %+v", i, got)
		}
	}
	if !bytes.Equal(slot[hw.RxeRecvWQESize+2*hw.RxeSGESize:], make([]byte, 128-hw.RxeRecvWQESize-2*hw.RxeSGESize)) {
		t.Errorf("the rest of the slot is not cleared")
	}
}

// newTestQueue is a queue buffer as the kernel hands it out.
func newTestQueue(t *testing.T, slots, log2 uint32) *queue {
	t.Helper()
	b := make([]byte, hw.RxeQueueHeaderSize+int(slots)<<log2)
	hw.RxeQueueLog2ElemSize.Put(b, log2)
	hw.RxeQueueIndexMask.Put(b, slots-1)
	q, err := newQueue(b)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestNewQueue(t *testing.T) {
	for _, tc := range []struct {
		name        string
		size        int
		log2, mask  uint32
		ok          bool
		slots, elem int
	}{
		{"send queue", hw.RxeQueueHeaderSize + 16*256, 8, 15, true, 16, 256},
		{"completion queue in a page-rounded buffer", 8192, 6, 63, true, 64, 64},
		{"shorter than its slots", hw.RxeQueueHeaderSize + 15*256, 8, 15, false, 0, 0},
		{"slots not a power of two", 8192, 6, 62, false, 0, 0},
		{"absurd element size", 8192, 40, 1, false, 0, 0},
		{"no header", 100, 0, 0, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, tc.size)
			if tc.size >= 8 {
				hw.RxeQueueLog2ElemSize.Put(b, tc.log2)
				hw.RxeQueueIndexMask.Put(b, tc.mask)
			}
			q, err := newQueue(b)
			if !tc.ok {
				if err == nil {
					t.Fatalf("accepted: %d slots of 2^%d", q.slots, q.log2)
				}
				return
			}
			if err != nil || int(q.slots) != tc.slots || len(q.slot(0)) != tc.elem || cap(q.slot(3)) != tc.elem {
				t.Fatalf("%v: %+v", err, q)
			}
		})
	}
}

// TestQueueIndices: posting publishes the producer index after the
// entries, masked slot numbers wrap, and polling takes completions up to
// the device's producer index (masked) and publishes the consumer index.
func TestQueueIndices(t *testing.T) {
	q := newTestQueue(t, 4, 6)
	var ids []uint64
	for i := range 5 {
		q.post(func(s []byte) { hw.RxeCQEWRID.Put(s, uint64(10+i)) })
	}
	if q.loadProducer() != 1 || q.prod != 1 {
		t.Fatalf("producer %d after 5 posts on 4 slots", q.loadProducer())
	}
	if got := hw.RxeCQEWRID.Get(q.slot(0)); got != 14 {
		t.Fatalf("slot 0 holds %d", got)
	}
	// As a CQ: the device wrote 3 completions and says so with high
	// bits set; the consumer takes them.
	c := newTestQueue(t, 4, 6)
	for i := range uint32(3) {
		hw.RxeCQEWRID.Put(c.slot(i), uint64(20+i))
		hw.RxeCQEStatus.Put(c.slot(i), hw.IBVWCWRFlushErr)
	}
	c.storeProducer(0xffff_0003)
	for {
		e, ok := c.poll()
		if !ok {
			break
		}
		ids = append(ids, e.wrID)
	}
	if len(ids) != 3 || ids[0] != 20 || ids[2] != 22 || c.loadConsumer() != 3 {
		t.Fatalf("polled %v, consumer %d", ids, c.loadConsumer())
	}
	if got := describe(c.pollN(1, 0), 1, nil); got != "(only 0 of 1 completions)" {
		t.Errorf("an empty CQ: %q", got)
	}
}

func TestDescribe(t *testing.T) {
	flush := cqe{wrID: 2, status: hw.IBVWCWRFlushErr}
	for _, tc := range []struct {
		name string
		got  []cqe
		n    int
		ids  []uint64
		want string
	}{
		{"error then flush", []cqe{{wrID: 1, status: hw.IBVWCLocProtErr}, flush}, 2, []uint64{1, 2}, "LOC_PROT_ERR WR_FLUSH_ERR"},
		{"a run", []cqe{{status: hw.IBVWCLocQPOpErr}, flush, flush, flush}, 4, nil, "LOC_QP_OP_ERR WR_FLUSH_ERR×3"},
		{"wrong wr_id", []cqe{{wrID: 9, status: hw.IBVWCSuccess}}, 1, []uint64{1}, "SUCCESS#0x9"},
		{"missing", []cqe{{wrID: 1, status: hw.IBVWCSuccess}}, 2, []uint64{1, 2}, "SUCCESS (only 1 of 2 completions)"},
		{"unknown status", []cqe{{status: 99}}, 1, nil, "status(99)"},
	} {
		if got := describe(tc.got, tc.n, tc.ids); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestSendWQEPutUD: a UD SEND lands as librxe writes one for an address
// handle of ah_num 0: the work request's destination, the vector copied
// into the entry with the port and the socket addresses rdma_rxe routes
// by, and not one byte more; an entry that lies says what it was told.
func TestSendWQEPutUD(t *testing.T) {
	v4 := func(a, b, c, d byte) [16]byte { return [16]byte{10: 0xff, 11: 0xff, 12: a, 13: b, 14: c, 15: d} }
	mac := [6]byte{0x52, 0x54, 0x00, 0x81, 0x00, 0x02}
	good := udDest{qpn: 0x11, qkey: 0x1234_5678, sgid: v4(10, 81, 0, 1),
		av: hw.RxeAV{NetworkType: hw.RxeNetworkTypeIPv4, DMAC: mac, DGID: v4(10, 81, 0, 2), SGIDIndex: 1, HopLimit: 64, TrafficClass: 0x20}}
	for _, tc := range []struct {
		name       string
		d          udDest
		sin, din   []byte // the socket addresses' IPv4 addresses (nil: not written)
		ahNum, qpn uint32
	}{
		{name: "librxe's", d: good, sin: []byte{10, 81, 0, 1}, din: []byte{10, 81, 0, 2}, qpn: 0x11},
		{name: "numbered AH, QPN past 24 bits", d: func() udDest { d := good; d.ahNum, d.qpn = 0x5a5a5a, 1<<24|0x11; return d }(),
			sin: []byte{10, 81, 0, 1}, din: []byte{10, 81, 0, 2}, ahNum: 0x5a5a5a, qpn: 1<<24 | 0x11},
		{name: "IPv6 destination", d: func() udDest {
			d := good
			d.av.NetworkType, d.av.DGID = rxeNetworkTypeIPv6, notV4Mapped
			return d
		}(), sin: []byte{10, 81, 0, 1}, qpn: 0x11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := bytes.Repeat([]byte{0xcc}, 2*256)
			slot := buf[:256:256]
			w := sendWQE{id: 4, opcode: hw.IBVWRSend, flags: hw.IBVSendSignaled, sgl: []sge{{0x7f00_0000_1000, 256, 0x1234}}, ssn: 2, ud: &tc.d}.sum()
			w.put(slot)
			if !bytes.Equal(buf[256:], bytes.Repeat([]byte{0xcc}, 256)) {
				t.Fatalf("wrote past the slot")
			}
			covered := make([]bool, len(slot))
			check := func(f hw.Field, got, want uint64) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %#x, want %#x", f.Name, got, want)
				}
				for i := range f.Size * max(f.Count, 1) {
					covered[f.Offset+i] = true
				}
			}
			checkBytes := func(f hw.Field, n int, want []byte) {
				t.Helper()
				if want == nil {
					want = make([]byte, n)
				}
				if got := slot[f.Offset : f.Offset+n]; !bytes.Equal(got, want) {
					t.Errorf("%s = % x, want % x", f.Name, got, want)
				}
				for i := range n {
					covered[f.Offset+i] = true
				}
			}
			check(hw.RxeSendWRID.Field, hw.RxeSendWRID.Get(slot), 4)
			check(hw.RxeSendOpcode.Field, uint64(hw.RxeSendOpcode.Get(slot)), hw.IBVWRSend)
			check(hw.RxeSendFlags.Field, uint64(hw.RxeSendFlags.Get(slot)), hw.IBVSendSignaled)
			check(hw.RxeSendUDRemoteQPN.Field, uint64(hw.RxeSendUDRemoteQPN.Get(slot)), uint64(tc.qpn))
			check(hw.RxeSendUDRemoteQKey.Field, uint64(hw.RxeSendUDRemoteQKey.Get(slot)), 0x1234_5678)
			check(hw.RxeSendUDAHNum.Field, uint64(hw.RxeSendUDAHNum.Get(slot)), uint64(tc.ahNum))
			check(sendUDPort.Field, uint64(sendUDPort.Get(slot)), 1)
			check(hw.RxeSendUDNetworkType.Field, uint64(hw.RxeSendUDNetworkType.Get(slot)), uint64(tc.d.av.NetworkType))
			checkBytes(hw.RxeSendUDDMAC, 6, mac[:])
			checkBytes(hw.RxeSendUDDGID, 16, tc.d.av.DGID[:])
			check(hw.RxeSendUDSGIDIndex.Field, uint64(hw.RxeSendUDSGIDIndex.Get(slot)), 1)
			check(hw.RxeSendUDHopLimit.Field, uint64(hw.RxeSendUDHopLimit.Get(slot)), 64)
			check(hw.RxeSendUDTrafficClass.Field, uint64(hw.RxeSendUDTrafficClass.Get(slot)), 0x20)
			for _, a := range []struct {
				family hw.Le16
				addr   hw.Field
				want   []byte
			}{{sendUDSGIDFamily, sendUDSGIDAddr, tc.sin}, {sendUDDGIDFamily, sendUDDGIDAddr, tc.din}} {
				fam := uint64(0)
				if a.want != nil {
					fam = afInet
				}
				check(a.family.Field, uint64(a.family.Get(slot)), fam)
				checkBytes(a.addr, 4, a.want)
			}
			check(sendSSN.Field, uint64(sendSSN.Get(slot)), 2)
			check(hw.RxeSendLength.Field, uint64(hw.RxeSendLength.Get(slot)), 256)
			check(sendResid.Field, uint64(sendResid.Get(slot)), 256)
			check(hw.RxeSendNumSGE.Field, uint64(hw.RxeSendNumSGE.Get(slot)), 1)
			e := slot[hw.RxeSendWQESize:]
			if got := (sge{hw.RxeSGEAddr.Get(e), hw.RxeSGELength.Get(e), hw.RxeSGELKey.Get(e)}); got != w.sgl[0] {
				t.Errorf("SGE %+v", got)
			}
			for i := range hw.RxeSGESize {
				covered[hw.RxeSendWQESize+i] = true
			}
			for i, c := range covered {
				if !c && slot[i] != 0 {
					t.Errorf("byte %d is %#x, outside the fields a UD SEND has", i, slot[i])
				}
			}
		})
	}
}
