package npfnic

import (
	"encoding/binary"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

type fakeIRQ struct {
	mu      sync.Mutex
	fired   []int
	pending map[int]bool
}

func (f *fakeIRQ) Trigger(v int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fired = append(f.fired, v)
	return nil
}
func (f *fakeIRQ) TriggerIndex(i, s int) error { return nil }
func (f *fakeIRQ) Pending(i, s int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return i == vfiouser.IRQMSIX && f.pending[s]
}

func newTestNIC(t *testing.T) (*NIC, *fakeIRQ, *guestmem.Memory, []byte) {
	t.Helper()
	mem := guestmem.New()
	ram := make([]byte, 3*4096)
	if err := mem.MapHost(0x10000, ram, guestmem.ProtRead|guestmem.ProtWrite, nil); err != nil {
		t.Fatal(err)
	}
	n, err := New(Options{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	irq := &fakeIRQ{pending: map[int]bool{}}
	n.Attach(vfiouser.Host{IRQ: irq})
	t.Cleanup(func() { n.Close() })
	return n, irq, mem, ram
}

func rd32(t testing.TB, n *NIC, region int, off uint64) uint32 {
	t.Helper()
	var b [4]byte
	if err := n.RegionRead(region, off, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[:])
}

func wr32(t testing.TB, n *NIC, region int, off uint64, v uint32) {
	t.Helper()
	if err := n.RegionWrite(region, off, binary.LittleEndian.AppendUint32(nil, v)); err != nil {
		t.Fatal(err)
	}
}

func TestRegisters(t *testing.T) {
	n, irq, _, _ := newTestNIC(t)
	for _, tc := range []struct {
		name  string
		off   uint64
		write *uint32
		want  uint32
	}{
		{"id", hw.RegID, nil, hw.Magic},
		{"id read-only", hw.RegID, ptr(0), hw.Magic},
		{"version", hw.RegVersion, nil, hw.InterfaceVersion},
		{"scratch", hw.RegScratch, ptr(0x12345678), 0x12345678},
		{"addr lo", hw.RegDiagDMAAddrLo, ptr(0x1000), 0x1000},
		{"addr hi", hw.RegDiagDMAAddrHi, ptr(0x2), 0x2},
		{"len", hw.RegDiagDMALen, ptr(64), 64},
		{"seed", hw.RegDiagDMASeed, ptr(9), 9},
		{"ctrl write-only", hw.RegDiagDMACtrl, nil, 0},
		{"status idle", hw.RegDiagDMAStatus, nil, hw.DiagDMAStatusIdle},
		{"unassigned", 0x100, ptr(0xffffffff), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.write != nil {
				wr32(t, n, hw.RegBAR, tc.off, *tc.write)
			}
			if got := rd32(t, n, hw.RegBAR, tc.off); got != tc.want {
				t.Fatalf("got %#x want %#x", got, tc.want)
			}
		})
	}
	// 64-bit write covering ADDR_LO and ADDR_HI.
	if err := n.RegionWrite(hw.RegBAR, hw.RegDiagDMAAddrLo, binary.LittleEndian.AppendUint64(nil, 0x1_0000_2000)); err != nil {
		t.Fatal(err)
	}
	if lo, hi := rd32(t, n, hw.RegBAR, hw.RegDiagDMAAddrLo), rd32(t, n, hw.RegBAR, hw.RegDiagDMAAddrHi); lo != 0x2000 || hi != 1 {
		t.Fatalf("64-bit address write: %#x %#x", lo, hi)
	}
	wr32(t, n, hw.RegBAR, hw.RegDiagIRQ, 5)
	wr32(t, n, hw.RegBAR, hw.RegDiagIRQ, hw.MSIXVectors) // out of range: ignored
	// A narrow write to an action register does nothing.
	n.RegionWrite(hw.RegBAR, hw.RegDiagIRQ, []byte{1})
	if len(irq.fired) != 1 || irq.fired[0] != 5 {
		t.Fatalf("fired %v", irq.fired)
	}
}

func ptr(v uint32) *uint32 { return &v }

func waitStatus(t *testing.T, n *NIC) uint32 {
	t.Helper()
	n.WaitDMA()
	return rd32(t, n, hw.RegBAR, hw.RegDiagDMAStatus)
}

func TestDiagDMA(t *testing.T) {
	n, _, _, ram := newTestNIC(t)
	start := func(addr uint64, length, seed uint32) {
		wr32(t, n, hw.RegBAR, hw.RegDiagDMAAddrLo, uint32(addr))
		wr32(t, n, hw.RegBAR, hw.RegDiagDMAAddrHi, uint32(addr>>32))
		wr32(t, n, hw.RegBAR, hw.RegDiagDMALen, length)
		wr32(t, n, hw.RegBAR, hw.RegDiagDMASeed, seed)
		wr32(t, n, hw.RegBAR, hw.RegDiagDMACtrl, hw.DiagDMACtrlStart)
	}
	start(0x10000, 16, 1)
	if st := waitStatus(t, n); st != hw.DiagDMAStatusNoMaster {
		t.Fatalf("without bus master: %d", st)
	}
	n.RegionWrite(vfiouser.RegionConfig, pcie.OffCommand, []byte{0x06, 0})

	for _, tc := range []struct {
		name   string
		addr   uint64
		length uint32
		want   uint32
	}{
		{"inside", 0x10000 + 100, 5000, hw.DiagDMAStatusDone},
		{"zero length", 0x10000, 0, hw.DiagDMAStatusBadLen},
		{"too long", 0x10000, hw.DiagDMAMaxLen + 1, hw.DiagDMAStatusBadLen},
		{"past the end", 0x10000 + 3*4096 - 8, 16, hw.DiagDMAStatusFault},
		{"unmapped", 0x90000, 16, hw.DiagDMAStatusFault},
		{"wraps", ^uint64(0) - 4, 16, hw.DiagDMAStatusFault},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start(tc.addr, tc.length, 7)
			if st := waitStatus(t, n); st != tc.want {
				t.Fatalf("status %d want %d", st, tc.want)
			}
		})
	}
	for i := 0; i < 5000; i++ {
		if ram[100+i] != hw.DiagPattern(7, uint32(i)) {
			t.Fatalf("byte %d", i)
		}
	}
	if n.Config().Snapshot()[pcie.OffStatus+1]&(pcie.StatusRecMasterAbort>>8) == 0 {
		t.Fatal("fault did not raise Received Master Abort")
	}
}

func TestMSIXBARAndReset(t *testing.T) {
	n, irq, _, _ := newTestNIC(t)
	// Power-on: every vector masked.
	if got := rd32(t, n, hw.MSIXBAR, hw.MSIXTableOffset+12); got != 1 {
		t.Fatalf("vector control %#x", got)
	}
	wr32(t, n, hw.MSIXBAR, hw.MSIXTableOffset+16, 0xfee00000)
	wr32(t, n, hw.MSIXBAR, hw.MSIXTableOffset+28, 0xfffffffe)
	if rd32(t, n, hw.MSIXBAR, hw.MSIXTableOffset+16) != 0xfee00000 || rd32(t, n, hw.MSIXBAR, hw.MSIXTableOffset+28) != 0 {
		t.Fatal("table entry")
	}
	irq.pending[1], irq.pending[6] = true, true
	if got := rd32(t, n, hw.MSIXBAR, hw.MSIXPBAOffset); got != 1<<1|1<<6 {
		t.Fatalf("PBA %#x", got)
	}
	wr32(t, n, hw.MSIXBAR, hw.MSIXPBAOffset, 0)
	if got := rd32(t, n, hw.MSIXBAR, hw.MSIXPBAOffset); got != 1<<1|1<<6 {
		t.Fatal("PBA writable")
	}

	wr32(t, n, hw.RegBAR, hw.RegScratch, 77)
	n.RegionWrite(vfiouser.RegionConfig, pcie.OffCommand, []byte{0x06, 0})
	if err := n.Reset(); err != nil {
		t.Fatal(err)
	}
	if rd32(t, n, hw.RegBAR, hw.RegScratch) != 0 || n.Config().BusMaster() ||
		rd32(t, n, hw.MSIXBAR, hw.MSIXTableOffset+16) != 0 || rd32(t, n, hw.MSIXBAR, hw.MSIXTableOffset+28) != 1 {
		t.Fatal("reset incomplete")
	}
	if err := n.RegionRead(vfiouser.RegionVGA, 0, make([]byte, 4)); err != unix.EINVAL {
		t.Fatalf("unknown region: %v", err)
	}
}

func TestInfoShape(t *testing.T) {
	n, _, _, _ := newTestNIC(t)
	info := n.Info()
	if len(info.Regions) != vfiouser.NumPCIRegions || len(info.IRQs) != vfiouser.NumPCIIRQs || !info.Reset {
		t.Fatalf("info %+v", info)
	}
	if info.Regions[vfiouser.RegionConfig].Size != pcie.Size || info.IRQs[vfiouser.IRQMSIX].Count != hw.MSIXVectors {
		t.Fatal("config size or MSI-X count")
	}
	cfg := n.Config()
	for i := 0; i < 6; i++ {
		if got := cfg.BARInfo(i).Size; got != info.Regions[i].Size {
			t.Fatalf("BAR%d: config says %#x, region info %#x", i, got, info.Regions[i].Size)
		}
	}
}
