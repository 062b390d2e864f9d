package datapath

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/npfnic/npfnic/internal/report"
)

// CPUTicks is the guest's aggregate "cpu" line of /proc/stat: time
// spent by all its CPUs in each state since boot, in USER_HZ ticks
// (10 ms on Linux x86).
type CPUTicks struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// TickSeconds is the length of a /proc/stat tick (USER_HZ is 100 on
// every Linux architecture the guest runs).
const TickSeconds = 0.01

// Total is every tick, busy or idle.
func (t CPUTicks) Total() uint64 {
	return t.User + t.Nice + t.System + t.Idle + t.IOWait + t.IRQ + t.SoftIRQ + t.Steal
}

// Busy is every tick neither idle nor waiting for I/O.
func (t CPUTicks) Busy() uint64 { return t.Total() - t.Idle - t.IOWait }

// Sub is the ticks from b to t (t taken after b). A counter that went
// backwards (it never does) counts 0.
func (t CPUTicks) Sub(b CPUTicks) CPUTicks {
	d := func(x, y uint64) uint64 {
		if x < y {
			return 0
		}
		return x - y
	}
	return CPUTicks{
		User: d(t.User, b.User), Nice: d(t.Nice, b.Nice), System: d(t.System, b.System),
		Idle: d(t.Idle, b.Idle), IOWait: d(t.IOWait, b.IOWait), IRQ: d(t.IRQ, b.IRQ),
		SoftIRQ: d(t.SoftIRQ, b.SoftIRQ), Steal: d(t.Steal, b.Steal),
	}
}

// ParseProcStat reads the aggregate "cpu" line of /proc/stat. Kernels
// before 2.6.11 had fewer columns: the first four (user, nice, system,
// idle) are required, missing later ones count 0.
func ParseProcStat(s string) (CPUTicks, error) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		f = f[1:]
		if len(f) < 4 {
			return CPUTicks{}, fmt.Errorf("/proc/stat: cpu line has %d counters, want at least 4: %q", len(f), line)
		}
		var v [8]uint64
		var sum uint64
		for i := 0; i < len(v) && i < len(f); i++ {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return CPUTicks{}, fmt.Errorf("/proc/stat: cpu line: counter %d: %w", i+1, err)
			}
			if sum+n < sum { // Total would wrap around: a corrupt line
				return CPUTicks{}, fmt.Errorf("/proc/stat: cpu line overflows: %q", line)
			}
			v[i], sum = n, sum+n
		}
		return CPUTicks{User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4], IRQ: v[5], SoftIRQ: v[6], Steal: v[7]}, nil
	}
	return CPUTicks{}, errors.New("/proc/stat: no aggregate cpu line")
}

// ParseInterrupts sums, over every CPU, the counts /proc/interrupts
// shows for the numbered interrupts in irqs ("24: 10 20 PCI-MSI ...").
// Named rows (NMI, LOC, ...) and interrupts not in irqs are skipped; an
// interrupt in irqs that has no row is an error (the NIC's interrupts
// must all be there).
func ParseInterrupts(s string, irqs []int) (uint64, error) {
	want := map[int]bool{}
	for _, n := range irqs {
		want[n] = true
	}
	lines := strings.Split(s, "\n")
	if len(lines) == 0 {
		return 0, errors.New("/proc/interrupts: empty")
	}
	// The header names one column per CPU.
	cpus := len(strings.Fields(lines[0]))
	if cpus == 0 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "CPU") {
		return 0, fmt.Errorf("/proc/interrupts: header %q does not name CPUs", lines[0])
	}
	var sum uint64
	found := map[int]bool{}
	for _, line := range lines[1:] {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(name))
		if err != nil || !want[n] {
			continue
		}
		if found[n] {
			return 0, fmt.Errorf("/proc/interrupts: interrupt %d listed twice", n)
		}
		found[n] = true
		f := strings.Fields(rest)
		if len(f) < cpus {
			return 0, fmt.Errorf("/proc/interrupts: interrupt %d has %d counts for %d CPUs", n, len(f), cpus)
		}
		for _, c := range f[:cpus] {
			v, err := strconv.ParseUint(c, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/interrupts: interrupt %d: %w", n, err)
			}
			if sum+v < sum {
				return 0, fmt.Errorf("/proc/interrupts: interrupt %d: count overflows", n)
			}
			sum += v
		}
	}
	for n := range want {
		if !found[n] {
			return 0, fmt.Errorf("/proc/interrupts: no interrupt %d", n)
		}
	}
	return sum, nil
}

// ParseIRQList reads the interrupt numbers a device's sysfs lists: the
// names of /sys/.../msi_irqs (one per line or space-separated), or the
// single number of its irq file.
func ParseIRQList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("interrupt number %q", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no interrupt numbers")
	}
	return out, nil
}

// GuestCPU is where the guest's CPUs went during one phase of a run:
// the share of their time in each state, and the busy time and the NIC's
// interrupts per unit of work (a megabyte received for iperf3, a request
// for memcached). A summary (Summarize) holds each field's median.
type GuestCPU struct {
	// Seconds of CPU time the phase lasted (all CPUs); the percentages
	// are of it.
	Seconds                                      float64
	BusyPct, UserPct, SysPct, IRQPct, SoftIRQPct float64
	// Units of work done in the phase: MB (10^6 bytes) or requests.
	Units float64
	// CPUMicrosPerUnit is the busy CPU time per unit, in microseconds.
	CPUMicrosPerUnit float64
	// IRQs is the NIC's interrupts in the phase (-1: not counted).
	IRQs, IRQsPerUnit float64
	// Host CPU µs per unit (hostcpu.go; -1: not measured): QEMU's vCPU
	// threads, QEMU's other threads, and this process (npfnic's device
	// server runs in it).
	HostVCPUMicros, HostQEMUMicros, HostThisMicros float64
}

// NewGuestCPU derives a phase's GuestCPU from its tick difference d, the
// NIC's interrupts in it (negative: not counted) and its units of work.
func NewGuestCPU(d CPUTicks, irqs float64, units float64) *GuestCPU {
	g := &GuestCPU{Seconds: float64(d.Total()) * TickSeconds, Units: units, IRQs: irqs, IRQsPerUnit: -1, CPUMicrosPerUnit: -1,
		HostVCPUMicros: -1, HostQEMUMicros: -1, HostThisMicros: -1}
	if tot := float64(d.Total()); tot > 0 {
		pct := func(x uint64) float64 { return 100 * float64(x) / tot }
		g.BusyPct, g.UserPct, g.SysPct, g.IRQPct, g.SoftIRQPct = pct(d.Busy()), pct(d.User+d.Nice), pct(d.System), pct(d.IRQ), pct(d.SoftIRQ)
	}
	if units > 0 {
		g.CPUMicrosPerUnit = float64(d.Busy()) * TickSeconds * 1e6 / units
		if irqs >= 0 {
			g.IRQsPerUnit = irqs / units
		}
	}
	return g
}

// medianGuestCPU is the field-wise median of xs (nil without any).
// Negative fields mean "not measured" and are left out.
func medianGuestCPU(xs []*GuestCPU) *GuestCPU {
	if len(xs) == 0 {
		return nil
	}
	if len(xs) == 1 {
		return xs[0]
	}
	med := func(get func(*GuestCPU) float64) float64 {
		var v []float64
		for _, x := range xs {
			if y := get(x); y >= 0 {
				v = append(v, y)
			}
		}
		if len(v) == 0 {
			return -1
		}
		return report.Median(v)
	}
	return &GuestCPU{
		Seconds:          med(func(g *GuestCPU) float64 { return g.Seconds }),
		BusyPct:          med(func(g *GuestCPU) float64 { return g.BusyPct }),
		UserPct:          med(func(g *GuestCPU) float64 { return g.UserPct }),
		SysPct:           med(func(g *GuestCPU) float64 { return g.SysPct }),
		IRQPct:           med(func(g *GuestCPU) float64 { return g.IRQPct }),
		SoftIRQPct:       med(func(g *GuestCPU) float64 { return g.SoftIRQPct }),
		Units:            med(func(g *GuestCPU) float64 { return g.Units }),
		CPUMicrosPerUnit: med(func(g *GuestCPU) float64 { return g.CPUMicrosPerUnit }),
		IRQs:             med(func(g *GuestCPU) float64 { return g.IRQs }),
		IRQsPerUnit:      med(func(g *GuestCPU) float64 { return g.IRQsPerUnit }),
		HostVCPUMicros:   med(func(g *GuestCPU) float64 { return g.HostVCPUMicros }),
		HostQEMUMicros:   med(func(g *GuestCPU) float64 { return g.HostQEMUMicros }),
		HostThisMicros:   med(func(g *GuestCPU) float64 { return g.HostThisMicros }),
	}
}

// cpuSample is the guest's CPU ticks and its NIC's interrupts at one
// moment (NICIRQs -1: not counted).
type cpuSample struct {
	ticks   CPUTicks
	nicIRQs float64
}

// nicIRQs finds the interrupt numbers of the PCI function behind
// ifname: its MSI/MSI-X vectors, or its legacy interrupt. A virtio-net's
// netdev hangs off a virtio device whose parent is the PCI function.
// (Paths are resolved in the guest: Go tools there clean "dev/.."
// lexically, which would skip the symlink.)
func (g guest) nicIRQs(ctx context.Context, ifname string) ([]int, error) {
	link := path.Join("/sys/class/net", ifname, "device")
	out, err := g.run(ctx, "readlink", "-f", link)
	if err != nil {
		return nil, fmt.Errorf("interrupts of %s: %w", ifname, err)
	}
	dev := strings.TrimSpace(out)
	dirs := []string{dev, path.Dir(dev)}
	for _, d := range dirs {
		if out, err := g.run(ctx, "ls", d+"/msi_irqs"); err == nil {
			if irqs, err := ParseIRQList(out); err == nil {
				return irqs, nil
			}
		}
	}
	var errs []error
	for _, d := range dirs {
		b, err := g.v.Get(ctx, d+"/irq")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		irqs, err := ParseIRQList(string(b))
		if err == nil && irqs[0] != 0 {
			return irqs, nil
		}
		errs = append(errs, fmt.Errorf("%s/irq: %q", d, b))
	}
	return nil, fmt.Errorf("interrupts of %s: %w", ifname, errors.Join(errs...))
}

// sampleCPU reads the guest's /proc/stat and, if irqs is not empty, the
// sum of those interrupts' counts in /proc/interrupts. Interrupts that
// cannot be counted leave nicIRQs at -1 and are irqErr; the CPU ticks
// are still good.
func (g guest) sampleCPU(ctx context.Context, irqs []int) (s cpuSample, irqErr, err error) {
	s.nicIRQs = -1
	b, err := g.v.Get(ctx, "/proc/stat")
	if err != nil {
		return s, nil, err
	}
	if s.ticks, err = ParseProcStat(string(b)); err != nil {
		return s, nil, err
	}
	if len(irqs) == 0 {
		return s, nil, nil
	}
	if b, err = g.v.Get(ctx, "/proc/interrupts"); err != nil {
		return s, err, nil
	}
	n, err := ParseInterrupts(string(b), irqs)
	if err != nil {
		return s, err, nil
	}
	s.nicIRQs = float64(n)
	return s, nil, nil
}

// between is the GuestCPU of the phase from a to b, in which units of
// work were done.
func between(a, b cpuSample, units float64) *GuestCPU {
	irqs := -1.0
	if a.nicIRQs >= 0 && b.nicIRQs >= a.nicIRQs {
		irqs = b.nicIRQs - a.nicIRQs
	}
	return NewGuestCPU(b.ticks.Sub(a.ticks), irqs, units)
}

func (g *GuestCPU) String() string {
	s := fmt.Sprintf("%.0f%% busy (user %.0f%%, sys %.0f%%, irq %.0f%%, softirq %.0f%%) of %.1f s", g.BusyPct, g.UserPct, g.SysPct, g.IRQPct, g.SoftIRQPct, g.Seconds)
	if g.CPUMicrosPerUnit >= 0 {
		s += fmt.Sprintf(", %.0f µs per unit", g.CPUMicrosPerUnit)
	}
	if g.IRQs >= 0 {
		s += fmt.Sprintf(", %.0f NIC interrupts", g.IRQs)
		if g.IRQsPerUnit >= 0 {
			s += fmt.Sprintf(" (%.2f per unit)", g.IRQsPerUnit)
		}
	}
	return s
}
