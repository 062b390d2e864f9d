package ci

import (
	"cmp"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// VM tests of RDMA between two guests cabled back to back: unmodified
// ibverbs programs (ibv_rc_pingpong with buffer validation, perftest)
// between npfnic and Linux's rdma_rxe, the independent RC implementation
// that checks npfnic's wire, and between two npfnics.

// vmTestMinAckTimeout is the npfnics' floor on their local ACK timers in
// the VM tests. make stress-ci (load 9-12 on 2 CPUs) ended
// ibv_rc_pingpong on npfnic with IBV_WC_RETRY_EXC_ERR while rxe had
// received every packet: ibv_rc_pingpong's timeout is 67 ms, not to be
// changed, and seven retries of it fit inside one stall of the peer's
// TCG guest (guests logged clocksource gaps of over 3 s). Eight seconds of
// retries outlast those; the retransmissions themselves are tested in
// package ibrc, and by the soak's perftest with -u.
const vmTestMinAckTimeout = time.Second

func rdmaPair(t *testing.T, name string, a, b testbed.RDMAKind, pcap string) *testbed.RDMAPair {
	t.Helper()
	return rdmaPairOn(t, images.VariantRDMA, name, a, b, pcap, "")
}

// rdmaPairParams is rdmaPair with npfnic.ko loaded with params.
func rdmaPairParams(t *testing.T, name string, a, b testbed.RDMAKind, pcap, params string) *testbed.RDMAPair {
	t.Helper()
	return rdmaPairOn(t, images.VariantRDMA, name, a, b, pcap, params)
}

// rdmaPairOn is rdmaPairParams on another image built on the RDMA one.
func rdmaPairOn(t *testing.T, v images.Variant, name string, a, b testbed.RDMAKind, pcap, params string) *testbed.RDMAPair {
	t.Helper()
	return rdmaPairWith(t, testbed.RDMAPairConfig{A: a, B: b, Name: name, Variant: v, Pcap: pcap, NPFNICParams: params})
}

// rdmaPairWith boots the pair c describes, with the test's images, logs
// and ACK timeout floor.
func rdmaPairWith(t *testing.T, c testbed.RDMAPairConfig) *testbed.RDMAPair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c.Images, c.LogDir, c.Progress, c.MinAckTimeout = needImages(t), logDir(t, c.Name), t.Logf, vmTestMinAckTimeout
	p, err := testbed.StartRDMAPair(ctx, c)
	if err != nil {
		t.Fatalf("RDMA pair %s-%s: %v", c.A, c.B, err)
	}
	t.Cleanup(p.Close)
	return p
}

// pingpong runs ibv_rc_pingpong with -c (each side checks every buffer it
// receives) between server and client; ODP applies to npfnic's side.
func pingpong(t *testing.T, p *testbed.RDMAPair, server, client *testbed.RDMAGuest, pp workload.Pingpong) workload.PingpongResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pp.Validate = true
	_, out, err := p.RunClientServer(ctx, server, client, func(g *testbed.RDMAGuest, ip string) []string {
		q := pp
		q.ODP = pp.ODP && g.Kind == testbed.RDMANPFNIC // rxe has no ODP
		return q.Args(g.Dev, g.GIDIndex, ip)
	})
	prog := cmp.Or(pp.Program, "ibv_rc_pingpong")
	if err != nil {
		t.Fatalf("%s -s %d, %s server, %s client: %v", prog, pp.Size, server.Kind, client.Kind, err)
	}
	r, err := workload.ParsePingpong(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Iters != pp.Iters || r.Bytes != int64(pp.Size)*int64(pp.Iters)*2 {
		t.Fatalf("%s -s %d -n %d: %+v", prog, pp.Size, pp.Iters, r)
	}
	t.Logf("%s -s %d (events %v, %s server, %s client): %.0f usec/iter", prog, pp.Size, pp.Events, server.Kind, client.Kind, r.UsecPerIter)
	return r
}

// perftest runs one perftest program between server and client and
// checks every row: each size ran its iterations and moved data (or
// measured a latency).
func perftest(t *testing.T, p *testbed.RDMAPair, server, client *testbed.RDMAGuest, pt workload.Perftest) []workload.PerftestRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pt.Port = 18600
	res, err := p.Perftest(ctx, server, client, testbed.PerftestRun{Perftest: pt, Logf: t.Logf})
	if err != nil {
		t.Fatalf("%s, %s server, %s client: %v", pt.Tool, server.Kind, client.Kind, err)
	}
	rows := res.Rows
	if pt.All && len(rows) < 20 {
		t.Fatalf("%s -a: %d sizes", pt.Tool, len(rows))
	}
	for _, r := range rows {
		ok := r.Iters == pt.Iters && (r.AvgMBs > 0 || r.MsgRateMpps > 0) // 2 bytes round to 0.00 MB/s
		if r.Latency != nil {
			ok = r.Iters == pt.Iters && r.Latency.Typical > 0 && r.Latency.Min <= r.Latency.Typical
		}
		if !ok {
			t.Fatalf("%s, %s server, %s client: row %+v", pt.Tool, server.Kind, client.Kind, r)
		}
	}
	t.Logf("%s (%s server, %s client): %d sizes, last %+v", pt.Tool, server.Kind, client.Kind, len(rows), rows[len(rows)-1])
	return rows
}

// rdmaStatistic reads the device's counters (rdma statistic) of g's port.
func rdmaStatistic(t *testing.T, g *testbed.RDMAGuest) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := g.Statistic(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// rxeStats reads rdma_rxe's hardware counters (rdma statistic): the
// receiver's own view of the RC traffic npfnic sent it.
func rxeStats(t *testing.T, g *testbed.RDMAGuest) map[string]int64 {
	t.Helper()
	st := rdmaStatistic(t, g)
	if _, ok := st["rcvd_seq_err"]; !ok {
		t.Fatalf("rxe's rdma statistic without rcvd_seq_err: %v", st)
	}
	return st
}

// TestRDMAInteropWithRxe: npfnic and rdma_rxe, booted once for two parts.
// verbs (rdmaVerbsWithRxe); rdma_cm (rdmaCMWithRxe): kernel verbs,
// rdma_cm's programs, perftest -R, NVMe over Fabrics, iSER with npfnic as
// the initiator (iserRound) and a reload of the driver under rdma_cm. make vmtest-full records npfnic's port, and
// tshark decodes every frame, the CM MADs among them (checkCMCapture).
func TestRDMAInteropWithRxe(t *testing.T) {
	pcap := ""
	if fullVMTests() {
		pcap = filepath.Join(logDir(t, "capture"), "rdma-rxe.pcap")
	}
	p := rdmaPair(t, "rdma-rxe", testbed.RDMANPFNIC, testbed.RDMARxe, pcap)
	t.Run("verbs", func(t *testing.T) { rdmaVerbsWithRxe(t, p) })
	conns := 0
	t.Run("rdma_cm", func(t *testing.T) { conns = rdmaCMWithRxe(t, p) })
	if pcap != "" {
		p.Close() // the device closes its port, which completes the capture
		if conns > 0 {
			checkCMCapture(t, pcap, conns, 2)
		} else {
			openRoCEPcap(t, pcap).checkDecoded(1000)
		}
	}
}

// rdmaVerbsWithRxe: npfnic and rdma_rxe, each as server and as
// client: ibv_rc_pingpong with buffer validation at 1 byte, 4 KiB and
// 64 KiB; ibv_srq_pingpong (eight QPs sharing an SRQ); ibv_ud_pingpong
// and ibv_uc_pingpong, validated;
// perftest's WRITE bandwidth at every size, SEND and READ at 64 KiB, and
// SEND latency; atomics each way (ib_atomic_bw: rxe's requests on npfnic's
// responder, npfnic's on rxe's). rxe's own counters show no sequence
// error and no exhausted retry caused by npfnic's packets. Then npfnic's
// side is killed
// mid-transfer (killMidTransfer).
func rdmaVerbsWithRxe(t *testing.T, p *testbed.RDMAPair) {
	npf, rxe := p.A, p.B
	before := rxeStats(t, rxe)
	for _, size := range []int{1, 4096, 65536} {
		pingpong(t, p, npf, rxe, workload.Pingpong{Size: size, Iters: 50})
	}
	pingpong(t, p, rxe, npf, workload.Pingpong{Size: 4096, Iters: 50, Events: true})
	// Shared receive queues: eight QPs on each side take from one SRQ.
	pingpong(t, p, npf, rxe, workload.Pingpong{Program: "ibv_srq_pingpong", QPs: 8, Size: 4096, Iters: 50})
	pingpong(t, p, rxe, npf, workload.Pingpong{Program: "ibv_srq_pingpong", QPs: 8, Size: 1024, Iters: 50})
	// UD (address handles, Q_Keys, the GRH area) and UC, each way.
	pingpong(t, p, npf, rxe, workload.Pingpong{Program: "ibv_ud_pingpong", Size: 1024, Iters: 50, Validate: true})
	pingpong(t, p, rxe, npf, workload.Pingpong{Program: "ibv_ud_pingpong", Size: 512, Iters: 50, Validate: true})
	pingpong(t, p, npf, rxe, workload.Pingpong{Program: "ibv_uc_pingpong", Size: 4096, Iters: 50, Validate: true})
	pingpong(t, p, rxe, npf, workload.Pingpong{Program: "ibv_uc_pingpong", Size: 65536, Iters: 20, Validate: true})
	// Every size (-a) once, for segmentation; the other two at 64 KiB.
	perftest(t, p, npf, rxe, workload.Perftest{Tool: "ib_write_bw", All: true, Iters: 5})
	for _, tool := range []string{"ib_send_bw", "ib_read_bw"} {
		perftest(t, p, npf, rxe, workload.Perftest{Tool: tool, Size: 65536, Iters: 20})
	}
	perftest(t, p, rxe, npf, workload.Perftest{Tool: "ib_write_bw", Size: 65536, Iters: 50})
	perftest(t, p, npf, rxe, workload.Perftest{Tool: "ib_send_lat", Size: 64, Iters: 100})
	// Atomics both ways: npfnic's responder under rxe's requests, then
	// npfnic's requester against rxe's responder.
	perftest(t, p, npf, rxe, workload.Perftest{Tool: "ib_atomic_bw", Iters: 500, Extra: []string{"-A", "CMP_AND_SWAP"}})
	perftest(t, p, rxe, npf, workload.Perftest{Tool: "ib_atomic_bw", Iters: 500, Extra: []string{"-A", "FETCH_AND_ADD"}})
	after := rxeStats(t, rxe)
	for _, k := range []string{"rcvd_seq_err", "retry_exceeded_err", "retry_rnr_exceeded_err"} {
		if d := after[k] - before[k]; d != 0 {
			t.Errorf("rxe's %s grew by %d during the run", k, d)
		}
	}
	// completer_retry_err counts every retry rxe started, a retransmit
	// timeout's too, and duplicate_request npfnic's retransmissions: two
	// TCG guests on a loaded host stall past the 67 ms transport timeout
	// (14, as ibv_rc_pingpong and perftest set it) now and then, mostly
	// with polling programs; they are no protocol error.
	t.Logf("rxe retried %d times, saw %d duplicate requests", after["completer_retry_err"]-before["completer_retry_err"],
		after["duplicate_request"]-before["duplicate_request"])
	if after["rcvd_pkts"] == before["rcvd_pkts"] {
		t.Errorf("rxe counted no received packets: %v", after)
	}
	killMidTransfer(t, p, npf, rxe, false)
}

// TestRDMABetweenNPFNICs: two npfnics, booted once for two parts. verbs:
// ibv_rc_pingpong, ibv_ud_pingpong and ibv_uc_pingpong with validation,
// perftest SEND and READ at every size and WRITE at 64 KiB, SEND and
// atomic latency. rdma_cm (rdmaCMBetweenNPFNICs): the MADs and the data
// of rdma_cm's programs, perftest -R and NVMe over Fabrics, all on the
// devices. The first device's port is recorded, and tshark decodes every
// frame of it as RoCEv2 without a malformed-packet or error-level expert
// warning, the CM MADs among them (checkCMCapture).
func TestRDMABetweenNPFNICs(t *testing.T) {
	// The capture stays with the VM logs when the test fails.
	pcap := filepath.Join(logDir(t, "capture"), "rdma.pcap")
	// The MPI image: the RDMA image and Open MPI, for the mpi subtest.
	p := rdmaPairOn(t, images.VariantMPI, "rdma-npfnic", testbed.RDMANPFNIC, testbed.RDMANPFNIC, pcap, "")
	t.Run("verbs", func(t *testing.T) {
		for _, size := range []int{1, 4096, 65536} {
			pingpong(t, p, p.A, p.B, workload.Pingpong{Size: size, Iters: 50})
		}
		pingpong(t, p, p.A, p.B, workload.Pingpong{Program: "ibv_ud_pingpong", Size: 1024, Iters: 50, Validate: true})
		pingpong(t, p, p.A, p.B, workload.Pingpong{Program: "ibv_uc_pingpong", Size: 8192, Iters: 50, Validate: true})
		// Every size (-a) for SEND and READ here, WRITE's against rxe.
		for _, tool := range []string{"ib_send_bw", "ib_read_bw"} {
			perftest(t, p, p.A, p.B, workload.Perftest{Tool: tool, All: true, Iters: 5})
		}
		perftest(t, p, p.A, p.B, workload.Perftest{Tool: "ib_write_bw", Size: 65536, Iters: 20})
		perftest(t, p, p.A, p.B, workload.Perftest{Tool: "ib_send_lat", Size: 64, Iters: 100})
		perftest(t, p, p.A, p.B, workload.Perftest{Tool: "ib_atomic_lat", Iters: 200, Extra: []string{"-A", "FETCH_AND_ADD"}})
		// Both peers hostile at once: B's user space writes garbage into
		// its rings against A, which serves live traffic meanwhile. The
		// same cases run in make test against rdma_rxe
		// (TestRDMAHostileUserSpace); this repeat, the longest part of the
		// test, in make vmtest-full.
		if fullVMTests() {
			hostileBesideLiveTraffic(t, p, p.B, p.A)
		}
	})
	t.Run("mpi", func(t *testing.T) { mpiBetween(t, p) })
	t.Run("overcommit", func(t *testing.T) { overcommitBetween(t, p) })
	conns := 0
	t.Run("rdma_cm", func(t *testing.T) { conns = rdmaCMBetweenNPFNICs(t, p) })
	p.Close() // the device closes its port, which completes the capture
	if conns > 0 {
		checkCMCapture(t, pcap, conns, 2)
	} else {
		openRoCEPcap(t, pcap).checkDecoded(1000)
	}
}

// killMidTransfer kills the npfnic side's perftest (SIGKILL) while the
// device writes into its memory region: as the target of rxe's RDMA
// WRITEs, as the receiver of its SENDs, and as the reader whose READ
// responses land in its region. The kernel then destroys the process's
// QPs and deregisters its MRs, unpinning their pages (odp: dropping the
// translations of pages it never pinned, while faults may be in flight);
// the device must not write into them afterwards, which its late-DMA
// detector (LATE_DMA, ethtool's late_dma) counts: it stays 0. The
// process's objects all go, the guest's log stays clean, and a new
// program's transfer with buffer validation works afterwards.
func killMidTransfer(t *testing.T, p *testbed.RDMAPair, npf, rxe *testbed.RDMAGuest, odp bool) {
	if t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lateDMA := func() string {
		t.Helper()
		out, err := npf.Shell(ctx, "ethtool -S "+npf.IfName)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`late_dma: (\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ethtool -S %s has no late_dma:\n%s", npf.IfName, out)
		}
		return m[1]
	}
	for i, c := range []struct {
		tool           string
		server, client *testbed.RDMAGuest
	}{
		{"ib_write_bw", npf, rxe},
		{"ib_send_bw", npf, rxe},
		{"ib_read_bw", rxe, npf},
	} {
		// Long enough that the kill comes mid-transfer (a few hundred
		// messages a second under TCG).
		pt := workload.Perftest{Tool: c.tool, Size: 65536, Iters: 100000, Port: 18700 + i}
		if odp {
			pt.Port += 10
		}
		before := rxeStats(t, rxe)
		done := make(chan error, 1)
		go func() {
			run := testbed.PerftestRun{Perftest: pt, Logf: t.Logf}
			if odp {
				run.Side = testbed.ODPOnNPFNIC
			}
			_, err := p.Perftest(ctx, c.server, c.client, run)
			done <- err
		}()
		// The transfer runs: rxe moved 1000 packets of it.
		for deadline := time.Now().Add(90 * time.Second); ; {
			st := rxeStats(t, rxe)
			if st["sent_pkts"]+st["rcvd_pkts"]-before["sent_pkts"]-before["rcvd_pkts"] > 1000 {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("%s ended before it was killed: %v", c.tool, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s moved no data within 90 s: %v", c.tool, st)
			}
			time.Sleep(200 * time.Millisecond)
		}
		st := rxeStats(t, rxe)
		t.Logf("%s: rxe sent %d and received %d packets before the kill", c.tool,
			st["sent_pkts"]-before["sent_pkts"], st["rcvd_pkts"]-before["rcvd_pkts"])
		killAll(t, npf, c.tool)
		// The process's objects go with it; the device confirmed each
		// DESTROY_QP and DEREG_MR before the pages went back.
		for deadline := time.Now().Add(30 * time.Second); ; {
			res, err := npf.Shell(ctx, "rdma resource show qp; rdma resource show mr")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res, c.tool) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's objects outlived it by 30 s:\n%s", c.tool, res)
			}
			time.Sleep(time.Second)
		}
		if late := lateDMA(); late != "0" {
			t.Fatalf("%s killed mid-transfer: the device wrote %s times into memory taken back (late_dma)", c.tool, late)
		}
		// rxe's requester retries without end (perftest's retry_cnt 7 is
		// "infinite" to rxe): its side goes by hand.
		killAll(t, rxe, c.tool)
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("%s completed although its npfnic side was killed", c.tool)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: the run did not end within a minute of the kills", c.tool)
		}
		t.Logf("%s (%s server, odp %v) killed mid-transfer: objects released, late_dma 0", c.tool, c.server.Kind, odp)
	}
	dmesg, err := npf.Shell(ctx, "dmesg")
	if err != nil {
		t.Fatal(err)
	}
	if badKernelLog.MatchString(dmesg) {
		t.Fatalf("the npfnic guest's kernel log after the kills:\n%s", lastLines(dmesg, 60))
	}
	pingpong(t, p, npf, rxe, workload.Pingpong{Size: 4096, Iters: 20, ODP: odp})
}

// killAll sends SIGKILL to every process of g named comm.
func killAll(t *testing.T, g *testbed.RDMAGuest, comm string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := g.VM.Signal(ctx, comm, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s on %s: %v", comm, g.Kind, err)
	}
}
