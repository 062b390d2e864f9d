package port

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// A Receiver is an engine's receive side: the Mux hands it the frames it
// claims.
type Receiver interface {
	// Receive takes one frame and must not keep it. It may block to hold
	// the port back while the engine has nowhere to put the frame (as QEMU
	// stops reading its tap while a NIC cannot receive); that holds back
	// the frames of every engine behind it, so an engine that can refuse
	// a frame by other means (an RNR NAK) should not block. It must return
	// once its engine is closed.
	Receive(frame []byte)
	// PortDown reports that the backend closed for good: the link is down.
	PortDown()
}

// A BufferReceiver is a Receiver that may keep a frame the Mux's reader
// hands it, with the buffer it lies in, to handle it later on a goroutine
// of its own (an engine that steers its frames to several goroutines
// without copying them). The reader then reads the next frame into the
// buffer it returns.
type BufferReceiver interface {
	Receiver
	// ReceiveBuffer takes frame, which starts at the start of a buffer
	// of at least MaxFrameLen bytes (its capacity), and returns the
	// buffer for the reader's next frame: one of at least MaxFrameLen
	// bytes, frame's own if it did not keep it. The rules of Receive
	// about blocking hold.
	ReceiveBuffer(frame []byte) []byte
}

// Mux is the NIC's side of its port, which both engines plug into and
// neither owns: one backend Port, one reader that hands each received
// frame to the first engine whose claim accepts it (RoCEv2 to the RC
// engine) or else to the default engine (Ethernet), and a transmit
// Endpoint per engine onto the same backend. Transmit arbitration is the
// backend's: Send is safe for concurrent use and frames of different
// engines interleave whole; the Mux counts them per engine. A pcap
// recorder belongs under the Mux (CreatePcap wraps the backend), so it
// records every engine's frames in both directions.
type Mux struct {
	backend Port
	log     *slog.Logger

	mu        sync.Mutex // attach, start, close
	endpoints []*Endpoint
	fallback  *Endpoint // claim nil: everything nobody claimed
	started   bool
	closed    bool

	unclaimed atomic.Uint64 // frames no engine took (no default attached)
	// recvGSO: the backend delivers unfinished frames (RecvGSOPort), which
	// Start enables when the default engine can finish them.
	recvGSO  RecvGSOPort
	gsoDrops atomic.Uint64 // unfinished frames claimed by an engine that cannot finish them
	done     chan struct{}
	wg       sync.WaitGroup
}

// NewMux puts backend under a Mux; the Mux owns it from here (Close closes
// it). log may be nil.
func NewMux(backend Port, log *slog.Logger) *Mux {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Mux{backend: backend, log: log, done: make(chan struct{})}
}

// Endpoint is one engine's attachment to the port: what it transmits
// with, and the counters of what crossed it.
type Endpoint struct {
	m     *Mux
	name  string
	claim func(frame []byte) bool
	recv  Receiver

	rxFrames, txFrames, txErrors atomic.Uint64
}

// EndpointStats counts what crossed one endpoint.
type EndpointStats struct {
	RxFrames uint64 // frames the Mux handed to the engine
	TxFrames uint64 // Send and SendGSO calls that succeeded
	TxErrors uint64 // Send and SendGSO calls that failed (link down, no peer)
}

// Attach plugs an engine into the port. claim picks the received frames
// that are the engine's (it must not keep or change the frame and must be
// cheap: it runs for every frame before the default engine sees it);
// claim nil makes the engine the default, which receives what no claim
// accepted (at most one default). The engine's receive side is bound with
// Endpoint.Deliver before Start. Attach after Start is an error: the
// reader consults the list without a lock.
func (m *Mux) Attach(name string, claim func(frame []byte) bool) (*Endpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.closed {
		return nil, fmt.Errorf("port: attach %q: the port is already running", name)
	}
	if claim == nil && m.fallback != nil {
		return nil, fmt.Errorf("port: attach %q: %q is already the default engine", name, m.fallback.name)
	}
	e := &Endpoint{m: m, name: name, claim: claim}
	if claim == nil {
		m.fallback = e
	} else {
		m.endpoints = append(m.endpoints, e)
	}
	return e, nil
}

// Deliver binds the engine's receive side. The engine is usually built
// with the Endpoint as its transmit side, so this comes second.
func (e *Endpoint) Deliver(r Receiver) { e.recv = r }

// Start begins reading the backend. Every attached endpoint must have a
// receiver.
func (m *Mux) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.closed {
		return errors.New("port: start: already started or closed")
	}
	for _, e := range m.all() {
		if e.recv == nil {
			return fmt.Errorf("port: start: engine %q has no receiver (Deliver)", e.name)
		}
	}
	if err := m.enableRecvGSO(); err != nil {
		m.log.Warn("port: receive offloads stay off", "err", err)
	}
	m.started = true
	m.wg.Add(1)
	go m.read()
	return nil
}

// enableRecvGSO switches the backend's receive offloads on when it has
// them and the default engine, the one that receives TCP, can finish the
// frames (GSOReceiver). Caller holds mu.
func (m *Mux) enableRecvGSO() error {
	g, ok := m.backend.(RecvGSOPort)
	if !ok || m.fallback == nil {
		return nil
	}
	if _, ok := m.fallback.recv.(GSOReceiver); !ok {
		return nil
	}
	if err := g.EnableRecvGSO(); err != nil {
		return err
	}
	m.recvGSO = g
	return nil
}

// RecvGSO reports whether the backend delivers super-packets and partial
// checksums to the engines (Start enabled its receive offloads).
func (m *Mux) RecvGSO() bool { return m.recvGSO != nil }

// GSODrops counts unfinished frames (RecvGSOPort) that an engine claimed
// and could not finish, as it is no GSOReceiver.
func (m *Mux) GSODrops() uint64 { return m.gsoDrops.Load() }

func (m *Mux) all() []*Endpoint {
	if m.fallback == nil {
		return m.endpoints
	}
	return append(m.endpoints[:len(m.endpoints):len(m.endpoints)], m.fallback)
}

// Close closes the backend and waits for the reader. An engine's Receive
// blocked on its own back-pressure holds the reader until that engine is
// closed, so close the engines first.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	m.mu.Unlock()
	err := m.backend.Close()
	m.wg.Wait()
	return err
}

// Unclaimed counts received frames that no engine took.
func (m *Mux) Unclaimed() uint64 { return m.unclaimed.Load() }

func (m *Mux) String() string { return fmt.Sprint(m.backend) }

// route returns the endpoint a frame belongs to, nil for none.
func (m *Mux) route(frame []byte) *Endpoint {
	for _, e := range m.endpoints {
		if e.claim(frame) {
			return e
		}
	}
	return m.fallback
}

// read feeds received frames to their engines until the backend closes.
func (m *Mux) read() {
	defer m.wg.Done()
	buf := make([]byte, MaxFrameLen)
	var backoff time.Duration // while Recv keeps failing
	for {
		var n int
		var gso GSOInfo
		var err error
		if m.recvGSO != nil {
			n, gso, err = m.recvGSO.RecvGSO(buf)
		} else {
			n, err = m.backend.Recv(buf)
		}
		if err != nil {
			if m.closing() {
				return
			}
			if errors.Is(err, ErrClosed) {
				m.log.Warn("port closed", "err", err)
				for _, e := range m.all() {
					e.recv.PortDown()
				}
				return
			}
			// A backend that keeps failing (a deleted TAP) is retried with
			// backoff and logged once per streak, not spun on.
			if backoff == 0 {
				m.log.Warn("port receive failed; retrying", "err", err)
				backoff = 10 * time.Millisecond
			} else {
				backoff = min(2*backoff, time.Second)
			}
			select {
			case <-m.done:
				return
			case <-time.After(backoff):
			}
			continue
		}
		if backoff != 0 {
			m.log.Info("port receiving again")
			backoff = 0
		}
		if gso.Finished() {
			if next := m.dispatchBuffer(buf[:n]); cap(next) >= MaxFrameLen {
				buf = next[:MaxFrameLen]
			}
		} else {
			m.DispatchGSO(buf[:n], gso)
		}
	}
}

// DispatchGSO is Dispatch for an unfinished frame of a RecvGSOPort: the
// engine that claims it must be a GSOReceiver, or the frame is dropped
// (GSODrops).
func (m *Mux) DispatchGSO(frame []byte, gso GSOInfo) bool {
	e := m.route(frame)
	if e == nil {
		m.unclaimed.Add(1)
		return false
	}
	g, ok := e.recv.(GSOReceiver)
	if !ok {
		m.gsoDrops.Add(1)
		return false
	}
	e.rxFrames.Add(1)
	g.ReceiveGSO(frame, gso)
	return true
}

// Dispatch hands one received frame to the engine that claims it (or the
// fallback) and reports whether one did; unclaimed frames are counted. It
// is what the reader does with every frame, exported so that benchmarks
// can drive the receive path without a backend; it must not run
// concurrently with the reader of a backend that delivers frames.
func (m *Mux) Dispatch(frame []byte) bool {
	e := m.route(frame)
	if e == nil {
		m.unclaimed.Add(1)
		return false
	}
	e.rxFrames.Add(1)
	e.recv.Receive(frame)
	return true
}

// dispatchBuffer is Dispatch on the reader, which lets a BufferReceiver
// keep the buffer: it returns the buffer to read into next, nil for the
// same.
func (m *Mux) dispatchBuffer(frame []byte) []byte {
	e := m.route(frame)
	if e == nil {
		m.unclaimed.Add(1)
		return nil
	}
	e.rxFrames.Add(1)
	if br, ok := e.recv.(BufferReceiver); ok {
		return br.ReceiveBuffer(frame)
	}
	e.recv.Receive(frame)
	return nil
}

func (m *Mux) closing() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// Send transmits a frame of this engine onto the port.
func (e *Endpoint) Send(frame []byte) error {
	return e.count(e.m.backend.Send(frame))
}

// CanTry reports whether the backend can send without waiting
// (TrySender): AsTry asks it before using TrySend.
func (e *Endpoint) CanTry() bool {
	_, ok := AsTry(e.m.backend)
	return ok
}

// TrySend implements TrySender for a backend that is one (ErrWouldBlock
// for one that is not); a frame that would wait is not counted.
func (e *Endpoint) TrySend(frame []byte) error {
	t, ok := AsTry(e.m.backend)
	if !ok {
		return ErrWouldBlock
	}
	err := t.TrySend(frame)
	if err == ErrWouldBlock {
		return err
	}
	return e.count(err)
}

// CanGSO reports whether the backend takes GSO sends now.
func (e *Endpoint) CanGSO() bool {
	_, ok := AsGSO(e.m.backend)
	return ok
}

// SendGSO hands a super-packet to a backend that segments it (see
// GSOSender); ErrNoGSO when it cannot.
func (e *Endpoint) SendGSO(frame []byte, gso GSOInfo) error {
	g, ok := AsGSO(e.m.backend)
	if !ok {
		return e.count(ErrNoGSO)
	}
	return e.count(g.SendGSO(frame, gso))
}

func (e *Endpoint) count(err error) error {
	if err != nil {
		e.txErrors.Add(1)
	} else {
		e.txFrames.Add(1)
	}
	return err
}

// Stats returns the endpoint's counters.
func (e *Endpoint) Stats() EndpointStats {
	return EndpointStats{RxFrames: e.rxFrames.Load(), TxFrames: e.txFrames.Load(), TxErrors: e.txErrors.Load()}
}

func (e *Endpoint) String() string { return e.name + "@" + e.m.String() }
