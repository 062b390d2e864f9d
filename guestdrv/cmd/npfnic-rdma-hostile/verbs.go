package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// The uverbs device through its legacy write() commands, as
// libibverbs' ibv_cmd_* and librxe issue them: a struct
// ib_uverbs_cmd_hdr, the command, then the driver's data; a command with a
// response names a buffer the kernel writes the core's response and then
// the driver's into.

// buildCommand is the bytes of one write(): the header, then req, whose
// response pointer (its first 8 bytes) becomes resp when respLen > 0.
// in_words counts the header; both lengths are whole 32-bit words.
func buildCommand(cmd uint32, req []byte, resp uint64, respLen int) ([]byte, error) {
	n := cmdHdr.Size + len(req)
	if n%4 != 0 || respLen%4 != 0 || n/4 > 0xffff || respLen/4 > 0xffff {
		return nil, fmt.Errorf("uverbs command %d: %d request and %d response bytes", cmd, len(req), respLen)
	}
	b := make([]byte, n)
	hdrCommand.Put(b, cmd)
	hdrInWords.Put(b, uint16(n/4))
	hdrOutWords.Put(b, uint16(respLen/4))
	copy(b[cmdHdr.Size:], req)
	if respLen > 0 {
		respPtr.Put(b[cmdHdr.Size:], resp)
	}
	return b, nil
}

// verbs is an open uverbs device with its user context.
type verbs struct {
	f     *os.File
	async int // the context's async event fd
}

// openVerbs opens /dev/infiniband/uverbsN of the ibverbs device dev and
// creates its user context (GET_CONTEXT, no driver data either way, as
// for rdma_rxe).
func openVerbs(sysfs, dev string) (*verbs, error) {
	node, err := findUverbs(sysfs, dev)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile("/dev/infiniband/"+node, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	v := &verbs{f: f, async: -1}
	resp := make([]byte, getContextResp.Size)
	if err := v.command(cmdGetContext, make([]byte, getContext.Size), resp); err != nil {
		f.Close()
		return nil, fmt.Errorf("GET_CONTEXT: %w", err)
	}
	v.async = int(getContextAsyncFD.Get(resp))
	return v, nil
}

func (v *verbs) close() {
	if v.async >= 0 {
		unix.Close(v.async)
	}
	v.f.Close()
}

// command runs one command; resp (nil: none) receives the response.
func (v *verbs) command(cmd uint32, req, resp []byte) error {
	var addr uint64
	if len(resp) > 0 {
		addr = uint64(uintptr(unsafe.Pointer(&resp[0])))
	}
	b, err := buildCommand(cmd, req, addr, len(resp))
	if err != nil {
		return err
	}
	// The kernel writes resp during the call: the Go heap does not move.
	n, err := unix.Write(int(v.f.Fd()), b)
	runtime.KeepAlive(resp)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("uverbs command %d: short write %d of %d", cmd, n, len(b))
	}
	return nil
}

// mapping is memory the tool owns outside the Go heap: anonymous pages
// for memory regions, or a queue the kernel hands out by mmap cookie.
type mapping []byte

func anonymous(n int) (mapping, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	return mapping(b), err
}

func (m mapping) addr() uint64 { return uint64(uintptr(unsafe.Pointer(&m[0]))) }

func (v *verbs) mmap(offset uint64, size uint32) (mapping, error) {
	b, err := unix.Mmap(int(v.f.Fd()), int64(offset), int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	return mapping(b), err
}

// mmapAt maps a queue at the start of at, which must be unmapped
// (MAP_FIXED_NOREPLACE) and long enough.
func (v *verbs) mmapAt(offset uint64, size uint32, at []byte) (mapping, error) {
	if len(at) < int(size) {
		return nil, fmt.Errorf("a queue of %d bytes into %d", size, len(at))
	}
	p, err := unix.MmapPtr(int(v.f.Fd()), int64(offset), unsafe.Pointer(&at[0]), uintptr(size),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED_NOREPLACE)
	if err != nil {
		return nil, err
	}
	if p != unsafe.Pointer(&at[0]) {
		unix.MunmapPtr(p, uintptr(size))
		return nil, fmt.Errorf("queue mapped at %p, not %p", p, &at[0])
	}
	return mapping(unsafe.Slice((*byte)(p), size)), nil
}

// unmapQueue unmaps a queue, whether mmap or mmapAt mapped it.
func unmapQueue(b []byte) {
	if unix.Munmap(b) != nil {
		unix.MunmapPtr(unsafe.Pointer(&b[0]), uintptr(len(b)))
	}
}

func (v *verbs) allocPD() (uint32, error) {
	resp := make([]byte, allocPDResp.Size)
	if err := v.command(cmdAllocPD, make([]byte, allocPD.Size), resp); err != nil {
		return 0, fmt.Errorf("ALLOC_PD: %w", err)
	}
	return allocPDRespHandle.Get(resp), nil
}

func (v *verbs) deallocPD(pd uint32) error {
	req := make([]byte, deallocPD.Size)
	deallocPDHandle.Put(req, pd)
	return v.command(cmdDeallocPD, req, nil)
}

// mr is a registered memory region.
type mr struct {
	handle, lkey, rkey uint32
	addr               uint64
	length             uint64
}

func (m mr) end() uint64 { return m.addr + m.length }

func reqRegMR(pd uint32, addr, length uint64, access uint32) []byte {
	req := make([]byte, regMR.Size)
	regMRStart.Put(req, addr)
	regMRLength.Put(req, length)
	regMRHCAVA.Put(req, addr)
	regMRPD.Put(req, pd)
	regMRAccess.Put(req, access)
	return req
}

func (v *verbs) regMR(pd uint32, b []byte, access uint32) (mr, error) {
	return v.regMRRange(pd, uint64(uintptr(unsafe.Pointer(&b[0]))), uint64(len(b)), access)
}

// regMRRange registers [addr, addr+length) of the process, mapped or not
// (start 0 and length 2^64-1 with ON_DEMAND: an implicit ODP MR).
func (v *verbs) regMRRange(pd uint32, addr, length uint64, access uint32) (mr, error) {
	m := mr{addr: addr, length: length}
	resp := make([]byte, regMRResp.Size)
	if err := v.command(cmdRegMR, reqRegMR(pd, m.addr, m.length, access), resp); err != nil {
		return mr{}, fmt.Errorf("REG_MR: %w", err)
	}
	m.handle, m.lkey, m.rkey = regMRRespHandle.Get(resp), regMRRespLKey.Get(resp), regMRRespRKey.Get(resp)
	return m, nil
}

func (v *verbs) deregMR(m mr) error {
	req := make([]byte, deregMR.Size)
	deregMRHandle.Put(req, m.handle)
	return v.command(cmdDeregMR, req, nil)
}

// cq is a completion queue and its mapped rxe queue.
type cq struct {
	handle uint32
	user   uint64 // its user_handle, the element of its async events
	q      *queue
}

func reqCreateCQ(user uint64, cqe uint32) []byte {
	req := make([]byte, createCQ.Size)
	createCQUser.Put(req, user)
	createCQCQE.Put(req, cqe)
	createCQChannel.Put(req, ^uint32(0)) // -1: no completion channel
	return req
}

func (v *verbs) createCQ(user uint64, cqe uint32) (*cq, error) {
	return v.createCQAt(user, cqe, nil)
}

// createCQAt is createCQ with the CQ's queue mapped at the start of at
// (see mmapAt); nil: wherever the kernel puts it.
func (v *verbs) createCQAt(user uint64, cqe uint32, at []byte) (*cq, error) {
	resp := make([]byte, createCQResp.Size+rxeCQResp.Size)
	if err := v.command(cmdCreateCQ, reqCreateCQ(user, cqe), resp); err != nil {
		return nil, fmt.Errorf("CREATE_CQ: %w", err)
	}
	c := &cq{handle: createCQRespHandle.Get(resp), user: user}
	drv := resp[createCQResp.Size:]
	var m mapping
	var err error
	if at == nil {
		m, err = v.mmap(cqRespOffset.Get(drv), cqRespSize.Get(drv))
	} else {
		m, err = v.mmapAt(cqRespOffset.Get(drv), cqRespSize.Get(drv), at)
	}
	if err == nil {
		c.q, err = newQueue(m)
	}
	if err != nil {
		v.destroyCQ(c)
		return nil, fmt.Errorf("CQ queue: %w", err)
	}
	return c, nil
}

func (v *verbs) destroyCQ(c *cq) error {
	req := make([]byte, destroyCQ.Size)
	destroyCQHandle.Put(req, c.handle)
	err := v.command(cmdDestroyCQ, req, make([]byte, destroyCQResp.Size))
	if c.q != nil {
		unmapQueue(c.q.buf)
	}
	return err
}

// qpCaps are a QP's limits, as asked and as the kernel answered.
type qpCaps struct {
	maxSendWR, maxRecvWR, maxSendSGE, maxRecvSGE, maxInline uint32
}

// qp is a queue pair (RC, or UD) and its mapped rxe queues; a QP on an
// SRQ has no receive queue of its own.
type qp struct {
	handle, qpn uint32
	typ         uint8
	caps        qpCaps
	sq, rq      *queue
	scq, rcq    *cq
	srq         *srq
	ssn         uint32
}

// qpKind is what a CREATE_QP asks besides the caps: the QP's type
// (IB_UVERBS_QPT_*) and the SRQ it takes its receives from (nil: a
// receive queue of its own).
type qpKind struct {
	typ uint8
	srq *srq
}

func reqCreateQP(user uint64, pd, scq, rcq uint32, c qpCaps, k qpKind) []byte {
	req := make([]byte, createQP.Size)
	createQPUser.Put(req, user)
	createQPPD.Put(req, pd)
	createQPSendCQ.Put(req, scq)
	createQPRecvCQ.Put(req, rcq)
	createQPMaxSendWR.Put(req, c.maxSendWR)
	createQPMaxRecvWR.Put(req, c.maxRecvWR)
	createQPMaxSendSGE.Put(req, c.maxSendSGE)
	createQPMaxRecvSGE.Put(req, c.maxRecvSGE)
	createQPMaxInline.Put(req, c.maxInline)
	createQPSigAll.Put(req, 0)
	createQPType.Put(req, k.typ)
	if k.srq != nil {
		createQPSRQ.Put(req, k.srq.handle)
		createQPIsSRQ.Put(req, 1)
	}
	return req
}

// createQP creates an RC QP with a receive queue of its own.
func (v *verbs) createQP(user uint64, pd uint32, scq, rcq *cq, c qpCaps) (*qp, error) {
	return v.createQPKind(user, pd, scq, rcq, c, qpKind{typ: qptRC})
}

func (v *verbs) createQPKind(user uint64, pd uint32, scq, rcq *cq, c qpCaps, k qpKind) (*qp, error) {
	resp := make([]byte, createQPResp.Size+rxeQPResp.Size)
	if err := v.command(cmdCreateQP, reqCreateQP(user, pd, scq.handle, rcq.handle, c, k), resp); err != nil {
		return nil, fmt.Errorf("CREATE_QP: %w", err)
	}
	q := &qp{handle: createQPRespHandle.Get(resp), qpn: createQPRespQPN.Get(resp), typ: k.typ, scq: scq, rcq: rcq, srq: k.srq,
		caps: qpCaps{
			maxSendWR: createQPRespMaxSendWR.Get(resp), maxRecvWR: createQPRespMaxRecvWR.Get(resp),
			maxSendSGE: createQPRespMaxSendSGE.Get(resp), maxRecvSGE: createQPRespMaxRecvSGE.Get(resp),
			maxInline: createQPRespMaxInline.Get(resp)}}
	drv := resp[createQPResp.Size:]
	sm, err := v.mmap(qpRespSQOffset.Get(drv), qpRespSQSize.Get(drv))
	if err == nil {
		q.sq, err = newQueue(sm)
	}
	if err == nil && k.srq == nil {
		var rm mapping
		if rm, err = v.mmap(qpRespRQOffset.Get(drv), qpRespRQSize.Get(drv)); err == nil {
			q.rq, err = newQueue(rm)
		}
	}
	if err != nil {
		v.destroyQP(q)
		return nil, fmt.Errorf("QP queues: %w", err)
	}
	return q, nil
}

func (v *verbs) destroyQP(q *qp) error {
	req := make([]byte, destroyQP.Size)
	destroyQPHandle.Put(req, q.handle)
	err := v.command(cmdDestroyQP, req, make([]byte, destroyQPResp.Size))
	for _, r := range []*queue{q.sq, q.rq} {
		if r != nil {
			unmapQueue(r.buf)
		}
	}
	return err
}

// qpAttr is what a MODIFY_QP sets; mask says which.
type qpAttr struct {
	mask                        uint32
	state                       uint8
	access                      uint32
	port                        uint8
	pathMTU                     uint8
	destQPN, rqPSN, sqPSN       uint32
	maxRdAtomic, maxDestRd      uint8
	minRNRTimer                 uint8
	timeout, retryCnt, rnrRetry uint8
	// The address vector (IB_QP_AV): RoCEv2 is always global.
	dgid      [16]byte
	sgidIndex uint8
	qkey      uint32 // IB_QP_QKEY: a UD QP's
}

func reqModifyQP(handle uint32, a qpAttr) []byte {
	req := make([]byte, modifyQP.Size)
	modifyHandle.Put(req, handle)
	modifyMask.Put(req, a.mask)
	modifyQKey.Put(req, a.qkey)
	modifyState.Put(req, a.state)
	modifyAccess.Put(req, a.access)
	modifyPKeyIndex.Put(req, 0)
	modifyPort.Put(req, a.port)
	modifyPathMTU.Put(req, a.pathMTU)
	modifyDestQPN.Put(req, a.destQPN)
	modifyRQPSN.Put(req, a.rqPSN)
	modifySQPSN.Put(req, a.sqPSN)
	modifyMaxRdAtomic.Put(req, a.maxRdAtomic)
	modifyMaxDestRd.Put(req, a.maxDestRd)
	modifyMinRNRTimer.Put(req, a.minRNRTimer)
	modifyTimeout.Put(req, a.timeout)
	modifyRetryCnt.Put(req, a.retryCnt)
	modifyRNRRetry.Put(req, a.rnrRetry)
	if a.mask&hw.RDMAQPAttrAV != 0 {
		copy(req[modifyDestDGID.Offset:modifyDestDGID.Offset+16], a.dgid[:])
		modifyDestSGIDIndex.Put(req, a.sgidIndex)
		modifyDestHopLimit.Put(req, 1)
		modifyDestIsGlobal.Put(req, 1)
		modifyDestPort.Put(req, 1)
	}
	return req
}

func (v *verbs) modifyQP(q *qp, a qpAttr) error {
	if err := v.command(cmdModifyQP, reqModifyQP(q.handle, a), nil); err != nil {
		return fmt.Errorf("MODIFY_QP to state %d: %w", a.state, err)
	}
	return nil
}

// endpoint is one side of an RC connection, as ibv_rc_pingpong exchanges
// it: QPN, first PSN and GID.
type endpoint struct {
	qpn, psn uint32
	gid      [16]byte
}

// connectSteps are the MODIFY_QPs from RESET to RTS that ibv_rc_pingpong
// does (MTU 1024, timeout 14, seven retries, RNR retries for ever), with
// READs allowed both ways.
func connectSteps(local endpoint, sgidIndex uint8, remote endpoint) []qpAttr {
	return []qpAttr{
		{mask: hw.RDMAQPAttrState | hw.RDMAQPAttrPKeyIndex | hw.RDMAQPAttrPort | hw.RDMAQPAttrAccessFlags, state: qpsInit, port: 1,
			access: accessLocalWrite | accessRemoteWrite | accessRemoteRead | accessRemoteAtomic},
		{mask: hw.RDMAQPAttrState | hw.RDMAQPAttrAV | hw.RDMAQPAttrPathMTU | hw.RDMAQPAttrDestQPN | hw.RDMAQPAttrRQPSN | hw.RDMAQPAttrMaxDestRdAtomic | hw.RDMAQPAttrMinRNRTimer, state: qpsRTR,
			pathMTU: mtu1024, destQPN: remote.qpn, rqPSN: remote.psn, maxDestRd: 1, minRNRTimer: 12,
			dgid: remote.gid, sgidIndex: sgidIndex},
		{mask: hw.RDMAQPAttrState | hw.RDMAQPAttrTimeout | hw.RDMAQPAttrRetryCnt | hw.RDMAQPAttrRNRRetry | hw.RDMAQPAttrSQPSN | hw.RDMAQPAttrMaxQPRdAtomic, state: qpsRTS,
			timeout: 14, retryCnt: 7, rnrRetry: 7, sqPSN: local.psn, maxRdAtomic: 1},
	}
}

func (v *verbs) connect(q *qp, local endpoint, sgidIndex uint8, remote endpoint) error {
	for _, a := range connectSteps(local, sgidIndex, remote) {
		if err := v.modifyQP(q, a); err != nil {
			return err
		}
	}
	return nil
}

// udSteps are the MODIFY_QPs of a UD QP from RESET to RTS, as
// ibv_ud_pingpong does them: INIT with the P_Key index, the port and the
// Q_Key its receives must carry, RTR, and RTS with its first PSN.
func udSteps(qkey, psn uint32) []qpAttr {
	return []qpAttr{
		{mask: hw.RDMAQPAttrState | hw.RDMAQPAttrPKeyIndex | hw.RDMAQPAttrPort | hw.RDMAQPAttrQKey, state: qpsInit, port: 1, qkey: qkey},
		{mask: hw.RDMAQPAttrState, state: qpsRTR},
		{mask: hw.RDMAQPAttrState | hw.RDMAQPAttrSQPSN, state: qpsRTS, sqPSN: psn},
	}
}

// readyUD moves a fresh UD QP to RTS.
func (v *verbs) readyUD(q *qp, qkey, psn uint32) error {
	for _, a := range udSteps(qkey, psn) {
		if err := v.modifyQP(q, a); err != nil {
			return err
		}
	}
	return nil
}

// srq is a shared receive queue and its mapped rxe queue.
type srq struct {
	handle, srqn uint32
	user         uint64 // its user_handle, the element of its async events
	maxWR        uint32
	maxSGE       uint32
	q            *queue
}

func reqCreateSRQ(user uint64, pd, maxWR, maxSGE uint32) []byte {
	req := make([]byte, createSRQ.Size)
	createSRQUser.Put(req, user)
	createSRQPD.Put(req, pd)
	createSRQMaxWR.Put(req, maxWR)
	createSRQMaxSGE.Put(req, maxSGE)
	createSRQLimit.Put(req, 0)
	return req
}

// createSRQ creates an SRQ (no limit armed) and maps its queue from the
// rxe response, as librxe's create_srq does.
func (v *verbs) createSRQ(user uint64, pd, maxWR, maxSGE uint32) (*srq, error) {
	resp := make([]byte, createSRQResp.Size+rxeSRQResp.Size)
	if err := v.command(cmdCreateSRQ, reqCreateSRQ(user, pd, maxWR, maxSGE), resp); err != nil {
		return nil, fmt.Errorf("CREATE_SRQ: %w", err)
	}
	s := &srq{handle: createSRQRespHandle.Get(resp), user: user, maxWR: createSRQRespMaxWR.Get(resp),
		maxSGE: createSRQRespMaxSGE.Get(resp)}
	drv := resp[createSRQResp.Size:]
	s.srqn = srqRespNum.Get(drv)
	m, err := v.mmap(srqRespOffset.Get(drv), srqRespSize.Get(drv))
	if err == nil {
		s.q, err = newQueue(m)
	}
	if err != nil {
		v.destroySRQ(s)
		return nil, fmt.Errorf("SRQ queue: %w", err)
	}
	return s, nil
}

func (v *verbs) destroySRQ(s *srq) error {
	req := make([]byte, destroySRQ.Size)
	destroySRQHandle.Put(req, s.handle)
	err := v.command(cmdDestroySRQ, req, make([]byte, destroySRQResp.Size))
	if s.q != nil {
		unmapQueue(s.q.buf)
	}
	return err
}

// reqPostSend is a POST_SEND with no work request: wr_count and
// sge_count 0, wqe_size that of a struct ib_uverbs_send_wr, as librxe
// sends it.
func reqPostSend(handle uint32) []byte {
	req := make([]byte, postSend.Size)
	postSendHandle.Put(req, handle)
	postSendWQESize.Put(req, uint32(uverbsSendWR.Size))
	return req
}

// doorbell is librxe's post_send doorbell: POST_SEND with no work
// request, after the entries and the producer index are in place.
func (v *verbs) doorbell(q *qp) error {
	if err := v.command(cmdPostSend, reqPostSend(q.handle), make([]byte, postSendResp.Size)); err != nil {
		return fmt.Errorf("POST_SEND doorbell: %w", err)
	}
	return nil
}

// asyncEvent is one event of the context's async fd.
type asyncEv struct {
	element uint64 // the CQ's or QP's user_handle
	typ     uint32 // IB_EVENT_*
}

// waitEvent reads async events until one satisfies match or d passes.
func (v *verbs) waitEvent(d time.Duration, match func(asyncEv) bool) (asyncEv, error) {
	deadline := time.Now().Add(d)
	buf := make([]byte, asyncEvent.Size)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return asyncEv{}, errors.New("no such async event")
		}
		fds := []unix.PollFd{{Fd: int32(v.async), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left/time.Millisecond)+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return asyncEv{}, err
		}
		if n == 0 {
			continue
		}
		if _, err := unix.Read(v.async, buf); err != nil {
			return asyncEv{}, err
		}
		ev := asyncEv{element: asyncElement.Get(buf), typ: asyncType.Get(buf)}
		if match(ev) {
			return ev, nil
		}
	}
}

// queue is a mapped rxe queue: struct rxe_queue_buf and its slots, read
// and written with vdevice/hw's rxe tables. Its shape is what the kernel
// wrote into the header at creation, read once: the hostile cases
// overwrite the header later.
type queue struct {
	buf   []byte
	slots uint32
	log2  uint32
	// prod or cons is this side's index (a send or receive queue's
	// producer, a completion queue's consumer), a slot number.
	prod, cons uint32
}

func newQueue(buf []byte) (*queue, error) {
	if len(buf) < hw.RxeQueueHeaderSize {
		return nil, fmt.Errorf("queue of %d bytes", len(buf))
	}
	q := &queue{buf: buf, slots: hw.RxeQueueIndexMask.Get(buf) + 1, log2: hw.RxeQueueLog2ElemSize.Get(buf)}
	if q.slots&(q.slots-1) != 0 || q.log2 > 16 || uint64(hw.RxeQueueHeaderSize)+uint64(q.slots)<<q.log2 > uint64(len(buf)) {
		return nil, fmt.Errorf("queue header: %d slots of 2^%d bytes in %d bytes", q.slots, q.log2, len(buf))
	}
	return q, nil
}

func (q *queue) mask() uint32 { return q.slots - 1 }

// slot is slot i (masked).
func (q *queue) slot(i uint32) []byte {
	off := hw.RxeQueueHeaderSize + int(i&q.mask())<<q.log2
	return q.buf[off : off+1<<q.log2 : off+1<<q.log2]
}

func (q *queue) index(f hw.Le32) *uint32 { return (*uint32)(unsafe.Pointer(&q.buf[f.Offset])) }

// loadProducer and loadConsumer read an index as it is (not masked),
// with acquire order; the stores release.
func (q *queue) loadProducer() uint32   { return atomicLoad(q.index(hw.RxeQueueProducer)) }
func (q *queue) loadConsumer() uint32   { return atomicLoad(q.index(hw.RxeQueueConsumer)) }
func (q *queue) storeProducer(v uint32) { atomicStore(q.index(hw.RxeQueueProducer), v) }
func (q *queue) storeConsumer(v uint32) { atomicStore(q.index(hw.RxeQueueConsumer), v) }

// post writes entries at the producer side with put and publishes them.
func (q *queue) post(puts ...func(slot []byte)) {
	for _, put := range puts {
		put(q.slot(q.prod))
		q.prod = (q.prod + 1) & q.mask()
	}
	q.storeProducer(q.prod)
}

// poll takes the next completion, if the device wrote one.
func (q *queue) poll() (cqe, bool) {
	if q.loadProducer()&q.mask() == q.cons {
		return cqe{}, false
	}
	c := parseCQE(q.slot(q.cons))
	q.cons = (q.cons + 1) & q.mask()
	q.storeConsumer(q.cons)
	return c, true
}

// pollN waits up to d for n completions.
func (q *queue) pollN(n int, d time.Duration) []cqe {
	var out []cqe
	deadline := time.Now().Add(d)
	for len(out) < n && time.Now().Before(deadline) {
		if c, ok := q.poll(); ok {
			out = append(out, c)
			continue
		}
		time.Sleep(time.Millisecond)
	}
	return out
}
