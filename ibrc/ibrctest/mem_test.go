package ibrctest

import (
	"errors"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/internal/clock"
)

func TestFaultsAndPager(t *testing.T) {
	m := NewMem(0x1000, 3*4096, 4096)
	if err := m.WriteAt(0x1000+4095, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	m.Evict(0x1000+4096, 1)
	err := m.ReadAt(0x1000+4095, make([]byte, 3))
	va, write, ok := ibrc.AsFault(err)
	if !ok || write || va != 0x1000+4096 {
		t.Fatalf("fault %v: va %#x write %v", err, va, write)
	}
	if err := m.WriteAt(0x1000+8192, []byte("x")); err != nil {
		t.Fatalf("other pages must stay present: %v", err)
	}
	if err := m.ReadAt(0x1000+3*4096, make([]byte, 1)); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("out of range: %v", err)
	}
	if _, _, ok := ibrc.AsFault(m.ReadAt(0xfff, make([]byte, 2))); ok {
		t.Fatal("out-of-range access reported as a fault")
	}
	clk := clock.NewVirtual(time.Unix(0, 0))
	p := &Pager{Clock: clk, Delay: 100 * time.Microsecond}
	var got []bool
	p.RequestPage(ibrc.PageRequest{Mem: m, VA: 0x1000 + 4096 + 7}, func(ok bool) { got = append(got, ok) })
	p.RequestPage(ibrc.PageRequest{Mem: nil, VA: 0}, func(ok bool) { got = append(got, ok) })
	clk.RunUntil(99*time.Microsecond, nil)
	if len(got) != 0 || m.Present(0x1000+4096) {
		t.Fatal("resolved before the delay")
	}
	clk.Run(nil)
	if len(got) != 2 || !got[0] || got[1] || !m.Present(0x1000+4096) || p.Requests() != 2 {
		t.Fatalf("pager results %v present %v", got, m.Present(0x1000+4096))
	}
	b := make([]byte, 3)
	if err := m.ReadAt(0x1000+4095, b); err != nil || string(b) != "abc" {
		t.Fatalf("after resolution: %q %v", b, err)
	}
	if acc, f := m.Counts(); f != 1 || acc != 6 {
		t.Fatalf("counts %d accesses %d faults", acc, f)
	}
}

func TestFaultRate(t *testing.T) {
	m := NewMem(0, 1<<20, 4096)
	m.SetFaultRate(0.1, true, 1)
	faults := 0
	for i := 0; i < 10000; i++ {
		va := uint64(i%256) * 4096
		if err := m.WriteAt(va, []byte{1}); err != nil {
			faults++
			m.MakePresent(va, 1)
		}
		if err := m.ReadAt(va, make([]byte, 1)); err != nil {
			t.Fatal("writesOnly injection hit a read")
		}
	}
	if faults < 850 || faults > 1150 {
		t.Fatalf("%d faults in 10000 writes at rate 0.1", faults)
	}
}
