package runner

import (
	"cmp"
	"slices"
)

// A shared 2-core host drifts and a lossy run leaves traces in the next
// one, so no configuration may always run first, or always after the same
// neighbour: every round runs every arm, the arms rotated one place per
// round, and an axis swept within a round (ring sizes, rates) goes up in
// odd rounds and down in even ones.

// Rounds lists the steps of rounds rounds, each running the arms
// arms(round) returns, in that order.
func Rounds[A any](rounds int, arms func(round int) []A) []Step[A] {
	var steps []Step[A]
	for round := 1; round <= rounds; round++ {
		for _, a := range arms(round) {
			steps = append(steps, Step[A]{Round: round, Arm: a})
		}
	}
	return steps
}

// Rotate returns a copy of xs rotated left by round-1 places: over
// len(xs) rounds each element runs once in every position.
func Rotate[T any](xs []T, round int) []T {
	if len(xs) == 0 {
		return nil
	}
	k := (round - 1) % len(xs)
	return append(slices.Clone(xs[k:]), xs[:k]...)
}

// Alternate returns xs sorted, ascending in odd rounds and descending in
// even ones.
func Alternate[T cmp.Ordered](xs []T, round int) []T {
	s := slices.Clone(xs)
	slices.Sort(s)
	if round%2 == 0 {
		slices.Reverse(s)
	}
	return s
}
