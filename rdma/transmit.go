package rdma

import (
	"errors"
	"sync"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// txDepth bounds the frames the RC transport handed over that the port
// has not taken yet: beyond it the transport is refused
// (ibrc.ErrPortFull), and it is let go on (PortReady) once half of them
// left. It is short because every frame in it is latency for the RC
// timers of the peer (a READ's responses behind 128 others).
const txDepth = 128

// errClosed is a frame sent after Close.
var errClosed = errors.New("rdma: closed")

// txFrame is a frame and the transport that built it.
type txFrame struct {
	rc    *ibrc.Transport
	frame []byte
}

// transmitter is the RC engine's transmit path: a bounded queue between
// the transport, which hands it frames from whatever goroutine released
// the transport's lock (the port's reader, the worker, a timer), and the
// goroutine that gives them to the port, whose Send may block while the
// peer does not read. Only that goroutine waits for the wire, so the
// port's reader keeps reading whatever the peer does: two NICs reading
// from each other no longer wait for each other's readers. It paces the
// transport (ibrc.PacedPort): when the transport has packets to build
// (Pull) or was refused, this goroutine lets it build and queue them
// (PortReady) once the queue has room, so a long READ's responses are
// read from guest memory here, not on the port's reader. Frames of a
// transport that RESET replaced are dropped, queued or not.
//
// A frame to the port's own MAC and one of its own addresses (a QP
// connected to another QP of this device: the kernel resolves its path to
// the port's own MAC) never reaches the wire: this goroutine hands it to the engine's
// receive path, as rdma_rxe loops back a packet to a local address. So
// loopback works without a cable, and takes the transmit path's flow
// control like any other frame.
//
// With Config.TxDirect, a frame with nothing ahead of it (the queue empty,
// the goroutine holding no frame) that the port takes without waiting (port.TrySender: the
// in-memory cable with room, a writable TAP) does not go through the
// queue: put sends it on the caller's goroutine (direct), under mu, so
// that it cannot pass one the goroutine holds. A stream of packets then
// costs no wake-up of this goroutine; only when the port would block, or
// the queue holds frames, does a frame wait for it. It is off by default:
// the copy into the port then runs on the goroutine that builds the
// packets, under the QP's lock, rather than beside it on another core
// (docs/rdma.md measures both).
type transmitter struct {
	e    *Engine
	mu   sync.Mutex
	cond sync.Cond
	ring [txDepth]txFrame
	r, w uint64          // frames taken, frames queued
	wake *ibrc.Transport // pulled or refused: PortReady once there is room
	// sending: the goroutine took a frame and has not seen its Send
	// return; a frame sent on a caller's goroutine (direct) would pass it.
	sending bool
	done    bool // Close: the goroutine stops
	// readyMu is held across PortReady calls and taken by close to set
	// done (before mu), so that close waits one out.
	readyMu sync.Mutex
}

func (t *transmitter) init(e *Engine) {
	t.e = e
	t.cond.L = &t.mu
}

// txPort is one transport's side of the transmitter.
type txPort struct {
	t  *transmitter
	rc *ibrc.Transport // set once, before the transport is published
}

// SendFrame implements ibrc.Port.
func (p *txPort) SendFrame(f []byte) error { return p.t.put(p.rc, f) }

// Pull implements ibrc.PacedPort.
func (p *txPort) Pull() { p.t.pull(p.rc) }

// put sends frame of rc at once on the caller's goroutine when nothing
// is ahead of it (direct), else queues it, or refuses it with
// ibrc.ErrPortFull.
func (t *transmitter) put(rc *ibrc.Transport, frame []byte) error {
	if t.e.port.Load() == nil && !t.e.loopback(frame) {
		return errNoPort
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return errClosed
	}
	if t.e.cfg.TxDirect && t.w == t.r && !t.sending && t.direct(rc, frame) {
		return nil
	}
	if t.w-t.r == txDepth {
		t.wake = rc
		return ibrc.ErrPortFull
	}
	t.ring[t.w%txDepth] = txFrame{rc: rc, frame: frame}
	t.w++
	t.cond.Signal()
	if tr := t.e.cfg.Trace; tr.On() {
		// Traced as the transport sends it, in order with its page
		// requests and events, rather than when the port takes it.
		traceRC(tr, trace.RCTx, frame)
	}
	return nil
}

// direct sends frame of rc on the caller's goroutine if the port takes it
// without waiting (port.TrySender), reporting whether it did: no wake-up
// of the transmit goroutine, and the frame is on the wire before the
// transport goes on. The caller made sure nothing is ahead of it (the
// queue empty, the goroutine holding no frame) and holds mu across the
// attempt, so frames leave in the order put saw them. Frames that loop
// back, whose receive would re-enter the engine under the transport's
// locks, and those of a replaced transport take the queue. Caller holds
// mu.
func (t *transmitter) direct(rc *ibrc.Transport, frame []byte) bool {
	p := t.e.port.Load()
	if p == nil || rc != t.e.rc.Load() || t.e.loopback(frame) {
		return false
	}
	ts, ok := port.AsTry(*p)
	if !ok {
		return false
	}
	if ts.TrySend(frame) == port.ErrWouldBlock {
		return false // put queues and traces it
	}
	if tr := t.e.cfg.Trace; tr.On() {
		traceRC(tr, trace.RCTx, frame)
	}
	t.e.stats.txDirect.Add(1)
	rc.FrameLeft()
	rc.RecycleFrame(frame)
	return true
}

// pull asks for a PortReady of rc.
func (t *transmitter) pull(rc *ibrc.Transport) {
	t.mu.Lock()
	t.wake = rc
	t.mu.Unlock()
	t.cond.Signal()
}

// purge drops the queued frames: RESET replaced their transport.
func (t *transmitter) purge() {
	t.mu.Lock()
	for ; t.r != t.w; t.r++ {
		t.ring[t.r%txDepth] = txFrame{}
	}
	t.wake = nil
	t.mu.Unlock()
}

// run is the transmit goroutine. It does not end while the port blocks
// its Send: Close leaves it to the port's closing.
func (t *transmitter) run() {
	t.mu.Lock()
	for {
		for t.r == t.w && t.wake == nil && !t.done {
			t.cond.Wait()
		}
		if t.done {
			t.mu.Unlock()
			return
		}
		if rc := t.wake; rc != nil && t.w-t.r <= txDepth/2 {
			t.wake = nil
			t.mu.Unlock()
			t.ready(rc)
			t.mu.Lock()
			continue
		}
		f := t.ring[t.r%txDepth]
		t.ring[t.r%txDepth] = txFrame{}
		t.r++
		t.sending = true
		t.mu.Unlock()
		if f.rc == t.e.rc.Load() {
			if t.e.loopback(f.frame) {
				t.e.stats.loopback.Add(1)
				t.e.Receive(f.frame)
			} else if p := t.e.port.Load(); p != nil {
				_ = (*p).Send(f.frame)
			}
		}
		f.rc.FrameLeft()
		f.rc.RecycleFrame(f.frame) // the port and the receive path keep no frame
		t.mu.Lock()
		t.sending = false
	}
}

// ready lets rc build and send, unless it was replaced or the engine
// closed.
func (t *transmitter) ready(rc *ibrc.Transport) {
	t.readyMu.Lock()
	defer t.readyMu.Unlock()
	t.mu.Lock()
	done := t.done
	t.mu.Unlock()
	if !done && rc == t.e.rc.Load() {
		rc.PortReady()
	}
}

// close stops the goroutine (once the port lets go of it), after any
// PortReady it is in: the transport is not entered from here afterwards.
func (t *transmitter) close() {
	t.readyMu.Lock()
	t.mu.Lock()
	t.done = true
	t.mu.Unlock()
	t.readyMu.Unlock()
	t.purge()
	t.cond.Broadcast()
}

// loopback reports whether a frame the transport sends is for this port:
// to its own MAC (what the core resolves a local GID's path to) and one
// of its own addresses. The MAC, compared first, keeps the header parse
// off the path of every frame bound for the wire.
func (e *Engine) loopback(frame []byte) bool {
	return len(frame) >= 6 && [6]byte(frame[:6]) == e.cfg.MAC && e.Claim(frame)
}
