package vm

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/images"
)

func TestParseAccel(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Accel
		err  bool
	}{
		{"", AccelAuto, false},
		{"auto", AccelAuto, false},
		{"kvm", AccelKVM, false},
		{"tcg", AccelTCG, false},
		{" KVM ", AccelKVM, false},
		{"TCG", AccelTCG, false},
		{"hvf", "", true},
		{"kvm,tcg", "", true},
		{"xen", "", true},
	} {
		got, err := ParseAccel(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseAccel(%q) = %q, %v; want %q, error %v", c.in, got, err, c.want, c.err)
		}
		if err != nil && !strings.Contains(err.Error(), "want kvm, tcg or auto") {
			t.Errorf("ParseAccel(%q): error %q does not list the settings", c.in, err)
		}
	}
}

func TestAccelString(t *testing.T) {
	for a, want := range map[Accel]string{AccelKVM: "KVM", AccelTCG: "TCG", AccelAuto: "auto", "": ""} {
		if got := a.String(); got != want {
			t.Errorf("%q.String() = %q, want %q", string(a), got, want)
		}
	}
}

// TestAccelFlag: -accel takes the three settings, defaults to auto and
// refuses anything else when the flags are parsed, before any work.
func TestAccelFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want Accel
		err  bool
	}{
		{nil, AccelAuto, false},
		{[]string{"-accel", "kvm"}, AccelKVM, false},
		{[]string{"-accel=tcg"}, AccelTCG, false},
		{[]string{"-accel", "auto"}, AccelAuto, false},
		{[]string{"-accel", "qemu"}, AccelAuto, true},
		{[]string{"-accel", ""}, AccelAuto, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(new(bytes.Buffer))
		a := AccelAuto
		fs.Var(&a, "accel", AccelHelp)
		err := fs.Parse(c.args)
		if (err != nil) != c.err || (err == nil && a != c.want) {
			t.Errorf("%q: %q, %v; want %q, error %v", c.args, a, err, c.want, c.err)
		}
	}
	var help bytes.Buffer
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(&help)
	a := AccelAuto
	fs.Var(&a, "accel", AccelHelp)
	fs.PrintDefaults()
	if !strings.Contains(help.String(), "(default auto)") {
		t.Errorf("-accel's help does not show its default:\n%s", help.String())
	}
}

func TestEnvAccel(t *testing.T) {
	for env, want := range map[string]Accel{"": AccelAuto, "tcg": AccelTCG, "kvm": AccelKVM, "auto": AccelAuto} {
		t.Setenv(AccelEnv, env)
		if got, err := EnvAccel(); err != nil || got != want {
			t.Errorf("%s=%q: %q, %v; want %q", AccelEnv, env, got, err, want)
		}
	}
	t.Setenv(AccelEnv, "fast")
	if _, err := EnvAccel(); err == nil || !strings.Contains(err.Error(), AccelEnv) {
		t.Errorf("%s=fast: error %v, want one naming the variable", AccelEnv, err)
	}
	// A guest without a setting takes the variable's, and a bad one
	// fails its boot before anything starts.
	if _, err := ResolveAccel(context.Background(), nil, ""); err == nil {
		t.Errorf("ResolveAccel with %s=fast: no error", AccelEnv)
	}
	t.Setenv(AccelEnv, "tcg")
	if got, err := ResolveAccel(context.Background(), nil, ""); err != nil || got != AccelTCG {
		t.Errorf("ResolveAccel with %s=tcg: %q, %v", AccelEnv, got, err)
	}
}

// fakeProbe makes ProbeKVM answer p for img without probing, as if this
// process had probed it, and resets the notices.
func fakeProbe(t *testing.T, img *images.Artifacts, p KVMProbe) *bytes.Buffer {
	t.Helper()
	key := img.QEMU.Binary() + "\x00" + img.Kernel.Vmlinux + "\x00" + img.Initramfs
	p.key = key
	probes.mu.Lock()
	probes.m[key] = &probeSlot{done: true, p: p}
	probes.mu.Unlock()
	var out bytes.Buffer
	old := notice.out
	notice.mu.Lock()
	notice.out, notice.said = &out, map[string]bool{}
	notice.mu.Unlock()
	t.Cleanup(func() {
		probes.mu.Lock()
		delete(probes.m, key)
		probes.mu.Unlock()
		notice.mu.Lock()
		notice.out, notice.said = old, map[string]bool{}
		notice.mu.Unlock()
	})
	return &out
}

// TestResolveAccel: tcg never probes; kvm and auto take the probe's
// verdict; auto falls back to TCG with one notice naming why, kvm fails.
func TestResolveAccel(t *testing.T) {
	ctx := context.Background()
	if got, err := ResolveAccel(ctx, nil, AccelTCG); err != nil || got != AccelTCG {
		t.Fatalf("tcg: %q, %v", got, err)
	}
	if _, err := ResolveAccel(ctx, nil, AccelAuto); err == nil {
		t.Errorf("auto without images: no error")
	}
	if _, err := ResolveAccel(ctx, &images.Artifacts{}, "qemu"); err == nil {
		t.Errorf("an unknown setting: no error")
	}

	works := &images.Artifacts{Kernel: images.Kernel{Vmlinux: "/works/vmlinux"}}
	out := fakeProbe(t, works, KVMProbe{Works: true, Took: time.Second})
	for _, want := range []Accel{AccelKVM, AccelAuto} {
		if got, err := ResolveAccel(ctx, works, want); err != nil || got != AccelKVM {
			t.Errorf("%s where KVM works: %q, %v; want KVM", want, got, err)
		}
	}
	if out.Len() != 0 {
		t.Errorf("KVM works, yet a notice: %q", out)
	}

	hangs := &images.Artifacts{Kernel: images.Kernel{Vmlinux: "/hangs/vmlinux"}}
	const why = "a guest under KVM printed nothing in 6s"
	out = fakeProbe(t, hangs, KVMProbe{Reason: why, Took: 6 * time.Second})
	for range 3 {
		if got, err := ResolveAccel(ctx, hangs, AccelAuto); err != nil || got != AccelTCG {
			t.Errorf("auto where KVM hangs: %q, %v; want TCG", got, err)
		}
	}
	if n := strings.Count(out.String(), "\n"); n != 1 || !strings.Contains(out.String(), "using TCG") || !strings.Contains(out.String(), why) {
		t.Errorf("auto where KVM hangs: notice %q, want one line with the reason", out)
	}
	if _, err := ResolveAccel(ctx, hangs, AccelKVM); err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("kvm where KVM hangs: error %v, want one with the reason", err)
	}
}

// TestMachineArgs: the QEMU command line of a guest under each
// accelerator; KVM adds -cpu host, and nothing else differs.
func TestMachineArgs(t *testing.T) {
	img := &images.Artifacts{
		QEMU:      images.QEMU{Root: "/q"},
		Kernel:    images.Kernel{Vmlinux: "/k/vmlinux"},
		Initramfs: "/i/base.cpio", RDMAInitramfs: "/i/rdma.cpio", ConformanceInitramfs: "/i/conformance.cpio",
	}
	for _, c := range []struct {
		name    string
		cfg     Config
		accel   Accel
		sockets []string
		want    []string // consecutive arguments that must appear
		not     []string // arguments that must not
	}{
		{name: "tcg", cfg: Config{Name: "g", MemoryMiB: 1024, CPUs: 1}, accel: AccelTCG,
			want: []string{"-machine", "q35,accel=tcg,memory-backend=mem", "-object", "memory-backend-memfd,id=mem,size=1024M,share=on", "-m", "1024M", "-smp", "1"},
			not:  []string{"-cpu", "accel=kvm"}},
		{name: "kvm", cfg: Config{Name: "g", MemoryMiB: 1024, CPUs: 1}, accel: AccelKVM,
			want: []string{"-machine", "q35,accel=kvm,memory-backend=mem", "-object", "memory-backend-memfd,id=mem,size=1024M,share=on", "-m", "1024M", "-smp", "1", "-cpu", "host"},
			not:  []string{"accel=tcg"}},
		{name: "kvm smp", cfg: Config{Name: "g", MemoryMiB: 2048, CPUs: 4}, accel: AccelKVM,
			want: []string{"-m", "2048M", "-smp", "4", "-cpu", "host"}},
		{name: "tcg smp", cfg: Config{Name: "g", MemoryMiB: 512, CPUs: 2}, accel: AccelTCG,
			want: []string{"-object", "memory-backend-memfd,id=mem,size=512M,share=on", "-m", "512M", "-smp", "2"}, not: []string{"-cpu"}},
		{name: "kvm rdma", cfg: Config{Name: "r", MemoryMiB: 1024, CPUs: 1, Variant: images.VariantRDMA}, accel: AccelKVM,
			want: []string{"-kernel", "/k/vmlinux", "-initrd", "/i/rdma.cpio"}},
		{name: "tcg conformance", cfg: Config{Name: "c", MemoryMiB: 1024, CPUs: 1, Variant: images.VariantConformance}, accel: AccelTCG,
			want: []string{"-kernel", "/k/vmlinux", "-initrd", "/i/conformance.cpio"}},
		{name: "kvm devices", cfg: Config{Name: "d", MemoryMiB: 1024, CPUs: 1,
			NICs: []QEMUNIC{{Model: "e1000e", Netdev: Netdev{Kind: "user"}}}}, accel: AccelKVM, sockets: []string{"/s/n0.sock"},
			want: []string{"-device", "pcie-root-port,id=rp1,chassis=1,slot=1", "-device",
				`{"bus":"rp1","driver":"vfio-user-pci","id":"npfnic0","socket":{"path":"/s/n0.sock","type":"unix"}}`,
				"-device", "pcie-root-port,id=rp2,chassis=2,slot=2", "-netdev", "user,id=net0", "-device", "e1000e,netdev=net0,bus=rp2"}},
		{name: "tcg reboot", cfg: Config{Name: "g", MemoryMiB: 1024, CPUs: 1, AllowReboot: true}, accel: AccelTCG,
			not: []string{"-no-reboot"}},
		{name: "kvm no reboot", cfg: Config{Name: "g", MemoryMiB: 1024, CPUs: 1}, accel: AccelKVM,
			want: []string{"-no-reboot"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Images = img
			v := &VM{cfg: c.cfg, accel: c.accel, sockDir: "/s", logDir: "/l"}
			args, err := v.qemuArgs(c.sockets)
			if err != nil {
				t.Fatal(err)
			}
			if !containsRun(args, c.want) {
				t.Errorf("want %q in\n%q", c.want, args)
			}
			for _, n := range c.not {
				for _, a := range args {
					if strings.Contains(a, n) {
						t.Errorf("%q must not appear: %q", n, a)
					}
				}
			}
			if n := countPrefix(args, "-machine"); n != 1 {
				t.Errorf("%d -machine arguments", n)
			}
		})
	}
}

func containsRun(args, run []string) bool {
	if len(run) == 0 {
		return true
	}
	for i := range args {
		if i+len(run) <= len(args) && slices.Equal(args[i:i+len(run)], run) {
			return true
		}
	}
	return false
}

func countPrefix(args []string, p string) int {
	n := 0
	for _, a := range args {
		if a == p {
			n++
		}
	}
	return n
}

// TestProbeArgs: the probe guest boots the guest kernel and the base
// initramfs with u-root's poweroff as init, under the accelerator asked
// for, with the firmware's debug port in a file.
func TestProbeArgs(t *testing.T) {
	img := &images.Artifacts{Kernel: images.Kernel{Vmlinux: "/k/vmlinux"}, Initramfs: "/i/base.cpio", RDMAInitramfs: "/i/rdma.cpio"}
	for _, c := range []struct {
		accel Accel
		want  [][]string
	}{
		{AccelKVM, [][]string{{"-machine", "q35,accel=kvm,memory-backend=mem"}, {"-cpu", "host"}}},
		{AccelTCG, [][]string{{"-machine", "q35,accel=tcg,memory-backend=mem"}}},
	} {
		args := probeArgs(img, c.accel, "/t/fw.log")
		for _, w := range append(c.want,
			[]string{"-kernel", "/k/vmlinux", "-initrd", "/i/base.cpio"},
			[]string{"-append", "console=ttyS0 panic=-1 rdinit=" + probeInit},
			[]string{"-serial", "stdio"}, []string{"-no-reboot"},
			[]string{"-chardev", "file,id=fw,path=/t/fw.log", "-device", "isa-debugcon,iobase=0x402,chardev=fw"}) {
			if !containsRun(args, w) {
				t.Errorf("%s: want %q in %q", c.accel, w, args)
			}
		}
		if c.accel == AccelTCG && slices.Contains(args, "-cpu") {
			t.Errorf("tcg: -cpu in %q", args)
		}
	}
}

// TestWatchProbe judges fake QEMUs: one whose guest powers off, one that
// hangs silent in its firmware (this host's KVM), one whose kernel starts
// and hangs, one that QEMU refuses, one whose guest stops early.
func TestWatchProbe(t *testing.T) {
	dir := t.TempDir()
	fw := filepath.Join(dir, "fw.log")
	if err := os.WriteFile(fw, []byte("SeaBIOS (version 1.16)\nBooting from ROM..\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const silence, limit = 500 * time.Millisecond, 2 * time.Second
	for _, c := range []struct {
		name   string
		script string
		works  bool
		reason []string
		atMost time.Duration
	}{
		{name: "boots", script: `echo "[    0.000000] Linux version 6.1"; echo "[    0.5] Run /bbin/poweroff as init process"; echo "[    0.6] ` + probeMarker + `"; sleep 30`,
			works: true, atMost: limit},
		{name: "boots and exits", script: `echo "[    0.6] ` + probeMarker + `"`, works: true, atMost: limit},
		{name: "hangs in firmware", script: `exec sleep 30`,
			reason: []string{"under KVM printed nothing in 500ms", "did not reach its kernel", `"Booting from ROM.."`}, atMost: limit},
		{name: "hangs in kernel", script: `echo "[    0.000000] Linux version 6.1"; echo "[    0.2] smpboot: CPU0"; exec sleep 30`,
			reason: []string{"started its kernel", "after 2s", `"[    0.2] smpboot: CPU0"`}, atMost: limit + time.Second},
		{name: "refused", script: `echo "qemu-system-x86_64: failed to initialize kvm: Permission denied" >&2; exit 1`,
			reason: []string{"QEMU could not run a guest under KVM: qemu-system-x86_64: failed to initialize kvm: Permission denied"}, atMost: limit},
		{name: "stops", script: `echo "Kernel panic - not syncing: No working init found."`,
			reason: []string{"stopped before its user space", "No working init found"}, atMost: limit},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			works, reason, err := watchProbe(context.Background(), exec.Command("sh", "-c", c.script), AccelKVM, fw, silence, limit)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if works != c.works {
				t.Fatalf("works %v (%q), want %v", works, reason, c.works)
			}
			for _, r := range c.reason {
				if !strings.Contains(reason, r) {
					t.Errorf("reason %q lacks %q", reason, r)
				}
			}
			if strings.Contains(reason, "\n") {
				t.Errorf("reason %q is more than a line", reason)
			}
			if took > c.atMost {
				t.Errorf("judged in %v, want at most %v", took, c.atMost)
			}
		})
	}
	// The caller's end stops the probe at once.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, _, err := watchProbe(ctx, exec.Command("sleep", "30"), AccelKVM, fw, time.Minute, time.Minute); err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("cancelled probe: %v after %v", err, time.Since(start))
	}
}

// TestProbeCache: a verdict is read back only under the key it was
// written with.
func TestProbeCache(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kvm-x.json")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const key = "probe: 1\nqemu: 11.1\nhost boot: a"
	if err := writeProbe(file, key, KVMProbe{Reason: "hangs", Took: 6 * time.Second, At: at}); err != nil {
		t.Fatal(err)
	}
	p, ok := readProbe(file, key)
	if !ok || p.Works || p.Reason != "hangs" || p.Took != 6*time.Second || !p.At.Equal(at) || !p.FromCache || p.CacheFile != file {
		t.Errorf("read back %+v, %v", p, ok)
	}
	if _, ok := readProbe(file, "probe: 1\nqemu: 11.1\nhost boot: b"); ok {
		t.Errorf("a verdict of another boot was taken")
	}
	if _, ok := readProbe(filepath.Join(t.TempDir(), "none.json"), key); ok {
		t.Errorf("a missing file gave a verdict")
	}
	if err := os.WriteFile(file, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := readProbe(file, key); ok {
		t.Errorf("a torn file gave a verdict")
	}
	k := probeCacheKey(&images.Artifacts{QEMU: images.QEMU{Version: "QEMU 11"}, Kernel: images.Kernel{Release: "6.1.0", Version: "6.1.192"}})
	for _, w := range []string{"probe: " + probeRecipe, "qemu: QEMU 11", "guest kernel: 6.1.0 6.1.192", "host kernel: ", "host boot: "} {
		if !strings.Contains(k, w) {
			t.Errorf("cache key lacks %q:\n%s", w, k)
		}
	}
}
