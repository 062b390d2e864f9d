package hw_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// allRegisters is every table with the BAR0 offset of row 0 of each.
func allRegisters() []struct {
	table string
	base  uint32
	regs  []hw.Register
} {
	return []struct {
		table string
		base  uint32
		regs  []hw.Register
	}{
		{"Registers", 0, hw.Registers},
		{"TranslationRegisters", 0, hw.TranslationRegisters},
		{"RDMARegisters", 0, hw.RDMARegisters},
		{"PairRegisters", hw.PairRegBase, hw.PairRegisters},
	}
}

// TestRegisterKinds checks each row against the rules a router relies on:
// access and kind agree, the partial-write rule is the one rule, every
// register has an owner and lies in a window of BAR0's map that lists it.
func TestRegisterKinds(t *testing.T) {
	for _, tab := range allRegisters() {
		for _, r := range tab.regs {
			name := tab.table + "." + r.Name
			okAccess := map[hw.Kind][]hw.Access{
				hw.KindStatus:   {hw.AccessRO},
				hw.KindStorage:  {hw.AccessRW},
				hw.KindDoorbell: {hw.AccessWO},
				hw.KindCommand:  {hw.AccessRW, hw.AccessWO},
				hw.KindRW1C:     {hw.AccessRW},
			}[r.Kind]
			if !slices.Contains(okAccess, r.Access) {
				t.Errorf("%s: kind %v with access %v", name, r.Kind, r.Access)
			}
			want := hw.PartialMerge
			if r.Kind.Action() || r.Kind == hw.KindStatus {
				want = hw.PartialIgnore
			}
			if r.Partial != want {
				t.Errorf("%s: partial writes %v, the rule says %v", name, r.Partial, want)
			}
			if r.Block < 1 || r.Block >= hw.BlockCount || r.Block.String() == "?" {
				t.Errorf("%s: no owning block (%d)", name, r.Block)
			}
			if (r.Block == hw.BlockPair) != (tab.table == "PairRegisters") {
				t.Errorf("%s: block %v in the wrong table", name, r.Block)
			}
			if r.Access == hw.AccessWO && r.Reset != 0 {
				t.Errorf("%s: write-only but resets to %#x", name, r.Reset)
			}
			if r.Doc == "" {
				t.Errorf("%s: no description", name)
			}
			off := tab.base + r.Offset
			in := false
			for _, w := range hw.Windows {
				if off >= w.Start && off+4 <= w.End {
					in = true
					if !slices.Contains(w.Blocks, r.Block) {
						t.Errorf("%s at %#x: window %q does not list block %v", name, off, w.Name, r.Block)
					}
				}
			}
			if !in {
				t.Errorf("%s at %#x: in no window of BAR0's map", name, off)
			}
		}
	}
	for i, w := range hw.Windows {
		if w.Start >= w.End || w.End > hw.RegBARSize || (i > 0 && w.Start < hw.Windows[i-1].End) {
			t.Errorf("window %q [%#x,%#x) empty, outside BAR0 or overlapping its predecessor", w.Name, w.Start, w.End)
		}
	}
}

// TestActionRegisters pins the registers that act on full 32-bit writes
// only. All of them but CTRL and QP CTRL already did before the table
// said so (nic.writeReg, faults.go faultBlock); CTRL and QP CTRL merged
// a partial write with the ENABLE (and BUSY) they read back, so a byte
// write to CTRL took effect where one to ATS_CTRL was dropped.
func TestActionRegisters(t *testing.T) {
	want := []string{
		"DIAG_IRQ", "DIAG_DMA_CTRL", "DIAG_ECHO_CTRL", "DIAG_ECHO", "CTRL", "MISC_IRQ_ARM", "BACKUP_TAIL", "BACKUP_CTRL",
		"ATS_CTRL", "INVQ_TAIL", "PRI_CTRL", "PRQ_HEAD", "PRSPQ_TAIL",
		"PAIR_TX_TAIL", "PAIR_RX_TAIL", "PAIR_CTRL", "PAIR_IRQ_ARM", "PAIR_RX_RESOLVE", "PAIR_RX_TAIL_IRQ",
		"RDMA_CTRL", "CMDQ_TAIL", "EQ_HEAD", "EQ_ARM", "SQ_DOORBELL", "CQ_ARM", "RDMA_MSG_ALARM",
	}
	var got []string
	for _, tab := range allRegisters() {
		for _, r := range tab.regs {
			if r.Writable() && r.Partial == hw.PartialIgnore {
				name := r.Name
				if tab.table == "PairRegisters" {
					name = "PAIR_" + name
				}
				got = append(got, name)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("registers acting on full 32-bit writes only:\n got %v\nwant %v", got, want)
	}
}

func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		off   uint32
		name  string
		block hw.Block
		q     int
	}{
		{hw.RegID, "ID", hw.BlockIdentity, -1},
		{hw.RegCtrl, "CTRL", hw.BlockDatapath, -1},
		{hw.RegCtrl + 1, "CTRL", hw.BlockDatapath, -1}, // a byte inside it
		{hw.RegLateDMA, "LATE_DMA", hw.BlockDiag, -1},
		{hw.RegATSCtrl, "ATS_CTRL", hw.BlockATS, -1},
		{hw.RegATCCapacity, "ATC_CAPACITY", hw.BlockATS, -1},
		{hw.RegPRICtrl, "PRI_CTRL", hw.BlockPRI, -1},
		{hw.RegPRIError + 3, "PRI_ERROR", hw.BlockPRI, -1},
		{hw.RegBackupTail, "BACKUP_TAIL", hw.BlockBackup, -1},
		{hw.PairBase(0) + hw.PairTxBaseLo, "TX_BASE_LO", hw.BlockPair, 0},
		{hw.PairBase(2) + hw.PairRxTail, "RX_TAIL", hw.BlockPair, 2},
		{hw.PairBase(hw.PairMax-1) + hw.PairRxTailIRQ, "RX_TAIL_IRQ", hw.BlockPair, hw.PairMax - 1},
		{0x0014, "", 0, -1},                                          // a hole in the global registers
		{hw.RegLateDMA + 4, "", 0, -1},                               // past the last global register
		{hw.ATSRegEnd - 4, "", 0, -1},                                // a hole at the end of the ATS block
		{hw.PRIRegEnd, "", 0, -1},                                    // between PRI and the backup ring
		{hw.PairBase(1) + hw.PairNotifyHi + 4, "", 0, -1},            // a hole in a pair's block
		{hw.PairBase(hw.PairMax), "", 0, -1},                         // past the last pair
		{hw.RegBARSize - 4, "", 0, -1},                               // end of BAR0
		{0xfffffffc, "", 0, -1},                                      // far outside
		{hw.RegBARSize + hw.RegCtrl, "", 0, -1},                      // no aliasing above BAR0
		{hw.PairRegBase - hw.PairRegStride + hw.PairCtrl, "", 0, -1}, // the pair layout does not repeat below pair 0
	} {
		r, q, ok := hw.Lookup(tc.off)
		if ok != (tc.name != "") || r.Name != tc.name || r.Block != tc.block || q != tc.q {
			t.Errorf("Lookup(%#x) = %s/%v/q%d/%v, want %s/%v/q%d", tc.off, r.Name, r.Block, q, ok, tc.name, tc.block, tc.q)
		}
	}
}

// TestLookupFindsEveryRegister walks BAR0 slot by slot: every table row is
// found at its offset, for every pair, and nothing else is found.
func TestLookupFindsEveryRegister(t *testing.T) {
	want := map[uint32]string{}
	for _, tab := range allRegisters() {
		bases := []uint32{tab.base}
		if tab.table == "PairRegisters" {
			bases = bases[:0]
			for q := range hw.PairMax {
				bases = append(bases, hw.PairBase(q))
			}
		}
		for _, base := range bases {
			for _, r := range tab.regs {
				want[base+r.Offset] = r.Name
			}
		}
	}
	found := 0
	for off := uint32(0); off < hw.RegBARSize; off += 4 {
		r, q, ok := hw.Lookup(off)
		name, exists := want[off]
		if ok != exists || r.Name != name {
			t.Errorf("Lookup(%#x) = %q/%v, want %q/%v", off, r.Name, ok, name, exists)
			continue
		}
		if ok {
			found++
			if (q >= 0) != (r.Block == hw.BlockPair) || (q >= 0 && hw.PairBase(q)+r.Offset != off) {
				t.Errorf("Lookup(%#x): pair %d, offset %#x", off, q, r.Offset)
			}
		}
	}
	if found != len(want) {
		t.Errorf("found %d registers, tables hold %d", found, len(want))
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	offs := []uint32{hw.RegCtrl, hw.RegATSCtrl, hw.PairBase(3) + hw.PairRxTail, 0x0014, hw.RegBARSize}
	if n := testing.AllocsPerRun(100, func() {
		for _, off := range offs {
			hw.Lookup(off)
		}
	}); n != 0 {
		t.Fatalf("Lookup allocates %v times per run", n)
	}
}

func BenchmarkLookup(b *testing.B) {
	offs := []uint32{hw.RegCtrl, hw.RegATSCtrl, hw.PairBase(3) + hw.PairRxTail, 0x0014}
	for i := 0; b.Loop(); i++ {
		hw.Lookup(offs[i%len(offs)])
	}
}

// TestResetValues pins reset values a driver relies on.
func TestResetValues(t *testing.T) {
	for _, tc := range []struct {
		off  uint32
		want uint32
	}{
		{hw.RegID, hw.Magic},
		{hw.RegVersion, hw.InterfaceVersion},
		{hw.RegFeatures, hw.Features},
		{hw.RegDiagDMAStatus, hw.DiagDMAStatusIdle},
		{hw.RegBackupVector, hw.BackupVectorDefault},
		{hw.RegPRQVector, hw.PRQVectorDefault},
		{hw.RegInvqVector, hw.InvqVectorDefault},
		{hw.RegCtrl, 0},
		{hw.PairBase(1) + hw.PairRxPolicy, hw.RxPolicyPin},
	} {
		r, _, ok := hw.Lookup(tc.off)
		if !ok || r.Reset != tc.want || r.ResetNote != "" {
			t.Errorf("%s (%#x) resets to %#x %q, want %#x", r.Name, tc.off, r.Reset, r.ResetNote, tc.want)
		}
	}
	for _, off := range []uint32{hw.RegMACLo, hw.RegMACHi, hw.RegPairMax, hw.RegATCCapacity} {
		if r, _, _ := hw.Lookup(off); r.ResetNote == "" {
			t.Errorf("%s: the reset value depends on the device, but no note says so", r.Name)
		}
	}
}

// TestVectors: the vector table names every MSI-X vector once, in order,
// and agrees with the constants and functions that choose vectors.
func TestVectors(t *testing.T) {
	if len(hw.Vectors) != hw.MSIXVectors {
		t.Fatalf("%d vectors described, the function has %d", len(hw.Vectors), hw.MSIXVectors)
	}
	for i, v := range hw.Vectors {
		if v.Vector != i || v.Name == "" || v.Doc == "" {
			t.Errorf("entry %d: %+v", i, v)
		}
	}
	for q := range hw.PairMax {
		if hw.Vectors[hw.PairVector(q)].Name != "pair "+string(rune('0'+q)) {
			t.Errorf("vector %d is not pair %d's", hw.PairVector(q), q)
		}
	}
	for v, name := range map[int]string{hw.MiscVector: "misc", hw.PRQVectorDefault: "page requests",
		hw.InvqVectorDefault: "invalidation", hw.BackupVectorDefault: "backup ring", hw.DiagEchoVector: "echo"} {
		if hw.Vectors[v].Name != name {
			t.Errorf("vector %d is %q, want %q", v, hw.Vectors[v].Name, name)
		}
	}
}

// TestLayoutWriters: every shared structure says who writes it, and in a
// structure both sides write, every field does.
func TestLayoutWriters(t *testing.T) {
	for _, l := range append(append([]*hw.Layout{}, hw.Layouts...), hw.TranslationLayouts...) {
		switch l.Writer {
		case hw.WrittenByDriver, hw.WrittenByDevice:
		case hw.WrittenPerField:
			for _, f := range l.Fields {
				if !strings.HasPrefix(f.Doc, "driver: ") && !strings.HasPrefix(f.Doc, "device: ") && f.Name != "rsvd" {
					t.Errorf("%s.%s: doc %q does not say who writes it", l.Name, f.Name, f.Doc)
				}
			}
		default:
			t.Errorf("%s: no writer", l.Name)
		}
	}
}

// TestAllRegisters: the iterator yields every row of every table once per
// instance (each pair's registers for every pair), each at an offset
// where Lookup finds that very row.
func TestAllRegisters(t *testing.T) {
	want := len(hw.Registers) + len(hw.TranslationRegisters) + len(hw.RDMARegisters) + hw.PairMax*len(hw.PairRegisters)
	seen := map[uint32]bool{}
	for off, r := range hw.AllRegisters() {
		if seen[off] {
			t.Errorf("%s at %#x yielded twice", r.Name, off)
		}
		seen[off] = true
		if got, _, ok := hw.Lookup(off); !ok || got != r {
			t.Errorf("%s at %#x: Lookup finds %q", r.Name, off, got.Name)
		}
	}
	if len(seen) != want {
		t.Errorf("yielded %d registers, the tables hold %d", len(seen), want)
	}
	n := 0
	for range hw.AllRegisters() {
		if n++; n == 3 {
			break
		}
	}
	if n != 3 {
		t.Errorf("stopping early yielded %d", n)
	}
}
