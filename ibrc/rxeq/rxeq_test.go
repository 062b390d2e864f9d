package rxeq

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

const qBase = 0x10000

var sqLim = SendLimits{MaxSGE: 4, MaxInline: 64}

// sqGeom is a send queue of 8 slots of 512 bytes.
func sqGeom() Geometry {
	return Geometry{Base: qBase, Size: hw.RxeQueueHeaderSize + 8*512, Slots: 8, Log2ElemSize: 9}
}

// TestVerbsValuesMatchEngine: the ibrc engine's verbs values are the ones
// the rxe queues carry (vdevice/hw's table, itself checked against the
// kernel's headers), so a value passes between them unconverted.
func TestVerbsValuesMatchEngine(t *testing.T) {
	for _, c := range []struct {
		name      string
		ibrc, abi uint64
	}{
		{"WRWrite", uint64(ibrc.WRWrite), hw.IBVWRRDMAWrite},
		{"WRWriteImm", uint64(ibrc.WRWriteImm), hw.IBVWRRDMAWriteWithImm},
		{"WRSend", uint64(ibrc.WRSend), hw.IBVWRSend},
		{"WRSendImm", uint64(ibrc.WRSendImm), hw.IBVWRSendWithImm},
		{"WRRead", uint64(ibrc.WRRead), hw.IBVWRRDMARead},
		{"SendFence", uint64(ibrc.SendFence), hw.IBVSendFence},
		{"SendSignaled", uint64(ibrc.SendSignaled), hw.IBVSendSignaled},
		{"SendSolicited", uint64(ibrc.SendSolicited), hw.IBVSendSolicited},
		{"SendInline", uint64(ibrc.SendInline), hw.IBVSendInline},
		{"WCSuccess", uint64(ibrc.WCSuccess), hw.IBVWCSuccess},
		{"WCLocLenErr", uint64(ibrc.WCLocLenErr), hw.IBVWCLocLenErr},
		{"WCLocQPOpErr", uint64(ibrc.WCLocQPOpErr), hw.IBVWCLocQPOpErr},
		{"WCLocProtErr", uint64(ibrc.WCLocProtErr), hw.IBVWCLocProtErr},
		{"WCWRFlushErr", uint64(ibrc.WCWRFlushErr), hw.IBVWCWRFlushErr},
		{"WCBadRespErr", uint64(ibrc.WCBadRespErr), hw.IBVWCBadRespErr},
		{"WCLocAccessErr", uint64(ibrc.WCLocAccessErr), hw.IBVWCLocAccessErr},
		{"WCRemInvReqErr", uint64(ibrc.WCRemInvReqErr), hw.IBVWCRemInvReqErr},
		{"WCRemAccessErr", uint64(ibrc.WCRemAccessErr), hw.IBVWCRemAccessErr},
		{"WCRemOpErr", uint64(ibrc.WCRemOpErr), hw.IBVWCRemOpErr},
		{"WCRetryExcErr", uint64(ibrc.WCRetryExcErr), hw.IBVWCRetryExcErr},
		{"WCRNRRetryExcErr", uint64(ibrc.WCRNRRetryExcErr), hw.IBVWCRNRRetryExcErr},
		{"WCFatalErr", uint64(ibrc.WCFatalErr), hw.IBVWCFatalErr},
		{"WCGeneralErr", uint64(ibrc.WCGeneralErr), hw.IBVWCGeneralErr},
		{"WCSend", uint64(ibrc.WCSend), hw.IBVWCSend},
		{"WCRDMAWrite", uint64(ibrc.WCRDMAWrite), hw.IBVWCRDMAWrite},
		{"WCRDMARead", uint64(ibrc.WCRDMARead), hw.IBVWCRDMARead},
		{"WCRecv", uint64(ibrc.WCRecv), hw.IBVWCRecv},
		{"WCRecvRDMAImm", uint64(ibrc.WCRecvRDMAImm), hw.IBVWCRecvRDMAWithImm},
		{"WCWithImm", uint64(ibrc.WCWithImm), hw.IBVWCWithImm},
	} {
		if c.ibrc != c.abi {
			t.Errorf("ibrc.%s = %d, the rxe ABI says %d", c.name, c.ibrc, c.abi)
		}
	}
}

// TestParseSend: every opcode, flag and layout librxe writes, and every
// malformed entry with the status it completes with.
func TestParseSend(t *testing.T) {
	sg := func(addr uint64, l, k uint32) rawSGE { return rawSGE{addr, l, k} }
	two := []rawSGE{sg(0x1000, 100, 7), sg(0x9000, 28, 8)}
	wantTwo := []ibrc.SGE{{Addr: 0x1000, Length: 100, LKey: 7}, {Addr: 0x9000, Length: 28, LKey: 8}}
	for _, c := range []struct {
		name string
		in   sendSpec
		want ibrc.SendWR
		bad  Malformed
	}{
		{"send", sendSpec{id: 1, opcode: hw.IBVWRSend, flags: hw.IBVSendSignaled, sges: two, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: wantTwo}, 0},
		{"send imm", sendSpec{id: 2, opcode: hw.IBVWRSendWithImm, imm: 0xa1b2c3d4, sges: two, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 2, Opcode: ibrc.WRSendImm, Imm: 0xa1b2c3d4, SGL: wantTwo}, 0},
		{"write", sendSpec{id: 3, opcode: hw.IBVWRRDMAWrite, raddr: 0x7f00_0000_1000, rkey: 0x1234, sges: two, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 3, Opcode: ibrc.WRWrite, RemoteAddr: 0x7f00_0000_1000, RKey: 0x1234, SGL: wantTwo}, 0},
		{"write imm", sendSpec{id: 4, opcode: hw.IBVWRRDMAWriteWithImm, imm: 9, raddr: 8, rkey: 5, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 4, Opcode: ibrc.WRWriteImm, Imm: 9, RemoteAddr: 8, RKey: 5}, 0},
		{"read", sendSpec{id: 5, opcode: hw.IBVWRRDMARead, flags: hw.IBVSendFence, raddr: 0x100, rkey: 6, sges: two, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 5, Opcode: ibrc.WRRead, Flags: ibrc.SendFence, RemoteAddr: 0x100, RKey: 6, SGL: wantTwo}, 0},
		{"imm ignored without _WITH_IMM", sendSpec{id: 6, opcode: hw.IBVWRSend, imm: 77, autoLength: true},
			ibrc.SendWR{ID: 6, Opcode: ibrc.WRSend}, 0},
		{"rdma fields ignored on send", sendSpec{id: 7, opcode: hw.IBVWRSend, raddr: 77, rkey: 8, autoLength: true},
			ibrc.SendWR{ID: 7, Opcode: ibrc.WRSend}, 0},
		{"inline", sendSpec{id: 8, opcode: hw.IBVWRSend, flags: hw.IBVSendInline | hw.IBVSendSignaled, inline: []byte("hello"),
			numSGE: 0xffffffff, autoLength: true},
			ibrc.SendWR{ID: 8, Opcode: ibrc.WRSend, Flags: ibrc.SendInline | ibrc.SendSignaled, Inline: []byte("hello")}, 0},
		{"inline at the limit", sendSpec{id: 9, opcode: hw.IBVWRRDMAWrite, flags: hw.IBVSendInline, inline: make([]byte, 64), autoLength: true},
			ibrc.SendWR{ID: 9, Opcode: ibrc.WRWrite, Flags: ibrc.SendInline, Inline: make([]byte, 64)}, 0},
		{"empty inline", sendSpec{id: 10, opcode: hw.IBVWRSend, flags: hw.IBVSendInline, autoLength: true},
			ibrc.SendWR{ID: 10, Opcode: ibrc.WRSend, Flags: ibrc.SendInline, Inline: []byte{}}, 0},
		{"zero-length send", sendSpec{id: 11, opcode: hw.IBVWRSend}, ibrc.SendWR{ID: 11, Opcode: ibrc.WRSend}, 0},
		{"other flags ignored", sendSpec{id: 12, opcode: hw.IBVWRSend, flags: hw.IBVSendIPCsum | hw.IBVSendSolicited | 1<<30, autoLength: true},
			ibrc.SendWR{ID: 12, Opcode: ibrc.WRSend, Flags: ibrc.SendSolicited}, 0},
		{"SGL cut to dma.length", sendSpec{id: 13, opcode: hw.IBVWRSend, length: 110, numSGE: 3,
			sges: []rawSGE{sg(0x1000, 0, 99), sg(0x2000, 100, 1), sg(0x3000, 50, 2)}},
			ibrc.SendWR{ID: 13, Opcode: ibrc.WRSend, SGL: []ibrc.SGE{{Addr: 0x2000, Length: 100, LKey: 1}, {Addr: 0x3000, Length: 10, LKey: 2}}}, 0},
		{"unused SGEs not checked", sendSpec{id: 14, opcode: hw.IBVWRSend, length: 1, numSGE: 2,
			sges: []rawSGE{sg(0x2000, 1, 1), sg(math.MaxUint64, 100, 2)}},
			ibrc.SendWR{ID: 14, Opcode: ibrc.WRSend, SGL: []ibrc.SGE{{Addr: 0x2000, Length: 1, LKey: 1}}}, 0},
		{"SGE ending at 2^64", sendSpec{id: 15, opcode: hw.IBVWRSend, sges: []rawSGE{sg(math.MaxUint64-15, 16, 3)}, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 15, Opcode: ibrc.WRSend, SGL: []ibrc.SGE{{Addr: math.MaxUint64 - 15, Length: 16, LKey: 3}}}, 0},
		{"max SGEs", sendSpec{id: 16, opcode: hw.IBVWRSend, sges: []rawSGE{sg(1, 1, 1), sg(2, 1, 1), sg(3, 1, 1), sg(4, 1, 1)}, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 16, Opcode: ibrc.WRSend, SGL: []ibrc.SGE{se(1, 1, 1), se(2, 1, 1), se(3, 1, 1), se(4, 1, 1)}}, 0},
		{"largest message", sendSpec{id: 17, opcode: hw.IBVWRSend, sges: []rawSGE{sg(0, 1<<31-1, 1), sg(1<<40, 1, 1)}, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 17, Opcode: ibrc.WRSend, SGL: []ibrc.SGE{se(0, 1<<31-1, 1), se(1<<40, 1, 1)}}, 0},

		{"atomic cmp&swp", sendSpec{id: 18, opcode: hw.IBVWRAtomicCmpAndSwp, flags: hw.IBVSendSignaled | hw.IBVSendFence,
			raddr: 0x7f00_0000_1008, rkey: 0x4321, cmpAdd: 0x0102030405060708, swap: 0xf0e0d0c0b0a09080, sges: []rawSGE{sg(0x5000, 8, 9)}, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 18, Opcode: ibrc.WRAtomicCmpSwp, Flags: ibrc.SendSignaled | ibrc.SendFence, RemoteAddr: 0x7f00_0000_1008, RKey: 0x4321,
				CompareAdd: 0x0102030405060708, Swap: 0xf0e0d0c0b0a09080, SGL: []ibrc.SGE{{Addr: 0x5000, Length: 8, LKey: 9}}}, 0},
		{"atomic fetch&add over two SGEs", sendSpec{id: 19, opcode: hw.IBVWRAtomicFetchAdd, raddr: 8, rkey: 3, cmpAdd: 5, swap: 6,
			sges: []rawSGE{sg(0x5000, 4, 9), sg(0x6000, 4, 9)}, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 19, Opcode: ibrc.WRAtomicFetchAdd, RemoteAddr: 8, RKey: 3, CompareAdd: 5, Swap: 6,
				SGL: []ibrc.SGE{{Addr: 0x5000, Length: 4, LKey: 9}, {Addr: 0x6000, Length: 4, LKey: 9}}}, 0},
		{"atomic into 4 bytes", sendSpec{id: 20, opcode: hw.IBVWRAtomicCmpAndSwp, raddr: 8, rkey: 3, sges: []rawSGE{sg(0x5000, 4, 9)}, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 20, Opcode: ibrc.WRAtomicCmpSwp, RemoteAddr: 8, RKey: 3}, AtomicLength},
		{"inline atomic", sendSpec{id: 21, opcode: hw.IBVWRAtomicFetchAdd, flags: hw.IBVSendInline, inline: make([]byte, 8), autoLength: true},
			ibrc.SendWR{ID: 21, Opcode: ibrc.WRAtomicFetchAdd, Flags: ibrc.SendInline}, AtomicLength},
		{"atomic write", sendSpec{id: 38, opcode: hw.IBVWRAtomicWrite, flags: hw.IBVSendSignaled, raddr: 0x7f00_0000_2008, rkey: 0x55,
			inline: []byte{1, 2, 3, 4, 5, 6, 7, 8}, autoLength: true},
			ibrc.SendWR{ID: 38, Opcode: ibrc.WRAtomicWrite, Flags: ibrc.SendSignaled, RemoteAddr: 0x7f00_0000_2008, RKey: 0x55,
				Inline: []byte{1, 2, 3, 4, 5, 6, 7, 8}}, 0},
		{"atomic write of 4 bytes", sendSpec{id: 39, opcode: hw.IBVWRAtomicWrite, raddr: 8, rkey: 1, inline: []byte{1, 2, 3, 4}, autoLength: true},
			ibrc.SendWR{ID: 39, Opcode: ibrc.WRAtomicWrite, RemoteAddr: 8, RKey: 1}, AtomicLength},
		{"local inv", sendSpec{id: 22, opcode: hw.IBVWRLocalInv, imm: 0x4321, flags: hw.IBVSendSignaled | hw.IBVSendInline},
			ibrc.SendWR{ID: 22, Opcode: ibrc.WRLocalInv, Flags: ibrc.SendSignaled, InvRKey: 0x21430000}, 0},
		{"send with inv", sendSpec{id: 24, opcode: hw.IBVWRSendWithInv, imm: 0x4321, sges: two, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 24, Opcode: ibrc.WRSendWithInv, InvRKey: 0x21430000, SGL: wantTwo}, 0},
		{"tso", sendSpec{id: 25, opcode: hw.IBVWRTSO}, ibrc.SendWR{ID: 25}, BadOpcode},
		{"opcode 11", sendSpec{id: 26, opcode: 11}, ibrc.SendWR{ID: 26}, BadOpcode},
		{"opcode 2^32-1", sendSpec{id: 27, opcode: math.MaxUint32}, ibrc.SendWR{ID: 27}, BadOpcode},
		{"opcode 2^8+2", sendSpec{id: 28, opcode: 258}, ibrc.SendWR{ID: 28}, BadOpcode},
		{"too many SGEs", sendSpec{id: 29, opcode: hw.IBVWRSend, numSGE: 5}, ibrc.SendWR{ID: 29, Opcode: ibrc.WRSend}, TooManySGEs},
		{"num_sge 2^32-1", sendSpec{id: 30, opcode: hw.IBVWRSend, numSGE: math.MaxUint32}, ibrc.SendWR{ID: 30, Opcode: ibrc.WRSend}, TooManySGEs},
		{"inline read", sendSpec{id: 31, opcode: hw.IBVWRRDMARead, flags: hw.IBVSendInline, raddr: 1, rkey: 2},
			ibrc.SendWR{ID: 31, Opcode: ibrc.WRRead, Flags: ibrc.SendInline, RemoteAddr: 1, RKey: 2}, InlineRead},
		{"inline too long", sendSpec{id: 32, opcode: hw.IBVWRSend, flags: hw.IBVSendInline, length: 65},
			ibrc.SendWR{ID: 32, Opcode: ibrc.WRSend, Flags: ibrc.SendInline}, InlineTooLong},
		{"inline 2^31", sendSpec{id: 33, opcode: hw.IBVWRSend, flags: hw.IBVSendInline, length: 1 << 31},
			ibrc.SendWR{ID: 33, Opcode: ibrc.WRSend, Flags: ibrc.SendInline}, InlineTooLong},
		{"longer than 2^31", sendSpec{id: 34, opcode: hw.IBVWRSend, length: 1<<31 + 1, numSGE: 1, sges: []rawSGE{sg(0, math.MaxUint32, 1)}},
			ibrc.SendWR{ID: 34, Opcode: ibrc.WRSend}, TooLong},
		{"SGL short", sendSpec{id: 35, opcode: hw.IBVWRSend, length: 129, sges: two, autoNumS: true},
			ibrc.SendWR{ID: 35, Opcode: ibrc.WRSend, SGL: wantTwo}, SGLShort},
		{"length without SGEs", sendSpec{id: 36, opcode: hw.IBVWRRDMAWrite, length: 1}, ibrc.SendWR{ID: 36, Opcode: ibrc.WRWrite}, SGLShort},
		{"SGE wraps", sendSpec{id: 37, opcode: hw.IBVWRSend, sges: []rawSGE{sg(math.MaxUint64-15, 17, 3)}, autoLength: true, autoNumS: true},
			ibrc.SendWR{ID: 37, Opcode: ibrc.WRSend}, SGEWraps},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := sqGeom()
			m := newQueueMem(t, g)
			u := user{m, g}
			q, err := NewSQ(m, g, sqLim)
			if err != nil {
				t.Fatal(err)
			}
			u.post(c.in.write)
			w, ok, err := q.Fetch()
			if !ok {
				t.Fatalf("nothing fetched (err %v)", err)
			}
			if c.bad == 0 && err != nil || c.bad != 0 && !errors.Is(err, c.bad) {
				t.Fatalf("err %v, want %v", err, c.bad)
			}
			if c.bad != 0 {
				var we *WQEError
				if !errors.As(err, &we) || we.WRID != c.in.id || we.Slot != 0 || we.Opcode != c.in.opcode || we.Recv {
					t.Fatalf("error %#v", err)
				}
				if we.Status() != c.bad.Status() || we.WC(42).Status != c.bad.Status() || we.WC(42).WRID != c.in.id || we.WC(42).QPN != 42 {
					t.Fatalf("completion %+v, want status %v", we.WC(42), c.bad.Status())
				}
			}
			if w.Slot != 0 || !reflect.DeepEqual(norm(w.WR), norm(c.want)) {
				t.Fatalf("got  %+v\nwant %+v", w.WR, c.want)
			}
			if q.Outstanding() != 1 || u.cons() != 0 {
				t.Fatalf("outstanding %d, consumer_index %d before retire", q.Outstanding(), u.cons())
			}
			if err := q.Retire(); err != nil || u.cons() != 1 || q.Outstanding() != 0 {
				t.Fatalf("retire: %v, consumer_index %d", err, u.cons())
			}
		})
	}
}

func se(addr uint64, l, key uint32) ibrc.SGE { return ibrc.SGE{Addr: addr, Length: l, LKey: key} }

// norm makes empty and nil slices compare equal.
func norm(wr ibrc.SendWR) ibrc.SendWR {
	if len(wr.SGL) == 0 {
		wr.SGL = nil
	}
	if wr.Inline == nil && wr.Flags&ibrc.SendInline != 0 {
		wr.Inline = []byte{}
	}
	return wr
}

// TestStatusOfMalformed pins the status each kind completes with.
func TestStatusOfMalformed(t *testing.T) {
	want := map[Malformed]ibrc.WCStatus{
		BadOpcode: ibrc.WCLocQPOpErr, TooManySGEs: ibrc.WCLocQPOpErr, InlineRead: ibrc.WCLocQPOpErr,
		InlineTooLong: ibrc.WCLocLenErr, TooLong: ibrc.WCLocLenErr, SGLShort: ibrc.WCLocLenErr,
		SGEWraps: ibrc.WCLocProtErr, AtomicLength: ibrc.WCLocLenErr, BadAddress: ibrc.WCLocQPOpErr,
	}
	for m := Malformed(1); int(m) < len(malformedText); m++ {
		if m.Status() != want[m] {
			t.Errorf("%v: status %v, want %v", m, m.Status(), want[m])
		}
		if m.Error() == "" || m.Error() == Malformed(200).Error() {
			t.Errorf("%d has no text", m)
		}
	}
	if len(want) != len(malformedText)-1 {
		t.Fatalf("%d kinds, %d statuses pinned", len(malformedText)-1, len(want))
	}
}

// TestParseRecv: receive entries, well-formed and not.
func TestParseRecv(t *testing.T) {
	g := Geometry{Base: qBase, Size: hw.RxeQueueHeaderSize + 4*128, Slots: 4, Log2ElemSize: 7}
	for _, c := range []struct {
		name string
		in   recvSpec
		want []ibrc.SGE
		bad  Malformed
	}{
		{"one SGE", recvSpec{id: 1, sges: []rawSGE{{0x1000, 4096, 3}}, auto: true}, []ibrc.SGE{se(0x1000, 4096, 3)}, 0},
		{"no SGE", recvSpec{id: 2, auto: true}, nil, 0},
		{"five SGEs, zero-length ones dropped", recvSpec{id: 3, auto: true,
			sges: []rawSGE{{1, 0, 9}, {2, 10, 1}, {3, 0, 9}, {4, 20, 2}, {5, 30, 3}}},
			[]ibrc.SGE{se(2, 10, 1), se(4, 20, 2), se(5, 30, 3)}, 0},
		{"cut to dma.length", recvSpec{id: 4, length: 15, numSGE: 2, sges: []rawSGE{{2, 10, 1}, {4, 20, 2}}},
			[]ibrc.SGE{se(2, 10, 1), se(4, 5, 2)}, 0},
		{"six SGEs", recvSpec{id: 5, numSGE: 6}, nil, TooManySGEs},
		{"num_sge 2^31", recvSpec{id: 6, numSGE: 1 << 31}, nil, TooManySGEs},
		{"longer than 2^31", recvSpec{id: 7, length: 1<<31 + 1}, nil, TooLong},
		{"short", recvSpec{id: 8, length: 31, numSGE: 2, sges: []rawSGE{{2, 10, 1}, {4, 20, 2}}}, nil, SGLShort},
		{"wraps", recvSpec{id: 9, auto: true, sges: []rawSGE{{math.MaxUint64, 2, 1}}}, nil, SGEWraps},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newQueueMem(t, g)
			u := user{m, g}
			q, err := NewRQ(m, g, 5)
			if err != nil {
				t.Fatal(err)
			}
			u.post(c.in.write)
			w, ok, err := q.Fetch()
			if !ok || c.bad == 0 && err != nil || c.bad != 0 && !errors.Is(err, c.bad) {
				t.Fatalf("ok %v err %v, want %v", ok, err, c.bad)
			}
			if c.bad != 0 {
				var we *WQEError
				if !errors.As(err, &we) || !we.Recv || we.WRID != c.in.id || we.WC(1).Opcode != ibrc.WCRecv {
					t.Fatalf("error %#v", err)
				}
				return
			}
			if w.WR.ID != c.in.id || len(w.WR.SGL) != len(c.want) || len(c.want) > 0 && !reflect.DeepEqual(w.WR.SGL, c.want) {
				t.Fatalf("got %+v, want SGL %+v", w.WR, c.want)
			}
		})
	}
}

// TestGeometry: what NewSQ, NewRQ and NewCQ refuse.
func TestGeometry(t *testing.T) {
	good := sqGeom()
	for _, c := range []struct {
		name string
		mod  func(g *Geometry, l *SendLimits)
		ok   bool
	}{
		{"good", func(*Geometry, *SendLimits) {}, true},
		{"0 slots", func(g *Geometry, _ *SendLimits) { g.Slots = 0 }, false},
		{"1 slot", func(g *Geometry, _ *SendLimits) { g.Slots = 1 }, false},
		{"3 slots", func(g *Geometry, _ *SendLimits) { g.Slots = 3 }, false},
		{"2^17 slots", func(g *Geometry, _ *SendLimits) { g.Slots = 1 << 17; g.Size = 1 << 40 }, false},
		{"2^16 slots", func(g *Geometry, _ *SendLimits) { g.Slots = 1 << 16; g.Size = hw.RxeQueueHeaderSize + 1<<25 }, true},
		{"element too small for the SGEs", func(_ *Geometry, l *SendLimits) { l.MaxSGE = 20 }, false},
		{"element just right", func(_ *Geometry, l *SendLimits) { l.MaxSGE = 19; l.MaxInline = 304 }, true},
		{"element too small for inline", func(_ *Geometry, l *SendLimits) { l.MaxInline = 305 }, false},
		{"negative SGEs", func(_ *Geometry, l *SendLimits) { l.MaxSGE = -1 }, false},
		{"negative inline", func(_ *Geometry, l *SendLimits) { l.MaxInline = -1 }, false},
		{"huge limits", func(_ *Geometry, l *SendLimits) { l.MaxSGE = math.MaxInt / 8 }, false},
		{"element 2^17", func(g *Geometry, _ *SendLimits) { g.Log2ElemSize = 17; g.Size = 1 << 30 }, false},
		{"element 2^255", func(g *Geometry, _ *SendLimits) { g.Log2ElemSize = 255 }, false},
		{"misaligned", func(g *Geometry, _ *SendLimits) { g.Base += 4 }, false},
		{"buffer short", func(g *Geometry, _ *SendLimits) { g.Size-- }, false},
		{"buffer longer", func(g *Geometry, _ *SendLimits) { g.Size += 4096 }, true},
		{"wraps", func(g *Geometry, _ *SendLimits) { g.Base = math.MaxUint64 - 4095 }, false},
		{"ends at 2^64", func(g *Geometry, _ *SendLimits) { g.Base = -g.Size }, true},
	} {
		g, l := good, sqLim
		c.mod(&g, &l)
		_, err := NewSQ(nil, g, l)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrConfig) {
			t.Errorf("%s: NewSQ(%+v, %+v) = %v", c.name, g, l, err)
		}
	}
	small := Geometry{Base: qBase, Size: hw.RxeQueueHeaderSize + 4*32, Slots: 4, Log2ElemSize: 5}
	if _, err := NewCQ(nil, small); !errors.Is(err, ErrConfig) {
		t.Errorf("CQ with 32-byte elements: %v", err)
	}
	if _, err := NewRQ(nil, small, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("RQ with 32-byte elements: %v", err)
	}
	if _, err := NewRQ(nil, good, -1); !errors.Is(err, ErrConfig) {
		t.Errorf("RQ with -1 SGEs: %v", err)
	}
	if _, err := NewRQ(nil, good, 29); err != nil {
		t.Errorf("RQ with 29 SGEs in 512 bytes: %v", err)
	}
	if _, err := NewRQ(nil, good, 30); err == nil {
		t.Errorf("RQ with 30 SGEs in 512 bytes accepted")
	}
}

// TestConsumerIndices: the device fetches what is posted, in order,
// across the wrap, retires in order, and is not fooled by the indices in
// guest memory.
func TestConsumerIndices(t *testing.T) {
	g := sqGeom()
	m := newQueueMem(t, g)
	u := user{m, g}
	q, _ := NewSQ(m, g, sqLim)
	send := func(id uint64) func([]byte) {
		return sendSpec{id: id, opcode: hw.IBVWRSend}.write
	}
	expect := func(id uint64) {
		t.Helper()
		w, ok, err := q.Fetch()
		if !ok || err != nil || w.WR.ID != id {
			t.Fatalf("fetch: %+v %v %v, want wr_id %d", w, ok, err, id)
		}
	}
	none := func() {
		t.Helper()
		if w, ok, err := q.Fetch(); ok || err != nil {
			t.Fatalf("fetched %+v (%v) from an empty queue", w, err)
		}
	}
	none()
	if err := q.Retire(); !errors.Is(err, ErrNotFetched) {
		t.Fatalf("retire on empty: %v", err)
	}
	// Around the ring three times, with up to 7 (slots-1) in flight.
	id := uint64(0)
	for round := range 3 {
		for range 7 {
			u.post(send(id))
			id++
		}
		for i := id - 7; i < id; i++ {
			expect(i)
		}
		none()
		if q.Outstanding() != 7 {
			t.Fatalf("round %d: outstanding %d", round, q.Outstanding())
		}
		for range 7 {
			if err := q.Retire(); err != nil {
				t.Fatal(err)
			}
		}
		if u.cons() != u.prod() {
			t.Fatalf("round %d: consumer_index %d, producer_index %d", round, u.cons(), u.prod())
		}
	}
	// The header's shape is librxe's copy: lies there change nothing.
	m.setU32(g.Base+uint64(hw.RxeQueueLog2ElemSize.Offset), 30)
	m.setU32(g.Base+uint64(hw.RxeQueueIndexMask.Offset), math.MaxUint32)
	// Upper bits in producer_index are masked off.
	p := u.prod()
	u.post(send(100))
	u.post(send(101))
	u.setProd(u.prod() | 0xdead0000)
	expect(100)
	expect(101)
	none()
	// A producer_index moved back below what was fetched makes nothing
	// available; consumer_index in memory is never read back.
	u.setProd(p)
	u.setCons(5)
	none()
	if q.Outstanding() != 2 {
		t.Fatalf("outstanding %d", q.Outstanding())
	}
	q.Retire()
	q.Retire()
	if got, want := u.cons(), (p+2)&7; got != want {
		t.Fatalf("consumer_index %d, want %d", got, want)
	}
	// A producer_index one behind the consumer: a full ring of 7 stale
	// entries, fetched, never more.
	u.setProd((u.cons() - 1) & 7)
	for range 7 {
		if _, ok, _ := q.Fetch(); !ok {
			t.Fatal("stale entries not fetched")
		}
	}
	none()
	// Writes went to consumer_index only.
	for _, w := range m.writes {
		if w.addr != g.Base+uint64(hw.RxeQueueConsumer.Offset) || w.n != 4 {
			t.Fatalf("device wrote [%#x, +%d)", w.addr, w.n)
		}
	}
}

// TestRingFaults: an index or slot the device can not access leaves the
// indices where they were; the queue works again once memory does.
func TestRingFaults(t *testing.T) {
	g := sqGeom()
	m := newQueueMem(t, g)
	u := user{m, g}
	q, _ := NewSQ(m, g, sqLim)
	u.post(sendSpec{id: 1, opcode: hw.IBVWRSend}.write)
	var failAt uint64
	m.fail = func(addr uint64, write bool) bool { return addr == failAt }
	for _, c := range []struct {
		addr uint64
		op   string
	}{
		{g.Base + uint64(hw.RxeQueueProducer.Offset), "load producer_index"},
		{g.SlotAddr(0), "read slot"},
	} {
		failAt = c.addr
		_, ok, err := q.Fetch()
		var re *RingError
		if ok || !errors.As(err, &re) || re.Addr != c.addr || re.Op != c.op || !errors.Is(err, errInjected) {
			t.Fatalf("fetch with %s failing: ok %v err %v", c.op, ok, err)
		}
	}
	failAt = 0
	if w, ok, err := q.Fetch(); !ok || err != nil || w.WR.ID != 1 || w.Slot != 0 {
		t.Fatalf("fetch after the faults: %+v %v %v", w, ok, err)
	}
	failAt = g.Base + uint64(hw.RxeQueueConsumer.Offset)
	if err := q.Retire(); !errors.Is(err, errInjected) || q.Outstanding() != 1 {
		t.Fatalf("retire with consumer_index failing: %v, outstanding %d", err, q.Outstanding())
	}
	failAt = 0
	if err := q.Retire(); err != nil || u.cons() != 1 {
		t.Fatalf("retire: %v, consumer_index %d", err, u.cons())
	}
}

// TestCQ: completions land in order in librxe's format, the device stops
// at full, and consumer_index is masked.
func TestCQ(t *testing.T) {
	g := Geometry{Base: qBase, Size: hw.RxeQueueHeaderSize + 4*64, Slots: 4, Log2ElemSize: 6}
	m := newQueueMem(t, g)
	u := user{m, g}
	cq, err := NewCQ(m, g)
	if err != nil {
		t.Fatal(err)
	}
	// Garbage in the slots: Encode must overwrite every byte of a CQE.
	for i := range m.b {
		if uint64(i)+m.base >= g.SlotAddr(0) {
			m.b[i] = 0xee
		}
	}
	wc := ibrc.WC{WRID: 0x0102030405060708, Status: ibrc.WCSuccess, Opcode: ibrc.WCRecvRDMAImm, ByteLen: 4096,
		Imm: 0xcafef00d, Flags: ibrc.WCWithImm, QPN: 17}
	want := CQEFromWC(wc)
	if want.PortNum != 1 || want.SrcQP != 0 || want.QPNum != 17 || want.Flags != ibrc.WCWithImm|wcGRH {
		t.Fatalf("CQEFromWC: %+v", want)
	}
	for i := range 3 {
		e := want
		e.WRID += uint64(i)
		if err := cq.Push(e); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	if room, err := cq.Room(); err != nil || room != 0 {
		t.Fatalf("room %d %v", room, err)
	}
	if err := cq.Push(want); !errors.Is(err, ErrCQFull) || cq.Producer() != 3 || u.prod() != 3 {
		t.Fatalf("push into a full CQ: %v, producer %d/%d", err, cq.Producer(), u.prod())
	}
	raw := u.m.slot(g, 0)[:hw.RxeCQESize]
	if raw[24] != 0xca || raw[27] != 0x0d || raw[47] != 0 || raw[46] != 1 {
		t.Fatalf("cqe bytes % x", raw)
	}
	for i := range 3 {
		e, ok := u.poll()
		w := want
		w.WRID += uint64(i)
		if !ok || e != w {
			t.Fatalf("poll %d: %+v, want %+v", i, e, w)
		}
	}
	if _, ok := u.poll(); ok {
		t.Fatal("polled a fourth completion")
	}
	// Upper bits of consumer_index are masked; wrap past the end.
	u.setCons(u.cons() | 0xffff0000)
	if room, err := cq.Room(); err != nil || room != 3 {
		t.Fatalf("room %d %v", room, err)
	}
	for i := range 3 {
		if err := cq.Push(CQE{WRID: uint64(10 + i), Status: ibrc.WCWRFlushErr}); err != nil {
			t.Fatalf("push %d after wrap: %v", i, err)
		}
	}
	if cq.Producer() != 2 || u.prod() != 2 {
		t.Fatalf("producer %d/%d after wrap", cq.Producer(), u.prod())
	}
	// A fault on the slot or the index leaves the producer index.
	u.setCons(2)
	m.fail = func(addr uint64, write bool) bool { return write && addr == g.SlotAddr(2) }
	if err := cq.Push(want); !errors.Is(err, errInjected) || cq.Producer() != 2 {
		t.Fatalf("push with the slot failing: %v, producer %d", err, cq.Producer())
	}
	m.fail = func(addr uint64, write bool) bool { return addr == g.Base+uint64(hw.RxeQueueConsumer.Offset) }
	if _, err := cq.Room(); !errors.Is(err, errInjected) {
		t.Fatalf("room with consumer_index failing: %v", err)
	}
	if err := cq.Push(want); !errors.Is(err, errInjected) || cq.Producer() != 2 {
		t.Fatalf("push with consumer_index failing: %v, producer %d", err, cq.Producer())
	}
	m.fail = func(addr uint64, write bool) bool { return addr == g.Base+uint64(hw.RxeQueueProducer.Offset) }
	var re *RingError
	if err := cq.Push(want); !errors.As(err, &re) || re.Op != "store producer_index" || cq.Producer() != 2 || u.prod() != 2 {
		t.Fatalf("push with producer_index failing: %v, producer %d/%d", err, cq.Producer(), u.prod())
	}
	m.fail = nil
	if err := cq.Push(want); err != nil || cq.Producer() != 3 || u.prod() != 3 {
		t.Fatalf("push after the faults: %v, producer %d/%d", err, cq.Producer(), u.prod())
	}
	// The device wrote slots and producer_index only.
	for _, w := range m.writes {
		isSlot := w.addr >= g.SlotAddr(0) && (w.addr-g.SlotAddr(0))%64 == 0 && w.n == hw.RxeCQESize
		if !isSlot && (w.addr != g.Base+uint64(hw.RxeQueueProducer.Offset) || w.n != 4) {
			t.Fatalf("device wrote [%#x, +%d)", w.addr, w.n)
		}
	}
}

// TestOverGuestmem: a guestmem.Stream is a Memory, page crossings and all:
// slots of 1 KiB after the 384-byte header straddle 4 KiB pages.
func TestOverGuestmem(t *testing.T) {
	const iova = 0x100000
	ram := make([]byte, 64<<10)
	gm := guestmem.New()
	if err := gm.MapHost(iova, ram, guestmem.ProtRead|guestmem.ProtWrite, nil); err != nil {
		t.Fatal(err)
	}
	s := gm.NewStream("rxe sq")
	g := Geometry{Base: iova, Size: hw.RxeQueueHeaderSize + 16*1024, Slots: 16, Log2ElemSize: 10}
	q, err := NewSQ(s, g, SendLimits{MaxSGE: 32, MaxInline: 512})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 512)
	for i := range data {
		data[i] = byte(i * 7)
	}
	m := &testMem{t: t, base: iova, b: ram, lo: iova, hi: iova + g.Size}
	u := user{m, g}
	for i := range 15 {
		u.post(sendSpec{id: uint64(i), opcode: hw.IBVWRSend, flags: hw.IBVSendInline, inline: data[:i*30], autoLength: true}.write)
	}
	for i := range 15 {
		w, ok, err := q.Fetch()
		if !ok || err != nil || w.WR.ID != uint64(i) || string(w.WR.Inline) != string(data[:i*30]) {
			t.Fatalf("entry %d: %v %v %+v", i, ok, err, w.WR)
		}
		if err := q.Retire(); err != nil {
			t.Fatal(err)
		}
	}
	if u.cons() != 15 {
		t.Fatalf("consumer_index %d", u.cons())
	}
	// Unmapped memory is a RingError, not a panic.
	gm.Unmap(iova, uint64(len(ram)))
	var re *RingError
	if _, _, err := q.Fetch(); !errors.As(err, &re) {
		t.Fatalf("fetch from unmapped memory: %v", err)
	}
}

// TestErrorText: errors name what failed and where, for the device's log.
func TestErrorText(t *testing.T) {
	re := &RingError{Op: "read slot", Addr: 0x1234, Err: errInjected}
	we := &WQEError{Slot: 3, WRID: 0xbeef, Opcode: 9, Kind: BadOpcode}
	rwe := &WQEError{Slot: 1, WRID: 7, Recv: true, Kind: SGLShort}
	for _, c := range []struct {
		err  error
		want string
	}{
		{re, "rxeq: read slot at 0x1234: injected fault"},
		{we, "rxeq: opcode not implemented (send queue slot 3, wr_id 0xbeef, opcode 9)"},
		{rwe, "rxeq: SGEs shorter than the message (receive queue slot 1, wr_id 0x7, opcode 0)"},
		{Malformed(99), "rxeq: Malformed(99)"},
	} {
		if c.err.Error() != c.want {
			t.Errorf("%q, want %q", c.err.Error(), c.want)
		}
	}
	g := sqGeom()
	q, _ := NewSQ(nil, g, sqLim)
	if q.Geometry() != g {
		t.Fatalf("Geometry() = %+v", q.Geometry())
	}
}

// TestNoAllocation: fetching, retiring and pushing allocate nothing, so the
// datapath adds no garbage per work request.
func TestNoAllocation(t *testing.T) {
	g := sqGeom()
	m := newQueueMem(t, g)
	m.writes = make([]span, 0, 4096)
	u := user{m, g}
	for i := range g.Slots {
		sendSpec{id: uint64(i), opcode: hw.IBVWRSend, sges: []rawSGE{{0x1000, 10, 1}, {0x2000, 20, 2}}, autoLength: true, autoNumS: true}.write(m.slot(g, i))
	}
	q, _ := NewSQ(m, g, sqLim)
	cg := Geometry{Base: 0x40000, Size: hw.RxeQueueHeaderSize + 4*64, Slots: 4, Log2ElemSize: 6}
	cm := newQueueMem(t, cg)
	cm.writes = make([]span, 0, 4096)
	cu := user{cm, cg}
	cq, _ := NewCQ(cm, cg)
	allocs := testing.AllocsPerRun(500, func() {
		u.setProd((u.prod() + 1) & (g.Slots - 1))
		w, ok, err := q.Fetch()
		if !ok || err != nil || len(w.WR.SGL) != 2 {
			t.Fatalf("fetch: %v %v %+v", ok, err, w)
		}
		if err := cq.Push(CQEFromWC(ibrc.WC{WRID: w.WR.ID})); err != nil {
			t.Fatal(err)
		}
		if err := q.Retire(); err != nil {
			t.Fatal(err)
		}
		if _, ok := cu.poll(); !ok {
			t.Fatal("no completion")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per work request", allocs)
	}
}

// BenchmarkSQFetch is the device's cost per send entry with two SGEs:
// producer_index load, slot copy and parse, consumer_index store.
func BenchmarkSQFetch(b *testing.B) {
	g := sqGeom()
	m := newQueueMem(b, g)
	m.writes = make([]span, 0, 1<<20)
	u := user{m, g}
	for i := range g.Slots {
		sendSpec{id: uint64(i), opcode: hw.IBVWRSend, sges: []rawSGE{{0x1000, 10, 1}, {0x2000, 20, 2}}, autoLength: true, autoNumS: true}.write(m.slot(g, i))
	}
	q, _ := NewSQ(m, g, sqLim)
	for b.Loop() {
		u.setProd((u.prod() + 1) & (g.Slots - 1))
		if _, ok, err := q.Fetch(); !ok || err != nil {
			b.Fatal(ok, err)
		}
		q.Retire()
		if len(m.writes) == cap(m.writes) {
			m.writes = m.writes[:0]
		}
	}
}

// TestParseSendUD: a UD QP's entries carry their destination; what the
// port cannot send to, and what UD cannot do, are malformed.
func TestParseSendUD(t *testing.T) {
	gid := [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 0, 15: 2}
	good := hw.RxeAV{NetworkType: hw.RxeNetworkTypeIPv4, DMAC: [6]byte{2, 1, 2, 3, 4, 5}, DGID: gid, SGIDIndex: 3, HopLimit: 9, TrafficClass: 0x10}
	dest := ibrc.UDDest{AV: ibrc.AddressVector{DestMAC: good.DMAC, DGID: gid, HopLimit: 9, TrafficClass: 0x10}, QPN: 0x1234, QKey: 0x80000000}
	with := func(f func(a *hw.RxeAV)) hw.RxeAV { a := good; f(&a); return a }
	for _, c := range []struct {
		name   string
		opcode uint32
		qpn    uint32
		ahNum  uint32
		av     hw.RxeAV
		bad    Malformed
	}{
		{"send", hw.IBVWRSend, 0x1234, 0, good, 0},
		{"send imm", hw.IBVWRSendWithImm, 0x1234, 0, good, 0},
		{"write on UD", hw.IBVWRRDMAWrite, 0x1234, 0, good, BadOpcode},
		{"atomic on UD", hw.IBVWRAtomicFetchAdd, 0x1234, 0, good, BadOpcode},
		{"numbered address handle", hw.IBVWRSend, 0x1234, 7, good, BadAddress},
		{"IPv6 network", hw.IBVWRSend, 0x1234, 0, with(func(a *hw.RxeAV) { a.NetworkType = 2 }), BadAddress},
		{"DGID not IPv4-mapped", hw.IBVWRSend, 0x1234, 0, with(func(a *hw.RxeAV) { a.DGID = [16]byte{0xfe, 0x80, 15: 1} }), BadAddress},
		{"QPN over 24 bits", hw.IBVWRSend, 1 << 24, 0, good, BadAddress},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := sqGeom()
			m := newQueueMem(t, g)
			u := user{m, g}
			lim := sqLim
			lim.UD = true
			q, err := NewSQ(m, g, lim)
			if err != nil {
				t.Fatal(err)
			}
			u.post(func(e []byte) {
				sendSpec{id: 5, opcode: c.opcode, sges: []rawSGE{{0x1000, 8, 1}}, autoLength: true, autoNumS: true}.write(e)
				hw.PutRxeSendUD(e, c.qpn, 0x80000000, c.ahNum, c.av)
			})
			w, ok, err := q.Fetch()
			if !ok || c.bad == 0 && err != nil || c.bad != 0 && !errors.Is(err, c.bad) {
				t.Fatalf("ok %v err %v, want %v", ok, err, c.bad)
			}
			if c.bad == 0 && (w.WR.UD != dest || w.SGIDIndex != 3) {
				t.Fatalf("destination %+v sgid %d, want %+v", w.WR.UD, w.SGIDIndex, dest)
			}
		})
	}
}

// TestParseBindMW: a BIND_MW entry as librxe writes it (ibv_bind_mw for
// type 1, a bind WR for type 2) becomes the window's bind.
func TestParseBindMW(t *testing.T) {
	g := sqGeom()
	m := newQueueMem(t, g)
	u := user{m, g}
	q, err := NewSQ(m, g, sqLim)
	if err != nil {
		t.Fatal(err)
	}
	u.post(func(e []byte) {
		sendSpec{id: 7, opcode: hw.IBVWRBindMW, flags: hw.IBVSendSignaled, numSGE: 99}.write(e)
		hw.RxeSendMWAddr.Put(e, 0x7f00_0000_1000)
		hw.RxeSendMWLength.Put(e, 0x2000)
		hw.RxeSendMWMRLKey.Put(e, 0x100)
		hw.RxeSendMWRKey.Put(e, 0x770011)
		hw.RxeSendMWNewRKey.Put(e, 0x770012)
		hw.RxeSendMWAccess.Put(e, hw.RDMAAccessRemoteWrite|hw.RDMAAccessLocalWrite|1<<20)
	})
	w, ok, err := q.Fetch()
	want := ibrc.SendWR{ID: 7, Opcode: ibrc.WRBindMW, Flags: ibrc.SendSignaled, Bind: ibrc.MWBind{MWRKey: 0x770011, NewRKey: 0x770012,
		MRLKey: 0x100, Addr: 0x7f00_0000_1000, Length: 0x2000, Access: ibrc.AccessRemoteWrite | ibrc.AccessLocalWrite}}
	if !ok || err != nil || !reflect.DeepEqual(norm(w.WR), norm(want)) {
		t.Fatalf("got %+v (%v, %v)\nwant %+v", w.WR, ok, err, want)
	}
}

// TestParseRegMR: a kernel consumer's REG_MR entry (struct npfnic_reg_wr
// in the wr.wr union) becomes the fast registration, whatever its SGE
// count says; its completion's opcode is IB_WC_REG_MR.
func TestParseRegMR(t *testing.T) {
	g := sqGeom()
	m := newQueueMem(t, g)
	u := user{m, g}
	q, err := NewSQ(m, g, sqLim)
	if err != nil {
		t.Fatal(err)
	}
	u.post(func(e []byte) {
		sendSpec{id: 9, opcode: hw.IBWRRegMR, flags: hw.IBVSendSignaled | hw.IBVSendInline, numSGE: 99}.write(e)
		r := e[hw.RxeSendRegOffset:]
		hw.RDMARegWRIOVA.Put(r, 0xffff_8880_0000_0200)
		hw.RDMARegWRLength.Put(r, 0x3000)
		hw.RDMARegWRKey.Put(r, 0x1234_56)
		hw.RDMARegWRAccess.Put(r, hw.RDMAAccessLocalWrite|hw.RDMAAccessRemoteRead)
		hw.RDMARegWRPageShift.Put(r, 12)
		hw.RDMARegWRNPages.Put(r, 4)
	})
	w, ok, err := q.Fetch()
	want := ibrc.SendWR{ID: 9, Opcode: ibrc.WRRegMR, Flags: ibrc.SendSignaled, Reg: ibrc.FastReg{IOVA: 0xffff_8880_0000_0200,
		Length: 0x3000, Key: 0x1234_56, Access: ibrc.AccessLocalWrite | ibrc.AccessRemoteRead, PageShift: 12, NPages: 4}}
	if !ok || err != nil || !reflect.DeepEqual(norm(w.WR), norm(want)) {
		t.Fatalf("got %+v (%v, %v)\nwant %+v", w.WR, ok, err, want)
	}
	if wc := (&WQEError{WRID: 9, Opcode: hw.IBWRRegMR, Kind: BadOpcode}).WC(5); wc.Opcode != ibrc.WCRegMR {
		t.Fatalf("a malformed REG_MR completes as %v", wc.Opcode)
	}
}
