package conformance

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
)

// The outputs of a run: the figure has its SVG and the palette's colours
// only and no bar reaches the top of its axis; the CSV has every test,
// the Markdown the interesting ones with their cells kept in one cell;
// the table names the goals and the tests behind them.
func TestOutputs(t *testing.T) {
	npfnicRun := DeviceRun{Kind: npfnic, Dev: "npfnic0", GID: 1, Suite: Parse(readTestdata(t, "run_tests-v-npfnic.txt"))}
	rxeRun := run(rxe, ok("tests.test_atomic.AtomicTest.test_atomic_cmp_and_swap"),
		skip("tests.test_addr.AHTest.test_create_ah", "Create AH is not supported"),
		ok("tests.test_cq.CQTest.test_resize_cq"), skip("tests.test_odp.OdpTestCase.test_odp_rc_traffic", "a | pipe"),
		failed("tests.test_rdmacm.CMTestCase.test_rdmacm_sync_traffic", "AssertionError: x"))
	rxeRun.Err = errors.New("the suite's report: 5 tests, unittest ran 6\nmore")
	c := Config{Env: runner.Env{LogDir: t.TempDir()}, Patterns: []string{"tests.test_"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	runs := []DeviceRun{npfnicRun, rxeRun}
	dir := t.TempDir()
	files, err := WriteOutputs(dir, c, runs)
	if err != nil {
		t.Fatal(err)
	}
	n, err := report.CheckFigures(files)
	if err != nil {
		t.Error(err)
	}
	if n != 1 {
		t.Errorf("%d figures in %v", n, files)
	}
	m := NewMatrix(runs)
	cs := charts(m)
	if len(cs) != 2 {
		t.Fatalf("%d charts", len(cs))
	}
	for _, ch := range cs {
		if err := report.CheckBars(ch.(report.BarChart)); err != nil {
			t.Error(err)
		}
	}
	// Per module: modules where a test ran, each device's passes then its failures.
	mods := cs[1].(report.BarChart)
	if mods.Categories[0] != "atomic" || mods.Series[0].Name != "npfnic ok" || mods.Series[1].Name != "npfnic fail/error" || mods.Series[3].Name != "rxe fail/error" {
		t.Errorf("per module: %v, %v", mods.Categories, mods.Series)
	}
	for _, cat := range mods.Categories {
		if strings.HasPrefix(cat, "mlx5") || cat == "addr" {
			t.Errorf("module %s, where nothing ran, has bars", cat)
		}
	}

	csv, err := os.ReadFile(filepath.Join(dir, "conformance.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(csv), "\n"); lines != len(m.Rows)+1 || len(m.Rows) != 171 {
		t.Errorf("conformance.csv has %d lines for %d rows", lines, len(m.Rows))
	}
	if !strings.HasPrefix(string(csv), "test,module,npfnic_status,npfnic_detail,rxe_status,rxe_detail\n") {
		t.Errorf("conformance.csv starts %.80q", csv)
	}
	md, err := os.ReadFile(filepath.Join(dir, "conformance.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| error | 8 | 0 |",
		"| test_cq.CQTest.test_resize_cq | skip: Create QP type 4 is not supported | ok |",
		`| test_odp.OdpTestCase.test_odp_rc_traffic | ok | skip: a \| pipe |`,
		"- goal npfnic: 0 failures and 0 errors: MISSED",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("conformance.md lacks %q", want)
		}
	}
	// Rows that skip on both for one reason stay in the CSV only.
	if strings.Contains(string(md), "test_create_ah |") {
		t.Error("conformance.md lists a test both devices skip for the same reason")
	}
	for _, l := range strings.Split(string(md), "\n") {
		if strings.HasPrefix(l, "| ") && strings.Count(strings.ReplaceAll(l, `\|`, ""), "|") != 4 {
			t.Errorf("conformance.md row with a cell too many: %q", l)
		}
	}
	table := Table(c, runs)
	for _, want := range []string{
		"goal npfnic: 0 failures and 0 errors: MISSED (0 fail, 8 error, 0 unexpected success of 171)",
		"goal every test that passes on rxe passes on npfnic: MISSED (1 of the 2 that pass on rxe pass on npfnic)",
		"npfnic's failures and errors (8):\n  tests.test_qpex.QpExTestCase.test_qp_ex_rc_atomic_write: error: pyverbs.pyverbs_error.PyverbsRDMAError: Completion status is local QP operation error",
		"npfnic's skips that rxe does not take (1):\n  tests.test_cq.CQTest.test_resize_cq: \"Create QP type 4 is not supported\" (rxe: ok)",
		"runs that failed (1):\n  rxe: the suite's report: 5 tests, unittest ran 6\n",
		"the tests matching -k tests.test_",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	o := Report(c, runs)
	if o == nil || o.Failed == nil || !strings.Contains(o.Failed.Error(), "1 of 2") {
		t.Errorf("Report: %+v", o)
	}
	if Report(c, nil) != nil {
		t.Error("a run of nothing reports something")
	}
}
