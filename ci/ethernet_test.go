package ci

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/hostnet"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// hostLink is a guest NIC's host end: a tap in a network namespace of its
// own, so test traffic never leaves the machine's test hosts.
type hostLink struct {
	ns      *hostnet.Namespace
	tap     *hostnet.Link
	hostIP  string
	guestIP string
}

var subnet = 10 // each link of a test run gets its own 10.77.N.0/24

// newHostLink creates the tap (before QEMU or the device server opens it).
func newHostLink(t *testing.T) *hostLink {
	t.Helper()
	name, err := hostnet.UniqueName("npft")
	if err != nil {
		t.Fatal(err)
	}
	tap, err := hostnet.CreateTap(name)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := hostnet.NewUniqueNamespace("npft")
	if err != nil {
		tap.Delete()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Close()
		tap.Delete()
	})
	subnet++
	return &hostLink{ns: ns, tap: tap,
		hostIP: fmt.Sprintf("10.77.%d.1", subnet), guestIP: fmt.Sprintf("10.77.%d.2", subnet)}
}

// attach moves the tap into its namespace once its user holds it open.
func (h *hostLink) attach(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := hostnet.MoveToNamespace(h.tap, h.ns); err != nil {
		t.Fatal(err)
	}
	if err := h.tap.Configure(ctx, h.hostIP+"/24"); err != nil {
		t.Fatal(err)
	}
}

// host runs a command in the link's namespace and returns its output.
func (h *hostLink) host(t *testing.T, timeout time.Duration, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := h.ns.Run(ctx, argv...)
	if err != nil {
		t.Fatalf("host %v: %v\n%s", argv, err, out)
	}
	return out
}

// ping checks that the guest answers ICMP echo from the host end.
func (h *hostLink) ping(t *testing.T, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := h.ns.Ping(ctx, addr, 3, 200*time.Millisecond, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Received == 0 {
		t.Fatalf("no ICMP echo reply from %s (%d sent)", addr, res.Sent)
	}
}

// npfnicGuest boots a guest whose npfnic device is cabled to a host tap,
// loads the driver and configures the interface.
func npfnicGuest(t *testing.T, name string, driverParams string) (*vm.VM, *hostLink, string) {
	t.Helper()
	link := newHostLink(t)
	v := startVM(t, vm.Config{Name: name, NPFNICs: []vm.NPFNIC{{Server: vm.InProcessServer{Wire: "tap:" + link.tap.Name()}}}})
	link.attach(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := v.LoadDriver(ctx, driverParams); err != nil {
		t.Fatal(err)
	}
	ifname := npfnicIfname(t, v)
	run(t, v, fmt.Sprintf("ip addr add %s/24 dev %s && ip link set %s up", link.guestIP, ifname, ifname))
	waitCarrier(t, v, ifname)
	return v, link, ifname
}

// npfnicIfname is the network interface the npfnic driver registered.
func npfnicIfname(t *testing.T, v *vm.VM) string {
	t.Helper()
	out := strings.Fields(run(t, v, "ls /sys/bus/pci/drivers/npfnic/*/net/"))
	if len(out) == 0 {
		t.Fatal("the npfnic driver registered no network interface")
	}
	return out[0]
}

func waitCarrier(t *testing.T, v *vm.VM, ifname string) {
	t.Helper()
	for i := 0; i < 50; i++ {
		if strings.TrimSpace(run(t, v, "cat /sys/class/net/"+ifname+"/carrier 2>/dev/null || echo 0")) == "1" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s has no carrier", ifname)
}

// ethtoolStats parses ethtool -S into a map.
func ethtoolStats(t *testing.T, v *vm.VM, ifname string) map[string]uint64 {
	t.Helper()
	stats := map[string]uint64{}
	for _, line := range strings.Split(run(t, v, "ethtool -S "+ifname), "\n") {
		k, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64); err == nil {
			stats[strings.TrimSpace(k)] = n
		}
	}
	return stats
}

// TestEthernetARPICMPAndTCP: ARP resolves both ways, ICMP echoes, and a TCP
// connection opened from each side carries data.
func TestEthernetARPICMPAndTCP(t *testing.T) {
	v, link, ifname := npfnicGuest(t, "eth", "")
	link.ping(t, link.guestIP)
	run(t, v, "ping -c 3 -w 5000 "+link.hostIP)
	if neigh := link.host(t, 10*time.Second, "ip", "neigh", "show", link.guestIP); !strings.Contains(neigh, "lladdr") {
		t.Errorf("host did not resolve the guest by ARP: %q", neigh)
	}
	if neigh := run(t, v, "cat /proc/net/arp"); !strings.Contains(neigh, link.hostIP) {
		t.Errorf("guest did not resolve the host by ARP:\n%s", neigh)
	}

	// Guest -> host and host -> guest, one small file each way.
	transfer(t, v, link, 256<<10)
	st := ethtoolStats(t, v, ifname)
	if st["q0_rx_packets"] == 0 || st["q0_tx_packets"] == 0 || st["q0_interrupts"] == 0 {
		t.Errorf("ethtool -S counters did not move: %v", st)
	}
	// The default RX ring, then a resize through ethtool -G that keeps working.
	ring := run(t, v, "ethtool -g "+ifname)
	if !regexp.MustCompile(`(?s)Current hardware settings:.*RX:\s+1024`).MatchString(ring) {
		t.Errorf("ethtool -g does not show the default RX ring of 1024:\n%s", ring)
	}
	run(t, v, "ethtool -G "+ifname+" rx 64 tx 128")
	ring = run(t, v, "ethtool -g "+ifname)
	if !regexp.MustCompile(`(?s)Current hardware settings:.*RX:\s+64\b.*TX:\s+128\b`).MatchString(ring) {
		t.Errorf("ethtool -G rx 64 tx 128 did not take:\n%s", ring)
	}
	waitCarrier(t, v, ifname)
	link.ping(t, link.guestIP)
}

// transfer sends size random bytes guest -> host and host -> guest through
// TCP and checks the sha256 on both ends.
func transfer(t *testing.T, v *vm.VM, link *hostLink, size int) {
	t.Helper()
	const block = 64 << 10
	run(t, v, fmt.Sprintf("dd if=/dev/urandom of=/tmp/out.bin bs=%d count=%d", block, size/block))
	guestSum := strings.Fields(run(t, v, "sha256sum /tmp/out.bin"))[0]

	// Guest -> host: the host listens inside the namespace.
	hostSum, n := hostReceive(t, link, func(addr string) {
		out := run(t, v, "npfnic-guest tcp-send "+addr+" /tmp/out.bin")
		if !strings.Contains(out, guestSum) {
			t.Errorf("guest sent a different file than it hashed: %s vs %s", out, guestSum)
		}
	})
	if hostSum != guestSum || n != int64(size) {
		t.Fatalf("guest -> host: %d bytes sha256 %s, want %d bytes %s", n, hostSum, size, guestSum)
	}

	// Host -> guest: the guest listens; the host sends a fresh random file.
	payload := make([]byte, size)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%x", sha256.Sum256(payload))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	recv := make(chan string, 1)
	go func() {
		r, err := v.Run(ctx, "npfnic-guest tcp-recv :7001 /tmp/in.bin")
		if err != nil || r.Exit != 0 {
			recv <- fmt.Sprintf("error: %v %s %s", err, r.Stdout, r.Stderr)
			return
		}
		recv <- r.Stdout
	}()
	err := link.ns.Do(func() error {
		var conn net.Conn
		var err error
		for i := 0; i < 100; i++ {
			if conn, err = net.Dial("tcp", link.guestIP+":7001"); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Write(payload)
		return err
	})
	if err != nil {
		t.Fatalf("host -> guest: %v", err)
	}
	if got := <-recv; !strings.Contains(got, fmt.Sprintf("received %d bytes sha256 %s", size, want)) {
		t.Fatalf("host -> guest: guest reports %q, want %d bytes sha256 %s", got, size, want)
	}
}

// hostReceive accepts one TCP connection in the link's namespace while send
// runs, and returns the sha256 and length of what arrived.
func hostReceive(t *testing.T, link *hostLink, send func(addr string)) (string, int64) {
	t.Helper()
	var l net.Listener
	if err := link.ns.Do(func() error {
		var err error
		l, err = net.Listen("tcp", link.hostIP+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type result struct {
		sum string
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer conn.Close()
		h := sha256.New()
		n, err := io.Copy(h, conn)
		done <- result{fmt.Sprintf("%x", h.Sum(nil)), n, err}
	}()
	send(l.Addr().String())
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.sum, r.n
	case <-time.After(5 * time.Minute):
		t.Fatal("host receive timed out")
	}
	return "", 0
}

// TestEthernetIntegrity moves 16 MiB each way (64 MiB in make
// vmtest-full) and compares sha256. Host -> guest goes through large
// receive (on by default): the tap's super-packets reach the guest whole,
// as descriptor chains, and none is refused. With ethtool -K lro off, a
// further 1 MiB each way arrives intact as MTU frames.
func TestEthernetIntegrity(t *testing.T) {
	size := 16 << 20
	if fullVMTests() {
		size = 64 << 20
	}
	v, link, ifname := npfnicGuest(t, "integrity", "")
	if k := run(t, v, "ethtool -k "+ifname); !strings.Contains(k, "large-receive-offload: on") {
		t.Fatalf("large receive is not on by default:\n%s", k)
	}
	transfer(t, v, link, size)
	st := ethtoolStats(t, v, ifname)
	t.Logf("large receive on: rx_lro_frames %d, q0_rx_packets %d", st["rx_lro_frames"], st["q0_rx_packets"])
	if st["rx_lro_frames"] == 0 || st["rx_bad_chains"] != 0 {
		t.Errorf("host -> guest with large receive: rx_lro_frames %d, rx_bad_chains %d",
			st["rx_lro_frames"], st["rx_bad_chains"])
	}
	run(t, v, "ethtool -K "+ifname+" lro off")
	transfer(t, v, link, 1<<20)
	if after := ethtoolStats(t, v, ifname); after["rx_lro_frames"] != st["rx_lro_frames"] {
		t.Errorf("lro off: rx_lro_frames moved from %d to %d", st["rx_lro_frames"], after["rx_lro_frames"])
	}
}

// iperf3Bytes reads an iperf3 -J report: bytes the sender sent and the
// receiver received.
func iperf3Bytes(t *testing.T, jsonOut string) (sent, received float64) {
	t.Helper()
	r, err := workload.ParseIperf3([]byte(jsonOut))
	if err != nil {
		t.Fatalf("iperf3: %v\n%s", err, jsonOut)
	}
	return float64(r.SentBytes), float64(r.Bytes)
}

// tapCounters reads the host-side counters of the link's tap (its TX is
// what the host sent towards the guest).
func (l *hostLink) tapCounters(t *testing.T) (packets, bytes, dropped uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := "/sys/class/net/" + l.tap.Name() + "/statistics/"
	out, err := l.ns.Run(ctx, "cat", dir+"tx_packets", dir+"tx_bytes", dir+"tx_dropped")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(out, &packets, &bytes, &dropped); err != nil {
		t.Fatalf("tap counters %q: %v", out, err)
	}
	return packets, bytes, dropped
}

// TestEthernetIperf3BothWays: iperf3 guest -> host and host -> guest; the
// byte counts of both ends agree and are not zero. Host -> guest, the tap
// drops nothing (the device holds the host back while the guest has no
// RX buffer, and the tap's queue holds super-packets: frames longer than
// the MTU on average, which the device segments).
func TestEthernetIperf3BothWays(t *testing.T) {
	v, link, ifname := npfnicGuest(t, "iperf", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := link.ns.StartIperf3Server(ctx, 5201)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	for _, dir := range []struct{ name, flag string }{{"guest->host", ""}, {"host->guest", "-R"}} {
		p0, b0, d0 := link.tapCounters(t)
		s0 := ethtoolStats(t, v, ifname)
		out := run(t, v, fmt.Sprintf("iperf3 -J -t 3 %s -c %s", dir.flag, link.hostIP))
		p1, b1, d1 := link.tapCounters(t)
		s1 := ethtoolStats(t, v, ifname)
		sent, received := iperf3Bytes(t, out)
		t.Logf("%s: sent %.0f bytes, received %.0f bytes (%.1f Mbit/s); tap: %d frames, %d bytes, %d dropped",
			dir.name, sent, received, received*8/3/1e6, p1-p0, b1-b0, d1-d0)
		if sent == 0 || received == 0 || received > sent {
			t.Errorf("%s: sent %.0f, received %.0f", dir.name, sent, received)
		}
		if dir.flag == "-R" {
			if d1 != d0 {
				t.Errorf("host->guest: the tap dropped %d frames on their way to the device", d1-d0)
			}
			if p1 == p0 || (b1-b0)/(p1-p0) <= 1514 {
				t.Errorf("host->guest: %d bytes in %d tap frames; want super-packets (receive offloads on)", b1-b0, p1-p0)
			}
			// The notify area (interface 2.14, on by default): the RX
			// tail and the arms go through memory, and RX_TAIL is rung
			// only when the device ran out of buffers; with registers it
			// was about one per poll, two polls per three packets.
			pkts, doorbells, arms := s1["q0_rx_packets"]-s0["q0_rx_packets"], s1["rx_doorbells"]-s0["rx_doorbells"], s1["irq_arm_writes"]-s0["irq_arm_writes"]
			t.Logf("host->guest: %d packets, %d RX_TAIL doorbells, %d IRQ_ARM writes", pkts, doorbells, arms)
			if pkts == 0 || doorbells*4 > pkts || arms != 0 {
				t.Errorf("host->guest: %d RX_TAIL doorbells and %d IRQ_ARM writes for %d packets; want the notify area's few and none", doorbells, arms, pkts)
			}
		}
	}
}

// TestEthernetMemcached: memcached in the guest, memaslap (Debian names it
// memcaslap) on the host side:
// every operation completes without errors.
func TestEthernetMemcached(t *testing.T) {
	v, link, _ := npfnicGuest(t, "memcached", "")
	run(t, v, "memcached -d -u root -l "+link.guestIP+" -p 11211 -m 64")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// memcached -d returns before the daemon listens: in a guest of a
	// loaded host memaslap came first, could not connect and exited 1.
	if err := workload.WaitListening(ctx, v, workload.MemcachedPort); err != nil {
		t.Fatal(err)
	}
	cmd := link.ns.Command(ctx, "memcaslap", "-s", link.guestIP+":11211", "-x", "2000", "-c", "4", "-T", "1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("memaslap: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	m, err := workload.ParseMemaslap(stdout.String(), stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	if m.Ops < 2000 || m.Errors != 0 {
		t.Fatalf("memaslap: %v %v", m, m.ErrorLines)
	}
}

// TestTwoVMsCabledThroughStream: npfnic in one guest, QEMU's e1000e in
// another, cabled through QEMU's stream netdev protocol: TCP works.
func TestTwoVMsCabledThroughStream(t *testing.T) {
	dir, err := os.MkdirTemp("", "npfnic-cable-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	wire := filepath.Join(dir, "wire.sock")
	a := startVM(t, vm.Config{Name: "npfnic-end", NPFNICs: []vm.NPFNIC{{Server: vm.InProcessServer{Wire: "stream-listen:unix:" + wire}}}})
	b := startVM(t, vm.Config{Name: "e1000e-end", NICs: []vm.QEMUNIC{{Model: "e1000e", Netdev: vm.Netdev{Kind: "stream", Path: wire}}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.LoadDriver(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.LoadModules(ctx, "e1000e"); err != nil {
		t.Fatal(err)
	}
	ifa := npfnicIfname(t, a)
	ifb := strings.TrimSpace(run(t, b, "ls /sys/bus/pci/drivers/e1000e/*/net/"))
	run(t, a, "ip addr add 10.78.0.1/24 dev "+ifa+" && ip link set "+ifa+" up")
	run(t, b, "ip addr add 10.78.0.2/24 dev "+ifb+" && ip link set "+ifb+" up")
	waitCarrier(t, a, ifa)
	run(t, b, "iperf3 -s -D -1")
	var out string
	for i := 0; i < 20; i++ {
		r, err := a.Run(ctx, "iperf3 -J -t 2 -c 10.78.0.2")
		if err != nil {
			t.Fatal(err)
		}
		if r.Exit == 0 {
			out = r.Stdout
			break
		}
		time.Sleep(500 * time.Millisecond) // e1000e link negotiation
	}
	if out == "" {
		t.Fatal("iperf3 across the stream cable never connected")
	}
	sent, received := iperf3Bytes(t, out)
	if sent == 0 || received == 0 {
		t.Fatalf("TCP across the cable: sent %.0f received %.0f", sent, received)
	}
}

// TestBadGuestInputStopsOnlyThatQueue: the driver feeds a queue pair a
// descriptor outside guest RAM, a ring beyond mapped memory and a doorbell
// beyond the ring; each time the device stops that pair with the defined
// error the driver reports, the server keeps serving, and a second npfnic
// in the same guest keeps carrying traffic.
func TestBadGuestInputStopsOnlyThatQueue(t *testing.T) {
	good := newHostLink(t)
	bad := newHostLink(t)
	v := startVM(t, vm.Config{Name: "badinput", NPFNICs: []vm.NPFNIC{
		{Server: vm.InProcessServer{Wire: "tap:" + good.tap.Name()}},
		{Server: vm.InProcessServer{Wire: "tap:" + bad.tap.Name()}},
	}})
	good.attach(t)
	bad.attach(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := v.LoadDriver(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var ifs, devs []string
	for _, line := range strings.Split(strings.TrimSpace(run(t, v, "for d in /sys/bus/pci/drivers/npfnic/0000:*; do echo $d $(ls $d/net); done")), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 {
			devs, ifs = append(devs, f[0]), append(ifs, f[1])
		}
	}
	if len(ifs) != 2 {
		t.Fatalf("want two npfnic interfaces, got %v on %v", ifs, devs)
	}
	// The devices sit on root ports in the order they were configured.
	goodIf, badIf, badDev := ifs[0], ifs[1], devs[1]
	run(t, v, fmt.Sprintf("ip addr add %s/24 dev %s && ip link set %s up", good.guestIP, goodIf, goodIf))
	for _, tc := range []struct{ inject, code string }{
		{"bad_desc", "error 2"}, {"bad_ring", "error 1"}, {"bad_tail", "error 3"},
	} {
		run(t, v, "ip link set "+badIf+" up")
		run(t, v, fmt.Sprintf("printf '%s 0\\n' > /sys/kernel/debug/npfnic/%s/inject", tc.inject, filepath.Base(badDev)))
		want := "queue pair 0 stopped by the device: " + tc.code
		deadline := time.Now().Add(15 * time.Second)
		for {
			st := ethtoolStats(t, v, badIf)
			logged := strings.Count(run(t, v, "dmesg"), want)
			if st["queue_errors"] == 1 && logged > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: want queue_errors 1 and %q in dmesg; stats %v, logged %d times", tc.inject, want, st, logged)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The other device still carries traffic, and the server still serves.
		good.ping(t, good.guestIP)
		run(t, v, "ip link set "+badIf+" down") // stop frees and re-creates the pair
	}
}
