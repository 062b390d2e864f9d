package ci

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/child"
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// Finding 8 of issue 10: a test binary that hit -timeout left its QEMU
// processes running, re-parented to init. Everything the harness starts
// must die with the process that started it.

const orphanEnv = "NPFNIC_ORPHAN_CHILD"

// TestOrphanChild is the child of TestHarnessChildrenDieWithParent: it
// boots a guest whose device is served by "npfnic serve" in its own
// process, says so, and waits to be killed.
func TestOrphanChild(t *testing.T) {
	bin := os.Getenv(orphanEnv)
	if bin == "" {
		t.Skip("only run by TestHarnessChildrenDieWithParent")
	}
	a := needImages(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := vm.Start(ctx, vm.Config{Name: "orphan", Images: a, LogDir: t.TempDir(),
		NPFNICs: []vm.NPFNIC{{Server: vm.ExternalServer{Binary: bin}}}})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ORPHAN-READY %d\n", os.Getpid())
	select {}
}

// procInfo is what /proc says about a process: its parent, state and
// command line; ok is false once it is gone.
func procInfo(pid int) (ppid int, state byte, cmdline string, ok bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, "", false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0, 0, "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return ppid, f[0][0], strings.ReplaceAll(string(cl), "\x00", " "), true
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, cl, ok := procInfo(p); ok && ppid == pid {
			out[p] = cl
		}
	}
	return out
}

// TestHarnessChildrenDieWithParent: a test binary that boots a guest (QEMU
// plus an external npfnic serve) is killed with SIGKILL, as a -timeout
// panic or a kill -9 ends it without any cleanup; within 5 s neither QEMU
// nor the device server may be running.
func TestHarnessChildrenDieWithParent(t *testing.T) {
	needImages(t)
	bin := filepath.Join(t.TempDir(), "npfnic")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/npfnic/npfnic/cmd/npfnic").CombinedOutput(); err != nil {
		t.Fatalf("go build npfnic: %v\n%s", err, out)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOrphanChild$", "-test.v", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), orphanEnv+"="+bin)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(cmd, syscall.SIGKILL, true); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := make(chan error, 1)
	var transcript strings.Builder
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			transcript.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "ORPHAN-READY") {
				ready <- nil
				break
			}
		}
		ready <- fmt.Errorf("the child ended before its guest booted:\n%s", transcript.String())
		for sc.Scan() {
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(4 * time.Minute):
		t.Fatal("the child's guest did not boot within 4 minutes")
	}

	kids := childrenOf(cmd.Process.Pid)
	var qemu, server int
	for pid, cl := range kids {
		switch {
		case strings.Contains(cl, "qemu-system"):
			qemu = pid
		case strings.Contains(cl, " serve --socket"):
			server = pid
		}
	}
	if qemu == 0 || server == 0 {
		t.Fatalf("want a QEMU and an npfnic serve among the child's processes, got %v", kids)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	alive := func(pid int) bool {
		// A zombie is dead: in a container nobody may reap it.
		_, state, _, ok := procInfo(pid)
		return ok && state != 'Z'
	}
	for alive(qemu) || alive(server) {
		if time.Since(killed) > 5*time.Second {
			for _, pid := range []int{qemu, server} {
				if alive(pid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			t.Fatalf("5 s after the test binary was killed: QEMU (pid %d) alive %v, npfnic serve (pid %d) alive %v",
				qemu, alive(qemu), server, alive(server))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("QEMU and npfnic serve gone %.2fs after the test binary was killed", time.Since(killed).Seconds())
}
