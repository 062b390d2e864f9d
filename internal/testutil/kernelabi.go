package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// KernelIncludes returns the include/ folders of the guest kernel's common
// headers that the image build extracted (`npfnic images`), under the
// cache directory images.DefaultCacheDir names (NPFNIC_CACHE, else
// XDG_CACHE_HOME/npfnic, else ~/.cache/npfnic): the exact uapi of the
// kernel the guests run.
func KernelIncludes() []string {
	cache := os.Getenv("NPFNIC_CACHE")
	if cache == "" {
		if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
			cache = filepath.Join(x, "npfnic")
		} else if home, err := os.UserHomeDir(); err == nil && home != "" {
			cache = filepath.Join(home, ".cache", "npfnic")
		} else {
			cache = "/root/.cache/npfnic"
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(cache, "kernel", "*", "root", "usr", "src", "linux-headers-*-common", "include"))
	var out []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "uapi", "rdma", "rdma_user_rxe.h")); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// KernelABI is a set of Go tables of another component's ABI, structures
// (hw.ABILayout, each field by its C member designator) and values, to
// check against the guest kernel's headers.
type KernelABI struct {
	// Headers are included whole, relative to include/
	// ("uapi/rdma/ib_user_verbs.h"): uapi headers, which compile in
	// user space.
	Headers []string
	// EnumFile is a kernel-internal header (relative to include/) that
	// does not compile in user space; the Enums named here are copied out
	// of it into the program. GENMASK is defined for them.
	EnumFile string
	Enums    []string
	Layouts  []*hw.ABILayout
	Values   []hw.Value
	// CName is the C expression of a value's Name; nil: the Name itself.
	CName func(name string) string
	// MinFields and MinValues guard against a table that lost its
	// entries: fewer checked is a failure.
	MinFields, MinValues int
}

// CheckKernelABI compiles a program against the guest kernel's headers
// with the host C compiler and checks every structure's size, every
// field's offset, size and C type (__builtin_types_compatible_p) and every
// value against what it prints. It runs once per kernel found by
// KernelIncludes, and skips when the images were never built or there is
// no C compiler, unless NPFNIC_REQUIRE_TOOLS=1.
func CheckKernelABI(t *testing.T, abi KernelABI) {
	t.Helper()
	incs := KernelIncludes()
	cc, ccErr := exec.LookPath("cc")
	if len(incs) == 0 || ccErr != nil {
		why := "no guest kernel headers under the image cache (run: go run ./cmd/npfnic images)"
		if ccErr != nil {
			why = "no C compiler"
		}
		if os.Getenv("NPFNIC_REQUIRE_TOOLS") == "1" {
			t.Fatal(why + " and NPFNIC_REQUIRE_TOOLS=1")
		}
		t.Skip(why + "; set NPFNIC_REQUIRE_TOOLS=1 to make this a failure")
	}
	for _, inc := range incs {
		t.Run(filepath.Base(filepath.Dir(inc)), func(t *testing.T) { checkKernelABI(t, cc, inc, abi) })
	}
}

func checkKernelABI(t *testing.T, cc, inc string, abi KernelABI) {
	var prog strings.Builder
	prog.WriteString("#include <stddef.h>\n#include <stdio.h>\n")
	for _, h := range abi.Headers {
		fmt.Fprintf(&prog, "#include %q\n", filepath.Join(inc, h))
	}
	prog.WriteString("\n#ifndef GENMASK\n#define GENMASK(h, l) (((~0UL) << (l)) & (~0UL >> (63 - (h))))\n#endif\n\n")
	if len(abi.Enums) > 0 {
		src, err := os.ReadFile(filepath.Join(inc, abi.EnumFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range abi.Enums {
			m := regexp.MustCompile(`(?ms)^enum ` + e + ` \{.*?^\};`).Find(src)
			if m == nil {
				t.Fatalf("enum %s not found in %s/%s", e, inc, abi.EnumFile)
			}
			prog.Write(m)
			prog.WriteString("\n")
		}
	}
	prog.WriteString("\nint main(void)\n{\n")
	var want strings.Builder
	nfields := 0
	for _, l := range abi.Layouts {
		fmt.Fprintf(&prog, "\tprintf(\"%s %%zu\\n\", sizeof(%s));\n", l.Struct, l.Struct)
		fmt.Fprintf(&want, "%s %d\n", l.Struct, l.Size)
		for _, f := range l.Fields {
			member := f.Name
			size := f.Size
			switch {
			case f.Count < 0:
				member += "[0]" // a flexible array: its element
			case f.Count > 0:
				size *= f.Count // an array, whose CType is "elem[n]"
			}
			if f.CType == "" {
				t.Errorf("%s.%s has no C type", l.Struct, f.Name)
			}
			fmt.Fprintf(&prog, "\tprintf(\"%s.%s %%zu %%zu %%d\\n\", offsetof(%s, %s), sizeof(((%s *)0)->%s),\n"+
				"\t       __builtin_types_compatible_p(__typeof__(((%s *)0)->%s), %s));\n",
				l.Struct, f.Name, l.Struct, f.Name, l.Struct, member, l.Struct, member, f.CType)
			fmt.Fprintf(&want, "%s.%s %d %d 1\n", l.Struct, f.Name, f.Offset, size)
			nfields++
		}
	}
	for _, v := range abi.Values {
		c := v.Name
		if abi.CName != nil {
			c = abi.CName(v.Name)
		}
		fmt.Fprintf(&prog, "\tprintf(\"%s %%lld\\n\", (long long)%s);\n", v.Name, c)
		fmt.Fprintf(&want, "%s %d\n", v.Name, v.Value)
	}
	prog.WriteString("\treturn 0;\n}\n")

	dir := t.TempDir()
	src, bin := filepath.Join(dir, "abi.c"), filepath.Join(dir, "abi")
	if err := os.WriteFile(src, []byte(prog.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-std=gnu11", "-Wall", "-Werror", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("compile: %v\n%s\nprogram:\n%s", err, out, prog.String())
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	exp := strings.Split(strings.TrimSpace(want.String()), "\n")
	if len(got) != len(exp) {
		t.Fatalf("C printed %d lines, want %d:\n%s", len(got), len(exp), out)
	}
	for i := range exp {
		if got[i] != exp[i] {
			t.Errorf("kernel: %s\n     Go: %s", got[i], exp[i])
		}
	}
	if nfields < abi.MinFields || len(abi.Values) < abi.MinValues {
		t.Fatalf("checked only %d fields and %d values", nfields, len(abi.Values))
	}
	if !t.Failed() {
		t.Logf("%d fields of %d structures and %d values match %s", nfields, len(abi.Layouts), len(abi.Values), inc)
	}
}
