package rnpfrate

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/npfnic/npfnic/internal/exp/rnrsweep"
)

// Sim is the virtual-time sweep of `npfnic exp rnr` (package
// internal/exp/rnrsweep: two ibrc engines on a simulated link, faults per packet),
// which the RC half draws beside its measurements.
type Sim struct {
	Config rnrsweep.Config
	Base   rnrsweep.Result
	Points []rnrsweep.Result
}

// RunSim runs `npfnic exp rnr` with its defaults, in virtual time (a few
// seconds of host CPU), one progress line per point.
func RunSim(ctx context.Context, progress io.Writer) (*Sim, error) {
	c := rnrsweep.DefaultConfig()
	start := time.Now()
	if progress != nil {
		c.Progress = func(done, total int, r rnrsweep.Result) {
			fmt.Fprintf(progress, "exp rnr [%d/%d %.1fs]: rate %g, %v, resolution %v: %.1f MB/s\n",
				done, total, time.Since(start).Seconds(), r.FaultRate, r.Recovery, r.Resolution, r.MBps)
		}
	}
	base, points, err := rnrsweep.Run(ctx, c)
	if err != nil {
		return nil, err
	}
	return &Sim{Config: c, Base: base, Points: points}, nil
}
