package ci

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// TestRDMADeregTimeout (issue 22): a DEREG_MR the device never answers,
// for an on-demand paging MR with pages mapped, while its process lives
// on. Two ibv_rc_pingpong -o in one guest connect their QPs (the client's
// SEND faults its ODP buffer in); the driver's inject knob makes the next
// DEREG_MR get no status, and rmmod disassociates both contexts: the
// first dereg times out, which kills the engine (RDMA_CTRL RESET, BUSY
// clear), and every destroy after it succeeds. Then the processes exit
// and unmap their buffers: their MRs' mmu notifiers must be gone with
// the module (before the fix one stayed registered and ran unloaded
// code, or a freed context). The kernel log shows the reset and no oops,
// warning or leak, and the device works again after insmod.
func TestRDMADeregTimeout(t *testing.T) {
	wire := filepath.Join(t.TempDir(), "wire.sock")
	v := startVM(t, vm.Config{Name: "rdma-dereg", Variant: images.VariantRDMA,
		NPFNICs: []vm.NPFNIC{{Server: vm.InProcessServer{Wire: "stream-listen:unix:" + wire, RDMAMinAckTimeout: vmTestMinAckTimeout}}},
		NICs:    []vm.QEMUNIC{{Model: "virtio-net-pci", Netdev: vm.Netdev{Kind: "stream", Path: wire}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	load := func() {
		t.Helper()
		if err := v.LoadDriver(ctx, ""); err != nil {
			t.Fatal(err)
		}
		ifn := strings.TrimSpace(run(t, v, "ls /sys/bus/pci/drivers/npfnic/0000:*/net"))
		run(t, v, "ip addr add 10.77.0.2/24 dev "+ifn+" && ip link set "+ifn+" up")
	}
	load()
	bdf := filepath.Base(strings.TrimSpace(run(t, v, "ls -d /sys/bus/pci/drivers/npfnic/0000:*")))

	// The RoCEv2 GID of the address, which the core adds asynchronously.
	gidRE := regexp.MustCompile(`GID\[\s*(\d+)\]:\s+::ffff:10\.77\.0\.2, RoCE v2`)
	waitGID := func() string {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			if m := gidRE.FindStringSubmatch(run(t, v, "ibv_devinfo -v -d npfnic0")); m != nil {
				return m[1]
			}
			if time.Now().After(deadline) {
				t.Fatal("no RoCEv2 GID of 10.77.0.2 within 30 s")
			}
			time.Sleep(time.Second)
		}
	}
	gid := waitGID()
	pagesMapped := func() int64 {
		t.Helper()
		m := regexp.MustCompile(`odp_pages_mapped (\d+)`).FindStringSubmatch(run(t, v, "rdma statistic show link npfnic0/1"))
		if m == nil {
			t.Fatal("rdma statistic has no odp_pages_mapped")
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	mapped := pagesMapped()

	// A server and a client with ODP MRs; the client's SEND leaves on the
	// cable (no RDMA at its other end), so both wait on with live MRs.
	pp := make(chan vm.Result, 2)
	pingpong := func(args ...string) {
		go func() {
			pctx, pcancel := context.WithTimeout(ctx, 3*time.Minute)
			defer pcancel()
			r, _ := v.Exec(pctx, append([]string{"ibv_rc_pingpong", "-d", "npfnic0", "-g", gid, "-s", "4096", "-o"}, args...)...)
			pp <- r
		}()
	}
	waitQPs := func(what string, ok func(string) bool) {
		t.Helper()
		for deadline := time.Now().Add(45 * time.Second); ; {
			res := run(t, v, "rdma resource show qp; rdma resource show mr")
			if ok(res) {
				return
			}
			if time.Now().After(deadline) {
				for len(pp) > 0 {
					r := <-pp
					t.Logf("ibv_rc_pingpong ended: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
				}
				t.Fatalf("%s did not show within 45 s:\n%s", what, res)
			}
			time.Sleep(time.Second)
		}
	}
	serverUp := func(res string) bool {
		return strings.Contains(res, "state INIT") && strings.Contains(res, "mrlen 4096")
	}
	killAll := func() {
		t.Helper()
		if _, err := v.Signal(context.Background(), "ibv_rc_pingpong", syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	pingpong()
	waitQPs("the server's QP (INIT) and ODP MR", serverUp)
	pingpong("10.77.0.2")
	// The client's SEND faults its ODP buffer in as it is gathered. It is
	// never answered (no RDMA at the cable's other end), so the client
	// ends with RETRY_EXC_ERR about 0.5 s later: the test waits for the
	// fault, not for the client's QP, which a loaded host's once-a-second
	// check could miss (stress-ci). The server's context and ODP MR stay.
	for deadline := time.Now().Add(time.Minute); pagesMapped() == mapped; {
		if time.Now().After(deadline) {
			t.Fatal("the client's SEND faulted no ODP page in within a minute")
		}
		time.Sleep(time.Second)
	}

	// The next DEREG_MR gets no status; rmmod with both contexts live.
	run(t, v, "echo rdma_dereg_timeout > /sys/kernel/debug/npfnic/"+bdf+"/inject")
	run(t, v, "rmmod npfnic")
	if out := run(t, v, "ls /sys/class/infiniband"); strings.TrimSpace(out) != "" {
		t.Errorf("RDMA devices left after rmmod: %s", out)
	}
	// The processes exit and their buffers go: no notifier of a dead
	// MR may run now.
	killAll()
	<-pp
	<-pp

	dmesg := run(t, v, "dmesg")
	var drv []string
	for _, l := range strings.Split(dmesg, "\n") {
		if strings.Contains(l, "npfnic") || strings.Contains(l, "RDMA") {
			drv = append(drv, l)
		}
	}
	t.Logf("driver messages:\n%s", strings.Join(drv, "\n"))
	if !strings.Contains(dmesg, "RDMA engine reset: its objects are gone") {
		t.Errorf("the kernel log does not show the engine's reset:\n%s", lastLines(dmesg, 40))
	}
	if m := badKernelLog.FindString(dmesg); m != "" {
		t.Fatalf("the kernel log has %q:\n%s", m, lastLines(dmesg, 60))
	}

	// The device is back after insmod: a context, an ODP MR, a QP.
	load()
	gid = waitGID()
	pingpong()
	waitQPs("the server's QP (INIT) and ODP MR after insmod", serverUp)
	killAll()
	<-pp
	run(t, v, "rmmod npfnic")
	if m := badKernelLog.FindString(run(t, v, "dmesg")); m != "" {
		t.Fatalf("the kernel log has %q after the reload:\n%s", m, lastLines(run(t, v, "dmesg"), 60))
	}
}
