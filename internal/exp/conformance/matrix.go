package conformance

import (
	"fmt"
	"slices"
	"strings"

	"github.com/npfnic/npfnic/internal/testbed"
)

// Cell is one test on one device: its status ("" when the device did not
// report it) and detail.
type Cell struct {
	Status Status
	Detail string
}

func (c Cell) String() string {
	switch {
	case c.Status == "":
		return "-"
	case c.Detail == "":
		return string(c.Status)
	}
	return string(c.Status) + ": " + c.Detail
}

// Row is one test on every device of its matrix.
type Row struct {
	ID    string
	Cells []Cell // in Matrix.Devices order
}

// Matrix sets the devices' runs side by side: a row per test any of them
// reported, in id order.
type Matrix struct {
	Devices []testbed.RDMAKind
	Rows    []Row
}

// NewMatrix builds the matrix of runs.
func NewMatrix(runs []DeviceRun) Matrix {
	m := Matrix{}
	index := map[string]int{}
	for d, run := range runs {
		m.Devices = append(m.Devices, run.Kind)
		for _, r := range run.Suite.Results {
			i, ok := index[r.ID]
			if !ok {
				i = len(m.Rows)
				index[r.ID] = i
				m.Rows = append(m.Rows, Row{ID: r.ID, Cells: make([]Cell, len(runs))})
			}
			m.Rows[i].Cells[d] = Cell{r.Status, r.Detail}
		}
	}
	slices.SortFunc(m.Rows, func(a, b Row) int { return strings.Compare(a.ID, b.ID) })
	return m
}

// Column is the device's index in the matrix, -1 if it did not run.
func (m Matrix) Column(k testbed.RDMAKind) int { return slices.Index(m.Devices, k) }

// Counts are how many tests of the device ended in each status.
func (m Matrix) Counts(d int) map[Status]int {
	n := map[Status]int{}
	for _, r := range m.Rows {
		if st := r.Cells[d].Status; st != "" {
			n[st]++
		}
	}
	return n
}

// Reported is how many tests the device reported.
func (m Matrix) Reported(d int) int {
	n := 0
	for _, c := range m.Counts(d) {
		n += c
	}
	return n
}

// Interesting says whether a row tells anything apart from "nobody can
// run this": unless every device skipped it for the same reason.
func (r Row) Interesting() bool {
	for _, c := range r.Cells {
		if c != r.Cells[0] || c.Status != StatusSkip {
			return true
		}
	}
	return false
}

// failing says whether a status is a test that did not pass when it
// should have: unittest's wasSuccessful counts unexpected successes too.
func failing(st Status) bool {
	return st == StatusFail || st == StatusError || st == StatusXPass
}

// Verdicts.
const (
	Met         = "MET"
	Missed      = "MISSED"
	NotMeasured = "NOT MEASURED"
)

// Goal is one of the goals, judged on a matrix.
type Goal struct {
	Name    string
	Verdict string
	// Why counts what decided the verdict; Tests names the tests that
	// missed it, with their cells.
	Why   string
	Tests []string
}

func (g Goal) String() string {
	s := fmt.Sprintf("goal %s: %s", g.Name, g.Verdict)
	if g.Why != "" {
		s += " (" + g.Why + ")"
	}
	return s
}

// The test module of the on-demand-paging tests.
const odpModule = "test_odp"

// Judge judges issue 24's goals: no failure and no error on npfnic;
// every test that passes on rxe passes on npfnic; the ODP tests (module
// test_odp) pass, none skipped, on npfnic.
func Judge(m Matrix) []Goal {
	np, rxe := m.Column(testbed.RDMANPFNIC), m.Column(testbed.RDMARxe)
	clean := Goal{Name: "npfnic: 0 failures and 0 errors", Verdict: NotMeasured}
	parity := Goal{Name: "every test that passes on rxe passes on npfnic", Verdict: NotMeasured}
	odp := Goal{Name: "the ODP tests (" + odpModule + ") pass on npfnic, none skipped", Verdict: NotMeasured}
	if np >= 0 && m.Reported(np) > 0 {
		n := m.Counts(np)
		clean.Verdict = Met
		clean.Why = fmt.Sprintf("%d fail, %d error, %d unexpected success of %d", n[StatusFail], n[StatusError], n[StatusXPass], m.Reported(np))
		var odpOK, odpAll int
		for _, r := range m.Rows {
			c := r.Cells[np]
			if failing(c.Status) {
				clean.Verdict = Missed
				clean.Tests = append(clean.Tests, r.ID+": "+c.String())
			}
			if Module(r.ID) == odpModule && c.Status != "" {
				odpAll++
				if c.Status == StatusOK {
					odpOK++
				} else {
					odp.Tests = append(odp.Tests, r.ID+": "+c.String())
				}
			}
		}
		if odpAll > 0 {
			odp.Verdict = Met
			if odpOK < odpAll {
				odp.Verdict = Missed
			}
			odp.Why = fmt.Sprintf("%d of %d ok", odpOK, odpAll)
		}
	}
	if np >= 0 && rxe >= 0 && m.Reported(np) > 0 && m.Reported(rxe) > 0 {
		passed := 0
		for _, r := range m.Rows {
			if r.Cells[rxe].Status != StatusOK {
				continue
			}
			passed++
			if c := r.Cells[np]; c.Status != StatusOK {
				parity.Tests = append(parity.Tests, r.ID+": "+c.String())
			}
		}
		parity.Verdict = Met
		if len(parity.Tests) > 0 {
			parity.Verdict = Missed
		}
		parity.Why = fmt.Sprintf("%d of the %d that pass on rxe pass on npfnic", passed-len(parity.Tests), passed)
	}
	return []Goal{clean, parity, odp}
}

// OnlySkips are the tests one device skips and the other does not (it
// passes, fails or errs), each with the skip's reason and the other's
// cell: what the device lacks that the other has.
func OnlySkips(m Matrix, skips, other testbed.RDMAKind) []string {
	a, b := m.Column(skips), m.Column(other)
	if a < 0 || b < 0 {
		return nil
	}
	var out []string
	for _, r := range m.Rows {
		if ca, cb := r.Cells[a], r.Cells[b]; ca.Status == StatusSkip && cb.Status != StatusSkip && cb.Status != "" {
			out = append(out, fmt.Sprintf("%s: %q (%s: %s)", r.ID, ca.Detail, other, cb))
		}
	}
	return out
}
