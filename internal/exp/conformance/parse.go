package conformance

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Status is what unittest made of one test.
type Status string

// The statuses, as the matrix names them.
const (
	StatusOK    Status = "ok"
	StatusSkip  Status = "skip"
	StatusFail  Status = "fail"
	StatusError Status = "error"
	StatusXFail Status = "expected failure"
	StatusXPass Status = "unexpected success"
)

// Statuses are every status, in the order tables list them.
var Statuses = []Status{StatusOK, StatusSkip, StatusFail, StatusError, StatusXFail, StatusXPass}

// Result is one test of a run.
type Result struct {
	// ID is the test's unittest id, tests.MODULE.CLASS.METHOD; a class's
	// or module's fixture that failed or skipped is reported on its own
	// (tests.test_x.Class.setUpClass, tests.test_x.setUpModule), in
	// place of the tests it held.
	ID     string
	Status Status
	// Detail is a skip's reason, or a failure's or error's exception as
	// its traceback ends ("PyverbsRDMAError: Completion status is ..."),
	// on one line; "" for the other statuses.
	Detail string
}

// Suite is a run of the suite as its verbose report tells it.
type Suite struct {
	Results []Result
	// Announced is how many tests the runner said it would run (its first
	// line, "conformance: N tests"); -1 if it did not say.
	Announced int
	// Ran is unittest's "Ran N tests" and Seconds the time it gives; Ran
	// is -1 when the report has no summary: the run did not end.
	Ran     int
	Seconds float64
}

// unfinished is the detail of a test the report started and never ended.
const unfinished = "unfinished: the suite stopped during this test"

// maxDetail bounds a detail (a skip reason is the guest's to choose).
const maxDetail = 400

// The report's lines (Python's unittest.TextTestResult at verbosity 2).
var (
	// A test's description: "name (id)", its status after " ... ", on
	// the same line or a later one (after its docstring's first line,
	// or after what the test printed on the same stream).
	descLine = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*) \(([A-Za-z_][A-Za-z0-9_.]*)\)(.*)$`)
	// The header of a failure's or error's traceback, after the
	// separator; and the summary.
	errHeader = regexp.MustCompile(`^(ERROR|FAIL|UNEXPECTED SUCCESS): (.*)$`)
	ranLine   = regexp.MustCompile(`^Ran (\d+) tests? in ([0-9.]+)s$`)
	announced = regexp.MustCompile(`^conformance: (\d+) tests$`)
)

const (
	separator1 = "======================================================================"
	separator2 = "----------------------------------------------------------------------"
)

// Parse reads a verbose unittest report: the one runsuite.py writes, or
// what `run_tests.py -v` prints on stderr (a docstring's first line may
// follow a test's description there, and lines the tests print may be
// mixed in). Lines it does not understand are skipped; a test started
// and never ended is an error (unfinished).
func Parse(report string) Suite {
	p := parser{s: Suite{Announced: -1, Ran: -1}, index: map[string]int{}, pending: -1}
	for _, line := range strings.Split(report, "\n") {
		p.line(strings.TrimSuffix(line, "\r"))
	}
	p.endBlock()
	p.finishPending()
	return p.s
}

type parser struct {
	s       Suite
	index   map[string]int // id -> Results index
	pending int            // a test started, its status still to come; -1: none
	// The traceback section: after the first separator1.
	errors bool
	// The block of one failure's traceback: its test ("": none), status,
	// whether its "-----" came, and its lines.
	block       string
	blockStatus Status
	inBlock     bool
	lines       []string
}

func (p *parser) line(l string) {
	if m := ranLine.FindStringSubmatch(l); m != nil {
		p.endBlock()
		p.finishPending()
		p.s.Ran, _ = strconv.Atoi(m[1])
		p.s.Seconds, _ = strconv.ParseFloat(m[2], 64)
		return
	}
	if l == separator1 {
		p.finishPending()
		p.endBlock()
		p.errors = true
		return
	}
	if p.errors {
		p.errorLine(l)
		return
	}
	if m := announced.FindStringSubmatch(l); m != nil {
		p.s.Announced, _ = strconv.Atoi(m[1])
		return
	}
	if m := descLine.FindStringSubmatch(l); m != nil && (m[3] == "" || strings.HasPrefix(m[3], " ... ")) {
		p.finishPending()
		i := p.result(testID(m[1], m[2]))
		if st, detail, ok := parseStatus(strings.TrimPrefix(m[3], " ... ")); ok {
			p.set(i, st, detail)
			return
		}
		// The status comes later: after the docstring's first line, or
		// after what the test printed on the same stream.
		p.pending = i
		return
	}
	if p.pending < 0 {
		return
	}
	// A pending test's status: alone on its line, or after its
	// docstring's first line and " ... ".
	if st, detail, ok := parseStatus(l); ok {
		p.set(p.pending, st, detail)
		p.pending = -1
		return
	}
	for from := 0; ; {
		i := strings.Index(l[from:], " ... ")
		if i < 0 {
			break
		}
		from += i + len(" ... ")
		if st, detail, ok := parseStatus(l[from:]); ok {
			p.set(p.pending, st, detail)
			p.pending = -1
			return
		}
	}
}

// errorLine reads the traceback section: "ERROR: name (id)" (perhaps a
// docstring line), "-----", the traceback, up to the next separator.
func (p *parser) errorLine(l string) {
	if m := errHeader.FindStringSubmatch(l); m != nil && !p.inBlock {
		p.endBlock()
		d := descLine.FindStringSubmatch(m[2])
		if d == nil || m[1] == "UNEXPECTED SUCCESS" {
			return
		}
		p.block = testID(d[1], d[2])
		p.blockStatus = map[string]Status{"ERROR": StatusError, "FAIL": StatusFail}[m[1]]
		return
	}
	if l == separator2 {
		if p.inBlock {
			p.endBlock()
		} else if p.block != "" {
			p.inBlock = true
		}
		return
	}
	if p.inBlock {
		p.lines = append(p.lines, l)
	}
}

// endBlock gives the traceback just read to its test.
func (p *parser) endBlock() {
	if p.block != "" && p.inBlock {
		r := &p.s.Results[p.result(p.block)]
		if r.Status == "" || r.Status == StatusError && r.Detail == unfinished {
			r.Status = p.blockStatus
		}
		if r.Status == p.blockStatus {
			r.Detail = clip(exceptionLine(p.lines))
		}
	}
	p.block, p.inBlock, p.lines = "", false, nil
}

// finishPending ends a test whose status never came.
func (p *parser) finishPending() {
	if p.pending >= 0 && p.s.Results[p.pending].Status == "" {
		p.set(p.pending, StatusError, unfinished)
	}
	p.pending = -1
}

// result finds or adds the test id.
func (p *parser) result(id string) int {
	if i, ok := p.index[id]; ok {
		return i
	}
	p.index[id] = len(p.s.Results)
	p.s.Results = append(p.s.Results, Result{ID: id})
	return len(p.s.Results) - 1
}

func (p *parser) set(i int, st Status, detail string) {
	p.s.Results[i].Status, p.s.Results[i].Detail = st, clip(detail)
}

// testID is the id of the test a description names: "name (id)" since
// Python 3.11, "name (module.Class)" before it, and a fixture's
// "setUpClass (module.Class)".
func testID(name, paren string) string {
	if paren == name || strings.HasSuffix(paren, "."+name) {
		return paren
	}
	return paren + "." + name
}

// parseStatus reads a status as TextTestResult writes it.
func parseStatus(s string) (Status, string, bool) {
	switch s {
	case "ok":
		return StatusOK, "", true
	case "FAIL":
		return StatusFail, "", true
	case "ERROR":
		return StatusError, "", true
	case "expected failure":
		return StatusXFail, "", true
	case "unexpected success":
		return StatusXPass, "", true
	}
	if r, ok := strings.CutPrefix(s, "skipped "); ok {
		if reason, ok := unrepr(r); ok {
			return StatusSkip, reason, true
		}
	}
	return "", "", false
}

// unrepr reads a Python str's repr: quoted with ' or ", with backslash
// escapes.
func unrepr(s string) (string, bool) {
	if len(s) < 2 || s[0] != s[len(s)-1] || s[0] != '\'' && s[0] != '"' {
		return "", false
	}
	q, body := s[0], s[1:len(s)-1]
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c == q {
			return "", false // a quote the repr would have escaped
		}
		if c != '\\' || i+1 == len(body) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := body[i]; e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n < len(body) {
				if v, err := strconv.ParseUint(body[i+1:i+1+n], 16, 32); err == nil && utf8.ValidRune(rune(v)) {
					b.WriteRune(rune(v))
					i += n
					continue
				}
			}
			b.WriteByte('\\')
			b.WriteByte(e)
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), true
}

// exceptionLine is what a traceback ends with: the first line of the
// exception after its last frame ("Type: message"), else its last
// non-empty line.
func exceptionLine(lines []string) string {
	last := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "  File ") {
			last = i
		}
	}
	if last >= 0 {
		for _, l := range lines[last+1:] {
			if l != "" && !strings.HasPrefix(l, " ") {
				return l
			}
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.TrimSpace(lines[i]) != "" {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}

// clip makes a detail one line of at most maxDetail bytes of valid UTF-8.
func clip(s string) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
	if len(s) <= maxDetail {
		return s
	}
	cut := maxDetail - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// Module is the suite's module a test id belongs to: "test_odp" for
// tests.test_odp.OdpTestCase.test_odp_rc_traffic.
func Module(id string) string {
	m, _, _ := strings.Cut(strings.TrimPrefix(id, "tests."), ".")
	return m
}

// Tests counts the results that are tests, not a class's or module's
// fixture: what unittest's "Ran N tests" counts.
func (s Suite) Tests() int {
	n := 0
	for _, r := range s.Results {
		if !isFixture(r.ID) {
			n++
		}
	}
	return n
}

func isFixture(id string) bool {
	i := strings.LastIndexByte(id, '.')
	switch id[i+1:] {
	case "setUpClass", "tearDownClass", "setUpModule", "tearDownModule":
		return true
	}
	return false
}

// Complete says why the report is not the whole of a run that ended:
// without its summary the run stopped early (a timeout, a crash), and a
// count of tests that differs from unittest's lost some in between.
func (s Suite) Complete() error {
	switch {
	case s.Ran < 0:
		return errIncomplete("the report has no summary (Ran N tests): the suite did not finish")
	case s.Tests() != s.Ran:
		return errIncomplete("the report names " + strconv.Itoa(s.Tests()) + " tests, unittest ran " + strconv.Itoa(s.Ran))
	}
	return nil
}

type errIncomplete string

func (e errIncomplete) Error() string { return string(e) }
