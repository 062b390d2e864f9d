package ats_test

import (
	"errors"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// remoteBase is where the quiesce tests put guest memory that the device
// reaches only through (held) DMA_READ/DMA_WRITE.
const remoteBase = 0x4000_0000

// TestATSQuiesce stops ATS (reset or disable) while one of its units is
// held in flight on a remote region: the register write returns at once,
// ATS_CTRL reads BUSY as long as the unit is held, clears once it ended,
// and after the driver took its memory back the device, poked with
// doorbells and translations, reads and writes none of it and raises no
// interrupt.
func TestATSQuiesce(t *testing.T) {
	const va = 0x7000_0000
	holds := []struct {
		name string
		// start sets up and starts the unit to hold; it returns when the
		// unit's access to remote memory is waiting.
		start func(t *testing.T, e *env, r *atstest.Remote) (done <-chan error)
	}{
		{"walk", func(t *testing.T, e *env, r *atstest.Remote) <-chan error {
			// The leaf names a remote page: the walk's probe of it is held.
			as := e.space(1)
			as.Map(va, remoteBase, true)
			done := make(chan error, 1)
			go func() {
				h, err := e.c.Access(1, va, 64, true)
				h.Release()
				done <- err
			}()
			return done
		}},
		{"invalidation completion", func(t *testing.T, e *env, r *atstest.Remote) <-chan error {
			done := make(chan error, 1)
			go func() {
				done <- e.drv.Post(atstest.All(), atstest.Desc{Op: hw.InvOpWait, Flags: hw.InvFlagIRQ, Addr: remoteBase + 8, Data: 7})
			}()
			return done
		}},
	}
	stops := []struct {
		name string
		ctrl uint32
	}{{"reset", hw.ATSCtrlReset}, {"disable", 0}}
	for _, h := range holds {
		for _, st := range stops {
			t.Run(h.name+"/"+st.name, func(t *testing.T) {
				e := newEnv(t, envOpts{})
				r := e.g.AddRemote(remoteBase, 2*hw.XlatPageSize)
				t.Cleanup(r.Release)       // a failure must not leave the device hung on it
				waitCtrlBusy(t, e.c, true) // enabled: BUSY
				r.Hold()
				done := h.start(t, e, r)
				select {
				case <-r.Entered():
				case <-time.After(5 * time.Second):
					t.Fatal("the unit never reached remote memory")
				}

				wrote := make(chan struct{})
				go func() {
					hw.Offsets(e.c).RegWrite(hw.RegATSCtrl, st.ctrl)
					close(wrote)
				}()
				select {
				case <-wrote:
				case <-time.After(time.Second):
					t.Fatal("ATS_CTRL write blocked on the unit in flight")
				}
				for range 20 {
					if v, _ := hw.Offsets(e.c).RegRead(hw.RegATSCtrl); v&hw.ATSCtrlBusy == 0 {
						t.Fatalf("ATS_CTRL reads %#x while a unit is held in flight, want BUSY", v)
					}
					if e.c.Quiesced() {
						t.Fatal("Quiesced while a unit is held in flight")
					}
					time.Sleep(time.Millisecond)
				}

				r.Release()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("held unit never finished")
				}
				if err := e.drv.Stop(st.ctrl == hw.ATSCtrlReset); err != nil {
					t.Fatal(err)
				}
				if v, _ := hw.Offsets(e.c).RegRead(hw.RegATSCtrl); v != 0 {
					t.Fatalf("ATS_CTRL reads %#x after the handshake, want 0", v)
				}

				// Poke: doorbells, translations of the address that walked
				// into remote memory, register reads.
				e.irq.mu.Lock()
				accesses, irqs := r.Accesses(), len(e.irq.got)
				e.irq.mu.Unlock()
				for i := range 50 {
					hw.Offsets(e.c).RegWrite(hw.RegInvqTail, uint32(i+3))
					_, err := e.c.Access(1, va, 64, true)
					var f *ats.Fault
					if !errors.As(err, &f) || f.Kind != ats.FaultPASID {
						t.Fatalf("Access after ATS was stopped: %v, want a PASID fault", err)
					}
					hw.Offsets(e.c).RegRead(hw.RegATSCtrl)
				}
				time.Sleep(20 * time.Millisecond) // let the queue goroutine run
				if n := r.Accesses(); n != accesses {
					t.Errorf("device accessed remote memory %d times after the handshake", n-accesses)
				}
				e.irq.mu.Lock()
				if n := len(e.irq.got); n != irqs {
					t.Errorf("%d interrupts after the handshake", n-irqs)
				}
				e.irq.mu.Unlock()
				if n := e.g.Mem.LateWrites(); n != 0 {
					t.Errorf("%d late writes: %v", n, e.g.Mem.LateLog())
				}
			})
		}
	}
}

// TestATSResetFollowsConfig is finding 2's ATS half: a function reset
// rewrites config space without running its hooks, and translation must
// follow the Enable bits it finds there instead of staying on.
func TestATSResetFollowsConfig(t *testing.T) {
	e := newEnv(t, envOpts{})
	if !e.c.ATSEnabled() {
		t.Fatal("ATS off before the reset")
	}
	e.caps.ats.Store(false) // config space reset behind the hooks' back
	e.caps.pasid.Store(false)
	e.c.Reset()
	if e.c.ATSEnabled() {
		t.Error("Reset left ATS translating while config space says ATS Enable is 0")
	}
	h, err := e.c.Access(0, 0x12345000, 16, true)
	if err != nil || len(h.Segments()) != 1 || h.Segments()[0].IOVA != 0x12345000 {
		t.Errorf("Access after reset = %v, %v; want the IOVA untranslated", h.Segments(), err)
	}
	h.Release()
	e.caps.ats.Store(true)
	e.c.Reset()
	if !e.c.ATSEnabled() {
		t.Error("Reset did not follow ATS Enable = 1")
	}
	if _, err := e.c.Access(3, 0x1000, 16, false); err == nil || faultOf(t, err).Kind != ats.FaultPASID {
		t.Errorf("PASID 3 translated after a reset to PASID Enable = 0: %v", err)
	}
}

func waitCtrlBusy(t *testing.T, c *ats.Context, busy bool) {
	t.Helper()
	if v, _ := hw.Offsets(c).RegRead(hw.RegATSCtrl); (v&hw.ATSCtrlBusy != 0) != busy {
		t.Fatalf("ATS_CTRL reads %#x, want BUSY=%v", v, busy)
	}
}
