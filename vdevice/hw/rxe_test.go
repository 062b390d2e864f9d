package hw_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/internal/testutil"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// kernelEnums are the verbs enums of include/rdma/ib_verbs.h that give the
// values librxe and rdma_rxe put in the queues (the uapi headers define only
// the work request and completion opcodes).
var kernelEnums = []string{"ib_wc_status", "ib_wc_opcode", "ib_wc_flags", "ib_send_flags", "ib_wr_opcode"}

// kernelName is the kernel's name of a libibverbs value in hw.RxeValues.
func kernelName(ibv string) string {
	if strings.HasPrefix(ibv, "IB_") {
		return ibv // a kernel-only value, named as the kernel names it
	}
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
	testutil.CheckKernelABI(t, testutil.KernelABI{
		Headers:  []string{"uapi/rdma/rdma_user_rxe.h", "uapi/rdma/ib_user_verbs.h"},
		EnumFile: "rdma/ib_verbs.h", Enums: kernelEnums,
		Layouts: hw.RxeLayouts, Values: hw.RxeValues, CName: kernelName,
		MinFields: 30, MinValues: 30,
	})
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
			if f.Offset < end && !(f.Count < 0 && l.Fields[i-1].Count < 0 && f.Offset == l.Fields[i-1].Offset) &&
				!unionSiblings(l.Fields[i-1].Name, f.Name) {
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

// rxeUnions are the unions of the rxe structures whose members' fields
// hw.RxeLayouts lists side by side (by their dotted C names).
var rxeUnions = map[string]bool{"wr.wr": true, "wr.ex": true, "ex": true}

// unionSiblings reports whether fields a and b lie in different members of
// one of rxeUnions, where they may overlap.
func unionSiblings(a, b string) bool {
	for u := range rxeUnions {
		ma, okA := strings.CutPrefix(a, u+".")
		mb, okB := strings.CutPrefix(b, u+".")
		if okA && okB {
			ma, _, _ = strings.Cut(ma, ".")
			mb, _, _ = strings.Cut(mb, ".")
			return ma != mb
		}
	}
	return false
}
