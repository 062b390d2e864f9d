package runner

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
)

// Bench is what the steps of a loop run on: guests that may die.
type Bench interface {
	// Dead reports a guest that is gone (QEMU exited).
	Dead() bool
	// Close shuts the guests down and removes what they used on the host.
	Close()
}

// Transport is how a loop gets its bench: its host check and its boot.
type Transport[B Bench] struct {
	// Name names the benches' log folders: NAME-1, NAME-2 after a reboot.
	Name string
	// Check, if set, runs once before the first boot: host tools,
	// leftovers of an earlier run.
	Check func(*Env) error
	// Start boots a bench whose logs go to logDir; nil: the steps bring
	// their own guests and the loop passes them a zero bench.
	Start func(ctx context.Context, logDir string) (B, error)
}

func (t Transport[B]) logDir(e *Env, boot int) string {
	return filepath.Join(e.LogDir, fmt.Sprintf("%s-%d", t.Name, boot))
}

// Ethernet is the transport of one guest with npfnic on a tap whose
// host end is in a network namespace (testbed.Start), the device served
// in this process. setup runs after every boot; a setup that fails fails
// the boot.
func Ethernet(e *Env, guest testbed.Config, setup ...func(context.Context, *testbed.Testbed) error) Transport[*testbed.Testbed] {
	return Transport[*testbed.Testbed]{
		Name:  "guest",
		Check: CheckEthernetHost,
		Start: func(ctx context.Context, logDir string) (*testbed.Testbed, error) {
			g := guest
			g.Images, g.LogDir, g.Progress, g.Trace = e.Images, logDir, e.Logf, e.Trace
			g.Accel = cmp.Or(g.Accel, e.Accel)
			return boot(ctx, func() (*testbed.Testbed, error) { return testbed.Start(ctx, g) }, setup)
		},
	}
}

// CheckEthernetHost fails without the host tools a guest on a tap needs,
// and removes the namespaces and taps a killed run left behind.
func CheckEthernetHost(e *Env) error {
	if err := testbed.CheckHost(); err != nil {
		return err
	}
	if reaped := testbed.ReapStale(); len(reaped) > 0 {
		e.Logf("removed leftovers of an earlier run: %s", strings.Join(reaped, ", "))
	}
	return nil
}

// RC is the transport of two guests cabled back to back for RDMA
// (testbed.StartRDMAPair): pair.A and pair.B say what runs on each.
func RC(e *Env, pair testbed.RDMAPairConfig, setup ...func(context.Context, *testbed.RDMAPair) error) Transport[*testbed.RDMAPair] {
	return Transport[*testbed.RDMAPair]{
		Name: "pair",
		Start: func(ctx context.Context, logDir string) (*testbed.RDMAPair, error) {
			c := pair
			c.Images, c.LogDir, c.Trace = e.Images, logDir, e.Trace
			c.Accel = cmp.Or(c.Accel, e.Accel)
			c.Progress = func(f string, args ...any) { e.Logf("  "+f, args...) }
			return boot(ctx, func() (*testbed.RDMAPair, error) { return testbed.StartRDMAPair(ctx, c) }, setup)
		},
	}
}

// boot starts a bench and runs the setups on it; a setup that fails
// closes it.
func boot[B Bench](ctx context.Context, start func() (B, error), setup []func(context.Context, B) error) (B, error) {
	b, err := start()
	if err != nil {
		return b, err
	}
	for _, s := range setup {
		if err := s(ctx, b); err != nil {
			b.Close()
			var none B
			return none, err
		}
	}
	return b, nil
}

// ForgetTCPMetrics is a setup for Ethernet: the host's TCP stops carrying
// what it learnt of the guest from one connection into the next. Linux
// caches ssthresh per destination (tcp_metrics), so a run after a lossy
// one would start from the small window the loss left.
func ForgetTCPMetrics(ctx context.Context, tb *testbed.Testbed) error {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := tb.NS.Run(sctx, "sysctl", "-q", "-w", "net.ipv4.tcp_no_metrics_save=1"); err != nil {
		return fmt.Errorf("host namespace: sysctl net.ipv4.tcp_no_metrics_save=1: %w", err)
	}
	return nil
}

// NoBench is the bench of a loop whose steps boot their own guests.
type NoBench struct{}

// Dead is never true: there is nothing to reboot.
func (NoBench) Dead() bool { return false }

// Close has nothing to close.
func (NoBench) Close() {}
