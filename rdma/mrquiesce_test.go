package rdma

import (
	"errors"
	"sync"
	"testing"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// mrRig is one engine over 8 MiB of guest memory with translation on, an
// enabled driver model, PASID 3's address space and the Memory of each
// region the engine registers (mems): the tests that drive a region's
// accesses themselves, as the RC engine would.
type mrRig struct {
	g    *atstest.Guest
	x    *ats.Context
	as   *atstest.AddressSpace
	e    *Engine
	d    *rdmatest.Driver
	mems chan *mrMem
}

func newMRRig(t *testing.T) *mrRig {
	r := &mrRig{g: atstest.NewGuest(t, 8<<20), mems: make(chan *mrMem, 1)}
	var err error
	if r.x, err = ats.New(ats.Config{Mem: r.g.Mem}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.x.Close)
	pt := r.g.NewPASIDTable(16)
	if err := r.x.SetPASIDTable(pt.Base, 16); err != nil {
		t.Fatal(err)
	}
	r.as = r.g.NewAddressSpace()
	pt.Set(3, r.as)
	if r.e, err = New(Config{Mem: r.g.Mem, Xlat: r.x}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.e.Close() })
	r.e.testRegMR = func(m *mrMem) { r.mems <- m }
	r.d = rdmatest.NewDriver(r.g, hw.Offsets(r.e), 16, 16)
	r.d.Enable()
	return r
}

// TestDeregFencesInFlightAccess: the RC engine may hold a region across
// the packets of a message (ibrc caches it), so DEREG_MR's guarantee must
// not rest on key lookups: copies keep hammering the region's Memory from
// other goroutines, as the responder's cached MR does, and once DEREG_MR
// completed none of them reaches guest memory (the pages are fenced right
// after the command: a late write would be counted) and all fail.
func TestDeregFencesInFlightAccess(t *testing.T) {
	r := newMRRig(t)
	g, as, d, mems := r.g, r.as, r.d, r.mems
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
