// Package ci holds the VM integration tests: each boots real guests in QEMU
// through the testbed harness (internal/testbed/vm) with images from
// images/, under the accelerator $NPFNIC_ACCEL sets: kvm, tcg or auto (the
// default: KVM where a probe guest boots under it, else TCG).
package ci

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

var (
	artifacts *images.Artifacts
	buildErr  error
)

// required says VM tests must run (the project's test command sets it): a
// missing prerequisite is then a failure, not a skip.
func required() bool { return os.Getenv("NPFNIC_REQUIRE_TOOLS") == "1" }

// fullVMTests: NPFNIC_VM_FULL=1 (make vmtest-full) runs the repeats make
// test leaves out to stay within its time: the same checks again in
// another pairing.
func fullVMTests() bool { return os.Getenv("NPFNIC_VM_FULL") == "1" }

func TestMain(m *testing.M) {
	// Interrupted (Ctrl-C, or SIGTERM from a CI runner): the VMs and the
	// device servers go at once, with their socket directories. A SIGKILL
	// or a -timeout panic skips this; their parent-death signal still
	// ends them (package child).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "ci: %v: killing every VM\n", s)
		vm.KillAll()
		os.Exit(130)
	}()
	if _, err := vm.EnvAccel(); err != nil {
		fmt.Fprintf(os.Stderr, "ci: %v\n", err)
		os.Exit(2)
	}
	if os.Geteuid() != 0 && !required() {
		buildErr = fmt.Errorf("VM tests need root (image build, tap devices)")
	} else {
		b, err := images.New(images.Options{})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			artifacts, err = b.Build(ctx)
			cancel()
		}
		buildErr = err
	}
	os.Exit(m.Run())
}

// needImages skips (or, when required, fails) a test without images.
func needImages(t *testing.T) *images.Artifacts {
	t.Helper()
	if buildErr != nil {
		if required() {
			t.Fatalf("guest images: %v", buildErr)
		}
		t.Skipf("guest images unavailable: %v", buildErr)
	}
	return artifacts
}

// logDir keeps a test's VM logs under out/ci/TEST; they stay when the test
// fails so its output can point at them.
func logDir(t *testing.T, name string) string {
	t.Helper()
	src, err := images.FindSourceDir(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(src, "out", "ci", strings.ReplaceAll(t.Name(), "/", "_"), name)
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("VM logs of %s kept in %s (console.log, qmp.log, qemu-stderr.log, qemu-cmdline.txt)", name, dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	})
	return dir
}

// startVM boots a guest for a test and shuts it down at the end.
func startVM(t *testing.T, cfg vm.Config) *vm.VM {
	t.Helper()
	cfg.Images = needImages(t)
	if cfg.LogDir == "" {
		cfg.LogDir = logDir(t, cfg.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	v, err := vm.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("boot %s: %v", cfg.Name, err)
	}
	t.Logf("guest %s (%d MiB, %s) booted in %.1fs", cfg.Name, cmp.Or(cfg.MemoryMiB, 1024), v.Accel(), time.Since(start).Seconds())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := v.Shutdown(ctx); err != nil {
			t.Logf("shutdown %s: %v", cfg.Name, err)
		}
	})
	return v
}

// guestAccel is the accelerator the tests' guests boot with
// ($NPFNIC_ACCEL resolved), for tests that report it.
func guestAccel(t *testing.T, a *images.Artifacts) vm.Accel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	accel, err := vm.ResolveAccel(ctx, a, "")
	if err != nil {
		t.Fatal(err)
	}
	return accel
}

// run runs a guest shell command that must succeed and returns its stdout.
func run(t *testing.T, v *vm.VM, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := v.Run(ctx, script)
	if err != nil {
		t.Fatalf("guest %q: %v", script, err)
	}
	if r.Exit != 0 {
		t.Fatalf("guest %q: exit %d\nstdout: %s\nstderr: %s", script, r.Exit, r.Stdout, r.Stderr)
	}
	return r.Stdout
}
