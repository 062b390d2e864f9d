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
// -rounds, -m, -q, the image flags and -trace, the usage text around its
// description, the checks of the command line before anything expensive,
// progress lines stamped with the time since the start, and the report at
// the end (package internal/exp/runner).
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
	// memory is -m's default and memoryHelp its text; 0: no -m.
	memory     int
	memoryHelp string
	// guests: the experiment boots guests, so it takes the image flags
	// and records the device's trace with -trace.
	guests bool
	// flags adds the experiment's own flags and returns its setup.
	flags func(fs *flag.FlagSet) expSetup
}

// expSetup checks the experiment's own flags (values, lists, their
// combinations) with what the common flags gave it, and returns its run.
// It runs before any image is built or guest booted, so that a mistake
// on the command line costs nothing: the run must not fail on a flag.
// x.Images is nil: the images come with the run.
type expSetup func(x expRun) (expRunFunc, error)

// expRunFunc runs an experiment its setup accepted, on the images (nil
// for an experiment without guests), and returns what it measured, for
// the report (nil: nothing).
type expRunFunc func(ctx context.Context, a *images.Artifacts) (*runner.Outcome, error)

// expRun is what the common flags give an experiment: its environment
// (logs in OUT/logs, progress, trace; the images come later), -out,
// -rounds and -m.
type expRun struct {
	runner.Env
	Out       string
	Rounds    int
	MemoryMiB int
}

func addRoundsFlag(fs *flag.FlagSet, def int, help string) *int { return fs.Int("rounds", def, help) }

// run runs `npfnic exp NAME args`: it parses and checks every flag, the
// experiment's own ones through its setup, then builds the images, runs
// the experiment and reports.
func (e experiment) run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("npfnic exp "+e.name, flag.ContinueOnError)
	outHelp := "output directory: CSV, PNG and the table"
	if e.guests {
		outHelp += ", and the guests' logs"
	}
	out := fs.String("out", e.out, outHelp)
	rounds, mem := new(int), new(int)
	if e.rounds > 0 {
		rounds = addRoundsFlag(fs, e.rounds, e.roundsHelp)
	}
	if e.memory > 0 {
		mem = fs.Int("m", e.memory, e.memoryHelp)
	}
	quiet := fs.Bool("q", false, "no progress lines")
	var opt *images.Options
	var tf *traceFlags
	if e.guests {
		opt, tf = addImageFlags(fs), addTraceFlags(fs)
	}
	setup := e.flags(fs)
	synopsis := e.synopsis
	if synopsis == "" {
		synopsis = "[flags]"
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic exp %s %s\n\n%s\n\n", e.name, synopsis, e.about)
		fs.PrintDefaults()
	}
	start := time.Now()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var progress io.Writer = io.Discard
	if !*quiet {
		progress = &stampWriter{w: os.Stderr, start: start}
	}
	x := expRun{Env: runner.Env{LogDir: filepath.Join(*out, "logs"), Progress: progress}, Out: *out, Rounds: *rounds, MemoryMiB: *mem}
	if e.rounds > 0 && (x.Rounds < 1 || x.Rounds > 100) {
		return usageErrorf("-rounds %d: want 1 to 100", x.Rounds)
	}
	if e.memory > 0 && (x.MemoryMiB < 256 || x.MemoryMiB > 64<<10) {
		return usageErrorf("-m %d: want 256 to 65536 MiB", x.MemoryMiB)
	}
	var err error
	if e.guests {
		// -trace-events, and the -trace file's folder.
		if x.Trace, err = tf.recorder(); err != nil {
			return badUsage(err)
		}
	}
	run, err := setup(x)
	if err != nil {
		return badUsage(err)
	}
	// -out can be made and written (it is made at the end, with the
	// results).
	if err := checkOutDir("-out", x.Out); err != nil {
		return err
	}
	var a *images.Artifacts
	if e.guests {
		if a, err = buildImages(ctx, opt); err != nil {
			return err
		}
	}
	o, runErr := run(ctx, a)
	err = runner.Report(os.Stdout, o, *out, start, runErr)
	if e.guests {
		err = errors.Join(err, tf.write(x.Trace, os.Stdout))
	}
	return err
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
