package rdma

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/ibrc/rxeq"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/internal/fuzzseed"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// FuzzRDMASendPath drives the send path of the engine as user space and
// the driver do: a program of commands (CREATE_QP, MODIFY_QP to every
// state with the mask the transition needs or a fuzzed one, QUERY_QP,
// DESTROY_QP, DEREG_MR, the receive-fault policy), send and receive queue
// entries written into the rxe rings (any opcode, flags, SGL, inline data
// and length), SQ doorbells on QPs in any state, worker passes, the
// frames the engine sent fed back to it (its QPs talk to each other over
// the port's own address: delivered, dropped, duplicated, reordered or
// with a byte forged and the ICRC repaired), and timer events of the
// virtual clock. Memory regions translate through ats in one PASID, with
// pages that fault and a pager that maps some on demand.
//
// What must hold for every input: no panic; every command completes with
// a defined status, and a MODIFY_QP that the IBA table allows with its
// required mask and good attributes succeeds; every CQE names a work
// request posted on its QP, completes it at most once, with a defined
// status, send completions in posting order; the engine sends at most
// sendFuzzMaxQueued frames at a time; memory the device may not write
// (the pages of the read-only and other-PD regions, unregistered pages,
// the PASID table and page tables) is unchanged; and RESET quiesces.
//
// One rig is shared by every input of a fuzz process: guest memory, page
// tables and an ats.Context (which runs a goroutine) cost more to build
// than an input takes to run. Each input starts with RDMA_CTRL.RESET
// (the worker destroys every object and builds a new RC transport), runs
// the virtual clock out (timers of the previous input find their QPs
// gone), unmaps the pages the pager mapped and empties the ATC, and
// rewrites every byte the device may have written (control queues, rings,
// data pages): what an input does depends on the input alone. The
// target drives the worker's passes itself, so nothing of the engine
// runs on another goroutine and a hang is a hang of the input. Go's map
// order makes a worker pass visit QPs in varying order, so a failure that
// depends on it may need a few runs to reproduce. About 1.9-2.4k
// inputs/s on this 2-CPU machine at load 11-15 (some 300 µs an input
// without the fuzzer's instrumentation).
//
// Its seeds are testdata/fuzz/FuzzRDMASendPath/seed-*, written from
// sendFuzzSeeds (TestSendPathSeedFiles).
func FuzzRDMASendPath(f *testing.F) {
	rig := newSendRig(f)
	f.Fuzz(func(t *testing.T, in []byte) { rig.run(t, in) })
}

const (
	sendFuzzRAM       = 2 << 20
	sendFuzzSlots     = 4    // QP slots: QPN sendFuzzQPN0 + slot
	sendFuzzQPN0      = 0x10 // QPNs of the slots
	sendFuzzSQSlots   = 16   // largest send queue
	sendFuzzSQLog2    = 9    // 512-byte send slots: 4 SGEs or 256 inline bytes
	sendFuzzRQSlots   = 16   // receive queue
	sendFuzzRQLog2    = 7    // 128-byte receive slots: 4 SGEs
	sendFuzzCQSlots   = 256  // each of the two CQs
	sendFuzzDataVA    = 0x7e0000000000
	sendFuzzPages     = 16   // data pages at sendFuzzDataVA
	sendFuzzMaxOps    = 256  // operations run per input
	sendFuzzMaxQueued = 8192 // frames the engine may have sent and not seen delivered
	sendFuzzDrain     = 2000 // deliveries, passes and timer events of the final drain
	sendFuzzPASID     = 1
)

// Data pages (of sendFuzzPages at sendFuzzDataVA): the regions' ranges, the
// pages that start unmapped and the pager maps (on demand), the page
// mapped read-only, and the pages no region of the QPs' PD may write.
const (
	sendPagesRW    = 8 // pages 0-7: the read-write region
	sendPageRO     = 7 // mapped read-only in the page table
	sendPagesROMR  = 8 // pages 8-11: a region with remote read only
	sendPagesOther = 12
	sendPagesFree  = 14 // 14-15: no region
)

var sendODPPages = [...]int{5, 6}

// Region keys.
const (
	sendKeyRW    = 0x100
	sendKeyRO    = 0x200
	sendKeyOther = 0x300 // another PD
	sendKeyODP   = 0x400 // the read-write range, registered on demand
	sendPD       = 1
)

var sendKeys = [...]uint32{sendKeyRW, sendKeyRO, sendKeyOther, sendKeyODP, sendKeyRW ^ 0x1000, 0}

// sendRig is the shared world: guest RAM at atstest.DefaultBase with a
// PASID table and one address space, the engine without its worker, and
// the rings of sendFuzzSlots QPs and two CQs.
type sendRig struct {
	g   *atstest.Guest
	x   *ats.Context
	as  *atstest.AddressSpace
	e   *Engine
	clk *clock.Virtual

	ptEnd            uint64 // [g.Base, ptEnd): PASID table and page tables
	status, cmdq, eq uint64
	sq, rq           [sendFuzzSlots]uint64
	cq               [2]uint64
	data             [sendFuzzPages]uint64 // IOVA of each data page
	template         []byte                // what the data pages hold at the start of every input
	ptSnap           []byte
	ringsLo, ringsHi uint64 // the rings' span, zeroed per input
	mac              [6]byte
	ip               [2][4]byte

	// Per input.
	t       *testing.T
	out     [][]byte
	cmdTail uint32
	nextID  uint64
	posted  map[uint64]*sendFuzzWR
	lastID  map[uint32]uint64 // QPN: last send completion's WRID
	cqCons  [2]uint32
	live    [sendFuzzSlots]struct{ sqSlots, prod, rqProd uint32 }
	created map[uint32]bool // QPNs created during the input
	busOff  bool            // bus mastering is off
}

// sendFuzzWR is a work request the input wrote into a ring.
type sendFuzzWR struct {
	qpn  uint32
	recv bool
	done int
}

func newSendRig(t testing.TB) *sendRig {
	r := &sendRig{mac: [6]byte{2, 0, 0, 0, 0, 9}, ip: [2][4]byte{{10, 0, 0, 9}, {10, 0, 0, 10}},
		clk: clock.NewVirtual(time.Unix(1700000000, 0))}
	ram := make([]byte, sendFuzzRAM)
	mem := guestmem.New()
	if err := mem.MapHost(atstest.DefaultBase, ram, guestmem.ProtRead|guestmem.ProtWrite, nil); err != nil {
		t.Fatal(err)
	}
	r.g = &atstest.Guest{Mem: mem, RAM: ram, Base: atstest.DefaultBase}
	pt := r.g.NewPASIDTable(16)
	r.as = r.g.NewAddressSpace()
	pt.Set(sendFuzzPASID, r.as)
	for i := range r.data {
		r.as.EntryAddr(sendFuzzDataVA+uint64(i)*4096, 1) // the tables, before any data page
	}
	r.ptEnd = r.g.Alloc(0, 4096)
	for i := range r.data {
		r.data[i] = r.g.AllocPage()
		if !slices.Contains(sendODPPages[:], i) { // those, the pager maps
			r.as.Map(sendFuzzDataVA+uint64(i)*4096, r.data[i], i != sendPageRO)
		}
	}
	r.ptSnap = bytes.Clone(r.g.Bytes(r.g.Base, int(r.ptEnd-r.g.Base)))
	r.template = make([]byte, sendFuzzPages*4096)
	for i := range r.template {
		r.template[i] = byte(i*7 + i>>8)
	}
	r.status = r.g.Alloc(hw.RDMAStatusSize, hw.RDMAStatusAlign)
	r.cmdq = r.g.Alloc(64*hw.RDMACmdSize, hw.RDMACmdSize)
	r.eq = r.g.Alloc(256*hw.RDMAEventSize, 64)
	r.ringsLo = r.g.Alloc(0, 4096)
	for i := range r.sq {
		r.sq[i] = r.g.Alloc(hw.RxeQueueHeaderSize+sendFuzzSQSlots<<sendFuzzSQLog2, 4096)
		r.rq[i] = r.g.Alloc(hw.RxeQueueHeaderSize+sendFuzzRQSlots<<sendFuzzRQLog2, 4096)
	}
	for i := range r.cq {
		r.cq[i] = r.g.Alloc(hw.RxeQueueHeaderSize+sendFuzzCQSlots*64, 4096)
	}
	r.ringsHi = r.g.Alloc(0, 4096)
	var err error
	if r.x, err = ats.New(ats.Config{Mem: mem}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.x.Close)
	if err := r.x.SetPASIDTable(pt.Base, 16); err != nil {
		t.Fatal(err)
	}
	pager := ibrc.PageRequesterFunc(func(pr ibrc.PageRequest, done func(bool)) {
		r.clk.AfterFunc(10*time.Microsecond, func() {
			pg := int((pr.VA - sendFuzzDataVA) >> 12)
			if pr.VA < sendFuzzDataVA || pg >= sendFuzzPages || !slices.Contains(sendODPPages[:], pg) {
				done(false)
				return
			}
			r.as.Map(sendFuzzDataVA+uint64(pg)*4096, r.data[pg], true)
			done(true)
		})
	})
	r.e, err = newEngine(Config{Mem: mem, Xlat: r.x, MAC: r.mac, Clock: r.clk, Pager: pager,
		Port: sendPortFunc(func(f []byte) error { r.out = append(r.out, f); return nil })})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sendPortFunc adapts a function to port.Sender.
type sendPortFunc func([]byte) error

func (f sendPortFunc) Send(b []byte) error { return f(b) }

// reset returns the rig to the state every input starts from.
func (r *sendRig) reset() {
	e := r.e
	hw.Offsets(e).RegWrite(hw.RegRDMACtrl, hw.RDMACtrlReset)
	e.w.service()
	for i := 0; i < 10000 && r.clk.Step(); i++ {
	}
	for _, pg := range sendODPPages {
		r.as.Unmap(sendFuzzDataVA + uint64(pg)*4096)
	}
	r.x.Flush()
	clear(r.g.Bytes(r.status, int(r.ringsHi-r.status)))
	for i, p := range r.data {
		copy(r.g.Bytes(p, 4096), r.template[i*4096:])
	}
	r.out, r.cmdTail, r.nextID, r.cqCons = nil, 0, 1, [2]uint32{}
	r.posted = make(map[uint64]*sendFuzzWR)
	r.lastID = make(map[uint32]uint64)
	r.created = make(map[uint32]bool)
	r.live = [sendFuzzSlots]struct{ sqSlots, prod, rqProd uint32 }{}
	r.busOff = false
	e.SetBusMaster(true)
	w := func(off, v uint32) { hw.Offsets(e).RegWrite(off, v) }
	w(hw.RegRDMAStatusLo, uint32(r.status))
	w(hw.RegRDMAStatusHi, uint32(r.status>>32))
	w(hw.RegCmdqBaseLo, uint32(r.cmdq))
	w(hw.RegCmdqBaseHi, uint32(r.cmdq>>32))
	w(hw.RegCmdqSize, 64)
	w(hw.RegEQBaseLo, uint32(r.eq))
	w(hw.RegEQBaseHi, uint32(r.eq>>32))
	w(hw.RegEQSize, 256)
	w(hw.RegRDMARecvFault, 0)
	w(hw.RegRDMACtrl, hw.RDMACtrlEnable)
	for i, c := range r.cq {
		r.initRing(c, sendFuzzCQSlots, 6)
		r.mustCmd(rdmatest.CreateCQ(uint32(i), &rdmatest.Queue{Base: c, Slots: sendFuzzCQSlots, Log2: 6}))
	}
	r.mustCmd(rdmatest.AddGID(0, rdmatest.GIDv4(r.ip[0])))
	r.mustCmd(rdmatest.AddGID(1, rdmatest.GIDv4(r.ip[1])))
	va := uint64(sendFuzzDataVA)
	acc := uint32(hw.RDMAAccessLocalWrite | hw.RDMAAccessRemoteWrite | hw.RDMAAccessRemoteRead)
	r.mustCmd(rdmatest.RegMR(sendKeyRW, sendPD, va, sendPagesRW*4096, acc, sendFuzzPASID))
	r.mustCmd(rdmatest.RegMR(sendKeyRO, sendPD, va+sendPagesROMR*4096, 4*4096, hw.RDMAAccessRemoteRead, sendFuzzPASID))
	r.mustCmd(rdmatest.RegMR(sendKeyOther, sendPD+1, va+sendPagesOther*4096, 2*4096, acc, sendFuzzPASID))
	r.mustCmd(rdmatest.RegMR(sendKeyODP, sendPD, va, sendPagesRW*4096, acc|hw.RDMAAccessOnDemand, sendFuzzPASID))
}

// initRing writes an rxe queue's header as the kernel does for a new
// queue (the rest of the buffer is zero).
func (r *sendRig) initRing(base uint64, slots, log2 uint32) {
	clear(r.g.Bytes(base, hw.RxeQueueHeaderSize+int(slots)<<log2))
	r.g.Store32(base+uint64(hw.RxeQueueLog2ElemSize.Offset), log2)
	r.g.Store32(base+uint64(hw.RxeQueueIndexMask.Offset), slots-1)
}

// cmd posts one command, runs a worker pass and returns its status. With
// bus mastering off the device runs no command, and the driver waits: the
// command is not posted (RDMACmdPending).
func (r *sendRig) cmd(c rdmatest.Cmd) uint32 {
	if r.busOff {
		return hw.RDMACmdPending
	}
	hw.RDMACmdStatus.Put(c[:], hw.RDMACmdPending)
	addr := r.cmdq + uint64(r.cmdTail%64)*hw.RDMACmdSize
	copy(r.g.Bytes(addr, hw.RDMACmdSize), c[:])
	r.cmdTail++
	hw.Offsets(r.e).RegWrite(hw.RegCmdqTail, r.cmdTail)
	r.e.w.service()
	st := hw.RDMACmdStatus.Get(r.g.Bytes(addr, hw.RDMACmdSize))
	if st > hw.RDMACmdErrResource {
		r.t.Fatalf("command %d on %d: status %#x", c[0], hw.RDMACmdHandle.Get(c[:]), st)
	}
	return st
}

func (r *sendRig) mustCmd(c rdmatest.Cmd) {
	if st := r.cmd(c); st != hw.RDMACmdOK {
		r.t.Fatalf("command %d on %d: status %d", c[0], hw.RDMACmdHandle.Get(c[:]), st)
	}
}

// Operations of a program: an opcode byte (modulo sendOpCount) and its
// arguments (zeros past the end).
const (
	sendOpCreate    = iota // slot flags sges inline
	sendOpModify           // slot state variant x:u32
	sendOpDestroy          // slot
	sendOpPost             // slot opcode flags len nsge raddr:u16 rkey [SGE: addr:u16 len:u16 key]... [inline: n]
	sendOpDoorbell         // slot
	sendOpRecv             // slot len nsge [SGE]...
	sendOpService          //
	sendOpDeliver          // mode k x
	sendOpClock            // n
	sendOpDereg            // which
	sendOpRecvFault        // v
	sendOpQuery            // slot
	sendOpBusMaster        // on
	sendOpCount
)

// sendProg reads a program.
type sendProg struct {
	b []byte
	i int
}

func (p *sendProg) more() bool { return p.i < len(p.b) }

func (p *sendProg) u8() uint8 {
	p.i++
	if p.i > len(p.b) {
		return 0
	}
	return p.b[p.i-1]
}

func (p *sendProg) u16() uint16 { return uint16(p.u8()) | uint16(p.u8())<<8 }

func (r *sendRig) run(t *testing.T, in []byte) {
	r.t = t
	r.reset()
	p := &sendProg{b: in}
	for ops := 0; p.more() && ops < sendFuzzMaxOps; ops++ {
		r.op(p)
		r.check()
	}
	// Deliver what is queued and run the timers, bounded: QPs with
	// infinite RNR retries may go on for ever, which is theirs to do.
	for i := 0; i < sendFuzzDrain; i++ {
		switch {
		case len(r.out) > 0:
			r.deliver(r.out[0])
			r.out = r.out[1:]
		case !r.clk.Step():
			i = sendFuzzDrain
		}
		r.e.w.service()
		r.check()
	}
	hw.Offsets(r.e).RegWrite(hw.RegRDMACtrl, hw.RDMACtrlReset)
	r.e.w.service()
	if r.e.Busy() {
		t.Fatal("busy after RESET with no DMA in flight")
	}
	r.checkMemory()
}

func qpnOf(slot uint8) uint32 { return sendFuzzQPN0 + uint32(slot%sendFuzzSlots) }

func (r *sendRig) op(p *sendProg) {
	switch p.u8() % sendOpCount {
	case sendOpCreate:
		r.create(p.u8(), p.u8(), p.u8(), p.u8())
	case sendOpModify:
		r.modify(p)
	case sendOpDestroy:
		r.cmd(rdmatest.NewCmd(hw.RDMACmdDestroyQP, qpnOf(p.u8())))
	case sendOpPost:
		r.post(p)
	case sendOpDoorbell:
		hw.Offsets(r.e).RegWrite(hw.RegSQDoorbell, qpnOf(p.u8()))
	case sendOpRecv:
		r.recv(p)
	case sendOpService:
		r.e.w.service()
	case sendOpDeliver:
		mode, k, x := p.u8(), int(p.u8()), p.u8()
		if len(r.out) == 0 {
			return
		}
		k %= len(r.out)
		f := r.out[k]
		switch mode % 4 {
		case 0: // deliver (k > 0: out of order)
			r.out = append(r.out[:k], r.out[k+1:]...)
		case 1: // drop
			r.out = append(r.out[:k], r.out[k+1:]...)
			return
		case 2: // duplicate
			f = bytes.Clone(f)
		case 3: // forge a transport byte, ICRC repaired
			r.out = append(r.out[:k], r.out[k+1:]...)
			f = bytes.Clone(f)
			if at := 42 + int(mode>>2)%max(1, len(f)-46); at < len(f)-4 {
				f[at] ^= x | 1
				_ = rocev2.FixICRC(f)
			}
		}
		r.deliver(f)
	case sendOpClock:
		for range int(p.u8()%16) + 1 {
			if !r.clk.Step() {
				break
			}
		}
		r.e.w.service()
	case sendOpDereg:
		r.cmd(rdmatest.NewCmd(hw.RDMACmdDeregMR, sendKeys[int(p.u8())%len(sendKeys)]))
	case sendOpRecvFault:
		hw.Offsets(r.e).RegWrite(hw.RegRDMARecvFault, uint32(p.u8()))
	case sendOpQuery:
		r.cmd(rdmatest.NewCmd(hw.RDMACmdQueryQP, qpnOf(p.u8())))
	case sendOpBusMaster:
		r.busOff = p.u8()&1 != 0
		r.e.SetBusMaster(!r.busOff)
		r.e.w.service()
	}
}

// deliver hands a frame to the engine as the port's Mux does.
func (r *sendRig) deliver(f []byte) {
	if r.e.Claim(f) {
		r.e.Receive(f)
	}
}

// create is CREATE_QP on a slot's rings, fresh (zeroed) as the kernel
// allocates them.
func (r *sendRig) create(slot, flags, sges, inline uint8) {
	slot %= sendFuzzSlots
	qpn := qpnOf(slot)
	sqSlots := uint32(2) << (flags & 3) // 2..16
	sq := &rdmatest.Queue{Base: r.sq[slot], Slots: sqSlots, Log2: sendFuzzSQLog2}
	rq := &rdmatest.Queue{Base: r.rq[slot], Slots: sendFuzzRQSlots, Log2: sendFuzzRQLog2}
	spec := rdmatest.QPSpec{PD: sendPD, SQ: sq, RQ: rq, SendCQ: uint32(flags >> 2 & 1), RecvCQ: uint32(flags >> 3 & 1),
		MaxSendSGE: uint16(1 + sges%4), MaxRecvSGE: uint16(1 + sges>>2%4), MaxInline: uint16(inline), SigAll: flags&0x10 != 0}
	if flags&0x20 != 0 {
		spec.PD = sendPD + 1 // the other region's PD
	}
	live := r.e.w.qps[qpn] != nil
	if !live {
		r.initRing(sq.Base, sqSlots, sendFuzzSQLog2)
		r.initRing(rq.Base, sendFuzzRQSlots, sendFuzzRQLog2)
	}
	if r.cmd(rdmatest.CreateQP(qpn, spec)) == hw.RDMACmdOK {
		r.created[qpn] = true
		r.live[slot].sqSlots, r.live[slot].prod, r.live[slot].rqProd = sqSlots, 0, 0
	}
}

// transitions's required masks, as MODIFY_QP takes them (RESET to INIT:
// the device adds the P_Key).
func requiredMask(cur, next ibrc.QPState) (req uint32, ok bool) {
	const st = hw.RDMAQPAttrState
	switch {
	case next == ibrc.StateReset || next == ibrc.StateErr:
		return st, true
	case cur == ibrc.StateReset && next == ibrc.StateInit:
		return st | hw.RDMAQPAttrAccessFlags, true
	case cur == ibrc.StateInit && next == ibrc.StateRTR:
		return st | hw.RDMAQPAttrAV | hw.RDMAQPAttrPathMTU | hw.RDMAQPAttrDestQPN | hw.RDMAQPAttrRQPSN |
			hw.RDMAQPAttrMaxDestRdAtomic | hw.RDMAQPAttrMinRNRTimer, true
	case cur == ibrc.StateRTR && next == ibrc.StateRTS:
		return st | hw.RDMAQPAttrSQPSN | hw.RDMAQPAttrTimeout | hw.RDMAQPAttrRetryCnt | hw.RDMAQPAttrRNRRetry |
			hw.RDMAQPAttrMaxQPRdAtomic, true
	case cur == ibrc.StateInit && next == ibrc.StateInit, cur == ibrc.StateRTS && next == ibrc.StateRTS,
		cur == ibrc.StateRTS && next == ibrc.StateSQD, cur == ibrc.StateSQD && next == ibrc.StateRTS,
		cur == ibrc.StateSQD && next == ibrc.StateSQD, cur == ibrc.StateSQE && next == ibrc.StateRTS:
		return st, true
	}
	return st, false
}

var sendPSNs = [...]uint32{0, 1, 100, 0xfffff0, 0xffffff, 0x800000}

// modify is MODIFY_QP of a slot's QP to a state: with the mask the
// transition needs and good attributes (which must succeed when the IBA
// table allows the transition), or fuzzed.
func (r *sendRig) modify(p *sendProg) {
	slot, state, variant := p.u8(), p.u8()%8, p.u8()
	x := uint32(p.u16()) | uint32(p.u16())<<16
	qpn := qpnOf(slot)
	q := r.e.w.qps[qpn]
	cur := ibrc.StateReset
	if q != nil {
		cur = q.rc.Query().State
	}
	next := ibrc.QPState(state)
	mask, allowed := requiredMask(cur, next)
	m := rdmatest.Modify{Mask: mask, State: state,
		PathMTU: 1 + variant%5, Timeout: 1 + uint8(x)%5, RetryCnt: uint8(x>>3) & 7, RNRRetry: uint8(x>>6) & 7,
		MinRNRTimer: uint8(x>>9) % 4, MaxRdAtomic: uint8(x>>11) % 17, MaxDestRd: uint8(x>>16) % 17,
		Access:  hw.RDMAAccessRemoteWrite | hw.RDMAAccessRemoteRead,
		DestQPN: qpnOf(uint8(x >> 21)), RQPSN: sendPSNs[int(x>>23)%len(sendPSNs)], SQPSN: sendPSNs[int(x>>26)%len(sendPSNs)],
		DGID: rdmatest.GIDv4(r.ip[x>>29&1]), DMAC: r.mac, SGIDIndex: uint8(x>>30) & 1}
	good := variant&0x80 == 0
	if !good {
		// Fuzzed: any mask bits, MTU, SGID index and access bits.
		m.Mask ^= x & 0x3fbfff
		m.PathMTU, m.SGIDIndex, m.Access = variant%8, uint8(x>>13)%18, x>>8&0x4f
	}
	st := r.cmd(rdmatest.ModifyQP(qpn, m))
	if good && allowed && q != nil && !r.busOff && st != hw.RDMACmdOK {
		r.t.Fatalf("MODIFY_QP %#x %v->%v with mask %#x: status %d", qpn, cur, next, m.Mask, st)
	}
}

// sendLen is a length class: 16-byte steps, the largest messages, and
// one past them.
func sendLen(b uint8) uint32 {
	switch b {
	case 255:
		return ibrc.MaxMsgSize
	case 254:
		return ibrc.MaxMsgSize + 1
	}
	return uint32(b) * 16
}

// sge reads an SGE over the data pages (and a little around them).
func sge(p *sendProg) rdmatest.SGE {
	addr, l, key := p.u16(), p.u16(), p.u8()
	g := rdmatest.SGE{Addr: sendFuzzDataVA - 0x100 + uint64(addr)%(sendFuzzPages*4096+0x200), Length: uint32(l) % 0x2000,
		LKey: sendKeys[int(key)%len(sendKeys)]}
	if key&0x80 != 0 {
		g.Length = 1 << 29
	}
	return g
}

// post writes a send queue entry into a slot's ring as librxe does.
func (r *sendRig) post(p *sendProg) {
	slot := p.u8() % sendFuzzSlots
	op, flags, lenb, nsge := p.u8(), p.u8(), p.u8(), p.u8()
	raddr, rkey := p.u16(), p.u8()
	w := rdmatest.Send{ID: r.nextID, Opcode: uint32(op % 12), Flags: uint32(flags), Imm: uint32(raddr) * 0x10001,
		RemoteAddr: sendFuzzDataVA - 0x100 + uint64(raddr)%(sendFuzzPages*4096+0x200), RKey: sendKeys[int(rkey)%len(sendKeys)],
		Length: sendLen(lenb), AutoLength: lenb == 0, NumSGE: int(nsge % 6)}
	if op >= 0xf0 {
		w.Opcode = uint32(op) << 20 // undefined
	}
	if nsge >= 0xf0 {
		w.NumSGE = int(nsge) << 8
	}
	if flags&hw.IBVSendInline != 0 {
		w.Inline = r.template[:int(p.u8())+int(lenb&1)*0x100]
	} else {
		for range min(w.NumSGE, 4) {
			w.SGL = append(w.SGL, sge(p))
		}
	}
	l := &r.live[slot]
	if l.sqSlots == 0 {
		return // no queue of this slot was created
	}
	base := r.sq[slot]
	cons := r.g.Load32(base+uint64(hw.RxeQueueConsumer.Offset)) & (l.sqSlots - 1)
	if (l.prod+1)&(l.sqSlots-1) == cons {
		return // full
	}
	s := r.g.Bytes(base+hw.RxeQueueHeaderSize+uint64(l.prod)<<sendFuzzSQLog2, 1<<sendFuzzSQLog2)
	clear(s)
	w.Encode(s)
	l.prod = (l.prod + 1) & (l.sqSlots - 1)
	r.g.Store32(base+uint64(hw.RxeQueueProducer.Offset), l.prod)
	r.posted[w.ID] = &sendFuzzWR{qpn: qpnOf(slot)}
	r.nextID++
}

// recv writes a receive queue entry into a slot's ring.
func (r *sendRig) recv(p *sendProg) {
	slot := p.u8() % sendFuzzSlots
	lenb, nsge := p.u8(), p.u8()
	v := rdmatest.Recv{ID: r.nextID, Length: sendLen(lenb)}
	for range min(int(nsge%6), 4) {
		v.SGL = append(v.SGL, sge(p))
	}
	l := &r.live[slot]
	if l.sqSlots == 0 {
		return
	}
	base := r.rq[slot]
	cons := r.g.Load32(base+uint64(hw.RxeQueueConsumer.Offset)) & (sendFuzzRQSlots - 1)
	if (l.rqProd+1)&(sendFuzzRQSlots-1) == cons {
		return
	}
	s := r.g.Bytes(base+hw.RxeQueueHeaderSize+uint64(l.rqProd)<<sendFuzzRQLog2, 1<<sendFuzzRQLog2)
	clear(s)
	v.Encode(s)
	if nsge%6 == 5 {
		hw.RxeRecvNumSGE.Put(s, uint32(nsge)) // more than the slot holds
	}
	l.rqProd = (l.rqProd + 1) & (sendFuzzRQSlots - 1)
	r.g.Store32(base+uint64(hw.RxeQueueProducer.Offset), l.rqProd)
	r.posted[v.ID] = &sendFuzzWR{qpn: qpnOf(slot), recv: true}
	r.nextID++
}

// check consumes the CQs' completions as librxe polls them and checks
// them, and bounds the frames in flight.
func (r *sendRig) check() {
	t := r.t
	if len(r.out) > sendFuzzMaxQueued {
		t.Fatalf("%d frames sent and not delivered", len(r.out))
	}
	for i, base := range r.cq {
		for {
			prod := r.g.Load32(base+uint64(hw.RxeQueueProducer.Offset)) & (sendFuzzCQSlots - 1)
			if prod == r.cqCons[i] {
				break
			}
			c := rxeq.DecodeCQE(r.g.Bytes(base+hw.RxeQueueHeaderSize+uint64(r.cqCons[i])*64, 64))
			r.cqCons[i] = (r.cqCons[i] + 1) & (sendFuzzCQSlots - 1)
			r.g.Store32(base+uint64(hw.RxeQueueConsumer.Offset), r.cqCons[i])
			w := r.posted[c.WRID]
			recv := c.Opcode&ibrc.WCRecv != 0
			switch {
			case !c.Status.Defined():
				t.Fatalf("CQ %d: completion %+v with an undefined status", i, c)
			case !r.created[c.QPNum]:
				t.Fatalf("CQ %d: completion %+v on a QP never created", i, c)
			case w == nil:
				t.Fatalf("CQ %d: completion %+v of a work request never posted", i, c)
			case w.qpn != c.QPNum || w.recv != recv:
				t.Fatalf("CQ %d: completion %+v of a work request posted on QP %#x (receive %v)", i, c, w.qpn, w.recv)
			case w.done > 0:
				t.Fatalf("CQ %d: work request %#x completed again: %+v", i, c.WRID, c)
			case !recv && c.WRID <= r.lastID[c.QPNum]:
				t.Fatalf("CQ %d: send %#x completed after %#x on QP %#x, posted later", i, c.WRID, r.lastID[c.QPNum], c.QPNum)
			}
			w.done++
			if !recv {
				r.lastID[c.QPNum] = c.WRID
			}
		}
	}
}

// checkMemory: what no region of the QPs' PD may write, and what the
// device never writes, is as it was.
func (r *sendRig) checkMemory() {
	for pg := sendPagesROMR; pg < sendFuzzPages; pg++ {
		if pg == sendPagesOther || pg == sendPagesOther+1 {
			continue // in another PD: QPs of that PD may write it
		}
		if got := r.g.Bytes(r.data[pg], 4096); !bytes.Equal(got, r.template[pg*4096:(pg+1)*4096]) {
			r.t.Fatalf("data page %d (no write access) was written", pg)
		}
	}
	if got := r.g.Bytes(r.data[sendPageRO], 4096); !bytes.Equal(got, r.template[sendPageRO*4096:(sendPageRO+1)*4096]) {
		r.t.Fatalf("data page %d (mapped read-only) was written", sendPageRO)
	}
	for _, pg := range sendODPPages {
		r.as.Unmap(sendFuzzDataVA + uint64(pg)*4096)
	}
	if got := r.g.Bytes(r.g.Base, len(r.ptSnap)); !bytes.Equal(got, r.ptSnap) {
		r.t.Fatal("the PASID table or page tables changed")
	}
}

// TestSendPathSeedFiles: the seed files are sendFuzzSeeds's programs
// (NPFNIC_WRITE_SEEDS=1 writes them).
func TestSendPathSeedFiles(t *testing.T) {
	if err := fuzzseed.Check("testdata/fuzz/FuzzRDMASendPath", sendFuzzSeeds()); err != nil {
		t.Fatal(err)
	}
}

// sendFuzzSeeds are programs that reach the send path in every state, by
// seed file name.
func sendFuzzSeeds() map[string][]byte {
	create := func(slot, flags byte) []byte { return []byte{sendOpCreate, slot, flags, 0x0f, 64} }
	// modify to state with good attributes; x names the peer slot in
	// bits 21-22 and PSNs, GIDs and timers elsewhere.
	modify := func(slot, state, peer byte) []byte {
		x := uint32(peer)<<21 | 7<<3 | 6<<6 | 4<<11 // retry 7, RNR retry 6, 4 READs
		return []byte{sendOpModify, slot, state, 2, byte(x), byte(x >> 8), byte(x >> 16), byte(x >> 24)}
	}
	post := func(slot, op, flags, lenb, nsge byte, sgl ...byte) []byte {
		return append([]byte{sendOpPost, slot, op, flags, lenb, nsge, 0x00, 0x10, 0}, sgl...)
	}
	sgeRW := []byte{0x00, 0x01, 0x00, 0x02, 0} // 512 bytes at page 0 + 256, rw key
	bell := func(slot byte) []byte { return []byte{sendOpDoorbell, slot} }
	recv := func(slot byte) []byte { return []byte{sendOpRecv, slot, 0, 1, 0x00, 0x30, 0x00, 0x10, 0} }
	svc := []byte{sendOpService}
	deliver := bytes.Repeat([]byte{sendOpDeliver, 0, 0, 0, sendOpService}, 24)
	clk := []byte{sendOpClock, 15}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	sig := byte(hw.IBVSendSignaled)
	sends := func(slot byte) []byte {
		return cat(post(slot, hw.IBVWRSend, sig, 0, 1, sgeRW...), post(slot, hw.IBVWRRDMAWrite, sig, 0, 1, sgeRW...),
			post(slot, hw.IBVWRRDMARead, sig, 0, 1, sgeRW...), post(slot, hw.IBVWRSendWithImm, sig|hw.IBVSendInline, 3, 0, 40),
			bell(slot), svc)
	}
	up := cat(create(0, 0x03), create(1, 0x03), recv(0), recv(0), recv(1), recv(1),
		modify(0, hw.RDMAQPInit, 1), modify(1, hw.RDMAQPInit, 0), modify(0, hw.RDMAQPRTR, 1), modify(1, hw.RDMAQPRTR, 0),
		modify(0, hw.RDMAQPRTS, 1), modify(1, hw.RDMAQPRTS, 0))
	return map[string][]byte{
		// Connected loopback pair, traffic both ways.
		"seed-loopback-traffic": cat(up, sends(0), sends(1), deliver, clk, deliver),
		// Sends on a QP moved RESET->ERR and INIT->ERR: no path MTU.
		"seed-send-on-err-qp-without-path": cat(create(2, 0x03), modify(2, hw.RDMAQPErr, 2), sends(2), create(3, 0x03),
			modify(3, hw.RDMAQPInit, 3), modify(3, hw.RDMAQPErr, 3), sends(3)),
		// Entries posted and rung in RESET, INIT, RTR, then RTS.
		"seed-doorbells-before-rts": cat(create(0, 0x03), create(1, 0x03), sends(0), modify(0, hw.RDMAQPInit, 1), sends(0),
			modify(1, hw.RDMAQPInit, 0), modify(0, hw.RDMAQPRTR, 1), sends(0), modify(1, hw.RDMAQPRTR, 0),
			modify(1, hw.RDMAQPRTS, 0), recv(1), modify(0, hw.RDMAQPRTS, 1), deliver, clk, deliver),
		// RTS->SQD with work in flight, SQD->SQD, SQD->RTS, SQE, then
		// RESET and ERR with entries outstanding.
		"seed-sqd-sqe-reset-err": cat(up, sends(0), modify(0, hw.RDMAQPSQD, 1), sends(0), deliver, modify(0, hw.RDMAQPSQD, 1),
			modify(0, hw.RDMAQPSQE, 1), modify(0, hw.RDMAQPRTS, 1), sends(0), modify(1, hw.RDMAQPReset, 0),
			sends(0), modify(0, hw.RDMAQPErr, 1), sends(0), deliver, clk),
		// A huge READ: 2^31 bytes over four SGEs of 2^29.
		"seed-huge-read": cat(up, post(0, hw.IBVWRRDMARead, sig, 255, 4, 0, 0, 0, 0, 0x84, 0, 0, 0, 0, 0x84, 0, 0, 0, 0, 0x84, 0, 0, 0, 0, 0x84),
			bell(0), deliver, clk, deliver),
		// Traffic, then the regions deregistered and the QPs destroyed
		// with frames still to deliver.
		"seed-dereg-destroy-in-flight": cat(up, sends(0), sends(1), []byte{sendOpDeliver, 0, 0, 0, sendOpDereg, 0, sendOpDereg, 1, sendOpDestroy, 1},
			deliver, clk, []byte{sendOpDestroy, 0}, deliver),
	}
}
