package main

import (
	"bytes"
	"testing"

	"github.com/npfnic/npfnic/internal/testutil"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestABIMatchesKernel checks the uverbs commands, the rxe driver data,
// the extra queue entry fields and the verbs values of abi.go against the
// guest kernel's headers, as vdevice/hw's TestRxeABIMatchesKernel checks
// the rxe queues. Skipped when the images were never built, unless
// NPFNIC_REQUIRE_TOOLS=1.
func TestABIMatchesKernel(t *testing.T) {
	testutil.CheckKernelABI(t, testutil.KernelABI{
		Headers:  []string{"uapi/rdma/ib_user_verbs.h", "uapi/rdma/rdma_user_rxe.h", "uapi/rdma/ib_user_ioctl_verbs.h"},
		EnumFile: "rdma/ib_verbs.h", Enums: []string{"ib_qp_state", "ib_qp_attr_mask", "ib_mtu", "ib_event_type"},
		Layouts: abiLayouts, Values: abiValues,
		MinFields: 70, MinValues: 40,
	})
}

// TestLayouts: every field lies inside its structure, in offset order,
// without overlap; a field the tool writes into a queue entry is not one
// of vdevice/hw's (those are defined once, there).
func TestLayouts(t *testing.T) {
	for _, l := range abiLayouts {
		end := 0
		for _, f := range l.Fields {
			size := f.Size * max(f.Count, 1)
			if f.Offset < end || f.Offset+size > l.Size {
				t.Errorf("%s.%s [%d,+%d) overlaps the field before (ends at %d) or leaves the %d bytes", l.Struct, f.Name, f.Offset, size, end, l.Size)
			}
			end = f.Offset + size
		}
	}
	for _, extra := range []struct {
		tool *hw.ABILayout
		hw   *hw.ABILayout
	}{{&rxeSendExtra, &hw.RxeSendWQE}, {&rxeRecvExtra, &hw.RxeRecvWQE}} {
		for _, f := range extra.tool.Fields {
			for _, g := range extra.hw.Fields {
				if f.Offset < g.Offset+max(g.Size, 1) && g.Offset < f.Offset+f.Size && g.Count >= 0 {
					t.Errorf("%s.%s overlaps vdevice/hw's %s", extra.tool.Struct, f.Name, g.Name)
				}
			}
		}
	}
}

func TestBuildCommand(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cmd      uint32
		req      int
		resp     uint64
		respLen  int
		inWords  uint16
		outWords uint16
		bad      bool
	}{
		{name: "no response", cmd: cmdDeregMR, req: deregMR.Size, inWords: 3},
		{name: "with response", cmd: cmdAllocPD, req: allocPD.Size, resp: 0x7f00_1234_5678, respLen: allocPDResp.Size, inWords: 4, outWords: 1},
		{name: "driver data in the response", cmd: cmdCreateQP, req: createQP.Size, resp: 0x1000, respLen: createQPResp.Size + rxeQPResp.Size, inWords: 16, outWords: 16},
		{name: "request not whole words", cmd: cmdRegMR, req: 6, bad: true},
		{name: "response not whole words", cmd: cmdRegMR, req: 8, resp: 0x1000, respLen: 6, bad: true},
		{name: "response too long", cmd: cmdRegMR, req: 8, resp: 0x1000, respLen: 4 << 16, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := bytes.Repeat([]byte{0xee}, tc.req)
			b, err := buildCommand(tc.cmd, req, tc.resp, tc.respLen)
			if tc.bad {
				if err == nil {
					t.Fatalf("built % x", b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != cmdHdr.Size+tc.req || hdrCommand.Get(b) != tc.cmd || hdrInWords.Get(b) != tc.inWords || hdrOutWords.Get(b) != tc.outWords {
				t.Fatalf("header % x: command %d, in %d, out %d words", b[:8], hdrCommand.Get(b), hdrInWords.Get(b), hdrOutWords.Get(b))
			}
			body := b[cmdHdr.Size:]
			if tc.respLen > 0 && respPtr.Get(body) != tc.resp {
				t.Errorf("response pointer %#x, want %#x", respPtr.Get(body), tc.resp)
			}
			from := 0
			if tc.respLen > 0 {
				from = 8
			}
			if !bytes.Equal(body[from:], req[from:]) {
				t.Errorf("request body changed: % x", body)
			}
		})
	}
}

// TestRequests: each request builder fills its structure's fields (and
// only those bytes) from its arguments.
func TestRequests(t *testing.T) {
	type want struct {
		f hw.Field
		v uint64
	}
	get := func(b []byte, f hw.Field) uint64 {
		var v uint64
		for i := f.Size - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[f.Offset+i])
		}
		return v
	}
	steps := connectSteps(endpoint{qpn: 17, psn: 0x123456}, 1, endpoint{qpn: 0x21, psn: 0xabcdef, gid: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 81, 15: 2}})
	ud := udSteps(0x1234_5678, 0x654321)
	for _, tc := range []struct {
		name   string
		layout *hw.ABILayout
		req    []byte
		want   []want
	}{
		{"reg_mr", &regMR, reqRegMR(3, 0x7f00_0000_0200, 16384, 7), []want{
			{regMRStart.Field, 0x7f00_0000_0200}, {regMRLength.Field, 16384}, {regMRHCAVA.Field, 0x7f00_0000_0200},
			{regMRPD.Field, 3}, {regMRAccess.Field, 7}}},
		{"create_cq", &createCQ, reqCreateCQ(0x51, 64), []want{
			{createCQUser.Field, 0x51}, {createCQCQE.Field, 64}, {createCQVector.Field, 0}, {createCQChannel.Field, 0xffff_ffff}}},
		{"create_qp", &createQP, reqCreateQP(0x53, 4, 5, 6, qpCaps{maxSendWR: 8, maxRecvWR: 9, maxSendSGE: 2, maxRecvSGE: 3, maxInline: 32}, qpKind{typ: qptRC}), []want{
			{createQPUser.Field, 0x53}, {createQPPD.Field, 4}, {createQPSendCQ.Field, 5}, {createQPRecvCQ.Field, 6},
			{createQPSRQ.Field, 0}, {createQPMaxSendWR.Field, 8}, {createQPMaxRecvWR.Field, 9}, {createQPMaxSendSGE.Field, 2},
			{createQPMaxRecvSGE.Field, 3}, {createQPMaxInline.Field, 32}, {createQPSigAll.Field, 0}, {createQPType.Field, qptRC},
			{createQPIsSRQ.Field, 0}}},
		{"create_qp UD", &createQP, reqCreateQP(0x54, 4, 5, 5, qpCaps{maxSendWR: 8, maxRecvWR: 4, maxSendSGE: 2, maxRecvSGE: 1}, qpKind{typ: qptUD}), []want{
			{createQPUser.Field, 0x54}, {createQPPD.Field, 4}, {createQPSendCQ.Field, 5}, {createQPRecvCQ.Field, 5},
			{createQPSRQ.Field, 0}, {createQPMaxSendWR.Field, 8}, {createQPMaxRecvWR.Field, 4}, {createQPMaxSendSGE.Field, 2},
			{createQPMaxRecvSGE.Field, 1}, {createQPMaxInline.Field, 0}, {createQPType.Field, qptUD}, {createQPIsSRQ.Field, 0}}},
		{"create_qp on an SRQ", &createQP, reqCreateQP(0x55, 4, 5, 6, qpCaps{maxSendWR: 8, maxSendSGE: 2}, qpKind{typ: qptRC, srq: &srq{handle: 7}}), []want{
			{createQPUser.Field, 0x55}, {createQPPD.Field, 4}, {createQPSendCQ.Field, 5}, {createQPRecvCQ.Field, 6},
			{createQPSRQ.Field, 7}, {createQPMaxSendWR.Field, 8}, {createQPMaxRecvWR.Field, 0}, {createQPMaxSendSGE.Field, 2},
			{createQPMaxRecvSGE.Field, 0}, {createQPType.Field, qptRC}, {createQPIsSRQ.Field, 1}}},
		{"create_srq", &createSRQ, reqCreateSRQ(0x58, 4, 8, 2), []want{
			{createSRQUser.Field, 0x58}, {createSRQPD.Field, 4}, {createSRQMaxWR.Field, 8}, {createSRQMaxSGE.Field, 2},
			{createSRQLimit.Field, 0}}},
		{"post_send doorbell", &postSend, reqPostSend(9), []want{
			{postSendHandle.Field, 9}, {postSendWRCount.Field, 0}, {postSendSGECount.Field, 0}, {postSendWQESize.Field, 56}}},
		{"modify_qp to INIT", &modifyQP, reqModifyQP(2, steps[0]), []want{
			{modifyHandle.Field, 2}, {modifyMask.Field, hw.RDMAQPAttrState | hw.RDMAQPAttrPKeyIndex | hw.RDMAQPAttrPort | hw.RDMAQPAttrAccessFlags}, {modifyState.Field, qpsInit},
			{modifyPort.Field, 1}, {modifyPKeyIndex.Field, 0}, {modifyAccess.Field, accessLocalWrite | accessRemoteWrite | accessRemoteRead | accessRemoteAtomic},
			{modifyDestIsGlobal.Field, 0}}},
		{"modify_qp to RTR", &modifyQP, reqModifyQP(2, steps[1]), []want{
			{modifyHandle.Field, 2}, {modifyMask.Field, hw.RDMAQPAttrState | hw.RDMAQPAttrAV | hw.RDMAQPAttrPathMTU | hw.RDMAQPAttrDestQPN | hw.RDMAQPAttrRQPSN | hw.RDMAQPAttrMaxDestRdAtomic | hw.RDMAQPAttrMinRNRTimer},
			{modifyState.Field, qpsRTR}, {modifyPathMTU.Field, mtu1024}, {modifyDestQPN.Field, 0x21}, {modifyRQPSN.Field, 0xabcdef},
			{modifyMaxDestRd.Field, 1}, {modifyMinRNRTimer.Field, 12}, {modifyDestIsGlobal.Field, 1}, {modifyDestSGIDIndex.Field, 1},
			{modifyDestHopLimit.Field, 1}, {modifyDestPort.Field, 1}}},
		{"modify_qp to RTS", &modifyQP, reqModifyQP(2, steps[2]), []want{
			{modifyHandle.Field, 2}, {modifyMask.Field, hw.RDMAQPAttrState | hw.RDMAQPAttrTimeout | hw.RDMAQPAttrRetryCnt | hw.RDMAQPAttrRNRRetry | hw.RDMAQPAttrSQPSN | hw.RDMAQPAttrMaxQPRdAtomic},
			{modifyState.Field, qpsRTS}, {modifyTimeout.Field, 14}, {modifyRetryCnt.Field, 7}, {modifyRNRRetry.Field, 7},
			{modifySQPSN.Field, 0x123456}, {modifyMaxRdAtomic.Field, 1}}},
		{"modify_qp UD to INIT", &modifyQP, reqModifyQP(3, ud[0]), []want{
			{modifyHandle.Field, 3}, {modifyMask.Field, hw.RDMAQPAttrState | hw.RDMAQPAttrPKeyIndex | hw.RDMAQPAttrPort | hw.RDMAQPAttrQKey},
			{modifyState.Field, qpsInit}, {modifyPort.Field, 1}, {modifyPKeyIndex.Field, 0}, {modifyQKey.Field, 0x1234_5678},
			{modifyAccess.Field, 0}, {modifyDestIsGlobal.Field, 0}}},
		{"modify_qp UD to RTR", &modifyQP, reqModifyQP(3, ud[1]), []want{
			{modifyHandle.Field, 3}, {modifyMask.Field, hw.RDMAQPAttrState}, {modifyState.Field, qpsRTR}, {modifyQKey.Field, 0},
			{modifyDestIsGlobal.Field, 0}}},
		{"modify_qp UD to RTS", &modifyQP, reqModifyQP(3, ud[2]), []want{
			{modifyHandle.Field, 3}, {modifyMask.Field, hw.RDMAQPAttrState | hw.RDMAQPAttrSQPSN}, {modifyState.Field, qpsRTS},
			{modifySQPSN.Field, 0x654321}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.req) != tc.layout.Size {
				t.Fatalf("%d bytes, %s has %d", len(tc.req), tc.layout.Struct, tc.layout.Size)
			}
			covered := make([]bool, len(tc.req))
			for _, w := range tc.want {
				if got := get(tc.req, w.f); got != w.v {
					t.Errorf("%s = %#x, want %#x", w.f.Name, got, w.v)
				}
				for i := range w.f.Size {
					covered[w.f.Offset+i] = true
				}
			}
			if tc.name == "modify_qp to RTR" {
				if g := tc.req[modifyDestDGID.Offset : modifyDestDGID.Offset+16]; !bytes.Equal(g, steps[1].dgid[:]) {
					t.Errorf("dgid % x", g)
				}
				for i := range 16 {
					covered[modifyDestDGID.Offset+i] = true
				}
			}
			for i, c := range covered {
				if !c && tc.req[i] != 0 {
					t.Errorf("byte %d is %#x, outside the fields set", i, tc.req[i])
				}
			}
		})
	}
}
