package hw_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/hw/internal/cheader"
)

const headerPath = "../../guestdrv/npfnic_hw.h"

func TestHeaderUpToDate(t *testing.T) {
	got, err := os.ReadFile(headerPath)
	if err != nil {
		t.Fatalf("%v\nrun: go generate ./vdevice/hw", err)
	}
	if !bytes.Equal(got, cheader.Render()) {
		t.Fatalf("%s is stale: the Go definitions in vdevice/hw changed.\nrun: go generate ./vdevice/hw", headerPath)
	}
}

func TestRegistersDistinctAndAligned(t *testing.T) {
	seen := map[uint32]string{}
	for i, r := range hw.Registers {
		if r.Offset%4 != 0 || r.Offset+4 > hw.RegBARSize {
			t.Errorf("%s at %#x misaligned or outside BAR0", r.Name, r.Offset)
		}
		if other, dup := seen[r.Offset]; dup {
			t.Errorf("%s and %s share offset %#x", r.Name, other, r.Offset)
		}
		seen[r.Offset] = r.Name
		if i > 0 && r.Offset <= hw.Registers[i-1].Offset {
			t.Errorf("%s out of offset order", r.Name)
		}
	}
}

func TestDiagPatternKnownValues(t *testing.T) {
	// Pinned values: the pattern is part of the guest interface.
	for _, tc := range []struct {
		seed, i uint32
		want    uint8
	}{
		{0, 0, 0x00},
		{1, 0, 0x35},
		{0x12345678, 5, 0xc5},
		{0xffffffff, 4095, 0x9b},
	} {
		if got := hw.DiagPattern(tc.seed, tc.i); got != tc.want {
			t.Errorf("DiagPattern(%d,%d)=%#x want %#x", tc.seed, tc.i, got, tc.want)
		}
	}
	// Neighbouring offsets and seeds differ often enough to catch misplaced
	// writes.
	same := 0
	for i := uint32(0); i < 4096; i++ {
		if hw.DiagPattern(7, i) == hw.DiagPattern(7, i+1) {
			same++
		}
		if hw.DiagPattern(7, i) == hw.DiagPattern(8, i) {
			same++
		}
	}
	if same > 100 {
		t.Fatalf("pattern too regular: %d collisions", same)
	}
}

// TestCHeaderMatchesGo compiles the generated header with the host C
// compiler and checks the C pattern function against DiagPattern.
func TestCHeaderMatchesGo(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	abs, _ := filepath.Abs(headerPath)
	prog := fmt.Sprintf(`#include %q
#include <stdio.h>
int main(void) {
	unsigned int seeds[] = {0, 1, 0xdeadbeef, 0xffffffff};
	for (int s = 0; s < 4; s++)
		for (unsigned int i = 0; i < 64; i++)
			printf("%%u\n", npfnic_diag_pattern(seeds[s], i * 977u));
	printf("%%x %%x %%x\n", NPFNIC_PCI_VENDOR_ID, NPFNIC_PCI_DEVICE_ID, NPFNIC_REG_DIAG_DMA_STATUS);
	return 0;
}
`, abs)
	src := filepath.Join(dir, "t.c")
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "t")
	if out, err := exec.Command(cc, "-std=c99", "-Wall", "-Werror", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("compile: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, s := range []uint32{0, 1, 0xdeadbeef, 0xffffffff} {
		for i := uint32(0); i < 64; i++ {
			fmt.Fprintf(&want, "%d\n", hw.DiagPattern(s, i*977))
		}
	}
	fmt.Fprintf(&want, "%x %x %x\n", hw.VendorID, hw.DeviceID, hw.RegDiagDMAStatus)
	if string(out) != want.String() {
		t.Fatalf("C and Go disagree:\nC:\n%s\nGo:\n%s", out, want.String())
	}
}
