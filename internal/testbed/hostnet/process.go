package hostnet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/child"
)

// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// Process is a background program (a server) running in a namespace.
// Namespace.Close stops it if Stop was not called first.
type Process struct {
	argv []string
	ns   *Namespace
	cmd  *exec.Cmd

	out      lockedBuffer // stdout and stderr, interleaved
	done     chan struct{}
	waitErr  error
	stopOnce sync.Once
	stopping chan struct{}
}

// Start starts argv in the background inside the namespace, in its own
// process group, killed if this process dies. Its output is kept (Output).
func (ns *Namespace) Start(argv ...string) (*Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("hostnet: Start: empty argv")
	}
	p := &Process{argv: argv, ns: ns, done: make(chan struct{}), stopping: make(chan struct{})}
	if err := ns.track(p, nil); err != nil {
		return nil, err
	}
	// Not Command: the process must outlive the caller's context.
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", ns.name}, argv...)...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	// Forked from a thread that never exits: see package child.
	if err := child.Start(p.cmd, syscall.SIGKILL, true); err != nil {
		close(p.done)
		return nil, fmt.Errorf("hostnet: start %s in %s: %w", strings.Join(argv, " "), ns, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id (ip netns exec becomes the program itself).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Argv is the command line.
func (p *Process) Argv() []string { return p.argv }

// Output is what the process printed so far (stdout and stderr).
func (p *Process) Output() string { return p.out.String() }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Stop ends the process group: SIGTERM, then SIGKILL after a grace period.
// It returns an error only if the process had already exited on its own
// with a failure (a server that died under the test), with its output.
// Calling it again returns the same result.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() {
		select {
		case <-p.done:
			return // exited on its own: report it below
		default:
		}
		close(p.stopping)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	select {
	case <-p.stopping:
		return nil
	default:
	}
	if p.waitErr != nil {
		return p.exitError("exited before Stop")
	}
	return nil
}

func (p *Process) exitError(what string) error {
	return fmt.Errorf("hostnet: %s in %s %s (%v): %s", strings.Join(p.argv, " "), p.ns, what, p.waitErr, tail(strings.TrimSpace(p.Output()), 2000))
}

// WaitListening waits until the process (or one in its namespace) has a
// TCP socket listening on port, reading /proc/PID/net/tcp and tcp6, which
// show the process's own namespace; it never connects. It fails at once
// if the process exits.
func (p *Process) WaitListening(ctx context.Context, port int) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, f := range []string{"tcp", "tcp6"} {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", p.Pid(), f))
			if err != nil {
				continue // exiting, or no IPv6
			}
			ports, err := ListeningPorts(data)
			if err == nil && ports[port] {
				return nil
			}
		}
		select {
		case <-p.done:
			return p.exitError(fmt.Sprintf("exited before listening on port %d", port))
		case <-ctx.Done():
			return fmt.Errorf("hostnet: %s in %s does not listen on port %d: %w\n%s", strings.Join(p.argv, " "), p.ns, port, ctx.Err(), tail(p.Output(), 1000))
		case <-tick.C:
		}
	}
}

// StartIperf3Server starts "iperf3 -s -p PORT" in the namespace and waits
// (at most 15 s, less if ctx says so) until it listens. Stop it with
// Process.Stop or let Namespace.Close do it.
func (ns *Namespace) StartIperf3Server(ctx context.Context, port int) (*Process, error) {
	p, err := ns.Start("iperf3", "-s", "-p", strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := p.WaitListening(wctx, port); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// ListeningPorts parses the /proc/net/tcp (or tcp6) format and returns the
// local ports of the sockets in LISTEN state. It serves host processes and
// guests alike (read a guest's file through its agent).
func ListeningPorts(procNetTCP []byte) (map[int]bool, error) {
	const listen = "0A"
	ports := map[int]bool{}
	sc := bufio.NewScanner(bytes.NewReader(procNetTCP))
	first := true
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if first {
			first = false
			if len(f) < 4 || f[0] != "sl" || f[1] != "local_address" {
				return nil, fmt.Errorf("hostnet: not a /proc/net/tcp table (header %q)", sc.Text())
			}
			continue
		}
		if len(f) < 4 {
			continue
		}
		_, portHex, ok := strings.Cut(f[1], ":")
		if !ok || f[3] != listen {
			continue
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("hostnet: bad local address %q", f[1])
		}
		ports[int(port)] = true
	}
	if first {
		return nil, errors.New("hostnet: empty /proc/net/tcp table")
	}
	return ports, sc.Err()
}

// lockedBuffer is a bytes.Buffer safe for a writer and readers at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// maxKeep bounds the output kept per process.
const maxKeep = 1 << 20

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len()+len(p) > maxKeep {
		// Keep the newest output; a server's last words matter most.
		keep := b.buf.Bytes()
		drop := b.buf.Len() + len(p) - maxKeep
		if drop > len(keep) {
			drop = len(keep)
		}
		rest := append([]byte(nil), keep[drop:]...)
		b.buf.Reset()
		b.buf.Write(rest)
	}
	b.buf.Write(p)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
