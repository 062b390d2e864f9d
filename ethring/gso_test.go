package ethring

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testutil"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/pkthdr"
	"github.com/npfnic/npfnic/vdevice/port"
)

// gsoPort is a wire that takes GSO sends and keeps everything sent.
type gsoPort struct {
	mu     sync.Mutex
	frames [][]byte
	infos  []*port.GSOInfo // nil for a plain Send
	closed chan struct{}
	once   sync.Once
}

func newGSOPort() *gsoPort { return &gsoPort{closed: make(chan struct{})} }

func (p *gsoPort) Send(f []byte) error { return p.SendGSO(f, port.GSOInfo{}) }
func (p *gsoPort) CanGSO() bool        { return true }
func (p *gsoPort) SendGSO(f []byte, gso port.GSOInfo) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frames = append(p.frames, append([]byte(nil), f...))
	var info *port.GSOInfo
	if gso != (port.GSOInfo{}) {
		info = &gso
	}
	p.infos = append(p.infos, info)
	return nil
}
func (p *gsoPort) Recv([]byte) (int, error) { <-p.closed; return 0, port.ErrClosed }
func (p *gsoPort) Close() error             { p.once.Do(func() { close(p.closed) }); return nil }

func (p *gsoPort) sent() ([][]byte, []*port.GSOInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.frames...), append([]*port.GSOInfo(nil), p.infos...)
}

// guestSuperPacket is superPacket as a Linux guest driver hands it over
// for TSO (e1000e's e1000_tso): IPv4 total length and header checksum
// zero, the TCP checksum field seeded with the pseudo-header sum without
// the length.
func guestSuperPacket(t testing.TB, p pkt) []byte {
	f := superPacket(t, p)
	l4 := p.l4Off()
	var ph []byte
	if p.v6 {
		ph = append(append(ph, src6.To16()...), dst6.To16()...)
		ph = append(ph, 0, 0, 0, 0, 0, 0, 0, 6)
	} else {
		binary.BigEndian.PutUint16(f[l4-20+2:], 0)
		binary.BigEndian.PutUint16(f[l4-20+10:], 0)
		ph = append(append(ph, src4...), dst4...)
		ph = append(ph, 0, 6, 0, 0)
	}
	binary.BigEndian.PutUint16(f[l4+16:], onesSum(ph))
	return f
}

// gsoCases are the super-packets the GSO tests send (every one fits a
// 1500-byte MTU once segmented, for the TAP test's forwarding).
var gsoCases = []struct {
	name  string
	p     pkt
	mss   int
	nsegs int
}{
	{"IPv4, 10000 bytes at 1448", pkt{payload: pattern(10000, 1), seq: 1000, id: 77, psh: true}, 1448, 3},
	{"IPv4, FIN PSH CWR ECE, timestamps", pkt{payload: pattern(5000, 2), seq: 5, id: 1, fin: true, psh: true, cwr: true, ece: true, tsOpt: true}, 1448, 1},
	{"IPv4, less than one mss", pkt{payload: pattern(100, 4), fin: true}, 1448, 1},
	{"IPv4, sequence and ID wrap", pkt{payload: pattern(8000, 5), seq: 0xffffff00, id: 0xfffe}, 1460, 4},
	{"IPv4, 64 KiB in 18 descriptors", pkt{payload: pattern(65535-20-32, 6), psh: true, tsOpt: true}, 1448, hw.TxMaxSegs},
	{"IPv6, 5000 bytes at 1440", pkt{v6: true, payload: pattern(5000, 7), seq: 42, psh: true, fin: true}, 1440, 2},
	{"IPv6, 60000 bytes, timestamps", pkt{v6: true, payload: pattern(60000, 8), seq: 9, psh: true, tsOpt: true}, 1428, hw.TxMaxSegs},
}

func postSuperPacket(g *guest, p pkt, mss, nsegs int, sp []byte) {
	flag := uint16(hw.TxdTSO4)
	if p.v6 {
		flag = hw.TxdTSO6
	}
	g.postTXOff(0, txOff{flags: flag | hw.TxdCsum, mss: uint16(mss), start: uint8(p.l4Off()), offset: 16},
		split(sp, nsegs)...)
}

// TestTSOGSO: with a wire that takes GSO sends, a TSO super-packet goes
// whole, its IP length and IPv4 header checksum set and its TCP checksum
// field seeded with the pseudo-header sum over the whole TCP length, with
// the GSO request the wire needs; the pcap recorder in between records
// the super-packet and passes the request on.
func TestTSOGSO(t *testing.T) {
	for _, tc := range gsoCases {
		t.Run(tc.name, func(t *testing.T) {
			gp := newGSOPort()
			var capture bytes.Buffer
			rec, err := port.NewPcap(gp, &capture)
			if err != nil {
				t.Fatal(err)
			}
			g := newGuest(t, guestOpts{pairs: 1, wire: rec})
			g.setupPair(0, 32, 32)
			p := tc.p
			postSuperPacket(g, p, tc.mss, tc.nsegs, guestSuperPacket(t, p))
			g.waitFor("tx_tso_frames", func() bool { return g.qstatus(0).TxTSOFrames == 1 })
			frames, infos := gp.sent()
			if len(frames) != 1 || infos[0] == nil {
				t.Fatalf("%d frames sent, infos %v", len(frames), infos)
			}
			// What the kernel is handed: the packet with correct lengths
			// and IP checksum (gopacket's), and the seed over the whole
			// TCP length in the checksum field.
			want := p.partial(p.build(t))
			mustEqual(t, "super-packet", frames[0], want)
			typ := port.GSOTCPv4
			if p.v6 {
				typ = port.GSOTCPv6
			}
			if p.cwr {
				typ |= port.GSOECN
			}
			hlen := p.l4Off() + 20
			if p.tsOpt {
				hlen += 12
			}
			wantInfo := port.GSOInfo{Type: typ, HdrLen: hlen, GSOSize: tc.mss, CsumStart: p.l4Off(), CsumOffset: 16, NeedsCsum: true}
			if *infos[0] != wantInfo {
				t.Fatalf("GSO info %+v, want %+v", *infos[0], wantInfo)
			}
			nseg := max(1, (len(p.payload)+tc.mss-1)/tc.mss)
			s := g.d.Stats().Pairs[0]
			if s.TxTSOFrames != 1 || s.TxTSOSegments != uint64(nseg) || s.TxFrames != 1 || s.TxBytes != uint64(len(want)) {
				t.Fatalf("stats %+v, want %d segments", s, nseg)
			}
			if st := g.qstatus(0); st.Error != 0 || st.TxDropsBadLen != 0 {
				t.Fatalf("status %v", st)
			}
			// Ordinary frames still go with Send.
			f := frame(100, 3)
			g.postTX(0, f)
			g.waitFor("plain frame", func() bool { fs, _ := gp.sent(); return len(fs) == 2 })
			frames, infos = gp.sent()
			mustEqual(t, "plain frame", frames[1], f)
			if infos[1] != nil {
				t.Fatalf("plain frame sent with %+v", *infos[1])
			}
			g.d.Close()
			g.mux.Close() // flushes the recorder
			if !bytes.Contains(capture.Bytes(), want) || !bytes.Contains(capture.Bytes(), f) {
				t.Fatal("pcap misses the super-packet or the plain frame")
			}
		})
	}
}

// TestTSOGSORejected: the rejection rules hold with a GSO wire too.
func TestTSOGSORejected(t *testing.T) {
	v4 := pkt{payload: pattern(3000, 1)}
	gp := newGSOPort()
	g := newGuest(t, guestOpts{pairs: 1, wire: gp})
	g.setupPair(0, 32, 32)
	g.postTXOff(0, txOff{flags: hw.TxdTSO4, mss: 0, start: 34}, superPacket(t, v4))
	g.postTXOff(0, txOff{flags: hw.TxdTSO6, mss: 1448, start: 34}, superPacket(t, v4))
	g.postTXOff(0, txOff{flags: hw.TxdTSO4, mss: 1448, start: 36}, superPacket(t, v4))
	g.waitFor("tx_head", func() bool { return g.qstatus(0).TxHead == 3 })
	if st := g.qstatus(0); st.TxDropsBadLen != 3 || st.TxTSOFrames != 0 {
		t.Fatalf("status %v", st)
	}
	if fs, _ := gp.sent(); len(fs) != 0 {
		t.Fatalf("%d frames sent", len(fs))
	}
}

// TestTSOGSOPcapOverPlainPort: a recorder over a port without GSO does not
// offer it, so the device segments itself.
func TestTSOGSOPcapOverPlainPort(t *testing.T) {
	a, b := port.Pipe(4)
	defer b.Close()
	rec, err := port.NewPcap(a, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if _, ok := port.AsGSO(rec); ok {
		t.Fatal("pcap over a pipe offers GSO")
	}
	if err := rec.SendGSO(frame(100, 1), port.GSOInfo{}); err != port.ErrNoGSO {
		t.Fatalf("SendGSO: %v", err)
	}
}

// TestTSOGSOTAP sends super-packets from the device into a real TAP (the
// host kernel segments them) in a namespace of the test's own, which
// forwards them to a second TAP without offloads, where the kernel cuts
// and checksums them in software. The segments read there must be those
// the device's own segmentation makes (tsoExpect), with the TTL or hop
// limit one lower: correct lengths, IP and TCP checksums, sequence
// numbers and flags.
func TestTSOGSOTAP(t *testing.T) {
	ns, inNS := testutil.NetNS(t, "npfgso")
	var devTAP, sink *port.TAP
	var err error
	inNS(func() {
		if devTAP, err = port.OpenTAP("gsodev"); err != nil {
			return
		}
		sink, err = port.OpenTAP("gsosink")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	testutil.IP(t, ns, "link", "set", "gsodev", "address", dstMAC.String(), "up")
	testutil.IP(t, ns, "link", "set", "gsosink", "up")
	testutil.IP(t, ns, "addr", "add", "192.168.77.1/24", "dev", "gsodev")
	testutil.IP(t, ns, "addr", "add", "192.168.78.1/24", "dev", "gsosink")
	testutil.IP(t, ns, "route", "add", src4.String()+"/32", "dev", "gsodev")
	testutil.IP(t, ns, "route", "add", dst4.String()+"/32", "dev", "gsosink")
	testutil.IP(t, ns, "neigh", "add", dst4.String(), "lladdr", "02:00:00:00:00:bb", "dev", "gsosink", "nud", "permanent")
	testutil.IP(t, ns, "-6", "route", "add", src6.String()+"/128", "dev", "gsodev")
	testutil.IP(t, ns, "-6", "route", "add", dst6.String()+"/128", "dev", "gsosink")
	testutil.IP(t, ns, "-6", "neigh", "add", dst6.String(), "lladdr", "02:00:00:00:00:bb", "dev", "gsosink", "nud", "permanent")
	for _, kv := range [][2]string{{"ipv4/ip_forward", "1"}, {"ipv6/conf/all/forwarding", "1"}} {
		if out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c",
			"echo "+kv[1]+" > /proc/sys/net/"+kv[0]).CombinedOutput(); err != nil {
			t.Fatalf("sysctl %s: %v: %s", kv[0], err, out)
		}
	}

	// The sink: TCP frames to dst4/dst6, everything else (neighbour
	// discovery, MLD) ignored.
	got := make(chan []byte, 256)
	go func() {
		buf := make([]byte, port.MaxFrameLen)
		for {
			n, err := sink.Recv(buf)
			if err != nil {
				close(got)
				return
			}
			f := buf[:n]
			var h pkthdr.Headers
			if _ = h.Parse(f); h.IsTCP() {
				got <- append([]byte(nil), f...)
			}
		}
	}()

	g := newGuest(t, guestOpts{pairs: 1, wire: devTAP})
	g.setupPair(0, 32, 32)
	for i, tc := range gsoCases {
		p := tc.p
		postSuperPacket(g, p, tc.mss, tc.nsegs, guestSuperPacket(t, p))
		want := tsoExpect(t, p, tc.mss)
		for j, w := range want {
			var f []byte
			select {
			case f = <-got:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: segment %d of %d never arrived; stats %+v", tc.name, j, len(want), g.d.Stats().Pairs[0])
			}
			// Forwarded: new MAC addresses, TTL / hop limit one lower.
			l3 := p.l4Off() - 20
			if p.v6 {
				l3 = p.l4Off() - 40
				w[l3+7]--
			} else {
				w[l3+8]--
				binary.BigEndian.PutUint16(w[l3+10:], 0)
				binary.BigEndian.PutUint16(w[l3+10:], ^onesSum(w[l3:l3+20]))
			}
			if p.vlan {
				t.Fatal("no VLAN cases here")
			}
			mustEqual(t, fmt.Sprintf("%s: segment %d of %d", tc.name, j, len(want)), f[14:], w[14:])
			if !frameCsumOK(f) {
				t.Fatalf("%s: segment %d: bad TCP checksum", tc.name, j)
			}
		}
		g.waitFor("tx_tso_frames", func() bool { return g.qstatus(0).TxTSOFrames == uint32(i+1) })
	}
	s := g.d.Stats().Pairs[0]
	if s.TxSendErrors != 0 || s.TxFrames != uint64(len(gsoCases)) {
		t.Fatalf("stats %+v", s)
	}
	select {
	case f := <-got:
		t.Fatalf("extra frame %x", head(f))
	case <-time.After(100 * time.Millisecond):
	}
}
