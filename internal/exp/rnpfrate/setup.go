package rnpfrate

import (
	"context"
	"time"

	"github.com/npfnic/npfnic/internal/exp/runner"
)

// setup is what the points of one policy in one round share on a bench:
// the driver loaded with the policy and its ring warmed (Ethernet), or
// one ib_send_bw session with its memory region warmed (RC). A point sets
// it up when the one before left none for its round and policy on this
// bench; a setup that failed is tried again by the next point.
type setup[B comparable, S any] struct {
	bench  B
	round  int
	policy string
	state  S
	ok     bool
}

// ensure returns the setup of s's round and policy on b, releasing the
// one before (with stop, if set) and starting a new one when needed.
func (u *setup[B, S]) ensure(b B, s runner.Step[Point], start func() (S, error), stop func(S)) (S, error) {
	if u.ok && u.bench == b && u.round == s.Round && u.policy == s.Arm.Policy {
		return u.state, nil
	}
	u.release(stop)
	st, err := start()
	if err != nil {
		return st, err
	}
	*u = setup[B, S]{bench: b, round: s.Round, policy: s.Arm.Policy, state: st, ok: true}
	return st, nil
}

// release ends the current setup, if any.
func (u *setup[B, S]) release(stop func(S)) {
	if u.ok && stop != nil {
		stop(u.state)
	}
	u.ok = false
}

// faultKnobs are the driver's fault injection knobs, of the Ethernet
// guest (testbed.Testbed) or of RC's npfnic guest (testbed.RDMAGuest).
type faultKnobs interface {
	SetFaultDelay(ctx context.Context, d time.Duration) error
	SetRNPFRate(ctx context.Context, ppm int) error
}

// inject sets the fault delay of p's kind (major: majorDelay, else
// none), then p's rate; injectNone sets both back to none, the state
// between points.
func inject(ctx context.Context, k faultKnobs, p Point, majorDelay time.Duration) error {
	delay := time.Duration(0)
	if p.Fault == "major" {
		delay = majorDelay
	}
	if err := k.SetFaultDelay(ctx, delay); err != nil {
		return err
	}
	return k.SetRNPFRate(ctx, p.PPM)
}

func injectNone(ctx context.Context, k faultKnobs) error {
	if err := k.SetRNPFRate(ctx, 0); err != nil {
		return err
	}
	return k.SetFaultDelay(ctx, 0)
}
