package port

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestTAP sends a frame out of the NIC side of a TAP and catches it on the
// host side with a packet socket, then the other way round. It needs
// CAP_NET_ADMIN (skipped without, unless NPFNIC_REQUIRE_TOOLS=1).
func TestTAP(t *testing.T) {
	name := fmt.Sprintf("npft%d", os.Getpid()%100000)
	tap, err := OpenTAP(name)
	if err != nil {
		if os.Getenv("NPFNIC_REQUIRE_TOOLS") == "1" {
			t.Fatal(err)
		}
		t.Skipf("no TAP here: %v", err)
	}
	defer tap.Close()
	if tap.Name() != name {
		t.Fatalf("name %q", tap.Name())
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if ifi.Flags&net.FlagUp == 0 {
		t.Fatal("TAP not brought up")
	}
	const etype = 0x88b5 // local experimental: nothing else on the link uses it
	ps, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(etype)))
	if err != nil {
		t.Skipf("no packet socket: %v", err)
	}
	defer unix.Close(ps)
	if err := unix.Bind(ps, &unix.SockaddrLinklayer{Protocol: htons(etype), Ifindex: ifi.Index}); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(5 * time.Second))
	unix.SetsockoptTimeval(ps, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)

	mk := func(seed byte) []byte {
		f := testFrame(200, seed)
		copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0, 0x12, 0x34, 0x56, etype >> 8, etype & 0xff})
		return f
	}
	// NIC -> host.
	out := mk(1)
	if err := tap.Send(out); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(ps, buf, 0)
	if err != nil {
		t.Fatalf("host side: %v", err)
	}
	if !bytes.Equal(buf[:n], out) {
		t.Fatal("frame from the NIC side corrupted")
	}
	// Host -> NIC.
	in := mk(2)
	sa := &unix.SockaddrLinklayer{Protocol: htons(etype), Ifindex: ifi.Index, Halen: 6}
	copy(sa.Addr[:], in[:6])
	if err := unix.Sendto(ps, in, 0, sa); err != nil {
		t.Fatal(err)
	}
	rbuf := make([]byte, MaxFrameLen)
	deadline := time.Now().Add(5 * time.Second)
	for {
		// The kernel sends its own frames too (IPv6 neighbour discovery);
		// wait for ours.
		got := recvTimeout(t, tap, rbuf)
		if bytes.Equal(got, in) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("frame from the host side never arrived")
		}
	}
	// Close unblocks a pending Recv.
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := tap.Recv(rbuf); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(10 * time.Millisecond)
	tap.Close()
	select {
	case err := <-done:
		if err != ErrClosed {
			t.Fatalf("Recv after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Recv")
	}
}

// TestTapErrorSaysWhatToDo: a tap the kernel refuses for want of
// privilege names the two ways out; other errors stay as they are.
func TestTapErrorSaysWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		err       error
		wantHint  bool
		wantError error
	}{
		{unix.EPERM, true, unix.EPERM},
		{unix.EACCES, true, unix.EACCES},
		{unix.EBUSY, false, unix.EBUSY},
	} {
		err := tapError("npf0", "TUNSETIFF", tc.err)
		if !errors.Is(err, tc.wantError) {
			t.Errorf("%v: the error %v lost its cause", tc.err, err)
		}
		hint := strings.Contains(err.Error(), "CAP_NET_ADMIN") && strings.Contains(err.Error(), "ip tuntap add npf0 mode tap user") &&
			strings.Contains(err.Error(), "--wire stream:")
		if hint != tc.wantHint {
			t.Errorf("%v: %q, want the hint: %v", tc.err, err, tc.wantHint)
		}
	}
}
