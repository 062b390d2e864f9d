package npfnic

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// TestDeviceResetTurnsTranslationOff is finding 2: after DEVICE_RESET
// (a guest reboot) from a session with ATS, PASID and PRI on, config space
// says they are off and the NIC translates nothing, so a driver that only
// enables a pair with the off policy gets its frames DMAed to the IOVAs in
// its descriptors.
func TestDeviceResetTurnsTranslationOff(t *testing.T) {
	r := newFaultRig(t, faultOpts{policy: hw.RxPolicyBackup, bmSize: 8, backupSize: 8})
	lay := r.n.cfg.Layout()
	r.cfgWrite(lay.PASID+6, binary.LittleEndian.AppendUint16(nil, pcie.PASIDCtrlEnable))
	if !r.n.ATS().ATSEnabled() {
		t.Fatal("ATS not enabled by the rig")
	}
	if err := r.n.Reset(); err != nil {
		t.Fatal(err)
	}
	if r.n.cfg.ATSEnabled() || r.n.cfg.PASIDEnabled() || r.n.cfg.PRIEnabled() {
		t.Fatal("config space kept an enable across DEVICE_RESET")
	}
	if r.n.ATS().ATSEnabled() {
		t.Fatal("the NIC still translates after DEVICE_RESET while config space says ATS is off")
	}
	if _, err := r.n.PRI().TrySubmit(pri.Request{Pages: []uint64{0}}); err != pri.ErrDisabled {
		t.Errorf("PRI after DEVICE_RESET: %v, want ErrDisabled", err)
	}

	// The rebooted guest's driver, rx_policy=off: no ATS, PASID or PRI.
	r.cfgWrite(pcie.OffCommand, []byte{0x06, 0})
	status := r.g.Alloc(hw.StatusBlockSize, hw.StatusBlockAlign)
	ring := r.g.Alloc(8*hw.RxDescSize, 4096)
	buf := r.g.AllocPage()
	r.wr(hw.RegStatusAddrLo, uint32(status))
	r.wr(hw.RegStatusAddrHi, uint32(status>>32))
	q := hw.PairBase(0)
	r.wr(q+hw.PairRxBaseLo, uint32(ring))
	r.wr(q+hw.PairRxBaseHi, uint32(ring>>32))
	r.wr(q+hw.PairRxSize, 8)
	r.wr(q+hw.PairTxSize, 8)
	r.wr(q+hw.PairTxBaseLo, uint32(r.g.Alloc(8*hw.TxDescSize, 4096)))
	r.wr(q+hw.PairRxPolicy, hw.RxPolicyPin)
	r.wr(q+hw.PairCtrl, hw.PairCtrlEnable)
	r.wr(hw.RegCtrl, hw.CtrlEnable)
	d := r.g.Bytes(ring, hw.RxDescSize)
	hw.RxDescAddr.Put(d, buf)
	hw.RxDescBufLen.Put(d, 2048)
	r.wr(q+hw.PairRxTail, 1)
	frame := testFrame(100, 9)
	r.send(frame)
	r.waitFor("the frame in its IOVA buffer", func() bool {
		return hw.RxDescStatus.Get(d)&hw.RxdDone != 0
	})
	if st := hw.RxDescStatus.Get(d); st&hw.RxdError != 0 {
		t.Fatalf("descriptor completed with an error (%#x): the buffer was translated", st)
	}
	if got := r.g.Bytes(buf, len(frame)); string(got) != string(frame) {
		t.Fatal("frame not in the IOVA buffer")
	}
	if ps := r.n.Ethernet().Stats().Pairs[0]; ps.RxFaults != 0 {
		t.Errorf("%d RX faults with translation off", ps.RxFaults)
	}
}

// TestDisconnectKeepsTranslationInAgreement is finding 2 after a client
// disconnect: config space is kept for the next client, and the ATS and PRI
// engines follow it, before and after that client's DEVICE_RESET.
func TestDisconnectKeepsTranslationInAgreement(t *testing.T) {
	r := newFaultRig(t, faultOpts{policy: hw.RxPolicyDrop})
	agree := func(when string) {
		t.Helper()
		if a, c := r.n.ATS().ATSEnabled(), r.n.cfg.ATSEnabled(); a != c {
			t.Errorf("%s: ATS translating=%v, config ATS Enable=%v", when, a, c)
		}
		_, err := r.n.PRI().TrySubmit(pri.Request{Pages: []uint64{0}})
		if on, c := err != pri.ErrDisabled, r.n.cfg.PRIEnabled(); on != c {
			t.Errorf("%s: PRI engine enabled=%v (%v), config PRI Enable=%v", when, on, err, c)
		}
		if r.n.cfg.PRIStopped() == r.n.cfg.PRIEnabled() {
			t.Errorf("%s: PRI Stopped=%v with Enable=%v and nothing outstanding", when, r.n.cfg.PRIStopped(), r.n.cfg.PRIEnabled())
		}
	}
	agree("connected")
	r.g.Mem.UnmapAll()
	r.n.ClientDisconnected()
	agree("after the disconnect")
	if !r.n.ATS().Quiesced() || !r.n.PRI().Quiesced() {
		t.Error("translation engines not quiesced after the disconnect")
	}
	// The next client (QEMU) resets the device first.
	if err := r.n.Reset(); err != nil {
		t.Fatal(err)
	}
	agree("after the new client's DEVICE_RESET")
}

// diagRig is a NIC whose guest memory has a remote region the test can
// hold, for the diagnostic DMA's abort.
func diagRig(t *testing.T) (*NIC, *atstest.Guest, *atstest.Remote) {
	g := atstest.NewGuest(t, 1<<20)
	rem := g.AddRemote(remoteBase, 4*4096)
	t.Cleanup(rem.Release)
	dev, _ := port.Pipe(4)
	n, err := New(Options{Wire: dev, QueuePairs: 1, Mem: g.Mem})
	if err != nil {
		t.Fatal(err)
	}
	n.Attach(vfiouser.Host{IRQ: &vecIRQ{count: map[int]int{}, wake: map[int]chan struct{}{}}})
	t.Cleanup(func() { n.Close() })
	if err := n.RegionWrite(vfiouser.RegionConfig, pcie.OffCommand, []byte{0x06, 0}); err != nil {
		t.Fatal(err)
	}
	return n, g, rem
}

const remoteBase = 0x4000_0000

// TestDiagDMAAbort is finding 7, device side: ABORT (or a reset) stops a
// running diagnostic DMA without waiting; DIAG_DMA_STATUS stays BUSY while
// a page write is still in flight, a START meanwhile is ignored, and once
// it reads ABORTED the device writes no byte of the buffer any more. A
// reset waits for that, bounded by hw.QuiesceTimeoutMS.
func TestDiagDMAAbort(t *testing.T) {
	for _, tc := range []struct {
		name    string
		abort   func(n *NIC) <-chan struct{} // returns when the abort returned
		waits   bool                         // the abort waits for the held page
		release bool                         // release the page while it waits
	}{
		{"abort", func(n *NIC) <-chan struct{} {
			done := make(chan struct{})
			go func() { n.writeReg(hw.RegDiagDMACtrl, hw.DiagDMACtrlAbort, ^uint32(0)); close(done) }()
			return done
		}, false, true},
		{"device reset", func(n *NIC) <-chan struct{} {
			done := make(chan struct{})
			go func() { n.Reset(); close(done) }()
			return done
		}, true, true},
		{"device reset, client never answers", func(n *NIC) <-chan struct{} {
			done := make(chan struct{})
			go func() { n.Reset(); close(done) }()
			return done
		}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, g, rem := diagRig(t)
			status := func() uint32 { return rd32(t, n, hw.RegBAR, hw.RegDiagDMAStatus) }
			start := func(addr uint64, length uint32) {
				wr32(t, n, hw.RegBAR, hw.RegDiagDMAAddrLo, uint32(addr))
				wr32(t, n, hw.RegBAR, hw.RegDiagDMAAddrHi, uint32(addr>>32))
				wr32(t, n, hw.RegBAR, hw.RegDiagDMALen, length)
				wr32(t, n, hw.RegBAR, hw.RegDiagDMACtrl, hw.DiagDMACtrlStart)
			}
			rem.Hold()
			start(remoteBase, 4*4096)
			select {
			case <-rem.Entered():
			case <-time.After(5 * time.Second):
				t.Fatal("the DMA never reached remote memory")
			}
			run := n.dmaRun.Load()
			began := time.Now()
			aborted := tc.abort(n)
			if !tc.waits {
				select {
				case <-aborted:
				case <-time.After(time.Second):
					t.Fatal("ABORT blocked on the page in flight")
				}
			}
			for range 20 {
				if s := status(); s != hw.DiagDMAStatusBusy {
					t.Fatalf("DIAG_DMA_STATUS %d while a page write is in flight, want BUSY", s)
				}
				time.Sleep(time.Millisecond)
			}
			local := g.Alloc(4096, 64)
			start(local, 64) // ignored: the driver must see BUSY clear first
			if n.dmaRun.Load() != run {
				t.Fatal("a START while BUSY started another DMA")
			}
			if tc.waits {
				select {
				case <-aborted:
					t.Fatal("the reset answered while a DMA it could wait for was in flight")
				default:
				}
			}
			if tc.release {
				rem.Release()
			}
			select {
			case <-aborted:
			case <-time.After(hw.QuiesceTimeoutMS*time.Millisecond + 3*time.Second):
				t.Fatal("the reset never answered")
			}
			if !tc.release {
				if d := time.Since(began); d < hw.QuiesceTimeoutMS*time.Millisecond {
					t.Errorf("reset answered after %v, before the quiesce timeout, with the page still held", d)
				}
				if s := status(); s != hw.DiagDMAStatusBusy {
					t.Errorf("DIAG_DMA_STATUS %d after a timed-out reset with the page still held, want BUSY", s)
				}
				rem.Release()
			}
			deadline := time.Now().Add(5 * time.Second)
			for status() == hw.DiagDMAStatusBusy {
				if time.Now().After(deadline) {
					t.Fatal("DIAG_DMA_STATUS stays BUSY after the page was released")
				}
				time.Sleep(100 * time.Microsecond)
			}
			if s := status(); s != hw.DiagDMAStatusAborted {
				t.Fatalf("DIAG_DMA_STATUS %d, want ABORTED", s)
			}
			// No byte after ABORTED: the driver frees the buffer now.
			g.Mem.Fence(remoteBase, 4*4096)
			accesses := rem.Accesses()
			time.Sleep(20 * time.Millisecond)
			if d := rem.Accesses() - accesses; d != 0 {
				t.Errorf("%d writes to the buffer after ABORTED", d)
			}
			if n := g.Mem.LateWrites(); n != 0 {
				t.Errorf("%d late writes: %v", n, g.Mem.LateLog())
			}
			if accesses != 1 {
				t.Errorf("%d page writes reached the buffer, want only the one in flight", accesses)
			}
		})
	}
}
