package vfiouser_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// testClient is a minimal vfio-user client. It also answers the server's
// DMA_READ/DMA_WRITE requests against an in-memory "remote" window while it
// waits for its own replies, as QEMU's main loop does.
type testClient struct {
	t      testing.TB
	uc     *net.UnixConn
	nextID uint16
	layout vfiouser.DMALayout

	remoteBase uint64
	remote     []byte
	remoteOps  int
}

type reply struct {
	vfiouser.Header
	payload []byte
	fds     []int
}

func newTestClient(t testing.TB, uc *net.UnixConn) *testClient {
	t.Helper()
	c := &testClient{t: t, uc: uc}
	t.Cleanup(func() { uc.Close() })
	return c
}

// socketpairServer starts a server for dev over a socketpair and returns the
// client end. The server goroutine's result arrives on the channel.
func socketpairServer(t testing.TB, srv *vfiouser.Server) (*net.UnixConn, <-chan error) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	toConn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sock")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	sc, cc := toConn(fds[0]), toConn(fds[1])
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(context.Background(), sc) }()
	return cc, done
}

type fixture struct {
	nic  *npfnic.NIC
	srv  *vfiouser.Server
	c    *testClient
	done <-chan error
}

func newFixture(t testing.TB, opts vfiouser.Options) *fixture {
	t.Helper()
	n, err := npfnic.New(npfnic.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vfiouser.NewServer(n, opts)
	if err != nil {
		t.Fatal(err)
	}
	cc, done := socketpairServer(t, srv)
	c := newTestClient(t, cc)
	c.layout = opts.DMALayout
	t.Cleanup(func() {
		cc.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("server did not stop after the client closed")
		}
		n.WaitDMA()
	})
	return &fixture{nic: n, srv: srv, c: c, done: done}
}

func qemuCapsJSON() []byte {
	return []byte(`{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true,"migration":{"pgsize":4096,"max_bitmap_size":268435456}}}`)
}

func (c *testClient) negotiate() {
	c.t.Helper()
	p := vfiouser.Version{Major: 0, Minor: 0, JSON: qemuCapsJSON()}.Append(nil)
	r := c.call(vfiouser.CmdVersion, 0, p, nil)
	if r.Flags&vfiouser.FlagError != 0 {
		c.t.Fatalf("VERSION failed: errno %d", r.Error)
	}
}

func (c *testClient) send(cmd vfiouser.Command, flags uint32, payload []byte, fds []int) uint16 {
	c.t.Helper()
	id := c.nextID
	c.nextID++
	msg := make([]byte, vfiouser.HeaderSize, vfiouser.HeaderSize+len(payload))
	msg = append(msg, payload...)
	vfiouser.Header{ID: id, Command: cmd, Size: uint32(len(msg)), Flags: flags}.Put(msg)
	c.sendRaw(msg, fds)
	return id
}

func (c *testClient) sendRaw(msg []byte, fds []int) {
	c.t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.uc.WriteMsgUnix(msg, oob, nil); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// recv reads one message; io.EOF means the server closed the connection.
func (c *testClient) recv() (reply, error) {
	hdr := make([]byte, vfiouser.HeaderSize)
	oob := make([]byte, unix.CmsgSpace(4*16))
	c.uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, oobn, _, _, err := c.uc.ReadMsgUnix(hdr, oob)
	if err != nil {
		return reply{}, err
	}
	if n == 0 {
		return reply{}, io.EOF
	}
	if n < len(hdr) {
		if _, err := io.ReadFull(c.uc, hdr[n:]); err != nil {
			return reply{}, err
		}
	}
	var fds []int
	if oobn > 0 {
		cms, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, cm := range cms {
			f, _ := unix.ParseUnixRights(&cm)
			fds = append(fds, f...)
		}
	}
	h, err := vfiouser.DecodeHeader(hdr)
	if err != nil {
		return reply{}, err
	}
	body := make([]byte, h.Size-vfiouser.HeaderSize)
	if _, err := io.ReadFull(c.uc, body); err != nil {
		return reply{}, err
	}
	return reply{Header: h, payload: body, fds: fds}, nil
}

// wait returns the reply to id, serving DMA requests meanwhile.
func (c *testClient) wait(id uint16) (reply, error) {
	for {
		r, err := c.recv()
		if err != nil {
			return r, err
		}
		if !r.IsReply() {
			c.serveDMA(r)
			continue
		}
		if r.ID != id {
			c.t.Fatalf("reply id %d, waiting for %d (%v)", r.ID, id, r.Command)
		}
		return r, nil
	}
}

func (c *testClient) call(cmd vfiouser.Command, flags uint32, payload []byte, fds []int) reply {
	c.t.Helper()
	id := c.send(cmd, flags, payload, fds)
	r, err := c.wait(id)
	if err != nil {
		c.t.Fatalf("%v: %v", cmd, err)
	}
	if r.Command != cmd {
		c.t.Fatalf("reply command %v for %v", r.Command, cmd)
	}
	return r
}

// callErr performs a call expected to fail with want.
func (c *testClient) callErr(cmd vfiouser.Command, payload []byte, fds []int, want unix.Errno) {
	c.t.Helper()
	r := c.call(cmd, 0, payload, fds)
	if r.Flags&vfiouser.FlagError == 0 || unix.Errno(r.Error) != want {
		c.t.Fatalf("%v: flags %#x errno %v, want %v", cmd, r.Flags, unix.Errno(r.Error), want)
	}
	if len(r.payload) != 0 {
		c.t.Fatalf("%v: error reply carries %d payload bytes", cmd, len(r.payload))
	}
}

func (c *testClient) serveDMA(r reply) {
	addr := binary.LittleEndian.Uint64(r.payload)
	var count uint64
	dataOff := c.layout.DataOffset()
	if c.layout == vfiouser.DMALayoutSpec {
		count = binary.LittleEndian.Uint64(r.payload[8:])
	} else {
		count = uint64(binary.LittleEndian.Uint32(r.payload[8:]))
	}
	c.remoteOps++
	out := make([]byte, vfiouser.HeaderSize)
	flags := uint32(vfiouser.FlagTypeReply)
	var errno uint32
	inWindow := addr >= c.remoteBase && addr+count <= c.remoteBase+uint64(len(c.remote))
	switch {
	case !inWindow:
		flags |= vfiouser.FlagError
		errno = uint32(unix.EFAULT)
	case r.Command == vfiouser.CmdDMAWrite:
		copy(c.remote[addr-c.remoteBase:], r.payload[dataOff:dataOff+int(count)])
		// QEMU answers DMA_WRITE with a bare header.
	case r.Command == vfiouser.CmdDMARead:
		out = vfiouser.AppendDMAAccess(out, c.layout, addr, uint32(count), c.remote[addr-c.remoteBase:addr-c.remoteBase+count])
	}
	vfiouser.Header{ID: r.ID, Command: r.Command, Size: uint32(len(out)), Flags: flags, Error: errno}.Put(out)
	c.sendRaw(out, nil)
}

// ---- helpers for common requests ----

func regionAccess(region uint32, off uint64, count uint32, data []byte) []byte {
	b := vfiouser.RegionAccess{Offset: off, Region: region, Count: count}.AppendHeader(nil)
	return append(b, data...)
}

func (c *testClient) read32(region uint32, off uint64) uint32 {
	c.t.Helper()
	r := c.call(vfiouser.CmdRegionRead, 0, regionAccess(region, off, 4, nil), nil)
	if r.Flags&vfiouser.FlagError != 0 {
		c.t.Fatalf("REGION_READ %d/%#x: errno %d", region, off, r.Error)
	}
	a, err := vfiouser.DecodeRegionAccess(r.payload, true)
	if err != nil || a.Offset != off || a.Region != region || a.Count != 4 {
		c.t.Fatalf("REGION_READ reply %+v %v", a, err)
	}
	return binary.LittleEndian.Uint32(a.Data)
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// write32 sends a posted write, as QEMU does for BARs.
func (c *testClient) write32(region uint32, off uint64, v uint32) {
	c.t.Helper()
	c.send(vfiouser.CmdRegionWrite, vfiouser.FlagNoReply, regionAccess(region, off, 4, le32(v)), nil)
}

func (c *testClient) configWrite16(off uint64, v uint16) {
	c.t.Helper()
	r := c.call(vfiouser.CmdRegionWrite, 0, regionAccess(vfiouser.RegionConfig, off, 2, binary.LittleEndian.AppendUint16(nil, v)), nil)
	if r.Flags&vfiouser.FlagError != 0 {
		c.t.Fatalf("config write: errno %d", r.Error)
	}
}

func (c *testClient) enableBusMaster() { c.configWrite16(0x04, 0x0006) }

func (c *testClient) dmaMap(iova, size uint64, flags uint32, fd int, offset uint64) reply {
	c.t.Helper()
	var fds []int
	if fd >= 0 {
		fds = []int{fd}
	}
	p := vfiouser.DMAMap{Argsz: vfiouser.DMAMapSize, Flags: flags, Offset: offset, IOVA: iova, Size: size}.Append(nil)
	return c.call(vfiouser.CmdDMAMap, 0, p, fds)
}

func (c *testClient) dmaUnmap(iova, size uint64, flags uint32) reply {
	c.t.Helper()
	p := vfiouser.DMAUnmap{Argsz: vfiouser.DMAUnmapSize, Flags: flags, IOVA: iova, Size: size}.Append(nil)
	return c.call(vfiouser.CmdDMAUnmap, 0, p, nil)
}

// diagDMA programs and starts a diagnostic DMA and polls until it finishes.
func (c *testClient) diagDMA(addr uint64, length, seed uint32) uint32 {
	c.t.Helper()
	c.write32(hw.RegBAR, hw.RegDiagDMAAddrLo, uint32(addr))
	c.write32(hw.RegBAR, hw.RegDiagDMAAddrHi, uint32(addr>>32))
	c.write32(hw.RegBAR, hw.RegDiagDMALen, length)
	c.write32(hw.RegBAR, hw.RegDiagDMASeed, seed)
	c.write32(hw.RegBAR, hw.RegDiagDMACtrl, hw.DiagDMACtrlStart)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st := c.read32(hw.RegBAR, hw.RegDiagDMAStatus)
		if st != hw.DiagDMAStatusBusy {
			return st
		}
		time.Sleep(200 * time.Microsecond)
	}
	c.t.Fatal("diagnostic DMA never finished")
	return 0
}

func memfd(t testing.TB, size int) int {
	t.Helper()
	fd, err := unix.MemfdCreate("guest-ram", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func eventfd(t testing.TB) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// eventCount reads and resets an eventfd counter (0 if nothing pending),
// waiting up to d for a signal.
func eventCount(fd int, d time.Duration) uint64 {
	deadline := time.Now().Add(d)
	var b [8]byte
	for {
		_, err := unix.Read(fd, b[:])
		if err == nil {
			return binary.LittleEndian.Uint64(b[:])
		}
		if !errors.Is(err, unix.EAGAIN) || time.Now().After(deadline) {
			return 0
		}
		time.Sleep(time.Millisecond)
	}
}

// listenServer runs Serve on a socket in a temp dir.
func listenServer(t testing.TB) (string, *npfnic.NIC, context.CancelFunc, <-chan error) {
	t.Helper()
	return listenServerOpts(t, vfiouser.Options{})
}

// listenServerOpts is listenServer with server options.
func listenServerOpts(t testing.TB, opts vfiouser.Options) (string, *npfnic.NIC, context.CancelFunc, <-chan error) {
	t.Helper()
	n, err := npfnic.New(npfnic.Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "npfnic.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		srv, err := vfiouser.NewServer(n, opts)
		if err != nil {
			done <- err
			return
		}
		l, err := vfiouser.Listen(path)
		once.Do(func() { close(ready) })
		if err != nil {
			done <- err
			return
		}
		defer l.Close()
		done <- srv.Serve(ctx, l)
	}()
	<-ready
	t.Cleanup(func() {
		cancel()
		<-done
		n.WaitDMA()
	})
	return path, n, cancel, done
}

func dial(t testing.TB, path string) *testClient {
	t.Helper()
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	return newTestClient(t, uc)
}
