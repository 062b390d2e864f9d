package conformance

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed"
)

const (
	npfnic = testbed.RDMANPFNIC
	rxe    = testbed.RDMARxe
)

// run is a device's run of the given results.
func run(k testbed.RDMAKind, rs ...Result) DeviceRun {
	return DeviceRun{Kind: k, Dev: string(k) + "0", GID: 1, Suite: Suite{Results: rs, Announced: -1, Ran: len(rs)}, Took: time.Minute}
}

func ok(id string) Result              { return Result{id, StatusOK, ""} }
func skip(id, why string) Result       { return Result{id, StatusSkip, why} }
func errored(id, why string) Result    { return Result{id, StatusError, why} }
func failed(id, why string) Result     { return Result{id, StatusFail, why} }
func goalsOf(runs ...DeviceRun) []Goal { return Judge(NewMatrix(runs)) }

func TestMatrix(t *testing.T) {
	m := NewMatrix([]DeviceRun{
		run(npfnic, ok("tests.test_b.C.t2"), skip("tests.test_a.C.t1", "no AH"), errored("tests.test_c.C.t3", "E: x")),
		run(rxe, skip("tests.test_a.C.t1", "no AH"), ok("tests.test_b.C.t2"), skip("tests.test_d.C.t4", "no XRC")),
	})
	want := []Row{
		{"tests.test_a.C.t1", []Cell{{StatusSkip, "no AH"}, {StatusSkip, "no AH"}}},
		{"tests.test_b.C.t2", []Cell{{StatusOK, ""}, {StatusOK, ""}}},
		{"tests.test_c.C.t3", []Cell{{StatusError, "E: x"}, {}}},
		{"tests.test_d.C.t4", []Cell{{}, {StatusSkip, "no XRC"}}},
	}
	if !reflect.DeepEqual(m.Rows, want) || !reflect.DeepEqual(m.Devices, []testbed.RDMAKind{npfnic, rxe}) {
		t.Fatalf("matrix %+v", m)
	}
	if n := m.Counts(0); n[StatusOK] != 1 || n[StatusSkip] != 1 || n[StatusError] != 1 || m.Reported(0) != 3 || m.Reported(1) != 3 {
		t.Errorf("npfnic counts %v, reported %d and %d", n, m.Reported(0), m.Reported(1))
	}
	var interesting []string
	for _, r := range m.Rows {
		if r.Interesting() {
			interesting = append(interesting, r.ID)
		}
	}
	// Only t1 skips everywhere for one reason; t4 skips on rxe and never ran on npfnic.
	if want := []string{"tests.test_b.C.t2", "tests.test_c.C.t3", "tests.test_d.C.t4"}; !reflect.DeepEqual(interesting, want) {
		t.Errorf("interesting rows %v, want %v", interesting, want)
	}
	if got := (Row{Cells: []Cell{{StatusSkip, "a"}, {StatusSkip, "b"}}}).Interesting(); !got {
		t.Error("skips for different reasons are interesting")
	}
	if m.Column(rxe) != 1 || m.Column("mlx5") != -1 {
		t.Errorf("columns %d %d", m.Column(rxe), m.Column("mlx5"))
	}
	if cs := (Cell{}).String() + "|" + (Cell{StatusOK, ""}).String() + "|" + (Cell{StatusSkip, "x"}).String(); cs != "-|ok|skip: x" {
		t.Errorf("cells print as %q", cs)
	}
}

func TestJudge(t *testing.T) {
	const odp1, odp2 = "tests.test_odp.OdpTestCase.test_odp_rc_traffic", "tests.test_odp.OdpTestCase.test_odp_ud_traffic"
	for _, tc := range []struct {
		name  string
		runs  []DeviceRun
		want  [3]string // verdicts: clean, parity, odp
		tests [3]int    // how many tests each names
	}{
		{"all met", []DeviceRun{
			run(npfnic, ok("tests.test_a.C.t"), ok(odp1), ok(odp2), skip("tests.test_b.C.t", "no")),
			run(rxe, ok("tests.test_a.C.t"), skip(odp1, "no ODP"), skip(odp2, "no ODP"), skip("tests.test_b.C.t", "no")),
		}, [3]string{Met, Met, Met}, [3]int{}},
		{"an error, a test rxe passes, an ODP skip", []DeviceRun{
			run(npfnic, errored("tests.test_a.C.t", "E: x"), ok(odp1), skip(odp2, "no UD"), skip("tests.test_b.C.t", "no UD")),
			run(rxe, ok("tests.test_a.C.t"), skip(odp1, "no ODP"), skip(odp2, "no ODP"), ok("tests.test_b.C.t")),
		}, [3]string{Missed, Missed, Missed}, [3]int{1, 2, 1}},
		{"a failure and an unexpected success are failures", []DeviceRun{
			run(npfnic, failed("tests.test_a.C.t", "AssertionError"), Result{"tests.test_a.C.u", StatusXPass, ""}, Result{"tests.test_a.C.v", StatusXFail, ""}),
		}, [3]string{Missed, NotMeasured, NotMeasured}, [3]int{2, 0, 0}},
		{"rxe alone measures nothing of npfnic", []DeviceRun{run(rxe, ok(odp1))}, [3]string{NotMeasured, NotMeasured, NotMeasured}, [3]int{}},
		{"a device that reported nothing", []DeviceRun{
			{Kind: npfnic, Err: errors.New("boot failed")}, run(rxe, ok("tests.test_a.C.t")),
		}, [3]string{NotMeasured, NotMeasured, NotMeasured}, [3]int{}},
		{"a test npfnic never reported", []DeviceRun{
			run(npfnic, ok(odp1)), run(rxe, ok("tests.test_a.C.t")),
		}, [3]string{Met, Missed, Met}, [3]int{0, 1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := goalsOf(tc.runs...)
			for i, g := range gs {
				if g.Verdict != tc.want[i] || len(g.Tests) != tc.tests[i] {
					t.Errorf("%s: %s naming %q; want %s naming %d", g.Name, g.Verdict, g.Tests, tc.want[i], tc.tests[i])
				}
				if !strings.HasPrefix(g.String(), "goal "+g.Name+": "+g.Verdict) {
					t.Errorf("goal prints as %q", g)
				}
			}
		})
	}
	gs := goalsOf(
		run(npfnic, errored("tests.test_a.C.t", "E: x"), ok(odp1), skip(odp2, "no UD")),
		run(rxe, ok("tests.test_a.C.t"), ok(odp1), skip(odp2, "no ODP")))
	if want := "tests.test_a.C.t: error: E: x"; gs[0].Tests[0] != want || gs[1].Tests[0] != want {
		t.Errorf("tests named %q and %q, want %q", gs[0].Tests, gs[1].Tests, want)
	}
	if gs[1].Why != "1 of the 2 that pass on rxe pass on npfnic" || gs[2].Why != "1 of 2 ok" {
		t.Errorf("whys %q, %q", gs[1].Why, gs[2].Why)
	}
}

func TestOnlySkips(t *testing.T) {
	m := NewMatrix([]DeviceRun{
		run(npfnic, skip("tests.test_a.C.t", `no "AH"`), skip("tests.test_a.C.u", "no"), ok("tests.test_a.C.v"), skip("tests.test_a.C.w", "x")),
		run(rxe, ok("tests.test_a.C.t"), skip("tests.test_a.C.u", "other"), skip("tests.test_a.C.v", "no ODP")),
	})
	if got, want := OnlySkips(m, npfnic, rxe), []string{`tests.test_a.C.t: "no \"AH\"" (rxe: ok)`}; !reflect.DeepEqual(got, want) {
		t.Errorf("npfnic's own skips %q, want %q", got, want)
	}
	if got, want := OnlySkips(m, rxe, npfnic), []string{`tests.test_a.C.v: "no ODP" (npfnic: ok)`}; !reflect.DeepEqual(got, want) {
		t.Errorf("rxe's own skips %q, want %q", got, want)
	}
	if got := OnlySkips(NewMatrix([]DeviceRun{run(npfnic)}), npfnic, rxe); got != nil {
		t.Errorf("without rxe: %q", got)
	}
}

func TestConfig(t *testing.T) {
	ds, err := ParseDevices("rxe, npfnic")
	if err != nil || !reflect.DeepEqual(ds, []testbed.RDMAKind{rxe, npfnic}) {
		t.Errorf("ParseDevices: %v %v", ds, err)
	}
	for _, bad := range []string{"", "npfnic,npfnic", "mlx5", "npfnic,"} {
		if _, err := ParseDevices(bad); err == nil {
			t.Errorf("ParseDevices(%q) accepted", bad)
		}
	}
	c := Config{Env: runner.Env{LogDir: t.TempDir()}}
	if err := c.Validate(); err != nil || len(c.Devices) != 2 || c.SuiteTimeout != DefaultSuiteTimeout {
		t.Errorf("defaults: %v, %+v", err, c)
	}
	for _, bad := range []Config{
		{Env: runner.Env{LogDir: "x"}, Patterns: []string{" "}},
		{Env: runner.Env{LogDir: "x"}, Patterns: []string{"a\nb"}},
		{Env: runner.Env{LogDir: "x"}, SuiteTimeout: time.Second},
		{Env: runner.Env{LogDir: "x"}, Devices: []testbed.RDMAKind{rxe, rxe}},
		{},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
	if got, want := SuiteArgs("npfnic0", 1, []string{"tests.test_odp.", "*atomic*"}),
		[]string{"--dev", "npfnic0", "--port", "1", "--gid", "1", "-k", "tests.test_odp.", "-k", "*atomic*"}; !reflect.DeepEqual(got, want) {
		t.Errorf("SuiteArgs %q, want %q", got, want)
	}
	if got := progressLine(Suite{Announced: 9, Results: []Result{ok("a.b"), skip("a.c", "x")}}); got != "2 of 9 tests: 1 ok, 1 skip" {
		t.Errorf("progress %q", got)
	}
	if got := progressLine(Parse("conformance: 9 tests\ntest_b (a.b) ... ok\ntest_c (a.c) ... ")); got != "1 of 9 tests: 1 ok; running a.c.test_c" {
		t.Errorf("progress %q", got)
	}
}
