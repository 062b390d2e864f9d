package vfiouser

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// remoteAccessor implements guestmem.Remote with DMA_READ/DMA_WRITE
// messages to the current client. Calls come from device goroutines; the
// replies are matched by message ID in the read loop.
type remoteAccessor struct{ s *Server }

var errNoClient = errors.New("vfio-user: no client connected")

func (r remoteAccessor) ReadRemote(iova uint64, p []byte) error {
	return r.do(CmdDMARead, iova, p)
}

func (r remoteAccessor) WriteRemote(iova uint64, p []byte) error {
	return r.do(CmdDMAWrite, iova, p)
}

func (r remoteAccessor) do(cmd Command, iova uint64, p []byte) error {
	ss := r.s.sess.Load()
	if ss == nil {
		return errNoClient
	}
	// Both sides bound one transfer: the client's max_data_xfer_size and the
	// largest reply this server accepts.
	chunk := min(ss.clientMaxXfer, uint64(r.s.opts.MaxDataXfer))
	for len(p) > 0 {
		n := min(uint64(len(p)), chunk)
		if err := ss.dmaOnce(cmd, iova, p[:n]); err != nil {
			return err
		}
		iova += n
		p = p[n:]
	}
	return nil
}

func (ss *session) dmaOnce(cmd Command, iova uint64, p []byte) error {
	call := &dmaCall{cmd: cmd, done: make(chan struct{})}
	if cmd == CmdDMARead {
		call.buf = p
	}
	ss.pmu.Lock()
	if ss.closed {
		ss.pmu.Unlock()
		return errNoClient
	}
	// IDs are ours; skip ones still waiting so replies stay unambiguous.
	id := ss.nextID
	for i := 0; ; i++ {
		if _, busy := ss.pending[id]; !busy {
			break
		}
		if i == 1<<16 {
			ss.pmu.Unlock()
			return unix.EBUSY
		}
		id++
	}
	ss.nextID = id + 1
	ss.pending[id] = call
	ss.pmu.Unlock()

	layout := ss.s.opts.DMALayout
	var data []byte
	if cmd == CmdDMAWrite {
		data = p
	}
	msg := make([]byte, HeaderSize, HeaderSize+DMAAccessSize+len(data)+4)
	msg = AppendDMAAccess(msg, layout, iova, uint32(len(p)), data)
	Header{ID: id, Command: cmd, Size: uint32(len(msg)), Flags: FlagTypeCmd}.Put(msg)
	if err := ss.c.send(msg, nil); err != nil {
		ss.forget(id)
		return err
	}
	t := time.NewTimer(ss.s.opts.DMATimeout)
	defer t.Stop()
	select {
	case <-call.done:
		return call.err
	case <-t.C:
		ss.forget(id)
		return unix.ETIMEDOUT
	}
}

func (ss *session) forget(id uint16) {
	ss.pmu.Lock()
	delete(ss.pending, id)
	ss.pmu.Unlock()
}

// complete routes a DMA_READ/DMA_WRITE reply to its waiting caller. Replies
// that match nothing (e.g. after a timeout) are dropped.
func (ss *session) complete(h Header, p []byte) {
	ss.pmu.Lock()
	call, ok := ss.pending[h.ID]
	if ok && call.cmd == h.Command {
		delete(ss.pending, h.ID)
	}
	ss.pmu.Unlock()
	if !ok || call.cmd != h.Command {
		ss.log.Warn("unmatched DMA reply", "cmd", h.Command, "id", h.ID)
		return
	}
	switch {
	case h.Flags&FlagError != 0:
		call.err = unix.Errno(h.Error)
		if h.Error == 0 {
			call.err = unix.EIO
		}
	case h.Command == CmdDMARead:
		_, count, data, err := DecodeDMAReply(p, ss.s.opts.DMALayout, true)
		if err != nil || count != uint64(len(call.buf)) {
			call.err = unix.EPROTO
			break
		}
		copy(call.buf, data)
	}
	// DMA_WRITE: QEMU replies with a bare header, the spec with
	// address/count; success is all that matters.
	close(call.done)
}
