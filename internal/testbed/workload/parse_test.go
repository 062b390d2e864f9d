package workload

import (
	"strings"
	"testing"
)

// A trimmed iperf3 3.12 client report (-J) of a 10 s TCP run.
const iperfReport = `{
	"start": {"version": "iperf 3.12", "test_start": {"protocol": "TCP", "num_streams": 1, "duration": 10}},
	"intervals": [],
	"end": {
		"streams": [],
		"sum_sent": {"start": 0, "end": 10.000187, "seconds": 10.000187, "bytes": 1500000000, "bits_per_second": 1199977560.0, "retransmits": 42, "sender": true},
		"sum_received": {"start": 0, "end": 10.0412, "seconds": 10.0412, "bytes": 1499000000, "bits_per_second": 1194279568.1, "sender": true},
		"cpu_utilization_percent": {"host_total": 12.5}
	}
}`

func TestParseIperf3(t *testing.T) {
	r, err := ParseIperf3([]byte(iperfReport))
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != 1499000000 || r.Seconds != 10.0412 || r.SentBytes != 1500000000 || r.Retransmits != 42 {
		t.Errorf("got %+v", r)
	}
	if r.Mbps < 1194.27 || r.Mbps > 1194.29 {
		t.Errorf("Mbps = %v, want the receiver's 1194.28", r.Mbps)
	}
	if !strings.Contains(r.String(), "1194.3 Mbit/s") {
		t.Errorf("String() = %q", r.String())
	}
}

func TestParseIperf3Failures(t *testing.T) {
	for name, report := range map[string]string{
		"error":      `{"start": {}, "intervals": [], "end": {}, "error": "unable to connect to server: Connection refused"}`,
		"no summary": `{"start": {}, "intervals": [], "end": {}}`,
		"nothing":    `{"end": {"sum_received": {"seconds": 10, "bytes": 0, "bits_per_second": 0}}}`,
		"not json":   `iperf3: error - unable to connect to server`,
		"empty":      ``,
	} {
		if _, err := ParseIperf3([]byte(report)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if name == "error" && !strings.Contains(err.Error(), "Connection refused") {
			t.Errorf("%s: error %q hides iperf3's message", name, err)
		}
	}
}

// Output of memcaslap 1.1.4 (Debian bookworm) with -v 0.1.
const memaslapOut = `servers: 10.77.1.2:11211
threads count: 1
concurrency: 16
run time: 10s
windows size: 1k
set proportion: set_prop=0.10
get proportion: get_prop=0.90
cmd_get: 37519
cmd_set: 4169
get_misses: 3
verify_misses: 1
verify_failed: 0
written_bytes: 7232612
read_bytes: 41678610
object_bytes: 4536072

Run time: 10.0s Ops: 41688 TPS: 4168 Net_rate: 4.7M/s
`

func TestParseMemaslap(t *testing.T) {
	m, err := ParseMemaslap(memaslapOut, "WARNING: Could not set CPU Affinity, continuing...\n")
	if err != nil {
		t.Fatal(err)
	}
	want := Memaslap{Ops: 41688, RunTime: 10, OpsPerSec: 4168, NetMBps: 4.7, Gets: 37519, Sets: 4169, GetMisses: 3, VerifyMisses: 1}
	if m.Ops != want.Ops || m.RunTime != want.RunTime || m.OpsPerSec != want.OpsPerSec || m.NetMBps != want.NetMBps ||
		m.Gets != want.Gets || m.Sets != want.Sets || m.GetMisses != want.GetMisses || m.VerifyMisses != want.VerifyMisses {
		t.Errorf("got %+v\nwant %+v", *m, want)
	}
	if m.Errors != 0 {
		t.Errorf("errors %d (%v) in a clean run", m.Errors, m.ErrorLines)
	}
}

func TestParseMemaslapCountsErrors(t *testing.T) {
	out := strings.Replace(memaslapOut, "verify_failed: 0", "verify_failed: 4", 1) +
		"<17 SERVER_ERROR out of memory storing object\nkey: 1010101010101010 didn't set success\n"
	m, err := ParseMemaslap(out, "Server 10.77.1.2:11211 disconnect\n")
	if err != nil {
		t.Fatal(err)
	}
	// 4 failed verifications, one server error, one failed set, one disconnect.
	if m.Errors != 7 {
		t.Errorf("Errors = %d, want 7 (%v)", m.Errors, m.ErrorLines)
	}
	if len(m.ErrorLines) != 4 || !strings.Contains(strings.Join(m.ErrorLines, "|"), "disconnect") {
		t.Errorf("ErrorLines = %q", m.ErrorLines)
	}
}

func TestParseMemaslapWithoutSummary(t *testing.T) {
	// What memaslap prints when it cannot connect (and exits 1).
	out := "servers: 10.77.1.2:11211\nthreads count: 1\nconcurrency: 16\nrun time: 10s\n"
	if _, err := ParseMemaslap(out, ""); err == nil {
		t.Fatal("accepted a run without a summary")
	}
}
