package npfnic

import (
	"encoding/binary"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/internal/fuzzseed"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// go's fuzz workers die silently; keep what the runtime says (ci/fuzz.sh).
func init() { fuzzseed.KeepCrashOutput() }

// FuzzRxBackup drives the backup policy with an arbitrary mix of frames,
// RX buffers posted, slots warmed, and RX_RESOLVE writes (the driver's
// input: pending rNPFs placed and resolved in any order, and indexes that
// name nothing the device may apply: small offsets from bm_index, offsets
// around BM_SIZE, head_offset and RX_TAIL, rNPFs whose descriptor is not
// posted, far-away indexes) and checks Figure 6's promises: the pair never
// fails, a bad index is ignored and counted, rx_head never passes a
// descriptor whose rNPF is unresolved, and once every rNPF is resolved
// every frame the device accepted is reported, in order. The first byte's
// top bits also pick BM_SIZE (1, 2, 4 or 8).
//
// Speed: one NIC per fuzz worker, reset between inputs through the
// driver's own handshake (disable, BUSY, re-enable; pages unmapped and the
// ATC invalidated); frames are delivered by calling Datapath.Receive,
// which places a frame (or stores its backup entry) before it returns, and
// each RX_RESOLVE is awaited through the pair's RxResolves counter instead
// of a sleep. Page requests are not served (PRI stays disabled): under the
// backup policy the entry is what the driver acts on. The remaining cost
// is the resolve goroutine's wake-up per RX_RESOLVE (RX_RESOLVE is applied
// off the register path by design, so each one is a goroutine handoff) and
// the per-input re-enable (new worker and resolve goroutines, an ATC
// invalidation round trip), which keeps it slower than the other targets;
// building a NIC per input, sleeping after every step and feeding frames
// through the wire, as the 0a2f858 version did, made it some hundred
// times slower still.
func FuzzRxBackup(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 1, 0, 3, 3})
	f.Add([]byte{2, 6, 10, 0, 0, 0, 0, 7, 0, 3, 3, 3, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 3, 3, 3, 3})
	// Issue 10 finding 4: BM_SIZE 1, an rNPF, three frames placed past
	// it, then RX_RESOLVE of bm_index+3 (aliases onto the pending bit).
	// Slots 1-3 warm, 8 buffers, four frames (slot 0 faults), then
	// RX_RESOLVE of bm_index+3.
	f.Add([]byte{0x06, 0x0a, 0x0e, 0x1d, 0, 0, 0, 0, 0x1f})
	// An rNPF stored for a descriptor beyond RX_TAIL (2 buffers posted,
	// slot 1 warm, three frames), resolved before the tail passes it, then
	// the tail moves on.
	f.Add([]byte{0x85, 0x06, 0, 0, 0, 0x17, 0x05, 3, 3})
	r := newBackupFuzzRig(f)
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 48 {
			ops = ops[:48]
		}
		bmSize := uint32(4)
		if len(ops) > 0 {
			bmSize = 1 << (ops[0] >> 6)
		}
		r.t = t
		r.restart(bmSize)
		start := r.n.Ethernet().Pair(0).Stats()
		type rnpf struct{ desc, bit uint32 }
		var pending []rnpf
		resolves := start.RxResolves
		// resolve writes RX_RESOLVE and waits until the device handled it;
		// it reports whether the device ignored it.
		resolve := func(bit uint32) (ignored bool) {
			before := r.n.Ethernet().Pair(0).Stats().RxBadResolves
			r.wr(hw.PairBase(0)+hw.PairRxResolve, bit)
			resolves++
			deadline := time.Now().Add(5 * time.Second)
			for {
				ps := r.n.Ethernet().Pair(0).Stats()
				if ps.RxResolves == resolves {
					return ps.RxBadResolves != before
				}
				if time.Now().After(deadline) {
					t.Fatalf("RX_RESOLVE %d never handled", bit)
				}
				runtime.Gosched()
			}
		}
		// settle takes the new backup entries (stored synchronously by
		// Receive) into the model.
		settle := func() {
			h := r.header(hw.StatusBackupHead)
			if h-r.backupNext > r.backupTail-r.backupNext {
				t.Fatalf("backup_head %d outside [%d, %d]", h, r.backupNext, r.backupTail)
			}
			for ; r.backupNext != h; r.backupNext++ {
				e := r.g.Bytes(r.backup+uint64(r.backupNext&(r.backupSize-1))*hw.BackupDescSize, hw.BackupDescSize)
				pending = append(pending, rnpf{hw.BackupDescDesc.Get(e), hw.BackupDescBmIndex.Get(e)})
			}
		}
		check := func(step int) {
			ps := r.n.Ethernet().Pair(0).Stats()
			if ps.Error != 0 || r.n.Ethernet().DeviceError() != 0 {
				t.Fatalf("step %d: pair error %d device error %d", step, ps.Error, r.n.Ethernet().DeviceError())
			}
			head := r.qp(hw.PairStatusRxHead)
			if int32(r.rxTail-head) < 0 {
				t.Fatalf("step %d: rx_head %d passed rx_tail %d", step, head, r.rxTail)
			}
			for _, p := range pending {
				if int32(p.desc-head) < 0 {
					t.Fatalf("step %d: rx_head %d passed unresolved rNPF at descriptor %d", step, head, p.desc)
				}
			}
		}
		// place puts pending rNPF i's frame in its buffer and resolves it,
		// as the driver does; false if its descriptor is not posted yet.
		place := func(i int) bool {
			p := pending[i]
			if int32(r.rxTail-p.desc) <= 0 {
				return false
			}
			r.warm(p.desc)
			d := r.rxDesc(p.desc)
			hw.RxDescPktLen.Put(d, 60)
			hw.RxDescStatus.Put(d, hw.RxdDone)
			if resolve(p.bit) {
				t.Fatalf("RX_RESOLVE %d of a placed, posted rNPF (descriptor %d) ignored", p.bit, p.desc)
			}
			pending = slices.Delete(pending, i, i+1)
			// The IOprovider recycles the backup buffer it copied from.
			d = r.g.Bytes(r.backup+uint64(r.backupTail&(r.backupSize-1))*hw.BackupDescSize, hw.BackupDescSize)
			clear(d[hw.BackupDescPktLen.Offset:])
			r.backupTail++
			r.wr(hw.RegBackupTail, r.backupTail)
			return true
		}
		// badIndex resolves an index the driver has no right to resolve
		// (a pending one whose descriptor is posted is placed instead);
		// the device must ignore it.
		badIndex := func(sel uint32) {
			bm, head, off := r.qp(hw.PairStatusRxBmIndex), r.qp(hw.PairStatusRxHead), r.qp(hw.PairStatusRxHeadOffset)
			toTail := r.rxTail - head
			deltas := []uint32{0, 1, 2, 3, bmSize - 1, bmSize, bmSize + 1, 2 * bmSize,
				off - 1, off, off + 1, toTail - 1, toTail, toTail + 1, 1 << 31, ^uint32(0)}
			for _, p := range pending {
				deltas = append(deltas, p.bit-bm)
			}
			bit := bm + deltas[sel%uint32(len(deltas))]
			for i, p := range pending {
				if p.bit == bit && int32(r.rxTail-p.desc) > 0 {
					place(i)
					return
				}
			}
			if !resolve(bit) {
				t.Fatalf("RX_RESOLVE %d applied (bm_index %d, rx_head %d, head_offset %d, rx_tail %d, bm_size %d, pending %+v)",
					bit, bm, head, off, r.rxTail, bmSize, pending)
			}
		}
		frames := 0
		for step, op := range ops {
			arg := uint32(op >> 2)
			switch op & 3 {
			case 0:
				r.n.Ethernet().Receive(testFrame(60, byte(frames)))
				frames++
			case 1:
				// A correct IOuser reposts only what it consumed.
				room := r.rxSize - (r.rxTail - r.qp(hw.PairStatusRxHead))
				if n := min(arg%8+1, room); n > 0 {
					r.postRX(int(n))
				}
			case 2:
				r.warm(arg)
			case 3:
				if len(pending) > 0 && arg&1 == 0 {
					place(int(arg>>1) % len(pending))
				} else {
					badIndex(arg >> 1)
				}
			}
			settle()
			check(step)
		}
		// Drain: resolve everything, reposting as the IOuser consumes.
		for tries := 0; len(pending) > 0; tries++ {
			if tries > 64 {
				t.Fatalf("rNPFs never resolved: %+v, tail %d head %d", pending, r.rxTail, r.qp(hw.PairStatusRxHead))
			}
			if !place(0) {
				room := r.rxSize - (r.rxTail - r.qp(hw.PairStatusRxHead))
				if room == 0 {
					t.Fatalf("rNPFs never placeable: %+v, tail %d head %d", pending, r.rxTail, r.qp(hw.PairStatusRxHead))
				}
				r.postRX(int(room))
			}
			settle()
			check(len(ops))
		}
		ps := r.n.Ethernet().Pair(0).Stats()
		accepted := uint32(ps.RxFrames - start.RxFrames + ps.RxBackup - start.RxBackup)
		if head := r.qp(hw.PairStatusRxHead); head != accepted {
			t.Fatalf("rx_head %d, but %d frames accepted", head, accepted)
		}
		if off := r.qp(hw.PairStatusRxHeadOffset); off != 0 {
			t.Fatalf("head_offset %d with nothing pending (the device's %d; rx_head %d and bm_index %d in the block)",
				off, r.n.Ethernet().Pair(0).Stats().RxHeadOffset, r.qp(hw.PairStatusRxHead), r.qp(hw.PairStatusRxBmIndex))
		}
	})
}

// warm maps the page of RX slot's buffer, if it is not mapped.
func (r *faultRig) warm(slot uint32) {
	va := rxVA(slot & (r.rxSize - 1))
	if r.g.Load64(r.as.EntryAddr(va, 1))&hw.PTEPresent == 0 {
		r.as.Map(va, r.g.AllocPage(), true)
	}
}

// newBackupFuzzRig is a faultRig for FuzzRxBackup, built once per fuzz
// worker: ATS on and PRI off, frames dropped rather than held when no
// buffer is posted (Receive returns at once), no wire, a backup ring of 8.
func newBackupFuzzRig(tb testing.TB) *faultRig {
	g := atstest.NewGuest(tb, 8<<20)
	dev, peer := port.Pipe(1)
	n, err := New(Options{Wire: dev, QueuePairs: 1, RxDropNoBuf: true, Mem: g.Mem})
	if err != nil {
		tb.Fatal(err)
	}
	irq := &vecIRQ{count: map[int]int{}, wake: map[int]chan struct{}{}}
	n.Attach(vfiouser.Host{IRQ: irq})
	tb.Cleanup(func() { n.Close(); peer.Close() })
	r := &faultRig{t: tb, n: n, g: g, peer: peer, irq: irq}
	r.cfgWrite(pcie.OffCommand, []byte{0x06, 0})
	r.cfgWrite(n.cfg.Layout().ATS+6, binary.LittleEndian.AppendUint16(nil, pcie.ATSCtrlEnable))
	r.ats = g.NewDriver(rigBar{r}, 1, 16)
	r.as = g.NewAddressSpace()
	r.ats.Table.Set(0, r.as)
	r.status = g.Alloc(hw.StatusBlockSize, hw.StatusBlockAlign)
	// The device takes up a status block off the register path (its
	// control goroutine writes the header and every pair's part some time
	// after the address): wait for it, or that write can land in the
	// middle of the first input's restart.
	poison(r.g.Bytes(r.status, hw.StatusBlockSize))
	r.wr(hw.RegStatusAddrLo, uint32(r.status))
	r.wr(hw.RegStatusAddrHi, uint32(r.status>>32))
	r.awaitFreshStatus("the status block was never taken up")
	r.backupSize = 8
	r.backup = g.Alloc(int(r.backupSize)*hw.BackupDescSize, 4096)
	for range r.backupSize {
		r.backupBufs = append(r.backupBufs, g.Alloc(2048, 64))
	}
	r.wr(hw.RegBackupBaseLo, uint32(r.backup))
	r.wr(hw.RegBackupBaseHi, uint32(r.backup>>32))
	r.wr(hw.RegBackupSize, r.backupSize)
	r.txSize, r.rxSize = 8, 8
	r.txRing = g.Alloc(int(r.txSize)*hw.TxDescSize, 4096)
	r.rxRing = g.Alloc(int(r.rxSize)*hw.RxDescSize, 4096)
	q := hw.PairBase(0)
	r.wr(q+hw.PairTxBaseLo, uint32(r.txRing))
	r.wr(q+hw.PairTxBaseHi, uint32(r.txRing>>32))
	r.wr(q+hw.PairTxSize, r.txSize)
	r.wr(q+hw.PairRxBaseLo, uint32(r.rxRing))
	r.wr(q+hw.PairRxBaseHi, uint32(r.rxRing>>32))
	r.wr(q+hw.PairRxSize, r.rxSize)
	r.wr(q+hw.PairRxPolicy, hw.RxPolicyBackup)
	r.wr(hw.RegCtrl, hw.CtrlEnable)
	return r
}

// rigBar is bar for a rig whose testing.TB changes from input to input.
type rigBar struct{ r *faultRig }

func (b rigBar) RegWrite(off, v uint32) bool       { return bar{b.r.t, b.r.n}.RegWrite(off, v) }
func (b rigBar) RegRead(off uint32) (uint32, bool) { return bar{b.r.t, b.r.n}.RegRead(off) }

// restart gives the next input a fresh pair and backup ring, as a driver
// does: disable both and wait for BUSY to clear, take every RX page back
// (unmapped, the ATC invalidated), clear the rings, then enable both with
// bmSize.
func (r *faultRig) restart(bmSize uint32) {
	q := hw.PairBase(0)
	r.wr(q+hw.PairCtrl, 0)
	r.wr(hw.RegBackupCtrl, 0)
	if _, ok := hw.AwaitQuiesced(func() uint32 { return r.rd(q + hw.PairCtrl) }, hw.PairCtrlBusy); !ok {
		r.t.Fatal("pair never quiesced")
	}
	if _, ok := hw.AwaitQuiesced(func() uint32 { return r.rd(hw.RegBackupCtrl) }, hw.BackupCtrlBusy); !ok {
		r.t.Fatal("backup ring never quiesced")
	}
	for slot := range r.rxSize {
		if old := r.as.Unmap(rxVA(slot)); old&hw.PTEPresent != 0 {
			r.g.FreePage(old & hw.PTEAddrMask)
		}
	}
	if err := r.ats.Sync(atstest.All()); err != nil {
		r.t.Fatal(err)
	}
	clear(r.g.Bytes(r.rxRing, int(r.rxSize)*hw.RxDescSize))
	for i, buf := range r.backupBufs {
		d := r.g.Bytes(r.backup+uint64(i)*hw.BackupDescSize, hw.BackupDescSize)
		clear(d)
		hw.BackupDescAddr.Put(d, buf)
		hw.BackupDescBufLen.Put(d, 2048)
	}
	// backup_head in the status block shows the last run's until the
	// device rewrites the header for the new one.
	r.g.Store32(r.status+uint64(hw.StatusBackupHead.Offset), ^uint32(0))
	r.wr(hw.RegBackupCtrl, hw.BackupCtrlEnable)
	r.backupTail, r.backupNext = r.backupSize, 0
	r.wr(hw.RegBackupTail, r.backupTail)
	r.wr(q+hw.PairBmSize, bmSize)
	// The new instance writes its whole status part once it runs: until
	// then the part still shows the last input's values.
	poison(r.g.Bytes(r.status+uint64(hw.StatusPairOffset(0)), hw.PairStatusSize))
	r.wr(q+hw.PairCtrl, hw.PairCtrlEnable)
	r.rxTail, r.txTail = 0, 0
	r.awaitFreshStatus("the new instance never published its status")
}

// poison fills b with 0xff, which no field of a fresh status holds.
func poison(b []byte) {
	for i := range b {
		b[i] = 0xff
	}
}

// awaitFreshStatus waits until pair 0's whole status part and the
// header's backup_head read zero, as a fresh instance and backup ring
// publish them. Every byte, not one field: a part written while the rig
// poisoned it holds the device's zeros only where the rig had already
// passed (FuzzRxBackup/97e053320e5d45b4: rx_head 0, head_offset
// 0xffffffff).
func (r *faultRig) awaitFreshStatus(why string) {
	part := r.g.Bytes(r.status+uint64(hw.StatusPairOffset(0)), hw.PairStatusSize)
	deadline := time.Now().Add(hw.QuiesceTimeoutMS * time.Millisecond)
	for slices.ContainsFunc(part, func(b byte) bool { return b != 0 }) || r.header(hw.StatusBackupHead) != 0 {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: pair status % x, backup_head %#x", why, part, r.header(hw.StatusBackupHead))
		}
		runtime.Gosched()
	}
}
