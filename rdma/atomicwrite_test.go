package rdma_test

import (
	"encoding/binary"
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestAtomicWriteThroughRings: librxe's IBV_WR_ATOMIC_WRITE entry (the 8
// bytes in dma.atomic_wr) stores them in the peer's word and completes
// with IBV_WC_ATOMIC_WRITE; one of another length fails alone.
func TestAtomicWriteThroughRings(t *testing.T) {
	a, b := pair(t, 3)
	word := make([]byte, 8)
	binary.LittleEndian.PutUint64(word, 0x1122334455667788)
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 1, Opcode: hw.IBVWRAtomicWrite, Flags: sig, AutoLength: true,
		RemoteAddr: bufVA + 0x3008, RKey: mrKey, Inline: word})
	if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCSuccess || c.Opcode != hw.IBVWCAtomicWrite || c.ByteLen != 8 {
		t.Fatalf("completion %+v", c)
	}
	if got := binary.LittleEndian.Uint64(b.buf.Read(0x3008, 8)); got != 0x1122334455667788 {
		t.Fatalf("peer's word %#x", got)
	}
	a.post(t, a.sq, a.qpn, rdmatest.Send{ID: 2, Opcode: hw.IBVWRAtomicWrite, Flags: sig, AutoLength: true,
		RemoteAddr: bufVA + 0x3010, RKey: mrKey, Inline: word[:4]})
	if c := poll(t, a.scq, 1)[0]; c.Status != ibrc.WCLocLenErr || c.WRID != 2 {
		t.Fatalf("4-byte ATOMIC WRITE: %+v", c)
	}
}
