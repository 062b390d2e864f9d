package ci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// VM tests of rdma_cm on npfnic: the kernel's MAD layer runs its GSI QP
// (QP 1) on the device through the driver's kernel verbs, ib_cm sends and
// receives its MADs through it, and unmodified librdmacm programs connect
// over it: rdmacm-utils' rping (RC: SENDs, and RDMA READ and WRITE of the
// ping buffers), ucmatose (RC SENDs) and udaddy (UD, the peer's QPN and
// Q_Key resolved by SIDR), and perftest with -R.

// cmSide builds one side's command line: server is the server's address
// on the client, "" on the server.
type cmSide func(g *testbed.RDMAGuest, server string) []string

// rping: count pings of size bytes, each printed (-v) and checked (-V)
// by both sides.
func rping(count, size int) cmSide {
	return func(g *testbed.RDMAGuest, server string) []string {
		a := []string{"rping", "-C", strconv.Itoa(count), "-S", strconv.Itoa(size), "-v", "-V", "-p", "7174"}
		if server == "" {
			return append(a, "-s", "-a", g.IP)
		}
		return append(a, "-c", "-a", server)
	}
}

// cmatose is ucmatose (RC) or udaddy (UD): conns connections exchanging
// count messages of size bytes, bound to the side's own address.
func cmatose(prog string, conns, count, size int) cmSide {
	return func(g *testbed.RDMAGuest, server string) []string {
		a := []string{prog, "-b", g.IP, "-c", strconv.Itoa(conns), "-C", strconv.Itoa(count), "-S", strconv.Itoa(size)}
		if server != "" {
			a = append(a, "-s", server)
		}
		return a
	}
}

// cmListening reports whether g has an rdma_cm ID of comm listening, with
// what rdma resource showed.
func cmListening(ctx context.Context, g *testbed.RDMAGuest, comm string) (bool, string) {
	res, err := g.Shell(ctx, "rdma resource show cm_id")
	if err != nil {
		return false, err.Error()
	}
	for _, l := range strings.Split(res, "\n") {
		if strings.Contains(l, "state LISTEN") && strings.Contains(l, "comm "+comm) {
			return true, res
		}
	}
	return false, res
}

// cmRun runs side on server, then on client once the server's rdma_cm ID
// listens (rdma_cm has no out-of-band channel a client could retry
// against); both must exit 0 within 90 s. It returns both outputs; an
// error names what failed and carries both.
func cmRun(server, client *testbed.RDMAGuest, side cmSide) (serverOut, clientOut string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const limit = 90 * time.Second
	sargs, cargs := side(server, ""), side(client, server.IP)
	name := sargs[0]
	type result struct {
		out      string
		exit     int
		timedOut bool
		err      error
	}
	done := make(chan result, 1)
	go func() {
		r, err := server.VM.ExecWithin(ctx, limit, sargs...)
		done <- result{r.Stdout + r.Stderr, r.Exit, r.TimedOut, err}
	}()
	for deadline := time.Now().Add(45 * time.Second); ; {
		ok, res := cmListening(ctx, server, name)
		if ok {
			break
		}
		select {
		case s := <-done:
			return s.out, "", fmt.Errorf("%s server (%s) exited before it listened: exit %d, %v:\n%s", name, server.Kind, s.exit, s.err, s.out)
		default:
		}
		if time.Now().After(deadline) {
			_, _ = server.Signal(ctx, int(syscall.SIGKILL), name)
			s := <-done
			return s.out, "", fmt.Errorf("%s server (%s) not listening after 45 s:\n%s\nits output:\n%s", name, server.Kind, res, s.out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cr, err := client.VM.ExecWithin(ctx, limit, cargs...)
	if err != nil {
		_, _ = server.Signal(ctx, int(syscall.SIGKILL), name)
		<-done
		return "", "", fmt.Errorf("%s client (%s): %w", name, client.Kind, err)
	}
	clientOut = cr.Stdout + cr.Stderr
	// A server that serves until killed (cmDaemons) goes once its client is done.
	if cmDaemons[name] && cr.Exit == 0 && !cr.TimedOut {
		_, _ = server.Signal(ctx, int(syscall.SIGKILL), name)
		s := <-done
		return s.out, clientOut, nil
	}
	// A server outlives a client that failed only waiting for it.
	wait := 30 * time.Second
	if cr.Exit != 0 || cr.TimedOut {
		wait = 5 * time.Second
	}
	var s result
	select {
	case s = <-done:
	case <-time.After(wait):
		_, _ = server.Signal(ctx, int(syscall.SIGKILL), name)
		s = <-done
		return s.out, clientOut, fmt.Errorf("%s server (%s) still running %v after its client (exit %d), killed:\n%s\nclient:\n%s",
			name, server.Kind, wait, cr.Exit, s.out, clientOut)
	}
	serverOut = s.out
	if s.err != nil || s.exit != 0 || s.timedOut || cr.Exit != 0 || cr.TimedOut {
		return serverOut, clientOut, fmt.Errorf("%s, %s server, %s client: server exit %d (%v, timed out %v), client exit %d (timed out %v)\n  server: %s\n%s\n  client: %s\n%s",
			name, server.Kind, client.Kind, s.exit, s.err, s.timedOut, cr.Exit, cr.TimedOut,
			strings.Join(sargs, " "), serverOut, strings.Join(cargs, " "), clientOut)
	}
	return serverOut, clientOut, nil
}

// cmTool runs an rdmacm-utils program between server and client and checks
// what both sides report: rping's pings each printed and checked, and
// ucmatose's and udaddy's "test complete".
func cmTool(t *testing.T, server, client *testbed.RDMAGuest, side cmSide) {
	t.Helper()
	start := time.Now()
	so, co, err := cmRun(server, client, side)
	if err != nil {
		t.Fatal(err)
	}
	args := side(client, server.IP)
	for who, out := range map[string]string{"server": so, "client": co} {
		switch args[0] {
		case "rping":
			// -v prints every ping a side received, -V fails on a mismatch.
			if n := strconv.Itoa(strings.Count(out, "ping data: rdma-ping-")); n != args[2] || strings.Contains(out, "mismatch") {
				t.Fatalf("%s, %s server, %s client: the %s printed %s pings, want %s:\n%s", strings.Join(args, " "), server.Kind, client.Kind, who, n, args[2], out)
			}
		default:
			if !strings.Contains(out, "test complete") || !strings.Contains(out, "return status 0") {
				t.Fatalf("%s, %s server, %s client: the %s did not complete:\n%s", strings.Join(args, " "), server.Kind, client.Kind, who, out)
			}
		}
	}
	t.Logf("%s (%s server, %s client): ok in %.1fs", strings.Join(args, " "), server.Kind, client.Kind, time.Since(start).Seconds())
}

// cmPerftest runs perftest connected by rdma_cm (-R) between server and
// client and checks every row; a run whose only failure was perftest's
// clock calibration in a stalled TCG guest runs again.
func cmPerftest(t *testing.T, server, client *testbed.RDMAGuest, pt workload.Perftest) {
	t.Helper()
	pt.Extra = append(pt.Extra, "-R")
	for attempt := 1; ; attempt++ {
		start := time.Now()
		_, out, err := cmRun(server, client, func(g *testbed.RDMAGuest, srv string) []string { return pt.Args(g.Dev, g.GIDIndex, srv) })
		if err != nil && workload.PerftestClockFailed(err.Error()) && attempt < testbed.PerftestAttempts {
			t.Logf("%s -R: perftest could not calibrate its clock; again", pt.Tool)
			continue
		}
		// perftest -R connects twice: once for its own exchange, which
		// cmRun waits to listen, then the test's QP, which the client
		// connects as soon as the exchange is done. A stalled server
		// guest may not listen for that yet: its CM rejects the REQ
		// (reason 8, no such service), and Debian's perftest client,
		// meaning to retry, crashes instead (exit 139) while the server
		// waits on. Both are perftest's; the run goes again.
		if err != nil && strings.Contains(err.Error(), "RDMA_CM_EVENT_REJECTED; error: 8.") && attempt < testbed.PerftestAttempts {
			t.Logf("%s -R: the server was not listening for the test's connection yet (REJ, no such service); again", pt.Tool)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		rows, err := workload.ParsePerftest(out)
		if err != nil {
			t.Fatalf("%s -R, %s server, %s client: %v\n%s", pt.Tool, server.Kind, client.Kind, err, out)
		}
		for _, r := range rows {
			ok := r.Iters == pt.Iters && r.AvgMBs > 0
			if r.Latency != nil {
				ok = r.Iters == pt.Iters && r.Latency.Typical > 0 && r.Latency.Min <= r.Latency.Typical
			}
			if !ok {
				t.Fatalf("%s -R, %s server, %s client: row %+v", pt.Tool, server.Kind, client.Kind, r)
			}
		}
		last := rows[len(rows)-1]
		got := fmt.Sprintf("%.2f MB/s", last.AvgMBs)
		if last.Latency != nil {
			got = fmt.Sprintf("%.1f µs typical", last.Latency.Typical)
		}
		run := append([]string{pt.Tool}, pt.Extra...)
		if pt.Size > 0 {
			run = append(run, "-s", strconv.Itoa(pt.Size))
		}
		t.Logf("%s -n %d (%s server, %s client): %s, ok in %.1fs", strings.Join(run, " "), pt.Iters,
			server.Kind, client.Kind, got, time.Since(start).Seconds())
		return
	}
}

// cmPerftestFull are the -R rows make vmtest-full adds, each way: READ
// bandwidth, the three latency tests and both atomics (make test runs SEND
// and WRITE bandwidth, and ib_read_lat one way).
var cmPerftestFull = []workload.Perftest{
	{Tool: "ib_read_bw", Size: 65536, Iters: 100},
	{Tool: "ib_send_lat", Size: 64, Iters: 100},
	{Tool: "ib_write_lat", Size: 64, Iters: 100},
	{Tool: "ib_read_lat", Size: 64, Iters: 100},
	{Tool: "ib_atomic_bw", Iters: 100, Extra: []string{"-A", "CMP_AND_SWAP"}},
	{Tool: "ib_atomic_lat", Iters: 100, Extra: []string{"-A", "FETCH_AND_ADD"}},
}

// checkCMCapture decodes a capture of rdma_cm traffic (checkDecoded) and
// checks its communication management MADs, all UD SENDs to QP 1: at least
// conns REQs, REPs and RTUs (the connections the test made), sidr SIDR
// REQs and REPs (udaddy's), and a DREQ and a DREP.
func checkCMCapture(t *testing.T, pcap string, conns, sidr int) {
	t.Helper()
	r := openRoCEPcap(t, pcap)
	r.checkDecoded(1000)
	n := r.cmMADs()
	var got []string
	for _, a := range cmAttributes {
		got = append(got, fmt.Sprintf("%s %d", a.name, n[a.name]))
	}
	t.Logf("pcap: CM MADs: %s", strings.Join(got, ", "))
	for name, want := range map[string]int{"REQ": conns, "REP": conns, "RTU": conns, "SIDR_REQ": sidr, "SIDR_REP": sidr, "DREQ": 1, "DREP": 1} {
		if n[name] < want {
			t.Errorf("pcap: %d %s MADs, want at least %d", n[name], name, want)
		}
	}
}

// gsiUp checks that the MAD layer opened npfnic's port: its GSI QP is QP 1
// in RTS, and the kernel did not log ib_mad's failure to.
func gsiUp(t *testing.T, g *testbed.RDMAGuest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := g.Shell(ctx, "rdma resource show qp")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res, "lqpn 1 type GSI state RTS") {
		t.Fatalf("no GSI QP 1 in RTS on %s:\n%s", g.Dev, res)
	}
	npfnicLogClean(t, g)
}

// npfnicLogClean checks an npfnic guest's kernel log: no "Couldn't create
// ib_mad ..." and no warning, oops or leak.
func npfnicLogClean(t *testing.T, g *testbed.RDMAGuest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dmesg, err := g.Shell(ctx, "dmesg")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dmesg, "Couldn't create ib_mad") || strings.Contains(dmesg, "Couldn't open port") {
		t.Fatalf("ib_mad did not open %s's port:\n%s", g.Dev, lastLines(dmesg, 40))
	}
	if m := badKernelLog.FindString(dmesg); m != "" {
		t.Fatalf("the npfnic guest's kernel log has %q:\n%s", m, lastLines(dmesg, 60))
	}
}

// kernelVerbs builds kverbsTestSource against the guest kernel's headers,
// loads it in g, whose module then runs every check on g's device, and
// checks its report: every check passed, and the kernel logged no warning.
// It covers what the rdma_cm programs leave to user space: the kernel's
// RC, UC and UD work requests of every opcode the device runs, inline
// sends, a full send queue, kernel SRQs, CQ events and ib_drain_qp.
func kernelVerbs(t *testing.T, g *testbed.RDMAGuest) {
	t.Helper()
	ko := kverbsModule(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := g.VM.Put(ctx, "/tmp/kverbs_test.ko", ko, 0o644); err != nil {
		t.Fatal(err)
	}
	// The module runs its checks in its init, which no signal ends: a
	// module that hangs is reported with what it printed so far. Each of
	// its waits gives up after 10 s.
	done := make(chan vm.Result, 1)
	go func() {
		r, err := g.VM.Exec(ctx, "insmod", "/tmp/kverbs_test.ko", "dev="+g.Dev)
		if err != nil {
			r = vm.Result{Exit: -1, Stderr: err.Error()}
		}
		done <- r
	}()
	var r vm.Result
	select {
	case r = <-done:
	case <-time.After(90 * time.Second):
		r = vm.Result{Exit: -1, Stderr: "still running after 90 s"}
	}
	dmesg, derr := g.Shell(ctx, "dmesg")
	if derr != nil {
		t.Fatal(derr)
	}
	var report []string
	for _, l := range strings.Split(dmesg, "\n") {
		if strings.Contains(l, "kverbs_test: ") {
			report = append(report, l)
		}
	}
	passed := regexp.MustCompile(`kverbs_test: (\d+) of (\d+) checks passed`).FindStringSubmatch(dmesg)
	if r.Exit != 0 || passed == nil || passed[1] != passed[2] || strings.Contains(dmesg, "kverbs_test: FAIL") {
		t.Fatalf("kernel verbs on %s: insmod exit %d %s%s\n%s\n\nthe kernel's log:\n%s",
			g.Dev, r.Exit, r.Stdout, r.Stderr, strings.Join(report, "\n"), lastLines(dmesg, 30))
	}
	if _, err := g.Shell(ctx, "rmmod kverbs_test"); err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel verbs on %s: %s of %s checks passed", g.Dev, passed[1], passed[2])
	npfnicLogClean(t, g)
}

// rdmaCMWithRxe (the rdma_cm part of TestRDMAInteropWithRxe, on its pair):
// first the kernel verbs on npfnic (kernelVerbs); then rdma_cm between
// npfnic and rdma_rxe, each as server and as client:
// rping with every ping checked, ucmatose (RC) and udaddy (UD), the
// other programs of rdmacm-utils (cmUtilsWithRxe), ib_send_bw -R and
// ib_write_bw -R at two sizes, and ib_read_lat -R with npfnic serving
// (make vmtest-full: cmPerftestFull each way), NVMe over Fabrics with
// npfnic as target and as host, and iSER with npfnic's ib_iser as the
// initiator of rdma_rxe's tgt (iserRound). Then npfnic.ko is
// unloaded with ib_mad, ib_cm, rdma_cm and rdma_ucm attached to its
// device (their QP 1, CQ, PD and DMA MR destroyed through the driver) and
// loaded again, and rping connects once more; the npfnic guest's kernel
// log stays clean throughout. It returns the rdma_cm connections it made,
// which a capture's MADs must show.
func rdmaCMWithRxe(t *testing.T, p *testbed.RDMAPair) int {
	npf, rxe := p.A, p.B
	conns := 0 // rdma_cm connections made, each a REQ, a REP and an RTU
	gsiUp(t, npf)
	kernelVerbs(t, npf)
	for _, sc := range [][2]*testbed.RDMAGuest{{npf, rxe}, {rxe, npf}} {
		server, client := sc[0], sc[1]
		cmTool(t, server, client, rping(10, 64))
		cmTool(t, server, client, cmatose("ucmatose", 1, 10, 1024))
		cmTool(t, server, client, cmatose("udaddy", 1, 10, 512))
		conns += 2
	}
	cmTool(t, npf, rxe, rping(10, 4096))
	conns++
	conns += cmUtilsWithRxe(t, npf, rxe) // rdma_server, rsockets, cmtime, XRC
	for _, sc := range [][2]*testbed.RDMAGuest{{npf, rxe}, {rxe, npf}} {
		for _, size := range []int{64, 65536} {
			cmPerftest(t, sc[0], sc[1], workload.Perftest{Tool: "ib_send_bw", Size: size, Iters: 100})
			cmPerftest(t, sc[0], sc[1], workload.Perftest{Tool: "ib_write_bw", Size: size, Iters: 100})
			conns += 2
		}
	}
	// READs to npfnic's responder on a QP rdma_cm connected; the rest of
	// the -R matrix in make vmtest-full.
	cmPerftest(t, npf, rxe, workload.Perftest{Tool: "ib_read_lat", Size: 64, Iters: 100})
	conns++
	if fullVMTests() {
		for _, sc := range [][2]*testbed.RDMAGuest{{npf, rxe}, {rxe, npf}} {
			for _, pt := range cmPerftestFull {
				cmPerftest(t, sc[0], sc[1], pt)
				conns++
			}
		}
	}
	// NVMe over Fabrics (nvmeofRound): npfnic as target, then as host.
	nvmeofRound(t, npf, rxe)
	nvmeofRound(t, rxe, npf)
	// iSER (iserRound), the second kernel ULP, with npfnic's ib_iser as
	// the initiator (the other pairings in TestRDMAISER).
	iserRound(t, rxe, npf)
	npfnicLogClean(t, npf)

	// rmmod with the rdma_cm stack on the device: ib_unregister_device
	// takes the MAD layer's objects down through the driver's destroy
	// paths; the reload brings QP 1 back and rping connects again.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	took, err := p.ReloadDriver(ctx, npf)
	if err != nil {
		t.Fatalf("reload npfnic.ko with rdma_cm attached: %v", err)
	}
	t.Logf("rmmod npfnic with ib_mad, ib_cm and rdma_ucm attached took %v", took.Round(time.Millisecond))
	gsiUp(t, npf)
	cmTool(t, rxe, npf, rping(10, 64))
	conns++
	npfnicLogClean(t, npf)
	return conns
}

// rdmaCMBetweenNPFNICs: rdma_cm between two npfnics (a part of
// TestRDMABetweenNPFNICs, on its pair), whose MADs and data both run on
// the devices: rping each way, ucmatose and udaddy, and ib_write_bw -R
// (make vmtest-full: SEND and WRITE bandwidth and cmPerftestFull, each
// way, and cmUtilsMatrix), and NVMe over Fabrics. It returns the
// connections it made, which the capture's MADs must show: their REQ, REP
// and RTU, udaddy's SIDR REQ and REP, the DREQs and DREPs.
func rdmaCMBetweenNPFNICs(t *testing.T, p *testbed.RDMAPair) int {
	gsiUp(t, p.A)
	gsiUp(t, p.B)
	cmTool(t, p.A, p.B, rping(10, 64))
	cmTool(t, p.B, p.A, rping(10, 4096))
	cmTool(t, p.A, p.B, cmatose("ucmatose", 2, 10, 1024))
	cmTool(t, p.B, p.A, cmatose("udaddy", 2, 10, 512))
	cmPerftest(t, p.A, p.B, workload.Perftest{Tool: "ib_write_bw", Size: 65536, Iters: 100})
	conns := 5
	if fullVMTests() {
		cmPerftest(t, p.B, p.A, workload.Perftest{Tool: "ib_write_bw", Size: 65536, Iters: 100})
		conns++
		for _, sc := range [][2]*testbed.RDMAGuest{{p.A, p.B}, {p.B, p.A}} {
			for _, pt := range append([]workload.Perftest{{Tool: "ib_send_bw", Size: 65536, Iters: 100}}, cmPerftestFull...) {
				cmPerftest(t, sc[0], sc[1], pt)
				conns++
			}
		}
		conns += cmUtilsMatrix(t, p.A, p.B) // rdma_server, rsockets, cmtime, XRC
	}
	// NVMe over Fabrics (nvmeofRound) with npfnic on both sides.
	nvmeofRound(t, p.A, p.B)
	npfnicLogClean(t, p.A)
	npfnicLogClean(t, p.B)
	return conns
}

// kverbsModule returns kverbs_test.ko built against the guest kernel's
// headers, from the image cache when the same source was built for the
// same headers before (a build takes 20 s of the test otherwise).
func kverbsModule(t *testing.T) []byte {
	t.Helper()
	imgs := needImages(t)
	sum := sha256.Sum256([]byte(imgs.Kernel.Headers + "\x00" + kverbsTestSource))
	cached := filepath.Join(imgs.CacheDir, "kverbs", hex.EncodeToString(sum[:8]), "kverbs_test.ko")
	if ko, err := os.ReadFile(cached); err == nil {
		return ko
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kverbs_test.c"), []byte(kverbsTestSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Kbuild"), []byte("obj-m := kverbs_test.o\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("make", "-C", imgs.Kernel.Headers, "M="+dir, "modules").CombinedOutput(); err != nil {
		t.Fatalf("build kverbs_test.ko: %v\n%s", err, out)
	}
	ko, err := os.ReadFile(filepath.Join(dir, "kverbs_test.ko"))
	if err != nil {
		t.Fatal(err)
	}
	// Written whole, then renamed: a concurrent reader finds all or nothing.
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err == nil {
		tmp := cached + ".tmp"
		if os.WriteFile(tmp, ko, 0o644) == nil {
			_ = os.Rename(tmp, cached)
		}
	}
	return ko
}

// kverbsTestSource is kverbs_test.ko, a kernel consumer of one RDMA
// device's verbs (kernelVerbs).
const kverbsTestSource = `// SPDX-License-Identifier: GPL-2.0
/*
 * kverbs_test: the kernel verbs of one RDMA device, used as a kernel
 * consumer uses them, between QPs of the device itself (its loopback).
 * Loading it runs every check and logs "kverbs_test: ok ..." or
 * "kverbs_test: FAIL ..." for each; it loads only if all passed.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/completion.h>
#include <net/ipv6.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_cache.h>

static char *dev = "npfnic0";
module_param(dev, charp, 0444);

#define KV_BUF		16384
#define KV_QKEY		0x11110000
#define KV_PSN		0x100

struct kv_wr {
	struct ib_cqe cqe;
	struct completion done;
	struct ib_wc wc;
};

struct kv {
	struct ib_device *ib;
	struct ib_pd *pd;
	struct ib_cq *scq, *rcq;
	const struct ib_gid_attr *gid;
	u8 mac[ETH_ALEN];
	u8 *abuf, *bbuf;
	u64 adma, bdma;
	int checks, fails;
};

#define KV_CHECK(kv, cond, fmt, ...) do {					\
	(kv)->checks++;								\
	if (cond) {								\
		pr_info("kverbs_test: ok " fmt "\n", ##__VA_ARGS__);		\
	} else {								\
		(kv)->fails++;							\
		pr_err("kverbs_test: FAIL " fmt "\n", ##__VA_ARGS__);		\
	}									\
} while (0)

static void kv_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct kv_wr *w = container_of(wc->wr_cqe, struct kv_wr, cqe);

	w->wc = *wc;
	complete(&w->done);
}

static void kv_wr_init(struct kv_wr *w)
{
	memset(w, 0, sizeof(*w));
	w->cqe.done = kv_done;
	init_completion(&w->done);
}

/* The work request's completion, or status -1 after 10 s without one. */
static struct ib_wc *kv_wait(struct kv_wr *w)
{
	if (!wait_for_completion_timeout(&w->done, 10 * HZ))
		w->wc.status = -1;
	return &w->wc;
}

static struct ib_sge kv_sge(struct kv *kv, u64 dma, u32 len)
{
	return (struct ib_sge){ .addr = dma, .length = len, .lkey = kv->pd->local_dma_lkey };
}

static int kv_recv(struct ib_qp *qp, struct ib_srq *srq, struct kv_wr *w, struct ib_sge *sge,
		   int n)
{
	struct ib_recv_wr wr = { .wr_cqe = &w->cqe, .sg_list = sge, .num_sge = n };

	kv_wr_init(w);
	return srq ? ib_post_srq_recv(srq, &wr, NULL) : ib_post_recv(qp, &wr, NULL);
}

static int kv_send(struct ib_qp *qp, struct ib_send_wr *wr, struct kv_wr *w)
{
	kv_wr_init(w);
	wr->wr_cqe = &w->cqe;
	wr->send_flags |= IB_SEND_SIGNALED;
	return ib_post_send(qp, wr, NULL);
}

static void kv_sync(struct kv *kv)
{
	ib_dma_sync_single_for_cpu(kv->ib, kv->adma, KV_BUF, DMA_BIDIRECTIONAL);
	ib_dma_sync_single_for_cpu(kv->ib, kv->bdma, KV_BUF, DMA_BIDIRECTIONAL);
}

static void kv_fill(u8 *p, size_t n, u8 seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = seed + i * 7;
}

static struct ib_qp *kv_qp(struct kv *kv, enum ib_qp_type type, struct ib_srq *srq)
{
	struct ib_qp_init_attr init = {
		.send_cq = kv->scq,
		.recv_cq = kv->rcq,
		.srq = srq,
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.qp_type = type,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
	};

	return ib_create_qp(kv->pd, &init);
}

static void kv_av(struct kv *kv, struct rdma_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->type = RDMA_AH_ATTR_TYPE_ROCE;
	rdma_ah_set_port_num(ah, 1);
	rdma_ah_set_grh(ah, (union ib_gid *)&kv->gid->gid, 0, kv->gid->index, 64, 0);
	memcpy(ah->roce.dmac, kv->mac, ETH_ALEN);
}

/* RESET to RTS, connected to dest on this device (RC, UC) or with KV_QKEY (UD). */
static int kv_up(struct kv *kv, struct ib_qp *qp, u32 dest)
{
	enum ib_qp_type type = qp->qp_type;
	struct ib_qp_attr a = {};
	int mask, err;

	a.qp_state = IB_QPS_INIT;
	a.port_num = 1;
	mask = IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT;
	if (type == IB_QPT_UD) {
		a.qkey = KV_QKEY;
		mask |= IB_QP_QKEY;
	} else {
		a.qp_access_flags = IB_ACCESS_REMOTE_WRITE;
		if (type == IB_QPT_RC)
			a.qp_access_flags |= IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC;
		mask |= IB_QP_ACCESS_FLAGS;
	}
	err = ib_modify_qp(qp, &a, mask);
	if (err)
		return err;

	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTR;
	mask = IB_QP_STATE;
	if (type != IB_QPT_UD) {
		kv_av(kv, &a.ah_attr);
		a.path_mtu = IB_MTU_1024;
		a.dest_qp_num = dest;
		a.rq_psn = KV_PSN;
		mask |= IB_QP_AV | IB_QP_PATH_MTU | IB_QP_DEST_QPN | IB_QP_RQ_PSN;
	}
	if (type == IB_QPT_RC) {
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 12;
		mask |= IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER;
	}
	err = ib_modify_qp(qp, &a, mask);
	if (err)
		return err;

	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTS;
	a.sq_psn = KV_PSN;
	mask = IB_QP_STATE | IB_QP_SQ_PSN;
	if (type == IB_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		mask |= IB_QP_TIMEOUT | IB_QP_RETRY_CNT | IB_QP_RNR_RETRY | IB_QP_MAX_QP_RD_ATOMIC;
	}
	return ib_modify_qp(qp, &a, mask);
}

static bool kv_ok(struct ib_wc *wc, struct ib_qp *qp, enum ib_wc_opcode op)
{
	return wc->status == IB_WC_SUCCESS && wc->qp == qp && wc->opcode == op;
}

/* b registers mr (its key byte moved on) for remote reads and writes. */
static int kv_reg(struct ib_qp *b, struct ib_mr *mr, struct kv_wr *w)
{
	struct ib_reg_wr reg = { .wr = { .opcode = IB_WR_REG_MR }, .mr = mr,
				 .access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
					   IB_ACCESS_REMOTE_READ };

	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	reg.key = mr->rkey;
	return kv_send(b, &reg.wr, w);
}

/*
 * Fast registration as storage ULPs use it: b's region over bbuf's third
 * and first pages, in that order, registered by IB_WR_REG_MR; a's WRITE
 * across its page boundary lands in both; LOCAL_INV frees it; registered
 * again, a's SEND with Invalidate frees it (as nvmet-rdma's responses do),
 * which the next REG_MR, refused on a registered region, proves.
 */
static void kv_frmr(struct kv *kv, struct ib_qp *a, struct ib_qp *b)
{
	struct scatterlist sg[2];
	struct kv_wr sw, rw;
	struct ib_sge sge;
	struct ib_mr *mr;
	struct ib_wc *wc;
	int n, err;

	mr = ib_alloc_mr(kv->pd, IB_MR_TYPE_MEM_REG, 4);
	KV_CHECK(kv, !IS_ERR(mr), "ib_alloc_mr of 4 pages (%d)", PTR_ERR_OR_ZERO(mr));
	if (IS_ERR(mr))
		return;
	sg_init_table(sg, 2);
	sg_dma_address(&sg[0]) = kv->bdma + 8192;
	sg_dma_len(&sg[0]) = 4096;
	sg_dma_address(&sg[1]) = kv->bdma;
	sg_dma_len(&sg[1]) = 4096;
	n = ib_map_mr_sg(mr, sg, 2, NULL, PAGE_SIZE);
	KV_CHECK(kv, n == 2 && mr->length == 8192, "ib_map_mr_sg maps 2 pages (%d, %llu bytes)",
		 n, mr->length);
	err = kv_reg(b, mr, &rw);
	wc = kv_wait(&rw);
	KV_CHECK(kv, !err && kv_ok(wc, b, IB_WC_REG_MR), "REG_MR completes (err %d status %d opcode %d)",
		 err, wc->status, wc->opcode);

	kv_fill(kv->abuf, 256, 21);
	memset(kv->bbuf, 0, KV_BUF);
	ib_dma_sync_single_for_device(kv->ib, kv->adma, KV_BUF, DMA_BIDIRECTIONAL);
	ib_dma_sync_single_for_device(kv->ib, kv->bdma, KV_BUF, DMA_BIDIRECTIONAL);
	sge = kv_sge(kv, kv->adma, 256);
	{
		struct ib_rdma_wr wr = { .wr = { .opcode = IB_WR_RDMA_WRITE, .sg_list = &sge,
						 .num_sge = 1 },
					 .remote_addr = mr->iova + 4096 - 128, .rkey = mr->rkey };

		err = kv_send(a, &wr.wr, &sw);
	}
	wc = kv_wait(&sw);
	kv_sync(kv);
	KV_CHECK(kv, !err && kv_ok(wc, a, IB_WC_RDMA_WRITE) &&
		 !memcmp(kv->bbuf + 12288 - 128, kv->abuf, 128) &&
		 !memcmp(kv->bbuf, kv->abuf + 128, 128) && !kv->bbuf[128],
		 "RDMA_WRITE through the fast MR lands in its two pages (err %d status %d)",
		 err, wc->status);

	{
		struct ib_send_wr wr = { .opcode = IB_WR_LOCAL_INV, .ex.invalidate_rkey = mr->rkey };

		err = kv_send(b, &wr, &rw);
	}
	wc = kv_wait(&rw);
	KV_CHECK(kv, !err && kv_ok(wc, b, IB_WC_LOCAL_INV), "LOCAL_INV of the fast MR (err %d status %d)",
		 err, wc->status);

	err = kv_reg(b, mr, &rw);
	wc = kv_wait(&rw);
	KV_CHECK(kv, !err && kv_ok(wc, b, IB_WC_REG_MR), "REG_MR again with a new key (status %d)",
		 wc->status);
	sge = kv_sge(kv, kv->bdma + 4096, 64);
	err = kv_recv(b, NULL, &rw, &sge, 1);
	{
		struct ib_sge ssge = kv_sge(kv, kv->adma, 64);
		struct ib_send_wr wr = { .opcode = IB_WR_SEND_WITH_INV, .sg_list = &ssge,
					 .num_sge = 1, .ex.invalidate_rkey = mr->rkey };

		err = err ?: kv_send(a, &wr, &sw);
	}
	wc = kv_wait(&sw);
	KV_CHECK(kv, !err && kv_ok(wc, a, IB_WC_SEND), "SEND_WITH_INV completes (err %d status %d)",
		 err, wc->status);
	wc = kv_wait(&rw);
	KV_CHECK(kv, kv_ok(wc, b, IB_WC_RECV) && (wc->wc_flags & IB_WC_WITH_INVALIDATE) &&
		 wc->ex.invalidate_rkey == mr->rkey,
		 "SEND_WITH_INV received, the fast MR's key invalidated (status %d flags %#x key %#x)",
		 wc->status, wc->wc_flags, wc->ex.invalidate_rkey);
	err = kv_reg(b, mr, &rw);
	wc = kv_wait(&rw);
	KV_CHECK(kv, !err && kv_ok(wc, b, IB_WC_REG_MR),
		 "REG_MR after the remote invalidation: the region was free (status %d)", wc->status);
	{
		struct ib_send_wr wr = { .opcode = IB_WR_LOCAL_INV, .ex.invalidate_rkey = mr->rkey };

		err = kv_send(b, &wr, &rw);
	}
	kv_wait(&rw);
	KV_CHECK(kv, !ib_dereg_mr(mr), "ib_dereg_mr of the fast MR");
}

/* RC between a and b: every opcode the device runs, and one it does not. */
static void kv_rc(struct kv *kv, struct ib_qp *a, struct ib_qp *b)
{
	u32 rkey = kv->pd->unsafe_global_rkey;
	struct kv_wr sw, rw, rw2;
	struct ib_sge sge[2], rsge[2];
	struct ib_wc *wc;
	u8 inl[64];
	u64 *word;
	int err;

	/* SEND from two SGEs into two. */
	kv_fill(kv->abuf, KV_BUF, 1);
	memset(kv->bbuf, 0, KV_BUF);
	ib_dma_sync_single_for_device(kv->ib, kv->adma, KV_BUF, DMA_BIDIRECTIONAL);
	ib_dma_sync_single_for_device(kv->ib, kv->bdma, KV_BUF, DMA_BIDIRECTIONAL);
	rsge[0] = kv_sge(kv, kv->bdma, 1500);
	rsge[1] = kv_sge(kv, kv->bdma + 4096, 1500);
	err = kv_recv(b, NULL, &rw, rsge, 2);
	sge[0] = kv_sge(kv, kv->adma, 1000);
	sge[1] = kv_sge(kv, kv->adma + 2000, 1000);
	{
		struct ib_send_wr wr = { .opcode = IB_WR_SEND, .sg_list = sge, .num_sge = 2 };

		err = err ?: kv_send(a, &wr, &sw);
	}
	KV_CHECK(kv, !err, "RC post SEND (%d)", err);
	wc = kv_wait(&sw);
	KV_CHECK(kv, kv_ok(wc, a, IB_WC_SEND), "RC SEND completes (status %d opcode %d)",
		 wc->status, wc->opcode);
	wc = kv_wait(&rw);
	kv_sync(kv);
	KV_CHECK(kv, kv_ok(wc, b, IB_WC_RECV) && wc->byte_len == 2000 &&
		 !memcmp(kv->bbuf, kv->abuf, 1000) &&
		 !memcmp(kv->bbuf + 1000, kv->abuf + 2000, 500) &&
		 !memcmp(kv->bbuf + 4096, kv->abuf + 2500, 500),
		 "RC SEND received, 2000 bytes over two SGEs (status %d byte_len %u)",
		 wc->status, wc->byte_len);

	/* SEND with immediate data, inline from a kernel virtual address. */
	kv_fill(inl, sizeof(inl), 99);
	rsge[0] = kv_sge(kv, kv->bdma + 8192, 256);
	err = kv_recv(b, NULL, &rw, rsge, 1);
	sge[0] = (struct ib_sge){ .addr = (uintptr_t)inl, .length = sizeof(inl) };
	{
		struct ib_send_wr wr = { .opcode = IB_WR_SEND_WITH_IMM, .sg_list = sge, .num_sge = 1,
					 .send_flags = IB_SEND_INLINE,
					 .ex.imm_data = cpu_to_be32(0x12345678) };

		err = err ?: kv_send(a, &wr, &sw);
	}
	memset(inl, 0, sizeof(inl));	/* copied at post */
	kv_fill(kv->abuf, 64, 99);	/* what it was */
	KV_CHECK(kv, !err, "RC post inline SEND_WITH_IMM (%d)", err);
	wc = kv_wait(&sw);
	KV_CHECK(kv, kv_ok(wc, a, IB_WC_SEND), "RC inline SEND_WITH_IMM completes (status %d)",
		 wc->status);
	wc = kv_wait(&rw);
	kv_sync(kv);
	KV_CHECK(kv, kv_ok(wc, b, IB_WC_RECV) && wc->byte_len == 64 &&
		 (wc->wc_flags & IB_WC_WITH_IMM) && wc->ex.imm_data == cpu_to_be32(0x12345678) &&
		 !memcmp(kv->bbuf + 8192, kv->abuf, 64),
		 "RC inline SEND_WITH_IMM received with its immediate (status %d flags %#x imm %#x)",
		 wc->status, wc->wc_flags, be32_to_cpu(wc->ex.imm_data));

	/* RDMA WRITE through the PD's DMA MR's rkey. */
	kv_fill(kv->abuf, KV_BUF, 3);
	memset(kv->bbuf, 0, KV_BUF);
	ib_dma_sync_single_for_device(kv->ib, kv->adma, KV_BUF, DMA_BIDIRECTIONAL);
	ib_dma_sync_single_for_device(kv->ib, kv->bdma, KV_BUF, DMA_BIDIRECTIONAL);
	sge[0] = kv_sge(kv, kv->adma, 8192);
	{
		struct ib_rdma_wr wr = { .wr = { .opcode = IB_WR_RDMA_WRITE, .sg_list = sge,
						 .num_sge = 1 },
					 .remote_addr = kv->bdma + 4096, .rkey = rkey };

		err = kv_send(a, &wr.wr, &sw);
	}
	KV_CHECK(kv, !err, "RC post RDMA_WRITE (%d)", err);
	wc = kv_wait(&sw);
	kv_sync(kv);
	KV_CHECK(kv, kv_ok(wc, a, IB_WC_RDMA_WRITE) && !memcmp(kv->bbuf + 4096, kv->abuf, 8192) &&
		 !kv->bbuf[4095] && !kv->bbuf[4096 + 8192],
		 "RC RDMA_WRITE of 8192 bytes landed (status %d)", wc->status);

	/* RDMA WRITE with immediate data: consumes a receive. */
	rsge[0] = kv_sge(kv, kv->bdma, 16);
	err = kv_recv(b, NULL, &rw, rsge, 1);
	sge[0] = kv_sge(kv, kv->adma + 100, 16);
	{
		struct ib_rdma_wr wr = { .wr = { .opcode = IB_WR_RDMA_WRITE_WITH_IMM,
						 .sg_list = sge, .num_sge = 1,
						 .ex.imm_data = cpu_to_be32(0xabcd) },
					 .remote_addr = kv->bdma + 200, .rkey = rkey };

		err = err ?: kv_send(a, &wr.wr, &sw);
	}
	KV_CHECK(kv, !err, "RC post RDMA_WRITE_WITH_IMM (%d)", err);
	wc = kv_wait(&sw);
	KV_CHECK(kv, kv_ok(wc, a, IB_WC_RDMA_WRITE), "RC RDMA_WRITE_WITH_IMM completes (status %d)",
		 wc->status);
	wc = kv_wait(&rw);
	kv_sync(kv);
	KV_CHECK(kv, kv_ok(wc, b, IB_WC_RECV_RDMA_WITH_IMM) && wc->byte_len == 16 &&
		 wc->ex.imm_data == cpu_to_be32(0xabcd) && !memcmp(kv->bbuf + 200, kv->abuf + 100, 16),
		 "RC RDMA_WRITE_WITH_IMM received (status %d opcode %d byte_len %u)",
		 wc->status, wc->opcode, wc->byte_len);

	/* RDMA READ back what the WRITE put there. */
	memset(kv->abuf + 8192, 0, 4096);
	ib_dma_sync_single_for_device(kv->ib, kv->adma, KV_BUF, DMA_BIDIRECTIONAL);
	sge[0] = kv_sge(kv, kv->adma + 8192, 4096);
	{
		struct ib_rdma_wr wr = { .wr = { .opcode = IB_WR_RDMA_READ, .sg_list = sge,
						 .num_sge = 1 },
					 .remote_addr = kv->bdma + 4096, .rkey = rkey };

		err = kv_send(a, &wr.wr, &sw);
	}
	KV_CHECK(kv, !err, "RC post RDMA_READ (%d)", err);
	wc = kv_wait(&sw);
	kv_sync(kv);
	KV_CHECK(kv, kv_ok(wc, a, IB_WC_RDMA_READ) && wc->byte_len == 4096 &&
		 !memcmp(kv->abuf + 8192, kv->bbuf + 4096, 4096),
		 "RC RDMA_READ of 4096 bytes (status %d byte_len %u)", wc->status, wc->byte_len);

	/* What the device does not run is refused at post, naming the work request. */
	{
		struct ib_send_wr wr = { .opcode = IB_WR_RDMA_READ_WITH_INV };
		const struct ib_send_wr *bad = NULL;

		kv_wr_init(&sw);
		wr.wr_cqe = &sw.cqe;
		err = ib_post_send(a, &wr, &bad);
		KV_CHECK(kv, err == -EOPNOTSUPP && bad == &wr, "RC RDMA_READ_WITH_INV refused (%d)", err);
	}
	kv_frmr(kv, a, b);
	/* A READ on the receive side's QP as well: both directions work. */
	{
		struct ib_rdma_wr wr = { .wr = { .opcode = IB_WR_RDMA_READ, .sg_list = rsge,
						 .num_sge = 1 },
					 .remote_addr = kv->adma, .rkey = rkey };

		rsge[0] = kv_sge(kv, kv->bdma + 14336, 1024);
		err = kv_send(b, &wr.wr, &rw2);
		wc = kv_wait(&rw2);
		kv_sync(kv);
		KV_CHECK(kv, !err && kv_ok(wc, b, IB_WC_RDMA_READ) &&
			 !memcmp(kv->bbuf + 14336, kv->abuf, 1024),
			 "RC RDMA_READ the other way (err %d status %d)", err, wc->status);
	}

	/*
	 * An atomic reaches the responder, which refuses it: the DMA MR of
	 * ib_alloc_pd(IB_PD_UNSAFE_GLOBAL_RKEY) grants remote reads and
	 * writes, not atomics. The word stays as it was, and the error
	 * moves the QPs to the error state: the last of the RC checks.
	 */
	if (kv->ib->attrs.atomic_cap != IB_ATOMIC_NONE) {
		word = (u64 *)(kv->bbuf + 12288);
		*word = 5;
		ib_dma_sync_single_for_device(kv->ib, kv->bdma, KV_BUF, DMA_BIDIRECTIONAL);
		sge[0] = kv_sge(kv, kv->adma + 12288, 8);
		{
			struct ib_atomic_wr wr = {
				.wr = { .opcode = IB_WR_ATOMIC_FETCH_AND_ADD, .sg_list = sge,
					.num_sge = 1 },
				.remote_addr = kv->bdma + 12288, .compare_add = 10, .rkey = rkey };

			err = kv_send(a, &wr.wr, &sw);
		}
		wc = kv_wait(&sw);
		kv_sync(kv);
		KV_CHECK(kv, !err && wc->status == IB_WC_REM_ACCESS_ERR && wc->qp == a && *word == 5,
			 "RC FETCH_AND_ADD refused by the MR's access: word %llu (err %d status %d)",
			 *word, err, wc->status);
		sge[0] = kv_sge(kv, kv->adma, 64);
		{
			struct ib_send_wr wr = { .opcode = IB_WR_SEND, .sg_list = sge, .num_sge = 1 };

			err = kv_send(a, &wr, &sw);
		}
		wc = kv_wait(&sw);
		KV_CHECK(kv, !err && wc->status == IB_WC_WR_FLUSH_ERR && wc->qp == a,
			 "RC SEND in the error state flushed (err %d status %d)", err, wc->status);
	}
}

/* UC between a and b: SEND and RDMA WRITE. */
static void kv_uc(struct kv *kv, struct ib_qp *a, struct ib_qp *b)
{
	struct kv_wr sw, rw;
	struct ib_sge sge, rsge;
	struct ib_wc *wc;
	int err;

	kv_fill(kv->abuf, KV_BUF, 17);
	memset(kv->bbuf, 0, KV_BUF);
	ib_dma_sync_single_for_device(kv->ib, kv->adma, KV_BUF, DMA_BIDIRECTIONAL);
	ib_dma_sync_single_for_device(kv->ib, kv->bdma, KV_BUF, DMA_BIDIRECTIONAL);
	rsge = kv_sge(kv, kv->bdma, 4096);
	err = kv_recv(b, NULL, &rw, &rsge, 1);
	sge = kv_sge(kv, kv->adma, 3000);
	{
		struct ib_send_wr wr = { .opcode = IB_WR_SEND, .sg_list = &sge, .num_sge = 1 };

		err = err ?: kv_send(a, &wr, &sw);
	}
	wc = kv_wait(&sw);
	KV_CHECK(kv, !err && kv_ok(wc, a, IB_WC_SEND), "UC SEND completes (err %d status %d)",
		 err, wc->status);
	wc = kv_wait(&rw);
	kv_sync(kv);
	KV_CHECK(kv, kv_ok(wc, b, IB_WC_RECV) && wc->byte_len == 3000 &&
		 !memcmp(kv->bbuf, kv->abuf, 3000),
		 "UC SEND received (status %d byte_len %u)", wc->status, wc->byte_len);
	sge = kv_sge(kv, kv->adma + 4096, 2048);
	{
		struct ib_rdma_wr wr = { .wr = { .opcode = IB_WR_RDMA_WRITE, .sg_list = &sge,
						 .num_sge = 1 },
					 .remote_addr = kv->bdma + 8192,
					 .rkey = kv->pd->unsafe_global_rkey };

		err = kv_send(a, &wr.wr, &sw);
	}
	wc = kv_wait(&sw);
	/* The requester completes UC at once: wait for the bytes themselves. */
	if (!err && wc->status == IB_WC_SUCCESS) {
		int i;

		for (i = 0; i < 1000; i++) {
			kv_sync(kv);
			if (!memcmp(kv->bbuf + 8192, kv->abuf + 4096, 2048))
				break;
			usleep_range(10000, 20000);
		}
	}
	KV_CHECK(kv, !err && kv_ok(wc, a, IB_WC_RDMA_WRITE) &&
		 !memcmp(kv->bbuf + 8192, kv->abuf + 4096, 2048),
		 "UC RDMA_WRITE landed (err %d status %d)", err, wc->status);
}

/*
 * A chain of one send more than the queue holds, on a QP with nothing
 * posted yet: the device sees none of it before the chain is written, so
 * the last is refused (-ENOMEM, named by bad_wr) and the others are sent.
 */
static void kv_full(struct kv *kv, struct ib_qp *a, struct ib_ah *ah, u32 dest)
{
	struct ib_qp_init_attr init;
	const struct ib_send_wr *bad = NULL;
	struct ib_qp_attr attr;
	struct ib_ud_wr *wrs;
	struct ib_sge sge;
	struct kv_wr sw;
	struct ib_wc *wc;
	int n, i, err;

	err = ib_query_qp(a, &attr, IB_QP_CAP, &init);
	n = init.cap.max_send_wr;
	wrs = kcalloc(n + 1, sizeof(*wrs), GFP_KERNEL);
	if (err || !wrs) {
		KV_CHECK(kv, false, "UD: query the QP's capabilities (%d)", err);
		kfree(wrs);
		return;
	}
	sge = kv_sge(kv, kv->adma, 64);
	kv_wr_init(&sw);
	for (i = 0; i <= n; i++) {
		wrs[i].wr.next = i < n ? &wrs[i + 1].wr : NULL;
		wrs[i].wr.wr_cqe = &sw.cqe;
		wrs[i].wr.opcode = IB_WR_SEND;
		wrs[i].wr.sg_list = &sge;
		wrs[i].wr.num_sge = 1;
		wrs[i].ah = ah;
		wrs[i].remote_qpn = dest;	/* no receive posted: dropped there */
		wrs[i].remote_qkey = KV_QKEY;
	}
	wrs[n - 1].wr.send_flags = IB_SEND_SIGNALED;
	err = ib_post_send(a, &wrs[0].wr, &bad);
	KV_CHECK(kv, err == -ENOMEM && bad == &wrs[n].wr,
		 "UD: %d sends posted into a queue of %d: -ENOMEM at the last (%d, bad %td)",
		 n + 1, n, err, bad ? (struct ib_ud_wr *)bad - wrs : -1);
	wc = kv_wait(&sw);
	KV_CHECK(kv, kv_ok(wc, a, IB_WC_SEND), "UD: the %d that fitted were sent (status %d)",
		 n, wc->status);
	kfree(wrs);
}

/* UD from a to b through an address handle: the GRH area, src_qp, the network type. */
static void kv_ud(struct kv *kv, struct ib_qp *a, struct ib_qp *b)
{
	struct rdma_ah_attr attr;
	struct kv_wr sw, rw;
	struct ib_sge sge, rsge;
	struct ib_ah *ah;
	struct ib_wc *wc;
	int err;

	kv_av(kv, &attr);
	ah = rdma_create_ah(kv->pd, &attr, 0);	/* not sleepable, as ib_cm's */
	KV_CHECK(kv, !IS_ERR(ah), "UD address handle (%d)", PTR_ERR_OR_ZERO(ah));
	if (IS_ERR(ah))
		return;
	kv_fill(kv->abuf, KV_BUF, 55);
	memset(kv->bbuf, 0, KV_BUF);
	ib_dma_sync_single_for_device(kv->ib, kv->adma, KV_BUF, DMA_BIDIRECTIONAL);
	ib_dma_sync_single_for_device(kv->ib, kv->bdma, KV_BUF, DMA_BIDIRECTIONAL);
	rsge = kv_sge(kv, kv->bdma, 40 + 512);
	err = kv_recv(b, NULL, &rw, &rsge, 1);
	sge = kv_sge(kv, kv->adma, 512);
	{
		struct ib_ud_wr wr = {
			.wr = { .opcode = IB_WR_SEND, .sg_list = &sge, .num_sge = 1 },
			.ah = ah, .remote_qpn = b->qp_num, .remote_qkey = KV_QKEY };

		err = err ?: kv_send(a, &wr.wr, &sw);
	}
	wc = kv_wait(&sw);
	KV_CHECK(kv, !err && kv_ok(wc, a, IB_WC_SEND), "UD SEND completes (err %d status %d)",
		 err, wc->status);
	wc = kv_wait(&rw);
	kv_sync(kv);
	KV_CHECK(kv, kv_ok(wc, b, IB_WC_RECV) && wc->byte_len == 40 + 512 &&
		 wc->src_qp == a->qp_num && (wc->wc_flags & IB_WC_GRH) &&
		 (wc->wc_flags & IB_WC_WITH_NETWORK_HDR_TYPE) &&
		 wc->network_hdr_type == RDMA_NETWORK_IPV4 &&
		 (kv->bbuf[20] >> 4) == 4 && !memcmp(kv->bbuf + 40, kv->abuf, 512),
		 "UD SEND received behind the GRH area (status %d byte_len %u src_qp %u flags %#x)",
		 wc->status, wc->byte_len, wc->src_qp, wc->wc_flags);
	kv_full(kv, a, ah, b->qp_num);
	rdma_destroy_ah(ah, 0);
}

/* Two receives on an SRQ; a SEND to the QP on it takes one. */
static void kv_srq(struct kv *kv, struct ib_srq *srq, struct ib_qp *a, struct ib_qp *b)
{
	struct kv_wr sw, rw[2];
	struct ib_sge sge, rsge[2];
	struct ib_wc *wc;
	int err;

	kv_fill(kv->abuf, KV_BUF, 77);
	memset(kv->bbuf, 0, KV_BUF);
	ib_dma_sync_single_for_device(kv->ib, kv->adma, KV_BUF, DMA_BIDIRECTIONAL);
	ib_dma_sync_single_for_device(kv->ib, kv->bdma, KV_BUF, DMA_BIDIRECTIONAL);
	rsge[0] = kv_sge(kv, kv->bdma, 1024);
	rsge[1] = kv_sge(kv, kv->bdma + 1024, 1024);
	err = kv_recv(NULL, srq, &rw[0], &rsge[0], 1);
	err = err ?: kv_recv(NULL, srq, &rw[1], &rsge[1], 1);
	sge = kv_sge(kv, kv->adma, 700);
	{
		struct ib_send_wr wr = { .opcode = IB_WR_SEND, .sg_list = &sge, .num_sge = 1 };

		err = err ?: kv_send(a, &wr, &sw);
	}
	wc = kv_wait(&sw);
	KV_CHECK(kv, !err && kv_ok(wc, a, IB_WC_SEND), "SRQ: SEND completes (err %d status %d)",
		 err, wc->status);
	wc = kv_wait(&rw[0]);
	kv_sync(kv);
	KV_CHECK(kv, kv_ok(wc, b, IB_WC_RECV) && wc->byte_len == 700 &&
		 !memcmp(kv->bbuf, kv->abuf, 700),
		 "SRQ: the first receive took it (status %d byte_len %u)",
		 wc->status, wc->byte_len);
	KV_CHECK(kv, !completion_done(&rw[1].done), "SRQ: the second receive stays posted");
	err = kv_recv(b, NULL, &rw[0], &rsge[0], 1);
	KV_CHECK(kv, err == -EINVAL, "SRQ: a QP on it has no receive queue to post to (%d)", err);
}

static int kv_gid(struct kv *kv)
{
	const struct ib_gid_attr *g;
	int i;

	for (i = 0; i < kv->ib->port_data[1].immutable.gid_tbl_len; i++) {
		g = rdma_get_gid_attr(kv->ib, 1, i);
		if (IS_ERR(g))
			continue;
		if (g->gid_type == IB_GID_TYPE_ROCE_UDP_ENCAP &&
		    ipv6_addr_v4mapped((struct in6_addr *)g->gid.raw)) {
			kv->gid = g;
			return rdma_read_gid_l2_fields(g, NULL, kv->mac);
		}
		rdma_put_gid_attr(g);
	}
	return -ENOENT;
}

static int __init kv_init(void)
{
	struct ib_srq_init_attr sinit = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ib_qp *rc[2] = {}, *uc[2] = {}, *ud[2] = {}, *sq[2] = {};
	struct ib_srq *srq = NULL;
	struct kv kv = {};
	int err, i;

	kv.ib = ib_device_get_by_name(dev, RDMA_DRIVER_UNKNOWN);
	if (!kv.ib) {
		pr_err("kverbs_test: no RDMA device %s\n", dev);
		return -ENODEV;
	}
	err = kv_gid(&kv);
	if (err) {
		pr_err("kverbs_test: %s has no RoCEv2 IPv4 GID (%d)\n", dev, err);
		goto out_dev;
	}
	kv.pd = ib_alloc_pd(kv.ib, IB_PD_UNSAFE_GLOBAL_RKEY);
	kv.scq = ib_alloc_cq(kv.ib, NULL, 64, 0, IB_POLL_WORKQUEUE);
	kv.rcq = ib_alloc_cq(kv.ib, NULL, 64, 0, IB_POLL_WORKQUEUE);
	kv.abuf = kzalloc(KV_BUF, GFP_KERNEL);
	kv.bbuf = kzalloc(KV_BUF, GFP_KERNEL);
	if (IS_ERR(kv.pd) || IS_ERR(kv.scq) || IS_ERR(kv.rcq) || !kv.abuf || !kv.bbuf) {
		pr_err("kverbs_test: FAIL PD %d, CQs %d %d\n", PTR_ERR_OR_ZERO(kv.pd),
		       PTR_ERR_OR_ZERO(kv.scq), PTR_ERR_OR_ZERO(kv.rcq));
		err = -EIO;
		goto out;
	}
	kv.adma = ib_dma_map_single(kv.ib, kv.abuf, KV_BUF, DMA_BIDIRECTIONAL);
	kv.bdma = ib_dma_map_single(kv.ib, kv.bbuf, KV_BUF, DMA_BIDIRECTIONAL);
	srq = ib_create_srq(kv.pd, &sinit);
	for (i = 0; i < 2; i++) {
		rc[i] = kv_qp(&kv, IB_QPT_RC, NULL);
		uc[i] = kv_qp(&kv, IB_QPT_UC, NULL);
		ud[i] = kv_qp(&kv, IB_QPT_UD, NULL);
		sq[i] = kv_qp(&kv, IB_QPT_RC, i ? srq : NULL);
	}
	KV_CHECK(&kv, !IS_ERR(srq), "kernel SRQ (%d)", PTR_ERR_OR_ZERO(srq));
	for (i = 0; i < 2; i++) {
		KV_CHECK(&kv, !IS_ERR(rc[i]) && !IS_ERR(uc[i]) && !IS_ERR(ud[i]) && !IS_ERR(sq[i]),
			 "kernel QPs %d: RC %d UC %d UD %d on the SRQ %d", i,
			 PTR_ERR_OR_ZERO(rc[i]), PTR_ERR_OR_ZERO(uc[i]), PTR_ERR_OR_ZERO(ud[i]),
			 PTR_ERR_OR_ZERO(sq[i]));
	}
	if (kv.fails)
		goto out;
	for (i = 0; i < 2; i++) {
		err = kv_up(&kv, rc[i], rc[!i]->qp_num) ?: kv_up(&kv, uc[i], uc[!i]->qp_num) ?:
		      kv_up(&kv, ud[i], 0) ?: kv_up(&kv, sq[i], sq[!i]->qp_num);
		KV_CHECK(&kv, !err, "QPs %d to RTS (%d)", i, err);
	}
	if (kv.fails)
		goto out;
	kv_rc(&kv, rc[0], rc[1]);
	kv_uc(&kv, uc[0], uc[1]);
	kv_ud(&kv, ud[0], ud[1]);
	kv_srq(&kv, srq, sq[0], sq[1]);
	/* In the error state a send is flushed, as ib_drain_qp expects. */
	ib_drain_qp(rc[0]);
	KV_CHECK(&kv, true, "RC QP drained");
out:
	for (i = 0; i < 2; i++) {
		if (!IS_ERR_OR_NULL(sq[i]))
			ib_destroy_qp(sq[i]);
		if (!IS_ERR_OR_NULL(ud[i]))
			ib_destroy_qp(ud[i]);
		if (!IS_ERR_OR_NULL(uc[i]))
			ib_destroy_qp(uc[i]);
		if (!IS_ERR_OR_NULL(rc[i]))
			ib_destroy_qp(rc[i]);
	}
	if (!IS_ERR_OR_NULL(srq))
		ib_destroy_srq(srq);
	if (kv.adma)
		ib_dma_unmap_single(kv.ib, kv.adma, KV_BUF, DMA_BIDIRECTIONAL);
	if (kv.bdma)
		ib_dma_unmap_single(kv.ib, kv.bdma, KV_BUF, DMA_BIDIRECTIONAL);
	kfree(kv.abuf);
	kfree(kv.bbuf);
	if (!IS_ERR_OR_NULL(kv.rcq))
		ib_free_cq(kv.rcq);
	if (!IS_ERR_OR_NULL(kv.scq))
		ib_free_cq(kv.scq);
	if (!IS_ERR_OR_NULL(kv.pd))
		ib_dealloc_pd(kv.pd);
	rdma_put_gid_attr(kv.gid);
	pr_info("kverbs_test: %d of %d checks passed\n", kv.checks - kv.fails, kv.checks);
	err = kv.fails ? -EIO : 0;
out_dev:
	ib_device_put(kv.ib);
	return err;
}

static void __exit kv_exit(void)
{
}

module_init(kv_init);
module_exit(kv_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("kernel verbs on one RDMA device, between its own QPs");
`
