package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/npfnic/npfnic/vdevice/trace"
)

// traceFlags are -trace FILE and -trace-events N, which serve, boot and
// every experiment that runs the device share: the device's event trace
// (package trace), written when the command ends.
type traceFlags struct {
	path   *string
	events *int
}

func addTraceFlags(fs *flag.FlagSet) *traceFlags {
	return &traceFlags{
		path: fs.String("trace", "", "write the device's event trace to this file (Chrome trace-event JSON: open it in Perfetto or chrome://tracing; render a fault with npfnic trace)"),
		events: fs.Int("trace-events", trace.DefaultCapacity,
			"with -trace, keep the newest N events (40 bytes each in memory)"),
	}
}

// check checks -trace-events and that the -trace file can be written,
// before the command starts anything.
func (f *traceFlags) check() error {
	if *f.path == "" {
		return nil
	}
	if *f.events < 0 || *f.events > trace.MaxCapacity {
		return usageErrorf("-trace-events %d: want 1 to %d (0: %d)", *f.events, trace.MaxCapacity, trace.DefaultCapacity)
	}
	return checkOutFile("-trace", *f.path)
}

// recorder returns the recorder the device records into, nil without
// -trace.
func (f *traceFlags) recorder() (*trace.Recorder, error) {
	if err := f.check(); err != nil || *f.path == "" {
		return nil, err
	}
	return trace.New(*f.events)
}

// write writes r to the -trace file and says so on w; nothing without
// -trace.
func (f *traceFlags) write(r *trace.Recorder, w io.Writer) error {
	if r == nil {
		return nil
	}
	if err := r.WriteFile(*f.path); err != nil {
		return err
	}
	ev, lost := r.Snapshot()
	fmt.Fprintf(w, "trace: %d events in %s", len(ev), *f.path)
	if lost > 0 {
		fmt.Fprintf(w, " (the %d before them were overwritten; -trace-events keeps more)", lost)
	}
	fmt.Fprintln(w)
	return nil
}
