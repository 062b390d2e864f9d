package rocev2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"slices"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// MinFrameLen is the shortest Ethernet frame without FCS; shorter frames are
// padded.
const MinFrameLen = 60

// FrameOverhead is the number of bytes a frame built by AppendFrame adds
// around the extended headers and payload: Ethernet, IPv4, UDP, BTH, ICRC.
const FrameOverhead = 14 + 20 + 8 + BTHLen + ICRCLen

// Path is the addressing of one direction of a connection: the Ethernet,
// IPv4 and UDP fields of every frame. RoCEv2 GIDs are IPv4-mapped IPv6
// addresses; SrcIP and DstIP are their IPv4 part.
type Path struct {
	SrcMAC, DstMAC [6]byte
	SrcIP, DstIP   [4]byte
	SrcPort        uint16 // UDP source port (flow entropy); the destination is 4791
	TTL            uint8  // 0 means 64
	TrafficClass   uint8  // IPv4 TOS byte (DSCP and ECN)
}

// Headers are the transport headers of a packet; which extended headers go
// on the wire is decided by BTH.Opcode. PadCount is computed by AppendFrame.
type Headers struct {
	BTH          BTH
	DETH         DETH
	RETH         RETH
	AETH         AETH
	ImmDt        ImmDt
	IETH         IETH
	AtomicETH    AtomicETH
	AtomicAckETH AtomicAckETH
}

// AppendFrame appends an Ethernet/IPv4/UDP RoCEv2 frame carrying h and
// payload to dst, with the pad count, lengths, IPv4 header checksum and
// ICRC filled in, and returns the extended slice. The UDP checksum is 0
// (not computed), as RoCEv2 over IPv4 permits: the ICRC covers the packet.
func AppendFrame(dst []byte, p *Path, h *Headers, payload []byte) []byte {
	out, _ := appendFrame(dst, p, h, len(payload), func(b []byte) error { copy(b, payload); return nil })
	return out
}

// BuildFrame returns a new frame like AppendFrame, with a payload of
// payloadLen bytes that fill writes in place (it may be called with a
// zero-length slice). An error from fill is returned with no frame.
func BuildFrame(p *Path, h *Headers, payloadLen int, fill func(payload []byte) error) ([]byte, error) {
	return appendFrame(nil, p, h, payloadLen, fill)
}

// AppendFrameFill is BuildFrame appending to dst, as AppendFrame does:
// with a recycled dst of enough capacity it allocates nothing. fill must
// write the whole payload slice (what it leaves is dst's old bytes). An
// error from fill is returned with dst as it was.
func AppendFrameFill(dst []byte, p *Path, h *Headers, payloadLen int, fill func(payload []byte) error) ([]byte, error) {
	return appendFrame(dst, p, h, payloadLen, fill)
}

func appendFrame(dst []byte, p *Path, h *Headers, payloadLen int, fill func([]byte) error) ([]byte, error) {
	op := h.BTH.Opcode
	pad := (4 - payloadLen%4) % 4
	ipLen := 20 + 8 + BTHLen + op.HeaderLen() + payloadLen + pad + ICRCLen
	frameLen := 14 + ipLen
	total := max(frameLen, MinFrameLen)
	start := len(dst)
	dst = slices.Grow(dst, total)[:start+total]
	f := dst[start:]
	// Every byte but the payload's is zeroed (fields left 0, the pad,
	// the padding of a short frame): the payload is fill's.
	hdrEnd := 14 + 20 + 8 + BTHLen + op.HeaderLen()
	clear(f[:hdrEnd])
	clear(f[hdrEnd+payloadLen:])
	copy(f[0:6], p.DstMAC[:])
	copy(f[6:12], p.SrcMAC[:])
	binary.BigEndian.PutUint16(f[12:14], 0x0800)
	ip := f[14:]
	ip[0] = 0x45
	ip[1] = p.TrafficClass
	binary.BigEndian.PutUint16(ip[2:4], uint16(ipLen))
	binary.BigEndian.PutUint16(ip[6:8], 0x4000) // DF
	ttl := p.TTL
	if ttl == 0 {
		ttl = 64
	}
	ip[8] = ttl
	ip[9] = 17
	copy(ip[12:16], p.SrcIP[:])
	copy(ip[16:20], p.DstIP[:])
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:2], p.SrcPort)
	binary.BigEndian.PutUint16(udp[2:4], UDPPort)
	binary.BigEndian.PutUint16(udp[4:6], uint16(ipLen-20))
	bth := h.BTH
	bth.PadCount = uint8(pad)
	bth.encode(udp[8:])
	q := udp[8+BTHLen:]
	fl := op.Flags()
	if fl&HasDETH != 0 {
		h.DETH.encode(q)
		q = q[DETHLen:]
	}
	if fl&HasRETH != 0 {
		h.RETH.encode(q)
		q = q[RETHLen:]
	}
	if fl&HasAtomicETH != 0 {
		a := &h.AtomicETH
		binary.BigEndian.PutUint64(q[0:8], a.VA)
		binary.BigEndian.PutUint32(q[8:12], a.RKey)
		binary.BigEndian.PutUint64(q[12:20], a.SwapOrAdd)
		binary.BigEndian.PutUint64(q[20:28], a.CompareDat)
		q = q[AtomicETHLen:]
	}
	if fl&HasAETH != 0 {
		h.AETH.encode(q)
		q = q[AETHLen:]
	}
	if fl&HasAtomicAckETH != 0 {
		binary.BigEndian.PutUint64(q, h.AtomicAckETH.OrigRemData)
		q = q[AtomicAckETHLen:]
	}
	if fl&HasImmDt != 0 {
		binary.BigEndian.PutUint32(q, h.ImmDt.Data)
		q = q[ImmDtLen:]
	}
	if fl&HasIETH != 0 {
		binary.BigEndian.PutUint32(q, h.IETH.RKey)
		q = q[IETHLen:]
	}
	if err := fill(q[:payloadLen]); err != nil {
		return dst[:start], err
	}
	// The ICRC in one pass over the packet as it lies in the frame,
	// with the fields it does not cover masked for the while.
	bth4 := udp[8+4]
	maskVariant(ip, 20)
	c := crc32.Update(lrhMask, crc32.IEEETable, ip[:ipLen-ICRCLen])
	ip[1] = p.TrafficClass
	ip[8] = ttl
	ip[10], ip[11] = 0, 0
	udp[6], udp[7] = 0, 0
	udp[8+4] = bth4
	binary.BigEndian.PutUint16(ip[10:12], ipChecksum(ip[:20]))
	binary.BigEndian.PutUint32(ip[ipLen-ICRCLen:], icrcWire(c))
	return dst, nil
}

func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// Errors returned by Decoder.Decode. Any of them means the frame is to be
// silently dropped (IBA 9.6: packets failing header checks are discarded).
var (
	ErrMalformed = errors.New("rocev2: malformed packet")
	ErrBadICRC   = errors.New("rocev2: ICRC mismatch")
)

// Packet is a decoded RoCEv2 frame. Its slices alias the decoded frame.
type Packet struct {
	Ethernet layers.Ethernet
	Dot1Q    layers.Dot1Q
	HasDot1Q bool
	IPv4     layers.IPv4
	UDP      layers.UDP
	Headers
	Payload []byte // the payload without the pad
}

// Decoder decodes RoCEv2 frames with a gopacket.DecodingLayerParser over
// Ethernet, 802.1Q, IPv4, UDP and this package's layers. It is not safe for
// concurrent use; it reuses one Packet.
type Decoder struct {
	pkt     Packet
	tl      *TransportLayers
	payload gopacket.Payload
	parser  *gopacket.DecodingLayerParser
	decoded []gopacket.LayerType
	// exts are tl's extended headers in the order they follow the BTH,
	// and fb the feedback of their decoders, for decodeFast.
	exts []extDecoder
	fb   truncFeedback
	// slowOnly: every frame goes through the parser (FuzzDecodeFast).
	slowOnly bool
}

type extDecoder struct {
	flag  OpFlags
	layer gopacket.DecodingLayer
}

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder {
	d := &Decoder{tl: NewTransportLayers()}
	dls := []gopacket.DecodingLayer{&d.pkt.Ethernet, &d.pkt.Dot1Q, &d.pkt.IPv4, &d.pkt.UDP, &d.payload}
	dls = append(dls, d.tl.DecodingLayers()...)
	d.parser = gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, dls...)
	// Let panics surface: the fuzz tests must see them, not errors.
	d.parser.IgnorePanic = true
	d.decoded = make([]gopacket.LayerType, 0, 10)
	t := d.tl
	d.exts = []extDecoder{{HasDETH, &t.DETH}, {HasRETH, &t.RETH}, {HasAtomicETH, &t.AtomicETH}, {HasAETH, &t.AETH},
		{HasAtomicAckETH, &t.AtomicAckETH}, {HasImmDt, &t.ImmDt}, {HasIETH, &t.IETH}}
	return d
}

// Decode parses and validates a frame: IPv4 without fragmentation and with a
// correct header checksum, UDP to port 4791 with consistent lengths, a
// known opcode of transport version 0 with all its extended headers, and
// the ICRC. The returned Packet is valid until the next call.
func (d *Decoder) Decode(frame []byte) (*Packet, error) {
	if d.slowOnly || !d.decodeFast(frame) {
		if err := d.decodeLayers(frame); err != nil {
			return nil, err
		}
	}
	ip := &d.pkt.IPv4
	if ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 {
		return nil, fmt.Errorf("%w: IPv4 fragment", ErrMalformed)
	}
	if ipChecksum(ip.Contents) != 0 {
		return nil, fmt.Errorf("%w: IPv4 header checksum", ErrMalformed)
	}
	u := &d.pkt.UDP
	if u.DstPort != UDPPort || int(u.Length) != len(ip.Payload) {
		return nil, fmt.Errorf("%w: UDP port %d length %d", ErrMalformed, u.DstPort, u.Length)
	}
	b := &d.tl.BTH
	if b.TVer != 0 || !b.Opcode.Known() {
		return nil, fmt.Errorf("%w: tver %d opcode %v", ErrMalformed, b.TVer, b.Opcode)
	}
	return d.finish(frame)
}

// truncFeedback is the gopacket.DecodeFeedback of decodeFast.
type truncFeedback struct{ truncated bool }

func (f *truncFeedback) SetTruncated() { f.truncated = true }

// decodeFast decodes the layers of the frames the engines exchange,
// Ethernet without a tag, IPv4 without options, UDP to the RoCEv2 port,
// the BTH of a known opcode and its extended headers, by calling their
// decoders in that order rather than through the DecodingLayerParser's
// lookups: what the parser would have decoded, in the same Packet and
// transport layers. Anything else, or a layer that fails or finds the
// frame truncated, returns false, and the parser decodes the frame (and
// says what is wrong with it). FuzzDecodeFast holds the two paths to the
// same Packet.
func (d *Decoder) decodeFast(frame []byte) bool {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:14]) != 0x0800 || frame[14] != 0x45 {
		return false
	}
	fb := &d.fb
	fb.truncated = false
	p := &d.pkt
	if p.Ethernet.DecodeFromBytes(frame, fb) != nil || fb.truncated {
		return false
	}
	ip := &p.IPv4
	if ip.DecodeFromBytes(p.Ethernet.Payload, fb) != nil || fb.truncated || ip.Protocol != layers.IPProtocolUDP ||
		ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 {
		return false
	}
	if p.UDP.DecodeFromBytes(ip.Payload, fb) != nil || fb.truncated || p.UDP.DstPort != UDPPort {
		return false
	}
	t := d.tl
	if t.BTH.DecodeFromBytes(p.UDP.Payload, fb) != nil || fb.truncated || t.BTH.TVer != 0 || !t.BTH.Opcode.Known() {
		return false
	}
	rest := t.BTH.Payload
	fl := t.BTH.Opcode.Flags()
	for _, x := range d.exts {
		if fl&x.flag == 0 {
			continue
		}
		if x.layer.DecodeFromBytes(rest, fb) != nil || fb.truncated {
			return false
		}
		rest = x.layer.LayerPayload()
	}
	p.HasDot1Q = false
	return true
}

// decodeLayers decodes frame's layers with the DecodingLayerParser and
// checks that it has IPv4, UDP and a BTH.
func (d *Decoder) decodeLayers(frame []byte) error {
	err := d.parser.DecodeLayers(frame, &d.decoded)
	if err != nil {
		var unsup gopacket.UnsupportedLayerType
		if !errors.As(err, &unsup) {
			return fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	if d.parser.Truncated {
		return fmt.Errorf("%w: truncated", ErrMalformed)
	}
	var have struct{ ip, udp, bth bool }
	d.pkt.HasDot1Q = false
	for _, t := range d.decoded {
		switch t {
		case layers.LayerTypeDot1Q:
			d.pkt.HasDot1Q = true
		case layers.LayerTypeIPv4:
			have.ip = true
		case layers.LayerTypeUDP:
			have.udp = true
		case LayerTypeBTH:
			have.bth = true
		}
	}
	if !have.ip || !have.udp || !have.bth {
		return fmt.Errorf("%w: not IPv4/UDP/BTH (%v)", ErrMalformed, d.decoded)
	}
	return nil
}

// finish copies the transport headers out of the decoded layers and
// checks the ICRC.
func (d *Decoder) finish(frame []byte) (*Packet, error) {
	ip := &d.pkt.IPv4
	b := &d.tl.BTH
	// The transport layers were decoded in place; copy them out so the
	// Packet is self-contained.
	t := d.tl
	d.pkt.Headers = Headers{} // no stale headers from the previous packet
	d.pkt.BTH = t.BTH
	rest := t.BTH.Payload
	fl := b.Opcode.Flags()
	if fl&HasDETH != 0 {
		d.pkt.DETH = t.DETH
		rest = rest[DETHLen:]
	}
	if fl&HasRETH != 0 {
		d.pkt.RETH = t.RETH
		rest = rest[RETHLen:]
	}
	if fl&HasAtomicETH != 0 {
		d.pkt.AtomicETH = t.AtomicETH
		rest = rest[AtomicETHLen:]
	}
	if fl&HasAETH != 0 {
		d.pkt.AETH = t.AETH
		rest = rest[AETHLen:]
	}
	if fl&HasAtomicAckETH != 0 {
		d.pkt.AtomicAckETH = t.AtomicAckETH
		rest = rest[AtomicAckETHLen:]
	}
	if fl&HasImmDt != 0 {
		d.pkt.ImmDt = t.ImmDt
		rest = rest[ImmDtLen:]
	}
	if fl&HasIETH != 0 {
		d.pkt.IETH = t.IETH
		rest = rest[IETHLen:]
	}
	d.pkt.Payload = rest
	// ICRC over the IPv4 packet.
	ipStart := len(d.pkt.Ethernet.Contents)
	if d.pkt.HasDot1Q {
		ipStart += len(d.pkt.Dot1Q.Contents)
	}
	ipEnd := ipStart + int(ip.Length)
	if ipEnd > len(frame) {
		return nil, fmt.Errorf("%w: IPv4 length", ErrMalformed)
	}
	c, err := ICRC(frame[ipStart : ipEnd-ICRCLen])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if c != b.ICRC {
		return nil, fmt.Errorf("%w: got %#08x want %#08x", ErrBadICRC, b.ICRC, c)
	}
	return &d.pkt, nil
}

// SrcIP4 and DstIP4 return the IPv4 addresses of a decoded packet.
func (p *Packet) SrcIP4() (a [4]byte) { copy(a[:], p.IPv4.SrcIP.To4()); return }
func (p *Packet) DstIP4() (a [4]byte) { copy(a[:], p.IPv4.DstIP.To4()); return }

// GIDFromIPv4 returns the RoCEv2 GID of an IPv4 address: the IPv4-mapped
// IPv6 address ::ffff:a.b.c.d.
func GIDFromIPv4(ip [4]byte) (g [16]byte) {
	g[10], g[11] = 0xff, 0xff
	copy(g[12:], ip[:])
	return g
}

// IPv4FromGID returns the IPv4 address of an IPv4-mapped GID.
func IPv4FromGID(g [16]byte) ([4]byte, bool) {
	ip := net.IP(g[:])
	v4 := ip.To4()
	var a [4]byte
	if v4 == nil {
		return a, false
	}
	copy(a[:], v4)
	return a, true
}
