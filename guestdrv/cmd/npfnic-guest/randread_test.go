package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/blockpat"
)

func TestRandRead(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	f, err := os.Create(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := blockpat.Write(f, 4<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	bad := filepath.Join(dir, "bad")
	b, _ := os.ReadFile(good)
	for i := 1 << 20; i < len(b); i += 4096 {
		b[i] ^= 0xff // every 4 KiB block past the first MiB
	}
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^randread bs 65536 jobs 2 devices 1 warm_bytes \d+ bytes [1-9]\d* ms \d+ ios [1-9]\d*\n$`)
	for _, c := range []struct {
		name, dev, err string
	}{
		{"pattern", good, ""},
		{"corrupt", bad, "want"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := randRead(65536, 2, 20*time.Millisecond, 200*time.Millisecond, []string{c.dev}, &out)
			if err != nil && strings.Contains(err.Error(), "invalid argument") {
				t.Skipf("no O_DIRECT on %s: %v", dir, err)
			}
			if c.err == "" && (err != nil || !line.MatchString(out.String())) {
				t.Fatalf("randread = %v, %q", err, out.String())
			}
			if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("randread of a corrupt disk = %v, want an error with %q", err, c.err)
			}
		})
	}
	if err := randRead(1000, 1, 0, time.Second, []string{good}, &bytes.Buffer{}); err == nil {
		t.Fatal("randread took a block of 1000 bytes")
	}
}
