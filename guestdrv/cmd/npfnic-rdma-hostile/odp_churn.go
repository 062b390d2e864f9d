package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"time"
	"unsafe"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// churner is the ODP churn mode's process under test (-odp-churn -c): it
// owns an ODP region (odpTarget pages the peer WRITEs into, then
// odpSource pages it WRITEs from), forks and unmaps parts of it while the
// transfers run, and checks what the device did (runChurn).
type churner struct {
	v    *verbs
	o    *oob
	sgid uint8
	gid  [16]byte
	out  io.Writer

	pd  uint32
	mem mapping // the region's range: target pages, then source pages
	mr  mr
	// snap is where a forked child copies the target pages.
	snap mapping

	// overlap (-mr overlap): the other MRs over the region, ODP and
	// pinned, and the pinned one over the source pages.
	overlap []mr
	pinned  mr

	qp       *qp
	scq, rcq *cq
	ssn      uint32
	check    mr // the peer's check area
	// expect is what each target page must hold; unmapped pages hold
	// nothing the churner may read.
	expect   [odpTarget]pageState
	unmapped [2]int // target pages [lo, hi) unmapped now; lo == hi: none
	// next are the QP pairs to use while the region has a hole, made
	// before the munmap.
	next  []*localQP
	round uint32 // the churner's next round of its own WRITEs

	steps, failed int
}

// pageState is a page's content: page page of round round as tag wrote it.
type pageState struct {
	tag   uint16
	round uint32
	page  int
}

// The hole: the munmap takes the upper half of the target, pages
// [holeLo, holeHi).
const (
	holeLo = odpTarget / 2
	holeHi = odpTarget
)

// The churner's region's registrations (-mr).
var churnAccess = map[string]uint32{
	"odp":      accessLocalWrite | accessRemoteWrite | accessRemoteRead | accessOnDemand,
	"implicit": accessLocalWrite | accessRemoteWrite | accessRemoteRead | accessOnDemand,
	"plain":    accessLocalWrite | accessRemoteWrite | accessRemoteRead,
	"overlap":  accessLocalWrite | accessRemoteWrite | accessRemoteRead | accessOnDemand,
}

func newChurner(v *verbs, o *oob, sgid uint8, gid [16]byte, out io.Writer, how string) (*churner, error) {
	access, ok := churnAccess[how]
	if !ok {
		return nil, fmt.Errorf("-mr %q: odp, implicit or plain", how)
	}
	c := &churner{v: v, o: o, sgid: sgid, gid: gid, out: out, round: 1}
	var err error
	if c.pd, err = v.allocPD(); err != nil {
		return nil, err
	}
	if c.mem, err = anonymous((odpTarget + odpSource) * odpPage); err != nil {
		return nil, err
	}
	if c.snap, err = anonymous(odpTarget * odpPage); err != nil {
		return nil, err
	}
	for k := range odpTarget + odpSource {
		fillPage(c.page(k), tagCanary, 0, k)
	}
	for k := range c.expect {
		c.expect[k] = pageState{tagCanary, 0, k}
	}
	if how == "implicit" {
		// ibv_reg_mr(pd, NULL, SIZE_MAX, ...): its keys reach the region.
		c.mr, err = v.regMRRange(c.pd, 0, ^uint64(0), access)
		c.mr.addr, c.mr.length = uint64(uintptr(unsafe.Pointer(&c.mem[0]))), uint64(len(c.mem))
	} else {
		c.mr, err = v.regMR(c.pd, c.mem, access)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %w", how, err)
	}
	if how == "overlap" {
		if err := c.overlapMRs(access); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// overlapMRs registers, after the region's own ODP MR, an implicit ODP MR
// and an ODP MR over the target's lower half and two pages of the hole
// (the driver resolves a fault through the newest ODP MR that covers
// it, so these two map the pages the region's key reaches), and a pinned
// MR over the source pages (-mr overlap).
func (c *churner) overlapMRs(access uint32) error {
	imr, err := c.v.regMRRange(c.pd, 0, ^uint64(0), access)
	if err != nil {
		return fmt.Errorf("implicit MR: %w", err)
	}
	part, err := c.v.regMR(c.pd, c.mem[:(holeLo+2)*odpPage], access)
	if err != nil {
		return fmt.Errorf("ODP MR over the target's lower half: %w", err)
	}
	if c.pinned, err = c.v.regMR(c.pd, c.mem[odpTarget*odpPage:], accessLocalWrite); err != nil {
		return fmt.Errorf("pinned MR over the source pages: %w", err)
	}
	c.overlap = []mr{imr, part, c.pinned}
	return nil
}

// writeOne WRITEs region page k through lkey to the check area's first
// page, as it is (not refilled), and waits for its success.
func (c *churner) writeOne(k int, lkey uint32) error {
	c.ssn++
	w := sendWQE{id: 1, opcode: hw.IBVWRRDMAWrite, flags: hw.IBVSendSignaled, ssn: c.ssn,
		remoteAddr: c.check.addr, rkey: c.check.rkey,
		sgl: []sge{{addr: c.mr.addr + uint64(k)*odpPage, length: odpPage, lkey: lkey}}}.sum()
	c.qp.sq.post(w.put)
	if err := c.v.doorbell(c.qp); err != nil {
		return err
	}
	got := c.scq.q.pollN(1, completionWait)
	if len(got) != 1 || got[0].status != hw.IBVWCSuccess {
		return fmt.Errorf("WRITE from page %d (lkey %#x): %v", k, lkey, got)
	}
	return nil
}

// pinnedStep (-mr overlap): a pinned MR keeps its pages whatever becomes
// of the process's mapping, also where ODP MRs overlap it. The first
// source page, holding round r, is unmapped (the ODP MRs' notifiers run
// for it) and fresh memory holding round r+1 mapped there. A WRITE from
// it through the pinned MR's lkey must send round r, the pinned page: the
// ODP invalidation may not drop a pinned page's translation, nor may an
// ODP fault replace it. So must one through the region's ODP lkey (the
// driver's one page table per context: an ODP MR over a pinned page
// reaches the pinned page). Once the pinned MR is deregistered, a WRITE
// through the ODP lkey faults the new page in and sends round r+1.
func (c *churner) pinnedStep() (string, error) {
	k := odpTarget
	if err := c.newQP(); err != nil {
		return "", err
	}
	old := c.round
	c.round++
	fillPage(c.page(k), tagLocal, old, 0)
	if err := unmapRange(c.page(k)); err != nil {
		return "", err
	}
	if err := mapFixed(c.page(k)); err != nil {
		return "", err
	}
	cur := c.round
	c.round++
	fillPage(c.page(k), tagLocal, cur, 0)
	for _, key := range []uint32{c.pinned.lkey, c.mr.lkey} {
		if err := c.writeOne(k, key); err != nil {
			return "", err
		}
		if _, err := c.o.call("CHECK %d 1", old); err != nil {
			return "", fmt.Errorf("through lkey %#x after the remap, want the pinned page's round %d: %w", key, old, err)
		}
	}
	if err := c.v.deregMR(c.pinned); err != nil {
		return "", err
	}
	if err := c.writeOne(k, c.mr.lkey); err != nil {
		return "", err
	}
	if _, err := c.o.call("CHECK %d 1", cur); err != nil {
		return "", fmt.Errorf("through the ODP lkey after the pinned MR went, want the new page's round %d: %w", cur, err)
	}
	return fmt.Sprintf("page %d remapped: the pinned MR and the ODP region sent the pinned page (round %d); without the pinned MR the new page (round %d)", k, old, cur), nil
}

// page is page k of the region.
func (c *churner) page(k int) []byte { return c.mem[k*odpPage : (k+1)*odpPage] }

func (c *churner) target() []byte { return c.mem[:odpTarget*odpPage] }

// localQP is a QP and its CQs, made (their rings mapped) before they are
// connected.
type localQP struct {
	qp       *qp
	scq, rcq *cq
}

func (c *churner) makeQP() (*localQP, error) {
	l := &localQP{}
	var err error
	if l.scq, err = c.v.createCQ(1, 64); err == nil {
		if l.rcq, err = c.v.createCQ(2, 64); err == nil {
			l.qp, err = c.v.createQP(3, c.pd, l.scq, l.rcq, qpCaps{maxSendWR: 16, maxRecvWR: 4, maxSendSGE: 1, maxRecvSGE: 1})
		}
	}
	if err != nil {
		c.destroy(l)
		return nil, err
	}
	return l, nil
}

func (c *churner) destroy(l *localQP) {
	if l.qp != nil {
		c.v.destroyQP(l.qp)
	}
	for _, q := range []*cq{l.scq, l.rcq} {
		if q != nil {
			c.v.destroyCQ(q)
		}
	}
}

// useQP replaces the QP pair with l and a fresh QP of the peer.
func (c *churner) useQP(l *localQP) error {
	c.dropQP()
	c.qp, c.scq, c.rcq = l.qp, l.scq, l.rcq
	local := endpoint{qpn: c.qp.qpn, psn: rand.Uint32() & 0xffffff, gid: c.gid}
	f, err := c.o.call("QP %d %d %s", local.qpn, local.psn, gidString(local.gid))
	if err != nil {
		return fmt.Errorf("peer QP: %w", err)
	}
	remote, err := parseEndpoint(f[1:])
	if err != nil {
		return err
	}
	n, err := parseUints(f[4:min(len(f), 7)])
	if err != nil || len(n) != 3 || n[2] < odpCheck*odpPage {
		return fmt.Errorf("peer QP answer %q", f)
	}
	c.check = mr{rkey: uint32(n[0]), addr: n[1], length: n[2]}
	return c.v.connect(c.qp, local, c.sgid, remote)
}

// useNext replaces the QP pair with the next one made before the munmap.
func (c *churner) useNext() error {
	if len(c.next) == 0 {
		return errors.New("no QP made before the munmap")
	}
	l := c.next[0]
	c.next = c.next[1:]
	return c.useQP(l)
}

// newQP replaces the QP pair with a fresh one (an error moves a QP to
// the error state). While part of the region is unmapped, it must not be
// called: the kernel may put the new rings into the hole (the next QP is
// made before the munmap instead).
func (c *churner) newQP() error {
	l, err := c.makeQP()
	if err != nil {
		return err
	}
	return c.useQP(l)
}

func (c *churner) dropQP() {
	c.destroy(&localQP{c.qp, c.scq, c.rcq})
	c.qp, c.scq, c.rcq = nil, nil, nil
}

// startStream has the peer WRITE into the target, rounds rounds (0: until
// STOP or an error).
func (c *churner) startStream(rounds int) error {
	_, err := c.o.call("STREAM %#x %#x %d %d", c.mr.rkey, c.mr.addr, odpTarget, rounds)
	return err
}

type progress struct {
	posted, completed uint64
	failed            bool
}

func (c *churner) progress() (progress, error) {
	f, err := c.o.call("PROGRESS")
	if err != nil {
		return progress{}, err
	}
	kv, err := keyValues(f[1:])
	if err != nil {
		return progress{}, err
	}
	n, err := parseUints([]string{kv["posted"], kv["completed"], kv["failed"]})
	if err != nil {
		return progress{}, fmt.Errorf("PROGRESS %q: %w", f, err)
	}
	return progress{n[0], n[1], n[2] != 0}, nil
}

// waitCompleted waits until the stream completed n WRITEs, all of them
// successfully.
func (c *churner) waitCompleted(n uint64) (progress, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := c.progress()
		switch {
		case err != nil:
			return p, err
		case p.failed:
			rep, err := c.stop(0)
			if err != nil {
				return p, err
			}
			return p, fmt.Errorf("the stream failed: WRITE %d (page %d) %s", rep.errWR, rep.errPage, rep.err)
		case p.completed >= n:
			return p, nil
		case time.Now().After(deadline):
			return p, fmt.Errorf("the stream completed %d WRITEs in 30 s, waiting for %d", p.completed, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the stream (after up to wait for it to end by itself) and
// takes the peer's account of it.
func (c *churner) stop(wait time.Duration) (streamReport, error) {
	return c.stopPages(wait, odpTarget)
}

// stopPages is stop for a stream over pages pages.
func (c *churner) stopPages(wait time.Duration, pages int) (streamReport, error) {
	f, err := c.o.call("STOP %d", wait.Milliseconds())
	if err != nil {
		return streamReport{}, err
	}
	rep, err := parseStreamReport(f[1:])
	if err == nil && len(rep.last) != pages {
		err = fmt.Errorf("stream report of %d pages", len(rep.last))
	}
	return rep, err
}

// absorb takes the last round the stream put into each page of [lo, hi).
func (c *churner) absorb(rep streamReport, lo, hi int) {
	for k := lo; k < hi; k++ {
		if r := rep.last[k]; r >= 0 {
			c.expect[k] = pageState{tagPeer, uint32(r), k}
		}
	}
}

// checkTarget checks the target pages [lo, hi) against expect.
func (c *churner) checkTarget(lo, hi int) error {
	for k := lo; k < hi; k++ {
		e := c.expect[k]
		if err := checkPage(c.page(k), e.tag, e.round, e.page); err != nil {
			return fmt.Errorf("target %w", err)
		}
	}
	return nil
}

// writeFrom WRITEs the region's pages src, filled with a new round, to
// the check area's first len(src) pages; each completes with want, and
// with success the peer finds them intact.
func (c *churner) writeFrom(src []int, want uint32) (uint32, error) {
	round := c.round
	c.round++
	var ws []sendWQE
	for i, k := range src {
		if want == hw.IBVWCSuccess {
			fillPage(c.page(k), tagLocal, round, i)
			if k < odpTarget {
				c.expect[k] = pageState{tagLocal, round, i}
			}
		}
		c.ssn++
		ws = append(ws, sendWQE{id: uint64(i), opcode: hw.IBVWRRDMAWrite, flags: hw.IBVSendSignaled, ssn: c.ssn,
			remoteAddr: c.check.addr + uint64(i)*odpPage, rkey: c.check.rkey,
			sgl: []sge{{addr: c.mr.addr + uint64(k)*odpPage, length: odpPage, lkey: c.mr.lkey}}}.sum())
	}
	puts := make([]func([]byte), len(ws))
	for i := range ws {
		puts[i] = ws[i].put
	}
	c.qp.sq.post(puts...)
	if err := c.v.doorbell(c.qp); err != nil {
		return round, err
	}
	got := c.scq.q.pollN(len(ws), completionWait)
	for i, g := range got {
		if g.status != want || g.wrID != uint64(i) {
			return round, fmt.Errorf("WRITE from page %d: %s (wr_id %d), want %s", src[i], statusName(g.status), g.wrID, statusName(want))
		}
		if want != hw.IBVWCSuccess {
			break // the rest is flushed
		}
	}
	if len(got) < len(ws) && (want == hw.IBVWCSuccess || len(got) == 0) {
		return round, fmt.Errorf("%d of %d WRITEs completed", len(got), len(ws))
	}
	if want == hw.IBVWCSuccess {
		if _, err := c.o.call("CHECK %d %d", round, len(src)); err != nil {
			return round, fmt.Errorf("peer: %w", err)
		}
	}
	return round, nil
}

// step runs one step and prints its line: step NAME ok|FAIL SECONDS DETAIL.
func (c *churner) step(name string, f func() (string, error)) bool {
	start := time.Now()
	detail, err := f()
	c.steps++
	res := "ok"
	if err != nil {
		c.failed++
		res = "FAIL"
		detail = err.Error()
	}
	fmt.Fprintf(c.out, "step %-12s %-4s %5.2fs %s\n", name, res, time.Since(start).Seconds(), detail)
	return err == nil
}

// sourcePages are the region's pages the churner WRITEs from.
func sourcePages() []int {
	var s []int
	for k := odpTarget; k < odpTarget+odpSource; k++ {
		s = append(s, k)
	}
	return s
}

// forkStep forks while the peer WRITEs into the target: the fork
// write-protects the region, so the kernel invalidates the device's
// translations, and the device's next write into each page faults and
// breaks COW: the parent gets a new page and the child keeps the old one.
// The child snapshots its copy (after writing its own mark into it, on
// odd steps: then the child has new pages and the parent keeps the old
// ones) and finds it unchanged once the peer wrote every target page
// again; the parent meanwhile rewrites its source pages (breaking COW)
// and WRITEs them to the peer, which must get the new bytes, not the
// child's; the target holds what the peer's last WRITEs put there.
func (c *churner) forkStep(i int) (string, error) {
	if err := c.startStream(0); err != nil {
		return "", err
	}
	p, err := c.progress()
	if err != nil {
		return "", err
	}
	if _, err := c.waitCompleted(p.completed + odpTarget/2); err != nil {
		return "", err
	}
	job := &childJob{watch: true, mem: c.target(), snap: c.snap}
	if i%2 == 1 {
		job.mark = odpWord(tagMark, uint32(i), 0, 0)
	}
	child, err := forkWatch(job)
	if err != nil {
		return "", err
	}
	waited := false
	defer func() {
		if !waited {
			child.wait()
		}
	}()
	after, err := c.progress()
	if err != nil {
		return "", err
	}
	round, err := c.writeFrom(sourcePages(), hw.IBVWCSuccess)
	if err != nil {
		return "", fmt.Errorf("after the fork: %w", err)
	}
	done, err := c.waitCompleted(after.posted + odpTarget)
	if err != nil {
		return "", fmt.Errorf("after the fork: %w", err)
	}
	waited = true
	st, err := child.wait()
	if err != nil {
		return "", err
	}
	if st != 0 {
		return "", fmt.Errorf("the child's copy of target page %d changed after the fork: the device wrote into a page the parent no longer maps", st-1)
	}
	rep, err := c.stop(0)
	if err != nil {
		return "", err
	}
	if rep.err != "OK" {
		return "", fmt.Errorf("the stream failed: WRITE %d (page %d) %s", rep.errWR, rep.errPage, rep.err)
	}
	c.absorb(rep, 0, odpTarget)
	if err := c.checkTarget(0, odpTarget); err != nil {
		return "", err
	}
	who := "child read its copy"
	if job.mark != 0 {
		who = "child wrote its copy"
	}
	return fmt.Sprintf("%s; %d peer WRITEs after the fork, child's copy unchanged; %d WRITEs from COW-broken source pages (round %d) intact; target intact (%d WRITEs in all)",
		who, done.completed-after.posted, odpSource, round, rep.completed), nil
}

// munmapStep unmaps the target's upper half while the peer WRITEs into
// it: the kernel invalidates the pages, so the device's next WRITE into
// one faults, the page request fails (no VMA) and the peer's WRITE
// completes with REM_ACCESS_ERR; every WRITE posted after the munmap
// returned into those pages fails, the lower half holds what the WRITEs
// before the error put there. On odd steps a fork (its child exits at
// once) just before the munmap drops every translation, so the munmap
// races with the peer's faults.
func (c *churner) munmapStep(i int) (string, error) {
	err := c.newQP()
	if err != nil {
		return "", err
	}
	if err := c.startStream(0); err != nil {
		return "", err
	}
	if _, err := c.waitCompleted(odpTarget + uint64(rand.IntN(odpTarget))); err != nil {
		return "", err
	}
	// The QPs of the steps to come map their rings now, not into the
	// hole.
	for range 2 {
		l, err := c.makeQP()
		if err != nil {
			return "", err
		}
		c.next = append(c.next, l)
	}
	how := "translations warm"
	if i%2 == 1 {
		child, err := forkWatch(&childJob{})
		if err != nil {
			return "", err
		}
		if _, err := child.wait(); err != nil {
			return "", err
		}
		how = "right after a fork"
	}
	if err := unmapRange(c.mem[holeLo*odpPage : holeHi*odpPage]); err != nil {
		return "", err
	}
	c.unmapped = [2]int{holeLo, holeHi}
	f, err := c.o.call("UNMAPPED %d %d", holeLo, holeHi)
	if err != nil {
		return "", err
	}
	rep, err := c.stop(15 * time.Second)
	if err != nil {
		return "", err
	}
	if rep.late != 0 {
		return "", fmt.Errorf("%d WRITEs into the unmapped pages succeeded (the first: WRITE %d; munmap returned before WRITE %s)",
			rep.late, rep.lateWR, strings.TrimPrefix(f[1], "posted="))
	}
	if rep.ended != "error" || rep.err != statusName(hw.IBVWCRemAccessErr) || rep.errPage < holeLo || rep.errPage >= holeHi {
		return "", fmt.Errorf("the stream over the unmapped pages ended %s: WRITE %d (page %d) %s, want REM_ACCESS_ERR in pages [%d, %d)",
			rep.ended, rep.errWR, rep.errPage, rep.err, holeLo, holeHi)
	}
	c.absorb(rep, 0, holeLo)
	if err := c.checkTarget(0, holeLo); err != nil {
		return "", fmt.Errorf("lower half: %w", err)
	}
	return fmt.Sprintf("%s; REM_ACCESS_ERR at WRITE %d (page %d; munmap returned before WRITE %s); lower half intact (%d WRITEs succeeded)",
		how, rep.errWR, rep.errPage, strings.TrimPrefix(f[1], "posted="), rep.errWR), nil
}

// unmappedSourceStep WRITEs from an unmapped page: the device's read
// faults, the page request fails and the WRITE completes with
// LOC_ACCESS_ERR; nothing reaches the peer.
func (c *churner) unmappedSourceStep() (string, error) {
	if err := c.useNext(); err != nil {
		return "", err
	}
	if _, err := c.writeFrom([]int{holeLo}, hw.IBVWCLocAccessErr); err != nil {
		return "", err
	}
	if _, err := c.o.call("CANARY"); err != nil {
		return "", fmt.Errorf("peer: %w", err)
	}
	return fmt.Sprintf("WRITE from unmapped page %d: LOC_ACCESS_ERR; peer's check area untouched", holeLo), nil
}

// foreignStep puts something else into the hole, inside the region's
// range: a CQ whose queue the kernel maps from the driver's memory
// (VM_IO | VM_PFNMAP) at the hole's first page. The peer's WRITE through
// the region there faults; the driver must not resolve it to the queue's
// page (hmm_range_fault refuses such a mapping), so the WRITE completes
// with REM_ACCESS_ERR and the queue holds none of its bytes. The CQ goes
// again before the remap.
func (c *churner) foreignStep() (string, error) {
	lo, hi := c.unmapped[0], c.unmapped[1]
	if err := c.useNext(); err != nil {
		return "", err
	}
	ring, err := c.v.createCQAt(9, 8, c.mem[lo*odpPage:hi*odpPage])
	if err != nil {
		return "", fmt.Errorf("a CQ's queue into the hole: %w", err)
	}
	defer c.v.destroyCQ(ring)
	before := bytes.Clone(ring.q.buf)
	if _, err := c.o.call("STREAM %#x %#x 1 1", c.mr.rkey, c.mr.addr+uint64(lo)*odpPage); err != nil {
		return "", err
	}
	rep, err := c.stopPages(15*time.Second, 1)
	if err != nil {
		return "", err
	}
	if rep.ended != "error" || rep.err != statusName(hw.IBVWCRemAccessErr) {
		return "", fmt.Errorf("the WRITE into page %d, a CQ's queue now, ended %s: %s, want REM_ACCESS_ERR", lo, rep.ended, rep.err)
	}
	for j := 0; j+8 <= len(before); j += 8 {
		if w := binary.LittleEndian.Uint64(ring.q.buf[j:]); w != binary.LittleEndian.Uint64(before[j:]) {
			return "", fmt.Errorf("the CQ's queue at page %d changed: byte %d is now %s", lo, j, describeWord(w))
		}
	}
	return fmt.Sprintf("a CQ's queue (%d bytes) mapped at page %d: the peer's WRITE there REM_ACCESS_ERR, the queue unchanged", len(before), lo), nil
}

// remapStep maps fresh memory where the upper half was (MAP_FIXED; the
// region still covers it) and fills it with canary; the peer WRITEs every
// target page once: each WRITE into the new pages faults and must land in
// them (a translation left over from the old pages would put it into
// freed memory and leave canary here). Then the churner WRITEs from the
// new pages: the peer must get their bytes.
func (c *churner) remapStep() (string, error) {
	lo, hi := c.unmapped[0], c.unmapped[1]
	if err := mapFixed(c.mem[lo*odpPage : hi*odpPage]); err != nil {
		return "", err
	}
	c.unmapped = [2]int{}
	for k := lo; k < hi; k++ {
		fillPage(c.page(k), tagCanary, 0, k)
		c.expect[k] = pageState{tagCanary, 0, k}
	}
	if err := c.newQP(); err != nil {
		return "", err
	}
	if err := c.startStream(1); err != nil {
		return "", err
	}
	rep, err := c.stop(30 * time.Second)
	if err != nil {
		return "", err
	}
	if rep.ended != "rounds" || rep.err != "OK" || rep.completed != odpTarget {
		return "", fmt.Errorf("one round into the remapped region ended %s after %d WRITEs: WRITE %d (page %d) %s",
			rep.ended, rep.completed, rep.errWR, rep.errPage, rep.err)
	}
	c.absorb(rep, 0, odpTarget)
	if err := c.checkTarget(0, odpTarget); err != nil {
		return "", err
	}
	var src []int
	for k := lo; k < hi; k++ {
		src = append(src, k)
	}
	round, err := c.writeFrom(src, hw.IBVWCSuccess)
	if err != nil {
		return "", fmt.Errorf("from the new pages: %w", err)
	}
	return fmt.Sprintf("%d WRITEs landed in the new pages [%d, %d); %d WRITEs from them (round %d) intact", odpTarget, lo, hi, hi-lo, round), nil
}

// runChurn runs forks fork steps, then munmaps rounds of munmap, WRITE
// from the unmapped pages, a foreign mapping in the hole, remap; it stops
// at the first failure and says BYE.
func (c *churner) runChurn(forks, munmaps int) error {
	fmt.Fprintf(c.out, "ODP region %#x, %d pages (target %d, source %d), lkey %#x\n", c.mr.addr, odpTarget+odpSource, odpTarget, odpSource, c.mr.lkey)
	ok := c.step("connect", func() (string, error) { return "fresh QP pair", c.newQP() })
	for i := 0; ok && i < forks; i++ {
		ok = c.step(fmt.Sprintf("fork-%d", i+1), func() (string, error) { return c.forkStep(i) })
	}
	for i := 0; ok && i < munmaps; i++ {
		ok = c.step(fmt.Sprintf("munmap-%d", i+1), func() (string, error) { return c.munmapStep(i) }) &&
			c.step(fmt.Sprintf("unmapped-%d", i+1), c.unmappedSourceStep) &&
			c.step(fmt.Sprintf("foreign-%d", i+1), c.foreignStep) &&
			c.step(fmt.Sprintf("remap-%d", i+1), c.remapStep)
	}
	if ok && len(c.overlap) > 0 {
		c.step("pinned", c.pinnedStep)
	}
	c.dropQP()
	if _, err := c.o.call("BYE"); err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	if c.failed > 0 {
		return errors.New("a step failed")
	}
	return nil
}

// odpChurnMain runs the ODP churn mode's peer (servePort != 0) or
// churner and returns the exit status.
func odpChurnMain(v *verbs, servePort int, connect string, wait time.Duration, sgid uint8, gid [16]byte, dev string, forks, munmaps int, how string) int {
	if servePort != 0 {
		p, err := newODPPeer(v, sgid, gid)
		if err == nil {
			err = p.serve(servePort)
		}
		if err != nil {
			log.Print(err)
			return 1
		}
		return 0
	}
	o, err := dialOOB(connect, wait)
	if err != nil {
		log.Print(err)
		return 1
	}
	start := time.Now()
	fmt.Printf("device %s, GID index %d (%s), region registered %s\n", dev, sgid, netip.AddrFrom16(gid).Unmap(), how)
	c, err := newChurner(v, o, sgid, gid, os.Stdout, how)
	if err == nil {
		err = c.runChurn(forks, munmaps)
	}
	if c != nil {
		fmt.Printf("odp-churn: %d steps, %d failed, %.1fs\n", c.steps, c.failed, time.Since(start).Seconds())
	}
	if err != nil {
		log.Print(err)
		return 1
	}
	return 0
}
