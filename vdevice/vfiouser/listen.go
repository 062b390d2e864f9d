package vfiouser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"
)

// ListenAndServe creates the socket at socketPath and serves dev to one
// client after another until ctx is cancelled, then removes the socket and
// returns nil.
//
// A socket file left behind by a dead server is removed; if a live server
// answers on it, ListenAndServe fails instead of stealing its path. Any
// other kind of file at socketPath is never deleted.
func ListenAndServe(ctx context.Context, socketPath string, dev Device, logger *slog.Logger) error {
	return ListenAndServeOptions(ctx, socketPath, dev, Options{Logger: logger})
}

// ListenAndServeOptions is ListenAndServe with server options.
func ListenAndServeOptions(ctx context.Context, socketPath string, dev Device, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	logger := opts.Logger
	srv, err := NewServer(dev, opts)
	if err != nil {
		return err
	}
	l, err := Listen(socketPath)
	if err != nil {
		return err
	}
	defer l.Close()
	logger.Info("serving vfio-user device", "socket", socketPath)
	err = srv.Serve(ctx, l)
	logger.Info("server stopped", "socket", socketPath)
	return err
}

// Listen opens a UNIX stream listener at path, clearing a stale socket
// first. The socket file is removed when the listener closes.
func Listen(path string) (*net.UnixListener, error) {
	if err := clearStale(path); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("vdevice: %w", err) // "listen unix PATH: ..."
	}
	l.SetUnlinkOnClose(true)
	return l, nil
}

func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("vdevice: socket path %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("vdevice: %s exists and is not a socket; refusing to replace it", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("vdevice: %s is in use by a running server", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("vdevice: remove stale socket %s: %w", path, err)
	}
	return nil
}
