package vfiouser

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// conn frames vfio-user messages on a stream socket and carries the file
// descriptors attached to them.
//
// Reading is buffered: one recvmsg may return several pipelined messages
// (QEMU posts BAR writes back to back), which keeps the per-message cost at
// a fraction of a syscall. Descriptors belong to the message whose bytes
// they arrived with. Linux returns SCM_RIGHTS with the read that consumes
// the first byte of the sending sendmsg() and ends that read right after
// it (earlier sendmsg()s without descriptors may be glued in front), and a
// sender attaches descriptors to the sendmsg() that starts the message, so:
//   - a read that starts at a message boundary may cover several messages;
//     its descriptors belong to the last message that starts in it;
//   - a read that starts inside a message is bounded to the rest of that
//     message, so it can never take in bytes of the next one, and its
//     descriptors belong to that message (they came with its tail).
//
// The kernel does not report where a sendmsg() began, so a sender that
// splits one message over sendmsg()s and puts descriptors on a later piece
// is only caught when the server read the earlier piece first; then the
// descriptors stay with the message they arrived with and never slide to
// the next one.
//
// Stalls are bounded: a message whose first bytes arrived must be complete
// within stall (once armed, after negotiation), and a reply the client does
// not read must leave within stall.
type conn struct {
	uc *net.UnixConn
	rc syscall.RawConn

	// Read side: owned by the read loop.
	buf    []byte
	r, w   int
	base   uint64 // stream offset of buf[0]
	maxMsg int
	fdq    []fdBatch
	oob    []byte
	rmsg   unix.Msghdr
	riov   unix.Iovec
	rlimit int // bytes the next recvmsg may take
	rn     int
	rerr   error
	readFn func(fd uintptr) bool

	// stall bounds a partly received message (when stallReads is set) and
	// a blocked send. deadlineAt is the stream position of the message the
	// read deadline was armed for.
	stall      time.Duration
	stallReads bool
	deadlineOn bool
	deadlineAt uint64

	// Write side: serialized by wmu (replies and server-initiated requests).
	wmu     sync.Mutex
	wmsg    unix.Msghdr
	wiov    unix.Iovec
	woob    []byte
	wbuf    []byte
	wfds    []int
	wn      int
	werr    error
	wdead   bool // a write deadline is armed for the current send
	writeFn func(fd uintptr) bool
}

type fdBatch struct {
	pos uint64
	fds []int
}

// Framing errors: the byte stream can no longer be trusted.
var (
	errTruncated = errors.New("vfio-user: connection closed inside a message")
	errTooBig    = errors.New("vfio-user: message larger than max_data_xfer_size allows")
	errStalled   = errors.New("vfio-user: client stalled inside a message")
)

func newConn(uc *net.UnixConn, maxMsg int, stall time.Duration) (*conn, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	c := &conn{
		uc:     uc,
		rc:     rc,
		buf:    make([]byte, 64<<10),
		maxMsg: maxMsg,
		oob:    make([]byte, unix.CmsgSpace(4*(MaxMsgFDs+4))),
		stall:  stall,
	}
	c.readFn = c.doRecv
	c.writeFn = c.doSend
	return c, nil
}

func (c *conn) close() {
	c.uc.Close()
	for _, b := range c.fdq {
		closeFDs(b.fds)
	}
	c.fdq = nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func (c *conn) doRecv(fd uintptr) bool {
	c.riov.Base = &c.rbuf()[0]
	c.riov.SetLen(c.rlimit)
	c.rmsg.Iov = &c.riov
	c.rmsg.Iovlen = 1
	c.rmsg.Control = &c.oob[0]
	c.rmsg.SetControllen(len(c.oob))
	c.rmsg.Flags = 0
	n, _, e := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&c.rmsg)), unix.MSG_CMSG_CLOEXEC)
	for e == unix.EINTR {
		n, _, e = unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&c.rmsg)), unix.MSG_CMSG_CLOEXEC)
	}
	if e == unix.EAGAIN {
		return false
	}
	c.rn = int(n)
	c.rerr = nil
	if e != 0 {
		c.rerr = e
	}
	return true
}

func (c *conn) rbuf() []byte { return c.buf[c.w:] }

// recv reads more bytes into buf[w:] and returns the descriptors that came
// with them.
func (c *conn) recv() (int, []int, error) {
	if err := c.rc.Read(c.readFn); err != nil {
		return 0, nil, err
	}
	if c.rerr != nil {
		return 0, nil, c.rerr
	}
	var fds []int
	if oobn := int(c.rmsg.Controllen); oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(c.oob[:oobn])
		if err == nil {
			for _, cm := range cmsgs {
				if f, err := unix.ParseUnixRights(&cm); err == nil {
					fds = append(fds, f...)
				}
			}
		}
		if c.rmsg.Flags&unix.MSG_CTRUNC != 0 {
			// Descriptors were dropped by the kernel: the message that
			// carried them cannot be handled correctly.
			closeFDs(fds)
			return c.rn, nil, fmt.Errorf("vfio-user: more than %d file descriptors in one message", MaxMsgFDs)
		}
	}
	return c.rn, fds, nil
}

// readMsg returns the next complete frame (aliasing the read buffer until
// the next call) with its descriptors. On a framing error it returns the
// header it could parse, if any, so the caller can reply before closing.
func (c *conn) readMsg() (Header, []byte, []int, error) {
	for {
		// need is how many bytes complete the message (or header) at c.r;
		// 0 when nothing of the next message has arrived yet.
		need := 0
		if avail := c.w - c.r; avail >= HeaderSize {
			h, err := DecodeHeader(c.buf[c.r:c.w])
			if err != nil {
				return h, nil, nil, err
			}
			if int64(h.Size) > int64(c.maxMsg) {
				return h, nil, nil, errTooBig
			}
			size := int(h.Size)
			if avail >= size {
				frame := c.buf[c.r : c.r+size]
				fds := c.takeFDs(c.base + uint64(c.r))
				c.r += size
				return h, frame, fds, nil
			}
			c.makeRoom(size)
			need = size - avail
		} else {
			c.makeRoom(HeaderSize)
			if avail > 0 {
				need = HeaderSize - avail
			}
		}
		c.rlimit = len(c.buf) - c.w
		if need > 0 {
			c.rlimit = need
		}
		if err := c.armStall(need > 0); err != nil {
			return Header{}, nil, nil, err
		}
		n, fds, err := c.recv()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && need > 0 && c.stallReads {
				err = errStalled
			}
			return Header{}, nil, nil, err
		}
		if n == 0 {
			closeFDs(fds)
			if c.w > c.r {
				return Header{}, nil, nil, errTruncated
			}
			return Header{}, nil, nil, io.EOF
		}
		owner := c.r // the partial message this bounded read completes
		c.w += n
		if len(fds) > 0 {
			if need == 0 {
				owner = c.lastStart()
			}
			c.fdq = append(c.fdq, fdBatch{pos: c.base + uint64(owner), fds: fds})
		}
	}
}

// armStall arms the read deadline while a message is partly received
// (once per message, so a steady stream of pipelined messages is not cut
// off) and disarms it when the stream is at a message boundary. Caller is
// the read loop.
func (c *conn) armStall(partial bool) error {
	if !c.stallReads || c.stall <= 0 {
		return nil
	}
	pos := c.base + uint64(c.r)
	switch {
	case partial && (!c.deadlineOn || c.deadlineAt != pos):
		c.deadlineOn, c.deadlineAt = true, pos
		return c.uc.SetReadDeadline(time.Now().Add(c.stall))
	case !partial && c.deadlineOn:
		c.deadlineOn = false
		return c.uc.SetReadDeadline(time.Time{})
	}
	return nil
}

// lastStart returns the buffer index of the last message that starts before
// c.w, walking frame sizes from c.r.
func (c *conn) lastStart() int {
	last := c.r
	for pos := c.r; pos < c.w; {
		last = pos
		if c.w-pos < HeaderSize {
			break
		}
		h, err := DecodeHeader(c.buf[pos:c.w])
		if err != nil {
			break
		}
		pos += int(h.Size)
	}
	return last
}

// takeFDs removes and returns the descriptors attributed to the message at
// stream position pos; stale batches for earlier positions are closed.
func (c *conn) takeFDs(pos uint64) []int {
	if len(c.fdq) == 0 {
		return nil
	}
	var out []int
	keep := c.fdq[:0]
	for _, b := range c.fdq {
		switch {
		case b.pos == pos:
			out = append(out, b.fds...)
		case b.pos < pos:
			closeFDs(b.fds)
		default:
			keep = append(keep, b)
		}
	}
	c.fdq = keep
	return out
}

// makeRoom ensures buf can hold need bytes from c.r.
func (c *conn) makeRoom(need int) {
	if c.r == c.w {
		c.base += uint64(c.r)
		c.r, c.w = 0, 0
	}
	if len(c.buf)-c.r >= need && c.w < len(c.buf) {
		return
	}
	if c.r > 0 {
		n := copy(c.buf, c.buf[c.r:c.w])
		c.base += uint64(c.r)
		c.r, c.w = 0, n
	}
	if len(c.buf) < need {
		nb := make([]byte, need)
		copy(nb, c.buf[:c.w])
		c.buf = nb
	}
}

func (c *conn) doSend(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		c.wiov.Base = &c.wbuf[c.wn]
		c.wiov.SetLen(len(c.wbuf) - c.wn)
		c.wmsg.Iov = &c.wiov
		c.wmsg.Iovlen = 1
		c.wmsg.Control = nil
		c.wmsg.SetControllen(0)
		if c.wn == 0 && len(c.wfds) > 0 {
			c.woob = unix.UnixRights(c.wfds...)
			c.wmsg.Control = &c.woob[0]
			c.wmsg.SetControllen(len(c.woob))
		}
		n, _, e := unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&c.wmsg)), unix.MSG_NOSIGNAL)
		switch e {
		case 0:
			c.wn += int(n)
		case unix.EAGAIN:
			// The client is not reading: bound the wait (deadlines may be
			// set while the poller holds the write lock).
			if !c.wdead && c.stall > 0 {
				c.wdead = true
				_ = c.uc.SetWriteDeadline(time.Now().Add(c.stall))
			}
			return false
		case unix.EINTR:
			continue
		default:
			c.werr = e
			return true
		}
	}
	return true
}

// send writes one whole message (and fds with its first byte). Concurrent
// callers are serialized so messages never interleave.
func (c *conn) send(msg []byte, fds []int) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf, c.wfds, c.wn, c.werr = msg, fds, 0, nil
	err := c.rc.Write(c.writeFn)
	c.wbuf, c.wfds = nil, nil
	if c.wdead {
		c.wdead = false
		_ = c.uc.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		return err
	}
	return c.werr
}
