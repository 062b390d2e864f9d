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

func TestParseBoundFunctions(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want []string
	}{
		{"/sys/bus/pci/drivers/npfnic/0000:01:00.0\n", []string{"0000:01:00.0"}},
		{"/sys/bus/pci/drivers/npfnic/0000:01:00.0\n/sys/bus/pci/drivers/npfnic/0000:02:1f.7\n", []string{"0000:01:00.0", "0000:02:1f.7"}},
		{"/sys/bus/pci/drivers/npfnic/0000:*\n", nil}, // no function: the glob prints itself
		{"", nil},
	} {
		if got := ParseBoundFunctions(tc.out); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseBoundFunctions(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}

func TestParseRDMAStatistic(t *testing.T) {
	out := "link npfnic0/1 rx_frames 127069 tx_frames 1969 messages_in 1953 rnr_naks_fault 16\n    odp_faults 16 odp_fault_p50_ns 688128\n"
	want := map[string]int64{"rx_frames": 127069, "tx_frames": 1969, "messages_in": 1953, "rnr_naks_fault": 16, "odp_faults": 16, "odp_fault_p50_ns": 688128}
	if got := ParseRDMAStatistic(out); !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseRDMAStatistic = %v, want %v", got, want)
	}
}
