package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// experiment is one `npfnic exp NAME`: what it adds to the flags, the
// usage and the run every experiment shares, defined here once: -out,
// -rounds, -q, the guests' -m, -smp and -accel, the image flags and
// -trace, the usage text around its description, the checks of the
// command line before anything expensive, progress lines stamped with the
// time since the start, and the report at the end (package
// internal/exp/runner).
type experiment struct {
	name string
	// synopsis follows "usage: npfnic exp NAME"; default "[flags]".
	synopsis string
	// about describes the experiment in the usage text.
	about string
	// rounds is -rounds' default and roundsHelp its text; 0: no -rounds.
	rounds     int
	roundsHelp string
	// memory is -m's default (0: 1024) and memoryHelp its text.
	memory     int
	memoryHelp string
	// guests: the experiment boots guests, so it takes the image flags,
	// -m, -smp and -accel, and records the device's trace with -trace.
	guests bool
	// flags adds the experiment's own flags and returns its setup.
	flags func(fs *flag.FlagSet) expSetup
}

// expSetup checks the experiment's own flags (values, lists, their
// combinations) with what the common flags gave it, and returns its run.
// It runs before any image is built or guest booted, so that a mistake
// on the command line costs nothing: the run must not fail on a flag.
// x.Images and x.Accel are empty: they come with the run.
type expSetup func(x expRun) (expRunFunc, error)

// expRunFunc runs an experiment its setup accepted, on the guests' images
// and accelerator (zero for an experiment without guests), and returns
// what it measured, for the report (nil: nothing).
type expRunFunc func(ctx context.Context, g expGuests) (*runner.Outcome, error)

// expGuests is what an experiment's run gets once its command line passed:
// the images, built, and the accelerator -accel resolved to (which may
// boot a probe guest, so it comes after the checks too).
type expGuests struct {
	Images *images.Artifacts
	Accel  vm.Accel
}

// into puts the images and the accelerator into an experiment's
// environment.
func (g expGuests) into(e *runner.Env) { e.Images, e.Accel = g.Images, g.Accel }

// expRun is what the common flags give an experiment: its environment
// (logs in OUT/logs, progress, trace; the images and the accelerator come
// with the run), -out, -rounds, -m and -smp.
type expRun struct {
	runner.Env
	Out       string
	Rounds    int
	MemoryMiB int
	CPUs      int
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
	// Every experiment writes under out/exp/NAME unless told otherwise.
	out := fs.String("out", path.Join("out", "exp", e.name), outHelp)
	rounds := new(int)
	if e.rounds > 0 {
		rounds = addRoundsFlag(fs, e.rounds, e.roundsHelp)
	}
	quiet := fs.Bool("q", false, "no progress lines")
	var opt *images.Options
	var tf *traceFlags
	gf := &guestFlags{mem: new(int), cpus: new(int)}
	cpuProfile := new(string)
	if e.guests {
		opt, tf = addImageFlags(fs), addTraceFlags(fs)
		gf = addGuestFlags(fs, e.memory, e.memoryHelp)
		cpuProfile = fs.String("cpuprofile", "", "write a Go CPU profile of this process while the experiment runs (the in-process device servers among it; read it with go tool pprof)")
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
	info := runner.NewRunInfo(append([]string{"npfnic", "exp", e.name}, args...))
	start := info.Start
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var progress io.Writer = io.Discard
	if !*quiet {
		progress = &stampWriter{w: os.Stderr, start: start}
	}
	x := expRun{Env: runner.Env{LogDir: filepath.Join(*out, "logs"), Progress: progress}, Out: *out, Rounds: *rounds,
		MemoryMiB: *gf.mem, CPUs: *gf.cpus}
	if e.rounds > 0 && (x.Rounds < 1 || x.Rounds > 100) {
		return usageErrorf("-rounds %d: want 1 to 100", x.Rounds)
	}
	var err error
	if e.guests {
		// -m and -smp (-accel was checked as it was parsed).
		if err := gf.check(); err != nil {
			return badUsage(err)
		}
		// -trace-events, and the -trace file's folder.
		if x.Trace, err = tf.recorder(); err != nil {
			return badUsage(err)
		}
		if *cpuProfile != "" {
			if err := checkOutFile("-cpuprofile", *cpuProfile); err != nil {
				return err
			}
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
	var g expGuests
	if e.guests {
		if g.Images, err = buildImages(ctx, opt); err != nil {
			return err
		}
		// After the build: auto boots a probe guest on the images.
		if g.Accel, err = gf.resolve(ctx, g.Images); err != nil {
			return err
		}
		x.Logf("guests boot under %s", g.Accel)
	}
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	o, runErr := run(ctx, g)
	if err := stopProfile(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	info.Accelerator = g.Accel.String()
	err = runner.Report(os.Stdout, o, *out, info, runErr)
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

// startCPUProfile starts a CPU profile into file ("": none) and returns
// what stops and writes it.
func startCPUProfile(file string) (stop func() error, err error) {
	if file == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
