package hw

// The rdma_rxe user ABI (x86-64): the queues Debian's stock librxe provider
// shares with "its" kernel driver, which on npfnic are read and written by
// the device itself. npfnic does not define these formats: Linux does, in
// include/uapi/rdma/rdma_user_rxe.h (the queue header and the work queue
// entries) and include/uapi/rdma/ib_user_verbs.h (struct ib_uverbs_wc, the
// completion), and the values in the verbs enums. So they are not generated
// into guestdrv/npfnic_hw.h (the guest driver includes the kernel's own
// header); they are written here once as the device's view of them, checked
// field by field against those headers by TestRxeABIMatchesKernel, and
// described in docs/device.md. Package ibrc/rxeq reads and writes guest
// memory through these fields.

// ABILayout is a structure of another component's ABI that the device reads
// or writes in guest memory. Fields are named by their C member designator
// (offsetof(Struct, Name) is their Offset) and typed by CType. The table
// lists what the device reads or writes and nothing else: bytes between
// fields are the other side's (rdma_rxe's private state), and of a union
// only the members the device uses appear.
type ABILayout struct {
	Struct string // the C type, "struct rxe_send_wqe"
	Header string // the uapi header that defines it
	Size   int    // sizeof; a flexible array member adds nothing
	Doc    string
	Fields []Field
}

func abi32(name string, off int, doc string) Le32 {
	return Le32{Field{Name: name, Offset: off, Size: 4, Doc: doc, CType: "__u32"}}
}
func abi64(name string, off int, doc string) Le64 {
	return Le64{Field{Name: name, Offset: off, Size: 8, Doc: doc, CType: "__aligned_u64"}}
}
func abi16(name string, off int, doc string) Le16 {
	return Le16{Field{Name: name, Offset: off, Size: 2, Doc: doc, CType: "__u16"}}
}
func abi8(name string, off int, doc string) U8 {
	return U8{Field{Name: name, Offset: off, Size: 1, Doc: doc, CType: "__u8"}}
}
func abiBe32(name string, off int, doc string) Be32 {
	return Be32{Field{Name: name, Offset: off, Size: 4, Doc: doc, CType: "__be32"}}
}

// Sizes of the rxe structures (x86-64).
const (
	// RxeQueueHeaderSize is the header of every rxe queue buffer; element
	// i is at RxeQueueHeaderSize + i << log2_elem_size.
	RxeQueueHeaderSize = 384
	RxeSendWQESize     = 208 // struct rxe_send_wqe without its inline data or SGEs
	RxeRecvWQESize     = 40  // struct rxe_recv_wqe without its SGEs
	RxeSGESize         = 16  // struct rxe_sge
	RxeCQESize         = 48  // struct ib_uverbs_wc
)

// Queue buffer header (struct rxe_queue_buf): the indices are slot numbers,
// always below the queue's slot count.
var (
	RxeQueueLog2ElemSize = abi32("log2_elem_size", 0, "driver, at creation: log2 of the element size; the device uses the registered value")
	RxeQueueIndexMask    = abi32("index_mask", 4, "driver, at creation: slots - 1; the device uses the registered value")
	RxeQueueProducer     = abi32("producer_index", 128, "producer: the slot it fills next")
	RxeQueueConsumer     = abi32("consumer_index", 256, "consumer: the slot it empties next")
	rxeQueueData         = Field{Name: "data", Offset: RxeQueueHeaderSize, Size: 1, Count: -1, CType: "__u8",
		Doc: "the slots, each 1 << log2_elem_size bytes"}
)

// RxeQueueBuf is struct rxe_queue_buf.
var RxeQueueBuf = ABILayout{"struct rxe_queue_buf", "rdma/rdma_user_rxe.h", RxeQueueHeaderSize,
	"Header of every rxe queue (send, receive, shared receive and completion queue), followed by the slots.",
	[]Field{RxeQueueLog2ElemSize.Field, RxeQueueIndexMask.Field, RxeQueueProducer.Field, RxeQueueConsumer.Field, rxeQueueData}}

// SGE fields (struct rxe_sge, the same as struct ibv_sge).
var (
	RxeSGEAddr   = abi64("addr", 0, "address in the memory region")
	RxeSGELength = abi32("length", 8, "bytes")
	RxeSGELKey   = abi32("lkey", 12, "the memory region's lkey")
)

// RxeSGE is struct rxe_sge.
var RxeSGE = ABILayout{"struct rxe_sge", "rdma/rdma_user_rxe.h", RxeSGESize,
	"A scatter/gather element of a work queue entry.",
	[]Field{RxeSGEAddr.Field, RxeSGELength.Field, RxeSGELKey.Field}}

// Send queue entry fields (struct rxe_send_wqe) the device reads.
var (
	RxeSendWRID       = abi64("wr.wr_id", 0, "returned in the completion")
	RxeSendOpcode     = abi32("wr.opcode", 12, "IBV_WR_*")
	RxeSendFlags      = abi32("wr.send_flags", 16, "IBV_SEND_*")
	RxeSendImm        = abiBe32("wr.ex.imm_data", 20, "immediate data of the _WITH_IMM opcodes, network byte order")
	RxeSendInvRKey    = abi32("wr.ex.invalidate_rkey", 20, "LOCAL_INV and SEND_WITH_INV: the R_Key to invalidate")
	RxeSendRemoteAddr = abi64("wr.wr.rdma.remote_addr", 24, "RDMA WRITE and READ: the remote address; atomics: the same bytes, wr.wr.atomic.remote_addr")
	RxeSendRKey       = abi32("wr.wr.rdma.rkey", 32, "RDMA WRITE and READ: the remote key")
	// The atomics' member of the wr.wr union: rkey moves past the operands.
	RxeSendCompareAdd = abi64("wr.wr.atomic.compare_add", 32, "atomics: the value CMP_AND_SWP compares with, FETCH_AND_ADD adds")
	RxeSendSwap       = abi64("wr.wr.atomic.swap", 40, "CMP_AND_SWP: the value written if equal")
	RxeSendAtomicRKey = abi32("wr.wr.atomic.rkey", 48, "atomics: the remote key")
	// The UD member of the wr.wr union: the destination of a UD SEND, with
	// the address vector librxe copies from the address handle into the
	// entry (ah_num 0: npfnic never numbers its address handles).
	RxeSendUDRemoteQPN    = abi32("wr.wr.ud.remote_qpn", 24, "UD: the destination QP")
	RxeSendUDRemoteQKey   = abi32("wr.wr.ud.remote_qkey", 28, "UD: the Q_Key; high bit set: the QP's own")
	RxeSendUDAHNum        = abi32("wr.wr.ud.ah_num", 36, "UD: 0, or the entry is malformed (no address handle has a number)")
	RxeSendUDNetworkType  = abi8("wr.wr.ud.av.network_type", 57, "UD: RXE_NETWORK_TYPE_IPV4 (1); IPv6 is not carried")
	RxeSendUDDMAC         = Field{Name: "wr.wr.ud.av.dmac", Offset: 58, Size: 1, Count: 6, CType: "__u8[6]", Doc: "UD: the destination's Ethernet address"}
	RxeSendUDDGID         = Field{Name: "wr.wr.ud.av.grh.dgid", Offset: 64, Size: 16, CType: "union rxe_gid", Doc: "UD: the destination GID, IPv4-mapped"}
	RxeSendUDSGIDIndex    = abi8("wr.wr.ud.av.grh.sgid_index", 84, "UD: the port's GID to send from")
	RxeSendUDHopLimit     = abi8("wr.wr.ud.av.grh.hop_limit", 85, "UD: IP TTL (0: 64)")
	RxeSendUDTrafficClass = abi8("wr.wr.ud.av.grh.traffic_class", 86, "UD: IP TOS")
	// The memory window member of the wr.wr union: a BIND_MW entry.
	RxeSendMWAddr    = abi64("wr.wr.mw.addr", 24, "BIND_MW: the window's first address")
	RxeSendMWLength  = abi64("wr.wr.mw.length", 32, "BIND_MW: its length (0: unbind a type 1 window)")
	RxeSendMWMRLKey  = abi32("wr.wr.mw.mr_lkey", 40, "BIND_MW: the region it opens onto")
	RxeSendMWRKey    = abi32("wr.wr.mw.mw_rkey", 44, "BIND_MW: the window's R_Key now")
	RxeSendMWNewRKey = abi32("wr.wr.mw.rkey", 48, "BIND_MW: its low byte becomes the window's key")
	RxeSendMWAccess  = abi32("wr.wr.mw.access", 52, "BIND_MW: remote access through the window (IBV_ACCESS_*)")
	RxeSendLength    = abi32("dma.length", 184, "message length in bytes")
	RxeSendNumSGE    = abi32("dma.num_sge", 196, "SGEs in dma.sge (not read with IBV_SEND_INLINE)")
	rxeSendInline    = Field{Name: "dma.inline_data", Offset: RxeSendWQESize, Size: 1, Count: -1, CType: "__u8",
		Doc: "IBV_SEND_INLINE: the payload, dma.length bytes"}
	rxeSendSGE = Field{Name: "dma.sge", Offset: RxeSendWQESize, Size: RxeSGESize, Count: -1, CType: "struct rxe_sge",
		Doc: "otherwise: dma.num_sge SGEs (same bytes as dma.inline_data)"}
)

// RxeNetworkTypeIPv4 is RXE_NETWORK_TYPE_IPV4 of rdma_user_rxe.h, the
// network type of an address vector whose GIDs are IPv4-mapped.
const RxeNetworkTypeIPv4 = 1

// RxeSendIsAtomic reports whether a send entry's opcode reads the atomic
// member of the wr.wr union (its rkey past the operands) rather than rdma.
func RxeSendIsAtomic(opcode uint32) bool {
	return opcode == IBVWRAtomicCmpAndSwp || opcode == IBVWRAtomicFetchAdd
}

// PutRxeSendRemote writes the remote side of a send entry into slot as
// librxe does: the member of the wr.wr union its opcode reads.
func PutRxeSendRemote(slot []byte, opcode uint32, remoteAddr uint64, rkey uint32, compareAdd, swap uint64) {
	RxeSendRemoteAddr.Put(slot, remoteAddr)
	if RxeSendIsAtomic(opcode) {
		RxeSendCompareAdd.Put(slot, compareAdd)
		RxeSendSwap.Put(slot, swap)
		RxeSendAtomicRKey.Put(slot, rkey)
		return
	}
	RxeSendRKey.Put(slot, rkey)
}

// RxeAV is what a UD send entry's address vector (struct rxe_av) holds
// that the device reads.
type RxeAV struct {
	NetworkType  uint8
	DMAC         [6]byte
	DGID         [16]byte
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// PutRxeSendUD writes the UD member of a send entry as librxe does for an
// address handle of ah_num 0 (the vector copied into the entry).
func PutRxeSendUD(slot []byte, remoteQPN, remoteQKey, ahNum uint32, av RxeAV) {
	RxeSendUDRemoteQPN.Put(slot, remoteQPN)
	RxeSendUDRemoteQKey.Put(slot, remoteQKey)
	RxeSendUDAHNum.Put(slot, ahNum)
	RxeSendUDNetworkType.Put(slot, av.NetworkType)
	copy(slot[RxeSendUDDMAC.Offset:], av.DMAC[:])
	copy(slot[RxeSendUDDGID.Offset:], av.DGID[:])
	RxeSendUDSGIDIndex.Put(slot, av.SGIDIndex)
	RxeSendUDHopLimit.Put(slot, av.HopLimit)
	RxeSendUDTrafficClass.Put(slot, av.TrafficClass)
}

// RxeSendWQE is struct rxe_send_wqe.
var RxeSendWQE = ABILayout{"struct rxe_send_wqe", "rdma/rdma_user_rxe.h", RxeSendWQESize,
	"Send queue entry, written by user space (librxe), read by the device. Its other fields (status, state, iova, " +
		"PSNs, dma.resid, dma.cur_sge, dma.sge_offset, ...) are rdma_rxe's private progress state: the device " +
		"neither reads nor writes them.",
	[]Field{RxeSendWRID.Field, RxeSendOpcode.Field, RxeSendFlags.Field, RxeSendImm.Field, RxeSendInvRKey.Field, RxeSendRemoteAddr.Field,
		RxeSendRKey.Field, RxeSendCompareAdd.Field, RxeSendSwap.Field, RxeSendAtomicRKey.Field,
		RxeSendUDRemoteQPN.Field, RxeSendUDRemoteQKey.Field, RxeSendUDAHNum.Field, RxeSendUDNetworkType.Field,
		RxeSendUDDMAC, RxeSendUDDGID, RxeSendUDSGIDIndex.Field, RxeSendUDHopLimit.Field, RxeSendUDTrafficClass.Field,
		RxeSendMWAddr.Field, RxeSendMWLength.Field, RxeSendMWMRLKey.Field, RxeSendMWRKey.Field, RxeSendMWNewRKey.Field, RxeSendMWAccess.Field,
		RxeSendLength.Field, RxeSendNumSGE.Field, rxeSendInline, rxeSendSGE}}

// Receive queue entry fields (struct rxe_recv_wqe) the device reads.
var (
	RxeRecvWRID   = abi64("wr_id", 0, "returned in the completion")
	RxeRecvLength = abi32("dma.length", 16, "bytes the entry takes")
	RxeRecvNumSGE = abi32("dma.num_sge", 28, "SGEs in dma.sge")
	rxeRecvSGE    = Field{Name: "dma.sge", Offset: RxeRecvWQESize, Size: RxeSGESize, Count: -1, CType: "struct rxe_sge",
		Doc: "dma.num_sge SGEs"}
)

// RxeRecvWQE is struct rxe_recv_wqe.
var RxeRecvWQE = ABILayout{"struct rxe_recv_wqe", "rdma/rdma_user_rxe.h", RxeRecvWQESize,
	"Receive queue (and shared receive queue) entry, written by user space, read by the device.",
	[]Field{RxeRecvWRID.Field, RxeRecvLength.Field, RxeRecvNumSGE.Field, rxeRecvSGE}}

// Completion fields (struct ib_uverbs_wc, the same bytes as struct ibv_wc).
var (
	RxeCQEWRID         = abi64("wr_id", 0, "the work request's wr_id")
	RxeCQEStatus       = abi32("status", 8, "IBV_WC_* status")
	RxeCQEOpcode       = abi32("opcode", 12, "IBV_WC_* opcode")
	RxeCQEVendorErr    = abi32("vendor_err", 16, "0")
	RxeCQEByteLen      = abi32("byte_len", 20, "success: the message's length (received, sent, written or read)")
	RxeCQEImm          = abiBe32("ex.imm_data", 24, "with IBV_WC_WITH_IMM: the immediate data, network byte order")
	RxeCQEInvRKey      = abi32("ex.invalidate_rkey", 24, "with IB_WC_WITH_INVALIDATE: the R_Key a SEND with Invalidate invalidated")
	RxeCQEQPNum        = abi32("qp_num", 28, "the local QP")
	RxeCQESrcQP        = abi32("src_qp", 32, "UD receives: the sender's QP; 0 otherwise")
	RxeCQEFlags        = abi32("wc_flags", 36, "IBV_WC_GRH, IBV_WC_WITH_IMM")
	RxeCQEPKeyIndex    = abi16("pkey_index", 40, "0")
	RxeCQESLID         = abi16("slid", 42, "0 (RoCE)")
	RxeCQESL           = abi8("sl", 44, "0")
	RxeCQEDLIDPathBits = abi8("dlid_path_bits", 45, "0")
	RxeCQEPortNum      = abi8("port_num", 46, "1")
	rxeCQEReserved     = abi8("reserved", 47, "0").Field
)

// RxeCQE is struct ib_uverbs_wc, a completion queue entry of an rxe
// completion queue.
var RxeCQE = ABILayout{"struct ib_uverbs_wc", "rdma/ib_user_verbs.h", RxeCQESize,
	"Completion queue entry, written by the device at the start of a slot, read by user space (librxe copies it into " +
		"the caller's struct ibv_wc). The device writes all 48 bytes.",
	[]Field{RxeCQEWRID.Field, RxeCQEStatus.Field, RxeCQEOpcode.Field, RxeCQEVendorErr.Field, RxeCQEByteLen.Field,
		RxeCQEImm.Field, RxeCQEInvRKey.Field, RxeCQEQPNum.Field, RxeCQESrcQP.Field, RxeCQEFlags.Field, RxeCQEPKeyIndex.Field,
		RxeCQESLID.Field, RxeCQESL.Field, RxeCQEDLIDPathBits.Field, RxeCQEPortNum.Field, rxeCQEReserved}}

// RxeLayouts lists the rdma_rxe structures the device reads or writes.
var RxeLayouts = []*ABILayout{&RxeQueueBuf, &RxeSGE, &RxeSendWQE, &RxeRecvWQE, &RxeCQE}

// Verbs values in the rxe queues: libibverbs' IBV_* names, the same values
// as the kernel's (IB_UVERBS_WR_* for the work request opcodes, IB_SEND_*,
// IB_WC_* for the rest).
const (
	IBVWRRDMAWrite        = 0
	IBVWRRDMAWriteWithImm = 1
	IBVWRSend             = 2
	IBVWRSendWithImm      = 3
	IBVWRRDMARead         = 4
	IBVWRAtomicCmpAndSwp  = 5
	IBVWRAtomicFetchAdd   = 6
	IBVWRLocalInv         = 7
	IBVWRBindMW           = 8
	IBVWRSendWithInv      = 9
	IBVWRTSO              = 10
	// IBVWRAtomicWrite (rdma-core 44; Linux 6.2's uapi, not 6.1's):
	// wr.wr.rdma names the remote word, dma.atomic_wr (the inline data's
	// bytes) holds its 8 new bytes, dma.length is 8. Its completion's
	// opcode is IBVWCAtomicWrite.
	IBVWRAtomicWrite = 15
	IBVWCAtomicWrite = 9
	// IBWRRegMR is the kernel's IB_WR_REG_MR (no user-space verb posts it):
	// the entry holds a struct npfnic_reg_wr. Its completion's opcode is
	// IBWCRegMR (Linux 6.1's IB_WC_REG_MR).
	IBWRRegMR = 0x20
	IBWCRegMR = 8

	IBVSendFence     = 1 << 0
	IBVSendSignaled  = 1 << 1
	IBVSendSolicited = 1 << 2
	IBVSendInline    = 1 << 3
	IBVSendIPCsum    = 1 << 4

	IBVWCSuccess        = 0
	IBVWCLocLenErr      = 1
	IBVWCLocQPOpErr     = 2
	IBVWCLocProtErr     = 4
	IBVWCMWBindErr      = 6
	IBVWCWRFlushErr     = 5
	IBVWCBadRespErr     = 7
	IBVWCLocAccessErr   = 8
	IBVWCRemInvReqErr   = 9
	IBVWCRemAccessErr   = 10
	IBVWCRemOpErr       = 11
	IBVWCRetryExcErr    = 12
	IBVWCRNRRetryExcErr = 13
	IBVWCFatalErr       = 19
	IBVWCGeneralErr     = 21

	IBVWCSend            = 0
	IBVWCRDMAWrite       = 1
	IBVWCRDMARead        = 2
	IBVWCCompSwap        = 3
	IBVWCFetchAdd        = 4
	IBVWCBindMW          = 5
	IBVWCLocalInv        = 6
	IBVWCRecv            = 1 << 7
	IBVWCRecvRDMAWithImm = IBVWCRecv + 1

	IBVWCGRH     = 1 << 0
	IBVWCWithImm = 1 << 1
	// IBVWCWithInvalidate is the kernel's IB_WC_WITH_INVALIDATE, which
	// rdma_rxe writes into user CQEs and librxe passes on unchanged:
	// libibverbs' IBV_WC_WITH_INV is 1 << 3, so a program sees this as
	// IBV_WC_IP_CSUM_OK. npfnic speaks rdma_rxe's ABI as it is.
	IBVWCWithInvalidate = 1 << 2
)

// RxeValues lists the verbs values of the rxe queues for the datasheet,
// by their libibverbs names (not exported to the C header: the kernel has
// its own).
var RxeValues = []Value{
	{"IBV_WR_RDMA_WRITE", IBVWRRDMAWrite, "wr.opcode: RDMA WRITE"},
	{"IBV_WR_RDMA_WRITE_WITH_IMM", IBVWRRDMAWriteWithImm, "RDMA WRITE with immediate data (consumes a receive)"},
	{"IBV_WR_SEND", IBVWRSend, "SEND"},
	{"IBV_WR_SEND_WITH_IMM", IBVWRSendWithImm, "SEND with immediate data"},
	{"IBV_WR_RDMA_READ", IBVWRRDMARead, "RDMA READ"},
	{"IBV_WR_ATOMIC_CMP_AND_SWP", IBVWRAtomicCmpAndSwp, "atomic compare and swap of the 8 aligned bytes at wr.wr.atomic.remote_addr; the original value lands in the 8-byte SGL"},
	{"IBV_WR_ATOMIC_FETCH_AND_ADD", IBVWRAtomicFetchAdd, "atomic fetch and add, as CMP_AND_SWP"},
	{"IBV_WR_LOCAL_INV", IBVWRLocalInv, "unbind the type 2 window of wr.ex.invalidate_rkey, or free the fast registration region it is the key of (IBV_WC_LOC_QP_OP_ERR if there is none)"},
	{"IBV_WR_BIND_MW", IBVWRBindMW, "bind the window of wr.wr.mw (IBV_WC_MW_BIND_ERR if the rules refuse it)"},
	{"IBV_WR_SEND_WITH_INV", IBVWRSendWithInv, "SEND whose receiver unbinds its type 2 window of wr.ex.invalidate_rkey, or frees its fast registration region of that key"},
	{"IBV_WR_TSO", IBVWRTSO, "not supported"},
	{"IB_WR_REG_MR", IBWRRegMR, "kernel QPs: register the fast registration region of the struct npfnic_reg_wr at NPFNIC_RXE_SEND_REG_OFFSET (IBV_WC_LOC_QP_OP_ERR if the rules refuse it); completes as IB_WC_REG_MR (8)"},
	{"IBV_SEND_FENCE", IBVSendFence, "wr.send_flags: wait for earlier RDMA READs"},
	{"IBV_SEND_SIGNALED", IBVSendSignaled, "complete successfully into the CQ (errors always are)"},
	{"IBV_SEND_SOLICITED", IBVSendSolicited, "set the solicited event bit of the last packet"},
	{"IBV_SEND_INLINE", IBVSendInline, "the payload is in the entry (dma.inline_data), not behind SGEs"},
	{"IBV_SEND_IP_CSUM", IBVSendIPCsum, "ignored"},
	{"IBV_WC_SUCCESS", IBVWCSuccess, "status: success"},
	{"IBV_WC_LOC_LEN_ERR", IBVWCLocLenErr, "local length error: a message longer than its buffers or than 2^31 bytes, inline data over the QP's limit"},
	{"IBV_WC_LOC_QP_OP_ERR", IBVWCLocQPOpErr, "local QP operation error: an opcode the device does not implement, too many SGEs, inline data with RDMA READ"},
	{"IBV_WC_LOC_PROT_ERR", IBVWCLocProtErr, "local protection error: an SGE outside its memory region, of another PD, or a bad lkey"},
	{"IBV_WC_MW_BIND_ERR", IBVWCMWBindErr, "memory window bind error: no such window, another PD, a bound type 2 window, a region without MW_BIND, a range outside it"},
	{"IBV_WC_WR_FLUSH_ERR", IBVWCWRFlushErr, "flushed: the QP is in the error state"},
	{"IBV_WC_BAD_RESP_ERR", IBVWCBadRespErr, "bad response from the responder"},
	{"IBV_WC_LOC_ACCESS_ERR", IBVWCLocAccessErr, "local access error: a page of the buffer can not be made present"},
	{"IBV_WC_REM_INV_REQ_ERR", IBVWCRemInvReqErr, "the responder found the request invalid"},
	{"IBV_WC_REM_ACCESS_ERR", IBVWCRemAccessErr, "remote access error: bad rkey, range or access rights"},
	{"IBV_WC_REM_OP_ERR", IBVWCRemOpErr, "the responder could not complete the operation"},
	{"IBV_WC_RETRY_EXC_ERR", IBVWCRetryExcErr, "transport retry counter exceeded"},
	{"IBV_WC_RNR_RETRY_EXC_ERR", IBVWCRNRRetryExcErr, "RNR retry counter exceeded"},
	{"IBV_WC_FATAL_ERR", IBVWCFatalErr, "fatal error"},
	{"IBV_WC_GENERAL_ERR", IBVWCGeneralErr, "general error"},
	{"IBV_WC_SEND", IBVWCSend, "opcode: SEND completed"},
	{"IBV_WC_RDMA_WRITE", IBVWCRDMAWrite, "RDMA WRITE completed"},
	{"IBV_WC_RDMA_READ", IBVWCRDMARead, "RDMA READ completed"},
	{"IBV_WC_COMP_SWAP", IBVWCCompSwap, "atomic compare and swap completed"},
	{"IBV_WC_FETCH_ADD", IBVWCFetchAdd, "atomic fetch and add completed"},
	{"IBV_WC_BIND_MW", IBVWCBindMW, "memory window bound"},
	{"IB_WC_REG_MR", IBWCRegMR, "REG_MR completed (kernel QPs)"},
	{"IBV_WC_LOCAL_INV", IBVWCLocalInv, "memory window invalidated"},
	{"IBV_WC_RECV", IBVWCRecv, "a SEND received"},
	{"IBV_WC_RECV_RDMA_WITH_IMM", IBVWCRecvRDMAWithImm, "an RDMA WRITE with immediate data received"},
	{"IBV_WC_GRH", IBVWCGRH, "wc_flags: set on receive completions, as rdma_rxe does (RoCEv2 packets carry an IP header in place of the GRH)"},
	{"IBV_WC_WITH_IMM", IBVWCWithImm, "wc_flags: ex.imm_data is valid"},
	{"IBV_WC_WITH_INVALIDATE", IBVWCWithInvalidate, "wc_flags: ex.invalidate_rkey is valid (the kernel's IB_WC_WITH_INVALIDATE, as rdma_rxe writes it; libibverbs' IBV_WC_WITH_INV is 1 << 3)"},
}

// RxeQueuesDoc is how the device uses the rxe queues.
const RxeQueuesDoc = `RDMA queue pairs and completion queues use rdma_rxe's user ABI, so Debian's
librxe provider (ibverbs-providers) drives npfnic unchanged: user space
writes work queue entries and reads completions in the queues it mmaps, and
the device, not a kernel driver, reads the send and receive queues and
writes the completion queues. The formats are Linux's, defined in the
kernel's include/uapi/rdma/rdma_user_rxe.h and ib_user_verbs.h (x86-64); the
guest driver uses those headers, and the tables below give the offsets the
device uses.

A queue is one buffer: struct rxe_queue_buf, then the slots, each 1 <<
log2_elem_size bytes, a power of two; the number of slots is a power of two,
index_mask + 1. The producer and consumer indices are slot numbers (masked,
not free-running). The queue is empty when they are equal and full when
consumer_index == (producer_index + 1) & index_mask, so it holds at most
index_mask entries. The driver registers each queue's buffer (address and
size), its slot count and its element size with the device, and writes
log2_elem_size and index_mask into the header for librxe. The device never
reads them back: it uses the registered values, and the buffer it may touch
is the registered range.

Send and receive queues: user space produces, the device consumes. The device
keeps its own consumer index and reads producer_index (masked), fetches the
entries in between in order, and writes consumer_index when it retires an
entry (on completion, so a slot is reused only after its completion). It
never reads consumer_index back. Completion queues: the device produces,
user space consumes. The device keeps its own producer index, reads
consumer_index (masked), writes the 48-byte struct ib_uverbs_wc at the start
of its slot and then producer_index; a completion that finds the queue full
is not written, and the completion queue is in error (the CQ error event).

Memory order. librxe writes an entry, then stores producer_index with
release order, and loads the device's indices with acquire order. The
device reads producer_index before the entry and writes a completion before
producer_index, in program order; on x86-64 (TSO) loads are not reordered
with older loads nor stores with older stores, which is all the handshake
needs. Indices are 32-bit aligned fields, and a queue has at most 65536
slots, so an index fits in its low 16 bits: a load or store the copy splits
into 16-bit halves still sees a whole old or new index. Each entry is copied
once from guest memory and parsed from that copy, so user space rewriting a
slot while the device reads it yields one well-formed or malformed entry,
never a mix the checks did not see.

The rings are user-writable, so every value in them is untrusted. The
device masks every index and reads nothing outside the registered buffer.
A send entry is checked before it becomes a work request: the opcode must be
IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
IBV_WR_RDMA_WRITE_WITH_IMM or IBV_WR_RDMA_READ (else IBV_WC_LOC_QP_OP_ERR);
with IBV_SEND_INLINE (not allowed with RDMA READ: IBV_WC_LOC_QP_OP_ERR) the
payload is the dma.length bytes at dma.inline_data, at most the QP's
inline limit (else IBV_WC_LOC_LEN_ERR); otherwise dma.num_sge must not
exceed the QP's SGE limit (else IBV_WC_LOC_QP_OP_ERR), the message is
dma.length bytes (at most 2^31), taken from the SGEs in order, which must
cover it (else IBV_WC_LOC_LEN_ERR), and no SGE may wrap past the end of the
address space (IBV_WC_LOC_PROT_ERR). A receive entry is checked the same way
(dma.length bytes over at most the QP's SGE limit of SGEs). The lkey, PD,
range and access rights of each SGE are checked against the memory regions
when the bytes are moved (IBV_WC_LOC_PROT_ERR). A malformed entry completes
in its turn (after the entries before it, and the device fetches nothing
past it) with its wr_id and the status above, and the QP goes to the error
state; an index or entry the device can not read from guest memory puts the
queue in error.`
