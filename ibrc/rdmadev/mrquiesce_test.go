package rdmadev

import (
	"errors"
	"sync"
	"testing"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/ibrc/rdmadev/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestDeregFencesInFlightAccess: the RC engine may hold a region across
// the packets of a message (ibrc caches it), so DEREG_MR's guarantee must
// not rest on key lookups: copies keep hammering the region's Memory from
// other goroutines, as the responder's cached MR does, and once DEREG_MR
// completed none of them reaches guest memory (the pages are fenced right
// after the command: a late write would be counted) and all fail.
func TestDeregFencesInFlightAccess(t *testing.T) {
	g := atstest.NewGuest(t, 8<<20)
	x, err := ats.New(ats.Config{Mem: g.Mem})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	pt := g.NewPASIDTable(16)
	if err := x.SetPASIDTable(pt.Base, 16); err != nil {
		t.Fatal(err)
	}
	as := g.NewAddressSpace()
	pt.Set(3, as)
	e, err := New(Config{Mem: g.Mem, Xlat: x})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	mems := make(chan *mrMem, 1)
	e.testRegMR = func(m *mrMem) { mems <- m }
	d := rdmatest.NewDriver(g, e, 16, 16)
	d.Enable()
	const va = 0x5000_0000
	buf := rdmatest.MapBuffer(g, as, va, 64<<10)
	if err := d.Must(rdmatest.RegMR(9, 1, va, 64<<10, hw.RDMAAccessLocalWrite, 3)); err != nil {
		t.Fatal(err)
	}
	mem := <-mems
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var after, gone int
	deregDone := make(chan struct{})
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 8192)
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				err := mem.WriteAt(va+uint64((i*4+k%4)*4096), p)
				select {
				case <-deregDone:
					mu.Lock()
					after++
					if errors.Is(err, errMRGone) {
						gone++
					}
					mu.Unlock()
				default:
				}
			}
		}()
	}
	if err := d.Must(rdmatest.NewCmd(hw.RDMACmdDeregMR, 9)); err != nil {
		t.Fatal(err)
	}
	for _, p := range buf.Pages() {
		g.Mem.Fence(p, 4096)
	}
	close(deregDone)
	for {
		mu.Lock()
		n := after
		mu.Unlock()
		if n >= 1000 {
			break
		}
	}
	close(stop)
	wg.Wait()
	if late := g.Mem.LateWrites(); late != 0 {
		t.Errorf("%d writes into the region after DEREG_MR completed: %v", late, g.Mem.LateLog())
	}
	if gone != after {
		t.Errorf("%d of %d accesses after DEREG_MR were refused as gone", gone, after)
	}
}
