package testbed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/vdevice/trace"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// RDMAGuestConfig configures StartRDMAGuest.
type RDMAGuestConfig struct {
	Images *images.Artifacts
	Kind   RDMAKind
	// Variant is the guest image; default images.VariantRDMA.
	Variant images.Variant
	// Name is the guest's; default "rdma-KIND".
	Name string
	// IP is the guest's IPv4 address on its link; default
	// DefaultRDMAGuestIP.
	IP        string
	MemoryMiB int // default 1024
	CPUs      int // default 1
	// Accel is kvm, tcg or auto (vm.ResolveAccel); default
	// $NPFNIC_ACCEL, else auto.
	Accel  vm.Accel
	LogDir string // required
	// Trace records an npfnic guest's device events.
	Trace *trace.Recorder
	// MinAckTimeout is an npfnic's floor on its RC local ACK timers, as
	// in RDMAPairConfig.
	MinAckTimeout time.Duration
}

// DefaultRDMAGuestIP is a lone RDMA guest's address (10.82.0.0/24: apart
// from the pairs' 10.81.0.0/24).
const DefaultRDMAGuestIP = "10.82.0.1"

// StartRDMAGuest boots one guest whose only NIC is of c.Kind and makes its
// RDMA device usable as StartRDMAPair does (ConfigureRDMAGuest): an RDMA
// device with its link up and nothing at the other end, whose QPs talk to
// each other through the device's loopback, as rdma-core's test suite
// uses one. An rxe guest's virtio-net is on QEMU's user network; an
// npfnic's port listens on a socket no one connects to (the device reports
// its link up whenever it has a port). Close shuts it down.
func StartRDMAGuest(ctx context.Context, c RDMAGuestConfig) (_ *RDMAGuest, err error) {
	if c.Images == nil || c.LogDir == "" {
		return nil, errors.New("testbed: RDMAGuestConfig needs Images and LogDir")
	}
	if _, err := ParseRDMAKind(string(c.Kind)); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "npfnic-rdma1-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	var dev vfiouser.Device
	cfg := vm.Config{Name: cmp.Or(c.Name, "rdma-"+string(c.Kind)), Images: c.Images, Variant: cmp.Or(c.Variant, images.VariantRDMA),
		MemoryMiB: c.MemoryMiB, CPUs: c.CPUs, Accel: c.Accel, LogDir: c.LogDir}
	switch c.Kind {
	case RDMARxe:
		cfg.NICs = []vm.QEMUNIC{{Model: "virtio-net-pci", Netdev: vm.Netdev{Kind: "user"}}}
	case RDMANPFNIC:
		cfg.NPFNICs = []vm.NPFNIC{{Server: vm.InProcessServer{Wire: "stream-listen:unix:" + filepath.Join(dir, "wire.sock"),
			Trace: c.Trace, Device: &dev, RDMAMinAckTimeout: c.MinAckTimeout}}}
	}
	v, err := vm.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Name, err)
	}
	g := &RDMAGuest{VM: v, Kind: c.Kind, IP: cmp.Or(c.IP, DefaultRDMAGuestIP), dir: dir}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if c.Kind == RDMANPFNIC {
		nic, ok := dev.(*npfnic.NIC)
		if !ok {
			return nil, fmt.Errorf("%s: the in-process device is a %T, not an npfnic NIC", cfg.Name, dev)
		}
		g.NIC = nic
	}
	if err := g.setUp(ctx); err != nil {
		return nil, fmt.Errorf("%s guest %s: %w", g.Kind, g.IP, err)
	}
	return g, nil
}

// Close shuts down a guest StartRDMAGuest booted and removes its
// socket's folder. A guest of a pair is closed with its pair.
func (g *RDMAGuest) Close() {
	if g.VM != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = g.VM.Shutdown(sctx)
		cancel()
	}
	if g.dir != "" {
		os.RemoveAll(g.dir)
	}
}
