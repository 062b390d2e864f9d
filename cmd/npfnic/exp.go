package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
)

// experiment is one `npfnic exp NAME`: what it adds to the flags, the
// usage and the run every experiment shares, defined here once: -out,
// -rounds, -q, the guests' -m, -smp and -accel, the image flags and
// -trace, the usage text around its
// description, progress lines stamped with the time since the start, and
// the report at the end (package internal/exp/runner).
type experiment struct {
	name string
	// synopsis follows "usage: npfnic exp NAME"; default "[flags]".
	synopsis string
	// about describes the experiment in the usage text.
	about string
	// out is -out's default.
	out string
	// rounds is -rounds' default and roundsHelp its text; 0: no -rounds.
	rounds     int
	roundsHelp string
	// memory is -m's default (0: 1024) and memoryHelp its text.
	memory     int
	memoryHelp string
	// guests: the experiment boots guests, so it takes the image flags,
	// -m, -smp and -accel, and records the device's trace with -trace.
	guests bool
	// flags adds the experiment's own flags and returns its run.
	flags func(fs *flag.FlagSet) expRunFunc
}

// expRunFunc runs an experiment with what the common flags gave it and
// returns what it measured, for the report (nil: nothing).
type expRunFunc func(ctx context.Context, x expRun) (*runner.Outcome, error)

// expRun is what the common flags give an experiment: its environment
// (logs in OUT/logs, progress, trace, images, the accelerator -accel
// resolved to), -out, -rounds, -m and -smp.
type expRun struct {
	runner.Env
	Out       string
	Rounds    int
	MemoryMiB int
	CPUs      int
}

func addRoundsFlag(fs *flag.FlagSet, def int, help string) *int { return fs.Int("rounds", def, help) }

// run runs `npfnic exp NAME args`.
func (e experiment) run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("npfnic exp "+e.name, flag.ContinueOnError)
	outHelp := "output directory: CSV, PNG and the table"
	if e.guests {
		outHelp += ", and the guests' logs"
	}
	out := fs.String("out", e.out, outHelp)
	rounds := new(int)
	if e.rounds > 0 {
		rounds = addRoundsFlag(fs, e.rounds, e.roundsHelp)
	}
	quiet := fs.Bool("q", false, "no progress lines")
	var opt *images.Options
	var tf *traceFlags
	gf := &guestFlags{mem: new(int), cpus: new(int)}
	if e.guests {
		opt, tf = addImageFlags(fs), addTraceFlags(fs)
		gf = addGuestFlags(fs, e.memory, e.memoryHelp)
	}
	run := e.flags(fs)
	synopsis := e.synopsis
	if synopsis == "" {
		synopsis = "[flags]"
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic exp %s %s\n\n%s\n\n", e.name, synopsis, e.about)
		fs.PrintDefaults()
	}
	start := time.Now()
	progress, err := parseExpFlags(fs, args, quiet, start)
	if err != nil {
		return err
	}
	x := expRun{Env: runner.Env{LogDir: filepath.Join(*out, "logs"), Progress: progress}, Out: *out, Rounds: *rounds,
		MemoryMiB: *gf.mem, CPUs: *gf.cpus}
	if e.guests {
		if err := gf.check(); err != nil {
			return err
		}
		if x.Trace, err = tf.recorder(); err != nil {
			return err
		}
		if x.Images, err = buildImages(ctx, opt); err != nil {
			return err
		}
		if x.Accel, err = gf.resolve(ctx, x.Images); err != nil {
			return err
		}
		x.Logf("guests boot under %s", x.Accel)
	}
	o, runErr := run(ctx, x)
	err = runner.Report(os.Stdout, o, *out, start, runErr)
	if e.guests {
		err = errors.Join(err, tf.write(x.Trace, os.Stdout))
	}
	return err
}

// parseExpFlags parses an experiment's flags, which take no positional
// arguments, and returns its progress writer: stderr with each line stamped
// with the time since start, or nothing when quiet.
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
