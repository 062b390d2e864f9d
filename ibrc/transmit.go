package ibrc

import (
	"errors"
	"slices"
)

// The transmit path. Everything the engine sends is built under the lock
// of the QP that sends it into txq (under txqMu, which all QPs share for
// the length of an append) and handed to the Port by flush, outside the
// QPs' locks, on whichever goroutine released one. A port that cannot
// take a frame now refuses it with ErrPortFull instead of blocking; the
// frame stays first in txq and nothing more goes out until PortReady. So
// no caller of the engine (the port's reader in HandleFrame above all)
// ever waits for the wire.
//
// What may wait in txq is bounded. Packets that carry data, READ responses
// and request packets, are built only while txq holds fewer than
// txRoomFrames: a QP that finds no room, or a READ that sent its burst,
// joins txWait, and the QPs there get turns (pump) as the port takes
// frames, a READ at most readBurst responses a turn. So however long a
// READ the peer asks for, the responder holds one cursor for it
// (readStall) and never more than txRoomFrames of responses. ACKs and
// NAKs are not held back (a receive path cannot wait), but beyond
// maxTxFrames they are dropped, which RC recovers from as from a lost
// frame.
//
// Who builds the packets that waited depends on the port. A PacedPort has
// a transmit goroutine of its own, and only that goroutine builds them
// (PortReady, after Pull or a refusal): the goroutines that call into the
// engine build at most one burst of what they caused, so a port reader
// answering a 2 GiB READ goes back to reading at once. Any other port
// takes frames synchronously, so whichever goroutine flushes is the
// transmit side and builds them while the port takes them.
//
// The turns are where QPs take turns: the goroutine that holds txMu
// builds each waiting QP's packets in turn under that QP's lock, so a
// turn waits for the copies of the turns before it in the round (a READ's
// burst). A QP busy elsewhere (a copy of its own on another goroutine) is
// not waited for: its turn goes back to the goroutine that holds it
// (pump). The room check and the append are two steps under txqMu, so
// QPs building at once on different goroutines may take txq a packet each
// past txRoomFrames; the headroom up to maxTxFrames absorbs that.

// ErrPortFull is what a Port's SendFrame returns when it cannot take the
// frame now and does not want to block for it. The frame stays the
// engine's, and the engine sends nothing more until PortReady.
var ErrPortFull = errors.New("ibrc: port full")

// PacedPort is a Port with a transmit goroutine of its own, from which it
// calls Transport.PortReady when asked to (Pull) or after it refused a frame
// (ErrPortFull), once it has room. It calls Transport.FrameLeft for each
// frame it took, in order, once the frame is on the wire or dropped: the
// local ACK timer runs from then (QP.onTimeout), not from queueing. It
// makes both calls holding no lock of the engine's, and FrameLeft takes
// none; SendFrame, which runs under txMu, and Pull must not call back,
// except that SendFrame may put a frame on the wire itself, if nothing it
// took earlier is still waiting, and then calls FrameLeft and RecycleFrame
// for it before it returns (both take no lock of the engine's but leaf
// ones).
type PacedPort interface {
	Port
	// Pull asks for a PortReady call: the engine has packets to build. It
	// must not block nor call into the engine.
	Pull()
}

const (
	// txRoomFrames bounds the frames waiting in txq that data packets may
	// add to.
	txRoomFrames = 64
	// maxTxFrames bounds txq; it leaves room above txRoomFrames for the
	// ACKs and NAKs of the frames a stalled port keeps receiving.
	maxTxFrames = 1024
	// readBurst bounds the responses a READ sends in one turn, so that
	// READs of different QPs take turns, and what a received READ request
	// makes its receiver build before it returns.
	readBurst = 16
)

// PortReady tells the engine that its port can take frames: after it
// refused one (ErrPortFull), or, for a PacedPort, when the engine asked
// (Pull). The engine sends what waited, and builds and sends what it held
// back for lack of room, on the caller's goroutine, until the port is full
// again or nothing is left; it reads memory regions meanwhile (READ
// responses). It waits for a flush running on another goroutine to
// finish; it must not be called from within SendFrame.
func (e *Transport) PortReady() {
	e.txMu.Lock()
	e.txqMu.Lock()
	e.portFull = false
	e.txqMu.Unlock()
	for e.flushRound(true) {
	}
	e.txMu.Unlock()
	e.flush() // what others produced while they found txMu taken
}

// flush hands queued frames to the port and runs queued callbacks, in the
// order they were produced; for a port that is not paced, it also gives
// waiting QPs turns as the port takes frames. One goroutine at a time does
// it; a nested call (a callback that re-enters the engine) or a concurrent
// one leaves its output to the running flush, which looks for more before
// it returns. A paced port is asked for a PortReady if QPs wait.
func (e *Transport) flush() {
	pump := e.paced == nil
	for {
		if !e.txMu.TryLock() {
			return
		}
		for e.flushRound(pump) {
		}
		e.txMu.Unlock()
		e.txqMu.Lock()
		more := e.outputLocked(pump)
		pull := !pump && !more && !e.portFull && len(e.txWait) > 0
		e.txqMu.Unlock()
		if pull {
			e.paced.Pull()
		}
		if !more {
			return
		}
	}
}

// flushRound does one round of flush, reporting whether it had anything
// to do; with pump, waiting QPs get turns first. Caller holds txMu.
func (e *Transport) flushRound(pump bool) bool {
	e.txqMu.Lock()
	e.txOut = 0 // the previous round's frames are the port's
	queued := e.txQueued
	e.txqMu.Unlock()
	if pump {
		e.pump()
	}
	e.txqMu.Lock()
	// Frames the turns built that went to a paced port at once (send)
	// are this round's work too.
	built := e.txQueued != queued
	var frames [][]byte
	if !e.portFull && len(e.txq) > 0 {
		frames, e.txq = e.txq, e.txqSpare
		e.txqSpare = nil
		e.txOut = len(frames)
	}
	var cbs []func()
	if len(e.cbq) > 0 {
		cbs, e.cbq = e.cbq, e.cbqSpare
		e.cbqSpare = nil
	}
	e.txqMu.Unlock()
	if len(frames) == 0 && len(cbs) == 0 {
		return built
	}
	sent := true // every frame went: frames' array is free again
	for i, f := range frames {
		err := e.cfg.Port.SendFrame(f)
		if err != ErrPortFull && (err != nil || e.paced == nil) {
			// Sent, or lost; a paced port that took it tells (FrameLeft).
			e.left.Add(1)
		}
		if err == ErrPortFull {
			// PortReady waits for txMu, so it comes after this.
			e.txqMu.Lock()
			e.txq = append(frames[i:], e.txq...)
			e.txOut = 0
			e.portFull = true
			e.txqMu.Unlock()
			sent = false
			break
		}
	}
	for _, cb := range cbs {
		cb()
	}
	// The arrays go back for the next round rather than to the
	// collector (an allocation per round of a few frames was 3% of a 4
	// KiB WRITE's CPU).
	clear(cbs)
	e.txqMu.Lock()
	if sent && frames != nil { // else what is left of them is txq's
		clear(frames)
		e.txqSpare = frames[:0]
	}
	if cbs != nil { // taken whole: no one else holds its array
		e.cbqSpare = cbs[:0]
	}
	e.txqMu.Unlock()
	return true
}

// outputLocked reports whether flush has something to do. Caller holds
// txqMu.
func (e *Transport) outputLocked(pump bool) bool {
	if len(e.cbq) > 0 {
		return true
	}
	if e.portFull {
		return false
	}
	return len(e.txq) > 0 || pump && len(e.txWait) > 0 && e.roomLocked()
}

// roomLocked reports whether data packets may be built now. Caller holds
// txqMu.
func (e *Transport) roomLocked() bool { return len(e.txq)+e.txOut < txRoomFrames }

// txRoom reports whether q may build a data packet now; if not, q gets a
// turn (txTurn) once the port took enough. Caller holds q.mu.
func (e *Transport) txRoom(q *QP) bool {
	e.txqMu.Lock()
	defer e.txqMu.Unlock()
	if e.roomLocked() {
		return true
	}
	e.txWaitLocked(q)
	return false
}

// txWaitFor gives q a turn after the QPs already waiting. Caller holds
// q.mu.
func (e *Transport) txWaitFor(q *QP) {
	e.txqMu.Lock()
	e.txWaitLocked(q)
	e.txqMu.Unlock()
}

// txWaitLocked is txWaitFor with txqMu held.
func (e *Transport) txWaitLocked(q *QP) {
	if !e.txWaiting[q] {
		e.txWaiting[q] = true
		e.txWait = append(e.txWait, q)
	}
}

// txForget takes a destroyed q out of the turns: a port that takes
// nothing for long must not hold on to it. Caller holds q.mu.
func (e *Transport) txForget(q *QP) {
	e.txqMu.Lock()
	defer e.txqMu.Unlock()
	if !e.txWaiting[q] {
		return
	}
	delete(e.txWaiting, q)
	e.txWait = slices.DeleteFunc(e.txWait, func(w *QP) bool { return w == q })
}

// pump gives the QPs waiting for room a turn each, in order, while there
// is room; one that still has packets to build waits again behind the
// others, for the next round. A round is one pass, so that the frames a
// pass built go to the port before the next pass reads memory for more.
// Each turn runs under its QP's lock alone: the QPs' work on other
// goroutines goes on meanwhile, and queues its own frames behind. A QP
// whose lock is taken (its own copy on another goroutine: a port reader
// placing a slow page) is not waited for: its holder puts it back in the
// turns as it lets go (turnDue, release), and the QPs behind it, and the
// frames already built, go on. Caller holds txMu.
func (e *Transport) pump() {
	e.txqMu.Lock()
	n := len(e.txWait)
	e.txqMu.Unlock()
	for ; n > 0; n-- {
		e.txqMu.Lock()
		if len(e.txWait) == 0 || !e.roomLocked() {
			e.txqMu.Unlock()
			break
		}
		q := e.txWait[0]
		e.txWait[0] = nil
		e.txWait = e.txWait[1:]
		delete(e.txWaiting, q)
		if len(e.txWait) == 0 {
			e.txWait = nil // let the array go
		}
		e.txqMu.Unlock()
		if !q.mu.TryLock() {
			// Busy. Say so, then look again: a holder that let go
			// between the two looks did not see turnDue.
			q.turnDue.Store(true)
			if !q.mu.TryLock() {
				continue
			}
		}
		q.turnDue.Store(false) // this is its turn
		q.txTurn()
		q.release() // not unlock: this is the flush
	}
}

// txTurn builds what q held back for lack of room: READ responses, then
// request packets. Caller holds q.mu.
func (q *QP) txTurn() {
	if q.dead {
		return // destroyed after the pump took it from the turns
	}
	q.readTurn()
	if q.state == StateRTS || q.state == StateSQD {
		q.reqProgress()
	}
}

// FrameLeft tells the engine that its PacedPort put a frame it took on
// the wire, or dropped it. It does not wait for any lock.
func (e *Transport) FrameLeft() { e.left.Add(1) }

// send queues a frame and returns its place in the engine's output
// (txQueued), 0 if it was dropped. Caller holds the sending QP's lock.
//
// To a PacedPort, whose SendFrame only queues the frame for its own
// goroutine and never calls back, a frame with nothing ahead of it (no
// frame in txq or in a flush's hands, no callback queued, the port not
// full) goes at once, under txqMu, which keeps it in order with the
// frames and callbacks queued after it: so the port's goroutine puts a
// message's first packets on the wire while the QP builds the rest,
// rather than after the QP let go of its lock. A refusal (ErrPortFull)
// leaves it first in txq, as flush does.
func (e *Transport) send(frame []byte) uint64 {
	e.txqMu.Lock()
	defer e.txqMu.Unlock()
	if len(e.txq)+e.txOut >= maxTxFrames {
		e.stats.TxDropped.Add(1)
		return 0
	}
	e.stats.TxFrames.Add(1)
	e.txQueued++
	if e.paced != nil && len(e.txq) == 0 && e.txOut == 0 && len(e.cbq) == 0 && !e.portFull {
		err := e.paced.SendFrame(frame)
		if err != ErrPortFull {
			if err != nil {
				e.left.Add(1) // lost; one the port took it tells (FrameLeft)
			}
			return e.txQueued
		}
		e.portFull = true
	}
	e.txq = append(e.txq, frame)
	return e.txQueued
}

// Frame buffers. A PacedPort gives back the frames it sent (RecycleFrame)
// and data packets are built into them: a 4 KiB packet then costs no
// allocation and no zeroing of its payload.
const (
	maxFreeFrames = 256
	minFrameCap   = 2048 // smaller ones are not kept: data packets need more
)

// frameBuf returns an empty frame buffer, nil when none is free.
func (e *Transport) frameBuf() []byte {
	e.frameMu.Lock()
	defer e.frameMu.Unlock()
	n := len(e.frames)
	if n == 0 {
		return nil
	}
	f := e.frames[n-1]
	e.frames[n-1] = nil
	e.frames = e.frames[:n-1]
	return f
}

// RecycleFrame gives back a frame the engine sent, for its next packets:
// a PacedPort calls it (after FrameLeft) once nothing uses the frame any
// more. Calling it is optional; a frame given back must not be touched
// afterwards. It does not wait for any lock but a leaf's.
func (e *Transport) RecycleFrame(f []byte) {
	if cap(f) < minFrameCap {
		return
	}
	e.frameMu.Lock()
	if len(e.frames) < maxFreeFrames {
		e.frames = append(e.frames, f[:0])
	}
	e.frameMu.Unlock()
}

// waiting reports whether the frame send placed at seq has not left yet.
// Caller holds the lock of the QP that sent it; the count of frames that
// left is an atomic, which FrameLeft adds to without a lock.
func (e *Transport) waiting(seq uint64) bool { return seq > e.left.Load() }

// defer_ queues a callback for flush to run outside the engine's locks,
// after the frames queued before it.
func (e *Transport) defer_(f func()) {
	e.txqMu.Lock()
	e.cbq = append(e.cbq, f)
	e.txqMu.Unlock()
}
