package ethring

import (
	"encoding/binary"
	"fmt"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// Large receive (interface 2.11, hw.LargeReceiveDoc): a TCP super-packet
// the host handed the port (ReceiveGSO) goes to a pair whose driver set
// PAIR_CTRL_RX_LRO whole, over a chain of consecutive RX descriptors, with
// its checksums finished once, instead of as the segments tsoSegments cuts
// it into. The guest then reassembles nothing: QEMU's virtio-net gives its
// guest the same with mergeable receive buffers.
//
// A chain is all or nothing. Everything that could stop it midway is
// checked before the first byte is written: the descriptors are posted
// and their buffers big enough (rxPickChain), and under translation every
// buffer translates now (rxChainXlat holds the translations until the
// chain is written). Whatever fails sends the super-packet back to
// ReceiveGSO, which cuts it into frames; those take the RX policy's fault
// handling, the backup ring and the drops as any frame does. So a chain
// never takes a fault, and the backup policy's head_offset only ever
// counts single frames.

// chainResult is what receiveChain did with a super-packet.
type chainResult uint8

const (
	chainDone     chainResult = iota // received as a chain, or dropped with a queue error
	chainFallback                    // not received: cut it into frames
	chainWait                        // too few descriptors posted yet: wait for the driver
)

// lroScratch is an instance's per-chain scratch, used under rxMu.
type lroScratch struct {
	slots [hw.RxChainMax]rxSlot
	xlat  [hw.RxChainMax]ats.Handle
}

// receiveLRO receives the super-packet f, validated by tsoParse as t, as
// one chain on the pair its flow steers to, and reports whether it did
// (or dropped it for good). It reports false, having written nothing,
// when f must be cut into frames instead: the pair did not ask for large
// receive, or the chain can not be written now (hw.LargeReceiveDoc). Like
// Receive, it waits while the pair has too few RX buffers posted for the
// chain and the driver may still post them. It clobbers f only when it
// reports true.
func (d *Engine) receiveLRO(f []byte, t *tsoHdrs, mss int) bool {
	if t.IPEnd != len(f) || mss > 0xffff {
		return false
	}
	hash := flowHash(f, &t.Headers)
	var stalled *instance // the instance this super-packet already counted a stall on
	for {
		if !d.running() {
			return false
		}
		p := d.steer(hash)
		if p == nil || !p.lro.Load() {
			return false
		}
		in, res, tail := p.receiveChain(f, t, mss, !d.rxDropNoBuf)
		if res != chainWait {
			return res == chainDone
		}
		if !d.awaitRxBuffers(in, func() bool { return in.rxChainStalled(tail) }, &stalled) {
			return true
		}
	}
}

// rxChainStalled reports whether a chain that found too few buffers with
// the RX tail at tail must still wait: the instance still runs, no rNPF is
// pending, and the driver posted nothing since.
func (in *instance) rxChainStalled(tail uint32) bool {
	return in.p.inst.Load() == in && in.mayRun() && in.headOffsetA.Load() == 0 &&
		in.rx.tail.Load() == tail
}

// receiveChain places the super-packet f (t, mss as for receiveLRO) into
// the chain of descriptors at the pair's head. With hold clear it never
// waits: too few buffers is chainFallback. On chainWait, tail is the RX
// tail it saw.
func (p *Pair) receiveChain(f []byte, t *tsoHdrs, mss int, hold bool) (in *instance, res chainResult, tail uint32) {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	in = p.inst.Load()
	// A stopped instance, or rNPFs pending: the frames path drops or
	// stores them as it does any frame.
	if in == nil || !in.mayRun() || in.headOffset != 0 || !in.dma.Begin() {
		return in, chainFallback, 0
	}
	defer in.dma.End()
	n, tail, res := in.rxPickChain(len(f), t.hlen, hold)
	if res != chainDone {
		return in, res, tail
	}
	xl := p.d.translating()
	if xl && !in.rxChainXlat(f, n) {
		return in, chainFallback, 0
	}
	lroFinish(f, t)
	err := in.rxChainDMA(f, n, xl)
	if xl {
		for k := range n {
			in.lro.xlat[k].Release()
		}
	}
	if err != nil {
		return in, chainDone, 0
	}
	status := uint16(hw.RxdDone | hw.RxdCsumOK | hw.RxdGSOTCP4)
	if t.IPVersion == 6 {
		status = hw.RxdDone | hw.RxdCsumOK | hw.RxdGSOTCP6
	}
	in.rxCompleteChain(n, len(f), status, uint16(mss))
	return in, chainDone, 0
}

// rxPickChain picks the descriptors from head on whose buffers together
// hold flen bytes, into in.lro.slots, and returns how many. The first
// buffer must hold the hlen bytes of headers, and no buffer may be empty
// (chainFallback otherwise, as for a chain longer than hw.RxChainMax). Too
// few descriptors posted is chainWait with hold set, unless the whole ring
// is posted (the chain can never fit it); chainFallback without hold. A
// descriptor outside guest memory fails the queue (chainDone: the frame is
// dropped). Caller holds rxMu and a unit of in.dma, with head_offset 0.
func (in *instance) rxPickChain(flen, hlen int, hold bool) (n int, tail uint32, res chainResult) {
	r := &in.rx
	c := r.head.Load()
	tail = r.tail.Load()
	posted := tail - c
	for sum := 0; sum < flen; n++ {
		if n == hw.RxChainMax {
			return 0, tail, chainFallback
		}
		if uint32(n) == posted && in.rxRefill(func(t uint32) bool { return t-c > uint32(n) }) {
			tail = r.tail.Load()
			posted = tail - c
		}
		if uint32(n) == posted {
			if !hold || posted >= r.size {
				return 0, tail, chainFallback
			}
			return 0, tail, chainWait
		}
		dc := c + uint32(n)
		desc, err := r.dc.get(in.dma, r, dc, tail)
		if err != nil {
			in.fail(hw.QErrBadRing, dc&r.mask, fmt.Errorf("RX descriptor %d: %w", dc&r.mask, err))
			return 0, tail, chainDone
		}
		s := rxSlot{c: dc, desc: r.base + uint64(dc&r.mask)*descSize,
			addr: hw.RxDescAddr.Get(desc), bufLen: int(hw.RxDescBufLen.Get(desc))}
		if s.bufLen == 0 || n == 0 && s.bufLen < hlen {
			return 0, tail, chainFallback
		}
		in.lro.slots[n] = s
		sum += s.bufLen
	}
	in.rxUnkick()
	return n, tail, chainDone
}

// rxChainParts calls fn with each of the n chain buffers and the part of
// f it holds, in order, until fn fails.
func (in *instance) rxChainParts(f []byte, n int, fn func(k int, s rxSlot, part []byte) error) error {
	for k := range n {
		s := in.lro.slots[k]
		part := f[:min(s.bufLen, len(f))]
		if err := fn(k, s, part); err != nil {
			return err
		}
		f = f[len(part):]
	}
	return nil
}

// rxChainXlat translates the buffers of the n-descriptor chain for f,
// holding the translations in in.lro.xlat until the caller releases them,
// and reports whether all of them translated now. A buffer that would
// fault raises nothing and counts nothing here: the frames the caller cuts
// f into meet that fault again and take it under the pair's policy.
// Caller holds rxMu.
func (in *instance) rxChainXlat(f []byte, n int) bool {
	x := in.p.d.xlat
	err := in.rxChainParts(f, n, func(k int, s rxSlot, part []byte) error {
		h, ok := x.TryAccess(in.pasid, s.addr, len(part), true)
		if !ok {
			for j := range k {
				in.lro.xlat[j].Release()
			}
			return errNoChain
		}
		in.lro.xlat[k] = h
		return nil
	})
	return err == nil
}

// errNoChain stops rxChainParts when a buffer does not translate.
var errNoChain = fmt.Errorf("chain buffer does not translate")

// rxChainDMA writes f into the chain's n buffers, through the
// translations rxChainXlat holds when xl is set. A buffer outside guest
// memory fails the queue, as for a single frame. Caller holds rxMu and a
// unit of in.dma.
func (in *instance) rxChainDMA(f []byte, n int, xl bool) error {
	d := in.p.d
	return in.rxChainParts(f, n, func(k int, s rxSlot, part []byte) error {
		var err error
		if xl {
			err = in.lro.xlat[k].WriteVia(in.dma, part, 0)
		} else {
			err = in.dma.WritePages(s.addr, part)
		}
		if err != nil {
			slot := s.c & in.rx.mask
			in.fail(hw.QErrBadDesc, slot, fmt.Errorf("RX chain descriptor %d buffer %#x+%d: %w", slot, s.addr, len(part), err))
			return err
		}
		if d.trace.On() {
			in.traceDMA(s.addr, len(part), true)
		}
		return nil
	})
}

// rxCompleteChain hands the n buffers of a chain holding flen bytes back:
// every descriptor's device fields (the first with status0, the chain
// length and gso_size), then rx_head past the whole chain at once, then
// the interrupt. Caller holds rxMu, with head_offset 0.
func (in *instance) rxCompleteChain(n, flen int, status0, gsoSize uint16) {
	p, r := in.p, &in.rx
	off := hw.RxDescPktLen.Offset
	rem := flen
	for k := range n {
		s := in.lro.slots[k]
		part := min(s.bufLen, rem)
		rem -= part
		var wb [descSize]byte
		hw.RxDescPktLen.Put(wb[:], uint16(part))
		if k == 0 {
			hw.RxDescStatus.Put(wb[:], status0|uint16(n)<<hw.RxdChainShift)
			hw.RxDescGSOSize.Put(wb[:], gsoSize)
		} else {
			hw.RxDescStatus.Put(wb[:], hw.RxdDone|hw.RxdCont)
		}
		// Only pkt_len, status and gso_size: addr and buf_len are the driver's.
		if err := in.dma.WriteAt(s.desc+uint64(off), wb[off:]); err != nil {
			slot := s.c & r.mask
			in.fail(hw.QErrBadRing, slot, fmt.Errorf("RX descriptor %d write-back: %w", slot, err))
			return
		}
		in.finishRx(s.c)
	}
	c0 := in.lro.slots[0].c
	p.st.rxFrames.Add(1)
	p.st.rxBytes.Add(uint64(flen))
	p.st.rxCsumOK.Add(1)
	p.st.rxLROFrames.Add(1)
	p.st.rxLRODescs.Add(uint64(n))
	p.d.trace.Emit(trace.RxFrame, trace.PairRx(p.q), uint64(c0), uint64(flen))
	head := c0 + uint32(n)
	r.head.Store(head)
	in.publish(hw.PairStatusRxHead, head)
	p.irq.event()
}

// lroFinish completes the super-packet f (validated by tsoParse as t, its
// IP length the frame's) as one frame: the IPv4 header checksum, and the
// TCP checksum over the whole segment, from scratch (the host left the
// pseudo-header seed in it).
func lroFinish(f []byte, t *tsoHdrs) {
	if t.IPVersion == 4 {
		ipv4HdrCsum(f, t.L3, t.L4)
	}
	binary.BigEndian.PutUint16(f[t.L4+tcpCsum:], 0)
	tcp := f[t.L4:]
	binary.BigEndian.PutUint16(f[t.L4+tcpCsum:], ^csumFold(pseudoSum(f, &t.Headers, len(tcp))+csumAdd(0, tcp)))
}
