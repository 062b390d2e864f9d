package vfiouser

import (
	"encoding/binary"
	"github.com/npfnic/npfnic/internal/fuzzseed"
	"testing"
)

// go's fuzz workers die silently; keep what the runtime says (ci/fuzz.sh).
func init() { fuzzseed.KeepCrashOutput() }

// FuzzDecodeMessage runs every decoder over arbitrary frames. Decoders see
// untrusted client bytes and must never panic; this also checks that a
// successful decode stays inside the input.
func FuzzDecodeMessage(f *testing.F) {
	frame := func(cmd Command, flags uint32, p []byte) []byte {
		b := make([]byte, HeaderSize, HeaderSize+len(p))
		b = append(b, p...)
		Header{ID: 1, Command: cmd, Size: uint32(len(b)), Flags: flags}.Put(b)
		return b
	}
	f.Add(frame(CmdVersion, 0, Version{JSON: []byte(`{"capabilities":{"max_msg_fds":16,"pgsizes":4096}}`)}.Append(nil)))
	f.Add(frame(CmdDMAMap, 0, DMAMap{Argsz: 32, Flags: 3, IOVA: 0x1000, Size: 0x1000}.Append(nil)))
	f.Add(frame(CmdDMAUnmap, 0, DMAUnmap{Argsz: 24, IOVA: 0x1000, Size: 0x1000}.Append(nil)))
	f.Add(frame(CmdGetRegionInfo, 0, RegionInfoMsg{Argsz: 32, Index: 7}.Append(nil)))
	f.Add(frame(CmdSetIRQs, 0, IRQSet{Argsz: 23, Flags: IRQSetDataBool | IRQSetActionTrigger, Index: 2, Count: 3, Data: []byte{1, 0, 1}}.Append(nil)))
	f.Add(frame(CmdRegionWrite, FlagNoReply, append(RegionAccess{Offset: 8, Count: 4}.AppendHeader(nil), 1, 2, 3, 4)))
	f.Add(frame(CmdRegionWriteMulti, 0, append(binary.LittleEndian.AppendUint64(nil, 1), make([]byte, 24)...)))
	f.Add(frame(CmdDMARead, FlagTypeReply, AppendDMAAccess(nil, DMALayoutQEMU, 0x1000, 4, []byte{1, 2, 3, 4})))
	f.Add([]byte{1, 0, 2, 0, 8, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			return
		}
		if int(m.Size) != len(b) || len(m.Payload) != len(b)-HeaderSize {
			t.Fatalf("frame size %d for %d bytes", m.Size, len(b))
		}
		p := m.Payload
		_, _ = DecodeVersion(p)
		if v, err := DecodeVersion(p); err == nil {
			_, _ = ParseCaps(v.JSON)
		}
		_, _ = DecodeDMAMap(p)
		_, _ = DecodeDMAUnmap(p)
		_, _ = DecodeDeviceInfo(p)
		_, _ = DecodeRegionInfo(p)
		_, _ = DecodeIRQInfo(p)
		if s, err := DecodeIRQSet(p); err == nil && s.Flags&IRQSetDataBool != 0 && uint32(len(s.Data)) != s.Count {
			t.Fatalf("bool data %d for count %d", len(s.Data), s.Count)
		}
		if a, err := DecodeRegionAccess(p, true); err == nil && uint32(len(a.Data)) != a.Count {
			t.Fatalf("region data %d for count %d", len(a.Data), a.Count)
		}
		_, _ = DecodeRegionAccess(p, false)
		_, _ = DecodeWriteMulti(p, func(a RegionAccess) error {
			if uint32(len(a.Data)) != a.Count {
				t.Fatalf("multi data %d for count %d", len(a.Data), a.Count)
			}
			return nil
		})
		for _, l := range []DMALayout{DMALayoutQEMU, DMALayoutSpec} {
			if _, c, d, err := DecodeDMAReply(p, l, true); err == nil && uint64(len(d)) != c {
				t.Fatalf("dma data %d for count %d", len(d), c)
			}
		}
	})
}
