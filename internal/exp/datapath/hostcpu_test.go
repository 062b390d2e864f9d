package datapath

import (
	"os"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
)

// taskStat is a QEMU vCPU thread's /proc/PID/task/TID/stat (Linux 6.1),
// utime 1500 and stime 250.
const taskStat = "4242 (CPU 0/TCG) R 4200 4200 4200 0 -1 4194368 1234 0 0 0 1500 250 0 0 20 0 5 0 987654 3000000000 50000 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 -1 1 0 0 0 0 0\n"

func TestParseTaskStat(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		comm     string
		ticks    uint64
		err      string
	}{
		{"vCPU thread", taskStat, "CPU 0/TCG", 1750, ""},
		{"parentheses in the name", "7 (a) b) (c) S 1 1 1 0 -1 0 0 0 0 0 3 4 0 0\n", "a) b) (c", 7, ""},
		{"no name", "7 S 1 1 1 0 -1 0 0 0 0 0 3 4 0 0", "", 0, "no (comm)"},
		{"cut short", "7 (x) S 1 1 1 0 -1 0 0 0 0 0 3", "", 0, "want at least 13"},
		{"not a number", "7 (x) S 1 1 1 0 -1 0 0 0 0 0 3 y 0 0", "", 0, "invalid syntax"},
		{"overflow", "7 (x) S 1 1 1 0 -1 0 0 0 0 0 18446744073709551615 1 0 0", "", 0, "overflows"},
	} {
		comm, ticks, err := ParseTaskStat(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || comm != tt.comm || ticks != tt.ticks {
			t.Errorf("%s: %q %d %v; want %q %d", tt.name, comm, ticks, err, tt.comm, tt.ticks)
		}
	}
	for comm, want := range map[string]bool{"CPU 0/TCG": true, "CPU 3/KVM": true, "qemu-system-x86": false, "CPU": false, "vnc_worker": false} {
		if got := isVCPUThread(comm); got != want {
			t.Errorf("isVCPUThread(%q) = %v", comm, got)
		}
	}
}

// TestSampleHostLive reads this process's own threads as if it were
// QEMU: the real /proc parses, and none of them is a vCPU.
func TestSampleHostLive(t *testing.T) {
	s, err := sampleHost(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.vcpu != 0 || s.qemu < s.this/2 {
		t.Errorf("%+v: no vCPU thread here, and the threads' sum is about the process's", s)
	}
	if _, err := sampleHost(1 << 30); err == nil {
		t.Error("a process that does not exist was sampled")
	}
}

func TestHostCPUReport(t *testing.T) {
	g := NewGuestCPU(CPUTicks{User: 10, Idle: 90}, -1, 4)
	if g.HostVCPUMicros != -1 {
		t.Fatalf("host fields before setHost: %+v", *g)
	}
	// 4 MB; vCPU 100 ticks (1 s), QEMU 2 ticks, this process 40 ticks.
	g.setHost(hostSample{vcpu: 100, qemu: 50, this: 10}, hostSample{vcpu: 200, qemu: 52, this: 50})
	if g.HostVCPUMicros != 250000 || g.HostQEMUMicros != 5000 || g.HostThisMicros != 100000 {
		t.Fatalf("per MB: %+v", *g)
	}
	g.setHost(hostSample{qemu: 9}, hostSample{qemu: 3}) // a thread ended
	if g.HostQEMUMicros != 0 {
		t.Fatalf("a part that went backwards: %v", g.HostQEMUMicros)
	}

	rs := fakeResults()
	rs[1] = withCPU(rs[1], 97)
	rs[1].H2GCPU.setHost(hostSample{}, hostSample{vcpu: 300, qemu: 30, this: 3})
	tab := Table(Config{Env: runner.Env{Images: &images.Artifacts{}}, NICs: NICs}, rs)
	if !strings.Contains(tab, "host CPU per phase") || tableRow(tab, "QEMU virtio-net  host->guest") == nil {
		t.Fatalf("no host CPU table:\n%s", tab)
	}
	if strings.Contains(tab, "QEMU virtio-net  guest->host    -") {
		t.Errorf("a phase without host figures has a row:\n%s", tab)
	}
	col := map[string]int{}
	for i, h := range CSVHeader {
		col[h] = i
	}
	rows := CSVRows(rs)
	if got := rows[1][col["h2g_host_vcpu_us_per_mb"]]; got == "" {
		t.Errorf("no h2g_host_vcpu_us_per_mb in %v", rows[1])
	}
	if got := rows[1][col["h2g_host_qemu_us_per_mb"]]; got != "1000" { // 30 ticks over withCPU's 300 MB
		t.Errorf("h2g host QEMU µs %q, want 1000", got)
	}
	if got := rows[0][col["h2g_host_qemu_us_per_mb"]]; got != "" {
		t.Errorf("a NIC without CPU figures: host QEMU µs %q, want empty", got)
	}
}

func FuzzParseTaskStat(f *testing.F) {
	for _, s := range []string{taskStat, "1 () S", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 3 4", ")(", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		comm, _, err := ParseTaskStat(s)
		if err == nil && strings.Count(s, "(") == 0 {
			t.Errorf("%q parsed (comm %q) without a (comm)", s, comm)
		}
	})
}
