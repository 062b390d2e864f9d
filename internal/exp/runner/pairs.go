package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/npfnic/npfnic/internal/testbed"
)

// Pair is a pairing of RDMA implementations cabled back to back: Server
// is the first guest (testbed.RDMAPairConfig.A), Client the second.
type Pair struct {
	Server, Client testbed.RDMAKind
}

func (p Pair) String() string { return string(p.Server) + "-" + string(p.Client) }

// HasNPFNIC reports whether either end is an npfnic.
func (p Pair) HasNPFNIC() bool {
	return p.Server == testbed.RDMANPFNIC || p.Client == testbed.RDMANPFNIC
}

// ParsePairs reads "rxe-rxe,npfnic-rxe,...": FIRST-SECOND, each rxe or
// npfnic.
func ParsePairs(s string) ([]Pair, error) {
	var out []Pair
	for _, f := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(f), "-")
		if !ok {
			return nil, fmt.Errorf("pair %q: want FIRST-SECOND, each rxe or npfnic", f)
		}
		ka, err := testbed.ParseRDMAKind(a)
		if err != nil {
			return nil, err
		}
		kb, err := testbed.ParseRDMAKind(b)
		if err != nil {
			return nil, err
		}
		out = append(out, Pair{ka, kb})
	}
	return out, nil
}

// Pairs are every pair of a run booted together: the bench of a loop
// whose steps interleave the pairs. A pair that failed to boot keeps its
// error in Err and a nil Up; the others go on.
type Pairs struct {
	Up   []*testbed.RDMAPair
	Err  []error
	Dirs []string // each pair's logs
}

// Dead reports a guest of any pair that is gone.
func (ps *Pairs) Dead() bool {
	for _, p := range ps.Up {
		if p != nil && p.Dead() {
			return true
		}
	}
	return false
}

// Close shuts every pair down.
func (ps *Pairs) Close() {
	for _, p := range ps.Up {
		if p != nil {
			p.Close()
		}
	}
}

// PairsTransport boots pairs one after the other, each with the
// configuration config gives it (its kinds are the pair's; the run's
// images, logs, trace and accelerator are set as RC sets them), its logs
// in a folder named after it. The device trace goes to the first pair
// with an npfnic. setup runs on each pair booted, as RC's.
func PairsTransport(e *Env, pairs []Pair, config func(i int, p Pair) testbed.RDMAPairConfig,
	setup ...func(context.Context, *testbed.RDMAPair) error) Transport[*Pairs] {
	return Transport[*Pairs]{
		Name: "pairs",
		Start: func(ctx context.Context, logDir string) (*Pairs, error) {
			ps := &Pairs{Up: make([]*testbed.RDMAPair, len(pairs)), Err: make([]error, len(pairs))}
			env := *e
			for i, pr := range pairs {
				c := config(i, pr)
				c.A, c.B = pr.Server, pr.Client
				e.Logf("pair %s: booting", pr)
				dir := filepath.Join(logDir, pr.String())
				ps.Dirs = append(ps.Dirs, dir)
				ps.Up[i], ps.Err[i] = RC(&env, c, setup...).Start(ctx, dir)
				if ps.Err[i] != nil {
					e.Logf("pair %s: %v", pr, ps.Err[i])
				} else if pr.HasNPFNIC() {
					env.Trace = nil
				}
				if ctx.Err() != nil {
					ps.Close()
					return nil, ctx.Err()
				}
			}
			return ps, nil
		},
	}
}

// Indexes are 0 to n-1, for rotating a run's pairs.
func Indexes(n int) []int {
	is := make([]int, n)
	for i := range is {
		is[i] = i
	}
	return is
}
