package workload

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// iSER (iSCSI Extensions for RDMA) between two guests, set up as a user
// sets it up. The target is tgt's user-space daemon (tgtd, its iSER
// driver built in over librdmacm and libibverbs), configured with tgtadm:
// one target with one LUN on a block device (brd's RAM disk by default),
// open to the initiator. The initiator is Linux's own iSER (ib_iser, a
// kernel ULP that registers every command's buffer with a fast
// registration work request) driven by open-iscsi: iscsid, and iscsiadm's
// SendTargets discovery, login and logout through the built-in "iser"
// iface. The session's SCSI disk is then written and read with coreutils'
// dd and O_DIRECT (ISERExtents), and the target's device read directly,
// each compared by SHA-256 with the pattern. The daemons run in the
// foreground of their guests (GuestDaemon), their logs in files that a
// failure reports.
//
// The image has no iscsi_tcp: a session can only be iSER. The check of
// `iscsiadm -m session` (ISCSISession.Transport) says so all the same.

// ISERModulesTarget and ISERModulesInitiator are the kernel modules each
// side loads (the image's loader adds libiscsi, scsi_transport_iscsi,
// scsi_mod and the rest; tgt's target runs in user space).
var (
	ISERModulesTarget    = []string{"brd"}
	ISERModulesInitiator = []string{"ib_iser", "sd_mod"}
)

// ISERPort is iSCSI's port (and tgt's iSER listener's rdma_cm port).
const ISERPort = 3260

// Guest paths of the programs and their files.
const (
	TGTD     = "/usr/sbin/tgtd"
	TGTADM   = "/usr/sbin/tgtadm"
	ISCSID   = "/usr/sbin/iscsid"
	ISCSIADM = "/usr/sbin/iscsiadm"

	// InitiatorNameFile is open-iscsi's identity of the initiator.
	InitiatorNameFile = "/etc/iscsi/initiatorname.iscsi"
	// TgtdLog and IscsidLog hold what the daemons print.
	TgtdLog   = "/tmp/iser-tgtd.log"
	IscsidLog = "/tmp/iser-iscsid.log"
)

// ISERMinPoolMiB is the smallest iSER buffer pool tgtd takes
// (pool_sz_mb; its default is 1024 MiB, registered as one memory region
// per device: as much as the guest's whole RAM).
const ISERMinPoolMiB = 128

// ISER is one target exported by a target guest to an initiator guest.
type ISER struct {
	// Target names the target (an IQN).
	Target string
	// Addr is the portal's address, the target guest's IPv4 address;
	// Port its port (default ISERPort).
	Addr string
	Port int
	// TID is the target's tgt id (default 1), LUN the logical unit of
	// the backing store (default 1; tgt's LUN 0 is its controller).
	TID, LUN int
	// Backing is the LUN's backing store (default /dev/ram0), BSType its
	// tgt backing-store type ("" for tgt's default, rdwr: pread and
	// pwrite through the target's page cache).
	Backing, BSType string
	// Initiator is the initiator's name (InitiatorName), which the
	// target's access list names.
	Initiator string
	// PoolMiB is tgtd's iSER buffer pool (default and least
	// ISERMinPoolMiB).
	PoolMiB int
}

func (s ISER) port() int {
	if s.Port == 0 {
		return ISERPort
	}
	return s.Port
}

func (s ISER) tid() int {
	if s.TID == 0 {
		return 1
	}
	return s.TID
}

// Lun is the logical unit of the backing store.
func (s ISER) Lun() int {
	if s.LUN == 0 {
		return 1
	}
	return s.LUN
}

// BackingStore is the target's backing store of the LUN.
func (s ISER) BackingStore() string {
	if s.Backing == "" {
		return "/dev/ram0"
	}
	return s.Backing
}

func (s ISER) poolMiB() int {
	return max(s.PoolMiB, ISERMinPoolMiB)
}

// Portal is the target's portal, ADDR:PORT.
func (s ISER) Portal() string {
	return s.Addr + ":" + strconv.Itoa(s.port())
}

var (
	iqnRE    = regexp.MustCompile(`^iqn\.[0-9]{4}-[0-9]{2}\.[a-z0-9.-]+(:[A-Za-z0-9.:_-]+)?$`)
	ipv4RE   = regexp.MustCompile(`^[0-9]{1,3}(\.[0-9]{1,3}){3}$`)
	bstypeRE = regexp.MustCompile(`^[a-z]*$`)
)

// Validate refuses what the guest scripts could not quote plainly.
func (s ISER) Validate() error {
	if !iqnRE.MatchString(s.Target) || !iqnRE.MatchString(s.Initiator) {
		return fmt.Errorf("iser: target %q or initiator %q is not an iqn.YYYY-MM.DOMAIN[:NAME]", s.Target, s.Initiator)
	}
	if !ipv4RE.MatchString(s.Addr) || s.port() <= 0 || s.port() > 65535 {
		return fmt.Errorf("iser: portal %q: want an IPv4 address and a port", s.Portal())
	}
	if !plainRE.MatchString(s.BackingStore()) || !bstypeRE.MatchString(s.BSType) {
		return fmt.Errorf("iser: backing store %q (type %q) is not plain", s.BackingStore(), s.BSType)
	}
	if s.tid() < 1 || s.Lun() < 1 {
		return fmt.Errorf("iser: tid %d, LUN %d: want 1 or more (LUN 0 is tgt's controller)", s.tid(), s.Lun())
	}
	return nil
}

// TgtdArgs runs tgtd in the foreground (its log on stderr) with its iSER
// driver listening on the port. tgtd makes its control socket's
// directory, /var/run/tgtd, but not /var/run (TgtdScript does).
func (s ISER) TgtdArgs() []string {
	a := []string{TGTD, "-f", "--iser", fmt.Sprintf("pool_sz_mb=%d", s.poolMiB())}
	if s.port() != ISERPort {
		a[len(a)-1] += fmt.Sprintf(",port=%d", s.port())
	}
	return a
}

// TgtdScript makes /var/run and runs tgtd (TgtdArgs), its output in
// TgtdLog.
func (s ISER) TgtdScript() string {
	return "mkdir -p /var/run\n" + strings.Join(s.TgtdArgs(), " ") + " > " + TgtdLog + " 2>&1"
}

// TgtdReadyScript prints tgtd's system state (tgtadm answers once tgtd
// serves its control socket) and then the rdma_cm IDs, among them the
// iSER listener's (ParseTgtLLDs, ParseCMIDs, TgtdReady).
func (s ISER) TgtdReadyScript() string {
	return TGTADM + " --lld iser --mode sys --op show\necho " + cmIDsMarker + "\nrdma resource show cm_id"
}

// cmIDsMarker separates tgtadm's answer from rdma's in TgtdReadyScript.
const cmIDsMarker = "== rdma cm_id"

// TgtdReady reads TgtdReadyScript's output: tgtd's iSER driver is ready
// and an rdma_cm ID of tgtd listens on the port. It says what is missing
// otherwise.
func (s ISER) TgtdReady(out string) error {
	sys, cm, _ := strings.Cut(out, cmIDsMarker)
	if st := ParseTgtLLDs(sys)["iser"]; st != "ready" {
		return fmt.Errorf("tgtd's iser driver is %q, not ready:\n%s", st, out)
	}
	for _, id := range ParseCMIDs(cm) {
		if id.State == "LISTEN" && id.Comm == "tgtd" && strings.HasSuffix(id.Src, ":"+strconv.Itoa(s.port())) {
			return nil
		}
	}
	return fmt.Errorf("tgtd has no rdma_cm ID listening on port %d:\n%s", s.port(), out)
}

// CMIDsScript prints the guest's rdma_cm IDs (ParseCMIDs, TgtdIdle).
const CMIDsScript = "rdma resource show cm_id"

// TgtdIdle reads CMIDsScript's output: tgtd holds no rdma_cm ID but its
// listeners. An initiator's logout disconnects at once, but tgtd lets go
// of the connection's ID (and its QP) only at the TIMEWAIT_EXIT event,
// later; deleting tgtd's system before then makes tgt 1.0.85 crash
// (SIGSEGV, seen when the teardown followed a logout at once). Wait for
// this before TargetTeardownScript.
func TgtdIdle(out string) error {
	var busy []string
	for _, id := range ParseCMIDs(out) {
		if id.Comm == "tgtd" && id.State != "LISTEN" {
			busy = append(busy, id.State+" "+id.Src+" "+id.Dst)
		}
	}
	if len(busy) > 0 {
		return fmt.Errorf("tgtd holds %d rdma_cm IDs of connections: %s", len(busy), strings.Join(busy, ", "))
	}
	return nil
}

// TargetSetupScript creates the target, its LUN on the backing store,
// and its access list: any address (ALL) and the initiator's name. tgt
// 1.0.85 (bookworm's) lets an iSER initiator in only if both lists admit
// it, where its TCP driver takes either (upstream fixed iSER's login in
// b73c64d, after 1.0.85): a target with no initiator name bound is "not
// found" over iSER, and its discovery lists nothing.
func (s ISER) TargetSetupScript() string {
	adm := fmt.Sprintf("%s --lld iser --mode", TGTADM)
	tid := strconv.Itoa(s.tid())
	lu := fmt.Sprintf("%s logicalunit --op new --tid %s --lun %d --backing-store %s", adm, tid, s.Lun(), s.BackingStore())
	if s.BSType != "" {
		lu += " --bstype " + s.BSType
	}
	return strings.Join([]string{
		"set -e",
		fmt.Sprintf("%s target --op new --tid %s --targetname %s", adm, tid, s.Target),
		lu,
		fmt.Sprintf("%s target --op bind --tid %s --initiator-address ALL", adm, tid),
		fmt.Sprintf("%s target --op bind --tid %s --initiator-name %s", adm, tid, s.Initiator),
		fmt.Sprintf("%s target --op show --tid %s", adm, tid),
	}, "\n")
}

// TargetTeardownScript deletes the target (forced: a session an
// initiator failed to end goes with it) and then tgtd's system, which
// makes tgtd exit. It goes on past what is gone already, so it also
// cleans up after a set-up that failed half-way.
func (s ISER) TargetTeardownScript() string {
	return strings.Join([]string{
		"rc=0",
		fmt.Sprintf("if %s --lld iser --mode target --op show --tid %d > /dev/null 2>&1; then %s --lld iser --mode target --op delete --force --tid %d || rc=1; fi",
			TGTADM, s.tid(), TGTADM, s.tid()),
		fmt.Sprintf("if [ -S /var/run/tgtd/socket.0 ] && pidof tgtd > /dev/null; then %s --op delete --mode system || rc=1; fi", TGTADM),
		"exit $rc",
	}, "\n")
}

// InitiatorSetupScript writes the initiator's name and makes the
// directories open-iscsi expects (its lock directory under /run, which
// u-root's init does not make).
func (s ISER) InitiatorSetupScript() string {
	return strings.Join([]string{
		"set -e",
		"mkdir -p /run/lock/iscsi /etc/iscsi",
		fmt.Sprintf("echo InitiatorName=%s > %s", s.Initiator, InitiatorNameFile),
	}, "\n")
}

// IscsidScript runs iscsid in the foreground, its output in IscsidLog.
func (s ISER) IscsidScript() string {
	return ISCSID + " -f > " + IscsidLog + " 2>&1"
}

// IscsidReadyScript exits 0 once iscsid listens for iscsiadm (its
// abstract unix socket).
func (s ISER) IscsidReadyScript() string {
	return "grep -q ISCSIADM_ABSTRACT_NAMESPACE /proc/net/unix"
}

// DiscoverArgs runs SendTargets discovery at the portal over iSER (the
// "iser" iface), which also records the nodes found for that iface.
func (s ISER) DiscoverArgs() []string {
	return []string{ISCSIADM, "-m", "discovery", "-t", "st", "-p", s.Portal(), "-I", "iser"}
}

// LoginArgs logs in to the target through the iser iface.
func (s ISER) LoginArgs() []string {
	return []string{ISCSIADM, "-m", "node", "-T", s.Target, "-p", s.Portal(), "-I", "iser", "--login"}
}

// LogoutArgs logs out of the target's sessions through the iser iface.
func (s ISER) LogoutArgs() []string {
	return []string{ISCSIADM, "-m", "node", "-T", s.Target, "-p", s.Portal(), "-I", "iser", "--logout"}
}

// SessionArgs lists the initiator's sessions (ParseISCSISessions).
func (s ISER) SessionArgs() []string {
	return []string{ISCSIADM, "-m", "session"}
}

// InitiatorTeardownScript logs out of every session of the target, forgets
// the node and the discovery records, and stops iscsid (iscsiadm -k 0).
// It goes on past what is gone already.
func (s ISER) InitiatorTeardownScript() string {
	node := fmt.Sprintf("%s -m node -T %s -p %s -I iser", ISCSIADM, s.Target, s.Portal())
	return strings.Join([]string{
		"rc=0",
		"if " + ISCSIADM + " -m session 2> /dev/null | grep -q ' " + s.Target + "'; then " + node + " --logout || rc=1; fi",
		"if [ -d /etc/iscsi/nodes/" + s.Target + " ]; then " + node + " -o delete || rc=1; fi",
		fmt.Sprintf("if [ -d /etc/iscsi/send_targets/%s,%d ]; then %s -m discoverydb -t st -p %s -I iser -o delete || rc=1; fi",
			s.Addr, s.port(), ISCSIADM, s.Portal()),
		"if pidof iscsid > /dev/null; then " + ISCSIADM + " -k 0 || rc=1; fi",
		"exit $rc",
	}, "\n")
}

// DiskScript prints the block device of the session's LUN (/dev/sdX),
// nothing while the kernel has not scanned it yet.
func (s ISER) DiskScript(sid int) string {
	return fmt.Sprintf(`for b in /sys/class/iscsi_session/session%d/device/target*/*:*:*:%d/block/*; do
  if [ -e "$b" ]; then echo /dev/${b##*/}; fi
done`, sid, s.Lun())
}

// WaitDisk polls the initiator (every 200 ms, up to limit) until the
// session's LUN has a block device, and returns it.
func (s ISER) WaitDisk(ctx context.Context, g GuestRunner, sid int, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		out, err := g.Shell(ctx, s.DiskScript(sid))
		if err != nil {
			return "", err
		}
		if devs := strings.Fields(out); len(devs) == 1 {
			return devs[0], nil
		} else if len(devs) > 1 {
			return "", fmt.Errorf("%s: session %d's LUN %d has %d disks: %v", g.Name, sid, s.Lun(), len(devs), devs)
		}
		if time.Now().After(deadline) {
			ls, _ := g.Shell(ctx, fmt.Sprintf("ls -R /sys/class/iscsi_session/session%d/device/; ls /sys/block", sid))
			return "", fmt.Errorf("%s: no disk of session %d's LUN %d after %v:\n%s", g.Name, sid, s.Lun(), limit, ls)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ISERExtents are what iSER's check writes and reads: 4 MiB in 1 MiB
// commands (ib_iser splits them at its 512 KiB limit, registers each
// buffer, and tgt moves it with RDMA READ and WRITE: tgt's iSER target
// asks for no immediate or unsolicited data), then 256 KiB in 4 KiB
// commands beyond it.
var ISERExtents = []NVMeoFExtent{
	{Name: "1MiB", BS: 1 << 20, Count: 4, Seek: 0, Prefix: "iser"},
	{Name: "4KiB", BS: 4096, Count: 64, Seek: 4 << 20 / 4096, Prefix: "iser"},
}

// SendTarget is one target SendTargets discovery found (iscsiadm -m
// discovery's "ADDR:PORT,TPGT IQN").
type SendTarget struct {
	Portal string // ADDR:PORT
	TPGT   int
	Target string
}

// portalRE is "ADDR:PORT,TPGT" with an IPv4 address, a host name or a
// bracketed IPv6 address.
var portalRE = regexp.MustCompile(`^(\[[0-9A-Fa-f:.]+\]|[^\s:,\[\]]+):(\d+),(-?\d+)$`)

func parsePortal(s string) (portal string, tpgt int, ok bool) {
	m := portalRE.FindStringSubmatch(s)
	if m == nil {
		return "", 0, false
	}
	tpgt, err := strconv.Atoi(m[3])
	if err != nil {
		return "", 0, false
	}
	return m[1] + ":" + m[2], tpgt, true
}

// ParseSendTargets reads iscsiadm -m discovery's records; any other line
// (a warning) is left out.
func ParseSendTargets(out string) []SendTarget {
	var ts []SendTarget
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || !strings.HasPrefix(f[1], "iqn.") && !strings.HasPrefix(f[1], "eui.") && !strings.HasPrefix(f[1], "naa.") {
			continue
		}
		if p, tpgt, ok := parsePortal(f[0]); ok {
			ts = append(ts, SendTarget{Portal: p, TPGT: tpgt, Target: f[1]})
		}
	}
	return ts
}

// Found is the record of the target at the portal, if discovery listed it.
func (s ISER) Found(ts []SendTarget) (SendTarget, bool) {
	for _, t := range ts {
		if t.Target == s.Target && t.Portal == s.Portal() {
			return t, true
		}
	}
	return SendTarget{}, false
}

// ISCSISession is one line of iscsiadm -m session:
// "TRANSPORT: [SID] ADDR:PORT,TPGT IQN (non-flash)".
type ISCSISession struct {
	Transport string
	SID       int
	Portal    string
	TPGT      int
	Target    string
}

var sessionRE = regexp.MustCompile(`^(\S+): \[(\d+)\] (\S+) (\S+)(?: \((?:non-)?flash\))?$`)

// ParseISCSISessions reads iscsiadm -m session. Its "No active sessions."
// (on stderr, exit 21) is no session and no error; a line it cannot read
// is an error.
func ParseISCSISessions(out string) ([]ISCSISession, error) {
	var ss []ISCSISession
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.Contains(l, "No active sessions") {
			continue
		}
		m := sessionRE.FindStringSubmatch(l)
		if m == nil {
			return nil, fmt.Errorf("iscsiadm -m session: cannot read %q", l)
		}
		sid, _ := strconv.Atoi(m[2])
		p, tpgt, ok := parsePortal(m[3])
		if !ok {
			return nil, fmt.Errorf("iscsiadm -m session: bad portal in %q", l)
		}
		ss = append(ss, ISCSISession{Transport: m[1], SID: sid, Portal: p, TPGT: tpgt, Target: m[4]})
	}
	return ss, nil
}

// Session is the target's one session at the portal. It is an error if
// there is none, more than one, or one that is not iSER.
func (s ISER) Session(ss []ISCSISession) (ISCSISession, error) {
	var found []ISCSISession
	for _, x := range ss {
		if x.Target == s.Target && x.Portal == s.Portal() {
			found = append(found, x)
		}
	}
	if len(found) != 1 {
		return ISCSISession{}, fmt.Errorf("%d sessions of %s at %s, want 1: %+v", len(found), s.Target, s.Portal(), ss)
	}
	if found[0].Transport != "iser" {
		return found[0], fmt.Errorf("the session of %s at %s runs over %q, not iser", s.Target, s.Portal(), found[0].Transport)
	}
	return found[0], nil
}

// ParseTgtLLDs reads the "LLDs:" section of tgtadm --mode sys --op show:
// each low-level driver's state ("iscsi: ready", "iser: ready").
func ParseTgtLLDs(out string) map[string]string {
	lld := map[string]string{}
	in := false
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case t == "LLDs:":
			in = true
		case in && strings.HasPrefix(l, " ") && strings.Contains(t, ": "):
			k, v, _ := strings.Cut(t, ": ")
			lld[k] = strings.TrimSpace(v)
		default:
			in = false
		}
	}
	return lld
}

// CMID is one rdma_cm ID (rdma resource show cm_id).
type CMID struct {
	Link, State, PS, Comm, Src, Dst string
	PID                             int
}

// ParseCMIDs reads rdma resource show cm_id: "link DEV/PORT cm-idn N state
// S ps P pid N comm C src-addr A dst-addr A".
func ParseCMIDs(out string) []CMID {
	var ids []CMID
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "link" {
			continue
		}
		var id CMID
		for i := 0; i+1 < len(f); i += 2 {
			v := f[i+1]
			switch f[i] {
			case "link":
				id.Link = v
			case "state":
				id.State = v
			case "ps":
				id.PS = v
			case "pid":
				id.PID, _ = strconv.Atoi(v)
			case "comm":
				id.Comm = v
			case "src-addr":
				id.Src = v
			case "dst-addr":
				id.Dst = v
			}
		}
		ids = append(ids, id)
	}
	return ids
}

// iscsiadmNoObjects is iscsiadm's exit status when there is nothing to
// list (ISCSI_ERR_NO_OBJS_FOUND): "No active sessions."
const iscsiadmNoObjects = 21

// Sessions lists the initiator's sessions (iscsiadm -m session); none is
// no error.
func (s ISER) Sessions(ctx context.Context, g GuestRunner) ([]ISCSISession, error) {
	r, err := g.VM.ExecWithin(ctx, 30*time.Second, s.SessionArgs()...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", g.Name, err)
	}
	if (r.Exit != 0 && r.Exit != iscsiadmNoObjects) || r.TimedOut {
		return nil, fmt.Errorf("%s: iscsiadm -m session: exit %d (timed out %v): %s%s", g.Name, r.Exit, r.TimedOut, r.Stdout, r.Stderr)
	}
	return ParseISCSISessions(r.Stdout)
}
