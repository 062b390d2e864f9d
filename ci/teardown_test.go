package ci

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// The quiesce contract under load (issue 10): the guest tears its
// datapath down and brings it back while iperf3 runs both ways, in every
// way it can (ip link down/up, ethtool -G, rmmod/insmod, cool, a reboot),
// rotating through the RX policies. Afterwards the device refused no late
// DMA, the guest kernel logged no warning, oops or leak, and a transfer
// checked by sha256 is intact.

// soakEnv selects the long version: NPFNIC_SOAK_ROUNDS=500 (make soak).
const soakEnv = "NPFNIC_SOAK_ROUNDS"

// teardownPolicies rotate round by round.
var teardownPolicies = []string{"off", "pin", "drop", "backup"}

// badKernelLog matches what a clean teardown never prints: WARN()s, BUGs,
// oopses, and the driver's quiesce timeouts ("... its memory is leaked").
var badKernelLog = regexp.MustCompile(`WARNING:|BUG:|BUG |Oops|general protection|Call Trace|(?i:leak)`)

// deviceLateDMA reads LATE_DMA straight from the in-process device model
// (not through the guest): the late writes its detector refused since the
// client connected.
func deviceLateDMA(t *testing.T, tb *testbed.Testbed) uint32 {
	t.Helper()
	var b [4]byte
	if err := deviceOf(t, tb).RegionRead(hw.RegBAR, hw.RegLateDMA, b[:]); err != nil {
		t.Fatalf("read LATE_DMA from the device: %v", err)
	}
	return binary.LittleEndian.Uint32(b[:])
}

// iperfLoad runs iperf3 --bidir from the host namespace against the
// guest's server, run after run, until stopped; runs cut short by a
// teardown simply fail.
type iperfLoad struct {
	ok, failed atomic.Int64
	sent, recv atomic.Int64 // bytes the host sent and received in completed runs
	stop       chan struct{}
	done       sync.WaitGroup
}

func startIperfLoad(tb *testbed.Testbed, port int) *iperfLoad {
	l := &iperfLoad{stop: make(chan struct{})}
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			out, err := tb.NS.Run(ctx, "iperf3", "-c", tb.GuestIP, "-p", strconv.Itoa(port), "-t", "1",
				"--bidir", "-J", "--connect-timeout", "1000", "--rcv-timeout", "3000")
			cancel()
			var r struct {
				End struct {
					Sent struct {
						Bytes float64 `json:"bytes"`
					} `json:"sum_sent"`
					Recv struct {
						Bytes float64 `json:"bytes"`
					} `json:"sum_received_bidir_reverse"`
				} `json:"end"`
			}
			if err != nil || json.Unmarshal([]byte(out), &r) != nil {
				l.failed.Add(1)
				select {
				case <-l.stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			l.ok.Add(1)
			l.sent.Add(int64(r.End.Sent.Bytes))
			l.recv.Add(int64(r.End.Recv.Bytes))
		}
	}()
	return l
}

func (l *iperfLoad) Stop() { close(l.stop); l.done.Wait() }

// TestTeardownUnderTraffic: rounds of teardown under iperf3 both ways.
// Each round loads the driver (rmmod + insmod) with the next policy of
// off, pin, drop, backup, then while traffic flows does ip link down/up,
// ethtool -G to another ring size and, under drop and backup, cool; every
// rebootEvery rounds the guest is reset mid-traffic (sysrq b). After each
// round ethtool -S must show late_dma 0 and quiesce_timeouts 0. At the end
// the device model's own LATE_DMA is 0, no dmesg of any boot shows a
// warning, oops or leak, and 2 MiB each way arrive with the same sha256.
// 5 rounds by default (about 2 minutes); NPFNIC_SOAK_ROUNDS sets more.
func TestTeardownUnderTraffic(t *testing.T) {
	rounds, rebootEvery := 5, 5
	if s := os.Getenv(soakEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of rounds", soakEnv, s)
		}
		rounds, rebootEvery = n, 10
	}
	a := needImages(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	tb, err := testbed.Start(ctx, testbed.Config{Images: a, Name: "teardown",
		LogDir: logDir(t, "teardown"), AllowReboot: true})
	cancel()
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	t.Cleanup(tb.Close)
	t.Logf("guest (%s) booted in %.1fs; %d rounds, a reboot every %d", tb.Accel, tb.Boot.Seconds(), rounds, rebootEvery)

	const iperfPort = 5201
	// A server stuck on a client that vanished gives up after 3 s.
	startServer := func() {
		t.Helper()
		run(t, tb.VM, fmt.Sprintf("iperf3 -s -D -p %d --rcv-timeout 3000", iperfPort))
	}
	startServer()
	load := startIperfLoad(tb, iperfPort)
	defer func() {
		if load != nil {
			load.Stop()
		}
	}()

	var logs []string // dmesg of each boot, kept for the check
	checkRound := func(round int, policy string) {
		t.Helper()
		st := faultStats(t, tb)
		if st["late_dma"] != 0 || st["quiesce_timeouts"] != 0 {
			t.Fatalf("round %d (%s): late_dma %d, quiesce_timeouts %d; want 0", round, policy, st["late_dma"], st["quiesce_timeouts"])
		}
		if _, ok := st["late_dma"]; !ok {
			t.Fatalf("ethtool -S has no late_dma: %v", st)
		}
	}
	pause := func(d time.Duration) { time.Sleep(d) }
	start := time.Now()
	reboots := 0
	round, policy := 0, ""
	defer func() {
		if !t.Failed() || round >= rounds {
			return
		}
		t.Logf("failed in round %d (rx_policy %s) after %.0fs", round, policy, time.Since(start).Seconds())
		// The console shows warnings only: keep the whole kernel log.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if r, err := tb.VM.Run(ctx, "dmesg"); err == nil {
			tb.SaveLog("dmesg.txt", r.Stdout)
			t.Logf("guest kernel log in %s/dmesg.txt; its tail:\n%s", tb.LogDir, tailLines(r.Stdout, 15))
		}
	}()
	for ; round < rounds; round++ {
		policy = teardownPolicies[round%len(teardownPolicies)]
		lctx, lcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := tb.LoadDriver(lctx, testbed.DriverParams(policy, 256, ""))
		lcancel()
		if err != nil {
			t.Fatalf("round %d: load npfnic.ko rx_policy=%s: %v", round, policy, err)
		}
		ifn := tb.IfName
		pause(700 * time.Millisecond)
		run(t, tb.VM, fmt.Sprintf("ip link set %s down && ip link set %s up", ifn, ifn))
		pause(500 * time.Millisecond)
		ring := []int{128, 512}[round%2]
		run(t, tb.VM, fmt.Sprintf("ethtool -G %s rx %d tx %d", ifn, ring, ring))
		pause(500 * time.Millisecond)
		if policy == "drop" || policy == "backup" {
			for i := 0; i < 2; i++ {
				cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
				err := tb.WriteSysfs(cctx, "cool", "1")
				ccancel()
				if err != nil {
					t.Fatalf("round %d (%s): cool: %v", round, policy, err)
				}
				pause(300 * time.Millisecond)
			}
		}
		checkRound(round, policy)
		if (round+1)%rebootEvery == 0 {
			logs = append(logs, run(t, tb.VM, "dmesg"))
			rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
			err := tb.Reboot(rctx)
			rcancel()
			if err != nil {
				t.Fatalf("round %d: reboot: %v", round, err)
			}
			reboots++
			startServer()
		}
		if tb.Dead() {
			t.Fatalf("round %d: QEMU exited", round)
		}
		if rounds > 20 && (round+1)%20 == 0 {
			t.Logf("%d rounds in %.0fs; iperf3 runs: %d completed, %d cut short", round+1, time.Since(start).Seconds(), load.ok.Load(), load.failed.Load())
		}
	}
	load.Stop()
	ok, failed, sent, recv := load.ok.Load(), load.failed.Load(), load.sent.Load(), load.recv.Load()
	load = nil
	t.Logf("%d rounds (%d reboots) in %.1fs; iperf3 --bidir: %d runs completed (%.1f MB host->guest, %.1f MB guest->host), %d cut short",
		rounds, reboots, time.Since(start).Seconds(), ok, float64(sent)/1e6, float64(recv)/1e6, failed)
	if ok == 0 || sent == 0 || recv == 0 {
		t.Errorf("no iperf3 run completed in either direction: the teardowns ran without traffic")
	}

	// The last load, and a checked transfer through it.
	lctx, lcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	err = tb.LoadDriver(lctx, testbed.DriverParams("backup", 256, ""))
	lcancel()
	if err != nil {
		t.Fatal(err)
	}
	link := &hostLink{ns: tb.NS, hostIP: tb.HostIP, guestIP: tb.GuestIP}
	transfer(t, tb.VM, link, 2<<20)
	checkRound(rounds, "backup")
	run(t, tb.VM, "rmmod npfnic")
	if late := deviceLateDMA(t, tb); late != 0 {
		t.Errorf("the device model refused %d late DMA writes (its log has them)", late)
	}
	logs = append(logs, run(t, tb.VM, "dmesg"))
	for boot, l := range logs {
		for _, line := range strings.Split(l, "\n") {
			if badKernelLog.MatchString(line) {
				t.Errorf("guest kernel log (boot %d): %s", boot, line)
			}
		}
	}
}
