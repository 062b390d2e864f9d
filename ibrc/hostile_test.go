package ibrc_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/internal/fuzzseed"
)

// go's fuzz workers die silently; keep what the runtime says (ci/fuzz.sh).
func init() { fuzzseed.KeepCrashOutput() }

const peerQPN = 0x99

// victim is one engine whose QP is connected to a peer that exists only as
// the frames a test crafts; everything the engine sends is collected.
type victim struct {
	e    *ibrc.Transport
	qp   *ibrc.QP
	mr   *ibrc.MR
	mem  *ibrctest.Mem // the region's memory, unless victimOpts.mem replaced it
	out  [][]byte
	path rocev2.Path // from the peer to the victim
	cq   *ibrc.CQ
	clk  *clock.Virtual // nil: the engine runs on the real clock
	dec  *rocev2.Decoder
}

// victimOpts shape a victim; the zero value is what the hostile-packet
// tests use: MTU 1024, a 1 MiB region, the real clock.
type victimOpts struct {
	mtu     ibrc.MTU
	memSize int
	// virtual runs the engine on a clock.Virtual that only the test
	// advances (victim.clk): no timer goroutines, and retransmissions and
	// RNR waits happen when the test steps the clock.
	virtual bool
	// retry and rnrRetry are the QP's retry counts (7: the hostile-packet
	// tests' value, and for rnrRetry retry forever).
	retry, rnrRetry uint8
	// mem is the region's memory (memSize bytes at memBase); nil: ibrctest.
	mem ibrc.Memory
	// port takes what the engine sends instead of victim.out.
	port ibrc.Port
	// pager takes the page requests; nil: they never complete.
	pager ibrc.PageRequester
	// minAck is the engine's floor on the local ACK timer.
	minAck time.Duration
}

func newVictim(t testing.TB) *victim { return newVictimWith(t, victimOpts{}) }

func newVictimWith(t testing.TB, o victimOpts) *victim {
	if o.mtu == 0 {
		o.mtu = ibrc.MTU1024
	}
	if o.memSize == 0 {
		o.memSize = 1 << 20
	}
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnrRetry == 0 {
		o.rnrRetry = 7
	}
	v := &victim{dec: rocev2.NewDecoder()}
	if o.port == nil {
		o.port = ibrc.PortFunc(func(f []byte) error { v.out = append(v.out, f); return nil })
	}
	if o.pager == nil {
		o.pager = ibrc.PageRequesterFunc(func(r ibrc.PageRequest, done func(bool)) {})
	}
	cfg := ibrc.Config{Port: o.port, MAC: macB, IPv4: ipB, Pager: o.pager, MinAckTimeout: o.minAck}
	if o.virtual {
		v.clk = clock.NewVirtual(time.Unix(1700000000, 0))
		cfg.Clock = v.clk
	}
	v.e = ibrc.New(cfg)
	pd := v.e.CreatePD()
	if o.mem == nil {
		v.mem = ibrctest.NewMem(memBase, o.memSize, 4096)
		o.mem = v.mem
	}
	v.mr, _ = pd.RegisterMR(o.mem, memBase, uint64(o.memSize), ibrc.AccessLocalWrite|ibrc.AccessRemoteWrite|ibrc.AccessRemoteRead)
	v.cq, _ = v.e.CreateCQ(64)
	v.qp, _ = pd.CreateQP(ibrc.QPInit{SendCQ: v.cq, RecvCQ: v.cq, Cap: ibrc.QPCap{MaxSendWR: 16, MaxRecvWR: 16}})
	steps := []struct {
		a ibrc.QPAttr
		m ibrc.AttrMask
	}{
		{ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff, AccessFlags: ibrc.AccessRemoteWrite | ibrc.AccessRemoteRead}, ibrc.AttrState | ibrc.AttrPKey | ibrc.AttrAccessFlags},
		{ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: o.mtu, DestQPN: peerQPN, RQPSN: 1000, MaxDestRdAtomic: 4, MinRNRTimer: 7,
			AV: ibrc.AddressVector{DestMAC: macA, DGID: rocev2.GIDFromIPv4(ipA)}},
			ibrc.AttrState | ibrc.AttrPathMTU | ibrc.AttrDestQPN | ibrc.AttrRQPSN | ibrc.AttrMaxDestRdAtomic | ibrc.AttrMinRNRTimer | ibrc.AttrAV},
		{ibrc.QPAttr{State: ibrc.StateRTS, Timeout: 14, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: 4, SQPSN: 5},
			ibrc.AttrState | ibrc.AttrSQPSN | ibrc.AttrTimeout | ibrc.AttrRetryCnt | ibrc.AttrRNRRetry | ibrc.AttrMaxRdAtomic},
	}
	for _, s := range steps {
		if err := v.qp.ModifyQP(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ {
		v.qp.PostRecv(ibrc.RecvWR{ID: uint64(i), SGL: []ibrc.SGE{{Addr: memBase, Length: 4096, LKey: v.mr.LKey()}}})
	}
	v.path = rocev2.Path{SrcMAC: macA, DstMAC: macB, SrcIP: ipA, DstIP: ipB, SrcPort: 0xc001}
	return v
}

func (v *victim) frame(op rocev2.Opcode, psn uint32, payload []byte, mod func(h *rocev2.Headers)) []byte {
	h := &rocev2.Headers{BTH: rocev2.BTH{Opcode: op, PKey: 0xffff, DestQP: v.qp.Num(), PSN: psn, AckReq: true},
		RETH: rocev2.RETH{VA: memBase, RKey: v.mr.RKey(), DMALength: uint32(len(payload))}}
	if mod != nil {
		mod(h)
	}
	return rocev2.AppendFrame(nil, &v.path, h, payload)
}

// responses decodes what the engine sent since the last call.
func (v *victim) responses(t testing.TB) []rocev2.Packet {
	var out []rocev2.Packet
	for _, f := range v.out {
		p, err := v.dec.Decode(f)
		if err != nil {
			t.Fatalf("engine sent an undecodable frame: %v", err)
		}
		if p.BTH.DestQP != peerQPN || p.DstIP4() != ipA {
			t.Fatalf("engine answered the wrong peer: %+v", p.BTH)
		}
		out = append(out, *p)
	}
	v.out = nil
	return out
}

// TestHostilePackets feeds one crafted frame each and checks the answer: a
// specific NAK, an ACK, or silence.
func TestHostilePackets(t *testing.T) {
	type answer struct {
		drop bool // no response at all
		syn  rocev2.Syndrome
		psn  uint32
		err  bool // QP ends in ERR
	}
	nak := func(code uint8) rocev2.Syndrome { return rocev2.NAKSyndrome(code) }
	ack := rocev2.ACKSyndrome(rocev2.CreditsInvalid)
	mtu := make([]byte, 1024)
	cases := []struct {
		name  string
		frame func(v *victim) []byte
		want  answer
	}{
		{"in-sequence SEND only", func(v *victim) []byte { return v.frame(rocev2.OpSendOnly, 1000, []byte("hi"), nil) }, answer{syn: ack, psn: 1000}},
		{"truncated frame", func(v *victim) []byte { return v.frame(rocev2.OpSendOnly, 1000, []byte("hi"), nil)[:50] }, answer{drop: true}},
		{"IP length beyond frame", func(v *victim) []byte {
			f := v.frame(rocev2.OpSendOnly, 1000, []byte("hi"), nil)
			binary.BigEndian.PutUint16(f[16:], 1500)
			return f
		}, answer{drop: true}},
		{"UDP length wrong", func(v *victim) []byte {
			f := v.frame(rocev2.OpSendOnly, 1000, []byte("hi"), nil)
			binary.BigEndian.PutUint16(f[38:], 9)
			return f
		}, answer{drop: true}},
		{"bad ICRC", func(v *victim) []byte {
			f := v.frame(rocev2.OpSendOnly, 1000, []byte("hi"), nil)
			f[len(f)-1] ^= 0xff
			return f
		}, answer{drop: true}},
		{"PSN far ahead", func(v *victim) []byte { return v.frame(rocev2.OpSendOnly, 1000+1<<22, []byte("hi"), nil) }, answer{syn: nak(rocev2.NAKPSNSeqError), psn: 1000}},
		{"PSN far behind (duplicate region)", func(v *victim) []byte { return v.frame(rocev2.OpSendOnly, (1000-1<<22)&0xffffff, []byte("hi"), nil) }, answer{syn: ack, psn: 999}},
		{"R_Key mismatch", func(v *victim) []byte {
			return v.frame(rocev2.OpWriteOnly, 1000, []byte("data"), func(h *rocev2.Headers) { h.RETH.RKey ^= 0x100 })
		}, answer{syn: nak(rocev2.NAKRemoteAccess), psn: 1000, err: true}},
		{"WRITE beyond region", func(v *victim) []byte {
			return v.frame(rocev2.OpWriteOnly, 1000, []byte("data"), func(h *rocev2.Headers) { h.RETH.VA = memBase + 1<<20 - 2 })
		}, answer{syn: nak(rocev2.NAKRemoteAccess), psn: 1000, err: true}},
		{"WRITE VA wraps around", func(v *victim) []byte {
			return v.frame(rocev2.OpWriteOnly, 1000, []byte("data"), func(h *rocev2.Headers) { h.RETH.VA = ^uint64(1) })
		}, answer{syn: nak(rocev2.NAKRemoteAccess), psn: 1000, err: true}},
		{"WRITE length disagrees with RETH", func(v *victim) []byte {
			return v.frame(rocev2.OpWriteOnly, 1000, []byte("data"), func(h *rocev2.Headers) { h.RETH.DMALength = 100 })
		}, answer{syn: nak(rocev2.NAKInvalidRequest), psn: 1000, err: true}},
		{"oversized RDMA READ", func(v *victim) []byte {
			return v.frame(rocev2.OpReadRequest, 1000, nil, func(h *rocev2.Headers) { h.RETH.DMALength = 0x80000001 })
		}, answer{syn: nak(rocev2.NAKInvalidRequest), psn: 1000, err: true}},
		{"RDMA READ beyond region", func(v *victim) []byte {
			return v.frame(rocev2.OpReadRequest, 1000, nil, func(h *rocev2.Headers) { h.RETH.DMALength = 2 << 20 })
		}, answer{syn: nak(rocev2.NAKRemoteAccess), psn: 1000, err: true}},
		{"RDMA READ carrying payload", func(v *victim) []byte {
			f := v.frame(rocev2.OpReadRequest, 1000, nil, nil)
			return rocev2.AppendFrame(nil, &v.path, &rocev2.Headers{BTH: rocev2.BTH{Opcode: rocev2.OpReadRequest, PKey: 0xffff, DestQP: v.qp.Num(), PSN: 1000},
				RETH: rocev2.RETH{VA: memBase, RKey: v.mr.RKey(), DMALength: 4}}, f[:8])
		}, answer{syn: nak(rocev2.NAKInvalidRequest), psn: 1000, err: true}},
		{"SEND middle without first", func(v *victim) []byte { return v.frame(rocev2.OpSendMiddle, 1000, mtu, nil) }, answer{syn: nak(rocev2.NAKInvalidRequest), psn: 1000, err: true}},
		{"SEND first shorter than MTU", func(v *victim) []byte { return v.frame(rocev2.OpSendFirst, 1000, mtu[:100], nil) }, answer{syn: nak(rocev2.NAKInvalidRequest), psn: 1000, err: true}},
		{"SEND only longer than MTU", func(v *victim) []byte { return v.frame(rocev2.OpSendOnly, 1000, append(mtu, 1), nil) }, answer{syn: nak(rocev2.NAKInvalidRequest), psn: 1000, err: true}},
		{"SEND longer than the receive buffer", func(v *victim) []byte {
			v.e.HandleFrame(v.frame(rocev2.OpSendFirst, 1000, mtu, nil))
			v.e.HandleFrame(v.frame(rocev2.OpSendMiddle, 1001, mtu, nil))
			v.e.HandleFrame(v.frame(rocev2.OpSendMiddle, 1002, mtu, nil))
			v.e.HandleFrame(v.frame(rocev2.OpSendMiddle, 1003, mtu, nil))
			v.out = nil
			return v.frame(rocev2.OpSendLast, 1004, []byte{1}, nil)
		}, answer{syn: nak(rocev2.NAKInvalidRequest), psn: 1004, err: true}},
		{"atomic compare-and-swap", func(v *victim) []byte { return v.frame(rocev2.OpCompareSwap, 1000, nil, nil) }, answer{syn: nak(rocev2.NAKInvalidRequest), psn: 1000, err: true}},
		{"SEND with invalidate", func(v *victim) []byte { return v.frame(rocev2.OpSendOnlyInv, 1000, []byte("x"), nil) }, answer{syn: nak(rocev2.NAKInvalidRequest), psn: 1000, err: true}},
		{"wrong source address", func(v *victim) []byte {
			v.path.SrcIP = [4]byte{192, 0, 2, 99}
			return v.frame(rocev2.OpSendOnly, 1000, []byte("hi"), nil)
		}, answer{drop: true}},
		{"wrong destination address", func(v *victim) []byte {
			v.path.DstIP = [4]byte{192, 0, 2, 99}
			return v.frame(rocev2.OpSendOnly, 1000, []byte("hi"), nil)
		}, answer{drop: true}},
		{"unknown QP", func(v *victim) []byte {
			return v.frame(rocev2.OpSendOnly, 1000, []byte("hi"), func(h *rocev2.Headers) { h.BTH.DestQP = 0x7777 })
		}, answer{drop: true}},
		{"P_Key mismatch", func(v *victim) []byte {
			return v.frame(rocev2.OpSendOnly, 1000, []byte("hi"), func(h *rocev2.Headers) { h.BTH.PKey = 0x8001 })
		}, answer{drop: true}},
		{"UD opcode", func(v *victim) []byte { return v.frame(0x64, 1000, []byte("hi"), nil) }, answer{drop: true}},
		{"ACK for a PSN never sent", func(v *victim) []byte {
			return v.frame(rocev2.OpAck, 500, nil, func(h *rocev2.Headers) { h.AETH.Syndrome = ack })
		}, answer{drop: true}},
		{"READ response nobody asked for", func(v *victim) []byte { return v.frame(rocev2.OpReadRespOnly, 4, []byte("x"), nil) }, answer{drop: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := newVictim(t)
			v.e.HandleFrame(tc.frame(v))
			got := v.responses(t)
			if tc.want.drop {
				if len(got) != 0 {
					t.Fatalf("answered %v %v, want silence", got[0].BTH.Opcode, got[0].AETH.Syndrome)
				}
			} else {
				if len(got) != 1 || got[0].BTH.Opcode != rocev2.OpAck {
					t.Fatalf("%d responses, want one ACK/NAK", len(got))
				}
				if got[0].AETH.Syndrome != tc.want.syn || got[0].BTH.PSN != tc.want.psn {
					t.Fatalf("answered %v PSN %d, want %v PSN %d", got[0].AETH.Syndrome, got[0].BTH.PSN, tc.want.syn, tc.want.psn)
				}
			}
			if st := v.qp.Query().State; (st == ibrc.StateErr) != tc.want.err {
				t.Fatalf("QP state %v", st)
			}
		})
	}
}

// TestSeqNakOnce: after a PSN sequence error NAK, further out-of-sequence
// packets are dropped silently until the expected PSN arrives.
func TestSeqNakOnce(t *testing.T) {
	v := newVictim(t)
	for i := 0; i < 5; i++ {
		v.e.HandleFrame(v.frame(rocev2.OpSendOnly, 1001+uint32(i), []byte("x"), nil))
	}
	if got := v.responses(t); len(got) != 1 || !got[0].AETH.Syndrome.IsNAK() {
		t.Fatalf("%d responses to 5 out-of-sequence packets", len(got))
	}
	v.e.HandleFrame(v.frame(rocev2.OpSendOnly, 1000, []byte("x"), nil))
	v.e.HandleFrame(v.frame(rocev2.OpSendOnly, 1002, []byte("x"), nil))
	got := v.responses(t)
	if len(got) != 2 || !got[0].AETH.Syndrome.IsACK() || !got[1].AETH.Syndrome.IsNAK() || got[1].BTH.PSN != 1001 {
		t.Fatalf("after the expected PSN: %+v", got)
	}
}

// fixup makes a fuzzed frame pass the length, checksum and ICRC checks so
// the fuzzer reaches the transport.
func fixup(f []byte) []byte {
	if len(f) < 14+20+8+16 || f[12] != 8 || f[13] != 0 || f[14]>>4 != 4 {
		return nil
	}
	g := append([]byte(nil), f...)
	g[14] = 0x45
	n := len(g) - 14
	binary.BigEndian.PutUint16(g[16:], uint16(n))
	g[20], g[21] = g[20]&^0x3f, 0 // no fragments
	g[23] = 17
	binary.BigEndian.PutUint16(g[36:], rocev2.UDPPort)
	binary.BigEndian.PutUint16(g[38:], uint16(n-20))
	g[24], g[25] = 0, 0
	var s uint32
	for i := 14; i < 34; i += 2 {
		s += uint32(g[i])<<8 | uint32(g[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	binary.BigEndian.PutUint16(g[24:], ^uint16(s))
	if rocev2.FixICRC(g) != nil {
		return nil
	}
	return g
}

// FuzzHandleFrame feeds arbitrary frames (as they are and with lengths,
// checksum and ICRC repaired) to a connected responder/requester, then
// lets the victim's timers run (retransmissions, RNR waits). It must never
// panic, every frame it sends must decode and go to its peer, and the QP
// must stay in RTS or ERR.
//
// Each input gets a fresh victim on a virtual clock, with a 256-byte MTU,
// a 16 KiB region and two retries: on the real clock every input left retransmission
// timers behind that fired into dead victims on other goroutines for
// hundreds of milliseconds, and MTU-sized seeds four times as long made
// the fuzzer's minimizer (quadratic in input length) slower still.
func FuzzHandleFrame(f *testing.F) {
	v := newFuzzVictim(f)
	mtu := make([]byte, ibrc.MTU256.Bytes())
	seeds := [][]byte{
		v.frame(rocev2.OpSendOnly, 1000, []byte("hi"), nil),
		v.frame(rocev2.OpSendFirst, 1000, mtu, nil),
		v.frame(rocev2.OpSendLastImm, 1001, []byte("x"), nil),
		v.frame(rocev2.OpWriteFirst, 1000, mtu, func(h *rocev2.Headers) { h.RETH.DMALength = 750 }),
		v.frame(rocev2.OpWriteOnlyImm, 1000, []byte("abcd"), nil),
		v.frame(rocev2.OpReadRequest, 1000, nil, func(h *rocev2.Headers) { h.RETH.DMALength = 1200 }),
		v.frame(rocev2.OpAck, 4, nil, func(h *rocev2.Headers) { h.AETH.Syndrome = rocev2.RNRNAKSyndrome(3) }),
		v.frame(rocev2.OpAck, 6, nil, func(h *rocev2.Headers) { h.AETH.Syndrome = rocev2.NAKSyndrome(rocev2.NAKPSNSeqError) }),
		v.frame(rocev2.OpReadRespFirst, 5, mtu, nil),
		v.frame(rocev2.OpCompareSwap, 1000, nil, nil),
	}
	for _, s := range seeds {
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, frame []byte, mode uint8) {
		v := newFuzzVictim(t)
		// Give the requester something outstanding so responses matter:
		// a READ of three MTUs, then a SEND of three packets.
		v.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRRead, SGL: []ibrc.SGE{{Addr: memBase + 8192, Length: 750, LKey: v.mr.LKey()}},
			RemoteAddr: 0x1000, RKey: 1})
		v.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRSend, SGL: []ibrc.SGE{{Addr: memBase, Length: 625, LKey: v.mr.LKey()}}})
		v.out = nil
		v.e.HandleFrame(frame)
		if g := fixup(frame); g != nil {
			if mode&1 != 0 {
				// Aim at the QP from the right peer.
				copy(g[26:30], ipA[:])
				copy(g[30:34], ipB[:])
				if len(g) > 14+20+8+8 {
					g[14+20+8+5], g[14+20+8+6], g[14+20+8+7] = 0, byte(v.qp.Num()>>8), byte(v.qp.Num())
				}
				g = fixup(g)
			}
			if g != nil {
				v.e.HandleFrame(g)
				v.e.HandleFrame(g) // and its duplicate
			}
		}
		v.responses(t)
		if st := v.qp.Query().State; st != ibrc.StateRTS && st != ibrc.StateErr {
			t.Fatalf("QP in %v", st)
		}
		// Two retries end in ERR after three timeouts; the bound is for
		// what else a frame may have scheduled.
		for i := 0; i < 32 && v.clk.Step(); i++ {
		}
		v.responses(t)
		if st := v.qp.Query().State; st != ibrc.StateRTS && st != ibrc.StateErr {
			t.Fatalf("QP in %v after its timers ran", st)
		}
	})
}

// newFuzzVictim is FuzzHandleFrame's victim.
func newFuzzVictim(t testing.TB) *victim {
	return newVictimWith(t, victimOpts{mtu: ibrc.MTU256, memSize: 16 << 10, virtual: true, retry: 2, rnrRetry: 2})
}
