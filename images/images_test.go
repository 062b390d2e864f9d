package images

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCompareDebianVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"6.1.192-2", "6.1.192-2", 0},
		{"6.1.192-2", "6.1.98-1", 1},   // numeric, not lexical
		{"6.1.9-1", "6.1.10-1", -1},    // numeric, not lexical
		{"1:1.0-1", "2.0-1", 1},        // epoch wins
		{"1.0~rc1-1", "1.0-1", -1},     // tilde sorts before the release
		{"1.0-1~bpo12+1", "1.0-1", -1}, // backport sorts before the release
		{"1.0a-1", "1.0-1", 1},         // a letter sorts after the end
		{"1.0+dfsg-1", "1.0a-1", 1},    // non-letters sort after letters
		{"11.1.3+ds-1~bpo13+1", "11.1.2+ds-1", 1},
		{"0:1.0", "1.0", 0}, // implicit epoch 0
		{"1.0-10", "1.0-9", 1},
	}
	for _, tt := range tests {
		if got := CompareDebianVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareDebianVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := CompareDebianVersions(tt.b, tt.a); got != -tt.want {
			t.Errorf("CompareDebianVersions(%q, %q) = %d, want %d (antisymmetry)", tt.b, tt.a, got, -tt.want)
		}
	}
}

const aptCacheShowKernel = `Package: linux-image-amd64
Source: linux-signed-amd64 (6.1.98+1)
Version: 6.1.98-1
Installed-Size: 13
Depends: linux-image-6.1.0-22-amd64 (= 6.1.98-1)
Description: Linux for 64-bit PCs (meta-package)

Package: linux-image-amd64
Source: linux-signed-amd64 (6.1.192+2)
Version: 6.1.192-2
Installed-Size: 13
Depends: linux-image-6.1.0-56-amd64 (= 6.1.192-2)
Description: Linux for 64-bit PCs (meta-package)
 This package depends on the latest Linux kernel.

Package: linux-image-amd64
Version: 6.1.9-1
Depends: linux-image-6.1.0-3-amd64 (= 6.1.9-1) | linux-image-6.1.0-3-amd64-unsigned
`

func TestSelectKernel(t *testing.T) {
	tests := []struct {
		name, input, wantABI, wantVersion string
		wantErr                           bool
	}{
		{name: "highest of several candidates", input: aptCacheShowKernel, wantABI: "6.1.0-56-amd64", wantVersion: "6.1.192-2"},
		{name: "alternatives", input: "Package: linux-image-amd64\nVersion: 1\nDepends: linux-image-6.1.0-3-amd64 (= 1) | x\n", wantABI: "6.1.0-3-amd64", wantVersion: "1"},
		{name: "empty index", input: "", wantErr: true},
		{name: "other package only", input: "Package: linux-image-cloud-amd64\nVersion: 1\nDepends: linux-image-6.1.0-3-cloud-amd64\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kp, err := SelectKernel("linux-image-amd64", strings.NewReader(tt.input))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && (kp.ABI != tt.wantABI || kp.Version != tt.wantVersion) {
				t.Fatalf("got %+v, want ABI %s version %s", kp, tt.wantABI, tt.wantVersion)
			}
		})
	}
}

func TestHeaderDependencies(t *testing.T) {
	in := "Package: linux-headers-6.1.0-56-amd64\nVersion: 6.1.192-2\nDepends: linux-headers-6.1.0-56-common (= 6.1.192-2), linux-kbuild-6.1 (>= 6.1.192-2), linux-compiler-gcc-12-x86\n"
	got := HeaderDependencies(strings.NewReader(in), "linux-headers-6.1.0-56-amd64")
	if strings.Join(got, " ") != "linux-headers-6.1.0-56-common linux-kbuild-6.1" {
		t.Fatalf("HeaderDependencies = %v", got)
	}
}

func TestDebianMirrorFromAptSources(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		files   map[string]string
		want    string
		wantErr bool
	}{
		{
			name: "deb822 with security and a third-party repo",
			files: map[string]string{"debian.sources": `Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb deb-src
# a comment
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main contrib
`, "vendor.list": "deb https://vendor.example/apt cloud-sdk-bookworm main\n"},
			want: "http://mirror.example/debian",
		},
		{
			name:  "one-line format with options",
			files: map[string]string{"sources.list": "# comment\ndeb-src http://src.example/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main # trailing\n"},
			want:  "http://one.example/debian",
		},
		{
			name:    "disabled stanza is skipped",
			files:   map[string]string{"a.sources": "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\nComponents: main\n"},
			wantErr: true,
		},
		{name: "nothing usable", files: map[string]string{"x.list": "deb http://x.example/ubuntu jammy main\n"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := t.TempDir()
			dir = sub
			var paths []string
			for n, c := range tt.files {
				paths = append(paths, write(n, c))
			}
			got, err := DebianMirror(sub)
			if (err != nil) != tt.wantErr {
				t.Fatalf("DebianMirror err = %v, wantErr %v (paths %v)", err, tt.wantErr, paths)
			}
			if got != tt.want {
				t.Fatalf("DebianMirror = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestKeyChangesWithEveryInput(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "npfnic_main.c")
	if err := os.WriteFile(src, []byte("int x;"), 0o644); err != nil {
		t.Fatal(err)
	}
	key := func() string {
		k := NewKey("module", "1").Add("kernel", "6.1.0-56-amd64")
		if err := k.AddTree("guestdrv", dir, "*.c", "*.h"); err != nil {
			t.Fatal(err)
		}
		return k.Sum()
	}
	base := key()
	if key() != base {
		t.Fatal("key is not deterministic")
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if key() != base {
		t.Fatal("a file outside the patterns changed the key")
	}
	if err := os.WriteFile(src, []byte("int y;"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := key()
	if changed == base {
		t.Fatal("editing a source did not change the key")
	}
	if err := os.WriteFile(filepath.Join(dir, "new.h"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if key() == changed {
		t.Fatal("adding a header did not change the key")
	}
	if NewKey("a", "1").Add("x", "1").Sum() == NewKey("a", "2").Add("x", "1").Sum() {
		t.Fatal("the recipe version is not part of the key")
	}
}

func TestStampFreshness(t *testing.T) {
	dir := t.TempDir()
	k := NewKey("s", "1").Add("in", "a")
	if _, ok := fresh(dir, k); ok {
		t.Fatal("empty dir is fresh")
	}
	if err := writeStamp(dir, stamp{Key: k.Sum(), Info: map[string]string{"v": "1"}}); err != nil {
		t.Fatal(err)
	}
	if st, ok := fresh(dir, k); !ok || st.Info["v"] != "1" {
		t.Fatal("stamped dir is not fresh")
	}
	if _, ok := fresh(dir, NewKey("s", "1").Add("in", "b")); ok {
		t.Fatal("a changed input left the output fresh")
	}
}

func TestRelativizeInclude(t *testing.T) {
	got, ok := RelativizeInclude("include /usr/src/linux-headers-6.1.0-56-common/Makefile\n")
	if !ok || got != "include ../linux-headers-6.1.0-56-common/Makefile\n" {
		t.Fatalf("RelativizeInclude = %q, %v", got, ok)
	}
	if _, ok := RelativizeInclude("include ../x/Makefile\n"); ok {
		t.Fatal("a relative include was rewritten")
	}
}

// fakeBzImage builds the smallest image BzImagePayload accepts.
func fakeBzImage(payload []byte, version uint16) []byte {
	img := make([]byte, 5*512+len(payload))
	img[0x1f1] = 4
	copy(img[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(img[0x206:], version)
	binary.LittleEndian.PutUint32(img[0x248:], 0)
	binary.LittleEndian.PutUint32(img[0x24c:], uint32(len(payload)))
	copy(img[5*512:], payload)
	return img
}

func TestBzImagePayload(t *testing.T) {
	p := []byte("\x1f\x8bpayload")
	got, err := BzImagePayload(fakeBzImage(p, 0x20f))
	if err != nil || !bytes.Equal(got, p) {
		t.Fatalf("payload = %q, %v", got, err)
	}
	bad := [][]byte{nil, make([]byte, 0x300), fakeBzImage(p, 0x206)}
	trunc := fakeBzImage(p, 0x20f)
	bad = append(bad, trunc[:len(trunc)-1])
	for i, img := range bad {
		if _, err := BzImagePayload(img); err == nil {
			t.Errorf("bad image %d accepted", i)
		}
	}
}

func TestExtractVmlinuxXZ(t *testing.T) {
	if _, err := exec.LookPath("xz"); err != nil {
		t.Skip("xz-utils not installed")
	}
	elf := append([]byte("\x7fELF"), bytes.Repeat([]byte("kernel"), 1000)...)
	cmd := exec.Command("xz", "--check=crc32", "--x86", "--lzma2", "-c")
	cmd.Stdin = bytes.NewReader(elf)
	xz, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	// The kernel appends the uncompressed size after the stream.
	xz = binary.LittleEndian.AppendUint32(xz, uint32(len(elf)))
	dir := t.TempDir()
	bz := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(bz, fakeBzImage(xz, 0x20f), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "vmlinux")
	if err := ExtractVmlinux(context.Background(), bz, out); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, elf) {
		t.Fatalf("extracted %d bytes, want %d", len(got), len(elf))
	}
}

func TestHostPackagesListed(t *testing.T) {
	pkgs := HostPackages()
	for _, want := range []string{"debootstrap", "xz-utils", "iperf3", "libmemcached-tools"} {
		found := false
		for _, p := range pkgs {
			found = found || p == want
		}
		if !found {
			t.Errorf("host package %s missing from host-packages.txt (%v)", want, pkgs)
		}
	}
}

// TestVersionedDirs: builds of different inputs get directories of their
// own, and pruning keeps the newest versionsKept of a name, the one in use
// always, any used within versionGrace, and nothing of another name or a
// build in progress.
func TestVersionedDirs(t *testing.T) {
	parent := t.TempDir()
	a := versionedDir(parent, "rdma", NewKey("initramfs", "2").Add("tool", "a"))
	b := versionedDir(parent, "rdma", NewKey("initramfs", "2").Add("tool", "b"))
	if a == b || filepath.Dir(a) != parent || !strings.HasPrefix(filepath.Base(a), "rdma-") {
		t.Fatalf("versioned dirs %s and %s", a, b)
	}
	base := time.Now().Add(-versionGrace - 10*time.Minute)
	var dirs []string
	for i := 0; i < 7; i++ {
		d := filepath.Join(parent, fmt.Sprintf("rdma-%016x", i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		at := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(d, at, at); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	for _, other := range []string{"base-0000000000000000", "rdma-0000000000000009.tmp", "rdmax"} {
		if err := os.Mkdir(filepath.Join(parent, other), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pruneVersions(parent, "rdma", dirs[0]) // the oldest is the one in use
	var left []string
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{"base-0000000000000000", "rdma-0000000000000000", "rdma-0000000000000004", "rdma-0000000000000005",
		"rdma-0000000000000006", "rdma-0000000000000009.tmp", "rdmax"}
	if !slices.Equal(left, want) {
		t.Fatalf("after pruning: %v\nwant %v", left, want)
	}
}

// TestRecentVersionsStay: builds used within versionGrace stay however
// many there are, as a long VM run of another checkout boots from one.
func TestRecentVersionsStay(t *testing.T) {
	parent := t.TempDir()
	for i := 0; i < 2*versionsKept; i++ {
		d := filepath.Join(parent, fmt.Sprintf("rdma-%016x", i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-versionGrace + time.Duration(i+1)*time.Minute)
		if err := os.Chtimes(d, at, at); err != nil {
			t.Fatal(err)
		}
	}
	pruneVersions(parent, "rdma", filepath.Join(parent, "rdma-0000000000000000"))
	if entries, _ := os.ReadDir(parent); len(entries) != 2*versionsKept {
		t.Fatalf("%d builds left of %d used within %v", len(entries), 2*versionsKept, versionGrace)
	}
}

// TestQEMULauncher: the launcher runs the tree's loader with the tree's
// binary and firmware and passes every argument through unchanged, even
// from a cache path that needs quoting; writing it again changes nothing.
func TestQEMULauncher(t *testing.T) {
	root := filepath.Join(t.TempDir(), "it's a $cache", "qemu", "trixie")
	q := QEMU{Root: root}
	if err := os.MkdirAll(q.libDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	// A stand-in loader that prints the arguments it got, one per line.
	loader := filepath.Join(q.libDir(), "ld-linux-x86-64.so.2")
	if err := os.WriteFile(loader, []byte("#!/bin/sh\nfor a; do printf '%s\\n' \"$a\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := q.writeLauncher(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(q.Launcher())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(q.Launcher(), "-machine", "q35", "a b", `"$x"`).Output()
	if err != nil {
		t.Fatalf("launcher: %v", err)
	}
	want := []string{"--library-path", q.libDir(), q.Binary(),
		"-L", filepath.Join(root, "usr/share/qemu"), "-L", filepath.Join(root, "usr/share/seabios"),
		"-machine", "q35", "a b", `"$x"`}
	if got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"); !slices.Equal(got, want) {
		t.Errorf("launcher ran the loader with\n%q\nwant\n%q", got, want)
	}
	if err := q.writeLauncher(); err != nil {
		t.Fatal(err)
	}
	if st2, err := os.Stat(q.Launcher()); err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("writing the same launcher again rewrote it (%v)", err)
	}
}
