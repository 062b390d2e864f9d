package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// What every experiment shares: -q, the parsing of flags that take no
// positional arguments, and progress lines stamped with the time since the
// start. (The image flags, which boot and demo share too, are in images.go.)

// addQuietFlag registers -q.
func addQuietFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("q", false, "no progress lines")
}

// parseExpFlags parses an experiment's flags, which take no positional
// arguments, and returns its progress writer: stderr with each line stamped
// with the time since start, or nothing with -q.
func parseExpFlags(fs *flag.FlagSet, args []string, quiet *bool, start time.Time) (io.Writer, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *quiet {
		return io.Discard, nil
	}
	return &stampWriter{w: os.Stderr, start: start}, nil
}

// stampWriter prefixes each progress line with the time since the start.
type stampWriter struct {
	w     io.Writer
	start time.Time
}

func (s *stampWriter) Write(p []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(p), "\n") {
		if line == "" {
			continue
		}
		if _, err := fmt.Fprintf(s.w, "[%6.1fs] %s", time.Since(s.start).Seconds(), line); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
