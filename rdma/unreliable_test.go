package rdma_test

import (
	"bytes"
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

const udQKey = 0x11111111

// udQP creates a UD QP on n with its own queues and brings it to RTS.
func (n *node) udQP(t *testing.T, qpn uint32) (sq, rq *rdmatest.Queue) {
	t.Helper()
	sq, rq = rdmatest.NewQueue(n.g, 64, 9), rdmatest.NewQueue(n.g, 64, 7)
	n.must(t, rdmatest.CreateQP(qpn, rdmatest.QPSpec{PD: pdn, SQ: sq, RQ: rq, SendCQ: sendCQ, RecvCQ: recvCQ,
		MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64, Flags: hw.RDMACmdFlagUD}))
	n.must(t, rdmatest.ModifyQP(qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrPKeyIndex | hw.RDMAQPAttrPort |
		hw.RDMAQPAttrQKey, State: hw.RDMAQPInit, QKey: udQKey}))
	n.must(t, rdmatest.ModifyQP(qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrPathMTU, State: hw.RDMAQPRTR, PathMTU: 3}))
	n.must(t, rdmatest.ModifyQP(qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrSQPSN, State: hw.RDMAQPRTS, SQPSN: 7}))
	return sq, rq
}

// udTo is a UD destination: peer's QP qpn, as librxe fills it in from an
// address handle of sgid index sgid.
func udTo(peer *node, qpn, qkey uint32, sgid uint8) *rdmatest.UDDest {
	return &rdmatest.UDDest{QPN: qpn, QKey: qkey,
		AV: hw.RxeAV{NetworkType: hw.RxeNetworkTypeIPv4, DMAC: peer.mac, DGID: rdmatest.GIDv4(peer.ip), SGIDIndex: sgid}}
}

// TestUDThroughRings: a UD SEND from one engine's rxe send queue lands in
// the other's receive queue behind the GRH area, its completion naming
// the sender's QP; a destination the port cannot send to fails its entry
// with LOC_QP_OP_ERR, a QP number of another type is ignored, and UD
// takes no RDMA WRITE.
func TestUDThroughRings(t *testing.T) {
	pa, pb := port.Pipe(256)
	a, b := newNode(t, pa, 1), newNode(t, pb, 2)
	const aUD, bUD = 0x400, 0x500
	asq, _ := a.udQP(t, aUD)
	_, brq := b.udQP(t, bUD)
	payload := pattern(1000, 0x5a)
	a.buf.Write(0, payload)
	b.postRecv(t, brq, rdmatest.Recv{ID: 1, SGL: []rdmatest.SGE{{Addr: bufVA + 0x8000, Length: 2048, LKey: mrKey}}},
		rdmatest.Recv{ID: 2, SGL: []rdmatest.SGE{{Addr: bufVA + 0x9000, Length: 2048, LKey: mrKey}}})
	a.post(t, asq, aUD, rdmatest.Send{ID: 10, Opcode: hw.IBVWRSendWithImm, Imm: 0x01020304, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: 1000, LKey: mrKey}}, UD: udTo(b, bUD, udQKey, 0)})
	if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCSuccess || c.WRID != 10 {
		t.Fatalf("send completion %+v", c)
	}
	c := poll(t, b.rcq, 1)[0]
	if c.Status != ibrc.WCSuccess || c.WRID != 1 || c.ByteLen != 1040 || c.SrcQP != aUD || c.QPNum != bUD ||
		c.Flags&(hw.IBVWCGRH|hw.IBVWCWithImm) != hw.IBVWCGRH|hw.IBVWCWithImm || c.Imm != 0x01020304 {
		t.Fatalf("receive completion %+v", c)
	}
	if !bytes.Equal(b.buf.Read(0x8000+40, 1000), payload) {
		t.Fatal("UD payload landed wrong")
	}
	if grh := b.buf.Read(0x8000+20, 20); grh[0] != 0x45 || !bytes.Equal(grh[12:16], a.ip[:]) {
		t.Fatalf("GRH area holds %x, want the IPv4 header from %v", grh, a.ip)
	}

	// A SEND to b's RC QP number: dropped, nothing completes there.
	a.post(t, asq, aUD, rdmatest.Send{ID: 11, Opcode: hw.IBVWRSend, Flags: sig, UD: udTo(b, b.qpn, udQKey, 0)})
	poll(t, a.scq, 1)
	quiet(t, b.rcq)

	// A source GID the port does not have: the entry fails, the QP errs.
	a.post(t, asq, aUD, rdmatest.Send{ID: 12, Opcode: hw.IBVWRSend, Flags: sig, UD: udTo(b, bUD, udQKey, 9)})
	if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCLocQPOpErr || c.WRID != 12 {
		t.Fatalf("bad source GID: %+v", c)
	}
}

// TestUDBadEntries: every way a UD entry can be wrong completes it with
// its status, on a fresh QP each.
func TestUDBadEntries(t *testing.T) {
	pa, pb := port.Pipe(256)
	a, b := newNode(t, pa, 1), newNode(t, pb, 2)
	for i, c := range []struct {
		name string
		w    rdmatest.Send
		want ibrc.WCStatus
	}{
		{"RDMA WRITE", rdmatest.Send{Opcode: hw.IBVWRRDMAWrite, UD: udTo(b, 0x500, udQKey, 0)}, ibrc.WCLocQPOpErr},
		{"address handle number", rdmatest.Send{Opcode: hw.IBVWRSend, UD: &rdmatest.UDDest{QPN: 0x500, AHNum: 3,
			AV: hw.RxeAV{NetworkType: hw.RxeNetworkTypeIPv4, DGID: rdmatest.GIDv4(b.ip)}}}, ibrc.WCLocQPOpErr},
		{"IPv6 destination", rdmatest.Send{Opcode: hw.IBVWRSend, UD: &rdmatest.UDDest{QPN: 0x500,
			AV: hw.RxeAV{NetworkType: 2, DGID: [16]byte{0xfe, 0x80, 15: 1}}}}, ibrc.WCLocQPOpErr},
		{"over the path MTU: not sent, no error", rdmatest.Send{Opcode: hw.IBVWRSend, AutoLength: true, NumSGE: -1,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 1025, LKey: mrKey}}, UD: udTo(b, 0x500, udQKey, 0)}, ibrc.WCSuccess},
	} {
		qpn := uint32(0x600 + i)
		sq, _ := a.udQP(t, qpn)
		c.w.ID, c.w.Flags = uint64(i), sig
		a.post(t, sq, qpn, c.w)
		if got := poll(t, a.scq, 1)[0]; got.Status != c.want || got.WRID != uint64(i) {
			t.Errorf("%s: %+v, want status %v", c.name, got, c.want)
		}
	}
}

// TestUCThroughRings: a UC QP pair moves a three-packet SEND and a WRITE
// through the rings, completing at the sender without an ACK.
func TestUCThroughRings(t *testing.T) {
	pa, pb := port.Pipe(256)
	a, b := newNode(t, pa, 1), newNode(t, pb, 2)
	const aUC, bUC = 0x700, 0x800
	mk := func(n *node, qpn uint32, peer *node, peerQPN uint32) (sq, rq *rdmatest.Queue) {
		sq, rq = rdmatest.NewQueue(n.g, 64, 9), rdmatest.NewQueue(n.g, 64, 7)
		n.must(t, rdmatest.CreateQP(qpn, rdmatest.QPSpec{PD: pdn, SQ: sq, RQ: rq, SendCQ: sendCQ, RecvCQ: recvCQ,
			MaxSendSGE: 4, MaxRecvSGE: 4, Flags: hw.RDMACmdFlagUC}))
		n.must(t, rdmatest.ModifyQP(qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrAccessFlags,
			State: hw.RDMAQPInit, Access: hw.RDMAAccessRemoteWrite}))
		n.must(t, rdmatest.ModifyQP(qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrAV | hw.RDMAQPAttrPathMTU |
			hw.RDMAQPAttrDestQPN | hw.RDMAQPAttrRQPSN, State: hw.RDMAQPRTR, PathMTU: 3, DestQPN: peerQPN, RQPSN: 5,
			DGID: rdmatest.GIDv4(peer.ip), DMAC: peer.mac}))
		n.must(t, rdmatest.ModifyQP(qpn, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrSQPSN, State: hw.RDMAQPRTS, SQPSN: 5}))
		return sq, rq
	}
	asq, _ := mk(a, aUC, b, bUC)
	_, brq := mk(b, bUC, a, aUC)
	payload := pattern(3000, 0x77)
	a.buf.Write(0, payload)
	b.postRecv(t, brq, rdmatest.Recv{ID: 1, SGL: []rdmatest.SGE{{Addr: bufVA + 0x10000, Length: 4096, LKey: mrKey}}})
	a.post(t, asq, aUC, rdmatest.Send{ID: 1, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: bufVA, Length: 3000, LKey: mrKey}}},
		rdmatest.Send{ID: 2, Opcode: hw.IBVWRRDMAWrite, Flags: sig, AutoLength: true, NumSGE: -1, RemoteAddr: bufVA + 0x20000, RKey: mrKey,
			SGL: []rdmatest.SGE{{Addr: bufVA, Length: 3000, LKey: mrKey}}})
	for _, c := range poll(t, a.scq, 2) {
		if c.Status != ibrc.WCSuccess {
			t.Fatalf("send completion %+v", c)
		}
	}
	if c := poll(t, b.rcq, 1)[0]; c.Status != ibrc.WCSuccess || c.ByteLen != 3000 {
		t.Fatalf("receive completion %+v", c)
	}
	waitFor(t, "the UC WRITE", func() bool { return bytes.Equal(b.buf.Read(0x20000, 3000), payload) })
	if !bytes.Equal(b.buf.Read(0x10000, 3000), payload) {
		t.Fatal("UC SEND landed wrong")
	}
}

// gsiQKey is the Q_Key of the GSI QP (IBA 15.4).
const gsiQKey = 0x80010000

// TestGSIAndPhysicalMR: what kernel consumers need. QP 1 exists only as a
// UD QP; a region registered with FLAG_PHYSICAL reaches IOVAs without
// translation (the kernel's DMA MR) and cannot be on demand; a MAD-sized
// SEND from one engine's QP 1 to the other's lands with src_qp 1.
func TestGSIAndPhysicalMR(t *testing.T) {
	pa, pb := port.Pipe(256)
	a, b := newNode(t, pa, 1), newNode(t, pb, 2)
	rc := rdmatest.CreateQP(1, rdmatest.QPSpec{PD: pdn, SQ: rdmatest.NewQueue(a.g, 8, 9), RQ: rdmatest.NewQueue(a.g, 8, 7),
		SendCQ: sendCQ, RecvCQ: recvCQ, MaxSendSGE: 1, MaxRecvSGE: 1})
	if st, _, _ := a.d.Run(rc); st != hw.RDMACmdErrHandle {
		t.Fatalf("an RC QP 1: status %d, want ERR_HANDLE", st)
	}
	const dmaKey = 0x100
	for _, n := range []*node{a, b} {
		odp := rdmatest.RegMR(0x200, pdn, 0, 1<<30, hw.RDMAAccessLocalWrite|hw.RDMAAccessOnDemand, 0)
		odp[hw.RDMACmdFlags.Offset] |= hw.RDMACmdFlagPhysical
		if st, _, _ := n.d.Run(odp); st != hw.RDMACmdErrParam {
			t.Fatalf("an on-demand physical MR: status %d, want ERR_PARAM", st)
		}
		reg := rdmatest.RegMR(dmaKey, pdn, 0, 1<<30, hw.RDMAAccessLocalWrite, 0)
		reg[hw.RDMACmdFlags.Offset] |= hw.RDMACmdFlagPhysical
		n.must(t, reg)
	}
	asq, _ := a.udQP(t, 1)
	_, brq := b.udQP(t, 1)
	for _, n := range []*node{a, b} {
		n.must(t, rdmatest.ModifyQP(1, rdmatest.Modify{Mask: hw.RDMAQPAttrQKey, QKey: gsiQKey}))
	}
	mad := pattern(256, 0x3c)
	src, dst := a.g.Alloc(256, 64), b.g.Alloc(296, 64)
	copy(a.g.Bytes(src, 256), mad)
	b.postRecv(t, brq, rdmatest.Recv{ID: 7, SGL: []rdmatest.SGE{{Addr: dst, Length: 296, LKey: dmaKey}}})
	a.post(t, asq, 1, rdmatest.Send{ID: 8, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: src, Length: 256, LKey: dmaKey}}, UD: udTo(b, 1, gsiQKey, 0)})
	if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCSuccess {
		t.Fatalf("GSI send %+v", c)
	}
	if c := poll(t, b.rcq, 1)[0]; c.Status != ibrc.WCSuccess || c.SrcQP != 1 || c.QPNum != 1 || c.ByteLen != 296 {
		t.Fatalf("GSI receive %+v", c)
	}
	if !bytes.Equal(b.g.Bytes(dst+40, 256), mad) {
		t.Fatal("the MAD landed wrong")
	}
}
