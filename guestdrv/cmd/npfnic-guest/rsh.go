package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// The remote shell of two guests on a private cable, for Open MPI's
// launcher: mpirun starts its daemon (orted) on the other guest through
// an "rsh agent", ssh by default, which the guests do not have. One guest
// serves (rsh-serve ADDR), and mpirun runs `npfnic-guest rsh HOST
// COMMAND...` as its agent (--mca plm_rsh_agent "npfnic-guest rsh"),
// which runs COMMAND with /bin/sh on HOST, as ssh does: its words joined
// by spaces, its output and exit status relayed. It authenticates no one:
// it is for guests whose only network is the test's cable.
//
// The protocol, over one TCP connection per command: the client sends one
// JSON line {"cmd": "..."}; the server answers with frames of a type byte
// (rshStdout, rshStderr, rshExit), a 32-bit big-endian length and that
// many bytes, the exit frame last (a 32-bit status). A client that goes
// away (mpirun killing its agent) kills the command's process group.

// RSHPort is the port rsh-serve listens on and rsh connects to.
const RSHPort = "5199"

const (
	rshStdout byte = 1
	rshStderr byte = 2
	rshExit   byte = 3
	// rshMaxFrame bounds a frame's length, against a confused peer.
	rshMaxFrame = 1 << 20
)

type rshRequest struct {
	Cmd string `json:"cmd"`
}

// rshServe accepts commands on addr (HOST:PORT, or HOST for RSHPort)
// until the listener fails.
func rshServe(addr string) error {
	if !strings.Contains(addr, ":") {
		addr = net.JoinHostPort(addr, RSHPort)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer l.Close()
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			if err := rshHandle(c); err != nil {
				fmt.Fprintf(os.Stderr, "npfnic-guest rsh-serve: %s: %v\n", c.RemoteAddr(), err)
			}
		}()
	}
}

// frameWriter writes frames from several goroutines.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) frame(typ byte, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var h [5]byte
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:], uint32(len(b)))
	if _, err := f.w.Write(h[:]); err != nil {
		return err
	}
	_, err := f.w.Write(b)
	return err
}

// stream is an io.Writer that frames what it is given as one type.
type stream struct {
	f   *frameWriter
	typ byte
}

func (s stream) Write(b []byte) (int, error) {
	for rest := b; len(rest) > 0; {
		n := min(len(rest), rshMaxFrame)
		if err := s.f.frame(s.typ, rest[:n]); err != nil {
			return 0, err
		}
		rest = rest[n:]
	}
	return len(b), nil
}

func rshHandle(c net.Conn) error {
	r := bufio.NewReader(c)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	var req rshRequest
	if err := json.Unmarshal(line, &req); err != nil || req.Cmd == "" {
		return fmt.Errorf("bad request %q: %v", line, err)
	}
	f := &frameWriter{w: c}
	cmd := exec.Command("/bin/sh", "-c", req.Cmd)
	cmd.Stdout, cmd.Stderr = stream{f, rshStdout}, stream{f, rshStderr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return f.frame(rshExit, binary.BigEndian.AppendUint32(nil, 127))
	}
	// The client closing its end ends the command, as ssh's hang-up does.
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, r)
		close(gone)
	}()
	exited := make(chan struct{})
	go func() {
		select {
		case <-gone:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		case <-exited:
		}
	}()
	err = cmd.Wait()
	close(exited)
	status := 0
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		status = ee.ExitCode()
		if status < 0 {
			status = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
	default:
		status = 255
	}
	return f.frame(rshExit, binary.BigEndian.AppendUint32(nil, uint32(status)))
}

// rshRun runs cmd on host (HOST or HOST:PORT) through its rsh-serve,
// copies its output to stdout and stderr, and returns its exit status.
func rshRun(host string, cmd []string, stdout, stderr io.Writer) (int, error) {
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, RSHPort)
	}
	c, err := net.Dial("tcp", host)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	req, _ := json.Marshal(rshRequest{Cmd: strings.Join(cmd, " ")})
	if _, err := c.Write(append(req, '\n')); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	for {
		var h [5]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return 0, fmt.Errorf("%s: connection lost before the exit status: %w", host, err)
		}
		n := binary.BigEndian.Uint32(h[1:])
		if n > rshMaxFrame {
			return 0, fmt.Errorf("%s: frame of %d bytes", host, n)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return 0, fmt.Errorf("%s: %w", host, err)
		}
		switch h[0] {
		case rshStdout:
			_, _ = stdout.Write(b)
		case rshStderr:
			_, _ = stderr.Write(b)
		case rshExit:
			if n != 4 {
				return 0, fmt.Errorf("%s: exit frame of %d bytes", host, n)
			}
			return int(binary.BigEndian.Uint32(b)), nil
		default:
			return 0, fmt.Errorf("%s: frame type %d", host, h[0])
		}
	}
}
