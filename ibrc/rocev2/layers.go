package rocev2

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Header lengths in bytes.
const (
	BTHLen          = 12
	DETHLen         = 8
	RETHLen         = 16
	AETHLen         = 4
	ImmDtLen        = 4
	IETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ICRCLen         = 4
)

// Layer type numbers (gopacket reserves 1000-1999 for applications).
const layerTypeBase = 1479

// The gopacket layer types of the InfiniBand transport headers.
var (
	LayerTypeBTH          = gopacket.RegisterLayerType(layerTypeBase+0, gopacket.LayerTypeMetadata{Name: "BTH", Decoder: gopacket.DecodeFunc(decodeBTH)})
	LayerTypeRETH         = gopacket.RegisterLayerType(layerTypeBase+1, gopacket.LayerTypeMetadata{Name: "RETH", Decoder: gopacket.DecodeFunc(decodeStandalone(func() extLayer { return &RETH{} }))})
	LayerTypeAETH         = gopacket.RegisterLayerType(layerTypeBase+2, gopacket.LayerTypeMetadata{Name: "AETH", Decoder: gopacket.DecodeFunc(decodeStandalone(func() extLayer { return &AETH{} }))})
	LayerTypeImmDt        = gopacket.RegisterLayerType(layerTypeBase+3, gopacket.LayerTypeMetadata{Name: "ImmDt", Decoder: gopacket.DecodeFunc(decodeStandalone(func() extLayer { return &ImmDt{} }))})
	LayerTypeIETH         = gopacket.RegisterLayerType(layerTypeBase+4, gopacket.LayerTypeMetadata{Name: "IETH", Decoder: gopacket.DecodeFunc(decodeStandalone(func() extLayer { return &IETH{} }))})
	LayerTypeAtomicETH    = gopacket.RegisterLayerType(layerTypeBase+5, gopacket.LayerTypeMetadata{Name: "AtomicETH", Decoder: gopacket.DecodeFunc(decodeStandalone(func() extLayer { return &AtomicETH{} }))})
	LayerTypeAtomicAckETH = gopacket.RegisterLayerType(layerTypeBase+6, gopacket.LayerTypeMetadata{Name: "AtomicAckETH", Decoder: gopacket.DecodeFunc(decodeStandalone(func() extLayer { return &AtomicAckETH{} }))})
	LayerTypeDETH         = gopacket.RegisterLayerType(layerTypeBase+7, gopacket.LayerTypeMetadata{Name: "DETH", Decoder: gopacket.DecodeFunc(decodeStandalone(func() extLayer { return &DETH{} }))})
)

func init() {
	layers.RegisterUDPPortLayerType(layers.UDPPort(UDPPort), LayerTypeBTH)
}

// Errors reported by the layer decoders.
var (
	ErrTruncated   = errors.New("rocev2: truncated packet")
	ErrBadPadCount = errors.New("rocev2: pad count exceeds payload")
)

// extOrder is the order in which extended transport headers follow the BTH.
var extOrder = [...]struct {
	flag OpFlags
	typ  *gopacket.LayerType
}{
	{HasDETH, &LayerTypeDETH},
	{HasRETH, &LayerTypeRETH},
	{HasAtomicETH, &LayerTypeAtomicETH},
	{HasAETH, &LayerTypeAETH},
	{HasAtomicAckETH, &LayerTypeAtomicAckETH},
	{HasImmDt, &LayerTypeImmDt},
	{HasIETH, &LayerTypeIETH},
}

// nextAfter returns the layer that follows the header flagged after (0 for
// the BTH itself) in a packet with opcode op.
func nextAfter(op Opcode, after OpFlags) gopacket.LayerType {
	f := op.Flags()
	seen := after == 0
	for _, e := range extOrder {
		if seen && f&e.flag != 0 {
			return *e.typ
		}
		if e.flag == after {
			seen = true
		}
	}
	return gopacket.LayerTypePayload
}

// BTH is the InfiniBand Base Transport Header. Decoding it also takes the
// ICRC off the end of the packet and the pad bytes off the end of the
// payload: its LayerPayload is the extended headers and the payload proper.
type BTH struct {
	layers.BaseLayer
	Opcode         Opcode
	SolicitedEvent bool
	MigReq         bool
	PadCount       uint8 // 0-3 bytes of pad before the ICRC
	TVer           uint8 // transport header version, 0
	PKey           uint16
	FECN, BECN     bool // RoCEv2 congestion bits in the reserved byte
	DestQP         uint32
	AckReq         bool
	PSN            uint32
	ICRC           uint32 // the trailer bytes read in network order
}

// LayerType implements gopacket.Layer.
func (b *BTH) LayerType() gopacket.LayerType { return LayerTypeBTH }

// CanDecode implements gopacket.DecodingLayer.
func (b *BTH) CanDecode() gopacket.LayerClass { return LayerTypeBTH }

// NextLayerType implements gopacket.DecodingLayer.
func (b *BTH) NextLayerType() gopacket.LayerType { return nextAfter(b.Opcode, 0) }

// DecodeFromBytes decodes a BTH, the extension headers' room, the pad and
// the ICRC trailer.
func (b *BTH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < BTHLen+ICRCLen {
		df.SetTruncated()
		return ErrTruncated
	}
	b.Opcode = Opcode(data[0])
	b.SolicitedEvent = data[1]&0x80 != 0
	b.MigReq = data[1]&0x40 != 0
	b.PadCount = data[1] >> 4 & 3
	b.TVer = data[1] & 0x0f
	b.PKey = binary.BigEndian.Uint16(data[2:4])
	b.FECN = data[4]&0x80 != 0
	b.BECN = data[4]&0x40 != 0
	b.DestQP = uint32(data[5])<<16 | uint32(data[6])<<8 | uint32(data[7])
	b.AckReq = data[8]&0x80 != 0
	b.PSN = uint32(data[9])<<16 | uint32(data[10])<<8 | uint32(data[11])
	end := len(data) - ICRCLen
	b.ICRC = binary.BigEndian.Uint32(data[end:])
	body := end - BTHLen
	if body < b.Opcode.HeaderLen() {
		df.SetTruncated()
		return fmt.Errorf("%w: %v needs %d bytes of extended headers, has %d", ErrTruncated, b.Opcode, b.Opcode.HeaderLen(), body)
	}
	if body-b.Opcode.HeaderLen() < int(b.PadCount) {
		return ErrBadPadCount
	}
	b.Contents = data[:BTHLen]
	b.Payload = data[BTHLen : end-int(b.PadCount)]
	return nil
}

func (b *BTH) encode(p []byte) {
	p[0] = byte(b.Opcode)
	p[1] = b.PadCount&3<<4 | b.TVer&0x0f
	if b.SolicitedEvent {
		p[1] |= 0x80
	}
	if b.MigReq {
		p[1] |= 0x40
	}
	binary.BigEndian.PutUint16(p[2:4], b.PKey)
	p[4] = 0
	if b.FECN {
		p[4] |= 0x80
	}
	if b.BECN {
		p[4] |= 0x40
	}
	p[5], p[6], p[7] = byte(b.DestQP>>16), byte(b.DestQP>>8), byte(b.DestQP)
	p[8] = 0
	if b.AckReq {
		p[8] = 0x80
	}
	p[9], p[10], p[11] = byte(b.PSN>>16), byte(b.PSN>>8), byte(b.PSN)
}

// SerializeTo prepends the BTH and appends the pad and an ICRC placeholder
// (b.ICRC); FixICRC computes the real ICRC once the outer headers exist.
// With FixLengths the pad count is derived from what follows the extended
// headers.
func (b *BTH) SerializeTo(buf gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	if opts.FixLengths {
		n := len(buf.Bytes()) - b.Opcode.HeaderLen()
		if n < 0 {
			return fmt.Errorf("rocev2: %v needs %d bytes of extended headers", b.Opcode, b.Opcode.HeaderLen())
		}
		b.PadCount = uint8((4 - n%4) % 4)
	}
	tail, err := buf.AppendBytes(int(b.PadCount) + ICRCLen)
	if err != nil {
		return err
	}
	clear(tail)
	binary.BigEndian.PutUint32(tail[b.PadCount:], b.ICRC)
	p, err := buf.PrependBytes(BTHLen)
	if err != nil {
		return err
	}
	b.encode(p)
	return nil
}

// extLayer is an extended transport header.
type extLayer interface {
	gopacket.DecodingLayer
	gopacket.Layer
	setBTH(*BTH)
}

// extBase is shared by the extended headers: they learn what follows them
// from the BTH decoded in the same parser (the header sequence is a function
// of the opcode, not of the header's own bytes).
type extBase struct {
	layers.BaseLayer
	bth *BTH
}

func (e *extBase) setBTH(b *BTH) { e.bth = b }

func (e *extBase) next(self OpFlags) gopacket.LayerType {
	if e.bth == nil {
		return gopacket.LayerTypePayload
	}
	return nextAfter(e.bth.Opcode, self)
}

func (e *extBase) split(data []byte, n int, df gopacket.DecodeFeedback) error {
	if len(data) < n {
		df.SetTruncated()
		return ErrTruncated
	}
	e.Contents, e.Payload = data[:n], data[n:]
	return nil
}

// DETH is the Datagram Extended Transport Header of UD packets: the Q_Key
// the receiving QP checks and the sending QP's number.
type DETH struct {
	extBase
	QKey  uint32
	SrcQP uint32 // 24 bits
}

func (d *DETH) LayerType() gopacket.LayerType     { return LayerTypeDETH }
func (d *DETH) CanDecode() gopacket.LayerClass    { return LayerTypeDETH }
func (d *DETH) NextLayerType() gopacket.LayerType { return d.next(HasDETH) }
func (d *DETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := d.split(data, DETHLen, df); err != nil {
		return err
	}
	d.QKey = binary.BigEndian.Uint32(data[0:4])
	d.SrcQP = binary.BigEndian.Uint32(data[4:8]) & 0xffffff
	return nil
}
func (d *DETH) encode(p []byte) {
	binary.BigEndian.PutUint32(p[0:4], d.QKey)
	binary.BigEndian.PutUint32(p[4:8], d.SrcQP&0xffffff)
}
func (d *DETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	p, err := b.PrependBytes(DETHLen)
	if err == nil {
		d.encode(p)
	}
	return err
}

// RETH is the RDMA Extended Transport Header.
type RETH struct {
	extBase
	VA        uint64
	RKey      uint32
	DMALength uint32
}

func (r *RETH) LayerType() gopacket.LayerType     { return LayerTypeRETH }
func (r *RETH) CanDecode() gopacket.LayerClass    { return LayerTypeRETH }
func (r *RETH) NextLayerType() gopacket.LayerType { return r.next(HasRETH) }
func (r *RETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := r.split(data, RETHLen, df); err != nil {
		return err
	}
	r.VA = binary.BigEndian.Uint64(data[0:8])
	r.RKey = binary.BigEndian.Uint32(data[8:12])
	r.DMALength = binary.BigEndian.Uint32(data[12:16])
	return nil
}
func (r *RETH) encode(p []byte) {
	binary.BigEndian.PutUint64(p[0:8], r.VA)
	binary.BigEndian.PutUint32(p[8:12], r.RKey)
	binary.BigEndian.PutUint32(p[12:16], r.DMALength)
}
func (r *RETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	p, err := b.PrependBytes(RETHLen)
	if err == nil {
		r.encode(p)
	}
	return err
}

// AETH is the ACK Extended Transport Header.
type AETH struct {
	extBase
	Syndrome Syndrome
	MSN      uint32
}

func (a *AETH) LayerType() gopacket.LayerType     { return LayerTypeAETH }
func (a *AETH) CanDecode() gopacket.LayerClass    { return LayerTypeAETH }
func (a *AETH) NextLayerType() gopacket.LayerType { return a.next(HasAETH) }
func (a *AETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := a.split(data, AETHLen, df); err != nil {
		return err
	}
	a.Syndrome = Syndrome(data[0])
	a.MSN = uint32(data[1])<<16 | uint32(data[2])<<8 | uint32(data[3])
	return nil
}
func (a *AETH) encode(p []byte) {
	p[0] = byte(a.Syndrome)
	p[1], p[2], p[3] = byte(a.MSN>>16), byte(a.MSN>>8), byte(a.MSN)
}
func (a *AETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	p, err := b.PrependBytes(AETHLen)
	if err == nil {
		a.encode(p)
	}
	return err
}

// ImmDt is the Immediate Data header.
type ImmDt struct {
	extBase
	Data uint32
}

func (i *ImmDt) LayerType() gopacket.LayerType     { return LayerTypeImmDt }
func (i *ImmDt) CanDecode() gopacket.LayerClass    { return LayerTypeImmDt }
func (i *ImmDt) NextLayerType() gopacket.LayerType { return i.next(HasImmDt) }
func (i *ImmDt) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := i.split(data, ImmDtLen, df); err != nil {
		return err
	}
	i.Data = binary.BigEndian.Uint32(data)
	return nil
}
func (i *ImmDt) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	p, err := b.PrependBytes(ImmDtLen)
	if err == nil {
		binary.BigEndian.PutUint32(p, i.Data)
	}
	return err
}

// IETH is the Invalidate Extended Transport Header (SEND with Invalidate).
type IETH struct {
	extBase
	RKey uint32
}

func (i *IETH) LayerType() gopacket.LayerType     { return LayerTypeIETH }
func (i *IETH) CanDecode() gopacket.LayerClass    { return LayerTypeIETH }
func (i *IETH) NextLayerType() gopacket.LayerType { return i.next(HasIETH) }
func (i *IETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := i.split(data, IETHLen, df); err != nil {
		return err
	}
	i.RKey = binary.BigEndian.Uint32(data)
	return nil
}
func (i *IETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	p, err := b.PrependBytes(IETHLen)
	if err == nil {
		binary.BigEndian.PutUint32(p, i.RKey)
	}
	return err
}

// AtomicETH is the Atomic Extended Transport Header.
type AtomicETH struct {
	extBase
	VA         uint64
	RKey       uint32
	SwapOrAdd  uint64
	CompareDat uint64
}

func (a *AtomicETH) LayerType() gopacket.LayerType     { return LayerTypeAtomicETH }
func (a *AtomicETH) CanDecode() gopacket.LayerClass    { return LayerTypeAtomicETH }
func (a *AtomicETH) NextLayerType() gopacket.LayerType { return a.next(HasAtomicETH) }
func (a *AtomicETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := a.split(data, AtomicETHLen, df); err != nil {
		return err
	}
	a.VA = binary.BigEndian.Uint64(data[0:8])
	a.RKey = binary.BigEndian.Uint32(data[8:12])
	a.SwapOrAdd = binary.BigEndian.Uint64(data[12:20])
	a.CompareDat = binary.BigEndian.Uint64(data[20:28])
	return nil
}
func (a *AtomicETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	p, err := b.PrependBytes(AtomicETHLen)
	if err == nil {
		binary.BigEndian.PutUint64(p[0:8], a.VA)
		binary.BigEndian.PutUint32(p[8:12], a.RKey)
		binary.BigEndian.PutUint64(p[12:20], a.SwapOrAdd)
		binary.BigEndian.PutUint64(p[20:28], a.CompareDat)
	}
	return err
}

// AtomicAckETH is the Atomic Acknowledge Extended Transport Header.
type AtomicAckETH struct {
	extBase
	OrigRemData uint64
}

func (a *AtomicAckETH) LayerType() gopacket.LayerType     { return LayerTypeAtomicAckETH }
func (a *AtomicAckETH) CanDecode() gopacket.LayerClass    { return LayerTypeAtomicAckETH }
func (a *AtomicAckETH) NextLayerType() gopacket.LayerType { return a.next(HasAtomicAckETH) }
func (a *AtomicAckETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := a.split(data, AtomicAckETHLen, df); err != nil {
		return err
	}
	a.OrigRemData = binary.BigEndian.Uint64(data)
	return nil
}
func (a *AtomicAckETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	p, err := b.PrependBytes(AtomicAckETHLen)
	if err == nil {
		binary.BigEndian.PutUint64(p, a.OrigRemData)
	}
	return err
}

// decodeBTH is the gopacket.Decoder used by gopacket.NewPacket: it adds the
// BTH, then every extended header the opcode calls for, then the payload.
func decodeBTH(data []byte, p gopacket.PacketBuilder) error {
	b := &BTH{}
	if err := b.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(b)
	rest := b.Payload
	for typ := b.NextLayerType(); typ != gopacket.LayerTypePayload; {
		l := newExt(typ)
		l.setBTH(b)
		if err := l.DecodeFromBytes(rest, p); err != nil {
			return err
		}
		p.AddLayer(l)
		rest = l.LayerPayload()
		typ = l.NextLayerType()
	}
	if len(rest) == 0 {
		return nil
	}
	return p.NextDecoder(gopacket.LayerTypePayload)
}

func newExt(t gopacket.LayerType) extLayer {
	switch t {
	case LayerTypeDETH:
		return &DETH{}
	case LayerTypeRETH:
		return &RETH{}
	case LayerTypeAETH:
		return &AETH{}
	case LayerTypeImmDt:
		return &ImmDt{}
	case LayerTypeIETH:
		return &IETH{}
	case LayerTypeAtomicETH:
		return &AtomicETH{}
	case LayerTypeAtomicAckETH:
		return &AtomicAckETH{}
	}
	panic("rocev2: not an extended header: " + t.String())
}

// decodeStandalone decodes one extended header on its own; without the BTH
// it cannot know what follows, so the rest is payload.
func decodeStandalone(mk func() extLayer) func([]byte, gopacket.PacketBuilder) error {
	return func(data []byte, p gopacket.PacketBuilder) error {
		l := mk()
		if err := l.DecodeFromBytes(data, p); err != nil {
			return err
		}
		p.AddLayer(l)
		return p.NextDecoder(gopacket.LayerTypePayload)
	}
}

// TransportLayers is a set of linked decoding layers for one packet: the
// extended headers know the opcode of the BTH decoded before them. Use
// DecodingLayers to add them to a gopacket.DecodingLayerParser.
type TransportLayers struct {
	BTH          BTH
	DETH         DETH
	RETH         RETH
	AETH         AETH
	ImmDt        ImmDt
	IETH         IETH
	AtomicETH    AtomicETH
	AtomicAckETH AtomicAckETH
}

// NewTransportLayers returns linked transport layers.
func NewTransportLayers() *TransportLayers {
	t := &TransportLayers{}
	for _, l := range []extLayer{&t.DETH, &t.RETH, &t.AETH, &t.ImmDt, &t.IETH, &t.AtomicETH, &t.AtomicAckETH} {
		l.setBTH(&t.BTH)
	}
	return t
}

// DecodingLayers returns the layers for a gopacket.DecodingLayerParser.
func (t *TransportLayers) DecodingLayers() []gopacket.DecodingLayer {
	return []gopacket.DecodingLayer{&t.BTH, &t.DETH, &t.RETH, &t.AETH, &t.ImmDt, &t.IETH, &t.AtomicETH, &t.AtomicAckETH}
}
