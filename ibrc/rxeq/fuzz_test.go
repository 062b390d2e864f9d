package rxeq

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/fuzzseed"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// go's fuzz workers die silently; keep what the runtime says (ci/fuzz.sh).
func init() { fuzzseed.KeepCrashOutput() }

// Fuzz inputs: slots is the contents every slot starts with (repeated to
// fill it), ops a program of fetches, retires and producer or consumer
// index stores by user space.
const (
	opFetch   = iota // SQ/RQ: Fetch; CQ: Push
	opRetire         // SQ/RQ: Retire; CQ: user space polls one
	opStore          // user space stores the next 4 op bytes as its index
	opRewrite        // user space rewrites the next slot with the next 8 op bytes at its start
	nOps
)

// fuzzGeometry is a queue of 2 to 16 slots big enough for need bytes, maybe
// twice as big, at an address whose low bits come from the input.
func fuzzGeometry(shape uint8, need int) Geometry {
	log2 := uint8(bits.Len(uint(need - 1)))
	g := Geometry{Base: qBase + uint64(shape>>6)*Align, Slots: 2 << (shape & 3), Log2ElemSize: log2 + (shape>>2)&1}
	g.Size = hw.RxeQueueHeaderSize + uint64(g.Slots)<<g.Log2ElemSize + uint64(shape>>3)&7
	return g
}

func fillSlots(m *testMem, g Geometry, slots []byte) {
	if len(slots) == 0 {
		return
	}
	for i := range g.Slots {
		e := m.slot(g, i)
		for j := 0; j < len(e); j += len(slots) {
			copy(e[j:], slots)
		}
	}
}

// opArg takes n bytes after op i (zeros past the end).
func opArg(ops []byte, i *int, n int) []byte {
	var b [8]byte
	*i += copy(b[:n], ops[min(*i+1, len(ops)):])
	return b[:n]
}

// runConsumer drives q (an SQ or RQ) by ops and checks what every
// consumer must do: fetch the slots in order and only those posted, keep at
// most slots-1 outstanding, write nothing but consumer_index, and retire in
// order; check judges each fetched entry against the slot's bytes.
func runConsumer(t *testing.T, m *testMem, g Geometry, ops []byte, c *consumer,
	fetch func() (slot uint32, ok bool, err error), retire func() error, check func(elem []byte, err error)) {
	u := user{m, g}
	mask := g.Slots - 1
	var fetched, retired uint32 // the model's free-running counts
	for i := 0; i < len(ops) && i < 256; i++ {
		switch ops[i] % nOps {
		case opFetch:
			posted := (u.prod() - retired) & mask
			slot, ok, err := fetch()
			switch {
			case !ok && err != nil:
				t.Fatalf("fetch failed with good memory: %v", err)
			case !ok && (fetched-retired)&mask < posted:
				t.Fatalf("nothing fetched with %d posted and %d outstanding", posted, fetched-retired)
			case ok && (fetched-retired)&mask >= posted:
				t.Fatalf("fetched slot %d with %d posted and %d outstanding", slot, posted, fetched-retired)
			case ok && slot != fetched&mask:
				t.Fatalf("fetched slot %d, want %d", slot, fetched&mask)
			case ok:
				check(m.slot(g, slot), err)
				fetched++
			}
		case opRetire:
			err := retire()
			if fetched == retired {
				if !errors.Is(err, ErrNotFetched) {
					t.Fatalf("retire with nothing fetched: %v", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("retire: %v", err)
			}
			retired++
			if u.cons() != retired&mask {
				t.Fatalf("consumer_index %d, want %d", u.cons(), retired&mask)
			}
		case opStore:
			u.setProd(binary.LittleEndian.Uint32(opArg(ops, &i, 4)))
		case opRewrite:
			copy(m.slot(g, (fetched+1)&mask), opArg(ops, &i, 8))
		}
		if c.Outstanding() != int(fetched-retired) || c.Outstanding() >= int(g.Slots) {
			t.Fatalf("outstanding %d, model %d, %d slots", c.Outstanding(), fetched-retired, g.Slots)
		}
	}
	for _, w := range m.writes {
		if w.addr != g.Base+uint64(hw.RxeQueueConsumer.Offset) || w.n != 4 {
			t.Fatalf("device wrote [%#x, +%d)", w.addr, w.n)
		}
	}
}

// checkSGL holds the rules of every SGL the device hands the engine.
func checkSGL(t *testing.T, sgl []ibrc.SGE, length uint32, maxSGE int, raw []byte) {
	if len(sgl) > maxSGE {
		t.Fatalf("%d SGEs, limit %d", len(sgl), maxSGE)
	}
	var sum uint64
	for i, s := range sgl {
		if s.Length == 0 || uint64(s.Length-1) > math.MaxUint64-s.Addr {
			t.Fatalf("SGE %d %+v empty or wraps", i, s)
		}
		sum += uint64(s.Length)
	}
	if sum != uint64(length) || sum > ibrc.MaxMsgSize {
		t.Fatalf("SGL of %d bytes for a %d-byte message", sum, length)
	}
	// Each SGE is one of the slot's, in order, cut at most.
	j := 0
	for _, s := range sgl {
		for ; ; j++ {
			if (j+1)*hw.RxeSGESize > len(raw) {
				t.Fatalf("SGE %+v not in the slot", s)
			}
			e := raw[j*hw.RxeSGESize:]
			if hw.RxeSGEAddr.Get(e) == s.Addr && hw.RxeSGELKey.Get(e) == s.LKey && hw.RxeSGELength.Get(e) >= s.Length {
				j++
				break
			}
		}
	}
}

func checkWQEError(t *testing.T, err error, wrid uint64, recv bool) {
	var we *WQEError
	if !errors.As(err, &we) || we.WRID != wrid || we.Recv != recv || we.Kind == 0 || int(we.Kind) >= len(malformedText) {
		t.Fatalf("error %#v for wr_id %#x", err, wrid)
	}
	if st := we.Status(); st != ibrc.WCLocLenErr && st != ibrc.WCLocQPOpErr && st != ibrc.WCLocProtErr {
		t.Fatalf("%v completes with %v", we, st)
	}
}

// FuzzSQ fetches and retires send queue entries from arbitrary slots, with
// arbitrary indices and limits, and checks every work request against the
// rules the engine's PostSend relies on.
func FuzzSQ(f *testing.F) {
	seed := func(s sendSpec) []byte {
		b := make([]byte, 512)
		s.write(b)
		return b
	}
	fetchAll := []byte{opStore, 5, 0, 0, 0, opFetch, opFetch, opRetire, opFetch, opRetire, opRetire, opFetch, opFetch, opRetire}
	f.Add(seed(sendSpec{id: 1, opcode: hw.IBVWRSend, sges: []rawSGE{{0x1000, 100, 7}, {0x9000, 28, 8}}, autoLength: true, autoNumS: true}),
		uint8(0x03), uint8(4), uint16(64), fetchAll)
	f.Add(seed(sendSpec{id: 2, opcode: hw.IBVWRRDMAWriteWithImm, flags: hw.IBVSendInline, inline: []byte("0123456789"), autoLength: true}),
		uint8(0x41), uint8(1), uint16(16), fetchAll)
	f.Add(seed(sendSpec{id: 3, opcode: hw.IBVWRRDMARead, raddr: 1 << 40, rkey: 3, length: 60, numSGE: 2,
		sges: []rawSGE{{math.MaxUint64 - 7, 8, 1}, {0x10, 100, 2}}}), uint8(0x02), uint8(2), uint16(0), fetchAll)
	f.Add([]byte{0xff}, uint8(0xff), uint8(255), uint16(0xffff), []byte{opStore, 0xff, 0xff, 0xff, 0xff, opFetch, opRewrite, 1, 2, 3, 4, 5, 6, 7, 8, opFetch})
	f.Fuzz(func(t *testing.T, slots []byte, shape, maxSGE uint8, maxInline uint16, ops []byte) {
		lim := SendLimits{MaxSGE: int(maxSGE % 33), MaxInline: int(maxInline % 1025), UD: maxInline&0x8000 != 0}
		need, _ := lim.sendNeed()
		g := fuzzGeometry(shape, need)
		m := newQueueMem(t, g)
		fillSlots(m, g, slots)
		q, err := NewSQ(m, g, lim)
		if err != nil {
			t.Fatalf("NewSQ(%+v, %+v): %v", g, lim, err)
		}
		var w SendWQE
		runConsumer(t, m, g, ops, &q.consumer, func() (uint32, bool, error) {
			var ok bool
			w, ok, err = q.Fetch()
			return w.Slot, ok, err
		}, q.Retire, func(raw []byte, err error) {
			wr := w.WR
			if wr.ID != hw.RxeSendWRID.Get(raw) {
				t.Fatalf("wr_id %#x, slot says %#x", wr.ID, hw.RxeSendWRID.Get(raw))
			}
			if err != nil {
				checkWQEError(t, err, wr.ID, false)
				return
			}
			if wr.Opcode > ibrc.WRSendWithInv && wr.Opcode != ibrc.WRAtomicWrite && wr.Opcode != ibrc.WRRegMR || uint32(wr.Opcode) != hw.RxeSendOpcode.Get(raw) || wr.Flags&^0xf != 0 {
				t.Fatalf("opcode %v flags %#x from %d", wr.Opcode, wr.Flags, hw.RxeSendOpcode.Get(raw))
			}
			if lim.UD {
				_, v4 := rocev2.IPv4FromGID(wr.UD.AV.DGID)
				if wr.Opcode != ibrc.WRSend && wr.Opcode != ibrc.WRSendImm || !v4 || wr.UD.QPN > hw.RDMAQPNMax ||
					hw.RxeSendUDAHNum.Get(raw) != 0 {
					t.Fatalf("UD entry accepted: %v to %+v", wr.Opcode, wr.UD)
				}
			}
			length := hw.RxeSendLength.Get(raw)
			if wr.Opcode == ibrc.WRLocalInv || wr.Opcode == ibrc.WRBindMW || wr.Opcode == ibrc.WRRegMR {
				if len(wr.SGL) != 0 || wr.Inline != nil || wr.Flags&ibrc.SendInline != 0 {
					t.Fatalf("%v with data: %+v", wr.Opcode, wr)
				}
				return
			}
			if wr.Opcode == ibrc.WRAtomicWrite {
				if length != ibrc.AtomicSize || len(wr.SGL) != 0 || string(wr.Inline) != string(raw[hw.RxeSendWQESize:hw.RxeSendWQESize+8]) {
					t.Fatalf("ATOMIC_WRITE of %d bytes accepted as %+v", length, wr)
				}
				return
			}
			if wr.Flags&ibrc.SendInline != 0 {
				if wr.Opcode == ibrc.WRRead || len(wr.SGL) != 0 || len(wr.Inline) > lim.MaxInline || len(wr.Inline) != int(length) ||
					string(wr.Inline) != string(raw[hw.RxeSendWQESize:hw.RxeSendWQESize+int(length)]) {
					t.Fatalf("inline %v of %d bytes (limit %d, dma.length %d)", wr.Opcode, len(wr.Inline), lim.MaxInline, length)
				}
				return
			}
			if wr.Inline != nil || hw.RxeSendNumSGE.Get(raw) > uint32(lim.MaxSGE) {
				t.Fatalf("inline data without the flag, or %d SGEs accepted", hw.RxeSendNumSGE.Get(raw))
			}
			checkSGL(t, wr.SGL, length, lim.MaxSGE, raw[hw.RxeSendWQESize:])
		})
	})
}

// FuzzRQ does for receive queue entries what FuzzSQ does for send queues.
func FuzzRQ(f *testing.F) {
	seed := func(s recvSpec) []byte {
		b := make([]byte, 128)
		s.write(b)
		return b
	}
	fetchAll := []byte{opStore, 3, 0, 0, 0, opFetch, opFetch, opRetire, opFetch, opRetire, opFetch, opRetire, opRetire}
	f.Add(seed(recvSpec{id: 1, sges: []rawSGE{{0x1000, 4096, 3}}, auto: true}), uint8(0x01), uint8(1), fetchAll)
	f.Add(seed(recvSpec{id: 2, sges: []rawSGE{{1, 0, 9}, {2, 10, 1}, {3, 20, 2}}, auto: true}), uint8(0x42), uint8(5), fetchAll)
	f.Add(seed(recvSpec{id: 3, length: 100, numSGE: 2, sges: []rawSGE{{math.MaxUint64, 1, 1}, {2, 200, 2}}}), uint8(0x07), uint8(2), fetchAll)
	f.Fuzz(func(t *testing.T, slots []byte, shape, maxSGE uint8, ops []byte) {
		n := int(maxSGE % 33)
		g := fuzzGeometry(shape, hw.RxeRecvWQESize+n*hw.RxeSGESize)
		m := newQueueMem(t, g)
		fillSlots(m, g, slots)
		q, err := NewRQ(m, g, n)
		if err != nil {
			t.Fatalf("NewRQ(%+v, %d): %v", g, n, err)
		}
		var w RecvWQE
		runConsumer(t, m, g, ops, &q.consumer, func() (uint32, bool, error) {
			var ok bool
			w, ok, err = q.Fetch()
			return w.Slot, ok, err
		}, q.Retire, func(raw []byte, err error) {
			if w.WR.ID != hw.RxeRecvWRID.Get(raw) {
				t.Fatalf("wr_id %#x, slot says %#x", w.WR.ID, hw.RxeRecvWRID.Get(raw))
			}
			if err != nil {
				checkWQEError(t, err, w.WR.ID, true)
				return
			}
			if hw.RxeRecvNumSGE.Get(raw) > uint32(n) {
				t.Fatalf("%d SGEs accepted, limit %d", hw.RxeRecvNumSGE.Get(raw), n)
			}
			checkSGL(t, w.WR.SGL, hw.RxeRecvLength.Get(raw), n, raw[hw.RxeRecvWQESize:])
		})
	})
}

// FuzzCQ pushes completions while user space consumes them, honestly or
// storing arbitrary consumer indices: the device writes only the slot at
// its producer index and producer_index, stops exactly when the queue is
// full, and an honest consumer polls every completion, in order, intact.
func FuzzCQ(f *testing.F) {
	f.Add(uint8(0x01), []byte{opFetch, 1, 2, 3, 4, 5, 6, 7, 8, opFetch, opFetch, opRetire, opFetch, opFetch, opFetch, opRetire, opRetire})
	f.Add(uint8(0x83), []byte{opStore, 0xff, 0xff, 0xff, 0xff, opFetch, opFetch, opStore, 1, 0, 0, 0, opFetch})
	f.Fuzz(func(t *testing.T, shape uint8, ops []byte) {
		g := fuzzGeometry(shape, hw.RxeCQESize)
		m := newQueueMem(t, g)
		u := user{m, g}
		cq, err := NewCQ(m, g)
		if err != nil {
			t.Fatalf("NewCQ(%+v): %v", g, err)
		}
		mask := g.Slots - 1
		honest := true
		var queued []CQE // pushed, not yet polled (honest consumer)
		for i := 0; i < len(ops) && i < 256; i++ {
			switch ops[i] % nOps {
			case opFetch, opRewrite:
				b := opArg(ops, &i, 8)
				e := CQE{WRID: binary.LittleEndian.Uint64(b), Status: ibrc.WCStatus(b[0] % 22), Opcode: ibrc.WCOpcode(b[1]),
					ByteLen: binary.LittleEndian.Uint32(b[2:]), Imm: binary.LittleEndian.Uint32(b[4:]), QPNum: uint32(b[3]),
					Flags: ibrc.WCFlags(b[5] & 2), PortNum: 1}
				prod, full := cq.Producer(), (cq.Producer()+1)&mask == u.cons()&mask
				room, rerr := cq.Room()
				if rerr != nil || (room == 0) != full {
					t.Fatalf("room %d (%v), full %v", room, rerr, full)
				}
				err := cq.Push(e)
				switch {
				case full && !errors.Is(err, ErrCQFull), !full && err != nil:
					t.Fatalf("push, full %v: %v", full, err)
				case full:
					if cq.Producer() != prod {
						t.Fatal("producer moved on a full queue")
					}
				default:
					if got := DecodeCQE(m.slot(g, prod)); got != e {
						t.Fatalf("slot %d holds %+v, pushed %+v", prod, got, e)
					}
					if u.prod() != (prod+1)&mask || cq.Producer() != u.prod() {
						t.Fatalf("producer_index %d, device %d, want %d", u.prod(), cq.Producer(), (prod+1)&mask)
					}
					queued = append(queued, e)
				}
			case opRetire:
				e, ok := u.poll()
				if ok != (len(queued) > 0) && honest {
					t.Fatalf("poll: %v with %d queued", ok, len(queued))
				}
				if ok && honest {
					if e != queued[0] {
						t.Fatalf("polled %+v, want %+v", e, queued[0])
					}
					queued = queued[1:]
				}
			case opStore:
				u.setCons(binary.LittleEndian.Uint32(opArg(ops, &i, 4)))
				honest = false
			}
		}
		for _, w := range m.writes {
			isSlot := w.addr >= g.SlotAddr(0) && (w.addr-g.SlotAddr(0))%uint64(g.ElemSize()) == 0 && w.n == hw.RxeCQESize
			if !isSlot && (w.addr != g.Base+uint64(hw.RxeQueueProducer.Offset) || w.n != 4) {
				t.Fatalf("device wrote [%#x, +%d)", w.addr, w.n)
			}
		}
	})
}
