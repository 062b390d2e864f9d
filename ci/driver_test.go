package ci

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestDriverBindsToNPFNIC boots a guest with one npfnic device served in this
// process over vfio-user, loads the driver and checks that it bound, that
// its knobs are where kernel convention puts them (user knobs in sysfs, test
// knobs in debugfs) and that rmmod leaves nothing behind in debugfs.
func TestDriverBindsToNPFNIC(t *testing.T) {
	v := startVM(t, vm.Config{Name: "npfnic", NPFNICs: []vm.NPFNIC{{}}, DefaultServer: vm.InProcessServer{}})
	ids := run(t, v, "cat /sys/bus/pci/devices/*/vendor /sys/bus/pci/devices/*/device")
	want := []string{hexID(hw.VendorID), hexID(hw.DeviceID)}
	for _, w := range want {
		if !strings.Contains(ids, w) {
			t.Fatalf("no PCI device with id %s in the guest:\n%s", w, ids)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := v.LoadDriver(ctx, ""); err != nil {
		t.Fatal(err)
	}
	bound := run(t, v, "ls /sys/bus/pci/drivers/npfnic/")
	if !strings.Contains(bound, "0000:") {
		t.Fatalf("npfnic driver bound to no device: %s", bound)
	}
	if dmesg := run(t, v, "dmesg"); !strings.Contains(dmesg, "npfnic bound") {
		t.Fatalf("driver did not report binding:\n%s", lastLines(dmesg, 20))
	}
	// User knobs in sysfs, test knobs in debugfs (one directory per function).
	testKnobs := []string{"diag_dma", "diag_echo", "diag_irq", "fault_ahead", "inject", "odp_prefault_pages", "rdma_recv_fault", "rnpf_rate_ppm"}
	for _, dev := range strings.Fields(bound) {
		if !strings.HasPrefix(dev, "0000:") {
			continue
		}
		sysfs := strings.Fields(run(t, v, "ls /sys/bus/pci/devices/"+dev+"/"))
		for _, f := range []string{"cool", "rx_policy"} {
			if !slices.Contains(sysfs, f) {
				t.Errorf("sysfs of %s lacks %s", dev, f)
			}
		}
		for _, f := range testKnobs {
			if slices.Contains(sysfs, f) {
				t.Errorf("sysfs of %s still has the test knob %s", dev, f)
			}
		}
		debugfs := strings.Fields(run(t, v, "ls /sys/kernel/debug/npfnic/"+dev))
		slices.Sort(debugfs)
		if !slices.Equal(debugfs, testKnobs) {
			t.Errorf("debugfs npfnic/%s holds %v, want %v", dev, debugfs, testKnobs)
		}
	}
	run(t, v, "rmmod npfnic")
	if out := run(t, v, "ls /sys/bus/pci/drivers/ | grep -c npfnic || true"); strings.TrimSpace(out) != "0" {
		t.Fatalf("npfnic driver still registered after rmmod")
	}
	if slices.Contains(strings.Fields(run(t, v, "ls /sys/kernel/debug")), "npfnic") {
		t.Errorf("debugfs npfnic/ outlived rmmod")
	}
}

func hexID(id uint16) string { return fmt.Sprintf("0x%04x", id) }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestDeadQEMUIsReportedWithConsole crashes the guest kernel: the pending
// guest command must fail promptly with the console tail, not hang.
func TestDeadQEMUIsReportedWithConsole(t *testing.T) {
	v := startVM(t, vm.Config{Name: "crash"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	_, err := v.Run(ctx, "echo c > /proc/sysrq-trigger; sleep 600")
	if err == nil {
		t.Fatal("a command that crashed the guest returned no error")
	}
	if ctx.Err() != nil {
		t.Fatalf("the harness waited for its timeout instead of noticing QEMU exit: %v", err)
	}
	for _, want := range []string{"QEMU for guest crash exited", "console tail", "sysrq"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	t.Logf("crash reported after %.1fs", time.Since(start).Seconds())
}
