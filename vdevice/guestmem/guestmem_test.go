package guestmem

import (
	"bytes"
	"errors"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

func memfd(t testing.TB, size int) int {
	t.Helper()
	fd, err := unix.MemfdCreate("guestmem-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// fakeRemote stores remote regions in a map-backed byte array.
type fakeRemote struct {
	mu    sync.Mutex
	base  uint64
	bytes []byte
	fail  bool
	calls int
}

func (f *fakeRemote) ReadRemote(iova uint64, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail {
		return unix.EFAULT
	}
	copy(p, f.bytes[iova-f.base:])
	return nil
}

func (f *fakeRemote) WriteRemote(iova uint64, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail {
		return unix.EFAULT
	}
	copy(f.bytes[iova-f.base:], p)
	return nil
}

func faultReason(err error) FaultReason {
	var fe *FaultError
	if errors.As(err, &fe) {
		return fe.Reason
	}
	return 0
}

func TestMapFDAndAccess(t *testing.T) {
	m := New()
	fd := memfd(t, 3*4096)
	// Map the second and third pages at IOVA 0x10000, offset not at 0.
	if err := m.MapFD(0x10000, 8192, fd, 4096, ProtRead|ProtWrite); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteU32(0x10004, 0xdeadbeef); err != nil {
		t.Fatal(err)
	}
	// The bytes landed in the file at offset 4096+4.
	var b [4]byte
	if _, err := unix.Pread(fd, b[:], 4100); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[:], []byte{0xef, 0xbe, 0xad, 0xde}) {
		t.Fatalf("file bytes % x", b)
	}
	v, err := m.ReadU32(0x10004)
	if err != nil || v != 0xdeadbeef {
		t.Fatalf("ReadU32 = %#x, %v", v, err)
	}
	if err := m.WriteU64(0x11ff8, 0x0102030405060708); err != nil {
		t.Fatal(err)
	}
	if v, _ := m.ReadU64(0x11ff8); v != 0x0102030405060708 {
		t.Fatalf("ReadU64 = %#x", v)
	}
	if err := m.WriteU16(0x10000, 0xabcd); err != nil {
		t.Fatal(err)
	}
	if v, _ := m.ReadU16(0x10000); v != 0xabcd {
		t.Fatalf("ReadU16 = %#x", v)
	}

	// Unaligned file offsets are handled by mapping from the page start.
	if err := m.MapFD(0x40000, 100, fd, 4100, ProtRead); err != nil {
		t.Fatal(err)
	}
	if v, _ := m.ReadU32(0x40000); v != 0xdeadbeef {
		t.Fatalf("unaligned-offset mapping read %#x", v)
	}
}

func TestFaults(t *testing.T) {
	m := New()
	fd := memfd(t, 8192)
	if err := m.MapFD(0x1000, 4096, fd, 0, ProtRead|ProtWrite); err != nil {
		t.Fatal(err)
	}
	if err := m.MapFD(0x2000, 4096, fd, 4096, ProtRead); err != nil { // adjacent, read-only
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	for _, tc := range []struct {
		name  string
		iova  uint64
		n     int
		write bool
		want  FaultReason
	}{
		{"below", 0x0ff0, 4, false, FaultUnmapped},
		{"straddles start", 0x0ffe, 4, false, FaultUnmapped},
		{"crosses into neighbour", 0x1ffe, 4, false, FaultCrosses},
		{"past the end", 0x2ffe, 4, false, FaultCrosses},
		{"after", 0x3000, 1, false, FaultUnmapped},
		{"read-only write", 0x2000, 4, true, FaultPermission},
		{"wraps", ^uint64(0) - 1, 4, false, FaultOverflow},
		{"huge", 0x1000, 16, false, 0},
		{"ok write", 0x1ff0, 16, true, 0},
		{"ok read ro", 0x2ff0, 16, false, 0},
		{"empty anywhere", 0xdead0000, 0, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.write {
				err = m.WriteAt(tc.iova, buf[:tc.n])
			} else {
				err = m.ReadAt(tc.iova, buf[:tc.n])
			}
			if got := faultReason(err); got != tc.want {
				t.Fatalf("reason %v (err %v), want %v", got, err, tc.want)
			}
			if tc.want != 0 {
				var fe *FaultError
				errors.As(err, &fe)
				if fe.IOVA != tc.iova || fe.Len != tc.n || fe.Write != tc.write || fe.Error() == "" {
					t.Fatalf("fault fields %+v", fe)
				}
			}
		})
	}
}

func TestMapUnmapRules(t *testing.T) {
	m := New()
	m.SetMaxMappings(3)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.MapRemote(0x1000, 0x1000, ProtRead))
	must(m.MapRemote(0x3000, 0x1000, ProtRead))
	for _, tc := range []struct {
		iova, size uint64
		want       error
	}{
		{0x1000, 0x1000, ErrOverlap},
		{0x0800, 0x1000, ErrOverlap},
		{0x1fff, 0x2, ErrOverlap},
		{0x2800, 0x1000, ErrOverlap},
		{0x0, 0x0, ErrInvalid},
		{^uint64(0) - 10, 100, ErrInvalid},
	} {
		if err := m.MapRemote(tc.iova, tc.size, ProtRead); err != tc.want {
			t.Errorf("MapRemote(%#x,%#x) = %v want %v", tc.iova, tc.size, err, tc.want)
		}
	}
	must(m.MapRemote(0x2000, 0x1000, ProtRead)) // fills the gap exactly
	if err := m.MapRemote(0x9000, 0x1000, ProtRead); err != ErrTooMany {
		t.Fatalf("fourth map: %v", err)
	}
	for _, tc := range []struct{ iova, size uint64 }{{0x1000, 0x800}, {0x1800, 0x800}, {0x5000, 0x1000}, {0x1000, 0x2000}} {
		if err := m.Unmap(tc.iova, tc.size); err != ErrNotMapped {
			t.Errorf("Unmap(%#x,%#x) = %v", tc.iova, tc.size, err)
		}
	}
	must(m.Unmap(0x2000, 0x1000))
	if got := m.Regions(); len(got) != 2 || got[0].IOVA != 0x1000 || got[1].IOVA != 0x3000 || !got[0].Remote {
		t.Fatalf("regions %+v", got)
	}
	m.UnmapAll()
	if len(m.Regions()) != 0 {
		t.Fatal("UnmapAll left regions")
	}
}

func TestRemote(t *testing.T) {
	m := New()
	if err := m.MapRemote(0xc0000, 0x1000, ProtRead|ProtWrite); err != nil {
		t.Fatal(err)
	}
	if got := faultReason(m.WriteU32(0xc0000, 1)); got != FaultRemote {
		t.Fatalf("without accessor: %v", got)
	}
	f := &fakeRemote{base: 0xc0000, bytes: make([]byte, 0x1000)}
	m.SetRemote(f)
	if err := m.WriteU32(0xc0010, 0x11223344); err != nil {
		t.Fatal(err)
	}
	if v, err := m.ReadU32(0xc0010); err != nil || v != 0x11223344 {
		t.Fatalf("remote read %#x %v", v, err)
	}
	if f.calls != 2 {
		t.Fatalf("remote calls %d", f.calls)
	}
	f.fail = true
	err := m.ReadAt(0xc0000, make([]byte, 4))
	if faultReason(err) != FaultRemote || !errors.Is(err, unix.EFAULT) {
		t.Fatalf("remote failure: %v", err)
	}
}

// TestUnmapDuringDMA unmaps and remaps a region while goroutines copy into
// it; run with -race. Every access must either succeed or fault cleanly.
func TestUnmapDuringDMA(t *testing.T) {
	m := New()
	fd := memfd(t, 1<<16)
	if err := m.MapFD(0, 1<<16, fd, 0, ProtRead|ProtWrite); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var ok, faults atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := 0; !stop.Load(); i++ {
				iova := uint64((i*4096 + g*512) % (1<<16 - 4096))
				err := m.WriteAt(iova, buf)
				if err == nil {
					err = m.ReadAt(iova, buf)
				}
				switch faultReason(err) {
				case 0:
					ok.Add(1)
				case FaultUnmapped:
					faults.Add(1)
				default:
					t.Errorf("unexpected error %v", err)
					return
				}
			}
		}(g)
	}
	for i := 0; i < 200; i++ {
		if err := m.Unmap(0, 1<<16); err != nil {
			t.Fatal(err)
		}
		if err := m.MapFD(0, 1<<16, fd, 0, ProtRead|ProtWrite); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	m.UnmapAll()
	t.Logf("accesses ok=%d faulted=%d", ok.Load(), faults.Load())
}

func TestHostAccessDoesNotAllocate(t *testing.T) {
	m := New()
	fd := memfd(t, 8192)
	if err := m.MapFD(0x1000, 8192, fd, 0, ProtRead|ProtWrite); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	allocs := testing.AllocsPerRun(100, func() {
		_ = m.WriteAt(0x1100, buf)
		_ = m.ReadAt(0x1100, buf)
		_, _ = m.ReadU32(0x1000)
		_ = m.WriteU64(0x1008, 7)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per access", allocs)
	}
}

func BenchmarkReadWrite(b *testing.B) {
	m := New()
	fd := memfd(b, 1<<20)
	if err := m.MapFD(0, 1<<20, fd, 0, ProtRead|ProtWrite); err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{8, 64, 1500, 4096} {
		buf := make([]byte, size)
		b.Run("write"+itoa(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				if err := m.WriteAt(uint64(i*4096)&(1<<20-1), buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("read"+itoa(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				if err := m.ReadAt(uint64(i*4096)&(1<<20-1), buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("u32", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := m.ReadU32(uint64(i*4) & (1<<20 - 1)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// TestMapFDChecksTheFile: MapFD refuses descriptors that are not regular
// files and files shorter than the mapping (touching the missing part
// would raise SIGBUS), and reports mmap's ENOMEM as such.
func TestMapFDChecksTheFile(t *testing.T) {
	pipe := make([]int, 2)
	if err := unix.Pipe2(pipe, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	sock, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock[0])
	defer unix.Close(sock[1])
	dir, err := unix.Open(t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dir)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	small := memfd(t, 8192)
	// A sparse file larger than the address space can hold: mmap fails
	// with ENOMEM.
	huge := memfd(t, 0)
	if err := unix.Ftruncate(huge, 1<<48); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		fd           int
		size, offset uint64
		want         error
	}{
		{"pipe", pipe[0], 4096, 0, ErrNotFile},
		{"socket", sock[0], 4096, 0, ErrNotFile},
		{"directory", dir, 4096, 0, ErrNotFile},
		{"eventfd", efd, 4096, 0, ErrNotFile},
		{"larger than file", small, 3 * 4096, 0, ErrShortFile},
		{"offset past end", small, 4096, 8192, ErrShortFile},
		{"window past end", small, 8192, 4096, ErrShortFile},
		{"closed fd", 1 << 20, 4096, 0, unix.EBADF},
		{"address space exhausted", huge, 1 << 48, 0, unix.ENOMEM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New()
			err := m.MapFD(0, tc.size, tc.fd, tc.offset, ProtRead|ProtWrite)
			if !errors.Is(err, tc.want) {
				t.Fatalf("MapFD: %v, want %v", err, tc.want)
			}
			if len(m.Regions()) != 0 {
				t.Fatal("a refused map left a region")
			}
		})
	}
	m := New()
	if err := m.MapFD(0, 8192, small, 0, ProtRead|ProtWrite); err != nil {
		t.Fatalf("exact-size map: %v", err)
	}
	m.UnmapAll()
}

// TestShrunkFileFaults: the client truncates its memfd after DMA_MAP; the
// device's accesses past the new end fail with FaultTruncated (before the
// fix: a fatal SIGBUS), the rest of the region still works, and the
// goroutine's own fault handling is left as it was.
func TestShrunkFileFaults(t *testing.T) {
	const size = 4 * 4096
	fd := memfd(t, size)
	m := New()
	if err := m.MapFD(0x10000, size, fd, 0, ProtRead|ProtWrite); err != nil {
		t.Fatal(err)
	}
	defer m.UnmapAll()
	if err := m.WriteU64(0x10000+3*4096, 42); err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 4096); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for _, tc := range []struct {
		name  string
		iova  uint64
		write bool
	}{
		{"read past end", 0x10000 + 3*4096, false},
		{"write past end", 0x10000 + 2*4096, true},
		{"read straddling the end", 0x10000 + 4096 - 32, false},
	} {
		var err error
		if tc.write {
			err = m.WriteAt(tc.iova, buf)
		} else {
			err = m.ReadAt(tc.iova, buf)
		}
		if faultReason(err) != FaultTruncated {
			t.Errorf("%s: %v, want FaultTruncated", tc.name, err)
		}
	}
	if err := m.WriteU32(0x10000, 7); err != nil {
		t.Fatalf("access inside the remaining file: %v", err)
	}
	if v, err := m.ReadU32(0x10000); err != nil || v != 7 {
		t.Fatalf("read back %d, %v", v, err)
	}
	if debug.SetPanicOnFault(false) {
		t.Fatal("copyHost left SetPanicOnFault on in the caller's goroutine")
	}
	allocs := testing.AllocsPerRun(100, func() { _ = m.ReadAt(0x10000, buf) })
	if allocs != 0 {
		t.Fatalf("%v allocations per access after a fault", allocs)
	}
}
