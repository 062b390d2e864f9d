package ci

// The hostile-client table: `npfnic serve` runs as its own process and is
// attacked over its socket by a vfio-user client written here from the
// specification (QEMU's docs/interop/vfio-user.rst), with its own framing
// and encoders, so a mistake shared with the server's codec cannot hide. No
// VM is needed. After every case the process must be alive, a fresh client
// must negotiate and read the device's IDs from config space, and the
// server's descriptor count must be back where it was.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/internal/testbed/child"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// vfio-user wire constants, from the specification.
const (
	vuHeaderSize = 16

	vuVersion       = 1
	vuDMAMap        = 2
	vuDMAUnmap      = 3
	vuGetInfo       = 4
	vuSetIRQs       = 8
	vuRegionRead    = 9
	vuRegionWrite   = 10
	vuDMARead       = 11
	vuDeviceReset   = 13
	vuRegionWriteMu = 15

	vuTypeReply = 0x1
	vuNoReply   = 1 << 4
	vuError     = 1 << 5

	vuConfigRegion = 7 // VFIO_PCI_CONFIG_REGION_INDEX
	vuIRQMSIX      = 2 // VFIO_PCI_MSIX_IRQ_INDEX

	vuIRQDataNone    = 1 << 0
	vuIRQDataEventfd = 1 << 2
	vuIRQTrigger     = 1 << 5

	// Timeouts the server under test runs with (short, so stalls resolve
	// quickly).
	hostileHandshake = time.Second
	hostileStall     = time.Second
	hostileHandover  = 3 * time.Second
)

// vuMsg is one received message.
type vuMsg struct {
	id, cmd       uint16
	size, flags   uint32
	errno         uint32
	payload       []byte
	fds           []int
	isReply, fail bool
}

// hostileClient speaks raw vfio-user.
type hostileClient struct {
	t  *testing.T
	uc *net.UnixConn
	id uint16
}

func dialHostile(t *testing.T, path string) *hostileClient {
	t.Helper()
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c := &hostileClient{t: t, uc: uc, id: 1}
	t.Cleanup(func() { uc.Close() })
	return c
}

func vuHeader(id, cmd uint16, size, flags uint32) []byte {
	b := binary.LittleEndian.AppendUint16(nil, id)
	b = binary.LittleEndian.AppendUint16(b, cmd)
	b = binary.LittleEndian.AppendUint32(b, size)
	b = binary.LittleEndian.AppendUint32(b, flags)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// frame builds a whole command message.
func (c *hostileClient) frame(cmd uint16, flags uint32, payload []byte) (uint16, []byte) {
	id := c.id
	c.id++
	return id, append(vuHeader(id, cmd, uint32(vuHeaderSize+len(payload)), flags), payload...)
}

// raw writes b with fds attached; errors (the server may have closed
// already) are returned, not fatal.
func (c *hostileClient) raw(b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.uc.WriteMsgUnix(b, oob, nil)
	return err
}

// recv reads one message within d.
func (c *hostileClient) recv(d time.Duration) (vuMsg, error) {
	c.uc.SetReadDeadline(time.Now().Add(d))
	hdr := make([]byte, vuHeaderSize)
	oob := make([]byte, unix.CmsgSpace(4*16))
	n, oobn, _, _, err := c.uc.ReadMsgUnix(hdr, oob)
	if err != nil {
		return vuMsg{}, err
	}
	if n == 0 {
		return vuMsg{}, io.EOF
	}
	var m vuMsg
	if oobn > 0 {
		cms, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, cm := range cms {
			f, _ := unix.ParseUnixRights(&cm)
			m.fds = append(m.fds, f...)
		}
		for _, fd := range m.fds {
			unix.Close(fd) // only the region info of mmap-able BARs carries one
		}
	}
	if _, err := io.ReadFull(c.uc, hdr[n:]); err != nil {
		return vuMsg{}, err
	}
	m.id = binary.LittleEndian.Uint16(hdr[0:])
	m.cmd = binary.LittleEndian.Uint16(hdr[2:])
	m.size = binary.LittleEndian.Uint32(hdr[4:])
	m.flags = binary.LittleEndian.Uint32(hdr[8:])
	m.errno = binary.LittleEndian.Uint32(hdr[12:])
	if m.size < vuHeaderSize || m.size > 2<<20 {
		return m, fmt.Errorf("server sent a message of %d bytes", m.size)
	}
	m.payload = make([]byte, m.size-vuHeaderSize)
	if _, err := io.ReadFull(c.uc, m.payload); err != nil {
		return m, err
	}
	m.isReply = m.flags&0xf == vuTypeReply
	m.fail = m.flags&vuError != 0
	return m, nil
}

// wait returns the reply to id; server-initiated DMA requests are refused.
func (c *hostileClient) wait(id uint16) (vuMsg, error) {
	for {
		m, err := c.recv(10 * time.Second)
		if err != nil {
			return m, err
		}
		if !m.isReply {
			// This client maps no fd-less memory the device could use.
			reply := vuHeader(m.id, m.cmd, vuHeaderSize, vuTypeReply|vuError)
			binary.LittleEndian.PutUint32(reply[12:], uint32(unix.EFAULT))
			_ = c.raw(reply, nil)
			continue
		}
		if m.id != id {
			return m, fmt.Errorf("reply id %d (cmd %d, errno %d) while waiting for %d", m.id, m.cmd, m.errno, id)
		}
		return m, nil
	}
}

func (c *hostileClient) call(cmd uint16, payload []byte, fds []int) (vuMsg, error) {
	id, b := c.frame(cmd, 0, payload)
	if err := c.raw(b, fds); err != nil {
		return vuMsg{}, err
	}
	return c.wait(id)
}

// must performs a call that must succeed.
func (c *hostileClient) must(cmd uint16, payload []byte, fds []int) vuMsg {
	c.t.Helper()
	m, err := c.call(cmd, payload, fds)
	if err != nil {
		c.t.Fatalf("command %d: %v", cmd, err)
	}
	if m.fail {
		c.t.Fatalf("command %d failed: errno %v", cmd, unix.Errno(m.errno))
	}
	return m
}

// refused performs a call that must fail with want, on a connection that
// stays usable.
func (c *hostileClient) refused(cmd uint16, payload []byte, fds []int, want unix.Errno) {
	c.t.Helper()
	m, err := c.call(cmd, payload, fds)
	if err != nil {
		c.t.Fatalf("command %d: %v (want errno %v)", cmd, err, want)
	}
	if !m.fail || unix.Errno(m.errno) != want || len(m.payload) != 0 {
		c.t.Fatalf("command %d: flags %#x errno %v, %d payload bytes; want error %v", cmd, m.flags, unix.Errno(m.errno), len(m.payload), want)
	}
}

// closed checks the server closes the connection, after an optional error
// reply.
func (c *hostileClient) closed() {
	c.t.Helper()
	for i := 0; i < 4; i++ {
		_, err := c.recv(10 * time.Second)
		if errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET) {
			return
		}
		if err != nil {
			c.t.Fatalf("connection not closed: %v", err)
		}
	}
	c.t.Fatal("connection not closed")
}

const qemuCaps = `{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true}}`

func versionPayload(major, minor uint16, json string) []byte {
	b := binary.LittleEndian.AppendUint16(nil, major)
	b = binary.LittleEndian.AppendUint16(b, minor)
	if json != "" {
		b = append(append(b, json...), 0)
	}
	return b
}

func (c *hostileClient) negotiate() {
	c.t.Helper()
	c.must(vuVersion, versionPayload(0, 0, qemuCaps), nil)
}

func regionAccessPayload(region uint32, off uint64, count uint32, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, off)
	b = binary.LittleEndian.AppendUint32(b, region)
	b = binary.LittleEndian.AppendUint32(b, count)
	return append(b, data...)
}

func (c *hostileClient) read32(region uint32, off uint64) uint32 {
	c.t.Helper()
	m := c.must(vuRegionRead, regionAccessPayload(region, off, 4, nil), nil)
	if len(m.payload) != 20 {
		c.t.Fatalf("REGION_READ reply of %d bytes", len(m.payload))
	}
	return binary.LittleEndian.Uint32(m.payload[16:])
}

func (c *hostileClient) write32(region uint32, off uint64, v uint32) {
	c.t.Helper()
	c.must(vuRegionWrite, regionAccessPayload(region, off, 4, binary.LittleEndian.AppendUint32(nil, v)), nil)
}

func (c *hostileClient) busMaster() {
	c.t.Helper()
	c.must(vuRegionWrite, regionAccessPayload(vuConfigRegion, 4, 2, []byte{6, 0}), nil)
}

func dmaMapPayload(flags uint32, offset, iova, size uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 32)
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = binary.LittleEndian.AppendUint64(b, offset)
	b = binary.LittleEndian.AppendUint64(b, iova)
	return binary.LittleEndian.AppendUint64(b, size)
}

func dmaUnmapPayload(flags uint32, iova, size uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 24)
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = binary.LittleEndian.AppendUint64(b, iova)
	return binary.LittleEndian.AppendUint64(b, size)
}

func setIRQsPayload(flags, index, start, count uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 20)
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = binary.LittleEndian.AppendUint32(b, index)
	b = binary.LittleEndian.AppendUint32(b, start)
	return binary.LittleEndian.AppendUint32(b, count)
}

// diagDMA starts a diagnostic DMA and waits for its final status.
func (c *hostileClient) diagDMA(addr uint64, length uint32) uint32 {
	c.t.Helper()
	c.write32(hw.RegBAR, hw.RegDiagDMAAddrLo, uint32(addr))
	c.write32(hw.RegBAR, hw.RegDiagDMAAddrHi, uint32(addr>>32))
	c.write32(hw.RegBAR, hw.RegDiagDMALen, length)
	c.write32(hw.RegBAR, hw.RegDiagDMASeed, 7)
	c.write32(hw.RegBAR, hw.RegDiagDMACtrl, hw.DiagDMACtrlStart)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if st := c.read32(hw.RegBAR, hw.RegDiagDMAStatus); st != hw.DiagDMAStatusBusy {
			return st
		}
		time.Sleep(time.Millisecond)
	}
	c.t.Fatal("diagnostic DMA never finished")
	return 0
}

// Descriptors of every kind the attacks hand over; each closed with the test.

func hostileMemfd(t *testing.T, size int64) int {
	t.Helper()
	fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func hostilePipe(t *testing.T) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0], p[1]
}

func hostileSocket(t *testing.T) int {
	t.Helper()
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0]
}

func hostileDir(t *testing.T) int {
	t.Helper()
	fd, err := unix.Open(t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// hostileEventfd returns a blocking eventfd, optionally filled to its
// maximum count (one more write would block).
func hostileEventfd(t *testing.T, full bool) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if full {
		if _, err := unix.Write(fd, binary.LittleEndian.AppendUint64(nil, 1<<64-2)); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// npfnicServer is `npfnic serve` in its own process group, killed with the
// test (and by the kernel if the test binary dies first).
type npfnicServer struct {
	cmd    *exec.Cmd
	socket string
	log    bytes.Buffer
}

func startNpfnicServe(t *testing.T) *npfnicServer {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "npfnic")
	build := exec.Command("go", "build", "-o", bin, "github.com/npfnic/npfnic/cmd/npfnic")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s := &npfnicServer{socket: filepath.Join(dir, "npfnic.sock")}
	s.cmd = exec.Command(bin, "serve", "--socket", s.socket, "--log-level", "warn",
		"--handshake-timeout", hostileHandshake.String(), "--stall-timeout", hostileStall.String(),
		"--handover-timeout", hostileHandover.String())
	s.cmd.Stdout = &s.log
	s.cmd.Stderr = &s.log
	if err := child.Start(s.cmd, syscall.SIGKILL, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		_ = s.cmd.Wait()
		if t.Failed() {
			t.Logf("npfnic serve log:\n%s", s.log.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := os.Stat(s.socket); err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("npfnic serve did not create its socket; log:\n%s", s.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *npfnicServer) alive() bool {
	var ws unix.WaitStatus
	pid, err := unix.Wait4(s.cmd.Process.Pid, &ws, unix.WNOHANG, nil)
	return err == nil && pid == 0
}

func (s *npfnicServer) fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/fd")
	if err != nil {
		t.Fatalf("server fds: %v", err)
	}
	return len(ents)
}

// healthy checks what every case must leave behind: a live process that
// serves a fresh client, and no descriptor left over.
func (s *npfnicServer) healthy(t *testing.T, baseFDs int) {
	t.Helper()
	if !s.alive() {
		t.Fatalf("npfnic serve died; log:\n%s", s.log.String())
	}
	c := dialHostile(t, s.socket)
	c.negotiate()
	ids := c.read32(vuConfigRegion, 0)
	if uint16(ids) != hw.VendorID || uint16(ids>>16) != hw.DeviceID {
		t.Fatalf("config space vendor/device %#08x", ids)
	}
	c.uc.Close()
	// Teardown of the sessions runs after the sockets close: give it time.
	var n int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n = s.fdCount(t); n <= baseFDs {
			return
		}
	}
	t.Fatalf("server holds %d descriptors, %d before the case", n, baseFDs)
}

func TestHostileClients(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs npfnic serve")
	}
	srv := startNpfnicServe(t)
	path := srv.socket
	// One healthy round first, so everything the server opens lazily is
	// open before the baseline is taken.
	srv.healthy(t, 1<<20)
	baseFDs := srv.fdCount(t)

	hdrOnly := func(c *hostileClient, cmd uint16, size, flags uint32) []byte {
		id := c.id
		c.id++
		return vuHeader(id, cmd, size, flags)
	}
	for _, tc := range []struct {
		name   string
		attack func(t *testing.T, c *hostileClient)
	}{
		// ---- framing ----
		{"short header then close", func(t *testing.T, c *hostileClient) {
			c.raw(hdrOnly(c, vuGetInfo, 32, 0)[:10], nil)
			c.uc.CloseWrite()
			c.closed()
		}},
		{"size below header", func(t *testing.T, c *hostileClient) {
			c.raw(hdrOnly(c, vuVersion, 8, 0), nil)
			c.closed()
		}},
		{"absurd size", func(t *testing.T, c *hostileClient) {
			c.raw(hdrOnly(c, vuVersion, 0xffffffff, 0), nil)
			c.closed()
		}},
		{"bad flags", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			id := c.id
			c.raw(hdrOnly(c, vuGetInfo, vuHeaderSize, 0x7|0xff00), nil)
			if m, err := c.wait(id); err != nil || !m.fail {
				t.Fatalf("bad type: %v %+v", err, m)
			}
			c.read32(vuConfigRegion, 0)
		}},
		{"unknown command", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			c.refused(0x7fff, nil, nil, unix.ENOTSUP)
			c.refused(vuDMARead, make([]byte, 16), nil, unix.EINVAL)
		}},
		{"command before VERSION", func(t *testing.T, c *hostileClient) {
			c.refused(vuGetInfo, make([]byte, 16), nil, unix.EINVAL)
		}},
		{"unsolicited replies", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			for _, cmd := range []uint16{vuGetInfo, vuDMARead, 0x7fff} {
				c.raw(vuHeader(500, cmd, vuHeaderSize, vuTypeReply), nil)
				c.raw(vuHeader(501, cmd, vuHeaderSize, vuTypeReply|vuError), nil)
			}
			c.read32(vuConfigRegion, 0) // wait fails on any stray reply
		}},
		{"disconnect mid-message", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			_, b := c.frame(vuRegionWrite, 0, regionAccessPayload(hw.RegBAR, hw.RegScratch, 4, []byte{1, 2, 3, 4}))
			c.raw(b[:len(b)-3], nil)
			c.uc.Close()
		}},
		{"stall before VERSION", func(t *testing.T, c *hostileClient) {
			c.raw(vuHeader(1, vuVersion, 64, 0)[:9], nil)
			start := time.Now()
			c.closed()
			if d := time.Since(start); d > hostileHandshake+2*time.Second {
				t.Fatalf("stalled client held the device for %v", d)
			}
		}},
		{"stall mid-message after VERSION", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			_, b := c.frame(vuGetInfo, 0, make([]byte, 16))
			c.raw(b[:20], nil)
			c.closed()
		}},
		{"second client while one is active", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			c2 := dialHostile(t, path)
			id, b := c2.frame(vuVersion, 0, versionPayload(0, 0, qemuCaps))
			c2.raw(b, nil)
			// c keeps the device; c2 waits, then is turned away.
			c.read32(vuConfigRegion, 0)
			if m, err := c2.wait(id); err == nil {
				t.Fatalf("second client served concurrently: %+v", m)
			}
			c.read32(vuConfigRegion, 0)
		}},

		// ---- VERSION ----
		{"bad VERSION JSON", func(t *testing.T, c *hostileClient) {
			c.refused(vuVersion, versionPayload(0, 0, `{"capabilities":`), nil, unix.EINVAL)
			c.closed()
		}},
		{"VERSION JSON nested deep", func(t *testing.T, c *hostileClient) {
			c.refused(vuVersion, versionPayload(0, 0, strings.Repeat("[", 100000)), nil, unix.EINVAL)
			c.closed()
		}},
		{"VERSION wrong types", func(t *testing.T, c *hostileClient) {
			c.refused(vuVersion, versionPayload(0, 0, `{"capabilities":{"max_msg_fds":"many"}}`), nil, unix.EINVAL)
			c.closed()
		}},
		{"VERSION absurd capabilities", func(t *testing.T, c *hostileClient) {
			m := c.must(vuVersion, versionPayload(0, 0, `{"capabilities":{"max_msg_fds":4294967296000,"max_data_xfer_size":18446744073709551615,"max_dma_maps":18446744073709551615,"pgsizes":18446744073709551615,"write_multiple":true,"twin_socket":{"supported":true},"migration":[1,2]}}`), nil)
			if bytes.Contains(m.payload, []byte("twin_socket")) || bytes.Contains(m.payload, []byte("migration")) {
				t.Fatalf("server granted what it does not implement: %s", m.payload[4:])
			}
			c.read32(vuConfigRegion, 0)
		}},
		{"VERSION no 4k pages", func(t *testing.T, c *hostileClient) {
			c.refused(vuVersion, versionPayload(0, 0, `{"capabilities":{"pgsizes":0}}`), nil, unix.ENOTSUP)
			c.closed()
		}},
		{"VERSION major 9", func(t *testing.T, c *hostileClient) {
			c.refused(vuVersion, versionPayload(9, 0, ""), nil, unix.ENOTSUP)
			c.closed()
		}},
		{"VERSION twice", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			c.refused(vuVersion, versionPayload(0, 0, qemuCaps), nil, unix.EINVAL)
		}},
		{"REGION_WRITE_MULTI not negotiated", func(t *testing.T, c *hostileClient) {
			c.must(vuVersion, versionPayload(0, 0, `{"capabilities":{"max_msg_fds":16}}`), nil)
			p := binary.LittleEndian.AppendUint64(nil, 1)
			p = append(p, regionAccessPayload(hw.RegBAR, hw.RegScratch, 4, make([]byte, 8))...)
			c.refused(vuRegionWriteMu, p, nil, unix.ENOTSUP)
		}},

		// ---- DMA_MAP / DMA_UNMAP ----
		{"DMA_MAP edge cases", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			ram := hostileMemfd(t, 1<<20)
			c.must(vuDMAMap, dmaMapPayload(3, 0, 0x100000, 1<<20), []int{ram})
			c.must(vuDMAMap, dmaMapPayload(3, 0, 0x400000, 0x1000), nil) // no fd: reached by DMA_READ/WRITE
			pr, _ := hostilePipe(t)
			for _, bad := range []struct {
				name    string
				payload []byte
				fds     []int
				want    unix.Errno
			}{
				{"overlap", dmaMapPayload(3, 0, 0x180000, 0x1000), []int{ram}, unix.EEXIST},
				{"overlap without fd", dmaMapPayload(3, 0, 0x3ff000, 0x2000), nil, unix.EEXIST},
				{"wraps", dmaMapPayload(3, 0, ^uint64(0)-0xfff, 0x2000), nil, unix.EINVAL},
				{"file offset wraps", dmaMapPayload(3, ^uint64(0)-0xfff, 0x800000, 0x2000), []int{ram}, unix.EINVAL},
				{"zero size", dmaMapPayload(3, 0, 0x800000, 0), nil, unix.EINVAL},
				{"unknown flags", dmaMapPayload(0xff, 0, 0x800000, 0x1000), nil, unix.EINVAL},
				{"pipe", dmaMapPayload(3, 0, 0x800000, 0x1000), []int{pr}, unix.EINVAL},
				{"socket", dmaMapPayload(3, 0, 0x800000, 0x1000), []int{hostileSocket(t)}, unix.EINVAL},
				{"directory", dmaMapPayload(3, 0, 0x800000, 0x1000), []int{hostileDir(t)}, unix.EINVAL},
				{"eventfd", dmaMapPayload(3, 0, 0x800000, 0x1000), []int{hostileEventfd(t, false)}, unix.EINVAL},
				{"fd smaller than the map", dmaMapPayload(3, 0, 0x800000, 0x2000), []int{hostileMemfd(t, 0x1000)}, unix.EINVAL},
				{"offset past the file", dmaMapPayload(3, 1<<20, 0x800000, 0x1000), []int{ram}, unix.EINVAL},
				{"beyond the address space", dmaMapPayload(3, 0, 1<<50, 1<<48), []int{hostileMemfd(t, 1<<48)}, unix.ENOMEM},
				{"two fds", dmaMapPayload(3, 0, 0x800000, 0x1000), []int{ram, ram}, unix.EINVAL},
				{"short", dmaMapPayload(3, 0, 0x800000, 0x1000)[:20], nil, unix.EINVAL},
				{"unmap partial", nil, nil, 0},
			} {
				if bad.payload == nil {
					c.refused(vuDMAUnmap, dmaUnmapPayload(0, 0x100000, 0x1000), nil, unix.ENOENT)
					c.refused(vuDMAUnmap, dmaUnmapPayload(0, ^uint64(0)-0xfff, 0x2000), nil, unix.ENOENT)
					c.refused(vuDMAUnmap, dmaUnmapPayload(0x1, 0x100000, 1<<20), nil, unix.ENOTSUP)
					c.refused(vuDMAUnmap, dmaUnmapPayload(0x2, 0x100000, 1<<20), nil, unix.EINVAL)
					continue
				}
				t.Logf("%s", bad.name)
				c.refused(vuDMAMap, bad.payload, bad.fds, bad.want)
			}
			c.busMaster()
			if st := c.diagDMA(0x100000, 4096); st != hw.DiagDMAStatusDone {
				t.Fatalf("DMA after the refused maps: status %d", st)
			}
			c.must(vuDMAUnmap, dmaUnmapPayload(0, 0x100000, 1<<20), nil)
			c.must(vuDMAUnmap, dmaUnmapPayload(2, 0, 0), nil)
		}},
		{"memfd shrunk under a map while the device DMAs", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			ram := hostileMemfd(t, 1<<20)
			c.must(vuDMAMap, dmaMapPayload(3, 0, 0x100000, 1<<20), []int{ram})
			c.busMaster()
			if err := unix.Ftruncate(ram, 4096); err != nil {
				t.Fatal(err)
			}
			if st := c.diagDMA(0x100000+8192, 4096); st != hw.DiagDMAStatusFault {
				t.Fatalf("DMA past the end of the shrunk file: status %d", st)
			}
			if st := c.diagDMA(0x100000, 4096); st != hw.DiagDMAStatusDone {
				t.Fatalf("DMA inside what is left: status %d", st)
			}
		}},
		{"more fds than allowed", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			fds := make([]int, 40)
			for i := range fds {
				fds[i] = hostileEventfd(t, false)
			}
			_, b := c.frame(vuDMAMap, 0, dmaMapPayload(3, 0, 0x100000, 0x1000))
			if err := c.raw(b, fds); err != nil {
				return // the kernel refused to send that many
			}
			c.closed()
		}},
		{"fds on messages that take none", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			efd := hostileEventfd(t, false)
			c.refused(vuGetInfo, append(binary.LittleEndian.AppendUint32(nil, 16), make([]byte, 12)...), []int{efd}, unix.EINVAL)
			c.refused(vuRegionRead, regionAccessPayload(vuConfigRegion, 0, 4, nil), []int{efd}, unix.EINVAL)
			c.refused(vuDMAUnmap, dmaUnmapPayload(0, 0x100000, 0x1000), []int{efd}, unix.EINVAL)
			c.refused(vuDeviceReset, nil, []int{efd, efd}, unix.EINVAL)
			c.read32(vuConfigRegion, 0)
		}},
		{"fd with the tail of one message and the next", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			ram := hostileMemfd(t, 0x1000)
			idA, a := c.frame(vuRegionRead, 0, regionAccessPayload(vuConfigRegion, 0, 4, nil))
			idB, b := c.frame(vuDMAMap, 0, dmaMapPayload(3, 0, 0x100000, 0x1000))
			c.raw(a[:20], nil)
			time.Sleep(50 * time.Millisecond)
			c.raw(append(append([]byte(nil), a[20:]...), b...), []int{ram})
			if m, err := c.wait(idA); err != nil || !m.fail {
				t.Fatalf("REGION_READ that carried the descriptor: %v %+v", err, m)
			}
			// The map arrived without a descriptor: a DMA into it goes to
			// the client (which refuses), never into the memfd.
			if m, err := c.wait(idB); err != nil || m.fail {
				t.Fatalf("DMA_MAP: %v %+v", err, m)
			}
			c.busMaster()
			if st := c.diagDMA(0x100000, 64); st != hw.DiagDMAStatusFault {
				t.Fatalf("the descriptor slid to the next message: DMA status %d", st)
			}
		}},

		// ---- region accesses ----
		{"region accesses out of range", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			for _, p := range [][]byte{
				regionAccessPayload(vuConfigRegion, 4096, 4, nil),
				regionAccessPayload(vuConfigRegion, 4094, 4, nil),
				regionAccessPayload(vuConfigRegion, ^uint64(0)-1, 4, nil),
				regionAccessPayload(hw.RegBAR, ^uint64(0)-3, 8, nil),
				regionAccessPayload(99, 0, 4, nil),
				regionAccessPayload(0xffffffff, 0, 4, nil),
			} {
				c.refused(vuRegionRead, p, nil, unix.EINVAL)
			}
			c.refused(vuRegionRead, regionAccessPayload(hw.RegBAR, 0, 0xffffffff, nil), nil, unix.E2BIG)
			c.refused(vuRegionRead, regionAccessPayload(hw.RegBAR, 0, 4, nil)[:12], nil, unix.EINVAL)
			c.refused(vuRegionWrite, regionAccessPayload(hw.RegBAR, ^uint64(0)-1, 4, []byte{1, 2, 3, 4}), nil, unix.EINVAL)
			c.refused(vuRegionWrite, regionAccessPayload(hw.RegBAR, 0, 8, []byte{1, 2}), nil, unix.EINVAL)
			c.read32(vuConfigRegion, 0)
		}},

		// ---- SET_IRQS ----
		{"SET_IRQS counts and kinds", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			trig := uint32(vuIRQDataEventfd | vuIRQTrigger)
			_, pw := hostilePipe(t)
			c.refused(vuSetIRQs, setIRQsPayload(trig, vuIRQMSIX, 0, 2), []int{hostileEventfd(t, false)}, unix.EINVAL)
			c.refused(vuSetIRQs, setIRQsPayload(trig, vuIRQMSIX, 0, 1), []int{hostileEventfd(t, false), hostileEventfd(t, false)}, unix.EINVAL)
			c.refused(vuSetIRQs, setIRQsPayload(trig, vuIRQMSIX, 0xfffffffe, 4), nil, unix.EINVAL)
			c.refused(vuSetIRQs, setIRQsPayload(trig, 77, 0, 1), []int{hostileEventfd(t, false)}, unix.EINVAL)
			c.refused(vuSetIRQs, setIRQsPayload(trig, vuIRQMSIX, 0, 1), []int{pw}, unix.EINVAL)
			c.refused(vuSetIRQs, setIRQsPayload(trig, vuIRQMSIX, 0, 1), []int{hostileSocket(t)}, unix.EINVAL)
			c.refused(vuSetIRQs, setIRQsPayload(trig, vuIRQMSIX, 0, 1), []int{hostileMemfd(t, 8)}, unix.EINVAL)
			c.refused(vuSetIRQs, setIRQsPayload(vuIRQDataNone|trig, vuIRQMSIX, 0, 1), nil, unix.EINVAL)
		}},
		{"SET_IRQS eventfd at its maximum", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			full := hostileEventfd(t, true)
			c.must(vuSetIRQs, setIRQsPayload(vuIRQDataEventfd|vuIRQTrigger, vuIRQMSIX, 0, 1), []int{full})
			for i := 0; i < 50; i++ {
				_, b := c.frame(vuRegionWrite, vuNoReply, regionAccessPayload(hw.RegBAR, hw.RegDiagIRQ, 4, make([]byte, 4)))
				c.raw(b, nil)
			}
			c.read32(vuConfigRegion, 0) // answered: the triggers did not block
		}},

		// ---- reconnects and resets ----
		{"50 rapid reconnects", func(t *testing.T, c *hostileClient) {
			c.uc.Close()
			for i := 0; i < 50; i++ {
				r := dialHostile(t, path)
				id, b := r.frame(vuVersion, 0, versionPayload(0, 0, qemuCaps))
				if err := r.raw(b, nil); err != nil {
					t.Fatalf("reconnect %d: %v", i, err)
				}
				if m, err := r.wait(id); err != nil || m.fail {
					t.Fatalf("reconnect %d refused: %v %+v", i, err, m)
				}
				r.read32(vuConfigRegion, 0)
				r.uc.Close()
			}
		}},
		{"DEVICE_RESET in a loop while the device DMAs", func(t *testing.T, c *hostileClient) {
			c.negotiate()
			ram := hostileMemfd(t, 1<<20)
			c.must(vuDMAMap, dmaMapPayload(3, 0, 0x100000, 1<<20), []int{ram})
			for i := 0; i < 30; i++ {
				c.busMaster()
				c.write32(hw.RegBAR, hw.RegDiagDMAAddrLo, 0x100000)
				c.write32(hw.RegBAR, hw.RegDiagDMAAddrHi, 0)
				c.write32(hw.RegBAR, hw.RegDiagDMALen, 1<<20)
				c.write32(hw.RegBAR, hw.RegDiagDMACtrl, hw.DiagDMACtrlStart)
				c.must(vuDeviceReset, nil, nil)
				if i%10 == 9 {
					c.must(vuDMAUnmap, dmaUnmapPayload(0, 0x100000, 1<<20), nil)
					c.must(vuDMAMap, dmaMapPayload(3, 0, 0x100000, 1<<20), []int{ram})
				}
			}
			c.read32(vuConfigRegion, 0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialHostile(t, path)
			tc.attack(t, c)
			c.uc.Close()
			srv.healthy(t, baseFDs)
		})
	}
}
