package vdevice

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// conn frames vfio-user messages on a stream socket and carries the file
// descriptors attached to them.
//
// Reading is buffered: one recvmsg may return several pipelined messages
// (QEMU posts BAR writes back to back), which keeps the per-message cost at
// a fraction of a syscall. Descriptors are attributed by stream position:
// Linux returns SCM_RIGHTS with the read that consumes the first byte of the
// sending sendmsg() and ends that read right after it, and a sender attaches
// descriptors to the sendmsg() that starts the message. So the descriptors
// of one recvmsg belong to the last message that starts before the end of
// the bytes it returned.
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
	rn     int
	rerr   error
	readFn func(fd uintptr) bool

	// Write side: serialized by wmu (replies and server-initiated requests).
	wmu     sync.Mutex
	wmsg    unix.Msghdr
	wiov    unix.Iovec
	woob    []byte
	wbuf    []byte
	wfds    []int
	wn      int
	werr    error
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
)

func newConn(uc *net.UnixConn, maxMsg int) (*conn, error) {
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
	c.riov.SetLen(len(c.buf) - c.w)
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
		} else {
			c.makeRoom(HeaderSize)
		}
		n, fds, err := c.recv()
		if err != nil {
			return Header{}, nil, nil, err
		}
		if n == 0 {
			closeFDs(fds)
			if c.w > c.r {
				return Header{}, nil, nil, errTruncated
			}
			return Header{}, nil, nil, io.EOF
		}
		c.w += n
		if len(fds) > 0 {
			c.fdq = append(c.fdq, fdBatch{pos: c.base + uint64(c.lastStart()), fds: fds})
		}
	}
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
	if err != nil {
		return err
	}
	return c.werr
}
