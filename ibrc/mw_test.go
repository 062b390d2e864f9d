package ibrc_test

import (
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
)

// mwWorld is a connected pair whose B has a region that windows may be
// bound to and a window of type typ (R_Key 0x7700 | 0x11).
func mwWorld(t *testing.T, typ ibrc.MWType) (*world, *ibrc.MR, *ibrc.MW) {
	t.Helper()
	w := newWorld(t, opts{retry: 1})
	mr, err := w.b.pd.RegisterMR(w.b.mem, memBase, memSize, ibrc.AccessLocalWrite|ibrc.AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := w.b.pd.AllocMW(typ, 0x7700<<8|0x11)
	if err != nil {
		t.Fatal(err)
	}
	return w, mr, mw
}

// bPost posts a WR on B's QP and waits for its completion.
func (w *world) bPost(t *testing.T, wr ibrc.SendWR) ibrc.WC {
	t.Helper()
	wr.Flags |= ibrc.SendSignaled
	n := len(w.b.wcs)
	if err := w.b.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	w.run(time.Second, func() bool { return len(w.b.wcs) > n })
	return w.b.wcs[n]
}

// aWrite has A write 64 bytes to B at off through rkey and returns the
// completion.
func (w *world) aWrite(t *testing.T, off uint64, rkey uint32) ibrc.WC {
	t.Helper()
	return w.aWriteAt(t, memBase+off, rkey)
}

// aWriteAt has A write 64 bytes to B's va through rkey.
func (w *world) aWriteAt(t *testing.T, va uint64, rkey uint32) ibrc.WC {
	t.Helper()
	n := len(w.a.wcs)
	if err := w.a.qp.PostSend(ibrc.SendWR{ID: 99, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 64),
		RemoteAddr: va, RKey: rkey}); err != nil {
		t.Fatal(err)
	}
	w.run(time.Second, func() bool { return len(w.a.wcs) > n })
	return w.a.wcs[n]
}

// TestMemoryWindows: a bound window lets the peer write in its range
// only, under its new R_Key; unbinding (type 1 with length 0, LOCAL_INV,
// a SEND with Invalidate, deallocation) takes that away; a bad bind
// fails with MW_BIND_ERR.
func TestMemoryWindows(t *testing.T) {
	bindWR := func(mw *ibrc.MW, mr *ibrc.MR, key byte, addr, length uint64) ibrc.SendWR {
		return ibrc.SendWR{ID: 1, Opcode: ibrc.WRBindMW, Bind: ibrc.MWBind{MWRKey: mw.RKey(), NewRKey: uint32(key), MRLKey: mr.LKey(),
			Addr: memBase + addr, Length: length, Access: ibrc.AccessRemoteWrite | ibrc.AccessLocalWrite}}
	}
	t.Run("type 1", func(t *testing.T) {
		w, mr, mw := mwWorld(t, ibrc.MWType1)
		if c := w.bPost(t, bindWR(mw, mr, 0x22, 0x1000, 0x1000)); c.Status != ibrc.WCSuccess || c.Opcode != ibrc.WCBindMW {
			t.Fatalf("bind %+v", c)
		}
		rkey := mw.RKey()
		if rkey != 0x7700<<8|0x22 {
			t.Fatalf("R_Key after the bind %#x", rkey)
		}
		fill(w.a.at(0, 64), 5)
		if c := w.aWrite(t, 0x1000, rkey); c.Status != ibrc.WCSuccess {
			t.Fatalf("WRITE through the window: %+v", c)
		}
		expectBytes(t, "through the window", w.b.at(0x1000, 64), w.a.at(0, 64))
		if c := w.bPost(t, bindWR(mw, mr, 0x33, 0, 0)); c.Status != ibrc.WCSuccess {
			t.Fatalf("unbind %+v", c)
		}
		if c := w.aWrite(t, 0x1000, mw.RKey()); c.Status != ibrc.WCRemAccessErr {
			t.Fatalf("WRITE through an unbound window: %+v", c)
		}
	})
	t.Run("outside the window", func(t *testing.T) {
		w, mr, mw := mwWorld(t, ibrc.MWType1)
		w.bPost(t, bindWR(mw, mr, 0x22, 0x1000, 0x1000))
		if c := w.aWrite(t, 0x1fe0, mw.RKey()); c.Status != ibrc.WCRemAccessErr {
			t.Fatalf("WRITE across the window's end: %+v", c)
		}
	})
	t.Run("old R_Key after a rebind", func(t *testing.T) {
		w, mr, mw := mwWorld(t, ibrc.MWType1)
		w.bPost(t, bindWR(mw, mr, 0x22, 0x1000, 0x1000))
		old := mw.RKey()
		w.bPost(t, bindWR(mw, mr, 0x44, 0x1000, 0x1000))
		if c := w.aWrite(t, 0x1000, old); c.Status != ibrc.WCRemAccessErr {
			t.Fatalf("WRITE with the R_Key before the rebind: %+v", c)
		}
	})
	for _, c := range []struct {
		name string
		inv  func(t *testing.T, w *world, mw *ibrc.MW)
	}{
		{"type 2 LOCAL_INV", func(t *testing.T, w *world, mw *ibrc.MW) {
			if c := w.bPost(t, ibrc.SendWR{ID: 2, Opcode: ibrc.WRLocalInv, InvRKey: mw.RKey()}); c.Status != ibrc.WCSuccess || c.Opcode != ibrc.WCLocalInv {
				t.Fatalf("LOCAL_INV %+v", c)
			}
		}},
		{"type 2 SEND with Invalidate", func(t *testing.T, w *world, mw *ibrc.MW) {
			w.b.qp.PostRecv(ibrc.RecvWR{ID: 3, SGL: w.b.sge(0x8000, 256)})
			n := len(w.b.rwcs)
			if err := w.a.qp.PostSend(ibrc.SendWR{ID: 4, Opcode: ibrc.WRSendWithInv, InvRKey: mw.RKey(), SGL: w.a.sge(0, 100)}); err != nil {
				t.Fatal(err)
			}
			w.run(time.Second, func() bool { return len(w.b.rwcs) > n })
			if c := w.b.rwcs[n]; c.Status != ibrc.WCSuccess || c.Flags != ibrc.WCWithInv || c.Imm != mw.RKey() || c.ByteLen != 100 {
				t.Fatalf("receive of SEND with Invalidate %+v", c)
			}
		}},
		{"type 2 deallocated", func(t *testing.T, w *world, mw *ibrc.MW) { mw.Dealloc() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, mr, mw := mwWorld(t, ibrc.MWType2)
			if c := w.bPost(t, bindWR(mw, mr, 0x55, 0x2000, 0x2000)); c.Status != ibrc.WCSuccess {
				t.Fatalf("bind %+v", c)
			}
			if c := w.aWrite(t, 0x2000, mw.RKey()); c.Status != ibrc.WCSuccess {
				t.Fatalf("WRITE through the window: %+v", c)
			}
			c.inv(t, w, mw)
			if c := w.aWrite(t, 0x2000, mw.RKey()); c.Status != ibrc.WCRemAccessErr {
				t.Fatalf("WRITE after invalidation: %+v", c)
			}
		})
	}
	for _, c := range []struct {
		name string
		typ  ibrc.MWType
		wr   func(w *world, mr *ibrc.MR, mw *ibrc.MW) ibrc.SendWR
	}{
		{"region without MW_BIND", ibrc.MWType1, func(w *world, _ *ibrc.MR, mw *ibrc.MW) ibrc.SendWR { return bindWR(mw, w.b.mr, 1, 0, 64) }},
		{"past the region", ibrc.MWType1, func(w *world, mr *ibrc.MR, mw *ibrc.MW) ibrc.SendWR { return bindWR(mw, mr, 1, memSize-32, 64) }},
		{"type 2 to nothing", ibrc.MWType2, func(w *world, mr *ibrc.MR, mw *ibrc.MW) ibrc.SendWR { return bindWR(mw, mr, 1, 0, 0) }},
		{"stale window R_Key", ibrc.MWType1, func(w *world, mr *ibrc.MR, mw *ibrc.MW) ibrc.SendWR {
			wr := bindWR(mw, mr, 1, 0, 64)
			wr.Bind.MWRKey ^= 0xff
			return wr
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, mr, mw := mwWorld(t, c.typ)
			if got := w.bPost(t, c.wr(w, mr, mw)); got.Status != ibrc.WCMWBindErr {
				t.Fatalf("bind %+v, want MW_BIND_ERR", got)
			}
			if st := w.b.qp.Query().State; st != ibrc.StateErr {
				t.Fatalf("QP in %v after a failed bind", st)
			}
		})
	}
	t.Run("LOCAL_INV of a type 1 window", func(t *testing.T) {
		w, mr, mw := mwWorld(t, ibrc.MWType1)
		w.bPost(t, bindWR(mw, mr, 0x22, 0x1000, 0x1000))
		if c := w.bPost(t, ibrc.SendWR{Opcode: ibrc.WRLocalInv, InvRKey: mw.RKey()}); c.Status != ibrc.WCLocQPOpErr {
			t.Fatalf("LOCAL_INV of a type 1 window: %+v", c)
		}
	})
}
