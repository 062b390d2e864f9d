package datapath

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

func fakeResults() []Result {
	return []Result{
		{NIC: "e1000e", Label: "QEMU e1000e", Round: 1, Rounds: 1, HostLoad: 1.5, Boot: 3 * time.Second, GuestIf: "eth0",
			GuestToHost: &workload.Iperf{Mbps: 100, Bytes: 125e6, Seconds: 10}, HostToGuest: &workload.Iperf{Mbps: 200, Bytes: 250e6, Seconds: 10, Retransmits: 10124},
			Memcached: &workload.Memaslap{OpsPerSec: 4000, Ops: 40000, RunTime: 10}},
		{NIC: "virtio", Label: "QEMU virtio-net", Round: 1, Rounds: 1, Boot: 3 * time.Second, GuestIf: "eth0",
			GuestToHost: &workload.Iperf{Mbps: 150, Bytes: 187e6, Seconds: 10}, HostToGuest: &workload.Iperf{Mbps: 400, Bytes: 500e6, Seconds: 10},
			Memcached: &workload.Memaslap{OpsPerSec: 6000, Ops: 60000, RunTime: 10}},
		{NIC: "npfnic", Label: "npfnic", Round: 1, Rounds: 1, Boot: 4 * time.Second, GuestIf: "eth0",
			GuestToHost: &workload.Iperf{Mbps: 300, Bytes: 375e6, Seconds: 10},
			Err:         errors.New("iperf3 host -> guest: connection reset")},
	}
}

func TestRatios(t *testing.T) {
	rs := Ratios(fakeResults())
	if len(rs) != 3 {
		t.Fatalf("%d ratios, want 3", len(rs))
	}
	got := map[string][]float64{}
	for _, r := range rs {
		got[r.Num+"/"+r.Den] = r.Values
	}
	if v := got["virtio/e1000e"]; v[0] != 1.5 || v[1] != 2 || v[2] != 1.5 {
		t.Errorf("virtio/e1000e = %v", v)
	}
	if v := got["npfnic/e1000e"]; v[0] != 3 || v[1] == v[1] || v[2] == v[2] {
		t.Errorf("npfnic/e1000e = %v, want 3, NaN, NaN", v)
	}
	if v := got["npfnic/virtio"]; v[0] != 2 {
		t.Errorf("npfnic/virtio = %v", v)
	}
}

func TestTable(t *testing.T) {
	c := Config{Env: runner.Env{Images: &images.Artifacts{}}, NICs: NICs}
	tab := Table(c, fakeResults())
	for _, want := range []string{
		"QEMU e1000e", "QEMU virtio-net", "npfnic", "Mbit/s", "ops/s",
		"virtio / e1000e", "npfnic / e1000e", "npfnic / virtio", "1.50x", "2.00x", "3.00x", "n/a",
		"npfnic FAILED: iperf3 host -> guest: connection reset",
		"iperf3 TCP 10 s per direction", "memaslap 10 s, 16 connections", "retransmits", " 10124 ",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	// The header names the accelerator the guests ran under.
	for a, want := range map[vm.Accel]string{vm.AccelTCG: "1 vCPU, TCG", vm.AccelKVM: "1 vCPU, KVM"} {
		c.Accel = a
		if h := strings.SplitN(Table(c, fakeResults()), "\n", 2)[0]; !strings.Contains(h, want) {
			t.Errorf("accelerator %s: header %q lacks %q", a, h, want)
		}
	}
	// Labels are left-aligned, numbers right-aligned under their header.
	for _, line := range strings.Split(tab, "\n") {
		if strings.Contains(line, "QEMU e1000e") && !strings.HasPrefix(line, "QEMU e1000e ") {
			t.Errorf("label not left-aligned: %q", line)
		}
	}
}

func TestWriteOutputs(t *testing.T) {
	dir := t.TempDir()
	files, err := WriteOutputs(dir, Config{Env: runner.Env{Images: &images.Artifacts{}}}, fakeResults())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 {
		t.Fatalf("files %v", files)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	csv, _ := os.ReadFile(filepath.Join(dir, "datapath.csv"))
	lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	if len(lines) != 4 {
		t.Fatalf("datapath.csv has %d lines:\n%s", len(lines), csv)
	}
	if !strings.HasPrefix(lines[1], "e1000e,QEMU e1000e,1,100,200,4000,0,") || !strings.Contains(lines[1], ",1.5,eth0,") {
		t.Errorf("e1000e row: %s", lines[1])
	}
	if !strings.Contains(lines[3], "npfnic,npfnic,1,300,,,,") || !strings.Contains(lines[3], "connection reset") {
		t.Errorf("failed npfnic row: %s", lines[3])
	}
	ratios, _ := os.ReadFile(filepath.Join(dir, "datapath_ratios.csv"))
	if !strings.Contains(string(ratios), "npfnic,e1000e,3,3,3,,") {
		t.Errorf("datapath_ratios.csv:\n%s", ratios)
	}
}

func TestLookupNICs(t *testing.T) {
	for _, tt := range []struct {
		list string
		want string
	}{
		{"", "e1000e,virtio,npfnic"},
		{"all", "e1000e,virtio,npfnic"},
		{"virtio,e1000e", "virtio,e1000e"},
		{" npfnic ", "npfnic"},
		{"npfnic-nolro,npfnic,virtio", "npfnic-nolro,npfnic,virtio"},
		{"npfnic-txirq0,npfnic", "npfnic-txirq0,npfnic"},
	} {
		nics, err := LookupNICs(tt.list)
		if err != nil {
			t.Fatalf("%q: %v", tt.list, err)
		}
		var names []string
		for _, n := range nics {
			names = append(names, n.Name)
		}
		if got := strings.Join(names, ","); got != tt.want {
			t.Errorf("LookupNICs(%q) = %s, want %s", tt.list, got, tt.want)
		}
	}
	for _, bad := range []string{"e1000", "e1000e,e1000e", "virtio,"} {
		if _, err := LookupNICs(bad); err == nil {
			t.Errorf("LookupNICs(%q) accepted", bad)
		}
	}
}

func TestValidate(t *testing.T) {
	// Validate checks what a user chose, before the images are built.
	ok := Config{}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if ok.IperfTime != DefaultIperfTime || ok.MemoryMiB != DefaultMemoryMiB || len(ok.NICs) != len(defaultNICs()) {
		t.Errorf("defaults not applied: %+v", ok)
	}
	for name, c := range map[string]Config{
		"fraction":        {Env: runner.Env{Images: &images.Artifacts{}}, IperfTime: 1500 * time.Millisecond},
		"too short":       {Env: runner.Env{Images: &images.Artifacts{}}, MemaslapTime: 500 * time.Millisecond},
		"tiny guest":      {Env: runner.Env{Images: &images.Artifacts{}}, MemoryMiB: 64},
		"no connections":  {Env: runner.Env{Images: &images.Artifacts{}}, MemaslapConcurrency: -1},
		"too many vcpus":  {Env: runner.Env{Images: &images.Artifacts{}}, CPUs: 1000},
		"negative memory": {Env: runner.Env{Images: &images.Artifacts{}}, MemoryMiB: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Run(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "Images") {
		t.Errorf("Run without images: %v, want an error naming Images", err)
	}
}

func TestSummarizeRounds(t *testing.T) {
	var rs []Result
	for round, v := range []float64{100, 300, 200} {
		for _, nic := range []string{"e1000e", "npfnic"} {
			r := Result{NIC: nic, Label: nic, Round: round + 1, Rounds: 3, Boot: time.Duration(v) * time.Millisecond, HostLoad: v / 100,
				GuestToHost: &workload.Iperf{Mbps: v, Bytes: int64(v)}, HostToGuest: &workload.Iperf{Mbps: 2 * v},
				Memcached: &workload.Memaslap{OpsPerSec: 10 * v, Errors: round, GetMisses: 1}}
			if nic == "npfnic" {
				r.GuestToHost.Mbps *= 2
				if round == 2 {
					r.HostToGuest, r.Memcached = nil, nil
					r.Err = errors.New("memaslap: boom")
				}
			}
			rs = append(rs, r)
		}
	}
	s := Summarize(rs)
	if len(s) != 2 || s[0].NIC != "e1000e" || s[1].NIC != "npfnic" {
		t.Fatalf("Summarize = %+v", s)
	}
	e := s[0]
	if e.Round != 0 || e.Rounds != 3 || e.GuestToHost.Mbps != 200 || e.HostToGuest.Mbps != 400 || e.Memcached.OpsPerSec != 2000 ||
		e.Boot != 200*time.Millisecond || e.HostLoad != 3 || e.Err != nil {
		t.Errorf("e1000e summary %+v", e)
	}
	if e.Memcached.Errors != 0+1+2 || e.Memcached.GetMisses != 3 {
		t.Errorf("errors and misses not summed: %+v", e.Memcached)
	}
	n := s[1]
	// Two rounds measured host->guest (200, 600): their mean is the median.
	if n.GuestToHost.Mbps != 400 || n.HostToGuest.Mbps != 400 || n.Memcached.OpsPerSec != 2000 {
		t.Errorf("npfnic summary %+v %+v %+v", n.GuestToHost, n.HostToGuest, n.Memcached)
	}
	if n.Err == nil || !strings.Contains(n.Err.Error(), "1 of 3 rounds failed; round 3: memaslap: boom") {
		t.Errorf("npfnic error %v", n.Err)
	}
	if again := Summarize(s); again[0].GuestToHost != s[0].GuestToHost || len(again) != 2 {
		t.Error("summaries do not pass through Summarize unchanged")
	}
	r := Ratios(rs)
	if len(r) != 1 || r[0].Values[0] != 2 || r[0].Values[1] != 1 {
		t.Errorf("ratios of medians: %+v", r)
	}
	rows := CSVRows(rs)
	if len(rows) != 8 || rows[6][2] != "median" || rows[7][0] != "npfnic" {
		t.Errorf("CSV rows: %d, last %v", len(rows), rows[len(rows)-1])
	}
	tab := Table(Config{Env: runner.Env{Images: &images.Artifacts{}}, Rounds: 3}, rs)
	if !strings.Contains(tab, "medians of 3 rounds") || !strings.Contains(tab, "2.00x") {
		t.Errorf("table:\n%s", tab)
	}
}

// TestRatiosOrientAndRange: npfnic is the numerator against QEMU's NICs
// whatever the order of -nics, npfnic's variants keep the order given, and
// each ratio carries the range of the rounds' own ratios.
func TestRatiosOrientAndRange(t *testing.T) {
	res := func(nic string, round int, h2g float64) Result {
		return Result{NIC: nic, Label: nic, Round: round, HostToGuest: &workload.Iperf{Mbps: h2g}}
	}
	var rs []Result
	for i, v := range []struct{ nolro, npf, virtio float64 }{{100, 200, 100}, {100, 300, 200}, {100, 120, 150}} {
		rs = append(rs, res("npfnic-nolro", i+1, v.nolro), res("npfnic", i+1, v.npf), res("virtio", i+1, v.virtio))
	}
	got := map[string]Ratio{}
	var order []string
	for _, r := range Ratios(rs) {
		got[r.Num+"/"+r.Den] = r
		order = append(order, r.Num+"/"+r.Den)
	}
	if want := []string{"npfnic-nolro/virtio", "npfnic/virtio", "npfnic/npfnic-nolro"}; !slices.Equal(order, want) {
		t.Fatalf("ratios %v, want %v", order, want)
	}
	for _, tc := range []struct {
		ratio       string
		med, lo, hi float64
	}{
		{"npfnic/virtio", 200.0 / 150, 0.8, 2},
		{"npfnic/npfnic-nolro", 2, 1.2, 3},
		{"npfnic-nolro/virtio", 100.0 / 150, 100.0 / 200, 1},
	} {
		r := got[tc.ratio]
		if r.Values[1] != tc.med || r.Lo[1] != tc.lo || r.Hi[1] != tc.hi {
			t.Errorf("%s host->guest: %v (%v-%v), want %v (%v-%v)", tc.ratio, r.Values[1], r.Lo[1], r.Hi[1], tc.med, tc.lo, tc.hi)
		}
		if !math.IsNaN(r.Lo[0]) || !math.IsNaN(r.Values[0]) {
			t.Errorf("%s guest->host: %v (%v), want NaN (no values)", tc.ratio, r.Values[0], r.Lo[0])
		}
	}
	tab := Table(Config{Env: runner.Env{Images: &images.Artifacts{}}, Rounds: 3}, rs)
	if !strings.Contains(tab, "1.33x (0.80-2.00)") {
		t.Errorf("table without the per-round range:\n%s", tab)
	}
	charts := Charts("TCG", rs)
	if rel, ok := charts[len(charts)-1].(report.BarChart); !ok || !strings.HasPrefix(rel.Title, "relative to virtio ") {
		t.Errorf("the relative panel is not relative to virtio-net: %+v", charts[len(charts)-1])
	}
}
