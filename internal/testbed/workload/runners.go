// Package workload runs the testbed's workloads between a guest (package
// vm) and the host end of its link in a network namespace (package
// hostnet): the iperf3 and memcached servers in the guest, iperf3 and
// memaslap clients on either side, and the parsers of what the tools print
// (iperf3's JSON report, memaslap's summary and its periodic statistics).
// The experiments and the VM tests drive traffic through it; nothing here
// knows which NIC carries it.
package workload

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/hostnet"
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// Ports of the servers.
const (
	IperfPort     = 5201
	MemcachedPort = 11211
)

// StartGuestIperf3Server starts iperf3 in the guest as a daemon on
// IperfPort.
func StartGuestIperf3Server(ctx context.Context, v *vm.VM) error {
	if _, err := v.Output(ctx, "iperf3", "-s", "-D", "-p", strconv.Itoa(IperfPort)); err != nil {
		return fmt.Errorf("guest iperf3 server: %w", err)
	}
	return nil
}

// StartGuestMemcached starts memcached in the guest as a daemon on
// MemcachedPort, on every address (so it outlives the interface across
// driver reloads), one thread. 256 MiB of cache holds every object
// memaslap's windows create: no get misses come from eviction.
func StartGuestMemcached(ctx context.Context, v *vm.VM) error {
	if _, err := v.Output(ctx, "memcached", "-u", "root", "-d", "-p", strconv.Itoa(MemcachedPort), "-U", "0", "-m", "256", "-t", "1"); err != nil {
		return fmt.Errorf("guest memcached: %w", err)
	}
	return nil
}

// WaitListening polls the guest's /proc/net/tcp{,6} (at most 30 s) until
// every port has a listening socket.
func WaitListening(ctx context.Context, v *vm.VM, ports ...int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		listening := map[int]bool{}
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			data, err := v.Get(ctx, f)
			if err != nil {
				continue
			}
			if p, err := hostnet.ListeningPorts(data); err == nil {
				for port := range p {
					listening[port] = true
				}
			}
		}
		var missing []string
		for _, p := range ports {
			if !listening[p] {
				missing = append(missing, strconv.Itoa(p))
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing listens on guest port(s) %s after 30 s", strings.Join(missing, ", "))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// iperfArgs are the client flags shared by both directions.
func iperfArgs(server string, port int, d time.Duration) []string {
	return []string{"iperf3", "-c", server, "-p", strconv.Itoa(port), "-t", strconv.Itoa(int(d / time.Second)),
		"--connect-timeout", "10000", "-J"}
}

// runSlack bounds a measurement beyond its nominal duration (connection
// setup, result exchange, a slow TCG guest).
const runSlack = 90 * time.Second

// GuestIperf3 runs an iperf3 client in the guest for d, sending to the
// iperf3 server at server (the host end, port IperfPort).
func GuestIperf3(ctx context.Context, v *vm.VM, server string, d time.Duration) (*Iperf, error) {
	ctx, cancel := context.WithTimeout(ctx, d+runSlack)
	defer cancel()
	r, err := v.Exec(ctx, iperfArgs(server, IperfPort, d)...)
	if err != nil {
		return nil, err
	}
	res, perr := ParseIperf3([]byte(r.Stdout))
	if perr != nil || r.Exit != 0 {
		return nil, fmt.Errorf("guest iperf3 exit %d (timed out: %v): %v; stderr: %s", r.Exit, r.TimedOut, perr, strings.TrimSpace(r.Stderr))
	}
	return res, nil
}

// BetweenGuestsIperf3 runs an iperf3 TCP stream for d from guest client to
// guest server, reached at addr: a one-off server (-1) on port, so a
// timed-out run leaves no listener behind for the next.
func BetweenGuestsIperf3(ctx context.Context, server, client *vm.VM, addr string, port int, d time.Duration) (*Iperf, error) {
	ctx, cancel := context.WithTimeout(ctx, d+runSlack)
	defer cancel()
	if _, err := server.Output(ctx, "iperf3", "-s", "-1", "-D", "-p", strconv.Itoa(port)); err != nil {
		return nil, fmt.Errorf("iperf3 server: %w", err)
	}
	if err := WaitListening(ctx, server, port); err != nil {
		return nil, err
	}
	r, err := client.Exec(ctx, iperfArgs(addr, port, d)...)
	if err != nil {
		return nil, err
	}
	res, perr := ParseIperf3([]byte(r.Stdout))
	if perr != nil || r.Exit != 0 {
		return nil, fmt.Errorf("iperf3 client exit %d (timed out: %v): %v; stderr: %s", r.Exit, r.TimedOut, perr, strings.TrimSpace(r.Stderr))
	}
	return res, nil
}

// HostIperf3 runs an iperf3 client in namespace ns for d, sending to the
// guest's iperf3 server at server (port IperfPort).
func HostIperf3(ctx context.Context, ns *hostnet.Namespace, server string, d time.Duration) (*Iperf, error) {
	ctx, cancel := context.WithTimeout(ctx, d+runSlack)
	defer cancel()
	out, err := ns.Run(ctx, iperfArgs(server, IperfPort, d)...)
	res, perr := ParseIperf3([]byte(out))
	if perr != nil {
		return nil, errors.Join(perr, err)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
