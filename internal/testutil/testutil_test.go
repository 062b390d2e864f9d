package testutil

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message instead of
// ending the goroutine.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestWaitFor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		trueFrom int32 // cond holds from this call on; 0: never
		stats    func() any
		wantFail string
	}{
		{name: "at once", trueFrom: 1},
		{name: "after some polls", trueFrom: 20},
		{name: "never, with stats", stats: func() any { return struct{ Drops int }{3} }, wantFail: "timed out waiting for the thing; stats {Drops:3}"},
		{name: "never, without stats", wantFail: "timed out waiting for the thing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			cond := func() bool { return tc.trueFrom > 0 && calls.Add(1) >= tc.trueFrom }
			r := &recorder{TB: t}
			start := time.Now()
			WaitForWithin(r, 50*time.Millisecond, "the thing", cond, tc.stats)
			if r.failed != tc.wantFail {
				t.Errorf("failure %q, want %q", r.failed, tc.wantFail)
			}
			if tc.wantFail != "" && time.Since(start) < 50*time.Millisecond {
				t.Errorf("gave up after %v, before the timeout", time.Since(start))
			}
		})
	}
}
