package rocev2

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/npfnic/npfnic/internal/fuzzseed"
)

// go's fuzz workers die silently; keep what the runtime says (ci/fuzz.sh).
func init() { fuzzseed.KeepCrashOutput() }

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bitwiseICRC is an independent ICRC: it materializes the whole masked
// pseudo-packet (8 bytes of 0xff for the LRH, then the IPv4 packet with
// TOS, TTL, header checksum, UDP checksum and BTH byte 4 set to ones) and
// runs a bit-at-a-time reflected CRC-32 (polynomial 0xEDB88320, initial
// value and final XOR 0xFFFFFFFF) over it; the CRC goes on the wire least
// significant byte first.
func bitwiseICRC(ipPkt []byte) uint32 {
	buf := append(bytes.Repeat([]byte{0xff}, 8), ipPkt...)
	ip := buf[8:]
	ihl := int(ip[0]&0xf) * 4
	ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff
	ip[ihl+6], ip[ihl+7] = 0xff, 0xff
	ip[ihl+8+4] = 0xff
	crc := uint32(0xffffffff)
	for _, b := range buf {
		crc ^= uint32(b)
		for i := 0; i < 8; i++ {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0xedb88320
			} else {
				crc >>= 1
			}
		}
	}
	crc = ^crc
	return uint32(byte(crc))<<24 | uint32(byte(crc>>8))<<16 | uint32(byte(crc>>16))<<8 | uint32(byte(crc>>24))
}

// ICRC test vectors.
//
//   - cnpConnectX4: a RoCEv2 CNP (opcode 0x81) captured from a Mellanox
//     ConnectX-4 Lx, published with scapy's RoCE layer tests
//     (test/contrib/roce.uts); its ICRC 82 fd 00 2a was computed by the
//     NIC. Its ECN bits (TOS 0xc2), TTL and BECN bit are all set to values
//     the masks must hide.
//   - ucSendOnly: the UC SEND Only packet of the same test file (TOS 0x01,
//     MigReq, pad count 2), whose ICRC 0x78f353f3 scapy computes.
var icrcVectors = []struct {
	name  string
	frame string
	icrc  uint32
}{
	{"cnpConnectX4", `e41d2dab2bc2 7cfe90643b32 0800
		45c2003c718c400040119161 0a001101 0a001201
		000012b700280000
		8100ffff40000118 00000000
		00000000000000000000000000000000
		82fd002a`, 0x82fd002a},
	{"ucSendOnly", `248a07a8fa22 248a07a8fa22 0800
		45010040047840004011b4d5 c0a80007 c0a80007
		c00012b7002caca2
		2460ffff000000d3 00cf1710
		4630818be28935d90e9a955054 01be885e50 0000
		78f353f3`, 0x78f353f3},
}

func TestICRCVectors(t *testing.T) {
	for _, v := range icrcVectors {
		t.Run(v.name, func(t *testing.T) {
			f := mustHex(t, v.frame)
			got, err := FrameICRC(f)
			if err != nil {
				t.Fatal(err)
			}
			if got != v.icrc {
				t.Fatalf("ICRC %#08x, want %#08x", got, v.icrc)
			}
			if b := bitwiseICRC(f[14 : len(f)-4]); b != v.icrc {
				t.Fatalf("independent ICRC %#08x, want %#08x", b, v.icrc)
			}
			if trailer := binary.BigEndian.Uint32(f[len(f)-4:]); trailer != v.icrc {
				t.Fatalf("vector trailer %#08x", trailer)
			}
			// The variant fields are masked: changing them keeps the ICRC;
			// changing an invariant byte does not.
			g := append([]byte(nil), f...)
			g[14+1] ^= 0x3f // DSCP/ECN
			g[14+8]--       // TTL
			g[14+20+6] = 0x12
			g[14+20+8+4] ^= 0xc0 // FECN/BECN
			if c, _ := FrameICRC(g); c != v.icrc {
				t.Fatalf("masked fields changed the ICRC")
			}
			g[len(g)-5] ^= 1
			if c, _ := FrameICRC(g); c == v.icrc {
				t.Fatalf("payload change kept the ICRC")
			}
		})
	}
}

func TestRNRTimerTable(t *testing.T) {
	for _, c := range []struct {
		code uint8
		d    time.Duration
	}{{0, 655360 * time.Microsecond}, {1, 10 * time.Microsecond}, {5, 60 * time.Microsecond},
		{12, 640 * time.Microsecond}, {18, 5120 * time.Microsecond}, {31, 491520 * time.Microsecond}} {
		if got := RNRTimer(c.code); got != c.d {
			t.Errorf("RNRTimer(%d) = %v, want %v", c.code, got, c.d)
		}
	}
	for c := uint8(2); c < 32; c++ {
		if RNRTimer(c) <= RNRTimer(c-1) {
			t.Errorf("table not increasing at %d", c)
		}
	}
	if RNRTimerCode(50*time.Microsecond) != 5 || RNRTimerCode(time.Nanosecond) != 1 || RNRTimerCode(time.Hour) != 0 {
		t.Error("RNRTimerCode")
	}
	if LocalAckTimeout(0) != 0 || LocalAckTimeout(14) != 67108864*time.Nanosecond {
		t.Error("LocalAckTimeout")
	}
	s := RNRNAKSyndrome(14)
	if !s.IsRNRNAK() || s.Value() != 14 || s.IsACK() || s.IsNAK() || uint8(s) != 0x2e {
		t.Errorf("RNR NAK syndrome %#x", uint8(s))
	}
	if n := NAKSyndrome(NAKRemoteAccess); !n.IsNAK() || uint8(n) != 0x62 {
		t.Errorf("NAK syndrome %#x", uint8(n))
	}
}

var testPath = Path{
	SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
	SrcIP: [4]byte{192, 0, 2, 1}, DstIP: [4]byte{192, 0, 2, 2}, SrcPort: 0xc123,
}

// sampleFrames returns one frame per opcode of RC, UC and UD.
func sampleFrames() map[string][]byte {
	pl := []byte("hello, remote memory!") // 21 bytes: pad 3
	mk := func(op Opcode, payload []byte) *Headers {
		return &Headers{
			BTH:          BTH{Opcode: op, PKey: 0xffff, DestQP: 0x12345, PSN: 0xfffffe, AckReq: true},
			DETH:         DETH{QKey: 0x11111111, SrcQP: 0xabcdef},
			RETH:         RETH{VA: 0x7f0000001000, RKey: 0xabcd01, DMALength: uint32(len(payload))},
			AETH:         AETH{Syndrome: RNRNAKSyndrome(12), MSN: 0x42},
			ImmDt:        ImmDt{Data: 0xcafef00d},
			IETH:         IETH{RKey: 0x99},
			AtomicETH:    AtomicETH{VA: 8, RKey: 9, SwapOrAdd: 10, CompareDat: 11},
			AtomicAckETH: AtomicAckETH{OrigRemData: 12},
		}
	}
	out := map[string][]byte{}
	for op := Opcode(0); op < OpCNP; op++ {
		if !op.Known() {
			continue
		}
		p := pl
		if !op.Has(HasPayload) {
			p = nil
		}
		out[op.String()] = AppendFrame(nil, &testPath, mk(op, p), p)
	}
	return out
}

// TestLayersRoundTrip decodes every opcode's frame with gopacket.NewPacket
// (the registered decoders) and with the Decoder, and checks the fields.
func TestLayersRoundTrip(t *testing.T) {
	dec := NewDecoder()
	for name, f := range sampleFrames() {
		t.Run(name, func(t *testing.T) {
			p, err := dec.Decode(f)
			if err != nil {
				t.Fatal(err)
			}
			op := p.BTH.Opcode
			if op.String() != name || p.BTH.DestQP != 0x12345 || p.BTH.PSN != 0xfffffe || !p.BTH.AckReq || p.BTH.PKey != 0xffff {
				t.Fatalf("BTH %+v", p.BTH)
			}
			if op.Has(HasPayload) && string(p.Payload) != "hello, remote memory!" || !op.Has(HasPayload) && len(p.Payload) != 0 {
				t.Fatalf("payload %q", p.Payload)
			}
			if op.Has(HasRETH) && (p.RETH.VA != 0x7f0000001000 || p.RETH.RKey != 0xabcd01) {
				t.Fatalf("RETH %+v", p.RETH)
			}
			if op.Has(HasAETH) && (p.AETH.Syndrome != RNRNAKSyndrome(12) || p.AETH.MSN != 0x42) {
				t.Fatalf("AETH %+v", p.AETH)
			}
			if op.Has(HasDETH) != (op.Service() == ServiceUD) || op.Has(HasDETH) && (p.DETH.QKey != 0x11111111 || p.DETH.SrcQP != 0xabcdef) {
				t.Fatalf("DETH %+v", p.DETH)
			}
			if op.Has(HasImmDt) && p.ImmDt.Data != 0xcafef00d {
				t.Fatalf("ImmDt %+v", p.ImmDt)
			}
			if op.Has(HasAtomicETH) && p.AtomicETH.CompareDat != 11 || op.Has(HasAtomicAckETH) && p.AtomicAckETH.OrigRemData != 12 {
				t.Fatal("atomic headers")
			}
			pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
			if el := pkt.ErrorLayer(); el != nil {
				t.Fatalf("gopacket: %v", el.Error())
			}
			b, ok := pkt.Layer(LayerTypeBTH).(*BTH)
			if !ok || b.Opcode != op || b.PSN != 0xfffffe {
				t.Fatalf("gopacket BTH %+v", pkt.Layers())
			}
			for _, e := range extOrder {
				if op.Has(e.flag) != (pkt.Layer(*e.typ) != nil) {
					t.Fatalf("gopacket layers %v for %v", pkt.Layers(), op)
				}
			}
			if op == OpWriteOnlyImm {
				if imm := pkt.Layer(LayerTypeImmDt).(*ImmDt); imm.Data != 0xcafef00d {
					t.Fatalf("ImmDt after RETH %+v", imm)
				}
			}
			if op.Has(HasPayload) && string(pkt.ApplicationLayer().Payload()) != "hello, remote memory!" {
				t.Fatalf("gopacket payload %q", pkt.ApplicationLayer().Payload())
			}
		})
	}
}

// TestSerializeLayersMatchesBuilder: serializing the layers with gopacket
// and fixing the ICRC gives the builder's frame (UDP checksum aside).
func TestSerializeLayersMatchesBuilder(t *testing.T) {
	payload := []byte("0123456789a") // pad 1
	h := &Headers{BTH: BTH{Opcode: OpWriteOnlyImm, PKey: 0xffff, DestQP: 7, PSN: 99},
		RETH: RETH{VA: 0x1000, RKey: 5, DMALength: 11}, ImmDt: ImmDt{Data: 3}}
	want := AppendFrame(nil, &testPath, h, payload)
	eth := &layers.Ethernet{SrcMAC: testPath.SrcMAC[:], DstMAC: testPath.DstMAC[:], EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
		SrcIP: testPath.SrcIP[:], DstIP: testPath.DstIP[:]}
	udp := &layers.UDP{SrcPort: layers.UDPPort(testPath.SrcPort), DstPort: UDPPort}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, &h.BTH, &h.RETH, &h.ImmDt, gopacket.Payload(payload))
	if err != nil {
		t.Fatal(err)
	}
	got := buf.Bytes()
	if err := FixICRC(got); err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint16(got[14+20+6:], 0) // the builder leaves the UDP checksum 0
	if !bytes.Equal(got, want) {
		t.Fatalf("serialized\n%x\nbuilder\n%x", got, want)
	}
}

// TestDecoderRejects: damaged frames are errors, never panics.
func TestDecoderRejects(t *testing.T) {
	good := sampleFrames()["RC RDMA WRITE Only with Immediate"]
	dec := NewDecoder()
	if _, err := dec.Decode(good); err != nil {
		t.Fatal(err)
	}
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := map[string]struct {
		frame []byte
		want  error
	}{
		"empty":          {nil, ErrMalformed},
		"ethernet only":  {good[:14], ErrMalformed},
		"truncated RETH": {mut(func(b []byte) []byte { b = b[:14+20+8+12+10]; fixLen(b); return b }), ErrMalformed},
		"bad ICRC":       {mut(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrBadICRC},
		"payload bit":    {mut(func(b []byte) []byte { b[len(b)-6] ^= 0x80; return b }), ErrBadICRC},
		"IP length long": {mut(func(b []byte) []byte { binary.BigEndian.PutUint16(b[16:], 2000); fixIPSum(b); return b }), ErrMalformed},
		"IP checksum":    {mut(func(b []byte) []byte { b[24] ^= 0xff; return b }), ErrMalformed},
		"fragment":       {mut(func(b []byte) []byte { b[20] |= 0x20; fixIPSum(b); return b }), ErrMalformed},
		"wrong port":     {mut(func(b []byte) []byte { b[14+20+3] = 0x99; return b }), ErrMalformed},
		"tver":           {mut(func(b []byte) []byte { b[14+20+8+1] |= 1; FixICRC(b); return b }), ErrMalformed},
		"unknown opcode": {mut(func(b []byte) []byte { b[14+20+8] = 0x1f; FixICRC(b); return b }), ErrMalformed},
		"pad too big": {mut(func(b []byte) []byte {
			b = b[:14+20+8+12+16+4+4]
			fixLen(b)
			b[14+20+8+1] |= 0x30
			FixICRC(b)
			return b
		}), nil},
	}
	for name, c := range cases {
		_, err := dec.Decode(c.frame)
		if err == nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", name, err, c.want)
		}
	}
}

func fixIPSum(b []byte) {
	b[24], b[25] = 0, 0
	binary.BigEndian.PutUint16(b[24:], ipChecksum(b[14:34]))
}

func fixLen(b []byte) {
	binary.BigEndian.PutUint16(b[16:], uint16(len(b)-14))
	binary.BigEndian.PutUint16(b[14+20+4:], uint16(len(b)-14-20))
	fixIPSum(b)
}

// FuzzDecodeFrame: the decoder never panics, and a frame it accepts
// re-encodes to the same bytes (it is a faithful parse).
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range sampleFrames() {
		f.Add(fr)
	}
	for _, v := range icrcVectors {
		f.Add(mustHex(f, v.frame))
	}
	f.Add([]byte{})
	dec, redec := NewDecoder(), NewDecoder()
	f.Fuzz(func(t *testing.T, frame []byte) {
		p, err := dec.Decode(frame)
		_ = gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
		if err != nil || p.HasDot1Q || p.BTH.Opcode.Has(CNP) {
			return
		}
		var path Path
		copy(path.SrcMAC[:], p.Ethernet.SrcMAC)
		copy(path.DstMAC[:], p.Ethernet.DstMAC)
		path.SrcIP, path.DstIP = p.SrcIP4(), p.DstIP4()
		path.SrcPort, path.TTL, path.TrafficClass = uint16(p.UDP.SrcPort), p.IPv4.TTL, p.IPv4.TOS
		h := p.Headers
		h.BTH.FECN, h.BTH.BECN = false, false
		re := AppendFrame(nil, &path, &h, p.Payload)
		q, err := redec.Decode(re)
		if err != nil {
			t.Fatalf("re-encoded frame rejected: %v", err)
		}
		if q.BTH.PSN != p.BTH.PSN || q.BTH.Opcode != p.BTH.Opcode || !bytes.Equal(q.Payload, p.Payload) || q.AETH.Syndrome != p.AETH.Syndrome || q.AETH.MSN != p.AETH.MSN || q.RETH.VA != p.RETH.VA || q.DETH.QKey != p.DETH.QKey || q.DETH.SrcQP != p.DETH.SrcQP {
			t.Fatalf("re-encoding changed the packet: %+v %+v / %+v %+v / %q %q", p.BTH, p.AETH, q.BTH, q.AETH, p.Payload, q.Payload)
		}
	})
}

// TestServices: the opcode table's UC and UD entries are RC's operations
// on their transport, and the scapy UC vector decodes as UC SEND Only.
func TestServices(t *testing.T) {
	cases := []struct {
		op      Opcode
		service Service
		name    string
	}{
		{OpSendOnly, ServiceRC, "RC SEND Only"},
		{OpSendFirst.On(ServiceUC), ServiceUC, "UC SEND First"},
		{OpWriteOnlyImm.On(ServiceUC), ServiceUC, "UC RDMA WRITE Only with Immediate"},
		{OpSendOnly.On(ServiceUD), ServiceUD, "UD SEND Only"},
		{OpSendOnlyImm.On(ServiceUD), ServiceUD, "UD SEND Only with Immediate"},
	}
	for _, c := range cases {
		if c.op.Service() != c.service || c.op.String() != c.name || !c.op.Known() {
			t.Errorf("%#02x: %v %q", uint8(c.op), c.op.Service(), c.op)
		}
	}
	for _, op := range []Opcode{OpReadRequest.On(ServiceUC), OpCompareSwap.On(ServiceUC), OpAck.On(ServiceUC), OpSendFirst.On(ServiceUD), OpWriteOnly.On(ServiceUD)} {
		if op.Known() {
			t.Errorf("%v is not an operation of its service", op)
		}
	}
	if OpUDSendOnlyImm.HeaderLen() != DETHLen+ImmDtLen {
		t.Errorf("UD SEND with immediate headers: %d bytes", OpUDSendOnlyImm.HeaderLen())
	}
	p, err := NewDecoder().Decode(mustHex(t, icrcVectors[1].frame))
	if err != nil || p.BTH.Opcode != OpSendOnly.On(ServiceUC) {
		t.Fatalf("scapy's UC SEND Only: %v %v", err, p)
	}
}

// TestBuilderICRCMasksInPlace: the builder takes the ICRC with the
// variant fields masked in the frame itself, then writes their values:
// whatever they are, the ICRC is the independent one's, the fields are
// the path's and the BTH's, and the frame decodes (IPv4 checksum
// included).
func TestBuilderICRCMasksInPlace(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tos, ttl   uint8
		fecn, becn bool
		n          int
	}{
		{"zeroes", 0, 0, false, false, 4096},
		{"ECN and TTL", 0xc2, 7, true, true, 4096},
		{"DSCP, BECN, odd length", 0x68, 255, false, true, 1023},
		{"ACK-sized", 0x03, 1, true, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := testPath
			path.TrafficClass, path.TTL = tc.tos, tc.ttl
			h := &Headers{BTH: BTH{Opcode: OpWriteFirst, PKey: 0xffff, DestQP: 7, PSN: 99, FECN: tc.fecn, BECN: tc.becn},
				RETH: RETH{VA: 0x1000, RKey: 5, DMALength: 1 << 20}}
			payload := make([]byte, tc.n)
			for i := range payload {
				payload[i] = byte(i * 7)
			}
			f := AppendFrame(nil, &path, h, payload)
			if c, want := binary.BigEndian.Uint32(f[len(f)-ICRCLen:]), bitwiseICRC(f[14:len(f)-ICRCLen]); c != want {
				t.Fatalf("ICRC %#08x, independent %#08x", c, want)
			}
			p, err := NewDecoder().Decode(f)
			if err != nil {
				t.Fatal(err)
			}
			wantTTL := cmp.Or(tc.ttl, 64)
			if p.IPv4.TOS != tc.tos || p.IPv4.TTL != wantTTL || p.UDP.Checksum != 0 || p.BTH.FECN != tc.fecn || p.BTH.BECN != tc.becn {
				t.Fatalf("TOS %#x TTL %d UDP checksum %#x FECN %v BECN %v", p.IPv4.TOS, p.IPv4.TTL, p.UDP.Checksum, p.BTH.FECN, p.BTH.BECN)
			}
			if !bytes.Equal(p.Payload, payload) {
				t.Fatal("payload")
			}
		})
	}
}

// FuzzDecodeFast: the decoder's fast path (decodeFast) and the
// DecodingLayerParser it stands in for decode every frame alike: the same
// error, or the same Packet.
func FuzzDecodeFast(f *testing.F) {
	for _, fr := range sampleFrames() {
		f.Add(fr)
	}
	for _, v := range icrcVectors {
		f.Add(mustHex(f, v.frame))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		fast, slow := NewDecoder(), NewDecoder()
		slow.slowOnly = true
		p, err := fast.Decode(frame)
		q, qerr := slow.Decode(frame)
		if (err == nil) != (qerr == nil) || err != nil && err.Error() != qerr.Error() {
			t.Fatalf("fast path: %v, parser: %v", err, qerr)
		}
		if err == nil && !reflect.DeepEqual(p, q) {
			t.Fatalf("fast path\n%+v\nparser\n%+v", p, q)
		}
	})
}

// TestDecodeFastTaken: the frames the builder makes take the fast path.
func TestDecodeFastTaken(t *testing.T) {
	for _, fr := range sampleFrames() {
		if len(fr) > 12 && binary.BigEndian.Uint16(fr[12:]) != 0x0800 {
			continue
		}
		if d := NewDecoder(); !d.decodeFast(fr) {
			t.Errorf("frame %x took the parser", fr)
		}
	}
}
