// Package pcie owns the device's PCI Express configuration space: the
// 4096-byte image the guest reads and writes through the vfio-user config
// region, with the register semantics the specifications prescribe (read-only
// fields, per-bit write masks, RW1C status bits, BAR sizing) and the
// capabilities this NIC advertises: Power Management, MSI-X and the PCI
// Express endpoint capability in the legacy list, ATS, PRI and PASID in the
// extended list.
//
// The device model builds a Space once with Build and then only reads typed
// state from it (bus mastering, ATS enable and STU, PRI enable, ...) and
// raises the few status bits a function sets on its own (PRI Response
// Failure, UPRGI, Stopped). All guest writes go through Space.Write, which
// never panics on any offset or length so it can be fed untrusted input.
package pcie

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
)

// BAR describes one memory base address register. A zero Size means the BAR
// is not implemented (reads as zero, writes ignored).
type BAR struct {
	Size         uint64 // power of two, at least 16 bytes
	Is64         bool   // 64-bit BAR; consumes the next BAR slot as its upper half
	Prefetchable bool
}

// MSIX places the MSI-X table and PBA. Offsets must be 8-byte aligned and
// the structures must lie inside their (implemented) BARs.
type MSIX struct {
	Vectors     int // 1..2048
	TableBAR    int
	TableOffset uint32
	PBABAR      int
	PBAOffset   uint32
}

// ATS parameterises the Address Translation Services capability.
type ATS struct {
	// InvalidateQueueDepth is the number of invalidate requests the function
	// can accept before flow control (1..32; 32 is encoded as 0).
	InvalidateQueueDepth int
	// PageAlignedRequest advertises that untranslated addresses in
	// translation requests are always 4096-byte aligned.
	PageAlignedRequest bool
}

// PRI parameterises the Page Request Interface capability.
type PRI struct {
	// OutstandingCapacity is the number of outstanding page requests the
	// function can have in flight (Outstanding Page Request Capacity).
	OutstandingCapacity uint32
	// PASIDRequired sets "PRG Response PASID Required": the function expects
	// a PASID on PRG Responses whose request carried one.
	PASIDRequired bool
}

// PASID parameterises the Process Address Space ID capability.
type PASID struct {
	MaxWidth   int // 1..20 bits
	Exec, Priv bool
}

// Config is everything Build needs to produce a configuration space.
type Config struct {
	VendorID, DeviceID   uint16
	SubsysVendorID       uint16
	SubsysID             uint16
	Revision             uint8
	ClassCode            uint32 // 24 bits: base class, sub class, prog-if
	InterruptPin         uint8  // 0 none, 1..4 = INTA..INTD
	BARs                 [6]BAR
	MSIX                 *MSIX
	ATS                  *ATS
	PRI                  *PRI
	PASID                *PASID
	DisablePowerMgmt     bool
	DisablePCIExpressCap bool
}

// Layout reports where Build placed each capability (0 = absent).
type Layout struct {
	PM, MSIX, PCIe  int
	ATS, PRI, PASID int
}

// Hooks let the device model react to guest writes that change function
// behaviour. They run after the write is applied, outside the Space lock, so
// they may call back into the Space.
type Hooks struct {
	Command      func(old, new uint16)
	MSIXControl  func(enabled, functionMasked bool)
	ATSControl   func(enabled bool, stu uint8)
	PRIControl   func(enabled bool)
	PRIReset     func()
	PASIDControl func(enabled bool)
}

// Space is a live configuration space. It is safe for concurrent use: the
// vfio-user server writes it while device goroutines read typed state.
type Space struct {
	mu    sync.Mutex
	data  [Size]byte
	wmask [Size]byte // bits software may write
	w1c   [Size]byte // bits software clears by writing 1
	init  [Size]byte // power-on image for Reset
	bars  [6]BAR
	lay   Layout
	msix  *MSIX
	hooks Hooks
}

// ErrRange is returned for accesses outside the 4096-byte space.
var ErrRange = errors.New("pcie: config access out of range")

// Build validates cfg and returns the power-on configuration space.
func Build(cfg Config) (*Space, error) {
	s := &Space{bars: cfg.BARs}
	if err := s.build(cfg); err != nil {
		return nil, err
	}
	s.init = s.data
	return s, nil
}

func (s *Space) build(cfg Config) error {
	if cfg.VendorID == 0xffff || cfg.VendorID == 0 {
		return fmt.Errorf("pcie: invalid vendor ID %#04x", cfg.VendorID)
	}
	if cfg.ClassCode > 0xffffff {
		return fmt.Errorf("pcie: class code %#x exceeds 24 bits", cfg.ClassCode)
	}
	if cfg.InterruptPin > 4 {
		return fmt.Errorf("pcie: interrupt pin %d out of range", cfg.InterruptPin)
	}
	s.put16(OffVendorID, cfg.VendorID)
	s.put16(OffDeviceID, cfg.DeviceID)
	s.data[OffRevision] = cfg.Revision
	s.data[OffClassProg] = byte(cfg.ClassCode)
	s.data[OffClassProg+1] = byte(cfg.ClassCode >> 8)
	s.data[OffClassProg+2] = byte(cfg.ClassCode >> 16)
	s.put16(OffSubsysVendor, cfg.SubsysVendorID)
	s.put16(OffSubsysID, cfg.SubsysID)
	s.data[OffInterruptPin] = cfg.InterruptPin

	// No I/O BARs, so the I/O enable bit is hardwired to 0.
	cmdMask := uint16(CmdMemory | CmdBusMaster | CmdParity | CmdSERR | CmdIntxDisable)
	s.putMask16(OffCommand, cmdMask)
	s.putW1C16(OffStatus, statusRW1C)
	s.data[OffCacheLineSize+0] = 0
	s.wmask[OffCacheLineSize] = 0xff
	s.wmask[OffInterruptLine] = 0xff

	if err := s.buildBARs(cfg.BARs); err != nil {
		return err
	}

	// Legacy capability list, built back to front so each entry can point at
	// the next.
	type capDef struct {
		id   byte
		size int
		fill func(off int) error
	}
	var caps []capDef
	if !cfg.DisablePowerMgmt {
		caps = append(caps, capDef{CapIDPM, capPMSize, s.buildPM})
	}
	if cfg.MSIX != nil {
		m := *cfg.MSIX
		caps = append(caps, capDef{CapIDMSIX, capMSIXLen, func(off int) error { return s.buildMSIX(off, m) }})
	}
	if !cfg.DisablePCIExpressCap {
		caps = append(caps, capDef{CapIDPCIe, capPCIeLen, s.buildPCIe})
	}
	off := HeaderEnd
	prev := OffCapPtr
	for _, c := range caps {
		s.data[prev] = byte(off)
		s.data[off] = c.id
		if err := c.fill(off); err != nil {
			return err
		}
		switch c.id {
		case CapIDPM:
			s.lay.PM = off
		case CapIDMSIX:
			s.lay.MSIX = off
		case CapIDPCIe:
			s.lay.PCIe = off
		}
		prev = off + 1
		off = (off + c.size + 3) &^ 3
	}
	if len(caps) > 0 {
		s.data[OffStatus] |= StatusCapList
	}

	// Extended capabilities need the PCI Express capability to be reachable
	// by software; without it the extended space reads as zero.
	type extDef struct {
		id   uint16
		ver  uint8
		size int
		fill func(off int) error
	}
	var exts []extDef
	if cfg.ATS != nil {
		a := *cfg.ATS
		exts = append(exts, extDef{ExtCapIDATS, 1, extATSLen, func(off int) error { return s.buildATS(off, a) }})
	}
	if cfg.PRI != nil {
		p := *cfg.PRI
		exts = append(exts, extDef{ExtCapIDPRI, 1, extPRILen, func(off int) error { return s.buildPRI(off, p) }})
	}
	if cfg.PASID != nil {
		p := *cfg.PASID
		exts = append(exts, extDef{ExtCapIDPASID, 1, extPASIDLen, func(off int) error { return s.buildPASID(off, p) }})
	}
	if len(exts) > 0 && cfg.DisablePCIExpressCap {
		return errors.New("pcie: extended capabilities require the PCI Express capability")
	}
	off = ExtCapStart
	for i, e := range exts {
		next := 0
		if i+1 < len(exts) {
			next = (off + e.size + 0xf) &^ 0xf
		}
		s.put32(off, uint32(e.id)|uint32(e.ver)<<16|uint32(next)<<20)
		if err := e.fill(off); err != nil {
			return err
		}
		switch e.id {
		case ExtCapIDATS:
			s.lay.ATS = off
		case ExtCapIDPRI:
			s.lay.PRI = off
		case ExtCapIDPASID:
			s.lay.PASID = off
		}
		off = next
	}
	return nil
}

func (s *Space) buildBARs(bars [6]BAR) error {
	for i := 0; i < 6; i++ {
		b := bars[i]
		if b.Size == 0 {
			continue
		}
		if b.Size < 16 || bits.OnesCount64(b.Size) != 1 {
			return fmt.Errorf("pcie: BAR%d size %#x is not a power of two >= 16", i, b.Size)
		}
		if !b.Is64 && b.Size > 1<<31 {
			return fmt.Errorf("pcie: 32-bit BAR%d size %#x too large", i, b.Size)
		}
		off := OffBAR0 + 4*i
		low := uint32(0)
		if b.Is64 {
			low |= barMemType64
		}
		if b.Prefetchable {
			low |= barPrefetchable
		}
		s.put32(off, low)
		mask := ^(b.Size - 1)
		s.putMask32(off, uint32(mask)&^0xf)
		if b.Is64 {
			if i == 5 {
				return fmt.Errorf("pcie: 64-bit BAR%d has no upper half", i)
			}
			if bars[i+1].Size != 0 {
				return fmt.Errorf("pcie: BAR%d is the upper half of 64-bit BAR%d and must be empty", i+1, i)
			}
			s.putMask32(off+4, uint32(mask>>32))
			i++
		}
	}
	return nil
}

func (s *Space) buildPM(off int) error {
	// Version 3 (PCI PM 1.2), no D1/D2, no PME. No_Soft_Reset is set so a
	// D3hot->D0 transition keeps state; the device has nothing to lose.
	s.put16(off+pmPMC, 0x0003)
	s.put16(off+pmCSR, pmCSRNoSoftReset)
	s.putMask16(off+pmCSR, pmCSRStateMask)
	return nil
}

func (s *Space) buildMSIX(off int, m MSIX) error {
	if m.Vectors < 1 || m.Vectors > MSIXMaxVectors {
		return fmt.Errorf("pcie: MSI-X vector count %d out of range 1..%d", m.Vectors, MSIXMaxVectors)
	}
	tableLen := uint64(m.Vectors) * MSIXEntrySize
	pbaLen := uint64((m.Vectors+63)/64) * 8
	if err := s.checkInBAR("MSI-X table", m.TableBAR, m.TableOffset, tableLen); err != nil {
		return err
	}
	if err := s.checkInBAR("MSI-X PBA", m.PBABAR, m.PBAOffset, pbaLen); err != nil {
		return err
	}
	if m.TableBAR == m.PBABAR {
		t0, t1 := uint64(m.TableOffset), uint64(m.TableOffset)+tableLen
		p0, p1 := uint64(m.PBAOffset), uint64(m.PBAOffset)+pbaLen
		if t0 < p1 && p0 < t1 {
			return errors.New("pcie: MSI-X table and PBA overlap")
		}
	}
	s.put16(off+msixControl, uint16(m.Vectors-1))
	s.putMask16(off+msixControl, MSIXCtrlEnable|MSIXCtrlFunctionMask)
	s.put32(off+msixTable, m.TableOffset|uint32(m.TableBAR))
	s.put32(off+msixPBA, m.PBAOffset|uint32(m.PBABAR))
	mm := m
	s.msix = &mm
	return nil
}

func (s *Space) checkInBAR(what string, bar int, off uint32, n uint64) error {
	if bar < 0 || bar > 5 || s.bars[bar].Size == 0 {
		return fmt.Errorf("pcie: %s in unimplemented BAR%d", what, bar)
	}
	if off&7 != 0 {
		return fmt.Errorf("pcie: %s offset %#x not 8-byte aligned", what, off)
	}
	if uint64(off)+n > s.bars[bar].Size {
		return fmt.Errorf("pcie: %s [%#x,+%#x) exceeds BAR%d size %#x", what, off, n, bar, s.bars[bar].Size)
	}
	return nil
}

func (s *Space) buildPCIe(off int) error {
	s.put16(off+expFlags, expFlagsVersion2|expTypeEndpoint)
	// Max payload 128 bytes, role-based error reporting; no FLR because a
	// function level reset is what DEVICE_RESET already provides.
	s.put32(off+expDevCap, expDevCapRBER)
	s.put16(off+expDevCtl, expDevCtlRelaxed|expDevCtlNoSnoop|expDevCtlMRRS512)
	// Error reporting enables, relaxed ordering, MPS, extended tags,
	// phantom, aux power, no snoop, MRRS. Initiate-FLR is not writable.
	s.putMask16(off+expDevCtl, 0x7fff)
	s.putW1C16(off+expDevSta, expDevStaRW1C)
	s.put32(off+expLnkCap, expLnkSpeed2_5GT|expLnkWidthX1)
	s.putMask16(off+expLnkCtl, 0x00cb) // ASPM, RCB, common clock, ext sync
	s.put16(off+expLnkSta, expLnkSpeed2_5GT|expLnkWidthX1)
	s.put32(off+expDevCap2, expDevCap2CTDis)
	s.putMask16(off+expDevCtl2, 0x0010) // completion timeout disable
	s.put32(off+expLnkCap2, expLnkCap2Speed2_5)
	s.put16(off+expLnkCtl2, expLnkSpeed2_5GT)
	s.putMask16(off+expLnkCtl2, 0x000f)
	return nil
}

func (s *Space) buildATS(off int, a ATS) error {
	if a.InvalidateQueueDepth < 1 || a.InvalidateQueueDepth > 32 {
		return fmt.Errorf("pcie: ATS invalidate queue depth %d out of range 1..32", a.InvalidateQueueDepth)
	}
	c := uint16(a.InvalidateQueueDepth & atsCapQueueDepthMask) // 32 encodes as 0
	if a.PageAlignedRequest {
		c |= atsCapPageAligned
	}
	s.put16(off+atsCap, c)
	s.putMask16(off+atsCtrl, ATSCtrlEnable|atsCtrlSTUMask)
	return nil
}

func (s *Space) buildPRI(off int, p PRI) error {
	if p.OutstandingCapacity == 0 {
		return errors.New("pcie: PRI outstanding page request capacity must be > 0")
	}
	st := uint16(PRIStatusStopped) // default 1b: nothing outstanding
	if p.PASIDRequired {
		st |= PRIStatusPASIDNeeded
	}
	s.put16(off+priStatus, st)
	s.putW1C16(off+priStatus, PRIStatusRF|PRIStatusUPRGI)
	// Reset is not in the mask: it is an action and always reads 0.
	s.putMask16(off+priCtrl, PRICtrlEnable)
	s.put32(off+priCapacity, p.OutstandingCapacity)
	s.putMask32(off+priAlloc, 0xffffffff)
	return nil
}

func (s *Space) buildPASID(off int, p PASID) error {
	if p.MaxWidth < 1 || p.MaxWidth > 20 {
		return fmt.Errorf("pcie: PASID max width %d out of range 1..20", p.MaxWidth)
	}
	c := uint16(p.MaxWidth) << pasidCapWidthShft
	m := uint16(PASIDCtrlEnable)
	if p.Exec {
		c |= PASIDCapExec
		m |= PASIDCtrlExec
	}
	if p.Priv {
		c |= PASIDCapPriv
		m |= PASIDCtrlPriv
	}
	s.put16(off+pasidCap, c)
	s.putMask16(off+pasidCtrl, m)
	return nil
}

func (s *Space) put16(off int, v uint16)     { binary.LittleEndian.PutUint16(s.data[off:], v) }
func (s *Space) put32(off int, v uint32)     { binary.LittleEndian.PutUint32(s.data[off:], v) }
func (s *Space) putMask16(off int, v uint16) { binary.LittleEndian.PutUint16(s.wmask[off:], v) }
func (s *Space) putMask32(off int, v uint32) { binary.LittleEndian.PutUint32(s.wmask[off:], v) }
func (s *Space) putW1C16(off int, v uint16)  { binary.LittleEndian.PutUint16(s.w1c[off:], v) }
func (s *Space) get16(off int) uint16        { return binary.LittleEndian.Uint16(s.data[off:]) }
func (s *Space) get32(off int) uint32        { return binary.LittleEndian.Uint32(s.data[off:]) }

// SetHooks installs the callbacks run after guest writes. Call it before the
// space is exposed to the guest.
func (s *Space) SetHooks(h Hooks) {
	s.mu.Lock()
	s.hooks = h
	s.mu.Unlock()
}

// Layout reports the offsets Build chose for each capability.
func (s *Space) Layout() Layout { return s.lay }

// Read copies len(p) bytes starting at off.
func (s *Space) Read(off int, p []byte) error {
	if off < 0 || off > Size || len(p) > Size-off {
		return ErrRange
	}
	s.mu.Lock()
	copy(p, s.data[off:])
	s.mu.Unlock()
	return nil
}

// snapshot holds the registers whose changes trigger hooks.
type snapshot struct {
	cmd                 uint16
	msix, ats, pri, pas uint16
}

func (s *Space) snap() snapshot {
	var n snapshot
	n.cmd = s.get16(OffCommand)
	if s.lay.MSIX != 0 {
		n.msix = s.get16(s.lay.MSIX+msixControl) & (MSIXCtrlEnable | MSIXCtrlFunctionMask)
	}
	if s.lay.ATS != 0 {
		n.ats = s.get16(s.lay.ATS + atsCtrl)
	}
	if s.lay.PRI != 0 {
		n.pri = s.get16(s.lay.PRI + priCtrl)
	}
	if s.lay.PASID != 0 {
		n.pas = s.get16(s.lay.PASID + pasidCtrl)
	}
	return n
}

// Write applies a guest write of p at off: each bit changes only where the
// write mask allows, RW1C bits are cleared where p has a 1, and everything
// else is ignored, as on hardware. Accesses outside the space return
// ErrRange and change nothing.
func (s *Space) Write(off int, p []byte) error {
	if off < 0 || off > Size || len(p) > Size-off {
		return ErrRange
	}
	s.mu.Lock()
	before := s.snap()
	oldPM := uint16(0)
	if s.lay.PM != 0 {
		oldPM = s.get16(s.lay.PM + pmCSR)
	}
	oldAlloc := uint32(0)
	if s.lay.PRI != 0 {
		oldAlloc = s.get32(s.lay.PRI + priAlloc)
	}
	for i, v := range p {
		o := off + i
		m := s.wmask[o]
		s.data[o] = s.data[o]&^m | v&m
		s.data[o] &^= v & s.w1c[o]
	}
	priReset := false
	if pri := s.lay.PRI; pri != 0 {
		if off <= pri+priCtrl && pri+priCtrl < off+len(p) && p[pri+priCtrl-off]&PRICtrlReset != 0 {
			priReset = true
		}
		// Software must only change the allocation while PRI is disabled;
		// ignoring the write otherwise keeps the credit count coherent with
		// requests already in flight.
		if before.pri&PRICtrlEnable != 0 {
			binary.LittleEndian.PutUint32(s.data[pri+priAlloc:], oldAlloc)
		}
		now := s.get16(pri + priCtrl)
		if now&PRICtrlEnable != 0 && before.pri&PRICtrlEnable == 0 {
			st := s.get16(pri+priStatus) &^ PRIStatusStopped
			s.put16(pri+priStatus, st)
		}
		if priReset && now&PRICtrlEnable == 0 {
			st := s.get16(pri+priStatus) | PRIStatusStopped
			s.put16(pri+priStatus, st)
		}
	}
	if pm := s.lay.PM; pm != 0 {
		// D1 and D2 are not supported: a write selecting them is ignored
		// (PCI PM 1.2, 5.4.3).
		if st := s.get16(pm+pmCSR) & pmCSRStateMask; st == 1 || st == 2 {
			s.put16(pm+pmCSR, oldPM)
		}
	}
	after := s.snap()
	h := s.hooks
	s.mu.Unlock()

	if before.cmd != after.cmd && h.Command != nil {
		h.Command(before.cmd, after.cmd)
	}
	if before.msix != after.msix && h.MSIXControl != nil {
		h.MSIXControl(after.msix&MSIXCtrlEnable != 0, after.msix&MSIXCtrlFunctionMask != 0)
	}
	if before.ats != after.ats && h.ATSControl != nil {
		h.ATSControl(after.ats&ATSCtrlEnable != 0, uint8(after.ats&atsCtrlSTUMask))
	}
	if (before.pri^after.pri)&PRICtrlEnable != 0 && h.PRIControl != nil {
		h.PRIControl(after.pri&PRICtrlEnable != 0)
	}
	if priReset && h.PRIReset != nil {
		h.PRIReset()
	}
	if (before.pas^after.pas)&PASIDCtrlEnable != 0 && h.PASIDControl != nil {
		h.PASIDControl(after.pas&PASIDCtrlEnable != 0)
	}
	return nil
}

// Reset restores the power-on image, as a function level reset does.
func (s *Space) Reset() {
	s.mu.Lock()
	s.data = s.init
	s.mu.Unlock()
}

// Snapshot returns a copy of the whole space.
func (s *Space) Snapshot() [Size]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data
}

func (s *Space) read16(off int) uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.get16(off)
}

func (s *Space) read32(off int) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.get32(off)
}

// Command returns the Command register.
func (s *Space) Command() uint16 { return s.read16(OffCommand) }

// MemoryEnabled reports whether the function decodes memory BAR accesses.
func (s *Space) MemoryEnabled() bool { return s.Command()&CmdMemory != 0 }

// BusMaster reports whether the function may issue DMA (and, for PCIe,
// translation and page requests).
func (s *Space) BusMaster() bool { return s.Command()&CmdBusMaster != 0 }

// RaiseStatus sets RW1C error bits of the Status register (e.g.
// StatusRecMasterAbort when a DMA was not claimed).
func (s *Space) RaiseStatus(bits uint16) {
	s.mu.Lock()
	s.put16(OffStatus, s.get16(OffStatus)|bits&statusRW1C)
	s.mu.Unlock()
}

// BARInfo returns the static description of BAR i.
func (s *Space) BARInfo(i int) BAR {
	if i < 0 || i > 5 {
		return BAR{}
	}
	return s.bars[i]
}

// BARAddress returns the base address the guest programmed into BAR i (the
// lower slot of a 64-bit BAR). ok is false for unimplemented BARs.
func (s *Space) BARAddress(i int) (addr uint64, ok bool) {
	if i < 0 || i > 5 || s.bars[i].Size == 0 {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lo := s.get32(OffBAR0 + 4*i)
	addr = uint64(lo &^ 0xf)
	if s.bars[i].Is64 {
		addr |= uint64(s.get32(OffBAR0+4*i+4)) << 32
	}
	return addr, true
}

// MSIXLayout returns the MSI-X placement (nil when MSI-X is absent).
func (s *Space) MSIXLayout() *MSIX {
	if s.msix == nil {
		return nil
	}
	m := *s.msix
	return &m
}

// MSIXEnabled reports the MSI-X Enable bit.
func (s *Space) MSIXEnabled() bool {
	return s.lay.MSIX != 0 && s.read16(s.lay.MSIX+msixControl)&MSIXCtrlEnable != 0
}

// MSIXFunctionMasked reports the MSI-X Function Mask bit.
func (s *Space) MSIXFunctionMasked() bool {
	return s.lay.MSIX != 0 && s.read16(s.lay.MSIX+msixControl)&MSIXCtrlFunctionMask != 0
}

// ATSEnabled reports the ATS Enable bit.
func (s *Space) ATSEnabled() bool {
	return s.lay.ATS != 0 && s.read16(s.lay.ATS+atsCtrl)&ATSCtrlEnable != 0
}

// ATSSTU returns the Smallest Translation Unit field: translations cover at
// least 2^(STU+12) bytes.
func (s *Space) ATSSTU() uint8 {
	if s.lay.ATS == 0 {
		return 0
	}
	return uint8(s.read16(s.lay.ATS+atsCtrl) & atsCtrlSTUMask)
}

// ATSInvalidateQueueDepth returns the advertised queue depth (1..32).
func (s *Space) ATSInvalidateQueueDepth() int {
	if s.lay.ATS == 0 {
		return 0
	}
	d := int(s.read16(s.lay.ATS+atsCap) & atsCapQueueDepthMask)
	if d == 0 {
		d = 32
	}
	return d
}

// PRIEnabled reports the PRI Enable bit.
func (s *Space) PRIEnabled() bool {
	return s.lay.PRI != 0 && s.read16(s.lay.PRI+priCtrl)&PRICtrlEnable != 0
}

// PRIStatus returns the PRI Status register.
func (s *Space) PRIStatus() uint16 {
	if s.lay.PRI == 0 {
		return 0
	}
	return s.read16(s.lay.PRI + priStatus)
}

// PRIStopped reports the Stopped status bit.
func (s *Space) PRIStopped() bool { return s.PRIStatus()&PRIStatusStopped != 0 }

// PRICapacity returns Outstanding Page Request Capacity.
func (s *Space) PRICapacity() uint32 {
	if s.lay.PRI == 0 {
		return 0
	}
	return s.read32(s.lay.PRI + priCapacity)
}

// PRIAllocation returns Outstanding Page Request Allocation: how many page
// requests system software lets the function have outstanding.
func (s *Space) PRIAllocation() uint32 {
	if s.lay.PRI == 0 {
		return 0
	}
	return s.read32(s.lay.PRI + priAlloc)
}

func (s *Space) setPRIStatus(set, clear uint16) {
	if s.lay.PRI == 0 {
		return
	}
	s.mu.Lock()
	st := s.get16(s.lay.PRI + priStatus)
	s.put16(s.lay.PRI+priStatus, st&^clear|set)
	s.mu.Unlock()
}

// SetPRIResponseFailure records a PRG Response with Response Failure; the
// function then issues no further page requests until software clears it.
func (s *Space) SetPRIResponseFailure() { s.setPRIStatus(PRIStatusRF, 0) }

// SetPRIUPRGI records a PRG Response whose group index matched no
// outstanding request.
func (s *Space) SetPRIUPRGI() { s.setPRIStatus(PRIStatusUPRGI, 0) }

// SetPRIStopped sets or clears Stopped. The device sets it once Enable is
// clear and every outstanding page request has completed.
func (s *Space) SetPRIStopped(stopped bool) {
	if stopped {
		s.setPRIStatus(PRIStatusStopped, 0)
	} else {
		s.setPRIStatus(0, PRIStatusStopped)
	}
}

// PASIDEnabled reports the PASID Enable bit.
func (s *Space) PASIDEnabled() bool {
	return s.lay.PASID != 0 && s.read16(s.lay.PASID+pasidCtrl)&PASIDCtrlEnable != 0
}

// PASIDExecEnabled and PASIDPrivEnabled report the permission enables.
func (s *Space) PASIDExecEnabled() bool {
	return s.lay.PASID != 0 && s.read16(s.lay.PASID+pasidCtrl)&PASIDCtrlExec != 0
}

// PASIDPrivEnabled reports Privileged Mode Enable.
func (s *Space) PASIDPrivEnabled() bool {
	return s.lay.PASID != 0 && s.read16(s.lay.PASID+pasidCtrl)&PASIDCtrlPriv != 0
}

// PASIDMaxWidth returns the advertised Max PASID Width.
func (s *Space) PASIDMaxWidth() int {
	if s.lay.PASID == 0 {
		return 0
	}
	return int(s.read16(s.lay.PASID+pasidCap)>>pasidCapWidthShft) & 0x1f
}
