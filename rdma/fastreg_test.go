package rdma_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestFastRegistrationThroughRings: a kernel consumer's fast registration
// as the driver runs it. ALLOC_MR gives b a region and its page list;
// b's REG_MR send entry maps an IOVA range onto three scattered pages of
// guest memory, and a's WRITE across a page boundary lands in two of
// them; LOCAL_INV frees it, a second REG_MR with a new key byte and a
// rewritten list registers it again, and after DEREG_MR the key reaches
// nothing. Bad ALLOC_MR commands fail with their status.
func TestFastRegistrationThroughRings(t *testing.T) {
	a, b := pair(t, 3)
	const index = 0x300
	list := b.g.Alloc(8*4, 8)
	for _, c := range []struct {
		name string
		cmd  rdmatest.Cmd
		want uint32
	}{
		{"index 0", rdmatest.AllocMR(0x42, pdn, 4, list), hw.RDMACmdErrHandle},
		{"key of a registered MR", rdmatest.AllocMR(mrKey, pdn, 4, list), hw.RDMACmdErrHandle},
		{"no pages", rdmatest.AllocMR(index<<8|9, pdn, 0, list), hw.RDMACmdErrParam},
		{"too many pages", rdmatest.AllocMR(index<<8|9, pdn, hw.RDMAMaxFastRegPages+1, list), hw.RDMACmdErrParam},
		{"unaligned list", rdmatest.AllocMR(index<<8|9, pdn, 4, list+4), hw.RDMACmdErrParam},
		{"list wrapping the address space", rdmatest.AllocMR(index<<8|9, pdn, 4, ^uint64(7)), hw.RDMACmdErrParam},
	} {
		if st, _, _ := b.d.Run(c.cmd); st != c.want {
			t.Errorf("%s: status %d, want %d", c.name, st, c.want)
		}
	}
	b.must(t, rdmatest.AllocMR(index<<8|1, pdn, 4, list))
	if st, _, _ := b.d.Run(rdmatest.AllocMR(index<<8|2, pdn, 4, list)); st != hw.RDMACmdErrHandle {
		t.Fatalf("second ALLOC_MR of one index: status %d", st)
	}
	pages := []uint64{b.g.Alloc(4096, 4096), b.g.Alloc(4096, 4096), b.g.Alloc(4096, 4096)}
	setList := func(ps ...uint64) {
		for i, p := range ps {
			binary.LittleEndian.PutUint64(b.g.Bytes(list+8*uint64(i), 8), p)
		}
	}
	setList(pages[2], pages[0], pages[1])
	const iova = 0xffff_8881_0000_0800
	reg := func(id uint64, key uint32, npages uint32) {
		t.Helper()
		b.post(t, b.sq, b.qpn, rdmatest.Send{ID: id, Opcode: hw.IBWRRegMR, Flags: sig, Reg: &rdmatest.RegWR{IOVA: iova,
			Length: uint64(npages)*4096 - 0x800, Key: key, Access: access, PageShift: 12, NPages: npages}})
		if c := poll(t, b.scq, 1)[0]; c.Status != ibrc.WCSuccess || c.Opcode != hw.IBWCRegMR || c.WRID != id {
			t.Fatalf("REG_MR %+v", c)
		}
	}
	write := func(id uint64, va uint64, rkey uint32) ibrc.WCStatus {
		t.Helper()
		a.buf.Write(0, pattern(64, byte(id)))
		a.post(t, a.sq, a.qpn, rdmatest.Send{ID: id, Opcode: hw.IBVWRRDMAWrite, Flags: sig, AutoLength: true, NumSGE: -1,
			RemoteAddr: va, RKey: rkey, SGL: []rdmatest.SGE{{Addr: bufVA, Length: 64, LKey: mrKey}}})
		return poll(t, a.scq, 1)[0].Status
	}
	key := uint32(index<<8 | 0x22)
	reg(1, key, 3)
	if st := write(2, iova+0x7f0, key); st != ibrc.WCSuccess {
		t.Fatalf("WRITE through the fast region: %v", st)
	}
	want := pattern(64, 2)
	if !bytes.Equal(b.g.Bytes(pages[2]+0xff0, 16), want[:16]) || !bytes.Equal(b.g.Bytes(pages[0], 48), want[16:]) {
		t.Fatal("the WRITE did not land in the listed pages at the registration's offsets")
	}

	b.post(t, b.sq, b.qpn, rdmatest.Send{ID: 3, Opcode: hw.IBVWRLocalInv, Flags: sig, InvRKey: key})
	if c := poll(t, b.scq, 1)[0]; c.Status != ibrc.WCSuccess || c.Opcode != hw.IBVWCLocalInv {
		t.Fatalf("LOCAL_INV %+v", c)
	}
	setList(pages[1])
	key2 := uint32(index<<8 | 0x23)
	reg(4, key2, 1)
	if st := write(5, iova, key2); st != ibrc.WCSuccess {
		t.Fatalf("WRITE after the second REG_MR: %v", st)
	}
	if !bytes.Equal(b.g.Bytes(pages[1]+0x800, 64), pattern(64, 5)) {
		t.Fatal("the second registration's WRITE did not land in its page")
	}
	b.must(t, rdmatest.NewCmd(hw.RDMACmdDeregMR, index<<8|1))
	if st := write(6, iova, key2); st != ibrc.WCRemAccessErr {
		t.Fatalf("WRITE after DEREG_MR: %v", st)
	}
	if !bytes.Equal(b.g.Bytes(pages[1]+0x800, 64), pattern(64, 5)) {
		t.Fatal("a WRITE after DEREG_MR reached the page")
	}
}
