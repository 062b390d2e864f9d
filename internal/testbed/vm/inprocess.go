package vm

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/trace"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// InProcessServer serves a device from a vfio-user server inside the test
// (or npfnic) process, so a test can look at the device model directly.
type InProcessServer struct {
	// New creates the device; nil creates an npfnic NIC with defaults.
	New func(log *slog.Logger) (vfiouser.Device, error)
	// Device, if set, receives the device New created.
	Device *vfiouser.Device
	// Wire attaches the default NIC's Ethernet port (port.ParseSpec syntax,
	// as `npfnic serve --wire`); empty leaves the link down. Pcap, if set,
	// records the port's frames in that file. Both are ignored when New is
	// set.
	Wire string
	Pcap string
	// Trace records the default NIC's events (package trace); nil records
	// nothing.
	Trace *trace.Recorder
	// RDMAMinAckTimeout is the default NIC's floor on its RC local ACK
	// timer (npfnic.Options.RDMAMinAckTimeout).
	RDMAMinAckTimeout time.Duration
}

// Start implements DeviceServer.
func (s InProcessServer) Start(ctx context.Context, socketPath string, log io.Writer) (func() error, error) {
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	newDev := s.New
	if newDev == nil {
		newDev = func(l *slog.Logger) (vfiouser.Device, error) {
			var wirePort port.Port
			if s.Wire != "" {
				p, err := port.OpenRecorded(s.Wire, s.Pcap, l)
				if err != nil {
					return nil, err
				}
				wirePort = p
			}
			n, err := npfnic.New(npfnic.Options{Logger: l, Wire: wirePort, MACSeed: socketPath, Trace: s.Trace,
				RDMAMinAckTimeout: s.RDMAMinAckTimeout})
			if err != nil && wirePort != nil {
				wirePort.Close()
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
	srv, err := vfiouser.NewServer(dev, vfiouser.Options{Logger: logger})
	if err != nil {
		closeDev()
		return nil, err
	}
	l, err := vfiouser.Listen(socketPath)
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
