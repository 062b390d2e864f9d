package faultcost

import (
	"context"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/pri"
)

// A round runs its share of the cycles (the faults) and of the floor
// (DIAG_ECHO), the floor last on odd rounds and first on even ones, so
// that faults and floor see the same (shared) host.
type part string

const (
	partCycles part = "cycles"
	partFloor  part = "floor"
)

func (p part) String() string { return string(p) }

// half is one transport's half of the experiment on its bench.
type half[B runner.Bench] interface {
	// start readies a guest that just booted: the driver, the device's
	// counters to count from.
	start(ctx context.Context, b B) error
	// cycles and floor run a round's share of each.
	cycles(ctx context.Context, b B, round int) error
	floor(ctx context.Context, b B, round int) error
	// finish collects what the bench counted, before it closes.
	finish(ctx context.Context, b B)
}

// runRounds runs rounds on t's bench (which runs w.start after each
// boot).
func runRounds[B runner.Bench](ctx context.Context, env *runner.Env, t runner.Transport[B], rounds int, w half[B]) error {
	return runner.Loop[B, part]{
		Env:       env,
		Transport: t,
		Steps:     runner.Rounds(rounds, func(round int) []part { return runner.Rotate([]part{partCycles, partFloor}, round) }),
		Run: func(ctx context.Context, b B, s runner.Step[part], _ string) error {
			if s.Arm == partFloor {
				return w.floor(ctx, b, s.Round)
			}
			return w.cycles(ctx, b, s.Round)
		},
		Release: w.finish,
	}.Go(ctx)
}

// priAdd adds to sum what the device's PRI counters grew by from a to b.
func priAdd(sum, b, a pri.Stats) pri.Stats {
	return pri.Stats{
		Groups: sum.Groups + b.Groups - a.Groups, Requests: sum.Requests + b.Requests - a.Requests,
		Success: sum.Success + b.Success - a.Success, Invalid: sum.Invalid + b.Invalid - a.Invalid,
		Failures: sum.Failures + b.Failures - a.Failures, Unexpected: sum.Unexpected + b.Unexpected - a.Unexpected,
		Abandoned: sum.Abandoned + b.Abandoned - a.Abandoned, Waits: sum.Waits + b.Waits - a.Waits,
	}
}
