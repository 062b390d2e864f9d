package rdma

import (
	"encoding/binary"
	"testing"
)

// TestLaneOf: a frame's lane follows its BTH's destination QP, stays in
// range, spreads QPNs that differ only above their low bits, and a frame
// too short for a BTH goes to lane 0.
func TestLaneOf(t *testing.T) {
	frame := func(qpn uint32, tagged bool) []byte {
		f := make([]byte, 14+20+8+12)
		f[12], f[13] = 0x08, 0x00
		ip := f[14:]
		if tagged {
			f = append(f[:12], append([]byte{0x81, 0x00, 0, 5}, f[12:]...)...)
			ip = f[18:]
		}
		ip[0], ip[9] = 0x45, 17
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
		binary.BigEndian.PutUint16(ip[20+2:], 4791)
		binary.BigEndian.PutUint16(ip[20+4:], uint16(len(ip)-20))
		binary.BigEndian.PutUint32(ip[28+4:], qpn)
		return f
	}
	for _, tc := range []struct {
		name string
		f    []byte
		n    int
	}{
		{"untagged", frame(0x111, false), 4},
		{"tagged", frame(0x111, true), 4},
		{"two lanes", frame(0x2345, false), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := laneOf(tc.f, tc.n)
			if l < 0 || l >= tc.n {
				t.Fatalf("lane %d of %d", l, tc.n)
			}
			qpn := binary.BigEndian.Uint32(tc.f[len(tc.f)-8:]) & 0xffffff
			if want := int((qpn*0x9e3779b1)>>16) % tc.n; l != want {
				t.Errorf("lane %d, want %d (QPN %#x)", l, want, qpn)
			}
		})
	}
	if l := laneOf(frame(0x111, false)[:30], 4); l != 0 {
		t.Errorf("short frame: lane %d, want 0", l)
	}
	// The benchmark's eight QPNs (0x101 + 0x10*i) do not all land on one
	// of two lanes.
	seen := map[int]bool{}
	for i := range uint32(8) {
		seen[laneOf(frame(0x101+0x10*i, false), 2)] = true
	}
	if len(seen) != 2 {
		t.Errorf("8 QPs on %d of 2 lanes", len(seen))
	}
}
