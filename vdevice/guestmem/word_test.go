package guestmem

import (
	"errors"
	"sync"
	"testing"
)

func TestWordFaults(t *testing.T) {
	m := New()
	fd := memfd(t, 8192)
	if err := m.MapFD(0x1000, 4096, fd, 0, ProtRead|ProtWrite); err != nil {
		t.Fatal(err)
	}
	if err := m.MapFD(0x2000, 4096, fd, 4096, ProtRead); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		iova uint64
		want FaultReason
	}{
		{"ok", 0x1ffc, 0},
		{"misaligned", 0x1002, FaultCrosses},
		{"unmapped", 0x3000, FaultUnmapped},
		{"read-only: a fenced load is a locked RMW", 0x2000, FaultPermission},
		{"wraps", ^uint64(0) - 3, FaultUnmapped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := m.StoreU32Fenced(tc.iova, 0xa1b2c3d4); faultReason(err) != tc.want {
				t.Fatalf("store: %v, want reason %v", err, tc.want)
			}
			v, err := m.LoadU32Fenced(tc.iova)
			if faultReason(err) != tc.want {
				t.Fatalf("load: %v, want reason %v", err, tc.want)
			}
			if tc.want != 0 {
				return
			}
			if v != 0xa1b2c3d4 {
				t.Fatalf("load %#x after store", v)
			}
			// Little-endian, as the driver's le32 fields.
			if b, _ := m.ReadU32(tc.iova); b != v {
				t.Fatalf("ReadU32 %#x, LoadU32Fenced %#x", b, v)
			}
		})
	}
}

func TestWordRemote(t *testing.T) {
	m := New()
	if err := m.MapRemote(0xc0000, 0x1000, ProtRead|ProtWrite); err != nil {
		t.Fatal(err)
	}
	if _, err := m.LoadU32Fenced(0xc0000); faultReason(err) != FaultRemote {
		t.Fatalf("without accessor: %v", err)
	}
	f := &fakeRemote{base: 0xc0000, bytes: make([]byte, 0x1000)}
	m.SetRemote(f)
	if err := m.StoreU32Fenced(0xc0010, 0x11223344); err != nil {
		t.Fatal(err)
	}
	if v, err := m.LoadU32Fenced(0xc0010); err != nil || v != 0x11223344 {
		t.Fatalf("remote load %#x %v", v, err)
	}
	f.fail = true
	if _, err := m.LoadU32Fenced(0xc0010); faultReason(err) != FaultRemote {
		t.Fatalf("remote failure: %v", err)
	}
}

// TestWordNotTorn stores values whose halves differ while another
// goroutine loads: every load must be one of the stored values, which a
// copy in two halves would not guarantee.
func TestWordNotTorn(t *testing.T) {
	m := New()
	fd := memfd(t, 4096)
	if err := m.MapFD(0x1000, 4096, fd, 0, ProtRead|ProtWrite); err != nil {
		t.Fatal(err)
	}
	s := m.NewStream("qp0")
	const n = 200000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range uint32(n) {
			v := uint32(0x0000ffff)
			if i%2 == 1 {
				v = 0xffff0000
			}
			if err := s.StoreU32Fenced(0x1010, v); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range n {
		v, err := s.LoadU32Fenced(0x1010)
		if err != nil {
			t.Fatal(err)
		}
		if v != 0 && v != 0x0000ffff && v != 0xffff0000 {
			t.Fatalf("torn load %#x", v)
		}
	}
	wg.Wait()
	s.Stop()
	if _, err := s.LoadU32Fenced(0x1010); !errors.Is(err, ErrStopped) {
		t.Fatalf("load through a quiesced stream: %v", err)
	}
}
