package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// On two shared cores the host's side of a NIC competes with the guest's
// vCPU: QEMU's other threads (its main loop, where virtio-net's backend
// and the vfio-user client run), and npfnic's device server, which runs
// in this process. GuestCPU's Host fields are what each spent per unit
// of work.

// hostSample is the CPU ticks (USER_HZ) of each part at one moment.
type hostSample struct{ vcpu, qemu, this uint64 }

// ParseTaskStat reads a /proc/PID/stat or /proc/PID/task/TID/stat line:
// the command name (between the first "(" and the last ")": it may hold
// spaces and parentheses) and utime+stime in USER_HZ ticks.
func ParseTaskStat(s string) (comm string, ticks uint64, err error) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", 0, fmt.Errorf("stat %q: no (comm)", s[:min(len(s), 64)])
	}
	comm = s[open+1 : end]
	// After the comm: state (field 3), ..., utime (14), stime (15).
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return "", 0, fmt.Errorf("stat of %q: %d fields after the command, want at least 13", comm, len(f))
	}
	for _, x := range f[11:13] {
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return "", 0, fmt.Errorf("stat of %q: %w", comm, err)
		}
		if ticks+n < ticks {
			return "", 0, fmt.Errorf("stat of %q: CPU time overflows", comm)
		}
		ticks += n
	}
	return comm, ticks, nil
}

// isVCPUThread reports whether a QEMU thread named comm runs a vCPU
// ("CPU 0/TCG", "CPU 1/KVM").
func isVCPUThread(comm string) bool {
	return strings.HasPrefix(comm, "CPU ") && strings.Contains(comm, "/")
}

// sampleHost reads the CPU ticks of QEMU's threads (pid) and of this
// process. A thread that ended between the listing and its read is left
// out.
func sampleHost(pid int) (hostSample, error) {
	var s hostSample
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return s, err
	}
	if _, s.this, err = ParseTaskStat(string(b)); err != nil {
		return s, err
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return s, fmt.Errorf("QEMU (pid %d): no threads listed", pid)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return s, err
		}
		comm, ticks, err := ParseTaskStat(string(b))
		if err != nil {
			return s, err
		}
		if isVCPUThread(comm) {
			s.vcpu += ticks
		} else {
			s.qemu += ticks
		}
	}
	return s, nil
}

// setHost fills g's host fields from the samples a and b taken around
// its phase. A thread that ended during the phase takes its ticks with
// it: a part that went backwards counts 0.
func (g *GuestCPU) setHost(a, b hostSample) {
	if g.Units <= 0 {
		return
	}
	per := func(x, y uint64) float64 {
		if y < x {
			return 0
		}
		return float64(y-x) * TickSeconds * 1e6 / g.Units
	}
	g.HostVCPUMicros, g.HostQEMUMicros, g.HostThisMicros = per(a.vcpu, b.vcpu), per(a.qemu, b.qemu), per(a.this, b.this)
}
