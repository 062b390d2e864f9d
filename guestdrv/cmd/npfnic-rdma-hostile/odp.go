package main

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// The ODP churn mode (-odp-churn): the process that owns an on-demand
// paged memory region forks and unmaps parts of it while RDMA transfers
// run into it and out of it, and checks that the device never reaches a
// page the process no longer maps (issue 13's munmap and fork test). The
// churner (-c, the device under test, npfnic) drives; the peer (-serve,
// any rxe-ABI device, rdma_rxe in the VM test) keeps a pinned region and
// streams RDMA WRITEs into the churner's region on request.
//
// The churner's region is odpTarget + odpSource pages of anonymous
// memory, registered with IB_ACCESS_ON_DEMAND: the peer WRITEs into the
// target pages; the churner WRITEs from the source pages into the peer's
// check area. Every page moves whole (one page per WRITE) and every 8-byte
// word says who wrote it, in which round and for which page (odpWord), so
// a page that lost a write, or got one meant for another page or time,
// says so. The steps (odp_churn.go): forks, each checked by its child and
// by the data; then rounds of: munmap of the target's upper half
// mid-stream, a WRITE from the hole, a CQ's queue mapped into the hole
// and a WRITE into it, fresh memory mapped there.
//
// The out-of-band exchange (one TCP connection of text lines, as for the
// hostile cases: the churner asks, the peer answers each line):
//
//	QP qpn psn gid        a fresh peer QP (the last one destroyed) connected
//	                      to the churner's; answer QP qpn psn gid rkey addr
//	                      length (the peer's check area)
//	STREAM rkey addr pages rounds
//	                      the peer WRITEs page after page (odpWord with
//	                      tagPeer, one page each) to addr+page*4096,
//	                      round after round, up to odpWindow outstanding,
//	                      for rounds rounds (0: until STOP or an error);
//	                      rounds are numbered across the session, never
//	                      twice; answer STREAMING round0
//	PROGRESS              answer PROGRESS posted=N completed=N failed=0|1
//	UNMAPPED lo hi        the churner unmapped pages [lo, hi) of the target:
//	                      a WRITE into them posted from now on must fail;
//	                      answer UNMAPPED posted=N
//	STOP ms               wait up to ms for the stream to end by itself (an
//	                      error, or its rounds done), then stop it and take
//	                      its last completions; answer STOPPED and the
//	                      stream's account (streamLog.report)
//	CHECK round pages     the first pages pages of the check area hold the
//	                      churner's WRITEs of round (odpWord with tagLocal);
//	                      answer OK, and they are canary again
//	CANARY                the whole check area is canary; answer OK
//	BYE                   the session ends
const (
	odpPage   = 4096
	odpWords  = odpPage / 8
	odpTarget = 16 // pages the peer WRITEs into
	odpSource = 8  // pages the churner WRITEs from
	odpCheck  = 16 // the peer's check area, the target of the churner's WRITEs
	odpWindow = 8  // the peer's stream: WRITEs outstanding at most
)

// Who wrote a word (its top 16 bits).
const (
	tagPeer   = 0x7e57 // the peer's RDMA WRITE into the churner's region
	tagLocal  = 0x10ca // the churner's RDMA WRITE from its region into the peer's
	tagCanary = 0xca4a // nobody since the page was (re)filled
	tagMark   = 0x3a4c // a forked child, into its own copy
)

// odpWord is word j of page page as tag wrote it in round round: tag in
// bits 63:48, round in 47:24 (modulo 2^24), page in 23:12, j in 11:0.
func odpWord(tag uint16, round uint32, page, j int) uint64 {
	return uint64(tag)<<48 | uint64(round&0xffffff)<<24 | uint64(page&0xfff)<<12 | uint64(j&0xfff)
}

// describeWord says what a word is: "tag round R page P word J", or its
// value when it is none of the tags.
func describeWord(w uint64) string {
	names := map[uint16]string{tagPeer: "peer", tagLocal: "local", tagCanary: "canary", tagMark: "child"}
	name, ok := names[uint16(w>>48)]
	if !ok {
		return fmt.Sprintf("%#016x", w)
	}
	return fmt.Sprintf("%s round %d page %d word %d", name, w>>24&0xffffff, w>>12&0xfff, w&0xfff)
}

// fillPage writes page page of round round as tag writes it.
func fillPage(b []byte, tag uint16, round uint32, page int) {
	for j := range odpWords {
		binary.LittleEndian.PutUint64(b[j*8:], odpWord(tag, round, page, j))
	}
}

// checkPage is nil if b holds page page of round round as tag wrote it,
// else the first word that differs and what it is.
func checkPage(b []byte, tag uint16, round uint32, page int) error {
	if len(b) < odpPage {
		return fmt.Errorf("page %d: %d bytes", page, len(b))
	}
	for j := range odpWords {
		got, want := binary.LittleEndian.Uint64(b[j*8:]), odpWord(tag, round, page, j)
		if got != want {
			return fmt.Errorf("page %d word %d is %s, want %s", page, j, describeWord(got), describeWord(want))
		}
	}
	return nil
}

// streamLog is the peer's account of one stream: WRITE number idx (from 0,
// its wr_id) goes to page idx % pages in round round0 + idx / pages; the
// completions come in that order. Pure bookkeeping: the peer calls it
// under its lock.
type streamLog struct {
	pages  int
	round0 uint32
	rounds int // 0: unlimited

	posted, completed uint64
	// last is, for each page, the round of its last WRITE that completed
	// successfully, -1 if none did.
	last []int64
	// The first completion that was not a success.
	failed  bool
	errWR   uint64
	errStat uint32
	// After UNMAPPED: WRITEs numbered unmapFrom or later into pages
	// [unLo, unHi) must fail; late counts those that succeeded.
	unmapped     bool
	unmapFrom    uint64
	unLo, unHi   int
	late, lateWR uint64
}

func newStreamLog(pages, rounds int, round0 uint32) *streamLog {
	l := &streamLog{pages: pages, rounds: rounds, round0: round0, last: make([]int64, pages)}
	for i := range l.last {
		l.last[i] = -1
	}
	return l
}

// target is where WRITE idx goes.
func (l *streamLog) target(idx uint64) (round uint32, page int) {
	return l.round0 + uint32(idx/uint64(l.pages)), int(idx % uint64(l.pages))
}

// more reports whether the stream may post another WRITE: no error came
// back and its rounds are not done.
func (l *streamLog) more() bool {
	return !l.failed && (l.rounds == 0 || l.posted < uint64(l.rounds)*uint64(l.pages))
}

// post numbers the next WRITE.
func (l *streamLog) post() uint64 {
	l.posted++
	return l.posted - 1
}

// complete records the completion of WRITE idx with status (a hw.IBVWC*
// value; 0 is success).
func (l *streamLog) complete(idx uint64, status uint32) {
	l.completed++
	if idx >= l.posted {
		// Not a WRITE of this stream: account it as a failure.
		status = ^uint32(0)
	}
	if status != 0 {
		if !l.failed {
			l.failed, l.errWR, l.errStat = true, idx, status
		}
		return
	}
	round, page := l.target(idx)
	l.last[page] = int64(round)
	if l.unmapped && idx >= l.unmapFrom && page >= l.unLo && page < l.unHi {
		if l.late == 0 {
			l.lateWR = idx
		}
		l.late++
	}
}

// unmap records UNMAPPED lo hi and returns from which WRITE on it holds.
func (l *streamLog) unmap(lo, hi int) uint64 {
	l.unmapped, l.unmapFrom, l.unLo, l.unHi = true, l.posted, lo, hi
	return l.posted
}

// nextRound is the first round a later stream may use.
func (l *streamLog) nextRound() uint32 {
	return l.round0 + uint32((l.posted+uint64(l.pages)-1)/uint64(l.pages))
}

// report is the stream's account, as STOPPED's answer carries it: ended
// (why the stream ended), posted, completed, the first error (err=OK if
// none, errwr, errpage), late and latewr (WRITEs into unmapped pages that
// succeeded) and rounds (last, page by page, - for none).
func (l *streamLog) report(ended string) string {
	err, errPage := "OK", -1
	if l.failed {
		err = statusName(l.errStat)
		_, errPage = l.target(l.errWR)
	}
	rounds := make([]string, len(l.last))
	for i, r := range l.last {
		rounds[i] = "-"
		if r >= 0 {
			rounds[i] = strconv.FormatInt(r, 10)
		}
	}
	return fmt.Sprintf("ended=%s posted=%d completed=%d err=%s errwr=%d errpage=%d late=%d latewr=%d rounds=%s",
		ended, l.posted, l.completed, err, l.errWR, errPage, l.late, l.lateWR, strings.Join(rounds, ","))
}

// streamReport is a report read back by the churner.
type streamReport struct {
	ended             string
	posted, completed uint64
	err               string // a status name; OK if none
	errWR             uint64
	errPage           int
	late, lateWR      uint64
	last              []int64
}

// keyValues reads key=value fields; every field must be one.
func keyValues(f []string) (map[string]string, error) {
	kv := make(map[string]string, len(f))
	for _, s := range f {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("field %q is not key=value", s)
		}
		kv[k] = v
	}
	return kv, nil
}

// parseStreamReport reads report's fields (after the STOPPED word).
func parseStreamReport(f []string) (streamReport, error) {
	kv, err := keyValues(f)
	if err != nil {
		return streamReport{}, err
	}
	r := streamReport{ended: kv["ended"], err: kv["err"]}
	for _, n := range []struct {
		key string
		p   *uint64
	}{{"posted", &r.posted}, {"completed", &r.completed}, {"errwr", &r.errWR}, {"late", &r.late}, {"latewr", &r.lateWR}} {
		if *n.p, err = strconv.ParseUint(kv[n.key], 10, 64); err != nil {
			return streamReport{}, fmt.Errorf("stream report %s: %w", n.key, err)
		}
	}
	if r.errPage, err = strconv.Atoi(kv["errpage"]); err != nil {
		return streamReport{}, fmt.Errorf("stream report errpage: %w", err)
	}
	if r.ended == "" || r.err == "" || kv["rounds"] == "" {
		return streamReport{}, fmt.Errorf("stream report without ended, err or rounds: %q", f)
	}
	for _, s := range strings.Split(kv["rounds"], ",") {
		v := int64(-1)
		if s != "-" {
			if v, err = strconv.ParseInt(s, 10, 64); err != nil || v < 0 {
				return streamReport{}, fmt.Errorf("stream report rounds: %q", s)
			}
		}
		r.last = append(r.last, v)
	}
	return r, nil
}
