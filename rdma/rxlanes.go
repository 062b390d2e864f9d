package rdma

import (
	"encoding/binary"

	"github.com/npfnic/npfnic/vdevice/pkthdr"
	"github.com/npfnic/npfnic/vdevice/port"
)

// Receive steering. The port's reader hands the engine every frame; with
// Config.RxLanes, the engine does not handle them there but on lanes,
// one goroutine each, a frame on the lane of its destination QP: a QP's
// frames are handled in order, on one goroutine, and different QPs' on as
// many goroutines as there are lanes (the responder's ICRC check and
// placement, the completer's next packets, gather and ICRC, which an ACK
// lets go). The reader hands a lane the buffer it read the frame into
// (port.BufferReceiver) and reads on into a free one, so steering copies
// nothing. Frames that reach Receive another way (Mux.Dispatch, the
// loopback of the transmit goroutine, tests) are handled on the caller's
// goroutine as before.

const (
	// maxRxLanes bounds the lanes.
	maxRxLanes = 4
	// rxLaneDepth is how many frames wait on a lane before the port's
	// reader waits for it, as it waited for the engine before.
	rxLaneDepth = 32
)

// rxLanes are the engine's receive lanes; none without Config.RxLanes or
// when the engine has no goroutines of its own (newEngine: fuzz targets).
type rxLanes struct {
	lanes []chan []byte
	free  chan []byte // buffers of port.MaxFrameLen for the reader
}

// startLanes starts the lanes' goroutines (New), which end with the
// engine (Close waits for them).
func (e *Engine) startLanes() {
	n := min(e.cfg.RxLanes, maxRxLanes)
	if n < 2 {
		return
	}
	e.rx.free = make(chan []byte, n*rxLaneDepth+1)
	for range n {
		ch := make(chan []byte, rxLaneDepth)
		e.rx.lanes = append(e.rx.lanes, ch)
		e.wg.Add(1)
		go e.lane(ch)
	}
}

// ReceiveBuffer implements port.BufferReceiver: the frame goes to its
// QP's lane, with its buffer, and the reader gets a free buffer back. It
// waits while the lane is full, as the reader waited for the engine to
// handle each frame before, and not once the engine is closed.
func (e *Engine) ReceiveBuffer(frame []byte) []byte {
	if len(e.rx.lanes) == 0 {
		e.Receive(frame)
		return frame
	}
	select {
	case e.rx.lanes[laneOf(frame, len(e.rx.lanes))] <- frame:
	case <-e.done:
		return frame
	}
	select {
	case b := <-e.rx.free:
		return b
	default:
		return make([]byte, port.MaxFrameLen)
	}
}

// lane handles the frames of one lane until the engine closes.
func (e *Engine) lane(ch chan []byte) {
	defer e.wg.Done()
	for {
		select {
		case f := <-ch:
			select {
			case <-e.done:
				return
			default:
			}
			e.Receive(f)
			select {
			case e.rx.free <- f[:cap(f)]:
			default:
			}
		case <-e.done:
			return
		}
	}
}

// laneOf is the lane of a frame the engine claimed: by its BTH's
// destination QP, hashed (QPNs often differ only in their high bits), lane
// 0 for a frame too short to have one (HandleFrame drops it).
func laneOf(frame []byte, n int) int {
	var h pkthdr.Headers
	if h.Parse(frame) != nil {
		return 0
	}
	bth := h.L4 + 8 // UDP header
	if len(frame) < bth+8 {
		return 0
	}
	qpn := binary.BigEndian.Uint32(frame[bth+4:]) & 0xffffff
	return int((qpn*0x9e3779b1)>>16) % n
}
