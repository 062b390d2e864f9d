package coldring

import (
	"bufio"
	"bytes"
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
	"github.com/npfnic/npfnic/internal/exp/datapath"
	"github.com/npfnic/npfnic/internal/testbed/hostnet"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/vdevice"
)

// Testbed is one TCG guest with one npfnic device served in this process,
// its Ethernet port on a tap whose host end lives in a network namespace of
// its own (package internal/testbed/hostnet), memcached running in the guest. The
// driver is loaded (and reloaded: a fresh load is a cold RX ring) with
// LoadDriver. The experiments of this package and of package faultcost,
// and the VM tests of page faults, build on it.
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
	// Device is the in-process device model (a *nic.NIC).
	Device vdevice.Device
	// LogDir holds the guest's console log, QMP transcript and the device
	// server's log.
	LogDir string
	// Boot is how long the guest took to a working agent.
	Boot time.Duration

	tap    *hostnet.Link
	dev    *vdevice.Device
	loaded bool
	closed sync.Once
}

// TestbedConfig configures StartTestbed.
type TestbedConfig struct {
	Images    *images.Artifacts
	Name      string // guest name, default "coldring"
	MemoryMiB int    // default 1024
	CPUs      int    // default 1
	// Subnet picks the link's addresses 10.79.Subnet.{1,2}/24 (the link
	// lives in its own namespace, so any value works); default 1.
	Subnet int
	LogDir string // required
	// AllowReboot lets the guest reboot (Testbed.Reboot) instead of
	// QEMU exiting.
	AllowReboot bool
	// Progress receives a line per step; nil is quiet.
	Progress func(format string, args ...any)
}

// Names for what a testbed creates on the host (hostnet.UniqueName).
const (
	nsPrefix  = "crn"
	tapPrefix = "crt"
)

// MemcachedPort is where memcached listens in the guest.
const MemcachedPort = 11211

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
	if _, err := MemaslapBinary(); err != nil {
		missing = append(missing, "libmemcached-tools")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing host tools; install them with: apt-get install -y -t bookworm %s", strings.Join(missing, " "))
	}
	return nil
}

// MemaslapBinary finds memaslap; Debian's libmemcached-tools installs it as
// memcaslap.
func MemaslapBinary() (string, error) {
	for _, n := range []string{"memaslap", "memcaslap"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", errors.New("neither memaslap nor memcaslap is installed (Debian package libmemcached-tools)")
}

// StartTestbed boots the guest, moves the tap into its namespace and
// starts memcached in the guest. The driver is not loaded yet.
func StartTestbed(ctx context.Context, c TestbedConfig) (tb *Testbed, err error) {
	if c.Images == nil || c.LogDir == "" {
		return nil, errors.New("coldring: TestbedConfig needs Images and LogDir")
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
		LogDir: c.LogDir, dev: new(vdevice.Device),
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
	progress("booting the guest (%d MiB, %d vCPU, TCG) with npfnic on tap %s; logs in %s", c.MemoryMiB, c.CPUs, tapName, c.LogDir)
	start := time.Now()
	tb.VM, err = vm.Start(ctx, vm.Config{
		Name: c.Name, Images: c.Images, MemoryMiB: c.MemoryMiB, CPUs: c.CPUs, LogDir: c.LogDir,
		AllowReboot: c.AllowReboot,
		NPFNICs:     []vm.NPFNIC{{Server: vm.InProcessServer{Wire: "tap:" + tapName, Device: tb.dev}}},
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
	// 256 MiB of cache holds every object memaslap creates: no misses
	// from eviction. It listens on every address, so it outlives the
	// interface across driver reloads.
	if _, err := tb.Guest(sctx, "memcached", "-u", "root", "-d", "-p", strconv.Itoa(MemcachedPort), "-U", "0", "-m", "256", "-t", "1"); err != nil {
		return nil, fmt.Errorf("guest memcached: %w", err)
	}
	if err := tb.waitListening(sctx, MemcachedPort); err != nil {
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
// and memcached is not running. Needs TestbedConfig.AllowReboot.
func (tb *Testbed) Reboot(ctx context.Context) error {
	if _, err := tb.Shell(ctx, "touch /tmp/before-reboot"); err != nil {
		return err
	}
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	_, _ = tb.VM.Run(rctx, "echo b > /proc/sysrq-trigger") // the guest dies mid-command
	rcancel()
	tb.loaded = false
	for {
		if err := tb.VM.WaitReady(ctx); err != nil {
			return fmt.Errorf("after reboot: %w", err)
		}
		// An answer to a ping sent before the reset may come from the
		// old boot: this is the new one once the marker is gone.
		r, err := tb.VM.Run(ctx, "test -e /tmp/before-reboot")
		if err != nil {
			return fmt.Errorf("after reboot: %w", err)
		}
		if r.Exit != 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the guest did not reboot: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
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
	r, err := tb.VM.Exec(ctx, argv...)
	if err != nil {
		return "", err
	}
	if r.Exit != 0 || r.TimedOut {
		return r.Stdout, fmt.Errorf("guest %s: exit %d (timed out: %v): %s%s", strings.Join(argv, " "), r.Exit, r.TimedOut, r.Stdout, r.Stderr)
	}
	return r.Stdout, nil
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

// KillHostSockets destroys every TCP socket of the host namespace to the
// guest (ss -K), orphans included: a memaslap killed at its cap leaves
// sockets that keep retransmitting into the next run and would count in
// its TCP counters.
func (tb *Testbed) KillHostSockets(ctx context.Context) error {
	_, err := tb.NS.Run(ctx, "ss", "-K", "-t", "dst", tb.GuestIP)
	return err
}

// SysfsPath is a file of the npfnic PCI function in the guest's sysfs.
func (tb *Testbed) SysfsPath(name string) string {
	return "/sys/bus/pci/devices/" + tb.BDF + "/" + name
}

// WriteSysfs writes value to one of the function's sysfs files.
func (tb *Testbed) WriteSysfs(ctx context.Context, name, value string) error {
	// Through dd: the shell's echo > FILE reports success even when the
	// kernel refuses the write; dd exits non-zero. dd reads the value
	// from a file, in one read, so it reaches the kernel in one write:
	// from a pipe, gosh's echo writes "1" and "\n" separately, and a
	// second write of "\n" alone failed with EINVAL under load.
	const tmp = "/tmp/npfnic-sysfs-value"
	if err := tb.VM.Put(ctx, tmp, []byte(value+"\n"), 0o644); err != nil {
		return err
	}
	_, err := tb.Shell(ctx, fmt.Sprintf("dd if=%s of=%s 2>&1", tmp, tb.SysfsPath(name)))
	return err
}

// ReadSysfs reads one of the function's sysfs files.
func (tb *Testbed) ReadSysfs(ctx context.Context, name string) (string, error) {
	b, err := tb.VM.Get(ctx, tb.SysfsPath(name))
	return strings.TrimSpace(string(b)), err
}

// waitListening polls the guest's /proc/net/tcp{,6} until port listens.
func (tb *Testbed) waitListening(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			data, err := tb.VM.Get(ctx, f)
			if err != nil {
				continue
			}
			if p, err := hostnet.ListeningPorts(data); err == nil && p[port] {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing listens on guest port %d after 30 s", port)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// MemaslapRun is one memaslap run against memcached in the guest.
type MemaslapRun struct {
	// Wall is the time from starting memaslap to its exit (or to the cap).
	Wall time.Duration
	// Capped is set when memaslap did not finish within the cap and was
	// killed.
	Capped bool
	// Periods are its periodic statistics (-S), in order.
	Periods []Period
	// Summary is its final summary; nil when it printed none (capped).
	Summary *datapath.Memaslap
	// ExitErr is memaslap's exit error (nil: exit 0).
	ExitErr        error
	Stdout, Stderr string
}

// MemaslapOptions is one memaslap invocation.
type MemaslapOptions struct {
	// Time runs memaslap for this long (-t, whole seconds); else Ops
	// operations (-x).
	Time time.Duration
	Ops  int
	// Conns is the number of connections (-c), on one thread; default 16.
	Conns int
	// StatEvery is the period of its statistics (-S, whole seconds); 0
	// prints none.
	StatEvery time.Duration
	// Cap kills memaslap after this long; required.
	Cap time.Duration
	// CapIsEnd makes reaching the cap the normal end of the run (a
	// wall-clock window), not a failure to finish.
	CapIsEnd bool
	// OnPeriod is called for each period as memaslap prints it.
	OnPeriod func(Period)
}

// Memaslap runs memaslap in the host namespace against the guest's
// memcached: gets and sets 9:1 (memaslap's default), a 1k window per
// connection, 10% of gets verified. Its output goes through stdbuf -oL
// (when the host has it) so periods arrive as they are printed.
func (tb *Testbed) Memaslap(ctx context.Context, o MemaslapOptions) (*MemaslapRun, error) {
	bin, err := MemaslapBinary()
	if err != nil {
		return nil, err
	}
	if o.Conns == 0 {
		o.Conns = 16
	}
	if o.Cap <= 0 {
		return nil, errors.New("memaslap: no cap")
	}
	args := []string{"-s", fmt.Sprintf("%s:%d", tb.GuestIP, MemcachedPort), "-T", "1", "-c", strconv.Itoa(o.Conns), "-w", "1k", "-v", "0.1"}
	if o.Time > 0 {
		args = append(args, "-t", fmt.Sprintf("%ds", int(o.Time/time.Second)))
	} else {
		args = append(args, "-x", strconv.Itoa(o.Ops))
	}
	if o.StatEvery > 0 {
		args = append(args, "-S", fmt.Sprintf("%ds", int(o.StatEvery/time.Second)))
	}
	argv := append([]string{bin}, args...)
	if sb, err := exec.LookPath("stdbuf"); err == nil {
		argv = append([]string{sb, "-oL"}, argv...)
	}
	cctx, cancel := context.WithTimeout(ctx, o.Cap)
	defer cancel()
	cmd := tb.NS.Command(cctx, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	var parser PeriodParser
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		stdout.WriteString(line + "\n")
		if p, ok := parser.LineAt(line, time.Since(start)); ok && o.OnPeriod != nil {
			o.OnPeriod(p)
		}
	}
	runErr := cmd.Wait()
	r := &MemaslapRun{Wall: time.Since(start), Periods: parser.Periods(), ExitErr: runErr,
		Stdout: stdout.String(), Stderr: stderr.String()}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	if cctx.Err() != nil {
		r.Capped = !o.CapIsEnd
		r.Wall = o.Cap
		return r, nil
	}
	if s, err := datapath.ParseMemaslap(r.Stdout, r.Stderr); err == nil {
		r.Summary = s
	} else {
		return r, fmt.Errorf("%w (exit: %v)\nstdout: %s\nstderr: %s", err, runErr, tail(r.Stdout, 1500), tail(r.Stderr, 1500))
	}
	return r, nil
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

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
