package ci

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// ulpRound is what the rounds of the kernel ULPs (iSER, NVMe-oF) share:
// two guests, client (initiator or host) and target, named in a row of
// the report; steps timed one by one; a failing step reported with both
// guests' kernel log tails; and, at the end, neither kernel may have
// logged a warning since the round began.
type ulpRound struct {
	t              *testing.T
	ctx            context.Context
	row            string
	client, target workload.GuestRunner
	begun          time.Time
	logs           [][]string
	times          []string
	// more, if set, adds to a failure's report (the daemons' logs).
	more func() string
}

// beginULPRound reads both kernel logs, which finish compares with.
func beginULPRound(ctx context.Context, t *testing.T, row string, client, target workload.GuestRunner) *ulpRound {
	t.Helper()
	r := &ulpRound{t: t, ctx: ctx, row: row, client: client, target: target, begun: time.Now()}
	var err error
	if r.logs, err = dmesgBoth(ctx, client, target); err != nil {
		t.Fatal(err)
	}
	return r
}

// fail ends the round at step name.
func (r *ulpRound) fail(name string, err error) {
	r.t.Helper()
	more := ""
	if r.more != nil {
		more = r.more()
	}
	r.t.Fatalf("%s: %s: %v\n  %s's kernel log, last lines:\n%s\n  %s's kernel log, last lines:\n%s%s",
		r.row, name, err, r.client.Name, r.client.DmesgTail(r.ctx, 40),
		r.target.Name, r.target.DmesgTail(r.ctx, 40), more)
}

// step runs one step of the round and records its time.
func (r *ulpRound) step(name string, f func() error) {
	r.t.Helper()
	began := time.Now()
	if err := f(); err != nil {
		r.fail(name, err)
	}
	r.times = append(r.times, fmt.Sprintf("%s %.1fs", name, time.Since(began).Seconds()))
}

// both runs the target's and the client's part of a step at once.
func (r *ulpRound) both(name string, onTarget, onClient func() error) {
	r.t.Helper()
	began := time.Now()
	var terr error
	var took time.Duration
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		terr = onTarget()
		took = time.Since(began)
	}()
	cerr := onClient()
	ctook := time.Since(began)
	<-ran
	if cerr != nil {
		r.fail(name+" ("+clientRole(r.client)+")", cerr)
	}
	if terr != nil {
		r.fail(name+" (target)", terr)
	}
	r.times = append(r.times, fmt.Sprintf("%s %.1fs (target %.1fs, %s %.1fs)", name,
		time.Since(began).Seconds(), took.Seconds(), clientRole(r.client), ctook.Seconds()))
}

// clientRole is the client's role as its name says it ("initiator" in
// "npfnic initiator 10.0.0.2").
func clientRole(g workload.GuestRunner) string {
	if f := strings.Fields(g.Name); len(f) > 1 {
		return f[1]
	}
	return "client"
}

// finish checks what both kernels logged since the round began, logs the
// steps' times, and returns the whole round's.
func (r *ulpRound) finish() time.Duration {
	r.t.Helper()
	after, err := dmesgBoth(r.ctx, r.client, r.target)
	if err != nil {
		r.t.Fatal(err)
	}
	for i, g := range []workload.GuestRunner{r.client, r.target} {
		added := after[i]
		if len(added) >= len(r.logs[i]) {
			added = added[len(r.logs[i]):]
		}
		if m := badKernelLog.FindString(strings.Join(added, "\n")); m != "" {
			r.t.Fatalf("%s: the %s's kernel logged %q during the round:\n%s", r.row, g.Name, m, lastLines(strings.Join(added, "\n"), 60))
		}
	}
	took := time.Since(r.begun)
	r.t.Logf("%s: ok in %.1fs (%s)", r.row, took.Seconds(), strings.Join(r.times, ", "))
	return took
}

// dmesgBoth reads the guests' kernel logs, both at once.
func dmesgBoth(ctx context.Context, gs ...workload.GuestRunner) ([][]string, error) {
	logs := make([][]string, len(gs))
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			logs[i], errs[i] = g.Dmesg(ctx)
		}()
	}
	wg.Wait()
	return logs, errors.Join(errs...)
}
