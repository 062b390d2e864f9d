package rnpfrate

import (
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/exp/runner"

	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

func validConfig() Config {
	return Config{Env: runner.Env{LogDir: "logs"}}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // substring of the error; "" for none
	}{
		{"defaults", func(*Config) {}, ""},
		{"rc", func(c *Config) { c.Transport = TransportRC }, ""},
		{"rc with eth policies", func(c *Config) { c.Transport = TransportRC; c.Policies = []string{"rnr", "backup"} }, "unknown policy"},
		{"eth with rc policies", func(c *Config) { c.Policies = []string{"rnr"} }, "unknown policy"},
		{"rc driver params", func(c *Config) { c.Transport = TransportRC; c.DriverExtra = "atc_entries=64" }, "no extra driver parameters"},
		{"rc message size", func(c *Config) { c.Transport = TransportRC; c.MsgSize = 2 << 20 }, "message size"},
		{"eth message size", func(c *Config) { c.MsgSize = 1024 }, "-transport rc"},
		{"rc rate", func(c *Config) { c.Transport = TransportRC; c.Rates = []float64{2} }, "per message"},
		{"rc one sender", func(c *Config) { c.Transport = TransportRC; c.Senders = []string{SenderNPFNIC} }, ""},
		{"rc unknown sender", func(c *Config) { c.Transport = TransportRC; c.Senders = []string{"mlx5"} }, "unknown sender"},
		{"rc sender twice", func(c *Config) { c.Transport = TransportRC; c.Senders = []string{"rxe", "rxe"} }, "twice"},
		{"eth senders", func(c *Config) { c.Senders = []string{SenderRxe} }, "senders are for -transport rc"},
		{"bad transport", func(c *Config) { c.Transport = "udp" }, "transport"},
		{"unknown policy", func(c *Config) { c.Policies = []string{"pin", "off"} }, "unknown policy"},
		{"policy twice", func(c *Config) { c.Policies = []string{"drop", "drop"} }, "twice"},
		{"unknown fault", func(c *Config) { c.Faults = []string{"minor", "disk"} }, "unknown fault kind"},
		{"rate above 1", func(c *Config) { c.Rates = []float64{0, 2} }, "rate 2"},
		{"rate below a ppm", func(c *Config) { c.Rates = []float64{1e-9} }, "rate 1e-09"},
		{"rate twice", func(c *Config) { c.Rates = []float64{0.01, 0.01} }, "twice"},
		{"fractional seconds", func(c *Config) { c.Time = 1500 * time.Millisecond }, "whole seconds"},
		{"major delay", func(c *Config) { c.MajorDelay = 2 * time.Second }, "major delay"},
		{"rounds", func(c *Config) { c.Rounds = 101 }, "rounds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// The defaults depend on the transport.
	eth, rc := validConfig(), validConfig()
	rc.Transport = TransportRC
	if err := errors.Join(eth.Validate(), rc.Validate()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(eth.Policies, Policies) || eth.Time != DefaultTime || eth.MsgSize != 0 {
		t.Errorf("eth defaults: %v, %v, %d", eth.Policies, eth.Time, eth.MsgSize)
	}
	if !slices.Equal(rc.Policies, []string{"rnr", "drop"}) || rc.Time != DefaultRCTime || rc.MsgSize != DefaultRCMsgSize ||
		!slices.Equal(rc.Senders, RCSenders) || len(eth.Senders) != 0 {
		t.Errorf("rc defaults: %v, %v, %d, %v", rc.Policies, rc.Time, rc.MsgSize, rc.Senders)
	}
}

// TestPoints: pin runs once; rate 0 once per policy and first; the other
// rates once per fault kind, ascending on odd rounds and descending on
// even ones.
func TestPoints(t *testing.T) {
	c := validConfig()
	c.Rates = []float64{0.01, 0, 1e-4}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := c.points("pin", 1); !slices.Equal(got, []Point{{Policy: "pin"}}) {
		t.Errorf("pin: %v", got)
	}
	want := []Point{{"drop", "", 0, ""}, {"drop", "minor", 100, ""}, {"drop", "minor", 10000, ""}, {"drop", "major", 100, ""}, {"drop", "major", 10000, ""}}
	if got := c.points("drop", 1); !slices.Equal(got, want) {
		t.Errorf("drop, round 1: %v, want %v", got, want)
	}
	want = []Point{{"drop", "", 0, ""}, {"drop", "minor", 10000, ""}, {"drop", "minor", 100, ""}, {"drop", "major", 10000, ""}, {"drop", "major", 100, ""}}
	if got := c.points("drop", 2); !slices.Equal(got, want) {
		t.Errorf("drop, round 2: %v, want %v", got, want)
	}
}

// TestPolicyOrder: every policy takes every position once over as many
// rounds as there are policies.
func TestPolicyOrder(t *testing.T) {
	c := validConfig()
	c.Policies = []string{"pin", "drop", "backup"}
	for round, want := range map[int][]string{
		1: {"pin", "drop", "backup"},
		2: {"drop", "backup", "pin"},
		3: {"backup", "pin", "drop"},
		4: {"pin", "drop", "backup"},
	} {
		if got := c.policyOrder(round); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", round, got, want)
		}
	}
	if !slices.Equal(c.Policies, []string{"pin", "drop", "backup"}) {
		t.Errorf("policyOrder changed Policies: %v", c.Policies)
	}
}

func TestDriverParams(t *testing.T) {
	c := validConfig()
	c.DriverExtra = "atc_entries=4096"
	for policy, want := range map[string]string{
		"pin":    "rx_policy=pin rnpf_rate_ppm=0 lro=0 atc_entries=4096",
		"drop":   "rx_policy=drop rnpf_rate_ppm=0 lro=0 atc_entries=4096",
		"backup": "rx_policy=backup rnpf_rate_ppm=0 lro=0 " + testbed.StreamBackupParams + " atc_entries=4096",
	} {
		if got := c.DriverParams(policy); got != want {
			t.Errorf("%s: %q, want %q", policy, got, want)
		}
	}
}

func TestParseRates(t *testing.T) {
	got, err := ParseRates("0, 1e-4,0.01")
	if err != nil || !slices.Equal(got, []float64{0, 1e-4, 0.01}) {
		t.Errorf("ParseRates: %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "1e-4,x"} {
		if _, err := ParseRates(bad); err == nil {
			t.Errorf("ParseRates(%q) accepted", bad)
		}
	}
	if got := []int{PPM(0), PPM(1e-4), PPM(0.01), PPM(1)}; !slices.Equal(got, []int{0, 100, 10000, 1000000}) {
		t.Errorf("PPM: %v", got)
	}
}

// run builds one successful result.
func run(p Point, round int, mbps float64, injected, faults, backup, drops uint64) Result {
	return Result{
		Point: p, Round: round, Iperf: &workload.Iperf{Mbps: mbps, Bytes: int64(mbps * 1e6 / 8 * 5), Seconds: 5},
		Counters: testbed.RNPFCounters{RxPackets: uint64(mbps * 1e6 / 8 * 5 / 1500), Injected: injected, Faults: faults, BackupPkts: backup, FaultDrops: drops},
	}
}

// sweep is three rounds of a small sweep in which backup keeps up and drop
// collapses with the rate.
func sweep() []Result {
	var rs []Result
	for round := 1; round <= 3; round++ {
		d := float64(round) // spread between rounds
		rs = append(rs, run(Point{Policy: "pin"}, round, 800+d, 0, 0, 0, 0))
		rs = append(rs, run(Point{"drop", "", 0, ""}, round, 790+d, 0, 0, 0, 0))
		rs = append(rs, run(Point{"drop", "minor", 10000, ""}, round, 100+d, 4000, 4000, 0, 4000))
		rs = append(rs, run(Point{"drop", "minor", 100000, ""}, round, 20+d, 40000, 40000, 0, 40000))
		rs = append(rs, run(Point{"backup", "", 0, ""}, round, 795+d, 0, 0, 0, 0))
		rs = append(rs, run(Point{"backup", "minor", 10000, ""}, round, 760+d, 4000, 4000, 9000, 0))
		rs = append(rs, run(Point{"backup", "minor", 100000, ""}, round, 500+d, 40000, 40000, 90000, 0))
	}
	failed := run(Point{"backup", "major", 10000, ""}, 1, 0, 0, 0, 0, 0)
	failed.Iperf, failed.Err = nil, errors.New("iperf3: connection refused")
	return append(rs, failed)
}

func TestSummarize(t *testing.T) {
	cells := Summarize(sweep())
	if len(cells) != 8 {
		t.Fatalf("%d cells, want 8: %+v", len(cells), cells)
	}
	c, ok := find(cells, "backup", "minor", 10000)
	if !ok || c.Mbps != 762 || c.Lo != 761 || c.Hi != 763 || c.Runs != 3 || c.Failed != 0 {
		t.Errorf("backup 1%% minor: %+v", c)
	}
	if want := 762.0 / 802; math.Abs(c.Rel-want) > 1e-9 {
		t.Errorf("backup 1%% minor relative to pin %g, want %g", c.Rel, want)
	}
	if want := 4000 * 1e6 / math.Floor(762e6/8*5/1500); math.Abs(c.MeasuredPPM-want) > 1e-6 || c.BackupPkts != 9000 {
		t.Errorf("counters: measured %g ppm, %g backup pkts", c.MeasuredPPM, c.BackupPkts)
	}
	// The receiver took 5 s for frames that rate 0 receives in
	// frames/fps₀; the rest is the 4000 rNPFs' cost.
	frames, fps0 := math.Floor(762e6/8*5/1500), math.Floor(797e6/8*5/1500)/5
	if want := (5 - frames/fps0) / 4000 * 1e6; math.Abs(c.CostPerRNPF-want) > 1e-6 {
		t.Errorf("backup 1%% minor: %g µs per rNPF, want %g", c.CostPerRNPF, want)
	}
	for _, p := range []Point{{Policy: "pin"}, {"backup", "", 0, ""}} {
		if z, _ := find(cells, p.Policy, p.Fault, p.PPM); !math.IsNaN(z.CostPerRNPF) {
			t.Errorf("%s has a cost per rNPF (%g) without rNPFs", p, z.CostPerRNPF)
		}
	}
	// Rate 0 is found whatever the fault kind asked for.
	if z, ok := find(cells, "drop", "major", 0); !ok || z.Mbps != 792 {
		t.Errorf("drop at rate 0: %+v, %v", z, ok)
	}
	if f, ok := find(cells, "backup", "major", 10000); ok || f.Done() {
		t.Errorf("a cell whose only round failed counts as measured: %+v", f)
	}
}

func TestGoals(t *testing.T) {
	goals := Goals(Summarize(sweep()))
	byText := map[string]Goal{}
	for _, g := range goals {
		byText[g.Text] = g
	}
	for text, want := range map[string]struct {
		ratio    float64
		met      bool
		measured bool
	}{
		"1% minor: backup / pin":   {762.0 / 802, true, true},
		"1% minor: backup / drop":  {762.0 / 102, true, true},
		"10% minor: backup / drop": {502.0 / 22, true, true},
		"1% major: backup / drop":  {math.NaN(), false, false},
	} {
		g, ok := byText[text]
		if !ok {
			t.Errorf("no goal %q in %v", text, goals)
			continue
		}
		if g.Measured != want.measured || g.Met() != want.met || (want.measured && math.Abs(g.Ratio-want.ratio) > 1e-9) {
			t.Errorf("%s: %+v (met %v), want ratio %g met %v measured %v", text, g, g.Met(), want.ratio, want.met, want.measured)
		}
	}
	// A backup ring that falls behind pin misses the goal.
	rs := sweep()
	for i := range rs {
		if rs[i].Point == (Point{"backup", "minor", 10000, ""}) {
			rs[i].Iperf.Mbps = 600
		}
	}
	for _, g := range Goals(Summarize(rs)) {
		if g.Text == "1% minor: backup / pin" && g.Met() {
			t.Errorf("backup at 0.75x pin met the 0.9x goal: %+v", g)
		}
	}
	if txt := GoalsText(Goals(Summarize(rs))); !strings.Contains(txt, "MISSED") || !strings.Contains(txt, "not measured") {
		t.Errorf("goals text:\n%s", txt)
	}
}

func TestOutputs(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	results := sweep()
	table := Table(c, results)
	for _, want := range []string{"backup", "minor", "0.01", "(761-763)", "0.95", "MET", "round 1, backup major 0.01 failed: iperf3: connection refused"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	dir := t.TempDir()
	files, err := WriteOutputs(dir, c, results)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 {
		t.Fatalf("files %v", files)
	}
	runs, err := os.ReadFile(filepath.Join(dir, "rnpf-rate-runs.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(runs), "\n"); n != len(results)+1 {
		t.Errorf("rnpf-rate-runs.csv has %d lines, want %d", n, len(results)+1)
	}
	f, err := os.Open(filepath.Join(dir, "rnpf-rate.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 400 {
		t.Errorf("figure is %v", b)
	}
}
