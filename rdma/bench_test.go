package rdma_test

import (
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// benchStream keeps up to 16 messages of size bytes in flight from a to b
// (as ib_write_bw / ib_send_bw do) and reports the throughput.
func benchStream(b *testing.B, op uint32, size int) {
	x, y := pairB(b, 5)
	sgl := []rdmatest.SGE{{Addr: bufVA, Length: uint32(size), LKey: mrKey}}
	posted, done, recvs := 0, 0, 0
	b.SetBytes(int64(size))
	b.ResetTimer()
	for done < b.N {
		for posted-done < 16 && posted < b.N {
			if op == hw.IBVWRSend {
				for recvs-posted < 16 && y.rq.Produce(rdmatest.Recv{ID: uint64(recvs), SGL: sgl}.Encode) == nil {
					recvs++
				}
			}
			s := rdmatest.Send{ID: uint64(posted), Opcode: op, Flags: sig, AutoLength: true, NumSGE: -1, SGL: sgl,
				RemoteAddr: bufVA + bufSize/2, RKey: mrKey}
			if x.sq.Produce(s.Encode) != nil {
				break
			}
			posted++
		}
		hw.Offsets(x.e).RegWrite(hw.RegSQDoorbell, x.qpn)
		for {
			c, ok := x.scq.Poll()
			if !ok {
				break
			}
			if c.Status != ibrc.WCSuccess {
				b.Fatalf("completion %+v", c)
			}
			done++
		}
		for {
			if _, ok := y.rcq.Poll(); !ok {
				break
			}
		}
	}
}

func BenchmarkWrite64K(b *testing.B) { benchStream(b, hw.IBVWRRDMAWrite, 64<<10) }
func BenchmarkSend64K(b *testing.B)  { benchStream(b, hw.IBVWRSend, 64<<10) }
