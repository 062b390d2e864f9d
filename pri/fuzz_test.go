package pri_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/npfnic/npfnic/internal/fuzzseed"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// go's fuzz workers die silently; keep what the runtime says (ci/fuzz.sh).
func init() { fuzzseed.KeepCrashOutput() }

// FuzzPageResponses feeds arbitrary page response queue entries to an
// engine with a few groups outstanding and checks every group's outcome
// and every counter against a reference model of the matching rules.
//
// Cost: each input is a function reset, up to 8 groups through the page
// request queue and up to 64 responses through a 16-entry response ring,
// every ring-full a handoff to the engine's response goroutine (ci/fuzz.sh
// prints the rates with the host's load). The helpers never sleep: a
// sub-millisecond time.Sleep lasts a scheduler tick, which made sleeping
// helpers the whole cost of an input.
func FuzzPageResponses(f *testing.F) {
	ev := newEnv(f, envOpts{capacity: 64, rsp: 16})
	resp := func(prgi uint16, pasid uint32, code uint16, flags uint32) []byte {
		b := make([]byte, hw.PageRespSize)
		hw.PageRespPRGI.Put(b, prgi)
		hw.PageRespPASID.Put(b, pasid)
		hw.PageRespCode.Put(b, code)
		hw.PageRespFlags.Put(b, flags)
		return b
	}
	cat := func(head byte, bs ...[]byte) []byte {
		out := []byte{head}
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	// PRGIs are handed out round robin from 0 after each reset.
	f.Add(cat(2, resp(0, 0, 0, 1), resp(1, 1, 1, 1)))
	f.Add(cat(3, resp(1, 0, 15, 0), resp(0, 0, 0, 0), resp(2, 2, 0, 1)))
	f.Add(cat(1, resp(0, 9, 0, 1), resp(600, 0, 0, 0), resp(0, 0, 3, 0), resp(0, 0, 0, 0), resp(0, 0, 0, 0)))
	f.Add(cat(7))
	f.Fuzz(ev.checkResponses)
}

// checkResponses is FuzzPageResponses' body: data[0] picks how many groups
// are outstanding, the rest is page response entries.
func (ev *env) checkResponses(t *testing.T, data []byte) {
	if len(data) == 0 {
		return
	}
	// A fresh start: function reset, PRI and bus mastering on.
	ev.e.Reset()
	ev.space.Reset()
	ev.cfgWrite16(0x04, 0x6) // memory + bus master
	ev.setAlloc(64)
	ev.setPRI(true)
	ev.drv.Enable()
	before := ev.e.Stats()

	k := 1 + int(data[0]%8)
	groups := make([]*pri.Group, k)
	// At most 8 one-page groups against 64 credits never wait: TrySubmit
	// says so, without the timer and Cleanup of a context per input.
	for i := range groups {
		r := req(uint64(i) * 4096)
		r.PASID = uint32(i)
		g, err := ev.e.TrySubmit(r)
		if err != nil {
			t.Fatalf("TrySubmit: %v", err)
		}
		groups[i] = g
	}
	ev.groups(t, k)
	var raws [][]byte
	for b := data[1:]; len(b) > 0 && len(raws) < 64; {
		n := min(len(b), hw.PageRespSize)
		raws = append(raws, b[:n])
		b = b[n:]
	}

	// Reference model.
	type state struct {
		pasid uint32
		out   bool
		err   error
	}
	ref := map[uint16]*state{}
	for _, g := range groups {
		ref[g.PRGI()] = &state{pasid: uint32(len(ref)), out: true}
	}
	var success, invalid, failures, unexpected, malformed, ignored, abandoned uint64
	failed := false
	for _, raw := range raws {
		b := make([]byte, hw.PageRespSize)
		copy(b, raw)
		pasid, prgi := binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint16(b[4:])
		code, flags := binary.LittleEndian.Uint16(b[6:]), binary.LittleEndian.Uint32(b[8:])
		if failed {
			ignored++
			continue
		}
		s := ref[prgi]
		if s == nil || !s.out || flags&hw.PRSPPASIDValid != 0 && pasid != s.pasid {
			unexpected++
			continue
		}
		switch code {
		case hw.PRSPSuccess:
			s.out, s.err = false, nil
			success++
		case hw.PRSPInvalidRequest:
			s.out, s.err = false, pri.ErrInvalidRequest
			invalid++
		case hw.PRSPResponseFailure:
			failures++
			failed = true
			s.out, s.err = false, pri.ErrResponseFailure
			for _, o := range ref {
				if o.out {
					o.out, o.err = false, pri.ErrResponseFailure
					abandoned++
				}
			}
		default:
			malformed++
		}
	}

	if err := ev.drv.RespondRaw(raws); err != nil {
		t.Fatal(err)
	}
	eventually(t, "responses consumed", func() bool { return ev.drv.RspHead() == uint32(len(raws)) })
	s := ev.e.Stats()
	got := [7]uint64{s.Success - before.Success, s.Invalid - before.Invalid, s.Failures - before.Failures,
		s.Unexpected - before.Unexpected, s.Malformed - before.Malformed, s.Ignored - before.Ignored, s.Abandoned - before.Abandoned}
	want := [7]uint64{success, invalid, failures, unexpected, malformed, ignored, abandoned}
	if got != want {
		t.Fatalf("counters (success invalid failures unexpected malformed ignored abandoned) %v, reference %v", got, want)
	}
	outstanding := 0
	for _, g := range groups {
		st := ref[g.PRGI()]
		select {
		case <-g.Done():
			if st.out {
				t.Fatalf("group %d completed, reference has it outstanding", g.PRGI())
			}
			if err := g.Wait(context.Background()); !errors.Is(err, st.err) || (err == nil) != (st.err == nil) {
				t.Fatalf("group %d: %v, reference %v", g.PRGI(), err, st.err)
			}
		default:
			if !st.out {
				t.Fatalf("group %d outstanding, reference completed it", g.PRGI())
			}
			outstanding++
		}
	}
	if s.Outstanding != outstanding || (s.Outstanding == 0) != (s.Credits == 0) {
		t.Fatalf("%d outstanding (%d credits), reference %d", s.Outstanding, s.Credits, outstanding)
	}
	if failed && !ev.space.PRIStopped() {
		t.Fatal("Response Failure without Stopped")
	}
}
