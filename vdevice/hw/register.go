package hw

import (
	"iter"
	"slices"
	"strconv"
)

// The register table: every BAR0 register with what a BAR0 router, the C
// header and the datasheet need to know about it (access, what a write
// does, the partial-write rule, reset value, owning block). Lookup decodes
// an offset through it.

// Access is what a read of a register returns.
type Access uint8

const (
	// AccessRO: the register reports the device's state or a constant;
	// writes are ignored.
	AccessRO Access = iota + 1
	// AccessRW: reads return the register's state (for a storage
	// register, the value written).
	AccessRW
	// AccessWO: reads return 0.
	AccessWO
)

func (a Access) String() string {
	switch a {
	case AccessRO:
		return "RO"
	case AccessRW:
		return "RW"
	case AccessWO:
		return "WO"
	}
	return "?"
}

// Kind is what a write to a register does.
type Kind uint8

const (
	// KindStatus: nothing (read-only register).
	KindStatus Kind = iota + 1
	// KindStorage: the value is stored and read back; it takes effect at
	// once or when the owning block's enable latches it.
	KindStorage
	// KindDoorbell: the value is a free-running index (a tail, a head, a
	// bitmap index) the device acts on; the register reads 0.
	KindDoorbell
	// KindCommand: the write is an action (enable, disable, reset, start,
	// arm, fire, answer). Reads report state, not the value written;
	// self-clearing bits (RESET) read 0.
	KindCommand
	// KindRW1C: bits the device sets and the driver clears by writing 1
	// (no BAR0 register is RW1C).
	KindRW1C
)

// Action reports whether a write to a register of this kind is an event
// whose meaning needs the whole 32-bit value.
func (k Kind) Action() bool { return k == KindDoorbell || k == KindCommand || k == KindRW1C }

// Describe says what a write to a register of this kind does, for the
// datasheet.
func (k Kind) Describe() string {
	switch k {
	case KindStatus:
		return "read only: the device's state or a constant; writes are ignored"
	case KindStorage:
		return "holds the value written and reads it back; it takes effect at once or when the block's enable latches it"
	case KindDoorbell:
		return "write only: a free-running 32-bit index (a tail, a head, a bitmap index) the device acts on; reads 0"
	case KindCommand:
		return "each write is an action (enable, disable, reset, start, arm, fire, answer); reads report state, and self-clearing bits such as RESET read 0"
	case KindRW1C:
		return "bits the device sets; writing 1 to a bit clears it, writing 0 leaves it"
	}
	return ""
}

func (k Kind) String() string {
	switch k {
	case KindStatus:
		return "status"
	case KindStorage:
		return "storage"
	case KindDoorbell:
		return "doorbell"
	case KindCommand:
		return "command"
	case KindRW1C:
		return "RW1C"
	}
	return "?"
}

// Partial is what the device does with a write that covers only some bytes
// of a register (a 1- or 2-byte write, or part of an unaligned one).
type Partial uint8

const (
	// PartialMerge: the written bytes replace those bytes of the register's
	// current value and the rest keep theirs, as if the driver had read
	// the register, changed those bytes and written all 32 bits.
	PartialMerge Partial = iota + 1
	// PartialIgnore: the write has no effect; the device logs it as a
	// "partial write". The register acts on full 32-bit writes only.
	PartialIgnore
)

// PartialWriteRule is the one rule for writes narrower than a register,
// and why (the datasheet prints it).
const PartialWriteRule = `Every register is 32 bits wide and little-endian. Reads may have any width
and alignment: the device returns the bytes asked for, composed from the
registers they touch, and no read changes the device's state. A write
covering a whole register acts on it; a write covering only some of its
bytes (a 1- or 2-byte write, or part of an unaligned one) depends on the
register:

- Storage registers (bases, sizes, vectors, the scratch register) merge it:
  the bytes written replace those bytes of the current value, the others
  keep theirs.
- Doorbells, commands and RW1C registers ignore it, and the device logs a
  "partial write". Their value is an event, not a state: a doorbell carries
  a free-running index whose meaning needs all 32 bits (merged with a
  register that reads 0, or zero-extended, a low byte would move the index
  backwards and stop the queue with a bad-tail error), and a command merged
  with what the register reads back would repeat or invent actions (BUSY,
  ENABLE). Real NICs leave narrower accesses to their registers unsupported
  (Intel's e1000-family datasheets define 32-bit register access only), and
  QEMU's e1000e, whose register file takes 4-byte accesses only,
  zero-extends a byte written to a register into a full write; npfnic makes
  the unsupported case harmless and visible instead.
- Read-only registers ignore every write.

Writes to offsets that hold no register are ignored and such offsets read 0.
Drivers write every register with one aligned 32-bit write
(iowrite32/writel).`

// BARType is how both BARs decode (RegBAR and MSIXBAR).
const BARType = "64-bit memory, non-prefetchable"

// Block is the part of the device that owns a register: the router hands
// the register's reads and writes to that block.
type Block uint8

const (
	BlockIdentity Block = iota + 1 // what the function is: ID, version, MAC, queue pairs, features
	BlockDiag                      // diagnostics: scratch, test interrupts, diagnostic DMA, echo, late-DMA counter
	BlockDatapath                  // the Ethernet datapath as a whole: enable and reset, status block, misc interrupt
	BlockPair                      // one Ethernet queue pair's registers, at PairBase(q)
	BlockBackup                    // the Ethernet backup ring (network page faults)
	BlockATS                       // address translation: PASID table, translation cache, invalidation queue
	BlockPRI                       // page requests: page request and page response queues
	BlockRDMA                      // the RDMA engine: command and event queues, send queue and CQ doorbells (interface 2.4)

	// BlockCount bounds the Block values (a router's table of blocks has
	// BlockCount entries, index 0 unused).
	BlockCount = iota + 1
)

func (b Block) String() string {
	switch b {
	case BlockIdentity:
		return "identity"
	case BlockDiag:
		return "diag"
	case BlockDatapath:
		return "datapath"
	case BlockPair:
		return "pair"
	case BlockBackup:
		return "backup"
	case BlockATS:
		return "ats"
	case BlockPRI:
		return "pri"
	case BlockRDMA:
		return "rdma"
	}
	return "?"
}

// Register describes one 32-bit register.
type Register struct {
	Name    string // C name suffix: NPFNIC_REG_<Name>, or NPFNIC_PAIR_<Name> for a queue pair's
	Offset  uint32 // BAR0 offset; for a queue pair's register, the offset from PairBase(q)
	Access  Access
	Kind    Kind
	Partial Partial // set from Kind by the constructors below: PartialIgnore for actions
	Block   Block
	// Reset is the value the register reads after a function reset (and at
	// power-on), unless ResetNote says it depends on the device: then
	// ResetNote says what it is.
	Reset     uint32
	ResetNote string
	Doc       string
}

// Writable reports whether writes to the register have any effect.
func (r Register) Writable() bool { return r.Kind != KindStatus }

// The constructors set Partial from the one rule (PartialWriteRule), so no
// table row can choose otherwise.

// status is a read-only register.
func status(name string, off uint32, b Block, reset uint32, doc string) Register {
	return Register{name, off, AccessRO, KindStatus, PartialIgnore, b, reset, "", doc}
}

// storage is a read/write register that holds what the driver wrote.
func storage(name string, off uint32, b Block, reset uint32, doc string) Register {
	return Register{name, off, AccessRW, KindStorage, PartialMerge, b, reset, "", doc}
}

// doorbell is a write-only index register.
func doorbell(name string, off uint32, b Block, doc string) Register {
	return Register{name, off, AccessWO, KindDoorbell, PartialIgnore, b, 0, "", doc}
}

// command is a register whose writes are actions; a is AccessRW when
// reads report state, AccessWO when they read 0.
func command(name string, off uint32, b Block, a Access, doc string) Register {
	return Register{name, off, a, KindCommand, PartialIgnore, b, 0, "", doc}
}

// resetVaries marks a register whose reset value depends on the device.
func (r Register) resetVaries(note string) Register {
	r.ResetNote = note
	return r
}

// Registers lists BAR0's global registers and the backup ring's, in offset
// order (the ATS and PRI registers are TranslationRegisters).
var Registers = []Register{
	status("ID", RegID, BlockIdentity, Magic, "magic NPFNIC_MAGIC"),
	status("VERSION", RegVersion, BlockIdentity, InterfaceVersion, "interface version, major << 16 | minor"),
	storage("SCRATCH", RegScratch, BlockDiag, 0, "reads back the last value written"),
	command("DIAG_IRQ", RegDiagIRQ, BlockDiag, AccessWO, "write a vector number: the device fires that MSI-X vector"),
	storage("DIAG_ECHO_GAP", RegDiagEchoGap, BlockDiag, 0, "microseconds the device waits before each DIAG_ECHO round, up to NPFNIC_DIAG_ECHO_GAP_MAX (0: back to back)"),
	storage("DIAG_DMA_ADDR_LO", RegDiagDMAAddrLo, BlockDiag, 0, "diagnostic DMA target address, bits 31:0"),
	storage("DIAG_DMA_ADDR_HI", RegDiagDMAAddrHi, BlockDiag, 0, "diagnostic DMA target address, bits 63:32"),
	storage("DIAG_DMA_LEN", RegDiagDMALen, BlockDiag, 0, "diagnostic DMA length in bytes"),
	storage("DIAG_DMA_SEED", RegDiagDMASeed, BlockDiag, 0, "diagnostic DMA pattern seed"),
	command("DIAG_DMA_CTRL", RegDiagDMACtrl, BlockDiag, AccessWO, "write NPFNIC_DIAG_DMA_CTRL_START to start, NPFNIC_DIAG_DMA_CTRL_ABORT to stop"),
	status("DIAG_DMA_STATUS", RegDiagDMAStatus, BlockDiag, DiagDMAStatusIdle, "NPFNIC_DIAG_DMA_STATUS_*"),
	command("DIAG_ECHO_CTRL", RegDiagEchoCtrl, BlockDiag, AccessWO, "write N (1..NPFNIC_DIAG_ECHO_MAX): N echo rounds, each firing NPFNIC_DIAG_ECHO_VECTOR"),
	command("DIAG_ECHO", RegDiagEcho, BlockDiag, AccessRW, "write the round number (from 1 in each run) from process context after the interrupt; reads rounds completed in the last run"),
	command("CTRL", RegCtrl, BlockDatapath, AccessRW, "NPFNIC_CTRL_ENABLE; write NPFNIC_CTRL_RESET to reset the datapath (reads back 0)"),
	storage("STATUS_ADDR_LO", RegStatusAddrLo, BlockDatapath, 0, "status block guest address, bits 31:0 (64-byte aligned)"),
	storage("STATUS_ADDR_HI", RegStatusAddrHi, BlockDatapath, 0, "status block guest address, bits 63:32; writing it latches the address"),
	status("MAC_LO", RegMACLo, BlockIdentity, 0, "MAC bytes 0..3, byte 0 in bits 7:0").resetVaries("the station address"),
	status("MAC_HI", RegMACHi, BlockIdentity, 0, "MAC bytes 4..5 in bits 15:0").resetVaries("the station address"),
	status("PAIR_MAX", RegPairMax, BlockIdentity, PairMax, "number of queue pairs (NPFNIC_PAIR_MAX)").resetVaries("queue pairs offered, 1..NPFNIC_PAIR_MAX"),
	command("MISC_IRQ_ARM", RegMiscIRQArm, BlockDatapath, AccessWO, "write 1: NPFNIC_MISC_VECTOR may fire once for the next misc event"),
	status("FEATURES", RegFeatures, BlockIdentity, Features, "NPFNIC_FEAT_*: offloads the device implements (interface 2.1)"),
	status("LATE_DMA", RegLateDMA, BlockDiag, 0, "late DMA writes the device refused since reset (interface 2.3): nonzero means a device bug"),
	storage("BACKUP_BASE_LO", RegBackupBaseLo, BlockBackup, 0, "backup ring IOVA, bits 31:0 (32-byte aligned)"),
	storage("BACKUP_BASE_HI", RegBackupBaseHi, BlockBackup, 0, "backup ring IOVA, bits 63:32"),
	storage("BACKUP_SIZE", RegBackupSize, BlockBackup, 0, "backup ring entries: power of two, NPFNIC_RING_SIZE_MIN..NPFNIC_RING_SIZE_MAX"),
	doorbell("BACKUP_TAIL", RegBackupTail, BlockBackup, "backup doorbell: free-running count of backup buffers posted"),
	command("BACKUP_CTRL", RegBackupCtrl, BlockBackup, AccessRW, "NPFNIC_BACKUP_CTRL_ENABLE: set latches base/size and zeroes head/tail; clear stops"),
	storage("BACKUP_VECTOR", RegBackupVector, BlockBackup, BackupVectorDefault, "MSI-X vector of backup-ring entries and RX_TAIL_IRQ events"),
}

// PairRegisters lists the registers of one queue pair, as offsets from
// PairBase(q) (C: NPFNIC_PAIR_<Name>).
var PairRegisters = []Register{
	storage("TX_BASE_LO", PairTxBaseLo, BlockPair, 0, "TX ring guest address, bits 31:0 (16-byte aligned)"),
	storage("TX_BASE_HI", PairTxBaseHi, BlockPair, 0, "TX ring guest address, bits 63:32"),
	storage("TX_SIZE", PairTxSize, BlockPair, 0, "TX ring entries: power of two, NPFNIC_RING_SIZE_MIN..NPFNIC_RING_SIZE_MAX"),
	doorbell("TX_TAIL", PairTxTail, BlockPair, "TX doorbell: free-running count of TX descriptors posted"),
	storage("RX_BASE_LO", PairRxBaseLo, BlockPair, 0, "RX ring guest address, bits 31:0 (16-byte aligned)"),
	storage("RX_BASE_HI", PairRxBaseHi, BlockPair, 0, "RX ring guest address, bits 63:32"),
	storage("RX_SIZE", PairRxSize, BlockPair, 0, "RX ring entries: power of two, NPFNIC_RING_SIZE_MIN..NPFNIC_RING_SIZE_MAX"),
	doorbell("RX_TAIL", PairRxTail, BlockPair, "RX doorbell: free-running count of RX buffers posted"),
	command("CTRL", PairCtrl, BlockPair, AccessRW, "NPFNIC_PAIR_CTRL_ENABLE: set latches bases/sizes and zeroes heads/tails; clear stops the pair; NPFNIC_PAIR_CTRL_RX_LRO: large receive on (every write)"),
	command("IRQ_ARM", PairIRQArm, BlockPair, AccessWO, "write 1: the pair's vector may fire once for the next completion"),
	storage("ITR", PairITR, BlockPair, 0, "minimum microseconds between two interrupts of the pair (0 = none)"),
	storage("RX_POLICY", PairRxPolicy, BlockPair, RxPolicyPin, "NPFNIC_RX_POLICY_*: what an RX buffer fault does (latched at enable)"),
	storage("PASID", PairPASID, BlockPair, 0, "PASID whose I/O page tables translate the pair's buffer addresses (latched at enable)"),
	storage("BM_SIZE", PairBmSize, BlockPair, 0, "rNPF bitmap size for NPFNIC_RX_POLICY_BACKUP: power of two, 1..NPFNIC_BM_SIZE_MAX (latched at enable)"),
	doorbell("RX_RESOLVE", PairRxResolve, BlockPair, "resolve_rNPFs: free-running bitmap index of an rNPF whose frame the driver placed"),
	command("RX_TAIL_IRQ", PairRxTailIRQ, BlockPair, AccessWO, "write 1: NPFNIC_REG_BACKUP_VECTOR fires once when RX_TAIL next moves"),
	storage("TX_IRQ_DELAY", PairTxIRQDelay, BlockPair, 0, "microseconds an interrupt only TX completions ask for may wait for an RX completion (0 = none; NPFNIC_FEAT_TX_IRQ_DELAY)"),
	storage("NOTIFY_LO", PairNotifyLo, BlockPair, 0, "guest address of the pair's struct npfnic_pair_notify, bits 31:0 (16-byte aligned; 0 = none; latched at enable; NPFNIC_FEAT_NOTIFY)"),
	storage("NOTIFY_HI", PairNotifyHi, BlockPair, 0, "guest address of the pair's struct npfnic_pair_notify, bits 63:32"),
}

// Window is a range of BAR0 and the blocks whose registers lie in it.
type Window struct {
	Start, End uint32 // [Start, End)
	Name       string
	Blocks     []Block
}

// Windows is BAR0's map, in offset order. Offsets inside a window that
// hold no register read 0 and ignore writes, as do offsets outside every
// window.
var Windows = []Window{
	{RegID, RegLateDMA + 4, "global registers", []Block{BlockIdentity, BlockDiag, BlockDatapath}},
	{XlatRegBase, ATSRegEnd, "address translation (ATS)", []Block{BlockATS}},
	{ATSRegEnd, PRIRegEnd, "page requests (PRI)", []Block{BlockPRI}},
	{RegBackupBaseLo, RegBackupVector + 4, "backup ring", []Block{BlockBackup}},
	{RegRDMACtrl, RegRDMAPrefault + 4, "RDMA engine", []Block{BlockRDMA}},
	{PairRegBase, PairRegBase + PairMax*PairRegStride, "queue pairs: pair q at NPFNIC_PAIR_BASE(q)", []Block{BlockPair}},
}

// regDecoder maps BAR0 offsets to table rows in O(1): one byte per
// register slot below the queue pairs and per slot of one pair's block.
type regDecoder struct {
	global [PairRegBase / 4]uint8 // 1 + index into regs; 0: no register
	pair   [PairRegStride / 4]uint8
	regs   []Register // Registers, TranslationRegisters, then RDMARegisters
}

var decoder = newRegDecoder()

// newRegDecoder builds the decoder from the tables. A table that puts two
// registers at one offset or a register outside its range is a bug in this
// package: it panics at start-up (and TestRegisterKinds says which).
func newRegDecoder() *regDecoder {
	d := &regDecoder{regs: append(append(append([]Register(nil), Registers...), TranslationRegisters...), RDMARegisters...)}
	if len(d.regs) > 255 || len(PairRegisters) > 255 {
		panic("hw: register table too large for the decoder")
	}
	for i, r := range d.regs {
		if r.Offset%4 != 0 || r.Offset >= PairRegBase || d.global[r.Offset/4] != 0 {
			panic("hw: register " + r.Name + " misaligned, outside the global registers or sharing an offset")
		}
		d.global[r.Offset/4] = uint8(i + 1)
	}
	for i, r := range PairRegisters {
		if r.Offset%4 != 0 || r.Offset >= PairRegStride || d.pair[r.Offset/4] != 0 {
			panic("hw: queue pair register " + r.Name + " misaligned, outside the pair's block or sharing an offset")
		}
		d.pair[r.Offset/4] = uint8(i + 1)
	}
	return d
}

// Lookup decodes a BAR0 offset: the register holding byte off and, for a
// queue pair's register, the pair q (-1 otherwise; r.Offset is then
// relative to PairBase(q)). ok is false for offsets that hold no register.
// It is O(1) and does not allocate.
func Lookup(off uint32) (r Register, q int, ok bool) {
	off &^= 3
	switch {
	case off < PairRegBase:
		if i := decoder.global[off/4]; i != 0 {
			return decoder.regs[i-1], -1, true
		}
	case off < PairRegBase+PairMax*PairRegStride:
		rel := off - PairRegBase
		if i := decoder.pair[rel%PairRegStride/4]; i != 0 {
			return PairRegisters[i-1], int(rel / PairRegStride), true
		}
	}
	return Register{}, -1, false
}

// AllRegisters yields every register of BAR0 with its offset: the global
// and backup ring registers, the translation registers, then each queue
// pair's registers for pair 0 up to PairMax-1 (Register.Offset then stays
// relative to PairBase(q)). A router's tests walk it to cover every register
// the table holds.
func AllRegisters() iter.Seq2[uint32, Register] {
	return func(yield func(uint32, Register) bool) {
		for _, r := range decoder.regs {
			if !yield(r.Offset, r) {
				return
			}
		}
		for q := range PairMax {
			for _, r := range PairRegisters {
				if !yield(PairBase(q)+r.Offset, r) {
					return
				}
			}
		}
	}
}

// Vector describes one MSI-X vector's use.
type Vector struct {
	Vector int
	Name   string
	Doc    string
}

// Vectors lists every MSI-X vector of the function, in vector order, with
// the register that moves it when one does.
var Vectors = vectors()

func vectors() []Vector {
	vs := []Vector{{MiscVector, "misc", "link change, device error or queue error; armed once per event by MISC_IRQ_ARM"}}
	for q := range PairMax {
		vs = append(vs, Vector{PairVector(q), "pair " + strconv.Itoa(q),
			"TX and RX completions of queue pair " + strconv.Itoa(q) + "; armed once per event by its IRQ_ARM, paced by its ITR"})
	}
	return append(vs,
		Vector{PRQVectorDefault, "page requests", "page requests queued (reset value of PRQ_VECTOR)"},
		Vector{InvqVectorDefault, "invalidation", "invalidation WAIT completions with NPFNIC_INV_FLAG_IRQ (reset value of INVQ_VECTOR)"},
		Vector{BackupVectorDefault, "backup ring", "backup ring entries and RX_TAIL_IRQ events (reset value of BACKUP_VECTOR)"},
		Vector{DiagEchoVector, "echo", "DIAG_ECHO rounds"},
		Vector{RDMAVector, "rdma events", "RDMA event queue entries, armed once per event by EQ_ARM (reset value of EQ_VECTOR)"},
	)
}

// RegisterBlock is the owner of one Block of BAR0 registers. The PCI
// function decodes each access with Lookup and applies the table's rules
// before the block sees it, so a block only ever gets a register of its
// own, whole: never an offset without a register, a read of a write-only
// register (it reads 0), a write to a read-only one (it has no effect), or
// a write covering some bytes only (PartialWriteRule). r is the table's
// row; q is the queue pair of a pair's register (r.Offset is then relative
// to PairBase(q)), -1 otherwise. ok is false for a register the block does
// not decode: a table that hands a block a register it does not know is a
// bug, which the function's tests look for. Neither method may wait on
// guest memory: they run on the vfio-user socket goroutine.
type RegisterBlock interface {
	// Blocks are the blocks of the table whose registers it owns.
	Blocks() []Block
	ReadRegister(r Register, q int) (v uint32, ok bool)
	WriteRegister(r Register, q int, v uint32) (ok bool)
}

// ByOffset drives one RegisterBlock by BAR0 offset, as the PCI function
// routes whole 32-bit accesses to it: for driver models and tests that
// run a block without the function. ok is false for an offset that holds
// no register, a register of a block it does not own, or one it does not
// decode.
type ByOffset struct{ Block RegisterBlock }

// Offsets returns b driven by BAR0 offset.
func Offsets(b RegisterBlock) ByOffset { return ByOffset{Block: b} }

// RegRead reads the register at BAR0 offset off; a write-only register
// reads 0.
func (b ByOffset) RegRead(off uint32) (uint32, bool) {
	r, q, ok := b.lookup(off)
	if !ok {
		return 0, false
	}
	if r.Access == AccessWO {
		return 0, true
	}
	return b.Block.ReadRegister(r, q)
}

// RegWrite writes v to the register at BAR0 offset off; a write to a
// read-only register has no effect.
func (b ByOffset) RegWrite(off, v uint32) bool {
	r, q, ok := b.lookup(off)
	if !ok {
		return false
	}
	if !r.Writable() {
		return true
	}
	return b.Block.WriteRegister(r, q, v)
}

// lookup decodes a 4-byte aligned off of one of the block's registers.
func (b ByOffset) lookup(off uint32) (r Register, q int, ok bool) {
	r, q, ok = Lookup(off)
	if !ok || off%4 != 0 || !slices.Contains(b.Block.Blocks(), r.Block) {
		return Register{}, -1, false
	}
	return r, q, true
}
