package ibrc_test

import (
	"errors"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
)

// listPages is a fast region's page list as a driver keeps it: the test
// rewrites it between registrations, as map_mr_sg does.
type listPages struct {
	backing ibrc.Memory
	list    []uint64
	calls   int
}

func (l *listPages) Pages(r ibrc.FastReg) (ibrc.Memory, error) {
	l.calls++
	return ibrc.NewPagedMemory(l.backing, r, l.list)
}

const (
	fastIndex = 0x600
	fastIOVA  = 0x7ff0_0000_0800 // an offset of 0x800 into its first page
)

// fastWorld is a connected pair whose B has a fast region of up to 4
// pages, its list three scattered pages of B's memory in reverse order.
func fastWorld(t *testing.T) (*world, *ibrc.FastMR, *listPages) {
	t.Helper()
	w := newWorld(t, opts{retry: 1})
	l := &listPages{backing: w.b.mem, list: []uint64{memBase + 0x5000, memBase + 0x3000, memBase + 0x1000}}
	f, err := w.b.pd.AllocFastMR(l, fastIndex<<8|0x01, 4)
	if err != nil {
		t.Fatal(err)
	}
	return w, f, l
}

// remoteRefused checks that A's 64-byte WRITE at va through key fails
// with REM_ACCESS_ERR, and then brings both QPs back (RESET to RTS): the
// NAK moved them to the error state.
func (w *world) remoteRefused(t *testing.T, what string, va uint64, key uint32) {
	t.Helper()
	if c := w.aWriteAt(t, va, key); c.Status != ibrc.WCRemAccessErr {
		t.Fatalf("%s: %+v", what, c)
	}
	w.reconnect(t)
}

// reconnect brings both QPs of w from whatever state back to RTS.
func (w *world) reconnect(t *testing.T) {
	t.Helper()
	w.settle(time.Second)
	o := opts{retry: 1}
	defaults(&o)
	for _, n := range []*node{w.a, w.b} {
		if err := n.qp.ModifyQP(&ibrc.QPAttr{State: ibrc.StateReset}, ibrc.AttrState); err != nil {
			t.Fatal(err)
		}
	}
	connect(t, w.a, w.b, macB, ipB, 0, 0, o)
	connect(t, w.b, w.a, macA, ipA, 0, 0, o)
}

func regWR(key uint32, length uint64, npages uint32) ibrc.SendWR {
	return ibrc.SendWR{ID: 7, Opcode: ibrc.WRRegMR, Reg: ibrc.FastReg{IOVA: fastIOVA, Length: length, Key: key,
		Access: ibrc.AccessLocalWrite | ibrc.AccessRemoteWrite | ibrc.AccessRemoteRead, PageShift: 12, NPages: npages}}
}

// TestFastRegistration: a REG_MR maps the region's IOVAs onto its page
// list (a WRITE across a page boundary lands in two listed pages), under
// its new key only; LOCAL_INV and a peer's SEND with Invalidate free it,
// and a later registration with another key byte and list works again.
func TestFastRegistration(t *testing.T) {
	w, f, l := fastWorld(t)
	key := uint32(fastIndex<<8 | 0x22)
	if c := w.bPost(t, regWR(key, 3*4096-0x800, 3)); c.Status != ibrc.WCSuccess || c.Opcode != ibrc.WCRegMR {
		t.Fatalf("REG_MR %+v", c)
	}
	if !f.Valid() || f.Key() != key {
		t.Fatalf("after REG_MR: valid %v key %#x", f.Valid(), f.Key())
	}
	// IOVA+0x7f0 is 0x10 before the end of the first page (0x5000's).
	fill(w.a.at(0, 64), 9)
	if c := w.aWriteAt(t, fastIOVA+0x7f0, key); c.Status != ibrc.WCSuccess {
		t.Fatalf("WRITE through the fast region: %+v", c)
	}
	expectBytes(t, "end of the first listed page", w.b.at(0x5ff0, 16), w.a.at(0, 16))
	expectBytes(t, "start of the second listed page", w.b.at(0x3000, 48), w.a.at(16, 48))
	w.remoteRefused(t, "WRITE with the allocation's key", fastIOVA+0x7f0, fastIndex<<8|0x01)
	w.remoteRefused(t, "WRITE across the registration's end", fastIOVA+3*4096-0x800-32, key)

	if c := w.bPost(t, ibrc.SendWR{ID: 8, Opcode: ibrc.WRLocalInv, InvRKey: key}); c.Status != ibrc.WCSuccess || c.Opcode != ibrc.WCLocalInv {
		t.Fatalf("LOCAL_INV %+v", c)
	}
	w.remoteRefused(t, "WRITE after LOCAL_INV", fastIOVA, key)

	// map_mr_sg again: another list, another key byte.
	l.list = []uint64{memBase + 0x8000}
	key2 := uint32(fastIndex<<8 | 0x23)
	if c := w.bPost(t, regWR(key2, 0x800, 1)); c.Status != ibrc.WCSuccess {
		t.Fatalf("second REG_MR %+v", c)
	}
	if c := w.aWriteAt(t, fastIOVA, key2); c.Status != ibrc.WCSuccess {
		t.Fatalf("WRITE after the second REG_MR: %+v", c)
	}
	expectBytes(t, "second registration", w.b.at(0x8800, 64), w.a.at(0, 64))
	w.remoteRefused(t, "WRITE with the first registration's key", fastIOVA, key)

	// The peer invalidates it with its SEND, as nvmet-rdma does.
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 3, SGL: w.b.sge(0xa000, 256)})
	n := len(w.b.rwcs)
	if err := w.a.qp.PostSend(ibrc.SendWR{ID: 4, Opcode: ibrc.WRSendWithInv, InvRKey: key2, SGL: w.a.sge(0, 100)}); err != nil {
		t.Fatal(err)
	}
	w.run(time.Second, func() bool { return len(w.b.rwcs) > n })
	if c := w.b.rwcs[n]; c.Status != ibrc.WCSuccess || c.Flags != ibrc.WCWithInv || c.Imm != key2 {
		t.Fatalf("receive of SEND with Invalidate %+v", c)
	}
	if f.Valid() {
		t.Fatal("region valid after the peer's SEND with Invalidate")
	}
	w.remoteRefused(t, "WRITE after the remote invalidation", fastIOVA, key2)
	f.Dealloc()
	if c := w.bPost(t, regWR(fastIndex<<8|0x24, 0x800, 1)); c.Status != ibrc.WCLocQPOpErr {
		t.Fatalf("REG_MR of a deallocated region %+v", c)
	}
}

// TestFastRegistrationRefused: REG_MRs the rules refuse complete with
// LOC_QP_OP_ERR (the QP then goes to the error state, as rdma_rxe's),
// read no page list and register nothing: once the QPs are back in RTS,
// the key grants nothing.
func TestFastRegistrationRefused(t *testing.T) {
	otherPD := func(t *testing.T, w *world) uint32 {
		l := &listPages{backing: w.b.mem, list: []uint64{memBase}}
		if _, err := w.b.e.CreatePD().AllocFastMR(l, 0x700<<8, 4); err != nil {
			t.Fatal(err)
		}
		return 0x700<<8 | 5
	}
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, w *world) uint32 // returns the key to register, 0: the region's
		wr    func(key uint32) ibrc.SendWR
		lists bool // the page list is read (the refusal comes after)
	}{
		{"no such region", func(*testing.T, *world) uint32 { return 0x999<<8 | 1 }, func(k uint32) ibrc.SendWR { return regWR(k, 0x800, 1) }, false},
		{"another PD's region", otherPD, func(k uint32) ibrc.SendWR { return regWR(k, 0x800, 1) }, false},
		{"more pages than allocated", nil, func(k uint32) ibrc.SendWR { return regWR(k, 0x800, 5) }, false},
		{"no pages", nil, func(k uint32) ibrc.SendWR { return regWR(k, 0x800, 0) }, false},
		{"length past the pages", nil, func(k uint32) ibrc.SendWR { return regWR(k, 0x801, 1) }, false},
		{"zero length", nil, func(k uint32) ibrc.SendWR { return regWR(k, 0, 1) }, false},
		{"page shift 11", nil, func(k uint32) ibrc.SendWR { w := regWR(k, 0x10, 1); w.Reg.PageShift = 11; return w }, false},
		{"page shift 31", nil, func(k uint32) ibrc.SendWR { w := regWR(k, 0x10, 1); w.Reg.PageShift = 31; return w }, false},
		{"remote write without local", nil, func(k uint32) ibrc.SendWR {
			w := regWR(k, 0x800, 1)
			w.Reg.Access = ibrc.AccessRemoteWrite
			return w
		}, false},
		{"unknown access bit", nil, func(k uint32) ibrc.SendWR {
			w := regWR(k, 0x800, 1)
			w.Reg.Access |= 1 << 9
			return w
		}, false},
		{"unaligned page in the list", func(t *testing.T, w *world) uint32 { return 0 }, func(k uint32) ibrc.SendWR { return regWR(k, 0x800, 3) }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, f, l := fastWorld(t)
			key := uint32(fastIndex<<8 | 0x22)
			if c.setup != nil {
				if k := c.setup(t, w); k != 0 {
					key = k
				}
			}
			if c.lists {
				l.list[2] = memBase + 0x1008
			}
			if got := w.bPost(t, c.wr(key)); got.Status != ibrc.WCLocQPOpErr || got.Opcode != ibrc.WCRegMR {
				t.Fatalf("refused REG_MR completed %+v", got)
			}
			if f.Valid() {
				t.Fatal("region registered by a refused REG_MR")
			}
			if !c.lists && l.calls != 0 {
				t.Fatalf("page list read %d times for a REG_MR refused before", l.calls)
			}
			w.reconnect(t)
			w.remoteRefused(t, "WRITE through a refused registration", fastIOVA, key)
		})
	}
	t.Run("registered already", func(t *testing.T) {
		w, _, _ := fastWorld(t)
		w.bPost(t, regWR(fastIndex<<8|0x22, 0x800, 1))
		if c := w.bPost(t, regWR(fastIndex<<8|0x23, 0x800, 1)); c.Status != ibrc.WCLocQPOpErr {
			t.Fatalf("REG_MR of a valid region %+v", c)
		}
	})
	t.Run("LOCAL_INV with a stale key", func(t *testing.T) {
		w, f, _ := fastWorld(t)
		w.bPost(t, regWR(fastIndex<<8|0x22, 0x800, 1))
		if c := w.bPost(t, ibrc.SendWR{ID: 8, Opcode: ibrc.WRLocalInv, InvRKey: fastIndex<<8 | 0x21}); c.Status != ibrc.WCLocQPOpErr {
			t.Fatalf("LOCAL_INV of a stale key %+v", c)
		}
		if !f.Valid() {
			t.Fatal("a refused LOCAL_INV freed the region")
		}
	})
}

// TestPagedMemory: accesses are split at page boundaries onto the list's
// pages; a list with an unaligned page or too few pages is refused.
func TestPagedMemory(t *testing.T) {
	w := newWorld(t, opts{noConnect: true})
	r := ibrc.FastReg{IOVA: 0x10_0000 + 0xf00, Length: 0x1100, PageShift: 12, NPages: 2}
	m, err := ibrc.NewPagedMemory(w.b.mem, r, []uint64{memBase + 0x2000, memBase})
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 0x200)
	fill(src, 3)
	if err := m.WriteAt(r.IOVA, src); err != nil {
		t.Fatal(err)
	}
	expectBytes(t, "first page's tail", w.b.at(0x2f00, 0x100), src[:0x100])
	expectBytes(t, "second page's head", w.b.at(0, 0x100), src[0x100:])
	got := make([]byte, 0x200)
	if err := m.ReadAt(r.IOVA, got); err != nil {
		t.Fatal(err)
	}
	expectBytes(t, "read back", got, src)
	if err := m.ReadAt(r.IOVA+r.Length-1, got[:2]); err == nil {
		t.Fatal("read past the registration's end succeeded")
	}
	for _, c := range []struct {
		name  string
		pages []uint64
	}{
		{"unaligned page", []uint64{memBase + 0x2000, memBase + 0x10}},
		{"too few pages", []uint64{memBase}},
	} {
		if _, err := ibrc.NewPagedMemory(w.b.mem, r, c.pages); !errors.Is(err, ibrc.ErrInvalidArg) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
