package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

func TestRotateAlternateRounds(t *testing.T) {
	arms := []string{"pin", "drop", "backup"}
	for _, tc := range []struct {
		round     int
		rotated   []string
		alternate []int
	}{
		{1, []string{"pin", "drop", "backup"}, []int{16, 64, 512}},
		{2, []string{"drop", "backup", "pin"}, []int{512, 64, 16}},
		{3, []string{"backup", "pin", "drop"}, []int{16, 64, 512}},
		{4, []string{"pin", "drop", "backup"}, []int{512, 64, 16}},
	} {
		if got := Rotate(arms, tc.round); !slices.Equal(got, tc.rotated) {
			t.Errorf("Rotate round %d: %v, want %v", tc.round, got, tc.rotated)
		}
		if got := Alternate([]int{64, 512, 16}, tc.round); !slices.Equal(got, tc.alternate) {
			t.Errorf("Alternate round %d: %v, want %v", tc.round, got, tc.alternate)
		}
	}
	if !slices.Equal(arms, []string{"pin", "drop", "backup"}) {
		t.Errorf("Rotate changed its input: %v", arms)
	}
	if Rotate([]string(nil), 2) != nil {
		t.Error("Rotate of nothing")
	}
	var got []string
	for _, s := range Rounds(2, func(round int) []string { return Rotate([]string{"a", "b"}, round) }) {
		got = append(got, fmt.Sprint(s.Round, s.Arm))
	}
	if want := []string{"1a", "1b", "2b", "2a"}; !slices.Equal(got, want) {
		t.Errorf("Rounds: %v, want %v", got, want)
	}
}

// fakeBench is a bench whose guest dies when told to.
type fakeBench struct {
	n            int
	dead, closed bool
}

func (b *fakeBench) Dead() bool { return b.dead }
func (b *fakeBench) Close()     { b.closed = true }

type arm string

func (a arm) String() string { return string(a) }

// TestLoop: steps run in order on a bench booted once and again after a
// guest died, failures are reported and do not stop the loop, a failed
// boot does, and every bench is released and closed.
func TestLoop(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dieAt     map[int]bool // steps after which the guest is dead
		failAt    map[int]bool // steps that fail
		bootFails int          // the boot that fails (0: none)
		wantBoots int
		wantRan   int
		wantErr   bool
	}{
		{name: "healthy", wantBoots: 1, wantRan: 4},
		{name: "a guest dies", dieAt: map[int]bool{1: true}, wantBoots: 2, wantRan: 4},
		{name: "dies twice, steps fail", dieAt: map[int]bool{0: true, 2: true}, failAt: map[int]bool{2: true}, wantBoots: 3, wantRan: 4},
		{name: "the reboot fails", dieAt: map[int]bool{1: true}, bootFails: 2, wantBoots: 2, wantRan: 2, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var progress bytes.Buffer
			env := &Env{LogDir: filepath.Join(t.TempDir(), "logs"), Progress: &progress}
			if err := os.MkdirAll(filepath.Join(env.LogDir, "stale"), 0o755); err != nil {
				t.Fatal(err)
			}
			var benches []*fakeBench
			var logDirs []string
			released := 0
			checked := false
			l := Loop[*fakeBench, arm]{
				Env: env,
				Transport: Transport[*fakeBench]{
					Name:  "guest",
					Check: func(*Env) error { checked = true; return nil },
					Start: func(_ context.Context, logDir string) (*fakeBench, error) {
						logDirs = append(logDirs, logDir)
						if len(logDirs) == tc.bootFails {
							return nil, errors.New("boot failed")
						}
						b := &fakeBench{n: len(logDirs)}
						benches = append(benches, b)
						return b, nil
					},
				},
				Steps: Rounds(2, func(round int) []arm { return Rotate([]arm{"x", "y"}, round) }),
				Release: func(_ context.Context, b *fakeBench) {
					if b.closed {
						t.Error("released after it was closed")
					}
					released++
				},
			}
			var ran []string
			l.Run = func(_ context.Context, b *fakeBench, s Step[arm], label string) error {
				i := len(ran)
				ran = append(ran, fmt.Sprintf("%d%s@%d", s.Round, s.Arm, b.n))
				if !strings.HasPrefix(label, fmt.Sprintf("[%d/4] round %d: %s", i+1, s.Round, s.Arm)) {
					t.Errorf("label %q", label)
				}
				b.dead = tc.dieAt[i]
				if tc.failAt[i] {
					return errors.New("no throughput\nthe whole output")
				}
				return nil
			}
			err := l.Go(context.Background())
			if (err != nil) != tc.wantErr {
				t.Fatalf("Go: %v, want error %v", err, tc.wantErr)
			}
			if !checked {
				t.Error("the transport's check did not run")
			}
			if _, err := os.Stat(filepath.Join(env.LogDir, "stale")); !os.IsNotExist(err) {
				t.Errorf("the log folder was not emptied: %v", err)
			}
			if len(logDirs) != tc.wantBoots || len(ran) != tc.wantRan {
				t.Errorf("%d boots, %d steps ran (%v), want %d and %d", len(logDirs), len(ran), ran, tc.wantBoots, tc.wantRan)
			}
			for i, d := range logDirs {
				if want := filepath.Join(env.LogDir, fmt.Sprintf("guest-%d", i+1)); d != want {
					t.Errorf("boot %d logs in %s, want %s", i+1, d, want)
				}
			}
			for _, b := range benches {
				if !b.closed {
					t.Errorf("bench %d left open", b.n)
				}
			}
			if released != len(benches) {
				t.Errorf("%d releases for %d benches", released, len(benches))
			}
			out := progress.String()
			if n := strings.Count(out, "a guest died"); n != len(tc.dieAt) && !tc.wantErr {
				t.Errorf("%d reboots reported, want %d:\n%s", n, len(tc.dieAt), out)
			}
			if tc.failAt[2] && !strings.Contains(out, "[3/4] round 2: y: FAILED: no throughput\n") {
				t.Errorf("the failure is not reported on one line:\n%s", out)
			}
			if ran[0] != "1x@1" || (len(ran) == 4 && ran[3][:2] != "2x") {
				t.Errorf("order %v", ran)
			}
		})
	}
}

// TestLoopWithoutBench: steps that boot their own guests get a zero bench,
// and a cancelled context stops the loop between steps.
func TestLoopWithoutBench(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	l := Loop[NoBench, arm]{
		Env:   &Env{},
		Steps: Rounds(3, func(int) []arm { return []arm{"a"} }),
		Run: func(context.Context, NoBench, Step[arm], string) error {
			if n++; n == 2 {
				cancel()
			}
			return nil
		},
	}
	if err := l.Go(ctx); !errors.Is(err, context.Canceled) || n != 2 {
		t.Errorf("Go: %v after %d steps, want cancelled after 2", err, n)
	}
}

// TestReport: the table is printed, the files written in order and named,
// and the run's error comes before the outcome's failure.
func TestReport(t *testing.T) {
	dir := t.TempDir()
	outcome := &Outcome{
		Table: "the table\n",
		Write: func(dir string) ([]string, error) {
			f := Files{Dir: dir}
			f.CSV("x.csv", []string{"a", "b"}, [][]string{report.Row(1, 2.5)})
			f.Text("x.txt", "the table\n")
			f.Charts("x.png", 400, 300, report.BarChart{Title: "t", Categories: []string{"c"}, Series: []report.BarSeries{{Name: "s", Values: []float64{1}}}})
			return f.Done()
		},
		Failed: Failures(1, 3, "runs"),
		Logs:   "L",
	}
	for _, tc := range []struct {
		name    string
		o       *Outcome
		runErr  error
		wantErr string
		wantOut []string
	}{
		{"failures", outcome, nil, "1 of 3 runs failed", []string{"the table", "wrote " + filepath.Join(dir, "x.csv") + ", ", "x.png, " + filepath.Join(dir, RunInfoFile) + " (logs in L) in "}},
		{"run error first", outcome, context.Canceled, "context canceled", []string{"the table"}},
		{"nothing ran", nil, context.Canceled, "context canceled", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w bytes.Buffer
			info := NewRunInfo([]string{"npfnic", "exp", "x", "-rounds", "2"})
			info.Accelerator = "TCG"
			err := Report(&w, tc.o, dir, info, tc.runErr)
			if err == nil || err.Error() != tc.wantErr && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Report: %v, want %q", err, tc.wantErr)
			}
			for _, s := range tc.wantOut {
				if !strings.Contains(w.String(), s) {
					t.Errorf("output lacks %q:\n%s", s, w.String())
				}
			}
			if tc.o == nil && w.Len() != 0 {
				t.Errorf("printed %q for nothing", w.String())
			}
			if tc.o == nil {
				return
			}
			// run.json says what made the results, and whether the run
			// was cut short.
			var got RunInfo
			b, err := os.ReadFile(filepath.Join(dir, RunInfoFile))
			if err != nil || json.Unmarshal(b, &got) != nil {
				t.Fatalf("run.json: %v\n%s", err, b)
			}
			if !strings.Contains(w.String(), filepath.Join(dir, RunInfoFile)) {
				t.Errorf("the report does not name run.json:\n%s", w.String())
			}
			if !slices.Equal(got.Command, info.Command) || got.Accelerator != "TCG" || got.Commit == "" ||
				got.Host.CPUs < 1 || got.Host.Kernel == "" || got.Start.IsZero() || got.End.Before(got.Start) {
				t.Errorf("run.json: %+v", got)
			}
			if interrupted := errors.Is(tc.runErr, context.Canceled); got.Interrupted != interrupted || got.Error == "" {
				t.Errorf("run.json: interrupted %v, error %q; the run's error was %v", got.Interrupted, got.Error, tc.runErr)
			}
		})
	}
	csv, err := os.ReadFile(filepath.Join(dir, "x.csv"))
	if err != nil || string(csv) != "a,b\n1,2.5\n" {
		t.Errorf("x.csv: %q, %v", csv, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "x.png")); err != nil || fi.Size() == 0 {
		t.Errorf("x.png: %v", err)
	}
	// After a failure nothing more is written.
	f := Files{Dir: dir}
	f.CSV("bad.csv", []string{"a"}, [][]string{{"1", "2"}})
	f.Text("after.txt", "x")
	if paths, err := f.Done(); err == nil || paths != nil {
		t.Errorf("Done after a bad row: %v, %v", paths, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "after.txt")); !os.IsNotExist(err) {
		t.Error("wrote a file after the first error")
	}
	// Jobs: nothing without results; else the table and files of the
	// results, and their failures counted.
	table := func(c string, rs []error) string { return fmt.Sprint(c, len(rs)) }
	write := func(dir, c string, rs []error) ([]string, error) { return []string{dir + c}, nil }
	failure := func(e error) error { return e }
	if o := Jobs("c", []error(nil), failure, "runs", "L", table, write); o != nil {
		t.Errorf("Jobs without results: %+v", o)
	}
	o := Jobs("c", []error{nil, errors.New("x"), nil}, failure, "windows", "L", table, write)
	if files, _ := o.Write("d/"); o.Table != "c3" || o.Logs != "L" || len(files) != 1 || files[0] != "d/c" ||
		o.Failed == nil || o.Failed.Error() != "1 of 3 windows failed (see above and the logs)" {
		t.Errorf("Jobs: %+v", o)
	}
	if Failures(0, 3, "runs") != nil || CountFailed([]error{nil, errors.New("x"), nil}, func(e error) error { return e }) != 1 {
		t.Error("Failures or CountFailed")
	}
}

func TestParse(t *testing.T) {
	if got := ParseList(" pin, ,drop,"); !slices.Equal(got, []string{"pin", "drop"}) {
		t.Errorf("ParseList: %q", got)
	}
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr string
	}{
		{"16, 32,64", []int{16, 32, 64}, ""},
		{"", nil, ""},
		{"16,x", nil, `bad ring size "x"`},
	} {
		got, err := ParseInts(tc.in, "ring size")
		if !slices.Equal(got, tc.want) || (err == nil) != (tc.wantErr == "") || err != nil && err.Error() != tc.wantErr {
			t.Errorf("ParseInts(%q) = %v, %v", tc.in, got, err)
		}
	}
	xs, err := ParseInts(",", "ring size")
	if _, err := NonEmpty(xs, err, "ring sizes"); err == nil || err.Error() != "no ring sizes" {
		t.Errorf("NonEmpty: %v", err)
	}
	if got, err := ParseFloats("0,1e-4", "rate"); err != nil || !slices.Equal(got, []float64{0, 1e-4}) || JoinFloats(got) != "0,0.0001" {
		t.Errorf("ParseFloats: %v %v", got, err)
	}
	if _, err := ParseFloats("0,x", "rate"); err == nil || !strings.HasPrefix(err.Error(), `bad rate "x"`) {
		t.Errorf("ParseFloats: %v", err)
	}
	ds, err := ParseDurations("50us, 2ms")
	if err != nil || !slices.Equal(ds, []time.Duration{50 * time.Microsecond, 2 * time.Millisecond}) || JoinDurations(ds) != "50µs,2ms" {
		t.Errorf("ParseDurations: %v %v", ds, err)
	}
	if _, err := ParseDurations("-1s"); err == nil {
		t.Error("a negative duration")
	}
	if FirstLine("a\nb") != "a" || FirstLine("a") != "a" {
		t.Error("FirstLine")
	}
}

// TestAccelName: reports name the accelerator the run resolved, and say
// auto when it was left to each boot.
func TestAccelName(t *testing.T) {
	for a, want := range map[vm.Accel]string{vm.AccelKVM: "KVM", vm.AccelTCG: "TCG", vm.AccelAuto: "auto", "": "auto"} {
		e := Env{Accel: a}
		if got := e.AccelName(); got != want {
			t.Errorf("Env{Accel: %q}.AccelName() = %q, want %q", string(a), got, want)
		}
	}
}

func TestFailureList(t *testing.T) {
	type job struct {
		name string
		err  error
	}
	for _, tc := range []struct {
		name string
		jobs []job
		want string
	}{
		{"none", nil, ""},
		{"all ok", []job{{"a", nil}, {"b", nil}}, ""},
		{"first lines only", []job{{"a", nil}, {"b round 2", errors.New("boot failed\nlog tail")}, {"c", errors.New("timeout")}},
			"\nfailures:\n  b round 2: boot failed\n  c: timeout\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FailureList(tc.jobs, func(j job) (string, error) { return j.name, j.err })
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
