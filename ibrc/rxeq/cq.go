package rxeq

import (
	"errors"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// CQE is a completion as struct ib_uverbs_wc carries it (and librxe hands
// it to ibv_poll_cq as struct ibv_wc).
type CQE struct {
	WRID      uint64
	Status    ibrc.WCStatus
	Opcode    ibrc.WCOpcode
	VendorErr uint32
	ByteLen   uint32
	// Imm is ex's value: the immediate data (stored in network order,
	// ex.imm_data) or, with ibrc.WCWithInv, the invalidated R_Key (stored
	// in host order, ex.invalidate_rkey).
	Imm          uint32
	QPNum        uint32
	SrcQP        uint32
	Flags        ibrc.WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
	PortNum      uint8
}

// CQEFromWC is the entry of an engine completion, on the device's only
// port (1), with the fields rdma_rxe fills: src_qp (a UD receive's), and
// IBV_WC_GRH on every receive completion.
func CQEFromWC(wc ibrc.WC) CQE {
	e := CQE{WRID: wc.WRID, Status: wc.Status, Opcode: wc.Opcode, ByteLen: wc.ByteLen, Imm: wc.Imm,
		QPNum: wc.QPN, SrcQP: wc.SrcQP, Flags: wc.Flags, PortNum: 1}
	if wc.Opcode&ibrc.WCRecv != 0 {
		e.Flags |= wcGRH
	}
	return e
}

// wcGRH is IBV_WC_GRH, which package ibrc has no use for.
const wcGRH = ibrc.WCFlags(hw.IBVWCGRH)

// Encode writes e into b's first hw.RxeCQESize bytes, every byte of them.
func (e CQE) Encode(b []byte) {
	b = b[:hw.RxeCQESize]
	hw.RxeCQEWRID.Put(b, e.WRID)
	hw.RxeCQEStatus.Put(b, uint32(e.Status))
	hw.RxeCQEOpcode.Put(b, uint32(e.Opcode))
	hw.RxeCQEVendorErr.Put(b, e.VendorErr)
	hw.RxeCQEByteLen.Put(b, e.ByteLen)
	if e.Flags&ibrc.WCWithInv != 0 {
		hw.RxeCQEInvRKey.Put(b, e.Imm)
	} else {
		hw.RxeCQEImm.Put(b, e.Imm)
	}
	hw.RxeCQEQPNum.Put(b, e.QPNum)
	hw.RxeCQESrcQP.Put(b, e.SrcQP)
	hw.RxeCQEFlags.Put(b, uint32(e.Flags))
	hw.RxeCQEPKeyIndex.Put(b, e.PKeyIndex)
	hw.RxeCQESLID.Put(b, e.SLID)
	hw.RxeCQESL.Put(b, e.SL)
	hw.RxeCQEDLIDPathBits.Put(b, e.DLIDPathBits)
	hw.RxeCQEPortNum.Put(b, e.PortNum)
	b[hw.RxeCQESize-1] = 0 // reserved
}

// DecodeCQE reads an entry (as librxe's consumer does; the device only
// writes them). Fields wider in the ABI than in ibrc's types are truncated.
func DecodeCQE(b []byte) CQE {
	e := CQE{
		WRID: hw.RxeCQEWRID.Get(b), Status: ibrc.WCStatus(hw.RxeCQEStatus.Get(b)),
		Opcode: ibrc.WCOpcode(hw.RxeCQEOpcode.Get(b)), VendorErr: hw.RxeCQEVendorErr.Get(b),
		ByteLen: hw.RxeCQEByteLen.Get(b), Imm: hw.RxeCQEImm.Get(b), QPNum: hw.RxeCQEQPNum.Get(b),
		SrcQP: hw.RxeCQESrcQP.Get(b), Flags: ibrc.WCFlags(hw.RxeCQEFlags.Get(b)),
		PKeyIndex: hw.RxeCQEPKeyIndex.Get(b), SLID: hw.RxeCQESLID.Get(b), SL: hw.RxeCQESL.Get(b),
		DLIDPathBits: hw.RxeCQEDLIDPathBits.Get(b), PortNum: hw.RxeCQEPortNum.Get(b),
	}
	if e.Flags&ibrc.WCWithInv != 0 {
		e.Imm = hw.RxeCQEInvRKey.Get(b)
	}
	return e
}

// ErrCQFull is returned by Push when user space has not consumed enough:
// the completion is lost and the CQ is in error (IBV_EVENT_CQ_ERR).
var ErrCQFull = errors.New("rxeq: completion queue full")

// CQ is the device's end of an rxe completion queue: the device produces,
// user space consumes.
type CQ struct {
	ring
	prod uint32
	cqe  [hw.RxeCQESize]byte
}

// NewCQ registers a completion queue. It touches no memory.
func NewCQ(mem Memory, g Geometry) (*CQ, error) {
	if err := g.check(hw.RxeCQESize); err != nil {
		return nil, err
	}
	return &CQ{ring: ring{mem: mem, g: g, mask: g.Slots - 1}}, nil
}

// Push writes e into the next slot, then producer_index past it. It fails
// with ErrCQFull when consumer_index == (producer_index + 1) & index_mask,
// and with a *RingError when the queue's memory can not be accessed; in
// both cases the producer index did not move.
func (c *CQ) Push(e CQE) error {
	cons, err := c.load(hw.RxeQueueConsumer, "consumer_index")
	if err != nil {
		return err
	}
	next := (c.prod + 1) & c.mask
	if next == cons {
		return ErrCQFull
	}
	e.Encode(c.cqe[:])
	addr := c.g.SlotAddr(c.prod)
	if err := c.mem.WriteAt(addr, c.cqe[:]); err != nil {
		return &RingError{"write completion", addr, err}
	}
	if err := c.store(hw.RxeQueueProducer, "producer_index", next); err != nil {
		return err
	}
	c.prod = next
	return nil
}

// Room is how many completions fit now (consumer_index loaded once).
func (c *CQ) Room() (int, error) {
	cons, err := c.load(hw.RxeQueueConsumer, "consumer_index")
	if err != nil {
		return 0, err
	}
	return int((cons - c.prod - 1) & c.mask), nil
}

// Consumer loads consumer_index (masked): the slot user space polls next.
func (c *CQ) Consumer() (uint32, error) { return c.load(hw.RxeQueueConsumer, "consumer_index") }

// Producer is the device's producer index: the slot the next completion
// goes to.
func (c *CQ) Producer() uint32 { return c.prod }

// Resize moves the completions user space has not consumed yet into a new
// ring over mem and g, from its slot 0 on, and writes the new ring's
// indices (consumer 0, producer past them), as rdma_rxe's resize does: the
// old ring is not touched again by the new CQ. It returns the new CQ and
// how many completions moved; ErrCQFull if they do not fit (nothing of
// the new ring written then but what it read).
func (c *CQ) Resize(mem Memory, g Geometry) (*CQ, uint32, error) {
	n, err := NewCQ(mem, g)
	if err != nil {
		return nil, 0, err
	}
	cons, err := c.load(hw.RxeQueueConsumer, "consumer_index")
	if err != nil {
		return nil, 0, err
	}
	k := (c.prod - cons) & c.mask
	if k > n.mask {
		return nil, 0, ErrCQFull
	}
	for i := range k {
		from := c.g.SlotAddr((cons + i) & c.mask)
		if err := c.mem.ReadAt(from, n.cqe[:]); err != nil {
			return nil, 0, &RingError{"read completion", from, err}
		}
		to := n.g.SlotAddr(i)
		if err := n.mem.WriteAt(to, n.cqe[:]); err != nil {
			return nil, 0, &RingError{"write completion", to, err}
		}
	}
	if err := n.store(hw.RxeQueueConsumer, "consumer_index", 0); err != nil {
		return nil, 0, err
	}
	if err := n.store(hw.RxeQueueProducer, "producer_index", k); err != nil {
		return nil, 0, err
	}
	n.prod = k
	return n, k, nil
}
