package npfnic

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/npfnic/npfnic/ats/atstest"
	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/pri/pritest"
	"github.com/npfnic/npfnic/rdma/rdmatest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/pkthdr"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// syncBuffer is a pcap file in memory.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// rdmaNIC is a NIC whose RDMA block a driver model brings up through BAR0,
// with one RC QP and a registered buffer: a process's pages mapped in
// PASID 0's page tables, ATS and PASID enabled in config space as the
// driver does.
type rdmaNIC struct {
	n        *NIC
	irq      *fakeIRQ
	g        *atstest.Guest
	d        *rdmatest.Driver
	ip       [4]byte
	as       *atstest.AddressSpace // PASID 0's page tables
	buf      *rdmatest.Buffer
	sq, rq   *rdmatest.Queue
	scq, rcq *rdmatest.Queue
}

const (
	nicQPN = 0x11
	nicKey = 0x77
	nicVA  = 0x7000_0000
)

func newRDMANIC(t *testing.T, wire port.Port, last byte) *rdmaNIC {
	t.Helper()
	r := &rdmaNIC{g: atstest.NewGuest(t, 8<<20), ip: [4]byte{10, 1, 0, last}}
	n, err := New(Options{Mem: r.g.Mem, Wire: wire, MACSeed: string(rune('a' + last))})
	if err != nil {
		t.Fatal(err)
	}
	r.n = n
	r.irq = &fakeIRQ{pending: map[int]bool{}}
	n.Attach(vfiouser.Host{IRQ: r.irq})
	t.Cleanup(func() { n.Close() })
	n.RegionWrite(vfiouser.RegionConfig, pcie.OffCommand, []byte{0x06, 0})
	lay := n.cfg.Layout()
	n.RegionWrite(vfiouser.RegionConfig, uint64(lay.ATS+6), binary.LittleEndian.AppendUint16(nil, pcie.ATSCtrlEnable))
	n.RegionWrite(vfiouser.RegionConfig, uint64(lay.PASID+6), binary.LittleEndian.AppendUint16(nil, pcie.PASIDCtrlEnable))
	r.as = r.g.NewAddressSpace()
	r.g.NewDriver(bar{t, n}, 1, 16).Table.Set(0, r.as)
	r.buf = rdmatest.MapBuffer(r.g, r.as, nicVA, 1<<16)
	r.d = rdmatest.NewDriver(r.g, bar{t, n}, 32, 32)
	r.d.Enable()
	must := func(c rdmatest.Cmd) {
		t.Helper()
		if err := r.d.Must(c); err != nil {
			t.Fatal(err)
		}
	}
	must(rdmatest.AddGID(0, rdmatest.GIDv4(r.ip)))
	must(rdmatest.RegMR(nicKey, 1, nicVA, 1<<16, hw.RDMAAccessLocalWrite|hw.RDMAAccessRemoteWrite|hw.RDMAAccessRemoteRead, 0))
	r.scq, r.rcq = rdmatest.NewQueue(r.g, 64, 6), rdmatest.NewQueue(r.g, 64, 6)
	must(rdmatest.CreateCQ(0, r.scq))
	must(rdmatest.CreateCQ(1, r.rcq))
	r.sq, r.rq = rdmatest.NewQueue(r.g, 16, 9), rdmatest.NewQueue(r.g, 16, 7)
	must(rdmatest.CreateQP(nicQPN, rdmatest.QPSpec{PD: 1, SQ: r.sq, RQ: r.rq, SendCQ: 0, RecvCQ: 1, MaxSendSGE: 2, MaxRecvSGE: 2}))
	return r
}

func (r *rdmaNIC) connect(t *testing.T, peer *rdmaNIC) {
	t.Helper()
	mac := [6]byte(peer.n.MAC())
	for _, m := range []rdmatest.Modify{
		{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrAccessFlags | hw.RDMAQPAttrPKeyIndex | hw.RDMAQPAttrPort, State: hw.RDMAQPInit, // as the core passes them
			Access: hw.RDMAAccessRemoteWrite | hw.RDMAAccessRemoteRead},
		{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrAV | hw.RDMAQPAttrPathMTU | hw.RDMAQPAttrDestQPN | hw.RDMAQPAttrRQPSN |
			hw.RDMAQPAttrMaxDestRdAtomic | hw.RDMAQPAttrMinRNRTimer, State: hw.RDMAQPRTR, PathMTU: 5, DestQPN: nicQPN,
			MaxDestRd: 1, MinRNRTimer: 1, DGID: rdmatest.GIDv4(peer.ip), DMAC: mac},
		{Mask: hw.RDMAQPAttrState | hw.RDMAQPAttrSQPSN | hw.RDMAQPAttrTimeout | hw.RDMAQPAttrRetryCnt | hw.RDMAQPAttrRNRRetry |
			hw.RDMAQPAttrMaxQPRdAtomic, State: hw.RDMAQPRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
	} {
		if err := r.d.Must(rdmatest.ModifyQP(nicQPN, m)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRDMAThroughBAR0: two NICs cabled by a pipe that records a pcap, each
// driven through BAR0: a SEND and an RDMA WRITE cross, byte for byte, the
// completions land in the rxe CQs, the event vector fires when armed, and
// the pcap holds the RC frames in both directions (the Mux records every
// engine). The RoCEv2 frames went to the RDMA engine, not to Ethernet.
func TestRDMAThroughBAR0(t *testing.T) {
	pa, pb := port.Pipe(64)
	var capture syncBuffer
	rec, err := port.NewPcap(pa, &capture)
	if err != nil {
		t.Fatal(err)
	}
	a, b := newRDMANIC(t, rec, 1), newRDMANIC(t, pb, 2)
	if f := rd32(t, a.n, hw.RegBAR, hw.RegFeatures); f&hw.FeatRDMA == 0 {
		t.Fatalf("FEATURES %#x without RDMA", f)
	}
	a.connect(t, b)
	b.connect(t, a)

	data := bytes.Repeat([]byte("npfnic rc "), 1000) // 10000 bytes: 3 packets at MTU 4096
	a.buf.Write(0, data)
	if err := b.rq.Produce(rdmatest.Recv{ID: 5, SGL: []rdmatest.SGE{{Addr: nicVA, Length: 1 << 14, LKey: nicKey}}}.Encode); err != nil {
		t.Fatal(err)
	}
	b.d.Regs.RegWrite(hw.RegEQArm, 1)
	b.d.Regs.RegWrite(hw.RegCQArm, 1)
	sgl := []rdmatest.SGE{{Addr: nicVA, Length: uint32(len(data)), LKey: nicKey}}
	for _, s := range []rdmatest.Send{
		{ID: 1, Opcode: hw.IBVWRSend, Flags: hw.IBVSendSignaled, AutoLength: true, NumSGE: -1, SGL: sgl},
		{ID: 2, Opcode: hw.IBVWRRDMAWrite, Flags: hw.IBVSendSignaled, AutoLength: true, NumSGE: -1, SGL: sgl,
			RemoteAddr: nicVA + 0x8000, RKey: nicKey},
	} {
		if err := a.sq.Produce(s.Encode); err != nil {
			t.Fatal(err)
		}
	}
	a.d.Regs.RegWrite(hw.RegSQDoorbell, nicQPN)
	wait := func(q *rdmatest.Queue, k int) []ibrc.WCStatus {
		var st []ibrc.WCStatus
		deadline := time.Now().Add(5 * time.Second)
		for len(st) < k && time.Now().Before(deadline) {
			if c, ok := q.Poll(); ok {
				st = append(st, c.Status)
			}
		}
		return st
	}
	if st := wait(a.scq, 2); len(st) != 2 || st[0] != ibrc.WCSuccess || st[1] != ibrc.WCSuccess {
		t.Fatalf("sender completions %v", st)
	}
	if st := wait(b.rcq, 1); len(st) != 1 || st[0] != ibrc.WCSuccess {
		t.Fatalf("receiver completions %v", st)
	}
	if !bytes.Equal(b.buf.Read(0, len(data)), data) || !bytes.Equal(b.buf.Read(0x8000, len(data)), data) {
		t.Fatal("data differs")
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.irq.count(hw.RDMAVector) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("RDMA vector fired %d times, want 1", b.irq.count(hw.RDMAVector))
		}
		time.Sleep(100 * time.Microsecond)
	}
	if ev := b.d.Events(); len(ev) != 1 || ev[0].Type != hw.RDMAEventCQComp || ev[0].Handle != 1 {
		t.Errorf("events %+v, want one CQ_COMP on CQ 1", ev)
	}
	if s := b.n.Ethernet().Stats(); s.RxDropsDisabled+s.RxDropsNoQueue != 0 {
		t.Errorf("RoCEv2 frames reached Ethernet: %+v", s)
	}

	// The pcap: RC frames both ways, every one UDP to 4791.
	a.n.Close()
	capture.mu.Lock()
	defer capture.mu.Unlock()
	pr, err := pcapgo.NewReader(bytes.NewReader(capture.b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var out, in int
	for {
		frame, _, err := pr.ReadPacketData()
		if err != nil {
			break
		}
		var h pkthdr.Headers
		if h.Parse(frame) != nil || !h.IsUDPDstPort(pkthdr.UDPPortRoCEv2) {
			t.Errorf("a frame in the pcap is not RoCEv2: % x", frame[:min(len(frame), 48)])
			continue
		}
		switch [4]byte(h.Addrs(frame)[0:4]) {
		case a.ip:
			out++
		case b.ip:
			in++
		}
	}
	if out < 6 || in < 2 {
		t.Errorf("pcap: %d frames from a, %d to it; want the 6 data packets and their ACKs", out, in)
	}
}

// TestRDMAPageRequestThroughPRI: the NIC's memory regions fault through
// the function's own PRI (on-demand paging): an RDMA WRITE into a page the
// PASID's page tables lack is RNR NAKed and becomes a page request in the
// page request queue the driver set up through BAR0 (RC_RECV, W, the QPN);
// once the driver maps the page and answers, the WRITE lands, and
// QUERY_STATS through the command queue counts the fault.
func TestRDMAPageRequestThroughPRI(t *testing.T) {
	pa, pb := port.Pipe(64)
	a, b := newRDMANIC(t, pa, 1), newRDMANIC(t, pb, 2)
	if f := rd32(t, b.n, hw.RegBAR, hw.RegFeatures); f&hw.FeatRDMAODP == 0 {
		t.Fatalf("FEATURES %#x without RDMA_ODP", f)
	}
	lay := b.n.cfg.Layout()
	b.n.RegionWrite(vfiouser.RegionConfig, uint64(lay.PRI+0x0c), binary.LittleEndian.AppendUint32(nil, 64))
	b.n.RegionWrite(vfiouser.RegionConfig, uint64(lay.PRI+4), binary.LittleEndian.AppendUint16(nil, pcie.PRICtrlEnable))
	prq := pritest.NewDriver(b.g, bar{t, b.n}, 64, 64)
	a.connect(t, b)
	b.connect(t, a)

	const off = 0x3000
	va := uint64(nicVA + off)
	pte := b.as.Unmap(va)
	b.n.ATS().Flush()
	data := bytes.Repeat([]byte("odp "), 500)
	a.buf.Write(0, data)
	w := rdmatest.Send{ID: 1, Opcode: hw.IBVWRRDMAWrite, Flags: hw.IBVSendSignaled, AutoLength: true, NumSGE: -1,
		SGL: []rdmatest.SGE{{Addr: nicVA, Length: uint32(len(data)), LKey: nicKey}}, RemoteAddr: va, RKey: nicKey}
	if err := a.sq.Produce(w.Encode); err != nil {
		t.Fatal(err)
	}
	a.d.Regs.RegWrite(hw.RegSQDoorbell, nicQPN)
	var groups []pritest.Group
	deadline := time.Now().Add(5 * time.Second)
	for len(groups) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no page request")
		}
		groups = prq.Groups()
		time.Sleep(100 * time.Microsecond)
	}
	e := groups[0][0]
	if len(groups) != 1 || len(groups[0]) != 1 || e.Addr != va || e.Kind != hw.FaultKindRCRecv || e.Queue != nicQPN ||
		e.Desc != nicQPN || e.Flags&(hw.PRQWrite|hw.PRQPASIDValid) != hw.PRQWrite|hw.PRQPASIDValid || e.PASID != 0 {
		t.Fatalf("page requests %+v", groups)
	}
	b.as.SetLeaf(va, pte)
	if err := prq.Respond(pritest.ResponseFor(groups[0], hw.PRSPSuccess)); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		c, ok := a.scq.Poll()
		if ok {
			if c.Status != ibrc.WCSuccess {
				t.Fatalf("WRITE: %+v", c)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the WRITE did not complete")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if !bytes.Equal(b.buf.Read(off, len(data)), data) {
		t.Fatal("data differs")
	}
	n := uint32(len(hw.RDMACounters))
	buf := b.g.Alloc(8*int(n), 8)
	q := rdmatest.NewCmd(hw.RDMACmdQueryStats, 0)
	hw.RDMAQueryStatsBuf.Put(q[:], buf)
	hw.RDMAQueryStatsCount.Put(q[:], n)
	if err := b.d.Must(q); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for i, c := range hw.RDMACounters {
		got[c.Name] = binary.LittleEndian.Uint64(b.g.Bytes(buf+uint64(8*i), 8))
	}
	if got["page_requests"] != 1 || got["rnr_naks_fault"] == 0 || got["responder_faults"] == 0 || got["messages_in"] != 1 {
		t.Fatalf("counters %v", got)
	}
}

// TestRDMAResetAndDisconnect: DEVICE_RESET and a client disconnect destroy
// the RDMA objects and leave the block idle, as the other engines.
func TestRDMAResetAndDisconnect(t *testing.T) {
	pa, _ := port.Pipe(8)
	r := newRDMANIC(t, pa, 1)
	if v := rd32(t, r.n, hw.RegBAR, hw.RegRDMACtrl); v != hw.RDMACtrlEnable|hw.RDMACtrlBusy {
		t.Fatalf("RDMA_CTRL %#x", v)
	}
	if err := r.n.Reset(); err != nil {
		t.Fatal(err)
	}
	if v := rd32(t, r.n, hw.RegBAR, hw.RegRDMACtrl); v != 0 {
		t.Fatalf("RDMA_CTRL %#x after DEVICE_RESET", v)
	}
	if v := rd32(t, r.n, hw.RegBAR, hw.RegEQVector); v != hw.RDMAVector {
		t.Fatalf("EQ_VECTOR %d after DEVICE_RESET", v)
	}
	// The same objects can be made again (once the driver has bus
	// mastering back), then a disconnect drops them.
	r.n.RegionWrite(vfiouser.RegionConfig, pcie.OffCommand, []byte{0x06, 0})
	r.d.Enable()
	if err := r.d.Must(rdmatest.CreateCQ(0, r.scq)); err != nil {
		t.Fatal(err)
	}
	r.n.ClientDisconnected()
	if r.n.RDMA().Busy() {
		t.Fatal("RDMA busy after disconnect")
	}
}

func (f *fakeIRQ) count(v int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := 0
	for _, x := range f.fired {
		if x == v {
			c++
		}
	}
	return c
}
