package rxeq

import (
	"errors"
	"testing"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// pasidMem is a Memory over ats's translated access: the VAs of one PASID,
// as the NIC will reach a process's rxe queues.
type pasidMem struct {
	c     *ats.Context
	pasid uint32
}

func (m pasidMem) ReadAt(va uint64, p []byte) error  { return m.c.Read(m.pasid, va, p) }
func (m pasidMem) WriteAt(va uint64, p []byte) error { return m.c.Write(m.pasid, va, p) }

// TestOverATS: a send queue and a completion queue at process VAs,
// translated through I/O page tables onto scattered guest pages; slots
// straddle pages, and a page unmapped and invalidated under the queue is a
// RingError carrying the translation fault.
func TestOverATS(t *testing.T) {
	g := atstest.NewGuest(t, 1<<20)
	c, err := ats.New(ats.Config{Mem: g.Mem})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	drv := g.NewDriver(hw.Offsets(c), 4, 8)
	as := g.NewAddressSpace()
	drv.Table.Set(1, as)
	const va = 0x7f12_3456_0000
	var frames []uint64
	for range 4 {
		frames = append(frames, g.AllocPage())
	}
	for i := range frames { // in reverse: the pages are not contiguous in IOVA
		as.Map(va+uint64(i)*4096, frames[len(frames)-1-i], true)
	}
	m := pasidMem{c, 1}
	sg := Geometry{Base: va, Size: hw.RxeQueueHeaderSize + 16*512, Slots: 16, Log2ElemSize: 9}
	cg := Geometry{Base: va + 3*4096, Size: hw.RxeQueueHeaderSize + 8*64, Slots: 8, Log2ElemSize: 6}
	sq, err := NewSQ(m, sg, SendLimits{MaxSGE: 8, MaxInline: 256})
	if err != nil {
		t.Fatal(err)
	}
	cq, err := NewCQ(m, cg)
	if err != nil {
		t.Fatal(err)
	}
	// librxe's posts, through the same translation.
	slot := make([]byte, 512)
	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = byte(i ^ 0x5a)
	}
	for i := range 15 {
		clear(slot)
		sendSpec{id: uint64(i), opcode: hw.IBVWRSend, flags: hw.IBVSendInline, inline: payload[:i*17], autoLength: true}.write(slot)
		if err := m.WriteAt(sg.SlotAddr(uint32(i)), slot); err != nil {
			t.Fatal(err)
		}
	}
	var idx [4]byte
	idx[0] = 15
	if err := m.WriteAt(sg.Base+uint64(hw.RxeQueueProducer.Offset), idx[:]); err != nil {
		t.Fatal(err)
	}
	for i := range 15 {
		w, ok, err := sq.Fetch()
		if !ok || err != nil || w.WR.ID != uint64(i) || string(w.WR.Inline) != string(payload[:i*17]) {
			t.Fatalf("entry %d: %v %v %+v", i, ok, err, w.WR)
		}
		if err := cq.Push(CQE{WRID: uint64(i), PortNum: 1}); err != nil && !errors.Is(err, ErrCQFull) {
			t.Fatal(err)
		}
		if err := sq.Retire(); err != nil {
			t.Fatal(err)
		}
	}
	var cqe [hw.RxeCQESize]byte
	if err := m.ReadAt(cg.SlotAddr(6), cqe[:]); err != nil || DecodeCQE(cqe[:]).WRID != 6 {
		t.Fatalf("CQE in slot 6: %+v %v", DecodeCQE(cqe[:]), err)
	}
	// Take the page holding the end of slot 15 away: its fetch fails
	// with the translation fault and leaves the index, and succeeds once
	// the page is back (what on-demand paging will do).
	clear(slot)
	sendSpec{id: 99, opcode: hw.IBVWRSend}.write(slot)
	if err := m.WriteAt(sg.SlotAddr(15), slot); err != nil {
		t.Fatal(err)
	}
	as.Unmap(va + 2*4096)
	if _, err := c.Invalidate(ats.Invalidation{Scope: ats.ScopeRange, PASID: 1, Addr: va + 2*4096, Pages: 1}); err != nil {
		t.Fatal(err)
	}
	idx[0] = 0 // wrap: slot 15 is posted
	if err := m.WriteAt(sg.Base+uint64(hw.RxeQueueProducer.Offset), idx[:]); err != nil {
		t.Fatal(err)
	}
	var re *RingError
	var f *ats.Fault
	if _, ok, err := sq.Fetch(); ok || !errors.As(err, &re) || re.Addr != sg.SlotAddr(15) || !errors.As(err, &f) || f.VA != va+2*4096 {
		t.Fatalf("slot 15 across an unmapped page: %v %v", ok, err)
	}
	if sq.Outstanding() != 0 {
		t.Fatalf("outstanding %d after the fault", sq.Outstanding())
	}
	as.Map(va+2*4096, frames[1], true)
	if w, ok, err := sq.Fetch(); !ok || err != nil || w.Slot != 15 || w.WR.ID != 99 {
		t.Fatalf("slot 15 after the page came back: %+v %v %v", w, ok, err)
	}
}
