package testbed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/internal/testbed/workload"
	"github.com/npfnic/npfnic/vdevice/trace"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// RDMAKind is what one guest of an RDMA pair runs.
type RDMAKind string

const (
	// RDMARxe is Linux's soft-RoCE, rdma_rxe, over QEMU's virtio-net: the
	// independent RC implementation npfnic is checked against, and the
	// baseline of the RDMA experiment.
	RDMARxe RDMAKind = "rxe"
	// RDMANPFNIC is npfnic, served in this process, with its driver's
	// ib_device (rdma_rxe is never loaded beside it).
	RDMANPFNIC RDMAKind = "npfnic"
)

// ParseRDMAKind reads "rxe" or "npfnic".
func ParseRDMAKind(s string) (RDMAKind, error) {
	switch k := RDMAKind(s); k {
	case RDMARxe, RDMANPFNIC:
		return k, nil
	}
	return "", fmt.Errorf("RDMA guest %q: want rxe or npfnic", s)
}

// RDMAGuest is one end of an RDMA pair.
type RDMAGuest struct {
	VM   *vm.VM
	Kind RDMAKind
	// IP is the guest's IPv4 address on the cable, IfName its interface
	// and Dev the ibverbs device (ibv_devices) on it.
	IP, IfName, Dev string
	// GIDIndex is Dev's RoCEv2 GID of IP (perftest -x, ibv_rc_pingpong -g).
	GIDIndex int
	// NIC is an npfnic guest's device, served in this process (its RDMA
	// engine's counters, RDMA().Stats()); nil for an rxe guest.
	NIC *npfnic.NIC
	// BDF is the PCI function of an npfnic guest's NIC (its debugfs
	// knobs, rdmafault.go); "" for rxe.
	BDF string
	// Params are npfnic.ko's module parameters in an npfnic guest, at
	// every load (StartRDMAPair, ReloadDriver, Reboot).
	Params string
	// dir holds a lone guest's socket (StartRDMAGuest); "" in a pair.
	dir string
}

// RDMAPair is two guests cabled back to back through QEMU's stream
// netdev protocol (no host network in between): the first listens on the
// cable's socket, the second connects. Each runs rdma_rxe over virtio-net
// or npfnic, with distinct MACs (QEMU gives every guest the same one).
type RDMAPair struct {
	A, B *RDMAGuest
	// LogDir holds each guest's logs, in a and b.
	LogDir string
	// Accel is the accelerator both guests run under: KVM or TCG.
	Accel    vm.Accel
	dir      string
	progress func(format string, args ...any)
	// rsh is B's remote shell for mpirun (MPI), once started.
	rsh *workload.GuestDaemon
}

// RDMAPairConfig configures StartRDMAPair.
type RDMAPairConfig struct {
	Images *images.Artifacts
	A, B   RDMAKind
	// Name prefixes the guests' names ("NAME-a", "NAME-b"); default "rdma".
	Name string
	// Variant is both guests' image; default images.VariantRDMA (a
	// variant built on it: VariantMPI).
	Variant   images.Variant
	MemoryMiB int // per guest, default 1024
	CPUs      int // per guest, default 1
	// Accel is kvm, tcg or auto (vm.ResolveAccel); default
	// $NPFNIC_ACCEL, else auto.
	Accel  vm.Accel
	LogDir string
	// Trace records the events of the first npfnic of the pair.
	Trace *trace.Recorder
	// Pcap, if set, records every frame of the first npfnic's port in this
	// file (npfnic serve --pcap).
	Pcap string
	// AllowReboot lets the guests reboot (RDMAPair.Reboot) instead of
	// QEMU exiting.
	AllowReboot bool
	// NPFNICParams are the module parameters npfnic.ko is loaded with in
	// the npfnic guests (e.g. "rx_policy=backup": Ethernet page faults
	// beside RDMA); "" for the driver's defaults.
	NPFNICParams string
	// MinAckTimeout is the npfnics' floor on their RC local ACK timers
	// (npfnic.Options.RDMAMinAckTimeout); 0: the QPs' own. The VM tests
	// set it: ibv_rc_pingpong's 67 ms times eight is shorter than the
	// stalls of a TCG guest on a loaded host.
	MinAckTimeout time.Duration
	// DiskA, if set, is a raw image file guest A gets as a virtio-blk
	// disk (its /dev/vda, module virtio_blk); DiskReadBps, if set,
	// throttles its reads in QEMU (a disk slower than the host's page
	// cache, for the storage experiment).
	DiskA       string
	DiskReadBps int64
	// AppendA is added to guest A's kernel command line.
	AppendA  string
	Progress func(format string, args ...any)
}

// The pair's addresses: 10.81.0.1 (A) and 10.81.0.2 (B).
const rdmaSubnet = "10.81.0."

// StartRDMAPair boots both guests, cables them, brings the links up and
// makes the RDMA devices usable (rdma link add for rxe; npfnic's driver
// registers its own), and waits until each reaches the other.
func StartRDMAPair(ctx context.Context, c RDMAPairConfig) (_ *RDMAPair, err error) {
	if c.Images == nil || c.LogDir == "" {
		return nil, errors.New("testbed: RDMAPairConfig needs Images and LogDir")
	}
	for _, k := range []RDMAKind{c.A, c.B} {
		if _, err := ParseRDMAKind(string(k)); err != nil {
			return nil, err
		}
	}
	if c.Name == "" {
		c.Name = "rdma"
	}
	if c.MemoryMiB == 0 {
		c.MemoryMiB = 1024
	}
	if c.CPUs == 0 {
		c.CPUs = 1
	}
	accel, err := vm.ResolveAccel(ctx, c.Images, c.Accel)
	if err != nil {
		return nil, err
	}
	progress := c.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	p := &RDMAPair{LogDir: c.LogDir, Accel: accel, progress: progress}
	if p.dir, err = os.MkdirTemp("", "npfnic-rdma-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	wire := filepath.Join(p.dir, "wire.sock")
	tr, pcap := c.Trace, c.Pcap
	for i, k := range []RDMAKind{c.A, c.B} {
		side := string(rune('a' + i))
		g := &RDMAGuest{Kind: k, IP: fmt.Sprintf("%s%d", rdmaSubnet, i+1)}
		if k == RDMANPFNIC {
			g.Params = c.NPFNICParams
		}
		var dev vfiouser.Device
		cfg := vm.Config{Name: c.Name + "-" + side, Images: c.Images, Variant: cmp.Or(c.Variant, images.VariantRDMA),
			MemoryMiB: c.MemoryMiB, CPUs: c.CPUs, Accel: accel, LogDir: filepath.Join(c.LogDir, side), AllowReboot: c.AllowReboot}
		listen := i == 0
		if i == 0 {
			cfg.Append = c.AppendA
		}
		if i == 0 && c.DiskA != "" {
			drive := "file=" + c.DiskA + ",format=raw,if=none,id=disk0"
			if c.DiskReadBps > 0 {
				drive += fmt.Sprintf(",throttling.bps-read=%d", c.DiskReadBps)
			}
			cfg.ExtraArgs = append(cfg.ExtraArgs, "-drive", drive, "-device", "virtio-blk-pci,drive=disk0")
		}
		switch k {
		case RDMARxe:
			cfg.NICs = []vm.QEMUNIC{{Model: "virtio-net-pci", MAC: fmt.Sprintf("52:54:00:81:00:%02x", i+1),
				Netdev: vm.Netdev{Kind: "stream", Path: wire, Server: listen}}}
		case RDMANPFNIC:
			spec := "stream:unix:" + wire
			if listen {
				spec = "stream-listen:unix:" + wire
			}
			cfg.NPFNICs = []vm.NPFNIC{{Server: vm.InProcessServer{Wire: spec, Trace: tr, Pcap: pcap, Device: &dev,
				RDMAMinAckTimeout: c.MinAckTimeout}}}
			tr, pcap = nil, "" // one device per trace and capture
		}
		progress("booting %s (%s, %d MiB, %d vCPU, %s), %s the cable", cfg.Name, k, c.MemoryMiB, c.CPUs, accel, map[bool]string{true: "listening on", false: "connecting to"}[listen])
		if g.VM, err = vm.Start(ctx, cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Name, err)
		}
		if i == 0 {
			p.A = g
		} else {
			p.B = g
		}
		if k == RDMANPFNIC {
			nic, ok := dev.(*npfnic.NIC)
			if !ok {
				return nil, fmt.Errorf("%s: the in-process device is a %T, not an npfnic NIC", cfg.Name, dev)
			}
			g.NIC = nic
		}
	}
	for _, g := range []*RDMAGuest{p.A, p.B} {
		if err := g.setUp(ctx); err != nil {
			return nil, fmt.Errorf("%s guest %s: %w", g.Kind, g.IP, err)
		}
		progress("%s: %s on %s, ibverbs device %s", g.Kind, g.IP, g.IfName, g.Dev)
	}
	if err := p.waitReachable(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// ConfigureRDMAGuest makes a running guest one end of an RDMA cable, as
// StartRDMAPair does with its own: it loads the NIC's and RDMA drivers
// (npfnic.ko for an npfnic guest, which must not have it loaded yet) and
// rdma_ucm (rdma_cm for librdmacm: rping, perftest -R), gives the
// interface ip/24, and finds the ibverbs device and its RoCEv2 GID index.
// npfnic boot -rdma-peer uses it for its console guest.
func ConfigureRDMAGuest(ctx context.Context, v *vm.VM, kind RDMAKind, ip string) (*RDMAGuest, error) {
	if _, err := ParseRDMAKind(string(kind)); err != nil {
		return nil, err
	}
	g := &RDMAGuest{VM: v, Kind: kind, IP: ip}
	if err := g.setUp(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// setUp loads the guest's NIC and RDMA drivers and rdma_ucm, addresses
// the link and finds the ibverbs device.
func (g *RDMAGuest) setUp(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	switch g.Kind {
	case RDMARxe:
		if err := g.VM.LoadModules(sctx, "virtio_net", "virtio_pci", "crc32_generic", "rdma_rxe", "ib_uverbs"); err != nil {
			return err
		}
	case RDMANPFNIC:
		if err := g.VM.LoadDriver(sctx, g.Params); err != nil {
			return err
		}
		if err := g.findBDF(sctx); err != nil {
			return err
		}
	}
	// rdma_cm's user interface, after the device: rdma_cm finds it when
	// it registers, ib_cm through ib_mad's GSI QP.
	if err := g.VM.LoadModules(sctx, "rdma_ucm"); err != nil {
		return err
	}
	// The guest's one NIC is the only interface with a device behind it.
	ifname, err := g.shell(sctx, "for d in /sys/class/net/*; do if [ -e $d/device ]; then basename $d; fi; done")
	if err != nil || ifname == "" || strings.Contains(ifname, "\n") {
		return fmt.Errorf("want the one network interface of the guest's NIC, found %q: %v", ifname, err)
	}
	g.IfName = ifname
	if _, err := g.shell(sctx, fmt.Sprintf("ip addr add %s/24 dev %s && ip link set %s up", g.IP, ifname, ifname)); err != nil {
		return err
	}
	if g.Kind == RDMARxe {
		if _, err := g.shell(sctx, "rdma link add rxe0 type rxe netdev "+ifname); err != nil {
			return err
		}
	}
	var why error
	for {
		out, err := g.shell(sctx, "ibv_devices")
		devs := ParseIBVDevices(out)
		switch {
		case err != nil:
			why = err
		case len(devs) == 0:
			why = fmt.Errorf("ibv_devices lists none: %q", out)
		default:
			g.Dev = devs[0]
			if g.GIDIndex, why = g.roceV2GID(sctx); why == nil {
				return nil
			}
		}
		select {
		case <-sctx.Done():
			return fmt.Errorf("no ibverbs device with a RoCEv2 GID: %w", why)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// roceV2GID finds the index of the device's RoCEv2 GID for the guest's
// IPv4 address, from ibv_devinfo's GID table.
func (g *RDMAGuest) roceV2GID(ctx context.Context) (int, error) {
	out, err := g.shell(ctx, "ibv_devinfo -v -d "+g.Dev)
	if err != nil {
		return 0, err
	}
	return FindRoCEv2GID(out, g.IP)
}

// FindRoCEv2GID picks, from ibv_devinfo -v's lines "GID[  N]: GID, TYPE",
// the index of ip's IPv4-mapped GID of type RoCE v2.
func FindRoCEv2GID(devinfo, ip string) (int, error) {
	addr, err := netip.ParseAddr(ip)
	if err != nil || !addr.Is4() {
		return 0, fmt.Errorf("%q is not an IPv4 address", ip)
	}
	for _, l := range strings.Split(devinfo, "\n") {
		idx, rest, ok := strings.Cut(strings.TrimSpace(l), "]:")
		num, isGID := strings.CutPrefix(idx, "GID[")
		if !ok || !isGID {
			continue
		}
		gid, typ, _ := strings.Cut(strings.TrimSpace(rest), ",")
		a, err := netip.ParseAddr(strings.TrimSpace(gid))
		if err != nil || strings.TrimSpace(typ) != "RoCE v2" || a.Unmap() != addr || !a.Is4In6() {
			continue
		}
		var i int
		if _, err := fmt.Sscan(strings.TrimSpace(num), &i); err == nil {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no RoCE v2 GID for %s in the port's GID table", ip)
}

// shell runs a script in the guest and returns its trimmed stdout; a
// non-zero exit is an error carrying stderr.
func (g *RDMAGuest) shell(ctx context.Context, script string) (string, error) {
	r, err := g.VM.Run(ctx, script)
	if err != nil {
		return "", err
	}
	if r.Exit != 0 {
		return "", fmt.Errorf("%q: exit %d: %s%s", script, r.Exit, r.Stdout, r.Stderr)
	}
	return strings.TrimSpace(r.Stdout), nil
}

// Shell runs a script in the guest (see RDMAGuest.shell).
func (g *RDMAGuest) Shell(ctx context.Context, script string) (string, error) {
	return g.shell(ctx, script)
}

// setODPParam writes npfnic.ko's odp parameter in g.
func setODPParam(ctx context.Context, g *RDMAGuest, v string) error {
	out, err := g.shell(ctx, "echo "+v+" > /sys/module/npfnic/parameters/odp && cat /sys/module/npfnic/parameters/odp")
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) != v {
		return fmt.Errorf("npfnic odp parameter: %q after writing %q", strings.TrimSpace(out), v)
	}
	return nil
}

var odpFaultsRE = regexp.MustCompile(`\bodp_faults (\d+)`)

// ODPFaults is an npfnic's count of ODP faults since its driver loaded
// (its port's rdma statistic odp_faults): pages it faulted into on-demand
// regions. An rdma_rxe guest has none to give.
func (g *RDMAGuest) ODPFaults(ctx context.Context) (int, error) {
	if g.Kind != RDMANPFNIC {
		return 0, fmt.Errorf("%s has no ODP faults to count", g.Kind)
	}
	out, err := g.shell(ctx, "rdma statistic show link "+g.Dev+"/1")
	if err != nil {
		return 0, err
	}
	m := odpFaultsRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no odp_faults in rdma statistic:\n%s", out)
	}
	return strconv.Atoi(m[1])
}

// waitReachable pings across the cable until both ends answer (the
// stream cable connects while the second guest boots, and the first ARP
// can be lost before it is up).
func (p *RDMAPair) waitReachable(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, errA := p.A.shell(ctx, "ping -c 1 -w 2000 "+p.B.IP)
		_, errB := p.B.shell(ctx, "ping -c 1 -w 2000 "+p.A.IP)
		if errA == nil && errB == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the guests do not reach each other over the cable: %v; %v", errA, errB)
		}
	}
}

// Reboot resets one guest of the pair mid-whatever (vm.VM.Reboot: for an
// npfnic guest, a DEVICE_RESET of its NIC, whose in-process device and
// port stay) and sets it up again as StartRDMAPair did: drivers, address,
// ibverbs device and GID index, and the other end reachable. Its programs
// are gone; the other guest's are not. Needs RDMAPairConfig.AllowReboot.
func (p *RDMAPair) Reboot(ctx context.Context, g *RDMAGuest) error {
	start := time.Now()
	if err := g.VM.Reboot(ctx); err != nil {
		return err
	}
	booted := time.Now()
	err := p.reconfigure(ctx, g)
	p.progress("%s rebooted in %.1fs, set up in %.1fs", g.Kind, booted.Sub(start).Seconds(), time.Since(booted).Seconds())
	return err
}

// ReloadDriver unloads npfnic.ko from an npfnic guest of the pair
// (rmmod, which must succeed even while processes hold the device open:
// the core disassociates their contexts) and loads it again, set up as
// StartRDMAPair did. It returns how long rmmod took.
func (p *RDMAPair) ReloadDriver(ctx context.Context, g *RDMAGuest) (time.Duration, error) {
	if err := g.npfnic(); err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := g.shell(ctx, "rmmod npfnic"); err != nil {
		return time.Since(start), err
	}
	took := time.Since(start)
	if out, err := g.shell(ctx, "ls /sys/class/infiniband"); err != nil || out != "" {
		return took, fmt.Errorf("RDMA devices left after rmmod npfnic: %q %v", out, err)
	}
	return took, p.reconfigure(ctx, g)
}

// reconfigure sets a guest whose drivers are not loaded up again.
func (p *RDMAPair) reconfigure(ctx context.Context, g *RDMAGuest) error {
	if err := g.setUp(ctx); err != nil {
		return fmt.Errorf("%s guest %s: %w", g.Kind, g.IP, err)
	}
	return p.waitReachable(ctx)
}

// Dead reports whether either guest's QEMU has exited.
func (p *RDMAPair) Dead() bool {
	for _, g := range []*RDMAGuest{p.A, p.B} {
		select {
		case <-g.VM.Exited():
			return true
		default:
		}
	}
	return false
}

// Close shuts both guests down and removes the cable's socket.
func (p *RDMAPair) Close() {
	for _, g := range []*RDMAGuest{p.A, p.B} {
		if g != nil && g.VM != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = g.VM.Shutdown(sctx)
			cancel()
		}
	}
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
}

// ParseIBVDevices reads the device names ibv_devices lists (after its
// header and the dashes under it).
func ParseIBVDevices(out string) []string {
	var devs []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] == "device" || strings.HasPrefix(f[0], "---") {
			continue
		}
		devs = append(devs, f[0])
	}
	return devs
}

// Guests returns the pair's guests, first the listening one.
func (p *RDMAPair) Guests() []*RDMAGuest { return []*RDMAGuest{p.A, p.B} }

// RunClientServer runs an ibverbs test program on both guests: the server
// side first, then the client side with the server's address, retrying
// the client while the server is not listening yet (its out-of-band TCP
// port). args builds each side's command line from its guest and the
// server's address ("" on the server). It returns both outputs; a side that
// exits non-zero is an error carrying its output. perftest's programs go
// through Perftest, which knows their one benign failure; they are refused
// here.
func (p *RDMAPair) RunClientServer(ctx context.Context, server, client *RDMAGuest, args func(g *RDMAGuest, serverIP string) []string) (serverOut, clientOut string, err error) {
	if a := args(server, ""); len(a) > 0 && workload.IsPerftestTool(a[0]) {
		return "", "", fmt.Errorf("testbed: %s is perftest's: run it with RDMAPair.Perftest", a[0])
	}
	return p.runClientServer(ctx, server, client, args)
}

// execResult is what a program run in a guest returned.
type execResult struct {
	r   vm.Result
	err error
}

func (p *RDMAPair) runClientServer(ctx context.Context, server, client *RDMAGuest, args func(g *RDMAGuest, serverIP string) []string) (serverOut, clientOut string, err error) {
	// The programs end a little before ctx does, so that one that hangs
	// is reported with what it printed.
	limit := time.Duration(0)
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		limit = max(left-min(left/4, 20*time.Second), time.Millisecond)
	}
	done := make(chan execResult, 1)
	go func() {
		r, err := server.VM.ExecWithin(ctx, limit, args(server, "")...)
		done <- execResult{r, err}
	}()
	var cr vm.Result
	for attempt := 0; ; attempt++ {
		// perftest listens within a second of starting under TCG; a client
		// that comes earlier fails at once with "Couldn't connect".
		select {
		case s := <-done:
			return s.r.Stdout + s.r.Stderr, "", fmt.Errorf("server %s exited before the client ran: exit %d, %v: %s%s",
				server.IP, s.r.Exit, s.err, s.r.Stdout, s.r.Stderr)
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return "", "", ctx.Err()
		}
		if cr, err = client.VM.ExecWithin(ctx, limit, args(client, server.IP)...); err != nil {
			return "", "", err
		}
		connectFailed := strings.Contains(cr.Stdout+cr.Stderr, "Couldn't connect") ||
			strings.Contains(cr.Stdout+cr.Stderr, "Unable to init the socket connection")
		if cr.Exit == 0 || !connectFailed || attempt >= 20 {
			break
		}
	}
	clientOut = cr.Stdout + cr.Stderr
	var s execResult
	select {
	case s = <-done:
	case <-time.After(30 * time.Second):
		return serverHung(ctx, server, client, args(server, "")[0], cr, done)
	}
	serverOut = s.r.Stdout + s.r.Stderr
	switch {
	case s.err != nil:
		return serverOut, clientOut, s.err
	case cr.TimedOut:
		return serverOut, clientOut, fmt.Errorf("client %s: still running after %v, killed:\n%s\nserver %s (exit %d):\n%s",
			client.IP, limit.Round(time.Second), clientOut, server.IP, s.r.Exit, serverOut)
	case cr.Exit != 0:
		return serverOut, clientOut, fmt.Errorf("client %s: exit %d:\n%s", client.IP, cr.Exit, clientOut)
	case s.r.Exit != 0:
		return serverOut, clientOut, fmt.Errorf("server %s: exit %d:\n%s", server.IP, s.r.Exit, serverOut)
	}
	return serverOut, clientOut, nil
}

// serverHung reports a server that did not finish 30 s after its client:
// with what both printed (the server's up to a SIGKILL sent now) and the
// QPs both guests still hold, for a client that ended early leaves its
// server waiting for messages that will not come.
func serverHung(ctx context.Context, server, client *RDMAGuest, program string, cr vm.Result, done <-chan execResult) (serverOut, clientOut string, err error) {
	clientOut = cr.Stdout + cr.Stderr
	qps := func(g *RDMAGuest) string {
		r, err := g.VM.Exec(ctx, "rdma", "resource", "show", "qp")
		if err != nil {
			return err.Error()
		}
		return r.Stdout + r.Stderr
	}
	state := fmt.Sprintf("QPs on %s:\n%s\nQPs on %s:\n%s", server.IP, qps(server), client.IP, qps(client))
	if _, err := server.Signal(ctx, int(syscall.SIGKILL), filepath.Base(program)); err != nil {
		state += "\nSIGKILL: " + err.Error()
	}
	serverOut = "(no output: still running 10 s after SIGKILL)"
	select {
	case s := <-done:
		serverOut = s.r.Stdout + s.r.Stderr
	case <-time.After(10 * time.Second):
	}
	return serverOut, clientOut, fmt.Errorf("server %s did not finish 30 s after the client (exit %d), killed:\n%s\nclient %s:\n%s\n%s",
		server.IP, cr.Exit, serverOut, client.IP, clientOut, state)
}

// Kill sends SIGTERM to every process of the guest whose command name
// (/proc/PID/comm) is program, by its process id, and returns how many it
// found: the way to end an ibverbs program started for an open-ended run
// (perftest -D with a long duration).
func (g *RDMAGuest) Kill(ctx context.Context, program string) (int, error) {
	pids, err := g.VM.Signal(ctx, program, syscall.SIGTERM)
	return len(pids), err
}

// Signal sends sig to every process of the guest whose command name
// (/proc/PID/comm, at most 15 characters) is one of programs (vm.VM.Signal)
// and returns how many it found.
func (g *RDMAGuest) Signal(ctx context.Context, sig int, programs ...string) (int, error) {
	if len(programs) == 0 {
		return 0, errors.New("testbed: signal: no program named")
	}
	n := 0
	for _, p := range programs {
		pids, err := g.VM.Signal(ctx, p, syscall.Signal(sig))
		n += len(pids)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
