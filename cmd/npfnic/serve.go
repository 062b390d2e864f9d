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
	minAck := fs.Duration("rdma-min-ack-timeout", 0, "floor on the RDMA engine's local ACK timer, whatever timeout a QP asks for (0: none); a peer in a TCG guest on a loaded host stalls longer than seven 67 ms retries")
	atc := fs.Int("atc-entries", 0, fmt.Sprintf("translation cache entries (4 KiB pages) the device starts with; the driver may change it (default %d)", ats.DefaultCapacity))
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic serve --socket PATH [--wire SPEC [--pcap FILE]] [--mac MAC] [--queues N] [--atc-entries N] [--rdma-min-ack-timeout D] [--trace FILE [--trace-events N]] [--log-level LEVEL] [--handshake-timeout D] [--stall-timeout D] [--handover-timeout D]\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// The command line is checked whole before the network or the
	// socket is touched. Errors name the flag; main prefixes the command.
	if *minAck < 0 || *minAck > time.Minute {
		return usageErrorf("--rdma-min-ack-timeout %v: want 0 to 1m", *minAck)
	}
	if *socket == "" {
		return usageErrorf("--socket is required")
	}
	if err := checkOutFile("--socket", *socket); err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToLower(*level))); err != nil {
		return usageErrorf("--log-level %q: want debug, info, warn or error", *level)
	}
	var mac net.HardwareAddr
	if *macFlag != "" {
		m, err := net.ParseMAC(*macFlag)
		if err != nil || len(m) != 6 || m[0]&1 != 0 {
			return usageErrorf("--mac %q: want a unicast Ethernet address, e.g. 52:54:00:12:34:56", *macFlag)
		}
		mac = m
	}
	if *handshake <= 0 || *stall <= 0 || *handover <= 0 {
		return usageErrorf("--handshake-timeout, --stall-timeout and --handover-timeout must be positive")
	}
	if *queues < 1 || *queues > hw.PairMax {
		return usageErrorf("--queues %d: want 1 to %d", *queues, hw.PairMax)
	}
	if *atc < 0 || *atc > hw.ATCCapacityMax {
		return usageErrorf("--atc-entries %d: want 1 to %d (0: %d)", *atc, hw.ATCCapacityMax, ats.DefaultCapacity)
	}
	if *pcap != "" && *wireSpec == "" {
		return usageErrorf("--pcap needs --wire")
	}
	if *pcap != "" {
		if err := checkOutFile("--pcap", *pcap); err != nil {
			return err
		}
	}
	if *wireSpec != "" {
		// port's errors say "wire:" already.
		if _, err := port.ParseSpec(*wireSpec); err != nil {
			return badUsage(err)
		}
	}
	rec, err := tf.recorder()
	if err != nil {
		return badUsage(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	var wirePort port.Port
	if *wireSpec != "" {
		p, err := port.OpenRecorded(*wireSpec, *pcap, logger.With("part", "wire"))
		if err != nil {
			if spec, _ := port.ParseSpec(*wireSpec); spec.Kind == "tap" && errors.Is(err, os.ErrPermission) {
				err = fmt.Errorf("%w: --wire %s needs root or CAP_NET_ADMIN; use --wire stream:unix:PATH without", err, *wireSpec)
			}
			return err
		}
		wirePort = p
	}
	dev, err := npfnic.New(npfnic.Options{Logger: logger, Wire: wirePort, MAC: mac, MACSeed: *socket, QueuePairs: *queues,
		ATCCapacity: *atc, Trace: rec, RDMAMinAckTimeout: *minAck})
	if err != nil {
		if wirePort != nil {
			wirePort.Close()
		}
		return err
	}
	// Close stops the datapath and closes the wire, completing a pcap.
	defer dev.Close()
	err = vfiouser.ListenAndServeOptions(ctx, *socket, dev, vfiouser.Options{Logger: logger,
		HandshakeTimeout: *handshake, StallTimeout: *stall, HandoverTimeout: *handover})
	// The trace is written when the server stops (SIGINT, SIGTERM), with
	// the events of every client it served.
	return errors.Join(err, tf.write(rec, os.Stderr))
}
