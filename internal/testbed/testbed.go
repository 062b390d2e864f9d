// Package testbed is the bench the npfnic command, the experiments and the
// VM tests run on: a guest (KVM where it works, else TCG) with an npfnic
// device served in this
// process, its Ethernet port on a tap whose host end lives in a network
// namespace of its own, memcached in the guest and the npfnic driver loaded
// with the parameters asked for.
//
// Its parts are packages of their own: vm boots and drives QEMU guests
// (any NICs, any device servers), hostnet owns the host ends of guest
// links (namespaces, taps, ping, host-side processes), child starts every
// helper process so that it dies with this one, and workload runs iperf3,
// memcached and memaslap across a link and parses what they print. Nothing
// here is a test: ci/ holds the tests, internal/exp the experiments.
package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/npfnic/npfnic/guestdrv/agent"
	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed/hostnet"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/internal/testbed/workload"
	"github.com/npfnic/npfnic/vdevice/trace"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// Testbed is one guest with one npfnic device served in this process,
// its Ethernet port on a tap whose host end lives in a network namespace of
// its own (package hostnet), memcached running in the guest. The driver is
// loaded (and reloaded: a fresh load is a cold RX ring) with LoadDriver.
// The cold-ring and fault-cost experiments and the VM tests of page faults
// build on it.
type Testbed struct {
	VM *vm.VM
	NS *hostnet.Namespace
	// HostIP is the host end's address (in NS), GuestIP the guest's.
	HostIP, GuestIP string
	// IfName and BDF name the guest's npfnic interface and PCI function
	// once the driver is loaded.
	IfName, BDF string
	// Params are the driver's current module parameters.
	Params string
	// Device is the in-process device model (a *npfnic.NIC).
	Device vfiouser.Device
	// LogDir holds the guest's console log, QMP transcript and the device
	// server's log.
	LogDir string
	// Boot is how long the guest took to a working agent.
	Boot time.Duration
	// Accel is the accelerator the guest runs under: KVM or TCG.
	Accel vm.Accel

	tap    *hostnet.Link
	dev    *vfiouser.Device
	loaded bool
	closed sync.Once
}

// Config configures Start.
type Config struct {
	Images    *images.Artifacts
	Name      string // guest name, default "coldring"
	MemoryMiB int    // default 1024
	CPUs      int    // default 1
	// Accel is kvm, tcg or auto (vm.ResolveAccel); default
	// $NPFNIC_ACCEL, else auto.
	Accel vm.Accel
	// Subnet picks the link's addresses 10.79.Subnet.{1,2}/24 (the link
	// lives in its own namespace, so any value works); default 1.
	Subnet int
	LogDir string // required
	// AllowReboot lets the guest reboot (Testbed.Reboot) instead of
	// QEMU exiting.
	AllowReboot bool
	// Progress receives a line per step; nil is quiet.
	Progress func(format string, args ...any)
	// Trace records the device's events (package trace); nil records
	// nothing. The caller writes it out.
	Trace *trace.Recorder
}

// Names for what a testbed creates on the host (hostnet.UniqueName).
const (
	nsPrefix  = "crn"
	tapPrefix = "crt"
)

// ReapStale removes namespaces and taps left behind by a killed run.
func ReapStale() []string {
	var all []string
	for _, p := range []string{nsPrefix, tapPrefix} {
		if r, err := hostnet.ReapStale(p); err == nil {
			all = append(all, r...)
		}
	}
	return all
}

// CheckHost fails early, with the fix, when a host tool is missing.
func CheckHost() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (tap devices, network namespaces)")
	}
	var missing []string
	if _, err := exec.LookPath("ip"); err != nil {
		missing = append(missing, "iproute2")
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		missing = append(missing, "iperf3")
	}
	if _, err := workload.MemaslapBinary(); err != nil {
		missing = append(missing, "libmemcached-tools")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing host tools; install them with: apt-get install -y -t bookworm %s", strings.Join(missing, " "))
	}
	return nil
}

// Start boots the guest, moves the tap into its namespace and starts
// memcached in the guest. The driver is not loaded yet.
func Start(ctx context.Context, c Config) (tb *Testbed, err error) {
	if c.Images == nil || c.LogDir == "" {
		return nil, errors.New("testbed: Config needs Images and LogDir")
	}
	if c.Name == "" {
		c.Name = "coldring"
	}
	if c.Subnet == 0 {
		c.Subnet = 1
	}
	if c.MemoryMiB == 0 {
		c.MemoryMiB = 1024
	}
	if c.CPUs == 0 {
		c.CPUs = 1
	}
	progress := c.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	tb = &Testbed{
		HostIP: fmt.Sprintf("10.79.%d.1", c.Subnet), GuestIP: fmt.Sprintf("10.79.%d.2", c.Subnet),
		LogDir: c.LogDir, dev: new(vfiouser.Device),
	}
	defer func() {
		if err != nil {
			tb.Close()
		}
	}()
	if tb.NS, err = hostnet.NewUniqueNamespace(nsPrefix); err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	tapName, err := hostnet.UniqueName(tapPrefix)
	if err != nil {
		return nil, err
	}
	if tb.tap, err = hostnet.CreateTap(tapName); err != nil {
		return nil, fmt.Errorf("tap: %w", err)
	}
	if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		return nil, err
	}
	if tb.Accel, err = vm.ResolveAccel(ctx, c.Images, c.Accel); err != nil {
		return nil, err
	}
	progress("booting the guest (%d MiB, %d vCPU, %s) with npfnic on tap %s; logs in %s", c.MemoryMiB, c.CPUs, tb.Accel, tapName, c.LogDir)
	start := time.Now()
	tb.VM, err = vm.Start(ctx, vm.Config{
		Name: c.Name, Images: c.Images, MemoryMiB: c.MemoryMiB, CPUs: c.CPUs, Accel: tb.Accel, LogDir: c.LogDir,
		AllowReboot: c.AllowReboot,
		NPFNICs:     []vm.NPFNIC{{Server: vm.InProcessServer{Wire: "tap:" + tapName, Device: tb.dev, Trace: c.Trace}}},
	})
	if err != nil {
		return nil, fmt.Errorf("boot: %w", err)
	}
	tb.Boot = time.Since(start)
	tb.Device = *tb.dev
	progress("guest up in %.1fs", tb.Boot.Seconds())
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := hostnet.MoveToNamespace(tb.tap, tb.NS); err != nil {
		return nil, err
	}
	if err := tb.tap.Configure(sctx, tb.HostIP+"/24"); err != nil {
		return nil, fmt.Errorf("host end: %w", err)
	}
	if err := workload.StartGuestMemcached(sctx, tb.VM); err != nil {
		return nil, err
	}
	if err := workload.WaitListening(sctx, tb.VM, workload.MemcachedPort); err != nil {
		return nil, err
	}
	return tb, nil
}

// Close shuts the guest down and removes the namespace and the tap.
func (tb *Testbed) Close() {
	tb.closed.Do(func() {
		if tb.VM != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = tb.VM.Shutdown(sctx)
			cancel()
		}
		if tb.NS != nil {
			tb.NS.Close()
		}
		if tb.tap != nil {
			tb.tap.Delete()
		}
	})
}

// Reboot resets the guest at once (sysrq b: no driver unload, so the
// device sees a function reset in the middle of whatever it was doing)
// and waits for the new boot's agent. The driver is not loaded afterwards,
// and memcached is not running. Needs Config.AllowReboot.
func (tb *Testbed) Reboot(ctx context.Context) error {
	tb.loaded = false
	return tb.VM.Reboot(ctx)
}

// Dead reports whether QEMU has exited.
func (tb *Testbed) Dead() bool {
	select {
	case <-tb.VM.Exited():
		return true
	default:
		return false
	}
}

// Guest runs argv in the guest; a non-zero exit is an error with the output.
func (tb *Testbed) Guest(ctx context.Context, argv ...string) (string, error) {
	return tb.VM.Output(ctx, argv...)
}

// Shell runs a guest shell script that must succeed.
func (tb *Testbed) Shell(ctx context.Context, script string) (string, error) {
	return tb.Guest(ctx, "/bin/sh", "-c", script)
}

// DriverParams are the module parameters of one driver load: policy is
// "off" (the datapath without translation: no rx_policy parameter is
// passed), "pin", "drop" or "backup"; ring is rx_ring_size (0: the
// driver's default); extra is appended verbatim (e.g. "fault_delay_us=50").
func DriverParams(policy string, ring int, extra string) string {
	var p []string
	if policy != "" && policy != "off" {
		p = append(p, "rx_policy="+policy)
	}
	if ring > 0 {
		p = append(p, "rx_ring_size="+strconv.Itoa(ring))
	}
	if extra = strings.TrimSpace(extra); extra != "" {
		p = append(p, extra)
	}
	return strings.Join(p, " ")
}

// LoadDriver unloads the driver if it is loaded and loads it with params
// (a fresh load: with a policy other than off the RX ring starts cold),
// then gives the interface its address, sets it up and waits for the
// carrier. Nothing is sent through the interface: the first packets are
// whatever the caller sends next.
func (tb *Testbed) LoadDriver(ctx context.Context, params string) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if tb.loaded {
		if _, err := tb.Guest(ctx, "rmmod", "npfnic"); err != nil {
			return fmt.Errorf("rmmod: %w", err)
		}
		tb.loaded = false
	}
	if err := tb.VM.LoadModules(ctx, agent.DriverDeps...); err != nil {
		return fmt.Errorf("the npfnic driver's dependencies: %w", err)
	}
	argv := []string{"insmod", agent.GuestDriverPath}
	argv = append(argv, strings.Fields(params)...)
	if _, err := tb.Guest(ctx, argv...); err != nil {
		return fmt.Errorf("insmod npfnic.ko %s: %w", params, err)
	}
	tb.loaded, tb.Params = true, params
	// Probing is asynchronous: wait for the netdev.
	for {
		out, err := tb.Shell(ctx, "for d in /sys/bus/pci/drivers/npfnic/0000:*; do echo $d $(ls $d/net); done")
		if err == nil {
			if f := strings.Fields(out); len(f) >= 2 {
				tb.BDF, tb.IfName = path.Base(f[0]), f[1]
				break
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the npfnic driver registered no network interface within 90 s (%q)", out)
		case <-time.After(200 * time.Millisecond):
		}
	}
	ifn := tb.IfName
	if _, err := tb.Shell(ctx, fmt.Sprintf("ip addr add %s/24 dev %s && ip link set %s up", tb.GuestIP, ifn, ifn)); err != nil {
		return err
	}
	for {
		out, _ := tb.Guest(ctx, "cat", "/sys/class/net/"+ifn+"/carrier")
		if strings.TrimSpace(out) == "1" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s has no carrier", ifn)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CheckPolicy verifies that the loaded driver runs the RX policy asked
// for: the kernel ignores unknown module parameters, so a driver without
// page-fault support would silently run without translation. "off" is
// always fine.
func (tb *Testbed) CheckPolicy(ctx context.Context, policy string) error {
	if policy == "" || policy == "off" {
		return nil
	}
	got, err := tb.ReadSysfs(ctx, "rx_policy")
	if err != nil {
		return fmt.Errorf("the driver has no rx_policy file (%s): no page-fault support in this build? %w", tb.SysfsPath("rx_policy"), err)
	}
	if !strings.Contains(got, policy) {
		return fmt.Errorf("asked for rx_policy=%s, the driver reports %q", policy, got)
	}
	return nil
}

// Ethtool reads ethtool -S of the npfnic interface.
func (tb *Testbed) Ethtool(ctx context.Context) (map[string]uint64, error) {
	out, err := tb.Guest(ctx, "ethtool", "-S", tb.IfName)
	if err != nil {
		return nil, err
	}
	return ParseEthtoolStats(out), nil
}

// GuestTCP reads the guest's TCP counters (/proc/net/snmp and
// /proc/net/netstat: Tcp.RetransSegs, TcpExt.TCPTimeouts, ...).
func (tb *Testbed) GuestTCP(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for _, f := range []string{"/proc/net/snmp", "/proc/net/netstat"} {
		b, err := tb.VM.Get(ctx, f)
		if err != nil {
			return nil, err
		}
		m, err := ParseSNMP(string(b))
		if err != nil {
			return nil, fmt.Errorf("guest %s: %w", f, err)
		}
		for k, v := range m {
			out[k] = v
		}
	}
	return out, nil
}

// HostTCP reads the TCP counters of the host end's namespace.
func (tb *Testbed) HostTCP(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for _, f := range []string{"/proc/net/snmp", "/proc/net/netstat"} {
		s, err := tb.NS.Run(ctx, "cat", f)
		if err != nil {
			return nil, err
		}
		m, err := ParseSNMP(s)
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", f, err)
		}
		for k, v := range m {
			out[k] = v
		}
	}
	return out, nil
}

// TCPRetrans is what both ends' TCP retransmitted over a run.
type TCPRetrans struct {
	Host, Guest int64
	// HostTimeouts are the host's retransmission timeouts that expired.
	HostTimeouts int64
}

// CountTCPRetrans reads both ends' TCP counters, and returns what reads
// them again and gives their growth (an end whose reading failed counts
// 0).
func (tb *Testbed) CountTCPRetrans(ctx context.Context) func(context.Context) TCPRetrans {
	host0, herr := tb.HostTCP(ctx)
	guest0, gerr := tb.GuestTCP(ctx)
	return func(ctx context.Context) (r TCPRetrans) {
		if host1, err := tb.HostTCP(ctx); err == nil && herr == nil {
			r.Host = host1["Tcp.RetransSegs"] - host0["Tcp.RetransSegs"]
			r.HostTimeouts = host1["TcpExt.TCPTimeouts"] - host0["TcpExt.TCPTimeouts"]
		}
		if guest1, err := tb.GuestTCP(ctx); err == nil && gerr == nil {
			r.Guest = guest1["Tcp.RetransSegs"] - guest0["Tcp.RetransSegs"]
		}
		return r
	}
}

// KillHostSockets destroys every TCP socket of the host namespace to the
// guest (ss -K), orphans included: a memaslap killed at its cap leaves
// sockets that keep retransmitting into the next run and would count in
// its TCP counters.
func (tb *Testbed) KillHostSockets(ctx context.Context) error {
	_, err := tb.NS.Run(ctx, "ss", "-K", "-t", "dst", tb.GuestIP)
	return err
}

// SysfsPath is a file of the npfnic PCI function in the guest's sysfs:
// the driver's user knobs, cool and rx_policy.
func (tb *Testbed) SysfsPath(name string) string {
	return "/sys/bus/pci/devices/" + tb.BDF + "/" + name
}

// DebugfsPath is one of the driver's test knobs for the function in the
// guest's debugfs: diag_irq, diag_dma, diag_echo, inject, rnpf_rate_ppm.
func (tb *Testbed) DebugfsPath(name string) string {
	return "/sys/kernel/debug/npfnic/" + tb.BDF + "/" + name
}

// WriteSysfs writes value to one of the function's sysfs files.
func (tb *Testbed) WriteSysfs(ctx context.Context, name, value string) error {
	return tb.writeKnob(ctx, tb.SysfsPath(name), value)
}

// WriteDebugfs writes value to one of the function's debugfs files.
func (tb *Testbed) WriteDebugfs(ctx context.Context, name, value string) error {
	return tb.writeKnob(ctx, tb.DebugfsPath(name), value)
}

// writeKnob writes value and a newline to a driver file in one write.
func (tb *Testbed) writeKnob(ctx context.Context, file, value string) error {
	return writeKnob(ctx, tb.VM, file, value)
}

// writeKnob writes value and a newline to a file in guest v in one write.
func writeKnob(ctx context.Context, v *vm.VM, file, value string) error {
	// Through dd: the shell's echo > FILE reports success even when the
	// kernel refuses the write; dd exits non-zero. dd reads the value
	// from a file, in one read, so it reaches the kernel in one write:
	// from a pipe, gosh's echo writes "1" and "\n" separately, and a
	// second write of "\n" alone failed with EINVAL under load.
	const tmp = "/tmp/npfnic-knob-value"
	if err := v.Put(ctx, tmp, []byte(value+"\n"), 0o644); err != nil {
		return err
	}
	_, err := v.Output(ctx, "/bin/sh", "-c", fmt.Sprintf("dd if=%s of=%s 2>&1", tmp, file))
	return err
}

// ReadSysfs reads one of the function's sysfs files.
func (tb *Testbed) ReadSysfs(ctx context.Context, name string) (string, error) {
	b, err := tb.VM.Get(ctx, tb.SysfsPath(name))
	return strings.TrimSpace(string(b)), err
}

// ReadDebugfs reads one of the function's debugfs files.
func (tb *Testbed) ReadDebugfs(ctx context.Context, name string) (string, error) {
	b, err := tb.VM.Get(ctx, tb.DebugfsPath(name))
	return strings.TrimSpace(string(b)), err
}

// Memaslap runs memaslap from the host namespace against the guest's
// memcached (workload.StreamMemaslap).
func (tb *Testbed) Memaslap(ctx context.Context, o workload.MemaslapOptions) (*workload.MemaslapRun, error) {
	return workload.StreamMemaslap(ctx, tb.NS, tb.GuestIP, o)
}

// SaveLog appends text to a file in the log directory.
func (tb *Testbed) SaveLog(name, text string) {
	f, err := os.OpenFile(filepath.Join(tb.LogDir, name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	f.WriteString(text)
}
