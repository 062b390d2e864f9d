package rocev2

import (
	"io"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// PcapWriter writes Ethernet frames to a pcap file with nanosecond
// timestamps. It is safe for concurrent use.
type PcapWriter struct {
	mu sync.Mutex
	w  *pcapgo.Writer
}

// NewPcapWriter writes the pcap file header to w.
func NewPcapWriter(w io.Writer) (*PcapWriter, error) {
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		return nil, err
	}
	return &PcapWriter{w: pw}, nil
}

// WriteFrame appends one frame captured at ts.
func (p *PcapWriter) WriteFrame(ts time.Time, frame []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(frame), Length: len(frame)}
	return p.w.WritePacket(ci, frame)
}
