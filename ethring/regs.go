package ethring

import "github.com/npfnic/npfnic/vdevice/hw"

// The Ethernet engine's BAR0 registers, decoded here so that each has one
// owner (hw.Register.Block): the datapath's own (CTRL, the status block
// address, MISC_IRQ_ARM), the backup ring's and every queue pair's. The
// PCI function routes whole 32-bit accesses to them after applying the
// partial-write rule (hw.PartialWriteRule), and never a write to a
// read-only register; offsets are BAR0's.

// RegRead reads the register at BAR0 offset off of the datapath, backup
// ring or queue pair blocks; ok is false for other offsets. Write-only
// registers, and the registers of pairs the function does not offer, read
// 0. It never blocks on guest memory.
func (d *Engine) RegRead(off uint32) (v uint32, ok bool) {
	if p, rel, in := d.pairReg(off); in {
		if p != nil {
			v = p.ReadReg(rel)
		}
		return v, true
	}
	switch off {
	case hw.RegCtrl:
		// BUSY while the datapath may still DMA: a status block, an
		// enabled pair or backup ring, or one that a disable or CTRL_RESET
		// stopped and that has not quiesced yet.
		if d.Enabled() {
			v |= hw.CtrlEnable
		}
		if d.Busy() {
			v |= hw.CtrlBusy
		}
		return v, true
	case hw.RegStatusAddrLo:
		d.ctlMu.Lock()
		defer d.ctlMu.Unlock()
		return uint32(d.statusAddr), true
	case hw.RegStatusAddrHi:
		d.ctlMu.Lock()
		defer d.ctlMu.Unlock()
		return uint32(d.statusAddr >> 32), true
	case hw.RegMiscIRQArm:
		return 0, true
	}
	return d.BackupReadReg(off)
}

// RegWrite writes the register at BAR0 offset off of the datapath, backup
// ring or queue pair blocks; ok is false for other offsets. It never
// touches guest memory, so it is safe on the vfio-user socket goroutine.
func (d *Engine) RegWrite(off, v uint32) (ok bool) {
	if p, rel, in := d.pairReg(off); in {
		if p != nil {
			p.WriteReg(rel, v)
		}
		return true
	}
	switch off {
	case hw.RegCtrl:
		// RESET first (self-clearing), then ENABLE as written, so writing
		// ENABLE|RESET restarts the datapath from scratch.
		if v&hw.CtrlReset != 0 {
			d.log.Info("datapath reset by the driver")
			d.Reset()
		}
		d.SetEnabled(v&hw.CtrlEnable != 0)
	case hw.RegStatusAddrLo:
		d.ctlMu.Lock()
		d.statusAddr = d.statusAddr&^0xffffffff | uint64(v)
		d.ctlMu.Unlock()
	case hw.RegStatusAddrHi:
		// Only the high half latches: a driver writes LO, then HI.
		d.ctlMu.Lock()
		d.statusAddr = d.statusAddr&0xffffffff | uint64(v)<<32
		addr := d.statusAddr
		d.ctlMu.Unlock()
		d.SetStatusAddr(addr)
	case hw.RegMiscIRQArm:
		if v&1 != 0 {
			d.ArmMisc()
		}
	default:
		return d.BackupWriteReg(off, v)
	}
	return true
}

// pairReg maps a BAR0 offset inside the queue pairs' window to the pair
// (nil for a pair the function does not offer) and the offset within its
// block; in is false outside the window.
func (d *Engine) pairReg(off uint32) (p *Pair, rel uint32, in bool) {
	if off < hw.QPRegBase || off >= hw.QPBase(hw.QPMax) {
		return nil, 0, false
	}
	rel = off - hw.QPRegBase
	return d.Pair(int(rel / hw.QPRegStride)), rel % hw.QPRegStride, true
}
