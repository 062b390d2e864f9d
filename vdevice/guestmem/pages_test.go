package guestmem

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"
)

type piece struct {
	at     uint64
	off, l int
}

func TestSplitPages(t *testing.T) {
	const top = math.MaxUint64 // the highest address; no access may end past it
	errStop := errors.New("stop")
	for _, tc := range []struct {
		name      string
		iova      uint64
		n         int
		stopAfter int // fn fails on this piece (1-based); 0: never
		want      []piece
		overflow  bool
	}{
		{name: "empty", iova: 0x1000, n: 0},
		{name: "empty at the top", iova: top, n: 0},
		{name: "inside one page", iova: 0x1010, n: 16, want: []piece{{0x1010, 0, 16}}},
		{name: "exactly one page", iova: 0x1000, n: PageSize, want: []piece{{0x1000, 0, PageSize}}},
		{name: "one page, unaligned", iova: 0x1800, n: PageSize,
			want: []piece{{0x1800, 0, 0x800}, {0x2000, 0x800, 0x800}}},
		{name: "straddling", iova: 0x1ff0, n: 0x20, want: []piece{{0x1ff0, 0, 0x10}, {0x2000, 0x10, 0x10}}},
		{name: "last byte of a page", iova: 0x1fff, n: 1, want: []piece{{0x1fff, 0, 1}}},
		{name: "from the last byte of a page", iova: 0x1fff, n: 2, want: []piece{{0x1fff, 0, 1}, {0x2000, 1, 1}}},
		{name: "three pages", iova: 0x1800, n: 2 * PageSize,
			want: []piece{{0x1800, 0, 0x800}, {0x2000, 0x800, PageSize}, {0x3000, 0x1800, 0x800}}},
		{name: "huge, stopped by fn", iova: 0x1234, n: math.MaxInt, stopAfter: 2,
			want: []piece{{0x1234, 0, 0xdcc}, {0x2000, 0xdcc, PageSize}}},
		{name: "huge from 1", iova: 1, n: math.MaxInt, stopAfter: 1, want: []piece{{1, 0, PageSize - 1}}},
		{name: "last page but its top byte", iova: top - PageSize + 1, n: PageSize - 1,
			want: []piece{{top - PageSize + 1, 0, PageSize - 1}}},
		{name: "two pages below the top", iova: top - 2*PageSize + 0x11, n: 2*PageSize - 0x11,
			want: []piece{{top - 2*PageSize + 0x11, 0, PageSize - 0x10}, {top - PageSize + 1, PageSize - 0x10, PageSize - 1}}},
		{name: "ending at 2^64", iova: top - PageSize + 1, n: PageSize, overflow: true},
		{name: "top byte", iova: top, n: 1, overflow: true},
		{name: "wrapping far", iova: top - 10, n: math.MaxInt, overflow: true},
		{name: "up to the top byte", iova: 1 << 63, n: math.MaxInt, stopAfter: 1, want: []piece{{1 << 63, 0, PageSize}}},
		{name: "one past the top byte", iova: 1<<63 + 1, n: math.MaxInt, overflow: true},
		{name: "negative length", iova: 0x1000, n: -1, overflow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []piece
			err := SplitPages(tc.iova, tc.n, func(at uint64, off, l int) error {
				got = append(got, piece{at, off, l})
				switch {
				case len(got) == tc.stopAfter:
					return errStop
				case len(got) > len(tc.want):
					return errors.New("more pieces than expected")
				}
				return nil
			})
			switch {
			case tc.overflow:
				var fe *FaultError
				if !errors.As(err, &fe) || fe.Reason != FaultOverflow || fe.IOVA != tc.iova || fe.Len != tc.n {
					t.Fatalf("err = %v, want a FaultOverflow at %#x+%d", err, tc.iova, tc.n)
				}
			case tc.stopAfter > 0:
				if err != errStop {
					t.Fatalf("err = %v, want fn's error", err)
				}
			case err != nil:
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("pieces %#v, want %#v", got, tc.want)
			}
		})
	}
}

// twoMappings maps two adjacent host regions of one page each at 0x1000,
// so that only a split access can cross from one to the other.
func twoMappings(t testing.TB) *Memory {
	m := New()
	a, b := make([]byte, PageSize), make([]byte, PageSize)
	if err := m.MapHost(0x1000, a, ProtRead|ProtWrite, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.MapHost(0x2000, b, ProtRead|ProtWrite, nil); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestStreamPages(t *testing.T) {
	for _, tc := range []struct {
		name   string
		iova   uint64
		n      int
		reason FaultReason // 0: succeeds
	}{
		{name: "empty", iova: 0x1000, n: 0},
		{name: "across the mappings", iova: 0x1ff0, n: 0x20},
		{name: "both mappings whole", iova: 0x1000, n: 2 * PageSize},
		{name: "past the second mapping", iova: 0x2ff0, n: 0x20, reason: FaultUnmapped},
		{name: "wrapping", iova: math.MaxUint64 - 0xf, n: 0x20, reason: FaultOverflow},
		{name: "ending at 2^64 inside the top page", iova: math.MaxUint64 - 0xf, n: 0x10, reason: FaultOverflow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := twoMappings(t)
			s := m.NewStream("t")
			p := bytes.Repeat([]byte{0xa5}, tc.n)
			werr := s.WritePages(tc.iova, p)
			q := make([]byte, tc.n)
			rerr := s.ReadPages(tc.iova, q)
			for _, c := range []struct {
				err   error
				write bool
			}{{werr, true}, {rerr, false}} {
				var fe *FaultError
				switch {
				case tc.reason == 0 && c.err != nil:
					t.Fatalf("write=%v: %v", c.write, c.err)
				case tc.reason != 0 && (!errors.As(c.err, &fe) || fe.Reason != tc.reason || fe.Write != c.write):
					t.Fatalf("write=%v: %v, want %v", c.write, c.err, tc.reason)
				}
			}
			if tc.reason == 0 && !bytes.Equal(p, q) {
				t.Fatal("read back differs from what was written")
			}
		})
	}
	t.Run("unsplit access across the mappings faults", func(t *testing.T) {
		m := twoMappings(t)
		s := m.NewStream("t")
		if err := s.WriteAt(0x1ff0, make([]byte, 0x20)); faultReason(err) != FaultCrosses {
			t.Fatalf("unsplit WriteAt across two mappings: %v, want FaultCrosses", err)
		}
	})
	t.Run("quiesced stream", func(t *testing.T) {
		m := twoMappings(t)
		s := m.NewStream("t")
		s.Stop()
		if err := s.WritePages(0x1ff0, make([]byte, 0x20)); faultReason(err) != FaultLate {
			t.Fatalf("write after quiesce: %v, want FaultLate", err)
		}
		if err := s.ReadPages(0x1ff0, make([]byte, 0x20)); !errors.Is(err, ErrStopped) {
			t.Fatalf("read after quiesce: %v, want ErrStopped", err)
		}
	})
}

// TestPagesDoNotAllocate: splitting keeps the host path free of
// allocation, including for a caller's closure that captures its state.
func TestPagesDoNotAllocate(t *testing.T) {
	m := twoMappings(t)
	s := m.NewStream("t")
	buf := make([]byte, 0x800)
	var sum int
	if n := testing.AllocsPerRun(100, func() {
		_ = s.WritePages(0x1c00, buf)
		_ = s.ReadPages(0x1c00, buf)
		_ = SplitPages(0x1c00, len(buf), func(at uint64, off, l int) error {
			sum += off + l
			return s.ReadAt(at, buf[off:off+l])
		})
	}); n != 0 {
		t.Fatalf("%v allocations per split access", n)
	}
}

// BenchmarkPages is the cost of splitting a frame-sized access that
// straddles a page, against BenchmarkReadWrite's single accesses.
func BenchmarkPages(b *testing.B) {
	m := twoMappings(b)
	s := m.NewStream("b")
	buf := make([]byte, 1500)
	for _, op := range []struct {
		name string
		do   func(iova uint64, p []byte) error
	}{{"write1500", s.WritePages}, {"read1500", s.ReadPages}} {
		b.Run(op.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if err := op.do(0x1c00, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
