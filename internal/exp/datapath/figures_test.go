package datapath

import (
	"errors"
	"math"
	"testing"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// threeRounds: e1000e and npfnic over three rounds, npfnic's last one
// failed half-way.
func threeRounds() []Result {
	var rs []Result
	for round, v := range []float64{100, 300, 200} {
		for _, nic := range []string{"e1000e", "npfnic"} {
			r := Result{NIC: nic, Label: nic, Round: round + 1, Rounds: 3,
				GuestToHost: &workload.Iperf{Mbps: v}, HostToGuest: &workload.Iperf{Mbps: 2 * v},
				Memcached: &workload.Memaslap{OpsPerSec: 10 * v}}
			if nic == "npfnic" && round == 2 {
				r.HostToGuest, r.Memcached = nil, nil
				r.Err = errors.New("memaslap: boom")
			}
			rs = append(rs, r)
		}
	}
	return rs
}

func TestFigures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []Result
	}{{"one round", fakeResults()}, {"three rounds", threeRounds()}} {
		dir := t.TempDir()
		files, err := WriteOutputs(dir, Config{Env: runner.Env{Images: &images.Artifacts{}}}, tc.results)
		if err != nil {
			t.Fatal(err)
		}
		n, err := report.CheckFigures(files)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if n != 1 {
			t.Errorf("%s: %d figures in %v", tc.name, n, files)
		}
		for _, c := range Charts("TCG", tc.results) {
			if err := report.CheckBars(c.(report.BarChart)); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
	}
}

// With rounds, every bar has the rounds' min-max; a ratio's is the NIC's
// rounds over the first NIC's median.
func TestChartRanges(t *testing.T) {
	charts := Charts("TCG", threeRounds())
	if len(charts) != 3 {
		t.Fatalf("%d charts", len(charts))
	}
	tput, rel := charts[0].(report.BarChart), charts[2].(report.BarChart)
	e, n := tput.Series[0], tput.Series[1]
	if e.Lo[0] != 100 || e.Hi[0] != 300 || e.Lo[1] != 200 || e.Hi[1] != 600 {
		t.Errorf("e1000e: lo %v hi %v", e.Lo, e.Hi)
	}
	// npfnic's host->guest ran in two rounds: 200 and 600.
	if n.Lo[1] != 200 || n.Hi[1] != 600 {
		t.Errorf("npfnic: lo %v hi %v", n.Lo, n.Hi)
	}
	// e1000e's median guest->host is 200: npfnic's rounds 100..300 are
	// 0.5..1.5 of it.
	if r := rel.Series[1]; r.Values[0] != 1 || r.Lo[0] != 0.5 || r.Hi[0] != 1.5 {
		t.Errorf("npfnic relative: %v lo %v hi %v", r.Values, r.Lo, r.Hi)
	}
	// One round: no range.
	for _, c := range Charts("TCG", fakeResults()) {
		for _, s := range c.(report.BarChart).Series {
			for i := range s.Values {
				if !math.IsNaN(s.Lo[i]) || !math.IsNaN(s.Hi[i]) {
					t.Errorf("%s: a range from one round: %v..%v", s.Name, s.Lo[i], s.Hi[i])
				}
			}
		}
	}
}
