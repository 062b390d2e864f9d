// Package hostnet is the host side of a guest's network link for VM tests
// and experiments: network namespaces that hold the host end of every guest
// link (so test traffic never leaves namespaces the test created), tap and
// veth devices moved into them, addresses, commands and background servers
// (iperf3 -s) run inside a namespace, and unique names so several tests and
// VMs can run at once. Everything it creates is removed by Close, also after
// a failure; ReapStale removes what a killed process left behind.
//
// The usual sequence for a guest NIC on a tap:
//
//	ns, _ := hostnet.NewUniqueNamespace("dp")    // defer ns.Close()
//	tap, _ := hostnet.CreateTap(name)            // in the root namespace
//	// start QEMU with -netdev tap,ifname=name: it opens the tap by name
//	hostnet.MoveToNamespace(tap, ns)             // the open fd stays attached
//	tap.AddAddr(ctx, "10.77.1.1/24"); tap.Up(ctx)
//	srv, _ := ns.StartIperf3Server(ctx, 5201)    // stopped by ns.Close
//	out, _ := ns.Run(ctx, "iperf3", "-c", "10.77.1.2", "-J")
//
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's ip.
package hostnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// NetnsDir is where iproute2 keeps named network namespaces.
const NetnsDir = "/run/netns"

// ipTimeout bounds every ip(8) invocation.
const ipTimeout = 15 * time.Second

// Namespace is a named network namespace created by this package. Close
// stops the processes started in it, deletes the links moved into it and
// deletes it.
type Namespace struct {
	name string

	mu     sync.Mutex
	closed bool
	links  []*Link
	procs  []*Process
}

// NewNamespace creates the network namespace name (ip netns add) with its
// loopback up. It fails if the namespace exists.
func NewNamespace(name string) (*Namespace, error) {
	if err := validNetnsName(name); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	if _, err := ip(ctx, "netns", "add", name); err != nil {
		return nil, err
	}
	ns := &Namespace{name: name}
	if _, err := ip(ctx, "-n", name, "link", "set", "dev", "lo", "up"); err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
}

// NewUniqueNamespace creates a namespace named by UniqueName(prefix).
func NewUniqueNamespace(prefix string) (*Namespace, error) {
	var lastErr error
	for range 5 { // another process may take the name between check and use
		name, err := UniqueName(prefix)
		if err != nil {
			return nil, err
		}
		ns, err := NewNamespace(name)
		if err == nil {
			return ns, nil
		}
		lastErr = err
		if !nameInUse(name) {
			return nil, err
		}
	}
	return nil, lastErr
}

func validNetnsName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/ \t\n") || len(name) > 64 {
		return fmt.Errorf("hostnet: namespace name %q: want 1 to 64 bytes without '/' or white space", name)
	}
	return nil
}

// Name is the namespace's name, as ip netns knows it.
func (ns *Namespace) Name() string { return ns.name }

// Path is the namespace's file under NetnsDir.
func (ns *Namespace) Path() string { return filepath.Join(NetnsDir, ns.name) }

func (ns *Namespace) String() string { return "netns " + ns.name }

// Command prepares argv to run inside the namespace (ip netns exec). The
// command gets its own process group, and a cancelled ctx kills the whole
// group, so nothing it started outlives it.
func (ns *Namespace) Command(ctx context.Context, argv ...string) *exec.Cmd {
	args := append([]string{"netns", "exec", ns.name}, argv...)
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// Run runs argv inside the namespace and returns its standard output. A
// non-zero exit, a timeout or anything else that went wrong is a
// *CommandError holding both outputs.
func (ns *Namespace) Run(ctx context.Context, argv ...string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("hostnet: Run: empty argv")
	}
	cmd := ns.Command(ctx, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return stdout.String(), &CommandError{Argv: argv, Where: ns.String(), Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
	}
	return stdout.String(), nil
}

// Do calls f on an OS thread that has entered the namespace: sockets f
// opens belong to the namespace and stay usable from any goroutine after f
// returns. The thread is discarded afterwards, never reused by Go.
func (ns *Namespace) Do(f func() error) error {
	fd, err := unix.Open(ns.Path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("hostnet: open %s: %w", ns.Path(), err)
	}
	defer unix.Close(fd)
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the goroutine's exit terminates the thread,
		// so no other goroutine runs in the namespace.
		runtime.LockOSThread()
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("hostnet: enter %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// track registers a process or link for Close; it fails once Close began.
func (ns *Namespace) track(p *Process, l *Link) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.closed {
		return fmt.Errorf("hostnet: %s is closed", ns)
	}
	if p != nil {
		ns.procs = append(ns.procs, p)
	}
	if l != nil {
		ns.links = append(ns.links, l)
	}
	return nil
}

func (ns *Namespace) untrack(l *Link) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for i, x := range ns.links {
		if x == l {
			ns.links = append(ns.links[:i], ns.links[i+1:]...)
			return
		}
	}
}

// Close stops the processes started in the namespace, deletes the links
// moved into it and deletes it. It is safe to call more than once.
func (ns *Namespace) Close() error {
	ns.mu.Lock()
	if ns.closed {
		ns.mu.Unlock()
		return nil
	}
	ns.closed = true
	procs, links := ns.procs, ns.links
	ns.procs, ns.links = nil, nil
	ns.mu.Unlock()

	var errs []error
	for _, p := range procs {
		p.Stop() // its exit status is not a cleanup failure
	}
	for _, l := range links {
		if err := l.delete(ns); err != nil {
			errs = append(errs, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	if _, err := ip(ctx, "netns", "delete", ns.name); err != nil && nsExists(ns.name) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func nsExists(name string) bool {
	_, err := os.Lstat(filepath.Join(NetnsDir, name))
	return err == nil
}

// CommandError is a command that failed, with what it printed.
type CommandError struct {
	Argv           []string
	Where          string // "netns NAME" or "host"
	Stdout, Stderr string
	Err            error
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("%s (in %s): %v", strings.Join(e.Argv, " "), e.Where, e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + tail(s, 2000)
	} else if s := strings.TrimSpace(e.Stdout); s != "" {
		msg += ": " + tail(s, 2000)
	}
	return msg
}

func (e *CommandError) Unwrap() error { return e.Err }

// ip runs iproute2's ip in the root namespace.
func ip(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &CommandError{Argv: append([]string{"ip"}, args...), Where: "host", Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
	}
	return stdout.String(), nil
}

// tail keeps the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
