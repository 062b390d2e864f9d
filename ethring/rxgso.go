package ethring

import (
	"sync/atomic"

	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

// Receive offload from the host side of the port (port.RecvGSOPort): the
// TAP delivers TCP super-packets and partially checksummed frames, as the
// host kernel hands them to a virtio-net guest, and the device finishes
// them here with the same segmentation and checksum code as its own TSO,
// so the guest still sees finished frames of at most hw.MaxFrame bytes.
//
// The point is back-pressure, not speed: a receive that waits for RX
// buffers (Engine.Receive) stops the reader, and the TAP's queue, which
// counts packets, then holds super-packets, a TCP window's worth, where it
// held 1000 MTU frames and dropped the rest.

// rxGSOStats counts what ReceiveGSO did.
type rxGSOStats struct {
	frames, segments, csums, bad, chains atomic.Uint64
}

// ReceiveGSO implements port.GSOReceiver: a super-packet goes whole, as a
// chain of RX descriptors, to a pair whose driver asked for large receive
// (rxlro.go) when it can; otherwise it is cut into segments of
// gso.GSOSize payload bytes, each with its headers and checksums complete,
// and each received as Receive receives a frame, in order; a frame that
// only needs its checksum gets it and is received.
// The header comes from the host kernel, but is checked all the same: a
// segmentation request that is not TCP over IPv4 or IPv6 as tsoParse
// accepts it (checksum at the TCP checksum field), an mss of 0 or one
// whose segments would exceed hw.MaxFrame, or a checksum field outside the
// frame, drops the frame (rx_gso_bad in Stats). It clobbers frame.
func (d *Engine) ReceiveGSO(frame []byte, gso port.GSOInfo) {
	typ := gso.Type &^ port.GSOECN
	switch {
	case typ == port.GSONone:
		if len(frame) > hw.MaxFrame || gso.NeedsCsum && !txCsum(frame, gso.CsumStart, gso.CsumOffset) {
			d.rxGSO.bad.Add(1)
			return
		}
		d.rxGSO.csums.Add(1)
		d.Receive(frame)
	case typ == port.GSOTCPv4 || typ == port.GSOTCPv6:
		t, ok := tsoParse(frame, typ == port.GSOTCPv6, gso.CsumStart)
		if !ok || !gso.NeedsCsum || gso.CsumOffset != tcpCsum || gso.GSOSize == 0 ||
			t.hlen+gso.GSOSize > hw.MaxFrame {
			d.rxGSO.bad.Add(1)
			return
		}
		d.rxGSO.frames.Add(1)
		if d.receiveLRO(frame, &t, gso.GSOSize) {
			d.rxGSO.chains.Add(1)
			return
		}
		var hdr [tsoMaxHdr]byte
		n := tsoSegments(frame, t, gso.GSOSize, hdr[:], d.Receive)
		d.rxGSO.segments.Add(uint64(n))
	default:
		d.rxGSO.bad.Add(1)
	}
}
