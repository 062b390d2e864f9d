// Package rdmatest is a Go model of the driver and of librxe for tests of
// the RDMA engine without a VM, in the style of ats/atstest and
// pri/pritest: it brings the engine up through its registers, posts
// commands and waits for their status, reads the event queue, builds rxe
// queues in guest RAM as the kernel allocates them and librxe fills and
// polls them, and maps memory regions' pages into a PASID's I/O page
// tables (atstest).
package rdmatest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/ibrc/rxeq"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// Regs is the device's BlockRDMA (the engine, or a NIC's BAR0 adapter).
type Regs interface {
	RegRead(off uint32) (uint32, bool)
	RegWrite(off, v uint32) bool
}

// Timeout bounds every wait of the model.
var Timeout = 5 * time.Second

// Driver is the model of the guest driver's RDMA part.
type Driver struct {
	G        *atstest.Guest
	Regs     Regs
	Status   uint64
	Cmdq     uint64
	EQ       uint64
	CmdqSize uint32
	EQSize   uint32

	mu     sync.Mutex // commands are posted one at a time
	tail   uint32
	eqHead uint32
}

// NewDriver allocates the status block and the queues in g's RAM.
func NewDriver(g *atstest.Guest, regs Regs, cmdqSize, eqSize uint32) *Driver {
	d := &Driver{G: g, Regs: regs, CmdqSize: cmdqSize, EQSize: eqSize}
	d.Status = g.Alloc(hw.RDMAStatusSize, hw.RDMAStatusAlign)
	d.Cmdq = g.Alloc(int(cmdqSize)*hw.RDMACmdSize, hw.RDMACmdSize)
	d.EQ = g.Alloc(int(eqSize)*hw.RDMAEventSize, 64)
	return d
}

// Enable writes the registers and ENABLE.
func (d *Driver) Enable() {
	w := func(off uint32, v uint32) { d.Regs.RegWrite(off, v) }
	w(hw.RegRDMAStatusLo, uint32(d.Status))
	w(hw.RegRDMAStatusHi, uint32(d.Status>>32))
	w(hw.RegCmdqBaseLo, uint32(d.Cmdq))
	w(hw.RegCmdqBaseHi, uint32(d.Cmdq>>32))
	w(hw.RegCmdqSize, d.CmdqSize)
	w(hw.RegEQBaseLo, uint32(d.EQ))
	w(hw.RegEQBaseHi, uint32(d.EQ>>32))
	w(hw.RegEQSize, d.EQSize)
	w(hw.RegRDMACtrl, hw.RDMACtrlEnable)
	d.tail, d.eqHead = 0, 0
}

// Reset writes RESET and waits until BUSY clears.
func (d *Driver) Reset() error {
	d.Regs.RegWrite(hw.RegRDMACtrl, hw.RDMACtrlReset)
	return d.WaitIdle()
}

// WaitIdle waits until RDMA_CTRL.BUSY reads clear.
func (d *Driver) WaitIdle() error {
	return wait("RDMA_CTRL.BUSY to clear", func() bool {
		v, _ := d.Regs.RegRead(hw.RegRDMACtrl)
		return v&hw.RDMACtrlBusy == 0
	})
}

func wait(what string, cond func() bool) error {
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("rdmatest: timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
	return nil
}

// CmdqHead is the status block's cmdq_head.
func (d *Driver) CmdqHead() uint32 {
	return d.G.Load32(d.Status + uint64(hw.RDMAStatusCmdqHead.Offset))
}

// EQTail is the status block's eq_tail.
func (d *Driver) EQTail() uint32 { return d.G.Load32(d.Status + uint64(hw.RDMAStatusEQTail.Offset)) }

// Error is the status block's error and error_info.
func (d *Driver) Error() (code, info uint32) {
	return d.G.Load32(d.Status + uint64(hw.RDMAStatusError.Offset)), d.G.Load32(d.Status + uint64(hw.RDMAStatusErrorInfo.Offset))
}

// Cmd is a command entry.
type Cmd [hw.RDMACmdSize]byte

// NewCmd is a command with its header filled.
func NewCmd(op uint8, handle uint32) Cmd {
	var c Cmd
	hw.RDMACmdOpcode.Put(c[:], op)
	hw.RDMACmdHandle.Put(c[:], handle)
	return c
}

// Post writes commands into the queue and moves CMDQ_TAIL, waiting only
// for room in the queue; it returns the index of the first.
func (d *Driver) Post(cmds ...Cmd) uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	first := d.tail
	for _, c := range cmds {
		if d.tail-d.CmdqHead() >= d.CmdqSize {
			d.Regs.RegWrite(hw.RegCmdqTail, d.tail)
			_ = wait("room in the command queue", func() bool { return d.tail-d.CmdqHead() < d.CmdqSize })
		}
		hw.RDMACmdStatus.Put(c[:], hw.RDMACmdPending)
		addr := d.Cmdq + uint64(d.tail%d.CmdqSize)*hw.RDMACmdSize
		copy(d.G.Bytes(addr, hw.RDMACmdSize), c[:])
		d.tail++
	}
	d.Regs.RegWrite(hw.RegCmdqTail, d.tail)
	return first
}

// Result reads back command i's entry (status and results).
func (d *Driver) Result(i uint32) Cmd {
	var c Cmd
	copy(c[:], d.G.Bytes(d.Cmdq+uint64(i%d.CmdqSize)*hw.RDMACmdSize, hw.RDMACmdSize))
	return c
}

// Run posts one command and waits for it; it returns its status and entry.
func (d *Driver) Run(c Cmd) (uint32, Cmd, error) {
	i := d.Post(c)
	if err := wait("a command", func() bool { return int32(d.CmdqHead()-i) > 0 }); err != nil {
		return 0, Cmd{}, err
	}
	r := d.Result(i)
	return hw.RDMACmdStatus.Get(r[:]), r, nil
}

// Must runs c and fails unless it succeeds.
func (d *Driver) Must(c Cmd) error {
	st, _, err := d.Run(c)
	if err == nil && st != hw.RDMACmdOK {
		err = fmt.Errorf("rdmatest: command %d on %d: status %d", c[0], hw.RDMACmdHandle.Get(c[:]), st)
	}
	return err
}

// Event is an event queue entry.
type Event struct {
	Type   uint8
	Handle uint32
	Info   uint32
	Seq    uint32
}

// Events consumes the events written so far and returns their slots.
func (d *Driver) Events() []Event {
	var evs []Event
	tail := d.EQTail()
	for ; d.eqHead != tail; d.eqHead++ {
		b := d.G.Bytes(d.EQ+uint64(d.eqHead%d.EQSize)*hw.RDMAEventSize, hw.RDMAEventSize)
		evs = append(evs, Event{hw.RDMAEventType.Get(b), hw.RDMAEventHandle.Get(b), hw.RDMAEventInfo.Get(b), hw.RDMAEventSeq.Get(b)})
	}
	d.Regs.RegWrite(hw.RegEQHead, d.eqHead)
	return evs
}

// Queue is an rxe queue buffer in guest RAM.
type Queue struct {
	g     *atstest.Guest
	Base  uint64
	Slots uint32
	Log2  uint32
}

// NewQueue allocates a queue of slots slots of 1 << log2 bytes.
func NewQueue(g *atstest.Guest, slots, log2 uint32) *Queue {
	n := hw.RxeQueueHeaderSize + int(slots)<<log2
	q := &Queue{g: g, Base: g.Alloc((n+4095)&^4095, 4096), Slots: slots, Log2: log2}
	g.Store32(q.Base+uint64(hw.RxeQueueLog2ElemSize.Offset), log2)
	g.Store32(q.Base+uint64(hw.RxeQueueIndexMask.Offset), slots-1)
	return q
}

// Producer and Consumer are the header's indices.
func (q *Queue) Producer() uint32 { return q.g.Load32(q.Base + uint64(hw.RxeQueueProducer.Offset)) }
func (q *Queue) Consumer() uint32 { return q.g.Load32(q.Base + uint64(hw.RxeQueueConsumer.Offset)) }

// SetProducer stores producer_index as is (hostile tests store anything).
func (q *Queue) SetProducer(v uint32) { q.g.Store32(q.Base+uint64(hw.RxeQueueProducer.Offset), v) }

// SetConsumer stores consumer_index as is.
func (q *Queue) SetConsumer(v uint32) { q.g.Store32(q.Base+uint64(hw.RxeQueueConsumer.Offset), v) }

// Slot returns slot i's bytes.
func (q *Queue) Slot(i uint32) []byte {
	return q.g.Bytes(q.Base+hw.RxeQueueHeaderSize+uint64(i&(q.Slots-1))<<q.Log2, 1<<q.Log2)
}

// ErrFull is a post to a full queue.
var ErrFull = errors.New("rdmatest: queue full")

// Produce fills the next slot with fill and stores producer_index, as
// librxe's post_send and post_recv do.
func (q *Queue) Produce(fill func(slot []byte)) error {
	p, c := q.Producer()&(q.Slots-1), q.Consumer()&(q.Slots-1)
	if (p+1)&(q.Slots-1) == c {
		return ErrFull
	}
	s := q.Slot(p)
	clear(s)
	fill(s)
	q.SetProducer((p + 1) & (q.Slots - 1))
	return nil
}

// Poll takes the next completion, as librxe's poll_cq does.
func (q *Queue) Poll() (rxeq.CQE, bool) {
	p, c := q.Producer()&(q.Slots-1), q.Consumer()&(q.Slots-1)
	if p == c {
		return rxeq.CQE{}, false
	}
	e := rxeq.DecodeCQE(q.Slot(c))
	q.SetConsumer((c + 1) & (q.Slots - 1))
	return e, true
}

// SGE is a scatter/gather element as a WQE carries it.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Send is a send WQE. Length 0 with AutoLength takes the SGEs' sum (or the
// inline data's length); NumSGE -1 takes len(SGL).
type Send struct {
	ID         uint64
	Opcode     uint32
	Flags      uint32
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32 // for atomics too: Encode puts it where their member of the union has it
	// CompareAdd and Swap are an atomic's operands.
	CompareAdd, Swap uint64
	Length           uint32
	AutoLength       bool
	NumSGE           int
	SGL              []SGE
	Inline           []byte
	// UD is a UD QP's destination: its member of the wr.wr union (nil
	// for the other types).
	UD *UDDest
	// InvRKey is LOCAL_INV's and SEND_WITH_INV's wr.ex.invalidate_rkey;
	// Bind is BIND_MW's wr.wr.mw.
	InvRKey uint32
	Bind    *MWBind
	// Reg is a REG_MR entry's struct npfnic_reg_wr (kernel consumers).
	Reg *RegWR
}

// RegWR is a REG_MR entry's registration.
type RegWR struct {
	IOVA, Length uint64
	Key, Access  uint32
	PageShift    uint8
	NPages       uint32
}

// MWBind is a BIND_MW entry's window.
type MWBind struct {
	Addr, Length         uint64
	MRLKey, MWRKey, RKey uint32
	Access               uint32
}

// UDDest is where a UD send entry goes, as librxe copies it from an
// address handle.
type UDDest struct {
	QPN, QKey, AHNum uint32
	AV               hw.RxeAV
}

// Encode writes w into a send queue slot.
func (w Send) Encode(s []byte) {
	hw.RxeSendWRID.Put(s, w.ID)
	hw.RxeSendOpcode.Put(s, w.Opcode)
	hw.RxeSendFlags.Put(s, w.Flags)
	hw.RxeSendImm.Put(s, w.Imm)
	hw.PutRxeSendRemote(s, w.Opcode, w.RemoteAddr, w.RKey, w.CompareAdd, w.Swap)
	if w.UD != nil {
		hw.PutRxeSendUD(s, w.UD.QPN, w.UD.QKey, w.UD.AHNum, w.UD.AV)
	}
	if w.InvRKey != 0 {
		hw.RxeSendInvRKey.Put(s, w.InvRKey)
	}
	if b := w.Bind; b != nil {
		hw.RxeSendMWAddr.Put(s, b.Addr)
		hw.RxeSendMWLength.Put(s, b.Length)
		hw.RxeSendMWMRLKey.Put(s, b.MRLKey)
		hw.RxeSendMWRKey.Put(s, b.MWRKey)
		hw.RxeSendMWNewRKey.Put(s, b.RKey)
		hw.RxeSendMWAccess.Put(s, b.Access)
	}
	if r := w.Reg; r != nil {
		e := s[hw.RxeSendRegOffset:]
		hw.RDMARegWRIOVA.Put(e, r.IOVA)
		hw.RDMARegWRLength.Put(e, r.Length)
		hw.RDMARegWRKey.Put(e, r.Key)
		hw.RDMARegWRAccess.Put(e, r.Access)
		hw.RDMARegWRPageShift.Put(e, r.PageShift)
		hw.RDMARegWRNPages.Put(e, r.NPages)
	}
	n, length := w.NumSGE, w.Length
	if n < 0 {
		n = len(w.SGL)
	}
	if w.AutoLength {
		length = 0
		for _, g := range w.SGL {
			length += g.Length
		}
		if w.Flags&hw.IBVSendInline != 0 || w.Opcode == hw.IBVWRAtomicWrite {
			length = uint32(len(w.Inline))
		}
	}
	hw.RxeSendLength.Put(s, length)
	hw.RxeSendNumSGE.Put(s, uint32(n))
	if w.Flags&hw.IBVSendInline != 0 || w.Opcode == hw.IBVWRAtomicWrite {
		copy(s[hw.RxeSendWQESize:], w.Inline) // an ATOMIC WRITE's dma.atomic_wr too
		return
	}
	putSGL(s[hw.RxeSendWQESize:], w.SGL)
}

func putSGL(b []byte, sgl []SGE) {
	for i, g := range sgl {
		if (i+1)*hw.RxeSGESize > len(b) {
			return
		}
		e := b[i*hw.RxeSGESize:]
		hw.RxeSGEAddr.Put(e, g.Addr)
		hw.RxeSGELength.Put(e, g.Length)
		hw.RxeSGELKey.Put(e, g.LKey)
	}
}

// Recv is a receive WQE (Length 0: the SGEs' sum).
type Recv struct {
	ID     uint64
	Length uint32
	SGL    []SGE
}

// Encode writes r into a receive queue slot.
func (r Recv) Encode(s []byte) {
	hw.RxeRecvWRID.Put(s, r.ID)
	length := r.Length
	if length == 0 {
		for _, g := range r.SGL {
			length += g.Length
		}
	}
	hw.RxeRecvLength.Put(s, length)
	hw.RxeRecvNumSGE.Put(s, uint32(len(r.SGL)))
	putSGL(s[hw.RxeRecvWQESize:], r.SGL)
}

// Buffer is user memory of one process (a PASID): pages of guest RAM
// mapped at VA in the address space.
type Buffer struct {
	g     *atstest.Guest
	VA    uint64
	Len   int
	pages []uint64 // IOVA of each page
}

// MapBuffer allocates n bytes (whole pages, not contiguous in IOVA: each
// page comes from the allocator on its own) and maps them writable at va.
func MapBuffer(g *atstest.Guest, as *atstest.AddressSpace, va uint64, n int) *Buffer {
	b := &Buffer{g: g, VA: va, Len: n}
	for off := 0; off < n; off += 4096 {
		p := g.AllocPage()
		as.Map(va+uint64(off), p, true)
		b.pages = append(b.pages, p)
	}
	return b
}

// Pages returns the IOVA of each page (to fence them, say).
func (b *Buffer) Pages() []uint64 { return b.pages }

// Write copies p to offset off of the buffer (the process's stores).
func (b *Buffer) Write(off int, p []byte) {
	for len(p) > 0 {
		pg, in := off/4096, off%4096
		n := copy(b.g.Bytes(b.pages[pg]+uint64(in), 4096-in), p)
		p, off = p[n:], off+n
	}
}

// Read returns n bytes at offset off.
func (b *Buffer) Read(off, n int) []byte {
	out := make([]byte, 0, n)
	for n > 0 {
		pg, in := off/4096, off%4096
		k := min(n, 4096-in)
		out = append(out, b.g.Bytes(b.pages[pg]+uint64(in), k)...)
		off, n = off+k, n-k
	}
	return out
}

// CreateCQ is the CREATE_CQ command for q.
func CreateCQ(cqn uint32, q *Queue) Cmd {
	c := NewCmd(hw.RDMACmdCreateCQ, cqn)
	hw.RDMACreateCQBuf.Put(c[:], q.Base)
	hw.RDMACreateCQSlots.Put(c[:], q.Slots)
	hw.RDMACreateCQLog2Elem.Put(c[:], q.Log2)
	return c
}

// ResizeCQ is the RESIZE_CQ command moving CQ cqn to q.
func ResizeCQ(cqn uint32, q *Queue) Cmd {
	c := CreateCQ(cqn, q)
	c[hw.RDMACmdOpcode.Offset] = hw.RDMACmdResizeCQ
	return c
}

// QPSpec are CREATE_QP's parameters.
type QPSpec struct {
	PD                     uint32
	SQ, RQ                 *Queue
	SendCQ, RecvCQ         uint32
	MaxSendSGE, MaxRecvSGE uint16
	MaxInline              uint16
	SigAll                 bool
	Flags                  uint8 // NPFNIC_RDMA_CMD_FLAG_UD or _UC: the QP's type
}

// CreateQP is the CREATE_QP command.
func CreateQP(qpn uint32, s QPSpec) Cmd {
	c := NewCmd(hw.RDMACmdCreateQP, qpn)
	c[hw.RDMACmdFlags.Offset] |= s.Flags
	hw.RDMACreateQPPD.Put(c[:], s.PD)
	hw.RDMACreateQPSQBuf.Put(c[:], s.SQ.Base)
	hw.RDMACreateQPSQSlots.Put(c[:], s.SQ.Slots)
	hw.RDMACreateQPSQLog2Elem.Put(c[:], s.SQ.Log2)
	if s.RQ != nil {
		hw.RDMACreateQPRQBuf.Put(c[:], s.RQ.Base)
		hw.RDMACreateQPRQSlots.Put(c[:], s.RQ.Slots)
		hw.RDMACreateQPRQLog2Elem.Put(c[:], s.RQ.Log2)
	}
	hw.RDMACreateQPSendCQ.Put(c[:], s.SendCQ)
	hw.RDMACreateQPRecvCQ.Put(c[:], s.RecvCQ)
	hw.RDMACreateQPMaxSendSGE.Put(c[:], s.MaxSendSGE)
	hw.RDMACreateQPMaxRecvSGE.Put(c[:], s.MaxRecvSGE)
	hw.RDMACreateQPMaxInline.Put(c[:], s.MaxInline)
	if s.SigAll {
		hw.RDMACreateQPSigAll.Put(c[:], 1)
	}
	return c
}

// CreateQPSRQ is CREATE_QP with FLAG_SRQ: the QP's receives come from
// the SRQ srqn (s.RQ and s.MaxRecvSGE are not sent).
func CreateQPSRQ(qpn, srqn uint32, s QPSpec) Cmd {
	c := CreateQP(qpn, s)
	c[hw.RDMACmdFlags.Offset] |= hw.RDMACmdFlagSRQ
	clear(c[hw.RDMACreateQPRQBuf.Offset : hw.RDMACreateQPRQLog2Elem.Offset+4])
	hw.RDMACreateQPMaxRecvSGE.Put(c[:], 0)
	hw.RDMACreateQPSRQN.Put(c[:], srqn)
	return c
}

// CreateSRQ is CREATE_SRQ of an SRQ over q with maxSGE SGEs per entry and
// limit armed.
func CreateSRQ(srqn, pd uint32, q *Queue, maxSGE uint16, limit uint32) Cmd {
	c := NewCmd(hw.RDMACmdCreateSRQ, srqn)
	hw.RDMACreateSRQPD.Put(c[:], pd)
	hw.RDMACreateSRQBuf.Put(c[:], q.Base)
	hw.RDMACreateSRQSlots.Put(c[:], q.Slots)
	hw.RDMACreateSRQLog2Elem.Put(c[:], q.Log2)
	hw.RDMACreateSRQMaxSGE.Put(c[:], maxSGE)
	hw.RDMACreateSRQLimit.Put(c[:], limit)
	return c
}

// ModifySRQ is MODIFY_SRQ arming limit (0 disarms).
func ModifySRQ(srqn, limit uint32) Cmd {
	c := NewCmd(hw.RDMACmdModifySRQ, srqn)
	hw.RDMAModifySRQLimit.Put(c[:], limit)
	return c
}

// Modify are MODIFY_QP's fields.
type Modify struct {
	Mask                                          uint32
	State, PathMTU, Timeout, RetryCnt             uint8
	RNRRetry, MinRNRTimer, MaxRdAtomic, MaxDestRd uint8
	Access, DestQPN, RQPSN, SQPSN                 uint32
	DGID                                          [16]byte
	DMAC                                          [6]byte
	SGIDIndex, HopLimit                           uint8
	QKey                                          uint32 // UD QPs: written over DestQPN
}

// ModifyQP is the MODIFY_QP command.
func ModifyQP(qpn uint32, m Modify) Cmd {
	c := NewCmd(hw.RDMACmdModifyQP, qpn)
	hw.RDMAModifyQPMask.Put(c[:], m.Mask)
	hw.RDMAModifyQPState.Put(c[:], m.State)
	hw.RDMAModifyQPPathMTU.Put(c[:], m.PathMTU)
	hw.RDMAModifyQPTimeout.Put(c[:], m.Timeout)
	hw.RDMAModifyQPRetryCnt.Put(c[:], m.RetryCnt)
	hw.RDMAModifyQPRNRRetry.Put(c[:], m.RNRRetry)
	hw.RDMAModifyQPMinRNRTimer.Put(c[:], m.MinRNRTimer)
	hw.RDMAModifyQPMaxRdAtomic.Put(c[:], m.MaxRdAtomic)
	hw.RDMAModifyQPMaxDestRd.Put(c[:], m.MaxDestRd)
	hw.RDMAModifyQPAccess.Put(c[:], m.Access)
	hw.RDMAModifyQPDestQPN.Put(c[:], m.DestQPN)
	hw.RDMAModifyQPRQPSN.Put(c[:], m.RQPSN)
	hw.RDMAModifyQPSQPSN.Put(c[:], m.SQPSN)
	copy(c[hw.RDMAModifyQPDGID.Offset:], m.DGID[:])
	copy(c[hw.RDMAModifyQPDMAC.Offset:], m.DMAC[:])
	hw.RDMAModifyQPSGIDIndex.Put(c[:], m.SGIDIndex)
	hw.RDMAModifyQPHopLimit.Put(c[:], m.HopLimit)
	if m.QKey != 0 {
		hw.RDMAModifyQPQKey.Put(c[:], m.QKey)
	}
	return c
}

// RegMR is the REG_MR command.
func RegMR(key, pd uint32, va, length uint64, access, pasid uint32) Cmd {
	c := NewCmd(hw.RDMACmdRegMR, key)
	hw.RDMARegMRPD.Put(c[:], pd)
	hw.RDMARegMRVA.Put(c[:], va)
	hw.RDMARegMRLength.Put(c[:], length)
	hw.RDMARegMRAccess.Put(c[:], access)
	hw.RDMARegMRPASID.Put(c[:], pasid)
	return c
}

// AllocMR is the ALLOC_MR command of a fast registration region whose
// first key is key, with a page list of maxPages entries at list.
func AllocMR(key, pd, maxPages uint32, list uint64) Cmd {
	c := NewCmd(hw.RDMACmdAllocMR, key)
	hw.RDMAAllocMRPD.Put(c[:], pd)
	hw.RDMAAllocMRMaxPages.Put(c[:], maxPages)
	hw.RDMAAllocMRPages.Put(c[:], list)
	return c
}

// AllocMW is the ALLOC_MW command of a window of type typ whose first
// R_Key is rkey.
func AllocMW(rkey, pd uint32, typ uint8) Cmd {
	c := NewCmd(hw.RDMACmdAllocMW, rkey)
	hw.RDMAAllocMWPD.Put(c[:], pd)
	hw.RDMAAllocMWType.Put(c[:], typ)
	return c
}

// AddGID is the ADD_GID command.
func AddGID(index uint32, gid [16]byte) Cmd {
	c := NewCmd(hw.RDMACmdAddGID, index)
	copy(c[hw.RDMAAddGIDGID.Offset:], gid[:])
	return c
}

// GIDv4 is the IPv4-mapped GID of ip.
func GIDv4(ip [4]byte) [16]byte {
	var g [16]byte
	g[10], g[11] = 0xff, 0xff
	copy(g[12:], ip[:])
	return g
}
