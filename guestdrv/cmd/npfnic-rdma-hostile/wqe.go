package main

import (
	"strconv"
	"sync/atomic"

	"github.com/npfnic/npfnic/vdevice/hw"
)

func atomicLoad(p *uint32) uint32     { return atomic.LoadUint32(p) }
func atomicStore(p *uint32, v uint32) { atomic.StoreUint32(p, v) }

// sge is a scatter/gather element (struct rxe_sge, struct ibv_sge).
type sge struct {
	addr   uint64
	length uint32
	lkey   uint32
}

// sendWQE is a send queue entry as the tool writes it: what librxe would
// write for a work request, or anything else. length and numSGE are
// written as given (librxe computes them from the SGL: see sum), so a case
// can make them lie.
type sendWQE struct {
	id         uint64
	opcode     uint32
	flags      uint32
	imm        uint32
	remoteAddr uint64
	rkey       uint32
	// compareAdd and swap are an atomic's operands (its rkey goes where
	// the atomic member of the union has it).
	compareAdd, swap uint64
	length           uint32 // dma.length
	numSGE           uint32 // dma.num_sge
	sgl              []sge
	inline           []byte // with IBV_SEND_INLINE
	ssn              uint32
	// ud is a UD SEND's destination, nil on other QPs.
	ud *udDest
}

// udDest is what librxe copies into a UD send entry: the work request's
// remote QPN and Q_Key, the address handle's number (0: its vector is in
// the entry) and the vector. sgid is the GID that av.SGIDIndex names, for
// rdma_rxe's socket address of the source.
type udDest struct {
	qpn, qkey, ahNum uint32
	av               hw.RxeAV
	sgid             [16]byte
}

// putSockaddr4 writes an IPv4-mapped GID as the sockaddr_in rdma_rxe
// routes by (librxe's rdma_gid2ip); any other GID leaves it zero.
func putSockaddr4(slot []byte, family hw.Le16, addr hw.Field, gid [16]byte) {
	if [12]byte(gid[:12]) != [12]byte{10: 0xff, 11: 0xff} {
		return
	}
	family.Put(slot, afInet)
	copy(slot[addr.Offset:addr.Offset+4], gid[12:])
}

// sum returns w with length and numSGE what librxe writes: the SGEs'
// total (or the inline bytes) and their number.
func (w sendWQE) sum() sendWQE {
	w.numSGE = uint32(len(w.sgl))
	w.length = 0
	for _, s := range w.sgl {
		w.length += s.length
	}
	if w.flags&hw.IBVSendInline != 0 {
		w.length, w.numSGE = uint32(len(w.inline)), 0
	}
	return w
}

// put writes w into a send queue slot the way librxe's init_send_wqe
// does: the slot cleared, the work request, then the fields rdma_rxe's
// requester starts from (iova, dma.resid, ...). SGEs or inline bytes that
// do not fit the slot are not written: the slot is all the tool may touch.
func (w sendWQE) put(slot []byte) {
	clear(slot)
	hw.RxeSendWRID.Put(slot, w.id)
	hw.RxeSendOpcode.Put(slot, w.opcode)
	hw.RxeSendFlags.Put(slot, w.flags)
	hw.RxeSendImm.Put(slot, w.imm)
	if w.ud != nil {
		hw.PutRxeSendUD(slot, w.ud.qpn, w.ud.qkey, w.ud.ahNum, w.ud.av)
		sendUDPort.Put(slot, 1)
		putSockaddr4(slot, sendUDSGIDFamily, sendUDSGIDAddr, w.ud.sgid)
		putSockaddr4(slot, sendUDDGIDFamily, sendUDDGIDAddr, w.ud.av.DGID)
	} else {
		hw.PutRxeSendRemote(slot, w.opcode, w.remoteAddr, w.rkey, w.compareAdd, w.swap)
	}
	sendIOVA.Put(slot, w.remoteAddr)
	sendState.Put(slot, 0)
	sendSSN.Put(slot, w.ssn)
	hw.RxeSendLength.Put(slot, w.length)
	sendResid.Put(slot, w.length)
	hw.RxeSendNumSGE.Put(slot, w.numSGE)
	sendCurSGE.Put(slot, 0)
	sendSGEOffset.Put(slot, 0)
	data := slot[hw.RxeSendWQESize:]
	if w.flags&hw.IBVSendInline != 0 {
		copy(data, w.inline)
		return
	}
	putSGL(data, w.sgl)
}

func putSGL(b []byte, sgl []sge) {
	for _, s := range sgl {
		if len(b) < hw.RxeSGESize {
			return
		}
		hw.RxeSGEAddr.Put(b, s.addr)
		hw.RxeSGELength.Put(b, s.length)
		hw.RxeSGELKey.Put(b, s.lkey)
		b = b[hw.RxeSGESize:]
	}
}

// recvWQE is a receive queue entry; numSGE and length as for sendWQE.
type recvWQE struct {
	id     uint64
	length uint32
	numSGE uint32
	sgl    []sge
}

func (r recvWQE) sum() recvWQE {
	r.numSGE, r.length = uint32(len(r.sgl)), 0
	for _, s := range r.sgl {
		r.length += s.length
	}
	return r
}

// put writes r into a receive queue slot as librxe's post_recv does.
func (r recvWQE) put(slot []byte) {
	clear(slot)
	hw.RxeRecvWRID.Put(slot, r.id)
	hw.RxeRecvLength.Put(slot, r.length)
	recvResid.Put(slot, r.length)
	hw.RxeRecvNumSGE.Put(slot, r.numSGE)
	recvCurSGE.Put(slot, 0)
	recvSGEOffset.Put(slot, 0)
	putSGL(slot[hw.RxeRecvWQESize:], r.sgl)
}

// cqe is the part of a completion (struct ib_uverbs_wc) the cases check.
type cqe struct {
	wrID    uint64
	status  uint32
	opcode  uint32
	byteLen uint32
	qpNum   uint32
	srcQP   uint32
}

func parseCQE(b []byte) cqe {
	return cqe{wrID: hw.RxeCQEWRID.Get(b), status: hw.RxeCQEStatus.Get(b), opcode: hw.RxeCQEOpcode.Get(b),
		byteLen: hw.RxeCQEByteLen.Get(b), qpNum: hw.RxeCQEQPNum.Get(b), srcQP: hw.RxeCQESrcQP.Get(b)}
}

// statusName is libibverbs' ibv_wc_status_str for the statuses the cases
// meet.
func statusName(s uint32) string {
	switch s {
	case hw.IBVWCSuccess:
		return "SUCCESS"
	case hw.IBVWCLocLenErr:
		return "LOC_LEN_ERR"
	case hw.IBVWCLocQPOpErr:
		return "LOC_QP_OP_ERR"
	case hw.IBVWCLocProtErr:
		return "LOC_PROT_ERR"
	case hw.IBVWCWRFlushErr:
		return "WR_FLUSH_ERR"
	case hw.IBVWCBadRespErr:
		return "BAD_RESP_ERR"
	case hw.IBVWCLocAccessErr:
		return "LOC_ACCESS_ERR"
	case hw.IBVWCRemInvReqErr:
		return "REM_INV_REQ_ERR"
	case hw.IBVWCRemAccessErr:
		return "REM_ACCESS_ERR"
	case hw.IBVWCRemOpErr:
		return "REM_OP_ERR"
	case hw.IBVWCRetryExcErr:
		return "RETRY_EXC_ERR"
	case hw.IBVWCRNRRetryExcErr:
		return "RNR_RETRY_EXC_ERR"
	case hw.IBVWCFatalErr:
		return "FATAL_ERR"
	case hw.IBVWCGeneralErr:
		return "GENERAL_ERR"
	}
	return "status(" + strconv.FormatUint(uint64(s), 10) + ")"
}
