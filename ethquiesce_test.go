package npfnic

import (
	"bytes"
	"testing"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// The quiesce contract (hw.Quiesce) for the Ethernet datapath, through
// BAR0: the BUSY bits of PAIR_CTRL, CTRL and BACKUP_CTRL, and LATE_DMA.

func (r *faultRig) rd(off uint32) uint32 { return rd32(r.t, r.n, hw.RegBAR, uint64(off)) }

// wrNow writes a register on another goroutine and fails unless the write
// returns at once (the socket goroutine never waits for guest memory).
func (r *faultRig) wrNow(off, v uint32) {
	r.t.Helper()
	done := make(chan struct{})
	go func() {
		r.wr(off, v)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		r.t.Fatalf("write of %#x to %#x blocked", v, off)
	}
}

// waitClear polls a register until bit clears, as the driver does, for at
// most hw.QuiesceTimeoutMS.
func (r *faultRig) waitClear(off, bit uint32) {
	r.t.Helper()
	if _, ok := hw.AwaitQuiesced(func() uint32 { return r.rd(off) }, bit); !ok {
		r.t.Fatalf("register %#x: BUSY still set after %d ms", off, hw.QuiesceTimeoutMS)
	}
}

// TestBusyBitsThroughBAR0: PAIR_CTRL and CTRL read BUSY while enabled (the
// device may DMA at any time) and clear once disabled or reset with
// nothing in flight.
func TestBusyBitsThroughBAR0(t *testing.T) {
	r := newFaultRig(t, faultOpts{noATS: true, policy: hw.RxPolicyDrop})
	q := hw.PairBase(0)
	for _, tc := range []struct {
		name      string
		off, want uint32
	}{
		{"PAIR_CTRL enabled", q + hw.PairCtrl, hw.PairCtrlEnable | hw.PairCtrlBusy},
		{"CTRL enabled with a status block", hw.RegCtrl, hw.CtrlEnable | hw.CtrlBusy},
		{"LATE_DMA", hw.RegLateDMA, 0},
	} {
		if got := r.rd(tc.off); got != tc.want {
			t.Errorf("%s: %#x, want %#x", tc.name, got, tc.want)
		}
	}
	r.wrNow(q+hw.PairCtrl, 0)
	r.waitClear(q+hw.PairCtrl, hw.PairCtrlBusy)
	// A write of BUSY is ignored: it is read only.
	r.wr(q+hw.PairCtrl, hw.PairCtrlBusy)
	if got := r.rd(q + hw.PairCtrl); got != 0 {
		t.Errorf("PAIR_CTRL after writing BUSY alone: %#x", got)
	}
	r.wrNow(hw.RegCtrl, hw.CtrlReset)
	r.waitClear(hw.RegCtrl, hw.CtrlBusy)
	if got := r.rd(hw.RegCtrl); got != 0 {
		t.Errorf("CTRL after reset: %#x", got)
	}
}

// TestBackupDisableWhileStoreBlocked: a frame is being stored in the
// backup ring, its buffer write held in a remote DMA_WRITE, when the
// driver disables the backup ring. BACKUP_CTRL=0 returns at once and reads
// BUSY until the store ended; after BUSY cleared the driver frees the
// ring and its buffers, and nothing lands there any more (no late write,
// no changed byte, no backup interrupt), whatever traffic arrives.
func TestBackupDisableWhileStoreBlocked(t *testing.T) {
	r := newFaultRig(t, faultOpts{policy: hw.RxPolicyBackup, bmSize: 4, backupSize: 8})
	const remBase, remSize = 1 << 36, 64 << 10
	rem := r.g.AddRemote(remBase, remSize)
	t.Cleanup(rem.Release) // before the NIC closes, even if the test fails while holding
	for i := range r.backupBufs {
		r.backupBufs[i] = remBase + uint64(i)*2048
		hw.BackupDescAddr.Put(r.g.Bytes(r.backup+uint64(i)*hw.BackupDescSize, hw.BackupDescSize), r.backupBufs[i])
	}
	r.postRX(8) // a cold ring: every buffer faults, every frame goes to the backup ring
	rem.Hold()
	r.send(testFrame(100, 1))
	select {
	case <-rem.Entered():
	case <-time.After(5 * time.Second):
		t.Fatal("the backup store never started")
	}
	r.wrNow(hw.RegBackupCtrl, 0)
	if v := r.rd(hw.RegBackupCtrl); v != hw.BackupCtrlBusy {
		t.Fatalf("BACKUP_CTRL %#x while a store is held, want BUSY alone", v)
	}
	if r.rd(hw.PairBase(0)+hw.PairCtrl)&hw.PairCtrlBusy == 0 {
		t.Fatal("PAIR_CTRL not BUSY while its frame is held")
	}
	rem.Release()
	r.waitClear(hw.RegBackupCtrl, hw.BackupCtrlBusy)

	ringLen := int(r.backupSize) * hw.BackupDescSize
	r.g.Mem.Fence(r.backup, uint64(ringLen))
	r.g.Mem.Fence(remBase, remSize)
	ring := append([]byte(nil), r.g.Bytes(r.backup, ringLen)...)
	bufs := rem.Read(remBase, remSize)
	irqs := r.irq.n(hw.BackupVectorDefault)
	for i := range 20 {
		r.send(testFrame(100, byte(2+i)))
	}
	r.waitFor("frames handled", func() bool { return r.n.Ethernet().Stats().Pairs[0].RxFaultDrops >= 20 })
	if n := r.rd(hw.RegLateDMA); n != 0 {
		t.Fatalf("LATE_DMA %d: %v", n, r.g.Mem.LateLog())
	}
	if !bytes.Equal(ring, r.g.Bytes(r.backup, ringLen)) {
		t.Fatal("backup ring changed after BUSY cleared")
	}
	if !bytes.Equal(bufs, rem.Read(remBase, remSize)) {
		t.Fatal("backup buffers changed after BUSY cleared")
	}
	if n := r.irq.n(hw.BackupVectorDefault); n != irqs {
		t.Fatalf("backup vector fired after BUSY cleared (%d, then %d)", irqs, n)
	}
}

// TestTxFaultWaitDoesNotHoldQuiesce: a TX frame stalled on a page request
// the driver never answers holds no DMA unit, so disabling the pair
// quiesces it promptly rather than after the fault.
func TestTxFaultWaitDoesNotHoldQuiesce(t *testing.T) {
	r := newFaultRig(t, faultOpts{policy: hw.RxPolicyDrop}) // nobody serves page requests
	d := r.g.Bytes(r.txRing, hw.TxDescSize)
	hw.TxDescAddr.Put(d, txVA(0))
	hw.TxDescLen.Put(d, 60)
	hw.TxDescFlags.Put(d, hw.TxdEOP)
	r.txTail = 1
	r.wr(hw.PairBase(0)+hw.PairTxTail, r.txTail)
	r.waitFor("TX stalled on its fault", func() bool { return r.n.Ethernet().Stats().Pairs[0].TxFaults > 0 })
	time.Sleep(time.Millisecond) // well inside the wait for the response
	if v := r.rd(hw.PairBase(0) + hw.PairCtrl); v != hw.PairCtrlEnable|hw.PairCtrlBusy {
		t.Fatalf("PAIR_CTRL %#x while stalled", v)
	}
	start := time.Now()
	r.wrNow(hw.PairBase(0)+hw.PairCtrl, 0)
	r.waitClear(hw.PairBase(0)+hw.PairCtrl, hw.PairCtrlBusy)
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Fatalf("quiesce took %v behind a pending fault", el)
	}
}

// TestLateDMACountsRefusedWrites: the detector is not vacuous at the
// device. A driver model that fences a ring the pair still uses (a driver
// bug) gets the device's write-back refused: LATE_DMA counts it, the
// descriptor is left as it was, and the pair stops with a ring error.
func TestLateDMACountsRefusedWrites(t *testing.T) {
	r := newFaultRig(t, faultOpts{noATS: true, policy: hw.RxPolicyDrop})
	buf := r.g.Alloc(2048, 64)
	d := r.rxDesc(0)
	hw.RxDescAddr.Put(d, buf)
	hw.RxDescBufLen.Put(d, 2048)
	r.rxTail = 1
	r.wr(hw.PairBase(0)+hw.PairRxTail, r.rxTail)
	ringLen := int(r.rxSize) * hw.RxDescSize
	r.g.Mem.Fence(r.rxRing, uint64(ringLen))
	ring := append([]byte(nil), r.g.Bytes(r.rxRing, ringLen)...)
	r.send(testFrame(100, 1))
	r.waitFor("the write-back refused", func() bool { return r.rd(hw.RegLateDMA) != 0 })
	if n := r.rd(hw.RegLateDMA); n != 1 {
		t.Fatalf("LATE_DMA %d, want 1: %v", n, r.g.Mem.LateLog())
	}
	if !bytes.Equal(ring, r.g.Bytes(r.rxRing, ringLen)) {
		t.Fatal("a refused write changed the fenced ring")
	}
	r.waitFor("pair error", func() bool { return r.qp(hw.PairStatusError) == hw.QErrBadRing })
}
