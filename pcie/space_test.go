package pcie

import (
	"encoding/binary"
	"testing"
)

func testConfig() Config {
	return Config{
		VendorID: 0x4e50, DeviceID: 0x4e46, Revision: 1, ClassCode: 0x020000,
		SubsysVendorID: 0x4e50, SubsysID: 0x0001,
		BARs: [6]BAR{
			0: {Size: 64 << 10, Is64: true},
			2: {Size: 4096, Is64: true},
		},
		MSIX:  &MSIX{Vectors: 8, TableBAR: 2, TableOffset: 0, PBABAR: 2, PBAOffset: 0x800},
		ATS:   &ATS{InvalidateQueueDepth: 32, PageAlignedRequest: true},
		PRI:   &PRI{OutstandingCapacity: 64, PASIDRequired: true},
		PASID: &PASID{MaxWidth: 20, Exec: true},
	}
}

func mustBuild(t testing.TB, c Config) *Space {
	t.Helper()
	s, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func r16(t testing.TB, s *Space, off int) uint16 {
	t.Helper()
	var b [2]byte
	if err := s.Read(off, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint16(b[:])
}

func r32(t testing.TB, s *Space, off int) uint32 {
	t.Helper()
	var b [4]byte
	if err := s.Read(off, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[:])
}

func w16(t testing.TB, s *Space, off int, v uint16) {
	t.Helper()
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], v)
	if err := s.Write(off, b[:]); err != nil {
		t.Fatal(err)
	}
}

func w32(t testing.TB, s *Space, off int, v uint32) {
	t.Helper()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	if err := s.Write(off, b[:]); err != nil {
		t.Fatal(err)
	}
}

func TestHeader(t *testing.T) {
	s := mustBuild(t, testConfig())
	for _, tc := range []struct {
		name string
		off  int
		size int
		want uint32
	}{
		{"vendor", OffVendorID, 2, 0x4e50},
		{"device", OffDeviceID, 2, 0x4e46},
		{"revision+class", OffRevision, 4, 0x02000001},
		{"header type", OffHeaderType, 1, 0},
		{"status caplist", OffStatus, 2, StatusCapList},
		{"BAR0 64-bit", OffBAR0, 4, barMemType64},
		{"BAR1 upper", OffBAR0 + 4, 4, 0},
		{"BAR4 absent", OffBAR0 + 16, 4, 0},
		{"ROM absent", OffROMAddress, 4, 0},
		{"subsys vendor", OffSubsysVendor, 2, 0x4e50},
		{"cap ptr", OffCapPtr, 1, HeaderEnd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b [4]byte
			if err := s.Read(tc.off, b[:tc.size]); err != nil {
				t.Fatal(err)
			}
			got := binary.LittleEndian.Uint32(b[:])
			if got != tc.want {
				t.Fatalf("got %#x want %#x", got, tc.want)
			}
		})
	}
}

func TestBARSizing(t *testing.T) {
	s := mustBuild(t, testConfig())
	for _, tc := range []struct {
		name      string
		off       int
		want      uint32
		afterAddr uint32
	}{
		{"BAR0 low", OffBAR0, 0xffff0000 | barMemType64, 0xfe000000 | barMemType64},
		{"BAR0 high", OffBAR0 + 4, 0xffffffff, 0x00000001},
		{"BAR2 low", OffBAR0 + 8, 0xfffff000 | barMemType64, 0xfe010000 | barMemType64},
		{"BAR5 absent", OffBAR0 + 20, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w32(t, s, tc.off, 0xffffffff)
			if got := r32(t, s, tc.off); got != tc.want {
				t.Fatalf("sizing read %#x want %#x", got, tc.want)
			}
			wr := tc.afterAddr
			if tc.off%8 == 0 { // low dword of a 64-bit BAR: type bits are RO
				wr &^= 0xf
			}
			w32(t, s, tc.off, wr)
			if got := r32(t, s, tc.off); got != tc.afterAddr {
				t.Fatalf("address read %#x want %#x", got, tc.afterAddr)
			}
		})
	}
	addr, ok := s.BARAddress(0)
	if !ok || addr != 0x1_fe000000 {
		t.Fatalf("BARAddress(0) = %#x, %v", addr, ok)
	}
	if _, ok := s.BARAddress(1); ok {
		t.Fatal("BAR1 is the upper half, must not report an address")
	}
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"bad vendor", func(c *Config) { c.VendorID = 0xffff }},
		{"bar not pow2", func(c *Config) { c.BARs[0].Size = 3000 }},
		{"bar too small", func(c *Config) { c.BARs[0].Size = 8 }},
		{"64-bit BAR5", func(c *Config) { c.BARs[5] = BAR{Size: 4096, Is64: true} }},
		{"upper half used", func(c *Config) { c.BARs[1] = BAR{Size: 4096} }},
		{"msix vectors 0", func(c *Config) { c.MSIX.Vectors = 0 }},
		{"msix table outside", func(c *Config) { c.MSIX.TableOffset = 0xff8 }},
		{"msix in absent bar", func(c *Config) { c.MSIX.TableBAR = 4 }},
		{"msix overlap", func(c *Config) { c.MSIX.PBAOffset = 0x40 }},
		{"msix unaligned", func(c *Config) { c.MSIX.PBAOffset = 0x804 }},
		{"ats depth", func(c *Config) { c.ATS.InvalidateQueueDepth = 33 }},
		{"pri capacity", func(c *Config) { c.PRI.OutstandingCapacity = 0 }},
		{"pasid width", func(c *Config) { c.PASID.MaxWidth = 21 }},
		{"ext without pcie", func(c *Config) { c.DisablePCIExpressCap = true }},
		{"class too wide", func(c *Config) { c.ClassCode = 1 << 24 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			m := *c.MSIX
			c.MSIX = &m
			a, p, q := *c.ATS, *c.PRI, *c.PASID
			c.ATS, c.PRI, c.PASID = &a, &p, &q
			tc.mod(&c)
			if _, err := Build(c); err == nil {
				t.Fatal("Build accepted an invalid config")
			}
		})
	}
}

// walkCaps returns the legacy capability IDs and extended capability IDs in
// list order, failing on loops.
func walkCaps(t testing.TB, s *Space) (legacy []byte, ext []uint16) {
	t.Helper()
	data := s.Snapshot()
	seen := map[int]bool{}
	for p := int(data[OffCapPtr]); p != 0; p = int(data[p+1]) {
		if p < HeaderEnd || p > 0xfc || seen[p] {
			t.Fatalf("bad capability pointer %#x", p)
		}
		seen[p] = true
		legacy = append(legacy, data[p])
	}
	for p := ExtCapStart; p != 0; {
		h := binary.LittleEndian.Uint32(data[p:])
		if h == 0 {
			break
		}
		if seen[p] {
			t.Fatalf("extended capability loop at %#x", p)
		}
		seen[p] = true
		ext = append(ext, uint16(h))
		next := int(h >> 20)
		if next != 0 && (next < ExtCapStart || next&3 != 0) {
			t.Fatalf("bad extended pointer %#x", next)
		}
		p = next
	}
	return legacy, ext
}

func TestCapabilityLists(t *testing.T) {
	s := mustBuild(t, testConfig())
	legacy, ext := walkCaps(t, s)
	if string(legacy) != string([]byte{CapIDPM, CapIDMSIX, CapIDPCIe}) {
		t.Fatalf("legacy caps %x", legacy)
	}
	if len(ext) != 3 || ext[0] != ExtCapIDATS || ext[1] != ExtCapIDPRI || ext[2] != ExtCapIDPASID {
		t.Fatalf("ext caps %x", ext)
	}
	l := s.Layout()
	if got := r16(t, s, l.PCIe+expFlags); got != 0x0002 {
		t.Fatalf("PCIe flags %#x, want v2 endpoint", got)
	}
	if got := r16(t, s, l.MSIX+msixControl); got != 7 {
		t.Fatalf("MSI-X control %#x", got)
	}
	if got := r32(t, s, l.MSIX+msixTable); got != 2 {
		t.Fatalf("MSI-X table %#x", got)
	}
	if got := r32(t, s, l.MSIX+msixPBA); got != 0x802 {
		t.Fatalf("MSI-X PBA %#x", got)
	}
	if got := r16(t, s, l.ATS+atsCap); got != atsCapPageAligned {
		t.Fatalf("ATS cap %#x (depth 32 encodes as 0)", got)
	}
	if s.ATSInvalidateQueueDepth() != 32 {
		t.Fatal("ATS depth")
	}
	if got := s.PRICapacity(); got != 64 {
		t.Fatalf("PRI capacity %d", got)
	}
	if st := s.PRIStatus(); st != PRIStatusStopped|PRIStatusPASIDNeeded {
		t.Fatalf("PRI status %#x", st)
	}
	if s.PASIDMaxWidth() != 20 {
		t.Fatal("PASID width")
	}

	// Only the pieces asked for are built.
	c := testConfig()
	c.ATS, c.PRI, c.PASID, c.MSIX = nil, &PRI{OutstandingCapacity: 1}, nil, nil
	c.DisablePowerMgmt = true
	s2 := mustBuild(t, c)
	legacy, ext = walkCaps(t, s2)
	if string(legacy) != string([]byte{CapIDPCIe}) || len(ext) != 1 || ext[0] != ExtCapIDPRI {
		t.Fatalf("partial config: legacy %x ext %x", legacy, ext)
	}
}

func TestCommandStatus(t *testing.T) {
	s := mustBuild(t, testConfig())
	w16(t, s, OffCommand, 0xffff)
	if got := s.Command(); got != CmdMemory|CmdBusMaster|CmdParity|CmdSERR|CmdIntxDisable {
		t.Fatalf("command %#x", got)
	}
	if !s.BusMaster() || !s.MemoryEnabled() {
		t.Fatal("accessors")
	}
	s.RaiseStatus(StatusRecMasterAbort | StatusCapList)
	if got := r16(t, s, OffStatus); got != StatusCapList|StatusRecMasterAbort {
		t.Fatalf("status %#x", got)
	}
	w16(t, s, OffStatus, 0) // writing 0 clears nothing
	if got := r16(t, s, OffStatus); got&StatusRecMasterAbort == 0 {
		t.Fatal("RW1C cleared by writing 0")
	}
	w16(t, s, OffStatus, 0xffff) // RW1C clears, RO cap list survives
	if got := r16(t, s, OffStatus); got != StatusCapList {
		t.Fatalf("status after W1C %#x", got)
	}
	// Read-only fields ignore writes.
	w32(t, s, OffVendorID, 0)
	if r16(t, s, OffVendorID) != 0x4e50 {
		t.Fatal("vendor ID writable")
	}
}

func TestExtendedCapSemantics(t *testing.T) {
	type hookLog struct {
		ats, pri, pasid, reset int
		stu                    uint8
	}
	s := mustBuild(t, testConfig())
	var h hookLog
	s.SetHooks(Hooks{
		ATSControl:   func(en bool, stu uint8) { h.ats++; h.stu = stu },
		PRIControl:   func(bool) { h.pri++ },
		PRIReset:     func() { h.reset++ },
		PASIDControl: func(bool) { h.pasid++ },
	})
	l := s.Layout()

	// ATS: Enable and STU writable, other control bits reserved.
	w16(t, s, l.ATS+atsCtrl, 0xffff)
	if !s.ATSEnabled() || s.ATSSTU() != 0x1f || r16(t, s, l.ATS+atsCtrl) != 0x801f {
		t.Fatalf("ATS ctrl %#x", r16(t, s, l.ATS+atsCtrl))
	}
	w16(t, s, l.ATS+atsCap, 0) // capability is RO
	if s.ATSInvalidateQueueDepth() != 32 {
		t.Fatal("ATS capability writable")
	}

	// PRI: allocation programmed while disabled, then enable clears Stopped.
	w32(t, s, l.PRI+priAlloc, 16)
	w16(t, s, l.PRI+priCtrl, PRICtrlEnable)
	if !s.PRIEnabled() || s.PRIStopped() || s.PRIAllocation() != 16 {
		t.Fatalf("PRI after enable: status %#x alloc %d", s.PRIStatus(), s.PRIAllocation())
	}
	w32(t, s, l.PRI+priAlloc, 99) // ignored while enabled
	if s.PRIAllocation() != 16 {
		t.Fatal("allocation changed while enabled")
	}
	s.SetPRIResponseFailure()
	s.SetPRIUPRGI()
	w16(t, s, l.PRI+priStatus, PRIStatusRF|PRIStatusStopped)
	if st := s.PRIStatus(); st&PRIStatusRF != 0 || st&PRIStatusUPRGI == 0 || st&PRIStatusStopped != 0 {
		t.Fatalf("PRI status after W1C of RF: %#x", st)
	}
	w16(t, s, l.PRI+priStatus, PRIStatusUPRGI)
	if s.PRIStatus()&PRIStatusUPRGI != 0 {
		t.Fatal("UPRGI not cleared")
	}
	// Reset with Enable being cleared in the same write: Stopped, reads 0.
	w16(t, s, l.PRI+priCtrl, PRICtrlReset)
	if s.PRIEnabled() || !s.PRIStopped() || r16(t, s, l.PRI+priCtrl) != 0 {
		t.Fatalf("PRI after reset: ctrl %#x status %#x", r16(t, s, l.PRI+priCtrl), s.PRIStatus())
	}
	w32(t, s, l.PRI+priCapacity, 1)
	if s.PRICapacity() != 64 {
		t.Fatal("capacity writable")
	}

	// PASID: Exec supported → writable; Priv unsupported → stays 0.
	w16(t, s, l.PASID+pasidCtrl, 0x7)
	if !s.PASIDEnabled() || !s.PASIDExecEnabled() || s.PASIDPrivEnabled() {
		t.Fatalf("PASID ctrl %#x", r16(t, s, l.PASID+pasidCtrl))
	}

	if h.ats != 1 || h.stu != 0x1f || h.pri != 2 || h.reset != 1 || h.pasid != 1 {
		t.Fatalf("hooks %+v", h)
	}

	s.Reset()
	if s.ATSEnabled() || s.PRIEnabled() || s.PASIDEnabled() || !s.PRIStopped() || s.PRIAllocation() != 0 {
		t.Fatal("Reset did not restore the power-on image")
	}
}

func TestMSIXAndPM(t *testing.T) {
	s := mustBuild(t, testConfig())
	var got []bool
	s.SetHooks(Hooks{MSIXControl: func(en, masked bool) { got = append(got, en, masked) }})
	l := s.Layout()
	w16(t, s, l.MSIX+msixControl, 0xffff)
	if !s.MSIXEnabled() || !s.MSIXFunctionMasked() || r16(t, s, l.MSIX+msixControl) != 0xc007 {
		t.Fatalf("MSI-X control %#x", r16(t, s, l.MSIX+msixControl))
	}
	w16(t, s, l.MSIX+msixControl, MSIXCtrlEnable)
	if len(got) != 4 || !got[2] || got[3] {
		t.Fatalf("hook calls %v", got)
	}

	for _, tc := range []struct {
		write, want uint16
	}{
		{3, 3 | pmCSRNoSoftReset}, // D3hot
		{1, 3 | pmCSRNoSoftReset}, // D1 unsupported: ignored
		{0, pmCSRNoSoftReset},     // back to D0
		{2, pmCSRNoSoftReset},     // D2 unsupported: ignored
	} {
		w16(t, s, l.PM+pmCSR, tc.write)
		if v := r16(t, s, l.PM+pmCSR); v != tc.want {
			t.Fatalf("PMCSR after writing %d: %#x want %#x", tc.write, v, tc.want)
		}
	}
}

func TestOutOfRange(t *testing.T) {
	s := mustBuild(t, testConfig())
	for _, tc := range []struct {
		off, n int
	}{{-1, 1}, {Size, 1}, {Size - 1, 2}, {0, Size + 1}, {1 << 30, 4}} {
		b := make([]byte, tc.n)
		if err := s.Read(tc.off, b); err != ErrRange {
			t.Errorf("Read(%d,%d) = %v", tc.off, tc.n, err)
		}
		if err := s.Write(tc.off, b); err != ErrRange {
			t.Errorf("Write(%d,%d) = %v", tc.off, tc.n, err)
		}
	}
	if err := s.Read(Size, nil); err != nil {
		t.Errorf("empty read at end: %v", err)
	}
	var all [Size]byte
	if err := s.Read(0, all[:]); err != nil {
		t.Fatal(err)
	}
}
