package vm

import (
	"context"
	"io"
	"log/slog"

	"github.com/npfnic/npfnic/vdevice"
	"github.com/npfnic/npfnic/vdevice/nic"
)

// InProcessServer serves a device from a vfio-user server inside the test
// (or npfnic) process, so a test can look at the device model directly.
type InProcessServer struct {
	// New creates the device; nil creates an npfnic NIC with defaults.
	New func(log *slog.Logger) (vdevice.Device, error)
	// Device, if set, receives the device New created.
	Device *vdevice.Device
}

// Start implements DeviceServer.
func (s InProcessServer) Start(ctx context.Context, socketPath string, log io.Writer) (func() error, error) {
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	newDev := s.New
	if newDev == nil {
		newDev = func(l *slog.Logger) (vdevice.Device, error) { return nic.New(nic.Options{Logger: l}) }
	}
	dev, err := newDev(logger)
	if err != nil {
		return nil, err
	}
	if s.Device != nil {
		*s.Device = dev
	}
	srv, err := vdevice.NewServer(dev, vdevice.Options{Logger: logger})
	if err != nil {
		return nil, err
	}
	l, err := vdevice.Listen(socketPath)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, l) }()
	return func() error {
		cancel()
		l.Close()
		return <-done
	}, nil
}
