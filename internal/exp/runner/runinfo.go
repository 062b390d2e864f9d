package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/buildinfo"
	"github.com/npfnic/npfnic/internal/report"
)

// RunInfoFile is the name of the provenance file beside a run's results.
const RunInfoFile = "run.json"

// RunInfo is what a run's results came from, written as run.json beside
// them, so that a table found later says which code, command line, host
// and accelerator made it and how busy the host was.
type RunInfo struct {
	// Command is the command line, program name first.
	Command []string `json:"command"`
	// Commit is the VCS revision of the binary ("+modified" for a dirty
	// tree), else of the checkout it ran in, else "unknown".
	Commit string `json:"commit"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version"`
	Host      Host   `json:"host"`
	// Accelerator is what the guests ran under: KVM, TCG or auto; empty
	// for a run without guests.
	Accelerator string `json:"accelerator,omitempty"`
	// HostLoadStart and HostLoadEnd are the 1-minute load average.
	HostLoadStart float64   `json:"host_load_start"`
	HostLoadEnd   float64   `json:"host_load_end"`
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	// Interrupted: the run was stopped (SIGINT, SIGTERM) and the results
	// are those gathered until then.
	Interrupted bool `json:"interrupted"`
	// Error is why the run failed, if it did.
	Error string `json:"error,omitempty"`
}

// Host describes the machine a run ran on.
type Host struct {
	Name   string `json:"name"`
	OS     string `json:"os"`
	Kernel string `json:"kernel"`
	CPUs   int    `json:"cpus"`
}

// NewRunInfo starts the record of a run of args that begins now.
func NewRunInfo(args []string) *RunInfo {
	return &RunInfo{
		Command:       append([]string{}, args...),
		Commit:        commit(),
		GoVersion:     runtime.Version(),
		Host:          thisHost(),
		HostLoadStart: report.HostLoad(),
		Start:         time.Now(),
	}
}

// finish completes the record at the end of the run.
func (r *RunInfo) finish(runErr error) {
	r.End = time.Now()
	r.HostLoadEnd = report.HostLoad()
	r.Interrupted = errors.Is(runErr, context.Canceled)
	if runErr != nil {
		r.Error = runErr.Error()
	}
}

// write writes run.json into dir and returns its path.
func (r *RunInfo) write(dir string) (string, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, RunInfoFile)
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

// commit is the binary's VCS revision; go run does not stamp one, so then
// the revision of the checkout the command runs in.
func commit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if rev := buildinfo.Revision(bi); rev != "" {
			return rev
		}
	}
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "+modified"
	}
	return rev
}

func thisHost() Host {
	h := Host{OS: images.HostOS(), CPUs: runtime.NumCPU()}
	h.Name, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	return h
}
