package workload

import (
	"strings"
	"testing"
)

func TestOvercommitArgs(t *testing.T) {
	s := OvercommitServer{Dev: "npfnic0", GIDIndex: 1, Port: 18600, Region: 320 << 20, WS: 32 << 20, ODP: true}
	if got, want := strings.Join(s.Args(), " "), "npfnic-overcommit -d npfnic0 -g 1 -serve 18600 -region 335544320 -ws 33554432 -odp"; got != want {
		t.Errorf("server: %s, want %s", got, want)
	}
	c := OvercommitClient{Dev: "rxe0", GIDIndex: 1, Server: "10.81.0.1:18600", Size: 65536, Depth: 8, Warmup: 1, Seconds: 2.5}
	if got, want := strings.Join(c.Args(), " "), "npfnic-overcommit -d rxe0 -g 1 -c 10.81.0.1:18600 -size 65536 -depth 8 -warmup 1 -t 2.5"; got != want {
		t.Errorf("client: %s, want %s", got, want)
	}
}

func TestParseOvercommit(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want OvercommitServerState
	}{
		{"", OvercommitServerState{}},
		{"registered bytes=1 odp=0 usec=5\n", OvercommitServerState{Registered: true}},
		{"registered bytes=1 odp=1 usec=5\nlistening port=18600 pid=271\n", OvercommitServerState{Registered: true, Listening: true, PID: 271}},
		{"register failed: bytes=1 odp=0 errno=12 (Cannot allocate memory)\n",
			OvercommitServerState{Failed: "register failed: bytes=1 odp=0 errno=12 (Cannot allocate memory)"}},
	} {
		if got := ParseOvercommitServer(tc.out); got != tc.want {
			t.Errorf("ParseOvercommitServer(%q) = %+v, want %+v", tc.out, got, tc.want)
		}
	}
	for _, tc := range []struct {
		out  string
		want float64
		ok   bool
	}{
		{"result bytes=655360 usec=1000000 MBps=0.655\n", 0.655, true},
		{"npfnic-overcommit: WRITE: transport retry counter exceeded\n", 0, false},
		{"result bytes=1 usec=1 MBps=x\n", 0, false},
		{"result bytes=1 usec=1 MBps=-1\n", 0, false},
	} {
		got, err := ParseOvercommitClient(tc.out)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseOvercommitClient(%q) = %v, %v; want %v, ok %v", tc.out, got, err, tc.want, tc.ok)
		}
	}
	if _, err := ParseOvercommitReg("pinned"); err != nil {
		t.Error(err)
	}
	if _, err := ParseOvercommitReg("odp=all"); err == nil {
		t.Error("odp=all accepted")
	}
}
