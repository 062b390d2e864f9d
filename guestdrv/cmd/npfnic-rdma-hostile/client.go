package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"strings"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// client runs the hostile cases against a server: its own memory region,
// one of another PD, and a fresh CQ pair and QP (with a fresh server QP)
// for every case, since an error moves a QP to the error state.
type client struct {
	v         *verbs
	o         *oob
	pd, pd2   uint32
	buf, buf2 mapping
	mr, other mr
	sgid      uint8
	gid       [16]byte
	wait      time.Duration
	// mtu is the port's active MTU in bytes, which bounds a UD message;
	// noGID a source GID index that names no GID of the port.
	mtu   int
	noGID uint8
}

// srcSeed is the pattern of the client's source area, which its SENDs and
// WRITEs take their bytes from.
const srcSeed = 7

func newClient(v *verbs, o *oob, sgid uint8, gid [16]byte) (*client, error) {
	c := &client{v: v, o: o, sgid: sgid, gid: gid, wait: completionWait}
	var err error
	if c.pd, err = v.allocPD(); err != nil {
		return nil, err
	}
	if c.pd2, err = v.allocPD(); err != nil {
		return nil, err
	}
	if c.buf, err = anonymous(bufSize); err != nil {
		return nil, err
	}
	if c.buf2, err = anonymous(bufSize); err != nil {
		return nil, err
	}
	fillCanary(c.buf, 0)
	fillPattern(c.buf[mrOff+srcArea:mrOff+srcArea+4096], srcSeed)
	fillPattern(c.buf2, srcSeed)
	all := uint32(accessLocalWrite | accessRemoteWrite | accessRemoteRead)
	if c.mr, err = v.regMR(c.pd, c.buf[mrOff:mrOff+mrLen], all); err != nil {
		return nil, err
	}
	if c.other, err = v.regMR(c.pd2, c.buf2[mrOff:mrOff+mrLen], all); err != nil {
		return nil, err
	}
	return c, nil
}

// caseEnv is one case's QP, connected to a fresh QP of the server, and
// whatever else the case creates.
type caseEnv struct {
	*client
	n        int
	qp       *qp
	scq, rcq *cq
	rmr      mr       // the server's region (rkey, addr, length)
	rqpn     uint32   // the server's QP, which qp is connected to
	rgid     [16]byte // the server's GID
	// more are the case's other QPs, srqs its SRQs; udp is the server's
	// UD QP once the case asked for one (udSetup).
	more []*qp
	srqs []*srq
	udp  *udPeer
}

func (c *client) newCase(n int) (*caseEnv, error) {
	e := &caseEnv{client: c, n: n}
	var err error
	if e.scq, err = c.v.createCQ(e.user(1), 64); err != nil {
		return e, err
	}
	if e.rcq, err = c.v.createCQ(e.user(2), 64); err != nil {
		return e, err
	}
	if e.qp, err = c.v.createQP(e.user(3), c.pd, e.scq, e.rcq, qpCaps{maxSendWR: 8, maxRecvWR: 8, maxSendSGE: 2, maxRecvSGE: 2}); err != nil {
		return e, err
	}
	return e, e.connectPeer(e.qp)
}

// user is the user_handle of the case's object i (0 to 15).
func (e *caseEnv) user(i int) uint64 { return uint64(e.n)<<4 | uint64(i) }

// connectPeer has the server replace its RC QP with a fresh one
// connected to q (its UD QP goes too), and connects q to it.
func (e *caseEnv) connectPeer(q *qp) error {
	local := endpoint{qpn: q.qpn, psn: rand.Uint32() & 0xffffff, gid: e.gid}
	f, err := e.o.call("QP %d %d %s", local.qpn, local.psn, gidString(local.gid))
	if err != nil {
		return fmt.Errorf("server QP: %w", err)
	}
	remote, err := parseEndpoint(f[1:])
	if err != nil {
		return err
	}
	n3, err := parseUints(f[4:min(len(f), 7)])
	if err != nil || len(n3) != 3 {
		return fmt.Errorf("server QP answer %q", f)
	}
	e.rmr = mr{rkey: uint32(n3[0]), addr: n3[1], length: n3[2]}
	e.rqpn, e.rgid, e.udp = remote.qpn, remote.gid, nil
	return e.v.connect(q, local, e.sgid, remote)
}

// close destroys the case's QPs, then its SRQs and CQs.
func (e *caseEnv) close() {
	for _, q := range append(e.more, e.qp) {
		if q != nil {
			e.v.destroyQP(q)
		}
	}
	for _, s := range e.srqs {
		e.v.destroySRQ(s)
	}
	for _, c := range []*cq{e.scq, e.rcq} {
		if c != nil {
			e.v.destroyCQ(c)
		}
	}
}

// lsge is an SGE of the client's region at offset off.
func (e *caseEnv) lsge(off, length int) sge {
	return sge{addr: e.mr.addr + uint64(off), length: uint32(length), lkey: e.mr.lkey}
}

// goodWrite is a well-formed RDMA WRITE of 64 bytes of the source area to
// the server's write area.
func (e *caseEnv) goodWrite(id uint64) sendWQE {
	return sendWQE{id: id, opcode: hw.IBVWRRDMAWrite, flags: hw.IBVSendSignaled, remoteAddr: e.rmr.addr + writeArea,
		rkey: e.rmr.rkey, sgl: []sge{e.lsge(srcArea, 64)}}.sum()
}

// post writes entries into the send queue and rings the doorbell.
func (e *caseEnv) post(ws ...sendWQE) error { return e.postOn(e.qp, ws...) }

// postOn is post on another of the case's QPs.
func (e *caseEnv) postOn(q *qp, ws ...sendWQE) error {
	puts := make([]func([]byte), len(ws))
	for i, w := range ws {
		q.ssn++
		w.ssn = q.ssn
		puts[i] = w.put
	}
	q.sq.post(puts...)
	return e.v.doorbell(q)
}

func (e *caseEnv) postRecv(rs ...recvWQE) {
	puts := make([]func([]byte), len(rs))
	for i, r := range rs {
		puts[i] = r.put
	}
	e.qp.rq.post(puts...)
}

// completions waits for n completions on q and describes them: their
// statuses, runs of one status shortened to STATUS×k, an entry whose
// wr_id is not ids[i] (when ids has one) marked #wr_id.
func (e *caseEnv) completions(q *queue, n int, ids ...uint64) string {
	got := q.pollN(n, e.wait)
	return describe(got, n, ids)
}

func describe(got []cqe, n int, ids []uint64) string {
	var words []string
	for i, c := range got {
		w := statusName(c.status)
		if i < len(ids) && c.wrID != ids[i] {
			w += fmt.Sprintf("#%#x", c.wrID)
		}
		words = append(words, w)
	}
	var out []string
	for i := 0; i < len(words); {
		j := i
		for j < len(words) && words[j] == words[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s×%d", words[i], j-i))
		} else {
			out = append(out, words[i])
		}
		i = j
	}
	if len(got) < n {
		out = append(out, fmt.Sprintf("(only %d of %d completions)", len(got), n))
	}
	return strings.Join(out, " ")
}

// checkPeer asks the server to check that a WRITE of length bytes of the
// source area landed at MR offset off.
func (e *caseEnv) checkPeer(off, length int) string {
	if _, err := e.o.call("CHECK %d %d %d", off, length, srcSeed); err != nil {
		return "peer: " + err.Error()
	}
	return "peer has it"
}

// clientHarm reports bytes of the client's buffer that no case may write:
// everything outside its region, and the region's write area (the READ
// target) and source area. The receive area (scratch) is canary again.
func (c *client) clientHarm() error {
	b := c.buf
	fillCanary(b[mrOff+scratch:mrOff+mrLen], mrOff+scratch)
	var err error
	for _, r := range [][2]int{{0, mrOff}, {mrOff + mrLen, bufSize}, {mrOff + writeArea, mrOff + srcArea}} {
		if i := firstNot(b[r[0]:r[1]], r[0], canary); i >= 0 && err == nil {
			err = fmt.Errorf("client buffer byte %d (MR offset %d) written", r[0]+i, r[0]+i-mrOff)
		}
		fillCanary(b[r[0]:r[1]], r[0]) // one case's harm is reported once
	}
	src := b[mrOff+srcArea : mrOff+srcArea+4096]
	if i := firstNot(src, 0, func(i int) byte { return pattern(srcSeed, i) }); i >= 0 && err == nil {
		err = fmt.Errorf("client source area byte %d written", i)
	}
	fillPattern(src, srcSeed)
	return err
}

// result is one case's line.
type result struct {
	name, want, got string
	ok              bool
}

// runCases runs the cases whose names match run and not skip, and says
// BYE to the server.
func (c *client) runCases(cases []hostileCase, run, skip *regexp.Regexp, out io.Writer) ([]result, error) {
	var res []result
	fmt.Fprintf(out, "%-28s %-46s %-46s %s\n", "case", "expected", "got", "result")
	for i, hc := range cases {
		if run != nil && !run.MatchString(hc.name) || skip != nil && skip.MatchString(hc.name) {
			continue
		}
		e, err := c.newCase(i + 1)
		got := ""
		if err == nil {
			got, err = hc.run(e)
		}
		e.close()
		if err != nil {
			got = "error: " + err.Error()
		}
		// Whatever the case did, nothing may have landed outside what it
		// checked.
		if _, err := c.o.call("CANARY"); err != nil {
			got += "; peer buffer: " + err.Error()
		}
		if err := c.clientHarm(); err != nil {
			got += "; " + err.Error()
		}
		r := result{name: hc.name, want: hc.want, got: got, ok: got == hc.want}
		res = append(res, r)
		ok := "ok"
		if !r.ok {
			ok = "FAIL"
		}
		fmt.Fprintf(out, "%-28s %-46s %-46s %s\n", r.name, r.want, r.got, ok)
	}
	if _, err := c.o.call("BYE"); err != nil {
		return res, fmt.Errorf("server: %w", err)
	}
	return res, nil
}
