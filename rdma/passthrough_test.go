package rdma

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestMRAccessNeverPassesThrough: a region's addresses are a process's,
// never IOVAs. Its VA here is also the guest-physical address of a page
// nobody maps, and WRITEs into the region race the guest toggling ATS
// Enable (as DEVICE_RESET and a driver's disable do): each access either
// translates or fails, and the page at the physical address VA is never
// written. The region checked the enable bit once and ats loaded it again,
// so an access in between went through untranslated.
func TestMRAccessNeverPassesThrough(t *testing.T) {
	r := newMRRig(t)
	g, x, as, d := r.g, r.x, r.as, r.d
	x.ATSControl(true, 0)
	const size = 16 << 10
	trap := g.Alloc(size, 4096) // guest-physical; never mapped in as
	sentinel := bytes.Repeat([]byte{0xee}, size)
	copy(g.Bytes(trap, size), sentinel)
	rdmatest.MapBuffer(g, as, trap, size) // the process's VA trap, on other pages
	if err := d.Must(rdmatest.RegMR(9, 1, trap, size, hw.RDMAAccessLocalWrite|hw.RDMAAccessRemoteWrite, 3)); err != nil {
		t.Fatal(err)
	}
	mem := <-r.mems
	var stop atomic.Bool
	var wg sync.WaitGroup
	var translated, refused atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for on := false; !stop.Load(); on = !on {
			x.ATSControl(on, 0)
		}
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := bytes.Repeat([]byte{0x11}, 64)
			for k := 0; !stop.Load(); k++ {
				if err := mem.WriteAt(trap+uint64(k%(size/64))*64, p); err != nil {
					refused.Add(1)
				} else {
					translated.Add(1)
				}
			}
		}()
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && bytes.Equal(g.Bytes(trap, size), sentinel) {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d writes translated, %d refused", translated.Load(), refused.Load())
	if translated.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("the race did not run: %d translated, %d refused", translated.Load(), refused.Load())
	}
	if got := g.Bytes(trap, size); !bytes.Equal(got, sentinel) {
		i := 0
		for got[i] == 0xee {
			i++
		}
		t.Fatalf("a region's VA was used as a guest-physical address: byte %#x of the page at %#x written", i, trap)
	}
}
