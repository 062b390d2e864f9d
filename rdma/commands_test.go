package rdma_test

import (
	"testing"
	"time"

	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

// lone is a node with nothing on the other end of its cable.
func lone(t *testing.T) *node {
	pa, _ := port.Pipe(16)
	return newNode(t, pa, 1)
}

// TestCommandErrors: every command refuses what the contract says it
// refuses, with the status it says, and the engine goes on.
func TestCommandErrors(t *testing.T) {
	n := lone(t)
	q := func(slots, log2 uint32) *rdmatest.Queue {
		return &rdmatest.Queue{Base: n.sq.Base, Slots: slots, Log2: log2}
	}
	spec := func(mod func(*rdmatest.QPSpec)) rdmatest.QPSpec {
		s := rdmatest.QPSpec{PD: pdn, SQ: n.sq, RQ: n.rq, SendCQ: sendCQ, RecvCQ: recvCQ, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	modify := func(st uint8, mask uint32, mod func(*rdmatest.Modify)) rdmatest.Cmd {
		m := rdmatest.Modify{Mask: mask | hw.RDMAQPAttrState, State: st, PathMTU: 3, MaxRdAtomic: 1, MaxDestRd: 1,
			DGID: rdmatest.GIDv4([4]byte{192, 0, 2, 9}), Access: hw.RDMAAccessRemoteRead}
		if mod != nil {
			mod(&m)
		}
		return rdmatest.ModifyQP(n.qpn, m)
	}
	rtr := uint32(hw.RDMAQPAttrAV | hw.RDMAQPAttrPathMTU | hw.RDMAQPAttrDestQPN | hw.RDMAQPAttrRQPSN | hw.RDMAQPAttrMaxDestRdAtomic | hw.RDMAQPAttrMinRNRTimer)
	wrapping := &rdmatest.Queue{Base: 0xffff_ffff_ffff_f000, Slots: 64, Log2: 6}
	// flagged is c with the command flags f.
	flagged := func(c rdmatest.Cmd, f uint8) rdmatest.Cmd {
		hw.RDMACmdFlags.Put(c[:], f)
		return c
	}
	odp := uint32(access | hw.RDMAAccessOnDemand)
	for _, tc := range []struct {
		name string
		cmd  rdmatest.Cmd
		want uint32
	}{
		{"unknown opcode", rdmatest.NewCmd(99, 0), hw.RDMACmdErrOpcode},
		{"opcode 0", rdmatest.NewCmd(0, 0), hw.RDMACmdErrOpcode},
		{"CQ handle out of range", rdmatest.CreateCQ(hw.RDMAMaxCQ, n.scq), hw.RDMACmdErrHandle},
		{"CQ in use", rdmatest.CreateCQ(sendCQ, n.scq), hw.RDMACmdErrHandle},
		{"CQ slots not a power of two", rdmatest.CreateCQ(5, q(3, 6)), hw.RDMACmdErrParam},
		{"CQ of one slot", rdmatest.CreateCQ(5, q(1, 6)), hw.RDMACmdErrParam},
		{"CQ slots over the limit", rdmatest.CreateCQ(5, q(hw.RDMAMaxCQE*2, 6)), hw.RDMACmdErrParam},
		{"CQ slot smaller than a completion", rdmatest.CreateCQ(5, q(64, 5)), hw.RDMACmdErrParam},
		{"CQ slot absurd", rdmatest.CreateCQ(5, q(64, 40)), hw.RDMACmdErrParam},
		{"CQ wrapping the address space", rdmatest.CreateCQ(5, wrapping), hw.RDMACmdErrParam},
		{"destroy unknown CQ", rdmatest.NewCmd(hw.RDMACmdDestroyCQ, 77), hw.RDMACmdErrHandle},
		{"destroy CQ with QPs", rdmatest.NewCmd(hw.RDMACmdDestroyCQ, sendCQ), hw.RDMACmdErrBusy},
		{"QPN 0", rdmatest.CreateQP(0, spec(nil)), hw.RDMACmdErrHandle},
		{"QPN 1", rdmatest.CreateQP(1, spec(nil)), hw.RDMACmdErrHandle},
		{"QPN past 24 bits", rdmatest.CreateQP(1<<24, spec(nil)), hw.RDMACmdErrHandle},
		{"QPN in use", rdmatest.CreateQP(n.qpn, spec(nil)), hw.RDMACmdErrHandle},
		{"QP on a missing CQ", rdmatest.CreateQP(50, spec(func(s *rdmatest.QPSpec) { s.RecvCQ = 200 })), hw.RDMACmdErrParam},
		{"QP on an out-of-range CQ", rdmatest.CreateQP(50, spec(func(s *rdmatest.QPSpec) { s.SendCQ = 1 << 31 })), hw.RDMACmdErrParam},
		{"QP without SGEs", rdmatest.CreateQP(50, spec(func(s *rdmatest.QPSpec) { s.MaxSendSGE = 0 })), hw.RDMACmdErrParam},
		{"QP with too many SGEs", rdmatest.CreateQP(50, spec(func(s *rdmatest.QPSpec) { s.MaxRecvSGE = hw.RDMAMaxSGE + 1 })), hw.RDMACmdErrParam},
		{"QP inline over the limit", rdmatest.CreateQP(50, spec(func(s *rdmatest.QPSpec) { s.MaxInline = hw.RDMAMaxInline + 1 })), hw.RDMACmdErrParam},
		{"SQ slots over the limit", rdmatest.CreateQP(50, spec(func(s *rdmatest.QPSpec) { s.SQ = q(hw.RDMAMaxQPWR*2, 9) })), hw.RDMACmdErrParam},
		{"SQ slot too small for its SGEs", rdmatest.CreateQP(50, spec(func(s *rdmatest.QPSpec) { s.SQ = q(64, 7) })), hw.RDMACmdErrParam},
		{"RQ wrapping", rdmatest.CreateQP(50, spec(func(s *rdmatest.QPSpec) { s.RQ = wrapping })), hw.RDMACmdErrParam},
		{"modify unknown QP", rdmatest.ModifyQP(51, rdmatest.Modify{Mask: hw.RDMAQPAttrState, State: hw.RDMAQPErr}), hw.RDMACmdErrHandle},
		{"RESET to RTS", modify(hw.RDMAQPRTS, 0, nil), hw.RDMACmdErrState},
		{"RESET to RTR", modify(hw.RDMAQPRTR, rtr, nil), hw.RDMACmdErrState},
		{"state past ERR", modify(9, 0, nil), hw.RDMACmdErrParam},
		{"to INIT", modify(hw.RDMAQPInit, hw.RDMAQPAttrAccessFlags, nil), hw.RDMACmdOK},
		{"INIT to RTR without the AV", modify(hw.RDMAQPRTR, rtr&^hw.RDMAQPAttrAV, nil), hw.RDMACmdErrState},
		{"RTR with an unset source GID", modify(hw.RDMAQPRTR, rtr, func(m *rdmatest.Modify) { m.SGIDIndex = 3 }), hw.RDMACmdErrParam},
		{"RTR with a GID index past the table", modify(hw.RDMAQPRTR, rtr, func(m *rdmatest.Modify) { m.SGIDIndex = 200 }), hw.RDMACmdErrParam},
		{"RTR to an IPv6 GID", modify(hw.RDMAQPRTR, rtr, func(m *rdmatest.Modify) { m.DGID = [16]byte{0xfe, 0x80, 15: 1} }), hw.RDMACmdErrParam},
		{"RTR with MTU 8192", modify(hw.RDMAQPRTR, rtr, func(m *rdmatest.Modify) { m.PathMTU = 6 }), hw.RDMACmdErrParam},
		{"RTR with more READs than the device keeps", modify(hw.RDMAQPRTR, rtr, func(m *rdmatest.Modify) { m.MaxDestRd = hw.RDMAMaxRdAtomic + 1 }), hw.RDMACmdErrParam},
		{"RTR with a wide PSN", modify(hw.RDMAQPRTR, rtr, func(m *rdmatest.Modify) { m.RQPSN = 1 << 24 }), hw.RDMACmdErrParam},
		{"to RTR", modify(hw.RDMAQPRTR, rtr, nil), hw.RDMACmdOK},
		{"query unknown QP", rdmatest.NewCmd(hw.RDMACmdQueryQP, 51), hw.RDMACmdErrHandle},
		{"destroy unknown QP", rdmatest.NewCmd(hw.RDMACmdDestroyQP, 51), hw.RDMACmdErrHandle},
		{"MR key 0", rdmatest.RegMR(0, pdn, bufVA, 4096, access, pasid), hw.RDMACmdErrHandle},
		{"MR key in use", rdmatest.RegMR(mrKey, pdn, bufVA, 4096, access, pasid), hw.RDMACmdErrHandle},
		{"MR of 0 bytes", rdmatest.RegMR(1, pdn, bufVA, 0, access, pasid), hw.RDMACmdErrParam},
		{"MR over the limit", rdmatest.RegMR(1, pdn, 0, hw.RDMAMaxMRSize+1, access, pasid), hw.RDMACmdErrParam},
		{"MR wrapping", rdmatest.RegMR(1, pdn, ^uint64(0)-10, 4096, access, pasid), hw.RDMACmdErrParam},
		{"MR with an undefined access bit", rdmatest.RegMR(1, pdn, bufVA, 4096, access|1<<5, pasid), hw.RDMACmdErrParam},
		{"MR remote atomic without local write", rdmatest.RegMR(1, pdn, bufVA, 4096, hw.RDMAAccessRemoteAtomic, pasid), hw.RDMACmdErrParam},
		{"MR remote write without local write", rdmatest.RegMR(1, pdn, bufVA, 4096, hw.RDMAAccessRemoteWrite, pasid), hw.RDMACmdErrParam},
		{"MR on demand", rdmatest.RegMR(1, pdn, bufVA, 4096, access|hw.RDMAAccessOnDemand, pasid), hw.RDMACmdOK},
		{"dereg unknown MR", rdmatest.NewCmd(hw.RDMACmdDeregMR, 2), hw.RDMACmdErrHandle},
		{"dereg", rdmatest.NewCmd(hw.RDMACmdDeregMR, 1), hw.RDMACmdOK},
		{"implicit MR with a VA", flagged(rdmatest.RegMR(1, pdn, bufVA, 0, odp, pasid), hw.RDMACmdFlagImplicit), hw.RDMACmdErrParam},
		{"implicit MR with a length", flagged(rdmatest.RegMR(1, pdn, 0, 4096, odp, pasid), hw.RDMACmdFlagImplicit), hw.RDMACmdErrParam},
		{"implicit MR of the whole space by length", flagged(rdmatest.RegMR(1, pdn, 0, ^uint64(0), odp, pasid), hw.RDMACmdFlagImplicit), hw.RDMACmdErrParam},
		{"implicit MR not on demand", flagged(rdmatest.RegMR(1, pdn, 0, 0, access, pasid), hw.RDMACmdFlagImplicit), hw.RDMACmdErrParam},
		{"implicit physical MR", flagged(rdmatest.RegMR(1, pdn, 0, 0, odp, pasid), hw.RDMACmdFlagImplicit|hw.RDMACmdFlagPhysical), hw.RDMACmdErrParam},
		{"whole space without FLAG_IMPLICIT", rdmatest.RegMR(1, pdn, 0, ^uint64(0), odp, pasid), hw.RDMACmdErrParam},
		{"implicit MR", flagged(rdmatest.RegMR(1, pdn, 0, 0, odp, pasid), hw.RDMACmdFlagImplicit), hw.RDMACmdOK},
		{"dereg implicit", rdmatest.NewCmd(hw.RDMACmdDeregMR, 1), hw.RDMACmdOK},
		{"GID index past the table", rdmatest.AddGID(hw.RDMAMaxGID, rdmatest.GIDv4(n.ip)), hw.RDMACmdErrHandle},
		{"delete an unset GID", rdmatest.NewCmd(hw.RDMACmdDelGID, 5), hw.RDMACmdErrHandle},
		{"IPv6 GID stored", rdmatest.AddGID(5, [16]byte{0xfe, 0x80, 15: 1}), hw.RDMACmdOK},
		{"and deleted", rdmatest.NewCmd(hw.RDMACmdDelGID, 5), hw.RDMACmdOK},
	} {
		st, _, err := n.d.Run(tc.cmd)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if st != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, st, tc.want)
		}
	}
	if code, _ := hw.Offsets(n.e).RegRead(hw.RegRDMAError); code != 0 {
		t.Errorf("RDMA_ERROR %d after command errors", code)
	}
	_, r, _ := n.d.Run(rdmatest.NewCmd(hw.RDMACmdQueryQP, n.qpn))
	if s := hw.RDMAQueryQPState.Get(r[:]); s != hw.RDMAQPRTR {
		t.Errorf("QP state %d after the table, want RTR", s)
	}
}

// TestLimits: the device's object limits answer RESOURCE.
func TestLimits(t *testing.T) {
	n := lone(t)
	spec := rdmatest.QPSpec{PD: pdn, SQ: n.sq, RQ: n.rq, SendCQ: sendCQ, RecvCQ: recvCQ, MaxSendSGE: 1, MaxRecvSGE: 1}
	for i := uint32(0); i < hw.RDMAMaxQP-1; i++ {
		n.must(t, rdmatest.CreateQP(0x1000+i, spec))
	}
	if st, _, _ := n.d.Run(rdmatest.CreateQP(0x5000, spec)); st != hw.RDMACmdErrResource {
		t.Errorf("QP %d: status %d, want RESOURCE", hw.RDMAMaxQP+1, st)
	}
	n.must(t, rdmatest.NewCmd(hw.RDMACmdDestroyQP, 0x1000))
	n.must(t, rdmatest.CreateQP(0x5000, spec))
	const have = 3 // newNode's regions
	for k := uint32(have); k < hw.RDMAMaxMR-1; k++ {
		n.d.Post(rdmatest.RegMR(0x10000+k, pdn, bufVA, 4096, access, pasid))
	}
	if st, _, _ := n.d.Run(rdmatest.RegMR(2, pdn, bufVA, 4096, access, pasid)); st != hw.RDMACmdOK {
		t.Errorf("MR %d: status %d, want OK", hw.RDMAMaxMR, st)
	}
	if st, _, _ := n.d.Run(rdmatest.RegMR(1, pdn, bufVA, 4096, access, pasid)); st != hw.RDMACmdErrResource {
		t.Errorf("MR %d: status %d, want RESOURCE", hw.RDMAMaxMR+1, st)
	}
}

// TestControlErrors: what the control queues refuse stops the engine's
// commands or events with RDMA_ERROR saying why; RESET clears it.
func TestControlErrors(t *testing.T) {
	t.Run("tail past the queue", func(t *testing.T) {
		n := lone(t)
		hw.Offsets(n.e).RegWrite(hw.RegCmdqTail, n.d.CmdqHead()+n.d.CmdqSize+1)
		waitErr(t, n, hw.RDMAErrBadCmdqTail)
		if code, _ := n.d.Error(); code != hw.RDMAErrBadCmdqTail {
			t.Errorf("status block error %d", code)
		}
	})
	t.Run("event queue overflow", func(t *testing.T) {
		n := lone(t)
		c := rdmatest.NewCmd(hw.RDMACmdQueryQP, n.qpn)
		hw.RDMACmdFlags.Put(c[:], hw.RDMACmdFlagEvent)
		for range n.d.EQSize + 1 {
			n.d.Run(c)
		}
		waitErr(t, n, hw.RDMAErrEQOverflow)
		// Commands still run; events stopped.
		if st, _, err := n.d.Run(c); err != nil || st != hw.RDMACmdOK {
			t.Errorf("command after the overflow: %d %v", st, err)
		}
		if tail := n.d.EQTail(); tail != n.d.EQSize {
			t.Errorf("eq_tail %d, want %d", tail, n.d.EQSize)
		}
	})
	t.Run("EQ head past the tail", func(t *testing.T) {
		n := lone(t)
		hw.Offsets(n.e).RegWrite(hw.RegEQHead, 1000)
		n.d.Post(rdmatest.NewCmd(hw.RDMACmdQueryQP, n.qpn)) // wakes the worker
		waitErr(t, n, hw.RDMAErrBadEQHead)
	})
	t.Run("misaligned status block", func(t *testing.T) {
		n := lone(t)
		if err := n.d.Reset(); err != nil {
			t.Fatal(err)
		}
		n.d.Status += 8
		n.d.Enable()
		waitErr(t, n, hw.RDMAErrBadStatusAddr)
		if v, _ := hw.Offsets(n.e).RegRead(hw.RegRDMACtrl); v&hw.RDMACtrlEnable != 0 {
			t.Error("enabled with a misaligned status block")
		}
	})
	t.Run("command queue outside guest memory", func(t *testing.T) {
		n := lone(t)
		n.d.Reset()
		n.d.Cmdq = 0x4000_0000_0000
		n.d.Enable()
		hw.Offsets(n.e).RegWrite(hw.RegCmdqTail, 1)
		waitErr(t, n, hw.RDMAErrBadCmdq)
		if err := n.d.Reset(); err != nil {
			t.Fatal(err)
		}
		if code, _ := hw.Offsets(n.e).RegRead(hw.RegRDMAError); code != 0 {
			t.Errorf("RDMA_ERROR %d after RESET", code)
		}
	})
}

func waitErr(t *testing.T, n *node, code uint32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if v, _ := hw.Offsets(n.e).RegRead(hw.RegRDMAError); v == code {
			return
		} else if v != 0 {
			t.Fatalf("RDMA_ERROR %d, want %d", v, code)
		}
		time.Sleep(50 * time.Microsecond)
	}
	t.Fatalf("RDMA_ERROR never became %d", code)
}

// TestResetDestroysEverything: RESET clears BUSY only once every object is
// gone, and the same handles can be created again afterwards.
func TestResetDestroysEverything(t *testing.T) {
	n := lone(t)
	if v, _ := hw.Offsets(n.e).RegRead(hw.RegRDMACtrl); v != hw.RDMACtrlEnable|hw.RDMACtrlBusy {
		t.Fatalf("RDMA_CTRL %#x while running", v)
	}
	n.g.Mem.FenceOnQuiesce(true)
	if err := n.d.Reset(); err != nil {
		t.Fatal(err)
	}
	if n.e.Busy() {
		t.Fatal("busy after RESET completed")
	}
	n.d.Enable()
	n.must(t, rdmatest.AddGID(0, rdmatest.GIDv4(n.ip)))
	n.must(t, rdmatest.RegMR(mrKey, pdn, bufVA, bufSize, access, pasid))
	n.must(t, rdmatest.CreateCQ(sendCQ, n.scq))
	n.must(t, rdmatest.CreateCQ(recvCQ, n.rcq))
	n.must(t, rdmatest.CreateQP(n.qpn, rdmatest.QPSpec{PD: pdn, SQ: n.sq, RQ: n.rq, SendCQ: sendCQ, RecvCQ: recvCQ, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64}))
	if late := n.g.Mem.LateWrites(); late != 0 {
		t.Errorf("%d late writes: %v", late, n.g.Mem.LateLog())
	}
}

// TestBusMaster: without bus mastering nothing runs (the command waits),
// and it runs once the bit is back.
func TestBusMaster(t *testing.T) {
	n := lone(t)
	n.e.SetBusMaster(false)
	head := n.d.CmdqHead()
	i := n.d.Post(rdmatest.NewCmd(hw.RDMACmdQueryQP, n.qpn))
	time.Sleep(20 * time.Millisecond)
	if n.d.CmdqHead() != head {
		t.Fatal("a command ran without bus mastering")
	}
	n.e.SetBusMaster(true)
	deadline := time.Now().Add(5 * time.Second)
	for int32(n.d.CmdqHead()-i) <= 0 {
		if time.Now().After(deadline) {
			t.Fatal("the command never ran")
		}
		time.Sleep(50 * time.Microsecond)
	}
}
