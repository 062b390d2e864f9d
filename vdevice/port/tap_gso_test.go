package port

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/internal/testutil"
)

// tapGSOFrame is one frame read with RecvGSO and its TCP or UDP view.
type tapGSOFrame struct {
	f   []byte
	gso GSOInfo
	ip  *layers.IPv4
	tcp *layers.TCP
	udp *layers.UDP
}

// recvIPv4 reads frames from tap until an IPv4 TCP or UDP one (the kernel
// also sends neighbour discovery and the like).
func recvIPv4(t *testing.T, tap *TAP) tapGSOFrame {
	t.Helper()
	buf := make([]byte, MaxFrameLen)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		type res struct {
			n   int
			gso GSOInfo
			err error
		}
		ch := make(chan res, 1)
		go func() {
			n, gso, err := tap.RecvGSO(buf)
			ch <- res{n, gso, err}
		}()
		var r res
		select {
		case r = <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("RecvGSO timed out")
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		f := append([]byte(nil), buf[:r.n]...)
		pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.NoCopy)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip == nil {
			continue
		}
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if tcp != nil || udp != nil {
			return tapGSOFrame{f, r.gso, ip, tcp, udp}
		}
	}
	t.Fatal("no TCP or UDP frame from the host")
	return tapGSOFrame{}
}

// completeCsum applies a NEEDS_CSUM request the plain way (RFC 1071 over
// csum_start to the end, stored at csum_offset) and reports whether the
// transport checksum then verifies over the pseudo-header.
func completeCsum(f tapGSOFrame) bool {
	b := append([]byte(nil), f.f...)
	sum := func(acc uint32, p []byte) uint32 {
		for i := 0; i+1 < len(p); i += 2 {
			acc += uint32(binary.BigEndian.Uint16(p[i:]))
		}
		if len(p)%2 == 1 {
			acc += uint32(p[len(p)-1]) << 8
		}
		return acc
	}
	fold := func(acc uint32) uint16 {
		for acc>>16 != 0 {
			acc = acc&0xffff + acc>>16
		}
		return uint16(acc)
	}
	if f.gso.NeedsCsum {
		binary.BigEndian.PutUint16(b[f.gso.CsumStart+f.gso.CsumOffset:], ^fold(sum(0, b[f.gso.CsumStart:])))
	}
	l4 := b[14+int(f.ip.IHL)*4 : 14+int(f.ip.Length)]
	ph := sum(0, f.ip.SrcIP.To4()) + sum(0, f.ip.DstIP.To4()) + uint32(f.ip.Protocol) + uint32(len(l4))
	return fold(sum(ph, l4)) == 0xffff
}

// TestTAPRecvGSO: with receive offloads enabled, the host kernel hands the
// TAP partially checksummed frames and TCP super-packets, and RecvGSO
// reports them as such; before, it sends only finished frames. The host
// side is real: a UDP socket and a TCP connection in a namespace of the
// test's own, the TCP peer played by the test through the TAP.
func TestTAPRecvGSO(t *testing.T) {
	ns, inNS := testutil.NetNS(t, "npfrxgso")
	var tap *TAP
	var err error
	inNS(func() { tap, err = OpenTAP("rxgso") })
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	peerMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 0xbb}
	hostIP, peerIP := net.IPv4(10, 99, 0, 1).To4(), net.IPv4(10, 99, 0, 2).To4()
	testutil.IP(t, ns, "addr", "add", "10.99.0.1/24", "dev", "rxgso")
	testutil.IP(t, ns, "link", "set", "rxgso", "up")
	testutil.IP(t, ns, "neigh", "add", "10.99.0.2", "lladdr", peerMAC.String(), "dev", "rxgso", "nud", "permanent")

	sendUDP := func() {
		inNS(func() {
			var s int
			if s, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
				return
			}
			defer unix.Close(s)
			err = unix.Sendto(s, make([]byte, 300), 0, &unix.SockaddrInet4{Port: 9, Addr: [4]byte(peerIP)})
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	sendUDP()
	f := recvIPv4(t, tap)
	if f.udp == nil || !f.gso.Finished() || !completeCsum(f) {
		t.Fatalf("without offloads: UDP %v, %+v, checksum ok %v; want a finished frame", f.udp != nil, f.gso, completeCsum(f))
	}

	if err := tap.EnableRecvGSO(); err != nil {
		t.Fatal(err)
	}
	sendUDP()
	f = recvIPv4(t, tap)
	if f.udp == nil || !f.gso.NeedsCsum || f.gso.Type != GSONone || f.gso.CsumStart != 34 || f.gso.CsumOffset != 6 || !completeCsum(f) {
		t.Fatalf("UDP with offloads: %+v, checksum ok once completed %v; want NEEDS_CSUM at 34+6", f.gso, completeCsum(f))
	}

	// TCP: the host connects to the peer; the test answers the SYN, and
	// the host's first flight (initial window 10) goes out as one
	// super-packet.
	var conn int
	inNS(func() {
		if conn, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0); err != nil {
			return
		}
		err = unix.Connect(conn, &unix.SockaddrInet4{Port: 80, Addr: [4]byte(peerIP)})
		if err == unix.EINPROGRESS {
			err = nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(conn)
	syn := recvIPv4(t, tap)
	if syn.tcp == nil || !syn.tcp.SYN {
		t.Fatalf("want the SYN, got %+v", syn.tcp)
	}
	if !syn.gso.NeedsCsum || syn.gso.CsumOffset != 16 || !completeCsum(syn) {
		t.Fatalf("SYN with offloads: %+v; want NEEDS_CSUM at the TCP checksum", syn.gso)
	}
	eth := &layers.Ethernet{SrcMAC: peerMAC, DstMAC: net.HardwareAddr(syn.f[6:12]), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: peerIP, DstIP: hostIP}
	synAck := &layers.TCP{SrcPort: 80, DstPort: syn.tcp.SrcPort, Seq: 5000, Ack: syn.tcp.Seq + 1, SYN: true, ACK: true,
		Window: 65535, Options: []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0xb4}}}}
	synAck.SetNetworkLayerForChecksum(ip)
	sb := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, synAck); err != nil {
		t.Fatal(err)
	}
	if err := tap.Send(sb.Bytes()); err != nil {
		t.Fatal(err)
	}
	// The host's ACK of the SYN-ACK, then its data.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := unix.Write(conn, make([]byte, 60000)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection never established")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		f = recvIPv4(t, tap)
		if f.tcp != nil && len(f.tcp.Payload) > 0 {
			break
		}
	}
	if f.gso.Type&^GSOECN != GSOTCPv4 || f.gso.GSOSize != 1460 || len(f.f) <= 1514 || !f.gso.NeedsCsum ||
		f.gso.CsumStart != 34 || f.gso.CsumOffset != 16 || f.gso.HdrLen < 54 {
		t.Fatalf("first data: %d bytes, %+v; want a TCPv4 super-packet of 1460-byte segments", len(f.f), f.gso)
	}
}
