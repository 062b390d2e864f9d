package fuzzseed

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeepCrashOutput: a process whose stderr goes nowhere, as go's fuzz
// workers' does, and that dies of a panic on another goroutine leaves the
// runtime's report in a file of its own in CrashDirEnv.
func TestKeepCrashOutput(t *testing.T) {
	if os.Getenv("FUZZSEED_CRASH_CHILD") == "1" {
		KeepCrashOutput()
		go func() { panic("the child dies on another goroutine") }()
		select {}
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKeepCrashOutput$")
	cmd.Env = append(os.Environ(), "FUZZSEED_CRASH_CHILD=1", CrashDirEnv+"="+dir)
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("child: %v, want exit status 2", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
	if len(files) != 1 {
		t.Fatalf("crash files %v, want one", files)
	}
	out, err := os.ReadFile(files[0])
	if err != nil || !strings.Contains(string(out), "the child dies on another goroutine") || !strings.Contains(string(out), "goroutine ") {
		t.Fatalf("crash file %s: %v\n%s", files[0], err, out)
	}
}
