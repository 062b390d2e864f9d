package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// TestGuestFlags: -m, -smp and -accel parse, default and are checked.
func TestGuestFlags(t *testing.T) {
	for _, c := range []struct {
		args      []string
		mem, cpus int
		accel     vm.Accel
		parseErr  string // from flag parsing
		checkErr  string // from check
	}{
		{args: nil, mem: 2048, cpus: 1, accel: vm.AccelAuto},
		{args: []string{"-accel", "kvm"}, mem: 2048, cpus: 1, accel: vm.AccelKVM},
		{args: []string{"-accel=tcg", "-m", "512", "-smp", "4"}, mem: 512, cpus: 4, accel: vm.AccelTCG},
		{args: []string{"-accel", "auto", "-smp", "64"}, mem: 2048, cpus: 64, accel: vm.AccelAuto},
		{args: []string{"-accel", "KVM"}, mem: 2048, cpus: 1, accel: vm.AccelKVM},
		{args: []string{"-accel", "hvf"}, parseErr: `invalid value "hvf" for flag -accel: want kvm, tcg or auto`},
		{args: []string{"-accel"}, parseErr: "flag needs an argument: -accel"},
		{args: []string{"-m", "lots"}, parseErr: "invalid value"},
		{args: []string{"-m", "128"}, checkErr: "-m 128: want 256 to 1048576 MiB"},
		{args: []string{"-m", "-1"}, checkErr: "-m -1: want 256"},
		{args: []string{"-smp", "0"}, checkErr: "-smp 0: want 1 to 64 vCPUs"},
		{args: []string{"-smp", "65"}, checkErr: "-smp 65: want 1 to 64 vCPUs"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(new(bytes.Buffer))
		g := addGuestFlags(fs, 2048, "")
		err := fs.Parse(c.args)
		if c.parseErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.parseErr) {
				t.Errorf("%q: parse error %v, want %q", c.args, err, c.parseErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		err = g.check()
		if c.checkErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.checkErr) {
				t.Errorf("%q: check error %v, want %q", c.args, err, c.checkErr)
			}
			continue
		}
		if err != nil || *g.mem != c.mem || *g.cpus != c.cpus || g.accel != c.accel {
			t.Errorf("%q: -m %d -smp %d -accel %q, %v; want %d %d %q", c.args, *g.mem, *g.cpus, g.accel, err, c.mem, c.cpus, c.accel)
		}
	}
	// The default memory is 1024 MiB.
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	if g := addGuestFlags(fs, 0, ""); *g.mem != 1024 {
		t.Errorf("default -m %d, want 1024", *g.mem)
	}
	// tcg resolves without images or a probe.
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	g := addGuestFlags(fs, 0, "")
	if err := fs.Parse([]string{"-accel", "tcg"}); err != nil {
		t.Fatal(err)
	}
	if a, err := g.resolve(context.Background(), nil); err != nil || a != vm.AccelTCG {
		t.Errorf("-accel tcg resolved to %q, %v", a, err)
	}
}

// TestBootingCommandsTakeGuestFlags: every command that boots a guest
// takes -m, -smp and -accel and refuses bad values before building images
// or booting anything; the others do not take -accel.
func TestBootingCommandsTakeGuestFlags(t *testing.T) {
	quiet(t)
	ctx := context.Background()
	run := func(name string, args ...string) error {
		if exp, ok := strings.CutPrefix(name, "exp "); ok {
			return runExp(ctx, append([]string{exp}, args...))
		}
		c, ok := lookup(commands, name)
		if !ok {
			t.Fatalf("no command %s", name)
		}
		return c.run(ctx, args)
	}
	booting := []string{"boot", "demo"}
	for _, e := range experiments {
		if e.name != "rnr" {
			booting = append(booting, "exp "+e.name)
		}
	}
	for _, name := range booting {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"-accel", "xen"}, `invalid value "xen" for flag -accel`},
			{[]string{"-accel", "tcg", "-m", "16"}, "-m 16: want"},
			{[]string{"-accel", "kvm", "-smp", "0"}, "-smp 0: want"},
		} {
			if err := run(name, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %q: %v, want %q", name, c.args, err, c.want)
			}
		}
	}
	for _, name := range []string{"serve", "images", "exp rnr"} {
		if err := run(name, "-accel", "tcg"); err == nil || !strings.Contains(err.Error(), "flag provided but not defined: -accel") {
			t.Errorf("%s -accel tcg: %v, want an undefined flag", name, err)
		}
	}
}

// quiet sends what the commands print on stderr (usage after a bad flag)
// to /dev/null for the rest of the test.
func quiet(t *testing.T) {
	t.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = null
	t.Cleanup(func() { os.Stderr = old; null.Close() })
}
