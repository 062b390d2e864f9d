package ci

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
	"github.com/npfnic/npfnic/rdma"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// hostilePort is the TCP port of npfnic-rdma-hostile's out-of-band
// exchange (ibv_rc_pingpong's is 18515).
const hostilePort = 18700

// hostileCase is one line of npfnic-rdma-hostile's client: a case name,
// then its expected and measured outcomes, then ok or FAIL.
var hostileCase = regexp.MustCompile(`(?m)^(\S+)\s.*\s(ok|FAIL)$`)

// runHostile runs npfnic-rdma-hostile: its server on server, the cases
// from client; it returns the client's output and exit status and fails
// the test if the server did not end cleanly.
func runHostile(t *testing.T, server, client *testbed.RDMAGuest, extra ...string) (string, int) {
	t.Helper()
	return runHostileTool(t, server, client, hostilePort, nil, extra)
}

// runHostileTool runs npfnic-rdma-hostile's server (-serve port and
// serverArgs) on server and its client (-c and clientArgs) on client, as
// runHostile does.
func runHostileTool(t *testing.T, server, client *testbed.RDMAGuest, port int, serverArgs, clientArgs []string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	type res struct {
		out  string
		exit int
		err  error
	}
	srv := make(chan res, 1)
	go func() {
		args := append([]string{"npfnic-rdma-hostile", "-serve", fmt.Sprint(port), "-d", server.Dev, "-ip", server.IP}, serverArgs...)
		r, err := server.VM.Exec(ctx, args...)
		srv <- res{r.Stdout + r.Stderr, r.Exit, err}
	}()
	// The client starts once the server listens: in guests of a loaded
	// host the server took longer to start than the client's 30 s of
	// dialling ("connection refused").
	for listening := false; !listening; {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		listening = workload.WaitListening(wctx, server.VM, port) == nil
		wcancel()
		select {
		case s := <-srv:
			t.Fatalf("the hostile server on %s ended before it listened: exit %d, %v:\n%s", server.Kind, s.exit, s.err, s.out)
		default:
		}
		if !listening && ctx.Err() != nil {
			t.Fatalf("the hostile server on %s never listened on %d", server.Kind, port)
		}
	}
	args := append([]string{"npfnic-rdma-hostile", "-c", fmt.Sprintf("%s:%d", server.IP, port), "-d", client.Dev, "-ip", client.IP}, clientArgs...)
	r, err := client.VM.Exec(ctx, args...)
	if err != nil {
		t.Fatalf("hostile client: %v", err)
	}
	var s res
	select {
	case s = <-srv:
	case <-time.After(30 * time.Second):
		// What the server printed says why it still waits.
		server.Signal(ctx, int(syscall.SIGKILL), "npfnic-rdma-hos")
		select {
		case s = <-srv:
		case <-time.After(10 * time.Second):
		}
		t.Fatalf("the hostile server did not end after the client (killed):\n%s\nclient:\n%s%s", s.out, r.Stdout, r.Stderr)
	}
	if s.err != nil || s.exit != 0 {
		t.Errorf("hostile server on %s: exit %d, %v:\n%s", server.Kind, s.exit, s.err, s.out)
	}
	return r.Stdout + r.Stderr, r.Exit
}

// TestRDMAHostileUserSpace: user space that writes garbage into the rxe
// rings it mmaps (npfnic-rdma-hostile: the uverbs write() commands and the
// rings by hand, no librxe) on npfnic, against a well-behaved server on
// rdma_rxe: bad lkeys and rkeys, SGEs past their region or of another PD,
// opcodes librxe never writes, SGE counts, inline and message lengths over
// the limits, producer indices beyond the ring over garbage slots, garbage
// queue headers, a CQ consumer index that overruns the CQ; UD SENDs whose
// address vector the device can not send to, over the port's MTU, with a
// wrong Q_Key or to QPs that are no UD QP of the server's; garbage entries
// in a shared receive queue. Every case gets
// the completions npfnic's device contract names (the client exits 0 only
// then), and neither buffer changes where it should not. Meanwhile an
// ibv_rc_pingpong with buffer validation between the same two guests runs
// to its end, Ethernet works afterwards, the device counted the bad
// entries and raised no engine error, and neither kernel logged a
// warning. A panic in the device would end this test's process: the
// device runs in it.
func TestRDMAHostileUserSpace(t *testing.T) {
	p := rdmaPair(t, "rdma-hostile", testbed.RDMANPFNIC, testbed.RDMARxe, "")
	hostileBesideLiveTraffic(t, p, p.A, p.B)
}

// hostileBesideLiveTraffic runs npfnic-rdma-hostile's client on npf, an
// npfnic guest, against its server on peer (rdma_rxe or npfnic), beside an
// ibv_rc_pingpong with buffer validation between the same two guests, and
// checks what TestRDMAHostileUserSpace says. A peer that is an npfnic too
// takes the garbage's traffic on its responder, with live traffic of its
// own: it must stay as healthy as the attacker's device.
func hostileBesideLiveTraffic(t *testing.T, p *testbed.RDMAPair, npf, peer *testbed.RDMAGuest) {
	t.Helper()
	before := npf.NIC.RDMA().Stats()
	var peerBefore rdma.Stats
	if peer.NIC != nil {
		peerBefore = peer.NIC.RDMA().Stats()
	}

	// The QP that must not be harmed: ibv_rc_pingpong checking every
	// buffer, npfnic the client, long enough to outlast the garbage
	// about twice over: 48 cases took 17 s against rxe, beside 5.6 ms
	// per iteration, and 12 s against npfnic, beside 1.6 to 3.5 ms.
	ppIters := 6000
	if peer.NIC != nil {
		ppIters = 16000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	type ppResult struct {
		out string
		err error
		at  time.Time
	}
	ppDone := make(chan ppResult, 1)
	go func() {
		pp := workload.Pingpong{Size: 4096, Iters: ppIters, Validate: true}
		_, out, err := p.RunClientServer(ctx, peer, npf, func(g *testbed.RDMAGuest, ip string) []string {
			return pp.Args(g.Dev, g.GIDIndex, ip)
		})
		ppDone <- ppResult{out, err, time.Now()}
	}()
	for deadline := time.Now().Add(time.Minute); ; {
		res := run(t, npf.VM, "rdma resource show qp")
		// The pingpong's own QP in RTS (QP 1, the GSI QP, is in RTS from
		// the start).
		if rtsQPOf(res, "ibv_rc_pingpong") {
			break
		}
		select {
		case r := <-ppDone:
			t.Fatalf("ibv_rc_pingpong ended before the garbage began: %v\n%s", r.err, r.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ibv_rc_pingpong's QP never reached RTS on npfnic:\n%s", res)
		}
		time.Sleep(200 * time.Millisecond)
	}

	start := time.Now()
	out, exit := runHostile(t, peer, npf)
	hostileEnd := time.Now()
	t.Logf("npfnic-rdma-hostile, npfnic client, %s server (%.1fs):\n%s", peer.Kind, hostileEnd.Sub(start).Seconds(), out)
	lines := hostileCase.FindAllStringSubmatch(out, -1)
	if exit != 0 || len(lines) < 45 {
		var failed []string
		for _, l := range lines {
			if l[2] != "ok" {
				failed = append(failed, l[1])
			}
		}
		t.Errorf("npfnic-rdma-hostile: exit %d, %d cases, failed: %v", exit, len(lines), failed)
	}

	pp := <-ppDone
	if pp.err != nil {
		t.Fatalf("ibv_rc_pingpong beside the garbage: %v", pp.err)
	}
	r, err := workload.ParsePingpong(pp.out)
	if err != nil || r.Iters != ppIters {
		t.Fatalf("ibv_rc_pingpong beside the garbage: %+v, %v\n%s", r, err, pp.out)
	}
	if pp.at.Before(hostileEnd) {
		t.Errorf("ibv_rc_pingpong ended %.1fs before the garbage did: raise its -n", hostileEnd.Sub(pp.at).Seconds())
	}
	t.Logf("ibv_rc_pingpong -c -n %d beside it: %.0f usec/iter, ended %.1fs after the garbage", ppIters, r.UsecPerIter, pp.at.Sub(hostileEnd).Seconds())

	// Ethernet still works, both ways.
	run(t, npf.VM, "ping -c 2 -w 5000 "+peer.IP)
	run(t, peer.VM, "ping -c 2 -w 5000 "+npf.IP)

	// The device counted the malformed entries, and its rings and regions
	// never failed: user space's garbage is no engine error.
	st := npf.NIC.RDMA().Stats()
	t.Logf("device counters during the test: bad WQEs %d, CQEs %d, ring errors %d, late refused %d, NAKs received %d, sent %d",
		st.BadWQEs-before.BadWQEs, st.CQEs-before.CQEs, st.RingErrors-before.RingErrors, st.LateRefused-before.LateRefused,
		st.RC.ErrNakReceived-before.RC.ErrNakReceived, st.RC.ErrNakSent-before.RC.ErrNakSent)
	// The malformed entries: 11 send cases of one entry and the garbage
	// send queue's 15; recv-num-sge-huge's one and the garbage receive
	// queue's 15; six UD entries the device can not send (ud-over-mtu's
	// is well-formed: it completes, unsent); the SRQ cases' three garbage
	// entries.
	if d := st.BadWQEs - before.BadWQEs; d < 26+16+6+3 {
		t.Errorf("the device counted %d bad WQEs, want at least %d", d, 26+16+6+3)
	}
	if st.RingErrors != before.RingErrors || st.LateRefused != before.LateRefused {
		t.Errorf("ring errors %d, late refused MR accesses %d", st.RingErrors-before.RingErrors, st.LateRefused-before.LateRefused)
	}
	if v, _ := hw.Offsets(npf.NIC.RDMA()).RegRead(hw.RegRDMAError); v != 0 {
		t.Errorf("RDMA_ERROR %#x: user space's garbage became an engine error", v)
	}
	if peer.NIC != nil {
		ps := peer.NIC.RDMA().Stats()
		t.Logf("the peer npfnic's counters: NAKs sent %d, discarded %d, ring errors %d, late refused %d",
			ps.RC.ErrNakSent-peerBefore.RC.ErrNakSent, ps.RC.RxDiscarded-peerBefore.RC.RxDiscarded,
			ps.RingErrors-peerBefore.RingErrors, ps.LateRefused-peerBefore.LateRefused)
		if ps.RingErrors != peerBefore.RingErrors || ps.LateRefused != peerBefore.LateRefused {
			t.Errorf("the peer npfnic: ring errors %d, late refused MR accesses %d", ps.RingErrors-peerBefore.RingErrors, ps.LateRefused-peerBefore.LateRefused)
		}
		if v, _ := hw.Offsets(peer.NIC.RDMA()).RegRead(hw.RegRDMAError); v != 0 {
			t.Errorf("the peer npfnic's RDMA_ERROR %#x: the attacker's traffic became an engine error", v)
		}
	}

	for _, g := range []*testbed.RDMAGuest{npf, peer} {
		if m := badKernelLog.FindString(run(t, g.VM, "dmesg")); m != "" {
			t.Errorf("the %s guest's kernel log has %q:\n%s", g.Kind, m, lastLines(run(t, g.VM, "dmesg"), 40))
		}
	}
}

// rtsQPOf reports whether `rdma resource show qp` lists a QP in RTS that
// belongs to program.
func rtsQPOf(res, program string) bool {
	for _, line := range strings.Split(res, "\n") {
		if strings.Contains(line, "state RTS") && strings.Contains(line, program) {
			return true
		}
	}
	return false
}
