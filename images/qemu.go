package images

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// QEMU is QEMU 11 with the vfio-user client, installed in a trixie tree and
// run through that tree's own dynamic loader (the host's libc is too old).
type QEMU struct {
	Root    string // the trixie tree
	Version string // e.g. "QEMU emulator version 11.1.3 (...)"
}

const (
	qemuSuite     = "trixie"
	qemuBackports = "trixie-backports"
	qemuPackage   = "qemu-system-x86"
	// QEMUDevice is the device QEMU must provide for npfnic to attach.
	QEMUDevice = "vfio-user-pci"
)

func (q QEMU) libDir() string { return filepath.Join(q.Root, "usr/lib/x86_64-linux-gnu") }

// Binary is qemu-system-x86_64 inside the tree.
func (q QEMU) Binary() string { return filepath.Join(q.Root, "usr/bin/qemu-system-x86_64") }

// Launcher is a script beside the tree that runs its QEMU the way Command
// does, for people who start QEMU themselves: the tree's binary cannot
// run through the host's loader.
func (q QEMU) Launcher() string { return filepath.Join(filepath.Dir(q.Root), "qemu-system-x86_64") }

// launcherScript is the Launcher's content.
func (q QEMU) launcherScript() string {
	return "#!/bin/sh\n# Written by npfnic images: QEMU from Debian " + qemuBackports +
		", run with its own loader and firmware.\nexec " + strings.Join([]string{
		shellQuote(filepath.Join(q.libDir(), "ld-linux-x86-64.so.2")), "--library-path", shellQuote(q.libDir()),
		shellQuote(q.Binary()), "-L", shellQuote(filepath.Join(q.Root, "usr/share/qemu")),
		"-L", shellQuote(filepath.Join(q.Root, "usr/share/seabios")), `"$@"`}, " ") + "\n"
}

// shellQuote quotes s for sh, whatever it holds.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// writeLauncher writes the Launcher unless it already says the same.
func (q QEMU) writeLauncher() error {
	want := []byte(q.launcherScript())
	if have, err := os.ReadFile(q.Launcher()); err == nil && bytes.Equal(have, want) {
		return nil
	}
	tmp := q.Launcher() + ".tmp"
	if err := os.WriteFile(tmp, want, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, q.Launcher())
}

// Command builds an exec.Cmd that runs QEMU from its tree with its firmware.
func (q QEMU) Command(ctx context.Context, args ...string) *exec.Cmd {
	full := []string{"--library-path", q.libDir(), q.Binary(),
		"-L", filepath.Join(q.Root, "usr/share/qemu"),
		"-L", filepath.Join(q.Root, "usr/share/seabios")}
	full = append(full, args...)
	return exec.CommandContext(ctx, filepath.Join(q.libDir(), "ld-linux-x86-64.so.2"), full...)
}

// Verify checks that this QEMU runs and has the vfio-user-pci device.
func (q QEMU) Verify(ctx context.Context) (version string, err error) {
	out, err := q.Command(ctx, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("QEMU in %s does not run: %v: %s", q.Root, err, bytes.TrimSpace(out))
	}
	version = strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
	devs, err := q.Command(ctx, "-machine", "none", "-device", "help").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("QEMU -device help: %v: %s", err, bytes.TrimSpace(devs))
	}
	if !bytes.Contains(devs, []byte(`name "`+QEMUDevice+`"`)) {
		return "", fmt.Errorf("%s has no %s device: npfnic needs QEMU >= 10.1 built with vfio-user (Debian %s provides it)", version, QEMUDevice, qemuBackports)
	}
	return version, nil
}

// buildQEMU debootstraps a minimal trixie tree and installs QEMU from
// trixie-backports into it.
func (b *Builder) buildQEMU(ctx context.Context) (QEMU, error) {
	done := b.begin("QEMU with " + QEMUDevice + " (" + qemuBackports + ")")
	mirror, err := b.debianMirror()
	if err != nil {
		return QEMU{}, err
	}
	key := NewKey("qemu", "1").Add("mirror", mirror).Add("suite", qemuSuite).
		Add("backports", qemuBackports).Add("package", qemuPackage)
	dir := filepath.Join(b.opt.CacheDir, "qemu", qemuSuite)
	if st, ok := fresh(dir, key); ok {
		q := QEMU{Root: dir, Version: st.Info["version"]}
		if err := q.writeLauncher(); err != nil {
			return QEMU{}, err
		}
		done("cached, " + q.Version)
		return q, nil
	}
	if err := requireRoot("debootstrap the QEMU tree"); err != nil {
		return QEMU{}, err
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return QEMU{}, err
	}
	fmt.Fprintf(b.out, "      debootstrap %s from %s (about 30 s)\n", qemuSuite, mirror)
	if err := b.debootstrap(ctx, "qemu-debootstrap", qemuSuite, tmp, mirror); err != nil {
		return QEMU{}, err
	}
	sources := fmt.Sprintf("deb %s %s main\n", mirror, qemuBackports)
	if err := os.WriteFile(filepath.Join(tmp, "etc/apt/sources.list.d/backports.list"), []byte(sources), 0o644); err != nil {
		return QEMU{}, err
	}
	fmt.Fprintf(b.out, "      apt-get install -t %s %s (about 500 MB)\n", qemuBackports, qemuPackage)
	if err := b.chrootInstall(ctx, "qemu-install", tmp, []string{"-t", qemuBackports}, qemuPackage); err != nil {
		return QEMU{}, err
	}
	q := QEMU{Root: tmp}
	version, err := q.Verify(ctx)
	if err != nil {
		return QEMU{}, err
	}
	if err := writeStamp(tmp, stamp{Key: key.Sum(), Info: map[string]string{"version": version}}); err != nil {
		return QEMU{}, err
	}
	if err := replaceDir(tmp, dir); err != nil {
		return QEMU{}, err
	}
	q = QEMU{Root: dir, Version: version}
	if err := q.writeLauncher(); err != nil {
		return QEMU{}, err
	}
	done("installed " + version)
	return q, nil
}

// debootstrap creates a minbase tree and keeps services from starting in it.
func (b *Builder) debootstrap(ctx context.Context, logName, suite, dir, mirror string) error {
	if err := b.run(ctx, logName, "", nil, "debootstrap", "--variant=minbase", suite, dir, mirror); err != nil {
		return fmt.Errorf("debootstrap %s (needs Debian's package mirror %s): %w", suite, mirror, err)
	}
	// A package's postinst must never start a daemon inside the build tree.
	policy := filepath.Join(dir, "usr/sbin/policy-rc.d")
	return os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755)
}

// chrootInstall installs packages inside a tree with its own apt.
func (b *Builder) chrootInstall(ctx context.Context, logName, root string, aptArgs []string, pkgs ...string) error {
	env := []string{"DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}
	if err := b.run(ctx, logName, "", env, "chroot", root, "apt-get", "update"); err != nil {
		return fmt.Errorf("apt-get update in %s: %w", root, err)
	}
	args := []string{root, "apt-get", "install", "-y", "--no-install-recommends"}
	args = append(args, aptArgs...)
	args = append(args, pkgs...)
	if err := b.run(ctx, logName, "", env, "chroot", args...); err != nil {
		return fmt.Errorf("install %s in %s: %w", strings.Join(pkgs, " "), root, err)
	}
	return b.run(ctx, logName, "", env, "chroot", root, "apt-get", "clean")
}
