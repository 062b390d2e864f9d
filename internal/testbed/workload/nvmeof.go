package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// NVMe over Fabrics (RDMA) between two guests, set up as a user sets it
// up: the target (nvmet-rdma) through configfs, a subsystem that lets any
// host in with one namespace on a RAM disk (brd's /dev/ram0, 16 MiB) and
// an RDMA port on the target's address; the host (nvme-rdma) with
// nvme-cli's discover, connect and disconnect. The data goes through the
// namespace with coreutils' dd and O_DIRECT, so that every block crosses
// the fabric: written by the host, read back by the host, and read by the
// target from the RAM disk itself, each compared by SHA-256 with what
// /dev/urandom gave. Every failure carries the guest's kernel log tail.

// NVMeoFModulesTarget and NVMeoFModulesHost are the modules each side
// loads (the image's loader adds their dependencies: nvmet and configfs,
// nvme_fabrics and nvme_core, rdma_cm and ib_core).
var (
	NVMeoFModulesTarget = []string{"configfs", "nvmet_rdma", "brd"}
	NVMeoFModulesHost   = []string{"nvme_rdma"}
)

// NVMeoFPort is NVMe over Fabrics' RDMA port (trsvcid), IANA's 4420.
const NVMeoFPort = 4420

// nvmetRoot is nvmet's configfs tree.
const nvmetRoot = "/sys/kernel/config/nvmet"

// NVMeoF is one subsystem exported by a target guest to a host guest.
type NVMeoF struct {
	// NQN names the subsystem.
	NQN string
	// Addr is the target's IPv4 address (traddr), the port Port
	// (trsvcid, default NVMeoFPort).
	Addr string
	Port int
	// PortID is the target's configfs port (default 1).
	PortID int
	// Device backs namespace 1 (default /dev/ram0).
	Device string
	// KeepAlive is the host's keep-alive timeout (nvme connect -k);
	// 0: nvme-cli's default.
	KeepAlive time.Duration
}

func (n NVMeoF) port() int {
	if n.Port == 0 {
		return NVMeoFPort
	}
	return n.Port
}

func (n NVMeoF) portID() int {
	if n.PortID == 0 {
		return 1
	}
	return n.PortID
}

// BackingDevice is the target's block device behind namespace 1.
func (n NVMeoF) BackingDevice() string {
	if n.Device == "" {
		return "/dev/ram0"
	}
	return n.Device
}

// Validate refuses what the guest scripts could not quote plainly.
func (n NVMeoF) Validate() error {
	if !nqnRE.MatchString(n.NQN) {
		return fmt.Errorf("nvmeof: NQN %q: want nqn.YYYY-MM.DOMAIN:NAME of [A-Za-z0-9.:_-]", n.NQN)
	}
	if !plainRE.MatchString(n.Addr) || !plainRE.MatchString(n.BackingDevice()) {
		return fmt.Errorf("nvmeof: address %q or device %q is not plain", n.Addr, n.BackingDevice())
	}
	return nil
}

var (
	nqnRE   = regexp.MustCompile(`^nqn\.[0-9]{4}-[0-9]{2}\.[A-Za-z0-9.:_-]+$`)
	plainRE = regexp.MustCompile(`^[A-Za-z0-9./_:-]+$`)
)

// TargetSetupScript exports the subsystem: configfs mounted if the init
// did not, the subsystem with allow_any_host, namespace 1 on the device,
// the RDMA port, and the link that enables the port (nvmet-rdma binds and
// listens on its rdma_cm ID then). Each attribute is written in one
// write(2) (configfs hands every write to the attribute on its own, and
// u-root's shell writes echo's newline apart: nvmet refuses a lone "\n")
// and read back (read, the shell's builtin, as echo is: no process per
// attribute), since the builtin echo does not fail on a refused write.
func (n NVMeoF) TargetSetupScript() string {
	sub := nvmetRoot + "/subsystems/" + n.NQN
	port := fmt.Sprintf("%s/ports/%d", nvmetRoot, n.portID())
	lines := []string{
		"set -e",
		`attr() { echo -n "$2" > "$1"; read -r v < "$1"; if [ "$v" != "$2" ]; then echo "$1: wrote $2, reads $v" >&2; exit 1; fi; }`,
		"if [ ! -d " + nvmetRoot + " ]; then mount -t configfs none /sys/kernel/config; fi",
		"mkdir " + sub,
	}
	for _, a := range [][2]string{
		{sub + "/attr_allow_any_host", "1"},
		{"mkdir", sub + "/namespaces/1"},
		{sub + "/namespaces/1/device_path", n.BackingDevice()},
		{sub + "/namespaces/1/enable", "1"},
		{"mkdir", port},
		{port + "/addr_trtype", "rdma"},
		{port + "/addr_adrfam", "ipv4"},
		{port + "/addr_traddr", n.Addr},
		{port + "/addr_trsvcid", strconv.Itoa(n.port())},
	} {
		if a[0] == "mkdir" {
			lines = append(lines, "mkdir "+a[1])
		} else {
			lines = append(lines, "attr "+a[0]+" "+a[1])
		}
	}
	return strings.Join(append(lines, "ln -s "+sub+" "+port+"/subsystems/"+n.NQN), "\n")
}

// TargetTeardownScript takes the export down in reverse order: the port's
// link (nvmet-rdma stops listening and closes its queues), the port, the
// namespace, the subsystem. It removes what exists and goes on past what
// does not, so it also cleans up after a set-up that failed half-way.
// (u-root's rm removes an empty directory, and configfs's directories
// count as empty once their children are gone.)
func (n NVMeoF) TargetTeardownScript() string {
	sub := nvmetRoot + "/subsystems/" + n.NQN
	port := fmt.Sprintf("%s/ports/%d", nvmetRoot, n.portID())
	return strings.Join([]string{
		"rc=0",
		"if [ -e " + port + "/subsystems/" + n.NQN + " ]; then rm " + port + "/subsystems/" + n.NQN + " || rc=1; fi",
		"if [ -d " + port + " ]; then rm " + port + " || rc=1; fi",
		"if [ -d " + sub + "/namespaces/1 ]; then echo -n 0 > " + sub + "/namespaces/1/enable; rm " + sub + "/namespaces/1 || rc=1; fi",
		"if [ -d " + sub + " ]; then rm " + sub + " || rc=1; fi",
		"exit $rc",
	}, "\n")
}

// DiscoverArgs asks the target's discovery controller for its log page,
// in JSON, as hostnqn and hostid.
func (n NVMeoF) DiscoverArgs(hostNQN, hostID string) []string {
	return []string{"nvme", "discover", "-t", "rdma", "-a", n.Addr, "-s", strconv.Itoa(n.port()),
		"--hostnqn=" + hostNQN, "--hostid=" + hostID, "-o", "json"}
}

// ConnectArgs connects the host to the subsystem, as hostnqn and hostid.
func (n NVMeoF) ConnectArgs(hostNQN, hostID string) []string {
	a := []string{"nvme", "connect", "-t", "rdma", "-a", n.Addr, "-s", strconv.Itoa(n.port()), "-n", n.NQN,
		"--hostnqn=" + hostNQN, "--hostid=" + hostID}
	if n.KeepAlive > 0 {
		a = append(a, "-k", strconv.Itoa(int(n.KeepAlive/time.Second)))
	}
	return a
}

// DisconnectArgs disconnects every controller of the subsystem.
func (n NVMeoF) DisconnectArgs() []string {
	return []string{"nvme", "disconnect", "-n", n.NQN}
}

// NamespaceScript prints the host's block device of the subsystem's
// namespaces (/dev/nvmeXnY, one a line): every disk whose device (the
// subsystem's head with native multipath, else the controller) has the
// NQN, leaving out the hidden per-path disks (nvmeXcYnZ).
func (n NVMeoF) NamespaceScript() string {
	return `for b in /sys/block/nvme*; do
  d=${b##*/}
  case $d in nvme*c*) continue;; esac
  if [ -f $b/device/subsysnqn ] && [ "$(cat $b/device/subsysnqn)" = "` + n.NQN + `" ]; then echo /dev/$d; fi
done`
}

// NVMeoFDiscovery is one entry of a discovery log page (nvme discover -o
// json's "records").
type NVMeoFDiscovery struct {
	TrType  string `json:"trtype"`
	AdrFam  string `json:"adrfam"`
	SubType string `json:"subtype"`
	TrSvcID string `json:"trsvcid"`
	SubNQN  string `json:"subnqn"`
	TrAddr  string `json:"traddr"`
	QPType  string `json:"rdma_qptype"`
	CMS     string `json:"rdma_cms"`
}

// ParseNVMeDiscover reads nvme discover -o json's records.
func ParseNVMeDiscover(out string) ([]NVMeoFDiscovery, error) {
	var log struct {
		Records []NVMeoFDiscovery `json:"records"`
	}
	if err := json.Unmarshal([]byte(out), &log); err != nil {
		return nil, fmt.Errorf("nvme discover's JSON: %w: %q", err, out)
	}
	return log.Records, nil
}

// Find is the entry of the subsystem n exports over RDMA, if the log has
// it.
func (n NVMeoF) Find(recs []NVMeoFDiscovery) (NVMeoFDiscovery, bool) {
	for _, r := range recs {
		if r.SubNQN == n.NQN && r.TrType == "rdma" && r.AdrFam == "ipv4" && r.TrAddr == n.Addr &&
			strings.TrimSpace(r.TrSvcID) == strconv.Itoa(n.port()) && r.SubType == "nvme subsystem" {
			return r, true
		}
	}
	return NVMeoFDiscovery{}, false
}

// disconnectedRE is nvme disconnect's report.
var disconnectedRE = regexp.MustCompile(`disconnected (\d+) controller`)

// ParseNVMeDisconnect reads how many controllers nvme disconnect says it
// disconnected.
func ParseNVMeDisconnect(out string) (int, error) {
	m := disconnectedRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("nvme disconnect printed no count: %q", out)
	}
	return strconv.Atoi(m[1])
}

// DD is one GNU dd run's summary ("N bytes (...) copied, S s, R MB/s").
type DD struct {
	Bytes   int64
	Seconds float64
}

// MBs is its rate in MB/s (10^6 bytes).
func (d DD) MBs() float64 {
	if d.Seconds <= 0 {
		return 0
	}
	return float64(d.Bytes) / d.Seconds / 1e6
}

var ddRE = regexp.MustCompile(`(?m)^(\d+) bytes .*copied, ([0-9.e+-]+) s,`)

// ParseDD reads the last summary line GNU dd printed (on stderr).
func ParseDD(out string) (DD, error) {
	m := ddRE.FindAllStringSubmatch(out, -1)
	if m == nil {
		return DD{}, fmt.Errorf("no dd summary in %q", out)
	}
	last := m[len(m)-1]
	b, err := strconv.ParseInt(last[1], 10, 64)
	if err != nil {
		return DD{}, err
	}
	s, err := strconv.ParseFloat(last[2], 64)
	if err != nil {
		return DD{}, err
	}
	return DD{Bytes: b, Seconds: s}, nil
}

// GNUDD is coreutils' dd in the RDMA image: u-root's has no O_DIRECT.
const GNUDD = "/usr/bin/dd"

// NVMeoFExtent is one range of the namespace the check writes: Count
// blocks of BS bytes from block Seek (in BS units). iSER's check writes
// its disk the same way (ISERExtents).
type NVMeoFExtent struct {
	Name            string
	BS, Count, Seek int
	// Prefix names the guest's files, /tmp/PREFIX-NAME (default
	// "nvmeof").
	Prefix string
}

// file is the pattern's file in the guest.
func (e NVMeoFExtent) file() string {
	if e.Prefix == "" {
		return "/tmp/nvmeof-" + e.Name
	}
	return "/tmp/" + e.Prefix + "-" + e.Name
}

// Bytes is the extent's length.
func (e NVMeoFExtent) Bytes() int64 { return int64(e.BS) * int64(e.Count) }

// NVMeoFExtents are what nvmeof's check writes and reads: 4 MiB in 1 MiB
// commands (the host registers each buffer, and the target moves it with
// RDMA READ and WRITE), then 256 KiB in 4 KiB commands beyond it (a 4 KiB
// write fits the port's in-capsule data, a SEND; its read is an RDMA WRITE
// into one registered page).
var NVMeoFExtents = []NVMeoFExtent{
	{Name: "1MiB", BS: 1 << 20, Count: 4, Seek: 0},
	{Name: "4KiB", BS: 4096, Count: 64, Seek: 4 << 20 / 4096},
}

// WriteScript fills /tmp/nvmeof-NAME with random bytes, the extent's
// length, writes it to dev, O_DIRECT, one command per block, and waits
// for the device to have it (fsync). It prints dd's summary, then the
// pattern's SHA-256 on the last line.
func (e NVMeoFExtent) WriteScript(dev string) string {
	f := e.file()
	return fmt.Sprintf("set -e\n%s if=/dev/urandom of=%s bs=%d count=%d status=none\n"+
		"%s if=%s of=%s bs=%d count=%d seek=%d oflag=direct conv=fsync,notrunc 2>&1\nsha256sum %s",
		GNUDD, f, e.BS, e.Count, GNUDD, f, dev, e.BS, e.Count, e.Seek, f)
}

// ReadScript reads the extent from dev, O_DIRECT, into /tmp/nvmeof-NAME.read
// and prints dd's summary, then the copy's SHA-256 on the last line.
func (e NVMeoFExtent) ReadScript(dev string) string {
	f := e.file() + ".read"
	return fmt.Sprintf("set -e\n%s if=%s of=%s bs=%d count=%d skip=%d iflag=direct 2>&1\nsha256sum %s\nrm %s",
		GNUDD, dev, f, e.BS, e.Count, e.Seek, f, f)
}

// ParseSHA256 reads the hash sha256sum printed on out's last line.
func ParseSHA256(out string) (string, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) == 0 || len(f[0]) != 64 || strings.Trim(f[0], "0123456789abcdef") != "" {
		return "", fmt.Errorf("no SHA-256 in %q", out)
	}
	return f[0], nil
}

// GuestRunner runs what the NVMe-oF steps need in one guest.
type GuestRunner struct {
	VM *vm.VM
	// Name labels the guest in errors ("npfnic target", ...).
	Name string
}

// Shell runs a script and returns what it printed, stdout then stderr; a
// non-zero exit is an error that carries it.
func (g GuestRunner) Shell(ctx context.Context, script string) (string, error) {
	r, err := g.VM.Run(ctx, script)
	if err != nil {
		return "", fmt.Errorf("%s: %w", g.Name, err)
	}
	if r.Exit != 0 || r.TimedOut {
		return r.Stdout, fmt.Errorf("%s: %q: exit %d (timed out %v): %s%s", g.Name, script, r.Exit, r.TimedOut, r.Stdout, r.Stderr)
	}
	return r.Stdout + r.Stderr, nil
}

// Exec runs a program, killed after limit, as Shell runs a script.
func (g GuestRunner) Exec(ctx context.Context, limit time.Duration, argv ...string) (string, error) {
	r, err := g.VM.ExecWithin(ctx, limit, argv...)
	if err != nil {
		return "", fmt.Errorf("%s: %w", g.Name, err)
	}
	out := r.Stdout + r.Stderr
	if r.Exit != 0 || r.TimedOut {
		return out, fmt.Errorf("%s: %s: exit %d (timed out %v): %s", g.Name, strings.Join(argv, " "), r.Exit, r.TimedOut, out)
	}
	return out, nil
}

// Dmesg is the guest's kernel log, one entry a line.
func (g GuestRunner) Dmesg(ctx context.Context) ([]string, error) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r, err := g.VM.Run(dctx, "dmesg")
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n"), nil
}

// DmesgTail is the guest's last n kernel log lines, indented, or why
// there are none.
func (g GuestRunner) DmesgTail(ctx context.Context, n int) string {
	lines, err := g.Dmesg(ctx)
	if err != nil {
		return "    (dmesg: " + err.Error() + ")"
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// WaitNamespace polls the host (every 200 ms, up to limit) until the
// subsystem's namespace has a block device, and returns it.
func (n NVMeoF) WaitNamespace(ctx context.Context, g GuestRunner, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		out, err := g.Shell(ctx, n.NamespaceScript())
		if err != nil {
			return "", err
		}
		if devs := strings.Fields(out); len(devs) == 1 {
			return devs[0], nil
		} else if len(devs) > 1 {
			return "", fmt.Errorf("%s: subsystem %s has %d namespaces, want 1: %v", g.Name, n.NQN, len(devs), devs)
		}
		if time.Now().After(deadline) {
			ls, _ := g.Shell(ctx, "ls /sys/block /sys/class/nvme /sys/class/nvme-subsystem")
			return "", fmt.Errorf("%s: no block device of %s after %v:\n%s", g.Name, n.NQN, limit, ls)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
