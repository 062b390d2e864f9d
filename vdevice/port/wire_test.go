package port

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want Spec
		err  bool
	}{
		{"tap:npf0", Spec{Kind: "tap", Addr: "npf0"}, false},
		{"stream:unix:/tmp/s.sock", Spec{"stream", "unix", "/tmp/s.sock"}, false},
		{"stream:tcp:127.0.0.1:5555", Spec{"stream", "tcp", "127.0.0.1:5555"}, false},
		{"stream:tcp:[::1]:5555", Spec{"stream", "tcp", "[::1]:5555"}, false},
		{"stream-listen:unix:/tmp/x", Spec{"stream-listen", "unix", "/tmp/x"}, false},
		{"stream-listen:tcp::5555", Spec{"stream-listen", "tcp", ":5555"}, false},
		{"", Spec{}, true},
		{"tap:", Spec{}, true},
		{"tap:a/b", Spec{}, true},
		{"tap:waytoolonginterfacename", Spec{}, true},
		{"stream:udp:1.2.3.4:5", Spec{}, true},
		{"stream:tcp:noport", Spec{}, true},
		{"stream:unix:", Spec{}, true},
		{"stream", Spec{}, true},
		{"socket:unix:/x", Spec{}, true},
	} {
		got, err := ParseSpec(tc.spec)
		if (err != nil) != tc.err || (err == nil && got != tc.want) {
			t.Errorf("ParseSpec(%q) = %+v, %v", tc.spec, got, err)
		}
		if err == nil && got.String() != tc.spec {
			t.Errorf("%q prints as %q", tc.spec, got.String())
		}
	}
}

func recvTimeout(t *testing.T, p Port, buf []byte) []byte {
	t.Helper()
	type res struct {
		n   int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		n, err := p.Recv(buf)
		ch <- res{n, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Recv: %v", r.err)
		}
		return buf[:r.n]
	case <-time.After(5 * time.Second):
		t.Fatal("Recv timed out")
	}
	return nil
}

func testFrame(n int, seed byte) []byte {
	f := make([]byte, n)
	for i := range f {
		f[i] = seed + byte(i*7)
	}
	return f
}

func TestPipe(t *testing.T) {
	a, b := Pipe(2)
	buf := make([]byte, 2000)
	for i, n := range []int{60, 1514, 1} {
		f := testFrame(n, byte(i))
		if err := a.Send(f); err != nil {
			t.Fatal(err)
		}
		if got := recvTimeout(t, b, buf); !bytes.Equal(got, f) {
			t.Fatalf("frame %d corrupted", i)
		}
	}
	// Too long for the receive buffer: dropped, the next frame arrives.
	a.Send(testFrame(3000, 1))
	a.Send(testFrame(10, 2))
	if got := recvTimeout(t, b, buf); !bytes.Equal(got, testFrame(10, 2)) {
		t.Fatal("frame after an oversized one")
	}
	// A full queue blocks the sender until the receiver takes a frame.
	a.Send(testFrame(10, 3))
	a.Send(testFrame(10, 4))
	sent := make(chan error, 1)
	go func() { sent <- a.Send(testFrame(10, 5)) }()
	select {
	case <-sent:
		t.Fatal("Send did not block on a full queue")
	case <-time.After(20 * time.Millisecond):
	}
	recvTimeout(t, b, buf)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	recvTimeout(t, b, buf)
	recvTimeout(t, b, buf)
	// Steady state: no allocation per frame.
	f := testFrame(1500, 6)
	if n := testing.AllocsPerRun(100, func() {
		a.Send(f)
		b.Recv(buf)
	}); n != 0 {
		t.Errorf("%v allocations per frame", n)
	}
	// Closing one end: Recv on both ends and Send fail.
	a.Close()
	if _, err := a.Recv(buf); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	if _, err := b.Recv(buf); !errors.Is(err, ErrClosed) {
		t.Fatalf("peer Recv after Close: %v", err)
	}
	if err := b.Send(f); !errors.Is(err, ErrClosed) {
		t.Fatalf("peer Send after Close: %v", err)
	}
}

func waitConnected(t *testing.T, s *Stream) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !s.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("stream never connected")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStreamRoundTrip: a server and a client port talk to each other over
// a UNIX and a TCP socket, both directions.
func TestStreamRoundTrip(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			addr := filepath.Join(t.TempDir(), "s.sock")
			if network == "tcp" {
				addr = "127.0.0.1:0"
			}
			srv, err := ListenStream(network, addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			cli := DialStream(network, srv.Addr(), nil)
			defer cli.Close()
			waitConnected(t, cli)
			waitConnected(t, srv)
			buf := make([]byte, MaxFrameLen)
			for i, n := range []int{60, 1514, 9000, 65535, 0} {
				f := testFrame(n, byte(i))
				if err := cli.Send(f); err != nil {
					t.Fatal(err)
				}
				if got := recvTimeout(t, srv, buf); !bytes.Equal(got, f) {
					t.Fatalf("client->server frame of %d bytes corrupted", n)
				}
				if err := srv.Send(f); err != nil {
					t.Fatal(err)
				}
				if got := recvTimeout(t, cli, buf); !bytes.Equal(got, f) {
					t.Fatalf("server->client frame of %d bytes corrupted", n)
				}
			}
		})
	}
}

// TestStreamSocketpair: two StreamConn ports over a socketpair, then one
// end hangs up in the middle of a frame.
func TestStreamSocketpair(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := StreamConn(conn(fds[0]), nil)
	defer a.Close()
	raw := conn(fds[1])
	b := StreamConn(raw, nil)
	waitConnected(t, a)
	waitConnected(t, b)
	buf := make([]byte, MaxFrameLen)
	for i, n := range []int{60, 1514, 0, 65536} {
		f := testFrame(n, byte(i))
		if err := a.Send(f); err != nil {
			t.Fatal(err)
		}
		if got := recvTimeout(t, b, buf); !bytes.Equal(got, f) {
			t.Fatalf("a->b frame of %d bytes corrupted", n)
		}
		if err := b.Send(f); err != nil {
			t.Fatal(err)
		}
		if got := recvTimeout(t, a, buf); !bytes.Equal(got, f) {
			t.Fatalf("b->a frame of %d bytes corrupted", n)
		}
	}
	// b's side writes half a frame and hangs up: a drops the fragment
	// and is left without a peer, without error or panic.
	raw.Write(binary.BigEndian.AppendUint32(nil, 1000))
	raw.Write(make([]byte, 10))
	b.Close()
	done := make(chan error, 1)
	go func() {
		_, err := a.Recv(buf)
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for a.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("a never noticed the hang-up")
		}
		time.Sleep(time.Millisecond)
	}
	if err := a.Send(testFrame(60, 1)); !errors.Is(err, ErrNoPeer) {
		t.Fatalf("Send after hang-up: %v", err)
	}
	a.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv: %v", err)
	}
}

// rawFrame encodes f as the stream protocol does, for hand-driven peers
// that send what a well-behaved one would not.
func rawFrame(f []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(f))), f...)
}

// TestStreamHostilePeers: truncated frames, disconnects mid-frame, lengths
// beyond any frame, frames longer than the receive buffer. Each costs at
// most the connection; the next peer's frames arrive intact.
func TestStreamHostilePeers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bytes []byte // what the bad peer writes before closing
		skip  bool   // the bad peer's connection survives (frame skipped)
	}{
		{"disconnect mid-length", []byte{0, 0}, false},
		{"disconnect mid-frame", append(binary.BigEndian.AppendUint32(nil, 100), make([]byte, 40)...), false},
		{"length beyond any frame", binary.BigEndian.AppendUint32(nil, MaxFrameLen+1), false},
		{"length 0xffffffff", []byte{0xff, 0xff, 0xff, 0xff}, false},
		{"frame longer than the receive buffer", rawFrame(make([]byte, 3000)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.sock")
			srv, err := ListenStream("unix", path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			got := make(chan []byte, 4)
			go func() {
				buf := make([]byte, 2048)
				for {
					n, err := srv.Recv(buf)
					if err != nil {
						close(got)
						return
					}
					got <- append([]byte(nil), buf[:n]...)
				}
			}()
			bad, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			good := testFrame(64, 9)
			bad.Write(tc.bytes)
			if tc.skip {
				bad.Write(rawFrame(good))
			} else {
				bad.Close()
			}
			if !tc.skip {
				// The server takes the next peer once the bad one is gone.
				deadline := time.Now().Add(5 * time.Second)
				for srv.Stats().Disconnects == 0 {
					if time.Now().After(deadline) {
						t.Fatal("bad peer never dropped")
					}
					time.Sleep(time.Millisecond)
				}
				c, err := net.Dial("unix", path)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.Write(rawFrame(good))
			} else {
				defer bad.Close()
			}
			select {
			case f := <-got:
				if !bytes.Equal(f, good) {
					t.Fatalf("received % x", f[:min(len(f), 16)])
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("no frame; stats %+v", srv.Stats())
			}
			if tc.skip && srv.Stats().SkippedTooLong != 1 {
				t.Fatalf("stats %+v", srv.Stats())
			}
		})
	}
}

// TestStreamReconnect: the client survives the server going away and
// coming back; frames sent while disconnected are dropped with ErrNoPeer.
func TestStreamReconnect(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	cli := DialStream("unix", path, nil)
	defer cli.Close()
	c1, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	waitConnected(t, cli)
	buf := make([]byte, MaxFrameLen)
	c1.Write(rawFrame(testFrame(60, 1)))
	if got := recvTimeout(t, cli, buf); !bytes.Equal(got, testFrame(60, 1)) {
		t.Fatal("first frame")
	}
	// Server side goes away in the middle of a frame.
	c1.Write(binary.BigEndian.AppendUint32(nil, 500))
	c1.Write(make([]byte, 100))
	c1.Close()
	deadline := time.Now().Add(5 * time.Second)
	for cli.Connected() || cli.Stats().Disconnects == 0 {
		// Recv notices the loss; run one in the background.
		if time.Now().After(deadline) {
			t.Fatal("client never noticed the disconnect")
		}
		go cli.Recv(make([]byte, MaxFrameLen))
		time.Sleep(5 * time.Millisecond)
		if cli.Stats().Disconnects > 0 {
			break
		}
	}
	if err := cli.Send(testFrame(60, 2)); err != nil && !errors.Is(err, ErrNoPeer) {
		t.Fatalf("Send while disconnected: %v", err)
	}
	c2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	waitConnected(t, cli)
	if err := cli.Send(testFrame(70, 3)); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 4)
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c2, hdr); err != nil {
		t.Fatal(err)
	}
	f := make([]byte, binary.BigEndian.Uint32(hdr))
	if _, err := io.ReadFull(c2, f); err != nil || !bytes.Equal(f, testFrame(70, 3)) {
		t.Fatalf("frame after reconnect: %v", err)
	}
	ln.Close()
}

func TestStreamSendWithoutPeer(t *testing.T) {
	srv, err := ListenStream("unix", filepath.Join(t.TempDir(), "s.sock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Send(testFrame(60, 1)); !errors.Is(err, ErrNoPeer) {
		t.Fatalf("Send without a peer: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := srv.Recv(make([]byte, 100))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	srv.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	if err := srv.Send(testFrame(60, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
}

// TestPcap records both directions through a pipe and reads the file back
// with pcapgo, and with tshark when it is installed.
func TestPcap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cap.pcap")
	a, b := Pipe(8)
	p, err := CreatePcap(a, path)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, MaxFrameLen)
	var want [][]byte
	for i := 0; i < 3; i++ {
		out := ethFrame(60+i*500, byte(i))
		if err := p.Send(out); err != nil {
			t.Fatal(err)
		}
		recvTimeout(t, b, buf)
		in := ethFrame(100+i, byte(10+i))
		b.Send(in)
		if got := recvTimeout(t, p, buf); !bytes.Equal(got, in) {
			t.Fatal("frame through the pcap port")
		}
		want = append(want, out, in)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("link type %v", r.LinkType())
	}
	for i, w := range want {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if !bytes.Equal(data, w) || ci.Length != len(w) {
			t.Fatalf("packet %d differs", i)
		}
	}
	if _, _, err := r.ReadPacketData(); err != io.EOF {
		t.Fatalf("extra packets: %v", err)
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("NPFNIC_REQUIRE_TOOLS") == "1" {
			t.Fatal("tshark not installed and NPFNIC_REQUIRE_TOOLS=1")
		}
		t.Skip("tshark not installed")
	}
	cmd := exec.Command(tshark, "-r", path, "-T", "fields", "-e", "frame.len")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr // tshark warns about running as root there
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.Bytes())
	}
	var lens []string
	for _, w := range want {
		lens = append(lens, strconv.Itoa(len(w)))
	}
	if got := strings.Fields(string(out)); strings.Join(got, " ") != strings.Join(lens, " ") {
		t.Fatalf("tshark frame lengths %q, want %q", got, lens)
	}
}

// ethFrame is an Ethernet frame with a made-up EtherType and a patterned
// payload.
func ethFrame(n int, seed byte) []byte {
	f := testFrame(n, seed)
	copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0, 0, 0, 1, 0x88, 0xb5})
	return f
}
