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

// VM tests of iSER, the second kernel ULP over npfnic: Linux's iSER
// initiator (ib_iser, driven by open-iscsi's iscsid and iscsiadm)
// registers every command's buffer with a fast registration work request
// and has the target move the data with RDMA READ and WRITE; tgt's
// user-space target (tgtd, through librdmacm and librxe) serves a RAM
// disk. Both are set up as a user sets them up (workload.ISER): tgtadm on
// the target, iscsiadm's discovery and login on the initiator.

// iserTarget and iserInitiator name the two ends.
const (
	iserTarget    = "iqn.2024-01.io.npfnic:iser-test"
	iserInitiator = "iqn.2024-01.io.npfnic:initiator"
)

// iserRound exports a RAM disk from target over iSER and checks it from
// initiator, on guests already up (a pair of rdmaPair). The target loads
// brd, starts tgtd and waits for its iSER listener, and sets up the
// target, its LUN on /dev/ram0 and its access list with tgtadm; the
// initiator, meanwhile, loads ib_iser and starts iscsid. Then SendTargets
// discovery and login through the iser iface, the session checked to be
// iSER and its disk found; each of workload.ISERExtents written from
// /dev/urandom through the disk (O_DIRECT) and read back both through the
// disk and from the target's RAM disk itself, each SHA-256 compared with
// the pattern's. Then both sides at once: the initiator logs out (the
// session and its disk gone), deletes its records, stops iscsid and
// unloads ib_iser; tgtd is waited for to let go of the connection, the
// target deleted, tgtd stopped and brd unloaded. A failing step is reported with
// both guests' kernel log tails and both daemons' logs. Neither kernel
// may log a warning meanwhile. It logs each step's time, and returns the
// whole round's.
func iserRound(t *testing.T, target, initiator *testbed.RDMAGuest) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := workload.ISER{Target: iserTarget, Addr: target.IP, Initiator: iserInitiator}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	tg := workload.GuestRunner{VM: target.VM, Name: string(target.Kind) + " target " + target.IP}
	ig := workload.GuestRunner{VM: initiator.VM, Name: string(initiator.Kind) + " initiator " + initiator.IP}
	row := fmt.Sprintf("iSER, %s initiator, %s target", initiator.Kind, target.Kind)
	r := beginULPRound(ctx, t, row, ig, tg)
	var tgtd, iscsid *workload.GuestDaemon
	r.more = func() string {
		var b strings.Builder
		for _, d := range []*workload.GuestDaemon{iscsid, tgtd} {
			if d != nil {
				b.WriteString("\n" + d.LogTail(ctx, 30))
			}
		}
		return b.String()
	}
	step, both := r.step, r.both
	done := false
	// A round that failed half-way still leaves the guests without its
	// session, its target and the daemons, for what the test runs next.
	defer func() {
		if done {
			return
		}
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = ig.Shell(cctx, s.InitiatorTeardownScript())
		_, _ = tg.Shell(cctx, s.TargetTeardownScript())
		_, _ = initiator.Signal(cctx, 9, "iscsid")
		_, _ = target.Signal(cctx, 9, "tgtd")
	}()

	both("set-up", func() error {
		if err := target.VM.LoadModules(ctx, workload.ISERModulesTarget...); err != nil {
			return err
		}
		tgtd = workload.StartDaemon(ctx, tg, "tgtd", workload.TgtdLog, s.TgtdScript())
		err := tgtd.WaitFor(ctx, 30*time.Second, s.TgtdReadyScript(), func(out string, exit int) error {
			return s.TgtdReady(out)
		})
		if err != nil {
			return err
		}
		_, err = tg.Shell(ctx, s.TargetSetupScript())
		return err
	}, func() error {
		if err := initiator.VM.LoadModules(ctx, workload.ISERModulesInitiator...); err != nil {
			return err
		}
		if _, err := ig.Shell(ctx, s.InitiatorSetupScript()); err != nil {
			return err
		}
		iscsid = workload.StartDaemon(ctx, ig, "iscsid", workload.IscsidLog, s.IscsidScript())
		return iscsid.WaitFor(ctx, 30*time.Second, s.IscsidReadyScript(), func(out string, exit int) error {
			if exit != 0 {
				return fmt.Errorf("not listening for iscsiadm")
			}
			return nil
		})
	})
	step("discover", func() error {
		out, err := ig.Exec(ctx, 60*time.Second, s.DiscoverArgs()...)
		if err != nil {
			return err
		}
		st, ok := s.Found(workload.ParseSendTargets(out))
		if !ok {
			return fmt.Errorf("SendTargets over iSER did not list %s at %s:\n%s", s.Target, s.Portal(), out)
		}
		t.Logf("%s: discovered %s at %s, TPGT %d", row, st.Target, st.Portal, st.TPGT)
		return nil
	})
	var sess workload.ISCSISession
	var disk string
	step("login", func() error {
		if _, err := ig.Exec(ctx, 90*time.Second, s.LoginArgs()...); err != nil {
			return err
		}
		ss, err := s.Sessions(ctx, ig)
		if err != nil {
			return err
		}
		if sess, err = s.Session(ss); err != nil {
			return err
		}
		disk, err = s.WaitDisk(ctx, ig, sess.SID, 30*time.Second)
		return err
	})
	t.Logf("%s: session %d over %s, LUN %d is %s", row, sess.SID, sess.Transport, s.Lun(), disk)
	for _, e := range workload.ISERExtents {
		var want string
		step("write "+e.Name, func() (err error) {
			want, err = writeExtent(ctx, t, row, ig, e, disk)
			return err
		})
		both("read "+e.Name, func() error { return readExtent(ctx, t, row, tg, e, s.BackingStore(), want, false) },
			func() error { return readExtent(ctx, t, row, ig, e, disk, want, true) })
	}
	// Logout, and the ULPs let go of the RDMA devices: ib_iser unloads
	// (its device client gone with it), and so does the RAM disk tgtd had
	// open. The target waits meanwhile for tgtd to let go of the session's
	// connection, which it does some seconds after the logout.
	both("logout and teardown", func() error {
		err := tgtd.WaitFor(ctx, 60*time.Second, workload.CMIDsScript, func(out string, _ int) error {
			return workload.TgtdIdle(out)
		})
		if err != nil {
			return err
		}
		if _, err := tg.Shell(ctx, s.TargetTeardownScript()); err != nil {
			return err
		}
		if err := tgtd.Wait(ctx, 30*time.Second); err != nil {
			return err
		}
		_, err = tg.Exec(ctx, time.Minute, "rmmod", "brd")
		return err
	}, func() error {
		if _, err := ig.Exec(ctx, 60*time.Second, s.LogoutArgs()...); err != nil {
			return err
		}
		ss, err := s.Sessions(ctx, ig)
		if err != nil {
			return err
		}
		if len(ss) != 0 {
			return fmt.Errorf("sessions left after logout: %+v", ss)
		}
		if left, err := ig.Shell(ctx, "ls /sys/block"); err != nil || strings.Contains(left, strings.TrimPrefix(disk, "/dev/")) {
			return fmt.Errorf("%s left after logout: %q %v", disk, left, err)
		}
		if _, err := ig.Shell(ctx, s.InitiatorTeardownScript()); err != nil {
			return err
		}
		// iscsiadm -k 0 stops iscsid with SIGTERM, which its shell
		// reports as 143.
		if err := iscsid.Wait(ctx, 30*time.Second, 128+15); err != nil {
			return err
		}
		_, err = ig.Exec(ctx, time.Minute, "rmmod", "ib_iser")
		return err
	})
	done = true
	return r.finish()
}

// TestRDMAISER: the iSER round in every pairing of npfnic and rdma_rxe,
// in make vmtest-full only (NPFNIC_VM_FULL=1): the rxe-rxe baseline,
// npfnic as the initiator and as the target against rxe, and npfnic on
// both sides, on two pairs of guests (make test runs the npfnic
// initiator against rxe in TestRDMACMWithRxe).
func TestRDMAISER(t *testing.T) {
	if !fullVMTests() {
		t.Skip("every iSER pairing runs in make vmtest-full (NPFNIC_VM_FULL=1)")
	}
	t.Run("rxe-rxe", func(t *testing.T) {
		p := rdmaPair(t, "iser-rxe", testbed.RDMARxe, testbed.RDMARxe, "")
		iserRound(t, p.A, p.B)
	})
	t.Run("npfnic-rxe", func(t *testing.T) {
		p := rdmaPair(t, "iser-npfnic-rxe", testbed.RDMANPFNIC, testbed.RDMARxe, "")
		npf, rxe := p.A, p.B
		iserRound(t, rxe, npf)
		iserRound(t, npf, rxe)
		npfnicLogClean(t, npf)
	})
	t.Run("npfnic-npfnic", func(t *testing.T) {
		p := rdmaPair(t, "iser-npfnic", testbed.RDMANPFNIC, testbed.RDMANPFNIC, "")
		iserRound(t, p.A, p.B)
		npfnicLogClean(t, p.A)
		npfnicLogClean(t, p.B)
	})
}
