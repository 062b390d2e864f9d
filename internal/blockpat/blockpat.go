// Package blockpat is the known content of the storage experiment's disk
// (npfnic exp storage): every 8-byte word holds its own byte offset XOR
// Magic, little-endian, so a block read from anywhere says where it came
// from. The host writes the disk image with it and the guest's reader
// (npfnic-guest randread) checks every block it reads against it.
package blockpat

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Magic keeps a zeroed block (or one read from offset 0) from passing.
const Magic = 0x6e7066_6e69635f

// Fill writes the pattern of the bytes at off into b; off and len(b)
// must be multiples of 8.
func Fill(b []byte, off int64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], uint64(off+int64(i))^Magic)
	}
}

// Check says where b, read at off, differs from the pattern.
func Check(b []byte, off int64) error {
	for i := 0; i+8 <= len(b); i += 8 {
		want := uint64(off+int64(i)) ^ Magic
		if got := binary.LittleEndian.Uint64(b[i:]); got != want {
			return fmt.Errorf("offset %d: read %#x, want %#x (the word of offset %d)", off+int64(i), got, want, int64(got^Magic))
		}
	}
	return nil
}

// Write writes size bytes of the pattern to w, from offset 0.
func Write(w io.Writer, size int64) error {
	if size%8 != 0 {
		return fmt.Errorf("blockpat: size %d is not a multiple of 8", size)
	}
	b := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(b)) {
		n := min(int64(len(b)), size-off)
		Fill(b[:n], off)
		if _, err := w.Write(b[:n]); err != nil {
			return err
		}
	}
	return nil
}
