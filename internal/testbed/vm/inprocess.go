package vm

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/npfnic/npfnic/ethring/wire"
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
	// Wire attaches the default NIC's Ethernet port (wire.ParseSpec syntax,
	// as `npfnic serve --wire`); empty leaves the link down. Pcap, if set,
	// records the port's frames in that file. Both are ignored when New is
	// set.
	Wire string
	Pcap string
}

// Start implements DeviceServer.
func (s InProcessServer) Start(ctx context.Context, socketPath string, log io.Writer) (func() error, error) {
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	newDev := s.New
	if newDev == nil {
		newDev = func(l *slog.Logger) (vdevice.Device, error) {
			var port wire.Port
			if s.Wire != "" {
				p, err := wire.OpenRecorded(s.Wire, s.Pcap, l)
				if err != nil {
					return nil, err
				}
				port = p
			}
			n, err := nic.New(nic.Options{Logger: l, Wire: port, MACSeed: socketPath})
			if err != nil && port != nil {
				port.Close()
			}
			return n, err
		}
	}
	dev, err := newDev(logger)
	if err != nil {
		return nil, err
	}
	// The device's goroutines and wire are released when the server stops.
	closeDev := func() error {
		if c, ok := dev.(io.Closer); ok {
			return c.Close()
		}
		return nil
	}
	if s.Device != nil {
		*s.Device = dev
	}
	srv, err := vdevice.NewServer(dev, vdevice.Options{Logger: logger})
	if err != nil {
		closeDev()
		return nil, err
	}
	l, err := vdevice.Listen(socketPath)
	if err != nil {
		closeDev()
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, l) }()
	return func() error {
		cancel()
		l.Close()
		err := <-done
		return errors.Join(err, closeDev())
	}, nil
}
