package ci

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// The RDMA soak (issue 22): the quiesce contract of the RDMA engine under
// load, round after round in one boot of an npfnic guest and an rdma_rxe
// guest. Each round perftest runs SENDs both ways between them (pinned on
// npfnic's side in even rounds, on-demand paged in odd ones) while npfnic's
// side goes through one of rdmaSoakSteps, in turn: QPs created, broken and
// destroyed; memory regions registered and deregistered, pinned and ODP;
// a program killed mid-transfer; npfnic.ko unloaded under its users; and
// the guest reset (a vfio-user DEVICE_RESET) mid-traffic. After each round
// the device wrote no memory late (the driver's late_dma, the device's own
// LATE_DMA), its RDMA engine is not in error, the processes' objects are
// gone, neither guest's kernel logged a warning or oops, ibv_rc_pingpong
// -c moves checked buffers, and this process, which serves the device,
// holds its goroutines and memory (logged every round, bounded after
// warm-up). NPFNIC_SOAK_ROUNDS rounds (default 5: one of each step; make
// soak SOAK=rdma: 500). Every round's figures go to out/soak/rdma
// (soak.csv, and soak.png of the server's memory, goroutines and round
// times), written whether the soak passes or fails.

// rdmaSoakStep is what npfnic's side goes through in one round, under the
// round's traffic. disrupts: the step ends the traffic itself.
type rdmaSoakStep struct {
	name     string
	disrupts bool
	run      func(s *rdmaSoak, visit int)
}

var rdmaSoakSteps = []rdmaSoakStep{
	{"qp", false, (*rdmaSoak).qpChurn},
	{"mr", false, (*rdmaSoak).mrChurn},
	{"kill", false, (*rdmaSoak).killMidTransfer},
	{"rmmod", true, (*rdmaSoak).rmmodLive},
	{"reset", true, (*rdmaSoak).resetMidTraffic},
}

// The soak's perftest and ibv_rc_pingpong programs: the traffic's tool is
// one no step runs, so a step's kill never hits it.
const (
	soakTrafficTool = "ib_send_bw"
	soakPortBase    = 19000 // + 10 per round modulo 500, + a step's offset
)

// soakRxeMaxMsg bounds the SENDs and WRITEs rdma_rxe originates: one
// packet (the path MTU). The guest's rxe (Linux 6.1) has a requester race
// under retransmission: a retry while ACKs wait in its completer resends
// an acknowledged message as a SEND_ONLY of 0 bytes and every message
// after it shifted by the rest of its packets (captured in this soak: a
// SEND_FIRST 3 PSNs early in the middle of a message npfnic is receiving,
// which npfnic rightly NAKs as an invalid request, ending the QP). With
// single-packet messages the bogus packet lands on a PSN npfnic already
// has and is dropped as a duplicate. Multi-packet messages go the other
// way: npfnic's WRITEs into rxe, and READ responses rxe sends npfnic.
const soakRxeMaxMsg = 1024

// soakQPTimeout is the soak's perftest QPs' local ACK timeout (-u): 4.3 s,
// not perftest's 67 ms. Either guest's vCPU stalls for seconds at a time
// on this loaded host (the rxe guest's kernel logged a 10 s clocksource
// gap in a soak), and seven retries 67 ms apart then end a QP, by the
// spec, with RETRY_EXC_ERR; npfnic's retransmissions are exercised all
// the same, by the stalls shorter than that.
const soakQPTimeout = "20"

// soakPcapEnv, if set, names a file that records every frame of npfnic's
// port (large: about 100 MB a minute of traffic), for a failure's post
// mortem with tshark.
const soakPcapEnv = "NPFNIC_RDMA_SOAK_PCAP"

// soakParamsEnv, if set, are npfnic.ko's module parameters in the soak's
// npfnic guest, at every load: NPFNIC_RDMA_SOAK_PARAMS=rx_policy=backup
// runs every step, rmmod with live contexts too, beside the Ethernet
// fault machinery on the same translation engine.
const soakParamsEnv = "NPFNIC_RDMA_SOAK_PARAMS"

var soakTools = []string{"ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_send_lat", "ibv_rc_pingpong", "npfnic-rdma-hos"}

// Bounds on the serving process after warm-up, above the warm-up's
// highest figures: a leak of one goroutine or 128 KiB per round (a QP's
// goroutine or state never freed) crosses them within a soak of 500
// rounds. Measured: 26 goroutines and 35 MiB VmRSS (15-18 MiB anonymous)
// throughout.
const (
	soakGoroutineSlack = 64
	soakMemSlackMiB    = 64
	// The npfnic guest's RAM (RDMAPairConfig's default), which the device
	// maps from its memfd: the pages it touched count as RssShmem, up to
	// all of them, without any leak.
	soakGuestRAMMiB = 1024
)

type rdmaSoak struct {
	t        *testing.T
	p        *testbed.RDMAPair
	npf, rxe *testbed.RDMAGuest
	round    int
	odp      bool                         // the traffic's npfnic side registers with --odp
	console  map[*testbed.RDMAGuest]int64 // bytes of each console log already checked
	traffic  *soakTraffic
}

// port is a TCP port of this round's programs: offset 0 is the traffic's.
func (s *rdmaSoak) port(offset int) int { return soakPortBase + 10*(s.round%500) + offset }

func TestRDMASoak(t *testing.T) {
	rounds := 5
	if v := os.Getenv(soakEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of rounds", soakEnv, v)
		}
		rounds = n
	}
	imgs := needImages(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	p, err := testbed.StartRDMAPair(ctx, testbed.RDMAPairConfig{Images: imgs, A: testbed.RDMANPFNIC, B: testbed.RDMARxe,
		Name: "rdma-soak", LogDir: logDir(t, "rdma-soak"), AllowReboot: true, Progress: t.Logf,
		Pcap: os.Getenv(soakPcapEnv), MinAckTimeout: vmTestMinAckTimeout, NPFNICParams: os.Getenv(soakParamsEnv)})
	cancel()
	if err != nil {
		t.Fatalf("RDMA pair: %v", err)
	}
	t.Cleanup(p.Close)
	s := &rdmaSoak{t: t, p: p, npf: p.A, rxe: p.B, console: map[*testbed.RDMAGuest]int64{}}
	t.Logf("pair up in %.1fs; %d rounds of %s", time.Since(start).Seconds(), rounds, soakStepNames())

	// Warm-up: the first round, or the first turn of every step in a
	// longer soak; its highest figures are the baseline.
	warm := 1
	if rounds >= 2*len(rdmaSoakSteps) {
		warm = len(rdmaSoakSteps)
	}
	var base, lo, hi procFigures
	soakStart := time.Now()
	var rows []soakRow
	defer func() {
		if src, err := images.FindSourceDir("."); err == nil {
			writeSoakFigures(t, filepath.Join(src, "out", "soak", "rdma"), rows)
		}
	}()
	defer func() {
		if t.Failed() {
			t.Logf("the device's RDMA counters: %+v", s.npf.NIC.RDMA().Stats())
			sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
			if st, err := s.rxe.Statistic(sctx); err == nil {
				t.Logf("rxe's counters: %v", st)
			}
			if out, err := s.rxe.Shell(sctx, "ip -s link show "+s.rxe.IfName+"; tc -s qdisc show dev "+s.rxe.IfName); err == nil {
				t.Logf("rxe's link:\n%s", out)
			}
			scancel()
			s.reap()
			s.saveLogs()
			t.Logf("failed in round %d (%s) after %.0fs", s.round, rdmaSoakSteps[s.round%len(rdmaSoakSteps)].name, time.Since(soakStart).Seconds())
		}
	}()
	for s.round = 0; s.round < rounds; s.round++ {
		step := rdmaSoakSteps[s.round%len(rdmaSoakSteps)]
		s.odp = s.round%2 == 1
		roundStart := time.Now()
		s.startTraffic()
		step.run(s, s.round/len(rdmaSoakSteps))
		stepTook := time.Since(roundStart)
		if !step.disrupts {
			s.stopTraffic(true)
		}
		s.checkRound(step.name)
		rxeSt := rdmaStatistic(t, s.rxe)
		dev := s.npf.NIC.RDMA().Stats()
		f := readProcFigures(t)
		if s.round == 0 {
			lo, hi = f, f
		}
		lo, hi = lo.min(f), hi.max(f)
		if s.round < warm {
			base = base.max(f)
		} else if err := f.within(base); err != nil {
			t.Fatalf("round %d (%s): the device server grew beyond its bound after warm-up: %v", s.round, step.name, err)
		}
		rows = append(rows, soakRow{round: s.round, step: step.name, odp: s.odp, secs: time.Since(roundStart).Seconds(), f: f,
			retries: rxeSt["completer_retry_err"]})
		t.Logf("round %d (%s, traffic %s) %.1fs (to the step's end %.1fs): late DMA 0/0; %s; device ring accesses refused %d, "+
			"MR accesses refused %d; rxe retries %d",
			s.round, step.name, map[bool]string{false: "pinned", true: "odp"}[s.odp], time.Since(roundStart).Seconds(),
			stepTook.Seconds(), f, dev.RingErrors, dev.LateRefused, rxeSt["completer_retry_err"])
	}
	t.Logf("%d rounds in %.1fs: goroutines %d..%d, VmRSS %d..%d MiB, RssAnon %d..%d MiB, Go heap %d..%d MiB; late DMA 0",
		rounds, time.Since(soakStart).Seconds(), lo.goroutines, hi.goroutines, lo.rssMiB, hi.rssMiB, lo.anonMiB, hi.anonMiB, lo.heapMiB, hi.heapMiB)
}

// soakRow is one round's figures.
type soakRow struct {
	round   int
	step    string
	odp     bool
	secs    float64
	f       procFigures
	retries int64 // rxe's completer_retry_err so far
}

// writeSoakFigures writes the rounds' figures into dir: soak.csv and
// soak.png (the server's memory and goroutines by round; each round's
// time).
func writeSoakFigures(t *testing.T, dir string, rows []soakRow) {
	if len(rows) == 0 {
		return
	}
	var csv [][]string
	var mem, anon, heap, gor, secs report.Series
	mem.Name, anon.Name, heap.Name, gor.Name, secs.Name = "VmRSS", "RssAnon", "Go heap", "goroutines", "round time"
	for _, r := range rows {
		csv = append(csv, report.Row(r.round, r.step, map[bool]string{false: "pinned", true: "odp"}[r.odp], r.secs,
			r.f.goroutines, r.f.rssMiB, r.f.anonMiB, r.f.shmemMiB, r.f.heapMiB, r.retries))
		x := float64(r.round)
		for _, p := range []struct {
			s *report.Series
			v float64
		}{{&mem, float64(r.f.rssMiB)}, {&anon, float64(r.f.anonMiB)}, {&heap, float64(r.f.heapMiB)},
			{&gor, float64(r.f.goroutines)}, {&secs, r.secs}} {
			p.s.X, p.s.Y = append(p.s.X, x), append(p.s.Y, p.v)
		}
	}
	zero := 0.0
	f := runner.Files{Dir: dir}
	f.CSV("soak.csv", []string{"round", "step", "traffic", "seconds", "goroutines", "vmrss_mib", "rssanon_mib", "rssshmem_mib",
		"go_heap_mib", "rxe_retries"}, csv)
	f.Charts("soak.png", 1000, 300,
		report.LineChart{Title: "RDMA soak: the device server's memory by round", XLabel: "round", YLabel: "MiB",
			Series: []report.Series{mem, anon, heap}, YMin: &zero},
		report.LineChart{Title: "its goroutines", XLabel: "round", YLabel: "goroutines", Series: []report.Series{gor}, YMin: &zero},
		report.LineChart{Title: "each round's time (qp, mr, kill, rmmod, reset in turn)", XLabel: "round", YLabel: "s",
			Series: []report.Series{secs}, YMin: &zero})
	if paths, err := f.Done(); err != nil {
		t.Logf("soak figures: %v", err)
	} else {
		t.Logf("soak figures: %s", strings.Join(paths, ", "))
	}
}

func soakStepNames() string {
	var n []string
	for _, s := range rdmaSoakSteps {
		n = append(n, s.name)
	}
	return strings.Join(n, ", ")
}

// soakTraffic is one round's perftest: SENDs both ways (-b), open-ended,
// npfnic the server.
type soakTraffic struct {
	done   chan error
	cancel context.CancelFunc
}

// startTraffic starts the round's traffic and waits until npfnic both
// sends and receives.
func (s *rdmaSoak) startTraffic() {
	t := s.t
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tr := &soakTraffic{done: make(chan error, 1), cancel: cancel}
	s.traffic = tr
	pt := workload.Perftest{Tool: soakTrafficTool, Size: soakRxeMaxMsg, Iters: 100000000, Port: s.port(0),
		Extra: []string{"-b", "-u", soakQPTimeout}}
	run := testbed.PerftestRun{Perftest: pt, Logf: t.Logf}
	if s.odp {
		run.Side = testbed.ODPOnNPFNIC
	}
	go func() {
		res, err := s.p.Perftest(ctx, s.npf, s.rxe, run)
		if err != nil && res.ServerOut != "" {
			err = fmt.Errorf("%w\nserver (npfnic) output:\n%s", err, res.ServerOut)
		}
		tr.done <- err
	}()
	s.waitFlowing("the round's traffic, starting", 100, tr.done)
}

// waitFlowing waits until npfnic's device both sent and received n more
// RC messages, failing if ended reports first.
func (s *rdmaSoak) waitFlowing(what string, n uint64, ended <-chan error) {
	t := s.t
	t.Helper()
	before := s.npf.NIC.RDMA().Stats().RC
	for deadline := time.Now().Add(2 * time.Minute); ; {
		st := s.npf.NIC.RDMA().Stats().RC
		if st.DataPackets-before.DataPackets >= n && st.MessagesIn-before.MessagesIn >= n {
			return
		}
		select {
		case err := <-ended:
			t.Fatalf("round %d: %s: the program ended: %v", s.round, what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("round %d: %s: npfnic sent %d and received %d RC messages in 2 minutes, want %d each way", s.round, what,
				st.DataPackets-before.DataPackets, st.MessagesIn-before.MessagesIn, n)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// stopTraffic ends the round's traffic: running says it must still be
// running (the step left it alone), so npfnic must still move it.
func (s *rdmaSoak) stopTraffic(running bool) {
	t := s.t
	t.Helper()
	tr := s.traffic
	if tr == nil {
		return
	}
	s.traffic = nil
	defer tr.cancel()
	if !running {
		// The step ended the traffic (its server's guest rebooted, its
		// driver reloaded): end the run now, or the perftest runner
		// retries it against the new boot until the kill below lands.
		tr.cancel()
	}
	if running {
		select {
		case err := <-tr.done:
			t.Fatalf("round %d: the traffic ended during the step: %v", s.round, err)
		default:
		}
		s.waitFlowing("the traffic, flowing after the step", 20, tr.done)
	}
	for _, g := range []*testbed.RDMAGuest{s.npf, s.rxe} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := g.Kill(ctx, soakTrafficTool)
		cancel()
		if err != nil {
			t.Fatalf("round %d: end the traffic on %s: %v", s.round, g.Kind, err)
		}
	}
	select {
	case <-tr.done:
	case <-time.After(time.Minute):
		t.Fatalf("round %d: the traffic did not end within a minute of its kill", s.round)
	}
}

// qpChurn: npfnic-rdma-hostile creates QPs on npfnic, each connected to
// a fresh QP of its well-behaved server on rxe, and destroys them: on even
// visits its RC cases (the UD and SRQ ones, which churn no RC QP, run in
// TestRDMAHostileUserSpace), where malformed entries break each QP (the
// device moves it to the error state and flushes what follows); on odd
// ones modify-err-inflight ten times, where the program itself moves the
// QP to the error state with RDMA READs in flight, between good-traffic
// cases that check the next QP works. Every case ends as the device
// contract names, and nothing lands outside its place on either side.
func (s *rdmaSoak) qpChurn(visit int) {
	t := s.t
	// The client waits for the server's port for up to 2 minutes, not
	// 30 s: the rxe guest, busy with the traffic, stalls for seconds.
	args := []string{"-wait", "2m", "-skip", "^(ud|srq)-"}
	want := 25
	if visit%2 == 1 {
		args, want = append(args, "-run", "^(modify-err-inflight|good-traffic)$", "-repeat", "10"), 20
	}
	out, exit := runHostileTool(t, s.rxe, s.npf, s.port(1), nil, args)
	lines := hostileCase.FindAllStringSubmatch(out, -1)
	var failed []string
	for _, l := range lines {
		if l[2] != "ok" {
			failed = append(failed, l[1])
		}
	}
	if exit != 0 || len(lines) < want || len(failed) > 0 {
		t.Fatalf("round %d: npfnic-rdma-hostile %s: exit %d, %d cases, failed %v:\n%s", s.round, strings.Join(args, " "), exit, len(lines), failed, out)
	}
}

// mrChurn: perftest registers its regions, pinned and then on-demand
// paged on npfnic's side, moves 64 KiB messages through them and
// deregisters them; npfnic's region is the source of its RDMA WRITEs into
// rxe on even visits and the target of its READs from rxe on odd ones.
// The ODP run's pages fault in.
func (s *rdmaSoak) mrChurn(visit int) {
	t := s.t
	tool, server, client := "ib_write_bw", s.rxe, s.npf
	if visit%2 == 1 {
		tool = "ib_read_bw"
	}
	for i, odp := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		before := s.npf.NIC.RDMA().Stats().RC.PageRequests
		run := testbed.PerftestRun{Perftest: workload.Perftest{Tool: tool, Size: 65536, Iters: 20, Port: s.port(2 + i),
			Extra: []string{"-u", soakQPTimeout}}, Logf: t.Logf}
		if odp {
			run.Side = testbed.ODPOnNPFNIC
		}
		res, err := s.p.Perftest(ctx, server, client, run)
		cancel()
		if err != nil {
			t.Fatalf("round %d: %s (odp %v, %s server): %v", s.round, tool, odp, server.Kind, err)
		}
		if len(res.Rows) != 1 || res.Rows[0].Iters != 20 || res.Rows[0].AvgMBs <= 0 {
			t.Fatalf("round %d: %s (odp %v): %+v", s.round, tool, odp, res.Rows)
		}
		if faults := s.npf.NIC.RDMA().Stats().RC.PageRequests - before; odp && faults == 0 {
			t.Fatalf("round %d: %s --odp: no page request from the fresh region", s.round, tool)
		}
	}
}

// killMidTransfer: a perftest on npfnic's side gets SIGKILL while the
// device moves its data (the target of rxe's WRITEs, a SEND-and-receive
// latency run, the reader of READs in turn; pinned or ODP on alternate
// turns); its objects go with it, the device refused no late write, and
// the traffic beside it goes on.
func (s *rdmaSoak) killMidTransfer(visit int) {
	t := s.t
	kinds := []struct {
		tool           string
		server, client *testbed.RDMAGuest
		size           int
	}{{"ib_write_bw", s.npf, s.rxe, soakRxeMaxMsg}, {"ib_send_lat", s.npf, s.rxe, soakRxeMaxMsg}, {"ib_read_bw", s.rxe, s.npf, 65536}}
	k := kinds[visit%len(kinds)]
	odp := (visit/len(kinds))%2 == 1
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pt := workload.Perftest{Tool: k.tool, Size: k.size, Iters: 100000000, Port: s.port(4), Extra: []string{"-u", soakQPTimeout}}
	run := testbed.PerftestRun{Perftest: pt, Logf: t.Logf}
	if odp {
		run.Side = testbed.ODPOnNPFNIC
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.p.Perftest(ctx, k.server, k.client, run)
		done <- err
	}()
	// Mid-transfer: its QP is connected on npfnic (a passive perftest
	// server's stays in RTR) and messages flow beyond the traffic's.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		res, err := s.npf.Shell(ctx, "rdma resource show qp")
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`state RT[RS] .*comm ` + k.tool).MatchString(res) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("round %d: %s ended before it was killed: %v", s.round, k.tool, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("round %d: %s's QP not connected on npfnic within 2 minutes:\n%s", s.round, k.tool, res)
		}
		time.Sleep(300 * time.Millisecond)
	}
	s.waitFlowing(k.tool, 100, done)
	if n, err := s.npf.Signal(ctx, 9, k.tool); err != nil || n == 0 {
		t.Fatalf("round %d: SIGKILL %s on npfnic: %d processes, %v", s.round, k.tool, n, err)
	}
	s.waitObjectsGone(ctx, k.tool)
	if _, err := s.rxe.Signal(ctx, 9, k.tool); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("round %d: %s completed although killed", s.round, k.tool)
		}
	case <-time.After(time.Minute):
		t.Fatalf("round %d: %s did not end within a minute of the kills", s.round, k.tool)
	}
	t.Logf("round %d: %s (odp %v, %s server) killed mid-transfer, its objects released", s.round, k.tool, odp, k.server.Kind)
}

// waitObjectsGone waits until npfnic's guest lists no QP or MR of the
// programs comms.
func (s *rdmaSoak) waitObjectsGone(ctx context.Context, comms ...string) {
	t := s.t
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		res, err := s.npf.Shell(ctx, "rdma resource show qp; rdma resource show mr")
		if err != nil {
			t.Fatal(err)
		}
		left := ""
		for _, c := range comms {
			if strings.Contains(res, "comm "+c) {
				left = c
			}
		}
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("round %d: %s's objects outlived it by 30 s:\n%s", s.round, left, res)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// rmmodLive: npfnic.ko is unloaded while the traffic's process holds its
// context, QP, CQs and regions (the core disassociates them), then loaded
// again; the orphaned processes are killed.
func (s *rdmaSoak) rmmodLive(visit int) {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if res, err := s.npf.Shell(ctx, "rdma resource show qp"); err != nil || !strings.Contains(res, "comm "+soakTrafficTool) {
		t.Fatalf("round %d: no live QP before rmmod: %v\n%s", s.round, err, res)
	}
	took, err := s.p.ReloadDriver(ctx, s.npf)
	if err != nil {
		t.Fatalf("round %d: rmmod/insmod with live contexts: %v", s.round, err)
	}
	s.stopTraffic(false)
	t.Logf("round %d: rmmod with live contexts took %.1fs", s.round, took.Seconds())
}

// resetMidTraffic: npfnic's guest is reset mid-traffic (no unload: the
// device gets a DEVICE_RESET while it moves data), boots again and is set
// up again; rxe's orphaned side is killed.
func (s *rdmaSoak) resetMidTraffic(visit int) {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The boot ends here: check its kernel log first.
	s.checkKernelLog(s.npf, "before the reset")
	start := time.Now()
	if err := s.p.Reboot(ctx, s.npf); err != nil {
		t.Fatalf("round %d: reset: %v", s.round, err)
	}
	s.stopTraffic(false)
	t.Logf("round %d: reset mid-traffic, up again in %.1fs", s.round, time.Since(start).Seconds())
}

// checkRound is every round's end: no program left, no late DMA, the
// engine not in error, clean kernel logs and an intact transfer.
func (s *rdmaSoak) checkRound(step string) {
	t := s.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s.reap()
	s.waitObjectsGone(ctx, soakTools...)
	eth, err := s.npf.Shell(ctx, "ethtool -S "+s.npf.IfName)
	if err != nil {
		t.Fatal(err)
	}
	st := testbed.ParseEthtoolStats(eth)
	if _, ok := st["late_dma"]; !ok {
		t.Fatalf("ethtool -S has no late_dma:\n%s", eth)
	}
	if st["late_dma"] != 0 || st["quiesce_timeouts"] != 0 {
		t.Fatalf("round %d (%s): the driver's late_dma %d, quiesce_timeouts %d; want 0", s.round, step, st["late_dma"], st["quiesce_timeouts"])
	}
	var b [4]byte
	if err := s.npf.NIC.RegionRead(hw.RegBAR, hw.RegLateDMA, b[:]); err != nil {
		t.Fatal(err)
	}
	if late := binary.LittleEndian.Uint32(b[:]); late != 0 {
		t.Fatalf("round %d (%s): the device's LATE_DMA is %d (its log, out/ci/..., names the writes)", s.round, step, late)
	}
	if v, _ := hw.Offsets(s.npf.NIC.RDMA()).RegRead(hw.RegRDMAError); v != 0 {
		t.Fatalf("round %d (%s): RDMA_ERROR %#x", s.round, step, v)
	}
	for _, g := range []*testbed.RDMAGuest{s.npf, s.rxe} {
		s.checkKernelLog(g, "")
	}
	pp := workload.Pingpong{Size: soakRxeMaxMsg, Iters: 50, Validate: true, ODP: s.round%4 >= 2, Port: s.port(5)}
	server, client := s.npf, s.rxe
	if s.round%2 == 1 {
		server, client = s.rxe, s.npf
	}
	_, out, err := s.p.RunClientServer(ctx, server, client, func(g *testbed.RDMAGuest, ip string) []string {
		q := pp
		q.ODP = pp.ODP && g.Kind == testbed.RDMANPFNIC
		return q.Args(g.Dev, g.GIDIndex, ip)
	})
	if err != nil {
		t.Fatalf("round %d (%s): ibv_rc_pingpong -c (odp %v, %s server) afterwards: %v", s.round, step, pp.ODP, server.Kind, err)
	}
	if r, err := workload.ParsePingpong(out); err != nil || r.Iters != pp.Iters {
		t.Fatalf("round %d (%s): ibv_rc_pingpong -c: %+v %v\n%s", s.round, step, r, err, out)
	}
}

// reap kills (SIGKILL) whatever the soak's programs left on either guest.
func (s *rdmaSoak) reap() {
	for _, g := range []*testbed.RDMAGuest{s.npf, s.rxe} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := g.Signal(ctx, 9, soakTools...); err != nil {
			s.t.Errorf("round %d: kill what is left on %s: %v", s.round, g.Kind, err)
		}
		cancel()
	}
}

// checkKernelLog fails on a warning, oops or leak in the guest's kernel
// log (dmesg) or in what its console printed since the last check (which
// also holds the boots a reset ended).
func (s *rdmaSoak) checkKernelLog(g *testbed.RDMAGuest, when string) {
	t := s.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dmesg, err := g.Shell(ctx, "dmesg")
	if err != nil {
		t.Fatal(err)
	}
	if m := badKernelLog.FindString(dmesg); m != "" {
		t.Fatalf("round %d: the %s guest's kernel log %s has %q:\n%s", s.round, g.Kind, when, m, lastLines(dmesg, 60))
	}
	b, err := os.ReadFile(g.VM.ConsoleLog())
	if err != nil {
		t.Fatal(err)
	}
	seen := min(s.console[g], int64(len(b)))
	s.console[g] = int64(len(b))
	if m := badKernelLog.Find(b[seen:]); m != nil {
		t.Fatalf("round %d: the %s guest's console (%s) %s has %q", s.round, g.Kind, g.VM.ConsoleLog(), when, m)
	}
}

// saveLogs keeps both guests' kernel logs beside their consoles.
func (s *rdmaSoak) saveLogs() {
	for _, g := range []*testbed.RDMAGuest{s.npf, s.rxe} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if out, err := g.Shell(ctx, "dmesg"); err == nil {
			path := g.VM.LogDir() + "/dmesg.txt"
			if os.WriteFile(path, []byte(out), 0o644) == nil {
				s.t.Logf("the %s guest's kernel log: %s", g.Kind, path)
			}
		}
		cancel()
	}
}

// procFigures are the serving process's size: its goroutines, resident
// memory (VmRSS; RssAnon is its own, RssShmem the npfnic guest's RAM the
// device touched through its memfd mapping, bounded by the guest's size) and
// the Go heap in use after a collection.
type procFigures struct {
	goroutines                         int
	rssMiB, anonMiB, shmemMiB, heapMiB int64
	ownMiB                             int64 // VmRSS less RssShmem
}

func readProcFigures(t *testing.T) procFigures {
	t.Helper()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f := procFigures{goroutines: runtime.NumGoroutine(), heapMiB: int64(ms.HeapAlloc >> 20)}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		var kb int64
		fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
		switch k {
		case "VmRSS":
			f.rssMiB = kb >> 10
		case "RssAnon":
			f.anonMiB = kb >> 10
		case "RssShmem":
			f.shmemMiB = kb >> 10
		}
	}
	if f.rssMiB == 0 {
		t.Fatalf("/proc/self/status without VmRSS:\n%s", b)
	}
	f.ownMiB = f.rssMiB - f.shmemMiB
	return f
}

func (f procFigures) String() string {
	return fmt.Sprintf("goroutines %d, VmRSS %d MiB (anon %d, shmem %d), Go heap %d MiB", f.goroutines, f.rssMiB, f.anonMiB, f.shmemMiB, f.heapMiB)
}

func (f procFigures) max(g procFigures) procFigures {
	return procFigures{max(f.goroutines, g.goroutines), max(f.rssMiB, g.rssMiB), max(f.anonMiB, g.anonMiB),
		max(f.shmemMiB, g.shmemMiB), max(f.heapMiB, g.heapMiB), max(f.ownMiB, g.ownMiB)}
}

func (f procFigures) min(g procFigures) procFigures {
	return procFigures{min(f.goroutines, g.goroutines), min(f.rssMiB, g.rssMiB), min(f.anonMiB, g.anonMiB),
		min(f.shmemMiB, g.shmemMiB), min(f.heapMiB, g.heapMiB), min(f.ownMiB, g.ownMiB)}
}

// within checks f against the warm-up's highest figures: goroutines, and
// VmRSS less the guest RAM the device touched (RssShmem, bounded by the
// guest's size on its own), each within its slack.
func (f procFigures) within(base procFigures) error {
	switch {
	case f.goroutines > base.goroutines+soakGoroutineSlack:
		return fmt.Errorf("%d goroutines, warm-up %d (+%d allowed)", f.goroutines, base.goroutines, soakGoroutineSlack)
	case f.ownMiB > base.ownMiB+soakMemSlackMiB:
		return fmt.Errorf("VmRSS %d MiB less RssShmem %d MiB is %d MiB, warm-up %d MiB (+%d allowed)", f.rssMiB, f.shmemMiB, f.ownMiB, base.ownMiB, soakMemSlackMiB)
	case f.shmemMiB > soakGuestRAMMiB:
		return fmt.Errorf("RssShmem %d MiB: more than the guest's %d MiB of RAM", f.shmemMiB, soakGuestRAMMiB)
	}
	return nil
}

// TestSoakFigures: the soak's figures are written from its rounds.
func TestSoakFigures(t *testing.T) {
	dir := t.TempDir()
	var rows []soakRow
	for i := range 10 {
		rows = append(rows, soakRow{round: i, step: rdmaSoakSteps[i%len(rdmaSoakSteps)].name, odp: i%2 == 1, secs: 14 + float64(i%5),
			f: procFigures{goroutines: 27, rssMiB: 30 + int64(i%3), anonMiB: 15, heapMiB: 4}})
	}
	writeSoakFigures(t, dir, rows)
	b, err := os.ReadFile(filepath.Join(dir, "soak.csv"))
	if err != nil || strings.Count(string(b), "\n") != 11 || !strings.Contains(string(b), "rmmod,odp") {
		t.Fatalf("soak.csv: %v\n%s", err, b)
	}
	if _, err := report.CheckFigures([]string{filepath.Join(dir, "soak.png")}); err != nil {
		t.Fatal(err)
	}
}
