package rocev2

import "testing"

// BenchmarkFrame builds and decodes one 4 KiB RDMA WRITE MIDDLE packet per
// iteration: the per-packet cost of the wire format on either side of an
// RC stream (a WRITE at MTU 4096).
func BenchmarkFrame(b *testing.B) {
	p := Path{SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: [4]byte{192, 0, 2, 1}, DstIP: [4]byte{192, 0, 2, 2}, SrcPort: 0xc000}
	h := Headers{BTH: BTH{Opcode: OpWriteMiddle, DestQP: 0x11, PSN: 7, PKey: 0xffff}}
	payload := make([]byte, 4096)
	b.Run("build", func(b *testing.B) {
		var f []byte
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		for b.Loop() {
			f = AppendFrame(f[:0], &p, &h, payload)
		}
	})
	b.Run("decode", func(b *testing.B) {
		f := AppendFrame(nil, &p, &h, payload)
		d := NewDecoder()
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := d.Decode(f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("icrc", func(b *testing.B) {
		f := AppendFrame(nil, &p, &h, payload)
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ICRC(f[14 : len(f)-ICRCLen]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
