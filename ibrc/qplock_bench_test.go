package ibrc_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
)

// slowMem is memory whose every access first sleeps: a DMA that waits
// for something other than the CPU (guest memory behind a socket, a page
// the host brings in). One lock for the whole engine, held across copies,
// serialised the QPs on such waits. (time.Sleep's 20µs is closer to 1 ms
// on a loaded machine: the figures are for comparing, not absolute.)
type slowMem struct {
	*ibrctest.Mem
	wait time.Duration
}

func (m slowMem) ReadAt(va uint64, p []byte) error {
	time.Sleep(m.wait)
	return m.Mem.ReadAt(va, p)
}

func (m slowMem) WriteAt(va uint64, p []byte) error {
	time.Sleep(m.wait)
	return m.Mem.WriteAt(va, p)
}

// BenchmarkParallelQPs streams 64 KiB RDMA WRITEs (MTU 4096, up to 4 in
// flight per QP) on n QP pairs between two engines at once, each QP
// posting and reaping from a goroutine of its own and the wire delivering
// each QP's frames on a goroutine of its own (steeredWire), and reports
// the total throughput. mem=fast copies plain memory (CPU-bound: no more
// parallel than the CPUs); with mem=slow the receiving engine's memory
// sleeps before each packet's copy (slowMem). Compare the qps=n figures
// with qps=1 on one build, and a build with per-QP locks with one
// without. The local ACK timeout (4 s) keeps retransmissions out of the
// figures; retrans/op says if any happened.
func BenchmarkParallelQPs(b *testing.B) {
	for _, mem := range []struct {
		name string
		wait time.Duration
	}{{"fast", 0}, {"slow", 20 * time.Microsecond}} {
		for _, n := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("mem=%s/qps=%d", mem.name, n), func(b *testing.B) {
				benchParallelQPs(b, n, mem.wait)
			})
		}
	}
}

func benchParallelQPs(b *testing.B, n int, wait time.Duration) {
	const (
		size     = 64 << 10
		inFlight = 4
	)
	w := newSteeredWire()
	x, y := twoEngines(b, w, nil)
	px, py := x.CreatePD(), y.CreatePD()
	type pair struct {
		x, y  *qpEnd
		ready chan struct{}
	}
	pairs := make([]pair, n)
	for i := range pairs {
		var mx, my ibrc.Memory
		rx, ry := ibrctest.NewMem(memBase, 1<<20, 4096), ibrctest.NewMem(memBase, 1<<20, 4096)
		mx, my = rx, ry
		if wait > 0 {
			my = slowMem{ry, wait}
		}
		p := pair{x: newEnd(b, x, px, mx, rx, nil, nil), y: newEnd(b, y, py, my, ry, nil, nil), ready: make(chan struct{}, 1)}
		pairUp(b, p.x, p.y, opts{mtu: ibrc.MTU4096, timeout: 20, retry: 7, rnr: 7})
		p.x.scq.SetNotify(func() {
			select {
			case p.ready <- struct{}{}:
			default:
			}
		})
		pairs[i] = p
	}
	b.Cleanup(w.close)
	b.SetBytes(size)
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, p := range pairs {
		quota := b.N / n
		if i < b.N%n {
			quota++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]ibrc.WC, 16)
			posted, done := 0, 0
			for done < quota {
				for posted < quota && posted-done < inFlight {
					if err := p.x.qp.PostSend(ibrc.SendWR{ID: uint64(posted), Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled,
						SGL: p.x.sge(0, size), RemoteAddr: memBase + uint64(posted%inFlight)*size, RKey: p.y.mr.RKey()}); err != nil {
						b.Error(err)
						return
					}
					posted++
				}
				k := p.x.scq.Poll(buf)
				for _, c := range buf[:k] {
					if c.Status != ibrc.WCSuccess {
						b.Errorf("completion %+v", c)
						return
					}
				}
				done += k
				if k == 0 {
					select {
					case <-p.ready:
					case <-time.After(10 * time.Second):
						b.Errorf("QP %d: %d of %d WRITEs done after 10s", i, done, quota)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(x.Stats().Retransmits)/float64(b.N), "retrans/op")
}
