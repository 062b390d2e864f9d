package guestmem

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// quiesceMem is 4 pages of host memory at 0x10000.
func quiesceMem(t *testing.T) (*Memory, []byte) {
	t.Helper()
	m := New()
	buf := make([]byte, 0x4000)
	if err := m.MapHost(0x10000, buf, ProtRead|ProtWrite, nil); err != nil {
		t.Fatal(err)
	}
	return m, buf
}

func isLate(err error) bool {
	var fe *FaultError
	return errors.As(err, &fe) && fe.Reason == FaultLate
}

// TestStreamLifecycle: Stop never waits, Quiesced and Done follow the last
// End of an admitted unit, and no unit is admitted after Stop.
func TestStreamLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inFlight int  // units admitted before Stop
		beginAft bool // a Begin after Stop (must be refused)
	}{
		{"idle", 0, false},
		{"one unit", 1, false},
		{"three units", 3, false},
		{"begin after stop", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := quiesceMem(t)
			s := m.NewStream("qp0")
			for range tc.inFlight {
				if !s.Begin() {
					t.Fatal("Begin refused on a running stream")
				}
			}
			s.Stop()
			if !s.Stopped() {
				t.Fatal("not Stopped after Stop")
			}
			if tc.beginAft && s.Begin() {
				t.Fatal("Begin admitted a unit after Stop")
			}
			for i := range tc.inFlight {
				if s.Quiesced() {
					t.Fatalf("quiesced with %d units in flight", tc.inFlight-i)
				}
				select {
				case <-s.Done():
					t.Fatal("Done closed with units in flight")
				default:
				}
				if err := s.WriteU32(0x10000, uint32(i)); err != nil {
					t.Fatalf("write inside an admitted unit refused: %v", err)
				}
				s.End()
			}
			if !s.Quiesced() {
				t.Fatal("not quiesced after the last End")
			}
			select {
			case <-s.Done():
			default:
				t.Fatal("Done not closed after the quiesce")
			}
			if m.LateWrites() != 0 {
				t.Fatalf("late writes: %v", m.LateLog())
			}
		})
	}
}

// TestLateWritesRefused: the detector is not vacuous. Every kind of late
// write is refused with FaultLate, counted and logged, and leaves guest
// memory as it was; reads through a quiesced stream fail without counting.
func TestLateWritesRefused(t *testing.T) {
	type access func(m *Memory, s *Stream) error
	for _, tc := range []struct {
		name   string
		setup  func(m *Memory, s *Stream)
		do     access
		iova   uint64
		fenced bool
		stream string
	}{
		{"write through a quiesced stream", func(m *Memory, s *Stream) { s.Stop() },
			func(m *Memory, s *Stream) error { return s.WriteAt(0x11000, []byte{1, 2, 3}) }, 0x11000, false, "qp0"},
		{"WriteU32 through a quiesced stream", func(m *Memory, s *Stream) { s.Stop() },
			func(m *Memory, s *Stream) error { return s.WriteU32(0x11000, 7) }, 0x11000, false, "qp0"},
		{"WriteU64 through a quiesced stream", func(m *Memory, s *Stream) { s.Stop() },
			func(m *Memory, s *Stream) error { return s.WriteU64(0x11000, 7) }, 0x11000, false, "qp0"},
		{"StoreU32Fenced through a quiesced stream", func(m *Memory, s *Stream) { s.Stop() },
			func(m *Memory, s *Stream) error { return s.StoreU32Fenced(0x11000, 7) }, 0x11000, false, "qp0"},
		{"stream StoreU32Fenced into a driver fence", func(m *Memory, s *Stream) { m.Fence(0x12000, 0x1000) },
			func(m *Memory, s *Stream) error { return s.StoreU32Fenced(0x12000, 7) }, 0x12000, true, "qp0"},
		{"device StoreU32Fenced into a driver fence", func(m *Memory, s *Stream) { m.Fence(0x12000, 0x1000) },
			func(m *Memory, s *Stream) error { return m.StoreU32Fenced(0x12004, 7) }, 0x12004, true, ""},
		{"device write into a driver fence", func(m *Memory, s *Stream) { m.Fence(0x12000, 0x1000) },
			func(m *Memory, s *Stream) error { return m.WriteU32(0x12ffc, 1) }, 0x12ffc, true, ""},
		{"stream write into a driver fence", func(m *Memory, s *Stream) { m.Fence(0x12000, 0x1000) },
			func(m *Memory, s *Stream) error { return s.WriteAt(0x11ffe, []byte{1, 2, 3, 4}) }, 0x11ffe, true, "qp0"},
		{"write into memory a quiesced stream owned", func(m *Memory, s *Stream) {
			m.FenceOnQuiesce(true)
			s.Own(0x13000, 0x100)
			s.Stop()
		},
			func(m *Memory, s *Stream) error { return m.WriteU16(0x130fe, 1) }, 0x130fe, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, buf := quiesceMem(t)
			for i := range buf {
				buf[i] = byte(i * 7)
			}
			before := append([]byte(nil), buf...)
			s := m.NewStream("qp0")
			tc.setup(m, s)
			err := tc.do(m, s)
			if !isLate(err) {
				t.Fatalf("late write not refused as late: %v", err)
			}
			if !bytes.Equal(buf, before) {
				t.Fatal("a refused write changed guest memory")
			}
			if n := m.LateWrites(); n != 1 {
				t.Fatalf("LateWrites %d, want 1", n)
			}
			log := m.LateLog()
			if len(log) != 1 || log[0].IOVA != tc.iova || log[0].Fenced != tc.fenced || log[0].Stream != tc.stream {
				t.Fatalf("LateLog %v, want one at %#x fenced=%v stream=%q", log, tc.iova, tc.fenced, tc.stream)
			}
			if log[0].String() == "" {
				t.Fatal("empty description")
			}
			// Reads are never late, but a quiesced stream refuses them.
			var b [4]byte
			if s.Quiesced() {
				if err := s.ReadAt(0x11000, b[:]); !errors.Is(err, ErrStopped) {
					t.Fatalf("read through a quiesced stream: %v", err)
				}
			}
			if err := m.ReadAt(0x12000, b[:]); err != nil {
				t.Fatalf("read of fenced memory: %v", err)
			}
			if m.LateWrites() != 1 {
				t.Fatal("a read counted as late")
			}
			m.ResetLateWrites()
			if m.LateWrites() != 0 || len(m.LateLog()) != 0 {
				t.Fatal("ResetLateWrites left state")
			}
			if err := m.WriteU32(0x12ffc, 1); err != nil {
				t.Fatalf("ResetLateWrites kept a fence: %v", err)
			}
		})
	}
}

// TestFences: fences merge, Unfence cuts them (also in the middle), writes
// next to a fence pass, Own lifts a fence, and degenerate ranges are
// ignored.
func TestFences(t *testing.T) {
	type op struct {
		fence, unfence, own  bool
		stop, fenceOnQuiesce bool
		iova, size           uint64
	}
	for _, tc := range []struct {
		name string
		ops  []op
		// writes: iova -> refused?
		writes map[uint64]bool
	}{
		{"one fence", []op{{fence: true, iova: 0x11000, size: 0x10}},
			map[uint64]bool{0x10ffc: false, 0x10ffd: true, 0x11000: true, 0x1100c: true, 0x1100d: true, 0x11010: false}},
		{"merged fences, cut in the middle",
			[]op{{fence: true, iova: 0x11000, size: 0x100}, {fence: true, iova: 0x11100, size: 0x100}, {unfence: true, iova: 0x11080, size: 0x100}},
			map[uint64]bool{0x11000: true, 0x1107c: true, 0x11080: false, 0x1117c: false, 0x11180: true, 0x111fc: true, 0x11200: false}},
		{"own lifts the fence", []op{{fence: true, iova: 0x11000, size: 0x1000}, {own: true, iova: 0x11800, size: 0x100}},
			map[uint64]bool{0x11000: true, 0x11800: false, 0x118fc: false, 0x11900: true}},
		{"zero size and wrapping ranges ignored",
			[]op{{fence: true, iova: 0x11000, size: 0}, {fence: true, iova: ^uint64(0) - 4, size: 0x100}},
			map[uint64]bool{0x11000: false}},
		{"owned memory is not fenced on quiesce by default", []op{{own: true, iova: 0x11000, size: 0x100}, {stop: true}},
			map[uint64]bool{0x11000: false}},
		{"owned memory fenced on quiesce in driver models", []op{{fenceOnQuiesce: true}, {own: true, iova: 0x11000, size: 0x100}, {stop: true}},
			map[uint64]bool{0x11000: true, 0x110fc: true, 0x11100: false}},
		{"unfence of nothing", []op{{unfence: true, iova: 0x11000, size: 0x100}}, map[uint64]bool{0x11000: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := quiesceMem(t)
			s := m.NewStream("ring")
			for _, o := range tc.ops {
				switch {
				case o.fence:
					m.Fence(o.iova, o.size)
				case o.unfence:
					m.Unfence(o.iova, o.size)
				case o.own:
					s.Own(o.iova, o.size)
				case o.stop:
					s.Stop()
				case o.fenceOnQuiesce:
					m.FenceOnQuiesce(true)
				}
			}
			for iova, refused := range tc.writes {
				err := m.WriteU32(iova, 1)
				if got := isLate(err); got != refused {
					t.Errorf("write at %#x: refused=%v, want %v (%v)", iova, got, refused, err)
				}
			}
		})
	}
}

// TestLateLogBounded: the log keeps the first 16, the count keeps going.
func TestLateLogBounded(t *testing.T) {
	m, _ := quiesceMem(t)
	m.Fence(0x10000, 0x4000)
	for i := range 40 {
		m.WriteU32(0x10000+uint64(i)*4, 1)
	}
	if m.LateWrites() != 40 || len(m.LateLog()) != lateLogSize {
		t.Fatalf("count %d log %d", m.LateWrites(), len(m.LateLog()))
	}
	if m.LateLog()[0].IOVA != 0x10000 {
		t.Fatalf("log does not start with the first: %v", m.LateLog()[0])
	}
}

// TestStreamStopRace stresses Begin/End against Stop (run it with -race):
// writers loop Begin, write, End on one stream while another goroutine
// stops it. A writer inside a unit must never see the stream quiesced;
// once Done is closed no write may land, and none is counted as late
// (the writers bracket every write correctly).
func TestStreamStopRace(t *testing.T) {
	const writers = 4
	iters := 100
	if testing.Short() {
		iters = 20
	}
	m, buf := quiesceMem(t)
	for it := range iters {
		s := m.NewStream(fmt.Sprint("s", it))
		var wg sync.WaitGroup
		var stop atomic.Bool
		var bad atomic.Value
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := uint32(1); !stop.Load(); seq++ {
					if !s.Begin() {
						runtime.Gosched()
						continue
					}
					if s.Quiesced() {
						bad.Store("a unit in flight saw the stream quiesced")
					}
					if err := s.WriteU32(0x10000+uint64(w)*4, seq); err != nil {
						bad.Store(fmt.Sprint("write in a unit refused: ", err))
					}
					s.End()
				}
			}()
		}
		time.Sleep(time.Duration(it%7) * 10 * time.Microsecond)
		s.Stop()
		<-s.Done()
		snap := append([]byte(nil), buf[:writers*4]...)
		time.Sleep(20 * time.Microsecond) // writers keep trying
		stop.Store(true)
		wg.Wait()
		if v := bad.Load(); v != nil {
			t.Fatalf("iteration %d: %v", it, v)
		}
		if !bytes.Equal(snap, buf[:writers*4]) {
			t.Fatalf("iteration %d: a write landed after Done: %v then %v", it, snap, buf[:writers*4])
		}
		if m.LateWrites() != 0 {
			t.Fatalf("iteration %d: %v", it, m.LateLog())
		}
	}
}

func TestDraining(t *testing.T) {
	m := New()
	var d Draining
	if d.Busy() || d.Next() != nil {
		t.Fatal("empty Draining is busy")
	}
	idle, held := m.NewStream("idle"), m.NewStream("held")
	if !held.Begin() {
		t.Fatal("Begin on a running stream")
	}
	idle.Stop()
	held.Stop()
	d.Add(idle)
	d.Add(held)
	if !d.Busy() {
		t.Fatal("a stream with a unit in flight does not count as draining")
	}
	done := d.Next()
	if done != held.Done() {
		t.Fatal("Next is not the stream still draining")
	}
	held.End()
	<-done
	if d.Busy() || d.Next() != nil {
		t.Fatal("Draining busy after every stream quiesced")
	}
}
