package ethring

import (
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestStatusAddrRegisters: STATUS_ADDR_LO and _HI read back as written,
// only a write of HI latches the address (the block is then written), and
// every reset forgets them.
func TestStatusAddrRegisters(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	reg := func(off uint32) uint32 {
		t.Helper()
		v, ok := hw.Offsets(g.d).RegRead(off)
		if !ok {
			t.Fatalf("%#x not decoded", off)
		}
		return v
	}
	write := func(off, v uint32) {
		t.Helper()
		if !hw.Offsets(g.d).RegWrite(off, v) {
			t.Fatalf("%#x not decoded", off)
		}
	}
	for _, reset := range []struct {
		name string
		do   func()
	}{
		{"CTRL_RESET", func() { write(hw.RegCtrl, hw.CtrlReset) }},
		{"Reset", g.d.Reset},
	} {
		sb := g.alloc(hw.StatusBlockSize, hw.StatusBlockAlign)
		for i := range g.bytes(sb, hw.StatusBlockSize) {
			g.bytes(sb, hw.StatusBlockSize)[i] = 0xee
		}
		write(hw.RegStatusAddrLo, uint32(sb))
		if reg(hw.RegStatusAddrLo) != uint32(sb) || reg(hw.RegStatusAddrHi) != 0 {
			t.Fatalf("LO/HI read %#x/%#x after LO", reg(hw.RegStatusAddrLo), reg(hw.RegStatusAddrHi))
		}
		if g.u32(sb+hw.StatusBlockSize-4) != 0xeeeeeeee {
			t.Fatal("LO alone latched the address")
		}
		write(hw.RegStatusAddrHi, uint32(sb>>32))
		g.waitFor("status block written after HI", func() bool { return g.u32(sb+hw.StatusBlockSize-4) == 0 })
		reset.do()
		if lo, hi := reg(hw.RegStatusAddrLo), reg(hw.RegStatusAddrHi); lo != 0 || hi != 0 {
			t.Fatalf("%s: LO/HI %#x/%#x", reset.name, lo, hi)
		}
		if g.d.status.Load() != nil {
			t.Fatalf("%s: status block still set", reset.name)
		}
	}
}

// TestRegisterBlocks: the datapath decodes its own registers, the backup
// ring's and every pair's, by BAR0 offset, and no other offset.
func TestRegisterBlocks(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 2})
	for off, r := range hw.AllRegisters() {
		_, ok := hw.Offsets(g.d).RegRead(off)
		mine := r.Block == hw.BlockDatapath || r.Block == hw.BlockBackup || r.Block == hw.BlockPair
		if ok != mine {
			t.Errorf("%s (%v) at %#x: decoded %v", r.Name, r.Block, off, ok)
		}
	}
	if !hw.Offsets(g.d).RegWrite(hw.PairBase(1)+hw.PairTxSize, 64) || g.d.Pair(1).ReadReg(hw.PairTxSize) != 64 {
		t.Fatal("pair 1's TX_SIZE not written through its BAR0 offset")
	}
	// A pair the function does not offer reads 0 and ignores writes.
	if !hw.Offsets(g.d).RegWrite(hw.PairBase(2)+hw.PairTxSize, 64) {
		t.Fatal("pair 2's block not decoded")
	}
	if v, _ := hw.Offsets(g.d).RegRead(hw.PairBase(2) + hw.PairTxSize); v != 0 {
		t.Fatalf("pair 2's TX_SIZE reads %d", v)
	}
	write := func(off, v uint32) { hw.Offsets(g.d).RegWrite(off, v) }
	write(hw.RegCtrl, 0)
	if v, _ := hw.Offsets(g.d).RegRead(hw.RegCtrl); v&hw.CtrlEnable != 0 || g.d.Enabled() {
		t.Fatalf("CTRL %#x after disable", v)
	}
	write(hw.RegCtrl, hw.CtrlEnable|hw.CtrlBusy) // BUSY is read-only
	if v, _ := hw.Offsets(g.d).RegRead(hw.RegCtrl); v != hw.CtrlEnable|hw.CtrlBusy || !g.d.Enabled() {
		t.Fatalf("CTRL %#x after enable (a status block is set: BUSY)", v)
	}
	write(hw.RegMiscIRQArm, 1)
	g.d.SetLink(false)
	g.waitFor("misc interrupt armed through MISC_IRQ_ARM", func() bool { return g.irq.count(hw.MiscVector) == 1 })
	if v, _ := hw.Offsets(g.d).RegRead(hw.RegMiscIRQArm); v != 0 {
		t.Fatalf("MISC_IRQ_ARM reads %#x", v)
	}
}
