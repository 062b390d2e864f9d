package ci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/blockpat"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// On-demand paging (issue 13) between npfnic and rdma_rxe: npfnic's side
// registers its buffers with IBV_ACCESS_ON_DEMAND (ibv_rc_pingpong -o,
// perftest --odp), so nothing is pinned and every page the device touches
// first faults: a page request, resolved by the driver, answered, and the
// transfer resumed. rxe (which has no ODP) keeps its buffers pinned.

// odpCounters are npfnic's rdma statistic counters of on-demand paging.
var odpCounters = []string{"odp_faults", "odp_fault_errors", "odp_pages_mapped", "responder_faults",
	"requester_faults", "rnr_naks_fault", "page_requests", "page_request_errors"}

// odpDelta is after - before of odpCounters, failing on a counter npfnic
// does not report.
func odpDelta(t *testing.T, before, after map[string]int64) map[string]int64 {
	t.Helper()
	d := map[string]int64{}
	for _, k := range odpCounters {
		if _, ok := after[k]; !ok {
			t.Fatalf("npfnic's rdma statistic has no %s: %v", k, after)
		}
		d[k] = after[k] - before[k]
	}
	return d
}

// TestRDMAODPWithRxe: npfnic with ODP memory regions against rdma_rxe,
// npfnic as server and as client: ibv_rc_pingpong -o with buffer
// validation, then perftest's SEND, WRITE and READ bandwidth with --odp.
// Each run starts from cold memory (a new process): its pages fault, at
// most once each, the data is intact, and rxe's own counter of RNR NAKs
// received rises when npfnic receives: the NAKs of npfnic's receive faults
// are real and well-formed to an independent RC implementation. Then the
// memory is reclaimed under traffic, and ODP processes are killed
// mid-transfer, after the process forked and unmapped parts of its
// region under traffic (odpForkMunmap), and again through overlapping MRs
// (an implicit ODP MR among them; make vmtest-full also through an
// implicit MR's own keys). Under the driver's odp=all, unmodified
// ibv_rc_pingpong and (make vmtest-full) ib_write_bw, neither with -o nor
// --odp, run unpinned on
// npfnic, and so does the fork and munmap churn of a region registered
// without ON_DEMAND. npfnic's Ethernet runs rx_policy backup all along,
// and one step runs ODP traffic beside cold rings, cools, synthetic
// rNPFs and TCP both ways (odpBesideEthernetFaults).
func TestRDMAODPWithRxe(t *testing.T) {
	// The cable is recorded (kept with the VM logs when the test fails):
	// two rare failures beside other VM load, an ACK rxe never got and a
	// pingpong that stalled under pageout, need the frames to explain.
	// rx_policy backup: every step runs beside Ethernet page faults of
	// the same function (odpBesideEthernetFaults loads them most).
	// npfnic's guest has a disk for tgt to serve (odpStorage).
	p := rdmaPairWith(t, testbed.RDMAPairConfig{A: testbed.RDMANPFNIC, B: testbed.RDMARxe, Name: "rdma-odp",
		Pcap: filepath.Join(logDir(t, "capture"), "odp.pcap"), NPFNICParams: "rx_policy=" + odpEthPolicy,
		DiskA: storageDisk(t), AppendA: testbed.StorageAppend})
	npf, rxe := p.A, p.B
	if st := rdmaStatistic(t, npf); len(st) == 0 {
		t.Fatal("npfnic reports no rdma statistic")
	}
	// pages, if set, bounds the PTEs the faults entered: each page of a
	// cold buffer faults once for reading or writing, and at most once
	// more to become writable. transfer runs the program, with ODP on
	// npfnic's side only (rxe has none).
	run := func(what string, server, client *testbed.RDMAGuest, pages int64, transfer func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		before, rxeBefore := rdmaStatistic(t, npf), rxeStats(t, rxe)
		if err := transfer(ctx); err != nil {
			t.Fatalf("%s (%s server): %v", what, server.Kind, err)
		}
		d := odpDelta(t, before, rdmaStatistic(t, npf))
		rxeAfter := rxeStats(t, rxe)
		rnr := rxeAfter["rcvd_rnr_err"] - rxeBefore["rcvd_rnr_err"]
		t.Logf("%s (%s server): npfnic %v; rxe rcvd_rnr_err +%d, retry_exceeded_err +%d", what, server.Kind, d, rnr,
			rxeAfter["retry_exceeded_err"]-rxeBefore["retry_exceeded_err"])
		if d["odp_faults"] == 0 || d["odp_pages_mapped"] == 0 || d["page_requests"] == 0 {
			t.Errorf("%s: no page fault from cold ODP memory: %v", what, d)
		}
		if pages > 0 && (d["odp_pages_mapped"] < pages || d["odp_pages_mapped"] > 2*pages) {
			t.Errorf("%s: %d pages mapped by faults for a buffer of %d pages", what, d["odp_pages_mapped"], pages)
		}
		if d["odp_fault_errors"] != 0 || d["page_request_errors"] != 0 {
			t.Errorf("%s: faults failed: %v", what, d)
		}
		if rxeAfter["retry_exceeded_err"] != rxeBefore["retry_exceeded_err"] || rxeAfter["rcvd_seq_err"] != rxeBefore["rcvd_seq_err"] {
			t.Errorf("%s: rxe saw sequence errors or exhausted its retries: %v", what, rxeAfter)
		}
		if d["rnr_naks_fault"] > 0 && rnr == 0 {
			t.Errorf("%s: npfnic sent %d RNR NAKs for receive faults, rxe counted none", what, d["rnr_naks_fault"])
		}
	}
	perftestODP := func(server, client *testbed.RDMAGuest, pt workload.Perftest) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := p.Perftest(ctx, server, client, testbed.PerftestRun{Perftest: pt, Side: testbed.ODPOnNPFNIC, Logf: t.Logf})
			return err
		}
	}
	// Whole-request prefault (debugfs odp_prefault_pages, RDMA_PREFAULT,
	// from the module parameter): one page a fault, a cold 64 KiB
	// receive takes 16 page requests; at 16 (and at the default, 64),
	// the first fault asks for all of them at once.
	prefault := func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := npf.WriteDebugfs(ctx, testbed.ODPPrefaultFile, strconv.Itoa(n)); err != nil {
			t.Fatal(err)
		}
	}
	defaultCtx, cancelDefault := context.WithTimeout(context.Background(), time.Minute)
	if def, err := npf.ReadDebugfs(defaultCtx, testbed.ODPPrefaultFile); err != nil || def != "64" {
		t.Errorf("odp_prefault_pages reads %q (%v), want the module parameter's default 64", def, err)
	}
	cancelDefault()
	prefault(1)
	for _, side := range []struct{ server, client *testbed.RDMAGuest }{{npf, rxe}, {rxe, npf}} {
		run("ibv_rc_pingpong -o -s 65536", side.server, side.client, 16, func(ctx context.Context) error {
			_, _, err := p.RunClientServer(ctx, side.server, side.client, func(g *testbed.RDMAGuest, ip string) []string {
				pp := workload.Pingpong{Size: 65536, Iters: 20, ODP: g.Kind == testbed.RDMANPFNIC, Validate: true}
				return pp.Args(g.Dev, g.GIDIndex, ip)
			})
			return err
		})
	}
	prefault(16)
	preBefore := rdmaStatistic(t, npf)
	run("ibv_rc_pingpong -o -s 65536, odp_prefault_pages 16", npf, rxe, 16, func(ctx context.Context) error {
		_, _, err := p.RunClientServer(ctx, npf, rxe, func(g *testbed.RDMAGuest, ip string) []string {
			pp := workload.Pingpong{Size: 65536, Iters: 20, ODP: g.Kind == testbed.RDMANPFNIC, Validate: true}
			return pp.Args(g.Dev, g.GIDIndex, ip)
		})
		return err
	})
	if d := odpDelta(t, preBefore, rdmaStatistic(t, npf)); d["page_requests"] > 2 {
		t.Errorf("a cold 64 KiB receive with odp_prefault_pages 16 took %d page requests, want 1 (2 if the buffer straddles)", d["page_requests"])
	}
	prefault(64) // the default again

	// npfnic receives: its receive buffers fault, so rxe gets RNR NAKs.
	before := rxeStats(t, rxe)
	for _, tool := range []string{"ib_send_bw", "ib_write_bw"} {
		run(tool+" --odp", npf, rxe, 0, perftestODP(npf, rxe, workload.Perftest{Tool: tool, Size: 65536, Iters: 20, Port: 18800}))
	}
	if rnr := rxeStats(t, rxe)["rcvd_rnr_err"] - before["rcvd_rnr_err"]; rnr == 0 {
		t.Errorf("rxe received no RNR NAK while npfnic's cold ODP buffers took its SENDs and WRITEs")
	}
	// npfnic reads: the READ responses' targets fault at the requester.
	run("ib_read_bw --odp", rxe, npf, 0, perftestODP(rxe, npf, workload.Perftest{Tool: "ib_read_bw", Size: 65536, Iters: 20, Port: 18801}))
	odpBesideEthernetFaults(t, p, npf, rxe)
	syntheticReceiveFaults(t, p, npf, rxe)
	reclaimUnderTraffic(t, p, npf, rxe)
	// 40 forks and 20 munmaps in make vmtest-full, half in make test.
	forks, munmaps := 20, 10
	if fullVMTests() {
		forks, munmaps = 40, 20
	}
	odpForkMunmap(t, p, npf, rxe, "odp", forks, munmaps)
	killMidTransfer(t, p, npf, rxe, true)
	// The same churn through overlapping MRs, ODP and pinned, where an
	// implicit ODP MR's children resolve most faults; make vmtest-full
	// runs it through an implicit MR's own keys as well (7 s).
	odpForkMunmap(t, p, npf, rxe, "overlap", 6, 3)
	if fullVMTests() {
		odpForkMunmap(t, p, npf, rxe, "implicit", 6, 3)
	}
	if t.Failed() {
		return
	}

	// Transparent ODP (the driver's odp=all, read at each registration):
	// unmodified programs, which ask for no ODP, fault their cold buffers
	// in all the same (a pinned MR never faults), and the churn holds
	// for a region registered without ON_DEMAND. With the overlapping
	// churn above, about 50 s (TestRDMAODPWithRxe took 164.7 s before
	// them, 219.9 s with them and the implicit churn, at load 3 to 6).
	setODPMode(t, npf, "all")
	run("ibv_rc_pingpong -s 65536 (no -o), odp=all", npf, rxe, 16, func(ctx context.Context) error {
		return transparentMRCounters(ctx, t, p, npf, rxe)
	})
	// npfnic serving (its target faults), in make vmtest-full; the churn
	// below reads from such a region too.
	if fullVMTests() {
		run("ib_write_bw (no --odp), odp=all", npf, rxe, 0, func(ctx context.Context) error {
			_, err := p.Perftest(ctx, npf, rxe, testbed.PerftestRun{
				Perftest: workload.Perftest{Tool: "ib_write_bw", Size: 65536, Iters: 20, Port: 18804}, Logf: t.Logf})
			return err
		})
	}
	odpForkMunmap(t, p, npf, rxe, "plain", 6, 3)
	odpStorage(t, p, npf, rxe)
	setODPMode(t, npf, "explicit")
}

// storageDiskMiB is the disk odpStorage's tgt serves.
const storageDiskMiB = 32

// storageDisk writes a disk image of blockpat's pattern, which
// npfnic-guest randread checks every block it reads against.
func storageDisk(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := blockpat.Write(f, storageDiskMiB<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// odpStorage is `npfnic exp storage`'s npf configuration at a small size
// (seed 000's Figure 8): unmodified tgt under odp=all, its 128 MiB iSER
// pool never pinned, serves npfnic's disk to rdma_rxe's ib_iser through
// a cgroup whose memory.max (96 MiB) is below the pool, which pinned tgt
// cannot register (the experiment's first row); npfnic-guest randread
// checks every 512 KiB block it reads. The receive faults are held in
// the device (hold): tgt's initiators take no RNR NAK.
func odpStorage(t *testing.T, p *testbed.RDMAPair, npf, rxe *testbed.RDMAGuest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := npf.VM.LoadModules(ctx, "virtio_pci", "virtio_blk"); err != nil {
		t.Fatal(err)
	}
	before := rdmaStatistic(t, npf)
	res, err := p.Storage(ctx, npf, rxe, testbed.StorageRun{Backing: "/dev/vda", PoolMiB: 128, MemMaxMiB: 96, ODP: "all",
		RecvFault: testbed.RecvFaultHold, BS: 512 << 10, Jobs: 1, Warm: time.Second, Run: 2 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatalf("tgt under odp=all: %v", err)
	}
	if res.NoStart != "" || res.IOs == 0 {
		t.Fatalf("tgt under odp=all did not serve: %q, %d reads", res.NoStart, res.IOs)
	}
	d := odpDelta(t, before, rdmaStatistic(t, npf))
	t.Logf("tgt under odp=all, memory.max 96 MiB: %.2f MB/s, %d reads, tgtd RSS %d KiB (peak %d), cgroup %d KiB; %v in %.0f s",
		res.MBps, res.IOs, res.RSSKiB, res.HWMKiB, res.CgroupKiB, d, res.Took.Seconds())
	if res.HWMKiB >= 64<<10 {
		t.Errorf("tgtd's peak RSS %d KiB: half its 128 MiB pool or more was backed", res.HWMKiB)
	}
	if err := npf.SetRecvFault(ctx, testbed.RecvFaultRNR); err != nil {
		t.Fatal(err)
	}
}

// transparentMRCounters runs ibv_rc_pingpong -c between npfnic (server)
// and rxe under odp=all: the MR of the pingpong, which asked for no ODP,
// is on-demand by its own counters while it runs: rdma -dd resource show
// mr gives it mlx5's page_faults, which the driver reports for ODP MRs
// only, and its pages faulted.
func transparentMRCounters(ctx context.Context, t *testing.T, p *testbed.RDMAPair, npf, rxe *testbed.RDMAGuest) error {
	before := rdmaStatistic(t, npf)
	pp := workload.Pingpong{Size: 65536, Iters: 400, Validate: true, Port: 18805}
	done := make(chan error, 1)
	go func() {
		_, _, err := p.RunClientServer(ctx, npf, rxe, func(g *testbed.RDMAGuest, ip string) []string {
			return pp.Args(g.Dev, g.GIDIndex, ip)
		})
		done <- err
	}()
	for deadline := time.Now().Add(time.Minute); ; {
		if st := rdmaStatistic(t, npf); st["odp_pages_mapped"] >= before["odp_pages_mapped"]+16 {
			out, err := npf.Shell(ctx, "rdma -dd resource show mr")
			if err != nil {
				return fmt.Errorf("rdma -dd resource show mr: %v %s", err, out)
			}
			m := mrStatLine.FindStringSubmatch(out)
			if m == nil || m[1] == "0" {
				return fmt.Errorf("no on-demand MR with faults in rdma -dd resource show mr:\n%s", out)
			}
			t.Logf("ibv_rc_pingpong without -o under odp=all, its MR: page_faults %s page_invalidations %s", m[1], m[2])
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no fault within a minute")
		}
		select {
		case err := <-done:
			return fmt.Errorf("ended before its MR was looked at: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return <-done
}

// setODPMode sets the npfnic driver's odp module parameter (explicit or
// all), which it reads at each registration.
func setODPMode(t *testing.T, g *testbed.RDMAGuest, mode string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const param = "/sys/module/npfnic/parameters/odp"
	out, err := g.Shell(ctx, fmt.Sprintf("echo %s > %s && cat %s", mode, param, param))
	if err != nil {
		t.Fatalf("odp=%s: %v %s", mode, err, out)
	}
	if got := strings.TrimSpace(out); got != mode {
		t.Fatalf("set odp=%s, the driver reports %q", mode, got)
	}
}

// syntheticReceiveFaults runs 20,000 ib_send_bw --odp messages into npfnic at a
// synthetic receive-fault rate of 0.2% per message (rnpf_rate_ppm): the
// driver evicts a mapped page of the receive MR about once every 500
// messages, and each eviction is a real fault of the next receive (an RNR
// NAK, which rxe counts). perftest's MR has a send half the server never
// touches beside its receive page, so an eviction that drew pages without
// looking for a mapped one would find none half of the time; a fault is
// skipped only when no page is left mapped, rare at this rate.
func syntheticReceiveFaults(t *testing.T, p *testbed.RDMAPair, npf, rxe *testbed.RDMAGuest) {
	if t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ppm = 2000
	if err := npf.SetRNPFRate(ctx, ppm); err != nil {
		t.Fatal(err)
	}
	before, rxeBefore := rdmaStatistic(t, npf), rxeStats(t, rxe)
	// A count of messages, not a duration: a loaded host sent too few in
	// 4 s to judge the rate (stress-ci: 4828, 9.7 faults expected).
	pt := workload.Perftest{Tool: "ib_send_bw", Size: 4096, Iters: 20000, Port: 18803}
	_, err := p.Perftest(ctx, npf, rxe, testbed.PerftestRun{Perftest: pt, Side: testbed.ODPOnNPFNIC, Logf: t.Logf})
	if rerr := npf.SetRNPFRate(ctx, 0); rerr != nil {
		t.Error(rerr)
	}
	if err != nil {
		t.Fatalf("ib_send_bw --odp at %d ppm synthetic receive faults: %v", ppm, err)
	}
	after, rxeAfter := rdmaStatistic(t, npf), rxeStats(t, rxe)
	d := func(k string) int64 { return after[k] - before[k] }
	msgs, inj, skip := d("messages_in"), d("odp_rnpf_injected"), d("odp_rnpf_skipped")
	want := float64(msgs) * ppm / 1e6
	t.Logf("%d messages at %d ppm: %d faults injected (%.0f expected), %d skipped; responder_faults %d, rnr_naks_fault %d; rxe rcvd_rnr_err +%d",
		msgs, ppm, inj, want, skip, d("responder_faults"), d("rnr_naks_fault"), rxeAfter["rcvd_rnr_err"]-rxeBefore["rcvd_rnr_err"])
	if want < 10 {
		t.Fatalf("only %d messages: too few to judge the rate", msgs)
	}
	if float64(inj) < want/2 || float64(inj) > want*2 {
		t.Errorf("%d faults injected for %.0f expected at %d ppm of %d messages", inj, want, ppm, msgs)
	}
	if 4*skip > inj {
		t.Errorf("%d drawn faults skipped for %d injected: the eviction misses the mapped pages", skip, inj)
	}
	// Every eviction faults the next receive, but the last one may not
	// have been reached before the run ended.
	if d("responder_faults") < inj-1 || d("rnr_naks_fault") < inj-1 {
		t.Errorf("%d faults injected, but only %d responder faults and %d RNR NAKs", inj, d("responder_faults"), d("rnr_naks_fault"))
	}
	// rxe counts the NAKs that reach its completer while it waits for
	// them, which is most but not always all.
	if rnr := rxeAfter["rcvd_rnr_err"] - rxeBefore["rcvd_rnr_err"]; 2*rnr < d("rnr_naks_fault") {
		t.Errorf("npfnic sent %d RNR NAKs, rxe counted %d", d("rnr_naks_fault"), rnr)
	}
	if rxeAfter["retry_exceeded_err"] != rxeBefore["retry_exceeded_err"] || rxeAfter["retry_rnr_exceeded_err"] != rxeBefore["retry_rnr_exceeded_err"] {
		t.Errorf("rxe exhausted its retries: %v", rxeAfter)
	}
}

// mrStatLine is an ODP region's counters in rdma -dd resource show mr.
// iproute2 prefixes a driver attribute's name with drv_.
var mrStatLine = regexp.MustCompile(`(?:drv_)?page_faults (\d+) (?:drv_)?page_invalidations (\d+) (?:drv_)?page_prefetch (\d+)`)

// reclaimUnderTraffic pages the memory of npfnic's ibv_rc_pingpong -o out
// (to swap on zram) again and again while it runs with buffer validation:
// the kernel invalidates the pages the device maps, the driver drops their
// translations, the device faults them back in, and every buffer either
// side received is intact (-c).
func reclaimUnderTraffic(t *testing.T, p *testbed.RDMAPair, npf, rxe *testbed.RDMAGuest) {
	if t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := npf.VM.LoadModules(ctx, "zram"); err != nil {
		t.Fatal(err)
	}
	if out, err := npf.Shell(ctx, "npfnic-guest zram-swap 256"); err != nil {
		t.Fatalf("swap on zram: %v %s", err, out)
	}
	before := rdmaStatistic(t, npf)
	// About 20 s under TCG: the pages go out during the first 5.
	pp := workload.Pingpong{Size: 65536, Iters: 4000, Validate: true, Port: 18802}
	done := make(chan error, 1)
	go func() {
		_, _, err := p.RunClientServer(ctx, npf, rxe, func(g *testbed.RDMAGuest, ip string) []string {
			q := pp
			q.ODP = g.Kind == testbed.RDMANPFNIC
			return q.Args(g.Dev, g.GIDIndex, ip)
		})
		done <- err
	}()
	// Once the transfer runs, page its memory out every 100 ms for 5 s.
	var pid string
	for deadline := time.Now().Add(time.Minute); pid == ""; {
		if st := rdmaStatistic(t, npf); st["odp_pages_mapped"] > before["odp_pages_mapped"] {
			out, err := npf.Shell(ctx, "pidof ibv_rc_pingpong || true")
			if err != nil {
				t.Fatal(err)
			}
			pid = strings.TrimSpace(out)
		}
		if time.Now().After(deadline) {
			t.Fatal("ibv_rc_pingpong -o took no fault within a minute")
		}
		select {
		case err := <-done:
			t.Fatalf("ibv_rc_pingpong -o -c ended before its memory was paged out: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	out, err := npf.Shell(ctx, "npfnic-guest pageout "+pid+" 100 5000")
	if err != nil {
		t.Fatalf("pageout: %v %s", err, out)
	}
	// The process's ODP region, still registered (the transfer runs on
	// for seconds), has its own counters, with mlx5's names (bookworm's
	// iproute2 shows them as the MR's driver attributes).
	mrStats, err := npf.Shell(ctx, "rdma -dd resource show mr")
	if err != nil {
		t.Fatalf("rdma -dd resource show mr: %v %s", err, mrStats)
	}
	faulted := false
	for _, m := range mrStatLine.FindAllStringSubmatch(mrStats, -1) {
		f, _ := strconv.Atoi(m[1])
		inv, _ := strconv.Atoi(m[2])
		faulted = faulted || f > 16 && inv > 0
	}
	if !faulted {
		t.Errorf("rdma -dd resource show mr shows no ODP region whose pages faulted back after their invalidation:\n%s", mrStats)
	}
	if err := <-done; err != nil {
		t.Fatalf("ibv_rc_pingpong -o -c with its memory paged out: %v", err)
	}
	d := odpDelta(t, before, rdmaStatistic(t, npf))
	after := rdmaStatistic(t, npf)
	inv := after["odp_invalidations"] - before["odp_invalidations"]
	t.Logf("reclaim under traffic: %s; npfnic %v, invalidations +%d, pages invalidated +%d", strings.TrimSpace(out), d, inv,
		after["odp_pages_invalidated"]-before["odp_pages_invalidated"])
	// 16 pages: the buffer of one process, mapped once from cold; more is
	// pages faulted back after their invalidation.
	if inv == 0 || d["odp_pages_mapped"] <= 16 {
		t.Errorf("no page of the running transfer was invalidated and faulted back: invalidations +%d, pages mapped +%d", inv, d["odp_pages_mapped"])
	}
}
