package ibrc_test

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"weak"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/ibrctest"
	"github.com/npfnic/npfnic/ibrc/rocev2"
)

// cheapMem is memory that serves any read at once without holding bytes
// (the responses carry zeros), so that a test can ask for a READ of tens
// of MiB and measure only what the engine keeps.
type cheapMem struct{ reads int }

func (m *cheapMem) ReadAt(va uint64, p []byte) error  { m.reads++; return nil }
func (m *cheapMem) WriteAt(va uint64, p []byte) error { return nil }

// TestHugeReadStreamed: one 74-byte READ request for 64 MiB at MTU 256 is
// 262,144 responses. The responder must not build them all before the
// first goes out (it did: 173 MiB of heap, with the engine's lock held
// throughout), nor again for a duplicate of the request: it reads a
// response's data only when the transmit path has room for it, so what it
// holds at once is bounded whatever the peer asks.
func TestHugeReadStreamed(t *testing.T) {
	const (
		size  = 64 << 20
		mtu   = 256
		npkts = size / mtu
		// maxQueued bounds the responses read and not yet handed to the
		// port, maxHeap the heap growth while they go out (garbage
		// included): 64 MiB of payload alone would pass neither.
		maxQueued = 1024
		maxHeap   = 48 << 20
	)
	mem := &cheapMem{}
	var (
		sent, maxQ int
		peak       uint64
		ms         runtime.MemStats
		first      []byte
		last       []byte
	)
	sample := func() {
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
	}
	port := func(f []byte) error {
		sent++
		maxQ = max(maxQ, mem.reads-sent)
		if sent%8192 == 1 {
			sample()
		}
		if first == nil {
			first = f
		}
		last = f
		return nil
	}
	v := newVictimWith(t, victimOpts{mtu: ibrc.MTU256, memSize: size, mem: mem, port: ibrc.PortFunc(port)})
	run := func(name string, psn uint32, want int) {
		t.Helper()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		sent, maxQ, peak, mem.reads, first, last = 0, 0, 0, 0, nil, nil
		v.e.HandleFrame(v.frame(rocev2.OpReadRequest, psn, nil, func(h *rocev2.Headers) {
			h.RETH.DMALength = size
			h.BTH.AckReq = false
		}))
		sample()
		if sent != want || mem.reads != want {
			t.Fatalf("%s: %d responses sent, %d read, want %d", name, sent, mem.reads, want)
		}
		if maxQ > maxQueued {
			t.Errorf("%s: %d responses read from memory before the port took them, want at most %d", name, maxQ, maxQueued)
		}
		if grew := peak - min(peak, base); grew > maxHeap {
			t.Errorf("%s: heap grew by %d MiB while the responses went out, want at most %d MiB", name, grew>>20, maxHeap>>20)
		}
		p, err := v.dec.Decode(first)
		if err != nil || p.BTH.PSN != psn || !p.BTH.Opcode.Has(rocev2.First) {
			t.Fatalf("%s: first response %v PSN %d (%v), want a First at %d", name, p.BTH.Opcode, p.BTH.PSN, err, psn)
		}
		p, err = v.dec.Decode(last)
		if err != nil || p.BTH.PSN != (1000+npkts-1)&0xffffff || !p.BTH.Opcode.Has(rocev2.Last) || len(p.Payload) != mtu {
			t.Fatalf("%s: last response %v PSN %d (%v)", name, p.BTH.Opcode, p.BTH.PSN, err)
		}
	}
	run("READ", 1000, npkts)
	// The requester lost the second half and asks again from there.
	run("duplicate", 1000+npkts/2, npkts/2)
	if st := v.qp.Query().State; st != ibrc.StateRTS {
		t.Fatalf("QP in %v", st)
	}
}

// readLog is ibrctest.Mem memory that logs the reads made after it was armed.
type readLog struct {
	*ibrctest.Mem
	armed bool
	after []string
}

func (m *readLog) ReadAt(va uint64, p []byte) error {
	if m.armed {
		m.after = append(m.after, fmt.Sprintf("%d bytes at +%#x", len(p), va-memBase))
	}
	return m.Mem.ReadAt(va, p)
}

// TestReadOfDeadMR: once its memory region is deregistered, a READ stops
// (a remote access error NAK, the QP in ERR) and its region is not read
// again: not for a duplicate of the request (which re-read the region as
// if it lived), nor for responses that waited for a page (which went on
// once the page came).
func TestReadOfDeadMR(t *testing.T) {
	nakAccess := rocev2.NAKSyndrome(rocev2.NAKRemoteAccess)
	t.Run("duplicate", func(t *testing.T) {
		mem := &readLog{Mem: ibrctest.NewMem(memBase, 1<<20, 4096)}
		v := newVictimWith(t, victimOpts{mem: mem})
		read := v.frame(rocev2.OpReadRequest, 1000, nil, func(h *rocev2.Headers) { h.RETH.DMALength = 4096 })
		v.e.HandleFrame(read)
		if got := v.responses(t); len(got) != 4 {
			t.Fatalf("%d responses to a READ of 4 MTUs", len(got))
		}
		if err := v.mr.Deregister(); err != nil {
			t.Fatal(err)
		}
		mem.armed = true
		v.e.HandleFrame(read) // its responses were lost
		got := v.responses(t)
		if len(mem.after) != 0 {
			t.Errorf("the deregistered region was read for a duplicate READ: %v", mem.after)
		}
		for _, p := range got {
			if p.BTH.Opcode != rocev2.OpAck || p.AETH.Syndrome != nakAccess || p.BTH.PSN != 1000 {
				t.Errorf("answered %v %v PSN %d, want a remote access NAK for 1000", p.BTH.Opcode, p.AETH.Syndrome, p.BTH.PSN)
			}
		}
		if st := v.qp.Query().State; st != ibrc.StateErr {
			t.Errorf("QP in %v, want ERR", st)
		}
	})
	t.Run("stalled", func(t *testing.T) {
		mem := &readLog{Mem: ibrctest.NewMem(memBase, 1<<20, 4096)}
		var resolve func(bool)
		pager := ibrc.PageRequesterFunc(func(r ibrc.PageRequest, done func(bool)) { resolve = done })
		v := newVictimWith(t, victimOpts{mem: mem, pager: pager})
		mem.Evict(memBase+4096, 1)
		v.e.HandleFrame(v.frame(rocev2.OpReadRequest, 1000, nil, func(h *rocev2.Headers) { h.RETH.DMALength = 8192 }))
		if got := v.responses(t); len(got) != 4 || resolve == nil {
			t.Fatalf("%d responses before the missing page (want 4), page requested: %v", len(got), resolve != nil)
		}
		if err := v.mr.Deregister(); err != nil {
			t.Fatal(err)
		}
		mem.armed = true
		mem.MakePresent(memBase+4096, 1)
		resolve(true)
		got := v.responses(t)
		if len(mem.after) != 0 {
			t.Errorf("the deregistered region was read once the page came: %v", mem.after)
		}
		for _, p := range got {
			if p.BTH.Opcode != rocev2.OpAck || p.AETH.Syndrome != nakAccess || p.BTH.PSN != 1004 {
				t.Errorf("answered %v %v PSN %d, want a remote access NAK for 1004", p.BTH.Opcode, p.AETH.Syndrome, p.BTH.PSN)
			}
		}
		if st := v.qp.Query().State; st != ibrc.StateErr {
			t.Errorf("QP in %v, want ERR", st)
		}
	})
}

// TestDuplicateReadAfterMTUChange: a READ answered at MTU 1024, then the
// path MTU raised to 4096 (SQD to SQD), then a duplicate asking again from
// the READ's last PSN. The responder validated the READ's range for its
// first segmentation; computing the duplicate's offset with the new MTU
// put it three times the READ's length past its start (outside what was
// validated, here past the region). The duplicate is answered as the READ
// was segmented: the last KiB.
func TestDuplicateReadAfterMTUChange(t *testing.T) {
	const regionSize = 64 << 10
	mem := &readLog{Mem: ibrctest.NewMem(memBase, 1<<20, 4096)}
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i * 13)
	}
	va := uint64(memBase + regionSize - 4096) // the region's last 4 KiB
	copy(mem.Bytes()[va-memBase:], data)
	v := newVictimWith(t, victimOpts{mem: mem, memSize: regionSize})
	v.e.HandleFrame(v.frame(rocev2.OpReadRequest, 1000, nil, func(h *rocev2.Headers) { h.RETH.VA, h.RETH.DMALength = va, 4096 }))
	if got := v.responses(t); len(got) != 4 {
		t.Fatalf("%d responses to a READ of 4 MTUs", len(got))
	}
	for _, s := range []struct {
		a ibrc.QPAttr
		m ibrc.AttrMask
	}{
		{ibrc.QPAttr{State: ibrc.StateSQD}, ibrc.AttrState},
		{ibrc.QPAttr{PathMTU: ibrc.MTU4096}, ibrc.AttrPathMTU},
	} {
		if err := v.qp.ModifyQP(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	mem.armed = true
	v.e.HandleFrame(v.frame(rocev2.OpReadRequest, 1003, nil, func(h *rocev2.Headers) { h.RETH.VA, h.RETH.DMALength = va+3072, 1024 }))
	got := v.responses(t)
	for _, r := range mem.after {
		if r != "1024 bytes at +0xfc00" {
			t.Errorf("the duplicate read %s, want only the READ's last KiB (1024 bytes at +0xfc00)", r)
		}
	}
	if len(got) != 1 || got[0].BTH.PSN != 1003 || !got[0].BTH.Opcode.Has(rocev2.Last) || !bytes.Equal(got[0].Payload, data[3072:]) {
		for _, p := range got {
			t.Logf("answered %v PSN %d, %d bytes", p.BTH.Opcode, p.BTH.PSN, len(p.Payload))
		}
		t.Fatalf("want one response at PSN 1003 with the READ's last KiB")
	}
	if st := v.qp.Query().State; st != ibrc.StateSQD {
		t.Fatalf("QP in %v", st)
	}
}

// heldPort is a Port that refuses frames (ErrPortFull) while full.
type heldPort struct {
	full bool
	out  [][]byte
}

func (p *heldPort) send(f []byte) error {
	if p.full {
		return ibrc.ErrPortFull
	}
	p.out = append(p.out, f)
	return nil
}

// pacedPort is a PacedPort that takes room frames and counts Pull calls;
// the test plays its transmit goroutine (PortReady).
type pacedPort struct {
	heldPort
	room, pulls int
}

func (p *pacedPort) SendFrame(f []byte) error {
	p.full = len(p.out) >= p.room
	return p.send(f)
}

func (p *pacedPort) Pull() { p.pulls++ }

// decode decodes what the port took since the last call.
func (p *heldPort) decode(t *testing.T) []rocev2.Packet {
	t.Helper()
	dec := rocev2.NewDecoder()
	var got []rocev2.Packet
	for _, f := range p.out {
		pkt, err := dec.Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, *pkt)
	}
	p.out = nil
	return got
}

// TestPortFull: a port that refuses frames (ErrPortFull) holds the engine
// back without blocking it. A READ of 64 responses reads no more of them
// than the transmit queue's room, a SEND that follows waits behind it,
// and PortReady sends the rest in PSN order, the SEND's ACK last; a READ
// whose region is deregistered while it waits stops there with a remote
// access NAK, without reading the region again; a duplicate of the READ
// being answered moves its cursor back rather than queue a second pass
// behind it; the requester builds no
// more than the room either; with a PacedPort, a READ request makes its
// receiver build one burst and ask the port for the rest (Pull), which
// PortReady builds as the port takes it; and ACKs and NAKs beyond
// what the queue holds are dropped and counted, not queued without bound.
func TestPortFull(t *testing.T) {
	const room = 64 // txRoomFrames
	read := func(v *victim, psn uint32, size uint32) []byte {
		return v.frame(rocev2.OpReadRequest, psn, nil, func(h *rocev2.Headers) { h.RETH.DMALength = size })
	}
	t.Run("in order", func(t *testing.T) {
		p := &heldPort{full: true}
		mem := &readLog{Mem: ibrctest.NewMem(memBase, 1<<20, 4096), armed: true}
		v := newVictimWith(t, victimOpts{mem: mem, port: ibrc.PortFunc(p.send)})
		v.e.HandleFrame(read(v, 1000, 64<<10))
		v.e.HandleFrame(v.frame(rocev2.OpSendOnly, 1064, []byte("after"), nil))
		if len(p.out) != 0 || len(mem.after) > room {
			t.Fatalf("with the port full: %d frames sent, %d responses read (room for %d)", len(p.out), len(mem.after), room)
		}
		p.full = false
		v.e.PortReady()
		got := p.decode(t)
		if len(got) != 65 {
			t.Fatalf("%d frames once the port had room, want 64 responses and an ACK", len(got))
		}
		for i, pkt := range got[:64] {
			if pkt.BTH.PSN != 1000+uint32(i) || !pkt.BTH.Opcode.Has(rocev2.Read|rocev2.Response) || pkt.BTH.Opcode.Has(rocev2.First) != (i == 0) {
				t.Fatalf("response %d: %v PSN %d", i, pkt.BTH.Opcode, pkt.BTH.PSN)
			}
		}
		if a := got[64]; a.BTH.Opcode != rocev2.OpAck || a.BTH.PSN != 1064 || !a.AETH.Syndrome.IsACK() {
			t.Fatalf("after the READ: %v %v PSN %d, want the SEND's ACK", a.BTH.Opcode, a.AETH.Syndrome, a.BTH.PSN)
		}
	})
	t.Run("region deregistered", func(t *testing.T) {
		p := &heldPort{full: true}
		mem := &readLog{Mem: ibrctest.NewMem(memBase, 1<<20, 4096)}
		v := newVictimWith(t, victimOpts{mem: mem, port: ibrc.PortFunc(p.send)})
		v.e.HandleFrame(read(v, 1000, 256<<10))
		if err := v.mr.Deregister(); err != nil {
			t.Fatal(err)
		}
		mem.armed = true
		p.full = false
		v.e.PortReady()
		got := p.decode(t)
		if len(mem.after) != 0 {
			t.Errorf("the deregistered region was read: %v", mem.after)
		}
		if len(got) == 0 || len(got) > room+1 {
			t.Fatalf("%d frames, want the responses read before and a NAK", len(got))
		}
		n := len(got) - 1
		if nak := got[n]; nak.BTH.Opcode != rocev2.OpAck || nak.BTH.PSN != 1000+uint32(n) || nak.AETH.Syndrome != rocev2.NAKSyndrome(rocev2.NAKRemoteAccess) {
			t.Errorf("last frame %v %v PSN %d, want a remote access NAK for %d", nak.BTH.Opcode, nak.AETH.Syndrome, nak.BTH.PSN, 1000+n)
		}
		if st := v.qp.Query().State; st != ibrc.StateErr {
			t.Errorf("QP in %v, want ERR", st)
		}
	})
	t.Run("duplicate while answering", func(t *testing.T) {
		p := &heldPort{full: true}
		v := newVictimWith(t, victimOpts{port: ibrc.PortFunc(p.send)})
		v.e.HandleFrame(read(v, 1000, 256<<10))
		v.e.HandleFrame(read(v, 1010, 246<<10)) // the requester timed out, having 1000-1009
		p.full = false
		v.e.PortReady()
		got := p.decode(t)
		k := len(got) - 246 // built before the duplicate came
		if k <= 10 || k > room {
			t.Fatalf("%d responses, want those built before the duplicate (past 1009, at most %d) and then 1010-1255 once", len(got), room)
		}
		for i, r := range got {
			want := 1000 + uint32(i)
			if i >= k {
				want = 1010 + uint32(i-k)
			}
			if r.BTH.PSN != want || r.BTH.Opcode.Has(rocev2.First) != (i == 0 || i == k) {
				t.Fatalf("response %d: %v PSN %d, want PSN %d (the duplicate's answer from %d on)", i, r.BTH.Opcode, r.BTH.PSN, want, k)
			}
		}
		if n := v.e.Stats().DupRequests; n != 1 {
			t.Fatalf("%d duplicate requests counted", n)
		}
	})
	t.Run("requester", func(t *testing.T) {
		p := &heldPort{full: true}
		// The virtual clock: on the real one the WRITE's local ACK timer
		// (67 ms) retransmitted through p from a timer goroutine, racing
		// with decode, when the subtest took that long (-race, a loaded
		// machine) or after it ended.
		v := newVictimWith(t, victimOpts{port: ibrc.PortFunc(p.send), virtual: true})
		err := v.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRWrite, SGL: []ibrc.SGE{{Addr: memBase, Length: 256 << 10, LKey: v.mr.LKey()}},
			RemoteAddr: 0x1000, RKey: 1})
		if err != nil {
			t.Fatal(err)
		}
		if n := v.e.Stats().DataPackets; n > room {
			t.Fatalf("the requester built %d packets with the port full, room for %d", n, room)
		}
		p.full = false
		v.e.PortReady()
		got := p.decode(t)
		if len(got) != 128 { // the window (Config.MaxUnackedPSNs)
			t.Fatalf("%d packets once the port had room, want the window's 128", len(got))
		}
		for i, pkt := range got {
			if pkt.BTH.PSN != 5+uint32(i) {
				t.Fatalf("packet %d has PSN %d", i, pkt.BTH.PSN)
			}
		}
	})
	t.Run("paced", func(t *testing.T) {
		p := &pacedPort{room: 100}
		mem := &readLog{Mem: ibrctest.NewMem(memBase, 1<<20, 4096), armed: true}
		v := newVictimWith(t, victimOpts{mem: mem, port: p})
		v.e.HandleFrame(read(v, 1000, 256<<10))
		if len(p.out) != 16 || len(mem.after) != 16 || p.pulls != 1 {
			t.Fatalf("the READ request's receiver built %d responses (%d read) and pulled %d times, want a burst of 16 and a pull",
				len(p.out), len(mem.after), p.pulls)
		}
		v.e.PortReady()
		if len(p.out) != p.room || len(mem.after) > p.room+room {
			t.Fatalf("PortReady sent %d responses (%d read), want the port's %d and at most %d read", len(p.out), len(mem.after), p.room, p.room+room)
		}
		p.room = 1000
		v.e.PortReady()
		got := p.heldPort.decode(t)
		if len(got) != 256 || len(mem.after) != 256 {
			t.Fatalf("%d responses sent, %d read, want 256", len(got), len(mem.after))
		}
		for i, pkt := range got {
			if pkt.BTH.PSN != 1000+uint32(i) {
				t.Fatalf("response %d has PSN %d", i, pkt.BTH.PSN)
			}
		}
	})
	t.Run("ACKs bounded", func(t *testing.T) {
		const writes, maxQueue = 3000, 1024 // maxTxFrames
		p := &heldPort{full: true}
		v := newVictimWith(t, victimOpts{port: ibrc.PortFunc(p.send)})
		for i := range writes {
			v.e.HandleFrame(v.frame(rocev2.OpWriteOnly, 1000+uint32(i), []byte("data"), nil))
		}
		p.full = false
		v.e.PortReady()
		got := p.decode(t)
		if len(got) != maxQueue || v.e.Stats().TxDropped != writes-maxQueue {
			t.Fatalf("%d ACKs sent, %d dropped; want the first %d queued and the rest dropped", len(got), v.e.Stats().TxDropped, maxQueue)
		}
		for i, a := range got {
			if a.BTH.PSN != 1000+uint32(i) || !a.AETH.Syndrome.IsACK() {
				t.Fatalf("frame %d: %v PSN %d", i, a.AETH.Syndrome, a.BTH.PSN)
			}
		}
		// The requester lost the others' ACKs: its next request's ACK
		// covers them.
		v.e.HandleFrame(v.frame(rocev2.OpWriteOnly, 1000+writes, []byte("data"), nil))
		if got := p.decode(t); len(got) != 1 || got[0].BTH.PSN != 1000+writes {
			t.Fatalf("after the port drained: %d frames", len(got))
		}
	})
}

// TestDestroyedQPLeavesTurns: a QP waiting for its turn at a port that
// takes nothing (a READ of 256 KiB being answered) and then destroyed is
// not kept by the engine: a port stuck for good must not hold every QP
// destroyed behind it. Before, the turn list kept it until the port took
// frames again.
func TestDestroyedQPLeavesTurns(t *testing.T) {
	p := &heldPort{full: true}
	v := newVictimWith(t, victimOpts{port: ibrc.PortFunc(p.send)})
	// Four READs of 256 responses each, as many as the QP takes: enough
	// to fill what the engine queues, so no turn comes while the port is
	// held.
	for i := range uint32(4) {
		v.e.HandleFrame(v.frame(rocev2.OpReadRequest, 1000+256*i, nil, func(h *rocev2.Headers) { h.RETH.DMALength = 256 << 10 }))
	}
	if n := len(p.out); n != 0 {
		t.Fatalf("the held port took %d frames", n)
	}
	gone := weak.Make(v.qp)
	if err := v.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	v.qp = nil
	runtime.GC()
	if gone.Value() != nil {
		t.Fatal("the engine still holds the destroyed QP")
	}
	p.full = false
	v.e.PortReady() // no turn for it, and nothing more built
	if got := p.decode(t); len(got) > 64 {
		t.Fatalf("%d frames after the QP was destroyed, want at most those queued before (64)", len(got))
	}
}
