package testbed

import (
	"reflect"
	"testing"
)

func TestParseEthtoolStats(t *testing.T) {
	out := `NIC statistics:
     q0_rx_packets: 1234
     rx_faults: 64
     rx_backup_pkts: 70
     rx_fault_drops: 0
     fault_lat_p50_ns: 215000
     weird: n/a
`
	got := ParseEthtoolStats(out)
	want := map[string]uint64{"q0_rx_packets": 1234, "rx_faults": 64, "rx_backup_pkts": 70, "rx_fault_drops": 0, "fault_lat_p50_ns": 215000}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestParseSNMP(t *testing.T) {
	good := `Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm RtoMin RetransSegs InErrs
Tcp: 1 200 17 0
`
	got, err := ParseSNMP(good)
	if err != nil {
		t.Fatal(err)
	}
	if got["Tcp.RetransSegs"] != 17 || got["Ip.DefaultTTL"] != 64 || got["Tcp.RtoMin"] != 200 {
		t.Fatalf("got %v", got)
	}
	for name, bad := range map[string]string{
		"unpaired":       "Ip: A B\nTcp: 1 2\n",
		"count mismatch": "Tcp: A B\nTcp: 1\n",
		"not a number":   "Tcp: A\nTcp: x\n",
	} {
		if _, err := ParseSNMP(bad); err == nil {
			t.Errorf("%s: no error for %q", name, bad)
		}
	}
}

func TestDriverParams(t *testing.T) {
	tests := []struct {
		policy string
		ring   int
		extra  string
		want   string
	}{
		{"off", 64, "", "rx_ring_size=64"},
		{"backup", 64, "", "rx_policy=backup rx_ring_size=64"},
		{"drop", 0, " fault_delay_us=50 ", "rx_policy=drop fault_delay_us=50"},
		{"", 0, "", ""},
	}
	for _, tc := range tests {
		if got := DriverParams(tc.policy, tc.ring, tc.extra); got != tc.want {
			t.Errorf("DriverParams(%q, %d, %q) = %q, want %q", tc.policy, tc.ring, tc.extra, got, tc.want)
		}
	}
}
