package rdma

import (
	"testing"

	"github.com/npfnic/npfnic/ats"
	"github.com/npfnic/npfnic/internal/fuzzseed"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/pkthdr"
)

// go's fuzz workers die silently; keep what the runtime says (ci/fuzz.sh).
func init() { fuzzseed.KeepCrashOutput() }

// fuzzRig is one engine without its worker goroutine, over 1 MiB of guest
// memory, shared by every input of a fuzz process: the target drives the
// worker's passes itself, so an input runs synchronously and a hang is a
// hang of that input.
type fuzzRig struct {
	mem *guestmem.Memory
	ram []byte
	e   *Engine
}

const (
	fuzzBase   = 0x10_0000
	fuzzSize   = 1 << 20
	fuzzStatus = fuzzBase
	fuzzCmdq   = fuzzBase + 0x1000 // 64 entries
	fuzzEQ     = fuzzBase + 0x2000 // 64 entries
	fuzzRings  = fuzzBase + 0x4000 // where seeds put rxe rings
)

func newFuzzRig(t testing.TB) *fuzzRig {
	r := &fuzzRig{mem: guestmem.New(), ram: make([]byte, fuzzSize)}
	if err := r.mem.MapHost(fuzzBase, r.ram, guestmem.ProtRead|guestmem.ProtWrite, nil); err != nil {
		t.Fatal(err)
	}
	x, err := ats.New(ats.Config{Mem: r.mem})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Close)
	if r.e, err = newEngine(Config{Mem: r.mem, Xlat: x}); err != nil {
		t.Fatal(err)
	}
	return r
}

// run enables the engine, runs the commands of in (64 bytes each, at most
// one queue's worth) through one worker pass, checks what the contract
// promises, and resets.
func (r *fuzzRig) run(t *testing.T, in []byte) {
	e := r.e
	clear(r.ram[:fuzzRings-fuzzBase])
	w := func(off, v uint32) { hw.Offsets(e).RegWrite(off, v) }
	w(hw.RegRDMAStatusLo, fuzzStatus)
	w(hw.RegCmdqBaseLo, fuzzCmdq)
	w(hw.RegCmdqSize, 64)
	w(hw.RegEQBaseLo, fuzzEQ)
	w(hw.RegEQSize, 64)
	w(hw.RegRDMACtrl, hw.RDMACtrlEnable)
	n := min(len(in)/hw.RDMACmdSize, 64)
	for i := range n {
		copy(r.ram[fuzzCmdq-fuzzBase+i*hw.RDMACmdSize:], in[i*hw.RDMACmdSize:(i+1)*hw.RDMACmdSize])
	}
	w(hw.RegCmdqTail, uint32(n))
	// Doorbells and arms for whatever the commands created.
	for i := range n {
		h := hw.RDMACmdHandle.Get(in[i*hw.RDMACmdSize:])
		w(hw.RegSQDoorbell, h)
		w(hw.RegCQArm, h)
	}
	w(hw.RegEQArm, 1)
	e.w.service()
	e.w.service()
	if head := le.Uint32(r.ram[fuzzStatus-fuzzBase:]); head != uint32(n) {
		if code, _ := hw.Offsets(e).RegRead(hw.RegRDMAError); code == 0 {
			t.Fatalf("cmdq_head %d after %d commands, no error", head, n)
		}
	}
	for i := range n {
		st := hw.RDMACmdStatus.Get(r.ram[fuzzCmdq-fuzzBase+i*hw.RDMACmdSize:])
		if st > hw.RDMACmdErrResource {
			t.Fatalf("command %d: status %d", i, st)
		}
	}
	w(hw.RegRDMACtrl, hw.RDMACtrlReset)
	e.w.service()
	if e.Busy() {
		t.Fatal("busy after RESET with no DMA in flight")
	}
}

// fuzzSeeds are valid command sequences: a CQ, a QP over rings in the
// rig's memory brought to RTS, an MR, GIDs, queries (QUERY_QP,
// QUERY_STATS) and teardown.
func fuzzSeeds() [][]rdmatest.Cmd {
	cq := &rdmatest.Queue{Base: fuzzRings, Slots: 16, Log2: 6}
	sq := &rdmatest.Queue{Base: fuzzRings + 0x1000, Slots: 16, Log2: 9}
	rq := &rdmatest.Queue{Base: fuzzRings + 0x4000, Slots: 16, Log2: 7}
	spec := rdmatest.QPSpec{PD: 1, SQ: sq, RQ: rq, SendCQ: 0, RecvCQ: 0, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64}
	gid := rdmatest.GIDv4([4]byte{10, 0, 0, 1})
	implicit := rdmatest.RegMR(6, 1, 0, 0, hw.RDMAAccessLocalWrite|hw.RDMAAccessOnDemand, 0)
	hw.RDMACmdFlags.Put(implicit[:], hw.RDMACmdFlagImplicit)
	stats := rdmatest.NewCmd(hw.RDMACmdQueryStats, 0)
	hw.RDMAQueryStatsBuf.Put(stats[:], fuzzRings+0x8000)
	hw.RDMAQueryStatsCount.Put(stats[:], uint32(len(hw.RDMACounters)))
	up := []rdmatest.Cmd{
		rdmatest.AddGID(0, gid),
		rdmatest.CreateCQ(0, cq),
		rdmatest.CreateQP(2, spec),
		rdmatest.ModifyQP(2, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrAccessFlags, State: hw.RDMAQPInit}),
		rdmatest.ModifyQP(2, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrAV | hw.RDMAQPAttrPathMTU | hw.RDMAQPAttrDestQPN |
			hw.RDMAQPAttrRQPSN | hw.RDMAQPAttrMaxDestRdAtomic | hw.RDMAQPAttrMinRNRTimer, State: hw.RDMAQPRTR, PathMTU: 3, DestQPN: 3, DGID: gid}),
		rdmatest.ModifyQP(2, rdmatest.Modify{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrSQPSN | hw.RDMAQPAttrTimeout | hw.RDMAQPAttrRetryCnt |
			hw.RDMAQPAttrRNRRetry | hw.RDMAQPAttrMaxQPRdAtomic, State: hw.RDMAQPRTS, Timeout: 14}),
		rdmatest.RegMR(5, 1, 0x1000, 0x10000, hw.RDMAAccessLocalWrite, 0),
		implicit,
		rdmatest.NewCmd(hw.RDMACmdQueryQP, 2),
		stats,
	}
	down := append(append([]rdmatest.Cmd(nil), up...),
		rdmatest.ModifyQP(2, rdmatest.Modify{Mask: hw.RDMAQPAttrState, State: hw.RDMAQPErr}),
		rdmatest.ModifyQP(2, rdmatest.Modify{Mask: hw.RDMAQPAttrState, State: hw.RDMAQPReset}),
		rdmatest.NewCmd(hw.RDMACmdDestroyQP, 2), rdmatest.NewCmd(hw.RDMACmdDeregMR, 5), rdmatest.NewCmd(hw.RDMACmdDeregMR, 6),
		rdmatest.NewCmd(hw.RDMACmdDestroyCQ, 0), rdmatest.NewCmd(hw.RDMACmdDelGID, 0))
	flagged := rdmatest.NewCmd(hw.RDMACmdQueryQP, 2)
	hw.RDMACmdFlags.Put(flagged[:], hw.RDMACmdFlagEvent)
	return [][]rdmatest.Cmd{up, down, append(up, flagged, flagged)}
}

// FuzzRDMACommands runs arbitrary command queue contents through the
// engine: whatever the driver writes, the engine does not panic or hang,
// runs every command (or reports a queue error), writes only defined
// statuses, and quiesces on RESET.
func FuzzRDMACommands(f *testing.F) {
	for _, seq := range fuzzSeeds() {
		var b []byte
		for _, c := range seq {
			b = append(b, c[:]...)
		}
		f.Add(b)
	}
	rig := newFuzzRig(f) // one per worker process, closed with f
	f.Fuzz(func(t *testing.T, in []byte) { rig.run(t, in) })
}

// TestFuzzSeedsRunClean: the seeds themselves succeed command by command,
// so the fuzzer starts from deep states.
func TestFuzzSeedsRunClean(t *testing.T) {
	r := newFuzzRig(t)
	for i, seq := range fuzzSeeds() {
		var b []byte
		for _, c := range seq {
			b = append(b, c[:]...)
		}
		r.run(t, b)
		for j := range seq {
			if st := hw.RDMACmdStatus.Get(r.ram[fuzzCmdq-fuzzBase+j*hw.RDMACmdSize:]); st != hw.RDMACmdOK {
				t.Errorf("seed %d command %d: status %d", i, j, st)
			}
		}
	}
}

// FuzzClaim: the port's RoCEv2 claim takes exactly the IPv4 UDP datagrams
// to port 4791 addressed to a GID of the table, whatever the frame holds,
// without panicking.
func FuzzClaim(f *testing.F) {
	roce := make([]byte, 14+20+8+12)
	copy(roce[12:], []byte{0x08, 0x00, 0x45})
	roce[14+9] = 17 // UDP
	copy(roce[14+16:], []byte{10, 0, 0, 1})
	roce[14+20+2], roce[14+20+3] = 0x12, 0xb7 // 4791
	f.Add(roce)
	f.Add(roce[:30])
	var e *Engine
	f.Fuzz(func(t *testing.T, frame []byte) {
		if e == nil {
			e = &Engine{}
			e.gids.Store(&[][4]byte{{10, 0, 0, 1}, {192, 0, 2, 1}})
		}
		got := e.Claim(frame)
		var h pkthdr.Headers
		want := h.Parse(frame) == nil && h.IPVersion == 4 && h.IsUDPDstPort(pkthdr.UDPPortRoCEv2)
		if want {
			dst := [4]byte(h.Addrs(frame)[4:8])
			want = dst == [4]byte{10, 0, 0, 1} || dst == [4]byte{192, 0, 2, 1}
		}
		if got != want {
			t.Fatalf("Claim = %v, want %v", got, want)
		}
	})
}
