package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/npfnic/npfnic/internal/fuzzseed"
)

func init() { fuzzseed.KeepCrashOutput() }

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// find is the result of id, or a zero Result.
func find(s Suite, id string) Result {
	for _, r := range s.Results {
		if r.ID == id {
			return r
		}
	}
	return Result{}
}

// TestParseRunTestsVerbose: the report of `run_tests.py -v` as the suite
// printed it on npfnic (trimmed of the mlx5 and EFA modules): what the
// tests printed first, tests with a docstring line between their id and
// their status, skip reasons with quotes and parentheses, and the
// tracebacks of the errors at the end.
func TestParseRunTestsVerbose(t *testing.T) {
	s := Parse(readTestdata(t, "run_tests-v-npfnic.txt"))
	if err := s.Complete(); err != nil {
		t.Fatal(err)
	}
	if s.Ran != 171 || s.Tests() != 171 || s.Announced != -1 || s.Seconds != 118.69 {
		t.Errorf("ran %d, %d tests, announced %d, %v s: want 171, 171, -1, 118.69 s", s.Ran, s.Tests(), s.Announced, s.Seconds)
	}
	n := map[Status]int{}
	for _, r := range s.Results {
		n[r.Status]++
	}
	if want := map[Status]int{StatusOK: 53, StatusSkip: 110, StatusError: 8}; !reflect.DeepEqual(n, want) {
		t.Errorf("statuses %v, want %v", n, want)
	}
	for _, want := range []Result{
		// A docstring's line before the status.
		{"tests.test_addr.AHTest.test_create_ah_roce", StatusSkip, "Create AH is not supported"},
		{"tests.test_cq.CQAPITest.test_create_cq_bad_flow", StatusOK, ""},
		// No docstring.
		{"tests.test_atomic.AtomicTest.test_atomic_cmp_and_swap", StatusOK, ""},
		{"tests.test_cq_events.CqEventsTestCase.test_cq_events_ud", StatusSkip, "Create QP type 4 is not supported"},
		// A reason with parentheses, colons and a comma.
		{"tests.test_mr.MRTest.test_mr_rereg_access", StatusSkip, "Rereg MR is not supported (Failed to rereg MR: IBV_REREG_MR_ERR_CMD. Errno: 95, Operation not supported)"},
		{"tests.test_mr.DmaBufMRTest.test_dmabuf_lkey", StatusSkip, "Allocating dmabuf is not supported by /dev/dri/renderD128"},
		// Errors take their traceback's last exception line.
		{"tests.test_qpex.QpExTestCase.test_qp_ex_rc_atomic_write", StatusError,
			"pyverbs.pyverbs_error.PyverbsRDMAError: Completion status is local QP operation error"},
		{"tests.test_rdmacm.CMTestCase.test_rdmacm_sync_traffic", StatusError, "Exception: Exception in active/passive side occurred"},
	} {
		if got := find(s, want.ID); got != want {
			t.Errorf("%s: got %+v, want %+v", want.ID, got, want)
		}
	}
	for _, r := range s.Results {
		if !strings.HasPrefix(r.ID, "tests.test_") || strings.Count(r.ID, ".") != 3 {
			t.Errorf("id %q: want tests.MODULE.CLASS.METHOD", r.ID)
		}
	}
}

// TestParseRunSuite: runsuite.py's report of a synthetic suite with every
// status: a skip whose reason has both quotes and a newline, an expected
// failure and an unexpected success, chained exceptions, a class's skip
// and a module's failed setup in place of their tests.
func TestParseRunSuite(t *testing.T) {
	s := Parse(readTestdata(t, "runsuite-synthetic.txt"))
	if err := s.Complete(); err != nil {
		t.Fatal(err)
	}
	want := []Result{
		{"tests.test_a.ATest.test_dev", StatusOK, ""},
		{"tests.test_a.ATest.test_error", StatusError, "RuntimeError: outer"},
		{"tests.test_a.ATest.test_fail", StatusFail, "AssertionError: 1 != 2 : one is not two"},
		{"tests.test_a.ATest.test_fork", StatusOK, ""},
		{"tests.test_a.ATest.test_ok", StatusOK, ""},
		{"tests.test_a.ATest.test_skip", StatusSkip, `It's "quoted" over two lines`},
		{"tests.test_a.ATest.test_xfail", StatusXFail, ""},
		{"tests.test_a.ATest.test_xpass", StatusXPass, ""},
		{"tests.test_a.BTest.setUpClass", StatusSkip, "not this class"},
		{"tests.test_b.setUpModule", StatusError, "RuntimeError: the module's setup broke"},
	}
	if !reflect.DeepEqual(s.Results, want) {
		t.Errorf("got\n%+v\nwant\n%+v", s.Results, want)
	}
	if s.Announced != 10 || s.Ran != 8 || s.Tests() != 8 {
		t.Errorf("announced %d, ran %d, %d tests: want 10, 8, 8", s.Announced, s.Ran, s.Tests())
	}
}

// TestRunSuiteScript runs runsuite.py with this host's python3 on the
// synthetic suite of testdata/fakesuite (its args_parser and __init__
// stand in for rdma-core's): the report is the one kept in testdata, and
// a forked child that returned into unittest wrote nothing to it.
func TestRunSuiteScript(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this host")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "runsuite.py")
	if err := os.WriteFile(script, runSuitePy, 0o644); err != nil {
		t.Fatal(err)
	}
	suite, err := filepath.Abs(filepath.Join("testdata", "fakesuite"))
	if err != nil {
		t.Fatal(err)
	}
	rep := filepath.Join(dir, "report.txt")
	cmd := exec.Command(py, append([]string{"-B", script, "--tests-dir", suite, "--report", rep}, SuiteArgs("fake0", 3, nil)...)...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("runsuite.py: %v (want exit 1: the suite has failures)\n%s", err, out)
	}
	b, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	got, want := Parse(string(b)), Parse(readTestdata(t, "runsuite-synthetic.txt"))
	got.Seconds, want.Seconds = 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the report of runsuite.py now:\n%s\nparses as\n%+v\nwant\n%+v", b, got, want)
	}
	// -k picks tests as run_tests.py's unittest does.
	cmd = exec.Command(py, append([]string{"-B", script, "--tests-dir", suite, "--report", rep}, SuiteArgs("fake0", 3, []string{"test_ok", "*.ATest.test_x*"})...)...)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("runsuite.py -k: %v (want exit 1: an unexpected success)\n%s", err, out)
	}
	b, err = os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range Parse(string(b)).Results {
		ids = append(ids, r.ID)
	}
	if want := []string{"tests.test_a.ATest.test_ok", "tests.test_a.ATest.test_xfail", "tests.test_a.ATest.test_xpass"}; !slices.Equal(ids, want) {
		t.Errorf("-k test_ok -k '*.ATest.test_x*' ran %v, want %v\n%s", ids, want, b)
	}
}

// TestParseCases: the report's shapes one at a time.
func TestParseCases(t *testing.T) {
	for _, tc := range []struct {
		name     string
		report   string
		want     []Result
		ran      int
		complete bool
	}{
		{"empty", "", nil, -1, false},
		{"noise only", "is_fork_initialized() = 2\nsomething (odd) happened\nok\n", nil, -1, false},
		{
			"a run killed in its second test",
			"conformance: 3 tests\ntest_a (tests.test_x.C.test_a) ... ok\ntest_b (tests.test_x.C.test_b) ... ",
			[]Result{{"tests.test_x.C.test_a", StatusOK, ""}, {"tests.test_x.C.test_b", StatusError, unfinished}},
			-1, false,
		},
		{
			"the status after what the test printed on the stream",
			"test_a (tests.test_x.C.test_a) ... Player passive got: x\nstill printing ... \nok\n\n" +
				"----------------------------------------------------------------------\nRan 1 test in 0.5s\n\nOK\n",
			[]Result{{"tests.test_x.C.test_a", StatusOK, ""}}, 1, true,
		},
		{
			"a docstring with ' ... ' in it",
			"test_a (tests.test_x.C.test_a)\nWaits ... then checks ... ok\n",
			[]Result{{"tests.test_x.C.test_a", StatusOK, ""}}, -1, false,
		},
		{
			"Python before 3.11 names the class only",
			"test_a (tests.test_x.C) ... skipped 'no'\nsetUpClass (tests.test_x.D) ... ERROR\n",
			[]Result{{"tests.test_x.C.test_a", StatusSkip, "no"}, {"tests.test_x.D.setUpClass", StatusError, ""}}, -1, false,
		},
		{
			"reprs: double quotes, escapes, non-ASCII",
			`test_a (t.m.C.test_a) ... skipped "it's"` + "\n" +
				`test_b (t.m.C.test_b) ... skipped 'tab\there \\ \x41\u00e9\U0001F600 caf` + "\u00e9'\n" +
				`test_c (t.m.C.test_c) ... skipped 'bad \xZZ \q'` + "\n",
			[]Result{{"t.m.C.test_a", StatusSkip, "it's"}, {"t.m.C.test_b", StatusSkip, "tab here \\ A\u00e9\U0001F600 caf\u00e9"},
				{"t.m.C.test_c", StatusSkip, `bad \xZZ \q`}}, -1, false,
		},
		{
			"a quote the repr would have escaped is not a status",
			"test_a (t.m.C.test_a) ... skipped 'it's'\n",
			[]Result{{"t.m.C.test_a", StatusError, unfinished}}, -1, false,
		},
		{
			"a traceback for a test the report lost",
			"\n======================================================================\nFAIL: test_z (tests.test_x.C.test_z)\nIts docstring\n" +
				"----------------------------------------------------------------------\nTraceback (most recent call last):\n" +
				"  File \"x.py\", line 1, in test_z\n    self.fail('x')\n    ^^^^^^^^^^^^^^\nAssertionError: x\n\n" +
				"----------------------------------------------------------------------\nRan 1 test in 1.000s\n\nFAILED (failures=1)\n",
			[]Result{{"tests.test_x.C.test_z", StatusFail, "AssertionError: x"}}, 1, true,
		},
		{
			"a traceback without frames keeps its last line",
			"test_a (t.m.C.test_a) ... ERROR\n\n" + separator1 + "\nERROR: test_a (t.m.C.test_a)\n" + separator2 + "\nsomething\n  broke badly  \n\n" +
				separator2 + "\nRan 1 test in 0.1s\n",
			[]Result{{"t.m.C.test_a", StatusError, "broke badly"}}, 1, true,
		},
		{
			"a count that differs from unittest's",
			"test_a (t.m.C.test_a) ... ok\nRan 2 tests in 0.1s\n",
			[]Result{{"t.m.C.test_a", StatusOK, ""}}, 2, false,
		},
		{
			"CRLF line ends",
			"test_a (t.m.C.test_a) ... ok\r\nRan 1 test in 0.1s\r\n",
			[]Result{{"t.m.C.test_a", StatusOK, ""}}, 1, true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Parse(tc.report)
			if !reflect.DeepEqual(s.Results, tc.want) || s.Ran != tc.ran || (s.Complete() == nil) != tc.complete {
				t.Errorf("got %+v, ran %d, complete: %v\nwant %+v, ran %d, complete %v", s.Results, s.Ran, s.Complete(), tc.want, tc.ran, tc.complete)
			}
		})
	}
}

func TestClipAndModule(t *testing.T) {
	long := strings.Repeat("é", maxDetail)
	if c := clip(long); len(c) > maxDetail || !utf8.ValidString(c) || !strings.HasSuffix(c, "...") {
		t.Errorf("clip of %d bytes: %d bytes, valid %v", len(long), len(c), utf8.ValidString(c))
	}
	if c := clip(" a\n  b\t\xff "); c != "a b \uFFFD" {
		t.Errorf("clip: %q", c)
	}
	for id, want := range map[string]string{
		"tests.test_odp.OdpTestCase.test_odp_rc_traffic": "test_odp",
		"tests.test_b.setUpModule":                       "test_b",
		"other.Class.method":                             "other",
	} {
		if got := Module(id); got != want {
			t.Errorf("Module(%q) = %q, want %q", id, got, want)
		}
	}
}

// idRE is what an id the parser returns looks like.
var idRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// FuzzParse: the report comes from the guest. Whatever it holds, Parse
// does not panic and returns ids of the right shape, known statuses, and
// details of one line within bounds.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"run_tests-v-npfnic.txt", "runsuite-synthetic.txt"} {
		f.Add(readTestdata(f, name))
	}
	f.Add("test_a (t.m.C.test_a) ... skipped 'a\\U0001F600\\x41'\n" + separator1 + "\nERROR: test_a (t.m.C.test_a)\n" + separator2 + "\n  File \"x\"\nE: x\n")
	f.Fuzz(func(t *testing.T, report string) {
		s := Parse(report)
		if s.Ran < -1 || s.Announced < -1 {
			t.Fatalf("ran %d, announced %d", s.Ran, s.Announced)
		}
		seen := map[string]bool{}
		for _, r := range s.Results {
			if !idRE.MatchString(r.ID) || seen[r.ID] {
				t.Fatalf("id %q (seen before: %v)", r.ID, seen[r.ID])
			}
			seen[r.ID] = true
			if !slices.Contains(Statuses, r.Status) {
				t.Fatalf("%s: status %q", r.ID, r.Status)
			}
			if len(r.Detail) > maxDetail || strings.ContainsAny(r.Detail, "\n\r") || !utf8.ValidString(r.Detail) {
				t.Fatalf("%s: detail %q", r.ID, r.Detail)
			}
		}
	})
}
