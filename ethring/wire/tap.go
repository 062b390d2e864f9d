package wire

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// TAP is a Linux TAP interface: every frame the NIC sends appears as
// received on the interface, and every frame the host sends out of the
// interface reaches the NIC.
type TAP struct {
	name string
	f    *os.File
}

// OpenTAP attaches to (creating if needed) the TAP interface name, without
// packet information headers, and sets it up. Needs CAP_NET_ADMIN unless
// the interface was created for this user (ip tuntap add ... user U).
func OpenTAP(name string) (*TAP, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("wire: open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("wire: tap %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("wire: TUNSETIFF %q: %w", name, err)
	}
	// Non-blocking, so the runtime poller serves Read and Write and Close
	// unblocks a pending Read.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("wire: tap %q: %w", name, err)
	}
	t := &TAP{name: ifr.Name(), f: os.NewFile(uintptr(fd), "tap:"+name)}
	// A TAP that is down refuses writes (EIO); bring it up so the link
	// works without a separate `ip link set up`. Failure is not fatal: the
	// administrator may manage the interface.
	_ = setUp(t.name)
	return t, nil
}

func setUp(name string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr)
}

// Name is the interface name the kernel assigned.
func (t *TAP) Name() string { return t.name }

// Send implements Port: one write is one frame.
func (t *TAP) Send(frame []byte) error {
	_, err := t.f.Write(frame)
	if errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	return err
}

// Recv implements Port. The kernel truncates a frame longer than buf
// (reads are per frame), so a frame that fills buf completely is taken as
// truncated and dropped.
func (t *TAP) Recv(buf []byte) (int, error) {
	for {
		n, err := t.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return 0, ErrClosed
			}
			return 0, err
		}
		if n < len(buf) {
			return n, nil
		}
	}
}

// Close implements Port. The interface itself persists only if it was
// created persistent beforehand.
func (t *TAP) Close() error { return t.f.Close() }

func (t *TAP) String() string { return "tap:" + t.name }
