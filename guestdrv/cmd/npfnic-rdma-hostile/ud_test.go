package main

import (
	"encoding/binary"
	"strings"
	"testing"
)

// TestCheckGRH: the GRH area of a UD receive is 20 zero bytes and the
// IPv4 header of the packet; each way it can be wrong is found.
func TestCheckGRH(t *testing.T) {
	src := [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 81, 15: 1}
	dst := [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 81, 15: 2}
	const length = 256
	grh := func(edit func(g []byte)) []byte {
		g := make([]byte, grhSize)
		ip := g[20:]
		ip[0], ip[1] = 0x45, 0
		binary.BigEndian.PutUint16(ip[2:], udOverhead+length)
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8], ip[9] = 64, 17
		copy(ip[12:], src[12:])
		copy(ip[16:], dst[12:])
		if edit != nil {
			edit(g)
		}
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		if binary.BigEndian.Uint16(ip[10:]) == 0 {
			binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
		}
		return g
	}
	for _, tc := range []struct {
		name string
		g    []byte
		want string // in the error; "" none
	}{
		{"rdma_rxe's and npfnic's", grh(nil), ""},
		{"a GRH, not 20 zero bytes", grh(func(g []byte) { g[0] = 0x60 }), "GRH area byte 0"},
		{"IPv6", grh(func(g []byte) { g[20] = 0x60 }), "version"},
		{"options", grh(func(g []byte) { g[20] = 0x46 }), "version"},
		{"total length", grh(func(g []byte) { g[23]++ }), "total length"},
		{"not UDP", grh(func(g []byte) { g[29] = 6 }), "protocol"},
		{"source", grh(func(g []byte) { g[35] = 9 }), "want the client's"},
		{"destination", grh(func(g []byte) { g[39] = 9 }), "want the client's"},
		{"checksum", grh(func(g []byte) { binary.BigEndian.PutUint16(g[30:], 0x1234) }), "checksum"},
	} {
		err := checkGRH(tc.g, src, dst, length)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error about %q", tc.name, err, tc.want)
		}
	}
}
