package testbed

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// PerftestAttempts bounds how often Perftest runs a perftest whose only
// failure was its own clock calibration (workload.PerftestClockFailed),
// and perftestRetryPause is the wait before each retry: the calibration
// fails while the guest's vCPU stalls, and on a host loaded by a stress run
// and three other builds three attempts in a row failed.
const (
	PerftestAttempts   = 5
	perftestRetryPause = 2 * time.Second
)

// perftestRetryPortStep moves each retry's out-of-band port away from the
// last attempt's, whose server may still hold it; every port the tree uses
// is below 25535, so four steps stay in range.
const perftestRetryPortStep = 8000

// PerftestRun is one perftest between the two guests of a pair: the run
// itself, and how each side's command line differs from it.
type PerftestRun struct {
	workload.Perftest
	// Side, if set, adjusts a copy of the run for one guest before its
	// command line is built (ODP or completion events on npfnic's side
	// only, since rxe on the guest's 6.1 kernel has no ODP).
	Side func(g *RDMAGuest, pt *workload.Perftest)
	// Logf receives a line for each retry; nil logs through the pair's
	// Progress.
	Logf func(format string, args ...any)
}

// ODPOnNPFNIC is a PerftestRun.Side that registers with --odp on npfnic's
// side and pins on rxe's.
func ODPOnNPFNIC(g *RDMAGuest, pt *workload.Perftest) { pt.ODP = g.Kind == RDMANPFNIC }

// ODPOn is a PerftestRun.Side that registers with --odp on g only (an
// npfnic) and pins on the other side, whatever its kind: npfnic as the
// receiver of a pair of npfnics.
func ODPOn(g *RDMAGuest) func(*RDMAGuest, *workload.Perftest) {
	return func(side *RDMAGuest, pt *workload.Perftest) { pt.ODP = side == g }
}

// PerftestResult is what Perftest returns: both sides' outputs of the last
// attempt, the client's parsed report and how many attempts it took.
type PerftestResult struct {
	ServerOut, ClientOut string
	// Rows is the client's report; nil when the run failed.
	Rows     []workload.PerftestRow
	Attempts int
}

// Perftest is the one way the testbed, the VM tests and the experiments run
// perftest: server first, then the client (RunClientServer), and once more,
// on a port of its own, when perftest could not calibrate its clock in a
// stalled TCG guest ("Correlation coefficient r^2 ... < 0.9", "Can't
// produce a report"), at most PerftestAttempts times in all. Any other
// failure is returned at once, naming both command lines and carrying the
// failing side's output.
func (p *RDMAPair) Perftest(ctx context.Context, server, client *RDMAGuest, run PerftestRun) (PerftestResult, error) {
	if run.Logf == nil {
		run.Logf = p.progress
	}
	return runPerftest(ctx, run, perftestRetryPause, func(pt workload.Perftest) (perftestAttempt, error) {
		var a perftestAttempt
		var err error
		a.serverOut, a.clientOut, err = p.runClientServer(ctx, server, client, func(g *RDMAGuest, serverIP string) []string {
			q := pt
			if run.Side != nil {
				run.Side(g, &q)
			}
			args := q.Args(g.Dev, g.GIDIndex, serverIP)
			cmd := fmt.Sprintf("%s (%s %s)", strings.Join(args, " "), g.Kind, g.IP)
			if serverIP == "" {
				a.serverCmd = cmd
			} else {
				a.clientCmd = cmd
			}
			return args
		})
		return a, err
	})
}

// perftestAttempt is one run of perftest on both sides.
type perftestAttempt struct {
	serverCmd, clientCmd string
	serverOut, clientOut string
}

// runPerftest is Perftest's loop of attempts, apart from the guests.
func runPerftest(ctx context.Context, run PerftestRun, pause time.Duration, attempt func(workload.Perftest) (perftestAttempt, error)) (PerftestResult, error) {
	port := func(n int) int {
		if n == 1 {
			return run.Port
		}
		return cmp.Or(run.Port, 18515) + (n-1)*perftestRetryPortStep // 18515: perftest's default
	}
	var res PerftestResult
	for res.Attempts = 1; ; res.Attempts++ {
		pt := run.Perftest
		pt.Port = port(res.Attempts)
		a, err := attempt(pt)
		res.ServerOut, res.ClientOut = a.serverOut, a.clientOut
		if err == nil {
			if res.Rows, err = workload.ParsePerftest(a.clientOut); err != nil {
				return res, fmt.Errorf("%s: %w\nclient output:\n%s", a.clientCmd, err, a.clientOut)
			}
			return res, nil
		}
		clock := workload.PerftestClockFailed(err.Error()) || workload.PerftestClockFailed(a.clientOut+a.serverOut)
		if !clock || res.Attempts >= PerftestAttempts || ctx.Err() != nil {
			return res, fmt.Errorf("perftest, attempt %d of at most %d:\n  server: %s\n  client: %s\n%w",
				res.Attempts, PerftestAttempts, a.serverCmd, a.clientCmd, err)
		}
		if run.Logf != nil {
			run.Logf("%s: attempt %d of %d could not calibrate perftest's clock in the guest; again on port %d in %v",
				pt.Tool, res.Attempts, PerftestAttempts, port(res.Attempts+1), pause)
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
}
