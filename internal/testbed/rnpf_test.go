package testbed

import "testing"

func TestRNPFParam(t *testing.T) {
	for _, tc := range []struct {
		ppm     int
		want    string
		wantErr bool
	}{
		{0, "rnpf_rate_ppm=0", false},
		{10000, "rnpf_rate_ppm=10000", false},
		{PPM, "rnpf_rate_ppm=1000000", false},
		{PPM + 1, "", true},
		{-1, "", true},
	} {
		got, err := RNPFParam(tc.ppm)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("RNPFParam(%d) = %q, %v; want %q, error %v", tc.ppm, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestRNPFCounters(t *testing.T) {
	before := RNPFCountersOf(ParseEthtoolStats(`NIC statistics:
     q0_rx_packets: 1000
     q1_rx_packets: 500
     rx_faults: 40
     rx_backup_pkts: 40
     rx_fault_drops: 0
     late_dma: 0
     rnpf_injected: 10
     rnpf_skipped: 1
`))
	after := RNPFCountersOf(ParseEthtoolStats(`NIC statistics:
     q0_rx_packets: 101000
     q1_rx_packets: 500
     rx_faults: 1040
     rx_backup_pkts: 1030
     rx_fault_drops: 2
     late_dma: 0
     rnpf_injected: 1010
     rnpf_skipped: 3
`))
	for _, tc := range []struct {
		name string
		got  RNPFCounters
		want RNPFCounters
	}{
		{"before", before, RNPFCounters{RxPackets: 1500, Injected: 10, Skipped: 1, Faults: 40, BackupPkts: 40}},
		{"delta", after.Since(before), RNPFCounters{RxPackets: 100000, Injected: 1000, Skipped: 2, Faults: 1000, BackupPkts: 990, FaultDrops: 2}},
		// A reload restarts every counter: what is there now counts.
		{"reload", before.Since(after), before},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
	if r := after.Since(before).Rate(); r != 10000 {
		t.Errorf("rate %v ppm, want 10000", r)
	}
	if r := (RNPFCounters{}).Rate(); r != 0 {
		t.Errorf("rate without frames %v, want 0", r)
	}
}
