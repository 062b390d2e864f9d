package datapath

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/hostnet"
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// guestIP is iproute2's ip in the guest image (u-root's own ip is at /bbin/ip).
const guestIP = "/usr/sbin/ip"

// guest drives the guest side of a run through the agent.
type guest struct{ v *vm.VM }

// run runs argv in the guest; a non-zero exit is an error with the output.
func (g guest) run(ctx context.Context, argv ...string) (string, error) {
	r, err := g.v.Exec(ctx, argv...)
	if err != nil {
		return "", err
	}
	if r.Exit != 0 || r.TimedOut {
		return r.Stdout, fmt.Errorf("guest %s: exit %d (timed out: %v): %s%s", strings.Join(argv, " "), r.Exit, r.TimedOut, r.Stdout, r.Stderr)
	}
	return r.Stdout, nil
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
	if _, err := g.run(ctx, "iperf3", "-s", "-D", "-p", strconv.Itoa(iperfPort)); err != nil {
		return fmt.Errorf("guest iperf3 server: %w", err)
	}
	// 256 MiB of cache holds every object memaslap's windows create, so
	// no get misses come from eviction.
	if _, err := g.run(ctx, "memcached", "-u", "root", "-d", "-p", strconv.Itoa(memcachedPort), "-U", "0", "-m", "256", "-t", "1"); err != nil {
		return fmt.Errorf("guest memcached: %w", err)
	}
	return g.waitListening(ctx, iperfPort, memcachedPort)
}

// waitListening polls the guest's /proc/net/tcp{,6} (at most 30 s) until
// every port has a listening socket.
func (g guest) waitListening(ctx context.Context, ports ...int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		listening := map[int]bool{}
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			data, err := g.v.Get(ctx, f)
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
func iperfArgs(server string, d time.Duration) []string {
	return []string{"iperf3", "-c", server, "-p", strconv.Itoa(iperfPort), "-t", strconv.Itoa(int(d / time.Second)),
		"--connect-timeout", "10000", "-J"}
}

// runSlack bounds a measurement beyond its nominal duration (connection
// setup, result exchange, a slow TCG guest).
const runSlack = 90 * time.Second

// iperfClient sends from the guest to the host's iperf3 server.
func (g guest) iperfClient(ctx context.Context, server string, d time.Duration) (*Iperf, error) {
	ctx, cancel := context.WithTimeout(ctx, d+runSlack)
	defer cancel()
	r, err := g.v.Exec(ctx, iperfArgs(server, d)...)
	if err != nil {
		return nil, err
	}
	res, perr := ParseIperf3([]byte(r.Stdout))
	if perr != nil || r.Exit != 0 {
		return nil, fmt.Errorf("guest iperf3 exit %d (timed out: %v): %v; stderr: %s", r.Exit, r.TimedOut, perr, strings.TrimSpace(r.Stderr))
	}
	return res, nil
}

// hostIperfClient sends from the namespace to the guest's iperf3 server.
func hostIperfClient(ctx context.Context, ns *hostnet.Namespace, server string, d time.Duration) (*Iperf, error) {
	ctx, cancel := context.WithTimeout(ctx, d+runSlack)
	defer cancel()
	out, err := ns.Run(ctx, iperfArgs(server, d)...)
	res, perr := ParseIperf3([]byte(out))
	if perr != nil {
		return nil, errors.Join(perr, err)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// memaslapBinary finds memaslap; Debian's libmemcached-tools (1.1)
// installs it as memcaslap.
func memaslapBinary() (string, error) {
	for _, n := range []string{"memaslap", "memcaslap"} {
		if p, err := lookPath(n); err == nil {
			return p, nil
		}
	}
	return "", errors.New("neither memaslap nor memcaslap is installed (Debian package libmemcached-tools)")
}

var lookPath = exec.LookPath

// runMemaslap drives memcached in the guest from the namespace for d, with
// conc connections on one thread, verifying a tenth of the values it gets.
func runMemaslap(ctx context.Context, ns *hostnet.Namespace, server string, d time.Duration, conc int) (*Memaslap, error) {
	bin, err := memaslapBinary()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d+runSlack)
	defer cancel()
	cmd := ns.Command(ctx, bin, "-s", fmt.Sprintf("%s:%d", server, memcachedPort),
		"-T", "1", "-c", strconv.Itoa(conc), "-t", fmt.Sprintf("%ds", int(d/time.Second)),
		"-w", "1k", "-v", "0.1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	res, err := ParseMemaslap(stdout.String(), stderr.String())
	if err != nil {
		return nil, fmt.Errorf("%w (exit: %v)\nstdout: %s\nstderr: %s", err, runErr, tailString(stdout.String(), 1500), tailString(stderr.String(), 1500))
	}
	if runErr != nil {
		return nil, fmt.Errorf("%s: %v\nstderr: %s", bin, runErr, tailString(stderr.String(), 1500))
	}
	if min := 0.8 * d.Seconds(); res.RunTime < min {
		// memaslap stops early when every connection dropped.
		res.Errors++
		res.ErrorLines = append(res.ErrorLines, fmt.Sprintf("ran %.1fs of %.0fs: connections dropped", res.RunTime, d.Seconds()))
	}
	return res, nil
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
