// Package testutil holds the helpers that the tests of several packages
// share: waiting for a condition that other goroutines make true.
// Only _test.go files import it.
package testutil

import (
	"testing"
	"time"
)

// WaitTimeout is how long WaitFor waits: far beyond what an engine under
// test takes to answer (microseconds), short enough that a hang fails fast.
const WaitTimeout = 5 * time.Second

// WaitFor polls cond until it holds, for up to WaitTimeout, and otherwise
// fails the test with what it waited for and, when stats is not nil, what
// stats returns then (e.g. the engine's counters).
func WaitFor(t testing.TB, what string, cond func() bool, stats func() any) {
	t.Helper()
	WaitForWithin(t, WaitTimeout, what, cond, stats)
}

// WaitForWithin is WaitFor with a timeout of d.
func WaitForWithin(t testing.TB, d time.Duration, what string, cond func() bool, stats func() any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			if stats != nil {
				t.Fatalf("timed out waiting for %s; stats %+v", what, stats())
			} else {
				t.Fatalf("timed out waiting for %s", what)
			}
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}
