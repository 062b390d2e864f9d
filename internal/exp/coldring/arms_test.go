package coldring

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The fault_ahead=0 arms (Config.FaultAheadZero): seed 000's driver
// beside npfnic's default, in parts (a) and (b).

func TestDriverDefaultAheadMatchesTheDriver(t *testing.T) {
	src, err := os.ReadFile("../../../guestdrv/npfnic_npf.c")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`static unsigned int fault_ahead = (\d+);`).FindSubmatch(src)
	if m == nil {
		t.Fatal("guestdrv/npfnic_npf.c: no default fault_ahead found")
	}
	if n, _ := strconv.Atoi(string(m[1])); n != DriverDefaultAhead {
		t.Fatalf("the driver's default fault_ahead is %d, DriverDefaultAhead %d", n, DriverDefaultAhead)
	}
}

func TestValidateFaultAheadZero(t *testing.T) {
	for _, tc := range []struct {
		policies, zero []string
		ahead          []int
		want           string // "" valid
	}{
		{nil, []string{"drop"}, nil, ""},
		{nil, []string{"drop", "backup"}, nil, ""},
		{nil, []string{"backup"}, []int{1, 16}, ""},
		{nil, []string{"pin"}, nil, `arm "pin": want drop or backup`},
		{nil, []string{"off"}, nil, `arm "off": want drop or backup`},
		{nil, []string{"fast"}, nil, `arm "fast": want drop or backup`},
		{[]string{"pin", "backup"}, []string{"drop"}, nil, `arm "drop": the policy is not among those run (pin, backup)`},
		{nil, []string{"drop", "drop"}, nil, `"drop" listed twice`},
		{nil, []string{"backup"}, []int{0, 16}, "part (c)'s N=0"},
	} {
		c := Config{Env: runner.Env{Images: &images.Artifacts{}, LogDir: "x"}, Policies: tc.policies, FaultAheadZero: tc.zero, FaultAhead: tc.ahead}
		err := c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("policies %v, zero %v, ahead %v: Validate %v, want %q", tc.policies, tc.zero, tc.ahead, err, tc.want)
		}
	}
}

func jobNames(c Config) []string {
	c.setDefaults()
	var got []string
	for _, st := range c.jobs() {
		got = append(got, fmt.Sprintf("%d%s:%s@%d", st.Round, partLetter(st.Arm.part), Arm{st.Arm.policy, st.Arm.ahead}.Name(), st.Arm.ring))
	}
	return got
}

func TestJobsWithFaultAheadZeroArms(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		want []string
	}{{
		name: "none: the policies alone",
		c:    Config{Policies: []string{"pin", "drop"}, Sizes: []int{64}, Rounds: 2, StartupRounds: 1},
		want: []string{"1a:pin@64", "1a:drop@64", "1b:pin@64", "1b:drop@64", "2b:drop@64", "2b:pin@64"},
	}, {
		name: "drop: its fa=0 arm beside it in (a) and (b), rotated with the others",
		c:    Config{Policies: []string{"pin", "drop", "backup"}, FaultAheadZero: []string{"drop"}, Sizes: []int{64, 256}, Rounds: 2, StartupRounds: 1},
		want: []string{
			"1a:pin@64", "1a:drop@64", "1a:drop fa=0@64", "1a:backup@64",
			"1b:pin@64", "1b:drop@64", "1b:drop fa=0@64", "1b:backup@64",
			"1b:pin@256", "1b:drop@256", "1b:drop fa=0@256", "1b:backup@256",
			"2b:drop@256", "2b:drop fa=0@256", "2b:backup@256", "2b:pin@256",
			"2b:drop@64", "2b:drop fa=0@64", "2b:backup@64", "2b:pin@64",
		},
	}, {
		name: "drop and backup, with part (c) after the arms",
		c:    Config{Policies: []string{"pin", "drop", "backup"}, FaultAheadZero: []string{"backup", "drop"}, FaultAhead: []int{16}, Sizes: []int{64}, Rounds: 1, SkipStartup: true},
		want: []string{"1b:pin@64", "1b:drop@64", "1b:drop fa=0@64", "1b:backup@64", "1b:backup fa=0@64", "1c:backup fa=16@64"},
	}} {
		got := jobNames(tc.c)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, got, tc.want)
		}
	}
}

// zeroResults: 3 rounds of pin, drop (npfnic's default), drop fa=0 and
// backup, parts (a) and (b) at rings 64 and 256; drop fa=0 is seed 000's
// pathology (near zero for seconds, capped at 256).
func zeroResults() []Result {
	var rs []Result
	startup := map[Arm][]float64{
		{"pin", DefaultAhead}:    {2000, 4000, 4000, 4000},
		{"drop", DefaultAhead}:   {0, 3000, 4000, 4000},
		{"drop", 0}:              {0, 0, 10, 40},
		{"backup", DefaultAhead}: {1900, 4000, 4000, 4000},
	}
	secs := map[Arm]map[int]float64{
		{"pin", DefaultAhead}:    {64: 2, 256: 2},
		{"drop", DefaultAhead}:   {64: 2.4, 256: 2.6},
		{"drop", 0}:              {64: 16, 256: 20},
		{"backup", DefaultAhead}: {64: 2.1, 256: 2.1},
	}
	arms := []Arm{{"pin", DefaultAhead}, {"drop", DefaultAhead}, {"drop", 0}, {"backup", DefaultAhead}}
	for round := 1; round <= 3; round++ {
		for _, a := range arms {
			drops := uint64(1)
			if a.FaultAhead == 0 {
				drops = 60
			}
			bins := make([]float64, len(startup[a]))
			for i, v := range startup[a] {
				bins[i] = v * (1 + 0.1*float64(round-2)) // round 2 is the median
			}
			rs = append(rs, Result{Part: PartStartup, Policy: a.Policy, FaultAhead: a.FaultAhead, RingSize: 64, Round: round, Bins: bins,
				Ops: int64(bins[0] + bins[1] + bins[2] + bins[3]), Stats: map[string]uint64{"rx_fault_drops": drops}})
			for _, n := range []int{64, 256} {
				s := secs[a][n] * (1 + 0.05*float64(round-2))
				capped := a.FaultAhead == 0 && n == 256
				if capped {
					s = 20
				}
				rs = append(rs, Result{Part: PartSweep, Policy: a.Policy, FaultAhead: a.FaultAhead, RingSize: n, Round: round,
					Seconds: s, Capped: capped, Stats: map[string]uint64{"rx_faults": drops, "rx_fault_drops": drops}})
			}
		}
	}
	return rs
}

func TestSummariesKeyByArm(t *testing.T) {
	rs := zeroResults()
	st := Startup(rs)
	if len(st) != 4 {
		t.Fatalf("startup %+v: want 4 arms", st)
	}
	for i, want := range []string{"pin", "drop", "drop fa=0", "backup"} {
		if st[i].Arm().Name() != want || st[i].Rounds != 3 {
			t.Errorf("startup %d: %s with %d rounds, want %s with 3", i, st[i].Arm().Name(), st[i].Rounds, want)
		}
	}
	if z := st[2]; z.ZeroSeconds != 2 || z.TimeToHalf != -1 || z.FaultDrops != 60 {
		t.Errorf("drop fa=0: %+v", z)
	}
	if d := st[1]; d.TimeToHalf != 2 || d.FaultDrops != 1 {
		t.Errorf("drop: %+v", d)
	}
	cells := Sweep(rs)
	if len(cells) != 8 {
		t.Fatalf("cells %+v: want 4 arms at 2 rings", cells)
	}
	ratio := map[string]SweepRatio{}
	for _, r := range Ratios(cells) {
		ratio[fmt.Sprint(r.Arm().Name(), "@", r.RingSize)] = r
	}
	for _, tc := range []struct {
		key   string
		ratio float64
		lower bool
	}{{"drop@64", 1.2, false}, {"drop fa=0@64", 8, false}, {"drop fa=0@256", 10, true}, {"backup@256", 1.05, false}} {
		r, ok := ratio[tc.key]
		if !ok || r.Base != "pin" || fmt.Sprintf("%.3f", r.Ratio) != fmt.Sprintf("%.3f", tc.ratio) || r.LowerBound != tc.lower {
			t.Errorf("%s: %+v, want %.2fx of pin, lower bound %v", tc.key, r, tc.ratio, tc.lower)
		}
	}
}

func TestTableAndOutputsWithFaultAheadZero(t *testing.T) {
	rs := zeroResults()
	c := Config{Rounds: 3, Policies: []string{"pin", "drop", "backup"}, FaultAheadZero: []string{"drop"}, Sizes: []int{64, 256},
		Cap: 20 * time.Second, StartupTime: 4 * time.Second}
	txt := Table(c, rs)
	for _, want := range []string{
		`"fa=0" arms load it with fault_ahead=0, seed 000's driver`,
		"fault_ahead=64: the next 64 cold slots too",
		"drop fa=0 s", "drop fa=0/pin", ">=20", ">=10.0x", "8.00x", "1.20x",
		"drop pathological (>= 2x pin or capped): at none; not at 64 (1.20x), 256 (1.30x)",
		"drop fa=0 pathological (>= 2x pin or capped): yes at every ring size (64, 256)",
		"backup within 1.1x of pin: MET at every ring size (64, 256)",
	} {
		if !strings.Contains(txt, want) {
			t.Errorf("table lacks %q:\n%s", want, txt)
		}
	}
	// Part (a)'s rows and bins name the arm.
	if !regexp.MustCompile(`(?m)^ *drop fa=0 +\d+ `).MatchString(txt) || !regexp.MustCompile(`(?m)^ *drop fa=0 +0 +0 +10 +40$`).MatchString(txt) {
		t.Errorf("part (a) lacks the drop fa=0 rows:\n%s", txt)
	}
	dir := t.TempDir()
	if _, err := WriteOutputs(dir, c, rs); err != nil {
		t.Fatal(err)
	}
	read := func(name string) [][]string {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		recs, err := csv.NewReader(f).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	// Every CSV tells the arms apart by its fault_ahead column.
	for _, tc := range []struct {
		file         string
		rows         int
		zeroRows     int
		policyCol    int
		aheadCol     int
		aheadColName string
	}{
		{"cold-ring-startup.csv", 4 * 4, 4, 0, 1, "fault_ahead"},
		{"cold-ring-ops.csv", 8, 2, 0, 2, "fault_ahead"},
		{"cold-ring-runs.csv", 3 * 4 * 3, 3 * 3, 1, 3, "fault_ahead"},
	} {
		recs := read(tc.file)
		if recs[0][tc.aheadCol] != tc.aheadColName || len(recs)-1 != tc.rows {
			t.Errorf("%s: header %v, %d rows: want %s in column %d, %d rows", tc.file, recs[0], len(recs)-1, tc.aheadColName, tc.aheadCol, tc.rows)
			continue
		}
		zero := 0
		for _, r := range recs[1:] {
			switch r[tc.aheadCol] {
			case "0":
				zero++
				if r[tc.policyCol] != "drop" {
					t.Errorf("%s: %v: a fault_ahead=0 row of %s", tc.file, r, r[tc.policyCol])
				}
			case "":
			default:
				t.Errorf("%s: %v: fault_ahead %q", tc.file, r, r[tc.aheadCol])
			}
		}
		if zero != tc.zeroRows {
			t.Errorf("%s: %d fault_ahead=0 rows, want %d", tc.file, zero, tc.zeroRows)
		}
	}
	// The ratios of cold-ring-ops.csv are each arm's own.
	for _, r := range read("cold-ring-ops.csv")[1:] {
		if r[0] == "drop" && r[1] == "256" {
			want := map[string]string{"": "1.3", "0": "10"}[r[2]]
			if got := r[len(r)-3]; got != want {
				t.Errorf("cold-ring-ops.csv %v: ratio %s, want %s", r, got, want)
			}
		}
	}
}

// svgOf draws p as SVG, for its text.
func svgOf(t *testing.T, p *plot.Plot) string {
	t.Helper()
	c := vgsvg.New(8*vg.Inch, 4*vg.Inch)
	p.Draw(draw.New(c))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestPlotsKeyByArm(t *testing.T) {
	rs := zeroResults()
	c := Config{Rounds: 3, Policies: []string{"pin", "drop", "backup"}, FaultAheadZero: []string{"drop"}, Cap: 20 * time.Second}
	c.setDefaults()
	a, err := startupPlot(c, Startup(rs))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sweepPlot(c, Sweep(rs))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		svg   string
		wants []string
	}{
		{"(a)", svgOf(t, a), []string{"pin (buffers pre-mapped)<", "drop on rNPF, fault_ahead 64 (npfnic&#39;s default)<", "drop on rNPF, fault_ahead 0 (seed 000&#39;s driver)<", "backup ring<"}},
		{"(b)", svgOf(t, b), []string{"pin (buffers pre-mapped)<", "drop on rNPF, fault_ahead 64 (npfnic&#39;s default)<", "drop on rNPF, fault_ahead 0 (seed 000&#39;s driver)<", "drop fa=0: capped, did not finish<", "backup ring<"}},
	} {
		for _, w := range tc.wants {
			if !strings.Contains(tc.svg, w) {
				t.Errorf("%s: no legend entry %q", tc.name, w)
			}
		}
	}
}
