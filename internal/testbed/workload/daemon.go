package workload

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// GuestDaemon is a server run in the foreground of a guest, as one request
// of the guest's agent that lasts as long as the server: a daemon that
// forked away would log to a syslog the guest does not run. Its script
// sends what it prints to a file (Log), which can be read while it runs.
type GuestDaemon struct {
	g    GuestRunner
	name string
	// Log is the guest file the script writes the daemon's output to.
	Log  string
	done chan struct{}
	res  vm.Result
	err  error
}

// StartDaemon runs script in g until it exits or ctx ends (the agent then
// kills it). name labels it in errors, log is the file its script writes.
func StartDaemon(ctx context.Context, g GuestRunner, name, log, script string) *GuestDaemon {
	d := &GuestDaemon{g: g, name: name, Log: log, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		d.res, d.err = g.VM.ExecWithin(ctx, 0, "/bin/sh", "-c", script)
	}()
	return d
}

// Exited reports whether the daemon's script has ended.
func (d *GuestDaemon) Exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// exitErr describes how the script ended, nil if it exited 0 or with one
// of ok; call it once it has.
func (d *GuestDaemon) exitErr(ok ...int) error {
	if d.err != nil {
		return fmt.Errorf("%s on %s: %w", d.name, d.g.Name, d.err)
	}
	if (d.res.Exit != 0 && !slices.Contains(ok, d.res.Exit)) || d.res.TimedOut {
		return fmt.Errorf("%s on %s exited %d (timed out %v)", d.name, d.g.Name, d.res.Exit, d.res.TimedOut)
	}
	return nil
}

// WaitFor polls script in the guest (every 200 ms, up to limit) until
// ready accepts its output and exit status. It fails at once if the
// daemon exits meanwhile, with its log.
func (d *GuestDaemon) WaitFor(ctx context.Context, limit time.Duration, script string, ready func(out string, exit int) error) error {
	deadline := time.Now().Add(limit)
	for {
		r, err := d.g.VM.Run(ctx, script)
		if err != nil {
			return fmt.Errorf("%s: %w", d.g.Name, err)
		}
		why := ready(r.Stdout+r.Stderr, r.Exit)
		if why == nil {
			return nil
		}
		if d.Exited() {
			return fmt.Errorf("%s exited (%v) while waiting: %v\n%s", d.name, d.exitErr(), why, d.LogTail(ctx, 30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still %v after %v\n%s", d.name, why, limit, d.LogTail(ctx, 30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Wait waits up to limit for the daemon to exit, and says how it did: an
// error if it did not exit 0 or with one of ok (a daemon told to stop by
// SIGTERM may end by it: 143), or did not exit at all.
func (d *GuestDaemon) Wait(ctx context.Context, limit time.Duration, ok ...int) error {
	select {
	case <-d.done:
		if err := d.exitErr(ok...); err != nil {
			return fmt.Errorf("%w\n%s", err, d.LogTail(ctx, 30))
		}
		return nil
	case <-time.After(limit):
		return fmt.Errorf("%s on %s still running %v after it was told to stop\n%s", d.name, d.g.Name, limit, d.LogTail(ctx, 30))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LogTail is the last n lines of the daemon's log, indented, or why there
// are none.
func (d *GuestDaemon) LogTail(ctx context.Context, n int) string {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	b, err := d.g.VM.Get(lctx, d.Log)
	if err != nil {
		return fmt.Sprintf("    (%s's log %s: %v)", d.name, d.Log, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("    %s's log (%s), last lines:\n    %s", d.name, d.Log, strings.Join(lines, "\n    "))
}
