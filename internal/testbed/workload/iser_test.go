package workload

import (
	"reflect"
	"strings"
	"testing"
)

func testISER() ISER {
	return ISER{Target: "iqn.2024-01.io.npfnic:iser-test", Addr: "10.81.0.1", Initiator: "iqn.2024-01.io.npfnic:initiator"}
}

func TestISERValidate(t *testing.T) {
	if err := testISER().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*ISER){
		"target":    func(s *ISER) { s.Target = "iqn.2024-01.io.npfnic:a b" },
		"initiator": func(s *ISER) { s.Initiator = "" },
		"nqn":       func(s *ISER) { s.Target = "nqn.2014-08.io.npfnic:x" },
		"addr":      func(s *ISER) { s.Addr = "10.81.0.1; reboot" },
		"port":      func(s *ISER) { s.Port = 70000 },
		"backing":   func(s *ISER) { s.Backing = "/dev/ram0 /dev/ram1" },
		"bstype":    func(s *ISER) { s.BSType = "rdwr;x" },
		"lun":       func(s *ISER) { s.LUN = -1 },
	} {
		s := testISER()
		mod(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: %+v validated", name, s)
		}
	}
}

func TestISERDefaults(t *testing.T) {
	s := testISER()
	if s.Portal() != "10.81.0.1:3260" || s.Lun() != 1 || s.BackingStore() != "/dev/ram0" {
		t.Errorf("portal %s, LUN %d, backing %s", s.Portal(), s.Lun(), s.BackingStore())
	}
	if got, want := s.TgtdArgs(), []string{TGTD, "-f", "--iser", "pool_sz_mb=128"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tgtd %v, want %v", got, want)
	}
	s.Port, s.PoolMiB = 3261, 256
	if got := strings.Join(s.TgtdArgs(), " "); !strings.HasSuffix(got, "--iser pool_sz_mb=256,port=3261") {
		t.Errorf("tgtd %s", got)
	}
	s.PoolMiB = 16 // tgtd's least is 128
	if got := strings.Join(s.TgtdArgs(), " "); !strings.Contains(got, "pool_sz_mb=128,") {
		t.Errorf("tgtd %s", got)
	}
}

func TestISERScripts(t *testing.T) {
	s := testISER()
	setup := s.TargetSetupScript()
	for _, want := range []string{
		"set -e\n",
		TGTADM + " --lld iser --mode target --op new --tid 1 --targetname iqn.2024-01.io.npfnic:iser-test\n",
		TGTADM + " --lld iser --mode logicalunit --op new --tid 1 --lun 1 --backing-store /dev/ram0\n",
		"--op bind --tid 1 --initiator-address ALL\n",
		"--op bind --tid 1 --initiator-name iqn.2024-01.io.npfnic:initiator\n",
	} {
		if !strings.Contains(setup, want) {
			t.Errorf("target set-up lacks %q:\n%s", want, setup)
		}
	}
	s.BSType, s.Backing, s.LUN, s.TID = "aio", "/dev/ram1", 2, 3
	if setup := s.TargetSetupScript(); !strings.Contains(setup, "--op new --tid 3 --lun 2 --backing-store /dev/ram1 --bstype aio\n") {
		t.Errorf("target set-up:\n%s", setup)
	}
	s = testISER()
	td := s.TargetTeardownScript()
	if !strings.Contains(td, "--mode target --op delete --force --tid 1") || !strings.Contains(td, "--op delete --mode system") ||
		!strings.HasSuffix(td, "exit $rc") {
		t.Errorf("target teardown:\n%s", td)
	}
	if !strings.Contains(s.TgtdScript(), "mkdir -p /var/run\n"+TGTD+" -f --iser pool_sz_mb=128 > "+TgtdLog+" 2>&1") {
		t.Errorf("tgtd script: %s", s.TgtdScript())
	}
	if is := s.InitiatorSetupScript(); !strings.Contains(is, "mkdir -p /run/lock/iscsi /etc/iscsi") ||
		!strings.Contains(is, "echo InitiatorName=iqn.2024-01.io.npfnic:initiator > /etc/iscsi/initiatorname.iscsi") {
		t.Errorf("initiator set-up:\n%s", is)
	}
	for name, c := range map[string]struct{ got, want []string }{
		"discover": {s.DiscoverArgs(), []string{ISCSIADM, "-m", "discovery", "-t", "st", "-p", "10.81.0.1:3260", "-I", "iser"}},
		"login":    {s.LoginArgs(), []string{ISCSIADM, "-m", "node", "-T", "iqn.2024-01.io.npfnic:iser-test", "-p", "10.81.0.1:3260", "-I", "iser", "--login"}},
		"logout":   {s.LogoutArgs(), []string{ISCSIADM, "-m", "node", "-T", "iqn.2024-01.io.npfnic:iser-test", "-p", "10.81.0.1:3260", "-I", "iser", "--logout"}},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %v, want %v", name, c.got, c.want)
		}
	}
	it := s.InitiatorTeardownScript()
	for _, want := range []string{
		"grep -q ' iqn.2024-01.io.npfnic:iser-test'; then " + ISCSIADM + " -m node -T iqn.2024-01.io.npfnic:iser-test -p 10.81.0.1:3260 -I iser --logout || rc=1; fi",
		"-I iser -o delete || rc=1",
		"[ -d /etc/iscsi/send_targets/10.81.0.1,3260 ]; then " + ISCSIADM + " -m discoverydb -t st -p 10.81.0.1:3260 -I iser -o delete",
		ISCSIADM + " -k 0",
	} {
		if !strings.Contains(it, want) {
			t.Errorf("initiator teardown lacks %q:\n%s", want, it)
		}
	}
	if d := s.DiskScript(5); !strings.Contains(d, "/sys/class/iscsi_session/session5/device/target*/*:*:*:1/block/*") {
		t.Errorf("disk script:\n%s", d)
	}
	e := ISERExtents[1]
	if w := e.WriteScript("/dev/sda"); !strings.Contains(w, "/usr/bin/dd if=/tmp/iser-4KiB of=/dev/sda bs=4096 count=64 seek=1024 oflag=direct conv=fsync,notrunc") {
		t.Errorf("write script:\n%s", w)
	}
	if r := e.ReadScript("/dev/ram0"); !strings.Contains(r, "if=/dev/ram0 of=/tmp/iser-4KiB.read bs=4096 count=64 skip=1024 iflag=direct") {
		t.Errorf("read script:\n%s", r)
	}
}

func TestParseSendTargets(t *testing.T) {
	out := "iscsiadm: some warning\n10.81.0.1:3260,1 iqn.2024-01.io.npfnic:iser-test\n" +
		"[fe80::1]:3261,2 iqn.2024-01.io.npfnic:other\nnot a record\n"
	got := ParseSendTargets(out)
	want := []SendTarget{
		{Portal: "10.81.0.1:3260", TPGT: 1, Target: "iqn.2024-01.io.npfnic:iser-test"},
		{Portal: "[fe80::1]:3261", TPGT: 2, Target: "iqn.2024-01.io.npfnic:other"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	s := testISER()
	if st, ok := s.Found(got); !ok || st != want[0] {
		t.Errorf("found %+v %v", st, ok)
	}
	s.Addr = "10.81.0.2"
	if _, ok := s.Found(got); ok {
		t.Error("found a target at another portal")
	}
}

func TestParseISCSISessions(t *testing.T) {
	out := "iser: [5] 10.81.0.1:3260,1 iqn.2024-01.io.npfnic:iser-test (non-flash)\n" +
		"tcp: [6] 10.81.0.3:3260,1 iqn.2024-01.io.npfnic:iser-test (non-flash)\n"
	ss, err := ParseISCSISessions(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []ISCSISession{
		{Transport: "iser", SID: 5, Portal: "10.81.0.1:3260", TPGT: 1, Target: "iqn.2024-01.io.npfnic:iser-test"},
		{Transport: "tcp", SID: 6, Portal: "10.81.0.3:3260", TPGT: 1, Target: "iqn.2024-01.io.npfnic:iser-test"},
	}
	if !reflect.DeepEqual(ss, want) {
		t.Fatalf("%+v, want %+v", ss, want)
	}
	s := testISER()
	if got, err := s.Session(ss); err != nil || got != want[0] {
		t.Errorf("session %+v %v", got, err)
	}
	s.Addr = "10.81.0.3"
	if _, err := s.Session(ss); err == nil || !strings.Contains(err.Error(), `over "tcp", not iser`) {
		t.Errorf("a TCP session passed: %v", err)
	}
	s.Addr = "10.81.0.9"
	if _, err := s.Session(ss); err == nil {
		t.Error("no session passed")
	}
	if ss, err := ParseISCSISessions("iscsiadm: No active sessions.\n"); err != nil || len(ss) != 0 {
		t.Errorf("no sessions: %+v %v", ss, err)
	}
	if _, err := ParseISCSISessions("iscsiadm: garbage\n"); err == nil {
		t.Error("garbage parsed")
	}
}

// tgtadmSys is tgt 1.0.85's tgtadm --mode sys --op show, abridged.
const tgtadmSys = `System:
    State: ready
    debug: off
LLDs:
    iscsi: ready
    iser: error
Backing stores:
    rdwr (bsoflags sync:direct)
    aio
Device types:
    disk
`

// rdmaCMIDs is rdma resource show cm_id with tgtd listening.
const rdmaCMIDs = `link rxe0/- cm-idn 0 state LISTEN ps TCP pid 170 comm tgtd src-addr 0.0.0.0:3260 
link rxe0/- cm-idn 1 state LISTEN ps TCP pid 170 comm tgtd src-addr :::3260 
link rxe0/1 cm-idn 2 state CONNECT ps TCP comm [ib_iser] src-addr 10.81.0.2:40000 dst-addr 10.81.0.1:3260 
`

func TestParseTgtAndCMIDs(t *testing.T) {
	if got := ParseTgtLLDs(tgtadmSys); !reflect.DeepEqual(got, map[string]string{"iscsi": "ready", "iser": "error"}) {
		t.Errorf("LLDs %v", got)
	}
	ids := ParseCMIDs(rdmaCMIDs)
	if len(ids) != 3 || ids[0] != (CMID{Link: "rxe0/-", State: "LISTEN", PS: "TCP", PID: 170, Comm: "tgtd", Src: "0.0.0.0:3260"}) ||
		ids[2].Comm != "[ib_iser]" || ids[2].Dst != "10.81.0.1:3260" || ids[2].PID != 0 {
		t.Fatalf("%+v", ids)
	}
	s := testISER()
	ready := strings.Replace(tgtadmSys, "iser: error", "iser: ready", 1)
	if err := s.TgtdReady(ready + cmIDsMarker + "\n" + rdmaCMIDs); err != nil {
		t.Error(err)
	}
	if err := s.TgtdReady(tgtadmSys + cmIDsMarker + "\n" + rdmaCMIDs); err == nil || !strings.Contains(err.Error(), `"error"`) {
		t.Errorf("iser in error: %v", err)
	}
	if err := s.TgtdReady(ready + cmIDsMarker + "\n"); err == nil || !strings.Contains(err.Error(), "no rdma_cm ID listening") {
		t.Errorf("nothing listening: %v", err)
	}
	if err := TgtdIdle(rdmaCMIDs); err != nil {
		t.Errorf("listeners only: %v", err)
	}
	closing := rdmaCMIDs + "link rxe0/1 cm-idn 3 state DISCONNECT ps TCP pid 170 comm tgtd src-addr 10.81.0.1:3260 dst-addr 10.81.0.2:40000\n"
	if err := TgtdIdle(closing); err == nil || !strings.Contains(err.Error(), "1 rdma_cm IDs") {
		t.Errorf("a connection's ID: %v", err)
	}
	if !strings.Contains(s.TgtdReadyScript(), "rdma resource show cm_id") {
		t.Error(s.TgtdReadyScript())
	}
}
