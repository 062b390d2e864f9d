package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// The RDMA cable of npfnic boot -rdma-peer: the console guest's npfnic
// and a headless peer running rdma_rxe over virtio-net, which listens on
// the cable's socket.
const (
	rdmaPeerLocalIP = "10.81.0.1"
	rdmaPeerIP      = "10.81.0.2"
)

// rdmaPeerServers are the programs the peer serves, each on a port of its
// own, so the console guest can run the client side again and again.
var rdmaPeerServers = []interface {
	Args(dev string, gidIndex int, server string) []string
}{
	workload.Pingpong{Port: 18515},
	workload.Perftest{Tool: "ib_write_bw", Port: 18516},
	workload.Perftest{Tool: "ib_send_bw", Port: 18517},
	workload.Perftest{Tool: "ib_read_bw", Port: 18518},
	workload.Perftest{Tool: "ib_send_lat", Port: 18519},
}

type rdmaPeerGuest struct {
	dir, wire string
	vm        *vm.VM
	g         *testbed.RDMAGuest
	stop      context.CancelFunc // ends the server loops
}

// startRDMAPeer boots the peer, makes rxe0 usable and starts its servers.
func startRDMAPeer(ctx context.Context, a *images.Artifacts, accel vm.Accel) (p *rdmaPeerGuest, err error) {
	p = &rdmaPeerGuest{}
	if p.dir, err = os.MkdirTemp("", "npfnic-boot-rdma-"); err != nil {
		return nil, err
	}
	p.wire = filepath.Join(p.dir, "wire.sock")
	fmt.Fprintf(os.Stderr, "booting the rdma_rxe peer (%s, %s) on the cable %s\n", rdmaPeerIP, accel, p.wire)
	p.vm, err = vm.Start(ctx, vm.Config{Name: "npfnic-boot-peer", Images: a, Variant: images.VariantRDMA, Accel: accel,
		NICs: []vm.QEMUNIC{{Model: "virtio-net-pci", MAC: "52:54:00:81:00:02", Netdev: vm.Netdev{Kind: "stream", Path: p.wire, Server: true}}}})
	if err != nil {
		os.RemoveAll(p.dir)
		return nil, fmt.Errorf("rdma_rxe peer: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if p.g, err = testbed.ConfigureRDMAGuest(sctx, p.vm, testbed.RDMARxe, rdmaPeerIP); err != nil {
		p.close()
		return nil, fmt.Errorf("rdma_rxe peer: %w", err)
	}
	// Each server runs again as soon as a client is done with it. The
	// loops are this process's (the guest's shell keeps no background job
	// once its command returns), and end with the command.
	loops, stop := context.WithCancel(context.Background())
	p.stop = stop
	for _, s := range rdmaPeerServers {
		go func() {
			for loops.Err() == nil {
				if _, err := p.g.VM.Exec(loops, s.Args(p.g.Dev, p.g.GIDIndex, "")...); err != nil && loops.Err() == nil {
					time.Sleep(time.Second)
				}
			}
		}()
	}
	return p, nil
}

// banner tells the console user what to run against the peer.
func (p *rdmaPeerGuest) banner(local *testbed.RDMAGuest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nRDMA cable: %s %s (GID index %d) <-> rdma_rxe peer %s %s; the peer serves:\n",
		local.Dev, local.IP, local.GIDIndex, p.g.Dev, p.g.IP)
	for _, s := range rdmaPeerServers {
		fmt.Fprintf(&b, "  %s\n", strings.Join(s.Args(local.Dev, local.GIDIndex, p.g.IP), " "))
	}
	return b.String()
}

func (p *rdmaPeerGuest) close() {
	if p.stop != nil {
		p.stop()
	}
	if p.vm != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = p.vm.Shutdown(sctx)
		cancel()
	}
	os.RemoveAll(p.dir)
}
