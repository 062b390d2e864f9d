package rdma

import (
	"slices"
	"testing"
)

// TestPrefaultPages: the pages a fault asks for start at the faulting
// page and cover the rest of the request, within the limit, and never
// wrap past the end of the address space.
func TestPrefaultPages(t *testing.T) {
	for _, c := range []struct {
		name      string
		va, span  uint64
		limit     int
		wantPages []uint64
	}{
		{"one byte", 0x10_0800, 1, 16, []uint64{0x10_0000}},
		{"no span", 0x10_0800, 0, 16, []uint64{0x10_0000}},
		{"to the page's end", 0x10_0800, 0x800, 16, []uint64{0x10_0000}},
		{"one byte into the next", 0x10_0800, 0x801, 16, []uint64{0x10_0000, 0x10_1000}},
		{"limit 1", 0x10_0800, 0x10000, 1, []uint64{0x10_0000}},
		{"limit 3", 0x10_0000, 0x10000, 3, []uint64{0x10_0000, 0x10_1000, 0x10_2000}},
		{"wrapping span", ^uint64(0) - 0x1800, 0x10000, 16, []uint64{^uint64(0xfff) - 0x1000}},
	} {
		if got := prefaultPages(c.va, c.span, c.limit); !slices.Equal(got, c.wantPages) {
			t.Errorf("%s: %#x", c.name, got)
		}
	}
}
