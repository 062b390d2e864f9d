package ci

import (
	"context"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
)

// coldRingRun runs memaslap for ops operations from whatever state the
// ring is in and returns the fault counters afterwards and the TCP
// segments both ends retransmitted meanwhile.
func coldRingRun(t *testing.T, tb *testbed.Testbed, what string, ops int) (map[string]uint64, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	host0, err := tb.HostTCP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	guest0, err := tb.GuestTCP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := memaslapOps(t, tb, ops, time.Minute)
	st := faultStats(t, tb)
	host1, err := tb.HostTCP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	guest1, err := tb.GuestTCP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	retrans := host1["Tcp.RetransSegs"] - host0["Tcp.RetransSegs"] + guest1["Tcp.RetransSegs"] - guest0["Tcp.RetransSegs"]
	t.Logf("%s: %d ops in %.1fs; rx_faults %d rx_prefaulted %d rx_backup_pkts %d rx_fault_drops %d rx_slot_pages %d; TCP retransmits %d",
		what, opsOf(m), m.Wall.Seconds(), st["rx_faults"], st["rx_prefaulted"], st["rx_backup_pkts"], st["rx_fault_drops"], st["rx_slot_pages"], retrans)
	if m.Capped || m.Summary == nil || m.Summary.Ops < int64(ops) || m.Summary.Errors != 0 {
		t.Errorf("%s: memaslap did not complete %d operations cleanly (capped %v): %+v\n%s", what, ops, m.Capped, m.Summary, tailLines(m.Stdout+m.Stderr, 20))
	}
	return st, retrans
}

// TestFaultAheadColdRing: fault_ahead N makes a resolved RX fault back the
// next N cold slots too. From a cold 256-entry ring under backup, N = 0
// takes one fault per slot; N = 15 (module parameter) takes at most a
// quarter of that, the rest of the slots prefaulted, and N = 3 (written to
// debugfs, then the ring cooled) at most two thirds; every slot gets one
// page, and the backup ring loses no frame.
func TestFaultAheadColdRing(t *testing.T) {
	const ring, ops = 256, 2000
	tb := faultTestbed(t, "faultahead")
	load := func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		params := testbed.DriverParams("backup", ring, testbed.FaultAheadParam(n))
		if err := tb.LoadDriver(ctx, params); err != nil {
			t.Fatalf("load npfnic.ko %s: %v", params, err)
		}
		if err := tb.CheckPolicy(ctx, "backup"); err != nil {
			t.Fatal(err)
		}
		if got, err := tb.FaultAhead(ctx); err != nil || got != n {
			t.Fatalf("debugfs %s after loading with %s: %d, %v", testbed.FaultAheadFile, params, got, err)
		}
	}
	check := func(what string, st map[string]uint64, faults0, pre0, maxFaults uint64) {
		t.Helper()
		faults, pre := st["rx_faults"]-faults0, st["rx_prefaulted"]-pre0
		// A slot the device faults on while it is being prefaulted
		// counts in both.
		if faults+pre < ring || pre >= ring || st["rx_slot_pages"] != ring {
			t.Errorf("%s: rx_faults %d + rx_prefaulted %d, rx_slot_pages %d: want every one of the %d slots backed, each once", what, faults, pre, st["rx_slot_pages"], ring)
		}
		if faults == 0 || faults > maxFaults {
			t.Errorf("%s: %d rx_faults from a cold ring of %d: want 1 to %d", what, faults, ring, maxFaults)
		}
		if st["rx_fault_drops"] != 0 || st["rx_backup_pkts"] < faults0+faults {
			t.Errorf("%s: want every faulting frame in the backup ring: rx_fault_drops %d, rx_backup_pkts %d for %d faults",
				what, st["rx_fault_drops"], st["rx_backup_pkts"], faults0+faults)
		}
	}

	load(0)
	st, _ := coldRingRun(t, tb, "fault_ahead 0", ops)
	if st["rx_faults"] != ring || st["rx_prefaulted"] != 0 {
		t.Errorf("fault_ahead 0: rx_faults %d, rx_prefaulted %d: want one fault per slot (%d) and nothing prefaulted", st["rx_faults"], st["rx_prefaulted"], ring)
	}
	check("fault_ahead 0", st, 0, 0, ring)

	load(15)
	st, retrans := coldRingRun(t, tb, "fault_ahead 15", ops)
	check("fault_ahead 15", st, 0, 0, ring/4)
	if retrans != 0 {
		t.Logf("fault_ahead 15: %d TCP retransmits (not a lost frame: rx_fault_drops is 0)", retrans)
	}

	// The debugfs knob takes effect at the next fault; cool makes the
	// ring cold again without a reload.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tb.SetFaultAhead(ctx, 3); err != nil {
		t.Fatalf("debugfs %s: %v", testbed.FaultAheadFile, err)
	}
	if err := tb.WriteSysfs(ctx, "cool", "1"); err != nil {
		t.Fatalf("cool: %v", err)
	}
	st2, _ := coldRingRun(t, tb, "fault_ahead 3 after cool", ops)
	check("fault_ahead 3 after cool", st2, st["rx_faults"], st["rx_prefaulted"], ring*2/3)
}
