package vm

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// live holds every VM not yet killed, for KillAll.
var (
	liveMu sync.Mutex
	live   = map[*VM]struct{}{}
)

func register(v *VM) {
	liveMu.Lock()
	live[v] = struct{}{}
	liveMu.Unlock()
}

func unregister(v *VM) {
	liveMu.Lock()
	delete(live, v)
	liveMu.Unlock()
}

// KillAll kills every VM of this process at once, with its device
// servers, and removes their socket directories: for a signal handler
// about to exit (a test binary or npfnic boot/exp interrupted).
func KillAll() {
	liveMu.Lock()
	vms := make([]*VM, 0, len(live))
	for v := range live {
		vms = append(vms, v)
	}
	liveMu.Unlock()
	var wg sync.WaitGroup
	for _, v := range vms {
		wg.Add(1)
		go func() { defer wg.Done(); v.Kill() }()
	}
	wg.Wait()
}

// sockDirPrefix names a VM's socket directory after its owner's pid, so a
// later run can remove the directories of runs that were killed.
func sockDirPrefix() string { return "npfnic-vm-" + strconv.Itoa(os.Getpid()) + "-" }

// reapSockDirs removes socket directories whose owning process is gone.
func reapSockDirs() {
	ents, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "npfnic-vm-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			_ = os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
		}
	}
}
