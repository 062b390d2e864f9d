package agent

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pair connects a client to a server over an in-memory pipe; noise is
// written to the client's side of the line first, as boot messages would be.
func pair(t *testing.T, noise string) *Client {
	t.Helper()
	host, guest := net.Pipe()
	s := &Server{}
	go func() { _ = s.Serve(guest) }()
	if noise != "" {
		go func() { _, _ = io.WriteString(host, noise) }()
	}
	c := NewClient(host)
	t.Cleanup(func() { c.Close(); guest.Close() })
	return c
}

func TestRun(t *testing.T) {
	c := pair(t, "")
	tests := []struct {
		name     string
		argv     []string
		stdin    string
		timeout  time.Duration
		exit     int
		stdout   string
		stderr   string
		timedOut bool
	}{
		{name: "ok", argv: []string{"sh", "-c", "echo hello"}, stdout: "hello\n"},
		{name: "exit status reaches the host", argv: []string{"sh", "-c", "echo oops >&2; exit 7"}, exit: 7, stderr: "oops\n"},
		{name: "stdin", argv: []string{"cat"}, stdin: "abc", stdout: "abc"},
		{name: "timeout kills the process group", argv: []string{"sh", "-c", "sleep 30 & sleep 30"}, timeout: 300 * time.Millisecond, exit: -1, timedOut: true},
		{name: "killed by a signal", argv: []string{"sh", "-c", "kill -9 $$"}, exit: 137},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := c.Call(ctx, Request{Op: OpRun, Argv: tt.argv, Stdin: []byte(tt.stdin), Timeout: tt.timeout.Milliseconds()})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Exit != tt.exit || string(resp.Stdout) != tt.stdout || string(resp.Stderr) != tt.stderr || resp.TimedOut != tt.timedOut {
				t.Errorf("got exit=%d stdout=%q stderr=%q timedOut=%v, want %d %q %q %v",
					resp.Exit, resp.Stdout, resp.Stderr, resp.TimedOut, tt.exit, tt.stdout, tt.stderr, tt.timedOut)
			}
		})
	}
}

func TestRunMissingProgram(t *testing.T) {
	c := pair(t, "")
	_, err := c.Call(context.Background(), Request{Op: OpRun, Argv: []string{"/nonexistent/prog"}})
	if err == nil || !strings.Contains(err.Error(), "nonexistent") {
		t.Fatalf("want an error naming the program, got %v", err)
	}
}

func TestPutGet(t *testing.T) {
	c := pair(t, "boot noise\r\n[  0.1] more noise {not json\n")
	path := filepath.Join(t.TempDir(), "sub", "f")
	data := bytes.Repeat([]byte{0, 1, 2, 0xff, '\n'}, 10000)
	ctx := context.Background()
	if _, err := c.Call(ctx, Request{Op: OpPut, Path: path, Data: data, Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("stat: %v %v", fi, err)
	}
	resp, err := c.Call(ctx, Request{Op: OpGet, Path: path})
	if err != nil || !bytes.Equal(resp.Data, data) {
		t.Fatalf("get: %v, equal=%v", err, bytes.Equal(resp.Data, data))
	}
	if _, err := c.Call(ctx, Request{Op: OpGet, Path: path + ".missing"}); err == nil {
		t.Fatal("get of a missing file succeeded")
	}
	if _, err := c.Call(ctx, Request{Op: "bogus"}); err == nil {
		t.Fatal("unknown op succeeded")
	}
}

// TestEchoedRequestIsNotAResponse: a serial port echoes input until the agent
// makes it raw; the echo of a request must not be taken for its answer.
func TestEchoedRequestIsNotAResponse(t *testing.T) {
	host, guest := net.Pipe()
	c := NewClient(host)
	defer c.Close()
	go func() {
		line, _ := NewConn(guest).ReadLine()
		_, _ = guest.Write(append(line, '\r', '\n')) // the echo
		var req Request
		_ = Decode(line, &req)
		_ = NewConn(guest).Send(Response{ID: req.ID, Exit: 5})
	}()
	resp, err := c.Call(context.Background(), Request{Op: OpRun, Argv: []string{"x"}})
	if err != nil || resp.Exit != 5 {
		t.Fatalf("got %+v, %v; want the real response with exit 5", resp, err)
	}
}

func TestConnectionLossFailsCalls(t *testing.T) {
	host, guest := net.Pipe()
	c := NewClient(host)
	guest.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Call(ctx, Request{Op: OpPing}); err == nil {
		t.Fatal("call over a closed connection succeeded")
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("Done not closed after the connection was lost")
	}
}

func TestParseLoadOrder(t *testing.T) {
	got := ParseLoadOrder(strings.NewReader("rdma_rxe: crc32_generic ib_core rdma_rxe\nbad line\ne1000e: ptp e1000e\n"))
	if strings.Join(got["rdma_rxe"], " ") != "crc32_generic ib_core rdma_rxe" || len(got["e1000e"]) != 2 || len(got) != 2 {
		t.Fatalf("ParseLoadOrder = %v", got)
	}
}
