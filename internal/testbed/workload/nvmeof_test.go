package workload

import (
	"os"
	"strings"
	"testing"
	"time"
)

var testNVMeoF = NVMeoF{NQN: "nqn.2014-08.io.npfnic:nvmeof-test", Addr: "10.81.0.1"}

// testdata/nvme-discover-rdma.json is bookworm's nvme-cli 2.3 (nvme
// discover -o json) against Linux 6.1's nvmet-rdma on rdma_rxe: the
// discovery subsystem's own entry, then the exported subsystem's.
func TestParseNVMeDiscover(t *testing.T) {
	data, err := os.ReadFile("testdata/nvme-discover-rdma.json")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ParseNVMeDiscover(string(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].SubType != "current discovery subsystem" {
		t.Fatalf("records %+v", recs)
	}
	r, ok := testNVMeoF.Find(recs)
	want := NVMeoFDiscovery{TrType: "rdma", AdrFam: "ipv4", SubType: "nvme subsystem", TrSvcID: "4420",
		SubNQN: testNVMeoF.NQN, TrAddr: "10.81.0.1", QPType: "connected", CMS: "rdma-cm"}
	if !ok || r != want {
		t.Fatalf("Find: %+v %v, want %+v", r, ok, want)
	}
	for _, other := range []NVMeoF{
		{NQN: "nqn.2014-08.io.npfnic:other", Addr: "10.81.0.1"},
		{NQN: testNVMeoF.NQN, Addr: "10.81.0.2"},
		{NQN: testNVMeoF.NQN, Addr: "10.81.0.1", Port: 4421},
	} {
		if r, ok := other.Find(recs); ok {
			t.Errorf("%+v found %+v", other, r)
		}
	}
	for _, bad := range []string{"", "Failed to write to /dev/nvme-fabrics: Connection refused\n", "{"} {
		if recs, err := ParseNVMeDiscover(bad); err == nil && len(recs) > 0 {
			t.Errorf("%q: %+v", bad, recs)
		}
	}
}

func TestParseNVMeDisconnect(t *testing.T) {
	n, err := ParseNVMeDisconnect("NQN:nqn.2014-08.io.npfnic:nvmeof-test disconnected 1 controller(s)\n")
	if err != nil || n != 1 {
		t.Fatalf("%d %v", n, err)
	}
	if n, err := ParseNVMeDisconnect("NQN:nqn.2014-08.io.npfnic:nvmeof-test disconnected 0 controller(s)\n"); err != nil || n != 0 {
		t.Fatalf("%d %v", n, err)
	}
	if _, err := ParseNVMeDisconnect(""); err == nil {
		t.Fatal("no error for nothing printed")
	}
}

// GNU dd's summaries, from the guests (coreutils 9.1).
func TestParseDD(t *testing.T) {
	for _, tc := range []struct {
		out   string
		bytes int64
		secs  float64
	}{
		{"8+0 records in\n8+0 records out\n8388608 bytes (8.4 MB, 8.0 MiB) copied, 0.869606 s, 9.6 MB/s\n", 8 << 20, 0.869606},
		{"64+0 records in\n64+0 records out\n262144 bytes (262 kB, 256 KiB) copied, 0.325589 s, 805 kB/s\n", 256 << 10, 0.325589},
		{"1+0 records in\n1+0 records out\n512 bytes copied, 5.1e-05 s, 10.0 MB/s\n", 512, 5.1e-05},
	} {
		d, err := ParseDD(tc.out)
		if err != nil || d.Bytes != tc.bytes || d.Seconds != tc.secs {
			t.Errorf("%q: %+v %v", tc.out, d, err)
		}
	}
	if d, _ := ParseDD("8388608 bytes (8.4 MB, 8.0 MiB) copied, 0.5 s, 16.8 MB/s\n"); d.MBs() < 16.7 || d.MBs() > 16.8 {
		t.Errorf("MBs %.2f", d.MBs())
	}
	if _, err := ParseDD("dd: error writing '/dev/nvme0n1': Input/output error\n"); err == nil {
		t.Error("no error for a failed dd")
	}
}

func TestParseSHA256(t *testing.T) {
	const sum = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	got, err := ParseSHA256("8+0 records in\n8+0 records out\n" + sum + "  /tmp/nvmeof-1MiB.read\n")
	if err != nil || got != sum {
		t.Fatalf("%q %v", got, err)
	}
	for _, bad := range []string{"", "sha256sum: /tmp/x: No such file or directory\n", strings.ToUpper(sum) + "  f\n", sum[:63] + "  f\n"} {
		if got, err := ParseSHA256(bad); err == nil {
			t.Errorf("%q: %q", bad, got)
		}
	}
}

// The scripts run in u-root's shell: every configfs attribute written
// once (echo -n) and read back, the port linked last; the teardown in
// reverse; the commands as nvme-cli takes them.
func TestNVMeoFScripts(t *testing.T) {
	n := testNVMeoF
	n.KeepAlive = 30 * time.Second
	setup := n.TargetSetupScript()
	sub := "/sys/kernel/config/nvmet/subsystems/" + n.NQN
	for _, want := range []string{
		"mount -t configfs none /sys/kernel/config",
		"attr " + sub + "/attr_allow_any_host 1\n",
		"attr " + sub + "/namespaces/1/device_path /dev/ram0\n",
		"attr /sys/kernel/config/nvmet/ports/1/addr_trtype rdma\n",
		"attr /sys/kernel/config/nvmet/ports/1/addr_traddr 10.81.0.1\n",
		"attr /sys/kernel/config/nvmet/ports/1/addr_trsvcid 4420\n",
		`echo -n "$2" > "$1"; read -r v < "$1"`,
	} {
		if !strings.Contains(setup, want) {
			t.Errorf("set-up script without %q:\n%s", want, setup)
		}
	}
	if !strings.HasSuffix(setup, "ln -s "+sub+" /sys/kernel/config/nvmet/ports/1/subsystems/"+n.NQN) {
		t.Errorf("set-up script does not end with the port's link:\n%s", setup)
	}
	if strings.Contains(setup, "echo 1 >") {
		t.Errorf("set-up script writes a newline apart:\n%s", setup)
	}
	down := n.TargetTeardownScript()
	if i, j := strings.Index(down, "ports/1/subsystems"), strings.Index(down, "rm "+sub+" "); i < 0 || j < 0 || i > j {
		t.Errorf("teardown does not unlink the port before removing the subsystem:\n%s", down)
	}
	if got := strings.Join(n.ConnectArgs("nqn.h", "id"), " "); got != "nvme connect -t rdma -a 10.81.0.1 -s 4420 -n "+n.NQN+" --hostnqn=nqn.h --hostid=id -k 30" {
		t.Errorf("connect: %s", got)
	}
	if got := strings.Join(n.DiscoverArgs("nqn.h", "id"), " "); got != "nvme discover -t rdma -a 10.81.0.1 -s 4420 --hostnqn=nqn.h --hostid=id -o json" {
		t.Errorf("discover: %s", got)
	}
	if err := n.Validate(); err != nil {
		t.Error(err)
	}
	for _, bad := range []NVMeoF{{NQN: "nqn.2014-08.io.x:a b", Addr: "10.0.0.1"}, {NQN: n.NQN, Addr: "10.0.0.1; reboot"}, {NQN: "x", Addr: "10.0.0.1"}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
	e := NVMeoFExtents[1]
	if w := e.WriteScript("/dev/nvme0n1"); !strings.Contains(w, "/usr/bin/dd if=/tmp/nvmeof-4KiB of=/dev/nvme0n1 bs=4096 count=64 seek=1024 oflag=direct conv=fsync,notrunc") ||
		!strings.HasSuffix(w, "\nsha256sum /tmp/nvmeof-4KiB") {
		t.Errorf("write: %s", w)
	}
	if r := e.ReadScript("/dev/ram0"); !strings.Contains(r, "if=/dev/ram0 of=/tmp/nvmeof-4KiB.read bs=4096 count=64 skip=1024 iflag=direct") {
		t.Errorf("read: %s", r)
	}
	// The extents do not overlap and fit brd's 16 MiB.
	var end int64
	for _, e := range NVMeoFExtents {
		if off := int64(e.Seek) * int64(e.BS); off < end {
			t.Errorf("%s at %d overlaps the extent before, which ends at %d", e.Name, off, end)
		}
		end = int64(e.Seek)*int64(e.BS) + e.Bytes()
	}
	if end > 16<<20 {
		t.Errorf("the extents end at %d, past brd's 16 MiB", end)
	}
}
