package port

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Stream speaks QEMU's stream netdev protocol (-netdev stream): each frame
// is a 4-byte big-endian length followed by the frame, over a UNIX or TCP
// socket. As a client it dials and redials; as a server it accepts one peer
// at a time. A peer that goes away, even in the middle of a frame, costs
// only that frame: the partial frame is discarded, the link waits for the
// next connection, and frames sent meanwhile are dropped (ErrNoPeer), as on
// an unplugged cable.
type Stream struct {
	network, addr string
	ln            net.Listener // server mode
	log           *slog.Logger

	mu       sync.Mutex
	cond     sync.Cond // conn or closed changed
	conn     net.Conn
	rd       *bufio.Reader // reads conn; used by the Recv goroutine only
	broken   chan struct{} // closed when conn fails
	closed   bool
	wmu      sync.Mutex // one frame written at a time
	wbuf     []byte
	rhdr     [4]byte // Recv's length prefix, kept here so Recv does not allocate
	done     chan struct{}
	wg       sync.WaitGroup
	connects atomic.Uint64
	drops    atomic.Uint64 // connections lost
	skipped  atomic.Uint64 // frames longer than the receive buffer
}

// Bounds of the client's redial backoff.
const (
	redialMin = 20 * time.Millisecond
	redialMax = time.Second
)

// DialStream returns a client port that keeps a connection to addr (a
// socket path for "unix", host:port for "tcp") open, redialling with
// backoff whenever it is lost. log may be nil.
func DialStream(network, addr string, log *slog.Logger) *Stream {
	s := newStream(network, addr, log)
	s.wg.Add(1)
	go s.dialLoop()
	return s
}

// ListenStream returns a server port listening on addr; it serves one peer
// at a time and accepts the next one when the current one leaves. A stale
// UNIX socket file at addr is replaced. log may be nil.
func ListenStream(network, addr string, log *slog.Logger) (*Stream, error) {
	if network == "unix" {
		if fi, err := os.Lstat(addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(addr)
		}
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("wire: stream listen: %w", err)
	}
	s := newStream(network, ln.Addr().String(), log)
	s.ln = ln
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// StreamConn serves the stream protocol over one connection that is
// already open (a socketpair, or a socket inherited from a parent such as
// QEMU's -netdev stream with an fd). There is nothing to reconnect to: once
// the peer goes away, the port stays without a peer until it is closed.
// log may be nil.
func StreamConn(c net.Conn, log *slog.Logger) *Stream {
	s := newStream(c.LocalAddr().Network(), c.LocalAddr().String(), log)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.serve(c)
	}()
	return s
}

func newStream(network, addr string, log *slog.Logger) *Stream {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Stream{network: network, addr: addr, log: log, done: make(chan struct{}),
		wbuf: make([]byte, 4+MaxFrameLen)}
	s.cond.L = &s.mu
	return s
}

// Addr is the address the stream dials or listens on (the bound address
// for a server, useful with port 0).
func (s *Stream) Addr() string { return s.addr }

// Connected reports whether a peer is connected now.
func (s *Stream) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil
}

// StreamStats counts connection events.
type StreamStats struct {
	Connects, Disconnects, SkippedTooLong uint64
}

// Stats returns the connection counters.
func (s *Stream) Stats() StreamStats {
	return StreamStats{s.connects.Load(), s.drops.Load(), s.skipped.Load()}
}

// serve publishes c as the current peer and waits until it breaks or the
// port closes.
func (s *Stream) serve(c net.Conn) {
	broken := make(chan struct{})
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conn, s.rd, s.broken = c, bufio.NewReaderSize(c, 64<<10), broken
	s.mu.Unlock()
	s.cond.Broadcast()
	s.connects.Add(1)
	s.log.Info("stream peer connected", "network", s.network, "addr", s.addr, "peer", c.RemoteAddr())
	select {
	case <-broken:
	case <-s.done:
	}
}

func (s *Stream) dialLoop() {
	defer s.wg.Done()
	wait := redialMin
	for {
		c, err := net.Dial(s.network, s.addr)
		if err == nil {
			wait = redialMin
			s.serve(c)
		} else {
			s.log.Debug("stream dial failed", "addr", s.addr, "err", err)
		}
		select {
		case <-s.done:
			return
		case <-time.After(wait):
		}
		if err != nil {
			wait = min(2*wait, redialMax)
		}
	}
}

func (s *Stream) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			s.log.Warn("stream accept failed", "addr", s.addr, "err", err)
			select {
			case <-s.done:
				return
			case <-time.After(redialMin):
			}
			continue
		}
		s.serve(c)
	}
}

// drop retires c after an error on it (either direction), so the loops
// connect the next peer.
func (s *Stream) drop(c net.Conn, why error) {
	s.mu.Lock()
	if s.conn != c {
		s.mu.Unlock()
		return
	}
	s.conn, s.rd = nil, nil
	close(s.broken)
	s.mu.Unlock()
	c.Close()
	s.drops.Add(1)
	s.log.Info("stream peer gone", "addr", s.addr, "err", why)
}

// Send implements Port.
func (s *Stream) Send(frame []byte) error {
	if len(frame) > MaxFrameLen {
		return fmt.Errorf("wire: frame of %d bytes exceeds %d", len(frame), MaxFrameLen)
	}
	s.mu.Lock()
	c, closed := s.conn, s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if c == nil {
		return ErrNoPeer
	}
	// Length and frame in one write: a frame is never interleaved with
	// another sender's.
	s.wmu.Lock()
	binary.BigEndian.PutUint32(s.wbuf, uint32(len(frame)))
	n := copy(s.wbuf[4:], frame)
	_, err := c.Write(s.wbuf[:4+n])
	s.wmu.Unlock()
	if err != nil {
		s.drop(c, err)
		return ErrNoPeer
	}
	return nil
}

// errFraming means the length prefix is beyond anything QEMU would send:
// the byte stream is not at a frame boundary and the connection is reset.
var errFraming = errors.New("wire: stream framing lost")

// Recv implements Port.
func (s *Stream) Recv(buf []byte) (int, error) {
	for {
		s.mu.Lock()
		for s.conn == nil && !s.closed {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return 0, ErrClosed
		}
		c, rd := s.conn, s.rd
		s.mu.Unlock()

		if _, err := io.ReadFull(rd, s.rhdr[:]); err != nil {
			s.drop(c, err)
			continue
		}
		n := int(binary.BigEndian.Uint32(s.rhdr[:]))
		if n > MaxFrameLen {
			s.drop(c, fmt.Errorf("%w: length %d", errFraming, n))
			continue
		}
		if n > len(buf) {
			if _, err := rd.Discard(n); err != nil {
				s.drop(c, err)
			}
			s.skipped.Add(1)
			continue
		}
		if _, err := io.ReadFull(rd, buf[:n]); err != nil {
			// The peer left mid-frame: the partial frame is discarded.
			s.drop(c, err)
			continue
		}
		return n, nil
	}
}

// Close implements Port.
func (s *Stream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	c := s.conn
	s.mu.Unlock()
	close(s.done)
	s.cond.Broadcast()
	if s.ln != nil {
		s.ln.Close()
	}
	if c != nil {
		c.Close()
	}
	s.wg.Wait()
	return nil
}

func (s *Stream) String() string {
	if s.ln != nil {
		return "stream-listen:" + s.network + ":" + s.addr
	}
	return "stream:" + s.network + ":" + s.addr
}
