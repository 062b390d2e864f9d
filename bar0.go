package npfnic

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// BAR0 is routed by the register table (hw.Lookup), not by switch
// statements here: the table says which block owns a register, whether a
// write has any effect, and what a write covering only some of its bytes
// does (hw.PartialWriteRule). Each block (hw.RegisterBlock) gets the
// table's row of a register of its own, whole, and decodes nothing else, so
// adding a register touches the table and its owner only.

// routeBlocks fills the block table: the function's identity and
// diagnostics, the Ethernet engine (datapath, backup ring, queue pairs),
// address translation, page requests and the RDMA engine.
func (n *NIC) routeBlocks() {
	for _, owner := range []hw.RegisterBlock{identityRegs{n}, diagRegs{n}, n.dp, n.xlat, n.pri, n.rdma} {
		for _, b := range owner.Blocks() {
			n.blocks[b] = owner
		}
	}
}

// readRegs serves any size and alignment by composing the 32-bit registers
// the access touches, as a PCIe completer returning the enabled bytes.
func (n *NIC) readRegs(off uint64, p []byte) {
	var cur uint32
	curReg := ^uint64(0)
	for i := range p {
		a := off + uint64(i)
		reg := a &^ 3
		if reg != curReg {
			cur, curReg = n.readReg(reg), reg
		}
		p[i] = byte(cur >> (8 * (a & 3)))
	}
}

// readReg reads the 32-bit register at BAR0 offset reg (4-byte aligned):
// offsets that hold no register, and write-only registers, read 0.
func (n *NIC) readReg(reg uint64) uint32 {
	if reg >= hw.RegBARSize {
		return 0
	}
	r, q, ok := hw.Lookup(uint32(reg))
	if !ok || r.Access == hw.AccessWO {
		return 0
	}
	v, _ := n.blocks[r.Block].ReadRegister(r, q)
	return v
}

// writeRegs splits a write of any size and alignment into the 32-bit
// registers it touches, each with the mask of the bytes it covers.
func (n *NIC) writeRegs(off uint64, p []byte) {
	end := off + uint64(len(p))
	for reg := off &^ 3; reg < end; reg += 4 {
		lo, hi := max(reg, off), min(reg+4, end)
		var b [4]byte
		var mask uint32
		for a := lo; a < hi; a++ {
			b[a-reg] = p[a-off]
			mask |= 0xff << (8 * (a - reg))
		}
		n.writeReg(reg, binary.LittleEndian.Uint32(b[:]), mask)
	}
}

// writeReg applies a write of the bytes mask selects to the register at
// BAR0 offset reg, by the table: nothing for offsets without a register
// and for read-only registers; for a write that covers only some bytes,
// the register's partial-write rule; then the whole value to the owner.
func (n *NIC) writeReg(reg uint64, v, mask uint32) {
	if reg >= hw.RegBARSize {
		return
	}
	r, q, ok := hw.Lookup(uint32(reg))
	if !ok || !r.Writable() {
		return
	}
	b := n.blocks[r.Block]
	if mask != 0xffffffff {
		if r.Partial != hw.PartialMerge {
			n.partialWrite(r, q, reg, v, mask)
			return
		}
		old, _ := b.ReadRegister(r, q)
		v = old&^mask | v&mask
	}
	if r.Kind == hw.KindDoorbell && n.trace.On() {
		n.trace.Emit(trace.Doorbell, doorbellTrack(r, q), reg, uint64(v))
	}
	b.WriteRegister(r, q, v)
}

// doorbellTrack is the trace track of a doorbell: its queue's direction,
// or its engine's.
func doorbellTrack(r hw.Register, q int) trace.Track {
	switch {
	case q >= 0 && r.Offset == hw.PairTxTail:
		return trace.PairTx(q)
	case q >= 0:
		return trace.PairRx(q)
	case r.Block == hw.BlockATS:
		return trace.TrackATS
	case r.Block == hw.BlockPRI:
		return trace.TrackPRI
	case r.Block == hw.BlockBackup:
		return trace.TrackBackup
	}
	return trace.TrackDevice
}

// partialWrite logs a partial write to a register that acts on full
// writes only. The guest can issue them as fast as it likes, so the log
// is rate-limited.
func (n *NIC) partialWrite(r hw.Register, q int, reg uint64, v, mask uint32) {
	ok, suppressed := n.partialLog.allow(time.Now())
	if !ok {
		return
	}
	args := []any{"reg", r.Name, "offset", reg, "byte_mask", mask, "value", v & mask}
	if q >= 0 {
		args = append(args, "pair", q)
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	n.log.Warn("partial write", args...)
}

// logEvery is how often a rate-limited log line may repeat.
const logEvery = time.Second

// rateLimit lets a log line that a guest can trigger at will through once
// per logEvery, counting the ones it holds back for the next that passes.
type rateLimit struct {
	mu         sync.Mutex
	next       time.Time
	suppressed uint64
}

// allow reports whether a line may be logged at now and how many were
// held back since the last one.
func (l *rateLimit) allow(now time.Time) (ok bool, suppressed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.suppressed++
		return false, 0
	}
	l.next = now.Add(logEvery)
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}

// identityRegs is what the function is: its ID, version, station address,
// queue pairs and features. Every register is read-only.
type identityRegs struct{ n *NIC }

// Blocks implements hw.RegisterBlock.
func (identityRegs) Blocks() []hw.Block { return []hw.Block{hw.BlockIdentity} }

// ReadRegister implements hw.RegisterBlock.
func (b identityRegs) ReadRegister(r hw.Register, _ int) (uint32, bool) {
	switch r.Offset {
	case hw.RegID:
		return hw.Magic, true
	case hw.RegVersion:
		return hw.InterfaceVersion, true
	case hw.RegMACLo:
		return binary.LittleEndian.Uint32(b.n.mac[0:4]), true
	case hw.RegMACHi:
		return uint32(binary.LittleEndian.Uint16(b.n.mac[4:6])), true
	case hw.RegPairMax:
		return uint32(b.n.queuePairs), true
	case hw.RegFeatures:
		return hw.Features, true
	}
	return 0, false
}

// WriteRegister implements hw.RegisterBlock. The function never calls it:
// every identity register is read-only.
func (b identityRegs) WriteRegister(hw.Register, int, uint32) bool { return false }
