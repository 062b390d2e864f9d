package ethring

import (
	"errors"
	"fmt"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// txPublishEvery bounds how many frames the TX engine sends before it
// tells the driver (tx_head and an interrupt), so a long burst still frees
// the driver's buffers as it goes.
const txPublishEvery = 32

// txRun sends every complete frame between head and tail, then publishes
// tx_head and signals the completion. It runs on the instance's worker;
// each frame's guest-memory accesses are one unit of in.dma.
func (in *instance) txRun() {
	t := &in.tx
	head := t.head.Load()
	published := head
	for in.mayRun() {
		tail := t.tail.Load()
		if head == tail {
			break
		}
		n := in.txFrame(head, tail)
		if n == 0 {
			break // incomplete frame posted, or a queue error
		}
		head += n
		// The head moves before the driver learns about it: doorbell
		// validation relies on never seeing a head behind the driver's.
		t.head.Store(head)
		if head-published >= txPublishEvery {
			in.txComplete(head)
			published = head
		}
	}
	if head != published {
		in.txComplete(head)
	}
}

// txComplete tells the driver the descriptors before head are done: status
// block first, then the interrupt (which fires only while the instance
// runs: Pair.fireIRQ). The interrupt is lazy under TX_IRQ_DELAY
// (hw.TxIRQDelayDoc) until the descriptors completed since the last
// interrupt reach half the ring.
func (in *instance) txComplete(head uint32) {
	in.publish(hw.PairStatusTxHead, head)
	if txUrgent(head, in.txIRQHead.Load(), in.tx.size) {
		in.p.irq.event()
	} else {
		in.p.irq.lazyEvent()
	}
}

// txUrgent reports whether a TX completion at head asks for its
// interrupt at once: the descriptors completed since the last interrupt
// (irqHead) fill half a ring of size, so the driver may be about to stop
// its queue, or has stopped it.
func txUrgent(head, irqHead, size uint32) bool {
	return head-irqHead >= size/2
}

// txBuf is the TX engine's working memory: the gather buffer, big enough
// for a TSO super-packet, and the header template TSO copies into every
// segment. A pair keeps one spare across enables (Pair.getTxBuf).
type txBuf struct {
	frame [hw.MaxTSOFrame]byte
	hdr   [tsoMaxHdr]byte
}

// txOffload is what the first descriptor of a frame asks for.
type txOffload struct {
	flags      uint16
	mss        int
	csumStart  int
	csumOffset int
}

// txFrame gathers the frame starting at descriptor counter head, sends or
// drops it, and returns how many descriptors it consumed: 0 when the frame
// is not completely posted yet (no EOP before tail), on a queue error, or
// when the instance retired (its stream stopped) before or while the frame
// waited for a page response.
//
// Only the gather is a unit of in.dma: the wait for a page response and
// the send on the wire (which may block on the port) happen outside it,
// so neither holds up the pair's quiesce.
//
// A frame with more than hw.TxMaxSegs segments, or a length outside
// hw.MinFrame..hw.MaxFrame (hw.MaxTSOFrame for a TSO frame), is dropped
// whole and counted in tx_drops_bad_len; that is the driver's mistake but
// not a queue error. So is an offload request the device cannot carry out
// (see txOffloadSend). Descriptors filling the whole ring without an EOP
// are dropped the same way, since the driver could never complete that
// frame.
//
// A buffer whose translation faults stalls the pair here (the data is
// local): the page request is raised, and after a Success response the
// frame is gathered again from its first descriptor. A buffer that can not
// be translated (Invalid Request, a bad mapping, PRI off) drops the frame
// whole, counted in tx_fault_errors.
func (in *instance) txFrame(head, tail uint32) uint32 {
	var pending []*pri.Group // fault timing, finished once the frame is gathered
	defer func() {
		for _, g := range pending {
			g.Finish()
		}
	}()
	for {
		if !in.dma.Begin() {
			return 0
		}
		n, f, c, out := in.txGather(head, tail)
		in.dma.End()
		if f == nil {
			switch {
			case out.drop:
				in.txDrop()
			case out.len > 0:
				in.txOffloadSend(in.txb.frame[:out.len], out.off)
			}
			return n
		}
		detected := clock.Nanotime()
		groups, err := in.txResolve(c, f, detected)
		pending = append(pending, groups...)
		switch {
		case err == nil:
			continue // resident now: gather again
		case errors.Is(err, errTxFault):
			in.p.d.log.Warn("TX frame dropped", "pair", in.p.q, "desc", c, "err", err)
			if !in.dma.Begin() {
				return 0
			}
			defer in.dma.End()
			return in.txSkip(head, tail)
		default:
			return 0 // retired
		}
	}
}

// txOut is what a gathered frame becomes: sent (len bytes of the gather
// buffer, with off) or dropped; neither when nothing was consumed.
type txOut struct {
	len  int
	off  txOffload
	drop bool
}

// txGather is one attempt of txFrame, inside a unit of in.dma. It returns
// the descriptors consumed and what to do with the frame, or the
// translation fault that stopped it and the descriptor it hit.
func (in *instance) txGather(head, tail uint32) (uint32, *ats.Fault, uint32, txOut) {
	t := &in.tx
	buf := in.txb.frame[:]
	avail := tail - head
	flen, bad := 0, false
	limit := hw.MaxFrame
	var off txOffload
	for i := uint32(0); i < avail; i++ {
		c := head + i
		desc, err := t.dc.get(in.dma, t, c, tail)
		if err != nil {
			in.fail(hw.QErrBadRing, c&t.mask, fmt.Errorf("TX descriptor %d: %w", c&t.mask, err))
			return 0, nil, 0, txOut{}
		}
		addr := hw.TxDescAddr.Get(desc)
		seg := int(hw.TxDescLen.Get(desc))
		flags := hw.TxDescFlags.Get(desc)
		if i == 0 {
			off = txOffload{flags: flags, mss: int(hw.TxDescMSS.Get(desc)),
				csumStart: int(hw.TxDescCsumStart.Get(desc)), csumOffset: int(hw.TxDescCsumOffset.Get(desc))}
			if flags&(hw.TxdTSO4|hw.TxdTSO6) != 0 {
				limit = hw.MaxTSOFrame
			}
		}
		if i >= hw.TxMaxSegs || flen+seg > limit {
			bad = true
		}
		if !bad && seg > 0 {
			if err := in.bufDMA(addr, buf[flen:flen+seg], false); err != nil {
				if f := asFault(err); f != nil {
					return 0, f, c, txOut{}
				}
				in.fail(hw.QErrBadDesc, c&t.mask, fmt.Errorf("TX descriptor %d buffer %#x+%d: %w", c&t.mask, addr, seg, err))
				return 0, nil, 0, txOut{}
			}
			flen += seg
		}
		if flags&hw.TxdEOP != 0 {
			if bad || flen < hw.MinFrame {
				return i + 1, nil, 0, txOut{drop: true}
			}
			return i + 1, nil, 0, txOut{len: flen, off: off}
		}
	}
	if avail == t.size {
		return avail, nil, 0, txOut{drop: true}
	}
	return 0, nil, 0, txOut{}
}

// txSkip drops the frame at head without reading its buffers, counted in
// tx_fault_errors, and returns the descriptors it spans (0 when its EOP is
// not posted yet: the frame is dropped once it is). Caller holds a unit of
// in.dma.
func (in *instance) txSkip(head, tail uint32) uint32 {
	t := &in.tx
	for i := uint32(0); i < tail-head; i++ {
		desc, err := t.dc.get(in.dma, t, head+i, tail)
		if err != nil {
			in.fail(hw.QErrBadRing, (head+i)&t.mask, fmt.Errorf("TX descriptor %d: %w", (head+i)&t.mask, err))
			return 0
		}
		if hw.TxDescFlags.Get(desc)&hw.TxdEOP != 0 || i+1 == t.size {
			in.p.st.txFaultErrors.Add(1)
			in.count(hw.PairStatusTxFaultErrors, &in.txFaultErrorsG)
			return i + 1
		}
	}
	return 0
}

// txOffloadSend carries out the frame's offload request and sends the
// result. A request it cannot carry out drops the frame (tx_drops_bad_len):
// a checksum field outside the frame; for TSO, both TSO flags, an mss of 0
// or above hw.TSOMaxMSS, or headers that are not Ethernet (one optional VLAN
// tag), IPv4 or IPv6 as flagged (of the extension headers only hop-by-hop
// and destination options), then TCP at csum_start (tsoParse).
//
// A valid TSO frame goes whole to a wire that can segment it (port.AsGSO:
// a TAP, also behind the pcap recorder, which then records the
// super-packet), with its IP length, IPv4 header checksum and TCP
// pseudo-header seed fixed up (tsoGSOPrepare), as QEMU's e1000e does; the
// host kernel cuts the segments, to the same rules as tsoSegments. It
// counts as one frame in tx_frames/tx_bytes, and the segments the host
// will cut in tx_tso_segments. Otherwise, and for an IPv4 datagram too
// long for its length field, the device segments itself.
func (in *instance) txOffloadSend(f []byte, off txOffload) {
	switch tso := off.flags & (hw.TxdTSO4 | hw.TxdTSO6); {
	case tso != 0:
		if tso == hw.TxdTSO4|hw.TxdTSO6 || off.mss == 0 || off.mss > hw.TSOMaxMSS {
			in.txDrop()
			return
		}
		t, ok := tsoParse(f, tso == hw.TxdTSO6, off.csumStart)
		if !ok {
			in.txDrop()
			return
		}
		var n int
		if g, ok := port.AsGSO(in.p.d.wire); ok && tsoGSOFits(f, t) {
			n = tsoGSOPrepare(f, t, off.mss)
			typ := port.GSOTCPv4
			if t.IPVersion == 6 {
				typ = port.GSOTCPv6
			}
			if f[t.L4+tcpFlags]&tcpFlagCWR != 0 {
				typ |= port.GSOECN
			}
			in.txSendGSO(g, f, port.GSOInfo{Type: typ, HdrLen: t.hlen, GSOSize: off.mss,
				CsumStart: t.L4, CsumOffset: tcpCsum, NeedsCsum: true})
		} else {
			n = tsoSegments(f, t, off.mss, in.txb.hdr[:], in.txSend)
		}
		p := in.p
		p.st.txTSOFrames.Add(1)
		p.st.txTSOSegments.Add(uint64(n))
		in.count(hw.PairStatusTxTSOFrames, &in.txTSOFrames)
	case off.flags&hw.TxdCsum != 0:
		if len(f) > hw.MaxFrame || !txCsum(f, off.csumStart, off.csumOffset) {
			in.txDrop()
			return
		}
		in.p.st.txCsumOffloads.Add(1)
		in.txSend(f)
	default:
		if len(f) > hw.MaxFrame {
			in.txDrop()
			return
		}
		in.txSend(f)
	}
}

func (in *instance) txSend(frame []byte) {
	p := in.p
	w := p.d.wire
	if w == nil {
		p.st.txSendErrors.Add(1) // link down: the frame is lost, as on a real port
		return
	}
	if err := w.Send(frame); err != nil {
		p.st.txSendErrors.Add(1)
		return
	}
	p.st.txFrames.Add(1)
	p.st.txBytes.Add(uint64(len(frame)))
	p.d.trace.Emit(trace.TxFrame, trace.PairTx(p.q), uint64(in.tx.head.Load()), uint64(len(frame)))
}

// txSendGSO sends a TSO super-packet whole through a port that segments
// it. It counts as one frame of len(frame) bytes in tx_frames/tx_bytes
// (what the device handed the wire); tx_tso_segments counts the segments
// the host will cut.
func (in *instance) txSendGSO(g port.GSOSender, frame []byte, gso port.GSOInfo) {
	p := in.p
	if err := g.SendGSO(frame, gso); err != nil {
		p.st.txSendErrors.Add(1)
		return
	}
	p.st.txFrames.Add(1)
	p.st.txBytes.Add(uint64(len(frame)))
	p.d.trace.Emit(trace.TxFrame, trace.PairTx(p.q), uint64(in.tx.head.Load()), uint64(len(frame)))
}

func (in *instance) txDrop() {
	in.p.st.txDropsBadLen.Add(1)
	in.count(hw.PairStatusTxDropsBadLen, &in.txDropsBadLen)
}
