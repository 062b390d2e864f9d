package rdma_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

// The device alone: two engines on an in-memory cable (port.Pipe), each
// with its guest memory, rings in rxe format and a polling "driver" on
// the benchmark's goroutine. BenchmarkRC streams messages from one node's
// MR into the other's, keeping up to 16 messages in flight per QP (as
// ib_write_bw / ib_send_bw do), over 1 and 8 QPs that share the CQs;
// MB/s is message payload. BenchmarkRCCopyFloor is the floor under it:
// memmove of the same bytes from the one guest's buffer into the other's.
// ci/bench-rdma.sh runs both beside ethring's TSO benchmark in one `go
// test` run and prints the ratios.
//
// The driver rings a QP's doorbell once per batch it posted and, when it
// finds nothing to do, arms the send CQ and sleeps until the completion
// interrupt, as a program on a completion channel does (ib_write_bw -e):
// a driver that spins takes one of this machine's 2 cores from the
// engines' goroutines.

var rcBenchSizes = []struct {
	name string
	n    int
}{{"64KiB", 64 << 10}, {"4KiB", 4 << 10}}

func BenchmarkRC(b *testing.B) {
	for _, op := range []struct {
		name string
		op   uint32
	}{{"write", hw.IBVWRRDMAWrite}, {"send", hw.IBVWRSend}} {
		for _, sz := range rcBenchSizes {
			for _, n := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/qps=%d", op.name, sz.name, n), func(b *testing.B) {
					benchRC(b, op.op, sz.n, n)
				})
			}
		}
	}
}

// BenchmarkWrite64K and BenchmarkSend64K are BenchmarkRC's one-QP 64 KiB
// cases under their earlier names.
func BenchmarkWrite64K(b *testing.B) { benchRC(b, hw.IBVWRRDMAWrite, 64<<10, 1) }
func BenchmarkSend64K(b *testing.B)  { benchRC(b, hw.IBVWRSend, 64<<10, 1) }

// rcBenchQP is one QP of a benchmark on both nodes, and its counts.
type rcBenchQP struct {
	xqpn, yqpn          uint32
	sq, rq              *rdmatest.Queue
	posted, done, recvs int
	sgl                 []rdmatest.SGE
	remote              uint64
}

func benchRC(b *testing.B, op uint32, size, nqp int) { benchRCWith(b, op, size, nqp, nodeOpts{}) }

// benchRCWith is benchRC on nodes made with o.
func benchRCWith(b *testing.B, op uint32, size, nqp int, o nodeOpts) {
	const inFlight = 16
	x, y := pairWith(b, 5, o)
	qps := []*rcBenchQP{{xqpn: x.qpn, yqpn: y.qpn, sq: x.sq, rq: y.rq}}
	for i := 1; i < nqp; i++ {
		q := &rcBenchQP{xqpn: x.qpn + uint32(0x10*i), yqpn: y.qpn + uint32(0x10*i)}
		q.sq, _ = x.createQP(b, q.xqpn)
		_, q.rq = y.createQP(b, q.yqpn)
		x.connect(b, q.xqpn, y, q.yqpn, 5)
		y.connect(b, q.yqpn, x, q.xqpn, 5)
		qps = append(qps, q)
	}
	// Each QP has its own 64 KiB of the buffer on both sides: the
	// sender's first half, the receiver's second half.
	for i, q := range qps {
		off := uint64(i%8) * (64 << 10)
		q.sgl = []rdmatest.SGE{{Addr: bufVA + off, Length: uint32(size), LKey: mrKey}}
		q.remote = bufVA + bufSize/2 + off
	}
	byQP := make(map[uint32]*rcBenchQP, nqp)
	for _, q := range qps {
		byQP[q.xqpn] = q
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	total, posted := 0, 0
	idle := 0
	last := start
	wait := time.NewTimer(time.Hour)
	defer wait.Stop()
	for total < b.N {
		progress := false
		for _, q := range qps {
			k := 0
			if op == hw.IBVWRSend {
				// A SEND goes out only onto a posted receive:
				// this measures the datapath, not RNR NAKs.
				for q.recvs-q.posted < inFlight && q.rq.Produce(rdmatest.Recv{ID: uint64(q.recvs), SGL: q.sgl}.Encode) == nil {
					q.recvs++
				}
			}
			for q.posted-q.done < inFlight && posted < b.N && (op != hw.IBVWRSend || q.posted < q.recvs) {
				s := rdmatest.Send{ID: uint64(q.posted), Opcode: op, Flags: sig, AutoLength: true, NumSGE: -1,
					SGL: q.sgl, RemoteAddr: q.remote, RKey: mrKey}
				if q.sq.Produce(s.Encode) != nil {
					break
				}
				q.posted++
				posted++
				k++
			}
			if k > 0 {
				hw.Offsets(x.e).RegWrite(hw.RegSQDoorbell, q.xqpn)
				progress = true
			}
		}
		for {
			c, ok := x.scq.Poll()
			if !ok {
				break
			}
			if c.Status != ibrc.WCSuccess {
				b.Fatalf("completion %+v", c)
			}
			q := byQP[c.QPNum]
			if q == nil {
				b.Fatalf("completion of QP %#x", c.QPNum)
			}
			q.done++
			total++
			progress = true
		}
		for {
			c, ok := y.rcq.Poll()
			if !ok {
				break
			}
			if c.Status != ibrc.WCSuccess {
				b.Fatalf("receive completion %+v", c)
			}
			progress = true
		}
		if progress {
			idle = 0
			last = time.Now()
			continue
		}
		// Nothing to do: wait for a completion's interrupt, as a
		// program on a completion channel does (arm, poll once more
		// for what landed before the arm, sleep), rather than spin on
		// one of the two cores the engines run on.
		if idle++; idle == 1 {
			hw.Offsets(x.e).RegWrite(hw.RegCQArm, sendCQ)
			hw.Offsets(x.e).RegWrite(hw.RegEQArm, 1)
			if op == hw.IBVWRSend { // a full RQ waits for receives to complete
				hw.Offsets(y.e).RegWrite(hw.RegCQArm, recvCQ)
				hw.Offsets(y.e).RegWrite(hw.RegEQArm, 1)
			}
			continue
		}
		if time.Since(last) > 10*time.Second {
			for _, q := range qps {
				b.Logf("qp %#x posted %d done %d recvs %d sq %d/%d rq %d/%d", q.xqpn, q.posted, q.done, q.recvs,
					q.sq.Producer(), q.sq.Consumer(), q.rq.Producer(), q.rq.Consumer())
			}
			b.Fatalf("stalled at %d of %d messages (posted %d); x %+v\ny %+v", total, b.N, posted, x.e.Stats(), y.e.Stats())
		}
		// Look again after 1 ms at the latest: with 8 QPs a receive
		// queue can be full of receives that completed but whose
		// slots the receiving worker has not retired yet, and
		// nothing in flight to interrupt the wait.
		wait.Reset(time.Millisecond)
		select {
		case <-x.irq:
			x.d.Events()
			idle = 0
			continue
		case <-y.irq:
			y.d.Events()
			idle = 0
			continue
		case <-wait.C:
		}
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)*float64(size)*8/1e9/elapsed.Seconds(), "Gbit/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the CPU time the process used so far (user and system): per
// message, it tells what the engines cost when other programs share the
// cores and the wall clock says little.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRCCopyFloor copies the bytes of one message per iteration from
// the sending node's guest buffer into the receiving node's, page by page
// as they lie in guest memory: the one copy an RDMA WRITE or SEND must
// make.
func BenchmarkRCCopyFloor(b *testing.B) {
	for _, sz := range rcBenchSizes {
		b.Run(sz.name, func(b *testing.B) {
			pa, pb := port.Pipe(1)
			x, y := newNode(b, pa, 1), newNode(b, pb, 2)
			src, dst := x.buf.Pages(), y.buf.Pages()
			half := len(dst) / 2
			b.SetBytes(int64(sz.n))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				for pg := 0; pg < sz.n/4096; pg++ {
					copy(y.g.Bytes(dst[half+pg], 4096), x.g.Bytes(src[pg], 4096))
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)*float64(sz.n)*8/1e9/elapsed.Seconds(), "Gbit/s")
		})
	}
}
