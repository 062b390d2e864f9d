package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/vdevice/hw"
)

func TestODPWord(t *testing.T) {
	for _, tc := range []struct {
		tag         uint16
		round       uint32
		page, j     int
		want        uint64
		description string
	}{
		{tagPeer, 1, 0, 0, 0x7e57_000001_000_000, "peer round 1 page 0 word 0"},
		{tagLocal, 0xabcdef, 0xfff, 511, 0x10ca_abcdef_fff_1ff, "local round 11259375 page 4095 word 511"},
		{tagCanary, 0, 3, 7, 0xca4a_000000_003_007, "canary round 0 page 3 word 7"},
		// The round wraps at 2^24; page and word numbers are masked.
		{tagMark, 1<<24 + 2, 0x1001, 0x1002, 0x3a4c_000002_001_002, "child round 2 page 1 word 2"},
	} {
		got := odpWord(tc.tag, tc.round, tc.page, tc.j)
		if got != tc.want {
			t.Errorf("odpWord(%#x, %d, %d, %d) = %#x, want %#x", tc.tag, tc.round, tc.page, tc.j, got, tc.want)
		}
		if d := describeWord(got); d != tc.description {
			t.Errorf("describeWord(%#x) = %q, want %q", got, d, tc.description)
		}
	}
	if d := describeWord(0x1234); d != "0x0000000000001234" {
		t.Errorf("an untagged word is described as %q", d)
	}
}

func TestCheckPage(t *testing.T) {
	page := make([]byte, odpPage)
	fillPage(page, tagPeer, 5, 3)
	for _, tc := range []struct {
		name    string
		mangle  func(b []byte)
		tag     uint16
		round   uint32
		page    int
		wantErr string
	}{
		{name: "intact", tag: tagPeer, round: 5, page: 3},
		{name: "older round", tag: tagPeer, round: 6, page: 3, wantErr: "page 3 word 0 is peer round 5 page 3 word 0, want peer round 6 page 3 word 0"},
		{name: "other page", tag: tagPeer, round: 5, page: 4, wantErr: "word 0 is peer round 5 page 3"},
		{name: "torn", mangle: func(b []byte) { fillPage(b[2048:], tagCanary, 0, 3) }, tag: tagPeer, round: 5, page: 3,
			wantErr: "page 3 word 256 is canary round 0 page 3 word 0"},
		{name: "short", mangle: nil, tag: tagLocal, round: 5, page: 3, wantErr: "word 0 is peer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(page)
			b = append(b, make([]byte, odpPage)...) // fillPage of a half page needs room
			if tc.mangle != nil {
				tc.mangle(b)
			}
			err := checkPage(b[:odpPage], tc.tag, tc.round, tc.page)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
	if err := checkPage(page[:100], tagPeer, 5, 3); err == nil {
		t.Error("a short page passed")
	}
}

// TestStreamLog: the peer's account of a stream, from its completions to
// the report the churner reads back.
func TestStreamLog(t *testing.T) {
	const ok, remAccess, flush = hw.IBVWCSuccess, hw.IBVWCRemAccessErr, hw.IBVWCWRFlushErr
	type event struct {
		post   int    // WRITEs to post first
		status uint32 // then complete the oldest with this
		unmap  [2]int // or, if set, UNMAPPED lo hi (before the completion)
	}
	for _, tc := range []struct {
		name    string
		pages   int
		rounds  int
		events  []event
		more    bool
		report  string
		last    []int64
		errPage int
	}{
		{name: "nothing", pages: 4, more: true,
			report: "ended=x posted=0 completed=0 err=OK errwr=0 errpage=-1 late=0 latewr=0 rounds=-,-,-,-", last: []int64{-1, -1, -1, -1}, errPage: -1},
		{name: "a round and a half", pages: 4, more: true,
			events: []event{{post: 6, status: ok}, {status: ok}, {status: ok}, {status: ok}, {status: ok}, {status: ok}},
			report: "ended=x posted=6 completed=6 err=OK errwr=0 errpage=-1 late=0 latewr=0 rounds=11,11,10,10", last: []int64{11, 11, 10, 10}, errPage: -1},
		{name: "rounds done", pages: 2, rounds: 1,
			events: []event{{post: 2, status: ok}, {status: ok}},
			report: "ended=x posted=2 completed=2 err=OK errwr=0 errpage=-1 late=0 latewr=0 rounds=10,10", last: []int64{10, 10}, errPage: -1},
		{name: "munmap: error, then flushes", pages: 4,
			events: []event{{post: 3, status: ok}, {unmap: [2]int{2, 4}}, {status: ok}, {post: 2, status: remAccess}, {status: flush}, {status: flush}},
			report: "ended=x posted=5 completed=5 err=REM_ACCESS_ERR errwr=2 errpage=2 late=0 latewr=0 rounds=10,10,-,-", last: []int64{10, 10, -1, -1}, errPage: 2},
		{name: "WRITEs into unmapped pages succeed", pages: 4, more: true,
			// UNMAPPED after 2 posts: WRITE 1 (page 1) may still land, WRITE 2 and 3 may not.
			events: []event{{post: 2, unmap: [2]int{1, 4}}, {status: ok}, {status: ok}, {post: 2, status: ok}, {status: ok}},
			report: "ended=x posted=4 completed=4 err=OK errwr=0 errpage=-1 late=2 latewr=2 rounds=10,10,10,10", last: []int64{10, 10, 10, 10}, errPage: -1},
		{name: "a completion nobody posted", pages: 4,
			events: []event{{post: 1, status: ok}, {status: ok}},
			report: "ended=x posted=1 completed=2 err=status(4294967295) errwr=1 errpage=1 late=0 latewr=0 rounds=10,-,-,-", last: []int64{10, -1, -1, -1}, errPage: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newStreamLog(tc.pages, tc.rounds, 10)
			next := uint64(0) // the oldest WRITE not completed
			for _, e := range tc.events {
				for range e.post {
					l.post()
				}
				if e.unmap != [2]int{} {
					l.unmap(e.unmap[0], e.unmap[1])
					continue
				}
				l.complete(next, e.status)
				next++
			}
			if l.more() != tc.more {
				t.Errorf("more() = %v, want %v", l.more(), tc.more)
			}
			got := l.report("x")
			if got != tc.report {
				t.Fatalf("report\n got %s\nwant %s", got, tc.report)
			}
			rep, err := parseStreamReport(strings.Fields(got))
			if err != nil {
				t.Fatal(err)
			}
			if rep.ended != "x" || rep.posted != l.posted || rep.completed != l.completed || rep.errPage != tc.errPage ||
				rep.late != l.late || len(rep.last) != len(tc.last) {
				t.Fatalf("read back as %+v", rep)
			}
			for i := range tc.last {
				if rep.last[i] != tc.last[i] {
					t.Errorf("page %d: last round %d, want %d", i, rep.last[i], tc.last[i])
				}
			}
			if r := l.nextRound(); r != 10+uint32((l.posted+uint64(tc.pages)-1)/uint64(tc.pages)) {
				t.Errorf("nextRound %d after %d posted", r, l.posted)
			}
		})
	}
}

func TestParseStreamReport(t *testing.T) {
	good := "ended=error posted=5 completed=5 err=REM_ACCESS_ERR errwr=2 errpage=2 late=0 latewr=0 rounds=10,10,-,-"
	if _, err := parseStreamReport(strings.Fields(good)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"",
		"ended=error",
		strings.Replace(good, "posted=5", "posted=x", 1),
		strings.Replace(good, "errpage=2", "errpage=", 1),
		strings.Replace(good, "rounds=10,10,-,-", "rounds=10,,-,-", 1),
		strings.Replace(good, "rounds=10,10,-,-", "rounds=10,-3", 1),
		strings.Replace(good, " late=0", " late", 1),
		strings.Replace(good, "err=REM_ACCESS_ERR", "err=", 1),
	} {
		if r, err := parseStreamReport(strings.Fields(bad)); err == nil {
			t.Errorf("%q read as %+v", bad, r)
		}
	}
}

// TestForkWatch forks this (multi-threaded Go) test process as the
// churner does: the child watches its copy of a region while the parent
// writes its own. A private mapping's copy does not change (COW); a
// shared mapping's does, and the child names the first page that did.
func TestForkWatch(t *testing.T) {
	const pages = 4
	for _, tc := range []struct {
		name   string
		shared bool
		mark   bool
		watch  bool
		write  int // the parent writes this page after the fork (-1: none)
		want   int // the child's exit status
	}{
		{name: "private, parent writes", watch: true, write: 2, want: 0},
		{name: "private, child marks its copy", watch: true, mark: true, write: 1, want: 0},
		{name: "shared, parent writes page 2", shared: true, watch: true, write: 2, want: 3},
		{name: "shared, child marks, parent writes page 0", shared: true, watch: true, mark: true, write: 0, want: 1},
		{name: "shared, nothing written", shared: true, watch: true, write: -1, want: 0},
		{name: "no watch", write: 3, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := unix.MAP_PRIVATE
			if tc.shared {
				flags = unix.MAP_SHARED
			}
			mem, err := unix.Mmap(-1, 0, pages*odpPage, unix.PROT_READ|unix.PROT_WRITE, flags|unix.MAP_ANONYMOUS)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(mem)
			snap, err := anonymous(pages * odpPage)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(snap)
			for k := range pages {
				fillPage(mem[k*odpPage:], tagCanary, 0, k)
			}
			j := &childJob{watch: tc.watch, mem: mem, snap: snap}
			if tc.mark {
				j.mark = odpWord(tagMark, 1, 0, 0)
			}
			c, err := forkWatch(j)
			if err != nil {
				t.Fatal(err)
			}
			if tc.write >= 0 {
				if tc.shared {
					// The child snapshots right after the fork: a change
					// before it would go unseen (the test would fail, not
					// pass falsely).
					time.Sleep(200 * time.Millisecond)
				}
				fillPage(mem[tc.write*odpPage:], tagPeer, 1, tc.write)
			}
			st, err := c.wait()
			if err != nil {
				t.Fatal(err)
			}
			if st != tc.want {
				t.Errorf("child exit %d, want %d", st, tc.want)
			}
			// The parent's memory is its own: the child's mark never shows.
			if tc.mark && !tc.shared && bytes.Contains(mem, le64(j.mark)) {
				t.Error("the child's mark reached the parent's private copy")
			}
		})
	}
}

func le64(v uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b
}

// TestUnmapRemap: munmap of part of a mapping leaves the rest, mapFixed
// puts fresh zero pages where it was, and never over a mapping.
func TestUnmapRemap(t *testing.T) {
	mem, err := anonymous(4 * odpPage)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	for k := range 4 {
		fillPage(mem[k*odpPage:], tagCanary, 0, k)
	}
	if err := unmapRange(mem[2*odpPage:]); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mlock(mem[2*odpPage : 3*odpPage]); err == nil {
		t.Error("the unmapped pages can still be locked")
	}
	if err := mapFixed(mem[2*odpPage:]); err != nil {
		t.Fatal(err)
	}
	if err := mapFixed(mem[3*odpPage:]); err == nil {
		t.Error("mapFixed replaced a mapping")
	}
	if !bytes.Equal(mem[2*odpPage:], make([]byte, 2*odpPage)) {
		t.Error("the remapped pages are not fresh")
	}
	for k := range 2 {
		if err := checkPage(mem[k*odpPage:], tagCanary, 0, k); err != nil {
			t.Error(err)
		}
	}
}
