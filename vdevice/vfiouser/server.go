package vfiouser

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
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
	// HandshakeTimeout bounds the time from connecting to a negotiated
	// VERSION: a client that sends nothing, or stalls before negotiating,
	// is dropped. Default 5 s.
	HandshakeTimeout time.Duration
	// StallTimeout bounds, after negotiation, a message whose first bytes
	// arrived but not the rest, and a reply the client does not read.
	// Default 5 s.
	StallTimeout time.Duration
	// HandoverTimeout is how long a new client waits for the device while
	// another session is still connected or tearing down (see Serve).
	// Default 10 s.
	HandoverTimeout time.Duration
}

// maxWaitingClients bounds the connections queued for the device; more are
// closed at once, so a connection flood cannot exhaust descriptors.
const maxWaitingClients = 8

// Server serves one Device to one client at a time.
type Server struct {
	dev  Device
	info Info
	opts Options
	log  *slog.Logger
	mem  *guestmem.Memory
	irq  *irqState

	// hmu guards the device's ownership: busy while a session (from its
	// start to the end of its teardown) owns it, and the clients waiting
	// for it in arrival order.
	hmu     sync.Mutex
	busy    bool
	waiters []chan struct{}

	sess atomic.Pointer[session]
	// maxDMAMaps is what this process can map (see dmaMapLimit).
	maxDMAMaps uint64
}

// NewServer checks the device's layout, takes its guest memory as the
// table of the clients' DMA regions and attaches it.
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
	if opts.HandshakeTimeout == 0 {
		opts.HandshakeTimeout = 5 * time.Second
	}
	if opts.StallTimeout == 0 {
		opts.StallTimeout = 5 * time.Second
	}
	if opts.HandoverTimeout == 0 {
		opts.HandoverTimeout = 10 * time.Second
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
	mem := dev.Memory()
	if mem == nil {
		return nil, errors.New("vdevice: the device has no guest memory")
	}
	s := &Server{
		dev:  dev,
		info: info,
		opts: opts,
		log:  opts.Logger,
		mem:  mem,
		irq:  newIRQState(info.IRQs),

		maxDMAMaps: dmaMapLimit(),
	}
	s.mem.SetRemote(remoteAccessor{s})
	dev.Attach(Host{IRQ: s.irq})
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
// cancelled (then it returns nil) or accepting fails.
//
// One client owns the device at a time, from its connection to the end of
// its teardown. A client that connects meanwhile waits for the device, up
// to HandoverTimeout: a rebooting guest or a restarted QEMU reconnects
// while the previous session is still tearing down and gets the device as
// soon as that is done. If the session holding the device is still there
// when the wait ends, the newcomer is closed: a connected client is never
// preempted (QEMU only ever opens one connection; a second one is a
// mistake or an attack, and must not take a running guest's device). A
// stalled session does not hold the device for long either: see
// HandshakeTimeout and StallTimeout.
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
		// Queue in arrival order here, not in the goroutine, so clients
		// get the device in the order they connected.
		turn, err := s.enqueue()
		if err != nil {
			uc.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.serveTurn(ctx, uc, turn); err != nil {
				s.log.Warn("client connection ended with error", "err", err)
			}
		}()
	}
}

// ServeConn serves one already-connected client until it disconnects or ctx
// is cancelled, waiting for the device as Serve describes. It returns nil on
// an orderly disconnect.
func (s *Server) ServeConn(ctx context.Context, uc *net.UnixConn) error {
	turn, err := s.enqueue()
	if err != nil {
		uc.Close()
		return err
	}
	return s.serveTurn(ctx, uc, turn)
}

func (s *Server) serveTurn(ctx context.Context, uc *net.UnixConn, turn chan struct{}) error {
	if err := s.await(ctx, turn); err != nil {
		uc.Close()
		return err
	}
	defer s.release()
	return s.serveConn(ctx, uc)
}

var errDeviceBusy = errors.New("vdevice: another client holds the device")

// enqueue registers a client for the device. The returned channel is
// closed when it is the client's turn (at once if the device is free).
func (s *Server) enqueue() (chan struct{}, error) {
	turn := make(chan struct{})
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if !s.busy {
		s.busy = true
		close(turn)
		return turn, nil
	}
	if len(s.waiters) >= maxWaitingClients {
		s.log.Warn("rejecting client: too many clients waiting for the device")
		return nil, errDeviceBusy
	}
	s.waiters = append(s.waiters, turn)
	return turn, nil
}

// await waits for turn, bounded by HandoverTimeout; on failure the client
// leaves the queue.
func (s *Server) await(ctx context.Context, turn chan struct{}) error {
	select {
	case <-turn:
		return nil
	default:
	}
	t := time.NewTimer(s.opts.HandoverTimeout)
	defer t.Stop()
	var err error
	select {
	case <-turn:
		return nil
	case <-t.C:
		err = errDeviceBusy
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.hmu.Lock()
	defer s.hmu.Unlock()
	for i, w := range s.waiters {
		if w == turn {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			if err == errDeviceBusy {
				s.log.Warn("rejecting client: another client is connected", "waited", s.opts.HandoverTimeout)
			}
			return err
		}
	}
	// release handed the device over just as the wait ended: take it.
	return nil
}

// release ends a session's ownership, handing the device to the next
// waiting client.
func (s *Server) release() {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if len(s.waiters) == 0 {
		s.busy = false
		return
	}
	next := s.waiters[0]
	s.waiters = s.waiters[1:]
	close(next)
}

func (s *Server) serveConn(ctx context.Context, uc *net.UnixConn) error {
	c, err := newConn(uc, s.maxMsg(), s.opts.StallTimeout)
	if err != nil {
		uc.Close()
		return err
	}
	// The whole handshake must be done by then; handleVersion lifts it.
	if err := uc.SetReadDeadline(time.Now().Add(s.opts.HandshakeTimeout)); err != nil {
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
	case !sess.negotiated && errors.Is(err, os.ErrDeadlineExceeded):
		s.log.Warn("dropping client: no VERSION within the handshake timeout", "timeout", s.opts.HandshakeTimeout)
		return err
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
	writeMultiple bool // REGION_WRITE_MULTI negotiated
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
		// A reply acknowledges a command this server sent; one that matches
		// none (or came late, after its call timed out) is dropped:
		// answering a reply with a reply would be unsolicited in turn.
		closeFDs(fds)
		if h.Command == CmdDMARead || h.Command == CmdDMAWrite {
			ss.complete(h, p)
			return nil
		}
		ss.log.Warn("dropping a reply to a command the server never sent", "cmd", h.Command, "id", h.ID)
		return nil
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
		if !ss.writeMultiple {
			return ss.replyErr(h, unix.ENOTSUP, "REGION_WRITE_MULTI without write_multiple negotiated")
		}
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
		return ss.replyOK(h, ss.beginReply())
	case CmdDMARead, CmdDMAWrite:
		return ss.replyErr(h, unix.EINVAL, "server-to-client command sent by the client")
	}
	return ss.replyErr(h, unix.ENOTSUP, "unsupported command")
}

// ---- replies ----

// beginReply returns the reply buffer with room for the header, which
// replyOK fills in.
func (ss *session) beginReply() []byte {
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
	// Grant only what the process can really map: the spec's 65535 exceeds
	// what Linux allows by default. A client that proposed no max_dma_maps
	// cannot be told (the reply's capabilities must be a subset of the
	// offer); it learns the limit from ENOMEM replies.
	maxMaps := ss.s.maxDMAMaps
	if caps.MaxDMAMaps != nil {
		maxMaps = min(*caps.MaxDMAMaps, maxMaps)
		out.MaxDMAMaps = &maxMaps
	}
	ss.s.mem.SetMaxMappings(int(maxMaps))
	if caps.WriteMultiple != nil && *caps.WriteMultiple {
		t := true
		out.WriteMultiple = &t
		ss.writeMultiple = true
	}
	ss.negotiated = true
	// The handshake deadline is lifted; from now on only stalls inside a
	// message are bounded.
	if err := ss.c.uc.SetReadDeadline(time.Time{}); err != nil {
		return err
	}
	ss.c.stallReads = true
	ss.log.Info("version negotiated", "client_major", v.Major, "client_minor", v.Minor,
		"client_max_data_xfer", ss.clientMaxXfer, "max_dma_maps", maxMaps)
	b := Version{Major: 0, Minor: 0, JSON: MarshalCaps(out)}.Append(ss.beginReply())
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
	return ss.replyOK(h, ss.beginReply())
}

func mapErrno(err error) unix.Errno {
	switch {
	case errors.Is(err, guestmem.ErrOverlap):
		return unix.EEXIST
	case errors.Is(err, guestmem.ErrTooMany):
		// More maps than max_dma_maps granted: the kernel's answer when
		// it runs out of mappings.
		return unix.ENOMEM
	case errors.Is(err, guestmem.ErrNotMapped):
		return unix.ENOENT
	case errors.Is(err, guestmem.ErrNotFile), errors.Is(err, guestmem.ErrShortFile):
		return unix.EINVAL
	}
	return errno(err)
}

// dmaMapHeadroom is left of vm.max_map_count for the mappings the process
// itself makes after negotiation (heap growth, thread stacks, the device).
const dmaMapHeadroom = 1024

// dmaMapLimit is how many fd-backed DMA maps this process can hold: each
// is one mmap, and Linux allows vm.max_map_count mappings per process
// (65530 by default, below the spec's 65535), some already in use.
func dmaMapLimit() uint64 {
	limit := uint64(DefaultMaxDMAMaps)
	b, err := os.ReadFile("/proc/sys/vm/max_map_count")
	if err != nil {
		return limit
	}
	maxCount, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return limit
	}
	used := uint64(0)
	if maps, err := os.ReadFile("/proc/self/maps"); err == nil {
		used = uint64(bytes.Count(maps, []byte{'\n'}))
	}
	if maxCount <= used+dmaMapHeadroom {
		return 1
	}
	return min(limit, maxCount-used-dmaMapHeadroom)
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
	b := ss.beginReply()
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
	}.Append(ss.beginReply())
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
	b := out.Append(ss.beginReply())
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
	b := IRQInfoMsg{Argsz: IRQInfoSize, Flags: irq.Flags, Index: m.Index, Count: irq.Count}.Append(ss.beginReply())
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
	return ss.replyOK(h, ss.beginReply())
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
	b := a.AppendHeader(ss.beginReply())
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
	return ss.replyOK(h, a.AppendHeader(ss.beginReply()))
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
	return ss.replyOK(h, binary.LittleEndian.AppendUint64(ss.beginReply(), n))
}
