package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// server is the well-behaved peer: one memory region, a fresh QP per case
// of the client, and checks of what arrived (and of what must not have).
type server struct {
	v    *verbs
	pd   uint32
	buf  mapping
	mr   mr
	sgid uint8
	gid  [16]byte
	mac  [6]byte // of the GID's network device, which UD senders address

	qp       *qp
	scq, rcq *cq
	ssn      uint32
	peerGID  [16]byte // the client's, from its last QP request

	// The case's UD QP, when the client asked for one (UDQP), its Q_Key
	// and the receive entry the next UD SEND must take.
	ud     *qp
	udCQ   *cq // its send and receive CQ
	udQKey uint32
	udNext uint64
}

// completionWait bounds every wait for a completion: generous for two
// TCG guests.
const completionWait = 15 * time.Second

func newServer(v *verbs, sgid uint8, gid [16]byte, mac [6]byte) (*server, error) {
	s := &server{v: v, sgid: sgid, gid: gid, mac: mac}
	var err error
	if s.pd, err = v.allocPD(); err != nil {
		return nil, err
	}
	if s.buf, err = anonymous(bufSize); err != nil {
		return nil, err
	}
	fillCanary(s.buf, 0)
	if s.mr, err = v.regMR(s.pd, s.buf[mrOff:mrOff+mrLen], accessLocalWrite|accessRemoteWrite|accessRemoteRead|accessRemoteAtomic); err != nil {
		return nil, err
	}
	return s, nil
}

// serveOne listens on port and serves one client session.
func (s *server) serveOne(port int) error {
	defer s.dropQP()
	return serveSession(port, fmt.Sprintf("MR rkey %#x at %#x, %d bytes", s.mr.rkey, s.mr.addr, s.mr.length), s.handle)
}

// serveSession listens on port and serves one client's session of
// request lines, each answered with handle's line (an error as ERR and
// the reason), until BYE.
func serveSession(port int, what string, handle func(f []string) (string, error)) error {
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	defer l.Close()
	log.Printf("serving on port %d: %s", port, what)
	c, err := l.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	o := newOOB(c)
	for {
		f, err := o.recv()
		if err != nil {
			return fmt.Errorf("client went away: %w", err)
		}
		if f[0] == "BYE" {
			return o.send("BYE")
		}
		answer, err := handle(f)
		if err != nil {
			log.Printf("%v: %v", f, err)
			answer = "ERR " + err.Error()
		}
		if err := o.send("%s", answer); err != nil {
			return err
		}
	}
}

func (s *server) handle(f []string) (string, error) {
	args, err := parseUints(f[1:])
	if f[0] == "QP" {
		args, err = nil, nil
	}
	if err != nil {
		return "", err
	}
	need := map[string]int{"QP": 0, "SEND": 2, "RECV": 2, "CHECK": 3, "CANARY": 0, "UDQP": 0, "UDRECV": 3, "UDNONE": 0}
	n, ok := need[f[0]]
	if !ok || len(args) < n {
		return "", fmt.Errorf("bad request %q", f)
	}
	switch f[0] {
	case "QP":
		remote, err := parseEndpoint(f[1:])
		if err != nil {
			return "", err
		}
		local, err := s.newQP(remote)
		if err != nil {
			return "", err
		}
		s.peerGID = remote.gid
		return fmt.Sprintf("QP %d %d %s %#x %#x %d", local.qpn, local.psn, gidString(local.gid), s.mr.rkey, s.mr.addr, s.mr.length), nil
	case "SEND":
		st, err := s.sendTo(int(args[0]), int(args[1]))
		if err != nil {
			return "", err
		}
		return "SENT " + statusName(st), nil
	case "RECV":
		return "OK", s.checkRecv(int(args[0]), int(args[1]))
	case "CHECK":
		return "OK", s.checkWrite(int(args[0]), int(args[1]), int(args[2]))
	case "UDQP":
		if err := s.newUD(); err != nil {
			return "", err
		}
		return fmt.Sprintf("UDQP %d %#x %s", s.ud.qpn, s.udQKey, hex.EncodeToString(s.mac[:])), nil
	case "UDRECV":
		return "OK", s.checkUDRecv(int(args[0]), int(args[1]), uint32(args[2]))
	case "UDNONE":
		return "OK", s.checkNoRecv()
	case "CANARY":
		if i := firstNot(s.buf, 0, canary); i >= 0 {
			err := fmt.Errorf("buffer byte %d (MR offset %d) is %#x, not canary %#x", i, i-mrOff, s.buf[i], canary(i))
			fillCanary(s.buf, 0) // one case's harm is reported once
			return "", err
		}
		return "OK", nil
	}
	return "", errors.New("unreachable")
}

// newQP replaces the session's QP with a fresh one connected to remote,
// with its receives posted.
func (s *server) newQP(remote endpoint) (endpoint, error) {
	s.dropQP()
	var err error
	if s.scq, err = s.v.createCQ(1, 64); err != nil {
		return endpoint{}, err
	}
	if s.rcq, err = s.v.createCQ(2, 64); err != nil {
		return endpoint{}, err
	}
	if s.qp, err = s.v.createQP(3, s.pd, s.scq, s.rcq, qpCaps{maxSendWR: 8, maxRecvWR: 8, maxSendSGE: 1, maxRecvSGE: 1}); err != nil {
		return endpoint{}, err
	}
	for i := range 4 {
		s.qp.rq.post(recvWQE{id: uint64(i), sgl: []sge{{addr: s.mr.addr + recvArea + uint64(i*recvSize), length: recvSize, lkey: s.mr.lkey}}}.sum().put)
	}
	local := endpoint{qpn: s.qp.qpn, psn: rand.Uint32() & 0xffffff, gid: s.gid}
	if err := s.v.connect(s.qp, local, s.sgid, remote); err != nil {
		return endpoint{}, err
	}
	return local, nil
}

func (s *server) dropQP() {
	s.dropUD()
	if s.qp != nil {
		s.v.destroyQP(s.qp)
	}
	for _, c := range []*cq{s.scq, s.rcq} {
		if c != nil {
			s.v.destroyCQ(c)
		}
	}
	s.qp, s.scq, s.rcq = nil, nil, nil
	// Whatever the QP's receives took, or the last SEND's source, is
	// canary again: each case starts from a clean buffer.
	fillCanary(s.buf[mrOff+recvArea:mrOff+recvArea+4*recvSize], mrOff+recvArea)
	fillCanary(s.buf[mrOff+srcArea:mrOff+scratch], mrOff+srcArea)
}

// sendTo SENDs length bytes of pattern(seed) to the client and returns the
// completion's status.
func (s *server) sendTo(length, seed int) (uint32, error) {
	if s.qp == nil || length <= 0 || length > scratch-srcArea {
		return 0, fmt.Errorf("SEND of %d bytes without a QP or too long", length)
	}
	fillPattern(s.buf[mrOff+srcArea:mrOff+srcArea+length], seed)
	s.ssn++
	s.qp.sq.post(sendWQE{id: 100, opcode: hw.IBVWRSend, flags: hw.IBVSendSignaled, ssn: s.ssn,
		sgl: []sge{{addr: s.mr.addr + srcArea, length: uint32(length), lkey: s.mr.lkey}}}.sum().put)
	if err := s.v.doorbell(s.qp); err != nil {
		return 0, err
	}
	got := s.qp.scq.q.pollN(1, completionWait)
	if len(got) == 0 {
		return 0, errors.New("the SEND did not complete")
	}
	fillCanary(s.buf[mrOff+srcArea:mrOff+srcArea+length], mrOff+srcArea)
	return got[0].status, nil
}

// checkRecv checks that the first receive took length bytes of
// pattern(seed), and makes its buffer canary again.
func (s *server) checkRecv(length, seed int) error {
	if s.qp == nil || length <= 0 || length > recvSize {
		return fmt.Errorf("RECV of %d bytes without a QP or too long", length)
	}
	got := s.qp.rcq.q.pollN(1, completionWait)
	if len(got) == 0 {
		return errors.New("no receive completed")
	}
	c := got[0]
	if c.status != hw.IBVWCSuccess || c.wrID != 0 || c.byteLen != uint32(length) || c.opcode != hw.IBVWCRecv {
		return fmt.Errorf("receive completed %s, wr_id %d, opcode %d, %d bytes", statusName(c.status), c.wrID, c.opcode, c.byteLen)
	}
	b := s.buf[mrOff+recvArea : mrOff+recvArea+length]
	if i := firstNot(b, 0, func(i int) byte { return pattern(seed, i) }); i >= 0 {
		return fmt.Errorf("received byte %d is %#x, want %#x", i, b[i], pattern(seed, i))
	}
	fillCanary(b, mrOff+recvArea)
	return nil
}

// checkWrite checks that MR offset off holds length bytes of
// pattern(seed), and makes them canary again.
func (s *server) checkWrite(off, length, seed int) error {
	if off < 0 || length <= 0 || off+length > mrLen {
		return fmt.Errorf("CHECK [%d, +%d) outside the MR", off, length)
	}
	b := s.buf[mrOff+off : mrOff+off+length]
	if i := firstNot(b, 0, func(i int) byte { return pattern(seed, i) }); i >= 0 {
		return fmt.Errorf("MR byte %d is %#x, want %#x (written: %d of %d bytes)", off+i, b[i], pattern(seed, i), i, length)
	}
	fillCanary(b, mrOff+off)
	return nil
}
