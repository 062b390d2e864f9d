package npfnic

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// TestTraceFaultTimelines: with a recorder handed to the function, every
// RX fault's path appears in the trace in the order the device takes it
// (fault, page request queued, interrupt, response, the buffer used), read
// back from the file a user would open; the events around it (doorbells,
// descriptor fetches, ATC misses and walks, DMA, invalidations) are there
// too.
func TestTraceFaultTimelines(t *testing.T) {
	if !trace.Compiled {
		t.Skip("built with npfnic_notrace")
	}
	for _, tc := range []struct {
		name   string
		policy uint32
	}{
		{"drop", hw.RxPolicyDrop},
		{"backup", hw.RxPolicyBackup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := trace.New(1 << 16)
			if err != nil {
				t.Fatal(err)
			}
			o := faultOpts{policy: tc.policy, trace: rec}
			if tc.policy == hw.RxPolicyBackup {
				o.bmSize, o.backupSize = 16, 16
			}
			r := newFaultRig(t, o)
			var mu sync.Mutex
			r.serveFaults(r.mapAll(&mu))
			r.postRX(4)
			sent := 0
			r.waitFor("four frames delivered", func() bool {
				if tc.policy == hw.RxPolicyBackup {
					r.backupDriver(&mu)
				}
				if r.qp(hw.PairStatusRxHead) >= 4 {
					return true
				}
				if tc.policy == hw.RxPolicyDrop || sent < 4 {
					r.send(testFrame(100, byte(sent)))
					sent++
				}
				time.Sleep(time.Millisecond)
				return false
			})
			if err := r.ats.Sync(atstest.Range(0, rxVA(0), 1)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "trace.json")
			if err := rec.WriteFile(path); err != nil {
				t.Fatal(err)
			}
			events, lost, err := trace.ReadFile(path)
			if err != nil || lost != 0 {
				t.Fatalf("read back: %v, %d lost", err, lost)
			}
			seen := map[trace.Kind]int{}
			for _, e := range events {
				seen[e.Kind]++
			}
			want := []trace.Kind{trace.Doorbell, trace.DescFetch, trace.ATCMiss, trace.Walk, trace.Fault,
				trace.PageRequest, trace.PageResponse, trace.IRQ, trace.DMAWrite, trace.Invalidate, trace.InvalidateDone}
			if tc.policy == hw.RxPolicyBackup {
				want = append(want, trace.BackupStore, trace.BackupResolve)
			} else {
				want = append(want, trace.RxFrame, trace.RxDrop)
			}
			for _, k := range want {
				if seen[k] == 0 {
					t.Errorf("no %s event in the trace (%v)", k, seen)
				}
			}
			tls := trace.Timelines(events, hw.PRQVectorDefault)
			faulted := map[uint64]bool{}
			for _, tl := range tls {
				if !tl.Complete() {
					t.Fatalf("incomplete timeline %+v", tl)
				}
				if tl.Fault.Track != trace.PairRx(0) || tl.Request.B != rxVA(uint32(tl.Fault.B)&3) {
					t.Errorf("fault %+v raised request %+v", tl.Fault, tl.Request)
				}
				st := tl.Stages()
				for i := 1; i < 4; i++ {
					if st[i].TS < st[i-1].TS {
						t.Errorf("%s at %d ns before %s at %d ns", trace.StageNames[i], st[i].TS, trace.StageNames[i-1], st[i-1].TS)
					}
				}
				// The drop policy uses the buffer only once it is mapped;
				// the backup policy resolves from the backup ring, which the
				// driver may do before its page response.
				if tc.policy == hw.RxPolicyDrop && tl.Resume.TS < tl.Response.TS {
					t.Errorf("buffer used at %d ns, before the response at %d ns", tl.Resume.TS, tl.Response.TS)
				}
				if tl.Resume.TS < tl.Fault.TS {
					t.Errorf("resumed before the fault: %+v", tl)
				}
				faulted[tl.Fault.B] = true
			}
			if len(faulted) != 4 {
				t.Errorf("timelines for descriptors %v, want each of the 4 cold slots", faulted)
			}
		})
	}
}

// TestTraceBARReads: every read of BAR0 the driver makes is a RegRead
// event with its offset and value, so the trace can count the round trips
// a data path takes (npfnic trace prints them per 1000 frames); a
// doorbell write is not one.
func TestTraceBARReads(t *testing.T) {
	if !trace.Compiled {
		t.Skip("built with npfnic_notrace")
	}
	rec, err := trace.New(1 << 10)
	if err != nil {
		t.Fatal(err)
	}
	r := newFaultRig(t, faultOpts{policy: hw.RxPolicyDrop, trace: rec})
	for _, tc := range []struct {
		off  uint64
		size int
		want uint64
	}{
		{hw.RegID, 4, hw.Magic},
		{hw.RegVersion, 4, hw.InterfaceVersion},
		{hw.RegID, 8, hw.Magic | uint64(hw.InterfaceVersion)<<32},
	} {
		all, _ := rec.Snapshot()
		before := len(all)
		p := make([]byte, tc.size)
		if err := r.n.RegionRead(hw.RegBAR, tc.off, p); err != nil {
			t.Fatal(err)
		}
		all, _ = rec.Snapshot()
		var events []trace.Event
		for _, e := range all[before:] {
			if e.Kind == trace.RegRead {
				events = append(events, e)
			}
		}
		if len(events) != 1 || events[0].Kind != trace.RegRead || events[0].A != tc.off || events[0].B != tc.want {
			t.Errorf("read of %d bytes at %#x: BAR reads %+v, want one of %#x", tc.size, tc.off, events, tc.want)
		}
	}
	all, _ := rec.Snapshot()
	before := len(all)
	// A write to a read-only register: ignored by the device, still a write.
	if err := r.n.RegionWrite(hw.RegBAR, hw.RegID, []byte{0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	all, _ = rec.Snapshot()
	for _, e := range all[before:] {
		if e.Kind == trace.RegRead {
			t.Errorf("a write traced as a BAR read: %+v", e)
		}
	}
}
