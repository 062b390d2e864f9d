package main

import "github.com/npfnic/npfnic/vdevice/hw"

// The guest kernel's ABI this tool speaks, written once here and checked
// field by field against the kernel's own headers by TestABIMatchesKernel:
// the legacy write() commands of the uverbs character device
// (include/uapi/rdma/ib_user_verbs.h), the rxe driver data of their
// responses (include/uapi/rdma/rdma_user_rxe.h), and the verbs values
// (ib_verbs.h's enums). The rxe queues themselves are vdevice/hw's tables
// (hw.RxeQueueBuf, hw.RxeSendWQE, hw.RxeRecvWQE, hw.RxeCQE): this file adds
// only the fields of the queue entries that librxe writes for rdma_rxe's
// sake and the device never reads, so that the tool drives rdma_rxe too.

func u8f(name string, off int) hw.U8 {
	return hw.U8{Field: hw.Field{Name: name, Offset: off, Size: 1, CType: "__u8"}}
}
func u16f(name string, off int) hw.Le16 {
	return hw.Le16{Field: hw.Field{Name: name, Offset: off, Size: 2, CType: "__u16"}}
}
func u32f(name string, off int) hw.Le32 {
	return hw.Le32{Field: hw.Field{Name: name, Offset: off, Size: 4, CType: "__u32"}}
}
func s32f(name string, off int) hw.Le32 {
	return hw.Le32{Field: hw.Field{Name: name, Offset: off, Size: 4, CType: "__s32"}}
}
func u64f(name string, off int) hw.Le64 {
	return hw.Le64{Field: hw.Field{Name: name, Offset: off, Size: 8, CType: "__aligned_u64"}}
}

// uverbs is a structure of include/uapi/rdma/ib_user_verbs.h.
func uverbs(name string, size int, fs ...any) hw.ABILayout {
	return hw.ABILayout{Struct: name, Header: "rdma/ib_user_verbs.h", Size: size, Fields: fields(fs...)}
}

// rxe is a structure of include/uapi/rdma/rdma_user_rxe.h.
func rxe(name string, size int, fs ...any) hw.ABILayout {
	return hw.ABILayout{Struct: name, Header: "rdma/rdma_user_rxe.h", Size: size, Fields: fields(fs...)}
}

func fields(fs ...any) []hw.Field {
	out := make([]hw.Field, 0, len(fs))
	for _, f := range fs {
		switch f := f.(type) {
		case hw.U8:
			out = append(out, f.Field)
		case hw.Le16:
			out = append(out, f.Field)
		case hw.Le32:
			out = append(out, f.Field)
		case hw.Le64:
			out = append(out, f.Field)
		case hw.Field:
			out = append(out, f)
		default:
			panic("abi: not a field")
		}
	}
	return out
}

// struct ib_uverbs_cmd_hdr: every write() starts with it. in_words counts
// the whole write, header included, in 32-bit words; out_words the
// response buffer the command's response pointer names.
var (
	hdrCommand  = u32f("command", 0)
	hdrInWords  = u16f("in_words", 4)
	hdrOutWords = u16f("out_words", 6)
	cmdHdr      = uverbs("struct ib_uverbs_cmd_hdr", 8, hdrCommand, hdrInWords, hdrOutWords)
)

// respPtr is the response pointer every command with a response starts with.
var respPtr = u64f("response", 0)

var (
	getContext         = uverbs("struct ib_uverbs_get_context", 8, respPtr)
	getContextAsyncFD  = u32f("async_fd", 0)
	getContextNumComp  = u32f("num_comp_vectors", 4)
	getContextResp     = uverbs("struct ib_uverbs_get_context_resp", 8, getContextAsyncFD, getContextNumComp)
	allocPD            = uverbs("struct ib_uverbs_alloc_pd", 8, respPtr)
	allocPDRespHandle  = u32f("pd_handle", 0)
	allocPDResp        = uverbs("struct ib_uverbs_alloc_pd_resp", 4, allocPDRespHandle)
	deallocPDHandle    = u32f("pd_handle", 0)
	deallocPD          = uverbs("struct ib_uverbs_dealloc_pd", 4, deallocPDHandle)
	regMRStart         = u64f("start", 8)
	regMRLength        = u64f("length", 16)
	regMRHCAVA         = u64f("hca_va", 24)
	regMRPD            = u32f("pd_handle", 32)
	regMRAccess        = u32f("access_flags", 36)
	regMR              = uverbs("struct ib_uverbs_reg_mr", 40, respPtr, regMRStart, regMRLength, regMRHCAVA, regMRPD, regMRAccess)
	regMRRespHandle    = u32f("mr_handle", 0)
	regMRRespLKey      = u32f("lkey", 4)
	regMRRespRKey      = u32f("rkey", 8)
	regMRResp          = uverbs("struct ib_uverbs_reg_mr_resp", 12, regMRRespHandle, regMRRespLKey, regMRRespRKey)
	deregMRHandle      = u32f("mr_handle", 0)
	deregMR            = uverbs("struct ib_uverbs_dereg_mr", 4, deregMRHandle)
	createCQUser       = u64f("user_handle", 8)
	createCQCQE        = u32f("cqe", 16)
	createCQVector     = u32f("comp_vector", 20)
	createCQChannel    = s32f("comp_channel", 24)
	createCQ           = uverbs("struct ib_uverbs_create_cq", 32, respPtr, createCQUser, createCQCQE, createCQVector, createCQChannel)
	createCQRespHandle = u32f("cq_handle", 0)
	createCQRespCQE    = u32f("cqe", 4)
	createCQResp       = uverbs("struct ib_uverbs_create_cq_resp", 8, createCQRespHandle, createCQRespCQE)
	destroyCQHandle    = u32f("cq_handle", 8)
	destroyCQ          = uverbs("struct ib_uverbs_destroy_cq", 16, respPtr, destroyCQHandle)
	destroyCQResp      = uverbs("struct ib_uverbs_destroy_cq_resp", 8)
)

// struct ib_uverbs_create_qp and its response.
var (
	createQPUser       = u64f("user_handle", 8)
	createQPPD         = u32f("pd_handle", 16)
	createQPSendCQ     = u32f("send_cq_handle", 20)
	createQPRecvCQ     = u32f("recv_cq_handle", 24)
	createQPSRQ        = u32f("srq_handle", 28)
	createQPMaxSendWR  = u32f("max_send_wr", 32)
	createQPMaxRecvWR  = u32f("max_recv_wr", 36)
	createQPMaxSendSGE = u32f("max_send_sge", 40)
	createQPMaxRecvSGE = u32f("max_recv_sge", 44)
	createQPMaxInline  = u32f("max_inline_data", 48)
	createQPSigAll     = u8f("sq_sig_all", 52)
	createQPType       = u8f("qp_type", 53)
	createQPIsSRQ      = u8f("is_srq", 54)
	createQP           = uverbs("struct ib_uverbs_create_qp", 56, respPtr, createQPUser,
		createQPPD, createQPSendCQ, createQPRecvCQ, createQPSRQ, createQPMaxSendWR, createQPMaxRecvWR, createQPMaxSendSGE,
		createQPMaxRecvSGE, createQPMaxInline, createQPSigAll, createQPType, createQPIsSRQ)

	createQPRespHandle     = u32f("qp_handle", 0)
	createQPRespQPN        = u32f("qpn", 4)
	createQPRespMaxSendWR  = u32f("max_send_wr", 8)
	createQPRespMaxRecvWR  = u32f("max_recv_wr", 12)
	createQPRespMaxSendSGE = u32f("max_send_sge", 16)
	createQPRespMaxRecvSGE = u32f("max_recv_sge", 20)
	createQPRespMaxInline  = u32f("max_inline_data", 24)
	createQPResp           = uverbs("struct ib_uverbs_create_qp_resp", 32, createQPRespHandle,
		createQPRespQPN, createQPRespMaxSendWR, createQPRespMaxRecvWR, createQPRespMaxSendSGE, createQPRespMaxRecvSGE,
		createQPRespMaxInline)

	destroyQPHandle = u32f("qp_handle", 8)
	destroyQP       = uverbs("struct ib_uverbs_destroy_qp", 16, respPtr, destroyQPHandle)
	destroyQPResp   = uverbs("struct ib_uverbs_destroy_qp_resp", 4)
)

// struct ib_uverbs_modify_qp (no response): the address vector is its
// dest, a struct ib_uverbs_qp_dest.
var (
	modifyDestDGID      = hw.Field{Name: "dest.dgid", Offset: 0, Size: 1, Count: 16, CType: "__u8[16]"}
	modifyDestSGIDIndex = u8f("dest.sgid_index", 24)
	modifyDestHopLimit  = u8f("dest.hop_limit", 25)
	modifyDestIsGlobal  = u8f("dest.is_global", 30)
	modifyDestPort      = u8f("dest.port_num", 31)
	modifyHandle        = u32f("qp_handle", 64)
	modifyMask          = u32f("attr_mask", 68)
	modifyQKey          = u32f("qkey", 72)
	modifyRQPSN         = u32f("rq_psn", 76)
	modifySQPSN         = u32f("sq_psn", 80)
	modifyDestQPN       = u32f("dest_qp_num", 84)
	modifyAccess        = u32f("qp_access_flags", 88)
	modifyPKeyIndex     = u16f("pkey_index", 92)
	modifyState         = u8f("qp_state", 96)
	modifyPathMTU       = u8f("path_mtu", 98)
	modifyMaxRdAtomic   = u8f("max_rd_atomic", 101)
	modifyMaxDestRd     = u8f("max_dest_rd_atomic", 102)
	modifyMinRNRTimer   = u8f("min_rnr_timer", 103)
	modifyPort          = u8f("port_num", 104)
	modifyTimeout       = u8f("timeout", 105)
	modifyRetryCnt      = u8f("retry_cnt", 106)
	modifyRNRRetry      = u8f("rnr_retry", 107)
	modifyQP            = uverbs("struct ib_uverbs_modify_qp", 112, modifyDestDGID,
		modifyDestSGIDIndex, modifyDestHopLimit, modifyDestIsGlobal, modifyDestPort, modifyHandle, modifyMask,
		modifyQKey, modifyRQPSN, modifySQPSN, modifyDestQPN, modifyAccess, modifyPKeyIndex, modifyState, modifyPathMTU,
		modifyMaxRdAtomic, modifyMaxDestRd, modifyMinRNRTimer, modifyPort, modifyTimeout, modifyRetryCnt,
		modifyRNRRetry)
)

// struct ib_uverbs_create_srq and its response, and destroy_srq.
var (
	createSRQUser          = u64f("user_handle", 8)
	createSRQPD            = u32f("pd_handle", 16)
	createSRQMaxWR         = u32f("max_wr", 20)
	createSRQMaxSGE        = u32f("max_sge", 24)
	createSRQLimit         = u32f("srq_limit", 28)
	createSRQ              = uverbs("struct ib_uverbs_create_srq", 32, respPtr, createSRQUser, createSRQPD, createSRQMaxWR, createSRQMaxSGE, createSRQLimit)
	createSRQRespHandle    = u32f("srq_handle", 0)
	createSRQRespMaxWR     = u32f("max_wr", 4)
	createSRQRespMaxSGE    = u32f("max_sge", 8)
	createSRQRespSRQN      = u32f("srqn", 12)
	createSRQResp          = uverbs("struct ib_uverbs_create_srq_resp", 16, createSRQRespHandle, createSRQRespMaxWR, createSRQRespMaxSGE, createSRQRespSRQN)
	destroySRQHandle       = u32f("srq_handle", 8)
	destroySRQ             = uverbs("struct ib_uverbs_destroy_srq", 16, respPtr, destroySRQHandle)
	destroySRQRespReported = u32f("events_reported", 0)
	destroySRQResp         = uverbs("struct ib_uverbs_destroy_srq_resp", 4, destroySRQRespReported)
)

// struct ib_uverbs_post_send with no work requests: librxe's doorbell.
var (
	postSendHandle   = u32f("qp_handle", 8)
	postSendWRCount  = u32f("wr_count", 12)
	postSendSGECount = u32f("sge_count", 16)
	postSendWQESize  = u32f("wqe_size", 20)
	postSend         = uverbs("struct ib_uverbs_post_send", 24, respPtr, postSendHandle,
		postSendWRCount, postSendSGECount, postSendWQESize)
	postSendResp = uverbs("struct ib_uverbs_post_send_resp", 4)
	// uverbsSendWR is struct ib_uverbs_send_wr, whose size a POST_SEND
	// names (wqe_size) even with no work request.
	uverbsSendWR = uverbs("struct ib_uverbs_send_wr", 56)
)

// struct ib_uverbs_async_event_desc, what a read() of the async fd gives.
var (
	asyncElement = u64f("element", 0)
	asyncType    = u32f("event_type", 8)
	asyncEvent   = uverbs("struct ib_uverbs_async_event_desc", 16, asyncElement, asyncType)
)

// The rxe driver data of the create responses: where to mmap each queue.
var (
	cqRespOffset   = u64f("mi.offset", 0)
	cqRespSize     = u32f("mi.size", 8)
	rxeCQResp      = rxe("struct rxe_create_cq_resp", 16, cqRespOffset, cqRespSize)
	qpRespRQOffset = u64f("rq_mi.offset", 0)
	qpRespRQSize   = u32f("rq_mi.size", 8)
	qpRespSQOffset = u64f("sq_mi.offset", 16)
	qpRespSQSize   = u32f("sq_mi.size", 24)
	rxeQPResp      = rxe("struct rxe_create_qp_resp", 32, qpRespRQOffset, qpRespRQSize, qpRespSQOffset, qpRespSQSize)
	srqRespOffset  = u64f("mi.offset", 0)
	srqRespSize    = u32f("mi.size", 8)
	srqRespNum     = u32f("srq_num", 16)
	rxeSRQResp     = rxe("struct rxe_create_srq_resp", 24, srqRespOffset, srqRespSize, srqRespNum)
)

// Fields of the queue entries that librxe fills for rdma_rxe's requester
// and responder (their progress state starts from them) and npfnic's
// device ignores: the tool writes them as librxe does. A UD entry's
// address vector has the port and, as socket addresses, the IPv4
// addresses of its GIDs, which rdma_rxe routes by.
var (
	sendUDPort       = u8f("wr.wr.ud.av.port_num", 56)
	sendUDSGIDFamily = hw.Le16{Field: hw.Field{Name: "wr.wr.ud.av.sgid_addr._sockaddr_in.sin_family", Offset: 88, Size: 2, CType: "__kernel_sa_family_t"}}
	sendUDSGIDAddr   = hw.Field{Name: "wr.wr.ud.av.sgid_addr._sockaddr_in.sin_addr", Offset: 92, Size: 4, CType: "struct in_addr"}
	sendUDDGIDFamily = hw.Le16{Field: hw.Field{Name: "wr.wr.ud.av.dgid_addr._sockaddr_in.sin_family", Offset: 116, Size: 2, CType: "__kernel_sa_family_t"}}
	sendUDDGIDAddr   = hw.Field{Name: "wr.wr.ud.av.dgid_addr._sockaddr_in.sin_addr", Offset: 120, Size: 4, CType: "struct in_addr"}
	sendState        = u32f("state", 148)
	sendIOVA         = u64f("iova", 152)
	sendSSN          = u32f("ssn", 176)
	sendResid        = u32f("dma.resid", 188)
	sendCurSGE       = u32f("dma.cur_sge", 192)
	sendSGEOffset    = u32f("dma.sge_offset", 200)
	rxeSendExtra     = rxe("struct rxe_send_wqe", hw.RxeSendWQESize, sendUDPort, sendUDSGIDFamily, sendUDSGIDAddr,
		sendUDDGIDFamily, sendUDDGIDAddr, sendState, sendIOVA, sendSSN, sendResid, sendCurSGE, sendSGEOffset)
	recvResid     = u32f("dma.resid", 20)
	recvCurSGE    = u32f("dma.cur_sge", 24)
	recvSGEOffset = u32f("dma.sge_offset", 32)
	rxeRecvExtra  = rxe("struct rxe_recv_wqe", hw.RxeRecvWQESize, recvResid, recvCurSGE, recvSGEOffset)
)

// abiLayouts lists the structures above for the kernel check.
var abiLayouts = []*hw.ABILayout{&cmdHdr, &getContext, &getContextResp, &allocPD, &allocPDResp, &deallocPD, &regMR,
	&regMRResp, &deregMR, &createCQ, &createCQResp, &destroyCQ, &destroyCQResp, &createQP, &createQPResp, &destroyQP,
	&destroyQPResp, &modifyQP, &createSRQ, &createSRQResp, &destroySRQ, &destroySRQResp, &postSend, &postSendResp,
	&uverbsSendWR, &asyncEvent, &rxeCQResp, &rxeQPResp, &rxeSRQResp, &rxeSendExtra, &rxeRecvExtra}

// Legacy write() commands (enum ib_uverbs_write_cmds).
const (
	cmdGetContext = 0
	cmdAllocPD    = 3
	cmdDeallocPD  = 4
	cmdRegMR      = 9
	cmdDeregMR    = 13
	cmdCreateCQ   = 18
	cmdDestroyCQ  = 20
	cmdCreateQP   = 24
	cmdModifyQP   = 26
	cmdDestroyQP  = 27
	cmdPostSend   = 28
	cmdCreateSRQ  = 32
	cmdDestroySRQ = 35
)

// Verbs values (the uapi's IB_UVERBS_* and ib_verbs.h's enums, the same
// numbers as libibverbs' IBV_*).
const (
	accessLocalWrite   = 1
	accessRemoteWrite  = 2
	accessRemoteRead   = 4
	accessRemoteAtomic = 8
	accessOnDemand     = 0x40

	qptRC = 2
	qptUD = 4

	// afInet is AF_INET (linux/socket.h, not uapi), the family of an IPv4
	// socket address.
	afInet = 2

	qpsReset = 0
	qpsInit  = 1
	qpsRTR   = 2
	qpsRTS   = 3
	qpsErr   = 6

	mtu1024 = 3

	eventCQErr       = 0
	eventQPFatal     = 1
	eventQPReqErr    = 2
	eventQPAccessErr = 3
	eventCommEst     = 4
	eventSRQErr      = 14
)

// gsiQKey is the GSI QP's Q_Key (IB_QP1_QKEY), and controlledQKey the
// bit of a send entry's Q_Key that means "the QP's own".
const (
	gsiQKey        = 0x80010000
	controlledQKey = 0x80000000
)

// abiValues are the values above by their kernel names.
var abiValues = []hw.Value{
	{Name: "IB_USER_VERBS_CMD_GET_CONTEXT", Value: cmdGetContext},
	{Name: "IB_USER_VERBS_CMD_ALLOC_PD", Value: cmdAllocPD},
	{Name: "IB_USER_VERBS_CMD_DEALLOC_PD", Value: cmdDeallocPD},
	{Name: "IB_USER_VERBS_CMD_REG_MR", Value: cmdRegMR},
	{Name: "IB_USER_VERBS_CMD_DEREG_MR", Value: cmdDeregMR},
	{Name: "IB_USER_VERBS_CMD_CREATE_CQ", Value: cmdCreateCQ},
	{Name: "IB_USER_VERBS_CMD_DESTROY_CQ", Value: cmdDestroyCQ},
	{Name: "IB_USER_VERBS_CMD_CREATE_QP", Value: cmdCreateQP},
	{Name: "IB_USER_VERBS_CMD_MODIFY_QP", Value: cmdModifyQP},
	{Name: "IB_USER_VERBS_CMD_DESTROY_QP", Value: cmdDestroyQP},
	{Name: "IB_USER_VERBS_CMD_POST_SEND", Value: cmdPostSend},
	{Name: "IB_USER_VERBS_CMD_CREATE_SRQ", Value: cmdCreateSRQ},
	{Name: "IB_USER_VERBS_CMD_DESTROY_SRQ", Value: cmdDestroySRQ},
	{Name: "IB_UVERBS_ACCESS_LOCAL_WRITE", Value: accessLocalWrite},
	{Name: "IB_UVERBS_ACCESS_REMOTE_WRITE", Value: accessRemoteWrite},
	{Name: "IB_UVERBS_ACCESS_REMOTE_READ", Value: accessRemoteRead},
	{Name: "IB_UVERBS_ACCESS_ON_DEMAND", Value: accessOnDemand},
	{Name: "IB_UVERBS_QPT_RC", Value: qptRC},
	{Name: "IB_UVERBS_QPT_UD", Value: qptUD},
	{Name: "IB_QPS_RESET", Value: qpsReset},
	{Name: "IB_QPS_INIT", Value: qpsInit},
	{Name: "IB_QPS_RTR", Value: qpsRTR},
	{Name: "IB_QPS_RTS", Value: qpsRTS},
	{Name: "IB_QPS_ERR", Value: qpsErr},
	{Name: "IB_QP_STATE", Value: hw.RDMAQPAttrState},
	{Name: "IB_QP_ACCESS_FLAGS", Value: hw.RDMAQPAttrAccessFlags},
	{Name: "IB_QP_PKEY_INDEX", Value: hw.RDMAQPAttrPKeyIndex},
	{Name: "IB_QP_PORT", Value: hw.RDMAQPAttrPort},
	{Name: "IB_QP_QKEY", Value: hw.RDMAQPAttrQKey},
	{Name: "IB_QP_AV", Value: hw.RDMAQPAttrAV},
	{Name: "IB_QP_PATH_MTU", Value: hw.RDMAQPAttrPathMTU},
	{Name: "IB_QP_TIMEOUT", Value: hw.RDMAQPAttrTimeout},
	{Name: "IB_QP_RETRY_CNT", Value: hw.RDMAQPAttrRetryCnt},
	{Name: "IB_QP_RNR_RETRY", Value: hw.RDMAQPAttrRNRRetry},
	{Name: "IB_QP_RQ_PSN", Value: hw.RDMAQPAttrRQPSN},
	{Name: "IB_QP_MAX_QP_RD_ATOMIC", Value: hw.RDMAQPAttrMaxQPRdAtomic},
	{Name: "IB_QP_MIN_RNR_TIMER", Value: hw.RDMAQPAttrMinRNRTimer},
	{Name: "IB_QP_SQ_PSN", Value: hw.RDMAQPAttrSQPSN},
	{Name: "IB_QP_MAX_DEST_RD_ATOMIC", Value: hw.RDMAQPAttrMaxDestRdAtomic},
	{Name: "IB_QP_DEST_QPN", Value: hw.RDMAQPAttrDestQPN},
	{Name: "IB_MTU_1024", Value: mtu1024},
	{Name: "IB_EVENT_CQ_ERR", Value: eventCQErr},
	{Name: "IB_EVENT_QP_FATAL", Value: eventQPFatal},
	{Name: "IB_EVENT_QP_REQ_ERR", Value: eventQPReqErr},
	{Name: "IB_EVENT_QP_ACCESS_ERR", Value: eventQPAccessErr},
	{Name: "IB_EVENT_COMM_EST", Value: eventCommEst},
	{Name: "IB_EVENT_SRQ_ERR", Value: eventSRQErr},
}
