package port

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// TAP is a Linux TAP interface: every frame the NIC sends appears as
// received on the interface, and every frame the host sends out of the
// interface reaches the NIC.
//
// The TAP is opened with IFF_VNET_HDR, as QEMU opens it: every frame in
// either direction is preceded by a virtio-net header of vnetHdrLen bytes.
// That lets the NIC hand a TCP super-packet to the host kernel whole
// (SendGSO), which segments and checksums it far more cheaply than the
// device writing every segment. In the other direction the kernel sends
// finished frames unless EnableRecvGSO switched receive offloads on
// (RecvGSOPort); a received frame whose header asks for segmentation
// without them is dropped and counted (RxGSODrops).
type TAP struct {
	name string
	f    *os.File
	rc   syscall.RawConn

	closed     atomic.Bool
	recvGSO    atomic.Bool
	rxGSODrops atomic.Uint64
}

// isClosed reports whether err comes from using the tap after Close (the
// raw conn reports the poller's own error, not os.ErrClosed).
func (t *TAP) isClosed(err error) bool {
	return errors.Is(err, os.ErrClosed) || t.closed.Load()
}

// vnetHdrLen is the virtio-net header size set with TUNSETVNETHDRSZ: 12
// bytes, the virtio_net_hdr_v1 / virtio_net_hdr_mrg_rxbuf layout QEMU uses
// for a modern virtio-net device (flags, gso_type, hdr_len, gso_size,
// csum_start, csum_offset, num_buffers). num_buffers is written 0 and
// ignored on read. The fields are little-endian: the tap uses the host's
// byte order for a legacy header on a little-endian host (vnet_le need not
// be set on x86), and little-endian is what virtio 1.0 specifies.
const vnetHdrLen = 12

// virtio_net_hdr constants.
const (
	vnetFlagNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM
)

// tunRecvOffloads are the TUNSETOFFLOAD flags EnableRecvGSO sets: partial
// checksums and TCP segmentation over IPv4 and IPv6 with ECN, what a
// virtio-net guest with guest_csum and guest_tso4/6/ecn negotiates. No UDP
// segmentation: a UDP datagram reaches the NIC whole.
const tunRecvOffloads = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 | unix.TUN_F_TSO_ECN

// tapError says what to do when the kernel refuses a tap: the commonest
// cause is a user without CAP_NET_ADMIN, who has two ways out.
func tapError(name, op string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("wire: tap %q: %s: %w: a tap needs root or CAP_NET_ADMIN, or one made for "+
			"this user beforehand (ip tuntap add %s mode tap user $USER); --wire stream: needs neither",
			name, op, err, name)
	}
	return fmt.Errorf("wire: tap %q: %s: %w", name, op, err)
}

// OpenTAP attaches to (creating if needed) the TAP interface name, without
// packet information headers but with a virtio-net header (see TAP), and
// sets it up. Needs CAP_NET_ADMIN unless the interface was created for
// this user (ip tuntap add ... user U).
func OpenTAP(name string) (*TAP, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, tapError(name, "open /dev/net/tun", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("wire: tap %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, tapError(name, "TUNSETIFF", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrLen); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("wire: TUNSETVNETHDRSZ %q: %w", name, err)
	}
	// Non-blocking, so the runtime poller serves Read and Write and Close
	// unblocks a pending Read.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("wire: tap %q: %w", name, err)
	}
	t := &TAP{name: ifr.Name(), f: os.NewFile(uintptr(fd), "tap:"+name)}
	rc, err := t.f.SyscallConn()
	if err != nil {
		t.f.Close()
		return nil, fmt.Errorf("wire: tap %q: %w", name, err)
	}
	t.rc = rc
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

// Send implements Port: one write is one frame, after an all-zero
// virtio-net header (no offload).
func (t *TAP) Send(frame []byte) error {
	var hdr [vnetHdrLen]byte
	return t.write(&hdr, frame)
}

// TrySend implements TrySender: one write, ErrWouldBlock if the TAP is
// not writable now.
func (t *TAP) TrySend(frame []byte) error {
	var hdr [vnetHdrLen]byte
	return t.writeOnce(&hdr, frame, false)
}

// CanGSO implements GSOPort: a TAP always can.
func (t *TAP) CanGSO() bool { return true }

// SendGSO implements GSOPort: the frame follows a virtio-net header
// carrying gso (VIRTIO_NET_HDR_F_NEEDS_CSUM when NeedsCsum). The kernel
// rejects (EINVAL) a header that does not match the frame.
func (t *TAP) SendGSO(frame []byte, gso GSOInfo) error {
	var hdr [vnetHdrLen]byte
	if gso.NeedsCsum {
		hdr[0] = vnetFlagNeedsCsum
	}
	hdr[1] = byte(gso.Type)
	binary.LittleEndian.PutUint16(hdr[2:], uint16(gso.HdrLen))
	binary.LittleEndian.PutUint16(hdr[4:], uint16(gso.GSOSize))
	binary.LittleEndian.PutUint16(hdr[6:], uint16(gso.CsumStart))
	binary.LittleEndian.PutUint16(hdr[8:], uint16(gso.CsumOffset))
	return t.write(&hdr, frame)
}

// write sends hdr and frame with one writev, waiting in the runtime
// poller if the tap is not writable.
func (t *TAP) write(hdr *[vnetHdrLen]byte, frame []byte) error {
	return t.writeOnce(hdr, frame, true)
}

// writeOnce is one writev of hdr and frame; a TAP that is not writable
// is waited for in the runtime poller, or with wait clear is
// ErrWouldBlock.
func (t *TAP) writeOnce(hdr *[vnetHdrLen]byte, frame []byte, wait bool) error {
	iov := [2][]byte{hdr[:], frame}
	var werr error
	err := t.rc.Write(func(fd uintptr) bool {
		_, werr = unix.Writev(int(fd), iov[:])
		return !wait || werr != unix.EAGAIN
	})
	if err == nil && werr == unix.EAGAIN {
		return ErrWouldBlock
	}
	if err == nil {
		err = werr
	}
	if err != nil && t.isClosed(err) {
		return ErrClosed
	}
	if err != nil {
		return fmt.Errorf("wire: tap %s write: %w", t.name, err)
	}
	return nil
}

// EnableRecvGSO implements RecvGSOPort: from now on the host kernel may
// send TCP super-packets and partially checksummed frames (RecvGSO).
func (t *TAP) EnableRecvGSO() error {
	var err error
	cerr := t.rc.Control(func(fd uintptr) {
		err = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, tunRecvOffloads)
	})
	if err = errors.Join(cerr, err); err != nil {
		return fmt.Errorf("wire: tap %s TUNSETOFFLOAD: %w", t.name, err)
	}
	t.recvGSO.Store(true)
	return nil
}

// Recv implements Port. The virtio-net header is stripped. The kernel
// truncates a frame longer than buf (reads are per frame), so a frame that
// fills buf completely is taken as truncated and dropped; so is a frame
// whose header asks for segmentation or a checksum (RxGSODrops), which the
// kernel sends only after EnableRecvGSO.
func (t *TAP) Recv(buf []byte) (int, error) {
	for {
		n, gso, err := t.RecvGSO(buf)
		if err != nil || gso.Finished() {
			return n, err
		}
		t.rxGSODrops.Add(1)
	}
}

// RecvGSO implements RecvGSOPort: Recv, with the frame's virtio-net header
// as a GSOInfo. Without EnableRecvGSO a header that is not all finished
// drops the frame (RxGSODrops).
func (t *TAP) RecvGSO(buf []byte) (int, GSOInfo, error) {
	var hdr [vnetHdrLen]byte
	iov := [2][]byte{hdr[:], buf}
	for {
		var n int
		var rerr error
		err := t.rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Readv(int(fd), iov[:])
			return rerr != unix.EAGAIN
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			if t.isClosed(err) {
				return 0, GSOInfo{}, ErrClosed
			}
			return 0, GSOInfo{}, err
		}
		n -= vnetHdrLen
		if n < 0 || n >= len(buf) {
			continue
		}
		gso := GSOInfo{
			Type:       GSOType(hdr[1]),
			HdrLen:     int(binary.LittleEndian.Uint16(hdr[2:])),
			GSOSize:    int(binary.LittleEndian.Uint16(hdr[4:])),
			CsumStart:  int(binary.LittleEndian.Uint16(hdr[6:])),
			CsumOffset: int(binary.LittleEndian.Uint16(hdr[8:])),
			NeedsCsum:  hdr[0]&vnetFlagNeedsCsum != 0,
		}
		if gso.Type&^GSOECN == GSONone {
			gso.Type = GSONone
		}
		if !gso.Finished() && !t.recvGSO.Load() {
			t.rxGSODrops.Add(1)
			continue
		}
		return n, gso, nil
	}
}

// RxGSODrops counts received frames dropped because their virtio-net
// header asked for segmentation or a checksum the reader did not enable
// (EnableRecvGSO) or does not take (Recv).
func (t *TAP) RxGSODrops() uint64 { return t.rxGSODrops.Load() }

// Close implements Port. The interface itself persists only if it was
// created persistent beforehand.
func (t *TAP) Close() error {
	t.closed.Store(true)
	return t.f.Close()
}

func (t *TAP) String() string { return "tap:" + t.name }
