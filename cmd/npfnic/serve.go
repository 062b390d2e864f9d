package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// runServe implements `npfnic serve --socket PATH`: it serves one npfnic
// function over vfio-user to one client after another until ctx is
// cancelled (SIGINT/SIGTERM in main), then removes the socket.
func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	socket := fs.String("socket", "", "path of the vfio-user UNIX socket to create (required)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	wireSpec := fs.String("wire", "", "Ethernet port: "+port.SpecHelp+" (none: link down)")
	macFlag := fs.String("mac", "", "MAC address (default: 52:54:00:xx:xx:xx derived from the socket path)")
	pcap := fs.String("pcap", "", "record every frame of the port, both directions, in this pcap file (needs --wire)")
	queues := fs.Int("queues", hw.PairMax, fmt.Sprintf("number of queue pairs, 1..%d", hw.PairMax))
	handshake := fs.Duration("handshake-timeout", 5*time.Second, "drop a client that has not negotiated VERSION by then")
	stall := fs.Duration("stall-timeout", 5*time.Second, "drop a client that stops inside a message, or stops reading replies, for this long")
	handover := fs.Duration("handover-timeout", 10*time.Second, "how long a new client waits for the device while another session holds it or tears down")
	tf := addTraceFlags(fs)
	atc := fs.Int("atc-entries", 0, fmt.Sprintf("translation cache entries (4 KiB pages) the device starts with; the driver may change it (default %d)", ats.DefaultCapacity))
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic serve --socket PATH [--wire SPEC [--pcap FILE]] [--mac MAC] [--queues N] [--atc-entries N] [--trace FILE [--trace-events N]] [--log-level LEVEL] [--handshake-timeout D] [--stall-timeout D] [--handover-timeout D]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	if *socket == "" {
		fs.Usage()
		return errors.New("serve: --socket is required")
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToLower(*level))); err != nil {
		return fmt.Errorf("serve: bad --log-level %q", *level)
	}
	var mac net.HardwareAddr
	if *macFlag != "" {
		m, err := net.ParseMAC(*macFlag)
		if err != nil || len(m) != 6 || m[0]&1 != 0 {
			return fmt.Errorf("serve: bad --mac %q: want a unicast Ethernet address", *macFlag)
		}
		mac = m
	}
	if *handshake <= 0 || *stall <= 0 || *handover <= 0 {
		return errors.New("serve: --handshake-timeout, --stall-timeout and --handover-timeout must be positive")
	}
	if *queues < 1 || *queues > hw.PairMax {
		return fmt.Errorf("serve: --queues %d: want 1..%d", *queues, hw.PairMax)
	}
	if *pcap != "" && *wireSpec == "" {
		return errors.New("serve: --pcap needs --wire")
	}
	if *wireSpec != "" {
		// Reject a bad spec before touching the network or the socket.
		if _, err := port.ParseSpec(*wireSpec); err != nil {
			return fmt.Errorf("serve: --wire: %w", err)
		}
	}
	rec, err := tf.recorder()
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	var wirePort port.Port
	if *wireSpec != "" {
		p, err := port.OpenRecorded(*wireSpec, *pcap, logger.With("part", "wire"))
		if err != nil {
			return fmt.Errorf("serve: --wire: %w", err)
		}
		wirePort = p
	}
	// The NIC validates the rest of its options (--atc-entries).
	dev, err := npfnic.New(npfnic.Options{Logger: logger, Wire: wirePort, MAC: mac, MACSeed: *socket, QueuePairs: *queues,
		ATCCapacity: *atc, Trace: rec})
	if err != nil {
		if wirePort != nil {
			wirePort.Close()
		}
		return fmt.Errorf("serve: %w", err)
	}
	// Close stops the datapath and closes the wire, completing a pcap.
	defer dev.Close()
	err = vfiouser.ListenAndServeOptions(ctx, *socket, dev, vfiouser.Options{Logger: logger,
		HandshakeTimeout: *handshake, StallTimeout: *stall, HandoverTimeout: *handover})
	// The trace is written when the server stops (SIGINT, SIGTERM), with
	// the events of every client it served.
	return errors.Join(err, tf.write(rec, os.Stderr))
}
