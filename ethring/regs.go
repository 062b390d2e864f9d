package ethring

import "github.com/npfnic/npfnic/vdevice/hw"

// The Ethernet engine's BAR0 registers, decoded here so that each has one
// owner (hw.Register.Block): the datapath's own (CTRL, the status block
// address, MISC_IRQ_ARM), the backup ring's and every queue pair's. The
// PCI function hands them over whole, with the table's rules applied
// (hw.RegisterBlock).

// Blocks implements hw.RegisterBlock.
func (d *Engine) Blocks() []hw.Block {
	return []hw.Block{hw.BlockDatapath, hw.BlockBackup, hw.BlockPair}
}

// ReadRegister implements hw.RegisterBlock for the datapath, backup ring
// and queue pair blocks. The registers of pairs the function does not
// offer read 0.
func (d *Engine) ReadRegister(r hw.Register, q int) (v uint32, ok bool) {
	if r.Block == hw.BlockPair {
		if p := d.Pair(q); p != nil {
			v = p.ReadReg(r.Offset)
		}
		return v, true
	}
	switch r.Offset {
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
	}
	return d.backupReadReg(r.Offset)
}

// WriteRegister implements hw.RegisterBlock for the datapath, backup ring
// and queue pair blocks. It never touches guest memory, so it is safe on
// the vfio-user socket goroutine.
func (d *Engine) WriteRegister(r hw.Register, q int, v uint32) (ok bool) {
	if r.Block == hw.BlockPair {
		if p := d.Pair(q); p != nil {
			p.WriteReg(r.Offset, v)
		}
		return true
	}
	switch r.Offset {
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
		return d.backupWriteReg(r.Offset, v)
	}
	return true
}
