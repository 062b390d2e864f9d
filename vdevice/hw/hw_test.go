package hw_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/hw/internal/cheader"
	"github.com/npfnic/npfnic/vdevice/hw/internal/datasheet"
)

const (
	headerPath    = "../../guestdrv/npfnic_hw.h"
	datasheetPath = "../../docs/device.md"
)

func TestHeaderUpToDate(t *testing.T) {
	got, err := os.ReadFile(headerPath)
	if err != nil {
		t.Fatalf("%v\nrun: go generate ./vdevice/hw", err)
	}
	if !bytes.Equal(got, cheader.Render()) {
		t.Fatalf("%s is stale: the Go definitions in vdevice/hw changed.\nrun: go generate ./vdevice/hw", headerPath)
	}
}

func TestDatasheetUpToDate(t *testing.T) {
	got, err := os.ReadFile(datasheetPath)
	if err != nil {
		t.Fatalf("%v\nrun: go generate ./vdevice/hw", err)
	}
	if !bytes.Equal(got, datasheet.Render()) {
		t.Fatalf("%s is stale: the tables or protocol texts in vdevice/hw changed.\nrun: go generate ./vdevice/hw", datasheetPath)
	}
}

// TestDatasheetSpeaksC: the datasheet is for driver developers, so it names
// things as the C header does; no Go identifier of package hw (RxPolicyPin,
// QuiesceTimeoutMS) may leak into it from a table or a protocol text.
func TestDatasheetSpeaksC(t *testing.T) {
	fset := token.NewFileSet()
	camel := regexp.MustCompile(`^[A-Z][A-Za-z0-9]*[a-z][A-Z]`)
	names := map[string]bool{}
	files, _ := filepath.Glob("*.go")
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && ast.IsExported(id.Name) && camel.MatchString(id.Name) {
				names[id.Name] = true
			}
			return true
		})
	}
	if len(names) < 100 {
		t.Fatalf("found only %d Go identifiers in package hw; the scan is broken", len(names))
	}
	word := regexp.MustCompile(`[A-Za-z][A-Za-z0-9]*`)
	text := string(datasheet.Render())
	for _, w := range word.FindAllString(text, -1) {
		if names[w] {
			t.Errorf("datasheet names the Go identifier %s", w)
			names[w] = false
		}
	}
	if m := regexp.MustCompile(`\bhw\.[A-Z]\w*|seed 000`).FindString(text); m != "" {
		t.Errorf("datasheet says %q", m)
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

func TestPairRegisters(t *testing.T) {
	seen := map[uint32]string{}
	for _, r := range hw.PairRegisters {
		if r.Offset%4 != 0 || r.Offset+4 > hw.PairRegStride {
			t.Errorf("pair register %s at %#x misaligned or outside the pair's block", r.Name, r.Offset)
		}
		if other, dup := seen[r.Offset]; dup {
			t.Errorf("pair registers %s and %s share offset %#x", r.Name, other, r.Offset)
		}
		seen[r.Offset] = r.Name
	}
	last := hw.Registers[len(hw.Registers)-1].Offset
	if last >= hw.PairBase(0) || hw.PairBase(hw.PairMax) > hw.RegBARSize {
		t.Errorf("queue pair blocks [%#x,%#x) overlap the global registers or leave BAR0", hw.PairBase(0), hw.PairBase(hw.PairMax))
	}
	if hw.PairVector(hw.PairMax-1) >= hw.MSIXVectors {
		t.Errorf("not enough MSI-X vectors for %d pairs", hw.PairMax)
	}
	if hw.StatusPairOffset(hw.PairMax) != hw.StatusBlockSize {
		t.Errorf("status block size %d, pairs end at %d", hw.StatusBlockSize, hw.StatusPairOffset(hw.PairMax))
	}
}

// TestLayouts checks every shared structure: fields in order, naturally
// aligned, without holes, filling the declared size exactly.
func TestLayouts(t *testing.T) {
	for _, l := range hw.Layouts {
		off := 0
		for _, f := range l.Fields {
			if f.Offset != off {
				t.Errorf("%s.%s at %d, want %d (hole or overlap)", l.Name, f.Name, f.Offset, off)
			}
			align := f.Size
			if f.Elem != nil {
				align = 8
				if f.Size != f.Elem.Size {
					t.Errorf("%s.%s element size %d, struct %s is %d", l.Name, f.Name, f.Size, f.Elem.Name, f.Elem.Size)
				}
			}
			if f.Offset%align != 0 {
				t.Errorf("%s.%s at %d not aligned to %d", l.Name, f.Name, f.Offset, align)
			}
			switch {
			case f.Count < 0:
				// A flexible array member adds nothing to sizeof.
			case f.Count == 0:
				off += f.Size
			default:
				off += f.Size * f.Count
			}
		}
		if off != l.Size {
			t.Errorf("%s: fields cover %d bytes, size %d", l.Name, off, l.Size)
		}
	}
	// Round trip through the accessors at the table's offsets.
	b := make([]byte, hw.RxDescSize)
	hw.RxDescAddr.Put(b, 0x1122334455667788)
	hw.RxDescBufLen.Put(b, 2048)
	hw.RxDescPktLen.Put(b, 60)
	hw.RxDescStatus.Put(b, hw.RxdDone)
	want := []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00, 0x08, 60, 0, 1, 0, 0, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("rx desc encoding % x, want % x", b, want)
	}
	if hw.RxDescAddr.Get(b) != 0x1122334455667788 || hw.RxDescBufLen.Get(b) != 2048 {
		t.Fatal("rx desc decoding")
	}
	// The 2.1 TX descriptor: mss, csum_start and csum_offset where 2.0 had
	// a reserved word.
	b = make([]byte, hw.TxDescSize)
	hw.TxDescAddr.Put(b, 0x1000)
	hw.TxDescLen.Put(b, 1514)
	hw.TxDescFlags.Put(b, hw.TxdEOP|hw.TxdTSO4)
	hw.TxDescMSS.Put(b, 1448)
	hw.TxDescCsumStart.Put(b, 34)
	hw.TxDescCsumOffset.Put(b, 16)
	want = []byte{0, 0x10, 0, 0, 0, 0, 0, 0, 0xea, 0x05, 0x05, 0, 0xa8, 0x05, 34, 16}
	if !bytes.Equal(b, want) {
		t.Fatalf("tx desc encoding % x, want % x", b, want)
	}
	if hw.TxDescMSS.Get(b) != 1448 || hw.TxDescCsumStart.Get(b) != 34 || hw.TxDescCsumOffset.Get(b) != 16 {
		t.Fatal("tx desc decoding")
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
	for (int q = 0; q < NPFNIC_PAIR_MAX; q++)
		printf("%%x %%d %%d\n", NPFNIC_PAIR_BASE(q) + NPFNIC_PAIR_ITR, NPFNIC_PAIR_VECTOR(q), NPFNIC_STATUS_PAIR_OFFSET(q));
	printf("%%zu %%zu %%zu %%zu\n", offsetof(struct npfnic_rx_desc, status), offsetof(struct npfnic_pair_status, tx_drops_bad_len),
	       sizeof(struct npfnic_status_block), offsetof(struct npfnic_status_block, pair[2].rx_head));
	printf("%%zu %%zu %%zu %%zu %%x %%x\n", offsetof(struct npfnic_tx_desc, mss), offsetof(struct npfnic_tx_desc, csum_offset),
	       offsetof(struct npfnic_pair_status, tx_tso_frames), offsetof(struct npfnic_pair_status, rx_wire_stalls),
	       NPFNIC_REG_FEATURES, NPFNIC_FEAT_TX_CSUM | NPFNIC_FEAT_TSO4 | NPFNIC_FEAT_TSO6 | NPFNIC_FEAT_RX_CSUM | NPFNIC_FEAT_RDMA | NPFNIC_FEAT_RDMA_ODP |
	       NPFNIC_FEAT_RDMA_ATOMIC | NPFNIC_FEAT_RDMA_SRQ | NPFNIC_FEAT_RDMA_UD | NPFNIC_FEAT_RDMA_UC | NPFNIC_FEAT_RDMA_KERNEL | NPFNIC_FEAT_RDMA_MW | NPFNIC_FEAT_RDMA_RESIZE_CQ |
	       NPFNIC_FEAT_RDMA_FAST_REG | NPFNIC_FEAT_RDMA_IMPLICIT_ODP | NPFNIC_FEAT_RX_LRO | NPFNIC_FEAT_TX_IRQ_DELAY | NPFNIC_FEAT_NOTIFY);
	const char *stats[] = { NPFNIC_RDMA_STAT_NAMES };
	printf("%%d %%zu %%s %%d\n", NPFNIC_RDMA_STATS, sizeof(stats) / sizeof(stats[0]), stats[NPFNIC_RDMA_STAT_RNR_NAKS_FAULT],
	       NPFNIC_RDMA_STAT_LATE_REFUSED);
	return 0;
}
`, abs)
	src := filepath.Join(dir, "t.c")
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "t")
	if out, err := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", bin, src).CombinedOutput(); err != nil {
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
	for q := 0; q < hw.PairMax; q++ {
		fmt.Fprintf(&want, "%x %d %d\n", hw.PairBase(q)+hw.PairITR, hw.PairVector(q), hw.StatusPairOffset(q))
	}
	fmt.Fprintf(&want, "%d %d %d %d\n", hw.RxDescStatus.Offset, hw.PairStatusTxDropsBadLen.Offset,
		hw.StatusHeaderSize, hw.StatusPairOffset(2)+hw.PairStatusRxHead.Offset)
	fmt.Fprintf(&want, "%d %d %d %d %x %x\n", hw.TxDescMSS.Offset, hw.TxDescCsumOffset.Offset,
		hw.PairStatusTxTSOFrames.Offset, hw.PairStatusRxWireStalls.Offset, hw.RegFeatures, hw.Features)
	rnrFault, late := -1, -1
	for i, c := range hw.RDMACounters {
		switch c.Name {
		case "rnr_naks_fault":
			rnrFault = i
		case "late_refused":
			late = i
		}
	}
	fmt.Fprintf(&want, "%d %d %s %d\n", len(hw.RDMACounters), len(hw.RDMACounters), hw.RDMACounters[rnrFault].Name, late)
	if string(out) != want.String() {
		t.Fatalf("C and Go disagree:\nC:\n%s\nGo:\n%s", out, want.String())
	}
}

// TestInterfaceChangelog: the changelog runs in order, one entry per
// version, and ends at the version VERSION reports, so the datasheet names
// one current version and says what each one added.
func TestInterfaceChangelog(t *testing.T) {
	c := hw.InterfaceChanges
	if len(c) == 0 {
		t.Fatal("no changelog")
	}
	for i := 1; i < len(c); i++ {
		prev, cur := c[i-1], c[i]
		if cur.Major < prev.Major || cur.Major == prev.Major && cur.Minor <= prev.Minor {
			t.Errorf("changelog entry %d.%d follows %d.%d", cur.Major, cur.Minor, prev.Major, prev.Minor)
		}
	}
	for _, e := range c {
		if strings.TrimSpace(e.Changes) == "" {
			t.Errorf("version %d.%d says nothing about what it added", e.Major, e.Minor)
		}
	}
	last := c[len(c)-1]
	if got := uint32(last.Major)<<16 | uint32(last.Minor); got != hw.InterfaceVersion {
		t.Errorf("the changelog ends at %d.%d, VERSION reports %d.%d",
			last.Major, last.Minor, hw.InterfaceVersion>>16, hw.InterfaceVersion&0xffff)
	}
	sheet := string(datasheet.Render())
	current := fmt.Sprintf("describes interface version %d.%d", hw.InterfaceVersion>>16, hw.InterfaceVersion&0xffff)
	if n := strings.Count(sheet, "describes interface version"); n != 1 || !strings.Contains(sheet, current) {
		t.Errorf("the datasheet should say once that it %s (it says so %d times)", current, n)
	}
}
