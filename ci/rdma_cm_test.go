package ci

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
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
	var s result
	select {
	case s = <-done:
	case <-time.After(30 * time.Second):
		_, _ = server.Signal(ctx, int(syscall.SIGKILL), name)
		s = <-done
		return s.out, clientOut, fmt.Errorf("%s server (%s) still running 30 s after its client (exit %d), killed:\n%s\nclient:\n%s",
			name, server.Kind, cr.Exit, s.out, clientOut)
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
		if err != nil {
			t.Fatal(err)
		}
		rows, err := workload.ParsePerftest(out)
		if err != nil {
			t.Fatalf("%s -R, %s server, %s client: %v\n%s", pt.Tool, server.Kind, client.Kind, err, out)
		}
		for _, r := range rows {
			if r.Iters != pt.Iters || r.AvgMBs <= 0 {
				t.Fatalf("%s -R, %s server, %s client: row %+v", pt.Tool, server.Kind, client.Kind, r)
			}
		}
		t.Logf("%s -R -s %d -n %d (%s server, %s client): %.2f MB/s, ok in %.1fs", pt.Tool, pt.Size, pt.Iters, server.Kind, client.Kind,
			rows[len(rows)-1].AvgMBs, time.Since(start).Seconds())
		return
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

// TestRDMACMWithRxe: rdma_cm between npfnic and rdma_rxe, each as server
// and as client: rping with every ping checked, ucmatose (RC) and udaddy
// (UD), ib_send_bw -R and ib_write_bw -R at two sizes. Then npfnic.ko is
// unloaded with ib_mad, ib_cm, rdma_cm and rdma_ucm attached to its
// device (their QP 1, CQ, PD and DMA MR destroyed through the driver) and
// loaded again, and rping connects once more; the npfnic guest's kernel
// log stays clean throughout.
func TestRDMACMWithRxe(t *testing.T) {
	p := rdmaPair(t, "rdma-cm-rxe", testbed.RDMANPFNIC, testbed.RDMARxe, "")
	npf, rxe := p.A, p.B
	gsiUp(t, npf)
	for _, sc := range [][2]*testbed.RDMAGuest{{npf, rxe}, {rxe, npf}} {
		server, client := sc[0], sc[1]
		cmTool(t, server, client, rping(10, 64))
		cmTool(t, server, client, cmatose("ucmatose", 1, 10, 1024))
		cmTool(t, server, client, cmatose("udaddy", 1, 10, 512))
	}
	cmTool(t, npf, rxe, rping(10, 4096))
	for _, sc := range [][2]*testbed.RDMAGuest{{npf, rxe}, {rxe, npf}} {
		for _, size := range []int{64, 65536} {
			cmPerftest(t, sc[0], sc[1], workload.Perftest{Tool: "ib_send_bw", Size: size, Iters: 100})
			cmPerftest(t, sc[0], sc[1], workload.Perftest{Tool: "ib_write_bw", Size: size, Iters: 100})
		}
	}
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
	npfnicLogClean(t, npf)
}

// TestRDMACMBetweenNPFNICs: rdma_cm between two npfnics, whose MADs and
// data both run on the device: rping each way, ucmatose and udaddy, and
// ib_write_bw -R.
func TestRDMACMBetweenNPFNICs(t *testing.T) {
	p := rdmaPair(t, "rdma-cm-npfnic", testbed.RDMANPFNIC, testbed.RDMANPFNIC, "")
	gsiUp(t, p.A)
	gsiUp(t, p.B)
	cmTool(t, p.A, p.B, rping(10, 64))
	cmTool(t, p.B, p.A, rping(10, 4096))
	cmTool(t, p.A, p.B, cmatose("ucmatose", 2, 10, 1024))
	cmTool(t, p.B, p.A, cmatose("udaddy", 2, 10, 512))
	cmPerftest(t, p.A, p.B, workload.Perftest{Tool: "ib_write_bw", Size: 65536, Iters: 100})
	npfnicLogClean(t, p.A)
	npfnicLogClean(t, p.B)
}
