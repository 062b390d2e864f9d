package ci

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// VM tests of network page faults: the driver translates RX buffers
// lazily (rx_policy pin, drop or backup) and the device faults on them.

// faultTestbed boots a guest whose npfnic (served in this process) is
// cabled to a tap in a namespace of its own, with memcached running; the
// driver is not loaded yet.
func faultTestbed(t *testing.T, name string) *testbed.Testbed {
	t.Helper()
	a := needImages(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tb, err := testbed.Start(ctx, testbed.Config{Images: a, Name: name, LogDir: logDir(t, name)})
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	t.Cleanup(tb.Close)
	t.Logf("guest %s (%s) booted in %.1fs", name, tb.Accel, tb.Boot.Seconds())
	return tb
}

// loadPolicy (re)loads the driver with a policy and RX ring size and checks
// the driver runs that policy. Fault ahead is off: these tests count on
// every slot of the cold ring faulting, where the default depth (64)
// would back a whole small ring after its first fault, and a frame sent
// after that would not reach the backup ring or an injected fault.
func loadPolicy(t *testing.T, tb *testbed.Testbed, policy string, ring int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	params := testbed.DriverParams(policy, ring, testbed.FaultAheadParam(0))
	if err := tb.LoadDriver(ctx, params); err != nil {
		t.Fatalf("load npfnic.ko %s: %v", params, err)
	}
	if err := tb.CheckPolicy(ctx, policy); err != nil {
		t.Fatal(err)
	}
}

func faultStats(t *testing.T, tb *testbed.Testbed) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := tb.Ethtool(ctx)
	if err != nil {
		t.Fatalf("ethtool -S: %v", err)
	}
	return st
}

// memaslapOps runs memaslap for ops operations (4 connections) against the
// guest's memcached, killed after limit.
func memaslapOps(t *testing.T, tb *testbed.Testbed, ops int, limit time.Duration) *workload.MemaslapRun {
	t.Helper()
	m, err := tb.Memaslap(context.Background(), workload.MemaslapOptions{Ops: ops, Conns: 4, Cap: limit})
	if err != nil {
		t.Fatalf("memaslap: %v", err)
	}
	return m
}

// TestFaultColdStartPolicies: from a cold 64-entry RX ring (a fresh driver
// load), memaslap completes under backup with every faulting frame saved
// by the backup ring (rx_backup_pkts > 0, rx_fault_drops == 0); under pin
// nothing faults; under drop frames are dropped (rx_fault_drops > 0) —
// drop may not finish, which is not checked.
func TestFaultColdStartPolicies(t *testing.T) {
	tb := faultTestbed(t, "coldstart")

	loadPolicy(t, tb, "backup", 64)
	m := memaslapOps(t, tb, 2000, 2*time.Minute)
	st := faultStats(t, tb)
	t.Logf("backup: %d ops in %.1fs; rx_faults %d rx_backup_pkts %d rx_fault_drops %d", opsOf(m), m.Wall.Seconds(), st["rx_faults"], st["rx_backup_pkts"], st["rx_fault_drops"])
	if m.Capped || m.Summary == nil || m.Summary.Ops < 2000 || m.Summary.Errors != 0 {
		t.Errorf("backup: memaslap did not complete 2000 operations cleanly (capped %v): %+v\n%s", m.Capped, m.Summary, tailLines(m.Stdout+m.Stderr, 20))
	}
	if st["rx_fault_drops"] != 0 || st["rx_backup_pkts"] == 0 || st["rx_faults"] == 0 {
		t.Errorf("backup from a cold ring: want rx_faults > 0, rx_backup_pkts > 0, rx_fault_drops == 0; got %d, %d, %d",
			st["rx_faults"], st["rx_backup_pkts"], st["rx_fault_drops"])
	}

	loadPolicy(t, tb, "pin", 64)
	m = memaslapOps(t, tb, 1000, time.Minute)
	st = faultStats(t, tb)
	if m.Capped || m.Summary == nil || m.Summary.Errors != 0 {
		t.Errorf("pin: memaslap did not complete cleanly (capped %v): %+v", m.Capped, m.Summary)
	}
	if st["rx_faults"] != 0 || st["rx_fault_drops"] != 0 {
		t.Errorf("pin: every buffer is mapped before use, yet rx_faults %d, rx_fault_drops %d", st["rx_faults"], st["rx_fault_drops"])
	}
	// Nothing to cool under pin: the driver refuses, and the refusal
	// reaches the caller.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tb.WriteSysfs(ctx, "cool", "1"); err == nil {
		t.Errorf("cool under pin succeeded; want EINVAL")
	}

	loadPolicy(t, tb, "drop", 64)
	m = memaslapOps(t, tb, 200, 15*time.Second)
	st = faultStats(t, tb)
	t.Logf("drop: capped %v after %.1fs; rx_faults %d rx_fault_drops %d", m.Capped, m.Wall.Seconds(), st["rx_faults"], st["rx_fault_drops"])
	if st["rx_fault_drops"] == 0 || st["rx_backup_pkts"] != 0 {
		t.Errorf("drop from a cold ring: want rx_fault_drops > 0 and no backup packets; got %d drops, %d backup", st["rx_fault_drops"], st["rx_backup_pkts"])
	}
}

func opsOf(m *workload.MemaslapRun) int64 {
	if m.Summary == nil {
		return 0
	}
	return m.Summary.Ops
}

// TestFaultCoolUnderTraffic: the ring is cooled (every RX buffer unmapped
// and freed, with invalidations) every 200 ms while 16 MiB go each way
// over TCP under the backup policy: nothing hangs, both sha256 sums match,
// and the driver counted the cools.
func TestFaultCoolUnderTraffic(t *testing.T) {
	tb := faultTestbed(t, "cool")
	loadPolicy(t, tb, "backup", 256)

	cooling := coolEvery(200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return tb.WriteSysfs(ctx, "cool", "1")
	})
	link := &hostLink{ns: tb.NS, hostIP: tb.HostIP, guestIP: tb.GuestIP}
	start := time.Now()
	var cools coolCount
	func() {
		defer func() { cools = cooling.stop() }()
		transfer(t, tb.VM, link, 16<<20)
	}()
	st := faultStats(t, tb)
	t.Logf("16 MiB each way in %.1fs with %d cools (%d failed); cools %d rx_faults %d rx_backup_pkts %d rx_fault_drops %d invalidations %d",
		time.Since(start).Seconds(), cools.done, cools.failed, st["cools"], st["rx_faults"], st["rx_backup_pkts"], st["rx_fault_drops"], st["invalidations"])
	if cools.failed > 0 {
		t.Errorf("%d writes to cool failed; first: %v", cools.failed, cools.first)
	}
	if cools.done == 0 || st["cools"] == 0 {
		t.Errorf("no cool happened during the transfer (%d written, driver counted %d)", cools.done, st["cools"])
	}
	if st["cools"] < uint64(cools.done) {
		t.Errorf("the driver counted %d cools, %d were written", st["cools"], cools.done)
	}
	if st["rx_faults"] == 0 {
		t.Errorf("cooling under traffic caused no RX fault")
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// deviceOf is the in-process npfnic of a testbed.
func deviceOf(t *testing.T, tb *testbed.Testbed) *npfnic.NIC {
	t.Helper()
	n, ok := tb.Device.(*npfnic.NIC)
	if !ok {
		t.Fatalf("the testbed's device is a %T", tb.Device)
	}
	return n
}

// deviceCounters are the device model's own view of an injection.
type deviceCounters struct {
	rxFaultErrors, txFaultErrors uint64 // descriptors completed with RXD_ERROR, TX frames dropped
	unexpected                   uint64 // page responses matching no group
	invalidations                uint64
}

func devCounters(t *testing.T, tb *testbed.Testbed) deviceCounters {
	t.Helper()
	n := deviceOf(t, tb)
	var c deviceCounters
	for _, p := range n.Ethernet().Stats().Pairs {
		c.rxFaultErrors += p.RxFaultErrors
		c.txFaultErrors += p.TxFaultErrors
	}
	c.unexpected = n.PRI().Stats().Unexpected
	c.invalidations = n.ATS().Stats().Invalidations
	return c
}

// TestFaultBadTranslationInput: the driver feeds the translation path bad
// input through debugfs inject; each case has its defined outcome, in the
// driver's counters and the device's, and afterwards the server still
// serves and traffic still flows:
//   - bad_pte: an RX slot's PTE points outside guest RAM until a frame hits
//     it: that descriptor completes with RXD_ERROR (rx_xlat_errors);
//   - bad_pasid: PASID 0's root table outside guest RAM for a moment: RX
//     descriptors with RXD_ERROR or TX frames dropped;
//   - bad_prgi: one page response with a PRG index no request can carry:
//     counted as unexpected (UPRGI), ignored;
//   - prsp_storm: the whole page response queue of such responses: all
//     counted as unexpected, PRI keeps working;
//   - inv_unmapped: an invalidation of a range never mapped completes.
func TestFaultBadTranslationInput(t *testing.T) {
	tb := faultTestbed(t, "badxlat")
	loadPolicy(t, tb, "backup", 64)
	link := &hostLink{ns: tb.NS, hostIP: tb.HostIP, guestIP: tb.GuestIP}
	link.ping(t, tb.GuestIP) // warm a few slots; the link works

	inject := func(what string, withTraffic bool) {
		t.Helper()
		done := make(chan struct{})
		ctx, stop := context.WithCancel(context.Background())
		if withTraffic {
			// Frames for the bad translation to hit while the driver
			// waits for the error (up to 150 sleeps of 20 ms), until
			// the injection returns: a fixed 3 s of pings ended before a
			// guest of a loaded host got to the injection.
			go func() {
				defer close(done)
				_, _ = tb.NS.Ping(ctx, tb.GuestIP, 2000, 50*time.Millisecond, time.Second)
			}()
			time.Sleep(100 * time.Millisecond)
		} else {
			close(done)
		}
		run(t, tb.VM, fmt.Sprintf("echo '%s 0' > %s", what, tb.DebugfsPath("inject")))
		stop()
		<-done
	}
	afterwards := func(what string) {
		t.Helper()
		link.ping(t, tb.GuestIP)
		if !strings.Contains(run(t, tb.VM, "dmesg"), "inject "+what+":") {
			t.Errorf("%s: the driver did not report the injection in dmesg", what)
		}
		if tb.Dead() {
			t.Fatalf("%s: QEMU exited", what)
		}
	}

	for _, tc := range []struct {
		what    string
		traffic bool
		check   func(before, after map[string]uint64, db, da deviceCounters) string
	}{
		{"bad_pte", true, func(b, a map[string]uint64, db, da deviceCounters) string {
			if a["rx_xlat_errors"] <= b["rx_xlat_errors"] || da.rxFaultErrors <= db.rxFaultErrors {
				return fmt.Sprintf("want an RX descriptor completed with RXD_ERROR: rx_xlat_errors %d -> %d, device RxFaultErrors %d -> %d",
					b["rx_xlat_errors"], a["rx_xlat_errors"], db.rxFaultErrors, da.rxFaultErrors)
			}
			return ""
		}},
		{"bad_pasid", true, func(b, a map[string]uint64, db, da deviceCounters) string {
			if da.rxFaultErrors+da.txFaultErrors <= db.rxFaultErrors+db.txFaultErrors {
				return fmt.Sprintf("want RXD_ERROR descriptors or dropped TX frames: device RxFaultErrors %d -> %d, TxFaultErrors %d -> %d; rx_xlat_errors %d -> %d, tx_fault_errors %d -> %d",
					db.rxFaultErrors, da.rxFaultErrors, db.txFaultErrors, da.txFaultErrors,
					b["rx_xlat_errors"], a["rx_xlat_errors"], b["tx_fault_errors"], a["tx_fault_errors"])
			}
			return ""
		}},
		{"bad_prgi", false, func(b, a map[string]uint64, db, da deviceCounters) string {
			if da.unexpected != db.unexpected+1 || a["pri_unexpected"] != b["pri_unexpected"]+1 {
				return fmt.Sprintf("want exactly one unexpected response: device %d -> %d, pri_unexpected %d -> %d",
					db.unexpected, da.unexpected, b["pri_unexpected"], a["pri_unexpected"])
			}
			return ""
		}},
		{"prsp_storm", false, func(b, a map[string]uint64, db, da deviceCounters) string {
			n := da.unexpected - db.unexpected
			if n < 2 || a["pri_unexpected"]-b["pri_unexpected"] != n {
				return fmt.Sprintf("want a queue full of unexpected responses, counted alike: device %d -> %d, pri_unexpected %d -> %d",
					db.unexpected, da.unexpected, b["pri_unexpected"], a["pri_unexpected"])
			}
			return ""
		}},
		{"inv_unmapped", false, func(b, a map[string]uint64, db, da deviceCounters) string {
			if da.invalidations <= db.invalidations || a["inv_timeouts"] != b["inv_timeouts"] {
				return fmt.Sprintf("want a completed invalidation: device invalidations %d -> %d, inv_timeouts %d -> %d",
					db.invalidations, da.invalidations, b["inv_timeouts"], a["inv_timeouts"])
			}
			return ""
		}},
	} {
		before, db := faultStats(t, tb), devCounters(t, tb)
		inject(tc.what, tc.traffic)
		after, da := faultStats(t, tb), devCounters(t, tb)
		t.Logf("%s: rx_xlat_errors +%d, tx_fault_errors +%d, pri_unexpected +%d, invalidations +%d; device: RXD_ERROR +%d, TX drops +%d, unexpected +%d, invalidations +%d",
			tc.what, after["rx_xlat_errors"]-before["rx_xlat_errors"], after["tx_fault_errors"]-before["tx_fault_errors"],
			after["pri_unexpected"]-before["pri_unexpected"], after["invalidations"]-before["invalidations"],
			da.rxFaultErrors-db.rxFaultErrors, da.txFaultErrors-db.txFaultErrors, da.unexpected-db.unexpected, da.invalidations-db.invalidations)
		if msg := tc.check(before, after, db, da); msg != "" {
			t.Errorf("%s: %s", tc.what, msg)
		}
		if after["pri_errors"] != before["pri_errors"] {
			t.Errorf("%s: PRI stopped with an error (pri_errors %d -> %d)", tc.what, before["pri_errors"], after["pri_errors"])
		}
		afterwards(tc.what)
	}

	// Faults still resolve: a cold ring again, and TCP through it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tb.WriteSysfs(ctx, "cool", "1"); err != nil {
		t.Fatal(err)
	}
	transfer(t, tb.VM, link, 1<<20)
	if st := faultStats(t, tb); st["rx_backup_pkts"] == 0 || st["prsp_success"] == 0 {
		t.Errorf("after the injections no fault was resolved: %v", st)
	}
}

// TestFaultRefusedBackupEntry (finding 6 of issue 10): a backup entry the
// driver refuses is still an rNPF the device waits for, and rx_head stays
// on it until it is resolved. The driver's inject bad_backup_* reads the
// next backup entry corrupted, as a broken device would write it (the
// in-process device writes only correct ones). Afterwards RX must work
// again without an ifdown: an entry of a known pair with a bad status is
// resolved as an error completion; one naming no pair in use, or a
// descriptor long consumed, restarts the pairs (backup_resets).
func TestFaultRefusedBackupEntry(t *testing.T) {
	tb := faultTestbed(t, "refused")
	for _, tc := range []struct {
		what   string
		resets uint64 // backup_resets expected
	}{
		{"bad_backup_status", 0},
		{"bad_backup_queue", 1},
		{"bad_backup_desc", 1},
	} {
		// A fresh load: the ring is cold, so the next frames fault.
		loadPolicy(t, tb, "backup", 64)
		before := faultStats(t, tb)
		run(t, tb.VM, fmt.Sprintf("echo '%s 0' > %s", tc.what, tb.DebugfsPath("inject")))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		// The first echo requests fault into the backup ring, one of them
		// is refused; replies must come back within 10 s.
		res, err := tb.NS.Ping(ctx, tb.GuestIP, 20, 150*time.Millisecond, 10*time.Second)
		cancel()
		if err != nil {
			t.Fatalf("%s: ping: %v (RX wedged on the refused entry?)", tc.what, err)
		}
		after := faultStats(t, tb)
		dmesg := run(t, tb.VM, "dmesg")
		t.Logf("%s: %d/%d echo replies; backup_errors +%d, backup_resets +%d, rx_xlat_errors +%d, rx_backup_pkts +%d",
			tc.what, res.Received, res.Sent, after["backup_errors"]-before["backup_errors"],
			after["backup_resets"]-before["backup_resets"], after["rx_xlat_errors"]-before["rx_xlat_errors"],
			after["rx_backup_pkts"]-before["rx_backup_pkts"])
		if !strings.Contains(dmesg, "inject bad_backup: entry") {
			t.Fatalf("%s: no backup entry was corrupted (no frame reached the backup ring?)", tc.what)
		}
		if after["backup_errors"] <= before["backup_errors"] {
			t.Errorf("%s: the driver did not count the refused entry (backup_errors %d -> %d)", tc.what, before["backup_errors"], after["backup_errors"])
		}
		if got := after["backup_resets"] - before["backup_resets"]; got != tc.resets {
			t.Errorf("%s: backup_resets +%d, want +%d", tc.what, got, tc.resets)
		}
		// The wedge: nothing received after the refused entry. Replies
		// to the last pings show the ring moved on.
		if res.Received < res.Sent/2 {
			t.Errorf("%s: RX is wedged after the refused entry: %d of %d echo replies", tc.what, res.Received, res.Sent)
		}
		link := &hostLink{ns: tb.NS, hostIP: tb.HostIP, guestIP: tb.GuestIP}
		link.ping(t, tb.GuestIP)
	}
}

// coolCount is what a coolEvery loop did: cools written, cools that
// failed, and the first failure.
type coolCount struct {
	done, failed int64
	first        error
}

// coolLoop cools a guest's rings on a ticker until stopped.
type coolLoop struct {
	stopCh chan struct{}
	wg     sync.WaitGroup
	count  coolCount
}

// coolEvery calls cool every interval, on a goroutine of its own, until
// stop: under traffic, each call unmaps every RX buffer, so the next
// frames fault.
func coolEvery(interval time.Duration, cool func() error) *coolLoop {
	l := &coolLoop{stopCh: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-l.stopCh:
				return
			case <-tick.C:
			}
			if err := cool(); err != nil {
				l.count.failed++
				if l.count.first == nil {
					l.count.first = err
				}
				continue
			}
			l.count.done++
		}
	}()
	return l
}

// stop ends the loop and says what it did.
func (l *coolLoop) stop() coolCount {
	close(l.stopCh)
	l.wg.Wait()
	return l.count
}
