package rdma

import (
	"errors"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rxeq"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// runCommands runs the commands posted up to tail, in order: read the
// entry, run it, write its status (and QUERY_QP's results), move cmdq_head,
// and post CMD_DONE if asked.
func (w *worker) runCommands(tail uint32) {
	in := w.inst
	for !w.halted && w.cmdHead != tail {
		if tail-w.cmdHead > in.cmdqSize {
			w.fail(hw.RDMAErrBadCmdqTail, tail)
			return
		}
		idx := w.cmdHead
		addr := in.cmdq + uint64(idx%in.cmdqSize)*hw.RDMACmdSize
		if !in.dma.Begin() {
			return
		}
		err := in.dma.ReadAt(addr, w.cmd[:])
		in.dma.End()
		if err != nil {
			w.fail(hw.RDMAErrBadCmdq, idx)
			return
		}
		st, results := w.exec(w.cmd[:])
		if !in.dma.Begin() {
			return // disabled or reset meanwhile: the command's effect is void with its objects
		}
		if results {
			err = in.dma.WriteAt(addr+12, w.cmd[12:])
		}
		if err == nil {
			err = in.dma.WriteU32(addr+uint64(hw.RDMACmdStatus.Offset), st)
		}
		w.cmdHead++
		if err == nil {
			err = in.dma.WriteU32(in.status+uint64(hw.RDMAStatusCmdqHead.Offset), w.cmdHead)
		}
		in.dma.End()
		w.e.stats.commands.Add(1)
		if err != nil {
			w.fail(hw.RDMAErrBadCmdq, idx)
			return
		}
		if hw.RDMACmdFlags.Get(w.cmd[:])&hw.RDMACmdFlagEvent != 0 {
			w.postEvent(hw.RDMAEventCmdDone, idx, 0)
		}
	}
}

// exec runs one command and returns its status; results reports that b's
// bytes from 12 on hold results to write back (QUERY_QP). It never panics,
// whatever b holds.
func (w *worker) exec(b []byte) (status uint32, results bool) {
	h := hw.RDMACmdHandle.Get(b)
	switch hw.RDMACmdOpcode.Get(b) {
	case hw.RDMACmdCreateCQ:
		return w.createCQ(h, b), false
	case hw.RDMACmdDestroyCQ:
		return w.destroyCQ(h), false
	case hw.RDMACmdCreateQP:
		return w.createQP(h, b), false
	case hw.RDMACmdModifyQP:
		return w.modifyQP(h, b), false
	case hw.RDMACmdQueryQP:
		st := w.queryQP(h, b)
		return st, st == hw.RDMACmdOK
	case hw.RDMACmdDestroyQP:
		return w.destroyQP(h), false
	case hw.RDMACmdRegMR:
		return w.regMR(h, b), false
	case hw.RDMACmdDeregMR:
		return w.deregMR(h), false
	case hw.RDMACmdAddGID:
		return w.addGID(h, b), false
	case hw.RDMACmdDelGID:
		return w.delGID(h), false
	case hw.RDMACmdQueryStats:
		return w.queryStats(h, b), false
	case hw.RDMACmdCreateSRQ:
		return w.createSRQ(h, b), false
	case hw.RDMACmdModifySRQ:
		return w.modifySRQ(h, b), false
	case hw.RDMACmdDestroySRQ:
		return w.destroySRQ(h), false
	case hw.RDMACmdResizeCQ:
		return w.resizeCQ(h, b), false
	case hw.RDMACmdAllocMR:
		return w.allocMR(h, b), false
	case hw.RDMACmdAllocMW:
		return w.allocMW(h, b), false
	case hw.RDMACmdDeallocMW:
		return w.deallocMW(h), false
	}
	return hw.RDMACmdErrOpcode, false
}

// geometry checks a registered rxe queue: slots a power of two in
// 2..maxSlots, an element size the ABI allows, and returns the buffer it
// spans. The bounds keep the product far from overflowing.
func geometry(base uint64, slots, log2 uint32, maxSlots uint32) (rxeq.Geometry, bool) {
	if slots < 2 || slots > maxSlots || bits.OnesCount32(slots) != 1 || log2 > rxeq.MaxLog2ElemSize {
		return rxeq.Geometry{}, false
	}
	g := rxeq.Geometry{Base: base, Slots: slots, Log2ElemSize: uint8(log2),
		Size: hw.RxeQueueHeaderSize + uint64(slots)<<log2}
	if wraps(g.Base, g.Size) {
		return rxeq.Geometry{}, false
	}
	return g, true
}

func (w *worker) createCQ(n uint32, b []byte) uint32 {
	if n >= hw.RDMAMaxCQ || w.cqs[n] != nil {
		return hw.RDMACmdErrHandle
	}
	g, ok := geometry(hw.RDMACreateCQBuf.Get(b), hw.RDMACreateCQSlots.Get(b), hw.RDMACreateCQLog2Elem.Get(b), hw.RDMAMaxCQE)
	if !ok {
		return hw.RDMACmdErrParam
	}
	dma := w.e.cfg.Mem.NewStream(streamName("cq", n))
	ring, err := rxeq.NewCQ(dma, g)
	if err != nil {
		return hw.RDMACmdErrParam
	}
	// The engine's queue in front of the ring, which the worker drains on
	// every completion: twice the ring, so a ring up to 2048 slots
	// overruns first, and at most cqBacklog completions behind the worker
	// (its buffer is allocated at once: 256 CQs of the largest ring must
	// not cost the host gigabytes).
	rc, err := w.e.rc.Load().CreateCQ(min(2*int(g.Slots), cqBacklog))
	if err != nil {
		return hw.RDMACmdErrParam
	}
	c := &cq{n: n, dma: dma, ring: ring, rc: rc}
	rc.SetNotify(func() {
		c.pending.Store(true)
		w.e.wake()
	})
	dma.Own(g.Base, g.Size)
	w.e.addStream(dma)
	w.cqs[n] = c
	w.listLive()
	w.e.mu.Lock()
	w.e.liveCQ[n] = true
	w.e.mu.Unlock()
	return hw.RDMACmdOK
}

// resizeCQ moves CQ n to the ring the entry names, with the completions
// user space has not consumed; the old ring's stream retires, so nothing
// writes to it once this returns.
func (w *worker) resizeCQ(n uint32, b []byte) uint32 {
	if n >= hw.RDMAMaxCQ || w.cqs[n] == nil {
		return hw.RDMACmdErrHandle
	}
	c := w.cqs[n]
	g, ok := geometry(hw.RDMACreateCQBuf.Get(b), hw.RDMACreateCQSlots.Get(b), hw.RDMACreateCQLog2Elem.Get(b), hw.RDMAMaxCQE)
	if !ok || c.broken {
		return hw.RDMACmdErrParam
	}
	w.settleLocalSends(c)
	w.drainCQ(c) // the engine's completions go to the old ring first, in order
	dma := w.e.cfg.Mem.NewStream(streamName("cq", n))
	dma.Own(g.Base, g.Size)
	if !c.dma.Begin() {
		return hw.RDMACmdErrParam
	}
	oldProd := c.ring.Producer()
	ring, moved, err := c.ring.Resize(dma, g)
	c.dma.End()
	if err != nil || c.rc.Resize(min(2*int(g.Slots), cqBacklog)) != nil {
		return hw.RDMACmdErrParam
	}
	// The solicited mark keeps its distance back from the producer index;
	// one already consumed marks nothing now.
	if c.hasSol {
		back := (oldProd - c.solEnd) & (c.ring.Geometry().Slots - 1)
		c.solEnd, c.hasSol = moved-min(back, moved), back < moved
	}
	old := c.dma
	c.ring, c.dma = ring, dma
	w.e.addStream(dma)
	w.e.retire(old)
	w.wait(old.Done())
	return hw.RDMACmdOK
}

// settleLocalSends completes, before RESIZE_CQ weighs what is pending on
// c, the UD sends posted to the QPs that complete into c: a UD send needs
// nothing from a peer, so a device sending at wire speed has completed
// them by the time a later command arrives, and rdma-core's
// test_resize_cq counts on that (posting sends, then shrinking the CQ
// below them). RC sends wait for their peer and are not waited for; nor
// is a port that does not take frames for longer than localSendWait.
func (w *worker) settleLocalSends(c *cq) {
	var ud []*qp
	for _, q := range w.qps {
		if q != nil && q.scq == c && q.lim.UD {
			w.pumpSQ(q)
			ud = append(ud, q)
		}
	}
	deadline := time.Now().Add(localSendWait)
	for {
		w.drainCQ(c)
		if !slices.ContainsFunc(ud, func(q *qp) bool { return len(q.signaled) > 0 }) || time.Now().After(deadline) {
			return
		}
		select {
		case <-time.After(localSendPoll):
		case <-w.e.done:
			return
		}
	}
}

// localSendWait bounds how long RESIZE_CQ waits for the engine to send
// what was posted before it; localSendPoll is how often it looks.
const (
	localSendWait = 100 * time.Millisecond
	localSendPoll = 50 * time.Microsecond
)

// cqBacklog bounds the completions the engine's queue holds for the
// worker.
const cqBacklog = 4096

func (w *worker) destroyCQ(n uint32) uint32 {
	if n >= hw.RDMAMaxCQ || w.cqs[n] == nil {
		return hw.RDMACmdErrHandle
	}
	c := w.cqs[n]
	if c.refs > 0 {
		return hw.RDMACmdErrBusy
	}
	w.e.mu.Lock()
	w.e.liveCQ[n] = false
	w.e.mu.Unlock()
	w.cqs[n] = nil
	w.listLive()
	w.e.retire(c.dma)
	w.wait(c.dma.Done())
	return hw.RDMACmdOK
}

// wait waits for a stream to quiesce (or the engine to close). Only the
// object's last unit can be in flight: a copy of a few pages.
func (w *worker) wait(done <-chan struct{}) {
	select {
	case <-done:
	case <-w.e.done:
	}
}

func (w *worker) pd(n uint32) *ibrc.PD {
	p := w.pds[n]
	if p == nil {
		p = w.e.rc.Load().CreatePD()
		w.pds[n] = p
	}
	w.pdRefs[n]++
	return p
}

func (w *worker) putPD(n uint32) {
	if w.pdRefs[n]--; w.pdRefs[n] <= 0 {
		delete(w.pdRefs, n)
		delete(w.pds, n)
	}
}

func (w *worker) createQP(n uint32, b []byte) uint32 {
	switch {
	case n < 1 || n > hw.RDMAQPNMax || w.qps[n] != nil:
		return hw.RDMACmdErrHandle
	case n == 1 && hw.RDMACmdFlags.Get(b)&(hw.RDMACmdFlagUD|hw.RDMACmdFlagUC) != hw.RDMACmdFlagUD:
		return hw.RDMACmdErrHandle // QP 1 is the GSI QP, a UD QP
	case len(w.qps) >= hw.RDMAMaxQP:
		return hw.RDMACmdErrResource
	}
	pdn := hw.RDMACreateQPPD.Get(b)
	typ := ibrc.TypeRC
	switch hw.RDMACmdFlags.Get(b) & (hw.RDMACmdFlagUD | hw.RDMACmdFlagUC) {
	case hw.RDMACmdFlagUD:
		typ = ibrc.TypeUD
	case hw.RDMACmdFlagUC:
		typ = ibrc.TypeUC
	case hw.RDMACmdFlagUD | hw.RDMACmdFlagUC:
		return hw.RDMACmdErrParam
	}
	sg, ok1 := geometry(hw.RDMACreateQPSQBuf.Get(b), hw.RDMACreateQPSQSlots.Get(b), hw.RDMACreateQPSQLog2Elem.Get(b), hw.RDMAMaxQPWR)
	var rg rxeq.Geometry
	var s *srq
	ok2 := true
	rsge := int(hw.RDMACreateQPMaxRecvSGE.Get(b))
	if hw.RDMACmdFlags.Get(b)&hw.RDMACmdFlagSRQ != 0 {
		// Receives from an SRQ of the same PD, whose geometry bounds them.
		if sn := hw.RDMACreateQPSRQN.Get(b); sn < hw.RDMAMaxSRQ && w.srqs[sn] != nil && w.srqs[sn].pdn == pdn {
			s = w.srqs[sn]
			rg.Slots, rsge = s.slots, s.maxSGE
		} else {
			ok2 = false
		}
	} else {
		rg, ok2 = geometry(hw.RDMACreateQPRQBuf.Get(b), hw.RDMACreateQPRQSlots.Get(b), hw.RDMACreateQPRQLog2Elem.Get(b), hw.RDMAMaxQPWR)
	}
	scqn, rcqn := hw.RDMACreateQPSendCQ.Get(b), hw.RDMACreateQPRecvCQ.Get(b)
	ssge := int(hw.RDMACreateQPMaxSendSGE.Get(b))
	inline := int(hw.RDMACreateQPMaxInline.Get(b))
	switch {
	case !ok1 || !ok2:
		return hw.RDMACmdErrParam
	case scqn >= hw.RDMAMaxCQ || rcqn >= hw.RDMAMaxCQ || w.cqs[scqn] == nil || w.cqs[rcqn] == nil:
		return hw.RDMACmdErrParam
	case ssge < 1 || ssge > hw.RDMAMaxSGE || rsge < 1 || rsge > hw.RDMAMaxSGE || inline > hw.RDMAMaxInline:
		return hw.RDMACmdErrParam
	}
	q := &qp{n: n, pdn: pdn, sqG: sg, rqG: rg, rsge: rsge, badWQEs: &w.e.stats.badWQEs,
		lim: rxeq.SendLimits{MaxSGE: ssge, MaxInline: inline, UD: typ == ibrc.TypeUD}, sigAll: hw.RDMACreateQPSigAll.Get(b) != 0,
		scq: w.cqs[scqn], rcq: w.cqs[rcqn], srq: s}
	q.dma = w.e.cfg.Mem.NewStream(streamName("qp", n))
	if !q.newRings() {
		return hw.RDMACmdErrParam
	}
	recv := q.nextRecv
	if s != nil {
		recv = s.next
	}
	rc, err := w.pd(q.pdn).CreateQPNum(n, ibrc.QPInit{Type: typ, SendCQ: q.scq.rc, RecvCQ: q.rcq.rc,
		Cap:        ibrc.QPCap{MaxSendWR: int(sg.Slots), MaxRecvWR: int(rg.Slots), MaxSendSGE: ssge, MaxRecvSGE: rsge, MaxInline: inline},
		RecvSource: recv})
	if err != nil {
		w.putPD(q.pdn)
		return hw.RDMACmdErrParam
	}
	q.rc = rc
	q.dma.Own(sg.Base, sg.Size)
	if s == nil {
		q.dma.Own(rg.Base, rg.Size)
	} else {
		s.refs++
	}
	w.e.addStream(q.dma)
	q.scq.refs++
	q.rcq.refs++
	w.qps[n] = q
	w.e.mu.Lock()
	w.e.liveQP[n] = true
	w.e.mu.Unlock()
	return hw.RDMACmdOK
}

// newRings registers the QP's rxe rings, the device's indices at 0.
func (q *qp) newRings() bool {
	sq, err := rxeq.NewSQ(q.dma, q.sqG, q.lim)
	if err != nil {
		return false
	}
	q.sq = sq
	if q.srq != nil {
		return true // no receive ring of its own
	}
	rq, err := rxeq.NewRQ(q.dma, q.rqG, q.rsge)
	if err != nil {
		return false
	}
	q.rq = rq
	return true
}

// discard returns the slots of the entries the engine had taken to user
// space without completions: the QP went to RESET, whose work requests
// vanish. The rings' indices stay where they are (rdma_rxe's reset keeps
// them too); entries posted and not yet fetched stay posted.
func (q *qp) discard() {
	q.bad, q.signaled = nil, nil
	if !q.dma.Begin() {
		return
	}
	defer q.dma.End()
	for q.sq.Outstanding() > 0 && q.sq.Retire() == nil {
	}
	if q.rq != nil { // an SRQ's entries were retired when taken
		q.rqMu.Lock()
		for q.rq.Outstanding() > 0 && q.rq.Retire() == nil {
		}
		q.rqMu.Unlock()
	}
	q.sqBroken = false
	q.rqBroken.Store(false)
}

// modifyMask is what MODIFY_QP's mask may hold; other ib_qp_attr_mask bits
// (IB_QP_PORT, IB_QP_PKEY_INDEX, IB_QP_CUR_STATE, ...) mean nothing to a
// one-port, one-P_Key device and are ignored, so the driver may pass the
// core's mask through.
const modifyMask = hw.RDMAQPAttrState | hw.RDMAQPAttrAccessFlags | hw.RDMAQPAttrAV | hw.RDMAQPAttrPathMTU |
	hw.RDMAQPAttrTimeout | hw.RDMAQPAttrRetryCnt | hw.RDMAQPAttrRNRRetry | hw.RDMAQPAttrRQPSN |
	hw.RDMAQPAttrMaxQPRdAtomic | hw.RDMAQPAttrMinRNRTimer | hw.RDMAQPAttrSQPSN | hw.RDMAQPAttrMaxDestRdAtomic |
	hw.RDMAQPAttrDestQPN | hw.RDMAQPAttrQKey

func (w *worker) modifyQP(n uint32, b []byte) uint32 {
	q := w.qps[n]
	if q == nil {
		return hw.RDMACmdErrHandle
	}
	mask := ibrc.AttrMask(hw.RDMAModifyQPMask.Get(b) & modifyMask)
	a := ibrc.QPAttr{
		State: ibrc.QPState(hw.RDMAModifyQPState.Get(b)), PathMTU: ibrc.MTU(hw.RDMAModifyQPPathMTU.Get(b)),
		Timeout: hw.RDMAModifyQPTimeout.Get(b), RetryCnt: hw.RDMAModifyQPRetryCnt.Get(b),
		RNRRetry: hw.RDMAModifyQPRNRRetry.Get(b), MinRNRTimer: hw.RDMAModifyQPMinRNRTimer.Get(b),
		MaxRdAtomic: hw.RDMAModifyQPMaxRdAtomic.Get(b), MaxDestRdAtomic: hw.RDMAModifyQPMaxDestRd.Get(b),
		AccessFlags: ibrc.Access(hw.RDMAModifyQPAccess.Get(b) & (hw.RDMAAccessLocalWrite | hw.RDMAAccessRemoteWrite |
			hw.RDMAAccessRemoteRead | hw.RDMAAccessRemoteAtomic)),
		DestQPN: hw.RDMAModifyQPDestQPN.Get(b), RQPSN: hw.RDMAModifyQPRQPSN.Get(b), SQPSN: hw.RDMAModifyQPSQPSN.Get(b),
	}
	if q.rc.Type() == ibrc.TypeUD {
		// No peer: the Q_Key has dest_qpn's bytes.
		a.DestQPN, a.QKey = 0, hw.RDMAModifyQPQKey.Get(b)
	}
	if mask&ibrc.AttrMaxRdAtomic != 0 && a.MaxRdAtomic > hw.RDMAMaxRdAtomic ||
		mask&ibrc.AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > hw.RDMAMaxRdAtomic {
		return hw.RDMACmdErrParam
	}
	if mask&ibrc.AttrAV != 0 {
		copy(a.AV.DGID[:], b[hw.RDMAModifyQPDGID.Offset:hw.RDMAModifyQPDGID.Offset+16])
		copy(a.AV.DestMAC[:], b[hw.RDMAModifyQPDMAC.Offset:hw.RDMAModifyQPDMAC.Offset+6])
		a.AV.HopLimit = hw.RDMAModifyQPHopLimit.Get(b)
		ip, ok := w.sourceIP(hw.RDMAModifyQPSGIDIndex.Get(b))
		if !ok {
			return hw.RDMACmdErrParam // no such GID, or not RoCEv2 over IPv4
		}
		a.AV.SrcIP = ip
	}
	cur := q.rc.Query().State
	next := cur
	if mask&ibrc.AttrState != 0 {
		next = a.State
	}
	if cur == ibrc.StateReset && next == ibrc.StateInit {
		mask |= ibrc.AttrPKey // the one P_Key, 0xffff
		a.PKey = 0xffff
	}
	if err := q.rc.ModifyQP(&a, mask); err != nil {
		switch {
		case errors.Is(err, ibrc.ErrInvalidModify):
			return hw.RDMACmdErrState
		case errors.Is(err, ibrc.ErrDestroyed):
			return hw.RDMACmdErrHandle
		}
		return hw.RDMACmdErrParam
	}
	switch next {
	case ibrc.StateReset:
		w.drainCQ(q.scq)
		w.drainCQ(q.rcq)
		q.discard()
		q.errStatus, q.userErr, q.fatalSent = 0, false, false
	case ibrc.StateErr:
		if cur != ibrc.StateErr {
			q.userErr = true
		}
	case ibrc.StateRTS:
		w.pumpSQ(q) // entries posted before RTS
	}
	return hw.RDMACmdOK
}

// sourceIP is the IPv4 address of the port's GID at index si: what a QP
// whose address vector names that source GID sends from. false: no such
// GID, or not an IPv4-mapped one.
func (w *worker) sourceIP(si uint8) ([4]byte, bool) {
	if int(si) >= len(w.gids) || !w.gids[si].valid {
		return [4]byte{}, false
	}
	return ipv4OfGID(w.gids[si].gid)
}

func (w *worker) queryQP(n uint32, b []byte) uint32 {
	q := w.qps[n]
	if q == nil {
		return hw.RDMACmdErrHandle
	}
	a := q.rc.Query()
	send, expect := q.rc.PSNs()
	clear(b[12:])
	hw.RDMAModifyQPMask.Put(b, hw.RDMAQPAttrState|hw.RDMAQPAttrRQPSN|hw.RDMAQPAttrSQPSN)
	hw.RDMAQueryQPState.Put(b, uint8(a.State))
	hw.RDMAQueryQPRQPSN.Put(b, expect)
	hw.RDMAQueryQPSQPSN.Put(b, send)
	return hw.RDMACmdOK
}

func (w *worker) destroyQP(n uint32) uint32 {
	q := w.qps[n]
	if q == nil {
		return hw.RDMACmdErrHandle
	}
	w.e.mu.Lock()
	delete(w.e.liveQP, n)
	delete(w.e.bells, n)
	w.e.mu.Unlock()
	w.e.retire(q.dma)
	_ = q.rc.Destroy() // no receive path calls nextRecv after this
	// Completions the transport made for this QP before it went are
	// still in its CQs: they are charged to it now, while its number is
	// its own, not to a QP created with the same number before the
	// next drain (whose ring slots they would retire).
	w.drainCQ(q.scq)
	if q.rcq != q.scq {
		w.drainCQ(q.rcq)
	}
	w.wait(q.dma.Done())
	delete(w.qps, n)
	q.scq.refs--
	q.rcq.refs--
	if q.srq != nil {
		q.srq.refs--
	}
	w.putPD(q.pdn)
	return hw.RDMACmdOK
}

func (w *worker) regMR(key uint32, b []byte) uint32 {
	switch {
	case key == 0 || w.mrs[key] != nil:
		return hw.RDMACmdErrHandle
	case len(w.mrs) >= hw.RDMAMaxMR:
		return hw.RDMACmdErrResource
	}
	va, length := hw.RDMARegMRVA.Get(b), hw.RDMARegMRLength.Get(b)
	acc := hw.RDMARegMRAccess.Get(b)
	flags := hw.RDMACmdFlags.Get(b)
	const known = hw.RDMAAccessLocalWrite | hw.RDMAAccessRemoteWrite | hw.RDMAAccessRemoteRead |
		hw.RDMAAccessRemoteAtomic | hw.RDMAAccessMWBind | hw.RDMAAccessOnDemand
	implicit := flags&hw.RDMACmdFlagImplicit != 0
	switch {
	case implicit && (va != 0 || length != 0 || acc&hw.RDMAAccessOnDemand == 0 || flags&hw.RDMACmdFlagPhysical != 0):
		return hw.RDMACmdErrParam
	case implicit:
		// The whole address space: [0, 2^64 - 1), as ibrc's bounds are
		// a length; the last byte lies beyond every translation anyway.
		length = math.MaxUint64
	case length == 0 || length > hw.RDMAMaxMRSize || wraps(va, length):
		return hw.RDMACmdErrParam
	case acc&^known != 0:
		return hw.RDMACmdErrParam
	case acc&(hw.RDMAAccessRemoteWrite|hw.RDMAAccessRemoteAtomic) != 0 && acc&hw.RDMAAccessLocalWrite == 0:
		return hw.RDMACmdErrParam
	}
	pdn := hw.RDMARegMRPD.Get(b)
	m := &mr{key: key, pdn: pdn, mem: &mrMem{e: w.e, xlat: w.e.cfg.Xlat, pasid: hw.RDMARegMRPASID.Get(b),
		physical: flags&hw.RDMACmdFlagPhysical != 0, dma: w.e.cfg.Mem.NewStream(streamName("mr", key))}}
	if m.mem.physical && acc&hw.RDMAAccessOnDemand != 0 {
		return hw.RDMACmdErrParam // nothing to fault: IOVAs are present or outside guest memory
	}
	rc, err := w.pd(pdn).RegisterMRKey(m.mem, key, va, length, ibrc.Access(acc&^hw.RDMAAccessOnDemand))
	if err != nil {
		w.putPD(pdn)
		return hw.RDMACmdErrParam
	}
	m.rc = rc
	w.e.addStream(m.mem.dma)
	w.mrs[key] = m
	if h := w.e.testRegMR; h != nil {
		h(m.mem)
	}
	return hw.RDMACmdOK
}

// allocMR creates a region for fast registration, free until a REG_MR
// send entry of a QP of its PD registers it.
func (w *worker) allocMR(key uint32, b []byte) uint32 {
	switch {
	case key>>8 == 0 || w.mrs[key] != nil:
		return hw.RDMACmdErrHandle
	case len(w.mrs) >= hw.RDMAMaxMR:
		return hw.RDMACmdErrResource
	}
	maxPages, list := hw.RDMAAllocMRMaxPages.Get(b), hw.RDMAAllocMRPages.Get(b)
	if maxPages == 0 || maxPages > hw.RDMAMaxFastRegPages || list%8 != 0 || wraps(list, 8*uint64(maxPages)) {
		return hw.RDMACmdErrParam
	}
	pdn := hw.RDMAAllocMRPD.Get(b)
	m := &mr{key: key, pdn: pdn, mem: &mrMem{e: w.e, physical: true, dma: w.e.cfg.Mem.NewStream(streamName("mr", key))}}
	f, err := w.pd(pdn).AllocFastMR(&fastPages{mem: m.mem, list: list, max: maxPages}, key, maxPages)
	if err != nil {
		w.putPD(pdn)
		return hw.RDMACmdErrHandle
	}
	m.fast = f
	w.e.addStream(m.mem.dma)
	w.mrs[key] = m
	return hw.RDMACmdOK
}

func (w *worker) deregMR(key uint32) uint32 {
	m := w.mrs[key]
	if m == nil {
		return hw.RDMACmdErrHandle
	}
	m.destroy(w.e) // no new lookup finds it, no new copy starts
	w.wait(m.mem.dma.Done())
	delete(w.mrs, key)
	w.putPD(m.pdn)
	return hw.RDMACmdOK
}

// allocMW creates the window whose first R_Key is rkey.
func (w *worker) allocMW(rkey uint32, b []byte) uint32 {
	i := rkey >> 8
	switch {
	case i == 0 || w.mws[i] != nil:
		return hw.RDMACmdErrHandle
	case len(w.mws) >= hw.RDMAMaxMW:
		return hw.RDMACmdErrResource
	}
	typ := ibrc.MWType(hw.RDMAAllocMWType.Get(b))
	if typ != ibrc.MWType1 && typ != ibrc.MWType2 {
		return hw.RDMACmdErrParam
	}
	pdn := hw.RDMAAllocMWPD.Get(b)
	mw, err := w.pd(pdn).AllocMW(typ, rkey)
	if err != nil {
		w.putPD(pdn)
		return hw.RDMACmdErrHandle
	}
	w.mws[i] = &window{rc: mw, pdn: pdn}
	return hw.RDMACmdOK
}

// deallocMW removes the window of rkey's index: once the command
// completed, its R_Keys reach nothing (a request in flight through it
// finished its access before, under the engine's table lock).
func (w *worker) deallocMW(rkey uint32) uint32 {
	m := w.mws[rkey>>8]
	if m == nil {
		return hw.RDMACmdErrHandle
	}
	m.rc.Dealloc()
	delete(w.mws, rkey>>8)
	w.putPD(m.pdn)
	return hw.RDMACmdOK
}

func (w *worker) addGID(i uint32, b []byte) uint32 {
	if i >= hw.RDMAMaxGID {
		return hw.RDMACmdErrHandle
	}
	w.gids[i].valid = true
	copy(w.gids[i].gid[:], b[hw.RDMAAddGIDGID.Offset:hw.RDMAAddGIDGID.Offset+16])
	w.publishGIDs()
	return hw.RDMACmdOK
}

func (w *worker) delGID(i uint32) uint32 {
	if i >= hw.RDMAMaxGID || !w.gids[i].valid {
		return hw.RDMACmdErrHandle
	}
	w.gids[i].valid = false
	w.publishGIDs()
	return hw.RDMACmdOK
}

// publishGIDs hands the IPv4 addresses of the GID table to the port's
// claim and the RC engine; the lowest entry's is the engine's own.
func (w *worker) publishGIDs() {
	var ips [][4]byte
	for _, g := range w.gids {
		if ip, ok := ipv4OfGID(g.gid); g.valid && ok {
			ips = append(ips, ip)
		}
	}
	rc := w.e.rc.Load()
	rc.SetLocalIPs(ips)
	if len(ips) > 0 {
		rc.SetIPv4(ips[0])
	}
	w.e.gids.Store(&ips)
}
