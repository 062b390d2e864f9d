package port

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// pcapFlushDelay bounds how long a recorded frame may sit in the buffer, so
// a capture can be inspected while the port runs.
const pcapFlushDelay = 200 * time.Millisecond

// Pcap wraps a port and records every frame it carries, both directions,
// in a pcap file (Ethernet link type, nanosecond timestamps) that
// Wireshark, tshark and tcpdump read.
type Pcap struct {
	inner Port

	mu        sync.Mutex
	bw        *bufio.Writer
	w         *pcapgo.Writer
	closer    io.Closer // the file, if CreatePcap opened it
	flushing  bool      // a delayed flush is scheduled
	closed    bool
	writeErr  error
	flushTime *time.Timer
}

// CreatePcap creates (truncates) the file at path and records inner's
// frames into it. Closing the returned port closes inner and the file.
func CreatePcap(inner Port, path string) (*Pcap, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("wire: pcap: %w", err)
	}
	p, err := NewPcap(inner, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	p.closer = f
	return p, nil
}

// NewPcap records inner's frames into w, starting with the file header.
func NewPcap(inner Port, w io.Writer) (*Pcap, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	pw := pcapgo.NewWriterNanos(bw)
	if err := pw.WriteFileHeader(MaxFrameLen, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("wire: pcap header: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("wire: pcap header: %w", err)
	}
	return &Pcap{inner: inner, bw: bw, w: pw}, nil
}

func (p *Pcap) record(frame []byte) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.writeErr != nil {
		return
	}
	ci := gopacket.CaptureInfo{Timestamp: now, CaptureLength: len(frame), Length: len(frame)}
	if err := p.w.WritePacket(ci, frame); err != nil {
		p.writeErr = err
		return
	}
	if !p.flushing {
		p.flushing = true
		if p.flushTime == nil {
			p.flushTime = time.AfterFunc(pcapFlushDelay, p.flush)
		} else {
			p.flushTime.Reset(pcapFlushDelay)
		}
	}
}

func (p *Pcap) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushing = false
	if p.writeErr == nil && !p.closed {
		p.writeErr = p.bw.Flush()
	}
}

// Err reports the first error writing the capture (the port keeps
// carrying frames regardless).
func (p *Pcap) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writeErr
}

// Send implements Port: the frame is recorded, then sent.
func (p *Pcap) Send(frame []byte) error {
	p.record(frame)
	return p.inner.Send(frame)
}

// CanTry reports whether the inner port can send without waiting.
func (p *Pcap) CanTry() bool {
	_, ok := AsTry(p.inner)
	return ok
}

// TrySend implements TrySender: a frame the inner port took (or lost) is
// recorded; one that would wait is not.
func (p *Pcap) TrySend(frame []byte) error {
	t, ok := AsTry(p.inner)
	if !ok {
		return ErrWouldBlock
	}
	err := t.TrySend(frame)
	if err != ErrWouldBlock {
		p.record(frame)
	}
	return err
}

// CanGSO implements GSOPort: the recorder takes GSO sends when its inner
// port does.
func (p *Pcap) CanGSO() bool {
	_, ok := AsGSO(p.inner)
	return ok
}

// SendGSO implements GSOPort. The recorder captures what the device
// sends, so a GSO send is recorded as the one super-packet (longer than
// the MTU, with the pseudo-header sum in its TCP checksum field, as a
// capture on a host with TSO shows it), then passed to the inner port;
// ErrNoGSO if the inner port cannot take it.
func (p *Pcap) SendGSO(frame []byte, gso GSOInfo) error {
	g, ok := AsGSO(p.inner)
	if !ok {
		return ErrNoGSO
	}
	p.record(frame)
	return g.SendGSO(frame, gso)
}

// Recv implements Port: the frame is received, then recorded.
func (p *Pcap) Recv(buf []byte) (int, error) {
	n, err := p.inner.Recv(buf)
	if err == nil {
		p.record(buf[:n])
	}
	return n, err
}

// EnableRecvGSO implements RecvGSOPort when the inner port does.
func (p *Pcap) EnableRecvGSO() error {
	g, ok := p.inner.(RecvGSOPort)
	if !ok {
		return ErrNoGSO
	}
	return g.EnableRecvGSO()
}

// RecvGSO implements RecvGSOPort: the frame is received and recorded as
// the host delivered it, a super-packet whole (as a capture on a host with
// GRO shows it).
func (p *Pcap) RecvGSO(buf []byte) (int, GSOInfo, error) {
	g, ok := p.inner.(RecvGSOPort)
	if !ok {
		n, err := p.Recv(buf)
		return n, GSOInfo{}, err
	}
	n, gso, err := g.RecvGSO(buf)
	if err == nil {
		p.record(buf[:n])
	}
	return n, gso, err
}

// Close implements Port: it closes inner, then completes the capture.
func (p *Pcap) Close() error {
	err := p.inner.Close()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return err
	}
	p.closed = true
	if p.flushTime != nil {
		p.flushTime.Stop()
	}
	ferr := p.writeErr
	if ferr == nil {
		ferr = p.bw.Flush()
	}
	p.mu.Unlock()
	if p.closer != nil {
		ferr = errors.Join(ferr, p.closer.Close())
	}
	return errors.Join(err, ferr)
}

func (p *Pcap) String() string { return fmt.Sprintf("pcap(%v)", p.inner) }
