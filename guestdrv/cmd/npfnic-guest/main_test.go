package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
)

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want command
		bad  bool
	}{
		{args: []string{"find"}, want: command{name: "find"}},
		{args: []string{"bar", "read", "0000:01:00.0", "0x8"}, want: command{name: "bar-read", bdf: "0000:01:00.0", offset: 8}},
		{args: []string{"bar", "read", "01:00.0", "8"}, want: command{name: "bar-read", bdf: "0000:01:00.0", offset: 8}},
		{args: []string{"bar", "write", "0000:01:00.0", "0x8", "0xdeadbeef"}, want: command{name: "bar-write", bdf: "0000:01:00.0", offset: 8, value: 0xdeadbeef}},
		{args: []string{"dmatest", "0000:00:03.0", "4096", "0x1234"}, want: command{name: "dmatest", bdf: "0000:00:03.0", length: 4096, seed: 0x1234}},
		{args: []string{"tcp-send", "10.0.0.1:5000", "/tmp/f"}, want: command{name: "tcp-send", addr: "10.0.0.1:5000", file: "/tmp/f"}},
		{args: []string{"tcp-recv", ":5000", "/tmp/f"}, want: command{name: "tcp-recv", addr: ":5000", file: "/tmp/f"}},
		{args: []string{"tcp-send", "10.0.0.1:5000"}, bad: true},
		{args: []string{}, bad: true},
		{args: []string{"find", "x"}, bad: true},
		{args: []string{"bar"}, bad: true},
		{args: []string{"bar", "poke", "0000:01:00.0", "0"}, bad: true},
		{args: []string{"bar", "read", "0000:01:00.0", "6"}, bad: true},  // unaligned
		{args: []string{"bar", "read", "1:0.0", "0"}, bad: true},         // malformed BDF
		{args: []string{"bar", "read", "0000:01:00.8", "0"}, bad: true},  // function > 7
		{args: []string{"bar", "write", "0000:01:00.0", "0"}, bad: true}, // missing value
		{args: []string{"bar", "write", "0000:01:00.0", "0", "0x1ffffffff"}, bad: true},
		{args: []string{"dmatest", "0000:00:03.0", "0", "1"}, bad: true},
		{args: []string{"dmatest", "0000:00:03.0", "x", "1"}, bad: true},
		{args: []string{"irqtest", "0000:00:03.0", "1"}, bad: true},
		{args: []string{"rsh-serve", "10.81.0.2"}, want: command{name: "rsh-serve", addr: "10.81.0.2"}},
		{args: []string{"rsh", "10.81.0.2", "orted", "-mca", "ess", `"env"`}, want: command{name: "rsh", addr: "10.81.0.2", argv: []string{"orted", "-mca", "ess", `"env"`}}},
		{args: []string{"rsh", "10.81.0.2"}, bad: true},
		{args: []string{"rsh-serve"}, bad: true},
		{args: []string{"zram-swap", "256"}, want: command{name: "zram-swap", length: 256}},
		{args: []string{"zram-swap"}, bad: true},
		{args: []string{"pageout", "42", "100", "5000"}, want: command{name: "pageout", pid: 42, every: 100 * time.Millisecond, total: 5 * time.Second}},
		{args: []string{"pageout", "0", "100", "5000"}, bad: true},
		{args: []string{"pageout", "42", "100"}, bad: true},
		{args: []string{"pageout", "x", "100", "5000"}, bad: true},
	} {
		got, err := parseCommand(tc.args)
		if tc.bad {
			if err == nil {
				t.Errorf("%q accepted: %+v", tc.args, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q = %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
}

func TestPagemapDecoding(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry uint64
		va    uint64
		phys  uint64
		bad   bool
	}{
		{name: "present", entry: 1<<63 | 0x1234, va: 0x7f0000001abc, phys: 0x1234abc},
		{name: "flags above pfn ignored", entry: 1<<63 | 1<<61 | 1<<55 | 0x10, va: 0x5000, phys: 0x10000},
		{name: "not present", entry: 0x1234, bad: true},
		{name: "swapped", entry: 1<<62 | 0x1234, bad: true},
		{name: "pfn hidden", entry: 1 << 63, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := physAddr(tc.entry, tc.va, 4096)
			if tc.bad != (err != nil) || (!tc.bad && got != tc.phys) {
				t.Fatalf("physAddr = %#x, %v; want %#x", got, err, tc.phys)
			}
		})
	}
	if contiguous([]uint64{5, 6, 7}) != nil || contiguous([]uint64{5, 7}) == nil || contiguous(nil) != nil {
		t.Fatal("contiguous")
	}
}

func TestFindDevices(t *testing.T) {
	root := t.TempDir()
	mk := func(bdf, vendor, device string) {
		d := filepath.Join(root, bdf)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "vendor"), []byte(vendor+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "device"), []byte(device+"\n"), 0o644)
	}
	mk("0000:00:01.0", "0x8086", "0x29c0")
	mk("0000:01:00.0", "0x4e50", "0x4e46")
	mk("0000:02:00.0", "0x4e50", "0x1111")
	old := sysfsPCI
	sysfsPCI = root
	defer func() { sysfsPCI = old }()
	got, err := findDevices()
	if err != nil || !reflect.DeepEqual(got, []string{"0000:01:00.0"}) {
		t.Fatalf("findDevices = %v, %v", got, err)
	}
}

func TestVerifyPattern(t *testing.T) {
	b := make([]byte, 100)
	for i := range b {
		b[i] = hw.DiagPattern(3, uint32(i))
	}
	if bad, first := verifyPattern(b, 3); bad != 0 || first != -1 {
		t.Fatal("clean buffer flagged")
	}
	b[40] ^= 1
	b[90] ^= 1
	if bad, first := verifyPattern(b, 3); bad != 2 || first != 40 {
		t.Fatalf("bad=%d first=%d", bad, first)
	}
}

func TestBARAccessOnFile(t *testing.T) {
	// A regular file stands in for resource0: same mmap path.
	root := t.TempDir()
	dir := filepath.Join(root, "0000:01:00.0")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "resource0"), make([]byte, 4096), 0o644)
	old := sysfsPCI
	sysfsPCI = root
	defer func() { sysfsPCI = old }()
	bar, err := openBAR("0000:01:00.0", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer bar.close()
	if err := bar.write32(hw.RegScratch, 0x11223344); err != nil {
		t.Fatal(err)
	}
	if v, err := bar.read32(hw.RegScratch); err != nil || v != 0x11223344 {
		t.Fatalf("read back %#x %v", v, err)
	}
	if _, err := bar.read32(4096); err == nil {
		t.Fatal("read past the BAR allowed")
	}
}

func TestAllocDMABuffer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pagemap frame numbers need root")
	}
	buf, phys, err := allocDMABuffer(100)
	if err != nil {
		t.Skipf("no usable pagemap here: %v", err)
	}
	defer unixMunmap(buf)
	if len(buf) != os.Getpagesize() || phys == 0 || phys%uint64(os.Getpagesize()) != 0 {
		t.Fatalf("len %d phys %#x", len(buf), phys)
	}
}

func TestTCPSendRecvRoundTrip(t *testing.T) {
	dir := t.TempDir()
	src := dir + "/src"
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i*31 + i>>9)
	}
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var recvOut, sendOut bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- tcpRecv(addr, dir+"/dst", &recvOut) }()
	for i := 0; ; i++ {
		if err = tcpSend(addr, src, &sendOut); err == nil || i > 100 {
			break
		}
		time.Sleep(10 * time.Millisecond) // receiver not listening yet
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dir + "/dst")
	sum := fmt.Sprintf("%x", sha256.Sum256(data))
	if !bytes.Equal(got, data) || !strings.Contains(sendOut.String(), sum) || !strings.Contains(recvOut.String(), sum) {
		t.Fatalf("round trip: equal=%v send=%q recv=%q want sha %s", bytes.Equal(got, data), sendOut.String(), recvOut.String(), sum)
	}
}

func TestSwapHeader(t *testing.T) {
	h, err := swapHeader(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 4096 || string(h[4086:]) != "SWAPSPACE2" {
		t.Fatalf("no signature at the end of the first page: %q", h[4086:])
	}
	if v, last := binary.LittleEndian.Uint32(h[1024:]), binary.LittleEndian.Uint32(h[1028:]); v != 1 || last != 64<<20/4096-1 {
		t.Fatalf("version %d, last_page %d", v, last)
	}
	if _, err := swapHeader(4096 * 9); err == nil {
		t.Fatal("a 9-page swap device accepted")
	}
}

func TestAnonRanges(t *testing.T) {
	maps := `55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 
7f1e30000000-7f1e30001000 r--p 00000000 00:00 0 
7f1e34000000-7f1e34100000 rw-s 00000000 00:05 1234                       /dev/infiniband/uverbs0
7f1e38000000-7f1e38002000 rw-p 00002000 08:01 5678                       /usr/lib/libc.so.6
7ffd4a000000-7ffd4a021000 rw-p 00000000 00:00 0                          [stack]
7ffd4a100000-7ffd4a102000 r-xp 00000000 00:00 0                          [vdso]
`
	got, err := anonRanges(strings.NewReader(maps))
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]uint64{{0x55d0c0a00000, 0x55d0c0a21000}, {0x7f1e2c000000, 0x7f1e2c021000}, {0x7ffd4a000000, 0x7ffd4a021000}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %x want %x", got, want)
	}
	if _, err := anonRanges(strings.NewReader("zz-yy rw-p 0 00:00 0\n")); err == nil {
		t.Fatal("a malformed line accepted")
	}
}
