package coldring

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sweepRun(policy string, ring int, secs float64, capped bool, faults uint64) Result {
	return Result{Part: PartSweep, Policy: policy, RingSize: ring, Round: 1, Seconds: secs, Capped: capped,
		Stats: map[string]uint64{"rx_faults": faults}}
}

func TestSweepMedianWithCappedRuns(t *testing.T) {
	rs := []Result{
		sweepRun("pin", 64, 3, false, 0), sweepRun("pin", 64, 5, false, 0), sweepRun("pin", 64, 4, false, 0),
		sweepRun("drop", 64, 60, true, 64), sweepRun("drop", 64, 12, false, 64), sweepRun("drop", 64, 60, true, 64),
		sweepRun("backup", 64, 4.4, false, 64), {Part: PartSweep, Policy: "backup", RingSize: 64, Err: os.ErrClosed},
		sweepRun("backup", 16, 2, false, 16),
	}
	cells := Sweep(rs)
	if len(cells) != 4 || cells[0].RingSize != 16 {
		t.Fatalf("cells %+v: want 4, ring 16 first", cells)
	}
	get := func(p string, n int) SweepCell {
		for _, c := range cells {
			if c.Policy == p && c.RingSize == n {
				return c
			}
		}
		t.Fatalf("no cell %s %d", p, n)
		return SweepCell{}
	}
	if c := get("pin", 64); c.Seconds != 4 || c.LowerBound || c.Runs != 3 {
		t.Errorf("pin 64: %+v", c)
	}
	if c := get("drop", 64); c.Seconds != 60 || !c.LowerBound || c.Capped != 2 || c.RxFaults != 64 {
		t.Errorf("drop 64: %+v", c)
	}
	if c := get("backup", 64); c.Seconds != 4.4 || c.Failed != 1 || !c.Done() {
		t.Errorf("backup 64: %+v", c)
	}
	ratios := Ratios(cells)
	found := 0
	for _, r := range ratios {
		switch {
		case r.Policy == "drop" && r.RingSize == 64:
			found++
			if r.Ratio != 15 || !r.LowerBound {
				t.Errorf("drop/pin: %+v", r)
			}
		case r.Policy == "backup" && r.RingSize == 64:
			found++
			if math.Abs(r.Ratio-1.1) > 1e-9 || r.LowerBound {
				t.Errorf("backup/pin: %+v", r)
			}
		case r.Policy == "backup" && r.RingSize == 16:
			found++
			if !math.IsNaN(r.Ratio) {
				t.Errorf("backup/pin without pin at 16: %+v", r)
			}
		}
	}
	if found != 3 {
		t.Errorf("ratios %+v", ratios)
	}
	g := Goals(cells)
	if !strings.Contains(g, "backup within 1.1x of pin: MET") || !strings.Contains(g, "drop pathological (>= 2x pin or capped): yes") {
		t.Errorf("goals:\n%s", g)
	}
}

func TestSweepEvenRoundsMedian(t *testing.T) {
	cells := Sweep([]Result{sweepRun("drop", 32, 20, false, 1), sweepRun("drop", 32, 60, true, 1)})
	if c := cells[0]; c.Seconds != 40 || !c.LowerBound {
		t.Fatalf("%+v: want 40, lower bound", c)
	}
}

func TestStartupSummary(t *testing.T) {
	rs := []Result{
		{Part: PartStartup, Policy: "pin", RingSize: 64, Bins: []float64{3000, 4000, 4000, 4000}, Ops: 15000},
		{Part: PartStartup, Policy: "drop", RingSize: 64, Bins: []float64{0, 0, 100, 2500}, Ops: 2600, Stats: map[string]uint64{"rx_fault_drops": 40}},
		{Part: PartStartup, Policy: "backup", RingSize: 64, Bins: []float64{2900, 4000, 4000, 4100}, Ops: 15000},
	}
	st := Startup(rs)
	if len(st) != 3 {
		t.Fatalf("%+v", st)
	}
	if st[0].TimeToHalf != 1 || st[1].TimeToHalf != 4 || st[2].TimeToHalf != 1 {
		t.Errorf("time to half: %d %d %d", st[0].TimeToHalf, st[1].TimeToHalf, st[2].TimeToHalf)
	}
	if st[1].ZeroSeconds != 2 || st[1].FaultDrops != 40 || st[1].Mean != 650 {
		t.Errorf("drop: %+v", st[1])
	}
}

func TestWriteOutputs(t *testing.T) {
	var rs []Result
	for _, p := range Policies {
		bins := []float64{0, 1000, 3000, 4000, 4000}
		if p == "drop" {
			bins = []float64{0, 0, 0, 0, 200}
		}
		rs = append(rs, Result{Part: PartStartup, Policy: p, RingSize: 64, Bins: bins, Ops: 12000, Stats: map[string]uint64{"rx_faults": 64}})
	}
	for _, n := range DefaultSizes {
		rs = append(rs, sweepRun("pin", n, 3, false, 0), sweepRun("drop", n, 60, n >= 64, uint64(n)), sweepRun("backup", n, 3.2, false, uint64(n)))
	}
	rs = append(rs, Result{Part: PartSweep, Policy: "backup", RingSize: 512, Round: 2, Err: os.ErrDeadlineExceeded})
	dir := t.TempDir()
	c := Config{Cap: 60 * time.Second, StartupTime: 5 * time.Second}
	files, err := WriteOutputs(dir, c, rs)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 5 {
		t.Fatalf("files %v", files)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	txt, _ := os.ReadFile(filepath.Join(dir, "cold-ring.txt"))
	for _, want := range []string{"(a) startup", "(b) seconds for 10000", ">=60", "drop/pin", "backup/pin", "FAILED"} {
		if !strings.Contains(string(txt), want) {
			t.Errorf("table lacks %q:\n%s", want, txt)
		}
	}
	t.Logf("\n%s", txt)
}
