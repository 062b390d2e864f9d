package ci

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// TestGuestBootsWithExpectedKernel boots the plain guest: the kernel release
// is the one the image builder chose, a failing command's status reaches the
// host, and files go in and out intact.
func TestGuestBootsWithExpectedKernel(t *testing.T) {
	v := startVM(t, vm.Config{Name: "plain"})
	if got := strings.TrimSpace(run(t, v, "uname -r")); got != artifacts.Kernel.Release {
		t.Errorf("guest kernel release %q, want %q", got, artifacts.Kernel.Release)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := v.Run(ctx, "echo to-stderr >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if r.Exit != 3 || strings.TrimSpace(r.Stderr) != "to-stderr" {
		t.Errorf("failing command: exit %d stderr %q, want 3 %q", r.Exit, r.Stderr, "to-stderr")
	}
	// 64 KiB of every byte value: the agent's serial port moves a file
	// at some kB/s in a guest of a loaded host (256 KiB each way, in the
	// same minute as the commands above, once took longer than that
	// minute in make stress-ci), and a larger file tests nothing more.
	payload := make([]byte, 64<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := v.Put(ctx, "/tmp/payload", payload, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	back, err := v.Get(ctx, "/tmp/payload")
	if err != nil || string(back) != string(payload) {
		t.Fatalf("file round trip: err=%v, %d bytes back of %d", err, len(back), len(payload))
	}
	for _, prog := range []string{"memcached -h", "iperf3 --version", "lspci", "ethtool --version"} {
		run(t, v, prog+" >/dev/null")
	}
}
