package rdma_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/rdma"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/pkthdr"
	"github.com/npfnic/npfnic/vdevice/port"
)

// scriptPort is one end of a cable whose sends follow a script: TrySend
// says the frame would wait on every every-th try (1: always, 0: never),
// and Send, which the transmit goroutine waits in, first sleeps slow.
// It counts the TrySends that came while a frame the engine owes the port
// was not through yet: one TrySend refused and Send has not had, or one in
// Send. A frame tried then would pass it. It
// records the PSNs of the request packets and READ responses this end
// receives, by destination QP, in the order they came off the wire, each
// with the PSN the next one should have (a READ request takes one per
// response packet, at the test's MTU of 1024).
type scriptPort struct {
	*port.PipePort
	every int
	slow  time.Duration
	tries atomic.Int64

	mu      sync.Mutex
	refused [][]byte // refused by TrySend, not yet in Send, oldest first
	inSend  int
	passed  int                  // TrySends while refused or inSend was not empty
	psns    map[uint32][]psnSpan // destination QPN → PSNs, in arrival order
}

// psnSpan is a packet's PSN and the one after its last.
type psnSpan struct{ psn, next uint32 }

func (s *scriptPort) TrySend(f []byte) error {
	s.mu.Lock()
	if len(s.refused) > 0 || s.inSend > 0 {
		s.passed++
	}
	if n := s.tries.Add(1); s.every > 0 && n%int64(s.every) == 0 {
		s.refused = append(s.refused, bytes.Clone(f))
		s.mu.Unlock()
		return port.ErrWouldBlock
	}
	s.mu.Unlock()
	return s.PipePort.TrySend(f)
}

func (s *scriptPort) Send(f []byte) error {
	s.mu.Lock()
	s.inSend++
	if len(s.refused) > 0 && bytes.Equal(s.refused[0], f) {
		s.refused = s.refused[1:]
	}
	s.mu.Unlock()
	if s.slow > 0 {
		time.Sleep(s.slow)
	}
	err := s.PipePort.Send(f)
	s.mu.Lock()
	s.inSend--
	s.mu.Unlock()
	return err
}

func (s *scriptPort) Recv(buf []byte) (int, error) {
	n, err := s.PipePort.Recv(buf)
	if err != nil {
		return n, err
	}
	var h pkthdr.Headers
	f := buf[:n]
	if h.Parse(f) != nil {
		return n, nil
	}
	off, ok := h.BTHOffset(len(f))
	if !ok || len(f) < off+28 {
		return n, nil
	}
	// Requests (SEND, WRITE, READ request) and READ responses: each
	// packet's PSN is one past the one before, unless it is sent again.
	if op := f[off]; op <= 0x10 {
		qpn := binary.BigEndian.Uint32(f[off+4:]) & 0xffffff
		psn := binary.BigEndian.Uint32(f[off+8:]) & 0xffffff
		next := psn + 1
		if op == 0x0c { // READ request: its RETH's length
			next = psn + max(1, (binary.BigEndian.Uint32(f[off+12+12:])+1023)/1024)
		}
		s.mu.Lock()
		s.psns[qpn] = append(s.psns[qpn], psnSpan{psn, next & 0xffffff})
		s.mu.Unlock()
	}
	return n, nil
}

// gaps reports the places where a packet came before the one it should
// follow: its PSN later than the one expected next. A retransmission goes
// back, which is no reordering.
func (s *scriptPort) gaps() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var bad []string
	for qpn, ps := range s.psns {
		want := ps[0].psn
		for i, p := range ps {
			if d := (p.psn - want) & 0xffffff; d != 0 && d < 1<<23 {
				bad = append(bad, fmt.Sprintf("QP %#x: PSN %#x where %#x was due (packet %d)", qpn, p.psn, want, i))
			}
			if d := (p.next - want) & 0xffffff; d < 1<<23 {
				want = p.next
			}
		}
	}
	return bad
}

// TestTxDirect: with Config.TxDirect, frames go to the port on the
// goroutine that built them when the port takes them at once, and through
// the transmit goroutine otherwise, and either way they leave in order.
// Over a cable whose TrySend refuses some frames and whose Send is slow,
// two QPs WRITE, SEND and READ several packets' worth each way at once;
// every byte lands, every completion comes in order, each QP's requests
// and READ responses come off the wire in PSN order (a frame sent at once
// past one the transmit goroutine still holds, or one still queued, would
// fail it), and the direct sends are counted.
func TestTxDirect(t *testing.T) {
	for _, tc := range []struct {
		name   string
		direct bool
		every  int
		slow   time.Duration
		// what share of x's frames may have gone direct: none, some
		// (and some not), or any
		want string
	}{
		{"off", false, 0, 0, "none"},
		{"port always takes", true, 0, 0, "some"},
		{"port never takes", true, 1, 0, "none"},
		{"every 2nd waits, slow send", true, 2, 100 * time.Microsecond, "mixed"},
		{"every 5th waits, slow send", true, 5, 200 * time.Microsecond, "mixed"},
		{"every 3rd waits, slower send", true, 3, time.Millisecond, "mixed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pa, pb := port.Pipe(256)
			sa := &scriptPort{PipePort: pa, every: tc.every, slow: tc.slow, psns: map[uint32][]psnSpan{}}
			sb := &scriptPort{PipePort: pb, every: tc.every, slow: tc.slow, psns: map[uint32][]psnSpan{}}
			o := nodeOpts{config: func(c *rdma.Config) { c.TxDirect = tc.direct }}
			x, y := newNodeWith(t, sa, 1, o), newNodeWith(t, sb, 2, o)
			x.connectTimeout(t, x.qpn, y, y.qpn, 3, 18) // MTU 1024, ACK timeout 1 s
			y.connectTimeout(t, y.qpn, x, x.qpn, 3, 18)
			const nqp, size = 2, 24 << 10
			type qp struct {
				xqpn, yqpn uint32
				sq, rq     *rdmatest.Queue
			}
			qps := []qp{{x.qpn, y.qpn, x.sq, y.rq}}
			for i := 1; i < nqp; i++ {
				q := qp{xqpn: x.qpn + uint32(0x10*i), yqpn: y.qpn + uint32(0x10*i)}
				q.sq, _ = x.createQP(t, q.xqpn)
				_, q.rq = y.createQP(t, q.yqpn)
				x.connectTimeout(t, q.xqpn, y, q.yqpn, 3, 18)
				y.connectTimeout(t, q.yqpn, x, q.xqpn, 3, 18)
				qps = append(qps, q)
			}
			wr := func(i int) int { return i * 0x10000 }
			sd := func(i int) int { return 0x40000 + i*0x8000 }
			rd := func(i int) int { return 0x80000 + i*0x8000 }
			src := func(i int) int { return 0xc0000 + i*0x8000 }
			for i, q := range qps {
				x.buf.Write(src(i), pattern(size, byte(i)))
				y.buf.Write(rd(i), pattern(size, byte(0x40+i)))
				y.postRecv(t, q.rq, rdmatest.Recv{ID: uint64(i), SGL: []rdmatest.SGE{
					{Addr: bufVA + uint64(sd(i)), Length: size, LKey: mrKey}}})
				sge := []rdmatest.SGE{{Addr: bufVA + uint64(src(i)), Length: size, LKey: mrKey}}
				x.post(t, q.sq, q.xqpn,
					rdmatest.Send{ID: 1, Opcode: hw.IBVWRRDMAWrite, Flags: sig, AutoLength: true, NumSGE: -1, SGL: sge,
						RemoteAddr: bufVA + uint64(wr(i)), RKey: mrKey},
					rdmatest.Send{ID: 2, Opcode: hw.IBVWRRDMARead, Flags: sig, AutoLength: true, NumSGE: -1,
						SGL:        []rdmatest.SGE{{Addr: bufVA + uint64(rd(i)), Length: size, LKey: mrKey}},
						RemoteAddr: bufVA + uint64(rd(i)), RKey: mrKey},
					rdmatest.Send{ID: 3, Opcode: hw.IBVWRSend, Flags: sig, AutoLength: true, NumSGE: -1, SGL: sge},
					rdmatest.Send{ID: 4, Opcode: hw.IBVWRRDMAWrite, Flags: sig, AutoLength: true, NumSGE: -1, SGL: sge,
						RemoteAddr: bufVA + uint64(wr(i)+size), RKey: mrKey})
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
				want := pattern(size, byte(i))
				if !bytes.Equal(y.buf.Read(wr(i), size), want) || !bytes.Equal(y.buf.Read(wr(i)+size, size), want) {
					t.Errorf("QP %d: WRITE data differs", i)
				}
				if !bytes.Equal(y.buf.Read(sd(i), size), want) {
					t.Errorf("QP %d: SEND data differs", i)
				}
				if !bytes.Equal(x.buf.Read(rd(i), size), pattern(size, byte(0x40+i))) {
					t.Errorf("QP %d: READ data differs", i)
				}
			}
			for _, s := range []*scriptPort{sa, sb} {
				for _, g := range s.gaps() {
					t.Error("out of order on the wire:", g)
				}
				s.mu.Lock()
				if s.passed != 0 || len(s.refused) != 0 {
					t.Errorf("%d frames tried while earlier ones were not through; %d refused never sent", s.passed, len(s.refused))
				}
				s.mu.Unlock()
			}
			for _, n := range []*node{x, y} {
				st := n.e.Stats().RC
				if st.SeqNakReceived != 0 || st.SeqNakSent != 0 || st.OutOfSeqDropped != 0 {
					t.Errorf("packets out of order: %+v", st)
				}
			}
			st := x.e.Stats()
			switch direct, all := st.TxDirect, st.RC.TxFrames; {
			case tc.want == "none" && direct != 0:
				t.Errorf("%d of %d frames direct, want none", direct, all)
			case tc.want == "some" && direct == 0:
				t.Errorf("no frame of %d direct", all)
			case tc.want == "mixed" && (direct == 0 || direct >= all):
				t.Errorf("%d of %d frames direct, want some but not all", direct, all)
			}
		})
	}
}

// BenchmarkRCDirect is BenchmarkRC's one-QP cases with Config.TxDirect,
// to compare with BenchmarkRC in one run.
func BenchmarkRCDirect(b *testing.B) {
	for _, op := range []struct {
		name string
		op   uint32
	}{{"write", hw.IBVWRRDMAWrite}, {"send", hw.IBVWRSend}} {
		for _, sz := range rcBenchSizes {
			b.Run(fmt.Sprintf("%s/%s/qps=1", op.name, sz.name), func(b *testing.B) {
				benchRCWith(b, op.op, sz.n, 1, nodeOpts{config: func(c *rdma.Config) { c.TxDirect = true }})
			})
		}
	}
}
