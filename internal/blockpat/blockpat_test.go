package blockpat

import (
	"bytes"
	"strings"
	"testing"
)

func TestPattern(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, 3<<20+64); err != nil {
		t.Fatal(err)
	}
	disk := buf.Bytes()
	cases := []struct {
		name    string
		off     int64
		n       int
		corrupt int // byte to flip, -1 none
		at      int64
		wantErr string
	}{
		{"start", 0, 4096, -1, 0, ""},
		{"across the 1 MiB write", 1<<20 - 512, 1024, -1, 1<<20 - 512, ""},
		{"tail", 3 << 20, 64, -1, 3 << 20, ""},
		{"flipped byte", 8192, 4096, 100, 8192, "offset 8288"},
		{"read from elsewhere", 4096, 4096, -1, 8192, "the word of offset 4096"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := append([]byte(nil), disk[c.off:c.off+int64(c.n)]...)
			if c.corrupt >= 0 {
				b[c.corrupt] ^= 1
			}
			err := Check(b, c.at)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("Check = %v, want %q", err, c.wantErr)
			}
		})
	}
	if err := Check(make([]byte, 64), 0); err == nil {
		t.Fatal("a zeroed block at offset 0 passed")
	}
	if err := Write(&buf, 7); err == nil {
		t.Fatal("Write took a size not a multiple of 8")
	}
}
