package ats_test

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/internal/fuzzseed"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// go's fuzz workers die silently; keep what the runtime says (ci/fuzz.sh).
func init() { fuzzseed.KeepCrashOutput() }

// fuzzRAM is the guest RAM of the walk fuzzer: small, so random entries
// often land inside it.
const fuzzRAM = 16 * 4096

// A walk fuzz input describes guest RAM as the 64-bit words that are not
// zero: records of a little-endian uint16 word index (modulo the words of
// fuzzRAM) and the uint64 stored there, a later record overwriting an
// earlier one. Every read of the walker is an aligned 64-bit entry, so this
// reaches every RAM content a raw image does, while a chain of tables stays
// a few dozen bytes: the fuzzer's minimizer, quadratic in the input length,
// spent whole minutes on each new 24 KiB image of the earlier raw-RAM input
// (issue 10), and mutations land on entries rather than
// on zero filler.
const walkRecord = 2 + 8

// walkWords applies the records of in to g's RAM and returns the byte
// offsets it wrote, for clearWords.
func walkWords(g *atstest.Guest, in []byte, dirty []uint64) []uint64 {
	for ; len(in) >= walkRecord; in = in[walkRecord:] {
		off := uint64(binary.LittleEndian.Uint16(in)) % (fuzzRAM / 8) * 8
		g.Store64(g.Base+off, binary.LittleEndian.Uint64(in[2:]))
		dirty = append(dirty, off)
	}
	return dirty
}

// clearWords zeroes what walkWords wrote: RAM is all zero again, without
// clearing all of it for every input.
func clearWords(g *atstest.Guest, dirty []uint64) []uint64 {
	for _, off := range dirty {
		g.Store64(g.Base+off, 0)
	}
	return dirty[:0]
}

// walkEntry is one record of a walk fuzz input: v at IOVA iova of RAM at base.
func walkEntry(base, iova, v uint64) []byte {
	b := binary.LittleEndian.AppendUint16(nil, uint16((iova-base)/8))
	return binary.LittleEndian.AppendUint64(b, v)
}

// refWalk is an independent reading of the page-table format in
// vdevice/hw, over a plain byte image of guest RAM at base.
func refWalk(ram []byte, base, table, entries uint64, pasid uint32, va uint64) (frame uint64, write bool, kind ats.FaultKind, level int) {
	read := func(iova uint64) (uint64, bool) {
		if iova < base || iova-base+8 > uint64(len(ram)) {
			return 0, false
		}
		return binary.LittleEndian.Uint64(ram[iova-base:]), true
	}
	const addr, rsvd = 0x000f_ffff_ffff_f000, 0xfff0_0000_0000_0000
	if uint64(pasid) >= entries {
		return 0, false, ats.FaultPASID, -1
	}
	e, ok := read(table + uint64(pasid)*16)
	switch {
	case !ok:
		return 0, false, ats.FaultTable, 0
	case e&1 == 0:
		return 0, false, ats.FaultPASID, 0
	case e&rsvd != 0:
		return 0, false, ats.FaultReserved, 0
	}
	t, write := e&addr, true
	for level := 4; level >= 1; level-- {
		idx := (va >> (12 + 9*(level-1))) & 511
		v, ok := read(t + idx*8)
		switch {
		case !ok:
			return 0, false, ats.FaultTable, level
		case v&1 == 0:
			return 0, false, ats.FaultNotPresent, level
		case v&rsvd != 0:
			return 0, false, ats.FaultReserved, level
		}
		write = write && v&2 != 0
		t = v & addr
	}
	if t < base || t >= base+uint64(len(ram)) {
		return 0, false, ats.FaultTable, -1
	}
	return t, write, 0, 0
}

// walkSeed is the records of a PASID table in page 0 and a valid 4-level
// chain for pasid 1 at va in pages 1 to 4, to the frame in page 5, leaf
// writable or not.
func walkSeed(base, va uint64, write bool) []byte {
	in := walkEntry(base, base+16, (base+0x1000)|1)
	t := base + 0x1000
	for level := 4; level >= 1; level-- {
		next := base + uint64(6-level)*0x1000
		v := next | 3
		if level == 1 && !write {
			v = next | 1
		}
		in = append(in, walkEntry(base, t+((va>>(12+9*(level-1)))&511)*8, v)...)
		t = next
	}
	return in
}

// FuzzWalk translates arbitrary guest memory as page tables and checks the
// result (segments or fault kind and level) against refWalk, twice: from
// an empty ATC and again from what the first Access cached. Nothing may
// panic and every segment must lie in guest RAM.
func FuzzWalk(f *testing.F) {
	g := atstest.NewGuest(f, fuzzRAM)
	c, err := ats.New(ats.Config{Mem: g.Mem, Capacity: 8})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(c.Close)
	const va = 0x7f12_3456_7000
	f.Add(walkSeed(g.Base, va, true), uint32(1), uint64(va+0x10), uint16(100), true, uint8(2))
	f.Add(walkSeed(g.Base, va, false), uint32(1), uint64(va), uint16(4096), true, uint8(3))
	f.Add(walkSeed(g.Base, va, true), uint32(1), uint64(va+0xff0), uint16(0x20), false, uint8(1))
	// The second page's leaf is in the same level-1 table: present in one
	// seed, missing in the other (a resolvable fault listing one page).
	two := append(walkSeed(g.Base, va, true), walkEntry(g.Base, g.Base+0x4000+((va>>12)&511+1)*8, (g.Base+0x6000)|3)...)
	f.Add(two, uint32(1), uint64(va+0xf00), uint16(0x200), true, uint8(1))
	f.Add(walkSeed(g.Base, va, true), uint32(1), uint64(va+0xf00), uint16(0x200), true, uint8(1))
	f.Add(walkEntry(g.Base, g.Base, 0xffff_ffff_ffff_ffff), uint32(0), uint64(0), uint16(8), false, uint8(0))
	wf := &walkFuzz{g: g, c: c}
	f.Fuzz(wf.check)
}

// walkFuzz is FuzzWalk's state: one guest and one Context for every input.
type walkFuzz struct {
	g     *atstest.Guest
	c     *ats.Context
	dirty []uint64 // RAM words the last input wrote
}

// check is FuzzWalk's body.
func (wf *walkFuzz) check(t *testing.T, words []byte, pasid uint32, va uint64, n uint16, write bool, tableLog uint8) {
	g, c := wf.g, wf.c
	wf.dirty = walkWords(g, words, clearWords(g, wf.dirty))
	entries := uint32(1) << (tableLog % 5)
	if err := c.SetPASIDTable(g.Base, entries); err != nil {
		t.Fatal(err)
	}
	pasid %= 32
	end := va + uint64(n)
	if n == 0 || end < va || end > 1<<48 {
		h, err := c.Access(pasid, va, int(n), write)
		h.Release()
		if f, ok := err.(*ats.Fault); !ok || f.Kind != ats.FaultAddress {
			t.Fatalf("bad range: %v", err)
		}
		return
	}
	// The reference outcome: the first page that does not translate
	// decides; if a page request can resolve it, the fault lists every
	// such page, unless a later page cannot be resolved at all.
	type ref struct {
		kind  ats.FaultKind
		level int
	}
	refAt := func(page uint64) ref {
		_, w, kind, level := refWalk(g.RAM, g.Base, g.Base, uint64(entries), pasid, page)
		if kind == 0 && write && !w {
			return ref{ats.FaultWriteProtect, -1}
		}
		return ref{kind, level}
	}
	var want *ref
	var wantVA uint64
	var wantPages []uint64
	for page := va &^ 4095; page < end; page += 4096 {
		r := refAt(page)
		if r.kind == 0 {
			continue
		}
		if want == nil {
			want, wantVA = &r, max(page, va)
			if r.kind.Resolvable() {
				wantPages = append(wantPages, page)
				continue
			}
			break
		}
		if !r.kind.Resolvable() {
			want, wantVA, wantPages = &r, page, nil
			break
		}
		wantPages = append(wantPages, page)
	}
	for try := range 2 {
		h, err := c.Access(pasid, va, int(n), write)
		if want == nil {
			if err != nil {
				t.Fatalf("try %d: fault %v where the reference translates", try, err)
			}
		} else {
			f, ok := err.(*ats.Fault)
			if !ok {
				t.Fatalf("try %d: error %v, reference faults %v at %#x", try, err, want.kind, wantVA)
			}
			if f.Kind != want.kind || f.Level != want.level || f.VA != wantVA || !slices.Equal(f.Pages, wantPages) {
				t.Fatalf("try %d: fault %v level %d at %#x pages %x; reference %v level %d at %#x pages %x",
					try, f.Kind, f.Level, f.VA, f.Pages, want.kind, want.level, wantVA, wantPages)
			}
			continue
		}
		// Success: every page agrees with the reference and lies in RAM.
		pos := va
		total := 0
		for _, s := range h.Segments() {
			frame, w, kind, _ := refWalk(g.RAM, g.Base, g.Base, uint64(entries), pasid, pos&^4095)
			if kind != 0 || write && !w {
				t.Fatalf("try %d: translated %#x, reference faults %v", try, pos, kind)
			}
			if s.IOVA != frame+pos%4096 || s.Len <= 0 || s.Len > 4096 || s.IOVA%4096+uint64(s.Len) > 4096 {
				t.Fatalf("try %d: segment %+v for va %#x, reference frame %#x", try, s, pos, frame)
			}
			if !g.Contains(s.IOVA, s.Len) {
				t.Fatalf("try %d: segment %+v outside guest RAM", try, s)
			}
			pos += uint64(s.Len)
			total += s.Len
		}
		if total != int(n) {
			t.Fatalf("try %d: segments cover %d bytes of %d", try, total, n)
		}
		h.Release()
	}
}

// refInvDesc says what the device must do with one descriptor: 0 run it,
// or the ATSERR code it must halt with.
func refInvDesc(b []byte, ramBase, ramEnd uint64) uint32 {
	op := binary.LittleEndian.Uint16(b[0:])
	flags := binary.LittleEndian.Uint16(b[2:])
	pasid := binary.LittleEndian.Uint32(b[4:])
	addr := binary.LittleEndian.Uint64(b[8:])
	pages := binary.LittleEndian.Uint64(b[16:])
	switch op {
	case 1:
		if flags != 0 || pasid >= 1<<20 || addr%4096 != 0 || pages == 0 || addr >= 1<<48 || pages > (1<<36)-addr/4096 {
			return hw.ATSErrBadInvDesc
		}
	case 2:
		if flags != 0 || pasid >= 1<<20 {
			return hw.ATSErrBadInvDesc
		}
	case 3:
		if flags != 0 {
			return hw.ATSErrBadInvDesc
		}
	case 4:
		if flags&^1 != 0 || addr%4 != 0 {
			return hw.ATSErrBadInvDesc
		}
		if addr < ramBase || addr > ramEnd-4 {
			return hw.ATSErrBadWaitAddr
		}
	default:
		return hw.ATSErrBadInvDesc
	}
	return 0
}

// FuzzInvDesc posts an arbitrary descriptor through the invalidation queue,
// followed by a WAIT: either both complete, or the queue halts with the
// error the reference predicts; the device recovers after a reset.
func FuzzInvDesc(f *testing.F) {
	e := newEnv(f, envOpts{ram: 1 << 20, queue: 8})
	e.space(1).Map(0, e.g.AllocPage(), true)
	e.drv.Timeout = 5 * time.Second
	target := e.g.Alloc(8, 8)
	seed := func(x atstest.Desc) []byte {
		b := make([]byte, hw.InvDescSize)
		x.Encode(b)
		return b
	}
	f.Add(seed(atstest.Range(1, 0, 1)))
	f.Add(seed(atstest.Range(1, 1<<48-4096, 1)))
	f.Add(seed(atstest.PASID(7)))
	f.Add(seed(atstest.All()))
	f.Add(seed(atstest.Desc{Op: hw.InvOpWait, Flags: hw.InvFlagIRQ, Addr: target, Data: 5}))
	f.Add(seed(atstest.Desc{Op: hw.InvOpWait, Addr: 0x8000_0000}))
	f.Add(seed(atstest.Range(1, 0x1000, 0)))
	f.Add(make([]byte, 32))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Each descriptor starts on a fresh queue, so a bad one is at
		// index 0.
		e.drv.Reset()
		desc := make([]byte, hw.InvDescSize)
		copy(desc, b)
		// Keep WAIT writes away from the device's own structures.
		if binary.LittleEndian.Uint16(desc) == hw.InvOpWait {
			a := binary.LittleEndian.Uint64(desc[8:])
			if a >= e.g.Base && a < e.g.Base+uint64(len(e.g.RAM)) {
				binary.LittleEndian.PutUint64(desc[8:], target+a%4)
			}
		}
		want := refInvDesc(desc, e.g.Base, e.g.Base+uint64(len(e.g.RAM)))
		d := atstest.Desc{
			Op: binary.LittleEndian.Uint16(desc[0:]), Flags: binary.LittleEndian.Uint16(desc[2:]),
			PASID: binary.LittleEndian.Uint32(desc[4:]), Addr: binary.LittleEndian.Uint64(desc[8:]),
			Pages: binary.LittleEndian.Uint64(desc[16:]), Data: binary.LittleEndian.Uint32(desc[24:]),
		}
		err := e.drv.Sync(d)
		switch {
		case want == 0 && err != nil:
			t.Fatalf("valid descriptor % x: %v", desc, err)
		case want != 0 && !isDeviceError(err, want, 0):
			t.Fatalf("descriptor % x: %v, want device error %d at index 0", desc, err, want)
		}
		h := mustAccess(t, e.c, 1, 0, 8, true)
		h.Release()
	})
}
