package pri_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/pri/pritest"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

const outside = 0x4000_0000_0000

// reenable disables the PRI block, writes register/value pairs and enables
// it again.
func reenable(ev *env, kv ...uint32) {
	hw.Offsets(ev.e).RegWrite(hw.RegPRICtrl, 0)
	for i := 0; i+1 < len(kv); i += 2 {
		hw.Offsets(ev.e).RegWrite(kv[i], kv[i+1])
	}
	hw.Offsets(ev.e).RegWrite(hw.RegPRICtrl, hw.PRICtrlEnable)
}

// TestQueueBadInput: bad queue registers, indexes and memory each give
// their defined error (PRI_ERROR, and the status block when usable); the
// engine keeps running and works again after a reset.
func TestQueueBadInput(t *testing.T) {
	lo := func(a uint64) uint32 { return uint32(a & 0xffffffff) }
	for _, tc := range []struct {
		name   string
		setup  func(ev *env)
		code   uint32
		info   uint32
		submit error // what Submit gets afterwards (nil: it works)
	}{
		{"PRQ outside guest RAM", func(ev *env) {
			reenable(ev, hw.RegPRQBaseLo, lo(outside), hw.RegPRQBaseHi, outside>>32)
		}, hw.PRIErrBadPRQ, 0, pri.ErrNoQueue},
		{"PRQ misaligned", func(ev *env) { reenable(ev, hw.RegPRQBaseLo, lo(ev.drv.PRQ+16)) }, hw.PRIErrBadPRQ, 0, pri.ErrNoQueue},
		{"PRQ size not a power of two", func(ev *env) { reenable(ev, hw.RegPRQSize, 24) }, hw.PRIErrBadPRQ, 0, pri.ErrNoQueue},
		{"PRQ too small", func(ev *env) { reenable(ev, hw.RegPRQSize, 4) }, hw.PRIErrBadPRQ, 0, pri.ErrNoQueue},
		{"PRQ runs out of guest RAM", func(ev *env) {
			reenable(ev, hw.RegPRQBaseLo, lo(ev.g.Base+uint64(len(ev.g.RAM))-4096), hw.RegPRQSize, 4096)
		}, hw.PRIErrBadPRQ, 0, pri.ErrNoQueue},
		{"response queue outside guest RAM", func(ev *env) {
			reenable(ev, hw.RegPRSPQBaseLo, lo(outside), hw.RegPRSPQBaseHi, outside>>32)
		}, hw.PRIErrBadPRSPQ, 0, nil},
		{"response queue size zero", func(ev *env) { reenable(ev, hw.RegPRSPQSize, 0) }, hw.PRIErrBadPRSPQ, 0, nil},
		{"status block misaligned", func(ev *env) { reenable(ev, hw.RegPRIStatusLo, lo(ev.drv.Status+8)) }, hw.PRIErrBadStatusAddr, 0, pri.ErrNoQueue},
		{"status block outside guest RAM", func(ev *env) {
			reenable(ev, hw.RegPRIStatusLo, lo(outside), hw.RegPRIStatusHi, outside>>32)
		}, hw.PRIErrBadStatusAddr, 0, pri.ErrNoQueue},
		{"PRQ head beyond the tail", func(ev *env) {
			mustSubmit(t, ev.e, req(0x1000))
			hw.Offsets(ev.e).RegWrite(hw.RegPRQHead, 2)
		}, hw.PRIErrBadHead, 2, pri.ErrNoQueue},
		{"PRQ head backwards", func(ev *env) {
			mustSubmit(t, ev.e, req(0x1000))
			hw.Offsets(ev.e).RegWrite(hw.RegPRQHead, 1)
			hw.Offsets(ev.e).RegWrite(hw.RegPRQHead, 0)
		}, hw.PRIErrBadHead, 0, pri.ErrNoQueue},
		{"response tail beyond the queue", func(ev *env) { hw.Offsets(ev.e).RegWrite(hw.RegPRSPQTail, 17) }, hw.PRIErrBadTail, 17, nil},
		{"PRQ unmapped under the device", func(ev *env) {
			// A queue in its own mapping that QEMU later unmaps: the next
			// write fails and the queue enters its error state.
			const iova = 0x8000_0000
			if err := ev.g.Mem.MapHost(iova, make([]byte, 4096), guestmem.ProtRead|guestmem.ProtWrite, nil); err != nil {
				t.Fatal(err)
			}
			reenable(ev, hw.RegPRQBaseLo, iova, hw.RegPRQBaseHi, 0, hw.RegPRQSize, 64)
			time.Sleep(10 * time.Millisecond) // let the engine probe the new queue
			if err := ev.g.Mem.Unmap(iova, 4096); err != nil {
				t.Fatal(err)
			}
			if _, err := ev.e.Submit(ctxT(t), req(0x1000)); !errors.Is(err, pri.ErrNoQueue) {
				t.Fatalf("submit into an unmapped queue: %v", err)
			}
		}, hw.PRIErrBadPRQ, 0, pri.ErrNoQueue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := newEnv(t, envOpts{})
			tc.setup(ev)
			var code uint32
			eventually(t, "PRI_ERROR", func() bool {
				code, _ = hw.Offsets(ev.e).RegRead(hw.RegPRIError)
				return code != 0
			})
			if code != tc.code {
				t.Fatalf("PRI_ERROR %d, want %d", code, tc.code)
			}
			if tc.code != hw.PRIErrBadStatusAddr {
				eventually(t, "status block error", func() bool { return ev.drv.Err() != nil })
				var de *pritest.DeviceError
				if err := ev.drv.Err(); !errors.As(err, &de) || de.Code != tc.code || de.Info != tc.info {
					t.Fatalf("status block error %v, want %d/%d", err, tc.code, tc.info)
				}
			}
			if _, err := ev.e.TrySubmit(req(0x5000)); !errors.Is(err, tc.submit) {
				t.Fatalf("submit after the error: %v, want %v", err, tc.submit)
			}
			// The engine recovers after a reset of the block.
			ev.drv.Reset()
			if v, _ := hw.Offsets(ev.e).RegRead(hw.RegPRIError); v != 0 {
				t.Fatalf("PRI_ERROR %d after reset", v)
			}
			g := mustSubmit(t, ev.e, req(0x6000))
			gs := ev.groups(t, 1)
			if err := ev.drv.Respond(pritest.ResponseFor(gs[0], hw.PRSPSuccess)); err != nil {
				t.Fatal(err)
			}
			if err := waitDone(t, g); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestResponseStorm floods a small response queue with garbage responses
// (unknown or out-of-range indexes, wrong PASIDs, reserved codes,
// duplicates) interleaved with the real ones: every real group completes
// exactly as answered, the counters add up, and nothing leaks.
func TestResponseStorm(t *testing.T) {
	ev := newEnv(t, envOpts{capacity: 256, prq: 512, rsp: 8})
	rng := rand.New(rand.NewPCG(1, 2))
	const rounds, groupsPerRound, junkPerGroup = 20, 16, 30
	var junk, real uint64
	for round := range rounds {
		var gs []*pri.Group
		for i := range groupsPerRound {
			r := req(uint64(round*groupsPerRound+i) * 4096)
			r.PASID = uint32(i)
			gs = append(gs, mustSubmit(t, ev.e, r))
		}
		seen := ev.groups(t, groupsPerRound)
		var rs []pritest.Response
		want := map[uint16]uint16{}
		for _, g := range seen {
			for range junkPerGroup {
				r := pritest.ResponseFor(g, 0)
				switch rng.IntN(4) {
				case 0:
					r.PRGI = uint16(rng.IntN(1 << 16))
					if r.PRGI < hw.PRGIMax {
						r.PRGI = 600 // keep it from hitting a real group
					}
				case 1:
					r.PASID += 1 + uint32(rng.IntN(1000))
				case 2:
					r.Code = uint16(2 + rng.IntN(13)) // reserved codes
				default:
					r.PRGI = hw.PRGIMax + uint16(rng.IntN(100))
				}
				rs = append(rs, r)
				junk++
			}
			code := uint16(hw.PRSPSuccess)
			if rng.IntN(3) == 0 {
				code = hw.PRSPInvalidRequest
			}
			want[g[0].PRGI] = code
			rs = append(rs, pritest.ResponseFor(g, code))
			rs = append(rs, pritest.ResponseFor(g, code)) // duplicate: unexpected
			real++
			junk++
		}
		// Any order: a duplicate carries the same code as its original, so
		// whichever arrives first completes the group the same way.
		rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
		if err := ev.drv.Respond(rs...); err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			err := waitDone(t, g)
			switch want[g.PRGI()] {
			case hw.PRSPSuccess:
				if err != nil {
					t.Fatalf("group %d: %v", g.PRGI(), err)
				}
			default:
				if !errors.Is(err, pri.ErrInvalidRequest) {
					t.Fatalf("group %d: %v", g.PRGI(), err)
				}
			}
		}
	}
	eventually(t, "every response consumed", func() bool {
		s := ev.e.Stats()
		return s.Success+s.Invalid+s.Unexpected+s.Malformed == junk+real
	})
	s := ev.e.Stats()
	if s.Success+s.Invalid != real || s.Outstanding != 0 || s.Credits != 0 || s.Failures != 0 {
		t.Fatalf("stats %+v", s)
	}
	if uint64(ev.drv.Unexpected()) != s.Unexpected {
		t.Fatalf("status block counts %d unexpected, stats %d", ev.drv.Unexpected(), s.Unexpected)
	}
	t.Logf("%d real and %d junk responses: %+v", real, junk, s)
}

// TestPRIRegisters checks read-back, write-only and reset behaviour and
// the block's bounds.
func TestPRIRegisters(t *testing.T) {
	ev := newEnv(t, envOpts{noDriver: true})
	e := ev.e
	if v, ok := hw.Offsets(e).RegRead(hw.RegPRQVector); !ok || v != hw.PRQVectorDefault {
		t.Fatalf("PRQ_VECTOR reset value %d", v)
	}
	for _, r := range hw.TranslationRegisters {
		if r.Offset < hw.ATSRegEnd {
			continue
		}
		if !hw.Offsets(e).RegWrite(r.Offset, 0x1234_5000) {
			t.Fatalf("%s not claimed", r.Name)
		}
		want := uint32(0x1234_5000)
		if r.Access != hw.AccessRW || r.Offset == hw.RegPRICtrl {
			want = 0
		}
		if v, ok := hw.Offsets(e).RegRead(r.Offset); !ok || v != want {
			t.Errorf("%s reads %#x, want %#x", r.Name, v, want)
		}
	}
	for _, off := range []uint32{hw.ATSRegEnd - 4, hw.PRIRegEnd, hw.RegPRICtrl + 1, 0x1000} {
		if hw.Offsets(e).RegWrite(off, 1) {
			t.Errorf("offset %#x claimed by the PRI block", off)
		}
		if _, ok := hw.Offsets(e).RegRead(off); ok {
			t.Errorf("offset %#x readable in the PRI block", off)
		}
	}
	hw.Offsets(e).RegWrite(hw.RegPRICtrl, hw.PRICtrlReset)
	for _, r := range hw.TranslationRegisters {
		if r.Offset < hw.ATSRegEnd {
			continue
		}
		want := uint32(0)
		if r.Offset == hw.RegPRQVector {
			want = hw.PRQVectorDefault
		}
		if v, _ := hw.Offsets(e).RegRead(r.Offset); v != want {
			t.Errorf("%s reads %#x after reset", r.Name, v)
		}
	}
}
