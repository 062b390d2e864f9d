package datapath

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// procStat is a 1-vCPU guest's /proc/stat (Linux 6.1), shortened.
const procStat = `cpu  1200 3 4500 98000 17 250 3030 0 0 0
cpu0 1200 3 4500 98000 17 250 3030 0 0 0
intr 123456 0 9 0 0
ctxt 4567
btime 1700000000
processes 321
`

func TestParseProcStat(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     CPUTicks
		err      string
	}{
		{"linux 6.1", procStat, CPUTicks{User: 1200, Nice: 3, System: 4500, Idle: 98000, IOWait: 17, IRQ: 250, SoftIRQ: 3030}, ""},
		{"steal", "cpu 1 2 3 4 5 6 7 8 9 10\n", CPUTicks{1, 2, 3, 4, 5, 6, 7, 8}, ""},
		{"old kernel, four counters", "cpu 10 0 20 70\n", CPUTicks{User: 10, System: 20, Idle: 70}, ""},
		{"per-cpu lines only", "cpu0 1 2 3 4\n", CPUTicks{}, "no aggregate cpu line"},
		{"empty", "", CPUTicks{}, "no aggregate cpu line"},
		{"too few", "cpu 1 2 3\n", CPUTicks{}, "at least 4"},
		{"not a number", "cpu 1 2 x 4\n", CPUTicks{}, "counter 3"},
		{"negative", "cpu 1 2 -3 4\n", CPUTicks{}, "counter 3"},
		{"overflow", "cpu 18446744073709551615 1 0 0\n", CPUTicks{}, "overflows"},
	} {
		got, err := ParseProcStat(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

// procInterrupts is a 2-CPU guest's /proc/interrupts, shortened: a
// virtio-net's three MSI-X vectors are 25-27.
const procInterrupts = `           CPU0       CPU1
  0:         43          0   IO-APIC   2-edge      timer
  1:          9          0   IO-APIC   1-edge      i8042
 25:          0          1   PCI-MSI 49152-edge      virtio0-config
 26:      31000        500   PCI-MSI 49153-edge      virtio0-input.0
 27:       2000          7   PCI-MSI 49154-edge      virtio0-output.0
NMI:          0          0   Non-maskable interrupts
LOC:      88000      87000   Local timer interrupts
ERR:          0
MIS:          0
`

func TestParseInterrupts(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string
		irqs []int
		want uint64
		err  string
	}{
		{"virtio vectors", procInterrupts, []int{25, 26, 27}, 1 + 31500 + 2007, ""},
		{"one", procInterrupts, []int{0}, 43, ""},
		{"none asked", procInterrupts, nil, 0, ""},
		{"missing", procInterrupts, []int{25, 99}, 0, "no interrupt 99"},
		{"no header", "  0: 1 IO-APIC timer\n", []int{0}, 0, "does not name CPUs"},
		{"empty", "", []int{0}, 0, "does not name CPUs"},
		{"short row", "  CPU0 CPU1\n 5: 1\n", []int{5}, 0, "1 counts for 2 CPUs"},
		{"bad count", "  CPU0\n 5: x edge\n", []int{5}, 0, "interrupt 5"},
		{"twice", "  CPU0\n 5: 1 a\n 5: 2 b\n", []int{5}, 0, "twice"},
		{"overflow", "  CPU0 CPU1\n 5: 18446744073709551615 1\n", []int{5}, 0, "overflows"},
	} {
		got, err := ParseInterrupts(tt.in, tt.irqs)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
}

func TestParseIRQList(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"25\n26\n27\n", []int{25, 26, 27}, true},
		{"11\n", []int{11}, true},
		{"25  26", []int{25, 26}, true},
		{"", nil, false},
		{"x", nil, false},
		{"-1", nil, false},
	} {
		got, err := ParseIRQList(tt.in)
		if (err == nil) != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("ParseIRQList(%q) = %v, %v; want %v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestNewGuestCPU(t *testing.T) {
	before, _ := ParseProcStat("cpu 100 0 200 1000 0 10 50 0\n")
	after, _ := ParseProcStat("cpu 200 0 600 1100 0 110 350 0\n")
	// 1000 ticks (10 s), 900 busy: 100 user, 400 sys, 100 irq, 300
	// softirq; 500 MB and 2500 interrupts.
	g := between(cpuSample{before, 1000}, cpuSample{after, 3500}, 500)
	want := GuestCPU{Seconds: 10, BusyPct: 90, UserPct: 10, SysPct: 40, IRQPct: 10, SoftIRQPct: 30, Units: 500,
		CPUMicrosPerUnit: 9e6 / 500, IRQs: 2500, IRQsPerUnit: 5}
	if !closeTo(*g, want) {
		t.Errorf("between = %+v, want %+v", *g, want)
	}
	// Interrupts not counted; no work done.
	g = between(cpuSample{before, -1}, cpuSample{after, -1}, 0)
	if g.IRQs != -1 || g.IRQsPerUnit != -1 || g.CPUMicrosPerUnit != -1 || g.BusyPct != 90 {
		t.Errorf("without interrupts or work: %+v", *g)
	}
	if !strings.Contains(g.String(), "90% busy") || strings.Contains(g.String(), "interrupts") {
		t.Errorf("String() = %q", g.String())
	}
	// No ticks at all (the phase took less than one).
	if g := NewGuestCPU(CPUTicks{}, 0, 1); g.BusyPct != 0 || g.CPUMicrosPerUnit != 0 {
		t.Errorf("empty phase: %+v", *g)
	}
}

func closeTo(a, b GuestCPU) bool {
	av := []float64{a.Seconds, a.BusyPct, a.UserPct, a.SysPct, a.IRQPct, a.SoftIRQPct, a.Units, a.CPUMicrosPerUnit, a.IRQs, a.IRQsPerUnit}
	bv := []float64{b.Seconds, b.BusyPct, b.UserPct, b.SysPct, b.IRQPct, b.SoftIRQPct, b.Units, b.CPUMicrosPerUnit, b.IRQs, b.IRQsPerUnit}
	for i := range av {
		if math.Abs(av[i]-bv[i]) > 1e-9*math.Max(1, math.Abs(bv[i])) {
			return false
		}
	}
	return true
}

// withCPU adds guest CPU figures to results: busy% and µs per unit scale
// with v.
func withCPU(r Result, v float64) Result {
	r.G2HCPU = &GuestCPU{Seconds: 10, BusyPct: v, UserPct: 10, SysPct: 50, SoftIRQPct: 20, Units: 100, CPUMicrosPerUnit: 1000 * v, IRQs: 500, IRQsPerUnit: 5}
	r.H2GCPU = &GuestCPU{Seconds: 10, BusyPct: v, UserPct: 5, SysPct: 30, SoftIRQPct: 60, Units: 300, CPUMicrosPerUnit: 333, IRQs: -1, IRQsPerUnit: -1}
	r.MemcachedCPU = &GuestCPU{Seconds: 10, BusyPct: 70, UserPct: 20, SysPct: 30, SoftIRQPct: 20, Units: 40000, CPUMicrosPerUnit: 175, IRQs: 40000, IRQsPerUnit: 1}
	for _, g := range []*GuestCPU{r.G2HCPU, r.H2GCPU, r.MemcachedCPU} {
		g.HostVCPUMicros, g.HostQEMUMicros, g.HostThisMicros = -1, -1, -1 // not measured, as NewGuestCPU leaves them
	}
	return r
}

func TestCPUReport(t *testing.T) {
	rs := fakeResults()
	rs[0] = withCPU(rs[0], 100)
	rs[1] = withCPU(rs[1], 97)
	c := Config{Env: runner.Env{Images: &images.Artifacts{}}, NICs: NICs}
	tab := Table(c, rs)
	for _, want := range []string{
		"guest CPU per phase", "softirq %", "CPU µs", "NIC irqs",
		"QEMU e1000e      guest->host     100", " 100000 ", "QEMU virtio-net  host->guest      97", " 333.0 ",
		"memcached        70", " 175.0 ", " req",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	if strings.Contains(tab, "npfnic  guest->host") {
		t.Errorf("a NIC without CPU figures has rows:\n%s", tab)
	}
	// Without any CPU figures, no second table.
	if tab := Table(c, fakeResults()); strings.Contains(tab, "guest CPU per phase") {
		t.Errorf("second table without figures:\n%s", tab)
	}

	rows := CSVRows(rs)
	col := map[string]int{}
	for i, h := range CSVHeader {
		col[h] = i
	}
	if CSVHeader[len(CSVHeader)-1] != "error" {
		t.Errorf("last column %q, want error", CSVHeader[len(CSVHeader)-1])
	}
	for _, k := range []string{"h2g_cpu_busy_pct", "h2g_softirq_pct", "h2g_sys_pct", "h2g_user_pct", "g2h_cpu_us_per_mb", "memc_cpu_us_per_req", "memc_nic_irqs_per_req"} {
		if _, ok := col[k]; !ok {
			t.Errorf("no CSV column %s in %v", k, CSVHeader)
		}
	}
	for _, row := range rows {
		if len(row) != len(CSVHeader) {
			t.Fatalf("row of %d cells, header of %d", len(row), len(CSVHeader))
		}
	}
	for k, want := range map[string]string{"h2g_cpu_busy_pct": "97", "h2g_softirq_pct": "60", "g2h_cpu_us_per_mb": "97000", "h2g_nic_irqs": "", "memc_nic_irqs_per_req": "1"} {
		if got := rows[1][col[k]]; got != want {
			t.Errorf("virtio %s = %q, want %q", k, got, want)
		}
	}
	if got := rows[2][col["h2g_cpu_busy_pct"]]; got != "" {
		t.Errorf("npfnic without figures: h2g_cpu_busy_pct %q", got)
	}
}

func TestSummarizeCPU(t *testing.T) {
	var rs []Result
	for round, v := range []float64{90, 100, 95} {
		r := withCPU(Result{NIC: "virtio", Label: "virtio", Round: round + 1, Rounds: 3, Memcached: &workload.Memaslap{}}, v)
		if round == 1 {
			r.G2HCPU.IRQs, r.G2HCPU.IRQsPerUnit = -1, -1
			r.MemcachedCPU = nil
		}
		rs = append(rs, r)
	}
	s := Summarize(rs)[0]
	if s.G2HCPU.BusyPct != 95 || s.G2HCPU.CPUMicrosPerUnit != 95000 || s.G2HCPU.IRQsPerUnit != 5 {
		t.Errorf("g2h median %+v", *s.G2HCPU)
	}
	if s.H2GCPU.IRQs != -1 || s.MemcachedCPU.BusyPct != 70 {
		t.Errorf("h2g %+v, memcached %+v", *s.H2GCPU, *s.MemcachedCPU)
	}
}

func FuzzParseProcStat(f *testing.F) {
	for _, s := range []string{procStat, "cpu 1 2 3 4\n", "cpu 1 2 3\n", "cpu0 1 2 3 4", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseProcStat(s)
		if err == nil && (c.Busy() > c.Total() || c.Total() < c.Idle) {
			t.Errorf("%q: busy %d > total %d", s, c.Busy(), c.Total())
		}
	})
}

func FuzzParseInterrupts(f *testing.F) {
	for _, s := range []string{procInterrupts, "  CPU0\n 5: 1 a\n", "", "CPU0\n5:"} {
		f.Add(s, 26)
	}
	f.Fuzz(func(t *testing.T, s string, irq int) {
		ParseInterrupts(s, []int{irq, 25})
		ParseIRQList(s)
	})
}
