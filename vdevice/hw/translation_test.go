package hw_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestTranslationLayouts applies the layout rules to the ATS/PRI
// structures: fields in order, naturally aligned, no holes, exact size.
func TestTranslationLayouts(t *testing.T) {
	for _, l := range hw.TranslationLayouts {
		off := 0
		for _, f := range l.Fields {
			if f.Offset != off {
				t.Errorf("%s.%s at %d, want %d", l.Name, f.Name, f.Offset, off)
			}
			if f.Elem != nil || f.Count < 0 {
				t.Errorf("%s.%s: nested or flexible members are not expected here", l.Name, f.Name)
			}
			if f.Offset%f.Size != 0 {
				t.Errorf("%s.%s at %d not aligned to %d", l.Name, f.Name, f.Offset, f.Size)
			}
			off += f.Size * max(f.Count, 1)
		}
		if off != l.Size {
			t.Errorf("%s: fields cover %d bytes, size %d", l.Name, off, l.Size)
		}
	}
}

// TestTranslationRegisters: the ATS and PRI blocks are in order, aligned,
// inside their windows, and collide with no other register.
func TestTranslationRegisters(t *testing.T) {
	seen := map[uint32]string{}
	for _, r := range hw.Registers {
		seen[r.Offset] = r.Name
	}
	for q := range hw.PairMax {
		for _, r := range hw.PairRegisters {
			seen[hw.PairBase(q)+r.Offset] = fmt.Sprintf("PAIR%d_%s", q, r.Name)
		}
	}
	for i, r := range hw.TranslationRegisters {
		if r.Offset%4 != 0 || r.Offset < hw.XlatRegBase || r.Offset >= hw.XlatRegEnd {
			t.Errorf("%s at %#x misaligned or outside %#x..%#x", r.Name, r.Offset, hw.XlatRegBase, hw.XlatRegEnd)
		}
		if i > 0 && r.Offset <= hw.TranslationRegisters[i-1].Offset {
			t.Errorf("%s out of offset order", r.Name)
		}
		if other, dup := seen[r.Offset]; dup {
			t.Errorf("%s and %s share offset %#x", r.Name, other, r.Offset)
		}
		seen[r.Offset] = r.Name
		ats := strings.HasPrefix(r.Name, "ATS_") || strings.HasPrefix(r.Name, "ATC_") || strings.HasPrefix(r.Name, "PASID_") || strings.HasPrefix(r.Name, "INVQ_")
		if ats != (r.Offset < hw.ATSRegEnd) {
			t.Errorf("%s at %#x is in the wrong block", r.Name, r.Offset)
		}
	}
	// The datapath's global registers end below the translation window,
	// and the queue pairs start above it.
	for _, r := range hw.Registers {
		if r.Offset >= hw.XlatRegBase && r.Offset < hw.XlatRegEnd {
			t.Errorf("datapath register %s inside the translation window", r.Name)
		}
	}
	if hw.PairBase(0) < hw.XlatRegEnd {
		t.Error("queue pair registers overlap the translation window")
	}
	// Default vectors exist and are not the misc or a queue pair's.
	for _, v := range []int{hw.PRQVectorDefault, hw.InvqVectorDefault} {
		if v >= hw.MSIXVectors || v == hw.MiscVector {
			t.Errorf("vector %d unusable", v)
		}
		for q := range hw.PairMax {
			if v == hw.PairVector(q) {
				t.Errorf("vector %d is queue pair %d's", v, q)
			}
		}
	}
	// C names are unique across both value tables.
	names := map[string]bool{}
	for _, v := range append(append([]hw.Value{}, hw.Values...), hw.TranslationValues...) {
		if names[v.Name] {
			t.Errorf("NPFNIC_%s defined twice", v.Name)
		}
		names[v.Name] = true
	}
	// The page-table constants agree with each other.
	if hw.XlatPageShift+hw.XlatLevels*hw.XlatLevelBits != hw.XlatVABits || hw.PTEAddrMask&hw.PTEReservedMask != 0 ||
		hw.PTEAddrMask&(hw.XlatPageSize-1) != 0 || hw.PTEAddrMask|hw.PTEReservedMask|(hw.XlatPageSize-1) != 1<<64-1 {
		t.Error("page-table geometry constants disagree")
	}
}

// TestTranslationCHeader compiles the generated header and compares the C
// view of the translation structures and registers with the Go tables.
func TestTranslationCHeader(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	abs, _ := filepath.Abs(headerPath)
	var prog strings.Builder
	fmt.Fprintf(&prog, "#include %q\n#include <stdio.h>\nint main(void) {\n", abs)
	var want strings.Builder
	for _, l := range hw.TranslationLayouts {
		fmt.Fprintf(&prog, "\tprintf(\"%%zu\\n\", sizeof(struct npfnic_%s));\n", l.Name)
		fmt.Fprintf(&want, "%d\n", l.Size)
		for _, f := range l.Fields {
			fmt.Fprintf(&prog, "\tprintf(\"%%zu\\n\", offsetof(struct npfnic_%s, %s));\n", l.Name, f.Name)
			fmt.Fprintf(&want, "%d\n", f.Offset)
		}
	}
	for _, r := range hw.TranslationRegisters {
		fmt.Fprintf(&prog, "\tprintf(\"%%x\\n\", NPFNIC_REG_%s);\n", r.Name)
		fmt.Fprintf(&want, "%x\n", r.Offset)
	}
	for _, v := range hw.TranslationValues {
		fmt.Fprintf(&prog, "\tprintf(\"%%llx\\n\", (unsigned long long)NPFNIC_%s);\n", v.Name)
		fmt.Fprintf(&want, "%x\n", v.Value)
	}
	prog.WriteString("\treturn 0;\n}\n")
	src := filepath.Join(dir, "x.c")
	if err := os.WriteFile(src, []byte(prog.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "x")
	if out, err := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("compile: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != want.String() {
		t.Fatalf("C and Go disagree:\nC:\n%s\nGo:\n%s", out, want.String())
	}
}
