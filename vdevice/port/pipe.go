package port

import "sync"

// Pipe returns the two ends of an in-memory cable. Each direction holds up
// to depth frames; Send blocks while the peer's queue is full, so the link
// is lossless and a fast sender is paced by its receiver. Frames are copied
// into recycled slots: after warm-up, a frame costs no allocation. Closing
// either end closes the cable.
func Pipe(depth int) (*PipePort, *PipePort) {
	if depth < 1 {
		depth = 1
	}
	ab, ba := newPipeQueue(depth), newPipeQueue(depth)
	return &PipePort{tx: ab, rx: ba}, &PipePort{tx: ba, rx: ab}
}

// PipePort is one end of a Pipe.
type PipePort struct {
	tx, rx *pipeQueue
}

type pipeQueue struct {
	mu       sync.Mutex
	notEmpty sync.Cond
	notFull  sync.Cond
	slots    [][]byte
	r, w     uint64 // frames taken, frames put
	closed   bool
}

func newPipeQueue(depth int) *pipeQueue {
	q := &pipeQueue{slots: make([][]byte, depth)}
	q.notEmpty.L = &q.mu
	q.notFull.L = &q.mu
	return q
}

func (q *pipeQueue) close(drain bool) {
	q.mu.Lock()
	q.closed = true
	if drain {
		q.r = q.w
	}
	q.mu.Unlock()
	q.notEmpty.Broadcast()
	q.notFull.Broadcast()
}

// Send implements Port.
func (p *PipePort) Send(frame []byte) error { return p.send(frame, true) }

// TrySend implements TrySender: the frame goes if the peer's queue has
// room.
func (p *PipePort) TrySend(frame []byte) error { return p.send(frame, false) }

// send queues a copy of frame for the peer; a full queue is waited for,
// or with wait clear is ErrWouldBlock.
func (p *PipePort) send(frame []byte, wait bool) error {
	q := p.tx
	q.mu.Lock()
	for wait && !q.closed && q.w-q.r == uint64(len(q.slots)) {
		q.notFull.Wait()
	}
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	if q.w-q.r == uint64(len(q.slots)) {
		q.mu.Unlock()
		return ErrWouldBlock
	}
	i := q.w % uint64(len(q.slots))
	q.slots[i] = append(q.slots[i][:0], frame...)
	q.w++
	q.mu.Unlock()
	q.notEmpty.Signal()
	return nil
}

// Recv implements Port.
func (p *PipePort) Recv(buf []byte) (int, error) {
	q := p.rx
	q.mu.Lock()
	for {
		for !q.closed && q.w == q.r {
			q.notEmpty.Wait()
		}
		if q.w == q.r {
			q.mu.Unlock()
			return 0, ErrClosed
		}
		s := q.slots[q.r%uint64(len(q.slots))]
		q.r++
		q.notFull.Signal()
		if len(s) <= len(buf) {
			n := copy(buf, s)
			q.mu.Unlock()
			return n, nil
		}
		// Too long for buf: dropped, as the Port contract says.
	}
}

// Close implements Port: both directions close. Frames this end sent before
// can still be received by the peer; frames queued for this end are gone.
func (p *PipePort) Close() error {
	p.tx.close(false)
	p.rx.close(true)
	return nil
}

func (p *PipePort) String() string { return "pipe" }
