package vm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed/child"
)

// The KVM probe boots the guest kernel under KVM with the base initramfs
// and u-root's poweroff as its init (rdinit=/bbin/poweroff): a guest that
// reaches user space powers itself off at once, and its kernel prints
// probeMarker on the console as it does. It proves more than opening
// /dev/kvm does: on some hosts (nested virtualization) /dev/kvm opens and
// creates VMs, yet a guest crawls through its firmware, stops at
// "Booting from ROM.." and never prints a line.
const (
	probeInit   = "/bbin/poweroff"
	probeMarker = "reboot: Power down"
	probeMemMiB = 256
	// probeRecipe is part of the cache key: change it when the probe
	// changes what it boots or how it judges.
	probeRecipe = "1: q35 kvm -cpu host 256M, vmlinux + base initramfs, rdinit=/bbin/poweroff"
)

// The probe's deadlines. Under KVM the kernel prints its first line within
// a fraction of a second and the guest is off within one; the limits leave
// room for a loaded host. A guest silent past probeSilence hangs before its
// kernel; one not off by probeLimit is broken some other way.
const (
	probeSilence = 6 * time.Second
	probeLimit   = 30 * time.Second
)

// KVMProbe is what the KVM probe found.
type KVMProbe struct {
	// Works says a guest booted to user space under KVM.
	Works bool
	// Reason says why KVM does not work ("" when it does).
	Reason string
	// Took is how long the probe's guest ran (0: it did not run, e.g.
	// for want of /dev/kvm).
	Took time.Duration
	// At is when the probe ran.
	At time.Time
	// CacheFile keeps the verdict for the next process ("": no cache);
	// FromCache says the verdict was read from it.
	CacheFile string
	FromCache bool

	key string // the in-process cache's key
}

// probes are this process's verdicts, per QEMU, kernel and initramfs.
var probes = struct {
	mu sync.Mutex
	m  map[string]*probeSlot
}{m: map[string]*probeSlot{}}

type probeSlot struct {
	mu   sync.Mutex // held while probing: callers wait for the verdict
	done bool
	p    KVMProbe
}

// ProbeKVM finds out whether guests boot under KVM on this host, with
// img's QEMU and kernel. The verdict is kept for the rest of the process
// and, in img's cache directory (accel/), for every process of this host
// until the host, its kernel, QEMU or the guest kernel changes (the key
// has QEMU's version, the guest kernel's, the host kernel's release and
// version and the host's boot id); fresh probes again all the same. A
// host without a usable /dev/kvm is told at once, without a guest or a
// cache. The error is for a probe that could not run (ctx ended, QEMU
// did not start); a KVM that does not work is a verdict.
func ProbeKVM(ctx context.Context, img *images.Artifacts, fresh bool) (KVMProbe, error) {
	key := img.QEMU.Binary() + "\x00" + img.Kernel.Vmlinux + "\x00" + img.Initramfs
	probes.mu.Lock()
	slot := probes.m[key]
	if slot == nil {
		slot = &probeSlot{}
		probes.m[key] = slot
	}
	probes.mu.Unlock()
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.done && !fresh {
		return slot.p, nil
	}
	p, err := probeKVM(ctx, img, fresh)
	if err != nil {
		return p, err
	}
	p.key = key
	slot.p, slot.done = p, true
	return p, nil
}

func probeKVM(ctx context.Context, img *images.Artifacts, fresh bool) (KVMProbe, error) {
	if reason := devKVMReason(); reason != "" {
		return KVMProbe{Reason: reason, At: time.Now()}, nil
	}
	var file, key string
	if img.CacheDir != "" {
		dir := filepath.Join(img.CacheDir, "accel")
		key = probeCacheKey(img)
		sum := sha256.Sum256([]byte(key))
		file = filepath.Join(dir, "kvm-"+hex.EncodeToString(sum[:8])+".json")
		// Processes starting together (the test binaries of go test
		// ./...) take turns: the first probes, the others read its
		// verdict.
		unlock, err := lockDir(dir)
		if err != nil {
			return KVMProbe{}, fmt.Errorf("KVM probe cache: %w", err)
		}
		defer unlock()
		if !fresh {
			if p, ok := readProbe(file, key); ok {
				return p, nil
			}
		}
	}
	start := time.Now()
	works, reason, err := ProbeGuest(ctx, img, AccelKVM)
	if err != nil {
		return KVMProbe{}, err
	}
	p := KVMProbe{Works: works, Reason: reason, Took: time.Since(start), At: start, CacheFile: file}
	if file != "" {
		// The key goes in with the verdict, so the file says what it
		// holds for. One that cannot be written costs the next process
		// a probe.
		if writeProbe(file, key, p) != nil {
			p.CacheFile = ""
		}
	}
	return p, nil
}

// devKVMReason says why /dev/kvm cannot be used ("": it can).
func devKVMReason() string {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	switch {
	case err == nil:
		f.Close()
		return ""
	case errors.Is(err, os.ErrNotExist):
		return "no /dev/kvm (the kvm module is not loaded, or the CPU or hypervisor offers no virtualization)"
	case errors.Is(err, os.ErrPermission):
		return "/dev/kvm: permission denied (join its group, usually kvm)"
	}
	return err.Error()
}

// probeCacheKey names what a verdict holds for, one item a line.
func probeCacheKey(img *images.Artifacts) string {
	qemu := img.QEMU.Version
	if qemu == "" {
		qemu = img.QEMU.Binary()
	}
	host := "unknown"
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		host = unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Version[:])
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.Join([]string{
		"probe: " + probeRecipe,
		"qemu: " + qemu,
		"guest kernel: " + img.Kernel.Release + " " + img.Kernel.Version,
		"host kernel: " + host,
		"host boot: " + strings.TrimSpace(string(boot)),
	}, "\n")
}

// probeRecord is a verdict in the cache.
type probeRecord struct {
	Works  bool      `json:"works"`
	Reason string    `json:"reason,omitempty"`
	TookMS int64     `json:"took_ms"`
	At     time.Time `json:"at"`
	Key    []string  `json:"key"`
}

func readProbe(file, key string) (KVMProbe, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return KVMProbe{}, false
	}
	var r probeRecord
	if json.Unmarshal(b, &r) != nil || strings.Join(r.Key, "\n") != key {
		return KVMProbe{}, false
	}
	return KVMProbe{Works: r.Works, Reason: r.Reason, Took: time.Duration(r.TookMS) * time.Millisecond,
		At: r.At, CacheFile: file, FromCache: true}, true
}

func writeProbe(file, key string, p KVMProbe) error {
	b, err := json.MarshalIndent(probeRecord{Works: p.Works, Reason: p.Reason, TookMS: p.Took.Milliseconds(),
		At: p.At.UTC(), Key: strings.Split(key, "\n")}, "", "  ")
	if err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", file, os.Getpid())
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// lockDir creates dir and takes an exclusive flock on its .lock.
func lockDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// ProbeGuest boots the probe guest (the guest kernel with the base
// initramfs, whose init powers it off at once) under accel, KVM or TCG,
// and says whether it reached user space and, if not, why. ProbeKVM runs
// it under KVM; under TCG, with ten times the deadlines, it shows the
// probe guest itself works. The error is for a probe that could not run.
func ProbeGuest(ctx context.Context, img *images.Artifacts, accel Accel) (booted bool, reason string, err error) {
	silence, limit := probeSilence, probeLimit
	if accel != AccelKVM {
		accel, silence, limit = AccelTCG, 10*silence, 10*limit
	}
	dir, err := os.MkdirTemp("", "npfnic-probe-")
	if err != nil {
		return false, "", err
	}
	defer os.RemoveAll(dir)
	fw := filepath.Join(dir, "firmware.log")
	cmd := img.QEMU.Command(context.Background(), probeArgs(img, accel, fw)...)
	return watchProbe(ctx, cmd, accel, fw, silence, limit)
}

// probeArgs is the probe guest's QEMU command line: the machine of every
// guest (machineArgs) under accel, its console on QEMU's stdout and the
// firmware's (SeaBIOS') debug port in fwLog, which says where a guest
// that never reaches its kernel stopped.
func probeArgs(img *images.Artifacts, accel Accel, fwLog string) []string {
	args := []string{"-name", "npfnic-probe"}
	args = append(args, machineArgs(accel, probeMemMiB, 1)...)
	return append(args,
		"-nodefaults", "-display", "none", "-vga", "none", "-no-reboot",
		"-kernel", img.Kernel.Vmlinux, "-initrd", img.Initramfs,
		"-append", "console=ttyS0 panic=-1 rdinit="+probeInit,
		"-serial", "stdio",
		"-chardev", "file,id=fw,path="+fwLog, "-device", "isa-debugcon,iobase=0x402,chardev=fw")
}

// watchProbe runs cmd, the QEMU of a probe guest under accel with its
// console on stdout, and judges it: the guest booted when the console
// shows probeMarker; it did not when QEMU exits without it, when the console stays silent for
// silence (the guest hangs before its kernel: fwLog, if it exists, says
// where) or when the marker has not come after limit. QEMU is killed
// once judged.
func watchProbe(ctx context.Context, cmd *exec.Cmd, accel Accel, fwLog string, silence, limit time.Duration) (bool, string, error) {
	con := &probeConsole{marker: make(chan struct{})}
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, con, &stderr
	// A child that outlives QEMU (none should) must not keep Wait
	// waiting for the end of its output.
	cmd.WaitDelay = time.Second
	if err := child.Start(cmd, syscall.SIGKILL, true); err != nil {
		return false, "", fmt.Errorf("probe guest: start QEMU: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	kill := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	silent, total := time.NewTimer(silence), time.NewTimer(limit)
	defer silent.Stop()
	defer total.Stop()
	for {
		select {
		case <-con.marker:
			kill()
			return true, "", nil
		case err := <-exited:
			if con.seen() {
				return true, "", nil
			}
			if err != nil {
				if l := firstLine(stderr.String()); l != "" {
					return false, fmt.Sprintf("QEMU could not run a guest under %s: %s", accel, l), nil
				}
				return false, fmt.Sprintf("QEMU running a guest under %s exited (%v) (console ends %q)", accel, err, con.lastLine()), nil
			}
			return false, fmt.Sprintf("a guest under %s stopped before its user space could power it off (console ends %q)", accel, con.lastLine()), nil
		case <-silent.C:
			if con.empty() {
				kill()
				return false, fmt.Sprintf("a guest under %s printed nothing in %s: it did not reach its kernel%s", accel, silence, firmwareTail(fwLog)), nil
			}
		case <-total.C:
			kill()
			return false, fmt.Sprintf("a guest under %s started its kernel but had not reached user space and powered off after %s (console ends %q)", accel, limit, con.lastLine()), nil
		case <-ctx.Done():
			kill()
			return false, "", fmt.Errorf("probe guest: %w", ctx.Err())
		}
	}
}

// probeConsole collects the probe guest's console and closes marker when
// probeMarker appears in it.
type probeConsole struct {
	mu     sync.Mutex
	buf    []byte
	marker chan struct{}
	found  bool
}

func (c *probeConsole) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = append(c.buf, p...)
	if !c.found && bytes.Contains(c.buf, []byte(probeMarker)) {
		c.found = true
		close(c.marker)
	}
	return len(p), nil
}

func (c *probeConsole) seen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.found
}

func (c *probeConsole) empty() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(bytes.TrimSpace(c.buf)) == 0
}

func (c *probeConsole) lastLine() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return lastLine(string(c.buf))
}

// firmwareTail quotes the last line of the firmware's debug log, if any:
// how far the guest got. (Where KVM is broken in a nested host, SeaBIOS
// crawls through its set-up, 30 s to "Booting from ROM..." where it
// takes milliseconds, and stops there.)
func firmwareTail(path string) string {
	b, _ := os.ReadFile(path)
	if l := lastLine(string(b)); l != "" {
		return fmt.Sprintf(" (its firmware's last words: %q)", l)
	}
	return ""
}

// lastLine is the last non-blank line of s, trimmed, at most 100 bytes.
func lastLine(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\r", ""))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return s
}

// firstLine is the first non-blank line of s, trimmed.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}
