package ci

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// odpEthPolicy is the rx_policy TestRDMAODPWithRxe boots its npfnic guest
// with: every ODP step runs beside Ethernet page faults on the same
// function, through the one translation engine both sides share.
const odpEthPolicy = "backup"

// odpBesideEthernetFaults runs ODP RDMA traffic against rxe while the same
// npfnic function's Ethernet runs rx_policy backup with cold rings (cool
// before, and again every 400 ms during the run), synthetic rNPFs on both
// sides (rnpf_rate_ppm is one knob for the Ethernet frames and the RDMA
// messages), and TCP both ways between the guests: ibv_rc_pingpong -o
// with buffer validation, and files whose sha256 must arrive intact. The
// Ethernet RX faults go through the backup ring and page requests of
// PASID 0 while the RDMA faults are page requests of a context's PASID,
// answered through the same queues; the device writes nothing into
// memory taken back (late_dma 0).
func odpBesideEthernetFaults(t *testing.T, p *testbed.RDMAPair, npf, rxe *testbed.RDMAGuest) {
	if t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sysfs := "/sys/bus/pci/devices/" + npf.BDF + "/"
	if out, err := npf.Shell(ctx, "cat "+sysfs+"rx_policy"); err != nil || out != odpEthPolicy {
		t.Fatalf("npfnic's rx_policy is %q (%v), want %s", out, err, odpEthPolicy)
	}
	ethtool := func() map[string]uint64 {
		t.Helper()
		out, err := npf.Shell(ctx, "ethtool -S "+npf.IfName)
		if err != nil {
			t.Fatal(err)
		}
		return testbed.ParseEthtoolStats(out)
	}
	cool := func() error {
		_, err := npf.Shell(ctx, "echo 1 > "+sysfs+"cool")
		return err
	}
	const size = 4 << 20
	sum := func(g *testbed.RDMAGuest) string {
		t.Helper()
		out, err := g.Shell(ctx, fmt.Sprintf("dd if=/dev/urandom of=/tmp/eth-out.bin bs=65536 count=%d 2>/dev/null && sha256sum /tmp/eth-out.bin", size/65536))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(out)[0]
	}
	npfSum, rxeSum := sum(npf), sum(rxe)

	ethBefore, rdmaBefore := ethtool(), rdmaStatistic(t, npf)
	if err := cool(); err != nil {
		t.Fatalf("cool: %v", err)
	}
	const ppm = 20000
	if err := npf.SetRNPFRate(ctx, ppm); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cooling := coolEvery(400*time.Millisecond, cool)
	rdmaDone := make(chan error, 1)
	go func() {
		_, _, err := p.RunClientServer(ctx, npf, rxe, func(g *testbed.RDMAGuest, ip string) []string {
			pp := workload.Pingpong{Size: 65536, Iters: 300, ODP: g.Kind == testbed.RDMANPFNIC, Validate: true, Port: 18804}
			return pp.Args(g.Dev, g.GIDIndex, ip)
		})
		rdmaDone <- err
	}()
	// TCP into npfnic (its RX faults), then out of it.
	tcpErr := func() error {
		for _, d := range []struct {
			from, to *testbed.RDMAGuest
			port     int
			want     string
		}{{rxe, npf, 7101, rxeSum}, {npf, rxe, 7102, npfSum}} {
			if err := tcpCopy(ctx, d.from, d.to, d.port, size, d.want); err != nil {
				return fmt.Errorf("%s -> %s: %w", d.from.Kind, d.to.Kind, err)
			}
		}
		return nil
	}()
	rdmaErr := <-rdmaDone
	cools := cooling.stop()
	if cools.first != nil {
		t.Logf("cool: %v", cools.first)
	}
	took := time.Since(start)
	if err := npf.SetRNPFRate(ctx, 0); err != nil {
		t.Error(err)
	}
	if tcpErr != nil {
		t.Errorf("TCP beside ODP RDMA under rx_policy %s: %v", odpEthPolicy, tcpErr)
	}
	if rdmaErr != nil {
		t.Errorf("ibv_rc_pingpong -o -c beside Ethernet faults: %v", rdmaErr)
	}
	eth, rdma := ethtool(), rdmaStatistic(t, npf)
	de := func(k string) uint64 { return eth[k] - ethBefore[k] }
	dr := odpDelta(t, rdmaBefore, rdma)
	t.Logf("%.1fs: 4 MiB TCP each way, ibv_rc_pingpong -o 300 x 64 KiB, %d cools (%d failed) at %d ppm rNPFs; "+
		"ethernet rx_faults %d rx_backup_pkts %d rnpf_injected %d page_requests %d invalidations %d; rdma %v, odp_rnpf_injected %d; late_dma %d",
		took.Seconds(), cools.done, cools.failed, ppm, de("rx_faults"), de("rx_backup_pkts"), de("rnpf_injected"),
		de("page_requests"), de("invalidations"), dr, rdma["odp_rnpf_injected"]-rdmaBefore["odp_rnpf_injected"], eth["late_dma"])
	if cools.failed > 0 || de("cools") < uint64(cools.done)+1 {
		t.Errorf("cools: %d written (+1 before), %d failed, the driver counted %d", cools.done, cools.failed, de("cools"))
	}
	if de("rx_faults") == 0 || de("rx_backup_pkts") == 0 || de("page_requests") == 0 {
		t.Errorf("the cold rings took no Ethernet fault through the backup ring and page requests: %v", eth)
	}
	if de("rnpf_injected") == 0 {
		t.Errorf("no synthetic Ethernet rNPF at %d ppm", ppm)
	}
	if dr["odp_faults"] == 0 || dr["odp_pages_mapped"] == 0 {
		t.Errorf("no RDMA page fault from cold ODP memory: %v", dr)
	}
	if dr["odp_fault_errors"] != 0 || dr["page_request_errors"] != 0 || de("bad_page_requests") != 0 {
		t.Errorf("faults failed: rdma %v, ethernet bad_page_requests %d", dr, de("bad_page_requests"))
	}
	if eth["late_dma"] != 0 || de("inv_timeouts") != 0 || de("pri_errors") != 0 {
		t.Errorf("late_dma %d, inv_timeouts +%d, pri_errors +%d; want 0", eth["late_dma"], de("inv_timeouts"), de("pri_errors"))
	}
}

// tcpCopy sends from's /tmp/eth-out.bin to to over TCP and checks that
// size bytes with sha256 want arrived.
func tcpCopy(ctx context.Context, from, to *testbed.RDMAGuest, port, size int, want string) error {
	recv := make(chan string, 1)
	go func() {
		out, err := to.Shell(ctx, fmt.Sprintf("npfnic-guest tcp-recv :%d /tmp/eth-in.bin", port))
		if err != nil {
			out = "error: " + err.Error()
		}
		recv <- out
	}()
	addr := fmt.Sprintf("%s:%d", to.IP, port)
	var err error
	for i := 0; i < 50; i++ {
		if _, err = from.Shell(ctx, "npfnic-guest tcp-send "+addr+" /tmp/eth-out.bin"); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		return err
	}
	got := <-recv
	if !strings.Contains(got, fmt.Sprintf("received %d bytes sha256 %s", size, want)) {
		return fmt.Errorf("receiver reports %q, want %d bytes sha256 %s", got, size, want)
	}
	return nil
}
