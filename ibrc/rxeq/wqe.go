package rxeq

import (
	"fmt"
	"math"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// Malformed is what is wrong with a work queue entry. Each kind completes
// the entry with one IBV_WC status (Status).
type Malformed uint8

// Kinds of malformed entries.
const (
	// BadOpcode: wr.opcode is not one the device implements (TSO, FLUSH,
	// values not defined), or one the QP's type does not take.
	BadOpcode Malformed = iota + 1
	// TooManySGEs: dma.num_sge exceeds the QP's SGE limit.
	TooManySGEs
	// InlineRead: IBV_SEND_INLINE on an RDMA READ, whose data has nowhere
	// to go.
	InlineRead
	// InlineTooLong: inline data longer than the QP's inline limit.
	InlineTooLong
	// TooLong: dma.length exceeds ibrc.MaxMsgSize (2^31 bytes).
	TooLong
	// SGLShort: the SGEs hold fewer than dma.length bytes.
	SGLShort
	// SGEWraps: an SGE's used range passes the end of the address space,
	// so it lies in no memory region.
	SGEWraps
	// AtomicLength: an atomic whose SGL is not the 8 bytes its original
	// value is returned into, or that is inline; an ATOMIC WRITE whose
	// dma.length is not 8.
	AtomicLength
	// BadAddress: a UD entry whose address vector the device cannot send
	// to: an address handle number (npfnic numbers none), a network type
	// other than IPv4, a destination GID that is not IPv4-mapped, or a
	// source GID index naming no GID of the port.
	BadAddress
)

var malformedText = [...]string{
	BadOpcode:     "opcode not implemented",
	TooManySGEs:   "more SGEs than the QP takes",
	InlineRead:    "inline RDMA READ",
	InlineTooLong: "inline data over the QP's limit",
	TooLong:       "message longer than 2^31 bytes",
	SGLShort:      "SGEs shorter than the message",
	SGEWraps:      "SGE wraps the address space",
	AtomicLength:  "atomic not returning into 8 bytes",
	BadAddress:    "UD address vector the port cannot send to",
}

func (m Malformed) Error() string {
	if int(m) < len(malformedText) && malformedText[m] != "" {
		return "rxeq: " + malformedText[m]
	}
	return fmt.Sprintf("rxeq: Malformed(%d)", m)
}

// Status is the IBV_WC status of an entry malformed so.
func (m Malformed) Status() ibrc.WCStatus {
	switch m {
	case InlineTooLong, TooLong, SGLShort, AtomicLength:
		return ibrc.WCLocLenErr
	case SGEWraps:
		return ibrc.WCLocProtErr
	}
	return ibrc.WCLocQPOpErr
}

// WQEError is a malformed entry. The slot was fetched and is outstanding
// like any other. Completions are in order, so the device fetches nothing
// past it, completes it with WC (its wr_id and Status) once every entry
// before it has completed, retires it, and moves the QP to the error state
// (which flushes the rest).
type WQEError struct {
	Slot   uint32
	WRID   uint64
	Recv   bool   // a receive queue entry
	Opcode uint32 // send queue: wr.opcode as found (IBV_WR_*)
	Kind   Malformed
}

func (e *WQEError) Error() string {
	q := "send"
	if e.Recv {
		q = "receive"
	}
	return fmt.Sprintf("%v (%s queue slot %d, wr_id %#x, opcode %d)", e.Kind, q, e.Slot, e.WRID, e.Opcode)
}

// Unwrap returns the Malformed kind, for errors.Is.
func (e *WQEError) Unwrap() error { return e.Kind }

// Status is the completion status of the entry.
func (e *WQEError) Status() ibrc.WCStatus { return e.Kind.Status() }

// WC is the completion the entry gets on the QP numbered qpn.
func (e *WQEError) WC(qpn uint32) ibrc.WC {
	wc := ibrc.WC{WRID: e.WRID, Status: e.Status(), QPN: qpn, Opcode: ibrc.WCRecv}
	if !e.Recv {
		wc.Opcode = ibrc.WCSend
		switch e.Opcode {
		case hw.IBVWRRDMAWrite, hw.IBVWRRDMAWriteWithImm:
			wc.Opcode = ibrc.WCRDMAWrite
		case hw.IBVWRRDMARead:
			wc.Opcode = ibrc.WCRDMARead
		case hw.IBVWRAtomicCmpAndSwp:
			wc.Opcode = ibrc.WCCompSwap
		case hw.IBVWRAtomicFetchAdd:
			wc.Opcode = ibrc.WCFetchAdd
		case hw.IBVWRAtomicWrite:
			wc.Opcode = ibrc.WCAtomicWrite
		case hw.IBVWRBindMW:
			wc.Opcode = ibrc.WCBindMW
		case hw.IBVWRLocalInv:
			wc.Opcode = ibrc.WCLocalInv
		case hw.IBWRRegMR:
			wc.Opcode = ibrc.WCRegMR
		}
	}
	return wc
}

// SendLimits are what the driver registered for a send queue, as
// ibv_create_qp's caps reported them: the entry's SGEs and inline bytes;
// and whether the QP is UD, whose entries carry their destination.
type SendLimits struct {
	MaxSGE    int
	MaxInline int
	UD        bool
}

// sendNeed is the prefix of a send slot the device reads: the fixed part
// and the longer of the SGE array and the inline data.
func (l SendLimits) sendNeed() (int, error) {
	if l.MaxSGE < 0 || l.MaxInline < 0 || l.MaxSGE > maxElem/hw.RxeSGESize || l.MaxInline > maxElem {
		return 0, fmt.Errorf("%w: %d SGEs, %d inline bytes", ErrConfig, l.MaxSGE, l.MaxInline)
	}
	return hw.RxeSendWQESize + max(l.MaxSGE*hw.RxeSGESize, l.MaxInline), nil
}

// SendWQE is a send queue entry that became a work request. WR.SGL and
// WR.Inline are the queue's buffers, valid until its next Fetch
// (ibrc.QP.PostSend copies them).
type SendWQE struct {
	Slot uint32
	WR   ibrc.SendWR
	// SGIDIndex is a UD entry's source GID: the caller, which has the
	// port's GID table, sets WR.UD.AV.SrcIP from it.
	SGIDIndex uint8
}

// SQ is the device's end of an rxe send queue: it fetches entries in order
// and retires them, in order, when they complete.
type SQ struct {
	consumer
	lim SendLimits
	sgl []ibrc.SGE
}

// NewSQ registers a send queue. It touches no memory.
func NewSQ(mem Memory, g Geometry, lim SendLimits) (*SQ, error) {
	need, err := lim.sendNeed()
	if err != nil {
		return nil, err
	}
	c, err := newConsumer(mem, g, need)
	if err != nil {
		return nil, err
	}
	return &SQ{consumer: c, lim: lim, sgl: make([]ibrc.SGE, 0, lim.MaxSGE)}, nil
}

// Fetch reads the next posted entry. ok is false when none is posted. With
// ok and a *WQEError the slot was consumed but is malformed: complete it
// with the error's WC. A *RingError means the queue could not be read; the
// fetch index did not move.
func (q *SQ) Fetch() (w SendWQE, ok bool, err error) {
	slot, ok, err := q.next()
	if !ok || err != nil {
		return SendWQE{}, false, err
	}
	wr, m := parseSend(q.elem, q.lim, q.sgl[:0])
	w = SendWQE{Slot: slot, WR: wr, SGIDIndex: hw.RxeSendUDSGIDIndex.Get(q.elem)}
	if m != 0 {
		return w, true, &WQEError{Slot: slot, WRID: wr.ID, Opcode: hw.RxeSendOpcode.Get(q.elem), Kind: m}
	}
	return w, true, nil
}

// Retire writes consumer_index past the oldest fetched entry once the
// device has written its completion (or, unsignaled, once it completed):
// the slot is user space's again, and librxe counts it free.
func (q *SQ) Retire() error { return q.retire() }

// parseSend turns a send slot's first bytes into a work request. elem
// holds at least lim.sendNeed() bytes. The SGL is appended to sgl, and
// Inline aliases elem.
func parseSend(elem []byte, lim SendLimits, sgl []ibrc.SGE) (ibrc.SendWR, Malformed) {
	wr := ibrc.SendWR{ID: hw.RxeSendWRID.Get(elem)}
	flags := hw.RxeSendFlags.Get(elem)
	switch hw.RxeSendOpcode.Get(elem) {
	case hw.IBVWRSend:
		wr.Opcode = ibrc.WRSend
	case hw.IBVWRSendWithImm:
		wr.Opcode, wr.Imm = ibrc.WRSendImm, hw.RxeSendImm.Get(elem)
	case hw.IBVWRRDMAWrite:
		wr.Opcode = ibrc.WRWrite
	case hw.IBVWRRDMAWriteWithImm:
		wr.Opcode, wr.Imm = ibrc.WRWriteImm, hw.RxeSendImm.Get(elem)
	case hw.IBVWRRDMARead:
		wr.Opcode = ibrc.WRRead
	case hw.IBVWRAtomicCmpAndSwp:
		wr.Opcode = ibrc.WRAtomicCmpSwp
	case hw.IBVWRAtomicFetchAdd:
		wr.Opcode = ibrc.WRAtomicFetchAdd
	case hw.IBVWRAtomicWrite:
		wr.Opcode = ibrc.WRAtomicWrite
	case hw.IBVWRSendWithInv:
		wr.Opcode, wr.InvRKey = ibrc.WRSendWithInv, hw.RxeSendInvRKey.Get(elem)
	case hw.IBVWRLocalInv:
		// No data: the R_Key is all of it.
		wr.Opcode, wr.InvRKey = ibrc.WRLocalInv, hw.RxeSendInvRKey.Get(elem)
		wr.Flags = ibrc.SendFlags(flags & (hw.IBVSendFence | hw.IBVSendSignaled))
		return wr, 0
	case hw.IBVWRBindMW:
		wr.Opcode = ibrc.WRBindMW
		wr.Flags = ibrc.SendFlags(flags & (hw.IBVSendFence | hw.IBVSendSignaled))
		wr.Bind = ibrc.MWBind{MWRKey: hw.RxeSendMWRKey.Get(elem), NewRKey: hw.RxeSendMWNewRKey.Get(elem),
			MRLKey: hw.RxeSendMWMRLKey.Get(elem), Addr: hw.RxeSendMWAddr.Get(elem), Length: hw.RxeSendMWLength.Get(elem),
			Access: ibrc.Access(hw.RxeSendMWAccess.Get(elem) & (hw.RDMAAccessLocalWrite | hw.RDMAAccessRemoteWrite |
				hw.RDMAAccessRemoteRead | hw.RDMAAccessRemoteAtomic))}
		return wr, 0
	case hw.IBWRRegMR:
		// A kernel consumer's (struct npfnic_reg_wr): the region's index
		// names it, and the engine refuses a region of another PD, so a
		// user QP, whose PD has none, gets LOC_QP_OP_ERR.
		r := elem[hw.RxeSendRegOffset:]
		wr.Opcode = ibrc.WRRegMR
		wr.Flags = ibrc.SendFlags(flags & (hw.IBVSendFence | hw.IBVSendSignaled))
		wr.Reg = ibrc.FastReg{IOVA: hw.RDMARegWRIOVA.Get(r), Length: hw.RDMARegWRLength.Get(r), Key: hw.RDMARegWRKey.Get(r),
			Access: ibrc.Access(hw.RDMARegWRAccess.Get(r)), PageShift: hw.RDMARegWRPageShift.Get(r), NPages: hw.RDMARegWRNPages.Get(r)}
		return wr, 0
	default:
		return wr, BadOpcode
	}
	if lim.UD {
		if wr.Opcode != ibrc.WRSend && wr.Opcode != ibrc.WRSendImm {
			return wr, BadOpcode
		}
		if m := parseUD(elem, &wr.UD); m != 0 {
			return wr, m
		}
	}
	switch wr.Opcode {
	case ibrc.WRWrite, ibrc.WRWriteImm, ibrc.WRRead, ibrc.WRAtomicWrite:
		wr.RemoteAddr, wr.RKey = hw.RxeSendRemoteAddr.Get(elem), hw.RxeSendRKey.Get(elem)
	case ibrc.WRAtomicCmpSwp, ibrc.WRAtomicFetchAdd:
		wr.RemoteAddr, wr.RKey = hw.RxeSendRemoteAddr.Get(elem), hw.RxeSendAtomicRKey.Get(elem)
		wr.CompareAdd, wr.Swap = hw.RxeSendCompareAdd.Get(elem), hw.RxeSendSwap.Get(elem)
	}
	// Flags the engine implements; IBV_SEND_IP_CSUM and undefined bits
	// mean nothing on an RC QP and are ignored, as rdma_rxe does.
	wr.Flags = ibrc.SendFlags(flags & (hw.IBVSendFence | hw.IBVSendSignaled | hw.IBVSendSolicited | hw.IBVSendInline))
	length := hw.RxeSendLength.Get(elem)
	if length > ibrc.MaxMsgSize {
		return wr, TooLong
	}
	if wr.Opcode == ibrc.WRAtomicCmpSwp || wr.Opcode == ibrc.WRAtomicFetchAdd {
		if length != ibrc.AtomicSize || flags&hw.IBVSendInline != 0 {
			return wr, AtomicLength
		}
	}
	if wr.Opcode == ibrc.WRAtomicWrite {
		// Its 8 bytes are in the entry (dma.atomic_wr), whatever the flags say.
		if length != ibrc.AtomicSize || len(elem) < hw.RxeSendWQESize+ibrc.AtomicSize {
			return wr, AtomicLength
		}
		wr.Flags &^= ibrc.SendInline
		wr.Inline = elem[hw.RxeSendWQESize : hw.RxeSendWQESize+ibrc.AtomicSize]
		return wr, 0
	}
	if flags&hw.IBVSendInline != 0 {
		switch {
		case wr.Opcode == ibrc.WRRead:
			return wr, InlineRead
		case uint64(length) > uint64(lim.MaxInline) || uint64(length) > uint64(len(elem)-hw.RxeSendWQESize):
			return wr, InlineTooLong
		}
		wr.Inline = elem[hw.RxeSendWQESize : hw.RxeSendWQESize+int(length)]
		return wr, 0
	}
	n := hw.RxeSendNumSGE.Get(elem)
	if uint64(n) > uint64(lim.MaxSGE) || uint64(n)*hw.RxeSGESize > uint64(len(elem)-hw.RxeSendWQESize) {
		return wr, TooManySGEs
	}
	var m Malformed
	wr.SGL, m = parseSGL(elem[hw.RxeSendWQESize:], int(n), length, sgl)
	return wr, m
}

// parseUD reads the destination of a UD entry: librxe copies the address
// handle's vector into it.
func parseUD(elem []byte, d *ibrc.UDDest) Malformed {
	d.QPN, d.QKey = hw.RxeSendUDRemoteQPN.Get(elem), hw.RxeSendUDRemoteQKey.Get(elem)
	copy(d.AV.DestMAC[:], elem[hw.RxeSendUDDMAC.Offset:])
	copy(d.AV.DGID[:], elem[hw.RxeSendUDDGID.Offset:])
	d.AV.HopLimit, d.AV.TrafficClass = hw.RxeSendUDHopLimit.Get(elem), hw.RxeSendUDTrafficClass.Get(elem)
	_, v4 := rocev2.IPv4FromGID(d.AV.DGID)
	if hw.RxeSendUDAHNum.Get(elem) != 0 || hw.RxeSendUDNetworkType.Get(elem) != hw.RxeNetworkTypeIPv4 || !v4 ||
		d.QPN > hw.RDMAQPNMax {
		return BadAddress
	}
	return 0
}

// parseSGL reads n SGEs from b and keeps the first length bytes they
// describe: zero-length SGEs are dropped and the last one used is cut to
// what the message needs, so the result's lengths add up to length.
func parseSGL(b []byte, n int, length uint32, sgl []ibrc.SGE) ([]ibrc.SGE, Malformed) {
	left := length
	for i := 0; i < n && left > 0; i++ {
		e := b[i*hw.RxeSGESize:]
		s := ibrc.SGE{Addr: hw.RxeSGEAddr.Get(e), Length: min(hw.RxeSGELength.Get(e), left), LKey: hw.RxeSGELKey.Get(e)}
		if s.Length == 0 {
			continue
		}
		if uint64(s.Length-1) > math.MaxUint64-s.Addr { // compare without adding
			return sgl, SGEWraps
		}
		sgl = append(sgl, s)
		left -= s.Length
	}
	if left > 0 {
		return sgl, SGLShort
	}
	return sgl, 0
}

// RecvWQE is a receive queue entry that became a work request. WR.SGL is
// the queue's buffer, valid until its next Fetch (ibrc.QP.PostRecv copies
// it).
type RecvWQE struct {
	Slot uint32
	WR   ibrc.RecvWR
}

// RQ is the device's end of an rxe receive queue or shared receive queue.
type RQ struct {
	consumer
	maxSGE int
	sgl    []ibrc.SGE
}

// NewRQ registers a receive queue whose entries have at most maxSGE SGEs.
// It touches no memory.
func NewRQ(mem Memory, g Geometry, maxSGE int) (*RQ, error) {
	if maxSGE < 0 || maxSGE > maxElem/hw.RxeSGESize {
		return nil, fmt.Errorf("%w: %d SGEs", ErrConfig, maxSGE)
	}
	c, err := newConsumer(mem, g, hw.RxeRecvWQESize+maxSGE*hw.RxeSGESize)
	if err != nil {
		return nil, err
	}
	return &RQ{consumer: c, maxSGE: maxSGE, sgl: make([]ibrc.SGE, 0, maxSGE)}, nil
}

// Fetch reads the next posted entry, as SQ.Fetch does.
func (q *RQ) Fetch() (w RecvWQE, ok bool, err error) {
	slot, ok, err := q.next()
	if !ok || err != nil {
		return RecvWQE{}, false, err
	}
	wr, m := parseRecv(q.elem, q.maxSGE, q.sgl[:0])
	w = RecvWQE{Slot: slot, WR: wr}
	if m != 0 {
		return w, true, &WQEError{Slot: slot, WRID: wr.ID, Recv: true, Kind: m}
	}
	return w, true, nil
}

// Retire writes consumer_index past the oldest fetched entry. Entries were
// parsed from copies when fetched, so a retire only returns one slot to
// user space: the entries of a shared receive queue, taken by several QPs
// and completed out of fetch order, each retire one.
func (q *RQ) Retire() error { return q.retire() }

// parseRecv turns a receive slot's first bytes (at least RxeRecvWQESize +
// maxSGE SGEs) into a work request whose SGL holds dma.length bytes.
func parseRecv(elem []byte, maxSGE int, sgl []ibrc.SGE) (ibrc.RecvWR, Malformed) {
	wr := ibrc.RecvWR{ID: hw.RxeRecvWRID.Get(elem)}
	length := hw.RxeRecvLength.Get(elem)
	n := hw.RxeRecvNumSGE.Get(elem)
	switch {
	case uint64(n) > uint64(maxSGE) || uint64(n)*hw.RxeSGESize > uint64(len(elem)-hw.RxeRecvWQESize):
		return wr, TooManySGEs
	case length > ibrc.MaxMsgSize:
		return wr, TooLong
	}
	var m Malformed
	wr.SGL, m = parseSGL(elem[hw.RxeRecvWQESize:], int(n), length, sgl)
	return wr, m
}
