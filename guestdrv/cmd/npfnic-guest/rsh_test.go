package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rshListener serves rshHandle on a loopback port and returns its address.
func rshListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _ = rshHandle(c) }()
		}
	}()
	return l.Addr().String()
}

func TestRSHRunsAsSSHWould(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	addr := rshListener(t)
	big := strings.Repeat("x", 3*rshMaxFrame/2) // more than one frame
	f := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(f, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv           []string
		stdout, stderr string
		status         int
	}{
		// The words are joined by spaces and run by the shell, quotes and all.
		{argv: []string{"echo", `"a  b"`, ";", "echo", "err", ">&2"}, stdout: "a  b\n", stderr: "err\n"},
		{argv: []string{"exit", "3"}, status: 3},
		{argv: []string{"kill", "-9", "$$"}, status: 128 + 9},
		{argv: []string{"cat", f}, stdout: big},
		{argv: []string{"/nonexistent/program"}, status: 127, stderr: "not found"},
	} {
		var o, e bytes.Buffer
		status, err := rshRun(addr, tc.argv, &o, &e)
		if err != nil {
			t.Fatalf("%q: %v", tc.argv, err)
		}
		if status != tc.status || o.String() != tc.stdout || !strings.Contains(e.String(), tc.stderr) {
			t.Errorf("%q: status %d, stdout %.40q, stderr %q; want %d, %.40q, %q", tc.argv, status, o.String(), e.String(), tc.status, tc.stdout, tc.stderr)
		}
	}
}

// A client that goes away ends its command, as mpirun ending its ssh
// agents ends their daemons.
func TestRSHHangUpEndsTheCommand(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		done <- rshHandle(c)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(`{"cmd":"sleep 60"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	c.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the command still runs 10 s after its client went away")
	}
}

func TestRSHRejectsGarbage(t *testing.T) {
	addr := rshListener(t)
	for _, req := range []string{"not json\n", `{"cmd":""}` + "\n"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte(req))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(make([]byte, 16))
		if n != 0 || err == nil || strings.Contains(err.Error(), "timeout") {
			t.Errorf("%q: read %d bytes, %v; want the connection closed", req, n, err)
		}
		c.Close()
	}
}
