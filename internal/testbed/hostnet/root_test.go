package hostnet

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// needRoot skips a test that creates namespaces and links unless this
// process is root; NPFNIC_REQUIRE_TOOLS=1 turns the skip into a failure.
func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("NPFNIC_REQUIRE_TOOLS") == "1" {
		fail = t.Fatalf
	}
	if os.Geteuid() != 0 {
		fail("needs root (network namespaces, tap and veth devices)")
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			fail("needs %s: %v", tool, err)
		}
	}
}

// newNS creates a namespace that the test's cleanup closes.
func newNS(t *testing.T) *Namespace {
	t.Helper()
	ns, err := NewUniqueNamespace("hnt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Close(); err != nil {
			t.Errorf("close %s: %v", ns, err)
		}
		if nsExists(ns.Name()) {
			t.Errorf("%s still exists after Close", ns)
		}
	})
	return ns
}

// vethBetween links two new namespaces with a veth pair: a is 10.77.250.1,
// b is 10.77.250.2.
func vethBetween(t *testing.T) (a, b *Namespace, la, lb *Link) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b = newNS(t), newNS(t)
	na, _ := UniqueName("hnt")
	nb, _ := UniqueName("hnt")
	la, lb, err := CreateVeth(na, nb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Delete() })
	for _, x := range []struct {
		l    *Link
		ns   *Namespace
		cidr string
	}{{la, a, "10.77.250.1/24"}, {lb, b, "10.77.250.2/24"}} {
		if err := MoveToNamespace(x.l, x.ns); err != nil {
			t.Fatal(err)
		}
		if err := x.l.Configure(ctx, x.cidr); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join("/sys/class/net", x.l.Name())); err == nil {
			t.Errorf("%s is still in the root namespace after the move", x.l.Name())
		}
	}
	return a, b, la, lb
}

func TestVethPingAcrossNamespaces(t *testing.T) {
	needRoot(t)
	a, b, la, _ := vethBetween(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, x := range []struct {
		from *Namespace
		to   string
	}{{a, "10.77.250.2"}, {b, "10.77.250.1"}} {
		r, err := x.from.Ping(ctx, x.to, 3, 100*time.Millisecond, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.Sent != 3 || r.Received != 3 {
			t.Fatalf("ping %s from %s: %d sent, %d received", x.to, x.from, r.Sent, r.Received)
		}
		t.Logf("ping %s from %s: %v", x.to, x.from, r.RTTs)
	}
	// Nothing answers outside the pair: the namespace has no route out.
	if r, err := a.Ping(ctx, "10.77.251.1", 1, 0, 200*time.Millisecond); err == nil && r.Received != 0 {
		t.Errorf("an address with no route answered: %+v", r)
	}
	out, err := a.Run(ctx, "ip", "-o", "addr", "show", "dev", la.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "10.77.250.1/24") {
		t.Errorf("ip addr in %s: %s", a, out)
	}
	if _, err := a.Run(ctx, "sh", "-c", "echo oops >&2; exit 3"); err == nil || !strings.Contains(err.Error(), "oops") {
		t.Errorf("a failing command gave %v", err)
	}
}

func TestIperf3ServerInNamespace(t *testing.T) {
	needRoot(t, "iperf3")
	a, b, _, _ := vethBetween(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const port = 5299
	srv, err := a.StartIperf3Server(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	out, err := b.Run(ctx, "iperf3", "-c", "10.77.250.1", "-p", strconv.Itoa(port), "-t", "1", "-J")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		End struct {
			SumReceived struct {
				Bytes int64 `json:"bytes"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("iperf3 -J: %v\n%s", err, out)
	}
	if res.End.SumReceived.Bytes <= 0 {
		t.Fatalf("iperf3 received nothing:\n%s", out)
	}
	if err := srv.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	select {
	case <-srv.Exited():
	default:
		t.Error("the server still runs after Stop")
	}
	// Nothing listens any more: a client fails.
	if _, err := b.Run(ctx, "iperf3", "-c", "10.77.250.1", "-p", strconv.Itoa(port), "-t", "1"); err == nil {
		t.Error("a client reached a stopped server")
	}
}

func TestServerThatDiesIsReported(t *testing.T) {
	needRoot(t)
	ns := newNS(t)
	p, err := ns.Start("sh", "-c", "echo cannot bind >&2; exit 1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitListening(ctx, 1); err == nil || !strings.Contains(err.Error(), "cannot bind") {
		t.Fatalf("WaitListening on a dead server: %v", err)
	}
	if err := p.Stop(); err == nil {
		t.Error("Stop of a server that failed on its own returned no error")
	}
}

func TestCloseStopsServersAndDeletesLinks(t *testing.T) {
	needRoot(t)
	ns, err := NewUniqueNamespace("hnt")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	name, _ := UniqueName("hnt")
	tap, err := CreateTap(name)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Delete()
	if _, err := os.Lstat("/sys/class/net/" + name); err != nil {
		t.Fatalf("tap %s not in the root namespace: %v", name, err)
	}
	if err := MoveToNamespace(tap, ns); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tap.Configure(ctx, "10.77.249.1/24"); err != nil {
		t.Fatal(err)
	}
	if tap.Namespace() != ns {
		t.Errorf("tap reports namespace %v", tap.Namespace())
	}
	p, err := ns.Start("sleep", "600")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	default:
		t.Error("a process started in the namespace survived Close")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %v", d)
	}
	if nsExists(ns.Name()) {
		t.Errorf("%s exists after Close", ns)
	}
	if _, err := os.Lstat("/sys/class/net/" + name); err == nil {
		t.Errorf("tap %s came back to the root namespace", name)
	}
	if err := tap.Delete(); err != nil {
		t.Errorf("deleting a deleted tap: %v", err)
	}
	if _, err := ns.Start("true"); err == nil {
		t.Error("Start in a closed namespace succeeded")
	}
	if err := ns.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestReapStale(t *testing.T) {
	needRoot(t)
	// A pid that no process has: the owner of a leftover.
	dead := 0
	for pid := 4000000; pid > 1; pid-- {
		if !processAlive(pid) {
			dead = pid
			break
		}
	}
	stale := "hnr" + strconv.FormatInt(int64(dead), 36) + nameSep + "1"
	ns, err := NewNamespace(stale)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	tap, err := CreateTap(stale)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Delete()
	live, err := NewUniqueNamespace("hnr")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	reaped, err := ReapStale("hnr")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"netns " + stale: true, "link " + stale: true}
	for _, r := range reaped {
		if !want[r] {
			t.Errorf("reaped %s, not a leftover of this test", r)
		}
		delete(want, r)
	}
	if len(want) != 0 {
		t.Errorf("did not reap %v (reaped %v)", want, reaped)
	}
	if !nsExists(live.Name()) {
		t.Errorf("reaped the live namespace %s", live.Name())
	}
}

func TestSendUDPArrives(t *testing.T) {
	needRoot(t)
	a, b, _, _ := vethBetween(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rx net.PacketConn
	if err := b.Do(func() error {
		var err error
		rx, err = net.ListenPacket("udp4", "10.77.250.2:5300")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	const count, size = 50, 1000
	// Also to a closed port first: its ICMP unreachable must not fail the
	// sends that follow.
	if n, err := a.SendUDP(ctx, "10.77.250.2", 9, 5, size, time.Millisecond); err != nil || n != 5 {
		t.Fatalf("SendUDP to a closed port: %d sent, %v", n, err)
	}
	n, err := a.SendUDP(ctx, "10.77.250.2", 5300, count, size, 100*time.Microsecond)
	if err != nil || n != count {
		t.Fatalf("SendUDP: %d sent, %v", n, err)
	}
	got := 0
	buf := make([]byte, 2048)
	rx.SetReadDeadline(time.Now().Add(2 * time.Second))
	for got < count {
		m, _, err := rx.ReadFrom(buf)
		if err != nil {
			break
		}
		if m != size {
			t.Fatalf("datagram of %d bytes, want %d", m, size)
		}
		got++
	}
	if got != count {
		t.Errorf("%d of %d datagrams arrived over the veth", got, count)
	}
	for _, bad := range []struct {
		addr       string
		port, size int
	}{{"fe80::1", 9, 10}, {"10.77.250.2", 0, 10}, {"10.77.250.2", 9, 70000}} {
		if _, err := a.SendUDP(ctx, bad.addr, bad.port, 1, bad.size, 0); err == nil {
			t.Errorf("SendUDP(%q, %d, size %d) succeeded", bad.addr, bad.port, bad.size)
		}
	}
}
