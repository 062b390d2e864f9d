package ci

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestRDMADeviceOnNPFNIC boots the RDMA image with one npfnic and checks the
// driver's ib_device the way a user sees it, with rdma_rxe never loaded:
// Debian's ibverbs tools find it through librxe (the rxe user ABI) and open
// it, its port is ACTIVE over Ethernet with a RoCEv2 GID from the guest's
// IPv4 address, `rdma link` lists it on its netdev, and ibverbs programs
// (ibv_rc_pingpong servers and clients) create their CQs, QPs and MRs on it
// (queues mapped through the uverbs file). A server and a client in the
// guest connect their QPs to each other and move checked buffers over the
// device's loopback; Ethernet keeps working while translation runs for
// them. A client killed mid-transfer loses its objects alone (its server's
// QP then fails its retries); rmmod with a server still running
// disassociates its context, insmod brings the device back, and the
// console shows no oops or warning.
func TestRDMADeviceOnNPFNIC(t *testing.T) {
	// The port is up with a carrier: npfnic's wire is cabled to a QEMU NIC
	// of the same guest (whose driver is never loaded).
	wire := filepath.Join(t.TempDir(), "wire.sock")
	v := startVM(t, vm.Config{Name: "rdma-npfnic", Variant: images.VariantRDMA,
		NPFNICs: []vm.NPFNIC{{Server: vm.InProcessServer{Wire: "stream-listen:unix:" + wire, RDMAMinAckTimeout: vmTestMinAckTimeout}}},
		NICs:    []vm.QEMUNIC{{Model: "virtio-net-pci", Netdev: vm.Netdev{Kind: "stream", Path: wire}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	load := func() string {
		t.Helper()
		if err := v.LoadDriver(ctx, ""); err != nil {
			t.Fatal(err)
		}
		ifn := strings.TrimSpace(run(t, v, "ls /sys/bus/pci/drivers/npfnic/0000:*/net"))
		run(t, v, "ip addr add 10.77.0.2/24 dev "+ifn+" && ip link set "+ifn+" up")
		return ifn
	}
	ifn := load()
	if out := run(t, v, "ls /sys/module"); strings.Contains(out, "rdma_rxe") {
		t.Fatal("rdma_rxe is loaded in the npfnic guest")
	}
	// The cable's other end: virtio-net in a namespace of its own.
	if err := v.LoadModules(ctx, "virtio_net", "virtio_pci"); err != nil {
		t.Fatal(err)
	}
	peer := strings.TrimSpace(run(t, v, "ls /sys/bus/virtio/drivers/virtio_net/virtio*/net"))
	for _, c := range []string{"mkdir -p /run/netns", "ip netns add peer", "ip link set " + peer + " netns peer",
		"ip -n peer addr add 10.77.0.3/24 dev " + peer, "ip -n peer link set " + peer + " up"} {
		if r, err := v.Exec(ctx, strings.Fields(c)...); err != nil || r.Exit != 0 {
			t.Fatalf("%s: %v %s%s", c, err, r.Stdout, r.Stderr)
		}
	}
	if out := run(t, v, "ibv_devices"); !strings.Contains(out, "npfnic0") {
		t.Fatalf("ibv_devices does not list npfnic0:\n%s", out)
	}
	// The first user context starts translation (and maps RAM for PASID 0).
	start := time.Now()
	run(t, v, "ibv_devinfo -d npfnic0")
	t.Logf("first ibv_devinfo (context open, translation started) took %v", time.Since(start).Round(time.Millisecond))

	// The RoCEv2 GID of the address comes from the core's GID management,
	// and the port goes ACTIVE with the carrier: both asynchronously.
	var info string
	gidRE := regexp.MustCompile(`GID\[\s*(\d+)\]:\s+::ffff:10\.77\.0\.2, RoCE v2`)
	for deadline := time.Now().Add(30 * time.Second); ; {
		info = run(t, v, "ibv_devinfo -v -d npfnic0")
		if gidRE.MatchString(info) && strings.Contains(info, "state:\t\t\tPORT_ACTIVE (4)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no active port with a RoCEv2 GID of 10.77.0.2 within 30 s:\n%s", info)
		}
		time.Sleep(time.Second)
	}
	for _, want := range []string{"hca_id:\tnpfnic0", "transport:\t\t\tInfiniBand (0)",
		"link_layer:\t\tEthernet", "max_qp:\t\t\t\t256", "active_mtu:\t\t1024 (3)",
		fmt.Sprintf("fw_ver:\t\t\t\t%d.%d.0", hw.InterfaceVersion>>16, hw.InterfaceVersion&0xffff)} {
		if !strings.Contains(info, want) {
			t.Errorf("ibv_devinfo -v lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("ibv_devinfo -v:\n%s", info)
	}
	if out := run(t, v, "rdma link"); !regexp.MustCompile(`link npfnic0/1 state ACTIVE .*netdev ` + ifn).MatchString(out) {
		t.Errorf("rdma link:\n%s", out)
	}

	// An ibverbs program's objects: ibv_rc_pingpong as a server creates a
	// PD, an MR, a CQ and a QP, moves the QP to INIT, posts its receives
	// into the mapped queue and waits for a client.
	gid := gidRE.FindStringSubmatch(info)[1]
	pp := make(chan vm.Result, 4)
	pingpong := func(args ...string) {
		go func() {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
			defer pcancel()
			r, _ := v.Exec(pctx, append([]string{"ibv_rc_pingpong", "-d", "npfnic0", "-g", gid, "-s", "4096"}, args...)...)
			pp <- r
		}()
	}
	waitResources := func(what string, ok func(string) bool) string {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			res := run(t, v, "rdma resource show qp; rdma resource show cq; rdma resource show mr")
			if ok(res) {
				return res
			}
			if time.Now().After(deadline) {
				for len(pp) > 0 {
					r := <-pp
					t.Logf("ibv_rc_pingpong ended: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
				}
				t.Fatalf("%s did not show within 30 s:\n%s", what, res)
			}
			time.Sleep(time.Second)
		}
	}
	pingpong()
	waitResources("the server's QP (INIT), CQ and MR", func(res string) bool {
		return strings.Contains(res, "state INIT") && strings.Contains(res, "mrlen 4096")
	})
	// A server and a client in the same guest: both QPs go through RTR
	// to RTS with the other's QPN and the path to the guest's own GID (the
	// core resolves the port's own MAC), and the device loops their
	// packets back: every buffer arrives intact (-c).
	loopback := func(args ...string) []string {
		return append([]string{"ibv_rc_pingpong", "-d", "npfnic0", "-g", gid, "-s", "4096", "-p", "18600", "-n", "100", "-c"}, args...)
	}
	lb := make(chan vm.Result, 1)
	go func() {
		r, _ := v.Exec(ctx, loopback()...)
		lb <- r
	}()
	waitResources("the loopback server's QP", func(res string) bool { return strings.Count(res, "state INIT") == 2 })
	if r, err := v.Exec(ctx, loopback("10.77.0.2")...); err != nil || r.Exit != 0 || !strings.Contains(r.Stdout, "100 iters") {
		t.Fatalf("ibv_rc_pingpong -c over loopback, client: %v exit %d\n%s%s", err, r.Exit, r.Stdout, r.Stderr)
	}
	if r := <-lb; r.Exit != 0 || !strings.Contains(r.Stdout, "100 iters") {
		t.Fatalf("ibv_rc_pingpong -c over loopback, server: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	// Another pair, moving data while the checks below run.
	pingpong("-p", "18601", "-n", "100000000")
	waitResources("the second server's QP", func(res string) bool { return strings.Count(res, "state INIT") == 2 })
	pingpong("-p", "18601", "-n", "100000000", "10.77.0.2")
	res := waitResources("two QPs in RTS", func(res string) bool {
		return strings.Count(res, "type RC state RTS") == 2
	})
	t.Logf("rdma resource:\n%s", res)

	// With contexts open the device translates (their MRs' PASIDs), the
	// Ethernet buffers too: Ethernet still works, through translation.
	for i := 0; ; i++ {
		r, err := v.Run(ctx, "ping -c 1 -w 5000 10.77.0.3")
		if err == nil && r.Exit == 0 {
			break
		}
		if i == 20 {
			t.Fatalf("ping over npfnic with RDMA translation on: %v %s%s", err, r.Stdout, r.Stderr)
		}
		time.Sleep(time.Second)
	}
	// The frames went through translation (PASID 0 at identity).
	if m := regexp.MustCompile(`atc_misses: (\d+)`).FindStringSubmatch(run(t, v, "ethtool -S "+ifn)); m == nil || m[1] == "0" {
		t.Errorf("no ATC miss after the ping: is translation on? %v", m)
	}

	// The client killed mid-transfer: its QP, CQ and MR go, the servers'
	// stay; then the second server goes too.
	run(t, v, `for p in $(pidof ibv_rc_pingpong); do if grep -q 10.77.0.2 /proc/$p/cmdline; then kill -9 $p; fi; done`)
	<-pp
	waitResources("the servers' objects alone", func(res string) bool {
		return strings.Count(res, "comm ibv_rc_pingpong") == 6
	})
	run(t, v, `for p in $(pidof ibv_rc_pingpong); do if grep -q 18601 /proc/$p/cmdline; then kill -9 $p; fi; done`)
	<-pp
	waitResources("the first server's objects alone", func(res string) bool {
		return strings.Count(res, "comm ibv_rc_pingpong") == 3
	})

	// rmmod with the server's context live: the core disassociates it.
	run(t, v, "rmmod npfnic")
	if out := run(t, v, "ls /sys/class/infiniband"); strings.TrimSpace(out) != "" {
		t.Errorf("RDMA devices left after rmmod: %s", out)
	}
	load()
	if out := run(t, v, "ibv_devices"); !strings.Contains(out, "npfnic0") {
		t.Errorf("ibv_devices after insmod:\n%s", out)
	}
	if _, err := v.Signal(context.Background(), "ibv_rc_pingpong", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-pp
	run(t, v, "rmmod npfnic")

	dmesg := run(t, v, "dmesg")
	var drv []string
	for _, l := range strings.Split(dmesg, "\n") {
		if strings.Contains(l, "npfnic") || strings.Contains(l, "infiniband") {
			drv = append(drv, l)
		}
	}
	t.Logf("driver messages:\n%s", strings.Join(drv, "\n"))
	for _, bad := range []string{"Oops", "BUG:", "WARNING:", "Call Trace", "leaked", "refcount"} {
		if strings.Contains(dmesg, bad) {
			t.Fatalf("the kernel log has %q:\n%s", bad, lastLines(dmesg, 60))
		}
	}
}
