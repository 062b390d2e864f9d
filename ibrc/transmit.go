package ibrc

import "errors"

// The transmit path. Everything the engine sends is built under its lock
// into txq and handed to the Port by flush, outside the lock, on whichever
// goroutine released it (or the one calling PortReady). A port that cannot
// take a frame now refuses it with ErrPortFull instead of blocking; the
// frame stays first in txq and nothing more goes out until PortReady. So
// no caller of the engine (the port's reader in HandleFrame above all)
// ever waits for the wire.
//
// What may wait in txq is bounded. Packets that carry data, READ responses
// and request packets, are built only while txq holds fewer than
// txRoomFrames: a QP that finds no room joins txWait, and flush gives the
// waiting QPs turns (pump) as the port takes frames, a READ at most
// readBurst responses a turn. So however long a READ the peer asks for,
// the responder holds one cursor for it (readStall) and never more than
// txRoomFrames of responses. ACKs and NAKs are not held back (a receive
// path cannot wait), but beyond maxTxFrames they are dropped, which RC
// recovers from as from a lost frame.

// ErrPortFull is what a Port's SendFrame returns when it cannot take the
// frame now and does not want to block for it. The frame stays the
// engine's, and the engine sends nothing more until PortReady.
var ErrPortFull = errors.New("ibrc: port full")

const (
	// txRoomFrames bounds the frames waiting in txq that data packets may
	// add to.
	txRoomFrames = 64
	// maxTxFrames bounds txq; it leaves room above txRoomFrames for the
	// ACKs and NAKs of the frames a stalled port keeps receiving.
	maxTxFrames = 1024
	// readBurst bounds the responses a READ sends in one turn, so that
	// READs of different QPs take turns.
	readBurst = 16
)

// PortReady tells the engine that its port, which refused a frame with
// ErrPortFull, can take frames again. The engine sends what waited, and
// builds and sends what it held back for lack of room, on the caller's
// goroutine, until the port is full again or nothing is left; it reads
// memory regions meanwhile (READ responses). It must not be called from
// within SendFrame.
func (e *Engine) PortReady() {
	e.mu.Lock()
	e.readyGen++
	e.portFull = false
	e.mu.Unlock()
	e.flush()
}

// flush hands queued frames to the port, gives waiting QPs turns as the
// port takes them, and runs queued callbacks, in the order they were
// produced. One goroutine at a time does it; a nested call (a callback
// that re-enters the engine) or a concurrent one leaves its output to the
// running flush, which looks for more before it returns.
func (e *Engine) flush() {
	for {
		if !e.txMu.TryLock() {
			return
		}
		for e.flushRound() {
		}
		e.txMu.Unlock()
		e.mu.Lock()
		more := e.outputLocked()
		e.mu.Unlock()
		if !more {
			return
		}
	}
}

// flushRound does one round of flush, reporting whether it had anything
// to do. Caller holds txMu.
func (e *Engine) flushRound() bool {
	e.mu.Lock()
	e.txOut = 0 // the previous round's frames are the port's
	e.pumpLocked()
	var frames [][]byte
	if !e.portFull {
		frames, e.txq = e.txq, nil
		e.txOut = len(frames)
	}
	cbs := e.cbq
	e.cbq = nil
	gen := e.readyGen
	e.mu.Unlock()
	if len(frames) == 0 && len(cbs) == 0 {
		return false
	}
	for i, f := range frames {
		if e.cfg.Port.SendFrame(f) == ErrPortFull {
			e.mu.Lock()
			e.txq = append(frames[i:], e.txq...)
			e.txOut = 0
			// A PortReady since gen may have come before the refusal
			// was seen: then try again rather than wait for another.
			e.portFull = e.readyGen == gen
			e.mu.Unlock()
			break
		}
	}
	for _, cb := range cbs {
		cb()
	}
	return true
}

// outputLocked reports whether flush has something to do. Caller holds
// mu.
func (e *Engine) outputLocked() bool {
	if len(e.cbq) > 0 {
		return true
	}
	if e.portFull {
		return false
	}
	return len(e.txq) > 0 || len(e.txWait) > 0 && e.roomLocked()
}

// roomLocked reports whether data packets may be built now. Caller holds
// mu.
func (e *Engine) roomLocked() bool { return len(e.txq)+e.txOut < txRoomFrames }

// txRoom reports whether q may build a data packet now; if not, q gets a
// turn (txTurn) once the port took enough. Caller holds mu.
func (e *Engine) txRoom(q *QP) bool {
	if e.roomLocked() {
		return true
	}
	e.txWaitFor(q)
	return false
}

// txWaitFor gives q a turn after the QPs already waiting. Caller holds mu.
func (e *Engine) txWaitFor(q *QP) {
	if !e.txWaiting[q] {
		e.txWaiting[q] = true
		e.txWait = append(e.txWait, q)
	}
}

// pumpLocked gives the QPs waiting for room turns, in order, while there
// is room; one that still has packets to build waits again behind the
// others. It ends: a turn that leaves its QP waiting either built packets
// (readBurst of them) or found no room. Caller holds mu.
func (e *Engine) pumpLocked() {
	for len(e.txWait) > 0 && e.roomLocked() {
		q := e.txWait[0]
		e.txWait[0] = nil
		e.txWait = e.txWait[1:]
		delete(e.txWaiting, q)
		if !q.dead {
			q.txTurn()
		}
	}
	if len(e.txWait) == 0 {
		e.txWait = nil // let the array go
	}
}

// txTurn builds what q held back for lack of room: READ responses, then
// request packets.
func (q *QP) txTurn() {
	q.readTurn()
	if q.state == StateRTS || q.state == StateSQD {
		q.reqProgress()
	}
}

// send queues a frame. Caller holds mu.
func (e *Engine) send(frame []byte) {
	if len(e.txq)+e.txOut >= maxTxFrames {
		e.stats.TxDropped++
		return
	}
	e.stats.TxFrames++
	e.txq = append(e.txq, frame)
}

// defer_ queues a callback for after the lock is released. Caller holds
// mu.
func (e *Engine) defer_(f func()) { e.cbq = append(e.cbq, f) }
