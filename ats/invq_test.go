package ats_test

import (
	"errors"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestInvQueue runs invalidations through the queue as the driver posts
// them: they drop translations, the WAIT completion is written, the head is
// published, an IRQ fires on request, and the queue wraps.
func TestInvQueue(t *testing.T) {
	e := newEnv(t, envOpts{queue: 8})
	as := e.space(1)
	for i := range 4 {
		as.Map(uint64(i)*4096, e.g.AllocPage(), true)
	}
	warm := func() {
		for i := range 4 {
			h := mustAccess(t, e.c, 1, uint64(i)*4096, 8, false)
			h.Release()
		}
	}
	warm()
	if err := e.drv.Sync(atstest.Range(1, 0x1000, 2)); err != nil {
		t.Fatal(err)
	}
	if s := e.c.Stats(); s.Entries != 2 || s.Dropped != 2 {
		t.Fatalf("after range: %+v", s)
	}
	if head := e.g.Load32(e.drv.Status + uint64(hw.ATSStatusInvqHead.Offset)); head != 2 {
		t.Fatalf("status head %d, want 2", head)
	}
	// A WAIT with the IRQ flag raises INVQ_VECTOR (default, then moved).
	wait := e.g.Alloc(4, 4)
	for _, vec := range []int{hw.InvqVectorDefault, 3} {
		if vec != hw.InvqVectorDefault {
			hw.Offsets(e.c).RegWrite(hw.RegATSCtrl, 0)
			hw.Offsets(e.c).RegWrite(hw.RegInvqVector, uint32(vec))
			e.drv.Enable()
		}
		if err := e.drv.Post(atstest.Desc{Op: hw.InvOpWait, Flags: hw.InvFlagIRQ, Addr: wait, Data: uint32(vec)}); err != nil {
			t.Fatal(err)
		}
		select {
		case v := <-e.irq.ch:
			if v != vec {
				t.Fatalf("vector %d, want %d", v, vec)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no interrupt")
		}
		if got := e.g.Load32(wait); got != uint32(vec) {
			t.Fatalf("completion word %d", got)
		}
	}
	// Many rounds through an 8-entry queue.
	for i := range 50 {
		warm()
		var err error
		switch i % 3 {
		case 0:
			err = e.drv.Sync(atstest.PASID(1))
		case 1:
			err = e.drv.Sync(atstest.All(), atstest.Range(1, 0, 4), atstest.Range(9, 0x10000, 3))
		default:
			err = e.drv.Sync(atstest.Range(1, 0, 1), atstest.Range(1, 0x1000, 1), atstest.Range(1, 0x2000, 1), atstest.Range(1, 0x3000, 1))
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := e.c.Stats().Entries; n != 0 {
			t.Fatalf("round %d: %d entries left", i, n)
		}
	}
}

// TestInvQueueBusMaster: no DMA, so no invalidation progress, without bus
// mastering.
func TestInvQueueBusMaster(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.caps.bme.Store(false)
	e.drv.Timeout = 50 * time.Millisecond
	if err := e.drv.Sync(atstest.All()); !errors.Is(err, atstest.ErrTimeout) {
		t.Fatalf("completed without bus mastering: %v", err)
	}
	e.caps.bme.Store(true)
	e.c.Kick()
	e.drv.Timeout = 5 * time.Second
	if err := e.drv.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestInvQueueBadInput feeds the invalidation machinery bad registers and
// bad descriptors: each gives its defined error (in ATS_ERROR and in the
// status block when that is usable), translation of good PASIDs is never
// corrupted, and after a reset the block works again.
func TestInvQueueBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup runs on an enabled device; it returns the descriptors to
		// post (none: the error comes from the setup itself).
		setup func(e *env) []atstest.Desc
		code  uint32
		info  uint32
		// fault, if set, is the fault an access of PASID 1 gets meanwhile.
		fault ats.FaultKind
	}{
		{"unknown op", func(*env) []atstest.Desc { return []atstest.Desc{atstest.All(), {Op: 9}} }, hw.ATSErrBadInvDesc, 1, 0},
		{"op zero", func(*env) []atstest.Desc { return []atstest.Desc{{}} }, hw.ATSErrBadInvDesc, 0, 0},
		{"flags on a range", func(*env) []atstest.Desc {
			return []atstest.Desc{{Op: hw.InvOpRange, Flags: 1, PASID: 1, Pages: 1}}
		}, hw.ATSErrBadInvDesc, 0, 0},
		{"misaligned range", func(*env) []atstest.Desc { return []atstest.Desc{atstest.Range(1, 0x800, 1)} }, hw.ATSErrBadInvDesc, 0, 0},
		{"empty range", func(*env) []atstest.Desc { return []atstest.Desc{atstest.Range(1, 0, 0)} }, hw.ATSErrBadInvDesc, 0, 0},
		{"range past 48 bits", func(*env) []atstest.Desc { return []atstest.Desc{atstest.Range(1, 1<<47, 1<<36)} }, hw.ATSErrBadInvDesc, 0, 0},
		{"pasid too large", func(*env) []atstest.Desc { return []atstest.Desc{atstest.PASID(1 << 20)} }, hw.ATSErrBadInvDesc, 0, 0},
		{"wait outside guest RAM", func(*env) []atstest.Desc {
			return []atstest.Desc{atstest.All(), {Op: hw.InvOpWait, Addr: outside}}
		}, hw.ATSErrBadWaitAddr, 1, 0},
		{"misaligned wait", func(e *env) []atstest.Desc {
			return []atstest.Desc{{Op: hw.InvOpWait, Addr: e.g.Alloc(8, 8) + 2}}
		}, hw.ATSErrBadInvDesc, 0, 0},
		{"unknown wait flag", func(e *env) []atstest.Desc {
			return []atstest.Desc{{Op: hw.InvOpWait, Flags: 2, Addr: e.g.Alloc(8, 8)}}
		}, hw.ATSErrBadInvDesc, 0, 0},
		{"tail beyond the queue", func(e *env) []atstest.Desc {
			hw.Offsets(e.c).RegWrite(hw.RegInvqTail, 1000)
			return nil
		}, hw.ATSErrBadTail, 1000, 0},
		{"queue outside guest RAM", func(e *env) []atstest.Desc {
			reenable(e, hw.RegInvqBaseLo, uint32(outside&0xffffffff), hw.RegInvqBaseHi, uint32(outside>>32))
			return nil
		}, hw.ATSErrBadInvq, 0, 0},
		{"queue size not a power of two", func(e *env) []atstest.Desc {
			reenable(e, hw.RegInvqSize, 12)
			return nil
		}, hw.ATSErrBadInvq, 0, 0},
		{"queue misaligned", func(e *env) []atstest.Desc {
			reenable(e, hw.RegInvqBaseLo, uint32(e.drv.Queue+8))
			return nil
		}, hw.ATSErrBadInvq, 0, 0},
		{"PASID table misaligned", func(e *env) []atstest.Desc {
			reenable(e, hw.RegPASIDTableLo, uint32(e.drv.Table.Base+16))
			return nil
		}, hw.ATSErrBadPASIDTable, 0, ats.FaultPASID},
		{"PASID table size zero", func(e *env) []atstest.Desc {
			reenable(e, hw.RegPASIDTableSize, 0)
			return nil
		}, hw.ATSErrBadPASIDTable, 0, ats.FaultPASID},
		{"PASID table outside guest RAM", func(e *env) []atstest.Desc {
			reenable(e, hw.RegPASIDTableLo, uint32(outside&0xffffffff), hw.RegPASIDTableHi, uint32(outside>>32))
			return nil
		}, hw.ATSErrBadPASIDTable, 0, ats.FaultTable},
		{"PASID table runs out of guest RAM", func(e *env) []atstest.Desc {
			reenable(e, hw.RegPASIDTableSize, 1<<20)
			return nil
		}, hw.ATSErrBadPASIDTable, 0, 0},
		{"status block misaligned", func(e *env) []atstest.Desc {
			reenable(e, hw.RegATSStatusLo, uint32(e.drv.Status+4))
			return nil
		}, hw.ATSErrBadStatusAddr, 0, 0},
		{"status block outside guest RAM", func(e *env) []atstest.Desc {
			reenable(e, hw.RegATSStatusLo, uint32(outside&0xffffffff), hw.RegATSStatusHi, uint32(outside>>32))
			return nil
		}, hw.ATSErrBadStatusAddr, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{queue: 8})
			frame := e.g.AllocPage()
			e.space(1).Map(0, frame, true)
			descs := tc.setup(e)
			if len(descs) > 0 {
				if err := e.drv.Post(descs...); err != nil {
					t.Fatal(err)
				}
			}
			code := waitATSError(t, e.c)
			if code != tc.code {
				t.Fatalf("ATS_ERROR %d, want %d", code, tc.code)
			}
			if tc.code != hw.ATSErrBadStatusAddr {
				// The register is set at once; the status block is written
				// by the queue goroutine soon after.
				err := e.drv.Err()
				for deadline := time.Now().Add(5 * time.Second); err == nil && time.Now().Before(deadline); err = e.drv.Err() {
					time.Sleep(time.Millisecond)
				}
				if !isDeviceError(err, tc.code, tc.info) {
					t.Fatalf("status block error %v, want %d/%d", err, tc.code, tc.info)
				}
			}
			h, err := e.c.Access(1, 0, 8, true)
			if tc.fault != 0 {
				if f := faultOf(t, err); f.Kind != tc.fault {
					t.Fatalf("access fault %v, want %v", f.Kind, tc.fault)
				}
			} else if err != nil || h.Segments()[0].IOVA != frame {
				t.Fatalf("translation broken by the bad input: %v", err)
			}
			h.Release()
			// After a reset and a good configuration the block works.
			e.drv.Reset()
			if got, _ := hw.Offsets(e.c).RegRead(hw.RegATSError); got != 0 {
				t.Fatalf("ATS_ERROR %d after reset", got)
			}
			if err := e.drv.Sync(atstest.All()); err != nil {
				t.Fatalf("after reset: %v", err)
			}
			h = mustAccess(t, e.c, 1, 0, 8, true)
			if h.Segments()[0].IOVA != frame {
				t.Fatal("translation after reset")
			}
			h.Release()
		})
	}
}

// reenable disables the ATS block, writes register/value pairs and
// enables it again.
func reenable(e *env, kv ...uint32) {
	hw.Offsets(e.c).RegWrite(hw.RegATSCtrl, 0)
	for i := 0; i+1 < len(kv); i += 2 {
		hw.Offsets(e.c).RegWrite(kv[i], kv[i+1])
	}
	hw.Offsets(e.c).RegWrite(hw.RegATSCtrl, hw.ATSCtrlEnable)
	hw.Offsets(e.c).RegWrite(hw.RegInvqTail, 0) // kick the queue goroutine to probe
}

func waitATSError(t *testing.T, c *ats.Context) uint32 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if v, _ := hw.Offsets(c).RegRead(hw.RegATSError); v != 0 {
			return v
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no ATS error reported")
	return 0
}

func isDeviceError(err error, code, info uint32) bool {
	var de *atstest.DeviceError
	if !errors.As(err, &de) {
		return false
	}
	return de.Code == code && de.Info == info
}

// TestATSRegisters checks the register block's read-back, write-only and
// reset behaviour and its bounds.
func TestATSRegisters(t *testing.T) {
	e := newEnv(t, envOpts{noDriver: true})
	c := e.c
	if v, ok := hw.Offsets(c).RegRead(hw.RegInvqVector); !ok || v != hw.InvqVectorDefault {
		t.Fatalf("INVQ_VECTOR reset value %d", v)
	}
	for _, r := range hw.TranslationRegisters {
		if r.Offset >= hw.ATSRegEnd || atcRegister(r.Offset) {
			continue // ATC registers: TestATCRegisters
		}
		if !hw.Offsets(c).RegWrite(r.Offset, 0x1234_5000) {
			t.Fatalf("%s not claimed", r.Name)
		}
		v, ok := hw.Offsets(c).RegRead(r.Offset)
		want := uint32(0x1234_5000)
		switch r.Access {
		case hw.AccessWO, hw.AccessRO:
			want = 0
		}
		if r.Offset == hw.RegATSCtrl {
			want = 0 // enable bit clear in the value written
		}
		if !ok || v != want {
			t.Errorf("%s reads %#x, want %#x", r.Name, v, want)
		}
	}
	for _, off := range []uint32{hw.XlatRegBase - 4, hw.ATSRegEnd, hw.RegPRICtrl, hw.RegATSCtrl + 2, 0} {
		if hw.Offsets(c).RegWrite(off, 1) {
			t.Errorf("offset %#x claimed by the ATS block", off)
		}
		if _, ok := hw.Offsets(c).RegRead(off); ok {
			t.Errorf("offset %#x readable in the ATS block", off)
		}
	}
	hw.Offsets(c).RegWrite(hw.RegATSCtrl, hw.ATSCtrlEnable)
	if v, _ := hw.Offsets(c).RegRead(hw.RegATSCtrl); v != hw.ATSCtrlEnable|hw.ATSCtrlBusy {
		t.Fatalf("ATS_CTRL reads %#x after enable, want ENABLE|BUSY", v)
	}
	hw.Offsets(c).RegWrite(hw.RegATCCapacity, 3)
	hw.Offsets(c).RegWrite(hw.RegATSCtrl, hw.ATSCtrlReset)
	waitCtrlIdle(t, hw.Offsets(c), hw.RegATSCtrl, hw.ATSCtrlBusy)
	if v, _ := hw.Offsets(c).RegRead(hw.RegATCCapacity); v != ats.DefaultCapacity {
		t.Errorf("ATC_CAPACITY reads %d after reset, want the default %d", v, ats.DefaultCapacity)
	}
	for _, r := range hw.TranslationRegisters {
		if r.Offset >= hw.ATSRegEnd || atcRegister(r.Offset) {
			continue
		}
		want := uint32(0)
		if r.Offset == hw.RegInvqVector {
			want = hw.InvqVectorDefault
		}
		if v, _ := hw.Offsets(c).RegRead(r.Offset); v != want {
			t.Errorf("%s reads %#x after reset", r.Name, v)
		}
	}
}

func atcRegister(off uint32) bool {
	return off == hw.RegATCHits || off == hw.RegATCMisses || off == hw.RegATCCapacity
}

// waitCtrlIdle polls a control register until its BUSY bit clears, as a
// driver does after a disable or reset, for at most hw.QuiesceTimeoutMS.
func waitCtrlIdle(t testing.TB, c atstest.Regs, reg, busy uint32) {
	t.Helper()
	read := func() uint32 { v, _ := c.RegRead(reg); return v }
	if v, ok := hw.AwaitQuiesced(read, busy); !ok {
		t.Fatalf("register %#x still BUSY (%#x) after %d ms", reg, v, hw.QuiesceTimeoutMS)
	}
}
