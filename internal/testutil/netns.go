package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// NetNS creates a network namespace for the test (removed at cleanup) and
// returns its name and a function running fn with the calling thread in
// it, so sockets and TAPs opened by fn belong to it. It skips without root
// or ip(8), unless NPFNIC_REQUIRE_TOOLS=1.
func NetNS(t *testing.T, prefix string) (ns string, inNS func(fn func())) {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("NPFNIC_REQUIRE_TOOLS") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	if os.Geteuid() != 0 {
		skip("needs root for a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skip("no ip(8): %v", err)
	}
	ns = fmt.Sprintf("%s%d", prefix, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		skip("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	inNS = func(fn func()) {
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				done <- err
				return
			}
			defer unix.Close(orig)
			target, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				done <- err
				return
			}
			defer unix.Close(target)
			if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
				done <- err
				return
			}
			fn()
			if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread() // else the thread exits with the goroutine
			}
			done <- nil
		}()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	return ns, inNS
}

// IP runs ip(8) with args in namespace ns and fails the test on error.
func IP(t *testing.T, ns string, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}
