package ibrc_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rocev2"
	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/internal/fuzzseed"
)

// FuzzRCPair connects two engines' QPs through a wire the fuzz input
// controls, in both directions at once: each engine's frames wait in its
// outbox until the input delivers, drops, duplicates, reorders, corrupts
// (bit flips and truncation, which the ICRC or the IPv4 checksum must
// catch) or forges them (BTH, RETH and AETH fields, PSN shifts, payload
// bytes and truncation with the lengths and ICRC repaired), while both
// sides post SEND, SEND with immediate, RDMA WRITE (with immediate) and
// RDMA READ work and receive entries, and the virtual clock runs the
// retransmission, RNR and page request timers. At the end every frame is
// delivered faithfully and the clock run until nothing is left to do.
//
// What must hold for every input:
//   - no panic, and quiescence within a bounded number of deliveries and
//     timer events (a hang is a failure of the input that caused it);
//   - at most pairMaxQueued frames waiting in an outbox;
//   - every memory access lies where it may (pairSide.fence): a write only
//     in a live region that allows remote writes or in a scatter list the
//     side posted over a live region that allows local writes, a read
//     only in a live region that allows remote reads or in a gather list
//     the side posted;
//   - every completion names a work request its QP posted, completes it
//     at most once, with the request's opcode, send completions in posting
//     order, and successful receives in posting order;
//   - once quiescent, every send request has completed;
//   - while nothing was forged, data that completes with success is
//     intact: a READ's sink holds the peer's source bytes, a WRITE's target
//     the local source bytes, a receive the bytes (and immediate) of the
//     message that consumed it. Forged frames are undetectable corruption,
//     which RC cannot defend against, so they turn the data checks off for
//     the rest of the input.
//
// Everything is fresh per input (two engines, their memories copied from
// a template, a clock.Virtual), so a failure reproduces from its input
// alone; nothing runs on another goroutine. The input is eight
// configuration bytes (pairConfig) and a program of operations
// (pairOp*). CQs are kept shallow because their allocation dominated the
// cost of an input (make fuzz prints the rates). Its seeds are testdata/fuzz/FuzzRCPair/seed-*,
// written from pairSeeds (TestRCPairSeedFiles).
func FuzzRCPair(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte) { runPair(t, in) })
}

// Memory of each side: one Memory of pairMemSize bytes at pairBase, cut
// into regions. Clean work requests use the areas between the pairClean
// bounds, which no wild access (a window of pairWindow bytes either side
// of a region boundary, at most 255 bytes long) reaches, so no request of
// the input can disturb another's data unless a frame was forged.
const (
	pairBase    = 0x5a00_0000_0000
	pairMemSize = 0x10000

	pairSrcLo, pairSrcHi     = 0x0000, 0x4000 // mrSrc: remote read only; source of SENDs, WRITEs and the peer's READs
	pairDstLo, pairDstHi     = 0x4000, 0xc000 // mrDst: local and remote write, remote read
	pairLocLo, pairLocHi     = 0xc000, 0xe000 // mrLocal: local write only
	pairOtherLo, pairOtherHi = 0xe000, 0x10000

	pairSinkLo, pairSinkHi     = 0x4200, 0x8000 // clean READ sinks and receive buffers in mrDst
	pairTargetLo, pairTargetHi = 0x8000, 0xbf00 // clean targets of the peer's WRITEs
	pairLSinkLo, pairLSinkHi   = 0xc200, 0xdf00 // clean sinks in mrLocal
	pairWindow                 = 0x100

	pairMaxQueued = 4096   // frames an outbox may hold
	pairMaxOps    = 400    // operations run per input
	pairMaxDrain  = 200000 // deliveries and timer events of the final drain
	pairMaxWR     = 48     // send and receive queue depth
)

// pairBounds are the region boundaries wild accesses are aimed around.
var pairBounds = [...]uint64{0, pairDstLo, pairLocLo, pairOtherLo, pairMemSize}

// Region indices of a side.
const (
	pairMRSrc = iota
	pairMRDst
	pairMRLocal
	pairMROther // in another PD: the QP may not use it
	pairNumMR
)

var pairMRSpecs = [pairNumMR]struct {
	lo, hi uint64
	acc    ibrc.Access
}{
	pairMRSrc:   {pairSrcLo, pairSrcHi, ibrc.AccessRemoteRead},
	pairMRDst:   {pairDstLo, pairDstHi, ibrc.AccessLocalWrite | ibrc.AccessRemoteWrite | ibrc.AccessRemoteRead | ibrc.AccessRemoteAtomic},
	pairMRLocal: {pairLocLo, pairLocHi, ibrc.AccessLocalWrite},
	pairMROther: {pairOtherLo, pairOtherHi, ibrc.AccessLocalWrite | ibrc.AccessRemoteWrite | ibrc.AccessRemoteRead | ibrc.AccessRemoteAtomic},
}

// pairTemplate is each side's initial memory: distinct pseudo-random
// bytes, so a misplaced copy shows.
var pairTemplate = func() (t [2][]byte) {
	for s := range t {
		t[s] = make([]byte, pairMemSize)
		x := uint32(0x9e3779b9 * uint32(s+1))
		for i := range t[s] {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			t[s][i] = byte(x)
		}
	}
	return
}()

// pairMemPool recycles the sides' memories (64 KiB each, two per input).
var pairMemPool = sync.Pool{New: func() any { return make([]byte, pairMemSize) }}

// Operations of a program: an opcode byte (modulo pairNumOps) and its
// arguments, read as they come (zeros past the end).
const (
	pairOpPost       = iota // side kind len mode a:u16 b:u16 [wild SGEs: win off len key]...
	pairOpRecv              // side len mode a:u16 [wild SGEs]...
	pairOpDeliver           // side k: deliver the k-th waiting frame (k > 0 reorders)
	pairOpDrop              // side k
	pairOpDup               // side k: deliver a copy, keep the frame
	pairOpFlip              // side k pos:u16 bit: flip a bit and deliver, checks left as they are
	pairOpTruncate          // side k len:u16: cut and deliver, lengths left as they are
	pairOpForge             // side k field val:u32: rewrite a field, repair lengths and ICRC, deliver
	pairOpClock             // n: run up to n%16+1 timer events
	pairOpDereg             // side which: deregister a region
	pairOpErr               // side: move the QP to ERR
	pairOpDeliverAll        // deliver every waiting frame, both ways, in order
	pairNumOps
)

// Forged fields (pairOpForge's field modulo pairNumFields).
const (
	pairFieldOpcode = iota
	pairFieldPSNShift
	pairFieldPSN
	pairFieldDestQP
	pairFieldFlags // BTH byte 1 (SE, M, pad count, TVer) and AckReq
	pairFieldPKey
	pairFieldRETHVA
	pairFieldRETHKey
	pairFieldRETHLen
	pairFieldSyndrome
	pairFieldMSN
	pairFieldPayload
	pairFieldTruncate
	pairNumFields
)

// pairConfig is decoded from the input's first eight bytes.
type pairConfig struct {
	mtu                 ibrc.MTU
	retry, rnrRetry     uint8
	policy              ibrc.FaultPolicy
	timeout, minRNR     uint8
	maxUnacked          int
	ackEvery            int
	absent, failPages   [2]uint16 // pages absent at start, and pages whose page requests fail
	maxRd, maxDestRd    uint8
	psn                 [2]uint32
	inlineCap, sendSGEs int
}

// pairFaultPages are the pages the configuration may make absent: one in
// each region the traffic uses.
var pairFaultPages = [4]uint{0x1, 0x5, 0x9, 0xc}

func decodePairConfig(c []byte) pairConfig {
	var b [8]byte
	copy(b[:], c)
	cfg := pairConfig{
		mtu:        ibrc.MTU256 + ibrc.MTU(b[0]%3),
		retry:      b[1] & 7,
		rnrRetry:   (b[1] >> 3) % 7, // never 7: infinite RNR retries would not quiesce
		policy:     ibrc.FaultPolicy(b[1] >> 6 & 1),
		timeout:    1 + b[2]%8,
		minRNR:     b[2] >> 3,
		maxUnacked: 1 + int(b[3]%64),
		ackEvery:   1 + int(b[3]>>6),
		maxRd:      1 + b[6]%8,
		maxDestRd:  1 + (b[6]>>3)%8,
		inlineCap:  64,
		sendSGEs:   4,
	}
	for s := range 2 {
		nib := b[4] >> (4 * s) & 0xf
		fail := b[5] >> (4 * s) & 0xf
		for i, pg := range pairFaultPages {
			if nib&(1<<i) != 0 {
				cfg.absent[s] |= 1 << pg
			}
			if fail&(1<<i) != 0 {
				cfg.failPages[s] |= 1 << pg
			}
		}
	}
	// Start PSNs: low, or just before the 24-bit wrap.
	cfg.psn[0] = uint32(b[7]&0xf) * 0x1000
	cfg.psn[1] = uint32(b[7]>>4) * 0x1000
	if b[7]&0x8 != 0 {
		cfg.psn[0] = 0xffffff - uint32(b[7]&7)
	}
	if b[7]&0x80 != 0 {
		cfg.psn[1] = 0xfffff8 + uint32(b[7]>>4&7)
	}
	return cfg
}

// pairMR is a region as the test knows it.
type pairMR struct {
	mr     *ibrc.MR
	lo, hi uint64 // addresses
	acc    ibrc.Access
	samePD bool
	dead   bool
}

// pairSpan is a range a side's posted work may read or write, while the
// region it lies in lives.
type pairSpan struct {
	lo, hi uint64
	mr     *pairMR
}

// pairWR is a posted send work request.
type pairWR struct {
	id      uint64
	op      ibrc.WROpcode
	length  uint64
	imm     uint32
	clean   bool   // integrity is checkable
	want    []byte // SEND, WRITE: the payload; READ, atomic: what the sink must hold
	target  uint64 // WRITE: the peer's address of the payload; atomic: of the word
	word    uint64 // atomic: what the peer's word must hold after it ran once
	sink    []ibrc.SGE
	signal  bool
	done    int
	consume bool // takes a receive entry at the peer
}

// pairRecv is a posted receive work request.
type pairRecv struct {
	id     uint64
	length uint64
	clean  bool
	sgl    []ibrc.SGE
	done   int
}

// pairSide is one engine and what the test knows of it.
type pairSide struct {
	n       int
	e       *ibrc.Transport
	mem     *fenceMem
	mrs     [pairNumMR]*pairMR
	scq     *ibrc.CQ
	rcq     *ibrc.CQ
	qp      *ibrc.QP
	peer    *pairSide
	out     [][]byte
	writes  []pairSpan // may be written: scatter lists posted here
	reads   []pairSpan // may be read: gather lists posted here
	sends   []*pairWR
	sendIDs map[uint64]*pairWR
	lastID  uint64    // last send completion's ID (posting order)
	msgs    []*pairWR // requests that take a receive entry at the peer, in order
	recvs   []*pairRecv
	recvIDs map[uint64]*pairRecv
	recvOK  int // successful receive completions
	fences  []string
	// Bump allocators of the clean areas (offsets).
	sink, lsink, target uint64
	nextID              uint64
}

// fenceMem is a side's memory: bytes at pairBase, pages that may be absent
// (a translation fault until the pager brings them in), and a fence that
// records every access the side's posted work and regions do not allow.
type fenceMem struct {
	side   *pairSide
	data   []byte
	absent uint16
}

func (m *fenceMem) ReadAt(va uint64, p []byte) error  { return m.access(va, p, false) }
func (m *fenceMem) WriteAt(va uint64, p []byte) error { return m.access(va, p, true) }

var errPairRange = errors.New("pair: access outside memory")

func (m *fenceMem) access(va uint64, p []byte, write bool) error {
	if va < pairBase || uint64(len(p)) > pairMemSize || va-pairBase > pairMemSize-uint64(len(p)) {
		return errPairRange
	}
	if len(p) == 0 {
		return nil
	}
	off := va - pairBase
	for pg := off >> 12; pg <= (off+uint64(len(p))-1)>>12; pg++ {
		if m.absent&(1<<pg) != 0 {
			return &ibrc.FaultError{VA: max(va, pairBase+pg<<12), Write: write}
		}
	}
	m.side.fence(va, uint64(len(p)), write)
	if write {
		copy(m.data[off:], p)
	} else {
		copy(p, m.data[off:])
	}
	return nil
}

// fence records an access to [va, va+n) that nothing allows.
func (s *pairSide) fence(va, n uint64, write bool) {
	in := func(lo, hi uint64) bool { return va >= lo && va+n <= hi }
	need := ibrc.AccessRemoteRead
	spans := s.reads
	if write {
		need, spans = ibrc.AccessRemoteWrite, s.writes
	}
	for _, m := range s.mrs {
		if !m.dead && m.samePD && m.acc&need != 0 && in(m.lo, m.hi) {
			return
		}
	}
	for _, sp := range spans {
		if !sp.mr.dead && in(sp.lo, sp.hi) {
			return
		}
	}
	op := "read"
	if write {
		op = "write"
	}
	s.fences = append(s.fences, fmt.Sprintf("side %d: %s of [%#x, +%d) (offset %#x) outside what may be touched, by %s",
		s.n, op, va, n, va-pairBase, engineCallers()))
}

// engineCallers names the ibrc functions on the stack, innermost first:
// where a fenced access came from.
func engineCallers() string {
	pc := make([]uintptr, 32)
	frames := runtime.CallersFrames(pc[:runtime.Callers(3, pc)])
	var names []string
	for {
		f, more := frames.Next()
		if fn := strings.TrimPrefix(f.Function, "github.com/npfnic/npfnic/ibrc."); fn != f.Function && !strings.Contains(fn, "_test.") {
			names = append(names, fn)
		}
		if !more {
			break
		}
	}
	return strings.Join(names, " < ")
}

// mrOf is the live region of this side's PD that holds [addr, addr+n)
// under key, with access acc (nil: none; then the engine must refuse).
func (s *pairSide) mrOf(key uint32, addr, n uint64, acc ibrc.Access) *pairMR {
	for _, m := range s.mrs {
		if m.mr.LKey() == key && m.samePD && !m.dead && m.acc&acc == acc && addr >= m.lo && n <= m.hi-addr && addr+n <= m.hi {
			return m
		}
	}
	return nil
}

// allow adds the SGEs that lie in a live region of the PD (with local
// write, for a scatter list) to what the side may touch.
func (s *pairSide) allow(sgl []ibrc.SGE, write bool) {
	acc := ibrc.Access(0)
	if write {
		acc = ibrc.AccessLocalWrite
	}
	for _, g := range sgl {
		if m := s.mrOf(g.LKey, g.Addr, uint64(g.Length), acc); m != nil {
			sp := pairSpan{g.Addr, g.Addr + uint64(g.Length), m}
			if write {
				s.writes = append(s.writes, sp)
			} else {
				s.reads = append(s.reads, sp)
			}
		}
	}
}

// pairRig is one input's world.
type pairRig struct {
	t      *testing.T
	clk    *clock.Virtual
	sides  [2]*pairSide
	forged bool
}

func newPairRig(t *testing.T, cfg pairConfig) *pairRig {
	r := &pairRig{t: t, clk: clock.NewVirtual(time.Unix(1700000000, 0))}
	macs, ips := [2][6]byte{macA, macB}, [2][4]byte{ipA, ipB}
	for n := range 2 {
		s := &pairSide{n: n, sendIDs: make(map[uint64]*pairWR), recvIDs: make(map[uint64]*pairRecv),
			sink: pairSinkLo, lsink: pairLSinkLo, target: pairTargetLo, nextID: uint64(n+1) << 32}
		s.mem = &fenceMem{side: s, data: pairMemPool.Get().([]byte), absent: cfg.absent[n]}
		copy(s.mem.data, pairTemplate[n])
		t.Cleanup(func() { pairMemPool.Put(s.mem.data) })
		fail := cfg.failPages[n]
		pager := ibrc.PageRequesterFunc(func(pr ibrc.PageRequest, done func(bool)) {
			r.clk.AfterFunc(20*time.Microsecond, func() {
				pg := (pr.VA - pairBase) >> 12
				if pr.Mem != ibrc.Memory(s.mem) || pr.VA < pairBase || pg >= 16 || fail&(1<<pg) != 0 {
					done(false)
					return
				}
				s.mem.absent &^= 1 << pg
				done(true)
			})
		})
		s.e = ibrc.New(ibrc.Config{Port: ibrc.PortFunc(func(f []byte) error { s.out = append(s.out, f); return nil }),
			Clock: r.clk, MAC: macs[n], IPv4: ips[n], Pager: pager, RecvFaultPolicy: cfg.policy,
			MaxUnackedPSNs: cfg.maxUnacked, AckEvery: cfg.ackEvery})
		pd, other := s.e.CreatePD(), s.e.CreatePD()
		for i, sp := range pairMRSpecs {
			p := pd
			if i == pairMROther {
				p = other
			}
			mr, err := p.RegisterMR(s.mem, pairBase+sp.lo, sp.hi-sp.lo, sp.acc)
			if err != nil {
				t.Fatal(err)
			}
			s.mrs[i] = &pairMR{mr: mr, lo: pairBase + sp.lo, hi: pairBase + sp.hi, acc: sp.acc, samePD: i != pairMROther}
		}
		// Completions are polled after every engine call, and one call
		// completes at most the two queues' requests (a flush).
		s.scq, _ = s.e.CreateCQ(4 * pairMaxWR)
		s.rcq, _ = s.e.CreateCQ(4 * pairMaxWR)
		var err error
		s.qp, err = pd.CreateQP(ibrc.QPInit{SendCQ: s.scq, RecvCQ: s.rcq, Cap: ibrc.QPCap{MaxSendWR: pairMaxWR, MaxRecvWR: pairMaxWR,
			MaxSendSGE: cfg.sendSGEs, MaxRecvSGE: 4, MaxInline: cfg.inlineCap}})
		if err != nil {
			t.Fatal(err)
		}
		r.sides[n] = s
	}
	r.sides[0].peer, r.sides[1].peer = r.sides[1], r.sides[0]
	for n, s := range r.sides {
		must := func(a ibrc.QPAttr, m ibrc.AttrMask) {
			if err := s.qp.ModifyQP(&a, m); err != nil {
				t.Fatal(err)
			}
		}
		must(ibrc.QPAttr{State: ibrc.StateInit, PKey: 0xffff, AccessFlags: ibrc.AccessRemoteWrite | ibrc.AccessRemoteRead | ibrc.AccessRemoteAtomic},
			ibrc.AttrState|ibrc.AttrPKey|ibrc.AttrAccessFlags)
		must(ibrc.QPAttr{State: ibrc.StateRTR, PathMTU: cfg.mtu, DestQPN: s.peer.qp.Num(), RQPSN: cfg.psn[1-n],
			MaxDestRdAtomic: cfg.maxDestRd, MinRNRTimer: cfg.minRNR,
			AV: ibrc.AddressVector{DestMAC: macs[1-n], DGID: rocev2.GIDFromIPv4(ips[1-n])}},
			ibrc.AttrState|ibrc.AttrPathMTU|ibrc.AttrDestQPN|ibrc.AttrRQPSN|ibrc.AttrMaxDestRdAtomic|ibrc.AttrMinRNRTimer|ibrc.AttrAV)
		must(ibrc.QPAttr{State: ibrc.StateRTS, SQPSN: cfg.psn[n], Timeout: cfg.timeout, RetryCnt: cfg.retry,
			RNRRetry: cfg.rnrRetry, MaxRdAtomic: cfg.maxRd},
			ibrc.AttrState|ibrc.AttrSQPSN|ibrc.AttrTimeout|ibrc.AttrRetryCnt|ibrc.AttrRNRRetry|ibrc.AttrMaxRdAtomic)
	}
	return r
}

// pairProg reads a program.
type pairProg struct {
	b []byte
	i int
}

func (p *pairProg) more() bool { return p.i < len(p.b) }

func (p *pairProg) u8() uint8 {
	if p.i >= len(p.b) {
		p.i++
		return 0
	}
	p.i++
	return p.b[p.i-1]
}

func (p *pairProg) u16() uint16 { return uint16(p.u8()) | uint16(p.u8())<<8 }
func (p *pairProg) u32() uint32 { return uint32(p.u16()) | uint32(p.u16())<<16 }

func runPair(t *testing.T, in []byte) {
	cfg := decodePairConfig(in)
	r := newPairRig(t, cfg)
	p := &pairProg{b: in[min(8, len(in)):]}
	for ops := 0; p.more() && ops < pairMaxOps; ops++ {
		r.op(p, cfg)
		r.check()
	}
	r.drain()
	for _, s := range r.sides {
		if got := s.qp.SendsCompleted(); got != uint64(len(s.sends)) {
			t.Fatalf("side %d: %d of %d send requests completed once quiescent (QP in %v)", s.n, got, len(s.sends), s.qp.Query().State)
		}
		for _, w := range s.sends {
			if w.signal && w.done != 1 {
				t.Fatalf("side %d: signaled request %#x (%v) completed %d times", s.n, w.id, w.op, w.done)
			}
		}
	}
}

// op runs one operation of the program.
func (r *pairRig) op(p *pairProg, cfg pairConfig) {
	code := p.u8() % pairNumOps
	s := r.sides[p.u8()&1]
	switch code {
	case pairOpPost:
		r.post(s, p, cfg)
	case pairOpRecv:
		r.recv(s, p)
	case pairOpDeliver, pairOpDrop, pairOpDup, pairOpFlip, pairOpTruncate, pairOpForge:
		k := int(p.u8())
		if len(s.out) == 0 {
			return
		}
		k %= len(s.out)
		f := s.out[k]
		switch code {
		case pairOpDeliver:
			s.out = append(s.out[:k], s.out[k+1:]...)
		case pairOpDrop:
			s.out = append(s.out[:k], s.out[k+1:]...)
			return
		case pairOpDup:
			f = bytes.Clone(f)
		case pairOpFlip:
			s.out = append(s.out[:k], s.out[k+1:]...)
			pos, bit := int(p.u16())%len(f), p.u8()&7
			f[pos] ^= 1 << bit
		case pairOpTruncate:
			s.out = append(s.out[:k], s.out[k+1:]...)
			f = f[:int(p.u16())%len(f)]
		case pairOpForge:
			s.out = append(s.out[:k], s.out[k+1:]...)
			f = forge(f, p.u8(), p.u32())
			if f == nil {
				return
			}
			r.forged = true
		}
		s.peer.e.HandleFrame(f)
	case pairOpClock:
		for range int(p.u8()%16) + 1 {
			if !r.clk.Step() {
				break
			}
			r.check()
		}
	case pairOpDereg:
		m := s.mrs[int(p.u8())%pairNumMR]
		if !m.dead {
			m.dead = true
			if err := m.mr.Deregister(); err != nil {
				r.t.Fatalf("side %d: deregister: %v", s.n, err)
			}
		}
	case pairOpErr:
		if err := s.qp.ModifyQP(&ibrc.QPAttr{State: ibrc.StateErr}, ibrc.AttrState); err != nil {
			r.t.Fatalf("side %d: modify to ERR: %v", s.n, err)
		}
	case pairOpDeliverAll:
		for len(r.sides[0].out)+len(r.sides[1].out) > 0 {
			for _, s := range r.sides {
				if len(s.out) > 0 {
					f := s.out[0]
					s.out = s.out[1:]
					s.peer.e.HandleFrame(f)
					r.check()
				}
			}
		}
	}
}

// forge rewrites one field of a frame (BTH at 42: Ethernet, IPv4 without
// options, UDP, as the engine builds them) and repairs the lengths, IPv4
// checksum and ICRC, so that the frame reaches the transport.
func forge(f []byte, field uint8, v uint32) []byte {
	const bth = 14 + 20 + 8
	g := bytes.Clone(f)
	if len(g) < bth+rocev2.BTHLen+rocev2.ICRCLen {
		return nil
	}
	ext := bth + rocev2.BTHLen // RETH or AETH, if the opcode has one
	put24 := func(at int, x uint32) { g[at], g[at+1], g[at+2] = byte(x>>16), byte(x>>8), byte(x) }
	get24 := func(at int) uint32 { return uint32(g[at])<<16 | uint32(g[at+1])<<8 | uint32(g[at+2]) }
	room := func(at, n int) bool { return at+n <= len(g)-rocev2.ICRCLen }
	switch field % pairNumFields {
	case pairFieldOpcode:
		g[bth] = byte(v)
	case pairFieldPSNShift:
		put24(bth+9, get24(bth+9)+uint32(int32(int8(v))))
	case pairFieldPSN:
		put24(bth+9, v)
	case pairFieldDestQP:
		put24(bth+5, v)
	case pairFieldFlags:
		g[bth+1], g[bth+8] = byte(v), byte(v>>8)&0x80
	case pairFieldPKey:
		binary.BigEndian.PutUint16(g[bth+2:], uint16(v))
	case pairFieldRETHVA:
		if room(ext, 8) {
			va := binary.BigEndian.Uint64(g[ext:]) + uint64(int64(int16(v)))
			if v&0x10000 != 0 {
				va = pairBase + uint64(v>>17)
			}
			binary.BigEndian.PutUint64(g[ext:], va)
		}
	case pairFieldRETHKey:
		if room(ext+8, 4) {
			binary.BigEndian.PutUint32(g[ext+8:], v)
		}
	case pairFieldRETHLen:
		if room(ext+12, 4) {
			binary.BigEndian.PutUint32(g[ext+12:], v)
		}
	case pairFieldSyndrome:
		if room(ext, 1) {
			g[ext] = byte(v)
		}
	case pairFieldMSN:
		if room(ext+1, 3) {
			put24(ext+1, v)
		}
	case pairFieldPayload:
		body := len(g) - rocev2.ICRCLen - ext
		if body > 0 {
			g[ext+int(v>>8)%body] ^= byte(v) | 1
		}
	case pairFieldTruncate:
		// Shorter by whole bytes before the ICRC, lengths repaired.
		body := len(g) - rocev2.ICRCLen - bth
		cut := int(v)%body + 1
		g = append(g[:len(g)-rocev2.ICRCLen-cut], g[len(g)-rocev2.ICRCLen:]...)
	}
	return fixup(g)
}

// post posts a send work request on s.
func (r *pairRig) post(s *pairSide, p *pairProg, cfg pairConfig) {
	kind, lenb, mode := p.u8(), p.u8(), p.u8()
	a, b := uint64(p.u16()), uint64(p.u16())
	ops := [...]ibrc.WROpcode{ibrc.WRSend, ibrc.WRSendImm, ibrc.WRWrite, ibrc.WRWriteImm, ibrc.WRRead,
		ibrc.WRAtomicCmpSwp, ibrc.WRAtomicFetchAdd}
	op := ops[int(kind)%len(ops)]
	atomic := op == ibrc.WRAtomicCmpSwp || op == ibrc.WRAtomicFetchAdd
	w := &pairWR{id: s.nextID, op: op, signal: kind&0x08 == 0 || kind&0x10 != 0, imm: uint32(a)<<16 | uint32(b)}
	s.nextID++
	wr := ibrc.SendWR{ID: w.id, Opcode: op, Imm: w.imm}
	if w.signal {
		wr.Flags |= ibrc.SendSignaled
	}
	if kind&0x20 != 0 {
		wr.Flags |= ibrc.SendSolicited
	}
	if kind&0x40 != 0 {
		wr.Flags |= ibrc.SendFence
	}
	inline := kind&0x80 != 0 && op != ibrc.WRRead
	n := uint64(lenb) * 8
	peer := s.peer
	nsge := 1 + int(mode%3)
	if mode < 0xc0 {
		// Clean: sources in mrSrc, sinks and targets fresh from the
		// allocators.
		w.clean = true
		switch {
		case atomic:
			// A fresh aligned word of the peer's targets, returned into a
			// fresh sink.
			at := (peer.target + ibrc.AtomicSize - 1) &^ (ibrc.AtomicSize - 1)
			if at+ibrc.AtomicSize > pairTargetHi {
				return
			}
			if w.sink = s.alloc(ibrc.AtomicSize, 1+int(mode%2), mode&0x40 != 0); w.sink == nil {
				return
			}
			peer.target = at + ibrc.AtomicSize
			w.target = pairBase + at
			w.want = pairTemplate[peer.n][at : at+ibrc.AtomicSize]
			orig := binary.LittleEndian.Uint64(w.want)
			wr.RemoteAddr, wr.RKey, wr.SGL = w.target, peer.mrs[pairMRDst].mr.RKey(), w.sink
			wr.CompareAdd, wr.Swap = a<<16|b, b<<32|a
			w.word = orig + wr.CompareAdd
			if op == ibrc.WRAtomicCmpSwp {
				w.word = orig
				if mode&0x20 != 0 { // equal: swapped
					wr.CompareAdd, w.word = orig, wr.Swap
				}
			}
		case op == ibrc.WRRead:
			w.sink = s.alloc(n, nsge, mode&0x40 != 0)
			if w.sink == nil {
				return
			}
			off := pairSrcLo + a%(pairSrcHi-pairSrcLo-n+1)
			wr.RemoteAddr, wr.RKey = pairBase+off, peer.mrs[pairMRSrc].mr.RKey()
			wr.SGL = w.sink
			w.want = pairTemplate[peer.n][off : off+n]
		default:
			off := pairSrcLo + a%(pairSrcHi-pairSrcLo-n+1)
			w.want = pairTemplate[s.n][off : off+n]
			if inline {
				n = min(n, uint64(cfg.inlineCap))
				w.want = w.want[:n]
				wr.Flags |= ibrc.SendInline
				wr.Inline = w.want
			} else {
				wr.SGL = split(pairBase+off, n, nsge, s.mrs[pairMRSrc].mr.LKey())
			}
			if op == ibrc.WRWrite || op == ibrc.WRWriteImm {
				if peer.target+n > pairTargetHi {
					return
				}
				w.target = pairBase + peer.target
				peer.target += n
				wr.RemoteAddr, wr.RKey = w.target, peer.mrs[pairMRDst].mr.RKey()
			}
		}
	} else {
		// Wild: SGEs and remote addresses around region boundaries, any
		// key, any length.
		for range 1 + int(mode%4) {
			wr.SGL = append(wr.SGL, s.wildSGE(p))
		}
		g := peer.wildSGE(p)
		wr.RemoteAddr, wr.RKey = g.Addr, g.LKey
		if op != ibrc.WRRead && inline {
			m := min(uint64(lenb), uint64(cfg.inlineCap)+uint64(mode&1))
			wr.SGL, wr.Flags, wr.Inline = nil, wr.Flags|ibrc.SendInline, pairTemplate[s.n][:m]
		}
		if atomic && mode&0x10 != 0 && len(wr.SGL) > 0 {
			// Posted as it must be (8 bytes, not inline), so that the
			// wild address and key reach the peer.
			wr.SGL, wr.Flags, wr.Inline = wr.SGL[:1], wr.Flags&^ibrc.SendInline, nil
			wr.SGL[0].Length = ibrc.AtomicSize
			wr.CompareAdd, wr.Swap = a, b
		}
		if mode&0x20 != 0 && op == ibrc.WRRead {
			// A huge READ: 2^31 bytes over four SGEs.
			for i := range wr.SGL {
				wr.SGL[i].Length = 1 << 29
			}
			wr.SGL = append(wr.SGL, make([]ibrc.SGE, 4-len(wr.SGL))...)
			for i := range wr.SGL {
				wr.SGL[i].Length = 1 << 29
			}
		}
	}
	w.length = sgeLen(wr.SGL)
	if wr.Flags&ibrc.SendInline != 0 {
		w.length = uint64(len(wr.Inline))
	}
	// The engine may gather the first packets before PostSend returns.
	nr, nw := len(s.reads), len(s.writes)
	s.allow(wr.SGL, op == ibrc.WRRead || atomic)
	if err := s.qp.PostSend(wr); err != nil {
		s.reads, s.writes = s.reads[:nr], s.writes[:nw]
		return // refused: it does not exist
	}
	w.consume = op == ibrc.WRSend || op == ibrc.WRSendImm || op == ibrc.WRWriteImm
	s.sends = append(s.sends, w)
	s.sendIDs[w.id] = w
	if w.consume {
		s.msgs = append(s.msgs, w)
	}
}

// recv posts a receive work request on s.
func (r *pairRig) recv(s *pairSide, p *pairProg) {
	lenb, mode := p.u8(), p.u8()
	_ = p.u16()
	v := &pairRecv{id: s.nextID}
	s.nextID++
	wr := ibrc.RecvWR{ID: v.id}
	if mode < 0xc0 {
		v.clean = true
		wr.SGL = s.alloc(uint64(lenb)*8+uint64(mode&7), 1+int(mode%4), mode&0x40 != 0)
		if wr.SGL == nil {
			return
		}
	} else {
		for range int(mode % 5) {
			wr.SGL = append(wr.SGL, s.wildSGE(p))
		}
	}
	v.sgl, v.length = wr.SGL, sgeLen(wr.SGL)
	nw := len(s.writes)
	s.allow(wr.SGL, true)
	if err := s.qp.PostRecv(wr); err != nil {
		s.writes = s.writes[:nw]
		return
	}
	s.recvs = append(s.recvs, v)
	s.recvIDs[v.id] = v
}

// alloc takes n bytes of a clean sink area (mrLocal's or mrDst's) and
// returns them as an SGL of up to nsge pieces; nil when the area is used
// up.
func (s *pairSide) alloc(n uint64, nsge int, local bool) []ibrc.SGE {
	cur, hi, mr := &s.sink, uint64(pairSinkHi), s.mrs[pairMRDst]
	if local {
		cur, hi, mr = &s.lsink, pairLSinkHi, s.mrs[pairMRLocal]
	}
	if *cur+n > hi {
		return nil
	}
	sgl := split(pairBase+*cur, n, nsge, mr.mr.LKey())
	*cur += n
	return sgl
}

// split cuts [addr, addr+n) into up to k SGEs (an empty range: none).
func split(addr, n uint64, k int, key uint32) []ibrc.SGE {
	var sgl []ibrc.SGE
	for i := range k {
		l := n / uint64(k)
		if i == k-1 {
			l = n - l*uint64(k-1)
		}
		if l > 0 {
			sgl = append(sgl, ibrc.SGE{Addr: addr, Length: uint32(l), LKey: key})
		}
		addr += l
	}
	return sgl
}

func sgeLen(sgl []ibrc.SGE) uint64 {
	var n uint64
	for _, g := range sgl {
		n += uint64(g.Length)
	}
	return n
}

// wildSGE reads an SGE aimed at a boundary of s's regions: within
// pairWindow of it, at most 255 bytes long (or, rarely, huge), under any
// of s's keys or none.
func (s *pairSide) wildSGE(p *pairProg) ibrc.SGE {
	win, off, l, key := p.u8(), p.u8(), p.u8(), p.u8()
	addr := pairBase + pairBounds[int(win)%len(pairBounds)] - pairWindow + uint64(off)<<1
	length := uint32(l)
	if win&0x80 != 0 {
		length = ^uint32(0) - uint32(l)
	}
	var k uint32
	switch i := int(key) % (pairNumMR + 2); {
	case i < pairNumMR:
		k = s.mrs[i].mr.LKey()
	case i == pairNumMR:
		k = s.mrs[pairMRDst].mr.LKey() ^ 0x100
	}
	return ibrc.SGE{Addr: addr, Length: length, LKey: k}
}

// dataChecks reports whether completed data must be intact: nothing was
// forged.
func (r *pairRig) dataChecks() bool {
	return !r.forged
}

// check polls both sides' completions and checks them, the fences and the
// outboxes.
func (r *pairRig) check() {
	t := r.t
	var wcs [64]ibrc.WC
	for _, s := range r.sides {
		if len(s.fences) > 0 {
			t.Fatal(s.fences[0])
		}
		if len(s.out) > pairMaxQueued {
			t.Fatalf("side %d: %d frames waiting", s.n, len(s.out))
		}
		for {
			k := s.scq.Poll(wcs[:])
			for _, wc := range wcs[:k] {
				r.sendWC(s, wc)
			}
			if k == 0 {
				break
			}
		}
		for {
			k := s.rcq.Poll(wcs[:])
			for _, wc := range wcs[:k] {
				r.recvWC(s, wc)
			}
			if k == 0 {
				break
			}
		}
		if s.scq.Overflowed() || s.rcq.Overflowed() {
			t.Fatalf("side %d: a CQ overflowed", s.n)
		}
	}
}

func wcOpcodeOf(op ibrc.WROpcode) ibrc.WCOpcode {
	switch op {
	case ibrc.WRWrite, ibrc.WRWriteImm:
		return ibrc.WCRDMAWrite
	case ibrc.WRRead:
		return ibrc.WCRDMARead
	case ibrc.WRAtomicCmpSwp:
		return ibrc.WCCompSwap
	case ibrc.WRAtomicFetchAdd:
		return ibrc.WCFetchAdd
	}
	return ibrc.WCSend
}

func (r *pairRig) sendWC(s *pairSide, wc ibrc.WC) {
	t := r.t
	w := s.sendIDs[wc.WRID]
	switch {
	case w == nil:
		t.Fatalf("side %d: send completion %+v for a request never posted", s.n, wc)
	case w.done > 0:
		t.Fatalf("side %d: request %#x (%v) completed again: %+v", s.n, w.id, w.op, wc)
	case wc.QPN != s.qp.Num():
		t.Fatalf("side %d: completion %+v on QP %#x", s.n, wc, wc.QPN)
	case wc.WRID <= s.lastID:
		t.Fatalf("side %d: request %#x completed after %#x, posted later", s.n, wc.WRID, s.lastID)
	case wc.Opcode != wcOpcodeOf(w.op):
		t.Fatalf("side %d: %v request %#x completed as opcode %d", s.n, w.op, w.id, wc.Opcode)
	case wc.Status == ibrc.WCSuccess && uint64(wc.ByteLen) != w.length:
		t.Fatalf("side %d: %v request %#x of %d bytes completed with byte_len %d", s.n, w.op, w.id, w.length, wc.ByteLen)
	case wc.Status == ibrc.WCSuccess && !w.signal:
		t.Fatalf("side %d: unsignaled request %#x completed with a CQE", s.n, w.id)
	}
	w.done++
	s.lastID = wc.WRID
	if wc.Status != ibrc.WCSuccess || !w.clean || !r.dataChecks() {
		return
	}
	switch w.op {
	case ibrc.WRRead:
		if got := s.gather(w.sink, w.length); !bytes.Equal(got, w.want) {
			t.Fatalf("side %d: READ %#x of %d bytes succeeded, sink differs from the peer's source at byte %d", s.n, w.id, w.length, diffAt(got, w.want))
		}
	case ibrc.WRWrite, ibrc.WRWriteImm:
		off := w.target - pairBase
		if got := s.peer.mem.data[off : off+w.length]; !bytes.Equal(got, w.want) {
			t.Fatalf("side %d: WRITE %#x of %d bytes succeeded, target differs at byte %d", s.n, w.id, w.length, diffAt(got, w.want))
		}
	case ibrc.WRAtomicCmpSwp, ibrc.WRAtomicFetchAdd:
		if got := s.gather(w.sink, ibrc.AtomicSize); !bytes.Equal(got, w.want) {
			t.Fatalf("side %d: %v %#x succeeded, returned %x, the word was %x", s.n, w.op, w.id, got, w.want)
		}
		off := w.target - pairBase
		if got := binary.LittleEndian.Uint64(s.peer.mem.data[off:]); got != w.word {
			t.Fatalf("side %d: %v %#x succeeded, left the word %#x, want %#x (executed once)", s.n, w.op, w.id, got, w.word)
		}
	}
}

func (r *pairRig) recvWC(s *pairSide, wc ibrc.WC) {
	t := r.t
	v := s.recvIDs[wc.WRID]
	switch {
	case v == nil:
		t.Fatalf("side %d: receive completion %+v for a request never posted", s.n, wc)
	case v.done > 0:
		t.Fatalf("side %d: receive %#x completed again: %+v", s.n, v.id, wc)
	case wc.QPN != s.qp.Num():
		t.Fatalf("side %d: receive completion %+v on QP %#x", s.n, wc, wc.QPN)
	case wc.Opcode != ibrc.WCRecv && wc.Opcode != ibrc.WCRecvRDMAImm:
		t.Fatalf("side %d: receive %#x completed as opcode %d", s.n, v.id, wc.Opcode)
	}
	v.done++
	if wc.Status != ibrc.WCSuccess {
		return
	}
	j := s.recvOK
	s.recvOK++
	if j >= len(s.recvs) || s.recvs[j] != v {
		t.Fatalf("side %d: receive %#x completed as the %d-th success, the %d-th posted is %#x", s.n, v.id, j, j, s.recvs[j].id)
	}
	if !r.dataChecks() {
		return
	}
	peer := s.peer
	if j >= len(peer.msgs) {
		t.Fatalf("side %d: %d receives succeeded, the peer posted %d requests that take one", s.n, j+1, len(peer.msgs))
	}
	m := peer.msgs[j]
	wantOp, imm := ibrc.WCRecv, m.op != ibrc.WRSend
	if m.op == ibrc.WRWriteImm {
		wantOp = ibrc.WCRecvRDMAImm
	}
	switch {
	case wc.Opcode != wantOp:
		t.Fatalf("side %d: receive %#x completed as opcode %d for the peer's %v %#x", s.n, v.id, wc.Opcode, m.op, m.id)
	case uint64(wc.ByteLen) != m.length:
		t.Fatalf("side %d: receive %#x of %d bytes for the peer's %v %#x of %d", s.n, v.id, wc.ByteLen, m.op, m.id, m.length)
	case imm != (wc.Flags&ibrc.WCWithImm != 0) || imm && wc.Imm != m.imm:
		t.Fatalf("side %d: receive %#x has immediate %v %#x, the peer's %v %#x sent %#x", s.n, v.id, wc.Flags&ibrc.WCWithImm != 0, wc.Imm, m.op, m.id, m.imm)
	}
	if m.op == ibrc.WRWriteImm || !m.clean || !v.clean {
		return
	}
	if got := s.gather(v.sgl, m.length); !bytes.Equal(got, m.want) {
		t.Fatalf("side %d: receive %#x of the peer's %v %#x differs at byte %d", s.n, v.id, m.op, m.id, diffAt(got, m.want))
	}
}

// gather returns the first n bytes an SGL of clean ranges holds.
func (s *pairSide) gather(sgl []ibrc.SGE, n uint64) []byte {
	var b []byte
	for _, g := range sgl {
		off := g.Addr - pairBase
		b = append(b, s.mem.data[off:off+uint64(g.Length)]...)
	}
	return b[:min(n, uint64(len(b)))]
}

func diffAt(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// drain delivers every frame faithfully and runs the clock until neither
// has anything left, within pairMaxDrain steps.
func (r *pairRig) drain() {
	for steps := 0; ; steps++ {
		if steps == pairMaxDrain {
			a, b := r.sides[0], r.sides[1]
			r.t.Fatalf("no quiescence after %d steps: %d and %d frames waiting, %d timers, QPs in %v and %v",
				steps, len(a.out), len(b.out), r.clk.Pending(), a.qp.Query().State, b.qp.Query().State)
		}
		moved := false
		for _, s := range r.sides {
			if len(s.out) > 0 {
				f := s.out[0]
				s.out = s.out[1:]
				s.peer.e.HandleFrame(f)
				moved = true
			}
		}
		if !moved && !r.clk.Step() {
			return
		}
		r.check()
	}
}

// TestRCPairSeedFiles: the seed files are pairSeeds's programs
// (NPFNIC_WRITE_SEEDS=1 writes them).
func TestRCPairSeedFiles(t *testing.T) {
	if err := fuzzseed.Check("testdata/fuzz/FuzzRCPair", pairSeeds()); err != nil {
		t.Fatal(err)
	}
}

// pairSeeds are programs that reach deep states at once, by seed file
// name.
func pairSeeds() map[string][]byte {
	cfg := []byte{0, 0x1a, 2, 8, 0, 0, 0x22, 0}
	post := func(side, kind, lenb, mode byte, a, b uint16) []byte {
		return []byte{pairOpPost, side, kind, lenb, mode, byte(a), byte(a >> 8), byte(b), byte(b >> 8)}
	}
	recv := func(side, lenb, mode byte) []byte { return []byte{pairOpRecv, side, lenb, mode, 0, 0} }
	all := []byte{pairOpDeliverAll, 0}
	clk := []byte{pairOpClock, 0, 15}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	// Both sides: receives, then a SEND, a SEND with immediate, a WRITE,
	// a WRITE with immediate and a READ each, all multi-packet, and
	// atomics: a CMP_AND_SWP that swaps, one that does not, FETCH_AND_ADDs
	// (one returning into mrLocal over two SGEs), and one with a wild
	// address and key.
	traffic := cat(recv(0, 100, 1), recv(0, 100, 2), recv(1, 100, 0), recv(1, 100, 3),
		post(0, 0, 90, 2, 10, 0), post(1, 1, 70, 1, 300, 0), post(0, 2, 80, 2, 999, 0), post(1, 3, 33, 0, 5, 0),
		post(0, 4, 120, 0x42, 4000, 0), post(1, 4, 200, 2, 7, 0),
		post(0, 5, 1, 0x20, 3, 4), post(1, 5, 1, 0, 5, 6), post(0, 6, 1, 0x41, 7, 8), post(1, 6, 1, 1, 0xffff, 0xffff),
		post(0, 5, 1, 0xd3, 0x40, 0x81))
	lossy := cat(traffic, []byte{pairOpDrop, 0, 0, pairOpDup, 1, 1, pairOpDeliver, 0, 2, pairOpFlip, 1, 0, 60, 0, 3,
		pairOpTruncate, 0, 1, 50, 0}, all, clk, all, clk, all)
	forged := cat(traffic, []byte{pairOpForge, 0, 0, pairFieldPSNShift, 2, 0, 0, 0, pairOpForge, 1, 0, pairFieldSyndrome, 0x60, 0, 0, 0,
		pairOpForge, 0, 1, pairFieldRETHLen, 0, 0, 0, 0x80}, all, clk, all)
	// A huge READ: four SGEs of 2^29 bytes, wild around mrDst's start.
	huge := cat(cfg, post(0, 4, 1, 0xe1, 0, 0), []byte{1, 0x80, 8, 1, 1, 0x80, 8, 1, 0, 0x80, 0, 0}, all, clk, all)
	faults := append([]byte{0, 0x1a, 2, 8, 0xff, 0x21, 0x22, 0}, traffic...)
	wrap := append([]byte{1, 0x1a, 2, 3, 0, 0, 0x22, 0x88}, cat(traffic, all, clk, all)...)
	dereg := cat(traffic, []byte{pairOpDeliver, 0, 0, pairOpDereg, 1, pairMRDst, pairOpDereg, 1, pairMRSrc}, all, clk, all)
	return map[string][]byte{
		"seed-traffic":   cat(cfg, traffic, all, clk, all),
		"seed-lossy":     cat(cfg, lossy),
		"seed-forged":    cat(cfg, forged),
		"seed-huge-read": huge,
		"seed-faults":    cat(faults, all, clk, all, clk, all),
		"seed-psn-wrap":  wrap,
		"seed-dereg":     cat(cfg, dereg),
		"seed-qp-to-err": cat(cfg, traffic, []byte{pairOpErr, 1}, all, clk, all),
	}
}
