package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// guestFlags are the flags every command that boots guests takes: -m,
// -smp and -accel.
type guestFlags struct {
	mem, cpus *int
	accel     vm.Accel
}

// The guest sizes the flags accept: the initramfs alone is about 50 MiB.
const (
	minGuestMiB  = 256
	maxGuestMiB  = 1 << 20
	maxGuestCPUs = 64
)

// addGuestFlags registers -m (default mem, 1024 if 0, described by
// memHelp or a default text), -smp and -accel.
func addGuestFlags(fs *flag.FlagSet, mem int, memHelp string) *guestFlags {
	if mem == 0 {
		mem = 1024
	}
	if memHelp == "" {
		memHelp = "guest memory in MiB"
	}
	g := &guestFlags{accel: vm.AccelAuto}
	g.mem = fs.Int("m", mem, memHelp)
	g.cpus = fs.Int("smp", 1, "guest vCPUs")
	fs.Var(&g.accel, "accel", vm.AccelHelp)
	return g
}

// check validates the sizes, before anything is built or booted (-accel
// is checked as it is parsed).
func (g *guestFlags) check() error {
	if *g.mem < minGuestMiB || *g.mem > maxGuestMiB {
		return fmt.Errorf("-m %d: want %d to %d MiB", *g.mem, minGuestMiB, maxGuestMiB)
	}
	if *g.cpus < 1 || *g.cpus > maxGuestCPUs {
		return fmt.Errorf("-smp %d: want 1 to %d vCPUs", *g.cpus, maxGuestCPUs)
	}
	return nil
}

// resolve picks the accelerator the guests boot with (vm.ResolveAccel):
// auto probes KVM once and falls back to TCG with a notice; kvm where KVM
// does not work is an error.
func (g *guestFlags) resolve(ctx context.Context, a *images.Artifacts) (vm.Accel, error) {
	accel, err := vm.ResolveAccel(ctx, a, g.accel)
	if err != nil {
		return "", fmt.Errorf("-accel %s: %w", string(g.accel), err)
	}
	return accel, nil
}
