package coldring

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
)

func sweepRun(policy string, ring int, secs float64, capped bool, faults uint64) Result {
	return Result{Part: PartSweep, Policy: policy, RingSize: ring, Round: 1, Seconds: secs, Capped: capped,
		FaultAhead: DefaultAhead, Stats: map[string]uint64{"rx_faults": faults}}
}

func TestSweepMedianWithCappedRuns(t *testing.T) {
	rs := []Result{
		sweepRun("pin", 64, 3, false, 0), sweepRun("pin", 64, 5, false, 0), sweepRun("pin", 64, 4, false, 0),
		sweepRun("drop", 64, 60, true, 64), sweepRun("drop", 64, 12, false, 64), sweepRun("drop", 64, 60, true, 64),
		sweepRun("backup", 64, 4.4, false, 64), {Part: PartSweep, Policy: "backup", RingSize: 64, FaultAhead: DefaultAhead, Err: os.ErrClosed},
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
		{Part: PartStartup, Policy: "pin", RingSize: 64, FaultAhead: DefaultAhead, Bins: []float64{3000, 4000, 4000, 4000}, Ops: 15000},
		{Part: PartStartup, Policy: "drop", RingSize: 64, FaultAhead: DefaultAhead, Bins: []float64{0, 0, 100, 2500}, Ops: 2600, Stats: map[string]uint64{"rx_fault_drops": 40}},
		{Part: PartStartup, Policy: "backup", RingSize: 64, FaultAhead: DefaultAhead, Bins: []float64{2900, 4000, 4000, 4100}, Ops: 15000},
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
		rs = append(rs, Result{Part: PartStartup, Policy: p, RingSize: 64, FaultAhead: DefaultAhead, Bins: bins, Ops: 12000, Stats: map[string]uint64{"rx_faults": 64}})
	}
	for _, n := range DefaultSizes {
		rs = append(rs, sweepRun("pin", n, 3, false, 0), sweepRun("drop", n, 60, n >= 64, uint64(n)), sweepRun("backup", n, 3.2, false, uint64(n)))
	}
	rs = append(rs, Result{Part: PartSweep, Policy: "backup", RingSize: 512, Round: 2, FaultAhead: DefaultAhead, Err: os.ErrDeadlineExceeded})
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

func TestJobsRotateAndAlternate(t *testing.T) {
	c := Config{Policies: []string{"off", "pin", "backup"}, Sizes: []int{64, 512}, Rounds: 3, StartupRounds: 1,
		FaultAhead: []int{0, 16}, Env: runner.Env{Images: nil, LogDir: "x"}}
	c.setDefaults()
	jobs := c.jobs()
	var got []string
	for _, st := range jobs {
		j := st.Arm
		s := fmt.Sprintf("%d%s:%s@%d", st.Round, partLetter(j.part), j.policy, j.ring)
		if j.ahead != DefaultAhead {
			s += fmt.Sprintf("/%d", j.ahead)
		}
		got = append(got, s)
	}
	want := []string{
		// round 1: part (a) once, then rings ascending, the arms in order
		"1a:off@64", "1a:pin@64", "1a:backup@64",
		"1b:off@64", "1b:pin@64", "1b:backup@64", "1c:backup@64/0", "1c:backup@64/16",
		"1b:off@512", "1b:pin@512", "1b:backup@512", "1c:backup@512/0", "1c:backup@512/16",
		// round 2: no part (a), rings descending, the arms rotated by one
		"2b:pin@512", "2b:backup@512", "2c:backup@512/0", "2c:backup@512/16", "2b:off@512",
		"2b:pin@64", "2b:backup@64", "2c:backup@64/0", "2c:backup@64/16", "2b:off@64",
		// round 3: ascending again, rotated by two
		"3b:backup@64", "3c:backup@64/0", "3c:backup@64/16", "3b:off@64", "3b:pin@64",
		"3b:backup@512", "3c:backup@512/0", "3c:backup@512/16", "3b:off@512", "3b:pin@512",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("jobs:\n got %v\nwant %v", got, want)
	}
}

func TestValidateFaultAhead(t *testing.T) {
	base := func() Config {
		return Config{Env: runner.Env{Images: &images.Artifacts{}, LogDir: "x"}, Policies: []string{"pin", "backup"}}
	}
	for _, tc := range []struct {
		edit func(*Config)
		ok   bool
	}{
		{func(c *Config) { c.FaultAhead = []int{0, 1, 64} }, true},
		{func(c *Config) { c.FaultAhead = []int{-1} }, false},
		{func(c *Config) { c.FaultAhead = []int{4, 4} }, false},
		{func(c *Config) { c.FaultAhead = []int{MaxFaultAhead + 1} }, false},
		{func(c *Config) { c.FaultAhead, c.Policies = []int{4}, []string{"backup"} }, false},
		{func(c *Config) { c.FaultAhead, c.SkipSweep = []int{4}, true }, false},
	} {
		c := base()
		tc.edit(&c)
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate %v, want ok %v", c.FaultAhead, err, tc.ok)
		}
	}
}

func aheadRun(ring, n int, secs float64, faults, pre uint64) Result {
	return Result{Part: PartAhead, Policy: "backup", RingSize: ring, FaultAhead: n, Seconds: secs,
		Stats: map[string]uint64{"rx_faults": faults, "rx_prefaulted": pre}}
}

func TestAheadSummaryAndTable(t *testing.T) {
	rs := []Result{
		sweepRun("off", 512, 1.0, false, 0), sweepRun("pin", 512, 2.0, false, 0), sweepRun("pin", 512, 2.2, false, 0), sweepRun("pin", 512, 1.8, false, 0),
		sweepRun("backup", 512, 2.6, false, 512),
		aheadRun(512, 16, 2.1, 31, 481), aheadRun(512, 16, 2.0, 30, 482), aheadRun(512, 16, 2.3, 32, 480),
		aheadRun(512, 0, 2.6, 512, 0), aheadRun(512, 0, 2.5, 512, 0), aheadRun(512, 0, 3.0, 512, 0),
	}
	sweep, ahead := Sweep(rs), Ahead(rs)
	if len(ahead) != 2 || ahead[0].FaultAhead != 0 || ahead[1].FaultAhead != 16 {
		t.Fatalf("ahead cells %+v: want N 0 then 16", ahead)
	}
	if a := ahead[1]; a.Seconds != 2.1 || a.Lo != 2.0 || a.Hi != 2.3 || a.RxFaults != 31 || a.Prefaulted != 481 {
		t.Errorf("N=16: %+v", a)
	}
	r := AheadRatios(sweep, ahead)
	if math.Abs(r[0].Ratio-1.3) > 1e-9 || math.Abs(r[1].Ratio-1.05) > 1e-9 {
		t.Errorf("ratios %+v: want 1.3 and 1.05", r)
	}
	var pinOff bool
	for _, x := range Ratios(sweep) {
		if x.Policy == "pin" && x.Base == "off" && math.Abs(x.Ratio-2) < 1e-9 {
			pinOff = true
		}
		if x.Policy == "off" {
			t.Errorf("off divided by pin: %+v", x)
		}
	}
	if !pinOff {
		t.Errorf("no pin/off ratio in %+v", Ratios(sweep))
	}
	c := Config{Rounds: 3, Policies: []string{"off", "pin", "backup"}}
	txt := Table(c, rs)
	for _, want := range []string{"pin/off", "2.00x", "backup/pin", "2.00 (1.80-2.20)", "fault_ahead 0: MISSED at 512 (1.30x)", "fault_ahead 16: MET at every ring size (512)"} {
		if !strings.Contains(txt, want) {
			t.Errorf("table lacks %q:\n%s", want, txt)
		}
	}
	dir := t.TempDir()
	files, err := WriteOutputs(dir, c, rs)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cold-ring-ahead.csv", "cold-ring-ahead.png"} {
		if !slices.Contains(files, filepath.Join(dir, f)) {
			t.Errorf("outputs %v lack %s", files, f)
		}
	}
	t.Logf("\n%s", txt)
}
