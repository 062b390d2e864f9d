package ibrc_test

import (
	"errors"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
)

// TestLocalErrorBehindOutstanding: a WQE whose SGL is bad, posted behind
// WQEs still in flight, completes with LOC_PROT_ERR after them, in order;
// the ones before it succeed and the one after it is flushed.
func TestLocalErrorBehindOutstanding(t *testing.T) {
	w := newWorld(t, opts{})
	rkeyB := w.b.mr.RKey()
	bad := ibrc.SGE{Addr: memBase, Length: 64, LKey: 0xdead00}
	for _, p := range []ibrc.SendWR{
		{ID: 1, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 8000), RemoteAddr: memBase, RKey: rkeyB},
		{ID: 2, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled, SGL: []ibrc.SGE{bad}, RemoteAddr: memBase, RKey: rkeyB},
		{ID: 3, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 10), RemoteAddr: memBase, RKey: rkeyB},
	} {
		if err := w.a.qp.PostSend(p); err != nil {
			t.Fatal(err)
		}
	}
	w.run(time.Second, func() bool { return len(w.a.wcs) == 3 })
	want := []ibrc.WCStatus{ibrc.WCSuccess, ibrc.WCLocProtErr, ibrc.WCWRFlushErr}
	for i, c := range w.a.wcs {
		if c.WRID != uint64(i+1) || c.Status != want[i] {
			t.Errorf("completion %d: %+v, want wr %d %v", i, c, i+1, want[i])
		}
	}
	if s := w.a.qp.Query().State; s != ibrc.StateErr {
		t.Errorf("QP in %v, want ERR", s)
	}
}

// TestNamedObjects: QP numbers and MR keys chosen by the caller (a
// device's driver names them) are refused when taken or out of range.
func TestNamedObjects(t *testing.T) {
	w := newWorld(t, opts{noConnect: true})
	pd := w.a.pd
	init := ibrc.QPInit{SendCQ: w.a.scq, RecvCQ: w.a.rcq, Cap: ibrc.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}
	for _, tc := range []struct {
		num  uint32
		want error
	}{{0, ibrc.ErrInvalidArg}, {1, ibrc.ErrInvalidArg}, {1 << 24, ibrc.ErrInvalidArg}, {0x500, nil}, {0x500, ibrc.ErrResourceInUse}, {w.a.qp.Num(), ibrc.ErrResourceInUse}} {
		q, err := pd.CreateQPNum(tc.num, init)
		if !errors.Is(err, tc.want) || err == nil && q.Num() != tc.num {
			t.Errorf("CreateQPNum(%#x): %v, want %v", tc.num, err, tc.want)
		}
	}
	for _, tc := range []struct {
		key  uint32
		want error
	}{{0, ibrc.ErrInvalidArg}, {0x7701, nil}, {0x7702, nil}, {0x7701, ibrc.ErrResourceInUse}, {w.a.mr.LKey(), ibrc.ErrResourceInUse}} {
		m, err := pd.RegisterMRKey(w.a.mem, tc.key, memBase, 4096, ibrc.AccessLocalWrite)
		if !errors.Is(err, tc.want) || err == nil && m.LKey() != tc.key {
			t.Errorf("RegisterMRKey(%#x): %v, want %v", tc.key, err, tc.want)
		}
	}
	// Keys sharing their upper 24 bits are distinct regions.
	if _, err := pd.RegisterMR(w.a.mem, memBase, 4096, 0); err != nil {
		t.Fatal(err)
	}
}
