// Package fuzzseed keeps a fuzz target's seed corpus files in step with
// the Go code that builds its seeds: the programs are written where go's
// fuzzer reads them (testdata/fuzz/FuzzName, one []byte argument per file,
// in go's "go test fuzz v1" encoding), and a test checks them, as the
// generated C header is checked against vdevice/hw. Code is the readable
// source of a seed; the file is what `go test` and `go test -fuzz` run.
package fuzzseed

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// WriteEnv names the environment variable that makes Check write the
// files instead of comparing them.
const WriteEnv = "NPFNIC_WRITE_SEEDS"

// Encode is a one-[]byte-argument corpus file.
func Encode(in []byte) []byte { return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", in) }

// Check compares the files dir/name with the seeds (by file name), or
// writes them when WriteEnv is 1. Files in dir that are not seeds (inputs
// the fuzzer found) are left alone.
func Check(dir string, seeds map[string][]byte) error {
	names := make([]string, 0, len(seeds))
	for n := range seeds {
		names = append(names, n)
	}
	sort.Strings(names)
	write := os.Getenv(WriteEnv) == "1"
	if write {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	for _, n := range names {
		want := Encode(seeds[n])
		path := filepath.Join(dir, n)
		if write {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				return err
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			return fmt.Errorf("fuzzseed: %s is not its seed's program (rewrite the seeds with %s=1): %v", path, WriteEnv, err)
		}
	}
	return nil
}
