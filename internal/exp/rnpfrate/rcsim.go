package rnpfrate

import (
	"context"
	"io"

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
	if progress != nil {
		c.Progress = rnrsweep.ProgressTo(progress, "exp rnr ")
	}
	base, points, err := rnrsweep.Run(ctx, c)
	if err != nil {
		return nil, err
	}
	return &Sim{Config: c, Base: base, Points: points}, nil
}
