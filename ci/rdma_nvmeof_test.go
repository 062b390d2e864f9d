package ci

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// VM tests of NVMe over Fabrics on RDMA, the kernel ULP that uses what the
// rdma_cm programs do not: nvme-rdma, the host, registers every data
// buffer with a fast-registration work request (IB_WR_REG_MR) and has the
// target invalidate it (SEND with Invalidate); nvmet-rdma, the target,
// moves the data with RDMA READ and WRITE through the rdma_rw API and
// takes in-capsule data through SENDs. Both are set up as a user sets
// them up (workload.NVMeoF): configfs on the target, nvme-cli on the host.

// nvmeofNQN is the subsystem the target exports.
const nvmeofNQN = "nqn.2014-08.io.npfnic:nvmeof-test"

// nvmeofKeepAlive is the host's keep-alive timeout (nvme connect -k).
// nvme-cli's default, 5 s, is shorter than the stalls a TCG guest sees on
// a loaded host (over 3 s, vmTestMinAckTimeout): the target would drop
// the controller for a missed keep-alive, which the round does not test.
const nvmeofKeepAlive = 30 * time.Second

// nvmeofRound exports a RAM disk from target over NVMe-oF/RDMA and checks
// it from host, on guests already up (a pair of rdmaPair): the target's
// configfs set-up, nvme discover and nvme connect on the host, then each
// of workload.NVMeoFExtents written from /dev/urandom through the
// namespace and read back (O_DIRECT), its SHA-256 compared with the
// pattern's through the host and on the target's RAM disk itself, then
// nvme disconnect, the target's teardown, and the NVMe-oF modules
// unloaded on both sides. A failing step is reported with both guests'
// kernel log tails. Neither kernel may log a warning meanwhile. It logs
// each step's time, and returns the whole round's.
func nvmeofRound(t *testing.T, target, host *testbed.RDMAGuest) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	n := workload.NVMeoF{NQN: nvmeofNQN, Addr: target.IP, KeepAlive: nvmeofKeepAlive}
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	tg := workload.GuestRunner{VM: target.VM, Name: string(target.Kind) + " target " + target.IP}
	hg := workload.GuestRunner{VM: host.VM, Name: string(host.Kind) + " host " + host.IP}
	row := fmt.Sprintf("NVMe-oF, %s host, %s target", host.Kind, target.Kind)

	r := beginULPRound(ctx, t, row, hg, tg)
	step := r.step
	done := false
	// A round that failed half-way still leaves the guests without its
	// controller and its export, for what the test runs next.
	defer func() {
		if done {
			return
		}
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = hg.Exec(cctx, 30*time.Second, n.DisconnectArgs()...)
		_, _ = tg.Shell(cctx, n.TargetTeardownScript())
	}()

	step("target modules", func() error {
		return target.VM.LoadModules(ctx, workload.NVMeoFModulesTarget...)
	})
	step("target configfs", func() error {
		_, err := tg.Shell(ctx, n.TargetSetupScript())
		return err
	})
	step("host modules", func() error {
		return host.VM.LoadModules(ctx, workload.NVMeoFModulesHost...)
	})
	// The host's identity, which nvme-cli would otherwise derive from
	// the DMI product UUID a QEMU guest without -uuid lacks (all zeros).
	hostID := uuid()
	hostNQN := "nqn.2014-08.org.nvmexpress:uuid:" + hostID
	step("discover", func() error {
		out, err := hg.Exec(ctx, 60*time.Second, n.DiscoverArgs(hostNQN, hostID)...)
		if err != nil {
			return err
		}
		recs, err := workload.ParseNVMeDiscover(out)
		if err != nil {
			return err
		}
		r, ok := n.Find(recs)
		if !ok {
			return fmt.Errorf("the discovery log has no RDMA entry for %s at %s:%d:\n%s", n.NQN, n.Addr, workload.NVMeoFPort, out)
		}
		t.Logf("%s: discovered %s at %s %s:%s (%s QP, %s), %d records", row, r.SubNQN, r.TrType, r.TrAddr, r.TrSvcID, r.QPType, r.CMS, len(recs))
		return nil
	})
	var dev string
	step("connect", func() error {
		if _, err := hg.Exec(ctx, 90*time.Second, n.ConnectArgs(hostNQN, hostID)...); err != nil {
			return err
		}
		var err error
		dev, err = n.WaitNamespace(ctx, hg, 30*time.Second)
		return err
	})
	for _, e := range workload.NVMeoFExtents {
		var want string
		step("write "+e.Name, func() (err error) {
			want, err = writeExtent(ctx, t, row, hg, e, dev)
			return err
		})
		for _, side := range []struct {
			g   workload.GuestRunner
			dev string
		}{{hg, dev}, {tg, n.BackingDevice()}} {
			step("read "+e.Name+" on the "+strings.Fields(side.g.Name)[1], func() error {
				return readExtent(ctx, t, row, side.g, e, side.dev, want, side.g == hg)
			})
		}
	}
	step("disconnect", func() error {
		out, err := hg.Exec(ctx, 60*time.Second, n.DisconnectArgs()...)
		if err != nil {
			return err
		}
		if c, err := workload.ParseNVMeDisconnect(out); err != nil || c != 1 {
			return fmt.Errorf("nvme disconnect: %d controllers, want 1 (%v): %s", c, err, out)
		}
		if left, err := hg.Shell(ctx, n.NamespaceScript()); err != nil || strings.TrimSpace(left) != "" {
			return fmt.Errorf("block devices of %s left after nvme disconnect: %q %v", n.NQN, left, err)
		}
		return nil
	})
	step("target teardown", func() error {
		_, err := tg.Shell(ctx, n.TargetTeardownScript())
		return err
	})
	done = true
	// The kernel consumers let go of the RDMA devices: their modules
	// unload (nvmet-rdma waits for its queues to be released).
	step("unload", func() error {
		if _, err := tg.Exec(ctx, time.Minute, "rmmod", "nvmet_rdma", "nvmet", "brd"); err != nil {
			return err
		}
		_, err := hg.Exec(ctx, time.Minute, "rmmod", "nvme_rdma", "nvme_fabrics")
		return err
	})
	return r.finish()
}

// uuid is a random RFC 4122 version 4 UUID, for a host's NQN and ID.
func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// TestRDMANVMeoFBetweenRxes: the NVMe-oF round between two rdma_rxe
// guests, Linux's own soft-RoCE on both sides: the baseline the npfnic
// rows are held to, in make vmtest-full only (NPFNIC_VM_FULL=1), since
// it boots a pair of its own.
func TestRDMANVMeoFBetweenRxes(t *testing.T) {
	if !fullVMTests() {
		t.Skip("the rxe-rxe baseline runs in make vmtest-full (NPFNIC_VM_FULL=1)")
	}
	p := rdmaPair(t, "nvmeof-rxe", testbed.RDMARxe, testbed.RDMARxe, "")
	nvmeofRound(t, p.A, p.B)
}

// writeExtent writes e's pattern through dev on g, the side that writes
// (dd with O_DIRECT, every block across the fabric), and returns the
// pattern's SHA-256; it logs the rate.
func writeExtent(ctx context.Context, t *testing.T, row string, g workload.GuestRunner, e workload.NVMeoFExtent, dev string) (string, error) {
	out, err := g.Shell(ctx, e.WriteScript(dev))
	if err != nil {
		return "", err
	}
	want, err := workload.ParseSHA256(out)
	if err != nil {
		return "", err
	}
	dd, err := workload.ParseDD(out)
	if err != nil {
		return "", err
	}
	if dd.Bytes != e.Bytes() {
		return "", fmt.Errorf("wrote %d bytes, want %d:\n%s", dd.Bytes, e.Bytes(), out)
	}
	t.Logf("%s: wrote %d KiB in %d KiB commands at %.1f MB/s", row, e.Bytes()>>10, e.BS>>10, dd.MBs())
	return want, nil
}

// readExtent reads e back from dev on g (through the fabric, or the
// target's own device) and compares its SHA-256 with want, what the
// writer wrote; logRate logs the read's rate.
func readExtent(ctx context.Context, t *testing.T, row string, g workload.GuestRunner, e workload.NVMeoFExtent, dev, want string, logRate bool) error {
	out, err := g.Shell(ctx, e.ReadScript(dev))
	if err != nil {
		return err
	}
	got, err := workload.ParseSHA256(out)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s read back from %s on %s differs from what was written: SHA-256 %s, want %s", e.Name, dev, g.Name, got, want)
	}
	if dd, err := workload.ParseDD(out); err == nil && logRate {
		t.Logf("%s: read %d KiB in %d KiB commands at %.1f MB/s", row, e.Bytes()>>10, e.BS>>10, dd.MBs())
	}
	return nil
}
