package ibrc_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/clock"
)

// framesOf decodes what a side sent, for tests that look at the wire.
type wireLog struct {
	dec  *rocev2.Decoder
	seen []rocev2.Opcode
}

func (l *wireLog) filter(side int, _ uint64, f []byte) ibrctest.Action {
	if p, err := l.dec.Decode(f); err == nil {
		l.seen = append(l.seen, p.BTH.Opcode)
	}
	return ibrctest.Deliver
}

// TestUC: UC SENDs and WRITEs of several packets arrive whole and complete
// at the sender once sent; the responder never answers, and a lost packet,
// a missing receive WR or a fault loses that message only.
func TestUC(t *testing.T) {
	log := &wireLog{dec: rocev2.NewDecoder()}
	dropNext := false
	cfg := ibrctest.LinkConfig{Filter: func(side int, n uint64, f []byte) ibrctest.Action {
		log.filter(side, n, f)
		if p, err := log.dec.Decode(f); err == nil && dropNext && p.BTH.Opcode.Has(rocev2.Middle) {
			dropNext = false
			return ibrctest.Drop
		}
		return ibrctest.Deliver
	}}
	w := newWorld(t, opts{qpType: ibrc.TypeUC, link: cfg})
	a, b := w.a, w.b
	msg := make([]byte, 5000) // 5 packets at 1024
	fill(msg, 1)
	copy(a.at(0, len(msg)), msg)

	// SEND: completes when sent, lands whole.
	if err := b.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: b.sge(1<<20, 8192)}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(ibrc.SendWR{ID: 10, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: a.sge(0, len(msg))}); err != nil {
		t.Fatal(err)
	}
	w.run(time.Second, func() bool { return len(a.wcs) == 1 && len(b.rwcs) == 1 })
	if a.wcs[0].Status != ibrc.WCSuccess || b.rwcs[0].Status != ibrc.WCSuccess || b.rwcs[0].ByteLen != uint32(len(msg)) {
		t.Fatalf("send %+v recv %+v", a.wcs[0], b.rwcs[0])
	}
	expectBytes(t, "UC SEND", b.at(1<<20, len(msg)), msg)

	// WRITE with immediate: consumes a receive WR.
	if err := b.qp.PostRecv(ibrc.RecvWR{ID: 2}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(ibrc.SendWR{ID: 11, Opcode: ibrc.WRWriteImm, Imm: 77, Flags: ibrc.SendSignaled,
		SGL: a.sge(0, len(msg)), RemoteAddr: memBase + 2<<20, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	w.run(time.Second, func() bool { return len(a.wcs) == 2 && len(b.rwcs) == 2 })
	if r := b.rwcs[1]; r.Status != ibrc.WCSuccess || r.Opcode != ibrc.WCRecvRDMAImm || r.Imm != 77 {
		t.Fatalf("write imm %+v", r)
	}
	expectBytes(t, "UC WRITE", b.at(2<<20, len(msg)), msg)

	// A lost middle packet loses that SEND: the sender still completes
	// it, the receive WR stays posted and takes the next message.
	if err := b.qp.PostRecv(ibrc.RecvWR{ID: 3, SGL: b.sge(3<<20, 8192)}); err != nil {
		t.Fatal(err)
	}
	dropNext = true
	for i, n := range []int{len(msg), 3000} {
		if err := a.qp.PostSend(ibrc.SendWR{ID: uint64(20 + i), Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: a.sge(uint64(i)*100, n)}); err != nil {
			t.Fatal(err)
		}
	}
	w.run(time.Second, func() bool { return len(a.wcs) == 4 && len(b.rwcs) == 3 })
	w.settle(10 * time.Millisecond)
	if len(b.rwcs) != 3 || b.rwcs[2].WRID != 3 || b.rwcs[2].ByteLen != 3000 {
		t.Fatalf("after a lost packet: %+v", b.rwcs)
	}
	expectBytes(t, "UC SEND after a loss", b.at(3<<20, 3000), a.at(100, 3000))

	// No receive WR: the message is dropped, no RNR NAK; the QP goes on.
	if err := a.qp.PostSend(ibrc.SendWR{ID: 30, Opcode: ibrc.WRSend, SGL: a.sge(0, 100)}); err != nil {
		t.Fatal(err)
	}
	w.settle(10 * time.Millisecond)
	if len(b.rwcs) != 3 || b.qp.Query().State != ibrc.StateRTS {
		t.Fatalf("message without a receive WR: %+v, %v", b.rwcs, b.qp.Query().State)
	}

	// A fault drops the message and fetches the page: the next lands.
	b.mem.Evict(memBase+4<<20-8192, 8192)
	for i := range 2 {
		if err := b.qp.PostRecv(ibrc.RecvWR{ID: uint64(40 + i), SGL: b.sge(4<<20-8192, 100)}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(ibrc.SendWR{ID: uint64(40 + i), Opcode: ibrc.WRSend, SGL: a.sge(0, 100)}); err != nil {
			t.Fatal(err)
		}
		w.settle(10 * time.Millisecond)
	}
	if len(b.rwcs) != 4 || b.rwcs[3].WRID != 40 || b.e.Stats().FaultDrops != 1 {
		t.Fatalf("after a fault: %+v, %+v", b.rwcs, b.e.Stats())
	}
	for _, op := range log.seen {
		if op.Service() != rocev2.ServiceUC {
			t.Fatalf("a UC QP sent %v", op)
		}
	}
	if a.e.Stats().Retransmits != 0 || b.e.Stats().Acks != 0 {
		t.Fatalf("UC retransmitted or acknowledged: %+v / %+v", a.e.Stats(), b.e.Stats())
	}

	// UC has no READ or atomics.
	for _, op := range []ibrc.WROpcode{ibrc.WRRead, ibrc.WRAtomicFetchAdd} {
		if err := a.qp.PostSend(ibrc.SendWR{Opcode: op, SGL: a.sge(0, 8)}); !errors.Is(err, ibrc.ErrInvalidArg) {
			t.Errorf("%v on UC: %v", op, err)
		}
	}
}

// udSend posts a UD SEND from n to peer's QP.
func udSend(t *testing.T, n *node, id uint64, peer *node, peerMAC [6]byte, peerIP [4]byte, qkey uint32, off uint64, l int, imm bool) {
	t.Helper()
	wr := ibrc.SendWR{ID: id, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: n.sge(off, l),
		UD: ibrc.UDDest{AV: ibrc.AddressVector{DestMAC: peerMAC, DGID: rocev2.GIDFromIPv4(peerIP)}, QPN: peer.qp.Num(), QKey: qkey}}
	if imm {
		wr.Opcode, wr.Imm = ibrc.WRSendImm, 0xabcd
	}
	if err := n.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
}

// TestUD: a UD SEND lands behind the 40-byte GRH area with the sender's
// QP in the completion; Q_Keys are checked; what cannot be placed is
// dropped or completes with its error, as the table says.
func TestUD(t *testing.T) {
	const qkey = 0x11111111
	log := &wireLog{dec: rocev2.NewDecoder()}
	w := newWorld(t, opts{qpType: ibrc.TypeUD, qkey: qkey, link: ibrctest.LinkConfig{Filter: log.filter}})
	a, b := w.a, w.b
	fill(a.at(0, 1024), 2)

	post := func(id uint64, off uint64, l int) {
		t.Helper()
		if err := b.qp.PostRecv(ibrc.RecvWR{ID: id, SGL: b.sge(off, l)}); err != nil {
			t.Fatal(err)
		}
	}
	post(1, 1<<20, 2048)
	udSend(t, a, 10, b, macB, ipB, qkey, 0, 1024, true)
	w.run(time.Second, func() bool { return len(a.wcs) == 1 && len(b.rwcs) == 1 })
	r := b.rwcs[0]
	if a.wcs[0].Status != ibrc.WCSuccess || r.Status != ibrc.WCSuccess || r.ByteLen != 40+1024 || r.SrcQP != a.qp.Num() ||
		r.Flags != ibrc.WCGRH|ibrc.WCWithImm || r.Imm != 0xabcd {
		t.Fatalf("send %+v recv %+v", a.wcs[0], r)
	}
	expectBytes(t, "UD payload", b.at(1<<20+40, 1024), a.at(0, 1024))
	grh := b.at(1<<20, 40)
	if grh[20]>>4 != 4 || [4]byte(grh[20+12:20+16]) != ipA || binary.BigEndian.Uint16(grh[20+2:]) != uint16(20+8+12+8+4+1024+4) {
		t.Fatalf("GRH area %x", grh)
	}
	for _, b := range grh[:20] {
		if b != 0 {
			t.Fatalf("GRH area's first 20 bytes %x", grh[:20])
		}
	}

	type outcome struct {
		recv   bool
		status ibrc.WCStatus
	}
	cases := []struct {
		name string
		qkey uint32
		len  int
		buf  int
		want outcome
	}{
		{"controlled Q_Key is the QP's", ibrc.ControlledQKey | 5, 100, 2048, outcome{true, ibrc.WCSuccess}},
		{"wrong Q_Key dropped", qkey + 1, 100, 2048, outcome{}},
		{"buffer without room for the GRH", qkey, 100, 120, outcome{true, ibrc.WCLocLenErr}},
		{"empty message", qkey, 0, 40, outcome{true, ibrc.WCSuccess}},
	}
	for i, c := range cases {
		before := len(b.rwcs)
		post(uint64(100+i), 1<<20, c.buf)
		udSend(t, a, uint64(100+i), b, macB, ipB, c.qkey, 0, c.len, false)
		w.settle(10 * time.Millisecond)
		got := outcome{}
		if len(b.rwcs) > before {
			got = outcome{true, b.rwcs[before].Status}
		}
		if got != c.want {
			t.Errorf("%s: got %+v want %+v", c.name, got, c.want)
		}
		if got.recv && got.status == ibrc.WCSuccess && b.rwcs[before].ByteLen != uint32(40+c.len) {
			t.Errorf("%s: byte_len %d", c.name, b.rwcs[before].ByteLen)
		}
		if c.want == (outcome{}) {
			// The dropped message left its receive WR for the next.
			udSend(t, a, 999, b, macB, ipB, qkey, 0, 10, false)
			w.settle(10 * time.Millisecond)
			if len(b.rwcs) != before+1 || b.rwcs[before].WRID != uint64(100+i) {
				t.Errorf("%s: receive WR not kept: %+v", c.name, b.rwcs[before:])
			}
		}
	}
	if b.qp.Query().State != ibrc.StateRTS {
		t.Fatalf("receiver in %v", b.qp.Query().State)
	}

	// A receive fault drops the message, and the page comes for the next.
	b.mem.Evict(memBase+3<<20, 4096)
	post(200, 3<<20, 4096)
	udSend(t, a, 200, b, macB, ipB, qkey, 0, 100, false)
	w.settle(10 * time.Millisecond)
	udSend(t, a, 201, b, macB, ipB, qkey, 0, 100, false)
	w.run(time.Second, func() bool { return len(b.rwcs) > 0 && b.rwcs[len(b.rwcs)-1].WRID == 200 })
	if s := b.e.Stats(); s.FaultDrops != 1 || s.PageRequests != 1 {
		t.Fatalf("fault: %+v", s)
	}

	// A message longer than the MTU sends nothing and completes without
	// an error (IBA C10-93.1.1).
	before, sent, got := len(a.wcs), len(log.seen), len(b.rwcs)
	udSend(t, a, 300, b, macB, ipB, qkey, 0, 1025, false)
	w.settle(time.Millisecond)
	if a.wcs[before].Status != ibrc.WCSuccess || a.qp.Query().State != ibrc.StateRTS || len(log.seen) != sent || len(b.rwcs) != got {
		t.Fatalf("UD SEND over the MTU: %+v, %v, %d frames sent", a.wcs[before:], a.qp.Query().State, len(log.seen)-sent)
	}
	for _, op := range log.seen {
		if op.Service() != rocev2.ServiceUD {
			t.Fatalf("a UD QP sent %v", op)
		}
	}
	for _, op := range []ibrc.WROpcode{ibrc.WRWrite, ibrc.WRRead, ibrc.WRAtomicCmpSwp} {
		if err := b.qp.PostSend(ibrc.SendWR{Opcode: op, SGL: b.sge(0, 8)}); !errors.Is(err, ibrc.ErrInvalidArg) {
			t.Errorf("%v on UD: %v", op, err)
		}
	}
}

// TestTransitionsPerType: each type's IBA table, where they differ.
func TestTransitionsPerType(t *testing.T) {
	cases := []struct {
		typ       ibrc.QPType
		cur, next ibrc.QPState
		mask      ibrc.AttrMask
		ok        bool
	}{
		{ibrc.TypeUD, ibrc.StateReset, ibrc.StateInit, ibrc.AttrPKey | ibrc.AttrQKey, true},
		{ibrc.TypeUD, ibrc.StateReset, ibrc.StateInit, ibrc.AttrPKey | ibrc.AttrAccessFlags, false},
		{ibrc.TypeUD, ibrc.StateInit, ibrc.StateRTR, 0, true},
		{ibrc.TypeUD, ibrc.StateInit, ibrc.StateRTR, ibrc.AttrAV, false},
		{ibrc.TypeUD, ibrc.StateRTR, ibrc.StateRTS, ibrc.AttrSQPSN, true},
		{ibrc.TypeUC, ibrc.StateInit, ibrc.StateRTR, ibrc.AttrAV | ibrc.AttrPathMTU | ibrc.AttrDestQPN | ibrc.AttrRQPSN, true},
		{ibrc.TypeUC, ibrc.StateInit, ibrc.StateRTR, ibrc.AttrAV | ibrc.AttrPathMTU | ibrc.AttrDestQPN | ibrc.AttrRQPSN | ibrc.AttrMaxDestRdAtomic, false},
		{ibrc.TypeUC, ibrc.StateRTR, ibrc.StateRTS, ibrc.AttrSQPSN | ibrc.AttrTimeout, false},
		{ibrc.TypeRC, ibrc.StateInit, ibrc.StateRTR, ibrc.AttrAV | ibrc.AttrPathMTU | ibrc.AttrDestQPN | ibrc.AttrRQPSN, false},
		{ibrc.QPType(9), ibrc.StateReset, ibrc.StateInit, ibrc.AttrPKey, false},
	}
	for _, c := range cases {
		err := ibrc.CheckTransition(c.typ, c.cur, c.next, c.mask)
		if (err == nil) != c.ok {
			t.Errorf("%v %v->%v mask %#x: %v", c.typ, c.cur, c.next, c.mask, err)
		}
	}
}

// unreliableVictim is an engine with a UC QP connected to a peer that is
// not there and a UD QP, each with receive WRs posted into one buffer.
type unreliableVictim struct {
	e      *ibrc.Transport
	mem    *ibrctest.Mem
	mr     *ibrc.MR // local writes: the receive buffers
	wmr    *ibrc.MR // remote writes: [fuzzWriteOff, fuzzWriteOff+fuzzWriteLen)
	cq     *ibrc.CQ
	uc, ud *ibrc.QP
	out    [][]byte
}

const (
	fuzzQKey     = 0x22222222
	fuzzRecvOff  = 4096 // receive buffers: [fuzzRecvOff, fuzzRecvOff+fuzzRecvLen)
	fuzzRecvLen  = 2048
	fuzzWriteOff = 8192
	fuzzWriteLen = 4096
	fuzzMemSize  = 16 << 10
)

func newUnreliableVictim(t testing.TB) *unreliableVictim {
	v := &unreliableVictim{}
	v.e = ibrc.New(ibrc.Config{Port: ibrc.PortFunc(func(f []byte) error { v.out = append(v.out, f); return nil }),
		Clock: clock.NewVirtual(time.Unix(1700000000, 0)), MAC: macB, IPv4: ipB,
		Pager: ibrc.PageRequesterFunc(func(ibrc.PageRequest, func(bool)) {})})
	pd := v.e.CreatePD()
	v.mem = ibrctest.NewMem(memBase, fuzzMemSize, 4096)
	v.mr, _ = pd.RegisterMR(v.mem, memBase, fuzzMemSize, ibrc.AccessLocalWrite)
	v.wmr, _ = pd.RegisterMR(v.mem, memBase+fuzzWriteOff, fuzzWriteLen, ibrc.AccessLocalWrite|ibrc.AccessRemoteWrite)
	v.cq, _ = v.e.CreateCQ(64)
	mk := func(typ ibrc.QPType, steps ...struct {
		a ibrc.QPAttr
		m ibrc.AttrMask
	}) *ibrc.QP {
		q, err := pd.CreateQP(ibrc.QPInit{Type: typ, SendCQ: v.cq, RecvCQ: v.cq, Cap: ibrc.QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range steps {
			if err := q.ModifyQP(&s.a, s.m); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 4 {
			q.PostRecv(ibrc.RecvWR{ID: uint64(i), SGL: []ibrc.SGE{{Addr: memBase + fuzzRecvOff, Length: fuzzRecvLen, LKey: v.mr.LKey()}}})
		}
		return q
	}
	type step = struct {
		a ibrc.QPAttr
		m ibrc.AttrMask
	}
	v.uc = mk(ibrc.TypeUC,
		step{ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff, AccessFlags: ibrc.AccessRemoteWrite}, ibrc.AttrState | ibrc.AttrPKey | ibrc.AttrAccessFlags},
		step{ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: ibrc.MTU256, DestQPN: peerQPN, RQPSN: 1000,
			AV: ibrc.AddressVector{DestMAC: macA, DGID: rocev2.GIDFromIPv4(ipA)}},
			ibrc.AttrState | ibrc.AttrPathMTU | ibrc.AttrDestQPN | ibrc.AttrRQPSN | ibrc.AttrAV},
		step{ibrc.QPAttr{State: ibrc.StateRTS, SQPSN: 5}, ibrc.AttrState | ibrc.AttrSQPSN})
	v.ud = mk(ibrc.TypeUD,
		step{ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff, QKey: fuzzQKey}, ibrc.AttrState | ibrc.AttrPKey | ibrc.AttrQKey},
		step{ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: ibrc.MTU1024}, ibrc.AttrState | ibrc.AttrPathMTU},
		step{ibrc.QPAttr{State: ibrc.StateRTS, SQPSN: 5}, ibrc.AttrState | ibrc.AttrSQPSN})
	return v
}

// FuzzHandleFrameUnreliable feeds frames to a UC and a UD QP (mode aims a
// repaired frame at one of them from the UC QP's peer). Whatever arrives,
// neither ever answers on the wire, neither leaves RTS, nothing outside
// their receive buffers and the one region open to remote writes
// changes, and every receive completion stays
// within its buffer, a UD one counting the GRH area.
func FuzzHandleFrameUnreliable(f *testing.F) {
	path := rocev2.Path{SrcMAC: macA, DstMAC: macB, SrcIP: ipA, DstIP: ipB, SrcPort: 0xc001}
	mk := func(op rocev2.Opcode, qpn uint32, payload []byte, mod func(h *rocev2.Headers)) []byte {
		h := &rocev2.Headers{BTH: rocev2.BTH{Opcode: op, PKey: 0xffff, DestQP: qpn, PSN: 1000},
			DETH: rocev2.DETH{QKey: fuzzQKey, SrcQP: 0x77},
			RETH: rocev2.RETH{VA: memBase + fuzzWriteOff, RKey: 0, DMALength: uint32(len(payload))}}
		if mod != nil {
			mod(h)
		}
		return rocev2.AppendFrame(nil, &path, h, payload)
	}
	v := newUnreliableVictim(f)
	mtu := make([]byte, 256)
	for _, s := range [][]byte{
		mk(rocev2.OpUDSendOnly, v.ud.Num(), []byte("datagram"), nil),
		mk(rocev2.OpUDSendOnlyImm, v.ud.Num(), mtu, func(h *rocev2.Headers) { h.ImmDt.Data = 9 }),
		mk(rocev2.OpUDSendOnly, v.ud.Num(), []byte("bad qkey"), func(h *rocev2.Headers) { h.DETH.QKey = 1 }),
		mk(rocev2.OpSendOnly.On(rocev2.ServiceUC), v.uc.Num(), []byte("uc"), nil),
		mk(rocev2.OpSendFirst.On(rocev2.ServiceUC), v.uc.Num(), mtu, nil),
		mk(rocev2.OpWriteOnlyImm.On(rocev2.ServiceUC), v.uc.Num(), []byte("write"), func(h *rocev2.Headers) { h.RETH.RKey = v.wmr.RKey() }),
		mk(rocev2.OpSendOnly, v.uc.Num(), []byte("rc opcode"), nil),
	} {
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, frame []byte, mode uint8) {
		v := newUnreliableVictim(t)
		before := append([]byte(nil), v.mem.Bytes()...)
		v.e.HandleFrame(frame)
		if g := fixup(frame); g != nil && mode&1 != 0 {
			copy(g[26:30], ipA[:])
			copy(g[30:34], ipB[:])
			if len(g) > 14+20+8+8 {
				q := v.uc.Num()
				if mode&2 != 0 {
					q = v.ud.Num()
				}
				g[14+20+8+5], g[14+20+8+6], g[14+20+8+7] = byte(q>>16), byte(q>>8), byte(q)
			}
			if g = fixup(g); g != nil {
				v.e.HandleFrame(g)
				v.e.HandleFrame(g)
			}
		}
		if len(v.out) != 0 {
			t.Fatalf("an unreliable QP answered: %d frames", len(v.out))
		}
		for _, q := range []*ibrc.QP{v.uc, v.ud} {
			if st := q.Query().State; st != ibrc.StateRTS {
				t.Fatalf("%v QP in %v", q.Type(), st)
			}
		}
		after := v.mem.Bytes()
		for _, r := range [][2]int{{0, fuzzRecvOff}, {fuzzRecvOff + fuzzRecvLen, fuzzWriteOff}, {fuzzWriteOff + fuzzWriteLen, fuzzMemSize}} {
			if !bytes.Equal(after[r[0]:r[1]], before[r[0]:r[1]]) {
				t.Fatalf("memory at [%#x, %#x) changed: outside the receive buffers and the writable region", r[0], r[1])
			}
		}
		wcs := make([]ibrc.WC, 16)
		for _, wc := range wcs[:v.cq.Poll(wcs)] {
			if wc.Status == ibrc.WCSuccess && wc.ByteLen > fuzzRecvLen ||
				wc.QPN == v.ud.Num() && wc.Status == ibrc.WCSuccess && (wc.ByteLen < ibrc.GRHSize || wc.Flags&ibrc.WCGRH == 0) {
				t.Fatalf("completion %+v", wc)
			}
		}
	})
}
