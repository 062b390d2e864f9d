package ats_test

import (
	"testing"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
)

// BenchmarkAccess measures the translation cost of one DMA buffer: an ATC
// hit, a miss with a 4-level walk (the cache is smaller than the working
// set, so every access misses and evicts), and ATS disabled. Each
// iteration is Access plus Release; no data is copied.
func BenchmarkAccess(b *testing.B) {
	const pages = 2048
	setup := func(b *testing.B, capacity int) *env {
		e := newEnv(b, envOpts{capacity: capacity, ram: 32 << 20})
		as := e.space(1)
		for i := range pages {
			as.Map(vaBase+uint64(i)*4096, e.g.AllocPage(), true)
		}
		return e
	}
	run := func(b *testing.B, e *env, n int, stride uint64) {
		b.ReportAllocs()
		i := uint64(0)
		for b.Loop() {
			h, err := e.c.Access(1, vaBase+(i*stride)%(pages*4096)+64, n, true)
			if err != nil {
				b.Fatal(err)
			}
			h.Release()
			i++
		}
	}
	b.Run("hit", func(b *testing.B) {
		e := setup(b, 64)
		run(b, e, 1500, 0)
		if s := e.c.Stats(); s.Misses > 1 {
			b.Fatalf("%d misses", s.Misses)
		}
	})
	b.Run("hit-2pages", func(b *testing.B) {
		e := setup(b, 64)
		run(b, e, 4096, 0)
	})
	b.Run("miss-walk", func(b *testing.B) {
		e := setup(b, 64)
		run(b, e, 1500, 4096)
		if s := e.c.Stats(); s.Hits > 0 {
			b.Fatalf("%d hits", s.Hits)
		}
	})
	b.Run("passthrough", func(b *testing.B) {
		e := setup(b, 64)
		e.c.ATSControl(false, 0)
		i := uint64(0)
		b.ReportAllocs()
		for b.Loop() {
			h, err := e.c.Access(0, e.g.Base+(i%1024)*4096, 1500, true)
			if err != nil {
				b.Fatal(err)
			}
			h.Release()
			i++
		}
	})
}

// BenchmarkInvalidate measures a one-page range invalidation of a cached
// page with no DMA in flight, through the direct API and through the queue
// (descriptor, WAIT, completion poll by a Go driver).
func BenchmarkInvalidate(b *testing.B) {
	e := newEnv(b, envOpts{})
	as := e.space(1)
	as.Map(vaBase, e.g.AllocPage(), true)
	warm := func() {
		h, err := e.c.Access(1, vaBase, 8, false)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
	}
	b.Run("api", func(b *testing.B) {
		for b.Loop() {
			warm()
			if _, err := e.c.Invalidate(ats.Invalidation{Scope: ats.ScopeRange, PASID: 1, Addr: vaBase, Pages: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("queue", func(b *testing.B) {
		for b.Loop() {
			warm()
			if err := e.drv.Sync(atstest.Range(1, vaBase, 1)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
