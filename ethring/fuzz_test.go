package ethring

import (
	"encoding/binary"
	"testing"

	"github.com/npfnic/npfnic/internal/fuzzseed"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/pkthdr"
)

// go's fuzz workers die silently; keep what the runtime says (ci/fuzz.sh).
func init() { fuzzseed.KeepCrashOutput() }

// sinkPort records what the TX engine sends and checks each frame's length:
// at most hw.MaxFrame, or a TSO segment's headers and mss.
type sinkPort struct {
	t      *testing.T
	frames int
}

func (s *sinkPort) Send(f []byte) error {
	if len(f) < hw.MinFrame || len(f) > max(hw.MaxFrame, tsoMaxHdr+hw.TSOMaxMSS) {
		s.t.Fatalf("sent a %d-byte frame", len(f))
	}
	s.frames++
	return nil
}
func (s *sinkPort) Recv([]byte) (int, error) { select {} }
func (s *sinkPort) Close() error             { return nil }

// FuzzTX runs the TX engine over arbitrary guest memory (descriptors and
// buffers alike, so offload flags, mss, csum_start and csum_offset too) and
// arbitrary ring registers and doorbells. Whatever the input: no panic, no
// more descriptors consumed than posted, no frame of a bad length on the
// wire, and no guest memory written except the pair's status.
func FuzzTX(f *testing.F) {
	// A well-formed ring as the seed: 2 frames, the second in 2 segments.
	seed := make([]byte, 256)
	put := func(i int, addr uint64, n, flags uint16) {
		binary.LittleEndian.PutUint64(seed[i*16:], addr)
		binary.LittleEndian.PutUint16(seed[i*16+8:], n)
		binary.LittleEndian.PutUint16(seed[i*16+10:], flags)
	}
	put(0, fuzzIOVA+0x1000, 60, hw.TxdEOP)
	put(1, fuzzIOVA+0x2000, 14, 0)
	put(2, fuzzIOVA+0x2ff0, 100, hw.TxdEOP)
	f.Add(seed, uint32(0), uint8(3), uint32(3), uint32(2), uint32(3))
	f.Add([]byte{0xff}, uint32(0x3ff8), uint8(0), uint32(1), uint32(0), uint32(0xffffffff))
	f.Add(make([]byte, 64), uint32(0xfff0), uint8(9), uint32(8), uint32(9), uint32(7))
	f.Add(offloadSeed(f), uint32(64), uint8(4), uint32(3), uint32(5), uint32(11))

	f.Fuzz(func(t *testing.T, data []byte, baseOff uint32, sizeLog uint8, tail1, tail2, tail3 uint32) {
		ram := make([]byte, fuzzSize)
		if len(data) > 0 {
			for i := 0; i < len(ram); i += len(data) {
				copy(ram[i:], data)
			}
		}
		statusOff := uint64(fuzzSize - hw.StatusBlockSize)
		clear(ram[statusOff:])
		orig := append([]byte(nil), ram...)
		mem := guestmem.New()
		if err := mem.MapHost(fuzzIOVA, ram, guestmem.ProtRead|guestmem.ProtWrite, nil); err != nil {
			t.Fatal(err)
		}
		sink := &sinkPort{t: t}
		d, err := New(Config{Mem: mem, QueuePairs: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		d.wire = sink // TX only: no reader goroutine for the sink
		d.enabled.Store(true)
		d.status.Store(&statusBlock{addr: fuzzIOVA + statusOff, dma: mem.NewStream("status")})

		p := d.Pair(0)
		size := uint32(1) << (sizeLog % 14) // 1..8192: valid and invalid sizes
		base := fuzzIOVA + uint64(baseOff%(2*fuzzSize)) - 64
		in := newInstance(p, base, size, fuzzIOVA, 8)
		p.inst.Store(in)
		if in.tx.valid && in.checkRing(&in.tx, hw.TxDescSize) != nil {
			in.fail(hw.QErrBadRing, 0, nil)
		}
		for _, tail := range []uint32{tail1, tail2, tail3} {
			p.doorbell(true, tail)
			before := in.tx.head.Load()
			if in.err.Load() == 0 && in.tx.valid {
				in.txRun()
			}
			head := in.tx.head.Load()
			if head-before > in.tx.tail.Load()-before {
				t.Fatalf("consumed past the tail: head %d tail %d", head, in.tx.tail.Load())
			}
		}
		for i := range ram[:statusOff] {
			if ram[i] != orig[i] {
				t.Fatalf("TX engine wrote guest memory at %#x", fuzzIOVA+uint64(i))
			}
		}
		own := statusOff + uint64(hw.StatusPairOffset(0))
		for i := statusOff; i < uint64(len(ram)); i++ {
			if (i < own || i >= own+hw.PairStatusSize) && ram[i] != 0 {
				t.Fatalf("TX engine wrote the status block outside pair 0's part at +%#x", i-statusOff)
			}
		}
	})
}

const (
	fuzzIOVA = 0x40_0000
	fuzzSize = 4 * 4096
)

// offloadSeed is a 4 KiB image (repeated over the fuzz memory) whose ring,
// at its start, posts a TSO4 super-packet (3 descriptors, the payload
// descriptors reusing one buffer), a TSO6|CSUM one (2) and a CSUM frame
// (2); the headers are at 0x200 and 0x300, the payload at 0x400.
func offloadSeed(f testing.TB) []byte {
	img := make([]byte, 4096)
	h4 := pkt{payload: pattern(10, 1), psh: true, fin: true}.build(f)[:54]
	h6 := pkt{v6: true, payload: pattern(10, 2), cwr: true, tsOpt: true}.build(f)[:86]
	copy(img[0x200:], h4)
	copy(img[0x300:], h6)
	copy(img[0x400:], pattern(0xc00, 3))
	type d struct {
		off, n, flags, mss uint16
		start, csumOff     uint8
	}
	for i, e := range []d{
		{0x200, 54, hw.TxdTSO4, 100, 34, 16},
		{0x400, 1000, 0, 0, 0, 0},
		{0x400, 1000, hw.TxdEOP, 0, 0, 0},
		{0x300, 86, hw.TxdTSO6 | hw.TxdCsum, 536, 54, 16},
		{0x400, 3000, hw.TxdEOP, 0, 0, 0},
		{0x200, 54, hw.TxdCsum, 0, 34, 16},
		{0x400, 200, hw.TxdEOP, 0, 0, 0},
	} {
		b := img[i*hw.TxDescSize:]
		hw.TxDescAddr.Put(b, fuzzIOVA+uint64(e.off))
		hw.TxDescLen.Put(b, e.n)
		hw.TxDescFlags.Put(b, e.flags)
		hw.TxDescMSS.Put(b, e.mss)
		hw.TxDescCsumStart.Put(b, e.start)
		hw.TxDescCsumOffset.Put(b, e.csumOff)
	}
	return img
}

// FuzzRXChecksum feeds arbitrary frames to the RX checksum check: no
// panic, and a frame it accepts is rejected once its last transport byte
// changes.
func FuzzRXChecksum(f *testing.F) {
	f.Add(pkt{payload: pattern(100, 1)}.build(f))
	f.Add(pkt{v6: true, udp: true, vlan: true, payload: pattern(33, 2)}.build(f))
	f.Add([]byte{0, 1, 2})
	f.Fuzz(func(t *testing.T, frame []byte) {
		if !frameCsumOK(frame) {
			return
		}
		var h pkthdr.Headers
		_ = h.Parse(frame)
		end := h.IPEnd
		if h.IsUDP() {
			end = h.L4 + int(binary.BigEndian.Uint16(frame[h.L4+udpLen:]))
		}
		frame[end-1] ^= 1
		if frameCsumOK(frame) {
			t.Fatalf("accepted with its last byte changed: % x", frame)
		}
	})
}
