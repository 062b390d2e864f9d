package fuzzseed

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
)

// CrashDirEnv names the directory where the processes of a fuzz run write
// what the Go runtime prints when one of them dies (KeepCrashOutput);
// ci/fuzz.sh sets it.
const CrashDirEnv = "NPFNIC_FUZZ_CRASH_DIR"

// KeepCrashOutput makes this process write the runtime's report of a fatal
// error or an unrecovered panic to a file of its own in $NPFNIC_FUZZ_CRASH_DIR,
// if that is set. go's fuzz coordinator discards its workers' stderr, so a
// worker that dies outside the fuzz function's recover (a fatal error, a
// panic on another goroutine) leaves only "fuzzing process hung or
// terminated unexpectedly: exit status 2" and an input that may well pass
// when replayed; the file says why it died. Call it from an init function
// of each package's tests that has fuzz targets.
func KeepCrashOutput() {
	dir := os.Getenv(CrashDirEnv)
	if dir == "" {
		return
	}
	f, err := os.CreateTemp(dir, fmt.Sprintf("%s-%d-*.txt", filepath.Base(os.Args[0]), os.Getpid()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "fuzzseed: crash output: %v\n", err)
		return
	}
	defer f.Close() // the runtime keeps its own descriptor
	if err := debug.SetCrashOutput(f, debug.CrashOptions{}); err != nil {
		fmt.Fprintf(os.Stderr, "fuzzseed: crash output: %v\n", err)
	}
}
