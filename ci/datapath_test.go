package ci

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/exp/datapath"
	"github.com/npfnic/npfnic/internal/exp/runner"
)

// TestE1000eEndToEnd runs the datapath experiment for QEMU's e1000e only,
// 2 s per measurement: a real guest, real iperf3 and memaslap through a tap
// in a namespace. It asserts that numbers came out, never how large they
// are.
func TestE1000eEndToEnd(t *testing.T) {
	a := needImages(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	nics, err := datapath.LookupNICs("e1000e")
	if err != nil {
		t.Fatal(err)
	}
	c := datapath.Config{
		Env:  runner.Env{Images: a, LogDir: logDir(t, "datapath"), Progress: testWriter{t}, Accel: guestAccel(t, a)},
		NICs: nics, IperfTime: 2 * time.Second, MemaslapTime: 2 * time.Second, Rounds: 1,
	}
	results, err := datapath.Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", datapath.Table(c, results))
	if len(results) != 1 {
		t.Fatalf("%d results for one NIC", len(results))
	}
	r := results[0]
	if r.Err != nil {
		t.Fatalf("e1000e: %v", r.Err)
	}
	if r.GuestToHost == nil || r.GuestToHost.Mbps <= 0 || r.GuestToHost.Bytes <= 0 {
		t.Errorf("guest -> host: %v", r.GuestToHost)
	}
	if r.HostToGuest == nil || r.HostToGuest.Mbps <= 0 || r.HostToGuest.Bytes <= 0 {
		t.Errorf("host -> guest: %v", r.HostToGuest)
	}
	if r.Memcached == nil || r.Memcached.OpsPerSec <= 0 || r.Memcached.Ops <= 0 {
		t.Errorf("memcached: %v", r.Memcached)
	} else if r.Memcached.Errors != 0 {
		t.Errorf("memaslap reported %d errors: %v", r.Memcached.Errors, r.Memcached.ErrorLines)
	}

	// Everything the run created on the host is gone.
	mine := strconv.FormatInt(int64(os.Getpid()), 36) + "-"
	for _, dir := range []string{"/run/netns", "/sys/class/net"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			for _, p := range datapath.HostNamePrefixes {
				if strings.HasPrefix(e.Name(), p+mine) {
					t.Errorf("%s/%s left behind", dir, e.Name())
				}
			}
		}
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
