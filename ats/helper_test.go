package ats_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// caps is a configuration space stand-in with settable bits.
type caps struct {
	ats, pasid, bme atomic.Bool
	stu             atomic.Uint32
}

func newCaps() *caps {
	c := &caps{}
	c.ats.Store(true)
	c.pasid.Store(true)
	c.bme.Store(true)
	return c
}

func (c *caps) ATSEnabled() bool   { return c.ats.Load() }
func (c *caps) ATSSTU() uint8      { return uint8(c.stu.Load()) }
func (c *caps) PASIDEnabled() bool { return c.pasid.Load() }
func (c *caps) BusMaster() bool    { return c.bme.Load() }

// irqLog records fired vectors.
type irqLog struct {
	mu  sync.Mutex
	got []int
	ch  chan int
}

func newIRQLog() *irqLog { return &irqLog{ch: make(chan int, 1024)} }

func (l *irqLog) fire(v int) {
	l.mu.Lock()
	l.got = append(l.got, v)
	l.mu.Unlock()
	select {
	case l.ch <- v:
	default:
	}
}

func (l *irqLog) count(v int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, x := range l.got {
		if x == v {
			n++
		}
	}
	return n
}

type env struct {
	g    *atstest.Guest
	caps *caps
	c    *ats.Context
	drv  *atstest.Driver
	irq  *irqLog
}

type envOpts struct {
	ram      int // bytes of guest RAM (default 8 MiB)
	capacity int
	table    uint32 // PASID table entries (default 16)
	queue    uint32 // invalidation queue entries (default 64)
	noDriver bool   // leave the ATS registers unprogrammed
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	if o.ram == 0 {
		o.ram = 8 << 20
	}
	if o.table == 0 {
		o.table = 16
	}
	if o.queue == 0 {
		o.queue = 64
	}
	e := &env{g: atstest.NewGuest(t, o.ram), caps: newCaps(), irq: newIRQLog()}
	c, err := ats.New(ats.Config{Mem: e.g.Mem, Caps: e.caps, Capacity: o.capacity, Interrupt: e.irq.fire})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e.c = c
	if !o.noDriver {
		e.drv = e.g.NewDriver(hw.Offsets(c), o.table, o.queue)
	}
	return e
}

// space creates an address space for pasid and makes it valid.
func (e *env) space(pasid uint32) *atstest.AddressSpace {
	as := e.g.NewAddressSpace()
	e.drv.Table.Set(pasid, as)
	return as
}

func mustAccess(t testing.TB, c *ats.Context, pasid uint32, va uint64, n int, write bool) ats.Handle {
	t.Helper()
	h, err := c.Access(pasid, va, n, write)
	if err != nil {
		t.Fatalf("Access(pasid %d, %#x, %d, write=%v): %v", pasid, va, n, write, err)
	}
	return h
}

func faultOf(t testing.TB, err error) *ats.Fault {
	t.Helper()
	f, ok := err.(*ats.Fault)
	if !ok {
		t.Fatalf("error %v (%T), want *ats.Fault", err, err)
	}
	return f
}
