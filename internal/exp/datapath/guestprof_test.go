package datapath

import (
	"encoding/binary"
	"maps"
	"slices"
	"strings"
	"testing"
)

// profileBytes is a /proc/profile of the given bucket size and counts.
func profileBytes(step uint32, counts ...uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, step)
	for _, c := range counts {
		b = binary.LittleEndian.AppendUint32(b, c)
	}
	return b
}

func TestParseProcProfile(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   []byte
		want KernelProfile
		err  string
	}{
		{"16-byte buckets", profileBytes(16, 0, 7, 0, 3), KernelProfile{Step: 16, Buckets: []uint32{0, 7, 0, 3}}, ""},
		{"one bucket", profileBytes(4, 9), KernelProfile{Step: 4, Buckets: []uint32{9}}, ""},
		{"empty", nil, KernelProfile{}, "at least 2"},
		{"step only", profileBytes(16), KernelProfile{}, "at least 2"},
		{"torn counter", append(profileBytes(16, 1), 0, 0), KernelProfile{}, "whole number"},
		{"zero step", profileBytes(0, 1), KernelProfile{}, "power of two"},
		{"step not a power of two", profileBytes(24, 1), KernelProfile{}, "power of two"},
	} {
		got, err := ParseProcProfile(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || got.Step != tt.want.Step || !slices.Equal(got.Buckets, tt.want.Buckets) {
			t.Errorf("%s: %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

// kallsyms is a guest's /proc/kallsyms, shortened: _text and _stext
// share an address, data and module symbols are in between.
const kallsyms = `ffffffff81000000 T _text
ffffffff81000000 T _stext
ffffffff81000040 t early_idt_handler
ffffffff81000060 D some_data
ffffffff81000080 T copy_user_enhanced_fast_string
ffffffff810000a0 W weak_helper
ffffffffc0001000 t npfnic_poll	[npfnic]
ffffffff810000c0 T tcp_recvmsg
`

func TestKernelProfileFunctions(t *testing.T) {
	syms, err := ParseKallsyms(strings.NewReader(kallsyms))
	if err != nil {
		t.Fatal(err)
	}
	// 16-byte buckets from _stext: 0x00, 0x10, ..., the last (0xd0) is
	// where the profiler counts every address beyond the text.
	p := KernelProfile{Step: 16, Buckets: []uint32{1, 0, 0, 0, 2, 0, 0, 0, 5, 4, 3, 0, 8, 6}}
	got := syms.Functions(p)
	want := map[string]uint64{
		"_stext":                         1, // 0x00: _text and _stext alike; the later line names it
		"early_idt_handler":              2, // 0x40
		"copy_user_enhanced_fast_string": 9, // 0x80, 0x90: the data symbol between is not text
		"weak_helper":                    3, // 0xa0
		"tcp_recvmsg":                    8, // 0xc0
		ModulesLabel:                     6,
	}
	if !maps.Equal(got, want) {
		t.Errorf("functions %v, want %v", got, want)
	}
}

func TestParseKallsymsErrors(t *testing.T) {
	for _, tt := range []struct{ name, in, err string }{
		{"addresses hidden by kptr_restrict", "0000000000000000 T _text\n0000000000000000 T _stext\n", "no _stext"},
		{"no _stext", "ffffffff81000040 t early_idt_handler\n", "no _stext"},
		{"bad address", "ffffffff8100004g t x\nffffffff81000000 T _stext\n", "invalid syntax"},
		{"empty", "", "no _stext"},
	} {
		if _, err := ParseKallsyms(strings.NewReader(tt.in)); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: err %v, want %q", tt.name, err, tt.err)
		}
	}
}

func TestProfileTable(t *testing.T) {
	if got := ProfileTable([]Result{{NIC: "npfnic", Label: "npfnic"}}); got != "" {
		t.Fatalf("no profiles: %q, want nothing", got)
	}
	prof := func(units float64, ticks map[string]uint64) *PhaseProfile {
		return &PhaseProfile{Ticks: ticks, HZ: 250, Units: units}
	}
	results := []Result{
		// Two rounds of npfnic: 250 + 250 ticks of copy over 2 + 3 MB is
		// 2 s / 5 MB = 400000 µs per MB.
		{NIC: "npfnic", Label: "npfnic", Round: 1, H2GProfile: prof(2, map[string]uint64{"copy": 250, ModulesLabel: 25})},
		{NIC: "virtio", Label: "virtio-net", Round: 1, H2GProfile: prof(4, map[string]uint64{"copy": 500, "tcp": 100})},
		{NIC: "npfnic", Label: "npfnic", Round: 2, H2GProfile: prof(3, map[string]uint64{"copy": 250})},
		// A round whose profile failed counts nothing.
		{NIC: "virtio", Label: "virtio-net", Round: 2},
		// A phase without work is left out rather than divided by zero.
		{NIC: "npfnic", Label: "npfnic", Round: 3, MemcachedProfile: prof(0, map[string]uint64{"x": 1})},
	}
	got := ProfileTable(results)
	if !strings.Contains(got, "host->guest: kernel CPU µs per MB") {
		t.Errorf("no host->guest table:\n%s", got)
	}
	for _, want := range [][]string{
		{"function", "npfnic", "virtio-net"},
		// all: npfnic 525 ticks / 5 MB, virtio 600 / 4.
		{"all kernel functions", "420000", "600000"},
		{"copy", "400000", "500000"},
		{"tcp", "0", "100000"},
		{ModulesLabel, "20000", "0"},
	} {
		if cells := tableRow(got, want[0]); strings.Join(cells, "|") != strings.Join(want[1:], "|") {
			t.Errorf("row %q: %q, want %q:\n%s", want[0], cells, want[1:], got)
		}
	}
	if strings.Contains(got, "memcached") || strings.Contains(got, "guest->host") {
		t.Errorf("phases without profiles in the table:\n%s", got)
	}
	// The most expensive function in any NIC comes first.
	if strings.Index(got, "copy ") > strings.Index(got, "tcp ") {
		t.Errorf("rows not ordered by cost:\n%s", got)
	}
	rows := profileRows(results)
	if len(rows) != 6 || strings.Join(rows[0], ",") != "npfnic,1,h2g,(modules: the NIC driver),25,250,2,MB" {
		t.Errorf("CSV rows %v", rows)
	}
}

func FuzzParseProcProfile(f *testing.F) {
	f.Add(profileBytes(16, 0, 7, 0, 3), kallsyms)
	f.Add(profileBytes(4, 1), "0 T _stext\n")
	f.Fuzz(func(t *testing.T, b []byte, syms string) {
		p, err := ParseProcProfile(b)
		if err != nil {
			return
		}
		k, err := ParseKallsyms(strings.NewReader(syms))
		if err != nil {
			return
		}
		// Every tick is attributed once, whatever the symbols.
		var want, got uint64
		for _, n := range p.Buckets {
			want += uint64(n)
		}
		for _, n := range k.Functions(p) {
			got += n
		}
		if got != want {
			t.Errorf("attributed %d ticks of %d", got, want)
		}
	})
}

// tableRow is the cells after label on the table line that starts with it.
func tableRow(table, label string) []string {
	for _, line := range strings.Split(table, "\n") {
		if rest, ok := strings.CutPrefix(line, label+" "); ok {
			return strings.Fields(rest)
		}
	}
	return nil
}
