package hw_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// kernelIncludes returns the include/ folders of the guest kernel's common
// headers that the image build extracted (`npfnic images`), under the cache
// directory images.DefaultCacheDir names.
func kernelIncludes() []string {
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

// kernelEnums are the verbs enums of include/rdma/ib_verbs.h that give the
// values librxe and rdma_rxe put in the queues (the uapi headers define only
// the work request and completion opcodes).
var kernelEnums = []string{"ib_wc_status", "ib_wc_opcode", "ib_wc_flags", "ib_send_flags"}

// kernelName is the kernel's name of a libibverbs value in hw.RxeValues.
func kernelName(ibv string) string {
	if rest, ok := strings.CutPrefix(ibv, "IBV_WR_"); ok {
		return "IB_UVERBS_WR_" + rest
	}
	return "IB_" + strings.TrimPrefix(ibv, "IBV_")
}

// TestRxeABIMatchesKernel compiles a program against the guest kernel's
// uapi headers (rdma_user_rxe.h, ib_user_verbs.h) and the verbs enums of its
// ib_verbs.h with the host C compiler, and checks every field of
// hw.RxeLayouts (offset, size, C type) and every value of hw.RxeValues
// against what it prints. Skipped when the images were never built, unless
// NPFNIC_REQUIRE_TOOLS=1.
func TestRxeABIMatchesKernel(t *testing.T) {
	incs := kernelIncludes()
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
		t.Run(filepath.Base(filepath.Dir(inc)), func(t *testing.T) { checkRxeABI(t, cc, inc) })
	}
}

func checkRxeABI(t *testing.T, cc, inc string) {
	verbs, err := os.ReadFile(filepath.Join(inc, "rdma", "ib_verbs.h"))
	if err != nil {
		t.Fatal(err)
	}
	var prog strings.Builder
	fmt.Fprintf(&prog, "#include <stddef.h>\n#include <stdio.h>\n#include %q\n#include %q\n\n",
		filepath.Join(inc, "uapi", "rdma", "rdma_user_rxe.h"), filepath.Join(inc, "uapi", "rdma", "ib_user_verbs.h"))
	for _, e := range kernelEnums {
		m := regexp.MustCompile(`(?ms)^enum ` + e + ` \{.*?^\};`).Find(verbs)
		if m == nil {
			t.Fatalf("enum %s not found in %s/rdma/ib_verbs.h", e, inc)
		}
		prog.Write(m)
		prog.WriteString("\n")
	}
	prog.WriteString("\nint main(void)\n{\n")
	var want strings.Builder
	nfields := 0
	for _, l := range hw.RxeLayouts {
		fmt.Fprintf(&prog, "\tprintf(\"%s %%zu\\n\", sizeof(%s));\n", l.Struct, l.Struct)
		fmt.Fprintf(&want, "%s %d\n", l.Struct, l.Size)
		for _, f := range l.Fields {
			member := f.Name
			if f.Count < 0 {
				member += "[0]" // a flexible array: its element
			}
			typ := f.CType
			if typ == "" {
				t.Errorf("%s.%s has no C type", l.Struct, f.Name)
			}
			fmt.Fprintf(&prog, "\tprintf(\"%s.%s %%zu %%zu %%d\\n\", offsetof(%s, %s), sizeof(((%s *)0)->%s),\n"+
				"\t       __builtin_types_compatible_p(__typeof__(((%s *)0)->%s), %s));\n",
				l.Struct, f.Name, l.Struct, f.Name, l.Struct, member, l.Struct, member, typ)
			fmt.Fprintf(&want, "%s.%s %d %d 1\n", l.Struct, f.Name, f.Offset, f.Size)
			nfields++
		}
	}
	for _, v := range hw.RxeValues {
		fmt.Fprintf(&prog, "\tprintf(\"%s %%lld\\n\", (long long)%s);\n", v.Name, kernelName(v.Name))
		fmt.Fprintf(&want, "%s %d\n", v.Name, v.Value)
	}
	prog.WriteString("\treturn 0;\n}\n")

	dir := t.TempDir()
	src, bin := filepath.Join(dir, "rxe.c"), filepath.Join(dir, "rxe")
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
	if nfields < 30 || len(hw.RxeValues) < 30 {
		t.Fatalf("checked only %d fields and %d values", nfields, len(hw.RxeValues))
	}
	if !t.Failed() {
		t.Logf("%d fields of %d structures and %d values match %s", nfields, len(hw.RxeLayouts), len(hw.RxeValues), inc)
	}
}

// TestRxeLayouts checks the tables themselves: fields in offset order,
// inside the structure (or at its end, for a flexible array), naturally
// aligned, not overlapping unless they are members of one union (the
// flexible arrays that share dma's union), and the fixed sizes the device
// code uses.
func TestRxeLayouts(t *testing.T) {
	for _, l := range hw.RxeLayouts {
		end := 0
		for i, f := range l.Fields {
			align := min(f.Size, 8)
			if f.Offset%align != 0 {
				t.Errorf("%s.%s at %d not aligned to %d", l.Struct, f.Name, f.Offset, align)
			}
			switch {
			case f.Count < 0:
				if f.Offset != l.Size {
					t.Errorf("%s.%s: flexible array at %d, not at the end (%d)", l.Struct, f.Name, f.Offset, l.Size)
				}
			case f.Offset+f.Size > l.Size:
				t.Errorf("%s.%s [%d,%d) outside the %d bytes", l.Struct, f.Name, f.Offset, f.Offset+f.Size, l.Size)
			}
			if f.Offset < end && !(f.Count < 0 && l.Fields[i-1].Count < 0 && f.Offset == l.Fields[i-1].Offset) {
				t.Errorf("%s.%s at %d overlaps the field before (ends at %d)", l.Struct, f.Name, f.Offset, end)
			}
			if f.Count >= 0 {
				end = f.Offset + f.Size
			} else {
				end = f.Offset
			}
		}
	}
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"queue header", hw.RxeQueueBuf.Size, hw.RxeQueueHeaderSize},
		{"send wqe", hw.RxeSendWQE.Size, hw.RxeSendWQESize},
		{"recv wqe", hw.RxeRecvWQE.Size, hw.RxeRecvWQESize},
		{"sge", hw.RxeSGE.Size, hw.RxeSGESize},
		{"cqe", hw.RxeCQE.Size, hw.RxeCQESize},
	} {
		if c.got != c.want {
			t.Errorf("%s: table says %d bytes, constant %d", c.name, c.got, c.want)
		}
	}
	// Immediate data is big-endian in both directions.
	b := make([]byte, hw.RxeCQESize)
	hw.RxeCQEImm.Put(b, 0x01020304)
	hw.RxeCQEWRID.Put(b, 0x1122334455667788)
	if !bytes.Equal(b[24:28], []byte{1, 2, 3, 4}) || hw.RxeCQEImm.Get(b) != 0x01020304 ||
		!bytes.Equal(b[:8], []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11}) {
		t.Fatalf("cqe encoding % x", b)
	}
	// The datasheet names values only once each.
	seen := map[string]bool{}
	for _, v := range hw.RxeValues {
		if seen[v.Name] {
			t.Errorf("%s listed twice", v.Name)
		}
		seen[v.Name] = true
		if _, err := strconv.ParseUint(fmt.Sprint(v.Value), 10, 32); err != nil {
			t.Errorf("%s = %d does not fit a __u32 field", v.Name, v.Value)
		}
	}
}
