package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// parseNIC turns "MODEL[:KIND[=ARG]]" into a QEMU NIC, e.g. "e1000e:user",
// "virtio:tap=tap0", "e1000e:stream=/tmp/wire.sock" (QEMU connects) or
// "e1000e:stream-server=/tmp/wire.sock" (QEMU listens).
func parseNIC(s string) (vm.QEMUNIC, error) {
	model, backend, _ := strings.Cut(s, ":")
	switch model {
	case "e1000e":
	case "virtio", "virtio-net", "virtio-net-pci":
		model = "virtio-net-pci"
	default:
		return vm.QEMUNIC{}, fmt.Errorf("NIC model %q: want e1000e or virtio", model)
	}
	if backend == "" {
		backend = "user"
	}
	kind, arg, _ := strings.Cut(backend, "=")
	nd := vm.Netdev{Kind: kind}
	switch kind {
	case "user":
	case "tap":
		nd.Ifname = arg
	case "stream", "stream-server":
		nd.Kind, nd.Path, nd.Server = "stream", arg, kind == "stream-server"
	default:
		return vm.QEMUNIC{}, fmt.Errorf("NIC backend %q: want user, tap=IFNAME, stream=PATH or stream-server=PATH", kind)
	}
	return vm.QEMUNIC{Model: model, Netdev: nd}, nil
}

func runBoot(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("boot", flag.ContinueOnError)
	opt := addImageFlags(fs)
	gf := addGuestFlags(fs, 1024, "guest memory in MiB")
	devices := fs.Int("npfnic", 1, "number of npfnic devices")
	server := fs.String("server", "", "serve npfnic devices with this npfnic binary (\"npfnic serve\" in its own process) instead of in-process")
	rdmaPeer := fs.Bool("rdma-peer", false, "with -rdma: also boot a guest running rdma_rxe over virtio-net, cabled to the first npfnic through QEMU's stream netdev; npfnic0 gets 10.81.0.1, the peer's rxe0 10.81.0.2, and the peer serves ibv_rc_pingpong and perftest (see the banner)")
	rdma := fs.Bool("rdma", false, "boot the RDMA image: ibverbs tools and perftest, with npfnic's RDMA device (ibv_devinfo -d npfnic0); rdma_rxe is shipped but never loaded")
	noDriver := fs.Bool("no-driver", false, "do not load the npfnic driver at boot")
	appendArgs := fs.String("append", "", "extra kernel command line")
	logDir := fs.String("logs", "", "keep console log, QMP transcript and server logs here (default: a temp dir)")
	tf := addTraceFlags(fs)
	var nics, files listFlag
	fs.Var(&nics, "nic", "add a QEMU NIC: MODEL[:user|tap=IF|stream=PATH|stream-server=PATH] (repeatable; MODEL e1000e or virtio)")
	fs.Var(&files, "file", "copy HOST[:GUEST] into the guest before the shell (repeatable; GUEST defaults to /root/BASENAME)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic boot [flags]\n\nBoots a guest with npfnic devices and attaches this terminal to its console.\nQuit with poweroff in the guest or Ctrl-A X.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Everything the command line says is checked before the images are
	// built: a mistake costs nothing.
	if *rdmaPeer && (!*rdma || *devices < 1 || *server != "" || *noDriver) {
		return usageErrorf("-rdma-peer needs -rdma, an npfnic device served in-process and the driver")
	}
	if *devices < 0 {
		return usageErrorf("-npfnic %d: want 0 or more devices", *devices)
	}
	// -m and -smp (-accel was checked as it was parsed; it is resolved
	// after the build, since auto boots a probe guest on the images).
	if err := gf.check(); err != nil {
		return badUsage(err)
	}
	if *server != "" {
		if _, err := exec.LookPath(*server); err != nil {
			if ee := (*exec.Error)(nil); errors.As(err, &ee) {
				err = unwrapPath(ee.Err, *server)
			}
			return usageErrorf("-server %s: %v", *server, err)
		}
	}
	// -trace records the first device (a trace's tracks are one device's).
	rec, err := tf.recorder()
	if err != nil {
		return badUsage(err)
	}
	var qnics []vm.QEMUNIC
	for _, n := range nics {
		nic, err := parseNIC(n)
		if err != nil {
			return usageErrorf("-nic %s: %v", n, err)
		}
		qnics = append(qnics, nic)
	}
	type copyIn struct {
		guest string
		data  []byte
		mode  os.FileMode
	}
	var copies []copyIn
	for _, f := range files {
		host, guest, ok := strings.Cut(f, ":")
		if !ok {
			guest = "/root/" + baseName(host)
		}
		data, err := os.ReadFile(host)
		if err != nil {
			return usageErrorf("-file %s: %v", f, err)
		}
		fi, _ := os.Stat(host)
		copies = append(copies, copyIn{guest, data, fi.Mode().Perm()})
	}
	if *logDir != "" {
		if err := checkOutDir("-logs", *logDir); err != nil {
			return err
		}
	}
	a, err := buildImages(ctx, opt)
	if err != nil {
		return err
	}
	accel, err := gf.resolve(ctx, a)
	if err != nil {
		return err
	}
	cfg := vm.Config{
		Name: "npfnic-boot", Images: a, MemoryMiB: *gf.mem, CPUs: *gf.cpus, Accel: accel, Interactive: true,
		Append: *appendArgs, LogDir: *logDir, AllowReboot: true,
		DefaultServer: vm.InProcessServer{},
	}
	if *rdma {
		cfg.Variant = images.VariantRDMA
	}
	if *server != "" {
		cfg.DefaultServer = vm.ExternalServer{Binary: *server}
	}
	for i := 0; i < *devices; i++ {
		cfg.NPFNICs = append(cfg.NPFNICs, vm.NPFNIC{})
	}
	if *tf.path != "" && *devices > 0 {
		if *server != "" {
			cfg.NPFNICs[0].Server = vm.ExternalServer{Binary: *server, Args: []string{"--trace", *tf.path,
				"--trace-events", fmt.Sprint(*tf.events)}}
			rec = nil // the server writes it
		} else {
			cfg.NPFNICs[0].Server = vm.InProcessServer{Trace: rec}
		}
	}
	var peer *rdmaPeerGuest
	if *rdmaPeer {
		if peer, err = startRDMAPeer(ctx, a, accel); err != nil {
			return err
		}
		defer peer.close()
		cfg.NPFNICs[0].Server = vm.InProcessServer{Wire: "stream:unix:" + peer.wire, Trace: rec}
	}
	cfg.NICs = qnics

	fmt.Fprintf(os.Stderr, "booting %s with %d npfnic device(s) (%s); quit with poweroff or Ctrl-A X\n", a.Kernel.Release, *devices, accel)
	v, err := vm.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer v.Kill()
	setup := func() error {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for _, c := range copies {
			if err := v.Put(sctx, c.guest, c.data, c.mode); err != nil {
				return fmt.Errorf("copy %s into the guest: %w", c.guest, err)
			}
		}
		if peer != nil {
			g, err := testbed.ConfigureRDMAGuest(sctx, v, testbed.RDMANPFNIC, rdmaPeerLocalIP)
			if err != nil {
				return fmt.Errorf("npfnic's end of the RDMA cable: %w", err)
			}
			fmt.Fprint(os.Stderr, strings.ReplaceAll(peer.banner(g), "\n", "\r\n"))
			return nil
		}
		if !*noDriver && *devices > 0 {
			return v.LoadDriver(sctx, "")
		}
		return nil
	}
	if err := setup(); err != nil {
		// The terminal belongs to QEMU now: report on stderr with CRs.
		fmt.Fprintf(os.Stderr, "\r\nnpfnic boot: %v\r\n", err)
	}
	select {
	case <-v.Exited():
	case <-ctx.Done():
		err := v.Shutdown(context.Background())
		return errors.Join(err, tf.write(rec, os.Stderr))
	}
	fmt.Fprintf(os.Stderr, "guest exited; logs in %s\n", v.LogDir())
	return tf.write(rec, os.Stderr)
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
