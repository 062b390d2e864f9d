package ibrc

import (
	"fmt"

	"github.com/npfnic/npfnic/ibrc/rocev2"
)

// Memory windows (IBA 10.6.7): a window onto part of a memory region, with
// an R_Key of its own that remote operations name instead of the region's.
// A type 1 window is bound by a bind WR of the consumer's (ibv_bind_mw
// posts one) and unbound by binding it with length 0; a type 2 window is
// bound by a bind WR too, to the QP that posted it, which alone may use it,
// and unbound by LOCAL_INV or by a SEND with Invalidate naming its R_Key.
// Binding changes the R_Key's low byte (the key), so an R_Key a peer had
// before a rebind no longer works. The window's state is under the
// engine's table lock (mu): a bind and a lookup are table operations.

// MWType is a memory window's type; values match enum ibv_mw_type.
type MWType uint8

// Memory window types.
const (
	MWType1 MWType = 1
	MWType2 MWType = 2
)

// AccessMWBind lets windows be bound to a region (IBV_ACCESS_MW_BIND).
const AccessMWBind Access = 1 << 4

// MW is a memory window.
type MW struct {
	pd    *PD
	typ   MWType
	index uint32 // rkey >> 8: the window's place in the table
	// Under the engine's mu:
	rkey   uint32
	mr     *MR // nil: unbound, no access
	va     uint64
	length uint64
	access Access
	qp     *QP // type 2: the QP it is bound to
}

// MWBind is a bind WR's window, region and range.
type MWBind struct {
	MWRKey  uint32 // the window's R_Key now
	NewRKey uint32 // its key byte becomes the window's
	MRLKey  uint32 // the region (ignored when Length is 0)
	Addr    uint64
	Length  uint64 // 0: unbind (type 1)
	Access  Access // remote access through the window
}

// AllocMW creates a window of type typ whose R_Key is rkey (its index is
// rkey >> 8, unique among the engine's windows), bound to nothing.
func (pd *PD) AllocMW(typ MWType, rkey uint32) (*MW, error) {
	if typ != MWType1 && typ != MWType2 {
		return nil, fmt.Errorf("%w: window type %d", ErrInvalidArg, typ)
	}
	e := pd.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mws[rkey>>8] != nil {
		return nil, ErrResourceInUse
	}
	mw := &MW{pd: pd, typ: typ, index: rkey >> 8, rkey: rkey}
	e.mws[mw.index] = mw
	return mw, nil
}

// Dealloc removes the window: its R_Key grants nothing from now on.
func (mw *MW) Dealloc() {
	e := mw.pd.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mws[mw.index] == mw {
		delete(e.mws, mw.index)
	}
	mw.mr = nil
}

// RKey returns the window's R_Key now.
func (mw *MW) RKey() uint32 {
	mw.pd.e.mu.RLock()
	defer mw.pd.e.mu.RUnlock()
	return mw.rkey
}

// bind runs a bind WR of q's (rdma_rxe's rxe_check_bind_mw rules, from
// IBA C10-72..C10-75 and o10-36/37).
func (q *QP) bind(b *MWBind) error {
	e := q.e
	e.mu.Lock()
	defer e.mu.Unlock()
	mw := e.mws[b.MWRKey>>8]
	switch {
	case mw == nil || mw.rkey != b.MWRKey:
		return fmt.Errorf("%w: no window %#x", ErrInvalidArg, b.MWRKey)
	case mw.pd != q.pd:
		return fmt.Errorf("%w: window of another PD", ErrInvalidArg)
	case mw.typ == MWType2 && (mw.mr != nil || b.Length == 0):
		return fmt.Errorf("%w: type 2 window bound already, or bound to nothing", ErrInvalidArg)
	}
	var mr *MR
	if b.Length > 0 {
		mr = e.mrs[b.MRLKey]
		switch {
		case mr == nil || mr.pd != q.pd || mr.dead.Load():
			return fmt.Errorf("%w: no region %#x", ErrInvalidArg, b.MRLKey)
		case mr.access&AccessMWBind == 0:
			return fmt.Errorf("%w: region without MW_BIND", ErrInvalidArg)
		case b.Access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && mr.access&AccessLocalWrite == 0:
			return fmt.Errorf("%w: remote write through a region without local write", ErrInvalidArg)
		case b.Addr < mr.va || b.Length > mr.length || b.Addr-mr.va > mr.length-b.Length:
			return fmt.Errorf("%w: window outside its region", ErrInvalidArg)
		}
	}
	mw.rkey = mw.rkey&^0xff | b.NewRKey&0xff
	mw.mr, mw.va, mw.length, mw.access = mr, b.Addr, b.Length, b.Access
	mw.qp = nil
	if mw.typ == MWType2 {
		mw.qp = q
	}
	return nil
}

// invalidate unbinds the type 2 window of rkey in q's PD, or frees the
// fast region rkey is the key of (LOCAL_INV, or a SEND with Invalidate
// that reached q).
func (q *QP) invalidate(rkey uint32) error {
	if ok, err := q.invalidateFast(rkey); ok {
		return err
	}
	e := q.e
	e.mu.Lock()
	defer e.mu.Unlock()
	mw := e.mws[rkey>>8]
	if mw == nil || mw.rkey != rkey || mw.pd != q.pd || mw.typ != MWType2 || mw.mr == nil {
		return fmt.Errorf("%w: no bound type 2 window %#x", ErrInvalidArg, rkey)
	}
	mw.mr, mw.qp, mw.length, mw.access = nil, nil, 0, 0
	return nil
}

// lookupRemote finds the region a remote access of length bytes at va
// with R_Key rkey reaches: a region of q's PD, or one through a window
// bound in it (to q, for type 2) that covers the range and grants need.
func (q *QP) lookupRemote(rkey uint32, need Access, va, length uint64) *MR {
	e := q.e
	if m := e.lookupMR(rkey, q.pd, need, va, length); m != nil {
		return m
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	mw := e.mws[rkey>>8]
	if mw == nil || mw.rkey != rkey || mw.pd != q.pd || mw.mr == nil || mw.typ == MWType2 && mw.qp != q ||
		mw.access&need != need || va < mw.va || length > mw.length || va-mw.va > mw.length-length {
		return nil
	}
	return mw.mr
}

// localOp runs a send WR that touches no wire: BIND_MW, LOCAL_INV or REG_MR, once
// every WR before it completed. It reports whether it completed w.
func (q *QP) localOp(w *sendWQE) bool {
	if q.req.next > 0 {
		return false // in order: it waits for the WRs before it
	}
	var err error
	st := WCLocQPOpErr
	switch w.wr.Opcode {
	case WRBindMW:
		err, st = q.bind(&w.wr.Bind), WCMWBindErr
	case WRLocalInv:
		err = q.invalidate(w.wr.InvRKey)
	case WRRegMR:
		err = q.fastRegister(&w.wr.Reg)
	}
	if err != nil {
		q.failHead(st)
		return false
	}
	w.started = true
	q.req.next++
	q.completeHead(WCSuccess)
	return true
}

// sendInvalidates: the packet is a SEND with Invalidate's last.
func sendInvalidates(p *rocev2.Packet) bool {
	return p.BTH.Opcode.Has(rocev2.HasIETH)
}
