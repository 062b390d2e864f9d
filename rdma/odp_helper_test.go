package rdma_test

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/pri"
	"github.com/npfnic/npfnic/pri/pritest"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// odpState is a node's page request interface and the driver model's side
// of it: the PRI capability in a config space of its own, the PRI engine
// the RDMA engine faults through, and a pritest driver whose page requests
// the test answers, mapping the page first as ib_umem_odp_map_dma_and_lock
// does.
type odpState struct {
	space *pcie.Space
	pri   *pri.Requester
	drv   *pritest.Driver

	mu      sync.Mutex
	missing map[uint64]uint64 // page VA -> the frame it maps once requested
	pending []pritest.Group   // groups read from the queue, not yet taken by the test
	seen    []pritest.Group   // every group read
	stop    chan struct{}     // ends serve
	served  sync.WaitGroup
}

// PRI capability registers, as offsets from its start.
const (
	priCtrl  = 0x04
	priAlloc = 0x0c
)

// newPRI builds the node's page request interface with PRI enabled and an
// allocation of alloc requests (64 when 0).
func (n *node) newPRI(t testing.TB, alloc uint32, tr *trace.Recorder) {
	t.Helper()
	if alloc == 0 {
		alloc = 64
	}
	o := &n.odp
	o.missing = map[uint64]uint64{}
	var err error
	o.space, err = pcie.Build(pcie.Config{VendorID: hw.VendorID, DeviceID: hw.DeviceID, ClassCode: hw.ClassCode,
		PRI: &pcie.PRI{OutstandingCapacity: 256}, PASID: &pcie.PASID{MaxWidth: 20}})
	if err != nil {
		t.Fatal(err)
	}
	if o.pri, err = pri.New(pri.Config{Mem: n.g.Mem, Caps: o.space, Trace: tr}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.pri.Close)
	o.space.SetHooks(pcie.Hooks{PRIControl: o.pri.PRIControl, PRIReset: o.pri.PRIReset})
	n.cfgWrite(pcie.OffCommand, binary.LittleEndian.AppendUint16(nil, pcie.CmdBusMaster|pcie.CmdMemory))
	n.cfgWrite(o.space.Layout().PRI+priAlloc, binary.LittleEndian.AppendUint32(nil, alloc))
	n.setPRI(true)
	o.drv = pritest.NewDriver(n.g, hw.Offsets(o.pri), 64, 64)
}

func (n *node) cfgWrite(off int, b []byte) {
	if err := n.odp.space.Write(off, b); err != nil {
		panic(err)
	}
}

// setPRI sets or clears PRI Enable in the capability.
func (n *node) setPRI(on bool) {
	v := uint16(0)
	if on {
		v = pcie.PRICtrlEnable
	}
	n.cfgWrite(n.odp.space.Layout().PRI+priCtrl, binary.LittleEndian.AppendUint16(nil, v))
}

// evict takes the page at offset off of the node's buffer out of the
// PASID's page tables (the process's page was never touched, or was
// reclaimed) and drops the device's translations; the page request for it
// maps it back.
func (n *node) evict(off uint64) uint64 {
	va := bufVA + off&^4095
	n.odp.mu.Lock()
	n.odp.missing[va] = n.buf.Pages()[off/4096]
	n.odp.mu.Unlock()
	n.as.Unmap(va)
	n.x.Flush()
	return va
}

// read returns the complete groups the driver model has read so far and
// not yet handed out, reading the queue first.
func (o *odpState) read() []pritest.Group {
	o.mu.Lock()
	defer o.mu.Unlock()
	gs := o.drv.Groups()
	o.seen = append(o.seen, gs...)
	o.pending = append(o.pending, gs...)
	out := o.pending
	o.pending = nil
	return out
}

// nextGroup waits for the next page request group.
func (n *node) nextGroup(t testing.TB) pritest.Group {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if gs := n.odp.read(); len(gs) > 0 {
			n.odp.mu.Lock()
			n.odp.pending = append(gs[1:], n.odp.pending...)
			n.odp.mu.Unlock()
			return gs[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("no page request")
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// noGroup checks that no page request comes for a while.
func (n *node) noGroup(t testing.TB) {
	t.Helper()
	time.Sleep(10 * time.Millisecond)
	if gs := n.odp.read(); len(gs) > 0 {
		t.Fatalf("unexpected page requests %+v", gs)
	}
}

// answer responds to g with code; for Success it maps the pages first.
func (n *node) answer(t testing.TB, g pritest.Group, code uint16) {
	t.Helper()
	if err := n.respond(g, code); err != nil {
		t.Fatal(err)
	}
}

func (n *node) respond(g pritest.Group, code uint16) error {
	if code == hw.PRSPSuccess {
		n.odp.mu.Lock()
		for _, e := range g {
			if f, ok := n.odp.missing[e.Addr]; ok {
				n.as.Map(e.Addr, f, true)
				delete(n.odp.missing, e.Addr)
			}
		}
		n.odp.mu.Unlock()
	}
	return n.odp.drv.Respond(pritest.ResponseFor(g, code))
}

// serve answers every page request with Success (mapping the page) until
// the test ends.
func (n *node) serve(t testing.TB) {
	o := &n.odp
	o.stop = make(chan struct{})
	o.served.Add(1)
	go func() {
		defer o.served.Done()
		for {
			select {
			case <-o.stop:
				return
			default:
			}
			for _, g := range o.read() {
				if err := n.respond(g, hw.PRSPSuccess); err != nil {
					t.Error(err)
					return
				}
			}
			time.Sleep(20 * time.Microsecond)
		}
	}()
	t.Cleanup(func() { close(o.stop); o.served.Wait() })
}

// groupsSeen returns every group the driver model has read.
func (n *node) groupsSeen() []pritest.Group {
	n.odp.mu.Lock()
	defer n.odp.mu.Unlock()
	return append([]pritest.Group(nil), n.odp.seen...)
}

// wireTap is a node's end of the wire that decodes what the node receives:
// the AETH of every RC acknowledgement from the peer, as it was on the
// wire.
type wireTap struct {
	port.Port
	dec  *rocev2.Decoder
	mu   sync.Mutex
	acks []tappedAck
	// gate holds the tapped side's sends while a test holds it (Lock).
	gate sync.RWMutex
}

type tappedAck struct {
	syn rocev2.Syndrome
	psn uint32
}

func newWireTap(p port.Port) *wireTap { return &wireTap{Port: p, dec: rocev2.NewDecoder()} }

// Recv implements port.Port.
func (w *wireTap) Recv(buf []byte) (int, error) {
	n, err := w.Port.Recv(buf)
	if err == nil {
		if p, err := w.dec.Decode(buf[:n]); err == nil && p.BTH.Opcode == rocev2.OpAck {
			w.mu.Lock()
			w.acks = append(w.acks, tappedAck{p.AETH.Syndrome, p.BTH.PSN})
			w.mu.Unlock()
		}
	}
	return n, err
}

// Send implements port.Port: it waits while the test holds the gate.
func (w *wireTap) Send(frame []byte) error {
	w.gate.RLock()
	defer w.gate.RUnlock()
	return w.Port.Send(frame)
}

// rnrNaks returns the RNR NAKs seen so far.
func (w *wireTap) rnrNaks() []tappedAck {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []tappedAck
	for _, a := range w.acks {
		if a.syn.IsRNRNAK() {
			out = append(out, a)
		}
	}
	return out
}

// odpPair is two ODP nodes cabled by a pipe, a's end tapped (it sees what
// b sends), their QPs connected at MTU 1024.
func odpPair(t *testing.T, alloc uint32) (a, b *node, tap *wireTap) {
	return odpPairTraced(t, alloc, nil)
}

// odpPairTraced is odpPair with b's engine and page request interface
// recording into tr.
func odpPairTraced(t *testing.T, alloc uint32, tr *trace.Recorder) (a, b *node, tap *wireTap) {
	pa, pb := port.Pipe(256)
	tap = newWireTap(pa)
	a = newNodeWith(t, tap, 1, nodeOpts{odp: true, priAlloc: alloc})
	b = newNodeWith(t, pb, 2, nodeOpts{odp: true, priAlloc: alloc, trace: tr})
	a.connect(t, a.qpn, b, b.qpn, 3)
	b.connect(t, b.qpn, a, a.qpn, 3)
	return a, b, tap
}
