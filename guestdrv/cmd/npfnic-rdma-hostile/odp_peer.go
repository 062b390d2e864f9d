package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// odpPeer is the ODP churn mode's peer (-odp-churn -serve): a pinned
// region of odpWindow stream slots (the sources of its WRITEs) and
// odpCheck pages of check area (the target of the churner's), one QP at a
// time, and the stream of WRITEs into the churner's region, which runs on
// a goroutine of its own between STREAM and STOP.
type odpPeer struct {
	v    *verbs
	pd   uint32
	buf  mapping
	mr   mr
	sgid uint8
	gid  [16]byte

	qp       *qp
	scq, rcq *cq
	round    uint32 // the next stream's first round

	mu   sync.Mutex
	log  *streamLog    // the stream running, or the last one
	stop chan struct{} // closed: the stream posts no more
	done chan struct{} // closed when the stream's goroutine ended
	why  string        // why it ended: error, rounds, stopped, or what went wrong
}

func newODPPeer(v *verbs, sgid uint8, gid [16]byte) (*odpPeer, error) {
	p := &odpPeer{v: v, sgid: sgid, gid: gid, round: 1}
	var err error
	if p.pd, err = v.allocPD(); err != nil {
		return nil, err
	}
	if p.buf, err = anonymous((odpWindow + odpCheck) * odpPage); err != nil {
		return nil, err
	}
	p.fillCheckCanary()
	if p.mr, err = v.regMR(p.pd, p.buf, accessLocalWrite|accessRemoteWrite|accessRemoteRead); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *odpPeer) checkArea(i int) []byte {
	off := (odpWindow + i) * odpPage
	return p.buf[off : off+odpPage]
}

func (p *odpPeer) fillCheckCanary() {
	for i := range odpCheck {
		fillPage(p.checkArea(i), tagCanary, 0, i)
	}
}

func (p *odpPeer) serve(port int) error {
	defer p.dropQP()
	return serveSession(port, fmt.Sprintf("ODP churn peer, check area rkey %#x at %#x", p.mr.rkey, p.mr.addr+odpWindow*odpPage), p.handle)
}

func (p *odpPeer) handle(f []string) (string, error) {
	need := map[string]int{"QP": 3, "STREAM": 4, "PROGRESS": 0, "UNMAPPED": 2, "STOP": 1, "CHECK": 2, "CANARY": 0}
	n, ok := need[f[0]]
	if !ok || len(f)-1 < n {
		return "", fmt.Errorf("bad request %q", f)
	}
	var args []uint64
	if f[0] != "QP" {
		var err error
		if args, err = parseUints(f[1:]); err != nil {
			return "", err
		}
	}
	switch f[0] {
	case "QP":
		remote, err := parseEndpoint(f[1:])
		if err != nil {
			return "", err
		}
		local, err := p.newQP(remote)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("QP %d %d %s %#x %#x %d", local.qpn, local.psn, gidString(local.gid), p.mr.rkey,
			p.mr.addr+odpWindow*odpPage, odpCheck*odpPage), nil
	case "STREAM":
		if args[2] == 0 || args[2] > 0xfff || args[3] > 1<<16 {
			return "", fmt.Errorf("STREAM of %d pages, %d rounds", args[2], args[3])
		}
		r0, err := p.startStream(uint32(args[0]), args[1], int(args[2]), int(args[3]))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("STREAMING %d", r0), nil
	case "PROGRESS":
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.log == nil {
			return "", errors.New("no stream")
		}
		failed := 0
		if p.log.failed {
			failed = 1
		}
		return fmt.Sprintf("PROGRESS posted=%d completed=%d failed=%d", p.log.posted, p.log.completed, failed), nil
	case "UNMAPPED":
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.log == nil || args[0] >= args[1] || args[1] > uint64(p.log.pages) {
			return "", fmt.Errorf("UNMAPPED %d %d without a stream over them", args[0], args[1])
		}
		return fmt.Sprintf("UNMAPPED posted=%d", p.log.unmap(int(args[0]), int(args[1]))), nil
	case "STOP":
		return p.stopStream(time.Duration(args[0]) * time.Millisecond)
	case "CHECK":
		return "OK", p.check(uint32(args[0]), int(args[1]))
	case "CANARY":
		for i := range odpCheck {
			if err := checkPage(p.checkArea(i), tagCanary, 0, i); err != nil {
				p.fillCheckCanary()
				return "", fmt.Errorf("check area: %w", err)
			}
		}
		return "OK", nil
	}
	return "", errors.New("unreachable")
}

// newQP replaces the QP (and stops a stream on the old one) with a fresh
// one connected to remote.
func (p *odpPeer) newQP(remote endpoint) (endpoint, error) {
	p.dropQP()
	var err error
	if p.scq, err = p.v.createCQ(1, 64); err != nil {
		return endpoint{}, err
	}
	if p.rcq, err = p.v.createCQ(2, 64); err != nil {
		return endpoint{}, err
	}
	if p.qp, err = p.v.createQP(3, p.pd, p.scq, p.rcq, qpCaps{maxSendWR: 2 * odpWindow, maxRecvWR: 4, maxSendSGE: 1, maxRecvSGE: 1}); err != nil {
		return endpoint{}, err
	}
	local := endpoint{qpn: p.qp.qpn, psn: rand.Uint32() & 0xffffff, gid: p.gid}
	if err := p.v.connect(p.qp, local, p.sgid, remote); err != nil {
		return endpoint{}, err
	}
	return local, nil
}

func (p *odpPeer) dropQP() {
	if p.done != nil {
		// The error state flushes what the churner never answers (it
		// went away, or its QP did), so the stream ends at once.
		if p.qp != nil {
			p.v.modifyQP(p.qp, qpAttr{mask: hw.RDMAQPAttrState, state: qpsErr})
		}
		p.stopStream(0)
	}
	if p.qp != nil {
		p.v.destroyQP(p.qp)
	}
	for _, c := range []*cq{p.scq, p.rcq} {
		if c != nil {
			p.v.destroyCQ(c)
		}
	}
	p.qp, p.scq, p.rcq = nil, nil, nil
}

// startStream starts the stream of WRITEs into the churner's region
// (rkey, addr) and returns its first round.
func (p *odpPeer) startStream(rkey uint32, addr uint64, pages, rounds int) (uint32, error) {
	if p.qp == nil {
		return 0, errors.New("STREAM without a QP")
	}
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return 0, errors.New("a stream is running")
		}
	}
	p.mu.Lock()
	p.log = newStreamLog(pages, rounds, p.round)
	p.mu.Unlock()
	p.stop, p.done, p.why = make(chan struct{}), make(chan struct{}), ""
	go p.stream(p.log, rkey, addr, p.stop, p.done)
	return p.log.round0, nil
}

// stopStream waits up to wait for the stream to end by itself, stops it,
// waits for its goroutine and answers its account.
func (p *odpPeer) stopStream(wait time.Duration) (string, error) {
	if p.done == nil {
		return "", errors.New("no stream")
	}
	select {
	case <-p.done:
	case <-time.After(wait):
	}
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.log.nextRound() + 1; r > p.round {
		p.round = r
	}
	return "STOPPED " + p.log.report(p.why), nil
}

// stream posts WRITE after WRITE, at most odpWindow outstanding, until it
// is stopped, an error completes or its rounds are done; then it takes
// the completions still due (flushed, after an error) and ends.
func (p *odpPeer) stream(l *streamLog, rkey uint32, addr uint64, stop, done chan struct{}) {
	defer close(done)
	var (
		inflight []uint64 // WRITE numbers posted and not completed, in order
		ssn      uint32
		idle     = time.Now()
	)
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for {
		p.mu.Lock()
		more := l.more()
		var puts []func([]byte)
		for more && !stopped() && len(inflight) < odpWindow {
			idx := l.post()
			round, page := l.target(idx)
			slot := p.buf[int(idx%odpWindow)*odpPage:][:odpPage]
			fillPage(slot, tagPeer, round, page)
			ssn++
			w := sendWQE{id: idx, opcode: hw.IBVWRRDMAWrite, flags: hw.IBVSendSignaled, ssn: ssn,
				remoteAddr: addr + uint64(page)*odpPage, rkey: rkey,
				sgl: []sge{{addr: p.mr.addr + uint64(idx%odpWindow)*odpPage, length: odpPage, lkey: p.mr.lkey}}}.sum()
			puts = append(puts, w.put)
			inflight = append(inflight, idx)
			more = l.more()
		}
		p.mu.Unlock()
		if len(puts) > 0 {
			p.qp.sq.post(puts...)
			if err := p.v.doorbell(p.qp); err != nil {
				p.end("doorbell: " + err.Error())
				return
			}
			idle = time.Now()
		}
		for {
			c, ok := p.scq.q.poll()
			if !ok {
				break
			}
			p.mu.Lock()
			if len(inflight) == 0 || c.wrID != inflight[0] {
				l.complete(l.posted, c.status) // accounted as a failure
				p.mu.Unlock()
				p.end(fmt.Sprintf("completion of wr_id %d, expected %v", c.wrID, inflight))
				return
			}
			inflight = inflight[1:]
			l.complete(c.wrID, c.status)
			p.mu.Unlock()
			idle = time.Now()
		}
		if len(inflight) == 0 && (!l.more() || stopped()) {
			p.mu.Lock()
			why := "stopped"
			if l.failed {
				why = "error"
			} else if !l.more() {
				why = "rounds"
			}
			p.mu.Unlock()
			p.end(why)
			return
		}
		if time.Since(idle) > completionWait {
			p.end(fmt.Sprintf("no completion in %v with %d WRITEs outstanding", completionWait, len(inflight)))
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (p *odpPeer) end(why string) {
	p.mu.Lock()
	p.why = why
	p.mu.Unlock()
}

// check verifies the churner's WRITEs of round into the check area's
// first pages and makes them canary again.
func (p *odpPeer) check(round uint32, pages int) error {
	if pages <= 0 || pages > odpCheck {
		return fmt.Errorf("CHECK of %d pages", pages)
	}
	defer p.fillCheckCanary()
	for i := range pages {
		if err := checkPage(p.checkArea(i), tagLocal, round, i); err != nil {
			return err
		}
	}
	for i := pages; i < odpCheck; i++ {
		if err := checkPage(p.checkArea(i), tagCanary, 0, i); err != nil {
			return fmt.Errorf("beyond the WRITEs: %w", err)
		}
	}
	return nil
}
