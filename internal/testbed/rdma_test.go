package testbed

import (
	"reflect"
	"testing"
)

func TestParseIBVDevices(t *testing.T) {
	out := "    device          \t   node GUID\n    ------          \t----------------\n    rxe0            \t505400fffe810002\n    npfnic_0 \t0000000000000000\n"
	if got := ParseIBVDevices(out); !reflect.DeepEqual(got, []string{"rxe0", "npfnic_0"}) {
		t.Fatalf("ParseIBVDevices: %q", got)
	}
	if got := ParseIBVDevices("    device          \t   node GUID\n    ------          \t----------------\n"); len(got) != 0 {
		t.Fatalf("no device: %q", got)
	}
}

// The GID table as ibv_devinfo -v prints it for rdma_rxe on 10.81.0.1.
const devinfoGIDs = `			GID[  0]:		fe80::5054:ff:fe81:1, RoCE v2
			GID[  1]:		::ffff:10.81.0.1, RoCE v2
			GID[  2]:		::ffff:10.81.0.9, RoCE v1
`

func TestFindRoCEv2GID(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		want int
		ok   bool
	}{
		{"10.81.0.1", 1, true},
		{"10.81.0.9", 0, false}, // RoCE v1 only
		{"10.81.0.2", 0, false},
		{"fe80::1", 0, false},
	} {
		got, err := FindRoCEv2GID(devinfoGIDs, tc.ip)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("FindRoCEv2GID(%s) = %d, %v", tc.ip, got, err)
		}
	}
}
