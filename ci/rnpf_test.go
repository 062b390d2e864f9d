package ci

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// rnpfLoad (re)loads the driver with a policy and a synthetic rNPF rate
// given as module parameter, and checks the function starts at that rate.
// Backup gets the bitmap and ring of a TCP stream (StreamBackupParams).
func rnpfLoad(t *testing.T, tb *testbed.Testbed, policy string, ppm int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	extra, err := testbed.RNPFParam(ppm)
	if err != nil {
		t.Fatal(err)
	}
	if policy == "backup" {
		extra += " " + testbed.StreamBackupParams
	}
	params := testbed.DriverParams(policy, 0, extra)
	if err := tb.LoadDriver(ctx, params); err != nil {
		t.Fatalf("load npfnic.ko %s: %v", params, err)
	}
	if err := tb.CheckPolicy(ctx, policy); err != nil {
		t.Fatal(err)
	}
	if got, err := tb.RNPFRate(ctx); err != nil || got != ppm {
		t.Fatalf("debugfs %s after loading with %s: %d, %v; want %d", testbed.RNPFRateFile, params, got, err, ppm)
	}
}

// rnpfStream runs iperf3 from the host into the guest for d and returns
// what the counters grew by meanwhile.
func rnpfStream(t *testing.T, tb *testbed.Testbed, d time.Duration) (testbed.RNPFCounters, *workload.Iperf) {
	t.Helper()
	before := testbed.RNPFCountersOf(faultStats(t, tb))
	r, err := workload.HostIperf3(context.Background(), tb.NS, tb.GuestIP, d)
	if err != nil {
		t.Fatalf("iperf3 host -> guest: %v", err)
	}
	return testbed.RNPFCountersOf(faultStats(t, tb)).Since(before), r
}

// TestRNPFRate: synthetic rNPFs (rnpf_rate_ppm) under a TCP stream into
// the guest. Under backup at 1% the driver injects about the rate asked
// for, each page taken away faults when its slot is used, and the backup
// ring saves every faulting frame, minor or major (fault_delay_us); a rate
// written to debugfs applies at once; the pairs stop, change ring size and cool under 10% with nothing
// left behind; under pin the knob injects nothing.
func TestRNPFRate(t *testing.T) {
	const ppm = 10000
	tb := faultTestbed(t, "rnpf")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := workload.StartGuestIperf3Server(ctx, tb.VM); err != nil {
		t.Fatal(err)
	}

	rnpfLoad(t, tb, "backup", ppm)
	c, r := rnpfStream(t, tb, 5*time.Second)
	st := faultStats(t, tb)
	t.Logf("backup at %d ppm: %v; %v; fault_lat p50/p99 %d/%d us, backup_lat p50/p99 %d/%d us",
		ppm, r, c, st["fault_lat_p50_ns"]/1000, st["fault_lat_p99_ns"]/1000, st["backup_lat_p50_ns"]/1000, st["backup_lat_p99_ns"]/1000)
	want := float64(c.RxPackets) * ppm / testbed.PPM
	if c.RxPackets == 0 || float64(c.Injected) < want/3 || float64(c.Injected) > want*3 {
		t.Errorf("rnpf_injected %d for %d frames: want within 3x of %.0f", c.Injected, c.RxPackets, want)
	}
	if c.Faults < c.Injected/2 {
		t.Errorf("rx_faults %d for %d injected rNPFs: a page taken away faults when its slot is used", c.Faults, c.Injected)
	}
	if c.FaultDrops != 0 || c.BackupPkts == 0 {
		t.Errorf("backup: want rx_backup_pkts > 0 and rx_fault_drops == 0; got %d, %d", c.BackupPkts, c.FaultDrops)
	}
	if c.LateDMA != 0 {
		t.Errorf("late_dma %d: the device wrote memory after its quiesce", c.LateDMA)
	}

	// Major faults: fault_delay_us (writable at run time) before each
	// resolution, counted from the interrupt that announced the fault.
	const delay = "/sys/module/npfnic/parameters/fault_delay_us"
	run(t, tb.VM, "echo 1000 > "+delay)
	c, r = rnpfStream(t, tb, 3*time.Second)
	run(t, tb.VM, "echo 0 > "+delay)
	t.Logf("backup at %d ppm, major faults of 1 ms: %v; %v", ppm, r, c)
	if c.Injected == 0 || c.Faults < c.Injected/2 || c.FaultDrops != 0 {
		t.Errorf("major faults: want rNPFs injected, each faulting, none dropped; got %d injected, %d rx_faults, %d rx_fault_drops", c.Injected, c.Faults, c.FaultDrops)
	}

	if err := tb.SetRNPFRate(ctx, 0); err != nil {
		t.Fatalf("debugfs %s: %v", testbed.RNPFRateFile, err)
	}
	c, r = rnpfStream(t, tb, 2*time.Second)
	t.Logf("backup, rate set to 0: %v; %v", r, c)
	if c.Injected != 0 || c.Skipped != 0 {
		t.Errorf("rate 0 written to debugfs: still %d rNPFs injected, %d skipped", c.Injected, c.Skipped)
	}

	// Stop and start the pairs (ring change, link down/up) and cool while
	// rNPFs are injected at 10%: the rnpf work is cancelled before the
	// pages and rings go, and nothing stays behind.
	if err := tb.SetRNPFRate(ctx, 100000); err != nil {
		t.Fatalf("debugfs %s: %v", testbed.RNPFRateFile, err)
	}
	before := testbed.RNPFCountersOf(faultStats(t, tb))
	stream := make(chan error, 1)
	go func() {
		_, err := workload.HostIperf3(context.Background(), tb.NS, tb.GuestIP, 4*time.Second)
		stream <- err
	}()
	ifn := tb.IfName
	for _, step := range []string{
		fmt.Sprintf("ethtool -G %s rx 512", ifn),
		fmt.Sprintf("ip link set %s down && ip link set %s up", ifn, ifn),
		"echo 1 > " + tb.SysfsPath("cool"),
		fmt.Sprintf("ethtool -G %s rx 1024", ifn),
	} {
		time.Sleep(700 * time.Millisecond)
		run(t, tb.VM, step)
	}
	if err := <-stream; err != nil {
		t.Logf("iperf3 across the restarts: %v", err)
	}
	st = faultStats(t, tb)
	c = testbed.RNPFCountersOf(st).Since(before)
	t.Logf("backup at 100000 ppm across ring changes, link down/up and cool: %d frames, %d rNPFs injected, %d skipped",
		c.RxPackets, c.Injected, c.Skipped)
	if c.Injected == 0 {
		t.Errorf("no rNPF injected at 10%% across the restarts")
	}
	if st["quiesce_timeouts"] != 0 || st["inv_timeouts"] != 0 || st["late_dma"] != 0 {
		t.Errorf("quiesce_timeouts %d, inv_timeouts %d, late_dma %d; want 0", st["quiesce_timeouts"], st["inv_timeouts"], st["late_dma"])
	}

	rnpfLoad(t, tb, "pin", ppm)
	c, r = rnpfStream(t, tb, 2*time.Second)
	t.Logf("pin at %d ppm: %v; %v", ppm, r, c)
	if c.Injected != 0 || c.Skipped != 0 || c.Faults != 0 {
		t.Errorf("pin has no translation to take: want no rNPF and no fault, got %d injected, %d skipped, %d rx_faults", c.Injected, c.Skipped, c.Faults)
	}
	if c.RxPackets == 0 {
		t.Errorf("pin: no frame received")
	}

	run(t, tb.VM, "rmmod npfnic")
	if late := deviceLateDMA(t, tb); late != 0 {
		t.Errorf("the device model refused %d late DMA writes", late)
	}
	for _, line := range strings.Split(run(t, tb.VM, "dmesg"), "\n") {
		if badKernelLog.MatchString(line) {
			t.Errorf("guest kernel log: %s", line)
		}
	}
}
