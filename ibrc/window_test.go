package ibrc_test

import (
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/clock"
)

// loneQP is one engine whose frames go nowhere but into a list, with one
// QP over a region of simulated memory: a requester with no peer.
type loneQP struct {
	e      *ibrc.Transport
	qp     *ibrc.QP
	mr     *ibrc.MR
	scq    *ibrc.CQ
	frames [][]byte
}

func newLoneQP(t *testing.T, maxUnacked int, mrLen uint64) *loneQP {
	t.Helper()
	l := &loneQP{}
	l.e = ibrc.New(ibrc.Config{Clock: clock.NewVirtual(time.Unix(1700000000, 0)), MAC: macA, IPv4: ipA, MaxUnackedPSNs: maxUnacked,
		Port: ibrc.PortFunc(func(f []byte) error { l.frames = append(l.frames, append([]byte(nil), f...)); return nil })})
	pd := l.e.CreatePD()
	var err error
	if l.mr, err = pd.RegisterMR(ibrctest.NewMem(memBase, 1<<16, 4096), memBase, mrLen, ibrc.AccessLocalWrite|ibrc.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	l.scq, _ = l.e.CreateCQ(64)
	rcq, _ := l.e.CreateCQ(64)
	if l.qp, err = pd.CreateQP(ibrc.QPInit{SendCQ: l.scq, RecvCQ: rcq, Cap: ibrc.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSendInErrWithoutPath: a QP that went to ERR from RESET or INIT never
// had a path MTU; what is posted to it completes flushed and is never
// segmented (it divided by the zero MTU and panicked).
func TestSendInErrWithoutPath(t *testing.T) {
	for _, tc := range []struct {
		name string
		via  []ibrc.QPState
	}{
		{"RESET to ERR", []ibrc.QPState{ibrc.StateErr}},
		{"INIT to ERR", []ibrc.QPState{ibrc.StateInit, ibrc.StateErr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLoneQP(t, 0, 1<<16)
			for _, st := range tc.via {
				a, m := ibrc.QPAttr{State: st}, ibrc.AttrState
				if st == ibrc.StateInit {
					a.PKey, m = 0xffff, m|ibrc.AttrPKey|ibrc.AttrAccessFlags
				}
				if err := l.qp.ModifyQP(&a, m); err != nil {
					t.Fatal(err)
				}
			}
			sge := []ibrc.SGE{{Addr: memBase, Length: 4096, LKey: l.mr.LKey()}}
			for i, op := range []ibrc.WROpcode{ibrc.WRSend, ibrc.WRWrite, ibrc.WRRead} {
				if err := l.qp.PostSend(ibrc.SendWR{ID: uint64(i), Opcode: op, SGL: sge, RKey: 1, RemoteAddr: memBase}); err != nil {
					t.Fatalf("%v: %v", op, err)
				}
			}
			wcs := make([]ibrc.WC, 8)
			if k := l.scq.Poll(wcs); k != 3 {
				t.Fatalf("%d completions, want 3 flushed", k)
			}
			for _, wc := range wcs[:3] {
				if wc.Status != ibrc.WCWRFlushErr {
					t.Errorf("completion %+v: want WR flushed", wc)
				}
			}
			if len(l.frames) != 0 {
				t.Errorf("a QP in ERR sent %d frames", len(l.frames))
			}
		})
	}
}

// TestReadPSNsStayInWindow: a READ takes the PSNs of all its responses at
// once, so it counts against the window by them. Two 2^31-byte READs at
// MTU 256 (2^23 PSNs each) once went out together, and the SEND behind them
// on the first READ's PSN (psnDiff wrapped); now the first asks for one
// window's worth and the rest waits for the responses.
func TestReadPSNsStayInWindow(t *testing.T) {
	const window = 128
	l := newLoneQP(t, window, 1<<32)
	for _, a := range []struct {
		attr ibrc.QPAttr
		mask ibrc.AttrMask
	}{
		{ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff}, ibrc.AttrState | ibrc.AttrPKey | ibrc.AttrAccessFlags},
		{ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: ibrc.MTU256, DestQPN: 0x99, RQPSN: 1, MaxDestRdAtomic: 4,
			AV: ibrc.AddressVector{DestMAC: macB, DGID: rocev2.GIDFromIPv4(ipB)}},
			ibrc.AttrState | ibrc.AttrPathMTU | ibrc.AttrDestQPN | ibrc.AttrRQPSN | ibrc.AttrMaxDestRdAtomic | ibrc.AttrMinRNRTimer | ibrc.AttrAV},
		{ibrc.QPAttr{State: ibrc.StateRTS, SQPSN: 0xfffff0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 8},
			ibrc.AttrState | ibrc.AttrSQPSN | ibrc.AttrTimeout | ibrc.AttrRetryCnt | ibrc.AttrRNRRetry | ibrc.AttrMaxRdAtomic},
	} {
		if err := l.qp.ModifyQP(&a.attr, a.mask); err != nil {
			t.Fatal(err)
		}
	}
	big := []ibrc.SGE{{Addr: memBase, Length: 1<<31 - 1, LKey: l.mr.LKey()}, {Addr: memBase, Length: 1, LKey: l.mr.LKey()}}
	for i, wr := range []ibrc.SendWR{
		{Opcode: ibrc.WRRead, SGL: big[:1], RKey: 7, RemoteAddr: 1 << 40},
		{Opcode: ibrc.WRRead, SGL: big[:1], RKey: 7, RemoteAddr: 1 << 41},
		{Opcode: ibrc.WRSend, SGL: []ibrc.SGE{{Addr: memBase, Length: 8, LKey: l.mr.LKey()}}},
	} {
		wr.ID = uint64(i)
		if err := l.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	dec := rocev2.NewDecoder()
	var taken int
	for _, f := range l.frames {
		p, err := dec.Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		n := 1
		if p.BTH.Opcode == rocev2.OpReadRequest {
			n = int((uint64(p.RETH.DMALength) + 255) / 256)
			t.Logf("READ request PSN %#x, %d bytes (%d PSNs)", p.BTH.PSN, p.RETH.DMALength, n)
		} else {
			t.Logf("%v PSN %#x", p.BTH.Opcode, p.BTH.PSN)
		}
		if want := (0xfffff0 + uint32(taken)) & 0xffffff; p.BTH.PSN != want {
			t.Errorf("%v on PSN %#x, want %#x: PSNs reused", p.BTH.Opcode, p.BTH.PSN, want)
		}
		taken += n
	}
	if taken > window {
		t.Errorf("%d PSNs outstanding, the window is %d", taken, window)
	}
	if len(l.frames) != 1 {
		t.Errorf("%d requests before any response, want the first READ's first part only", len(l.frames))
	}
}

// TestReadLongerThanWindow: a READ of more PSNs than the window is asked
// for part by part, each part answered First..Last by the responder, and
// the data arrives whole, also when the link loses responses and requests
// mid-part; what was posted behind it follows.
func TestReadLongerThanWindow(t *testing.T) {
	for _, tc := range []struct {
		name string
		link ibrctest.LinkConfig
	}{
		{"clean", ibrctest.LinkConfig{}},
		{"lossy", ibrctest.LinkConfig{Filter: func(side int, n uint64, f []byte) ibrctest.Action {
			if n%11 == 5 {
				return ibrctest.Drop
			}
			return ibrctest.Deliver
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, opts{mtu: ibrc.MTU1024, maxUnacked: 8, link: tc.link, retry: 7})
			const sz = 100*1024 + 123 // 101 PSNs: 13 parts of at most 8
			fill(w.b.at(1<<20, sz), 5)
			fill(w.a.at(0, 64), 6)
			w.b.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: w.b.sge(3<<20, 64)})
			for _, wr := range []ibrc.SendWR{
				{ID: 1, Opcode: ibrc.WRRead, Flags: ibrc.SendSignaled, SGL: w.a.sge(2<<20, sz), RemoteAddr: memBase + 1<<20, RKey: w.b.mr.RKey()},
				{ID: 2, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 64)},
			} {
				if err := w.a.qp.PostSend(wr); err != nil {
					t.Fatal(err)
				}
			}
			w.run(10*time.Second, func() bool { return len(w.a.wcs) == 2 && len(w.b.rwcs) == 1 })
			for i, c := range w.a.wcs {
				if c.Status != ibrc.WCSuccess || c.WRID != uint64(i+1) {
					t.Fatalf("completion %d: %+v", i, c)
				}
			}
			expectBytes(t, "READ in parts", w.a.at(2<<20, sz), w.b.at(1<<20, sz))
			expectBytes(t, "SEND behind it", w.b.at(3<<20, 64), w.a.at(0, 64))
			t.Logf("A: %+v", w.a.e.Stats())
		})
	}
}
