package vdevice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/vdevice/guestmem"
)

// Options tune a Server. The zero value is what QEMU needs.
type Options struct {
	Logger *slog.Logger
	// DMALayout selects the DMA_READ/DMA_WRITE wire layout (see DMALayout).
	DMALayout DMALayout
	// MaxDataXfer is the largest REGION/DMA data count this server accepts
	// (its max_data_xfer_size). Default DefaultMaxDataXfer.
	MaxDataXfer uint32
	// DMATimeout bounds the wait for a DMA_READ/DMA_WRITE reply. Default 5 s,
	// QEMU's own reply timeout.
	DMATimeout time.Duration
}

// Server serves one Device to one client at a time.
type Server struct {
	dev  Device
	info Info
	opts Options
	log  *slog.Logger
	mem  *guestmem.Memory
	irq  *irqState

	active atomic.Bool
	sess   atomic.Pointer[session]
}

// NewServer checks the device's layout and attaches it.
func NewServer(dev Device, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxDataXfer == 0 {
		opts.MaxDataXfer = DefaultMaxDataXfer
	}
	if opts.DMATimeout == 0 {
		opts.DMATimeout = 5 * time.Second
	}
	info := dev.Info()
	if len(info.Regions) < NumPCIRegions {
		return nil, fmt.Errorf("vdevice: a PCI device needs at least %d regions, got %d", NumPCIRegions, len(info.Regions))
	}
	if len(info.IRQs) < 3 {
		return nil, fmt.Errorf("vdevice: a PCI device needs at least 3 IRQ indexes, got %d", len(info.IRQs))
	}
	if info.Regions[RegionConfig].Size == 0 {
		return nil, errors.New("vdevice: config region has size 0")
	}
	s := &Server{
		dev:  dev,
		info: info,
		opts: opts,
		log:  opts.Logger,
		mem:  guestmem.New(),
		irq:  newIRQState(info.IRQs),
	}
	s.mem.SetRemote(remoteAccessor{s})
	dev.Attach(Host{IRQ: s.irq, Mem: s.mem, Log: s.log})
	return s, nil
}

// Memory returns the guest memory table shared with the device.
func (s *Server) Memory() *guestmem.Memory { return s.mem }

// Interrupts returns the interrupt delivery shared with the device.
func (s *Server) Interrupts() Interrupts { return s.irq }

func (s *Server) maxMsg() int {
	return HeaderSize + RegionAccessSize + int(s.opts.MaxDataXfer) + maxOverhead
}

// Serve accepts clients on l and serves them one after another until ctx is
// cancelled (then it returns nil) or accepting fails. A client that connects
// while another is being served is told so by an immediate close.
func (s *Server) Serve(ctx context.Context, l *net.UnixListener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("vdevice: accept: %w", err)
		}
		if !s.active.CompareAndSwap(false, true) {
			s.log.Warn("rejecting client: another client is connected")
			uc.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.active.Store(false)
			if err := s.serveConn(ctx, uc); err != nil {
				s.log.Warn("client connection ended with error", "err", err)
			}
		}()
	}
}

// ServeConn serves one already-connected client until it disconnects or ctx
// is cancelled. It returns nil on an orderly disconnect.
func (s *Server) ServeConn(ctx context.Context, uc *net.UnixConn) error {
	if !s.active.CompareAndSwap(false, true) {
		uc.Close()
		return errors.New("vdevice: another client is connected")
	}
	defer s.active.Store(false)
	return s.serveConn(ctx, uc)
}

func (s *Server) serveConn(ctx context.Context, uc *net.UnixConn) error {
	c, err := newConn(uc, s.maxMsg())
	if err != nil {
		uc.Close()
		return err
	}
	sess := &session{
		s:             s,
		c:             c,
		log:           s.log,
		clientMaxXfer: DefaultMaxDataXfer,
		pending:       map[uint16]*dmaCall{},
		done:          make(chan struct{}),
		reply:         make([]byte, 0, 4096),
	}
	s.sess.Store(sess)
	stop := context.AfterFunc(ctx, func() { uc.Close() })
	s.log.Info("client connected")
	err = sess.loop()
	stop()
	s.sess.Store(nil)
	sess.teardown()
	switch {
	case err == nil || errors.Is(err, io.EOF):
		s.log.Info("client disconnected")
		return nil
	case ctx.Err() != nil:
		s.log.Info("client connection closed: server shutting down")
		return nil
	}
	s.log.Info("client connection closed", "err", err)
	return err
}

// dmaCall is one server-initiated DMA_READ/DMA_WRITE waiting for its reply.
type dmaCall struct {
	cmd  Command
	buf  []byte // DMA_READ destination
	err  error
	done chan struct{}
}

type session struct {
	s   *Server
	c   *conn
	log *slog.Logger

	negotiated    bool
	clientMaxXfer uint64
	reply         []byte

	pmu     sync.Mutex
	pending map[uint16]*dmaCall
	nextID  uint16
	closed  bool
	done    chan struct{}
}

func (ss *session) teardown() {
	ss.pmu.Lock()
	ss.closed = true
	for id, call := range ss.pending {
		call.err = unix.ENOTCONN
		close(call.done)
		delete(ss.pending, id)
	}
	ss.pmu.Unlock()
	close(ss.done)
	ss.c.close()
	// Spec, "Client Disconnection": unmap all client memory, close the IRQ
	// descriptors, keep the device state.
	ss.s.mem.UnmapAll()
	ss.s.irq.closeAll()
	if d, ok := ss.s.dev.(Disconnecter); ok {
		d.ClientDisconnected()
	}
}

func (ss *session) loop() error {
	for {
		h, frame, fds, err := ss.c.readMsg()
		if err != nil {
			if errors.Is(err, ErrBadSize) || errors.Is(err, errTooBig) {
				// The stream can no longer be framed: answer this message
				// (its ID is known) and close.
				ss.log.Warn("dropping client: unframeable message", "cmd", h.Command, "size", h.Size, "err", err)
				e := unix.EINVAL
				if errors.Is(err, errTooBig) {
					e = unix.E2BIG
				}
				if h.Flags&FlagNoReply == 0 && !h.IsReply() {
					_ = ss.sendError(h, e)
				}
			}
			return err
		}
		if err := ss.dispatch(h, frame[HeaderSize:], fds); err != nil {
			return err
		}
	}
}

// dispatch handles one frame. A returned error closes the connection.
func (ss *session) dispatch(h Header, p []byte, fds []int) error {
	switch h.Flags & FlagTypeMask {
	case FlagTypeReply:
		closeFDs(fds)
		if h.Command == CmdDMARead || h.Command == CmdDMAWrite {
			ss.complete(h, p)
			return nil
		}
		ss.log.Warn("reply to a command the server never sent", "cmd", h.Command, "id", h.ID)
		return ss.sendError(Header{ID: h.ID, Command: h.Command}, unix.EINVAL)
	case FlagTypeCmd:
	default:
		closeFDs(fds)
		return ss.replyErr(h, unix.EINVAL, "unknown message type")
	}

	if !ss.negotiated && h.Command != CmdVersion {
		closeFDs(fds)
		return ss.replyErr(h, unix.EINVAL, "command before VERSION")
	}
	switch h.Command {
	case CmdVersion:
		return ss.handleVersion(h, p, fds)
	case CmdDMAMap:
		return ss.handleDMAMap(h, p, fds)
	case CmdSetIRQs:
		return ss.handleSetIRQs(h, p, fds)
	}
	if len(fds) != 0 {
		closeFDs(fds)
		return ss.replyErr(h, unix.EINVAL, "unexpected file descriptors")
	}
	switch h.Command {
	case CmdDMAUnmap:
		return ss.handleDMAUnmap(h, p)
	case CmdDeviceGetInfo:
		return ss.handleGetInfo(h, p)
	case CmdGetRegionInfo:
		return ss.handleRegionInfo(h, p)
	case CmdGetIRQInfo:
		return ss.handleIRQInfo(h, p)
	case CmdRegionRead:
		return ss.handleRegionRead(h, p)
	case CmdRegionWrite:
		return ss.handleRegionWrite(h, p)
	case CmdRegionWriteMulti:
		return ss.handleWriteMulti(h, p)
	case CmdDeviceReset:
		if len(p) != 0 {
			return ss.replyErr(h, unix.EINVAL, "DEVICE_RESET with payload")
		}
		if err := ss.s.dev.Reset(); err != nil {
			return ss.replyErr(h, errno(err), "device reset failed: "+err.Error())
		}
		ss.s.irq.reset()
		ss.log.Info("device reset")
		return ss.replyOK(h, ss.beginReply(h))
	case CmdDMARead, CmdDMAWrite:
		return ss.replyErr(h, unix.EINVAL, "server-to-client command sent by the client")
	}
	return ss.replyErr(h, unix.ENOTSUP, "unsupported command")
}

// ---- replies ----

func (ss *session) beginReply(h Header) []byte {
	return ss.reply[:HeaderSize]
}

// replyOK sends b (header space plus payload) as the reply to h, unless the
// client asked for none.
func (ss *session) replyOK(h Header, b []byte) error {
	return ss.replyFDs(h, b, nil)
}

func (ss *session) replyFDs(h Header, b []byte, fds []int) error {
	ss.reply = b[:0]
	if h.Flags&FlagNoReply != 0 {
		return nil
	}
	Header{ID: h.ID, Command: h.Command, Size: uint32(len(b)), Flags: FlagTypeReply}.Put(b)
	return ss.c.send(b, fds)
}

// replyErr answers h with an error, or logs it for posted commands.
func (ss *session) replyErr(h Header, e unix.Errno, why string) error {
	ss.log.Debug("request failed", "cmd", h.Command, "id", h.ID, "errno", e.Error(), "why", why)
	if h.Flags&FlagNoReply != 0 {
		ss.log.Warn("posted request failed", "cmd", h.Command, "errno", e.Error(), "why", why)
		return nil
	}
	return ss.sendError(h, e)
}

func (ss *session) sendError(h Header, e unix.Errno) error {
	b := ss.reply[:HeaderSize]
	Header{ID: h.ID, Command: h.Command, Size: HeaderSize, Flags: FlagTypeReply | FlagError, Error: uint32(e)}.Put(b)
	return ss.c.send(b, nil)
}

// ---- handlers ----

func (ss *session) handleVersion(h Header, p []byte, fds []int) error {
	if len(fds) != 0 {
		closeFDs(fds)
		return ss.replyErr(h, unix.EINVAL, "VERSION with file descriptors")
	}
	if ss.negotiated {
		return ss.replyErr(h, unix.EINVAL, "VERSION already negotiated")
	}
	v, err := DecodeVersion(p)
	if err != nil {
		_ = ss.replyErr(h, unix.EINVAL, err.Error())
		return err
	}
	if v.Major != 0 {
		// Spec: a server that cannot support the proposed major closes the
		// connection; the error reply tells the client why.
		_ = ss.replyErr(h, unix.ENOTSUP, "unsupported major version")
		return fmt.Errorf("vfio-user: client major version %d unsupported", v.Major)
	}
	caps, err := ParseCaps(v.JSON)
	if err != nil {
		_ = ss.replyErr(h, unix.EINVAL, err.Error())
		return err
	}
	var out Caps
	if caps.MaxMsgFDs != nil {
		n := uint64(MaxMsgFDs)
		out.MaxMsgFDs = &n
	}
	if caps.MaxDataXferSize != nil {
		if *caps.MaxDataXferSize == 0 {
			_ = ss.replyErr(h, unix.EINVAL, "max_data_xfer_size 0")
			return errors.New("vfio-user: client max_data_xfer_size is 0")
		}
		ss.clientMaxXfer = *caps.MaxDataXferSize
		n := uint64(ss.s.opts.MaxDataXfer)
		out.MaxDataXferSize = &n
	}
	if caps.PgSizes != nil {
		if *caps.PgSizes&4096 == 0 {
			_ = ss.replyErr(h, unix.ENOTSUP, "4 KiB pages not offered")
			return fmt.Errorf("vfio-user: client pgsizes %#x lack 4 KiB", *caps.PgSizes)
		}
		n := uint64(4096)
		out.PgSizes = &n
	}
	maxMaps := uint64(DefaultMaxDMAMaps)
	if caps.MaxDMAMaps != nil {
		maxMaps = min(*caps.MaxDMAMaps, DefaultMaxDMAMaps)
		out.MaxDMAMaps = &maxMaps
	}
	ss.s.mem.SetMaxMappings(int(maxMaps))
	if caps.WriteMultiple != nil && *caps.WriteMultiple {
		t := true
		out.WriteMultiple = &t
	}
	ss.negotiated = true
	ss.log.Info("version negotiated", "client_major", v.Major, "client_minor", v.Minor,
		"client_max_data_xfer", ss.clientMaxXfer, "max_dma_maps", maxMaps)
	b := Version{Major: 0, Minor: 0, JSON: MarshalCaps(out)}.Append(ss.beginReply(h))
	return ss.replyOK(h, b)
}

func (ss *session) handleDMAMap(h Header, p []byte, fds []int) error {
	m, err := DecodeDMAMap(p)
	if err != nil || m.Argsz < DMAMapSize {
		closeFDs(fds)
		return ss.replyErr(h, unix.EINVAL, "short DMA_MAP")
	}
	if len(fds) > 1 {
		closeFDs(fds)
		return ss.replyErr(h, unix.EINVAL, "DMA_MAP with more than one descriptor")
	}
	if m.Flags&^uint32(DMAFlagRead|DMAFlagWrite) != 0 || m.Size == 0 || m.IOVA+m.Size < m.IOVA {
		closeFDs(fds)
		return ss.replyErr(h, unix.EINVAL, "bad DMA_MAP flags or range")
	}
	prot := guestmem.Prot(0)
	if m.Flags&DMAFlagRead != 0 {
		prot |= guestmem.ProtRead
	}
	if m.Flags&DMAFlagWrite != 0 {
		prot |= guestmem.ProtWrite
	}
	if len(fds) == 1 {
		err = ss.s.mem.MapFD(m.IOVA, m.Size, fds[0], m.Offset, prot)
		// The mapping keeps the file alive; the descriptor is not needed.
		unix.Close(fds[0])
	} else {
		err = ss.s.mem.MapRemote(m.IOVA, m.Size, prot)
	}
	if err != nil {
		return ss.replyErr(h, mapErrno(err), err.Error())
	}
	ss.log.Debug("DMA map", "iova", m.IOVA, "size", m.Size, "flags", m.Flags, "fd", len(fds) == 1)
	return ss.replyOK(h, ss.beginReply(h))
}

func mapErrno(err error) unix.Errno {
	switch {
	case errors.Is(err, guestmem.ErrOverlap):
		return unix.EEXIST
	case errors.Is(err, guestmem.ErrTooMany):
		return unix.ENOSPC
	case errors.Is(err, guestmem.ErrNotMapped):
		return unix.ENOENT
	}
	return errno(err)
}

func (ss *session) handleDMAUnmap(h Header, p []byte) error {
	m, err := DecodeDMAUnmap(p)
	if err != nil {
		return ss.replyErr(h, unix.EINVAL, "short DMA_UNMAP")
	}
	switch {
	case m.Flags&DMAUnmapFlagGetDirtyBitmap != 0:
		return ss.replyErr(h, unix.ENOTSUP, "dirty page tracking not supported")
	case m.Flags&^uint32(DMAUnmapFlagAll) != 0:
		return ss.replyErr(h, unix.EINVAL, "unknown DMA_UNMAP flags")
	case m.Flags&DMAUnmapFlagAll != 0:
		if m.IOVA != 0 || m.Size != 0 {
			return ss.replyErr(h, unix.EINVAL, "DMA_UNMAP all with a range")
		}
		ss.s.mem.UnmapAll()
	default:
		if err := ss.s.mem.Unmap(m.IOVA, m.Size); err != nil {
			return ss.replyErr(h, mapErrno(err), "no DMA mapping matches exactly")
		}
	}
	ss.log.Debug("DMA unmap", "iova", m.IOVA, "size", m.Size, "flags", m.Flags)
	b := ss.beginReply(h)
	if m.Argsz >= DMAUnmapSize {
		b = DMAUnmap{Argsz: DMAUnmapSize, Flags: m.Flags, IOVA: m.IOVA, Size: m.Size}.Append(b)
	}
	return ss.replyOK(h, b)
}

func (ss *session) handleGetInfo(h Header, p []byte) error {
	m, err := DecodeDeviceInfo(p)
	if err != nil || m.Argsz < DeviceInfoSize {
		return ss.replyErr(h, unix.EINVAL, "short DEVICE_GET_INFO")
	}
	flags := uint32(DeviceFlagPCI)
	if ss.s.info.Reset {
		flags |= DeviceFlagReset
	}
	b := DeviceInfoMsg{
		Argsz: DeviceInfoSize, Flags: flags,
		NumRegions: uint32(len(ss.s.info.Regions)), NumIRQs: uint32(len(ss.s.info.IRQs)),
	}.Append(ss.beginReply(h))
	return ss.replyOK(h, b)
}

func (ss *session) handleRegionInfo(h Header, p []byte) error {
	m, err := DecodeRegionInfo(p)
	if err != nil || m.Argsz < RegionInfoSize {
		return ss.replyErr(h, unix.EINVAL, "short DEVICE_GET_REGION_INFO")
	}
	if m.Index >= uint32(len(ss.s.info.Regions)) {
		return ss.replyErr(h, unix.EINVAL, "no such region")
	}
	r := ss.s.info.Regions[m.Index]
	out := RegionInfoMsg{Argsz: RegionInfoSize, Flags: r.Flags, Index: m.Index, Size: r.Size}
	var fds []int
	var capBytes []byte
	if r.Size != 0 && r.Flags&RegionFlagMmap != 0 {
		fds = []int{r.MmapFD}
		if len(r.Sparse) > 0 {
			capBytes = AppendSparseCap(nil, 0, r.Sparse)
			out.Flags |= RegionFlagCaps
			out.Argsz += uint32(len(capBytes))
		}
	}
	if len(capBytes) > 0 && m.Argsz >= out.Argsz {
		out.CapOffset = RegionInfoSize
	} else {
		// Like the kernel: report the size needed and let the client retry
		// with a bigger buffer.
		capBytes = nil
	}
	b := out.Append(ss.beginReply(h))
	b = append(b, capBytes...)
	return ss.replyFDs(h, b, fds)
}

func (ss *session) handleIRQInfo(h Header, p []byte) error {
	m, err := DecodeIRQInfo(p)
	if err != nil || m.Argsz < IRQInfoSize {
		return ss.replyErr(h, unix.EINVAL, "short DEVICE_GET_IRQ_INFO")
	}
	if m.Index >= uint32(len(ss.s.info.IRQs)) {
		return ss.replyErr(h, unix.EINVAL, "no such IRQ index")
	}
	irq := ss.s.info.IRQs[m.Index]
	b := IRQInfoMsg{Argsz: IRQInfoSize, Flags: irq.Flags, Index: m.Index, Count: irq.Count}.Append(ss.beginReply(h))
	return ss.replyOK(h, b)
}

func (ss *session) handleSetIRQs(h Header, p []byte, fds []int) error {
	m, err := DecodeIRQSet(p)
	if err != nil || m.Argsz < IRQSetSize {
		closeFDs(fds)
		return ss.replyErr(h, unix.EINVAL, "short DEVICE_SET_IRQS")
	}
	if len(fds) > MaxMsgFDs {
		closeFDs(fds)
		return ss.replyErr(h, unix.EINVAL, "too many descriptors")
	}
	if err := ss.s.irq.set(m, fds); err != nil {
		closeFDs(fds)
		return ss.replyErr(h, errno(err), "SET_IRQS rejected")
	}
	ss.log.Debug("SET_IRQS", "index", m.Index, "start", m.Start, "count", m.Count, "flags", m.Flags, "fds", len(fds))
	return ss.replyOK(h, ss.beginReply(h))
}

// checkAccess validates a region access and returns the errno to reply.
func (ss *session) checkAccess(a RegionAccess, write bool) (unix.Errno, string) {
	if a.Count > ss.s.opts.MaxDataXfer {
		return unix.E2BIG, "count above max_data_xfer_size"
	}
	if a.Region >= uint32(len(ss.s.info.Regions)) {
		return unix.EINVAL, "no such region"
	}
	r := ss.s.info.Regions[a.Region]
	need := uint32(RegionFlagRead)
	if write {
		need = RegionFlagWrite
	}
	if r.Flags&need == 0 {
		return unix.EINVAL, "region access not permitted"
	}
	if a.Offset > r.Size || uint64(a.Count) > r.Size-a.Offset {
		return unix.EINVAL, "access outside the region"
	}
	return 0, ""
}

func (ss *session) handleRegionRead(h Header, p []byte) error {
	if len(p) != RegionAccessSize {
		return ss.replyErr(h, unix.EINVAL, "REGION_READ payload is not 16 bytes")
	}
	a, _ := DecodeRegionAccess(p, false)
	if e, why := ss.checkAccess(a, false); e != 0 {
		return ss.replyErr(h, e, why)
	}
	b := a.AppendHeader(ss.beginReply(h))
	n := len(b)
	b = growTo(b, n+int(a.Count))
	if err := ss.s.dev.RegionRead(int(a.Region), a.Offset, b[n:]); err != nil {
		return ss.replyErr(h, errno(err), "device read failed: "+err.Error())
	}
	return ss.replyOK(h, b)
}

func growTo(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	nb := make([]byte, n, n+n/4)
	copy(nb, b)
	return nb
}

func (ss *session) handleRegionWrite(h Header, p []byte) error {
	a, err := DecodeRegionAccess(p, true)
	if err != nil {
		return ss.replyErr(h, unix.EINVAL, "REGION_WRITE count does not match its data")
	}
	if e, why := ss.checkAccess(a, true); e != 0 {
		return ss.replyErr(h, e, why)
	}
	if err := ss.s.dev.RegionWrite(int(a.Region), a.Offset, a.Data); err != nil {
		return ss.replyErr(h, errno(err), "device write failed: "+err.Error())
	}
	if h.Flags&FlagNoReply != 0 {
		return nil
	}
	a.Data = nil
	return ss.replyOK(h, a.AppendHeader(ss.beginReply(h)))
}

func (ss *session) handleWriteMulti(h Header, p []byte) error {
	var failed unix.Errno
	var why string
	n, err := DecodeWriteMulti(p, func(a RegionAccess) error {
		if e, w := ss.checkAccess(a, true); e != 0 {
			failed, why = e, w
			return e
		}
		if err := ss.s.dev.RegionWrite(int(a.Region), a.Offset, a.Data); err != nil {
			failed, why = errno(err), err.Error()
			return err
		}
		return nil
	})
	if err != nil {
		if failed == 0 {
			failed, why = unix.EINVAL, "malformed REGION_WRITE_MULTI"
		}
		return ss.replyErr(h, failed, fmt.Sprintf("%s (after %d writes)", why, n))
	}
	b := append(ss.beginReply(h), make([]byte, 8)...)
	putU64(b[HeaderSize:], n)
	return ss.replyOK(h, b)
}

func putU64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}
