package testbed

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// StorageRun is one run of seed 000's storage experiment (§6.1, Figure
// 8) on a pair: tgtd in the target guest, in a cgroup v2 whose
// memory.max charges it its buffers and the page cache of its backing
// store, serves Sessions targets (one LUN each, all on Backing) over
// iSER; the initiator guest logs in to each (ib_iser, open-iscsi) and
// reads them at random with npfnic-guest randread, every block checked
// against blockpat's pattern.
type StorageRun struct {
	// Backing is the target's disk (bstype rdwr: through its page cache).
	Backing string
	// PoolMiB is tgtd's iSER buffer pool (workload.ISER.PoolMiB).
	PoolMiB int
	// MemMaxMiB is the cgroup's memory.max; 0: max.
	MemMaxMiB int
	// ODP sets the target's npfnic.ko odp parameter: "all" (every user
	// MR on demand: NPF) or "explicit" (tgt as shipped: pinned). "" for
	// an rdma_rxe target, which pins.
	ODP string
	// RecvFault, if set, is the npfnic target's RC receive-fault policy
	// (RecvFaultRNR, RecvFaultDrop) for the run.
	RecvFault string
	// Sessions is the number of targets and sessions (default 1).
	Sessions int
	// BS, Jobs, Warm, Run are randread's (Jobs per session).
	BS, Jobs  int
	Warm, Run time.Duration
	// Logf reports progress.
	Logf func(format string, args ...any)
}

// StorageResult is what a StorageRun measured.
type StorageResult struct {
	// NoStart says why tgtd did not serve (its cgroup's OOM killer, a
	// registration that failed): the run's outcome, not an error.
	NoStart string
	// MBps is randread's bandwidth after its warm-up (10^6 B/s).
	MBps float64
	IOs  int64
	// RSSKiB and HWMKiB are tgtd's VmRSS at the end of the reads and its
	// VmHWM (peak); CgroupKiB the cgroup's memory.current, FileKiB and
	// AnonKiB its memory.stat file and anon.
	RSSKiB, HWMKiB, CgroupKiB, FileKiB, AnonKiB int64
	// OOMKills is memory.events' oom_kill.
	OOMKills int64
	Took     time.Duration
}

const (
	storageCgroup  = "/sys/fs/cgroup/npfnic-tgt"
	storageTarget  = "iqn.2024-01.io.npfnic:storage-"
	storageInitiat = "iqn.2024-01.io.npfnic:storage-initiator"
	odpParam       = "/sys/module/npfnic/parameters/odp"
)

var randReadRE = regexp.MustCompile(`randread bs (\d+) jobs (\d+) devices (\d+) warm_bytes (\d+) bytes (\d+) ms (\d+) ios (\d+)`)

// ParseRandRead reads npfnic-guest randread's line: bandwidth in MB/s
// (10^6) after the warm-up, and the reads it counts.
func ParseRandRead(out string) (mbps float64, ios int64, err error) {
	m := randReadRE.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("no randread line in %q", out)
	}
	bytes, _ := strconv.ParseInt(m[5], 10, 64)
	ms, _ := strconv.ParseInt(m[6], 10, 64)
	ios, _ = strconv.ParseInt(m[7], 10, 64)
	if ms <= 0 {
		return 0, 0, fmt.Errorf("randread measured for %d ms: %q", ms, out)
	}
	return float64(bytes) / float64(ms) / 1e3, ios, nil
}

// ParseKeyValues reads "KEY VALUE" lines (memory.stat, memory.events)
// and "Key:  VALUE kB" lines (/proc/PID/status).
func ParseKeyValues(out string) map[string]int64 {
	kv := map[string]int64{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(strings.Replace(l, ":", " ", 1))
		if len(f) >= 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				kv[f[0]] = v
			}
		}
	}
	return kv
}

// StorageAppend is the target guest's kernel command line: u-root's init
// mounts cgroup v1 hierarchies, the memory controller among them, which
// would keep it from cgroup v2 (rm is u-root's, and removes an empty
// cgroup as rmdir would; the image has no rmdir).
const StorageAppend = "cgroup_no_v1=memory"

// storageCgroupScript makes tgtd's cgroup (mounting cgroup2 and enabling
// its memory controller when the guest has not) with memory.max, no
// swap, and fresh counters (a new cgroup).
func storageCgroupScript(maxMiB int) string {
	max := "max"
	if maxMiB > 0 {
		max = strconv.Itoa(maxMiB) + "M"
	}
	return strings.Join([]string{
		"set -e",
		"grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 cgroup2 /sys/fs/cgroup",
		"echo +memory > /sys/fs/cgroup/cgroup.subtree_control",
		"grep -q memory /sys/fs/cgroup/cgroup.subtree_control || { echo no memory controller in cgroup v2: $(cat /sys/fs/cgroup/cgroup.controllers) >&2; exit 1; }",
		"if [ -d " + storageCgroup + " ]; then rm " + storageCgroup + "; fi",
		"mkdir " + storageCgroup,
		// One write: the shell's echo writes the newline apart, and
		// memory.max would read it as a limit of 0.
		"echo -n " + max + " > " + storageCgroup + "/memory.max",
		"[ \"$(cat " + storageCgroup + "/memory.max)\" = " + strconv.Quote(maxBytes(maxMiB)) + " ] || { echo memory.max is $(cat " + storageCgroup + "/memory.max) >&2; exit 1; }",
		"if [ -e " + storageCgroup + "/memory.swap.max ]; then echo 0 > " + storageCgroup + "/memory.swap.max; fi",
	}, "\n")
}

// maxBytes is memory.max as the kernel prints it.
func maxBytes(mib int) string {
	if mib <= 0 {
		return "max"
	}
	return strconv.Itoa(mib << 20)
}

// Storage runs one StorageRun with target serving initiator, on guests
// of a pair already up, and leaves neither with its daemons, sessions or
// cgroup.
func (p *RDMAPair) Storage(ctx context.Context, target, initiator *RDMAGuest, r StorageRun) (res StorageResult, err error) {
	start := time.Now()
	logf := r.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	r.Sessions = max(r.Sessions, 1)
	tg := workload.GuestRunner{VM: target.VM, Name: string(target.Kind) + " target " + target.IP}
	ig := workload.GuestRunner{VM: initiator.VM, Name: string(initiator.Kind) + " initiator " + initiator.IP}
	var ss []workload.ISER
	for i := 1; i <= r.Sessions; i++ {
		s := workload.ISER{Target: storageTarget + strconv.Itoa(i), Addr: target.IP, TID: i, Initiator: storageInitiat,
			Backing: r.Backing, BSType: "rdwr", PoolMiB: r.PoolMiB}
		if err := s.Validate(); err != nil {
			return res, err
		}
		ss = append(ss, s)
	}
	s := ss[0]
	if err := initiator.VM.LoadModules(ctx, workload.ISERModulesInitiator...); err != nil {
		return res, err
	}
	if r.ODP != "" {
		out, err := target.Shell(ctx, fmt.Sprintf("echo %s > %s && cat %s", r.ODP, odpParam, odpParam))
		if err != nil || strings.TrimSpace(out) != r.ODP {
			return res, fmt.Errorf("odp=%s: the driver reports %q (%v)", r.ODP, out, err)
		}
	}
	if out, err := target.Shell(ctx, "test -b "+r.Backing+" || { echo no block device "+r.Backing+": $(ls /sys/block) >&2; exit 1; }"); err != nil {
		return res, fmt.Errorf("backing store: %v %s", err, out)
	}
	if r.RecvFault != "" {
		if err := target.SetRecvFault(ctx, r.RecvFault); err != nil {
			return res, err
		}
	}
	// Every run starts with the target's page cache cold.
	if _, err := target.Shell(ctx, "sync; echo 3 > /proc/sys/vm/drop_caches"); err != nil {
		return res, err
	}
	if _, err := target.Shell(ctx, storageCgroupScript(r.MemMaxMiB)); err != nil {
		return res, err
	}
	tgtd := workload.StartDaemon(ctx, tg, "tgtd", workload.TgtdLog,
		"echo $$ > "+storageCgroup+"/cgroup.procs\n"+s.TgtdScript())
	if _, err := ig.Shell(ctx, s.InitiatorSetupScript()); err != nil {
		return res, err
	}
	iscsid := workload.StartDaemon(ctx, ig, "iscsid", workload.IscsidLog, s.IscsidScript())
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer cancel()
		if terr := p.storageTeardown(cctx, target, initiator, tg, tgtd, iscsid, ss); terr != nil && err == nil {
			err = terr
		}
		res.Took = time.Since(start)
	}()
	if err := tgtd.WaitFor(ctx, 60*time.Second, s.TgtdReadyScript(), func(out string, _ int) error { return s.TgtdReady(out) }); err != nil {
		return res, p.storageNoStart(ctx, target, &res, fmt.Errorf("tgtd: %w", err))
	}
	for _, x := range ss {
		if _, err := tg.Shell(ctx, x.TargetSetupScript()); err != nil {
			return res, err
		}
	}
	err = iscsid.WaitFor(ctx, 30*time.Second, s.IscsidReadyScript(), func(_ string, exit int) error {
		if exit != 0 {
			return errors.New("not listening for iscsiadm")
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	// Discovery is the first iSER connection: tgtd sets its device up
	// (allocates and registers its buffer pool) here.
	if _, err := ig.Exec(ctx, 90*time.Second, s.DiscoverArgs()...); err != nil {
		return res, p.storageNoStart(ctx, target, &res, fmt.Errorf("discovery: %w", err))
	}
	var disks []string
	for _, x := range ss {
		if _, err := ig.Exec(ctx, 90*time.Second, x.LoginArgs()...); err != nil {
			return res, p.storageNoStart(ctx, target, &res, fmt.Errorf("login to %s: %w", x.Target, err))
		}
		sessions, err := x.Sessions(ctx, ig)
		if err != nil {
			return res, err
		}
		sess, err := x.Session(sessions)
		if err != nil {
			return res, err
		}
		d, err := x.WaitDisk(ctx, ig, sess.SID, 30*time.Second)
		if err != nil {
			return res, err
		}
		disks = append(disks, d)
	}
	logf("%d sessions up, disks %v; reading %v + %v", len(disks), disks, r.Warm, r.Run)
	argv := append([]string{"/bin/npfnic-guest", "randread", strconv.Itoa(r.BS), strconv.Itoa(max(r.Jobs, 1)),
		strconv.FormatInt(r.Warm.Milliseconds(), 10), strconv.FormatInt(r.Run.Milliseconds(), 10)}, disks...)
	out, err := ig.Exec(ctx, r.Warm+r.Run+3*time.Minute, argv...)
	if err != nil {
		return res, fmt.Errorf("randread: %w", err)
	}
	if res.MBps, res.IOs, err = ParseRandRead(out); err != nil {
		return res, err
	}
	if err := p.storageMemory(ctx, target, &res); err != nil {
		return res, err
	}
	return res, nil
}

// storageMemory reads tgtd's VmRSS and VmHWM and its cgroup's counters.
func (p *RDMAPair) storageMemory(ctx context.Context, target *RDMAGuest, res *StorageResult) error {
	out, err := target.Shell(ctx, "cat /proc/$(pidof tgtd)/status")
	if err != nil {
		return err
	}
	st := ParseKeyValues(out)
	res.RSSKiB, res.HWMKiB = st["VmRSS"], st["VmHWM"]
	if res.RSSKiB == 0 {
		return fmt.Errorf("no VmRSS of tgtd in %q", out)
	}
	return p.storageCgroupStat(ctx, target, res)
}

func (p *RDMAPair) storageCgroupStat(ctx context.Context, target *RDMAGuest, res *StorageResult) error {
	out, err := target.Shell(ctx, "cd "+storageCgroup+" && echo current $(cat memory.current) && cat memory.stat memory.events")
	if err != nil {
		return err
	}
	kv := ParseKeyValues(out)
	res.CgroupKiB, res.FileKiB, res.AnonKiB, res.OOMKills = kv["current"]>>10, kv["file"]>>10, kv["anon"]>>10, kv["oom_kill"]
	return nil
}

// storageNoStart tells a tgtd its cgroup killed (or that could not
// register its pool) from an error: the first is the run's outcome.
func (p *RDMAPair) storageNoStart(ctx context.Context, target *RDMAGuest, res *StorageResult, err error) error {
	time.Sleep(time.Second) // the OOM kill's event
	if serr := p.storageCgroupStat(ctx, target, res); serr != nil {
		return errors.Join(err, serr)
	}
	log, _ := target.Shell(ctx, "tail -n 5 "+workload.TgtdLog)
	mem, _ := target.Shell(ctx, "cd "+storageCgroup+" && echo max $(cat memory.max) peak $(cat memory.peak 2>/dev/null) && head -n 8 memory.stat")
	log += "; " + strings.Join(strings.Fields(mem), " ")
	alive, _ := target.Shell(ctx, "pidof tgtd || true")
	// tgtd sets its oom_score_adj to -1000: the cgroup's OOM killer runs
	// (oom_kill counts) but finds no victim, and the registration fails.
	switch {
	case strings.Contains(log, "reg_mr") || strings.Contains(log, "register"):
		res.NoStart = fmt.Sprintf("tgtd could not register its pool (%d OOM kills): %s", res.OOMKills, strings.ReplaceAll(log, "\n", "; "))
	case res.OOMKills > 0:
		res.NoStart = fmt.Sprintf("tgtd OOM-killed in its cgroup (%d kills; %s)", res.OOMKills, strings.ReplaceAll(log, "\n", "; "))
	case alive == "":
		res.NoStart = "tgtd exited: " + strings.ReplaceAll(log, "\n", "; ")
	default:
		return fmt.Errorf("%w (tgtd log: %s)", err, log)
	}
	return nil
}

// storageTeardown logs out of every session, stops iscsid, waits for
// tgtd to let go of the connections, deletes the targets and tgtd's
// system (or kills a tgtd that does not answer) and removes the cgroup.
func (p *RDMAPair) storageTeardown(ctx context.Context, target, initiator *RDMAGuest, tg workload.GuestRunner, tgtd, iscsid *workload.GuestDaemon, ss []workload.ISER) error {
	var errs []error
	s := ss[0]
	ini := strings.Join([]string{
		workload.ISCSIADM + " -m node -u > /dev/null 2>&1 || true",
		workload.ISCSIADM + " -m node -o delete > /dev/null 2>&1 || true",
		fmt.Sprintf("%s -m discoverydb -t st -p %s -I iser -o delete > /dev/null 2>&1 || true", workload.ISCSIADM, s.Portal()),
		"if pidof iscsid > /dev/null; then " + workload.ISCSIADM + " -k 0 || true; fi",
	}, "\n")
	if _, err := initiator.Shell(ctx, ini); err != nil {
		errs = append(errs, err)
	}
	if err := iscsid.Wait(ctx, 30*time.Second, 128+15); err != nil {
		_, _ = initiator.Signal(ctx, 9, "iscsid")
	}
	if !tgtd.Exited() {
		err := tgtd.WaitFor(ctx, 60*time.Second, workload.CMIDsScript, func(out string, _ int) error { return workload.TgtdIdle(out) })
		if err == nil {
			var del []string
			for _, x := range ss {
				del = append(del, fmt.Sprintf("%s --lld iser --mode target --op delete --force --tid %d || true", workload.TGTADM, x.TID))
			}
			del = append(del, workload.TGTADM+" --op delete --mode system")
			_, err = tg.Shell(ctx, strings.Join(del, "\n"))
		}
		if err == nil {
			err = tgtd.Wait(ctx, 30*time.Second)
		}
		if err != nil {
			errs = append(errs, err)
			_, _ = target.Signal(ctx, 9, "tgtd")
		}
	}
	// The cgroup goes once empty: whatever is left in it (the shell that
	// ran a tgtd the OOM killer took) is killed first.
	_, _ = target.Shell(ctx, "if [ -e "+storageCgroup+"/cgroup.procs ]; then for p in $(cat "+storageCgroup+"/cgroup.procs); do kill -9 $p; done; fi; true")
	var rmErr error
	for range 20 {
		if _, rmErr = target.Shell(ctx, "if [ -d "+storageCgroup+" ]; then rm "+storageCgroup+"; fi"); rmErr == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if rmErr != nil {
		errs = append(errs, rmErr)
	}
	return errors.Join(errs...)
}
