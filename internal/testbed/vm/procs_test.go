package vm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestReapSockDirs: socket directories of a process that is gone are
// removed; this process's own, and names that are not ours, stay.
func TestReapSockDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{ // name -> must survive
		"npfnic-vm-" + strconv.Itoa(dead.Process.Pid) + "-123": false,
		sockDirPrefix() + "456":                                true,
		"npfnic-vm-notapid-789":                                true,
		"other-1-2":                                            true,
	}
	for n := range names {
		if err := os.Mkdir(filepath.Join(tmp, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	reapSockDirs()
	for n, keep := range names {
		_, err := os.Stat(filepath.Join(tmp, n))
		if exists := err == nil; exists != keep {
			t.Errorf("%s: exists %v after the reap, want %v", n, exists, keep)
		}
	}
}
