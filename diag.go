package npfnic

import (
	"fmt"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// diagRegs is the diagnostic register block: the scratch register, test
// interrupts, the diagnostic DMA (diagdma.go), the DIAG_ECHO round trip
// (echo.go) and the late-DMA counter.
type diagRegs struct{ n *NIC }

// Blocks implements hw.RegisterBlock.
func (diagRegs) Blocks() []hw.Block { return []hw.Block{hw.BlockDiag} }

// ReadRegister implements hw.RegisterBlock.
func (b diagRegs) ReadRegister(r hw.Register, _ int) (uint32, bool) {
	n := b.n
	off := r.Offset
	switch off {
	case hw.RegDiagDMAStatus:
		return n.diagStatus(), true
	case hw.RegDiagEcho:
		return n.echo.rounds(), true
	case hw.RegDiagEchoGap:
		return n.echo.getGap(), true
	case hw.RegLateDMA:
		return n.lateDMA(), true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch off {
	case hw.RegScratch:
		return n.scratch, true
	case hw.RegDiagDMAAddrLo:
		return uint32(n.dmaAddr), true
	case hw.RegDiagDMAAddrHi:
		return uint32(n.dmaAddr >> 32), true
	case hw.RegDiagDMALen:
		return n.dmaLen, true
	case hw.RegDiagDMASeed:
		return n.dmaSeed, true
	}
	return 0, false
}

// WriteRegister implements hw.RegisterBlock.
func (b diagRegs) WriteRegister(r hw.Register, _ int, v uint32) bool {
	n := b.n
	off := r.Offset
	switch off {
	case hw.RegDiagIRQ:
		n.diagIRQ(v)
		return true
	case hw.RegDiagDMACtrl:
		n.diagCtrl(v)
		return true
	case hw.RegDiagEchoCtrl:
		n.echo.start(v)
		return true
	case hw.RegDiagEcho:
		n.echo.answer(v)
		return true
	case hw.RegDiagEchoGap:
		n.echo.setGap(v)
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch off {
	case hw.RegScratch:
		n.scratch = v
	case hw.RegDiagDMAAddrLo:
		n.dmaAddr = n.dmaAddr&^0xffffffff | uint64(v)
	case hw.RegDiagDMAAddrHi:
		n.dmaAddr = n.dmaAddr&0xffffffff | uint64(v)<<32
	case hw.RegDiagDMALen:
		n.dmaLen = v
	case hw.RegDiagDMASeed:
		n.dmaSeed = v
	default:
		return false
	}
	return true
}

// diagIRQ fires the vector a DIAG_IRQ write names.
func (n *NIC) diagIRQ(v uint32) {
	if v >= hw.MSIXVectors {
		n.log.Warn("DIAG_IRQ: no such vector", "vector", v)
		return
	}
	if err := n.trigger(int(v)); err != nil {
		n.log.Warn("DIAG_IRQ failed", "vector", v, "err", err)
	}
}

// lateDMA reads LATE_DMA: the late writes guest memory's detector refused
// (low 32 bits). A count that grew since the last read is logged with the
// detector's log: it means a device bug.
func (n *NIC) lateDMA() uint32 {
	late := n.mem.LateWrites()
	if seen := n.lateSeen.Swap(late); late > seen {
		n.log.Warn("late DMA writes refused", "count", late, "log", fmt.Sprint(n.mem.LateLog()))
	}
	return uint32(late)
}
