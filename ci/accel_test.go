package ci

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// TestKVMProbe runs the KVM probe for real, fresh (no cached verdict),
// and checks that its verdict is a verdict: KVM, or TCG with a one-line
// reason, within the probe's deadlines whatever the host does; then that
// auto follows it and an explicit kvm where KVM does not work is an
// error carrying the reason, not a fallback. On a host where /dev/kvm
// opens but a guest hangs in its firmware (nested virtualization without
// VMX), this is the path that must end in TCG.
func TestKVMProbe(t *testing.T) {
	a := needImages(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	p, err := vm.ProbeKVM(ctx, a, true)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	_, statErr := os.Stat("/dev/kvm")
	t.Logf("/dev/kvm: %v; probe: works %v in %.1fs (guest %.1fs), reason %q, cache %s", statErr == nil, p.Works, took.Seconds(), p.Took.Seconds(), p.Reason, p.CacheFile)
	if p.FromCache {
		t.Errorf("a fresh probe read its verdict from %s", p.CacheFile)
	}
	// 30 s for a guest that started its kernel and hangs (6 s for one
	// silent in its firmware), plus QEMU's start and kill.
	if took > 45*time.Second {
		t.Errorf("the probe took %v: its deadline does not hold", took)
	}
	if p.Works {
		if p.Reason != "" {
			t.Errorf("KVM works, yet a reason: %q", p.Reason)
		}
	} else if p.Reason == "" || strings.Contains(p.Reason, "\n") {
		t.Errorf("KVM does not work: reason %q, want one line", p.Reason)
	}
	if errors.Is(statErr, os.ErrNotExist) && p.Works {
		t.Errorf("no /dev/kvm, yet KVM works")
	}

	// The verdict is kept: for this process, and for the next in the cache.
	start = time.Now()
	again, err := vm.ProbeKVM(ctx, a, false)
	if err != nil || again.Works != p.Works || again.Reason != p.Reason || time.Since(start) > time.Second {
		t.Errorf("second probe: %+v, %v after %v; want the first's verdict at once", again, err, time.Since(start))
	}

	auto, err := vm.ResolveAccel(ctx, a, vm.AccelAuto)
	if err != nil {
		t.Fatalf("auto: %v", err)
	}
	kvm, kvmErr := vm.ResolveAccel(ctx, a, vm.AccelKVM)
	if p.Works {
		if auto != vm.AccelKVM || kvmErr != nil || kvm != vm.AccelKVM {
			t.Errorf("KVM works: auto %s, kvm %s (%v); want KVM for both", auto, kvm, kvmErr)
		}
		return
	}
	if auto != vm.AccelTCG {
		t.Errorf("KVM does not work: auto picked %s, want TCG", auto)
	}
	if kvmErr == nil || !strings.Contains(kvmErr.Error(), p.Reason) {
		t.Errorf("KVM does not work: -accel kvm gave %s, %v; want an error with the reason", kvm, kvmErr)
	}
	t.Logf("auto: %s; kvm: %v", auto, kvmErr)
}

// TestProbeGuestUnderTCG boots the probe guest under TCG, where it must
// reach user space and power off: a probe that cannot tell a working
// accelerator from a broken one would send every host to TCG.
func TestProbeGuestUnderTCG(t *testing.T) {
	a := needImages(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start := time.Now()
	booted, reason, err := vm.ProbeGuest(ctx, a, vm.AccelTCG)
	if err != nil {
		t.Fatal(err)
	}
	if !booted {
		t.Fatalf("the probe guest did not boot under TCG: %s", reason)
	}
	t.Logf("the probe guest booted and powered off under TCG in %.1fs", time.Since(start).Seconds())
}
