// Package port owns the NIC's network port, which every engine of the
// device shares and none owns: the Port interface of a backend (a Linux TAP
// interface, QEMU's stream netdev protocol as client or server surviving
// reconnects, an in-memory cable for tests), a pcap recorder that wraps any
// backend, and the Mux that sits on one backend, hands each received frame
// to the engine that claims it (RoCEv2 to the RC engine, everything else
// to Ethernet) and gives each engine its transmit Endpoint. A backend may
// also take TCP super-packets whole for the host kernel to segment
// (GSOSender: the TAP, through its virtio-net header), and deliver them
// whole for the engine to finish (RecvGSOPort, GSOReceiver). It knows
// nothing about rings or guest memory.
package port

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// MaxFrameLen bounds a frame on any port: a receive buffer this large never
// drops a frame. It covers a TAP interface with the largest MTU and QEMU's
// stream netdev, whose own receive buffer is 4096 + 65536 bytes.
const MaxFrameLen = 4096 + 65536

// Sender is the transmit side of a port, all an engine transmits with.
type Sender interface {
	// Send transmits one frame (without FCS). The port does not keep frame
	// after Send returns. Safe for concurrent use. Send may block while the
	// peer does not take frames (flow control); a port without a peer (a
	// stream that is not connected) drops the frame and returns ErrNoPeer.
	Send(frame []byte) error
}

// TrySender is a Sender that can also send without waiting: an engine
// sends on its caller's goroutine when the port would take the frame at
// once, and hands it to a goroutine of its own (which may wait in Send)
// only when it would not (AsTry).
type TrySender interface {
	Sender
	// TrySend is Send if the port takes the frame without waiting for
	// the peer; otherwise it sends nothing and returns ErrWouldBlock.
	// It never blocks on flow control.
	TrySend(frame []byte) error
}

// AsTry returns s's TrySender, if it has one that can try now.
func AsTry(s Sender) (TrySender, bool) {
	if t, ok := s.(interface{ CanTry() bool }); ok && !t.CanTry() {
		return nil, false
	}
	t, ok := s.(TrySender)
	return t, ok
}

// Port is one end of an Ethernet link.
type Port interface {
	Sender
	// Recv waits for the next frame, copies it into buf and returns its
	// length. A frame longer than buf is dropped (pass MaxFrameLen bytes to
	// receive everything). One goroutine at a time may call Recv. After
	// Close, Recv returns ErrClosed.
	Recv(buf []byte) (int, error)
	// Close releases the port and unblocks Send and Recv.
	Close() error
}

// Errors common to the ports.
var (
	ErrClosed = errors.New("wire: port closed")
	ErrNoPeer = errors.New("wire: no peer connected")
	ErrNoGSO  = errors.New("wire: port cannot take GSO sends")
	// ErrWouldBlock is TrySend's answer when Send would wait: nothing
	// was sent.
	ErrWouldBlock = errors.New("wire: send would block")
)

// Spec is a parsed port description (see ParseSpec).
type Spec struct {
	Kind    string // "tap", "stream" (connect) or "stream-listen"
	Network string // "unix" or "tcp" for the stream kinds
	Addr    string // interface name, socket path or host:port
}

func (s Spec) String() string {
	if s.Kind == "tap" {
		return "tap:" + s.Addr
	}
	return s.Kind + ":" + s.Network + ":" + s.Addr
}

// SpecHelp documents the spec syntax for command-line flags.
const SpecHelp = "tap:IFNAME | stream:unix:PATH | stream:tcp:HOST:PORT | stream-listen:unix:PATH | stream-listen:tcp:ADDR"

// ParseSpec parses a port description, the one syntax shared by
// `npfnic serve --wire` and the test harness:
//
//	tap:IFNAME                 a Linux TAP interface (created if missing)
//	stream:unix:PATH           connect to QEMU's -netdev stream server
//	stream:tcp:HOST:PORT
//	stream-listen:unix:PATH    accept QEMU's -netdev stream client
//	stream-listen:tcp:ADDR
func ParseSpec(spec string) (Spec, error) {
	kind, rest, ok := strings.Cut(spec, ":")
	if !ok || rest == "" {
		return Spec{}, fmt.Errorf("wire: bad spec %q: want %s", spec, SpecHelp)
	}
	switch kind {
	case "tap":
		if len(rest) >= 16 || strings.ContainsAny(rest, "/ \t\n:") {
			return Spec{}, fmt.Errorf("wire: bad interface name %q", rest)
		}
		return Spec{Kind: kind, Addr: rest}, nil
	case "stream", "stream-listen":
		network, addr, ok := strings.Cut(rest, ":")
		if !ok || addr == "" {
			return Spec{}, fmt.Errorf("wire: bad spec %q: want %s:unix:PATH or %s:tcp:ADDR", spec, kind, kind)
		}
		switch network {
		case "unix":
		case "tcp":
			if kind == "stream" && !strings.Contains(addr, ":") {
				return Spec{}, fmt.Errorf("wire: bad spec %q: want HOST:PORT", spec)
			}
		default:
			return Spec{}, fmt.Errorf("wire: bad network %q in %q: want unix or tcp", network, spec)
		}
		return Spec{Kind: kind, Network: network, Addr: addr}, nil
	}
	return Spec{}, fmt.Errorf("wire: unknown port kind %q in %q: want %s", kind, spec, SpecHelp)
}

// Open parses spec and opens that port. log may be nil.
func Open(spec string, log *slog.Logger) (Port, error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return s.Open(log)
}

// Open opens the port s describes. log may be nil.
func (s Spec) Open(log *slog.Logger) (Port, error) {
	switch s.Kind {
	case "tap":
		return OpenTAP(s.Addr)
	case "stream":
		return DialStream(s.Network, s.Addr, log), nil
	case "stream-listen":
		return ListenStream(s.Network, s.Addr, log)
	}
	return nil, fmt.Errorf("wire: unknown port kind %q", s.Kind)
}

// OpenRecorded opens the port spec names and, if pcapPath is not empty,
// records its frames there (see CreatePcap). It is what `npfnic serve
// --wire SPEC --pcap FILE` and the test harness use. log may be nil.
func OpenRecorded(spec, pcapPath string, log *slog.Logger) (Port, error) {
	p, err := Open(spec, log)
	if err != nil {
		return nil, err
	}
	if pcapPath == "" {
		return p, nil
	}
	rec, err := CreatePcap(p, pcapPath)
	if err != nil {
		p.Close()
		return nil, err
	}
	return rec, nil
}
