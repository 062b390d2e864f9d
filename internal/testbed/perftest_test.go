package testbed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/internal/testbed/workload"
)

const perftestReport = `
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      20               11.20              11.10                 0.000169
`

func TestPerftestRetriesOnlyClockFailures(t *testing.T) {
	clockErr := errors.New("client 10.81.0.2: exit 1:\n Correlation coefficient r^2: 0.89 < 0.9\n Can't produce a report\n")
	otherErr := errors.New("client 10.81.0.2: exit 1:\n Completion with error at client\n")
	ok := func() (perftestAttempt, error) { return perftestAttempt{clientOut: perftestReport}, nil }
	clock := func() (perftestAttempt, error) { return perftestAttempt{}, clockErr }
	other := func() (perftestAttempt, error) {
		return perftestAttempt{serverCmd: "ib_send_bw -d npfnic0", clientCmd: "ib_send_bw -d rxe0 10.81.0.1"}, otherErr
	}
	garbled := func() (perftestAttempt, error) { return perftestAttempt{clientOut: "no table"}, nil }
	for _, tc := range []struct {
		name     string
		port     int
		outcomes []func() (perftestAttempt, error)
		attempts int
		ports    []int
		errHas   string // "" wants success
		retries  int    // lines logged
	}{
		{"first try", 18600, []func() (perftestAttempt, error){ok}, 1, []int{18600}, "", 0},
		{"clock then ok", 18600, []func() (perftestAttempt, error){clock, ok}, 2, []int{18600, 26600}, "", 1},
		{"default port moves", 0, []func() (perftestAttempt, error){clock, clock, ok}, 3, []int{0, 26515, 34515}, "", 2},
		{"clock every time", 18700, []func() (perftestAttempt, error){clock, clock, clock, clock, clock}, 5,
			[]int{18700, 26700, 34700, 42700, 50700}, "attempt 5 of at most 5", 4},
		{"other failure not retried", 18600, []func() (perftestAttempt, error){other}, 1, []int{18600}, "ib_send_bw -d rxe0 10.81.0.1", 0},
		{"clock then other", 18600, []func() (perftestAttempt, error){clock, other}, 2, []int{18600, 26600}, "Completion with error", 1},
		{"no report", 18600, []func() (perftestAttempt, error){garbled}, 1, []int{18600}, "no result rows", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ports []int
			var logged []string
			run := PerftestRun{Perftest: workload.Perftest{Tool: "ib_send_bw", Size: 65536, Port: tc.port},
				Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }}
			res, err := runPerftest(context.Background(), run, 0, func(pt workload.Perftest) (perftestAttempt, error) {
				ports = append(ports, pt.Port)
				if len(ports) > len(tc.outcomes) {
					t.Fatalf("attempt %d: more than the %d expected", len(ports), len(tc.outcomes))
				}
				return tc.outcomes[len(ports)-1]()
			})
			if fmt.Sprint(ports) != fmt.Sprint(tc.ports) || res.Attempts != tc.attempts || len(logged) != tc.retries {
				t.Errorf("ports %v, %d attempts, logged %q; want %v, %d, %d lines", ports, res.Attempts, logged, tc.ports, tc.attempts, tc.retries)
			}
			switch {
			case tc.errHas == "" && (err != nil || len(res.Rows) != 1 || res.Rows[0].AvgMBs != 11.10):
				t.Errorf("want the report, got %v, %+v", err, res.Rows)
			case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
				t.Errorf("error %v, want one containing %q", err, tc.errHas)
			}
		})
	}
}

func TestRunClientServerRefusesPerftest(t *testing.T) {
	var p RDMAPair
	g := &RDMAGuest{Dev: "npfnic0"}
	_, _, err := p.RunClientServer(context.Background(), g, g, func(*RDMAGuest, string) []string {
		return workload.Perftest{Tool: "ib_read_lat"}.Args("npfnic0", 1, "")
	})
	if err == nil || !strings.Contains(err.Error(), "RDMAPair.Perftest") {
		t.Fatalf("perftest through RunClientServer: %v", err)
	}
}
