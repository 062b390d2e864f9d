package ibrc

import (
	"errors"
	"fmt"

	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// QPType is a QP's transport service; values match enum ibv_qp_type.
type QPType uint8

// QP types. The zero QPInit.Type is RC.
const (
	TypeRC QPType = 2
	TypeUC QPType = 3 // unreliable connected: RC's SENDs and WRITEs, no ACKs, no retries
	TypeUD QPType = 4 // unreliable datagram: one-packet SENDs, each to the address its WR names
)

func (t QPType) String() string {
	switch t {
	case TypeRC, TypeUC, TypeUD:
		return t.service().String()
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

func (t QPType) service() rocev2.Service {
	switch t {
	case TypeUC:
		return rocev2.ServiceUC
	case TypeUD:
		return rocev2.ServiceUD
	}
	return rocev2.ServiceRC
}

// QPState is the state of a queue pair (IBA 10.3.1); values match
// enum ibv_qp_state.
type QPState uint8

// QP states.
const (
	StateReset QPState = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", s)
}

// MTU is a path MTU; values match enum ibv_mtu.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes (0 for an invalid value).
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Access are memory region and QP access flags; values match
// enum ibv_access_flags.
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	AccessOnDemand     Access = 1 << 6
)

// WROpcode is the operation of a send work request; values match
// enum ibv_wr_opcode.
type WROpcode uint8

// Send work request opcodes.
const (
	WRWrite    WROpcode = 0
	WRWriteImm WROpcode = 1
	WRSend     WROpcode = 2
	WRSendImm  WROpcode = 3
	WRRead     WROpcode = 4
	// The atomics read, modify and write AtomicSize bytes at an aligned
	// remote address and return the original value into the WR's SGL.
	WRAtomicCmpSwp   WROpcode = 5
	WRAtomicFetchAdd WROpcode = 6
	// Memory windows (window.go): LOCAL_INV unbinds the type 2 window of
	// InvRKey, BIND_MW binds Bind's, SEND_WITH_INV is a SEND that has the
	// responder unbind InvRKey's.
	WRLocalInv    WROpcode = 7
	WRBindMW      WROpcode = 8
	WRSendWithInv WROpcode = 9
	// WRAtomicWrite (IBA 1.5, RC only) writes its AtomicSize bytes, in
	// Inline, at an aligned remote address as one store.
	WRAtomicWrite WROpcode = 15
)

// AtomicSize is the operand of an atomic operation: 8 bytes, at an address
// aligned to it, in the responder's byte order (little endian, as the
// guests' CPUs and rdma_rxe use).
const AtomicSize = 8

func (o WROpcode) String() string {
	switch o {
	case WRWrite:
		return "RDMA_WRITE"
	case WRWriteImm:
		return "RDMA_WRITE_WITH_IMM"
	case WRSend:
		return "SEND"
	case WRSendImm:
		return "SEND_WITH_IMM"
	case WRRead:
		return "RDMA_READ"
	case WRAtomicCmpSwp:
		return "ATOMIC_CMP_AND_SWP"
	case WRAtomicFetchAdd:
		return "ATOMIC_FETCH_AND_ADD"
	case WRAtomicWrite:
		return "ATOMIC_WRITE"
	case WRLocalInv:
		return "LOCAL_INV"
	case WRBindMW:
		return "BIND_MW"
	case WRSendWithInv:
		return "SEND_WITH_INV"
	case WRRegMR:
		return "REG_MR"
	}
	return fmt.Sprintf("WROpcode(%d)", o)
}

// SendFlags modify a send work request; values match enum ibv_send_flags.
type SendFlags uint8

// Send flags.
const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	// SendInline: the payload is Inline, copied when the WR is posted, not
	// gathered from an SGL (SEND and RDMA WRITE only).
	SendInline SendFlags = 1 << 3
)

// SGE is a scatter/gather element: LKey names the memory region.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request.
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// Inline is the payload of a SendInline WR (at most QPCap.MaxInline
	// bytes, SGL empty); PostSend copies it.
	Inline     []byte
	Imm        uint32 // immediate data (network order is applied on the wire)
	RemoteAddr uint64 // RDMA WRITE/READ, atomics
	RKey       uint32
	// CompareAdd is the value a CMP_AND_SWP compares with, the one a
	// FETCH_AND_ADD adds; Swap is what a CMP_AND_SWP writes if equal.
	CompareAdd, Swap uint64
	// InvRKey is the R_Key LOCAL_INV and SEND_WITH_INV invalidate; Bind
	// is BIND_MW's window.
	InvRKey uint32
	Bind    MWBind
	// Reg is REG_MR's registration (fastreg.go).
	Reg FastReg
	// UD is where a UD QP's SEND goes (the address handle's path, the
	// remote QP and Q_Key); the other types ignore it.
	UD UDDest
}

// UDDest addresses one UD SEND.
type UDDest struct {
	AV  AddressVector
	QPN uint32
	// QKey is the Q_Key the message carries; with its high bit set, the
	// sending QP's own (IBA 10.2.5: a privileged Q_Key is never taken from
	// a work request).
	QKey uint32
}

// ControlledQKey is the high bit of a Q_Key: a WR's Q_Key with it set means
// the QP's own.
const ControlledQKey = 1 << 31

// RecvWR is a receive work request.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WCStatus is a work completion status; values match enum ibv_wc_status.
type WCStatus uint8

// Completion statuses.
const (
	WCSuccess         WCStatus = 0
	WCLocLenErr       WCStatus = 1
	WCLocQPOpErr      WCStatus = 2
	WCLocProtErr      WCStatus = 4
	WCMWBindErr       WCStatus = 6
	WCWRFlushErr      WCStatus = 5
	WCBadRespErr      WCStatus = 7
	WCLocAccessErr    WCStatus = 8
	WCRemInvReqErr    WCStatus = 9
	WCRemAccessErr    WCStatus = 10
	WCRemOpErr        WCStatus = 11
	WCRetryExcErr     WCStatus = 12
	WCRNRRetryExcErr  WCStatus = 13
	WCFatalErr        WCStatus = 19
	WCGeneralErr      WCStatus = 21
	wcStatusNameCount          = 22
)

var wcStatusNames = [wcStatusNameCount]string{
	WCSuccess: "success", WCLocLenErr: "local length error", WCLocQPOpErr: "local QP operation error",
	WCLocProtErr: "local protection error", WCMWBindErr: "memory window bind error", WCWRFlushErr: "WR flushed", WCBadRespErr: "bad response error",
	WCLocAccessErr: "local access error", WCRemInvReqErr: "remote invalid request error",
	WCRemAccessErr: "remote access error", WCRemOpErr: "remote operation error",
	WCRetryExcErr: "transport retry counter exceeded", WCRNRRetryExcErr: "RNR retry counter exceeded",
	WCFatalErr: "fatal error", WCGeneralErr: "general error",
}

// Defined reports whether s is one of the statuses above, the only ones
// the engine puts in a completion.
func (s WCStatus) Defined() bool {
	return int(s) < len(wcStatusNames) && wcStatusNames[s] != ""
}

func (s WCStatus) String() string {
	if s.Defined() {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", s)
}

// WCOpcode is the operation of a work completion; values match
// enum ibv_wc_opcode.
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend        WCOpcode = 0
	WCRDMAWrite   WCOpcode = 1
	WCRDMARead    WCOpcode = 2
	WCCompSwap    WCOpcode = 3
	WCFetchAdd    WCOpcode = 4
	WCBindMW      WCOpcode = 5
	WCLocalInv    WCOpcode = 6
	WCAtomicWrite WCOpcode = 9
	WCRecv        WCOpcode = 128
	WCRecvRDMAImm WCOpcode = 129
)

// WCFlags qualify a completion; values match enum ibv_wc_flags.
type WCFlags uint8

// Completion flags.
const (
	// WCGRH: a UD receive whose buffer starts with the 40-byte GRH area
	// (for RoCEv2 over IPv4, 20 zero bytes and the packet's IPv4 header).
	WCGRH     WCFlags = 1 << 0
	WCWithImm WCFlags = 1 << 1
	// WCWithInv: a receive of a SEND with Invalidate, whose R_Key is in
	// Imm. The kernel's IB_WC_WITH_INVALIDATE, as rdma_rxe reports it to
	// user space, not libibverbs' 1 << 3.
	WCWithInv WCFlags = 1 << 2
)

// GRHSize is the room a UD receive buffer gives the GRH ahead of the
// payload.
const GRHSize = 40

// WC is a work completion.
type WC struct {
	WRID    uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	Imm     uint32
	Flags   WCFlags
	QPN     uint32
	SrcQP   uint32 // UD receives: the sender's QP
	// Solicited: a receive completion of a message whose last packet had
	// the solicited event bit (IBV_SEND_SOLICITED), which a CQ armed for
	// solicited completions only reports.
	Solicited bool
}

// AttrMask selects the QPAttr fields ModifyQP applies. Its bits are enum
// ib_qp_attr_mask's, as the device interface defines them (vdevice/hw),
// so a MODIFY_QP's mask passes through.
type AttrMask uint32

// QP attribute mask bits.
const (
	AttrState           AttrMask = hw.RDMAQPAttrState
	AttrAccessFlags     AttrMask = hw.RDMAQPAttrAccessFlags
	AttrPKey            AttrMask = hw.RDMAQPAttrPKeyIndex // here the P_Key itself, not an index
	AttrQKey            AttrMask = hw.RDMAQPAttrQKey
	AttrAV              AttrMask = hw.RDMAQPAttrAV
	AttrPathMTU         AttrMask = hw.RDMAQPAttrPathMTU
	AttrTimeout         AttrMask = hw.RDMAQPAttrTimeout
	AttrRetryCnt        AttrMask = hw.RDMAQPAttrRetryCnt
	AttrRNRRetry        AttrMask = hw.RDMAQPAttrRNRRetry
	AttrRQPSN           AttrMask = hw.RDMAQPAttrRQPSN
	AttrMaxRdAtomic     AttrMask = hw.RDMAQPAttrMaxQPRdAtomic
	AttrMinRNRTimer     AttrMask = hw.RDMAQPAttrMinRNRTimer
	AttrSQPSN           AttrMask = hw.RDMAQPAttrSQPSN
	AttrMaxDestRdAtomic AttrMask = hw.RDMAQPAttrMaxDestRdAtomic
	AttrDestQPN         AttrMask = hw.RDMAQPAttrDestQPN
)

// AddressVector is the path to the peer: RoCEv2 addressing of the remote
// port (GID = IPv4-mapped IPv6 address) and the flow's UDP source port.
type AddressVector struct {
	DestMAC [6]byte
	DGID    [16]byte
	// SrcIP is the local address the QP sends from and is reached at
	// (the source GID's); zero: the port's Config.IPv4.
	SrcIP        [4]byte
	SrcPort      uint16 // 0: derived from the QP numbers
	HopLimit     uint8  // 0: 64
	TrafficClass uint8
}

// QPAttr are the attributes of a QP.
type QPAttr struct {
	State       QPState
	AccessFlags Access // remote operations the responder permits
	PKey        uint16
	QKey        uint32 // UD: the Q_Key received messages must carry
	AV          AddressVector
	// PathMTU of a UD QP is the port's MTU, which bounds its messages
	// (the driver passes its active MTU; 4096 bytes if never set).
	PathMTU         MTU
	DestQPN         uint32
	RQPSN           uint32 // first PSN the responder expects
	SQPSN           uint32 // first PSN the requester sends
	MaxDestRdAtomic uint8  // RDMA READ requests the responder keeps for replay
	MinRNRTimer     uint8  // 5-bit code the responder puts in RNR NAKs
	Timeout         uint8  // local ACK timeout: 4.096 µs × 2^Timeout, 0 = infinite
	RetryCnt        uint8  // 0-7 transport retries
	RNRRetry        uint8  // 0-6 RNR retries, 7 = infinite
	MaxRdAtomic     uint8  // outstanding RDMA READs the requester may issue
}

// QPCap are the queue sizes of a QP.
type QPCap struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInline              int // bytes of a SendInline payload
}

// Errors returned by the verbs.
var (
	ErrInvalidArg      = errors.New("ibrc: invalid argument")
	ErrInvalidState    = errors.New("ibrc: invalid QP state for this operation")
	ErrInvalidModify   = errors.New("ibrc: invalid QP state transition or attribute mask")
	ErrQueueFull       = errors.New("ibrc: work queue full")
	ErrDestroyed       = errors.New("ibrc: object destroyed")
	ErrResourceInUse   = errors.New("ibrc: resource in use")
	ErrResourceExhaust = errors.New("ibrc: out of resources")
)

// MaxMsgSize is the largest message (and RDMA length) the engine accepts: 2^31 bytes.
const MaxMsgSize = 1 << 31
