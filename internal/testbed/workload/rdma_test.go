package workload

import (
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The testdata are real outputs of Debian bookworm's perftest 4.5 and
// rdma-core 44 ibv_rc_pingpong between two TCG guests running rdma_rxe.
func TestParsePerftest(t *testing.T) {
	for _, tc := range []struct {
		file  string
		rows  int
		first PerftestRow
	}{
		{"ib_send_bw-65536-client.txt", 1, PerftestRow{Bytes: 65536, Iters: 200, PeakMBs: 9.22, AvgMBs: 9.21, MsgRateMpps: 0.000147}},
		{"ib_send_bw-65536-server.txt", 1, PerftestRow{Bytes: 65536, Iters: 200, PeakMBs: 0, AvgMBs: 9.38, MsgRateMpps: 0.000150}},
		{"ib_write_bw-all-client.txt", 23, PerftestRow{Bytes: 2, Iters: 20, PeakMBs: 0.02, AvgMBs: 0.02, MsgRateMpps: 0.008719}},
		{"ib_send_lat-64-client.txt", 1, PerftestRow{Bytes: 64, Iters: 200, Latency: &PerftestLatency{
			Min: 160.40, Max: 4006.32, Typical: 265.43, Avg: 662.00, Stdev: 755.13, P99: 3420.95, P999: 4006.32}}},
	} {
		data, err := os.ReadFile("testdata/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := ParsePerftest(string(data))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if len(rows) != tc.rows || !reflect.DeepEqual(rows[0], tc.first) {
			t.Errorf("%s: %d rows, first %+v (latency %+v); want %d, %+v", tc.file, len(rows), rows[0], rows[0].Latency, tc.rows, tc.first)
		}
	}
	for _, bad := range []string{
		"",
		"Couldn't connect to 10.81.0.1:18515\n",
		" #bytes     #iterations    BW peak[MB/sec]\n 65536 200\n",
		" #bytes     #iterations    BW peak[MB/sec]\n 65536 200 x\n",
		" #bytes     #iterations    BW peak[MB/sec]\n Device not recognized to implement inline feature. Disabling it\n",
		" #bytes     #strange[unit]\n 1 2\n",
	} {
		if rows, err := ParsePerftest(bad); err == nil {
			t.Errorf("ParsePerftest(%q) = %+v, want an error", bad, rows)
		}
	}
}

// TestParsePerftestStdevNaN: perftest prints -nan for the standard
// deviation when one stalled sample dwarfs the rest; the row is good and
// the deviation unknown. NaN anywhere else is still an error.
func TestParsePerftestStdevNaN(t *testing.T) {
	data, err := os.ReadFile("testdata/ib_send_lat-64-stdev-nan.txt")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ParsePerftest(string(data))
	if err != nil || len(rows) != 1 || rows[0].Latency == nil {
		t.Fatalf("%+v, %v", rows, err)
	}
	if l := rows[0].Latency; !math.IsNaN(l.Stdev) || l.Typical != 2994.32 || l.Max != 201162.57 {
		t.Errorf("latency %+v: want stdev NaN, typical 2994.32, max 201162.57", *l)
	}
	bad := strings.Replace(string(data), "2994.32", "-nan", 1)
	if rows, err := ParsePerftest(bad); err == nil {
		t.Errorf("-nan as the typical latency parsed: %+v", rows)
	}
}

// A note perftest prints after its table (on stderr, which the runners
// append to stdout) is not a row.
func TestParsePerftestNoteAfterTable(t *testing.T) {
	data, err := os.ReadFile("testdata/ib_send_bw-65536-client.txt")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ParsePerftest(string(data) + " Device not recognized to implement inline feature. Disabling it\n")
	if err != nil || len(rows) != 1 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
}

func TestPerftestClockFailed(t *testing.T) {
	stalled := " Correlation coefficient r^2: 0.69 < 0.9\n Can't produce a report\n"
	if !PerftestClockFailed(stalled) {
		t.Error("the clock failure is not recognised")
	}
	for _, other := range []string{"", "Couldn't connect to 10.81.0.1:18515\n", " Completion with error at client\n Failed status 12\n"} {
		if PerftestClockFailed(other) {
			t.Errorf("%q taken for a clock failure", other)
		}
	}
}

func TestIsPerftestTool(t *testing.T) {
	for prog, want := range map[string]bool{
		"ib_send_bw": true, "ib_write_lat": true, "ib_read_bw": true, "ib_atomic_lat": true,
		"ibv_rc_pingpong": false, "ib_send": false, "ib_foo_bw": false, "xib_send_bw": false, "": false,
		"npfnic-rdma-hostile": false,
	} {
		if IsPerftestTool(prog) != want {
			t.Errorf("IsPerftestTool(%q) = %v", prog, !want)
		}
	}
}

func TestParsePingpong(t *testing.T) {
	data, err := os.ReadFile("testdata/rc_pingpong-4096.txt")
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParsePingpong(string(data))
	want := PingpongResult{Bytes: 1638400, Mbps: 16.53, Iters: 200, UsecPerIter: 3963.77}
	if err != nil || r != want {
		t.Fatalf("ParsePingpong: %+v, %v; want %+v", r, err, want)
	}
	for _, bad := range []string{"", "Failed to modify QP to RTR\n", "1638400 bytes in 0.79 seconds = 16.53 Mbit/sec\n",
		"x bytes in 0.79 seconds = 16.53 Mbit/sec\n200 iters in 0.79 seconds = 3963.77 usec/iter\n"} {
		if _, err := ParsePingpong(bad); err == nil {
			t.Errorf("ParsePingpong(%q) accepted", bad)
		}
	}
}

func TestRDMAArgs(t *testing.T) {
	for _, tc := range []struct {
		got  []string
		want string
	}{
		{Perftest{Tool: "ib_write_bw", Size: 65536, Iters: 500}.Args("rxe0", 1, ""), "ib_write_bw -d rxe0 -x 1 -s 65536 -n 500"},
		{Perftest{Tool: "ib_send_bw", All: true, ODP: true, Port: 18600, Extra: []string{"-e"}}.Args("npfnic0", 3, "10.81.0.1"),
			"ib_send_bw -d npfnic0 -x 3 -a --odp -p 18600 -e 10.81.0.1"},
		{Pingpong{Size: 4096, Iters: 100, Validate: true, Events: true}.Args("rxe0", 1, "10.81.0.1"),
			"ibv_rc_pingpong -d rxe0 -g 1 -s 4096 -n 100 -e -c 10.81.0.1"},
		{Pingpong{Port: 18515}.Args("npfnic0", 1, ""), "ibv_rc_pingpong -d npfnic0 -g 1 -p 18515"},
		{Pingpong{Program: "ibv_srq_pingpong", QPs: 4, Size: 64, Validate: true}.Args("npfnic0", 1, "10.81.0.2"),
			"ibv_srq_pingpong -d npfnic0 -g 1 -q 4 -s 64 -c 10.81.0.2"},
		{Perftest{Tool: "ib_write_bw", Port: 18516}.Args("npfnic0", 1, "10.81.0.2"), "ib_write_bw -d npfnic0 -x 1 -p 18516 10.81.0.2"},
		{Perftest{Tool: "ib_send_bw", Size: 4096, Duration: 90 * time.Second, ODP: true}.Args("npfnic0", 1, ""), "ib_send_bw -d npfnic0 -x 1 -s 4096 -D 90 --odp"},
		{Perftest{Tool: "ib_send_bw", Duration: 300 * time.Millisecond}.Args("rxe0", 1, "10.81.0.1"), "ib_send_bw -d rxe0 -x 1 -D 1 10.81.0.1"},
	} {
		if got := strings.Join(tc.got, " "); got != tc.want {
			t.Errorf("args %q, want %q", got, tc.want)
		}
	}
}
