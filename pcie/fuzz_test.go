package pcie

import (
	"encoding/binary"
	"github.com/npfnic/npfnic/internal/fuzzseed"
	"testing"
)

// go's fuzz workers die silently; keep what the runtime says (ci/fuzz.sh).
func init() { fuzzseed.KeepCrashOutput() }

// FuzzConfigWrite feeds arbitrary write sequences to the config space and
// checks the invariants untrusted guests must not break: no panic, read-only
// identity fields and the capability chains unchanged, BARs naturally
// aligned to their size.
//
// Input format: repeated records of [offset lo, offset hi, len, data...].
func FuzzConfigWrite(f *testing.F) {
	f.Add([]byte{0x10, 0, 4, 0xff, 0xff, 0xff, 0xff})                          // BAR0 sizing
	f.Add([]byte{0x04, 0, 2, 0xff, 0xff, 0x06, 0, 2, 0xff, 0xff})              // command + W1C status
	f.Add([]byte{0x06, 0x01, 2, 0xff, 0xff, 0x14, 0x01, 2, 0x03, 0x00})        // ATS ctrl, PRI ctrl
	f.Add([]byte{0x00, 0x01, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // clobber ext header
	f.Add([]byte{0xff, 0x0f, 8, 1, 2, 3, 4, 5, 6, 7, 8})                       // crosses the end
	f.Add([]byte{0x40, 0, 255})

	base := testConfig()
	ref := mustBuild(f, base)
	refLegacy, refExt := walkCaps(f, ref)
	refData := ref.Snapshot()

	f.Fuzz(func(t *testing.T, in []byte) {
		s := mustBuild(t, base)
		for len(in) >= 3 {
			off := int(binary.LittleEndian.Uint16(in)) & 0x1fff // also beyond 4096
			n := int(in[2])
			in = in[3:]
			if n > len(in) {
				n = len(in)
			}
			err := s.Write(off, in[:n])
			if (off+n > Size) != (err != nil) {
				t.Fatalf("Write(%#x, %d) err=%v", off, n, err)
			}
			in = in[n:]
			var rb [8]byte
			_ = s.Read(off, rb[:])
		}
		legacy, ext := walkCaps(t, s)
		if string(legacy) != string(refLegacy) || len(ext) != len(refExt) {
			t.Fatalf("capability chain changed: %x %x", legacy, ext)
		}
		data := s.Snapshot()
		for _, off := range []int{OffVendorID, OffDeviceID, OffRevision, OffClassProg, OffHeaderType, OffCapPtr, OffSubsysVendor, OffSubsysID} {
			if data[off] != refData[off] || data[off+1] != refData[off+1] {
				t.Fatalf("read-only field at %#x changed", off)
			}
		}
		for i := 0; i < 6; i++ {
			b := s.BARInfo(i)
			if b.Size == 0 {
				continue
			}
			addr, ok := s.BARAddress(i)
			if !ok || addr&(b.Size-1) != 0 {
				t.Fatalf("BAR%d address %#x not aligned to %#x", i, addr, b.Size)
			}
		}
		if s.PRIAllocation() != 0 && s.PRICapacity() != 64 {
			t.Fatal("PRI capacity changed")
		}
		if st := s.PRIStatus(); st&PRIStatusPASIDNeeded == 0 {
			t.Fatal("PRI PASID-required bit lost")
		}
	})
}
