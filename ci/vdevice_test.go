package ci

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// configuredNIC serves an npfnic whose capability fields differ from the
// defaults, so the guest's view can be compared field by field.
func configuredNIC() vm.InProcessServer {
	return vm.InProcessServer{New: func(l *slog.Logger) (vfiouser.Device, error) {
		return npfnic.New(npfnic.Options{ATSInvalidateQueueDepth: 5, PRIOutstandingCapacity: 64, PASIDWidth: 16, Logger: l})
	}}
}

func findBDF(t *testing.T, v *vm.VM) string {
	t.Helper()
	bdf := strings.TrimSpace(run(t, v, "npfnic-guest find"))
	if !regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`).MatchString(bdf) {
		t.Fatalf("npfnic-guest find printed %q", bdf)
	}
	return bdf
}

// TestGuestSeesAndUsesTheDevice: lspci decodes the capabilities as the
// device configured them, a BAR0 register reads back, the device DMAs into
// guest pages (one from user space, one the driver allocated), and an MSI-X
// vector the device fires is counted in /proc/interrupts.
func TestGuestSeesAndUsesTheDevice(t *testing.T) {
	v := startVM(t, vm.Config{Name: "device", NPFNICs: []vm.NPFNIC{{Server: configuredNIC()}}})
	bdf := findBDF(t, v)

	lspci := run(t, v, "lspci -vvv -s "+bdf)
	for _, want := range []string{
		"Express (v2) Endpoint",
		fmt.Sprintf("MSI-X: Enable- Count=%d", hw.MSIXVectors),
		"Power Management version 3",
		"Address Translation Service (ATS)",
		"Invalidate Queue Depth: 05",
		"Page Request Interface (PRI)",
		"Page Request Capacity: 00000040",
		"Process Address Space ID (PASID)",
		"Max PASID Width: 10",
	} {
		if !strings.Contains(lspci, want) {
			t.Errorf("lspci -vvv lacks %q:\n%s", want, lspci)
		}
	}

	reg := func(op string, off int, val ...string) string {
		return strings.TrimSpace(run(t, v, fmt.Sprintf("npfnic-guest bar %s %s %#x %s", op, bdf, off, strings.Join(val, " "))))
	}
	if got := reg("read", hw.RegID); !strings.Contains(got, fmt.Sprintf("%#x", hw.Magic)) {
		t.Errorf("ID register reads %q, want %#x", got, hw.Magic)
	}
	reg("write", hw.RegScratch, "0xc0ffee42")
	if got := reg("read", hw.RegScratch); !strings.Contains(got, "0xc0ffee42") {
		t.Errorf("SCRATCH reads %q after writing 0xc0ffee42", got)
	}
	run(t, v, "npfnic-guest dmatest "+bdf+" 4096 0x1234") // one page: physically contiguous

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := v.LoadDriver(ctx, ""); err != nil {
		t.Fatal(err)
	}
	dbg := "/sys/kernel/debug/npfnic/" + bdf
	// printf writes the line at once; gosh's echo writes word by word, and
	// the driver parses each write on its own.
	run(t, v, "printf '4096 0xabc\\n' > "+dbg+"/diag_dma")
	if got := strings.TrimSpace(run(t, v, "cat "+dbg+"/diag_dma")); got != "ok 4096 0xabc" {
		t.Errorf("driver-allocated DMA: %q", got)
	}

	const vec = 3
	irqs := func() int {
		t.Helper()
		name := fmt.Sprintf("npfnic-%s-%d", bdf, vec)
		for _, line := range strings.Split(run(t, v, "cat /proc/interrupts"), "\n") {
			if strings.HasSuffix(strings.TrimSpace(line), name) {
				n, err := strconv.Atoi(strings.Fields(line)[1])
				if err != nil {
					t.Fatalf("parse %q: %v", line, err)
				}
				return n
			}
		}
		t.Fatalf("no %s in /proc/interrupts", name)
		return 0
	}
	before := irqs()
	for i := 0; i < 3; i++ {
		run(t, v, fmt.Sprintf("printf '%d\\n' > %s/diag_irq", vec, dbg))
	}
	// Interrupts are asynchronous: give them a moment, not a deadline race.
	deadline := time.Now().Add(10 * time.Second)
	for irqs() < before+1 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if after := irqs(); after <= before {
		t.Errorf("MSI-X vector %d count stayed at %d after the device fired it", vec, after)
	}
	run(t, v, "rmmod npfnic")
}

// TestGuestRebootResetsDevice: a guest reboot goes through DEVICE_RESET; the
// register file is back to its reset values and the driver binds again.
func TestGuestRebootResetsDevice(t *testing.T) {
	v := startVM(t, vm.Config{Name: "reboot", AllowReboot: true, NPFNICs: []vm.NPFNIC{{}}, DefaultServer: vm.InProcessServer{}})
	bdf := findBDF(t, v)
	run(t, v, fmt.Sprintf("npfnic-guest bar write %s %#x 0x55aa55aa && touch /tmp/before-reboot", bdf, hw.RegScratch))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	_, _ = v.Run(rctx, "echo b > /proc/sysrq-trigger") // the guest dies mid-command
	rcancel()
	for {
		if err := v.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		// An echo of an old ping cannot answer Run: this is the new boot
		// once the marker from the old one is gone.
		r, err := v.Run(ctx, "test -e /tmp/before-reboot")
		if err != nil {
			t.Fatal(err)
		}
		if r.Exit != 0 {
			break
		}
		time.Sleep(time.Second)
	}
	bdf = findBDF(t, v)
	if got := run(t, v, fmt.Sprintf("npfnic-guest bar read %s %#x", bdf, hw.RegScratch)); !strings.Contains(got, "0x0") || strings.Contains(got, "55aa") {
		t.Errorf("SCRATCH after reboot reads %q, want its reset value 0", got)
	}
	if err := v.LoadDriver(ctx, ""); err != nil {
		t.Fatal(err)
	}
}

// TestSecondQEMUAfterFirstExits: one device server outlives a QEMU; the next
// QEMU connects to the same socket and its guest binds the driver.
func TestSecondQEMUAfterFirstExits(t *testing.T) {
	needImages(t)
	dir, err := os.MkdirTemp("", "npfnic-shared-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "npfnic.sock")
	serverLog := filepath.Join(logDir(t, "server"), "server.log")
	logf, err := os.Create(serverLog)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	stop, err := vm.InProcessServer{}.Start(context.Background(), sock, logf)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for i, name := range []string{"first", "second"} {
		v := startVM(t, vm.Config{Name: name, NPFNICs: []vm.NPFNIC{{Socket: sock}}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := v.LoadDriver(ctx, ""); err != nil {
			cancel()
			t.Fatalf("guest %d: %v", i, err)
		}
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := v.Shutdown(sctx); err != nil {
			t.Logf("shutdown %s: %v", name, err)
		}
		scancel()
	}
	logb, _ := os.ReadFile(serverLog)
	if n := strings.Count(string(logb), "VERSION"); n < 2 {
		t.Logf("server log:\n%s", logb)
	}
}
