package nic

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/pri/pritest"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// FuzzRxBackup drives the backup policy with an arbitrary mix of frames,
// RX buffers posted, slots warmed, and RX_RESOLVE writes (the driver's
// input: pending rNPFs resolved in any order, and indexes naming nothing)
// and checks Figure 6's promises: the pair never fails, rx_head never
// passes a descriptor whose rNPF is unresolved, and once every rNPF is
// resolved every frame the device accepted is reported, in order.
func FuzzRxBackup(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 1, 0, 3, 3})
	f.Add([]byte{2, 6, 10, 0, 0, 0, 0, 7, 0, 3, 3, 3, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 3, 3, 3, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 48 {
			ops = ops[:48]
		}
		r := newFaultRig(t, faultOpts{policy: hw.RxPolicyBackup, bmSize: 4, backupSize: 8})
		r.serveFaults(func(pritest.Group) uint16 { return hw.PRSPSuccess })
		var mu sync.Mutex
		r.postRX(8)
		type rnpf struct{ desc, bit uint32 }
		var pending []rnpf
		accepted := uint32(0) // frames stored directly or in the backup ring
		settle := func() {
			time.Sleep(300 * time.Microsecond)
			for {
				h := r.header(hw.StatusBackupHead)
				if h == r.backupNext {
					return
				}
				e := r.g.Bytes(r.backup+uint64(r.backupNext&(r.backupSize-1))*hw.BackupDescSize, hw.BackupDescSize)
				pending = append(pending, rnpf{hw.BackupDescDesc.Get(e), hw.BackupDescBmIndex.Get(e)})
				r.backupNext++
			}
		}
		check := func(step int) {
			ps := r.n.Datapath().Stats().Pairs[0]
			if ps.Error != 0 || r.n.Datapath().DeviceError() != 0 {
				t.Fatalf("step %d: pair error %d device error %d", step, ps.Error, r.n.Datapath().DeviceError())
			}
			head := r.qp(hw.QPStatusRxHead)
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
			va := rxVA(p.desc & (r.rxSize - 1))
			mu.Lock()
			if r.g.Load64(r.as.EntryAddr(va, 1))&hw.PTEPresent == 0 {
				r.as.Map(va, r.g.AllocPage(), true)
			}
			mu.Unlock()
			d := r.rxDesc(p.desc)
			hw.RxDescPktLen.Put(d, 60)
			hw.RxDescStatus.Put(d, hw.RxdDone)
			r.wr(hw.QPBase(0)+hw.QPRxResolve, p.bit)
			pending = slices.Delete(pending, i, i+1)
			return true
		}
		frames := 0
		for step, op := range ops {
			arg := uint32(op >> 2)
			switch op & 3 {
			case 0:
				before := r.n.Datapath().Stats().Pairs[0]
				r.send(testFrame(60, byte(frames)))
				frames++
				r.waitFor("frame handled", func() bool {
					ps := r.n.Datapath().Stats().Pairs[0]
					return ps.RxFrames+ps.RxBackup+ps.RxFaultDrops+ps.RxDropsNoBuf >
						before.RxFrames+before.RxBackup+before.RxFaultDrops+before.RxDropsNoBuf ||
						ps.RxWireStalls > before.RxWireStalls
				})
			case 1:
				// A correct IOuser reposts only what it consumed.
				room := r.rxSize - (r.rxTail - r.qp(hw.QPStatusRxHead))
				if n := min(arg%8+1, room); n > 0 {
					r.postRX(int(n))
				}
			case 2:
				va := rxVA(arg & (r.rxSize - 1))
				mu.Lock()
				if r.g.Load64(r.as.EntryAddr(va, 1))&hw.PTEPresent == 0 {
					r.as.Map(va, r.g.AllocPage(), true)
				}
				mu.Unlock()
			case 3:
				if len(pending) == 0 {
					// Half the index space away from bm_index: never a
					// pending rNPF, now or after later frames. Resolves
					// apply asynchronously, so wait until it was refused.
					bad := r.n.Datapath().Stats().Pairs[0].RxBadResolves
					r.wr(hw.QPBase(0)+hw.QPRxResolve, r.qp(hw.QPStatusRxBmIndex)+1<<31+arg)
					r.waitFor("bad resolve refused", func() bool {
						return r.n.Datapath().Stats().Pairs[0].RxBadResolves > bad
					})
					break
				}
				place(int(arg) % len(pending))
			}
			settle()
			check(step)
		}
		// Drain: resolve everything, reposting as the IOuser consumes.
		deadline := time.Now().Add(5 * time.Second)
		for len(pending) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("rNPFs never placeable: %+v, tail %d head %d", pending, r.rxTail, r.qp(hw.QPStatusRxHead))
			}
			if !place(0) {
				if room := r.rxSize - (r.rxTail - r.qp(hw.QPStatusRxHead)); room > 0 {
					r.postRX(int(room))
				}
			}
			settle()
			check(len(ops))
		}
		ps := r.n.Datapath().Stats().Pairs[0]
		accepted = uint32(ps.RxFrames + ps.RxBackup)
		r.waitFor("every accepted frame reported", func() bool { return r.qp(hw.QPStatusRxHead) == accepted })
		if off := r.qp(hw.QPStatusRxHeadOffset); off != 0 {
			t.Fatalf("head_offset %d with nothing pending", off)
		}
	})
}
