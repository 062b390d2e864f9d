package ethring

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/pkthdr"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// Network page faults on the Ethernet queues (interface 2.2; the rules are
// in vdevice/hw, "Network page faults on the Ethernet queues"). Buffer
// DMA goes through translation (package ats) while the ATS capability is
// enabled; a translation fault is turned into a page request (package pri)
// and handled by the pair's RX policy or, on TX, by stalling the pair.
//
// The backup policy is seed 000 Figure 6. Its state lives in faultState
// under the pair's rxMu: head is the instance's rx.head (what the driver
// may consume), headOffset the descriptors used past it, bmIndex the bitmap
// index of head, and bitmap the rNPFs not yet resolved. The RX path stores
// frames at head+headOffset; RX_RESOLVE writes arrive on the register path
// and are applied by the instance's resolve goroutine, so the register path
// never waits for rxMu (which is held across guest memory accesses).

// faultState is an instance's page-fault state.
type faultState struct {
	policy uint32 // hw.RxPolicy*, latched at enable
	pasid  uint32
	bmSize uint32 // 0: no backup storage (frames that fault are dropped)

	// Under the pair's rxMu.
	headOffset uint32
	bmIndex    uint32
	bitmap     []bool
	// rxPending holds the page request group raised for an RX descriptor
	// (by free-running index) until the descriptor is filled, so frames
	// that fault on it meanwhile do not raise it again.
	rxPending map[uint32]*pri.Group

	// Mirrors for statistics and the status block.
	headOffsetA, bmIndexA atomic.Uint32

	resolveMu   sync.Mutex
	resolveQ    []uint32
	resolveKick chan struct{}

	tailIRQ atomic.Bool // RX_TAIL_IRQ armed
}

// latchFaults takes the pair's fault registers at enable.
func (in *instance) latchFaults(policy, pasid, bmSize uint32) {
	in.policy, in.pasid = policy, pasid
	if policy > hw.RxPolicyBackup {
		in.p.d.log.Warn("unknown RX policy; using drop", "pair", in.p.q, "policy", policy)
		in.policy = hw.RxPolicyDrop
	}
	if policy == hw.RxPolicyBackup {
		if bmSize == 0 || bmSize > hw.BmSizeMax || bmSize&(bmSize-1) != 0 {
			in.p.d.log.Warn("bad BM_SIZE: faulting frames will be dropped", "pair", in.p.q, "bm_size", bmSize)
			bmSize = 0
		}
		in.bmSize = bmSize
		in.bitmap = make([]bool, bmSize)
		in.resolveKick = make(chan struct{}, 1)
	}
	in.rxPending = make(map[uint32]*pri.Group)
}

// translating reports whether buffer addresses are VAs to translate.
func (d *Engine) translating() bool { return d.xlat != nil && d.xlat.ATSEnabled() }

// bufDMA copies p to (write) or from the buffer at addr: a VA of the
// pair's PASID while translating, an IOVA otherwise. The caller holds a
// unit of in.dma. A translation failure
// is an *ats.Fault; any other error is a guest memory fault of the
// translated pages.
func (in *instance) bufDMA(addr uint64, p []byte, write bool) error {
	d := in.p.d
	var err error
	switch {
	case !d.translating() && write:
		err = in.dma.WritePages(addr, p)
	case !d.translating():
		err = in.dma.ReadPages(addr, p)
	default:
		var h ats.Handle
		if h, err = d.xlat.Access(in.pasid, addr, len(p), write); err != nil {
			return err
		}
		// The walk belonged to ATS; the bytes moved are this instance's DMA.
		if write {
			err = h.WriteVia(in.dma, p, 0)
		} else {
			err = h.ReadVia(in.dma, p, 0)
		}
		h.Release()
	}
	if err == nil && d.trace.On() {
		in.traceDMA(addr, len(p), write)
	}
	return err
}

// traceDMA records buffer DMA that moved its bytes.
func (in *instance) traceDMA(addr uint64, n int, write bool) {
	if write {
		in.p.d.trace.Emit(trace.DMAWrite, trace.PairRx(in.p.q), addr, uint64(n))
	} else {
		in.p.d.trace.Emit(trace.DMARead, trace.PairTx(in.p.q), addr, uint64(n))
	}
}

// asFault returns err's translation fault, or nil.
func asFault(err error) *ats.Fault {
	var f *ats.Fault
	if errors.As(err, &f) {
		return f
	}
	return nil
}

// request builds the page request group for fault f of descriptor c.
func (in *instance) request(f *ats.Fault, c uint32, kind uint16, write bool, detected int64) pri.Request {
	return pri.Request{PASID: in.pasid, PASIDValid: in.pasid != 0, Pages: f.Pages, Write: write,
		Queue: uint16(in.p.q), Desc: c, Kind: kind, Detected: detected}
}

// rxFault handles a frame whose RX buffer (descriptor s) did not
// translate. Caller holds rxMu.
func (in *instance) rxFault(s rxSlot, frame []byte, h *pkthdr.Headers, f *ats.Fault, detected int64) {
	p := in.p
	p.st.rxFaults.Add(1)
	in.count(hw.PairStatusRxFaults, &in.rxFaultsG)
	p.d.trace.Emit(trace.Fault, trace.PairRx(p.q), f.VA, uint64(s.c))
	if !f.NeedsPageRequest() {
		// Nothing can make this buffer usable: the descriptor completes
		// with an error in place of the frame.
		p.d.log.Warn("RX buffer can not be translated", "pair", p.q, "desc", s.c, "fault", f.Error())
		p.st.rxFaultErrors.Add(1)
		in.rxFaultDrop(s.c)
		in.rxComplete(s, 0, hw.RxdError)
		return
	}
	if in.policy == hw.RxPolicyBackup {
		in.rxToBackup(frame, h, s.c, f, detected)
		return
	}
	in.rxFaultDrop(s.c)
	in.requestRxPage(s, f, detected)
}

// rxFaultDrop counts a frame for descriptor c dropped because of a fault.
func (in *instance) rxFaultDrop(c uint32) {
	in.p.st.rxFaultDrops.Add(1)
	in.count(hw.PairStatusRxFaultDrops, &in.rxFaultDropsG)
	in.p.d.trace.Emit(trace.RxDrop, trace.PairRx(in.p.q), uint64(c), trace.DropFault)
}

// requestRxPage raises the page request for descriptor s unless one is
// already outstanding. A group that completed with Invalid Request makes
// the descriptor complete with RXD_ERROR. The request never waits: when
// PRI has no room now, the next frame that faults here asks again. Caller
// holds rxMu.
func (in *instance) requestRxPage(s rxSlot, f *ats.Fault, detected int64) {
	if g := in.rxPending[s.c]; g != nil {
		select {
		case <-g.Done():
		default:
			return // already asked; still waiting for the driver
		}
		delete(in.rxPending, s.c)
		if g.Code() == pri.InvalidRequest {
			g.Finish()
			in.p.st.rxFaultErrors.Add(1)
			in.rxComplete(s, 0, hw.RxdError)
			return
		}
		// Success (the driver says resident, yet it still faults) or
		// abandoned: ask again.
	}
	in.requestOnce(f, s.c, detected)
}

// submitRx raises an RX page request without waiting; nil when PRI can
// not take it now.
func (in *instance) submitRx(f *ats.Fault, c uint32, detected int64) *pri.Group {
	e := in.p.d.pri
	if e == nil {
		return nil
	}
	g, err := e.TrySubmit(in.request(f, c, hw.FaultKindRxBuf, true, detected))
	if err != nil {
		return nil
	}
	return g
}

// rxToBackup is the backup branch of Figure 6's recv(): the frame meant for
// descriptor c (its buffer faulted, f non-nil, or c is not posted) goes to
// the backup ring if the bitmap and the backup ring have room, and is
// dropped otherwise. Caller holds rxMu.
func (in *instance) rxToBackup(frame []byte, h *pkthdr.Headers, c uint32, f *ats.Fault, detected int64) {
	p := in.p
	if in.headOffset >= in.bmSize {
		in.rxFaultDrop(c)
		in.requestOnce(f, c, detected)
		return
	}
	bit := in.bmIndex + in.headOffset
	if detected == 0 {
		detected = clock.Nanotime()
	}
	// The page request goes first, so the driver starts mapping the page
	// before it sees the backup entry that needs it. It is best effort: the
	// backup entry is what the driver acts on.
	in.requestOnce(f, c, detected)
	status := uint16(0)
	if rxCsumOK(frame, h) {
		status |= hw.BkdCsumOK
	}
	if !p.d.backup.store(frame, backupEntry{queue: uint16(p.q), desc: c, bmIndex: bit, stamp: detected, status: status}) {
		in.rxFaultDrop(c)
		return
	}
	p.d.trace.Emit(trace.BackupStore, trace.TrackBackup, uint64(c), uint64(bit))
	in.bitmap[bit%in.bmSize] = true
	in.setHeadOffset(in.headOffset + 1)
	p.st.rxBackup.Add(1)
	in.count(hw.PairStatusRxBackup, &in.rxBackupG)
}

// requestOnce raises the page request of fault f (if any) for descriptor c
// unless one is outstanding, without waiting. Caller holds rxMu.
func (in *instance) requestOnce(f *ats.Fault, c uint32, detected int64) {
	if f == nil || in.rxPending[c] != nil {
		return
	}
	if g := in.submitRx(f, c, detected); g != nil {
		in.rxPending[c] = g
	}
}

func (in *instance) setHeadOffset(v uint32) {
	in.headOffset = v
	in.headOffsetA.Store(v)
	in.publish(hw.PairStatusRxHeadOffset, v)
}

// finishRx ends the fault timing of descriptor c, if it had a request.
// Caller holds rxMu.
func (in *instance) finishRx(c uint32) {
	if g := in.rxPending[c]; g != nil {
		delete(in.rxPending, c)
		g.Finish()
	}
}

// queueResolve takes an RX_RESOLVE write (register path: no guest memory,
// no rxMu) for the resolve goroutine.
func (in *instance) queueResolve(bit uint32) {
	if in.resolveKick == nil {
		in.p.st.rxBadResolves.Add(1)
		in.p.st.rxResolves.Add(1)
		in.p.d.log.Warn("RX_RESOLVE on a pair without the backup policy; ignored", "pair", in.p.q, "bm_index", bit)
		return
	}
	in.resolveMu.Lock()
	in.resolveQ = append(in.resolveQ, bit)
	in.resolveMu.Unlock()
	select {
	case in.resolveKick <- struct{}{}:
	default:
	}
}

// resolveLoop applies RX_RESOLVE writes until the instance retires.
func (in *instance) resolveLoop() {
	d := in.p.d
	defer d.wg.Done()
	var batch []uint32
	for {
		select {
		case <-in.resolveKick:
		case <-in.stopCh:
			return
		case <-d.done:
			return
		}
		in.resolveMu.Lock()
		batch, in.resolveQ = in.resolveQ, batch[:0]
		in.resolveMu.Unlock()
		p := in.p
		p.rxMu.Lock()
		moved := false
		for _, bit := range batch {
			if err := in.resolve(bit); err != nil {
				p.st.rxBadResolves.Add(1)
				d.log.Warn("RX_RESOLVE ignored", "pair", p.q, "err", err)
				continue
			}
			moved = true
		}
		p.rxMu.Unlock()
		if moved {
			d.rxWake()
		}
		p.st.rxResolves.Add(uint64(len(batch)))
	}
}

// resolve is Figure 6's resolve_rNPFs(): clear bit, then move head past
// every leading resolved entry and tell the driver. Caller holds rxMu.
//
// It refuses (the caller counts rx_bad_resolves; nothing changes) an index
// that names no pending rNPF, and one whose descriptor the driver has not
// posted yet (see NetworkFaultsDoc in vdevice/hw):
//   - rNPFs only exist at offsets below BM_SIZE (rxToBackup), while
//     head_offset also counts frames completed in place past them: an
//     offset at or beyond BM_SIZE would alias, modulo BM_SIZE, onto the
//     bit of a pending rNPF and let head pass its unfilled descriptor;
//   - an rNPF's descriptor may lie at or beyond RX_TAIL. The driver can
//     not have placed its frame in a buffer it has not posted, and head
//     moved past the tail would make the next good RX_TAIL look like a
//     tail moving backwards. The driver resolves it again once posted.
func (in *instance) resolve(bit uint32) error {
	off := bit - in.bmIndex
	if in.bmSize == 0 || off >= in.headOffset || off >= in.bmSize || !in.bitmap[bit%in.bmSize] {
		return fmt.Errorf("bitmap index %d names no pending rNPF (bm_index %d, head_offset %d, bm_size %d)", bit, in.bmIndex, in.headOffset, in.bmSize)
	}
	head := in.rx.head.Load()
	if tail := in.rx.tail.Load(); int32(tail-(head+off)) <= 0 {
		return fmt.Errorf("bitmap index %d: descriptor %d not posted (rx_tail %d)", bit, head+off, tail)
	}
	in.bitmap[bit%in.bmSize] = false
	in.finishRx(head + off)
	defer func() {
		in.p.d.trace.Emit(trace.BackupResolve, trace.TrackBackup, uint64(bit), uint64(in.rx.head.Load()))
	}()
	advanced := uint32(0)
	for in.headOffset-advanced > 0 && !in.bitmap[(in.bmIndex+advanced)%in.bmSize] {
		advanced++
	}
	if advanced == 0 {
		return nil
	}
	// head, head_offset and bm_index move together: the RX path, which
	// stores at head+head_offset, holds rxMu too.
	in.rx.head.Store(head + advanced)
	in.bmIndex += advanced
	in.bmIndexA.Store(in.bmIndex)
	in.setHeadOffset(in.headOffset - advanced)
	in.publish(hw.PairStatusRxBmIndex, in.bmIndex)
	in.publish(hw.PairStatusRxHead, head+advanced)
	in.p.irq.event()
	return nil
}

// errTxFault is a TX buffer fault that no page request resolves now.
var errTxFault = errors.New("TX buffer can not be translated")

// txResolve stalls the pair on TX descriptor c until the pages of fault f
// are resident: it raises the page request groups (as many as the
// allocation needs) and waits for their responses. It returns nil when the
// frame should be retried, errTxFault-wrapped errors when it must be
// dropped, and the context's error when the instance retired.
func (in *instance) txResolve(c uint32, f *ats.Fault, detected int64) ([]*pri.Group, error) {
	p := in.p
	p.st.txFaults.Add(1)
	in.count(hw.PairStatusTxFaults, &in.txFaultsG)
	p.d.trace.Emit(trace.Fault, trace.PairTx(p.q), f.VA, uint64(c))
	e := p.d.pri
	if !f.NeedsPageRequest() || e == nil {
		return nil, fmt.Errorf("%w: %v", errTxFault, f)
	}
	pages := f.Pages
	var groups []*pri.Group
	for len(pages) > 0 {
		n := min(len(pages), e.MaxGroupPages())
		if n == 0 {
			return groups, fmt.Errorf("%w: PRI can not take requests", errTxFault)
		}
		req := in.request(f, c, hw.FaultKindTxBuf, false, detected)
		req.Pages = pages[:n]
		g, err := e.Submit(in.ctx, req)
		if err != nil {
			if in.ctx.Err() != nil {
				return groups, in.ctx.Err()
			}
			return groups, fmt.Errorf("%w: %v", errTxFault, err)
		}
		groups = append(groups, g)
		pages = pages[n:]
	}
	for _, g := range groups {
		if err := g.Wait(in.ctx); err != nil {
			if in.ctx.Err() != nil {
				return groups, in.ctx.Err()
			}
			return groups, fmt.Errorf("%w: %v", errTxFault, err)
		}
	}
	return groups, nil
}
