package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/images"
)

// The tests run the command line in-process (run, as main does), with
// stdout and stderr captured and buildImages replaced by a fake: no test
// here builds an image or boots a guest.

// errFakeBuild is what the fake image build returns: a command that gets
// this far checked its command line and went on to its first expensive
// step.
var errFakeBuild = errors.New("fake image build")

// cli runs npfnic args in a temporary directory (default output folders
// land there) with the image cache in a folder that must stay absent,
// and returns the exit status, stdout, stderr and how often the images
// were built.
func cli(t *testing.T, args ...string) (status int, out, errOut string, builds int) {
	t.Helper()
	t.Chdir(t.TempDir())
	cache := filepath.Join(t.TempDir(), "cache")
	t.Setenv("NPFNIC_CACHE", cache)
	var o, e bytes.Buffer
	oldOut, oldErr, oldBuild := stdout, stderr, buildImages
	t.Cleanup(func() { stdout, stderr, buildImages = oldOut, oldErr, oldBuild })
	stdout, stderr = &o, &e
	buildImages = func(ctx context.Context, opt *images.Options) (*images.Artifacts, error) {
		builds++
		return nil, errFakeBuild
	}
	status = run(context.Background(), args)
	if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("npfnic %s: the image cache %s was touched", strings.Join(args, " "), cache)
	}
	return status, o.String(), e.String(), builds
}

// TestCommandTables: every name is listed once and in help's order, and
// each subcommand is reached through the dispatch and answers -h with its
// usage on stdout (flag.ErrHelp), without doing anything else.
func TestCommandTables(t *testing.T) {
	for _, tc := range []struct {
		table string
		cmds  []command
	}{
		{"commands", commands},
		{"experiments", experiments},
	} {
		var names []string
		for _, c := range tc.cmds {
			names = append(names, c.name)
			if c.run == nil || c.summary == "" {
				t.Errorf("%s: %q has no run function or no summary", tc.table, c.name)
			}
		}
		if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
			t.Errorf("%s: names %v: want each once, sorted", tc.table, names)
		}
	}
	if _, ok := lookup(commands, "nope"); ok {
		t.Error("lookup found a command that does not exist")
	}
}

// paths are every command path: "boot", ..., "exp cold-ring", ...
func paths() [][]string {
	var ps [][]string
	for _, c := range commands {
		ps = append(ps, []string{c.name})
	}
	for _, e := range experiments {
		ps = append(ps, []string{"exp", e.name})
	}
	return ps
}

// TestHelp: -h, -help, --help and "help CMD" print the usage of npfnic,
// of every command and of every experiment on stdout, nothing on stderr,
// and exit 0.
func TestHelp(t *testing.T) {
	type tc struct {
		args []string
		want string // the usage's first line starts with it
	}
	tcs := []tc{
		{[]string{"-h"}, "usage: npfnic COMMAND"},
		{[]string{"--help"}, "usage: npfnic COMMAND"},
		{[]string{"help"}, "usage: npfnic COMMAND"},
		{[]string{"help", "-h"}, "usage: npfnic COMMAND"},
		{[]string{"exp", "-h"}, "usage: npfnic exp NAME"},
		{[]string{"exp", "--help"}, "usage: npfnic exp NAME"},
		{[]string{"exp", "help"}, "usage: npfnic exp NAME"},
		{[]string{"help", "exp"}, "usage: npfnic exp NAME"},
	}
	for _, p := range paths() {
		if p[0] == "exp" && len(p) == 1 {
			continue // the list of experiments, above
		}
		want := "usage: npfnic " + strings.Join(p, " ")
		for _, h := range []string{"-h", "-help", "--help"} {
			tcs = append(tcs, tc{append(slices.Clone(p), h), want})
		}
		tcs = append(tcs, tc{append([]string{"help"}, p...), want})
		if p[0] == "exp" {
			tcs = append(tcs, tc{[]string{"exp", "help", p[1]}, want})
		}
	}
	for _, tc := range tcs {
		status, out, errOut, builds := cli(t, tc.args...)
		name := strings.Join(tc.args, " ")
		if status != 0 || errOut != "" || builds != 0 {
			t.Errorf("npfnic %s: status %d, stderr %q, %d builds; want 0, nothing, none", name, status, errOut, builds)
		}
		if !strings.HasPrefix(out, tc.want) {
			t.Errorf("npfnic %s: stdout %.80q..., want the usage %q", name, out, tc.want)
		}
	}
	// The usage lists every command and every experiment.
	_, out, _, _ := cli(t, "-h")
	_, expOut, _, _ := cli(t, "exp", "-h")
	for _, p := range paths() {
		if l := map[bool]string{true: expOut, false: out}[len(p) == 2]; !strings.Contains(l, "  "+p[len(p)-1]+" ") {
			t.Errorf("the usage does not list %q", strings.Join(p, " "))
		}
	}
}

// TestBadCommandLine: an unknown flag, command or experiment prints the
// error and a one-line hint on stderr, not the usage, and exits 2; a
// command line that names no command prints the usage on stderr.
func TestBadCommandLine(t *testing.T) {
	type tc struct {
		args []string
		want string // stderr, whole
	}
	tcs := []tc{
		{[]string{"nope"}, "npfnic: unknown command \"nope\"\nrun 'npfnic -h' for usage\n"},
		{[]string{"-nope"}, "npfnic: flag provided but not defined: -nope\nrun 'npfnic -h' for usage\n"},
		{[]string{"help", "nope"}, "npfnic help: unknown command \"nope\"\nrun 'npfnic help -h' for usage\n"},
		{[]string{"exp", "nope"}, "npfnic exp: unknown experiment \"nope\" (want cold-ring, conformance, datapath, fault-cost, mpi, overcommit, rdma, rnpf-rate, rnr, storage)\nrun 'npfnic exp -h' for usage\n"},
		{[]string{"exp", "-m", "512"}, "npfnic exp: -m: flags go after the experiment's name (npfnic exp NAME -m)\nrun 'npfnic exp -h' for usage\n"},
	}
	for _, p := range paths() {
		if p[0] == "exp" && len(p) == 1 {
			continue
		}
		prog := "npfnic " + strings.Join(p, " ")
		tcs = append(tcs,
			tc{append(slices.Clone(p), "-no-such-flag"), prog + ": flag provided but not defined: -no-such-flag\nrun '" + prog + " -h' for usage\n"},
			tc{append(slices.Clone(p), "--no-such-flag=1"), prog + ": flag provided but not defined: -no-such-flag\nrun '" + prog + " -h' for usage\n"})
	}
	for _, tc := range tcs {
		status, out, errOut, builds := cli(t, tc.args...)
		if status != 2 || out != "" || errOut != tc.want || builds != 0 {
			t.Errorf("npfnic %s: status %d, stdout %q, %d builds, stderr\n%s\nwant status 2, no stdout, no build, stderr\n%s",
				strings.Join(tc.args, " "), status, out, builds, errOut, tc.want)
		}
	}
	for _, args := range [][]string{nil, {"exp"}} {
		status, out, errOut, _ := cli(t, args...)
		if status != 2 || out != "" || !strings.HasPrefix(errOut, "usage: npfnic") {
			t.Errorf("npfnic %s: status %d, stdout %q, stderr %.40q...: want 2 and the usage on stderr", strings.Join(args, " "), status, out, errOut)
		}
	}
}

// TestLeftovers: no argument is dropped. Every command that takes flags
// only refuses an argument, naming it and the flags after it; trace,
// which takes a file, reads flags after it too.
func TestLeftovers(t *testing.T) {
	for _, p := range paths() {
		if p[0] == "trace" || p[0] == "exp" && len(p) == 1 {
			continue
		}
		name := strings.Join(p, " ")
		status, _, errOut, builds := cli(t, append(slices.Clone(p), "stray", "other")...)
		if status != 2 || builds != 0 || !strings.Contains(errOut, `unexpected arguments "stray" "other": the command takes flags only`) {
			t.Errorf("npfnic %s stray other: status %d, %d builds, stderr %q", name, status, builds, errOut)
		}
		status, _, errOut, builds = cli(t, append(slices.Clone(p), "stray", "-q", "-x=1")...)
		if status != 2 || builds != 0 || !strings.Contains(errOut, `unexpected arguments "stray" "-q" "-x=1"`) ||
			!strings.Contains(errOut, "flags after an argument are refused, not read (-q -x=1)") {
			t.Errorf("npfnic %s stray -q -x=1: status %d, %d builds, stderr %q", name, status, builds, errOut)
		}
	}
	for _, tc := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"trace"}, 2, "npfnic trace: no trace file named"},
		{[]string{"trace", "a.json", "b.json"}, 2, `npfnic trace: want one trace file, got 2: ["a.json" "b.json"]`},
		// The flag after the file is read: its bad value is refused.
		{[]string{"trace", "missing.json", "-dir", "up"}, 2, `npfnic trace: -dir "up": want rx, tx or rc`},
		{[]string{"trace", "missing.json", "-dir", "rx"}, 1, "npfnic trace: open missing.json: no such file"},
		// After --, everything is a file.
		{[]string{"trace", "--", "-dir"}, 1, "npfnic trace: open -dir: no such file"},
	} {
		status, _, errOut, _ := cli(t, tc.args...)
		if status != tc.status || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("npfnic %s: status %d, stderr %q; want %d, %q", strings.Join(tc.args, " "), status, errOut, tc.status, tc.want)
		}
	}
}

// TestValidateBeforeImages: every command that builds images checks its
// whole command line first. With its defaults it reaches the (fake)
// build; with any bad value, list, combination or output path it fails
// with status 2 and the flag named, and the build never runs (nor is the
// image cache touched: cli checks).
func TestValidateBeforeImages(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	under := filepath.Join(notDir, "out") // cannot be created
	type tc struct {
		args []string
		want string // in stderr; "" for the fake build's error
	}
	var tcs []tc
	// Every experiment that boots guests: the defaults pass, and the
	// common flags are checked.
	defs := []experiment{expColdRing, expConformance, expDatapath, expFaultCost, expMPI, expOvercommit, expRDMA, expRNPFRate, expRNR, expStorage}
	for i, e := range experiments {
		if i >= len(defs) || defs[i].name != e.name {
			t.Fatalf("experiment %q is not in this test's list", e.name)
		}
	}
	for _, e := range defs {
		if !e.guests {
			continue
		}
		x := []string{"exp", e.name}
		tcs = append(tcs,
			tc{x, ""},
			tc{append(slices.Clone(x), "-out", under), "-out " + under + ": "},
			tc{append(slices.Clone(x), "-trace", filepath.Join(under, "t.json")), "-trace " + filepath.Join(under, "t.json")},
			tc{append(slices.Clone(x), "-trace", "t.json", "-trace-events", "-1"), "-trace-events -1: want 1 to"},
			tc{append(slices.Clone(x), "-cpuprofile", filepath.Join(under, "cpu.pprof")), "-cpuprofile " + filepath.Join(under, "cpu.pprof")},
		)
		if e.rounds > 0 {
			tcs = append(tcs, tc{append(slices.Clone(x), "-rounds", "0"), "-rounds 0: want 1 to 100"})
		}
	}
	// Every command that boots guests: -m, -smp and -accel are checked
	// before the build (-accel's resolution, which may boot a probe guest,
	// comes after it).
	booting := [][]string{{"boot"}, {"demo"}}
	for _, e := range defs {
		if e.guests {
			booting = append(booting, []string{"exp", e.name})
		}
	}
	for _, x := range booting {
		tcs = append(tcs,
			tc{append(slices.Clone(x), "-m", "16"), "-m 16: want 256 to 1048576 MiB"},
			tc{append(slices.Clone(x), "-m", "2000000"), "-m 2000000: want 256 to 1048576 MiB"},
			tc{append(slices.Clone(x), "-smp", "0"), "-smp 0: want 1 to 64 vCPUs"},
			tc{append(slices.Clone(x), "-smp", "65"), "-smp 65: want 1 to 64 vCPUs"},
			tc{append(slices.Clone(x), "-accel", "xen"), `invalid value "xen" for flag -accel: want kvm, tcg or auto`},
			tc{append(slices.Clone(x), "-accel=hvf"), `invalid value "hvf" for flag -accel`},
			tc{append(slices.Clone(x), "-accel"), "flag needs an argument: -accel"},
			tc{append(slices.Clone(x), "-accel", "kvm", "-smp", "0"), "-smp 0: want 1 to 64 vCPUs"},
			tc{append(slices.Clone(x), "-accel", "tcg", "-m", "512", "-smp", "2"), ""},
		)
	}
	tcs = append(tcs,
		// Values, lists and combinations of each experiment's own flags.
		tc{[]string{"exp", "cold-ring", "-sizes", "16,7"}, "ring size 7: want a power of two"},
		tc{[]string{"exp", "cold-ring", "-sizes", "16,x"}, `-sizes: bad ring size "x"`},
		tc{[]string{"exp", "cold-ring", "-policies", "pin,fast"}, `unknown policy "fast" (want off, pin, drop, backup)`},
		tc{[]string{"exp", "cold-ring", "-fault-ahead", "4", "-policies", "backup"}, "judged against pin"},
		tc{[]string{"exp", "cold-ring", "-skip-startup", "-skip-sweep"}, "both parts skipped"},
		tc{[]string{"exp", "cold-ring", "-fault-ahead-zero", "drop,backup"}, ""},
		tc{[]string{"exp", "cold-ring", "-fault-ahead-zero", "pin"}, `fault_ahead=0 arm "pin": want drop or backup`},
		tc{[]string{"exp", "cold-ring", "-fault-ahead-zero", "drop", "-policies", "pin,backup"}, `fault_ahead=0 arm "drop": the policy is not among those run`},
		tc{[]string{"exp", "cold-ring", "-fault-ahead-zero", "backup", "-fault-ahead", "0,16"}, "part (c)'s N=0"},
		tc{[]string{"exp", "conformance", "-devices", "rxe,mlx5"}, `-devices: RDMA guest "mlx5": want rxe or npfnic`},
		tc{[]string{"exp", "conformance", "-devices", "npfnic,npfnic"}, "-devices: device npfnic listed twice"},
		tc{[]string{"exp", "conformance", "-k", " "}, `test pattern " ": want a substring`},
		tc{[]string{"exp", "conformance", "-suite-timeout", "10s"}, "suite timeout 10s: want at least a minute"},
		tc{[]string{"exp", "conformance", "-devices", "npfnic", "-k", "tests.test_odp.", "-k", "*atomic*"}, ""},
		tc{[]string{"exp", "datapath", "-nics", "e1000e,tulip"}, `-nics: unknown NIC "tulip" (want e1000e,virtio,npfnic,npfnic-nolro,npfnic-txirq0,npfnic-notify0)`},
		tc{[]string{"exp", "datapath", "-time", "1500ms"}, "want whole seconds"},
		tc{[]string{"exp", "datapath", "-smp", "100"}, "1 to 64 vCPUs"},
		tc{[]string{"exp", "fault-cost", "-transport", "udp"}, `-transport "udp": want eth, rc or both`},
		tc{[]string{"exp", "fault-cost", "-policy", "fast"}, `policy "fast": want backup, drop or pin`},
		tc{[]string{"exp", "fault-cost", "-transport", "rc", "-rc-policy", "fast"}, `RC policy "fast": want rnr or drop`},
		tc{[]string{"exp", "fault-cost", "-transport", "rc", "-driver-params", "fault_ahead=0"}, "-driver-params fault_ahead=0"},
		tc{[]string{"exp", "fault-cost", "-ring", "100"}, "ring size 100: want a power of two"},
		tc{[]string{"exp", "rdma", "-pairs", "rxe-mlx5"}, `-pairs: RDMA guest "mlx5": want rxe or npfnic`},
		tc{[]string{"exp", "rdma", "-iters", "2"}, "want at least 1 and 5"},
		tc{[]string{"exp", "rnpf-rate", "-rates", "0,2"}, "rate 2: want 0, or from 1e-6 to 1"},
		tc{[]string{"exp", "rnpf-rate", "-rates", "0,x"}, `-rates: bad rate "x"`},
		tc{[]string{"exp", "rnpf-rate", "-faults", "minor,huge"}, `unknown fault kind "huge" (want minor, major)`},
		tc{[]string{"exp", "rnpf-rate", "-transport", "rc", "-driver-params", "x=1"}, "no extra driver parameters"},
		tc{[]string{"exp", "rnpf-rate", "-msg-size", "64"}, "a message size is for -transport rc"},
		tc{[]string{"exp", "rnpf-rate", "-transport", "rc"}, ""},
		// demo, boot and images.
		tc{[]string{"demo", "-out", "demo-out"}, ""},
		tc{[]string{"demo", "-time", "1500ms"}, "-time 1.5s: want whole seconds"},
		tc{[]string{"demo", "-sizes", "64,100"}, "ring size 100: want a power of two"},
		tc{[]string{"demo", "-fault-ahead-zero", "drop,backup"}, ""},
		tc{[]string{"demo", "-fault-ahead-zero", "drop,drop"}, `fault_ahead=0 arm "drop" listed twice`},
		tc{[]string{"demo", "-cold-ring=false", "-sizes", "64,100"}, ""}, // the cold ring's flags do not matter without it
		tc{[]string{"demo", "-out", under}, "-out " + under},
		tc{[]string{"boot"}, ""},
		tc{[]string{"boot", "-nic", "tulip"}, `-nic tulip: NIC model "tulip": want e1000e or virtio`},
		tc{[]string{"boot", "-nic", "e1000e:vde"}, `NIC backend "vde": want user, tap=IFNAME, stream=PATH or stream-server=PATH`},
		tc{[]string{"boot", "-file", "missing.txt"}, "-file missing.txt: open missing.txt: no such file"},
		tc{[]string{"boot", "-rdma-peer"}, "-rdma-peer needs -rdma"},
		tc{[]string{"boot", "-npfnic", "-1"}, "-npfnic -1: want 0 or more"},
		tc{[]string{"boot", "-server", "./no-such-npfnic"}, "-server ./no-such-npfnic: no such file"},
		tc{[]string{"boot", "-trace", filepath.Join(under, "t.json")}, "-trace " + filepath.Join(under, "t.json")},
		tc{[]string{"boot", "-logs", under}, "-logs " + under},
		tc{[]string{"images"}, ""},
	)
	for _, tc := range tcs {
		name := "npfnic " + strings.Join(tc.args, " ")
		status, _, errOut, builds := cli(t, tc.args...)
		if tc.want == "" {
			if status != 1 || builds != 1 || !strings.Contains(errOut, errFakeBuild.Error()) {
				t.Errorf("%s: status %d, %d builds, stderr %q: want the command line accepted and the images built", name, status, builds, errOut)
			}
			continue
		}
		if status != 2 || builds != 0 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "for usage\n") {
			t.Errorf("%s: status %d, %d builds, stderr %q: want 2, no build, an error containing %q and the hint", name, status, builds, errOut, tc.want)
		}
		// Nor does a refused command line make its output folders.
		if left, _ := os.ReadDir("."); len(left) > 0 {
			t.Errorf("%s: left %v in the working directory", name, left)
		}
	}
}

// TestValidateBeforeSimulation: exp rnr, which boots nothing, checks its
// flags and its output directory before it simulates.
func TestValidateBeforeSimulation(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-out", filepath.Join(notDir, "out")}, "-out " + filepath.Join(notDir, "out") + ": "},
		{[]string{"-rates", "0,x"}, `-rates: bad rate "x": want a number`},
		{[]string{"-rates", "0,1.5"}, "fault rate 1.5 not in [0,1)"},
		{[]string{"-resolution", "50"}, `-resolution: bad duration "50": want a number with a unit`},
		{[]string{"-mtu", "1500"}, "-mtu 1500: want 256, 512, 1024, 2048, 4096"},
		{[]string{"-ack-timeout", "0"}, "-ack-timeout 0: want 1 to 31"},
		{[]string{"-rnr-timer", "40"}, "RNR timer code must be 0-31"},
	} {
		args := append([]string{"exp", "rnr"}, tc.args...)
		status, out, errOut, _ := cli(t, args...)
		if status != 2 || out != "" || !strings.HasPrefix(errOut, "npfnic exp rnr: ") || !strings.Contains(errOut, tc.want) {
			t.Errorf("npfnic %s: status %d, stdout %q, stderr %q: want 2 and %q", strings.Join(args, " "), status, out, errOut, tc.want)
		}
	}
}

// TestErrorPrefixes: errors name the command once and do not repeat a
// prefix ("serve: serve: --wire: wire:" was one).
func TestErrorPrefixes(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	for _, args := range [][]string{
		{"serve", "--socket", sock, "--wire", "bad"},
		{"serve", "--socket", sock, "--wire", "tap:"},
		{"serve", "--socket", sock, "--queues", "0"},
		{"serve", "--socket", sock, "--log-level", "loud"},
		{"serve", "--socket", sock, "--mac", "01:00:00:00:00:01"},
		{"serve", "--socket", sock, "--pcap", "x.pcap"},
		{"serve", "--socket", sock, "--atc-entries", "-1"},
		{"serve"},
		{"exp", "cold-ring", "-sizes", "7"},
		{"exp", "datapath", "-time", "1500ms"},
		{"exp", "fault-cost", "-policy", "fast"},
		{"exp", "rnpf-rate", "-rates", "2"},
		{"exp", "rdma", "-iters", "2"},
		{"exp", "conformance", "-devices", "x"},
		{"exp", "rnr", "-mtu", "7"},
		{"exp", "rnr", "-rates", "x"},
		{"trace", "missing.json"},
	} {
		_, _, errOut, _ := cli(t, args...)
		line, _, _ := strings.Cut(errOut, "\n")
		prog := "npfnic " + args[0]
		if args[0] == "exp" {
			prog += " " + args[1]
		}
		if !strings.HasPrefix(line, prog+": ") {
			t.Errorf("npfnic %s: %q does not start with %q", strings.Join(args, " "), line, prog+": ")
			continue
		}
		if p := repeatedPrefix(prog, line); p != "" {
			t.Errorf("npfnic %s: %q repeats %q", strings.Join(args, " "), line, p)
		}
	}
	if p := repeatedPrefix("npfnic serve", "npfnic serve: serve: --wire: wire: bad"); p != "serve" {
		t.Errorf("repeatedPrefix missed serve: %q", p)
	}
}

// repeatedPrefix returns a prefix of line ("a: b: c") that repeats the
// command's words or the prefix before it, dashes aside ("--wire: wire:",
// "exp cold-ring: coldring:"); "" for none.
func repeatedPrefix(prog, line string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.Trim(s, "- "), "-", "") }
	seen := map[string]bool{}
	for _, w := range strings.Fields(prog) {
		seen[norm(w)] = true
	}
	parts := strings.Split(strings.TrimPrefix(line, prog+": "), ": ")
	for i, p := range parts[:len(parts)-1] { // the last part is the message
		w := norm(strings.Fields(p + " x")[0])
		if seen[w] || i > 0 && norm(parts[i-1]) == norm(p) {
			return strings.Trim(p, "- ")
		}
		seen[w] = true
	}
	return ""
}

// TestVersion: npfnic version and --version print one line with the
// module, its version, the VCS revision and the Go version.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		status, out, errOut, _ := cli(t, args...)
		if status != 0 || errOut != "" || strings.Count(out, "\n") != 1 ||
			!strings.HasPrefix(out, "npfnic github.com/npfnic/npfnic ") || !strings.HasSuffix(out, " "+runtime.Version()+"\n") {
			t.Errorf("npfnic %s: status %d, stdout %q, stderr %q", args[0], status, out, errOut)
		}
	}
	if status, _, errOut, _ := cli(t, "version", "extra"); status != 2 || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("npfnic version extra: status %d, stderr %q", status, errOut)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Path: "github.com/npfnic/npfnic", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{bi, "npfnic github.com/npfnic/npfnic v1.2.3 rev 0123abcd+modified go1.99"},
		{&debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Path: "github.com/npfnic/npfnic", Version: "(devel)"}},
			"npfnic github.com/npfnic/npfnic (devel) rev unknown go1.99"},
		{nil, "npfnic (no build information) " + runtime.Version()},
	} {
		if got := versionLine(tc.bi); got != tc.want {
			t.Errorf("versionLine = %q, want %q", got, tc.want)
		}
	}
}

// TestExperimentsWriteUnderOutExp: every experiment's -out defaults to
// out/exp/NAME, so a user finds each run's files in one place.
func TestExperimentsWriteUnderOutExp(t *testing.T) {
	for _, e := range experiments {
		t.Run(e.name, func(t *testing.T) {
			status, out, _, _ := cli(t, "exp", e.name, "-h")
			if status != 0 {
				t.Fatalf("exp %s -h exited %d", e.name, status)
			}
			want := `(default "out/exp/` + e.name + `")`
			if !strings.Contains(out, want) {
				t.Errorf("exp %s -h does not say %s:\n%s", e.name, want, out)
			}
		})
	}
}

// TestInterruptedStatus: a command stopped by a signal exits 130, one that
// finished (or failed) before any signal keeps its status.
func TestInterruptedStatus(t *testing.T) {
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		ctx          context.Context
		status, want int
	}{
		{context.Background(), 0, 0},
		{context.Background(), 1, 1},
		{context.Background(), 2, 2},
		{stopped, 1, 130},
		{stopped, 0, 0},
	} {
		if got := interruptedStatus(tc.ctx, tc.status); got != tc.want {
			t.Errorf("interruptedStatus(interrupted %v, %d) = %d, want %d", tc.ctx.Err() != nil, tc.status, got, tc.want)
		}
	}
}

// TestFlagVocabulary: one flag name means one thing across every command
// that boots guests or runs an experiment: the same name takes the same
// kind of value everywhere, and the names the commands once spelled
// differently (-conns beside -memaslap-conns, -size and -msg beside
// -msg-size, -timeout for an ACK timeout code, -logs for results) are
// not used.
func TestFlagVocabulary(t *testing.T) {
	paths := [][]string{{"boot"}, {"demo"}, {"serve"}}
	for _, e := range experiments {
		paths = append(paths, []string{"exp", e.name})
	}
	// flagLine is one line of flag.PrintDefaults: "  -name type".
	flagLine := regexp.MustCompile(`^  -([a-z0-9-]+)(?: (\S+))?$`)
	kinds := map[string]map[string][]string{} // name → kind → commands
	for _, p := range paths {
		status, out, _, _ := cli(t, append(p, "-h")...)
		if status != 0 {
			t.Fatalf("%v -h exited %d", p, status)
		}
		for _, line := range strings.Split(out, "\n") {
			m := flagLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			name, kind := m[1], cmp.Or(m[2], "bool")
			if kinds[name] == nil {
				kinds[name] = map[string][]string{}
			}
			kinds[name][kind] = append(kinds[name][kind], strings.Join(p, " "))
		}
	}
	if len(kinds) < 20 {
		t.Fatalf("found only %d flags in the commands' help: the parsing is off", len(kinds))
	}
	for name, byKind := range kinds {
		if len(byKind) > 1 {
			t.Errorf("-%s takes different kinds of value: %v", name, byKind)
		}
	}
	retired := map[string]string{
		"conns": "-memaslap-conns", "size": "-msg-size", "msg": "-msg-size", "rc-size": "-rc-msg-size",
		"timeout": "a name saying which timeout", "traffic-time": "-time",
	}
	for name, instead := range retired {
		for _, cmds := range kinds[name] {
			t.Errorf("%v take -%s: use %s", cmds, name, instead)
		}
	}
	// Results go to -out; -logs is for commands that only keep logs.
	for _, cmds := range kinds["logs"] {
		for _, c := range cmds {
			if c != "boot" {
				t.Errorf("%s takes -logs: a command with results writes them, and its logs, under -out", c)
			}
		}
	}
}
