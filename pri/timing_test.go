package pri_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npfnic/npfnic/pri"
)

func rec(stamps ...int64) pri.Record {
	var r pri.Record
	copy(r.Stamps[:], stamps)
	return r
}

func TestSummarize(t *testing.T) {
	var recs []pri.Record
	// 100 faults: stage k of fault i lasts (i+1)*(k+1) µs.
	for i := range 100 {
		us := int64(time.Microsecond)
		d := int64(i+1) * us
		t0 := int64(1_000_000)
		recs = append(recs, rec(t0, t0+d, t0+3*d, t0+6*d, t0+10*d))
	}
	recs = append(recs, rec(5, 6), rec(5, 0, 7)) // incomplete: counted where possible
	s := pri.Summarize(recs)
	for st, mult := range []time.Duration{1, 2, 3, 4, 10} {
		d := s.Stages[st]
		wantN := 100
		if st == pri.StageQueue {
			wantN = 101
		}
		if d.N != wantN {
			t.Errorf("%s: n %d, want %d", pri.StageNames[st], d.N, wantN)
			continue
		}
		if st == pri.StageQueue {
			continue
		}
		us := time.Microsecond * mult
		if d.P50 != 51*us || d.P99 != 100*us || d.Max != 100*us || d.Mean != 50*us+us/2 {
			t.Errorf("%s: %+v", pri.StageNames[st], d)
		}
	}
	// A response before the interrupt stamp (polling driver) is not negative.
	if v, ok := rec(1, 2, 10, 8, 12).Interval(pri.StageResolve); !ok || v != 0 {
		t.Fatalf("negative interval %v", v)
	}
	if _, ok := rec(1, 2).Interval(pri.StageTotal); ok {
		t.Fatal("interval with a missing stamp")
	}
	var b strings.Builder
	if err := s.Write(&b); err != nil || !strings.Contains(b.String(), "resolve") || strings.Count(b.String(), "\n") != pri.NumStages+1 {
		t.Fatalf("table:\n%s", b.String())
	}
}

func TestRecorderRing(t *testing.T) {
	r := pri.NewRecorder(5) // rounds up to 8
	for i := range 20 {
		r.Add(pri.Record{Stamps: [pri.NumStamps]int64{int64(i + 1)}, Pages: i, Kind: 3, Queue: 9, Outcome: pri.OutcomeInvalid})
	}
	got := r.Snapshot()
	if len(got) != 8 || r.Count() != 20 {
		t.Fatalf("%d records kept of %d", len(got), r.Count())
	}
	for i, x := range got {
		if x.Stamps[0] != int64(13+i) || x.Pages != 12+i || x.Kind != 3 || x.Queue != 9 || x.Outcome != pri.OutcomeInvalid {
			t.Fatalf("record %d: %+v", i, x)
		}
	}
}

// TestRecorderConcurrent: readers never see a torn record while writers
// overwrite the ring.
func TestRecorderConcurrent(t *testing.T) {
	r := pri.NewRecorder(64)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(1); !stop.Load(); i++ {
				x := i*8 + int64(w)
				var rc pri.Record
				for k := range rc.Stamps {
					rc.Stamps[k] = x + int64(k)
				}
				rc.Pages, rc.Queue = int(x%1000), uint16(x%7)
				r.Add(rc)
			}
		}()
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	snaps := 0
	for time.Now().Before(deadline) {
		for _, rc := range r.Snapshot() {
			x := rc.Stamps[0]
			for k, v := range rc.Stamps {
				if v != x+int64(k) {
					t.Fatalf("torn record %+v", rc)
				}
			}
			if rc.Pages != int(x%1000) || rc.Queue != uint16(x%7) {
				t.Fatalf("torn record %+v", rc)
			}
		}
		snaps++
	}
	stop.Store(true)
	wg.Wait()
	if r.Count() == 0 || snaps == 0 {
		t.Fatal("nothing recorded")
	}
}
