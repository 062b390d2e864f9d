package ibrc_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/ibrc/rocev2"
)

const atomicAccess = ibrc.AccessLocalWrite | ibrc.AccessRemoteWrite | ibrc.AccessRemoteRead | ibrc.AccessRemoteAtomic

// atomicWorld is a connected pair whose QPs permit atomics, with a region
// of B's memory registered for them (amr).
func atomicWorld(t *testing.T, o opts) (*world, *ibrc.MR) {
	t.Helper()
	if o.access == 0 {
		o.access = atomicAccess
	}
	w := newWorld(t, o)
	amr, err := w.b.pd.RegisterMR(w.b.mem, memBase, memSize, ibrc.AccessLocalWrite|ibrc.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	return w, amr
}

func (n *node) u64(off uint64) uint64       { return binary.LittleEndian.Uint64(n.at(off, 8)) }
func (n *node) setU64(off uint64, v uint64) { binary.LittleEndian.PutUint64(n.at(off, 8), v) }

func atomicWR(id uint64, op ibrc.WROpcode, local []ibrc.SGE, remote uint64, rkey uint32, cmpAdd, swap uint64) ibrc.SendWR {
	return ibrc.SendWR{ID: id, Opcode: op, Flags: ibrc.SendSignaled, SGL: local, RemoteAddr: remote, RKey: rkey,
		CompareAdd: cmpAdd, Swap: swap}
}

// TestAtomics: CMP_AND_SWP and FETCH_AND_ADD change the remote word as
// the IBA says, return its original value into the local SGL, complete
// with their own opcodes, and are ordered with the SENDs and WRITEs
// around them.
func TestAtomics(t *testing.T) {
	const target, result = 0x1000, 0x2000
	cases := []struct {
		name          string
		op            ibrc.WROpcode
		before        uint64
		cmpAdd, swap  uint64
		after         uint64
		wantOpcode    ibrc.WCOpcode
		surroundLocal bool // a WRITE before and a SEND after the atomic
	}{
		{"cmp_swp equal", ibrc.WRAtomicCmpSwp, 5, 5, 99, 99, ibrc.WCCompSwap, false},
		{"cmp_swp differs", ibrc.WRAtomicCmpSwp, 5, 6, 99, 5, ibrc.WCCompSwap, false},
		{"fetch_add", ibrc.WRAtomicFetchAdd, 40, 2, 0, 42, ibrc.WCFetchAdd, false},
		{"fetch_add wraps", ibrc.WRAtomicFetchAdd, ^uint64(0), 3, 0, 2, ibrc.WCFetchAdd, false},
		{"between a WRITE and a SEND", ibrc.WRAtomicFetchAdd, 1 << 40, 1 << 40, 0, 1 << 41, ibrc.WCFetchAdd, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, amr := atomicWorld(t, opts{})
			w.b.setU64(target, c.before)
			w.a.setU64(result, 0xdeadbeef)
			var posts []ibrc.SendWR
			if c.surroundLocal {
				fill(w.a.at(0x10000, 3000), 3)
				w.b.qp.PostRecv(ibrc.RecvWR{ID: 50, SGL: w.b.sge(0x30000, 4096)})
				posts = append(posts, ibrc.SendWR{ID: 10, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled, SGL: w.a.sge(0x10000, 3000),
					RemoteAddr: memBase + 0x20000, RKey: w.b.mr.RKey()})
			}
			posts = append(posts, atomicWR(1, c.op, w.a.sge(result, 8), memBase+target, amr.RKey(), c.cmpAdd, c.swap))
			if c.surroundLocal {
				posts = append(posts, ibrc.SendWR{ID: 11, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0x10000, 100)})
			}
			for _, p := range posts {
				if err := w.a.qp.PostSend(p); err != nil {
					t.Fatal(err)
				}
			}
			w.run(time.Second, func() bool { return len(w.a.wcs) == len(posts) })
			for i, wc := range w.a.wcs {
				if wc.Status != ibrc.WCSuccess || wc.WRID != posts[i].ID {
					t.Fatalf("completion %d: %+v, want %d successful", i, wc, posts[i].ID)
				}
				if wc.WRID == 1 && (wc.Opcode != c.wantOpcode || wc.ByteLen != ibrc.AtomicSize) {
					t.Fatalf("atomic's completion %+v: want opcode %d, %d bytes", wc, c.wantOpcode, ibrc.AtomicSize)
				}
			}
			if got := w.b.u64(target); got != c.after {
				t.Errorf("remote word %#x, want %#x", got, c.after)
			}
			if got := w.a.u64(result); got != c.before {
				t.Errorf("original value returned %#x, want %#x", got, c.before)
			}
			if c.surroundLocal {
				expectBytes(t, "WRITE before the atomic", w.b.at(0x20000, 3000), w.a.at(0x10000, 3000))
				if len(w.b.rwcs) != 1 || w.b.rwcs[0].ByteLen != 100 {
					t.Fatalf("SEND after the atomic: %+v", w.b.rwcs)
				}
			}
		})
	}
}

// TestAtomicErrors: what the responder refuses ends the requester's WQE
// with the status IBA names, leaves the remote word alone and moves the
// QP to the error state; what PostSend refuses never reaches the wire.
func TestAtomicErrors(t *testing.T) {
	const target, result = 0x1000, 0x2000
	cases := []struct {
		name   string
		access ibrc.Access // QP access flags of both sides
		remote uint64
		rkey   func(w *world, amr *ibrc.MR) uint32
		want   ibrc.WCStatus
	}{
		{"misaligned", atomicAccess, memBase + target + 4, func(_ *world, m *ibrc.MR) uint32 { return m.RKey() }, ibrc.WCRemInvReqErr},
		{"region without remote atomic", atomicAccess, memBase + target, func(w *world, _ *ibrc.MR) uint32 { return w.b.mr.RKey() }, ibrc.WCRemAccessErr},
		{"outside the region", atomicAccess, memBase + memSize, func(_ *world, m *ibrc.MR) uint32 { return m.RKey() }, ibrc.WCRemAccessErr},
		{"unknown key", atomicAccess, memBase + target, func(_ *world, m *ibrc.MR) uint32 { return m.RKey() ^ 0x100 }, ibrc.WCRemAccessErr},
		{"QP without remote atomic", ibrc.AccessLocalWrite | ibrc.AccessRemoteWrite, memBase + target, func(_ *world, m *ibrc.MR) uint32 { return m.RKey() }, ibrc.WCRemInvReqErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, amr := atomicWorld(t, opts{access: c.access})
			w.b.setU64(target, 7)
			if err := w.a.qp.PostSend(atomicWR(1, ibrc.WRAtomicFetchAdd, w.a.sge(result, 8), c.remote, c.rkey(w, amr), 1, 0)); err != nil {
				t.Fatal(err)
			}
			w.run(time.Second, func() bool { return len(w.a.wcs) == 1 })
			if wc := w.a.wcs[0]; wc.Status != c.want || wc.Opcode != ibrc.WCFetchAdd {
				t.Fatalf("completion %+v, want status %v", wc, c.want)
			}
			if got := w.b.u64(target); got != 7 {
				t.Fatalf("remote word changed to %d", got)
			}
			if s := w.a.qp.Query().State; s != ibrc.StateErr {
				t.Fatalf("requester QP in %v, want ERR", s)
			}
		})
	}

	w, amr := atomicWorld(t, opts{})
	for _, sgl := range [][]ibrc.SGE{nil, w.a.sge(result, 4), w.a.sge(result, 16)} {
		err := w.a.qp.PostSend(atomicWR(1, ibrc.WRAtomicCmpSwp, sgl, memBase+target, amr.RKey(), 0, 1))
		if !errors.Is(err, ibrc.ErrInvalidArg) {
			t.Errorf("atomic returning into %d bytes: PostSend %v, want ErrInvalidArg", len(sgl), err)
		}
	}
	err := w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRAtomicFetchAdd, Flags: ibrc.SendInline, Inline: make([]byte, 8),
		RemoteAddr: memBase + target, RKey: amr.RKey()})
	if !errors.Is(err, ibrc.ErrInvalidArg) {
		t.Errorf("inline atomic: PostSend %v, want ErrInvalidArg", err)
	}
}

// TestAtomicExecutedOnce: an atomic is executed once whatever the wire
// and the pages do. Its ACK lost, the retransmitted request is a
// duplicate the responder answers from the result it kept; a fault on
// the responder's word RNR NAKs it until the page is present; a fault on
// the requester's result buffer asks again, answered from the kept
// result too. Each time the word was added to once and the requester got
// the value before that one add.
func TestAtomicExecutedOnce(t *testing.T) {
	const target, result = 0x3008, 0x5000
	isAtomicAck := func(f []byte) bool {
		p, err := rocev2.NewDecoder().Decode(f)
		return err == nil && p.BTH.Opcode == rocev2.OpAtomicAck
	}
	cases := []struct {
		name  string
		link  func() ibrctest.LinkConfig
		setup func(w *world)
		check func(t *testing.T, w *world)
	}{
		{"ACK lost", func() ibrctest.LinkConfig {
			dropped := 0
			return ibrctest.LinkConfig{Filter: func(side int, _ uint64, f []byte) ibrctest.Action {
				if side == 1 && dropped < 2 && isAtomicAck(f) {
					dropped++
					return ibrctest.Drop
				}
				return ibrctest.Deliver
			}}
		}, nil, func(t *testing.T, w *world) {
			if st := w.b.e.Stats(); st.DupRequests < 2 {
				t.Errorf("responder saw %d duplicate requests, want the 2 retransmissions", st.DupRequests)
			}
		}},
		{"responder's page absent", nil, func(w *world) { w.b.mem.Evict(memBase+target, 8) }, func(t *testing.T, w *world) {
			if st := w.b.e.Stats(); st.ResponderFaults == 0 || st.RNRNakFault == 0 {
				t.Errorf("responder faults %d, RNR NAKs for faults %d: want both", st.ResponderFaults, st.RNRNakFault)
			}
		}},
		{"requester's result page absent", nil, func(w *world) { w.a.mem.Evict(memBase+result, 8) }, func(t *testing.T, w *world) {
			if st := w.a.e.Stats(); st.RequesterFaults == 0 {
				t.Errorf("requester faults %d, want the result's", st.RequesterFaults)
			}
			if st := w.b.e.Stats(); st.DupRequests == 0 {
				t.Errorf("the requester did not ask again (duplicates at the responder %d)", st.DupRequests)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := opts{retry: 7, rnr: 7}
			if c.link != nil {
				o.link = c.link()
			}
			w, amr := atomicWorld(t, o)
			w.b.setU64(target, 1000)
			if c.setup != nil {
				c.setup(w)
			}
			if err := w.a.qp.PostSend(atomicWR(1, ibrc.WRAtomicFetchAdd, w.a.sge(result, 8), memBase+target, amr.RKey(), 1, 0)); err != nil {
				t.Fatal(err)
			}
			w.run(time.Second, func() bool { return len(w.a.wcs) == 1 })
			if wc := w.a.wcs[0]; wc.Status != ibrc.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
			if got := w.b.u64(target); got != 1001 {
				t.Fatalf("remote word %d after one FETCH_AND_ADD of 1 to 1000: executed %d times", got, got-1000)
			}
			if got := w.a.u64(result); got != 1000 {
				t.Fatalf("original value returned %d, want 1000", got)
			}
			c.check(t, w)
		})
	}
}

// TestAtomicsCountAsReads: atomics are outstanding like READs, at most
// max_rd_atomic of them (both kinds together) at once, and a fenced WR
// waits for them; many of them to one word add up exactly.
func TestAtomicsCountAsReads(t *testing.T) {
	const target = 0x4000
	// Requests A sent less responses B sent: never more than A has
	// outstanding (each READ here is answered by one packet).
	out, maxOut := 0, 0
	dec := rocev2.NewDecoder()
	w, amr := atomicWorld(t, opts{link: ibrctest.LinkConfig{Filter: func(side int, _ uint64, f []byte) ibrctest.Action {
		if p, err := dec.Decode(f); err == nil {
			switch op := p.BTH.Opcode; {
			case side == 0 && (op == rocev2.OpReadRequest || op.Has(rocev2.Atomic)):
				out++
				maxOut = max(maxOut, out)
			case side == 1 && (op == rocev2.OpReadRespOnly || op == rocev2.OpAtomicAck):
				out--
			}
		}
		return ibrctest.Deliver
	}}})
	const n = 200
	for i := range n {
		op := ibrc.WRAtomicFetchAdd
		wr := atomicWR(uint64(i), op, w.a.sge(0x8000+uint64(i)*8, 8), memBase+target, amr.RKey(), 3, 0)
		if i%3 == 1 {
			wr = ibrc.SendWR{ID: uint64(i), Opcode: ibrc.WRRead, Flags: ibrc.SendSignaled, SGL: w.a.sge(0x10000+uint64(i)*64, 64),
				RemoteAddr: memBase + 0x20000, RKey: w.b.mr.RKey()}
		}
		if i%10 == 9 {
			wr.Flags |= ibrc.SendFence
		}
		if err := w.a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	w.run(time.Second, func() bool { return len(w.a.wcs) == n })
	adds := 0
	seen := map[uint64]bool{}
	for i, wc := range w.a.wcs {
		if wc.Status != ibrc.WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
		if i%3 != 1 {
			adds++
			seen[w.a.u64(0x8000+uint64(i)*8)] = true
		}
	}
	if got := w.b.u64(target); got != uint64(3*adds) {
		t.Fatalf("word %d after %d adds of 3", got, adds)
	}
	if len(seen) != adds {
		t.Fatalf("%d distinct original values for %d adds: some add was executed twice or not at all", len(seen), adds)
	}
	if maxOut > 8 || maxOut < 2 {
		t.Fatalf("%d READs and atomics outstanding at most, want 2..8 (max_rd_atomic 8)", maxOut)
	}
}

// TestAtomicWrite: an ATOMIC WRITE stores its 8 bytes at an aligned
// address and completes on the zero-length READ response; a misaligned
// address, a region without remote write or a QP without it fail it; a
// lost response brings a duplicate that is answered, not written again
// (the word the responder's owner changed since stays changed).
func TestAtomicWrite(t *testing.T) {
	const target = 0x4010
	val := func(v uint64) []byte { b := make([]byte, 8); binary.LittleEndian.PutUint64(b, v); return b }
	post := func(t *testing.T, w *world, remote uint64, rkey uint32, v uint64) {
		t.Helper()
		if err := w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRAtomicWrite, Flags: ibrc.SendSignaled, Inline: val(v),
			RemoteAddr: remote, RKey: rkey}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("stores", func(t *testing.T) {
		w := newWorld(t, opts{})
		post(t, w, memBase+target, w.b.mr.RKey(), 0x0102030405060708)
		w.run(time.Second, func() bool { return len(w.a.wcs) == 1 })
		if wc := w.a.wcs[0]; wc.Status != ibrc.WCSuccess || wc.Opcode != ibrc.WCAtomicWrite || wc.ByteLen != 8 {
			t.Fatalf("completion %+v", wc)
		}
		if got := w.b.u64(target); got != 0x0102030405060708 {
			t.Fatalf("remote word %#x", got)
		}
	})
	for _, c := range []struct {
		name   string
		remote uint64
		access ibrc.Access
		want   ibrc.WCStatus
	}{
		{"misaligned", memBase + target + 4, 0, ibrc.WCRemInvReqErr},
		{"QP without remote write", memBase + target, ibrc.AccessLocalWrite | ibrc.AccessRemoteRead, ibrc.WCRemInvReqErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, opts{access: c.access})
			w.b.setU64(target&^7, 77)
			post(t, w, c.remote, w.b.mr.RKey(), 1)
			w.run(time.Second, func() bool { return len(w.a.wcs) == 1 })
			if wc := w.a.wcs[0]; wc.Status != c.want {
				t.Fatalf("completion %+v, want %v", wc, c.want)
			}
			if got := w.b.u64(target &^ 7); got != 77 {
				t.Fatalf("remote word changed to %d", got)
			}
		})
	}
	t.Run("region without remote write", func(t *testing.T) {
		w := newWorld(t, opts{})
		ro, err := w.b.pd.RegisterMR(w.b.mem, memBase, memSize, ibrc.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		post(t, w, memBase+target, ro.RKey(), 1)
		w.run(time.Second, func() bool { return len(w.a.wcs) == 1 })
		if wc := w.a.wcs[0]; wc.Status != ibrc.WCRemAccessErr {
			t.Fatalf("completion %+v", wc)
		}
	})
	t.Run("response lost", func(t *testing.T) {
		var w *world
		dropped := 0
		link := ibrctest.LinkConfig{Filter: func(side int, _ uint64, f []byte) ibrctest.Action {
			p, err := rocev2.NewDecoder().Decode(f)
			if side == 1 && err == nil && p.BTH.Opcode == rocev2.OpReadRespOnly && dropped == 0 {
				dropped++
				w.b.setU64(target, 5) // the owner writes after the ATOMIC WRITE
				return ibrctest.Drop
			}
			return ibrctest.Deliver
		}}
		w = newWorld(t, opts{link: link, retry: 7})
		post(t, w, memBase+target, w.b.mr.RKey(), 9)
		w.run(time.Second, func() bool { return len(w.a.wcs) == 1 })
		if wc := w.a.wcs[0]; wc.Status != ibrc.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
		if got, st := w.b.u64(target), w.b.e.Stats(); got != 5 || st.DupRequests == 0 {
			t.Fatalf("word %d (want the owner's 5: written once), duplicates %d", got, st.DupRequests)
		}
	})
	w := newWorld(t, opts{qpType: ibrc.TypeUC})
	if err := w.a.qp.PostSend(ibrc.SendWR{Opcode: ibrc.WRAtomicWrite, Inline: val(1)}); !errors.Is(err, ibrc.ErrInvalidArg) {
		t.Errorf("ATOMIC_WRITE on UC: %v", err)
	}
}
