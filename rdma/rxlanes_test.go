package rdma_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/rdma"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// withLanes makes a node's engine steer its received frames to n lanes.
func withLanes(n int) nodeOpts {
	return nodeOpts{config: func(c *rdma.Config) { c.RxLanes = n }}
}

// TestRxLanes: with receive lanes, eight QPs WRITE, SEND and READ at once,
// each a message spread over many packets and then a second WRITE over
// the first; every byte lands, every completion is there, and no QP saw a
// packet out of order (a lane keeps a QP's frames in order: no sequence
// NAK, nothing dropped as out of sequence; a slow run may time out and
// retransmit, which is no reordering).
func TestRxLanes(t *testing.T) {
	for _, lanes := range []int{2, 4} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			x, y := pairWith(t, 5, withLanes(lanes))
			const nqp, size = 8, 20000
			type qp struct {
				xqpn, yqpn uint32
				sq, rq     *rdmatest.Queue
			}
			qps := []qp{{x.qpn, y.qpn, x.sq, y.rq}}
			for i := 1; i < nqp; i++ {
				q := qp{xqpn: x.qpn + uint32(0x10*i), yqpn: y.qpn + uint32(0x10*i)}
				q.sq, _ = x.createQP(t, q.xqpn)
				_, q.rq = y.createQP(t, q.yqpn)
				x.connect(t, q.xqpn, y, q.yqpn, 5)
				y.connect(t, q.yqpn, x, q.xqpn, 5)
				qps = append(qps, q)
			}
			// QP i: its WRITE lands at wr, its SEND at sd, its READ
			// brings y's bytes at rd to x's at rd; x's two WRITEs and
			// its SEND come from src.
			wr := func(i int) int { return i * 0x8000 }
			sd := func(i int) int { return 0x40000 + i*0x8000 }
			rd := func(i int) int { return 0x80000 + i*0x2000 }
			src := func(i int) int { return 0x90000 + i*0xc000 }
			for i, q := range qps {
				first, second := pattern(size, byte(i)), pattern(size, byte(0x80+i))
				x.buf.Write(src(i), first)
				y.buf.Write(rd(i), pattern(size/4, byte(0x40+i)))
				y.postRecv(t, q.rq, rdmatest.Recv{ID: uint64(i), SGL: []rdmatest.SGE{
					{Addr: bufVA + uint64(sd(i)), Length: size, LKey: mrKey}}})
				sge := []rdmatest.SGE{{Addr: bufVA + uint64(src(i)), Length: size, LKey: mrKey}}
				x.post(t, q.sq, q.xqpn,
					rdmatest.Send{ID: 1, Opcode: hw.IBVWRRDMAWrite, Flags: sig, AutoLength: true, NumSGE: -1, SGL: sge,
						RemoteAddr: bufVA + uint64(wr(i)), RKey: mrKey},
					rdmatest.Send{ID: 2, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1, SGL: sge},
					rdmatest.Send{ID: 3, Opcode: hw.IBVWRRDMARead, Flags: sig, AutoLength: true, NumSGE: -1,
						SGL:        []rdmatest.SGE{{Addr: bufVA + uint64(rd(i)), Length: size / 4, LKey: mrKey}},
						RemoteAddr: bufVA + uint64(rd(i)), RKey: mrKey})
				// The second WRITE, over the first, from another source.
				x.buf.Write(src(i)+size, second)
				x.post(t, q.sq, q.xqpn, rdmatest.Send{ID: 4, Opcode: hw.IBVWRRDMAWrite, Flags: sig, AutoLength: true,
					NumSGE: -1, SGL: []rdmatest.SGE{{Addr: bufVA + uint64(src(i)+size), Length: size, LKey: mrKey}},
					RemoteAddr: bufVA + uint64(wr(i)), RKey: mrKey})
			}
			done := map[uint32]int{}
			for _, c := range poll(t, x.scq, 4*nqp) {
				if c.Status != ibrc.WCSuccess || c.WRID != uint64(done[c.QPNum]+1) {
					t.Fatalf("completion %+v after %d of its QP's", c, done[c.QPNum])
				}
				done[c.QPNum]++
			}
			for _, c := range poll(t, y.rcq, nqp) {
				if c.Status != ibrc.WCSuccess || c.ByteLen != size {
					t.Errorf("receive completion %+v", c)
				}
			}
			for i := range qps {
				if got := y.buf.Read(wr(i), size); !bytes.Equal(got, pattern(size, byte(0x80+i))) {
					t.Errorf("QP %d: WRITE data differs", i)
				}
				if got := y.buf.Read(sd(i), size); !bytes.Equal(got, pattern(size, byte(i))) {
					t.Errorf("QP %d: SEND data differs", i)
				}
				if got := x.buf.Read(rd(i), size/4); !bytes.Equal(got, pattern(size/4, byte(0x40+i))) {
					t.Errorf("QP %d: READ data differs", i)
				}
			}
			for _, n := range []*node{x, y} {
				st := n.e.Stats().RC
				if st.SeqNakReceived != 0 || st.SeqNakSent != 0 || st.OutOfSeqDropped != 0 {
					t.Errorf("packets out of order: %+v", st)
				}
			}
		})
	}
}

// BenchmarkRCLanes is BenchmarkRC's 64 KiB cases with two receive lanes
// (Config.RxLanes), to compare with BenchmarkRC in one run.
func BenchmarkRCLanes(b *testing.B) {
	for _, op := range []struct {
		name string
		op   uint32
	}{{"write", hw.IBVWRRDMAWrite}, {"send", hw.IBVWRSend}} {
		for _, n := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/64KiB/qps=%d", op.name, n), func(b *testing.B) {
				benchRCWith(b, op.op, 64<<10, n, withLanes(2))
			})
		}
	}
}
