package ethring

import (
	"encoding/binary"
	"testing"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// sinkPort records what the TX engine sends and checks each frame's length.
type sinkPort struct {
	t      *testing.T
	frames int
}

func (s *sinkPort) Send(f []byte) error {
	if len(f) < hw.MinFrame || len(f) > hw.MaxFrame {
		s.t.Fatalf("sent a %d-byte frame", len(f))
	}
	s.frames++
	return nil
}
func (s *sinkPort) Recv([]byte) (int, error) { select {} }
func (s *sinkPort) Close() error             { return nil }

// FuzzTX runs the TX engine over arbitrary guest memory (descriptors and
// buffers alike) and arbitrary ring registers and doorbells. Whatever the
// input: no panic, no more descriptors consumed than posted, no frame of a
// bad length on the wire, and no guest memory written except the pair's
// status.
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
		d := New(Config{Mem: mem, Wire: nil, QueuePairs: 1})
		defer d.Close()
		d.wire = sink // TX only: no reader goroutine for the sink
		d.enabled.Store(true)
		d.status.Store(fuzzIOVA + statusOff | statusValid)

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
		own := statusOff + uint64(hw.StatusQPOffset(0))
		for i := statusOff; i < uint64(len(ram)); i++ {
			if (i < own || i >= own+hw.QPStatusSize) && ram[i] != 0 {
				t.Fatalf("TX engine wrote the status block outside pair 0's part at +%#x", i-statusOff)
			}
		}
	})
}

const (
	fuzzIOVA = 0x40_0000
	fuzzSize = 4 * 4096
)
