// Package datapath is the side-by-side datapath experiment (npfnic exp
// datapath): one guest configuration (memory, vCPUs, accelerator, kernel,
// initramfs) booted once per NIC under test — QEMU's e1000e, QEMU's
// virtio-net-pci on a tap without vhost, and npfnic — measuring in one run,
// through each NIC, iperf3 TCP throughput in both directions and memcached
// operations per second under memaslap, with ratios between the NICs.
//
// The host end of every guest link is a tap that lives in a network
// namespace this package creates (package internal/testbed/hostnet): QEMU
// (or the npfnic device's wire) opens the tap in the root namespace, then
// the tap moves into the namespace, where the host tools (iperf3, memaslap)
// run. No test traffic leaves that namespace.
//
// Every run boots its own guest with the NIC it measures (internal/testbed/vm),
// in the rounds of package runner's loop.
package datapath

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/hostnet"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// NICUnderTest is one kind of NIC under test: how to attach it to a guest with its
// host end on a tap, and how the guest drives it.
type NICUnderTest struct {
	// Name selects it (-nics) and names its files: "e1000e", "virtio", "npfnic".
	Name string
	// Label names it in tables and charts.
	Label string
	// GuestDriver is the guest driver its netdev binds to, as
	// /sys/class/net/IF/device/driver names it.
	GuestDriver string
	// attach adds the NIC to cfg with its host end on the tap named tap.
	attach func(c *Config, cfg *vm.Config, tap string) error
	// load makes the guest driver bind (modules, insmod).
	load func(ctx context.Context, v *vm.VM) error
	// optIn: measured only when named (-nics), not by default or "all".
	optIn bool
}

// NICs is every NIC the experiment knows, in the order it runs them: the
// two QEMU baselines first, then npfnic (and npfnic without large
// receive).
var NICs = []NICUnderTest{
	{
		Name: "e1000e", Label: "QEMU e1000e", GuestDriver: "e1000e",
		attach: func(_ *Config, cfg *vm.Config, tap string) error {
			cfg.NICs = append(cfg.NICs, vm.QEMUNIC{Model: "e1000e", Netdev: vm.Netdev{Kind: "tap", Ifname: tap}})
			return nil
		},
		load: func(ctx context.Context, v *vm.VM) error { return v.LoadModules(ctx, "e1000e") },
	},
	{
		Name: "virtio", Label: "QEMU virtio-net", GuestDriver: "virtio_net",
		attach: func(_ *Config, cfg *vm.Config, tap string) error {
			// vhost=off: the datapath runs in QEMU, like e1000e's.
			cfg.NICs = append(cfg.NICs, vm.QEMUNIC{Model: "virtio-net-pci", Netdev: vm.Netdev{Kind: "tap", Ifname: tap, Extra: "vhost=off"}})
			return nil
		},
		load: func(ctx context.Context, v *vm.VM) error { return v.LoadModules(ctx, "virtio_net", "virtio_pci") },
	},
	{Name: "npfnic", Label: "npfnic", GuestDriver: "npfnic", attach: attachNPFNIC,
		load: func(ctx context.Context, v *vm.VM) error { return v.LoadDriver(ctx, "") }},
	// npfnic-nolro is npfnic with large receive off (the driver's lro=0):
	// host super-packets reach the guest cut into MTU frames, as before
	// interface 2.11. Not in the default list.
	{Name: "npfnic-nolro", Label: "npfnic lro=0", GuestDriver: "npfnic", attach: attachNPFNIC,
		load: func(ctx context.Context, v *vm.VM) error { return v.LoadDriver(ctx, "lro=0") }, optIn: true},
	// npfnic-txirq0 is npfnic with every TX completion interrupting at
	// once (the driver's tx_irq_delay_us=0), as before interface 2.13.
	// Not in the default list.
	{Name: "npfnic-txirq0", Label: "npfnic tx_irq_delay_us=0", GuestDriver: "npfnic", attach: attachNPFNIC,
		load: func(ctx context.Context, v *vm.VM) error { return v.LoadDriver(ctx, "tx_irq_delay_us=0") }, optIn: true},
	// npfnic-notify0 is npfnic writing the RX tail and the interrupt arm
	// to registers (the driver's notify=0), as before interface 2.14.
	// Not in the default list.
	{Name: "npfnic-notify0", Label: "npfnic notify=0", GuestDriver: "npfnic", attach: attachNPFNIC,
		load: func(ctx context.Context, v *vm.VM) error { return v.LoadDriver(ctx, "notify=0") }, optIn: true},
}

// attachNPFNIC adds an npfnic served in this process (or by
// Config.NPFNICServer) with its wire on the tap.
func attachNPFNIC(c *Config, cfg *vm.Config, tap string) error {
	newServer := c.NPFNICServer
	if newServer == nil {
		newServer = func(wire string) (vm.DeviceServer, error) { return InProcessNPFNIC(wire, c.Trace) }
	}
	srv, err := newServer("tap:" + tap)
	if err != nil {
		return err
	}
	cfg.NPFNICs = append(cfg.NPFNICs, vm.NPFNIC{Server: srv})
	return nil
}

// LookupNICs parses a comma-separated list of NIC names ("e1000e,virtio")
// into NICs, in the order given; "all" or "" selects every NIC.
func LookupNICs(list string) ([]NICUnderTest, error) {
	list = strings.TrimSpace(list)
	if list == "" || list == "all" {
		return defaultNICs(), nil
	}
	var out []NICUnderTest
	seen := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		found := false
		for _, nic := range NICs {
			if nic.Name == n {
				if seen[n] {
					return nil, fmt.Errorf("NIC %q listed twice", n)
				}
				seen[n], found = true, true
				out = append(out, nic)
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown NIC %q (want %s)", n, AllNICNames())
		}
	}
	return out, nil
}

// NICNames lists the NICs measured by default, comma-separated.
func NICNames() string { return names(defaultNICs()) }

// AllNICNames lists every known NIC name, comma-separated.
func AllNICNames() string { return names(NICs) }

func names(nics []NICUnderTest) string {
	var out []string
	for _, n := range nics {
		out = append(out, n.Name)
	}
	return strings.Join(out, ",")
}

// defaultNICs is NICs without the opt-in ones.
func defaultNICs() []NICUnderTest {
	var out []NICUnderTest
	for _, n := range NICs {
		if !n.optIn {
			out = append(out, n)
		}
	}
	return out
}

// Config is one run of the experiment.
type Config struct {
	// Env's Images are required; its LogDir keeps each guest's console
	// log, QMP transcript and device server log under LogDir/NIC (default
	// a temporary directory).
	runner.Env
	// NICs to measure, in order; default all of NICs.
	NICs []NICUnderTest
	// MemoryMiB and CPUs are the guest's, the same for every NIC.
	MemoryMiB int // default 1024
	CPUs      int // default 1
	// IperfTime is the length of each iperf3 run (one per direction);
	// whole seconds, default 10 s.
	IperfTime time.Duration
	// MemaslapTime is the length of the memaslap run; whole seconds,
	// default 10 s.
	MemaslapTime time.Duration
	// MemaslapConcurrency is memaslap's number of connections; default 16.
	MemaslapConcurrency int
	// Rounds repeats the whole sequence of NICs (interleaved: e1000e,
	// virtio, npfnic, e1000e, ...), so that a burst of load on a shared
	// host hits every NIC alike; Summarize takes the median and the range.
	// Default 3, as the other experiments: one noisy run must not decide.
	Rounds int
	// GuestProfile boots each guest with the kernel's tick profiler
	// (profile=ProfileShift) and reports, per phase and NIC, the kernel's
	// CPU time per unit of work by function (ProfileTable).
	GuestProfile bool
	// NPFNICServer makes the device server for the npfnic NICUnderTest, its
	// Ethernet port on the given wire spec ("tap:IFNAME", see package
	// vdevice/port); default InProcessNPFNIC.
	NPFNICServer func(wire string) (vm.DeviceServer, error)
}

// Defaults for Config fields left zero.
const (
	DefaultMemoryMiB           = 1024
	DefaultCPUs                = 1
	DefaultIperfTime           = 10 * time.Second
	DefaultMemaslapTime        = 10 * time.Second
	DefaultMemaslapConcurrency = 16
	DefaultRounds              = 3
)

func (c *Config) setDefaults() {
	if len(c.NICs) == 0 {
		c.NICs = defaultNICs()
	}
	c.MemoryMiB = cmp.Or(c.MemoryMiB, DefaultMemoryMiB)
	c.CPUs = cmp.Or(c.CPUs, DefaultCPUs)
	c.IperfTime = cmp.Or(c.IperfTime, DefaultIperfTime)
	c.MemaslapTime = cmp.Or(c.MemaslapTime, DefaultMemaslapTime)
	c.MemaslapConcurrency = cmp.Or(c.MemaslapConcurrency, DefaultMemaslapConcurrency)
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
}

// Validate checks what a user chose (after defaults), before any image
// is built; Run also needs Images.
func (c *Config) Validate() error {
	c.setDefaults()
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"iperf3 time", c.IperfTime}, {"memaslap time", c.MemaslapTime}} {
		if d.d < time.Second || d.d > time.Hour || d.d%time.Second != 0 {
			return fmt.Errorf("%s %v: want whole seconds from 1 s to 1 h", d.name, d.d)
		}
	}
	if c.MemoryMiB < 256 || c.CPUs < 1 || c.CPUs > 64 {
		return fmt.Errorf("guest of %d MiB and %d vCPUs: want at least 256 MiB and 1 to 64 vCPUs", c.MemoryMiB, c.CPUs)
	}
	if c.MemaslapConcurrency < 1 || c.MemaslapConcurrency > 1024 {
		return fmt.Errorf("memaslap concurrency %d: want 1 to 1024", c.MemaslapConcurrency)
	}
	if c.Rounds < 1 || c.Rounds > 100 {
		return fmt.Errorf("%d rounds: want 1 to 100", c.Rounds)
	}
	return nil
}

// Result is what one NIC measured in one round, or (Round 0, from
// Summarize) the median over the rounds. A NIC whose run failed has Err
// set and whatever it measured before the failure.
type Result struct {
	NIC   string
	Label string
	// Round counts from 1; 0 marks a summary of Rounds rounds.
	Round, Rounds int
	// Boot is the guest's boot time to a working agent.
	Boot time.Duration
	// GuestIf is the guest's interface for the NIC (e.g. eth0).
	GuestIf string
	// GuestToHost and HostToGuest are the iperf3 TCP runs; the receiver's
	// count of bytes over the run's duration.
	GuestToHost, HostToGuest *workload.Iperf
	// Memcached is the memaslap run against memcached in the guest.
	Memcached *workload.Memaslap
	// G2HCPU, H2GCPU and MemcachedCPU are where the guest's CPUs went
	// during each phase (nil if the guest's counters could not be read):
	// per MB received for iperf3, per request for memcached.
	G2HCPU, H2GCPU, MemcachedCPU *GuestCPU
	// G2HProfile, H2GProfile and MemcachedProfile are the guest kernel's
	// profile of each phase (Config.GuestProfile; nil without).
	G2HProfile, H2GProfile, MemcachedProfile *PhaseProfile
	// HostLoad is the host's 1-minute load average when the measurements
	// ended: a loaded (shared) host makes the numbers noisy.
	HostLoad float64
	Err      error
}

// Run measures every configured NIC in turn, Rounds times, and returns a
// Result per round and NIC, round after round in NIC order (Summarize
// reduces them to one per NIC). A NIC that fails does not stop the others;
// Run's error is nil unless the run as a whole could not start or ctx
// ended, so look at each Result.Err.
func Run(ctx context.Context, c Config) ([]Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Images == nil {
		return nil, errors.New("datapath: Config.Images is required")
	}
	if c.LogDir == "" {
		d, err := os.MkdirTemp("", "npfnic-datapath-")
		if err != nil {
			return nil, err
		}
		c.LogDir = d
	}
	index := map[string]int{}
	for i, nic := range c.NICs {
		index[nic.Name] = i
	}
	var results []Result
	// Every run boots its own guest, with the NIC it measures.
	err := runner.Loop[runner.NoBench, NICUnderTest]{
		Env:       &c.Env,
		Transport: runner.Transport[runner.NoBench]{Check: checkHost},
		Steps:     runner.Rounds(c.Rounds, func(int) []NICUnderTest { return c.NICs }),
		Run: func(ctx context.Context, _ runner.NoBench, s runner.Step[NICUnderTest], label string) error {
			c.Logf("%s: %s", label, s.Arm.Label)
			r := runNIC(ctx, &c, index[s.Arm.Name], s.Arm, s.Round)
			r.Round, r.Rounds = s.Round, c.Rounds
			r.HostLoad = report.HostLoad()
			results = append(results, r)
			return r.Err
		},
	}.Go(ctx)
	return results, err
}

func (n NICUnderTest) String() string { return n.Name }

// checkHost fails without the host's tools and removes what a killed run
// left on the host.
func checkHost(e *runner.Env) error {
	if err := testbed.CheckHost(); err != nil {
		return fmt.Errorf("datapath: %w", err)
	}
	for _, p := range HostNamePrefixes {
		if reaped, err := hostnet.ReapStale(p); err != nil {
			e.Logf("cleaning up after an earlier run: %v", err)
		} else if len(reaped) > 0 {
			e.Logf("removed leftovers of an earlier run: %s", strings.Join(reaped, ", "))
		}
	}
	return nil
}

// Report is what the runner prints and writes of a run.
func Report(c Config, results []Result) *runner.Outcome {
	if len(results) == 0 {
		return nil
	}
	var failed []string
	for _, r := range Summarize(results) {
		if r.Err != nil {
			failed = append(failed, r.NIC)
		}
	}
	o := &runner.Outcome{
		Table: Table(c, results),
		Write: func(dir string) ([]string, error) { return WriteOutputs(dir, c, results) },
		Logs:  c.LogDir,
	}
	if len(failed) > 0 {
		o.Failed = errors.New("failed NICs: " + strings.Join(failed, ", ") + " (see above and their logs)")
	}
	return o
}

// Names for what a run creates on the host (see hostnet.UniqueName).
const (
	nsPrefix  = "dpn"
	tapPrefix = "dpt"
)

// HostNamePrefixes are the prefixes of every name a run gives its
// namespaces and taps: what a leak check looks for.
var HostNamePrefixes = []string{nsPrefix, tapPrefix}

// The guest's and the host's addresses on link i: 10.77.(i+1).{2,1}/24.
// Each link lives in its own namespace, so runs never collide.
func linkAddrs(i int) (host, guest string) {
	return fmt.Sprintf("10.77.%d.1", i+1), fmt.Sprintf("10.77.%d.2", i+1)
}

// runNIC boots the guest with one NIC and measures it.
func runNIC(ctx context.Context, c *Config, idx int, nic NICUnderTest, round int) (r Result) {
	r = Result{NIC: nic.Name, Label: nic.Label}
	fail := func(format string, args ...any) Result {
		r.Err = fmt.Errorf(format, args...)
		return r
	}
	step := func(format string, args ...any) { c.Logf(nic.Name+": "+format, args...) }
	hostIP, guestIP := linkAddrs(idx)

	ns, err := hostnet.NewUniqueNamespace(nsPrefix)
	if err != nil {
		return fail("network namespace: %w", err)
	}
	defer ns.Close()
	tapName, err := hostnet.UniqueName(tapPrefix)
	if err != nil {
		return fail("%w", err)
	}
	tap, err := hostnet.CreateTap(tapName)
	if err != nil {
		return fail("tap: %w", err)
	}
	defer tap.Delete()

	logDir := filepath.Join(c.LogDir, nic.Name)
	if c.Rounds > 1 {
		logDir = filepath.Join(c.LogDir, fmt.Sprintf("%s-%d", nic.Name, round))
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fail("%w", err)
	}
	accel, err := vm.ResolveAccel(ctx, c.Images, c.Accel)
	if err != nil {
		return fail("%w", err)
	}
	cfg := vm.Config{
		Name: "datapath-" + nic.Name, Images: c.Images, MemoryMiB: c.MemoryMiB, CPUs: c.CPUs, Accel: accel, LogDir: logDir,
	}
	var prof *profiler
	if c.GuestProfile {
		hz, err := KernelHZ(c.Images.Kernel)
		if err != nil {
			return fail("guest profile: %w", err)
		}
		cfg.Append = fmt.Sprintf("profile=%d", ProfileShift)
		prof = &profiler{hz: hz}
	}
	if err := nic.attach(c, &cfg, tapName); err != nil {
		return fail("attach %s: %w", nic.Label, err)
	}
	step("booting the guest (%d MiB, %d vCPU, %s) with %s on tap %s; logs in %s", c.MemoryMiB, c.CPUs, accel, nic.Label, tapName, logDir)
	start := time.Now()
	v, err := vm.Start(ctx, cfg)
	if err != nil {
		return fail("boot: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := v.Shutdown(sctx); err != nil {
			step("shutdown: %v", err)
		}
	}()
	r.Boot = time.Since(start)
	step("guest up in %.1fs", r.Boot.Seconds())

	// QEMU (or the device's wire) holds the tap open: move its host end
	// into the namespace, where all test traffic stays.
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := hostnet.MoveToNamespace(tap, ns); err != nil {
		return fail("%w", err)
	}
	if err := tap.Configure(sctx, hostIP+"/24"); err != nil {
		return fail("host end: %w", err)
	}
	if err := nic.load(sctx, v); err != nil {
		return fail("load the guest driver: %w", err)
	}
	g := guest{v: v}
	if prof != nil {
		prof.g = g
	}
	if r.GuestIf, err = g.findInterface(sctx, nic.GuestDriver); err != nil {
		return fail("%w", err)
	}
	if err := g.configure(sctx, r.GuestIf, guestIP+"/24"); err != nil {
		return fail("%w", err)
	}
	if err := waitReachable(sctx, ns, guestIP); err != nil {
		return fail("%w", err)
	}
	step("link up: host %s (netns %s, %s) <-> guest %s (%s)", hostIP, ns.Name(), tapName, guestIP, r.GuestIf)
	if err := g.startServers(sctx); err != nil {
		return fail("%w", err)
	}
	if _, err := ns.StartIperf3Server(sctx, workload.IperfPort); err != nil {
		return fail("host iperf3 server: %w", err)
	}
	cancel()

	// The guest's CPU time and the NIC's interrupts, read just before and
	// after each phase: where the guest's vCPUs go per unit of work.
	irqs, err := g.nicIRQs(ctx, r.GuestIf)
	if err != nil {
		step("not counting the NIC's interrupts: %v", err)
	}
	// With GuestProfile, the kernel's profile of the phase goes to *kp.
	phaseCPU := func(phase string, kp **PhaseProfile, run func() (units float64, err error)) (*GuestCPU, error) {
		profiling := prof != nil
		if profiling {
			if err := prof.reset(ctx); err != nil {
				step("%s: guest kernel not profiled: %v", phase, err)
				profiling = false
			}
		}
		hostB, hostErrB := sampleHost(v.QEMUPid())
		before, irqErrB, errB := g.sampleCPU(ctx, irqs)
		units, err := run()
		if err != nil {
			return nil, err
		}
		after, irqErrA, errA := g.sampleCPU(ctx, irqs)
		hostA, hostErrA := sampleHost(v.QEMUPid())
		if profiling {
			if *kp, err = prof.read(ctx, units); err != nil {
				step("%s: guest kernel not profiled: %v", phase, err)
			}
		}
		if err := cmp.Or(errB, errA); err != nil {
			step("%s: guest CPU not measured: %v", phase, err)
			return nil, nil
		}
		if err := cmp.Or(irqErrB, irqErrA); err != nil {
			step("%s: NIC interrupts not counted: %v", phase, err)
		}
		gc := between(before, after, units)
		if err := cmp.Or(hostErrB, hostErrA); err != nil {
			step("%s: host CPU not measured: %v", phase, err)
		} else {
			gc.setHost(hostB, hostA)
		}
		step("%s: guest CPU %s", phase, gc)
		return gc, nil
	}

	secs := fmt.Sprint(int(c.IperfTime / time.Second))
	step("iperf3 guest -> host, %s s ...", secs)
	if r.G2HCPU, err = phaseCPU("guest -> host", &r.G2HProfile, func() (float64, error) {
		var err error
		r.GuestToHost, err = workload.GuestIperf3(ctx, v, hostIP, c.IperfTime)
		if err != nil {
			return 0, err
		}
		return float64(r.GuestToHost.Bytes) / 1e6, nil
	}); err != nil {
		return fail("iperf3 guest -> host: %w", err)
	}
	step("iperf3 guest -> host: %s", r.GuestToHost)
	step("iperf3 host -> guest, %s s ...", secs)
	if r.H2GCPU, err = phaseCPU("host -> guest", &r.H2GProfile, func() (float64, error) {
		var err error
		r.HostToGuest, err = workload.HostIperf3(ctx, ns, guestIP, c.IperfTime)
		if err != nil {
			return 0, err
		}
		return float64(r.HostToGuest.Bytes) / 1e6, nil
	}); err != nil {
		return fail("iperf3 host -> guest: %w", err)
	}
	step("iperf3 host -> guest: %s", r.HostToGuest)
	step("memaslap -> memcached in the guest, %d connections, %d s ...", c.MemaslapConcurrency, int(c.MemaslapTime/time.Second))
	if r.MemcachedCPU, err = phaseCPU("memcached", &r.MemcachedProfile, func() (float64, error) {
		var err error
		r.Memcached, err = workload.RunMemaslap(ctx, ns, guestIP, c.MemaslapTime, c.MemaslapConcurrency)
		if err != nil {
			return 0, err
		}
		return float64(r.Memcached.Ops), nil
	}); err != nil {
		return fail("memaslap: %w", err)
	}
	step("memaslap: %s", r.Memcached)
	if r.Memcached.Errors > 0 {
		return fail("memaslap reported %d errors: %s", r.Memcached.Errors, strings.Join(r.Memcached.ErrorLines, "; "))
	}
	return r
}

// waitReachable pings the guest from the namespace until it answers (the
// guest link may need a few seconds to come up), for at most a minute.
func waitReachable(ctx context.Context, ns *hostnet.Namespace, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		r, err := ns.Ping(ctx, addr, 1, 0, time.Second)
		if err == nil && r.Received > 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the guest (%s) does not answer ping from the host end within a minute", addr)
		}
		if err != nil {
			// e.g. no route while the link is still down: retry.
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}
