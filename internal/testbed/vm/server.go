package vm

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/child"
)

// DeviceServer serves one npfnic device's vfio-user socket.
type DeviceServer interface {
	// Start serves on socketPath, logging to log, and returns once the
	// socket accepts connections; stop ends the server.
	Start(ctx context.Context, socketPath string, log io.Writer) (stop func() error, err error)
}

// ExternalServer runs "npfnic serve" (or another binary taking --socket) as
// a separate process.
type ExternalServer struct {
	Binary string   // path to the npfnic binary
	Args   []string // extra flags after "serve --socket PATH"
}

// Start implements DeviceServer.
func (e ExternalServer) Start(ctx context.Context, socketPath string, log io.Writer) (func() error, error) {
	args := append([]string{"serve", "--socket", socketPath}, e.Args...)
	cmd := exec.Command(e.Binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// SIGTERM when this process dies: the server removes its socket.
	if err := child.Start(cmd, syscall.SIGTERM, true); err != nil {
		return nil, fmt.Errorf("start %s: %w", e.Binary, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		return nil
	}
	if err := waitSocket(ctx, socketPath, exited); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// waitSocket waits until the server has bound its unix socket (a bound
// listening socket accepts into its backlog, so QEMU may connect from then
// on); it does not connect, which the server would log as a client.
func waitSocket(ctx context.Context, path string, exited <-chan error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("process exited before listening on %s: %v", path, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after 15 s", path)
		}
	}
}
