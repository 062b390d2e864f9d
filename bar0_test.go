package npfnic

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// logRecorder keeps the messages logged through it, with their attributes.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// take returns the records with message msg logged since the last take,
// each as its attributes, and forgets every record.
func (l *logRecorder) take(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var got []map[string]any
	for _, r := range l.recs {
		if r.Message == msg {
			attrs := map[string]any{}
			r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.Any(); return true })
			got = append(got, attrs)
		}
	}
	l.recs = nil
	return got
}

// newLoggedNIC is a NIC whose log the test reads, with guest memory but no
// client.
func newLoggedNIC(t *testing.T) (*NIC, *logRecorder) {
	t.Helper()
	logs := &logRecorder{}
	n, err := New(Options{Logger: slog.New(logs), Mem: guestmem.New()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, logs
}

// TestEveryRegisterHasItsOwner: every register of the table is decoded by
// the block the table gives it, and every block has an owner.
func TestEveryRegisterHasItsOwner(t *testing.T) {
	n, _ := newLoggedNIC(t)
	// A block needs an owner once BAR0 decodes a register of it (the
	// RDMA block's registers are defined before its engine is routed).
	decoded := map[hw.Block]bool{}
	for _, r := range hw.AllRegisters() {
		decoded[r.Block] = true
	}
	for b := hw.Block(1); b < hw.BlockCount; b++ {
		if decoded[b] && n.blocks[b] == nil {
			t.Errorf("block %v has no owner", b)
		}
	}
	for off := range hw.AllRegisters() {
		r, q, _ := hw.Lookup(off)
		b := n.blocks[r.Block]
		if b == nil {
			continue
		}
		var ok bool
		if r.Access == hw.AccessWO {
			// Nothing reads it: a zero write to a doorbell or command of
			// an idle engine is what shows the owner decodes it.
			ok = b.WriteRegister(r, q, 0)
		} else {
			_, ok = b.ReadRegister(r, q)
		}
		if !ok {
			t.Errorf("%s at %#x: block %v (%T) does not decode it", r.Name, off, r.Block, b)
		}
	}
}

// fakeBlock records what the router hands a block.
type fakeBlock struct {
	vals   map[uint32]uint32
	reads  int
	writes [][2]uint32 // offset, value
}

func (f *fakeBlock) Blocks() []hw.Block { return nil }

func (f *fakeBlock) ReadRegister(r hw.Register, q int) (uint32, bool) {
	f.reads++
	return f.vals[barOffset(r, q)], true
}

func (f *fakeBlock) WriteRegister(r hw.Register, q int, v uint32) bool {
	off := barOffset(r, q)
	f.writes = append(f.writes, [2]uint32{off, v})
	f.vals[off] = v
	return true
}

// barOffset is the BAR0 offset of the register hw.Lookup decoded as r, q.
func barOffset(r hw.Register, q int) uint32 {
	if q >= 0 {
		return hw.PairBase(q) + r.Offset
	}
	return r.Offset
}

// TestPartialWriteRule walks every register of the table with writes of
// every width and position inside it, each register holding 0x11223344,
// and checks what its owner receives against the register's rule
// (hw.PartialWriteRule): a full write reaches a writable register as
// written; a partial one merges into a storage register's value and is
// dropped, with a "partial write" log, for doorbells and commands;
// read-only registers receive no write at all. Reads of write-only
// registers return 0 without asking the owner.
func TestPartialWriteRule(t *testing.T) {
	n, logs := newLoggedNIC(t)
	fake := &fakeBlock{}
	for b := range n.blocks {
		n.blocks[b] = fake
	}
	const cur = 0x11223344
	shapes := []struct{ at, size int }{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {0, 2}, {1, 2}, {2, 2}, {0, 3}, {1, 3}, {0, 4}}
	for off, r := range hw.AllRegisters() {
		for _, sh := range shapes {
			name := fmt.Sprintf("%s@%#x/%d+%d", r.Name, off, sh.at, sh.size)
			fake.vals, fake.reads, fake.writes = map[uint32]uint32{off: cur}, 0, nil
			n.partialLog = rateLimit{}
			p := make([]byte, sh.size)
			var mask, v uint32
			for i := range p {
				p[i] = byte(0xa0 + i)
				shift := 8 * uint32(sh.at+i)
				mask |= 0xff << shift
				v |= uint32(p[i]) << shift
			}
			if err := n.RegionWrite(hw.RegBAR, uint64(off)+uint64(sh.at), p); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var want [][2]uint32
			wantLog := false
			switch {
			case !r.Writable():
			case mask == 0xffffffff:
				want = [][2]uint32{{off, v}}
			case r.Partial == hw.PartialMerge:
				want = [][2]uint32{{off, cur&^mask | v}}
			default:
				wantLog = true
			}
			if fmt.Sprint(fake.writes) != fmt.Sprint(want) {
				t.Errorf("%s (%v, partial %v): owner got writes %x, want %x", name, r.Kind, r.Partial, fake.writes, want)
			}
			got := logs.take("partial write")
			if len(got) != btoi(wantLog) {
				t.Errorf("%s: %d partial-write logs, want %d", name, len(got), btoi(wantLog))
			} else if wantLog && (got[0]["reg"] != r.Name || got[0]["byte_mask"] != uint64(mask)) {
				t.Errorf("%s: logged %v", name, got[0])
			}
		}
		fake.vals, fake.reads = map[uint32]uint32{off: cur}, 0
		want := uint32(cur)
		if r.Access == hw.AccessWO {
			want = 0
		}
		if got := rd32(t, n, hw.RegBAR, uint64(off)); got != want || (fake.reads != 0) == (r.Access == hw.AccessWO) {
			t.Errorf("%s (%v): read %#x with %d owner reads, want %#x", r.Name, r.Access, got, fake.reads, want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestWriteAcrossRegisters: an unaligned write is split at register
// boundaries and each part follows its own register's rule.
func TestWriteAcrossRegisters(t *testing.T) {
	n, _, _, _ := newTestNIC(t)
	// SCRATCH's upper half and DIAG_IRQ's lower half: the storage
	// register merges, the command ignores its part.
	wr32(t, n, hw.RegBAR, hw.RegScratch, 0x11223344)
	if err := n.RegionWrite(hw.RegBAR, hw.RegScratch+2, []byte{0xaa, 0xbb, 1, 0}); err != nil {
		t.Fatal(err)
	}
	if got := rd32(t, n, hw.RegBAR, hw.RegScratch); got != 0xbbaa3344 {
		t.Fatalf("SCRATCH %#x", got)
	}
	// DIAG_DMA_ADDR_LO's upper half and ADDR_HI's lower half: both merge.
	wr32(t, n, hw.RegBAR, hw.RegDiagDMAAddrLo, 0x11223344)
	wr32(t, n, hw.RegBAR, hw.RegDiagDMAAddrHi, 0x55667788)
	if err := n.RegionWrite(hw.RegBAR, hw.RegDiagDMAAddrLo+2, []byte{0xaa, 0xbb, 0xcc, 0xdd}); err != nil {
		t.Fatal(err)
	}
	if lo, hi := rd32(t, n, hw.RegBAR, hw.RegDiagDMAAddrLo), rd32(t, n, hw.RegBAR, hw.RegDiagDMAAddrHi); lo != 0xbbaa3344 || hi != 0x5566ddcc {
		t.Fatalf("ADDR_LO %#x ADDR_HI %#x", lo, hi)
	}
}

// TestPartialWritesOfRealRegisters: the rule holds through the real
// owners. A byte written to CTRL (a command) used to enable the datapath
// while one written to ATS_CTRL was dropped; both are dropped now, and
// storage registers of every owner merge.
func TestPartialWritesOfRealRegisters(t *testing.T) {
	n, _, _, _ := newTestNIC(t)
	for _, tc := range []struct {
		name string
		off  uint32
		p    []byte
	}{
		{"CTRL", hw.RegCtrl, []byte{hw.CtrlEnable}},
		{"PAIR_CTRL", hw.PairBase(0) + hw.PairCtrl, []byte{hw.PairCtrlEnable}},
		{"ATS_CTRL", hw.RegATSCtrl, []byte{hw.ATSCtrlEnable}},
		{"PRI_CTRL", hw.RegPRICtrl, []byte{hw.PRICtrlEnable}},
		{"BACKUP_CTRL", hw.RegBackupCtrl, []byte{hw.BackupCtrlEnable}},
	} {
		n.RegionWrite(hw.RegBAR, uint64(tc.off), tc.p)
		if got := rd32(t, n, hw.RegBAR, uint64(tc.off)); got != 0 {
			t.Errorf("%s after a %d-byte write: %#x", tc.name, len(tc.p), got)
		}
	}
	if n.Ethernet().Enabled() || n.Ethernet().Pair(0).Busy() {
		t.Fatal("a partial write enabled the datapath")
	}
	for _, tc := range []struct {
		name string
		off  uint32
		full uint32
		at   int
		p    []byte
		want uint32
	}{
		{"SCRATCH", hw.RegScratch, 0x11223344, 1, []byte{0xaa}, 0x1122aa44},
		{"STATUS_ADDR_LO", hw.RegStatusAddrLo, 0x11223340, 2, []byte{0xaa, 0xbb}, 0xbbaa3340},
		{"PAIR_TX_BASE_HI", hw.PairBase(1) + hw.PairTxBaseHi, 0x11223344, 0, []byte{0xaa}, 0x112233aa},
		{"BACKUP_SIZE", hw.RegBackupSize, 0x100, 1, []byte{0x02}, 0x200},
		{"INVQ_BASE_LO", hw.RegInvqBaseLo, 0x11223340, 3, []byte{0xaa}, 0xaa223340},
		{"ATC_CAPACITY", hw.RegATCCapacity, 0x102, 1, []byte{0x03}, 0x302},
		{"PRSPQ_BASE_HI", hw.RegPRSPQBaseHi, 0x11223344, 2, []byte{0xaa}, 0x11aa3344},
	} {
		wr32(t, n, hw.RegBAR, uint64(tc.off), tc.full)
		n.RegionWrite(hw.RegBAR, uint64(tc.off)+uint64(tc.at), tc.p)
		if got := rd32(t, n, hw.RegBAR, uint64(tc.off)); got != tc.want {
			t.Errorf("%s: %#x, want %#x", tc.name, got, tc.want)
		}
	}
}

// TestUnusedOffsetsReadZero: every offset of BAR0 that holds no register,
// inside a block's window (the unused ends of the ATS and PRI blocks, the
// holes between global registers and in a pair's block) or outside every
// window, reads 0 after a write of all ones. The ATS and PRI blocks used
// to store such writes and read them back.
func TestUnusedOffsetsReadZero(t *testing.T) {
	n, _, _, _ := newTestNIC(t)
	checked := 0
	for off := uint32(0); off < hw.RegBARSize; off += 4 {
		if _, _, ok := hw.Lookup(off); ok {
			continue
		}
		wr32(t, n, hw.RegBAR, uint64(off), 0xffffffff)
		if got := rd32(t, n, hw.RegBAR, uint64(off)); got != 0 {
			t.Errorf("unused offset %#x reads %#x", off, got)
		}
		checked++
	}
	for _, off := range []uint32{hw.ATSRegEnd - 4, hw.PRIRegEnd - 4, hw.RegPRIError + 4} {
		if _, _, ok := hw.Lookup(off); ok {
			t.Errorf("%#x holds a register; pick another unused offset", off)
		}
	}
	if checked == 0 {
		t.Fatal("no unused offset checked")
	}
}

// TestPartialWriteLogIsRateLimited: a guest writing bytes to a doorbell in
// a loop gets one log line per second, which counts what it held back.
func TestPartialWriteLogIsRateLimited(t *testing.T) {
	n, logs := newLoggedNIC(t)
	for range 100 {
		n.RegionWrite(hw.RegBAR, uint64(hw.PairBase(0)+hw.PairTxTail), []byte{1})
	}
	got := logs.take("partial write")
	if len(got) != 1 || got[0]["pair"] != int64(0) || got[0]["reg"] != "TX_TAIL" {
		t.Fatalf("logged %v", got)
	}
	var l rateLimit
	t0 := time.Unix(1000, 0)
	for _, step := range []struct {
		at         time.Duration
		ok         bool
		suppressed uint64
	}{
		{0, true, 0},
		{time.Millisecond, false, 0},
		{logEvery - 1, false, 0},
		{logEvery, true, 2},
		{logEvery + 1, false, 0},
		{3 * logEvery, true, 1},
		{5 * logEvery, true, 0},
	} {
		ok, suppressed := l.allow(t0.Add(step.at))
		if ok != step.ok || suppressed != step.suppressed {
			t.Errorf("at %v: allow = %v, %d; want %v, %d", step.at, ok, suppressed, step.ok, step.suppressed)
		}
	}
}

// TestNICWorksBeforeAttach: New builds every engine, so the function
// answers BAR0 and config space and has its engines before a client's
// interrupts are attached.
func TestNICWorksBeforeAttach(t *testing.T) {
	n, _ := newLoggedNIC(t)
	if n.Ethernet() == nil || n.ATS() == nil || n.PRI() == nil || n.Memory() == nil {
		t.Fatal("an engine is missing")
	}
	if got := rd32(t, n, hw.RegBAR, hw.RegATCCapacity); got != 1024 {
		t.Fatalf("ATC_CAPACITY %d", got)
	}
	wr32(t, n, hw.RegBAR, uint64(hw.PairBase(0)+hw.PairTxSize), 64)
	if got := rd32(t, n, hw.RegBAR, uint64(hw.PairBase(0)+hw.PairTxSize)); got != 64 {
		t.Fatalf("PAIR_TX_SIZE %d", got)
	}
	wr32(t, n, hw.RegBAR, hw.RegDiagIRQ, 1) // no client: logged, not fired
	if err := n.Reset(); err != nil {
		t.Fatal(err)
	}
	n.ClientDisconnected()
	if got := rd32(t, n, hw.RegBAR, uint64(hw.PairBase(0)+hw.PairTxSize)); got != 0 {
		t.Fatalf("PAIR_TX_SIZE %d after the resets", got)
	}
}

// BenchmarkBAR0 measures the router on the driver's hot path: a TX
// doorbell write and a storage register read.
func BenchmarkBAR0(b *testing.B) {
	n, err := New(Options{Mem: guestmem.New()})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	tail := uint64(hw.PairBase(0) + hw.PairTxTail)
	p := make([]byte, 4)
	b.Run("doorbell", func(b *testing.B) {
		for b.Loop() {
			n.RegionWrite(hw.RegBAR, tail, p)
		}
	})
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			n.RegionRead(hw.RegBAR, hw.RegScratch, p)
		}
	})
}
