package ats_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

const (
	vaBase  = 0x7f00_0000_0000 // a high user-space VA: exercises every level's index
	outside = 0x4000_0000_0000 // an IOVA far outside guest RAM (and page aligned)
)

// TestTranslate walks page tables built in guest memory, good and
// malformed, and checks the segments or the fault each access produces.
func TestTranslate(t *testing.T) {
	e := newEnv(t, envOpts{})
	as := e.space(1)
	f0, f1, f2 := e.g.AllocPage(), e.g.AllocPage(), e.g.AllocPage()
	as.Map(vaBase, f0, true)
	as.Map(vaBase+0x1000, f1, true)
	as.Map(vaBase+0x2000, f2, false)
	// vaBase+0x3000 and +0x4000 unmapped; +0x5000 leaf outside guest RAM.
	as.Map(vaBase+0x5000, outside, true)
	// A leaf with reserved bits.
	as.SetLeaf(vaBase+0x6000, f0|hw.PTEPresent|1<<60)
	// A non-present leaf with junk: its bits are ignored.
	as.SetLeaf(vaBase+0x7000, 0xfff0_dead_beef_0000)
	// A second region whose level-2 entry points outside guest RAM.
	badL2 := uint64(vaBase + 0x4000_0000)
	as.Map(badL2, f0, true)
	e.g.Store64(as.EntryAddr(badL2, 2), outside|hw.PTEPresent|hw.PTEWrite)
	// A region whose level-3 entry is read-only: writes fault even though
	// the leaf has W.
	roL3 := uint64(vaBase + 0x80_0000_0000)
	as.Map(roL3, f1, true)
	l3 := as.EntryAddr(roL3, 3)
	e.g.Store64(l3, e.g.Load64(l3)&^hw.PTEWrite)

	// PASID 2: valid, root outside guest RAM. PASID 3: reserved bits in
	// the root. PASID 4: invalid (never set). PASID 5: valid but empty.
	e.drv.Table.SetRaw(2, outside|hw.PASIDEntryValid)
	e.drv.Table.SetRaw(3, as.Root|hw.PASIDEntryValid|1<<62)
	e.space(5)

	type want struct {
		segs  []ats.Segment
		kind  ats.FaultKind
		level int
		pages []uint64
	}
	seg := func(iova uint64, n int) ats.Segment { return ats.Segment{IOVA: iova, Len: n} }
	for _, tc := range []struct {
		name  string
		pasid uint32
		va    uint64
		n     int
		write bool
		want  want
	}{
		{"read", 1, vaBase + 0x10, 100, false, want{segs: []ats.Segment{seg(f0+0x10, 100)}}},
		{"write", 1, vaBase, 4096, true, want{segs: []ats.Segment{seg(f0, 4096)}}},
		{"across pages", 1, vaBase + 0xf00, 0x300, true, want{segs: []ats.Segment{seg(f0+0xf00, 0x100), seg(f1, 0x200)}}},
		{"three pages", 1, vaBase + 0x800, 0x2000, false, want{segs: []ats.Segment{seg(f0+0x800, 0x800), seg(f1, 0x1000), seg(f2, 0x800)}}},
		{"read-only read", 1, vaBase + 0x2000, 8, false, want{segs: []ats.Segment{seg(f2, 8)}}},
		{"read-only write", 1, vaBase + 0x2004, 8, true, want{kind: ats.FaultWriteProtect, level: -1, pages: []uint64{vaBase + 0x2000}}},
		{"not present", 1, vaBase + 0x3008, 8, false, want{kind: ats.FaultNotPresent, level: 1, pages: []uint64{vaBase + 0x3000}}},
		{"partly present: every missing page listed", 1, vaBase + 0x2800, 0x2000, true,
			want{kind: ats.FaultWriteProtect, level: -1, pages: []uint64{vaBase + 0x2000, vaBase + 0x3000, vaBase + 0x4000}}},
		{"missing then invalid: invalid wins", 1, vaBase + 0x4000, 0x1008, false, want{kind: ats.FaultTable, level: -1}},
		{"no level-3 table", 1, vaBase + 0x1_0000_0000, 8, false, want{kind: ats.FaultNotPresent, level: 3, pages: []uint64{vaBase + 0x1_0000_0000}}},
		{"no level-4 entry", 1, 0x1000, 8, false, want{kind: ats.FaultNotPresent, level: 4, pages: []uint64{0x1000}}},
		{"leaf outside guest RAM", 1, vaBase + 0x5000, 8, false, want{kind: ats.FaultTable, level: -1}},
		{"reserved bits in leaf", 1, vaBase + 0x6000, 8, false, want{kind: ats.FaultReserved, level: 1}},
		{"junk in non-present leaf", 1, vaBase + 0x7000, 8, false, want{kind: ats.FaultNotPresent, level: 1, pages: []uint64{vaBase + 0x7000}}},
		{"level-2 entry outside guest RAM", 1, badL2, 8, false, want{kind: ats.FaultTable, level: 1}},
		{"read-only level 3", 1, roL3, 8, true, want{kind: ats.FaultWriteProtect, level: -1, pages: []uint64{roL3}}},
		{"read through read-only level 3", 1, roL3, 8, false, want{segs: []ats.Segment{seg(f1, 8)}}},
		{"root outside guest RAM", 2, vaBase, 8, false, want{kind: ats.FaultTable, level: 4}},
		{"reserved bits in root", 3, vaBase, 8, false, want{kind: ats.FaultReserved, level: 0}},
		{"invalid PASID entry", 4, vaBase, 8, false, want{kind: ats.FaultPASID, level: 0}},
		{"PASID beyond the table", 16, vaBase, 8, false, want{kind: ats.FaultPASID, level: -1}},
		{"empty address space", 5, vaBase, 8, false, want{kind: ats.FaultNotPresent, level: 4, pages: []uint64{vaBase}}},
		{"VA beyond 48 bits", 1, 1 << 48, 8, false, want{kind: ats.FaultAddress, level: -1}},
		{"range ends beyond 48 bits", 1, 1<<48 - 4, 8, false, want{kind: ats.FaultAddress, level: -1}},
		{"address wraps", 1, ^uint64(0) - 2, 8, false, want{kind: ats.FaultAddress, level: -1}},
		{"zero length", 1, vaBase, 0, false, want{kind: ats.FaultAddress, level: -1}},
		{"too long", 1, vaBase, ats.MaxAccess + 1, false, want{kind: ats.FaultAddress, level: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := e.c.Access(tc.pasid, tc.va, tc.n, tc.write)
			defer h.Release()
			if tc.want.kind == 0 {
				if err != nil {
					t.Fatalf("unexpected fault: %v", err)
				}
				if got := h.Segments(); !slices.Equal(got, tc.want.segs) {
					t.Fatalf("segments %x, want %x", got, tc.want.segs)
				}
				if h.Len() != tc.n {
					t.Fatalf("Len %d, want %d", h.Len(), tc.n)
				}
				return
			}
			f := faultOf(t, err)
			if f.Kind != tc.want.kind || f.Level != tc.want.level {
				t.Fatalf("fault %v at level %d, want %v at level %d", f, f.Level, tc.want.kind, tc.want.level)
			}
			if f.NeedsPageRequest() != tc.want.kind.Resolvable() || !slices.Equal(f.Pages, tc.want.pages) {
				t.Fatalf("fault pages %x (needs request %v), want %x", f.Pages, f.NeedsPageRequest(), tc.want.pages)
			}
			if f.PASID != tc.pasid || f.Write != tc.write {
				t.Fatalf("fault names pasid %d write %v", f.PASID, f.Write)
			}
			if tc.want.kind == ats.FaultTable && !errors.As(err, new(*guestmem.FaultError)) {
				t.Fatalf("FaultTable does not wrap the guestmem error: %v", err)
			}
		})
	}
	if s := e.c.Stats(); s.Entries == 0 || s.Faults[ats.FaultNotPresent] == 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestHandleCopies moves data through a translated buffer spanning pages.
func TestHandleCopies(t *testing.T) {
	e := newEnv(t, envOpts{})
	as := e.space(0)
	var frames []uint64
	for i := range 3 {
		f := e.g.AllocPage()
		e.g.AllocPage() // a gap, so the frames are not contiguous
		frames = append(frames, f)
		as.Map(uint64(i)*4096, f, true)
	}
	msg := make([]byte, 9000)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	if err := e.c.Write(0, 100, msg); err != nil {
		t.Fatal(err)
	}
	// The guest sees the bytes at the translated places.
	if !bytes.Equal(e.g.Bytes(frames[0]+100, 3996), msg[:3996]) || !bytes.Equal(e.g.Bytes(frames[2], 9000-3996-4096), msg[3996+4096:]) {
		t.Fatal("guest view differs")
	}
	got := make([]byte, len(msg))
	if err := e.c.Read(0, 100, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("read back: %v", err)
	}
	h := mustAccess(t, e.c, 0, 100, 9000, false)
	part := make([]byte, 200)
	if err := h.ReadAt(part, 3900); err != nil || !bytes.Equal(part, msg[3900:4100]) {
		t.Fatalf("ReadAt across a page: %v", err)
	}
	if err := h.ReadAt(part, 8900); !errors.Is(err, ats.ErrRange) {
		t.Fatalf("ReadAt past the end: %v", err)
	}
	h.Release()
	h.Release() // idempotent
	if err := h.Read(part); !errors.Is(err, ats.ErrRange) {
		t.Fatalf("read through a released handle: %v", err)
	}
	// Many pages: beyond the inline segment array.
	for i := 3; i < 40; i++ {
		as.Map(uint64(i)*4096, e.g.AllocPage(), true)
	}
	big := make([]byte, 36*4096)
	for i := range big {
		big[i] = byte(i ^ i>>8)
	}
	if err := e.c.Write(0, 2048, big); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(big))
	if err := e.c.Read(0, 2048, back); err != nil || !bytes.Equal(back, big) {
		t.Fatalf("big round trip: %v", err)
	}
}

// TestPassthrough: with ATS disabled, addresses are IOVAs and nothing is
// cached; enabling starts from an empty ATC.
func TestPassthrough(t *testing.T) {
	e := newEnv(t, envOpts{})
	as := e.space(0)
	frame := e.g.AllocPage()
	as.Map(0x1000, frame, true)
	h := mustAccess(t, e.c, 0, 0x1000, 8, true)
	h.Release()

	e.c.ATSControl(false, 0)
	if e.c.ATSEnabled() || e.c.Stats().Entries != 0 {
		t.Fatal("disabling ATS keeps translations")
	}
	h = mustAccess(t, e.c, 7, frame+0xff0, 0x20, false)
	want := []ats.Segment{{IOVA: frame + 0xff0, Len: 0x10}, {IOVA: frame + 0x1000, Len: 0x10}}
	if !slices.Equal(h.Segments(), want) {
		t.Fatalf("passthrough segments %x", h.Segments())
	}
	h.Release()
	if s := e.c.Stats(); s.Passthrough != 2 || s.Entries != 0 {
		t.Fatalf("stats %+v", s)
	}
	// A passthrough address outside guest memory fails at the copy.
	h = mustAccess(t, e.c, 0, outside, 8, true)
	if err := h.Write(make([]byte, 8)); !errors.As(err, new(*guestmem.FaultError)) {
		t.Fatalf("write outside guest memory: %v", err)
	}
	h.Release()
	e.c.ATSControl(true, 0)
	h = mustAccess(t, e.c, 0, 0x1000, 8, true)
	if h.Segments()[0].IOVA != frame {
		t.Fatal("translation after re-enable")
	}
	h.Release()
}

// TestAccessTranslated: an address that is only ever translated fails
// with FaultDisabled while ATS is off, and translates once it is on.
func TestAccessTranslated(t *testing.T) {
	e := newEnv(t, envOpts{})
	frame := e.g.AllocPage()
	e.space(0).Map(0x1000, frame, true)
	e.c.ATSControl(false, 0)
	_, err := e.c.AccessTranslated(0, frame, 8, true)
	var f *ats.Fault
	if !errors.As(err, &f) || f.Kind != ats.FaultDisabled || f.NeedsPageRequest() {
		t.Fatalf("AccessTranslated with ATS off: %v", err)
	}
	if s := e.c.Stats(); s.Passthrough != 0 || s.Faults[ats.FaultDisabled] != 1 {
		t.Fatalf("stats %+v", s)
	}
	e.c.ATSControl(true, 0)
	h, err := e.c.AccessTranslated(0, 0x1000, 8, true)
	if err != nil || h.Segments()[0].IOVA != frame {
		t.Fatalf("AccessTranslated with ATS on: %v %x", err, h.Segments())
	}
	h.Release()
}

// TestPASIDEnable: without the PASID capability enabled only PASID 0
// translates.
func TestPASIDEnable(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, p := range []uint32{0, 3} {
		e.space(p).Map(0, e.g.AllocPage(), true)
	}
	e.c.PASIDControl(false)
	if _, err := e.c.Access(3, 0, 8, false); faultOf(t, err).Kind != ats.FaultPASID {
		t.Fatalf("PASID 3 with PASID disabled: %v", err)
	}
	h := mustAccess(t, e.c, 0, 0, 8, false)
	h.Release()
	e.c.PASIDControl(true)
	h = mustAccess(t, e.c, 3, 0, 8, false)
	h.Release()
}

// TestConfigSpaceHooks drives the enables through a real configuration
// space, as the PCI function wires them.
func TestConfigSpaceHooks(t *testing.T) {
	space, err := pcie.Build(pcie.Config{
		VendorID: hw.VendorID, DeviceID: hw.DeviceID, ClassCode: hw.ClassCode,
		ATS:   &pcie.ATS{InvalidateQueueDepth: 32},
		PASID: &pcie.PASID{MaxWidth: 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{noDriver: true})
	c, err := ats.New(ats.Config{Mem: e.g.Mem, Caps: space})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	space.SetHooks(pcie.Hooks{ATSControl: c.ATSControl, PASIDControl: c.PASIDControl})
	if c.ATSEnabled() {
		t.Fatal("ATS enabled at power-on")
	}
	lay := space.Layout()
	// ATS control register: Enable (bit 15) with STU 2.
	if err := space.Write(lay.ATS+6, []byte{2, 0x80}); err != nil {
		t.Fatal(err)
	}
	if !c.ATSEnabled() {
		t.Fatal("ATS Enable not applied")
	}
	// The STU widens invalidations to 4-page units.
	drv := e.g.NewDriver(hw.Offsets(c), 4, 8)
	as := e.g.NewAddressSpace()
	drv.Table.Set(0, as)
	for i := range 8 {
		as.Map(uint64(i)*4096, e.g.AllocPage(), true)
		h := mustAccess(t, c, 0, uint64(i)*4096, 8, false)
		h.Release()
	}
	n, err := c.Invalidate(ats.Invalidation{Scope: ats.ScopeRange, PASID: 0, Addr: 0x5000, Pages: 1})
	if err != nil || n != 4 {
		t.Fatalf("STU-widened invalidation dropped %d (%v), want 4", n, err)
	}
	if err := space.Write(lay.ATS+6, []byte{0, 0}); err != nil {
		t.Fatal(err)
	}
	if c.ATSEnabled() || c.Stats().Entries != 0 {
		t.Fatal("ATS disable not applied")
	}
}

// TestATC checks hits, misses, LRU eviction and the capacity bound.
func TestATC(t *testing.T) {
	e := newEnv(t, envOpts{capacity: 4})
	as := e.space(0)
	for i := range 8 {
		as.Map(uint64(i)*4096, e.g.AllocPage(), true)
	}
	touch := func(pages ...int) {
		for _, p := range pages {
			h := mustAccess(t, e.c, 0, uint64(p)*4096, 8, false)
			h.Release()
		}
	}
	touch(0, 1, 2, 3)
	touch(0, 1, 2, 3)
	s := e.c.Stats()
	if s.Misses != 4 || s.Hits != 4 || s.Entries != 4 || s.Evictions != 0 {
		t.Fatalf("after warm-up: %+v", s)
	}
	touch(0)    // 0 is now most recent; LRU order 1,2,3,0
	touch(4)    // evicts 1
	touch(0, 2) // hits
	s = e.c.Stats()
	if s.Evictions != 1 || s.Hits != 7 || s.Misses != 5 {
		t.Fatalf("after eviction: %+v", s)
	}
	touch(1) // miss again
	if s2 := e.c.Stats(); s2.Misses != 6 {
		t.Fatalf("evicted page did not miss: %+v", s2)
	}
	// Pinned entries are not evicted: holding more handles than the
	// capacity overflows it, and it shrinks back afterwards.
	var hs []ats.Handle
	for p := range 6 {
		hs = append(hs, mustAccess(t, e.c, 0, uint64(p)*4096, 8, false))
	}
	if n := e.c.Stats().Entries; n != 6 {
		t.Fatalf("%d entries with 6 pinned", n)
	}
	for i := range hs {
		hs[i].Release()
	}
	touch(6, 7)
	if n := e.c.Stats().Entries; n != 4 {
		t.Fatalf("ATC did not shrink: %d", n)
	}
}

// TestWriteUpgrade: a page the driver makes writable after a read cached
// it read-only needs no invalidation: the device re-walks before faulting.
func TestWriteUpgrade(t *testing.T) {
	e := newEnv(t, envOpts{})
	as := e.space(0)
	frame := e.g.AllocPage()
	as.Map(0, frame, false)
	h := mustAccess(t, e.c, 0, 0, 8, false)
	h.Release()
	if _, err := e.c.Access(0, 0, 8, true); faultOf(t, err).Kind != ats.FaultWriteProtect {
		t.Fatal("write to read-only page")
	}
	as.Map(0, frame, true)
	h = mustAccess(t, e.c, 0, 0, 8, true)
	h.Release()
	// A fault resolved by mapping the page needs no invalidation either.
	if _, err := e.c.Access(0, 0x1000, 8, false); faultOf(t, err).Kind != ats.FaultNotPresent {
		t.Fatal("unmapped page")
	}
	as.Map(0x1000, e.g.AllocPage(), true)
	h = mustAccess(t, e.c, 0, 0x1000, 8, false)
	h.Release()
}

// TestInvalidate covers each scope, STU-free ranges, ranges never mapped
// and malformed invalidations.
func TestInvalidate(t *testing.T) {
	type acc struct {
		pasid uint32
		page  uint64
	}
	all := []acc{{1, 0}, {1, 1}, {1, 2}, {1, 9}, {2, 0}, {2, 1}}
	for _, tc := range []struct {
		name    string
		inv     ats.Invalidation
		err     error
		dropped []acc
	}{
		{"one page", ats.Invalidation{Scope: ats.ScopeRange, PASID: 1, Addr: 0x1000, Pages: 1}, nil, []acc{{1, 1}}},
		{"range", ats.Invalidation{Scope: ats.ScopeRange, PASID: 1, Addr: 0, Pages: 3}, nil, []acc{{1, 0}, {1, 1}, {1, 2}}},
		{"huge range", ats.Invalidation{Scope: ats.ScopeRange, PASID: 1, Addr: 0x2000, Pages: 1 << 30}, nil, []acc{{1, 2}, {1, 9}}},
		{"other pasid untouched", ats.Invalidation{Scope: ats.ScopeRange, PASID: 2, Addr: 0x1000, Pages: 1}, nil, []acc{{2, 1}}},
		{"pasid", ats.Invalidation{Scope: ats.ScopePASID, PASID: 2}, nil, []acc{{2, 0}, {2, 1}}},
		{"all", ats.Invalidation{Scope: ats.ScopeAll}, nil, all},
		{"never mapped", ats.Invalidation{Scope: ats.ScopeRange, PASID: 1, Addr: 0x7000_0000, Pages: 16}, nil, nil},
		{"unknown pasid", ats.Invalidation{Scope: ats.ScopePASID, PASID: 12345}, nil, nil},
		{"last page of the VA space", ats.Invalidation{Scope: ats.ScopeRange, PASID: 1, Addr: 1<<48 - 4096, Pages: 1}, nil, nil},
		{"zero pages", ats.Invalidation{Scope: ats.ScopeRange, PASID: 1, Addr: 0, Pages: 0}, ats.ErrBadInvalidate, nil},
		{"misaligned", ats.Invalidation{Scope: ats.ScopeRange, PASID: 1, Addr: 0x10, Pages: 1}, ats.ErrBadInvalidate, nil},
		{"beyond 48 bits", ats.Invalidation{Scope: ats.ScopeRange, PASID: 1, Addr: 1 << 48, Pages: 1}, ats.ErrBadInvalidate, nil},
		{"overflowing range", ats.Invalidation{Scope: ats.ScopeRange, PASID: 1, Addr: 1<<48 - 4096, Pages: 2}, ats.ErrBadInvalidate, nil},
		{"pasid too large", ats.Invalidation{Scope: ats.ScopeRange, PASID: 1 << 20, Addr: 0, Pages: 1}, ats.ErrBadPASID, nil},
		{"bad scope", ats.Invalidation{Scope: 9}, ats.ErrBadInvalidate, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			spaces := map[uint32]bool{}
			for _, a := range all {
				if !spaces[a.pasid] {
					spaces[a.pasid] = true
					as := e.space(a.pasid)
					for _, b := range all {
						if b.pasid == a.pasid {
							as.Map(b.page*4096, e.g.AllocPage(), true)
						}
					}
				}
				h := mustAccess(t, e.c, a.pasid, a.page*4096, 8, false)
				h.Release()
			}
			n, err := e.c.Invalidate(tc.inv)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if n != len(tc.dropped) {
				t.Fatalf("dropped %d, want %d", n, len(tc.dropped))
			}
			before := e.c.Stats().Misses
			for _, a := range all {
				h := mustAccess(t, e.c, a.pasid, a.page*4096, 8, false)
				h.Release()
			}
			if miss := e.c.Stats().Misses - before; miss != uint64(len(tc.dropped)) {
				t.Fatalf("%d misses after the invalidation, want %d", miss, len(tc.dropped))
			}
		})
	}
}

// TestInvalidateWaitsForDMA: an invalidation does not complete while a
// handle holds a dropped translation, including one dropped earlier by a
// flush or replaced by a newer walk.
func TestInvalidateWaitsForDMA(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(e *env, as *atstest.AddressSpace)
		inv    ats.Invalidation
	}{
		{"range", nil, ats.Invalidation{Scope: ats.ScopeRange, PASID: 0, Addr: 0x1000, Pages: 1}},
		{"pasid", nil, ats.Invalidation{Scope: ats.ScopePASID, PASID: 0}},
		{"all", nil, ats.Invalidation{Scope: ats.ScopeAll}},
		{"after a flush", func(e *env, _ *atstest.AddressSpace) { e.c.Flush() },
			ats.Invalidation{Scope: ats.ScopeRange, PASID: 0, Addr: 0x1000, Pages: 1}},
		{"after a replacing walk", func(e *env, as *atstest.AddressSpace) {
			// The driver remaps without invalidating yet; a write re-walks
			// and replaces the read-only entry the handle still holds.
			as.Map(0x1000, e.g.AllocPage(), true)
			h, err := e.c.Access(0, 0x1000, 8, true)
			if err != nil {
				panic(err)
			}
			h.Release()
		}, ats.Invalidation{Scope: ats.ScopeRange, PASID: 0, Addr: 0x1000, Pages: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			as := e.space(0)
			as.Map(0x1000, e.g.AllocPage(), false)
			h := mustAccess(t, e.c, 0, 0x1000, 8, false)
			if tc.before != nil {
				tc.before(e, as)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if _, err := e.c.Invalidate(tc.inv); err != nil {
					t.Error(err)
				}
			}()
			select {
			case <-done:
				t.Fatal("invalidation completed while the DMA was in flight")
			case <-time.After(50 * time.Millisecond):
			}
			// Other pages keep translating meanwhile.
			as.Map(0x9000, e.g.AllocPage(), true)
			h2 := mustAccess(t, e.c, 0, 0x9000, 8, true)
			h2.Release()
			h.Release()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("invalidation did not complete after the release")
			}
			if s := e.c.Stats(); s.Draining != 0 || s.InvalidationWaits != 1 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestATCRegisters: ATC_HITS and ATC_MISSES follow the counters, and
// ATC_CAPACITY resizes the cache (evicting down at once), rejects values
// above the maximum and restores the default with 0.
func TestATCRegisters(t *testing.T) {
	e := newEnv(t, envOpts{capacity: 8})
	as := e.space(0)
	for i := range 8 {
		as.Map(uint64(i)*4096, e.g.AllocPage(), true)
	}
	for range 2 {
		for p := range 8 {
			h := mustAccess(t, e.c, 0, uint64(p)*4096, 8, false)
			h.Release()
		}
	}
	reg := func(off uint32) uint32 {
		v, ok := hw.Offsets(e.c).RegRead(off)
		if !ok {
			t.Fatalf("register %#x not in the ATS block", off)
		}
		return v
	}
	if h, m := reg(hw.RegATCHits), reg(hw.RegATCMisses); h != 8 || m != 8 {
		t.Fatalf("hits %d misses %d, want 8 and 8", h, m)
	}
	e.c.Reset() // the registers count from a reset; Stats keeps counting
	e.drv.Enable()
	h := mustAccess(t, e.c, 0, 0, 8, false)
	h.Release()
	if h, m := reg(hw.RegATCHits), reg(hw.RegATCMisses); h != 0 || m != 1 {
		t.Fatalf("after reset: hits %d misses %d, want 0 and 1", h, m)
	}
	if s := e.c.Stats(); s.Hits != 8 || s.Misses != 9 {
		t.Fatalf("Stats after reset: hits %d misses %d, want 8 and 9", s.Hits, s.Misses)
	}
	steps := []struct {
		write, capacity uint32
		maxEntries      int
	}{
		{2, 2, 2},
		{hw.ATCCapacityMax + 1, 2, 2}, // ignored
		{0, 8, 8},                     // default again
		{hw.ATCCapacityMax, hw.ATCCapacityMax, 8},
	}
	for _, s := range steps {
		hw.Offsets(e.c).RegWrite(hw.RegATCCapacity, s.write)
		if got := reg(hw.RegATCCapacity); got != s.capacity {
			t.Errorf("after writing %d: capacity %d, want %d", s.write, got, s.capacity)
		}
		if n := e.c.Stats().Entries; n > s.maxEntries {
			t.Errorf("after writing %d: %d entries, want at most %d", s.write, n, s.maxEntries)
		}
	}
}
