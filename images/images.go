// Package images builds, idempotently and cached, everything a guest VM needs:
// QEMU with the vfio-user client (from Debian trixie-backports, in its own
// debootstrap'd tree), the guest kernel (Debian bookworm's) with headers for
// out-of-tree modules, the npfnic guest driver module, a bookworm userland to
// take guest programs from, and u-root initramfs images.
//
// Every step writes its output into its own directory under the cache and a
// stamp holding the hash of its inputs last; a step whose stamp matches is
// skipped, so a second build with nothing changed takes seconds and a changed
// driver source rebuilds only the module and the initramfs.
//
// The driver and the guest tools are built from the checkout around the
// working directory or, outside one, from the sources the npfnic command
// embeds (Options.Source), extracted into the cache.
//
// The build runs on Debian 12 (bookworm) on x86-64, or a derivative using
// bookworm's archive, as root, with Go installed: it takes the guest
// kernel, the Debian mirror and its own packages from the host's apt
// (host.go says why each), and it stops at once, naming what is missing,
// on any other host.
package images

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Options says where to build and what to report.
type Options struct {
	// CacheDir holds every artifact; default DefaultCacheDir().
	CacheDir string
	// SourceDir is the npfnic source tree the module and the guest tools
	// are built from (guestdrv/, vdevice/hw, go.mod); default: the
	// checkout found by walking up from the working directory to
	// npfnic's go.mod, else Source extracted into the cache.
	SourceDir string
	// Source is npfnic's source files as the installed command embeds
	// them (npfnic.Source), so that it builds images outside a checkout.
	// A checkout around the working directory still wins: there, edits
	// to the driver go into the images.
	Source fs.FS
	// Progress receives one line per step and periodic "still running"
	// lines for long ones; default os.Stderr.
	Progress io.Writer
	// Mirror overrides the Debian mirror read from the host's apt sources.
	Mirror string
}

// DefaultCacheDir is $NPFNIC_CACHE, else $XDG_CACHE_HOME/npfnic, else ~/.cache/npfnic.
func DefaultCacheDir() string {
	if d := os.Getenv("NPFNIC_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "npfnic")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = "/root"
	}
	return filepath.Join(home, ".cache", "npfnic")
}

// ModulePath is npfnic's Go module path, used to find the source tree.
const ModulePath = "github.com/npfnic/npfnic"

// FindSourceDir walks up from dir to the directory whose go.mod declares npfnic.
func FindSourceDir(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module "+ModulePath)) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no npfnic source tree (go.mod of %s) above %s", ModulePath, dir)
		}
		d = parent
	}
}

// Artifacts are the paths a VM needs, all inside the cache.
type Artifacts struct {
	QEMU          QEMU
	Kernel        Kernel
	Module        string // npfnic.ko
	Initramfs     string // guest image: npfnic tools, memcached, iperf3, lspci, ethtool
	RDMAInitramfs string // the same plus rdma_rxe, the rdma_cm modules and the RDMA user tools
	// ConformanceInitramfs is the RDMA image plus rdma-core's test suite
	// (python3, pyverbs).
	ConformanceInitramfs string
	// MPIInitramfs is the RDMA image plus Open MPI with UCX and the MPI
	// benchmark (VariantMPI).
	MPIInitramfs string
	// CacheDir is the cache they are in; what the VM harness learns about
	// the host (whether KVM works) is kept there too.
	CacheDir string
}

// Builder runs the build steps; use New, then Build.
type Builder struct {
	opt       Options
	extracted bool // SourceDir is Options.Source extracted, not a checkout
	out       io.Writer
	mirror    string
	step      int
	steps     int
	aptMu     sync.Mutex
	aptUpd    bool
}

// New prepares a builder: it creates the cache and, outside a checkout,
// extracts opt.Source into it (<cache>/src); it does not touch the
// network.
func New(opt Options) (*Builder, error) {
	if opt.CacheDir == "" {
		opt.CacheDir = DefaultCacheDir()
	}
	if opt.Progress == nil {
		opt.Progress = os.Stderr
	}
	if err := os.MkdirAll(opt.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	extracted := false
	if opt.SourceDir == "" {
		wd, _ := os.Getwd()
		d, err := FindSourceDir(wd)
		switch {
		case err == nil:
			opt.SourceDir = d
		case opt.Source != nil:
			if opt.SourceDir, err = ExtractSource(opt.Source, filepath.Join(opt.CacheDir, "src")); err != nil {
				return nil, err
			}
			extracted = true
		default:
			return nil, fmt.Errorf("%w: run inside a checkout, or give the sources (Options.SourceDir, or Options.Source as the npfnic command does)", err)
		}
	}
	return &Builder{opt: opt, out: opt.Progress, extracted: extracted}, nil
}

// CacheDir is where the builder keeps its outputs.
func (b *Builder) CacheDir() string { return b.opt.CacheDir }

// SourceDir is the source tree the builder compiles the driver and the
// guest tools from: a checkout, or Options.Source extracted into the cache.
func (b *Builder) SourceDir() string { return b.opt.SourceDir }

// Build makes sure every artifact exists and is current. Builds sharing a
// cache directory (tests of several packages, a user's second shell) take
// turns: the cache is locked for the whole build. On a host the build
// does not support it fails before anything else (checkHost).
func (b *Builder) Build(ctx context.Context) (*Artifacts, error) {
	if err := checkHost(thisHost()); err != nil {
		return nil, err
	}
	unlock, err := b.lockCache(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return b.build(ctx)
}

// lockCache takes an exclusive flock on the cache, waiting for another build.
func (b *Builder) lockCache(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(filepath.Join(b.opt.CacheDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cache lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		return func() { f.Close() }, nil
	}
	fmt.Fprintf(b.out, "images: waiting for another build using %s\n", b.opt.CacheDir)
	locked := make(chan error, 1)
	go func() { locked <- unix.Flock(int(f.Fd()), unix.LOCK_EX) }()
	select {
	case err := <-locked:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("cache lock: %w", err)
		}
		return func() { f.Close() }, nil
	case <-ctx.Done():
		f.Close() // releases the lock if the flock goroutine gets it later
		return nil, ctx.Err()
	}
}

func (b *Builder) build(ctx context.Context) (*Artifacts, error) {
	start := time.Now()
	b.step, b.steps = 0, 12
	if b.extracted {
		fmt.Fprintf(b.out, "images: no checkout here; the driver and the guest tools build from the sources in this binary, extracted to %s\n", b.opt.SourceDir)
	} else {
		fmt.Fprintf(b.out, "images: the driver and the guest tools build from %s\n", b.opt.SourceDir)
	}
	a := Artifacts{CacheDir: b.opt.CacheDir}
	var err error
	if err = b.hostPackages(ctx); err != nil {
		return nil, err
	}
	if a.QEMU, err = b.buildQEMU(ctx); err != nil {
		return nil, err
	}
	if a.Kernel, err = b.buildKernel(ctx); err != nil {
		return nil, err
	}
	if a.Module, err = b.buildModule(ctx, a.Kernel); err != nil {
		return nil, err
	}
	userland, err := b.buildUserland(ctx)
	if err != nil {
		return nil, err
	}
	tools, err := b.buildGuestTools(ctx)
	if err != nil {
		return nil, err
	}
	mpiTools, err := b.buildMPITools(ctx, userland)
	if err != nil {
		return nil, err
	}
	built := map[Variant]map[string]string{VariantMPI: mpiTools}
	base, err := b.buildURootBase(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range []struct {
		v   Variant
		out *string
	}{
		{VariantBase, &a.Initramfs}, {VariantRDMA, &a.RDMAInitramfs},
		{VariantConformance, &a.ConformanceInitramfs}, {VariantMPI, &a.MPIInitramfs},
	} {
		if *v.out, err = b.buildInitramfs(ctx, v.v, a.Kernel, a.Module, userland, base, tools, built); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(b.out, "images: all artifacts ready in %s (%.1fs)\n", b.opt.CacheDir, time.Since(start).Seconds())
	return &a, nil
}

// begin announces a step; done/skip are printed by the caller via the returned func.
func (b *Builder) begin(name string) func(status string) {
	b.step++
	t := time.Now()
	fmt.Fprintf(b.out, "[%d/%d] %s ...\n", b.step, b.steps, name)
	return func(status string) {
		fmt.Fprintf(b.out, "[%d/%d] %s: %s (%.1fs)\n", b.step, b.steps, name, status, time.Since(t).Seconds())
	}
}

// logDir keeps the full output of every external command a step ran.
func (b *Builder) logDir() string { return filepath.Join(b.opt.CacheDir, "logs") }

// run executes an external command with its output in a log file, printing a
// "still running" line every 15 s so long downloads show progress, and on
// failure returns the tail of the log in the error.
func (b *Builder) run(ctx context.Context, logName string, dir string, env []string, name string, args ...string) error {
	if _, err := exec.LookPath(name); err != nil && !strings.Contains(name, "/") {
		return fmt.Errorf("host tool %q is missing (%w); it comes from the Debian package listed in images/host-packages.txt, which the build installs when run as root", name, err)
	}
	if err := os.MkdirAll(b.logDir(), 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(b.logDir(), logName+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	fmt.Fprintf(lf, "\n$ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t0 := time.Now()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%s %s failed: %w\n--- last lines of %s ---\n%s", name, strings.Join(args, " "), err, logPath, tailFile(logPath, 25))
			}
			return nil
		case <-tick.C:
			fmt.Fprintf(b.out, "      ... %s still running (%ds), log: %s\n", filepath.Base(name), int(time.Since(t0).Seconds()), logPath)
		}
	}
}

// output runs a quick command and returns its stdout.
func output(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// debianMirror is the host's Debian mirror, read once.
func (b *Builder) debianMirror() (string, error) {
	if b.mirror != "" {
		return b.mirror, nil
	}
	if b.opt.Mirror != "" {
		b.mirror = strings.TrimRight(b.opt.Mirror, "/")
		return b.mirror, nil
	}
	m, err := DebianMirror()
	if err != nil {
		return "", err
	}
	b.mirror = m
	return m, nil
}

// aptUpdate refreshes the host's apt index once per build.
func (b *Builder) aptUpdate(ctx context.Context) error {
	b.aptMu.Lock()
	defer b.aptMu.Unlock()
	if b.aptUpd {
		return nil
	}
	if err := requireRoot("refresh the host's apt index"); err != nil {
		return err
	}
	if err := b.run(ctx, "apt-update", "", nil, "apt-get", "update"); err != nil {
		return fmt.Errorf("apt-get update (Debian's package mirror must be reachable): %w", err)
	}
	b.aptUpd = true
	return nil
}

func requireRoot(what string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("building images needs root to %s (debootstrap, chroot, apt-get): run as root", what)
	}
	return nil
}

// writeFileAtomic writes data so readers never see a partial file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
