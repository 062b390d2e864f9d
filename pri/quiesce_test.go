package pri_test

import (
	"context"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// remoteBase is where the quiesce tests put a queue that the device reaches
// only through (held) DMA_READ/DMA_WRITE.
const remoteBase = 0x4000_0000

func (q *irqs) total() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, c := range q.n {
		n += c
	}
	return n
}

// TestPRIQuiesce stops the PRI queues (reset or disable) while one of
// their units is held in flight on a remote region: the register write
// returns at once, PRI_CTRL reads BUSY while the unit is held and clears
// once it ended, and after the driver took its memory back the device,
// poked with doorbells and page requests, touches none of it and raises no
// interrupt.
func TestPRIQuiesce(t *testing.T) {
	holds := []struct {
		name string
		// start moves one queue to remote memory and starts a unit that
		// accesses it.
		start func(t *testing.T, ev *env, r *atstest.Remote)
	}{
		{"page request write", func(t *testing.T, ev *env, r *atstest.Remote) {
			ev.drv.PRQ = remoteBase
			relocate(t, ev, r)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = ev.e.Submit(ctx, req(0x1000, 0x2000))
			}()
		}},
		{"page response read", func(t *testing.T, ev *env, r *atstest.Remote) {
			ev.drv.PRSPQ = remoteBase
			relocate(t, ev, r)
			g := mustSubmit(t, ev.e, req(0x1000))
			b := make([]byte, hw.PageRespSize)
			hw.PageRespPRGI.Put(b, g.PRGI())
			hw.PageRespPASID.Put(b, 3)
			hw.PageRespFlags.Put(b, hw.PRSPPASIDValid)
			r.Write(remoteBase, b)
			hw.Offsets(ev.e).RegWrite(hw.RegPRSPQTail, 1)
		}},
	}
	stops := []struct {
		name string
		ctrl uint32
	}{{"reset", hw.PRICtrlReset}, {"disable", 0}}
	for _, h := range holds {
		for _, st := range stops {
			t.Run(h.name+"/"+st.name, func(t *testing.T) {
				ev := newEnv(t, envOpts{})
				r := ev.g.AddRemote(remoteBase, hw.XlatPageSize)
				t.Cleanup(r.Release) // a failure must not leave the device hung on it
				if v, _ := hw.Offsets(ev.e).RegRead(hw.RegPRICtrl); v != hw.PRICtrlEnable|hw.PRICtrlBusy {
					t.Fatalf("PRI_CTRL reads %#x while enabled, want ENABLE|BUSY", v)
				}
				h.start(t, ev, r)
				select {
				case <-r.Entered():
				case <-time.After(5 * time.Second):
					t.Fatal("the unit never reached remote memory")
				}

				wrote := make(chan struct{})
				go func() {
					hw.Offsets(ev.e).RegWrite(hw.RegPRICtrl, st.ctrl)
					close(wrote)
				}()
				select {
				case <-wrote:
				case <-time.After(time.Second):
					t.Fatal("PRI_CTRL write blocked on the unit in flight")
				}
				for range 20 {
					if v, _ := hw.Offsets(ev.e).RegRead(hw.RegPRICtrl); v&hw.PRICtrlBusy == 0 {
						t.Fatalf("PRI_CTRL reads %#x while a unit is held in flight, want BUSY", v)
					}
					if ev.e.Quiesced() {
						t.Fatal("Quiesced while a unit is held in flight")
					}
					time.Sleep(time.Millisecond)
				}

				r.Release()
				if err := ev.drv.Stop(st.ctrl == hw.PRICtrlReset); err != nil {
					t.Fatal(err)
				}
				if v, _ := hw.Offsets(ev.e).RegRead(hw.RegPRICtrl); v != 0 {
					t.Fatalf("PRI_CTRL reads %#x after the handshake, want 0", v)
				}

				accesses, irqs := r.Accesses(), ev.irq.total()
				for i := range 50 {
					hw.Offsets(ev.e).RegWrite(hw.RegPRSPQTail, uint32(i+2))
					hw.Offsets(ev.e).RegWrite(hw.RegPRQHead, uint32(i))
					if _, err := ev.e.TrySubmit(req(0x5000)); err == nil {
						t.Fatal("a page request was accepted after the handshake")
					}
					hw.Offsets(ev.e).RegRead(hw.RegPRICtrl)
				}
				time.Sleep(20 * time.Millisecond) // let the response goroutine run
				if n := r.Accesses(); n != accesses {
					t.Errorf("device accessed remote memory %d times after the handshake", n-accesses)
				}
				if n := ev.irq.total(); n != irqs {
					t.Errorf("%d interrupts after the handshake", n-irqs)
				}
				if n := ev.g.Mem.LateWrites(); n != 0 {
					t.Errorf("%d late writes: %v", n, ev.g.Mem.LateLog())
				}
			})
		}
	}
}

// relocate enables the queues again after the test moved one of them to
// remote memory, waits for the device's probe of it, then holds the
// remote region.
func relocate(t *testing.T, ev *env, r *atstest.Remote) {
	t.Helper()
	hw.Offsets(ev.e).RegWrite(hw.RegPRICtrl, 0)
	if err := ev.drv.WaitIdle(); err != nil {
		t.Fatal(err)
	}
	ev.drv.Enable()
	hw.Offsets(ev.e).RegWrite(hw.RegPRQHead, 0) // kick the probe
	eventually(t, "the probe of the remote queue", func() bool { return r.Accesses() >= 2 })
	r.Hold()
}

// TestPRIResetFollowsConfig is finding 2's PRI half: after a reset the
// engine takes PRI Enable from config space, whether that was reset too
// (DEVICE_RESET) or kept (client disconnect), so page requests are
// accepted exactly when config space says PRI is on.
func TestPRIResetFollowsConfig(t *testing.T) {
	ev := newEnv(t, envOpts{})
	ev.e.Reset() // config space kept: PRI Enable still 1
	if !ev.space.PRIEnabled() {
		t.Fatal("config space lost PRI Enable")
	}
	if ev.space.PRIStopped() {
		t.Error("Stopped set while PRI is enabled and nothing is outstanding")
	}
	ev.drv.Enable()
	g, err := ev.e.TrySubmit(req(0x1000))
	if err != nil {
		t.Fatalf("page request refused after a reset that kept PRI Enable: %v", err)
	}
	ev.groups(t, 1)
	_ = g

	ev.space.Reset() // config space reset without hooks, as DEVICE_RESET does
	ev.e.Reset()
	if err := waitDone(t, g); err == nil {
		t.Error("outstanding group survived the reset")
	}
	ev.drv.Enable() // the queues alone do not turn PRI on
	if _, err := ev.e.TrySubmit(req(0x1000)); err != pri.ErrDisabled {
		t.Errorf("TrySubmit after reset to PRI Enable = 0: %v, want ErrDisabled", err)
	}
}
