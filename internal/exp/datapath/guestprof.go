package datapath

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/report"
)

// The guest kernel's own profiler (CONFIG_PROFILING, booted with
// "profile=N") counts, at every timer tick the CPU spends in the kernel,
// the bucket of kernel text the tick interrupted. It needs no PMU (TCG
// has none), no perf binary in the guest and no symbols on the host
// (Debian's System.map is a placeholder): /proc/kallsyms names the
// buckets. It is how a phase's kernel time splits by function, side by
// side for each NIC.

// ProfileShift is the profile=N the guest boots with: buckets of 2^N
// bytes of kernel text. 16 bytes is x86-64's function alignment, so a
// bucket rarely holds two functions, and /proc/profile stays a few MiB.
const ProfileShift = 4

// ModulesLabel names the ticks of every loaded module: the profiler
// counts an address beyond the kernel's text (where modules live) in its
// last bucket. Both NICs' drivers are modules, so this is mostly the
// driver's own time.
const ModulesLabel = "(modules: the NIC driver)"

// KernelProfile is /proc/profile: the bucket size and ticks per bucket
// from _stext.
type KernelProfile struct {
	Step    uint64
	Buckets []uint32
}

// ParseProcProfile reads /proc/profile: native-endian (little on x86)
// unsigned ints, the first the bucket size in bytes (a power of two),
// then one tick count per bucket.
func ParseProcProfile(b []byte) (KernelProfile, error) {
	if len(b) < 8 || len(b)%4 != 0 {
		return KernelProfile{}, fmt.Errorf("/proc/profile: %d bytes, want a whole number of 4-byte counters, at least 2", len(b))
	}
	step := binary.LittleEndian.Uint32(b)
	if step == 0 || bits.OnesCount32(step) != 1 {
		return KernelProfile{}, fmt.Errorf("/proc/profile: bucket size %d is not a power of two", step)
	}
	p := KernelProfile{Step: uint64(step), Buckets: make([]uint32, len(b)/4-1)}
	for i := range p.Buckets {
		p.Buckets[i] = binary.LittleEndian.Uint32(b[4+4*i:])
	}
	return p, nil
}

// KernelSymbols are the kernel's text symbols, from /proc/kallsyms,
// sorted by address.
type KernelSymbols struct {
	stext uint64
	addrs []uint64
	names []string
}

// ParseKallsyms reads the kernel's own text symbols (types t, T, w, W;
// modules' are left out) from /proc/kallsyms. Addresses hidden by
// kptr_restrict (all zero) are an error: nothing could be named.
func ParseKallsyms(r io.Reader) (*KernelSymbols, error) {
	type sym struct {
		addr uint64
		name string
	}
	var syms []sym
	k := &KernelSymbols{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 { // a module's symbol has a fourth field, [module]
			continue
		}
		switch f[1] {
		case "t", "T", "w", "W":
		default:
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/kallsyms: %q: %w", sc.Text(), err)
		}
		if f[2] == "_stext" {
			k.stext = addr
		}
		syms = append(syms, sym{addr, f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("/proc/kallsyms: %w", err)
	}
	if k.stext == 0 {
		return nil, errors.New("/proc/kallsyms: no _stext, or addresses hidden (kptr_restrict)")
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	for _, s := range syms {
		k.addrs = append(k.addrs, s.addr)
		k.names = append(k.names, s.name)
	}
	return k, nil
}

// name is the function that holds addr: the last symbol at or below it.
func (k *KernelSymbols) name(addr uint64) string {
	i := sort.Search(len(k.addrs), func(i int) bool { return k.addrs[i] > addr })
	if i == 0 {
		return fmt.Sprintf("(below _stext+%#x)", addr-k.stext)
	}
	return k.names[i-1]
}

// Functions attributes p's ticks to the functions whose text each
// bucket starts in; the last bucket's go to ModulesLabel.
func (k *KernelSymbols) Functions(p KernelProfile) map[string]uint64 {
	out := map[string]uint64{}
	for i, n := range p.Buckets {
		if n == 0 {
			continue
		}
		if i == len(p.Buckets)-1 {
			out[ModulesLabel] += uint64(n)
			continue
		}
		out[k.name(k.stext+uint64(i)*p.Step)] += uint64(n)
	}
	return out
}

// PhaseProfile is where the guest kernel's ticks went in one phase.
type PhaseProfile struct {
	// Ticks per function (ModulesLabel for every module).
	Ticks map[string]uint64
	// HZ is the kernel's tick rate: a tick is 1/HZ s of kernel time.
	HZ int
	// Units of work the phase did, as GuestCPU.Units.
	Units float64
}

// Total is the phase's kernel ticks.
func (p *PhaseProfile) Total() uint64 {
	var t uint64
	for _, n := range p.Ticks {
		t += n
	}
	return t
}

// KernelHZ reads CONFIG_HZ from the guest kernel's config in the images.
func KernelHZ(k images.Kernel) (int, error) {
	path := filepath.Join(k.Root, "boot", "config-"+k.Release)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CONFIG_HZ="); ok {
			hz, err := strconv.Atoi(v)
			if err != nil || hz <= 0 {
				return 0, fmt.Errorf("%s: CONFIG_HZ=%q", path, v)
			}
			return hz, nil
		}
	}
	return 0, fmt.Errorf("%s: no CONFIG_HZ", path)
}

// profiler resets and reads the guest's kernel profile around a phase.
type profiler struct {
	g    guest
	hz   int
	syms *KernelSymbols // read once per boot (KASLR moves the text)
}

// gzipped runs `gzip < file` in the guest and returns file's bytes: the
// agent's serial line is slow, and a profile is mostly zeros.
func (p *profiler) gzipped(ctx context.Context, file string) ([]byte, error) {
	r, err := p.g.v.Run(ctx, "gzip -f -1 < "+file)
	if err != nil {
		return nil, err
	}
	if r.Exit != 0 || r.TimedOut {
		return nil, fmt.Errorf("guest gzip < %s: exit %d: %s", file, r.Exit, r.Stderr)
	}
	zr, err := gzip.NewReader(strings.NewReader(r.Stdout))
	if err != nil {
		return nil, fmt.Errorf("guest gzip < %s: %w", file, err)
	}
	// A profile is a few MiB, kallsyms about 10: more is not what was asked for.
	b, err := io.ReadAll(io.LimitReader(zr, maxGuestFile+1))
	if err == nil && len(b) > maxGuestFile {
		err = fmt.Errorf("guest %s: more than %d MiB", file, maxGuestFile>>20)
	}
	return b, err
}

// maxGuestFile bounds what gzipped decompresses.
const maxGuestFile = 64 << 20

// reset zeroes the guest's profile. A write of other than 4 bytes
// resets it (4 bytes would set the SMP multiplier).
func (p *profiler) reset(ctx context.Context) error {
	if p.syms == nil {
		b, err := p.gzipped(ctx, "/proc/kallsyms")
		if err != nil {
			return err
		}
		if p.syms, err = ParseKallsyms(bytes.NewReader(b)); err != nil {
			return err
		}
	}
	r, err := p.g.v.Run(ctx, "echo 0 > /proc/profile")
	if err != nil {
		return err
	}
	if r.Exit != 0 {
		return fmt.Errorf("reset /proc/profile (was the guest booted with profile=%d?): exit %d: %s", ProfileShift, r.Exit, r.Stderr)
	}
	return nil
}

// read takes the profile since reset, for a phase that did units of work.
func (p *profiler) read(ctx context.Context, units float64) (*PhaseProfile, error) {
	b, err := p.gzipped(ctx, "/proc/profile")
	if err != nil {
		return nil, err
	}
	kp, err := ParseProcProfile(b)
	if err != nil {
		return nil, err
	}
	return &PhaseProfile{Ticks: p.syms.Functions(kp), HZ: p.hz, Units: units}, nil
}

// profileTop is how many functions a phase's profile table shows.
const profileTop = 16

// ProfileTable sets each phase's guest kernel profile side by side per
// NIC, summed over the rounds: kernel µs per unit of work (MB received,
// request), by function, the functions that cost most in any NIC first
// ("" without profiles).
func ProfileTable(results []Result) string {
	var nics []string
	for _, r := range results {
		if !slices.Contains(nics, r.Label) {
			nics = append(nics, r.Label)
		}
	}
	var b strings.Builder
	for _, ph := range cpuPhases {
		// Per NIC: ticks per function and units of work, over every round.
		ticks := map[string]map[string]uint64{}
		units := map[string]float64{}
		hz := 0
		for _, r := range results {
			p := ph.profile(r)
			if p == nil || p.Units <= 0 || p.HZ <= 0 {
				continue
			}
			if ticks[r.Label] == nil {
				ticks[r.Label] = map[string]uint64{}
			}
			for f, n := range p.Ticks {
				ticks[r.Label][f] += n
			}
			units[r.Label] += p.Units
			hz = p.HZ
		}
		if len(ticks) == 0 {
			continue
		}
		micros := func(nic string, n uint64) float64 { return float64(n) * 1e6 / float64(hz) / units[nic] }
		worst := map[string]float64{}
		for nic, fs := range ticks {
			for f, n := range fs {
				worst[f] = max(worst[f], micros(nic, n))
			}
		}
		funcs := slices.Collect(maps.Keys(worst))
		slices.SortFunc(funcs, func(x, y string) int { return cmp.Or(cmp.Compare(worst[y], worst[x]), strings.Compare(x, y)) })
		funcs = funcs[:min(len(funcs), profileTop)]

		if b.Len() == 0 {
			fmt.Fprintf(&b, "guest kernel profile (profile=%d: the kernel's tick sampler, %d Hz, kernel mode only), summed over the rounds\n", ProfileShift, hz)
		}
		fmt.Fprintf(&b, "%s: kernel CPU µs per %s, by function\n", ph.title, ph.unit)
		width := len("all kernel functions")
		for _, f := range funcs {
			width = max(width, len(f))
		}
		left := func(s string) string { return fmt.Sprintf("%-*s", width, s) }
		tw := newTabWriter(&b)
		var shown []string
		cells := []string{left("function")}
		for _, nic := range nics {
			if ticks[nic] != nil {
				shown = append(shown, nic)
				cells = append(cells, nic)
			}
		}
		fmt.Fprintf(tw, "%s\t\n", strings.Join(cells, "\t"))
		row := func(label string, n func(nic string) uint64) {
			cells := []string{left(label)}
			for _, nic := range shown {
				if v := micros(nic, n(nic)); v > 0 {
					cells = append(cells, formatValue(v))
				} else {
					cells = append(cells, "0")
				}
			}
			fmt.Fprintf(tw, "%s\t\n", strings.Join(cells, "\t"))
		}
		row("all kernel functions", func(nic string) uint64 {
			var sum uint64
			for _, n := range ticks[nic] {
				sum += n
			}
			return sum
		})
		for _, f := range funcs {
			row(f, func(nic string) uint64 { return ticks[nic][f] })
		}
		tw.Flush()
	}
	return b.String()
}

// profileHeader names the columns of guest_profile.csv.
var profileHeader = []string{"nic", "round", "phase", "function", "ticks", "hz", "units", "unit"}

// profileRows are guest_profile.csv's rows: one per NIC, round, phase and
// function the profile saw.
func profileRows(results []Result) [][]string {
	var rows [][]string
	for _, r := range results {
		for _, ph := range cpuPhases {
			p := ph.profile(r)
			if p == nil {
				continue
			}
			for _, f := range slices.Sorted(maps.Keys(p.Ticks)) {
				rows = append(rows, report.Row(r.NIC, r.Round, ph.key, f, p.Ticks[f], p.HZ, p.Units, ph.unit))
			}
		}
	}
	return rows
}
