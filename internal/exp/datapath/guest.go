package datapath

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// guestIP is iproute2's ip in the guest image (u-root's own ip is at /bbin/ip).
const guestIP = "/usr/sbin/ip"

// guest drives the guest side of a run through the agent.
type guest struct{ v *vm.VM }

// run runs argv in the guest; a non-zero exit is an error with the output.
func (g guest) run(ctx context.Context, argv ...string) (string, error) {
	return g.v.Output(ctx, argv...)
}

// findInterface waits (a minute at most: probing is asynchronous) for a
// network interface whose device is bound to driver, and returns its name.
func (g guest) findInterface(ctx context.Context, driver string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	seen := map[string]string{}
	for {
		out, err := g.run(ctx, "ls", "/sys/class/net")
		if err != nil {
			return "", err
		}
		names := strings.Fields(out)
		sort.Strings(names)
		for _, n := range names {
			if n == "lo" {
				continue
			}
			link, err := g.run(ctx, "readlink", "/sys/class/net/"+n+"/device/driver")
			if err != nil {
				continue // no device (virtual interface) or not bound yet
			}
			d := path.Base(strings.TrimSpace(link))
			seen[n] = d
			if d == driver {
				return n, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no guest network interface bound to driver %s within a minute (interfaces and drivers: %v)", driver, seen)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// configure gives the interface its address and sets it up.
func (g guest) configure(ctx context.Context, ifname, cidr string) error {
	if _, err := g.run(ctx, guestIP, "addr", "add", cidr, "dev", ifname); err != nil {
		return err
	}
	_, err := g.run(ctx, guestIP, "link", "set", "dev", ifname, "up")
	return err
}

// startServers starts iperf3 and memcached in the guest as daemons and
// waits until both listen.
func (g guest) startServers(ctx context.Context) error {
	if err := workload.StartGuestIperf3Server(ctx, g.v); err != nil {
		return err
	}
	if err := workload.StartGuestMemcached(ctx, g.v); err != nil {
		return err
	}
	return workload.WaitListening(ctx, g.v, workload.IperfPort, workload.MemcachedPort)
}
