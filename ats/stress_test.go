package ats_test

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
)

// The invalidation race stress test. DMA goroutines translate and use
// buffers while "driver" goroutines remap and unmap the pages under them,
// invalidate (through the queue, and through the direct API), and then free
// and reuse the old pages, exactly as a kernel reclaiming memory would.
//
// Stale uses are counted by checks that know nothing about the ATC: only
// the IOVAs a handle returned and the test's own bookkeeping.
//   - owner: each pool frame's current owner (a page of an address space,
//     or free). The driver marks a frame free only after its invalidation
//     completed. A DMA holding a handle checks, before and after touching
//     each frame, that the frame still belongs to the page it translated:
//     if the invalidation had completed while the handle was held, the
//     frame could already be free or owned by another page.
//   - tag: each frame's first word names its owner in guest memory; a
//     freed frame is poisoned. A DMA reads it through guestmem.
//   - scribble: writers store their page's tag in the frame's second word.
//     A freed frame's scribble is poisoned and checked when the frame is
//     reused: any write after the invalidation completed shows.

const (
	stressPages  = 16 // pages per address space
	stressFrames = 96
	stressVA     = 0x5555_0000_0000
	poison       = 0xdead_dead_dead_dead
)

func tagOf(id int) uint64 { return 0xa5a5_0000_0000_0000 | uint64(id+1) }

type stressRun struct {
	t      testing.TB
	e      *env
	pool   uint64 // IOVA of frame 0
	owner  [stressFrames]atomic.Int64
	freeMu sync.Mutex
	free   []int // FIFO: reuse the longest-freed frame

	stale, uses, faults, remaps atomic.Int64
	stop                        atomic.Bool
}

func (r *stressRun) frameIOVA(i int) uint64 { return r.pool + uint64(i)*4096 }

func (r *stressRun) frameIndex(iova uint64) int {
	if iova < r.pool || iova >= r.pool+stressFrames*4096 {
		return -1
	}
	return int((iova - r.pool) / 4096)
}

func (r *stressRun) getFrame() int {
	r.freeMu.Lock()
	defer r.freeMu.Unlock()
	f := r.free[0]
	r.free = r.free[1:]
	return f
}

func (r *stressRun) putFrame(f int) {
	r.freeMu.Lock()
	r.free = append(r.free, f)
	r.freeMu.Unlock()
}

func (r *stressRun) staleUse(format string, args ...any) {
	if r.stale.Add(1) <= 5 {
		r.t.Logf("stale use: "+format, args...)
	}
}

// driver remaps, unmaps and invalidates the pages of one address space.
type stressDriver struct {
	r      *stressRun
	as     *atstest.AddressSpace
	pasid  uint32
	space  int
	cur    [stressPages]int // frame of each page, -1 unmapped
	viaAPI bool             // invalidate with Context.Invalidate instead of the queue
	rng    *rand.Rand
}

func (d *stressDriver) id(page int) int { return d.space*stressPages + page }

func (d *stressDriver) invalidate(descs ...atstest.Desc) {
	if !d.viaAPI {
		if err := d.r.e.drv.Sync(descs...); err != nil {
			d.r.t.Error(err)
			d.r.stop.Store(true)
		}
		return
	}
	for _, x := range descs {
		var inv ats.Invalidation
		switch x.Op {
		case 1:
			inv = ats.Invalidation{Scope: ats.ScopeRange, PASID: x.PASID, Addr: x.Addr, Pages: x.Pages}
		case 2:
			inv = ats.Invalidation{Scope: ats.ScopePASID, PASID: x.PASID}
		default:
			inv = ats.Invalidation{Scope: ats.ScopeAll}
		}
		if _, err := d.r.e.c.Invalidate(inv); err != nil {
			d.r.t.Error(err)
		}
	}
}

// mapPage points page at a fresh frame (tagged before the PTE is
// published) and returns the old frame or -1.
func (d *stressDriver) mapPage(page int, write bool) int {
	r := d.r
	f := r.getFrame()
	iova := r.frameIOVA(f)
	if s := r.e.g.Load64(iova + 8); s != poison {
		r.staleUse("frame %d written after it was freed (scribble %#x)", f, s)
	}
	r.e.g.Store64(iova, tagOf(d.id(page)))
	r.e.g.Store64(iova+8, tagOf(d.id(page)))
	r.owner[f].Store(int64(d.id(page)))
	d.as.Map(stressVA+uint64(page)*4096, iova, write)
	old := d.cur[page]
	d.cur[page] = f
	return old
}

// release frees a frame whose invalidation completed.
func (d *stressDriver) release(f int) {
	if f < 0 {
		return
	}
	r := d.r
	r.owner[f].Store(-1)
	iova := r.frameIOVA(f)
	r.e.g.Store64(iova, poison)
	r.e.g.Store64(iova+8, poison)
	r.putFrame(f)
}

func (d *stressDriver) run(wg *sync.WaitGroup) {
	defer wg.Done()
	for !d.r.stop.Load() {
		page := d.rng.IntN(stressPages)
		va := stressVA + uint64(page)*4096
		switch x := d.rng.IntN(100); {
		case x < 65: // remap, sometimes read-only
			old := d.mapPage(page, d.rng.IntN(4) != 0)
			d.invalidate(atstest.Range(d.pasid, va, 1))
			d.release(old)
		case x < 80: // unmap
			old := d.cur[page]
			if old < 0 {
				continue
			}
			d.as.Unmap(va)
			d.cur[page] = -1
			d.invalidate(atstest.Range(d.pasid, va, 1))
			d.release(old)
		case x < 90: // remap several pages, one wider invalidation
			n := 1 + d.rng.IntN(4)
			var olds []int
			for p := page; p < min(page+n, stressPages); p++ {
				olds = append(olds, d.mapPage(p, true))
			}
			d.invalidate(atstest.Range(d.pasid, va, uint64(n)))
			for _, f := range olds {
				d.release(f)
			}
		case x < 95: // remap, then drop the whole address space
			old := d.mapPage(page, true)
			d.invalidate(atstest.PASID(d.pasid))
			d.release(old)
		case x < 97:
			old := d.mapPage(page, true)
			d.invalidate(atstest.All())
			d.release(old)
		default: // a range never mapped: completes, drops nothing
			d.invalidate(atstest.Range(d.pasid, 0x1000_0000+uint64(page)*4096, 8))
		}
		d.r.remaps.Add(1)
	}
}

// dma is one DMA engine: random buffers, reads and writes, each checked
// while its handle is held.
func (r *stressRun) dma(wg *sync.WaitGroup, seed uint64) {
	defer wg.Done()
	rng := rand.New(rand.NewPCG(seed, 99))
	for !r.stop.Load() {
		space := rng.IntN(2)
		pasid := uint32(space + 1)
		page := rng.IntN(stressPages)
		off := rng.IntN(4096)
		n := 1 + rng.IntN(4096)
		if page == stressPages-1 {
			n = min(n, 4096-off)
		}
		write := rng.IntN(2) == 0
		va := stressVA + uint64(page)*4096 + uint64(off)
		h, err := r.e.c.Access(pasid, va, n, write)
		if err != nil {
			f, ok := err.(*ats.Fault)
			if !ok || !f.NeedsPageRequest() {
				r.t.Errorf("unexpected error: %v", err)
				r.stop.Store(true)
			}
			r.faults.Add(1)
			continue
		}
		pos := va
		for i, s := range h.Segments() {
			id := space*stressPages + int(pos/4096-stressVA/4096)
			fi := r.frameIndex(s.IOVA &^ 4095)
			if fi < 0 {
				r.staleUse("translation outside the frame pool: %#x", s.IOVA)
				break
			}
			if o := r.owner[fi].Load(); o != int64(id) {
				r.staleUse("page %d uses frame %d owned by %d", id, fi, o)
			}
			tag, err := r.e.g.Mem.ReadU64(r.frameIOVA(fi))
			if err != nil || tag != tagOf(id) {
				r.staleUse("page %d reads tag %#x in frame %d", id, tag, fi)
			}
			if write {
				if err := r.e.g.Mem.WriteU64(r.frameIOVA(fi)+8, tagOf(id)); err != nil {
					r.t.Error(err)
				}
			}
			if i == 0 || rng.IntN(4) == 0 {
				runtime.Gosched() // keep the translation in use a while
			}
			if o := r.owner[fi].Load(); o != int64(id) {
				r.staleUse("page %d still using frame %d now owned by %d", id, fi, o)
			}
			pos += uint64(s.Len)
		}
		h.Release()
		r.uses.Add(1)
	}
}

func newStress(t testing.TB, breakDevice func(*ats.Context)) (*stressRun, []*stressDriver) {
	e := newEnv(t, envOpts{capacity: 12, queue: 16})
	if breakDevice != nil {
		breakDevice(e.c)
	}
	r := &stressRun{t: t, e: e, pool: e.g.Alloc(stressFrames*4096, 4096)}
	for f := range stressFrames {
		r.owner[f].Store(-1)
		e.g.Store64(r.frameIOVA(f), poison)
		e.g.Store64(r.frameIOVA(f)+8, poison)
		r.free = append(r.free, f)
	}
	var drivers []*stressDriver
	for space := range 2 {
		d := &stressDriver{r: r, as: e.space(uint32(space + 1)), pasid: uint32(space + 1), space: space,
			viaAPI: space == 1, rng: rand.New(rand.NewPCG(uint64(space), 7))}
		for p := range stressPages {
			d.cur[p] = -1
			d.mapPage(p, true)
		}
		drivers = append(drivers, d)
	}
	return r, drivers
}

// run starts the goroutines and stops them after d or once done says so.
func (r *stressRun) run(drivers []*stressDriver, d time.Duration, done func() bool) {
	var wg sync.WaitGroup
	for _, dr := range drivers {
		wg.Add(1)
		go dr.run(&wg)
	}
	for i := range 4 {
		wg.Add(1)
		go r.dma(&wg, uint64(i))
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && !r.stop.Load() && !done() {
		time.Sleep(5 * time.Millisecond)
	}
	r.stop.Store(true)
	wg.Wait()
}

// TestInvalidationStress: many DMAs against concurrent invalidations, zero
// uses of a stale translation.
func TestInvalidationStress(t *testing.T) {
	d := 1500 * time.Millisecond
	if testing.Short() {
		d = 400 * time.Millisecond
	}
	r, drivers := newStress(t, nil)
	r.run(drivers, d, func() bool { return false })
	s := r.e.c.Stats()
	t.Logf("%d DMAs, %d faults, %d driver operations; ATC: %d hits, %d misses, %d walks (%d redone after a racing invalidation), %d evictions, %d invalidations (%d waited for in-flight DMA), %d dropped",
		r.uses.Load(), r.faults.Load(), r.remaps.Load(), s.Hits, s.Misses, s.Walks, s.WalkRetries, s.Evictions, s.Invalidations, s.InvalidationWaits, s.Dropped)
	if n := r.stale.Load(); n != 0 {
		t.Fatalf("%d stale uses of invalidated translations", n)
	}
	if r.uses.Load() < 1000 || s.Invalidations < 100 || r.faults.Load() == 0 || s.Evictions == 0 {
		t.Fatalf("stress too weak to mean anything: %d uses, %d invalidations, %d faults, %d evictions",
			r.uses.Load(), s.Invalidations, r.faults.Load(), s.Evictions)
	}
	if s.InvalidationWaits == 0 {
		t.Fatal("no invalidation ever overlapped an in-flight DMA: the race was not exercised")
	}
	if s.Draining != 0 {
		t.Fatalf("%d dropped entries still referenced after every handle was released", s.Draining)
	}
}

// TestInvalidationStressDetects is the negative control: with a device
// broken in either half of the mechanism (invalidations that do not wait
// for in-flight DMA, or walks that raced with an invalidation installed
// anyway), the same checks find stale uses.
func TestInvalidationStressDetects(t *testing.T) {
	for _, tc := range []struct {
		name        string
		breakDevice func(*ats.Context)
	}{
		{"no drain", ats.BreakDrainForTest},
		{"no walk recheck", ats.BreakRecheckForTest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, drivers := newStress(t, tc.breakDevice)
			// The checker's own log lines are expected here: silence them.
			r.t = quietTB{t}
			r.run(drivers, 30*time.Second, func() bool { return r.stale.Load() > 0 })
			if r.stale.Load() == 0 {
				t.Fatal("a broken device went unnoticed")
			}
			t.Logf("broken device caught after %d DMAs: %d stale uses", r.uses.Load(), r.stale.Load())
		})
	}
}

type quietTB struct{ testing.TB }

func (quietTB) Logf(string, ...any) {}
