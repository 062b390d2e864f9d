package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Server answers requests on one stream, each request in its own goroutine
// so a long command does not hold up a ping or a file copy.
type Server struct {
	// ModulesDir holds the .ko files and the load-order file for OpModload.
	ModulesDir string
	// LoadOrder is the file of "name: dep ... name" lines.
	LoadOrder string
}

// Serve reads requests until the stream fails.
func (s *Server) Serve(rw io.ReadWriter) error {
	c := NewConn(rw)
	for {
		line, err := c.ReadLine()
		if errors.Is(err, ErrLineTooLong) {
			continue
		}
		if err != nil {
			return err
		}
		var req Request
		if Decode(line, &req) != nil {
			continue // noise on the line
		}
		go func() { _ = c.Send(s.handle(req)) }()
	}
}

func (s *Server) handle(req Request) Response {
	resp := Response{ID: req.ID}
	var err error
	switch req.Op {
	case OpPing:
	case OpRun:
		resp, err = run(req)
	case OpPut:
		err = put(req)
	case OpGet:
		resp.Data, err = os.ReadFile(req.Path)
	case OpModload:
		resp.Stdout, err = s.modload(req.Modules)
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		resp.Err = err.Error()
		if resp.Exit == 0 {
			resp.Exit = -1
		}
	}
	return resp
}

func run(req Request) (Response, error) {
	resp := Response{ID: req.ID}
	if len(req.Argv) == 0 {
		return resp, errors.New("run: empty argv")
	}
	ctx := context.Background()
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.Timeout)*time.Millisecond)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...)
	// Its own process group, so a timeout kills everything it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A daemon started by the command may keep stdout open: stop waiting
	// for it shortly after the command itself exits.
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Stdin = bytes.NewReader(req.Stdin)
	err := cmd.Run()
	resp.Stdout, resp.Stderr = stdout.Bytes(), stderr.Bytes()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() == context.DeadlineExceeded:
		resp.TimedOut, resp.Exit = true, -1
	case errors.As(err, &exitErr):
		resp.Exit = exitErr.ExitCode()
		if resp.Exit < 0 {
			resp.Exit = 128 + int(exitErr.Sys().(syscall.WaitStatus).Signal())
		}
	case errors.Is(err, exec.ErrWaitDelay):
	default:
		return resp, err
	}
	return resp, nil
}

func put(req Request) error {
	if req.Path == "" {
		return errors.New("put: no path")
	}
	mode := os.FileMode(req.Mode)
	if mode == 0 {
		mode = 0o644
	}
	if err := os.MkdirAll(filepath.Dir(req.Path), 0o755); err != nil {
		return err
	}
	tmp := req.Path + ".agent-tmp"
	if err := os.WriteFile(tmp, req.Data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, req.Path)
}

// ParseLoadOrder reads "name: dep ... name" lines into a map.
func ParseLoadOrder(r io.Reader) map[string][]string {
	out := map[string][]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, deps, ok := strings.Cut(sc.Text(), ":")
		if ok {
			out[strings.TrimSpace(name)] = strings.Fields(deps)
		}
	}
	return out
}

// Modload loads modules (with dependencies) and reports what it loaded on stdout.
func (s *Server) Modload(names []string) error {
	out, err := s.modload(names)
	os.Stdout.Write(out)
	return err
}

// modload inserts each module after its dependencies, skipping loaded ones.
func (s *Server) modload(names []string) ([]byte, error) {
	f, err := os.Open(s.LoadOrder)
	if err != nil {
		return nil, err
	}
	order := ParseLoadOrder(f)
	f.Close()
	var log bytes.Buffer
	for _, n := range names {
		n = strings.ReplaceAll(n, "-", "_")
		seq, ok := order[n]
		if !ok {
			return log.Bytes(), fmt.Errorf("module %s is not shipped in this image", n)
		}
		for _, m := range seq {
			if _, err := os.Stat("/sys/module/" + m); err == nil {
				continue
			}
			if err := Insmod(filepath.Join(s.ModulesDir, m+".ko"), ""); err != nil {
				return log.Bytes(), fmt.Errorf("insmod %s: %w", m, err)
			}
			fmt.Fprintf(&log, "loaded %s\n", m)
		}
	}
	return log.Bytes(), nil
}

// Insmod loads a module file with parameters.
func Insmod(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.FinitModule(int(f.Fd()), params, 0)
}

// MakeRaw puts a tty into raw mode: no echo, no line editing, no flow control,
// no CR/LF translation, so the JSON lines pass through byte for byte.
func MakeRaw(fd int) error {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON | unix.IXOFF
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	return unix.IoctlSetTermios(fd, unix.TCSETS, t)
}
