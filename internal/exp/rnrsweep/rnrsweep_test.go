package rnrsweep

import (
	"context"
	"encoding/csv"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
)

func smallConfig() Config {
	c := DefaultConfig()
	c.FaultRates = []float64{1e-3, 1e-2, 1e-1}
	c.MinBytes, c.MaxBytes = 8<<20, 32<<20
	c.MinFaults = 20
	return c
}

// TestSweepShape checks the physics of the model: the fault-free stream
// runs at the link's goodput, throughput falls with the fault rate, RNR
// recovery beats drop-and-timeout by at least 5x at 1% (the goal),
// and a slower resolution costs RNR recovery more.
func TestSweepShape(t *testing.T) {
	c := smallConfig()
	var progress int
	c.Progress = func(done, total int, r Result) { progress = done }
	base, points, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if progress != 1+2*2*3 || len(points) != 12 {
		t.Fatalf("progress %d, %d points", progress, len(points))
	}
	// Goodput ceiling: MTU payload per MTU + 58 header + 24 wire bytes.
	ceiling := c.LinkGbps * 1e9 / 8 / 1e6 * 4096 / (4096 + 58 + 24)
	if base.MBps > ceiling || base.MBps < 0.9*ceiling {
		t.Fatalf("fault-free %.1f MB/s, ceiling %.1f", base.MBps, ceiling)
	}
	if base.Faults != 0 || base.Timeouts != 0 {
		t.Fatalf("baseline had faults: %+v", base)
	}
	pairs := Pairs(points)
	for i, p := range pairs {
		if p.RNR == nil || p.Drop == nil {
			t.Fatalf("pair %d incomplete", i)
		}
		if p.RNR.Faults == 0 || p.RNR.RNRNaks < p.RNR.Faults || p.RNR.Timeouts != 0 {
			t.Errorf("RNR point %+v: every fault must be RNR NAKed, no timeouts", *p.RNR)
		}
		if p.Drop.RNRNaks != 0 || p.Drop.Timeouts == 0 {
			t.Errorf("drop point %+v: recovery must be by timeout", *p.Drop)
		}
		if i > 0 && pairs[i-1].Resolution == p.Resolution {
			if p.RNR.MBps >= pairs[i-1].RNR.MBps || p.Drop.MBps >= pairs[i-1].Drop.MBps {
				t.Errorf("throughput did not fall from rate %g to %g", pairs[i-1].FaultRate, p.FaultRate)
			}
		}
		if p.FaultRate == 1e-2 && p.Ratio() < 5 {
			t.Errorf("at 1%% faults, resolution %v: RNR %.1f MB/s is only %.1fx drop's %.1f", p.Resolution, p.RNR.MBps, p.Ratio(), p.Drop.MBps)
		}
	}
	for i := 0; i < 3; i++ {
		minor, major := pairs[i], pairs[3+i]
		if major.RNR.MBps >= minor.RNR.MBps {
			t.Errorf("rate %g: major faults (%.1f MB/s) not slower than minor (%.1f)", minor.FaultRate, major.RNR.MBps, minor.RNR.MBps)
		}
	}

	dir := t.TempDir()
	csvPath, pngPath, err := WriteOutputs(dir, c, base, points)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(csvPath)
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(recs) != 14 || strings.Join(recs[0], ",") != strings.Join(CSVHeader, ",") {
		t.Fatalf("csv: %v, %d records", err, len(recs))
	}
	if st, err := os.Stat(pngPath); err != nil || st.Size() < 10000 {
		t.Fatalf("png: %v", err)
	}
	tab := Table(c, base, points)
	if !strings.Contains(tab, "RNR MB/s") || strings.Count(tab, "\n") != 3+6 {
		t.Fatalf("table:\n%s", tab)
	}
	// An interrupted sweep has RNR points without their drop twins: the
	// table shows those as not run, never as 0 MB/s.
	var rnrOnly []Result
	for _, p := range points {
		if p.Recovery == ibrc.FaultRNRNak {
			rnrOnly = append(rnrOnly, p)
		}
	}
	partial := Table(c, base, rnrOnly)
	for _, line := range strings.Split(strings.TrimSpace(partial), "\n")[3:] {
		f := strings.Fields(line)
		if len(f) != 7 || f[3] != "-" || f[4] != "-" || f[6] != "-" || f[2] == "-" {
			t.Errorf("partial table row %q: want RNR figures and - for drop, ratio and timeouts", line)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, mut := range []func(*Config){
		func(c *Config) { c.MTU = 0 },
		func(c *Config) { c.FaultRates = []float64{1} },
		func(c *Config) { c.Timeout = 0 },
		func(c *Config) { c.LinkGbps = 0 },
		func(c *Config) { c.MaxBytes = c.MinBytes - 1 },
	} {
		c := DefaultConfig()
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("accepted %+v", c)
		}
	}
	if _, _, err := Run(context.Background(), Config{}); err == nil {
		t.Error("Run accepted a zero Config")
	}
}

// TestRunPointCancelled: a cancelled context stops the sweep between points.
func TestRunPointCancelled(t *testing.T) {
	c := smallConfig()
	c.MinBytes, c.MaxBytes = 1<<20, 1<<20
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, points, err := Run(ctx, c)
	if err == nil || len(points) != 0 {
		t.Fatalf("err %v, %d points", err, len(points))
	}
	r, err := RunPoint(c, 0.05, time.Millisecond, ibrc.FaultRNRNak)
	if err != nil || r.Faults == 0 || r.RNRTimer != 14 { // 1.28 ms, the first code >= 1 ms
		t.Fatalf("%+v %v", r, err)
	}
}
