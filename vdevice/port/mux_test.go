package port

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/npfnic/npfnic/vdevice/pkthdr"
)

// engineRecorder is an engine's receive side that keeps what it got.
type engineRecorder struct {
	mu     sync.Mutex
	frames [][]byte
	down   int
	block  chan struct{} // non-nil: Receive waits on it (back-pressure)
}

func (r *engineRecorder) Receive(f []byte) {
	if r.block != nil {
		<-r.block
	}
	r.mu.Lock()
	r.frames = append(r.frames, bytes.Clone(f))
	r.mu.Unlock()
}

func (r *engineRecorder) PortDown() {
	r.mu.Lock()
	r.down++
	r.mu.Unlock()
}

func (r *engineRecorder) got() ([][]byte, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.frames...), r.down
}

// udpFrame is an IPv4/UDP frame to dport, serialized by gopacket.
func udpFrame(t testing.TB, dport uint16, payload []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: 49152, DstPort: layers.UDPPort(dport)}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// claimUDPPort claims frames to UDP port (the RC engine's RoCEv2 claim
// will be this with pkthdr.UDPPortRoCEv2 and the device's GIDs).
func claimUDPPort(port uint16) func([]byte) bool {
	return func(f []byte) bool {
		var h pkthdr.Headers
		return h.Parse(f) == nil && h.IsUDPDstPort(port)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMuxDemux: each received frame goes to the first engine that claims
// it, the rest to the default engine, or is counted unclaimed when there is
// none; every engine's transmissions reach the backend whole and are
// counted per engine.
func TestMuxDemux(t *testing.T) {
	const rocev2 = pkthdr.UDPPortRoCEv2
	roce := udpFrame(t, rocev2, []byte("bth+payload"))
	dns := udpFrame(t, 53, []byte("query"))
	arp := ethFrame(60, 7)
	for _, tc := range []struct {
		name        string
		withDefault bool
		in          [][]byte
		wantRC      [][]byte
		wantEth     [][]byte
		unclaimed   uint64
	}{
		{"mixed", true, [][]byte{arp, roce, dns, roce}, [][]byte{roce, roce}, [][]byte{arp, dns}, 0},
		{"only Ethernet", true, [][]byte{arp, dns}, nil, [][]byte{arp, dns}, 0},
		{"no default engine", false, [][]byte{arp, roce, dns}, [][]byte{roce}, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, peer := Pipe(16)
			defer peer.Close()
			m := NewMux(dev, nil)
			defer m.Close()
			rcEP, err := m.Attach("rc", claimUDPPort(rocev2))
			if err != nil {
				t.Fatal(err)
			}
			rc := &engineRecorder{}
			rcEP.Deliver(rc)
			eth := &engineRecorder{}
			var ethEP *Endpoint
			if tc.withDefault {
				if ethEP, err = m.Attach("ethernet", nil); err != nil {
					t.Fatal(err)
				}
				ethEP.Deliver(eth)
			}
			if err := m.Start(); err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.in {
				if err := peer.Send(f); err != nil {
					t.Fatal(err)
				}
			}
			total := len(tc.wantRC) + len(tc.wantEth)
			waitUntil(t, "every frame routed", func() bool {
				r, _ := rc.got()
				e, _ := eth.got()
				return len(r)+len(e) == total && m.Unclaimed() == tc.unclaimed
			})
			if r, _ := rc.got(); !equalFrames(r, tc.wantRC) {
				t.Errorf("RC engine got %d frames, want %d", len(r), len(tc.wantRC))
			}
			if e, _ := eth.got(); !equalFrames(e, tc.wantEth) {
				t.Errorf("Ethernet engine got %d frames, want %d", len(e), len(tc.wantEth))
			}
			if s := rcEP.Stats(); s.RxFrames != uint64(len(tc.wantRC)) {
				t.Errorf("RC endpoint stats %+v", s)
			}

			// Both engines transmit onto the one backend.
			senders := []*Endpoint{rcEP}
			if ethEP != nil {
				senders = append(senders, ethEP)
			}
			var wg sync.WaitGroup
			const each = 50
			for i, ep := range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range each {
						if err := ep.Send(ethFrame(100+i, byte(j))); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			buf := make([]byte, MaxFrameLen)
			byLen := map[int]int{}
			for range each * len(senders) {
				byLen[len(recvTimeout(t, peer, buf))]++
			}
			wg.Wait()
			for i, ep := range senders {
				if byLen[100+i] != each || ep.Stats().TxFrames != each {
					t.Errorf("engine %d: %d frames on the wire, stats %+v, want %d", i, byLen[100+i], ep.Stats(), each)
				}
			}
		})
	}
}

// TestMuxDispatch: a frame handed in directly takes the reader's route,
// and Dispatch says whether an engine claimed it.
func TestMuxDispatch(t *testing.T) {
	roce := udpFrame(t, pkthdr.UDPPortRoCEv2, []byte("bth+payload"))
	dns := udpFrame(t, 53, []byte("query"))
	dev, peer := Pipe(4)
	defer peer.Close()
	m := NewMux(dev, nil)
	defer m.Close()
	rcEP, err := m.Attach("rc", claimUDPPort(pkthdr.UDPPortRoCEv2))
	if err != nil {
		t.Fatal(err)
	}
	rc := &engineRecorder{}
	rcEP.Deliver(rc)
	for _, tc := range []struct {
		frame   []byte
		claimed bool
	}{{roce, true}, {dns, false}, {roce, true}} {
		if got := m.Dispatch(tc.frame); got != tc.claimed {
			t.Errorf("Dispatch of a %d-byte frame: claimed %v, want %v", len(tc.frame), got, tc.claimed)
		}
	}
	if r, _ := rc.got(); !equalFrames(r, [][]byte{roce, roce}) || rcEP.Stats().RxFrames != 2 || m.Unclaimed() != 1 {
		t.Errorf("RC engine got %d frames (stats %+v), %d unclaimed; want 2 and 1", len(r), rcEP.Stats(), m.Unclaimed())
	}
}

func equalFrames(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestMuxAttachRules: one default engine, every endpoint bound before the
// reader starts, nothing attaches to a running port.
func TestMuxAttachRules(t *testing.T) {
	dev, peer := Pipe(4)
	defer peer.Close()
	m := NewMux(dev, nil)
	defer m.Close()
	eth, err := m.Attach("ethernet", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Attach("second default", nil); err == nil {
		t.Error("a second default engine attached")
	}
	if err := m.Start(); err == nil {
		t.Error("started with an endpoint that has no receiver")
	}
	eth.Deliver(&engineRecorder{})
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Attach("late", func([]byte) bool { return true }); err == nil {
		t.Error("attached to a running port")
	}
	if err := m.Start(); err == nil {
		t.Error("started twice")
	}
}

// TestMuxPortDown: a backend that closes under the Mux takes every
// engine's link down once; a receive error is retried, not fatal.
func TestMuxPortDown(t *testing.T) {
	b := &scriptedPort{script: []error{errors.New("transient"), nil, ErrClosed}, frame: ethFrame(60, 1)}
	m := NewMux(b, nil)
	defer m.Close()
	rc, eth := &engineRecorder{}, &engineRecorder{}
	rcEP, _ := m.Attach("rc", func([]byte) bool { return false })
	rcEP.Deliver(rc)
	ethEP, _ := m.Attach("ethernet", nil)
	ethEP.Deliver(eth)
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "both engines told the port is down", func() bool {
		_, d1 := rc.got()
		_, d2 := eth.got()
		return d1 == 1 && d2 == 1
	})
	if f, _ := eth.got(); len(f) != 1 {
		t.Errorf("Ethernet got %d frames around the error, want 1", len(f))
	}
}

// TestMuxCloseWaitsForBlockedEngine: an engine holding the reader (no
// buffers) keeps Close waiting until the engine lets go, as the NIC's
// close order (engines first) relies on; nothing is delivered afterwards.
func TestMuxCloseWaitsForBlockedEngine(t *testing.T) {
	dev, peer := Pipe(4)
	defer peer.Close()
	m := NewMux(dev, nil)
	eth := &engineRecorder{block: make(chan struct{})}
	ep, _ := m.Attach("ethernet", nil)
	ep.Deliver(eth)
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	peer.Send(ethFrame(60, 1))
	waitUntil(t, "the reader to deliver", func() bool { return ep.Stats().RxFrames == 1 })
	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while the engine held the reader")
	case <-time.After(20 * time.Millisecond):
	}
	close(eth.block)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after the engine let go")
	}
	if f, down := eth.got(); len(f) != 1 || down != 0 {
		t.Errorf("after Close: %d frames, %d port-down calls; want 1, 0", len(f), down)
	}
}

// TestMuxGSO: an endpoint takes GSO sends exactly when its backend does.
func TestMuxGSO(t *testing.T) {
	dev, peer := Pipe(4)
	defer peer.Close()
	m := NewMux(dev, nil)
	defer m.Close()
	ep, _ := m.Attach("ethernet", nil)
	if _, ok := AsGSO(ep); ok {
		t.Error("endpoint over a pipe claims GSO")
	}
	if err := ep.SendGSO(ethFrame(60, 1), GSOInfo{Type: GSOTCPv4}); !errors.Is(err, ErrNoGSO) {
		t.Errorf("SendGSO over a pipe: %v, want ErrNoGSO", err)
	}
	if s := ep.Stats(); s.TxErrors != 1 || s.TxFrames != 0 {
		t.Errorf("stats %+v", s)
	}
}

// scriptedPort's Recv returns the script's errors in order, a frame for
// each nil.
type scriptedPort struct {
	mu     sync.Mutex
	script []error
	frame  []byte
}

func (p *scriptedPort) Send([]byte) error { return nil }
func (p *scriptedPort) Recv(buf []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.script) == 0 {
		return 0, ErrClosed
	}
	err := p.script[0]
	p.script = p.script[1:]
	if err != nil {
		return 0, err
	}
	return copy(buf, p.frame), nil
}
func (p *scriptedPort) Close() error { return nil }

// gsoRecorder is an engine that finishes unfinished frames (GSOReceiver)
// and keeps the requests it got.
type gsoRecorder struct {
	engineRecorder
	gso []GSOInfo
}

func (r *gsoRecorder) ReceiveGSO(f []byte, g GSOInfo) {
	r.mu.Lock()
	r.gso = append(r.gso, g)
	r.mu.Unlock()
	r.Receive(f)
}

// gsoScriptedPort delivers its frames with their GSOInfo once receive
// offloads are enabled, and refuses to deliver unfinished ones before.
type gsoScriptedPort struct {
	mu      sync.Mutex
	enabled bool
	frames  [][]byte
	gso     []GSOInfo
}

func (p *gsoScriptedPort) Send([]byte) error { return nil }
func (p *gsoScriptedPort) Close() error      { return nil }
func (p *gsoScriptedPort) Recv(buf []byte) (int, error) {
	n, _, err := p.RecvGSO(buf)
	return n, err
}
func (p *gsoScriptedPort) EnableRecvGSO() error {
	p.mu.Lock()
	p.enabled = true
	p.mu.Unlock()
	return nil
}
func (p *gsoScriptedPort) RecvGSO(buf []byte) (int, GSOInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.frames) > 0 {
		f, g := p.frames[0], p.gso[0]
		p.frames, p.gso = p.frames[1:], p.gso[1:]
		if g.Finished() || p.enabled {
			return copy(buf, f), g, nil
		}
	}
	return 0, GSOInfo{}, ErrClosed
}

// TestMuxRecvGSO: the Mux enables the backend's receive offloads only when
// its default engine can finish what they deliver; it hands an unfinished
// frame with its GSOInfo to that engine, and drops (counting) one that an
// engine without ReceiveGSO claims.
func TestMuxRecvGSO(t *testing.T) {
	super := ethFrame(3000, 1)
	partialUDP := udpFrame(t, 4791, []byte("roce"))
	tcpGSO := GSOInfo{Type: GSOTCPv4, GSOSize: 1448, CsumStart: 34, CsumOffset: 16, NeedsCsum: true}
	udpCsum := GSOInfo{CsumStart: 34, CsumOffset: 6, NeedsCsum: true}
	plain := ethFrame(100, 2)
	script := func() *gsoScriptedPort {
		return &gsoScriptedPort{frames: [][]byte{super, partialUDP, plain}, gso: []GSOInfo{tcpGSO, udpCsum, {}}}
	}

	// A default engine that cannot finish frames: offloads stay off, and
	// the backend delivers only the finished frame.
	m := NewMux(script(), nil)
	eth := &engineRecorder{}
	ep, _ := m.Attach("ethernet", nil)
	ep.Deliver(eth)
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the plain frame", func() bool { f, _ := eth.got(); return len(f) == 1 })
	m.Close()
	if m.RecvGSO() {
		t.Error("receive offloads enabled for an engine without ReceiveGSO")
	}

	// A default engine that can: offloads on, the super-packet goes to it
	// with its request; the partial RoCE frame goes to the RC engine's
	// claim, which cannot finish it, and is dropped.
	m = NewMux(script(), nil)
	geth := &gsoRecorder{}
	rc := &engineRecorder{}
	ep, _ = m.Attach("ethernet", nil)
	ep.Deliver(geth)
	rcEP, _ := m.Attach("rc", claimUDPPort(4791))
	rcEP.Deliver(rc)
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "two frames to ethernet", func() bool { f, _ := geth.got(); return len(f) == 2 })
	m.Close()
	f, _ := geth.got()
	if !m.RecvGSO() || !bytes.Equal(f[0], super) || !bytes.Equal(f[1], plain) || len(geth.gso) != 1 || geth.gso[0] != tcpGSO {
		t.Fatalf("RecvGSO %v, ethernet got %d frames with requests %+v", m.RecvGSO(), len(f), geth.gso)
	}
	if got, _ := rc.got(); len(got) != 0 || m.GSODrops() != 1 {
		t.Fatalf("rc got %d frames, GSODrops %d; want 0 and 1", len(got), m.GSODrops())
	}
}

// bufferKeeper is a BufferReceiver that keeps every other frame with its
// buffer (returning a fresh one, or a short one when short is set) and
// hands the others back.
type bufferKeeper struct {
	engineRecorder
	short bool
	kept  [][]byte
	n     atomic.Int64
}

func (k *bufferKeeper) ReceiveBuffer(f []byte) []byte {
	if k.n.Add(1)%2 == 1 {
		k.Receive(f)
		return f
	}
	k.mu.Lock()
	k.kept = append(k.kept, f)
	k.mu.Unlock()
	if k.short {
		return make([]byte, 100) // not a buffer: the reader keeps its own
	}
	return make([]byte, MaxFrameLen)
}

// TestMuxBufferReceiver: an engine that keeps the reader's buffer gets the
// frame intact and the reader reads on into the buffer it returned; one
// that returns a buffer too short for any frame leaves the reader its own
// (and must then not keep frame: here it sees the next frame overwrite it).
func TestMuxBufferReceiver(t *testing.T) {
	for _, tc := range []struct {
		name      string
		short     bool
		wantSound bool // the kept frames are still what was sent
	}{
		{"fresh buffers", false, true},
		{"short buffers", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := Pipe(16)
			m := NewMux(b, nil)
			k := &bufferKeeper{short: tc.short}
			ep, err := m.Attach("keeper", func([]byte) bool { return true })
			if err != nil {
				t.Fatal(err)
			}
			ep.Deliver(k)
			if err := m.Start(); err != nil {
				t.Fatal(err)
			}
			var sent [][]byte
			for i := range 6 {
				f := udpFrame(t, 4791, bytes.Repeat([]byte{byte(i + 1)}, 200+i))
				sent = append(sent, f)
				if err := a.Send(f); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for k.n.Load() < 6 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			a.Close()
			m.Close()
			got, _ := k.got()
			if len(got) != 3 || len(k.kept) != 3 {
				t.Fatalf("%d frames received, %d kept, want 3 and 3", len(got), len(k.kept))
			}
			for i, f := range got {
				if !bytes.Equal(f, sent[2*i]) {
					t.Errorf("frame %d differs", 2*i)
				}
			}
			sound := true
			for i, f := range k.kept {
				sound = sound && bytes.Equal(f, sent[2*i+1])
			}
			if sound != tc.wantSound {
				t.Errorf("kept frames intact: %v, want %v", sound, tc.wantSound)
			}
			if st := ep.Stats(); st.RxFrames != 6 {
				t.Errorf("RxFrames %d, want 6", st.RxFrames)
			}
		})
	}
}
