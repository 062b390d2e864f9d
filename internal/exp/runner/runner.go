// Package runner owns what every experiment shares, so that each
// experiment is only its workload, its measurements and its figure: the
// environment of a run (images, log folder, progress, device trace), the
// order of the rounds (the configurations rotated one place per round),
// the bench the jobs run on (one guest with npfnic on a tap, or a pair of
// guests cabled for RDMA), booted when first needed and again whenever a
// guest died, the job loop with its progress lines, and the report at the
// end: the printed table, the CSV and PNG files, and what failed.
package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// Env is what a run of any experiment is given; every experiment's Config
// embeds it.
type Env struct {
	// Images are the guest images; required where guests boot.
	Images *images.Artifacts
	// LogDir keeps the guests' logs and the tools' outputs; the loop
	// empties it first. Required where guests boot.
	LogDir string
	// Progress receives one line per step; nil is quiet.
	Progress io.Writer
	// Trace records the device's events over the whole run (package
	// trace); nil records nothing. The caller writes it out.
	Trace *trace.Recorder
	// Accel is the accelerator of every guest of the run: kvm or tcg, as
	// vm.ResolveAccel resolved it before the run, so that the report
	// names it; empty or auto leaves the choice to each boot
	// ($NPFNIC_ACCEL, else auto).
	Accel vm.Accel
}

// AccelName names the guests' accelerator for reports: KVM, TCG, or auto
// when it was not resolved before the run.
func (e *Env) AccelName() string {
	if e.Accel == "" {
		return string(vm.AccelAuto)
	}
	return e.Accel.String()
}

// Logf writes one progress line.
func (e *Env) Logf(format string, args ...any) {
	if e.Progress != nil {
		fmt.Fprintf(e.Progress, format+"\n", args...)
	}
}

// Step is one job of a plan: an arm (a configuration) in a round.
type Step[A any] struct {
	Round int
	Arm   A
}

// Loop runs a plan's steps in order on a bench of its transport, booted
// before the first step and again before any step that finds it dead. A
// step that fails is reported and the loop goes on; a boot that fails, or
// the context's end, stops it.
type Loop[B Bench, A fmt.Stringer] struct {
	Env       *Env
	Transport Transport[B]
	Steps     []Step[A]
	// Run runs one step; label names it in progress lines. It returns
	// the step's failure, which the loop reports.
	Run func(ctx context.Context, b B, s Step[A], label string) error
	// Release, if set, runs before the loop closes a bench (a dead one,
	// or the last one at the end): what the steps left running on it
	// stops there.
	Release func(ctx context.Context, b B)
}

// Go runs the loop and returns why it stopped early, if it did.
func (l Loop[B, A]) Go(ctx context.Context) error {
	e, t := l.Env, l.Transport
	if e.LogDir != "" {
		if err := os.RemoveAll(e.LogDir); err != nil {
			return err
		}
	}
	if t.Check != nil {
		if err := t.Check(e); err != nil {
			return err
		}
	}
	var (
		bench B
		up    bool
		boots int
		start = time.Now()
	)
	closeBench := func() {
		if l.Release != nil {
			l.Release(ctx, bench)
		}
		bench.Close()
		up = false
	}
	defer func() {
		if up {
			closeBench()
		}
	}()
	for i, s := range l.Steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if up && bench.Dead() {
			e.Logf("a guest died; booting again (the old logs stay in %s)", t.logDir(e, boots))
			closeBench()
		}
		if !up && t.Start != nil {
			boots++
			var err error
			if bench, err = t.Start(ctx, t.logDir(e, boots)); err != nil {
				return err
			}
			up = true
		}
		label := fmt.Sprintf("[%d/%d] round %d: %s", i+1, len(l.Steps), s.Round, s.Arm)
		if err := l.Run(ctx, bench, s, label); err != nil {
			e.Logf("%s: FAILED: %v", label, FirstLine(err.Error()))
		}
		if done := i + 1; done < len(l.Steps) {
			left := time.Since(start) / time.Duration(done) * time.Duration(len(l.Steps)-done)
			e.Logf("%d of %d done in %.0f s; about %.0f s to go", done, len(l.Steps), time.Since(start).Seconds(), left.Seconds())
		}
	}
	return ctx.Err()
}

// Outcome is what an experiment that ran hands over to be reported.
type Outcome struct {
	// Table is printed and usually written beside the files.
	Table string
	// Write writes the experiment's files (CSV, PNG, the table) into dir
	// and returns their paths.
	Write func(dir string) ([]string, error)
	// Failed is what of the run failed (nil: nothing), returned once the
	// outputs are written.
	Failed error
	// Logs is where the guests' logs are ("": none).
	Logs string
}

// Jobs is the outcome of a run whose results are one per job, each with
// its failure (failure), what naming the jobs ("runs", "windows"): nil
// without results, else table(c, results), write(dir, c, results), the
// failed count, and c's logs in logs.
func Jobs[C, R any](c C, results []R, failure func(R) error, what, logs string,
	table func(C, []R) string, write func(string, C, []R) ([]string, error)) *Outcome {
	if len(results) == 0 {
		return nil
	}
	return &Outcome{
		Table:  table(c, results),
		Write:  func(dir string) ([]string, error) { return write(dir, c, results) },
		Failed: Failures(CountFailed(results, failure), len(results), what),
		Logs:   logs,
	}
}

// Report prints o's table on w, writes its files and info's run.json into
// dir and names them with the time since info.Start; it returns runErr,
// else o's failure. A nil o (nothing ran) reports only runErr. An
// interrupted run (runErr is context.Canceled) reports what it gathered.
func Report(w io.Writer, o *Outcome, dir string, info *RunInfo, runErr error) error {
	if o == nil {
		return runErr
	}
	fmt.Fprint(w, "\n"+o.Table)
	files, err := o.Write(dir)
	if err != nil {
		return err
	}
	info.finish(cmp.Or(runErr, o.Failed))
	path, err := info.write(dir)
	if err != nil {
		return err
	}
	files = append(files, path)
	logs := ""
	if o.Logs != "" {
		logs = fmt.Sprintf(" (logs in %s)", o.Logs)
	}
	svg := ""
	for _, f := range files {
		if strings.HasSuffix(f, ".png") {
			svg = "; each .png has its .svg beside it"
			break
		}
	}
	fmt.Fprintf(w, "\nwrote %s%s in %.0fs%s\n", strings.Join(files, ", "), logs, time.Since(info.Start).Seconds(), svg)
	if runErr != nil {
		return runErr
	}
	return o.Failed
}

// Failures is the error of a run in which failed of total jobs failed
// (nil for none); what names the jobs ("runs", "windows").
func Failures(failed, total int, what string) error {
	if failed == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d %s failed (see above and the logs)", failed, total, what)
}

// CountFailed counts the results whose err is set, for Failures.
func CountFailed[R any](results []R, err func(R) error) int {
	n := 0
	for _, r := range results {
		if err(r) != nil {
			n++
		}
	}
	return n
}

// Files writes an experiment's files into one folder, in order, and
// remembers their paths; after the first error it writes nothing more.
type Files struct {
	Dir   string
	paths []string
	err   error
}

// CSV writes name with header and rows (report.WriteCSV).
func (f *Files) CSV(name string, header []string, rows [][]string) {
	f.add(name, func(p string) error { return report.WriteCSV(p, header, rows) })
}

// Text writes name with text.
func (f *Files) Text(name, text string) {
	f.add(name, func(p string) error {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(text), 0o644)
	})
}

// PNG draws the figure name (a .png) with draw, given its path, which
// writes its SVG beside it (report.SaveFigure); a figure without its SVG
// is an error. The PNG is listed, standing for both.
func (f *Files) PNG(name string, draw func(path string) error) {
	f.add(name, func(p string) error {
		if err := draw(p); err != nil {
			return err
		}
		if _, err := os.Stat(report.SVGPath(p)); err != nil {
			return fmt.Errorf("figure %s: no SVG beside it: %w", name, err)
		}
		return nil
	})
}

// Charts draws the figure name from report charts, width by height
// pixels each, with its SVG (PNG).
func (f *Files) Charts(name string, width, height int, charts ...report.Chart) {
	f.PNG(name, func(p string) error { return report.SavePNG(p, width, height, charts...) })
}

// Add records files written by other means (another experiment's Write).
func (f *Files) Add(paths []string, err error) {
	if f.err == nil {
		f.paths, f.err = append(f.paths, paths...), err
	}
}

func (f *Files) add(name string, write func(path string) error) {
	if f.err != nil {
		return
	}
	p := filepath.Join(f.Dir, name)
	if f.err = write(p); f.err == nil {
		f.paths = append(f.paths, p)
	}
}

// Done returns the paths written, or the first error.
func (f *Files) Done() ([]string, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.paths, nil
}

// FirstLine is s up to its first newline: errors of guest commands carry
// their whole output, progress lines and CSV cells want the first line.
func FirstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// ErrCell is err's first line for a CSV cell, "" for nil.
func ErrCell(err error) string {
	if err == nil {
		return ""
	}
	return FirstLine(err.Error())
}

// FailureList is a report's closing list of what failed: for each of xs that
// failed, one indented line saying which it was and its error's first
// line; "" when nothing did.
func FailureList[T any](xs []T, failed func(T) (what string, err error)) string {
	var lines []string
	for _, x := range xs {
		if what, err := failed(x); err != nil {
			lines = append(lines, "  "+what+": "+FirstLine(err.Error()))
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "\nfailures:\n" + strings.Join(lines, "\n") + "\n"
}

// ErrNothing is what an experiment that measured nothing returns.
var ErrNothing = errors.New("nothing was measured (see the failures above)")
