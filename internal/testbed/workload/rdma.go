package workload

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The RDMA workloads are Debian's unmodified ibverbs programs: perftest's
// ib_{send,write,read}_{bw,lat} and libibverbs' ibv_rc_pingpong. Both sides
// of a test run the same command, the server first (listening on TCP for
// the out-of-band exchange of QP numbers, PSNs, GIDs and keys), then the
// client with the server's address.

// Perftest is one perftest run.
type Perftest struct {
	Tool string // ib_send_bw, ib_write_bw, ib_read_bw, ib_send_lat, ib_write_lat, ...
	// Size is the message size in bytes; 0 with All runs every size
	// from 2 bytes to 8 MiB (-a).
	Size int
	All  bool
	// Iters is the number of iterations per size (-n); 0: perftest's
	// default.
	Iters int
	// Duration, instead of a number of iterations, runs the test this
	// long (-D, whole seconds, at least one); perftest reports the
	// messages of the middle of it, leaving out a margin at each end.
	Duration time.Duration
	// ODP registers the buffers with IBV_ACCESS_ON_DEMAND (--odp).
	ODP bool
	// Port is the TCP port of the out-of-band exchange (-p); 0: perftest's
	// 18515. A run that gave up may leave its server behind on its port.
	Port int
	// Extra flags, e.g. "-e" (completion events), "-I 64" (inline).
	Extra []string
}

// Args is the command line on one side: Dev and GIDIndex are that side's
// ibverbs device and RoCEv2 GID index (-x); server is the server's address
// on the client, "" on the server.
func (p Perftest) Args(dev string, gidIndex int, server string) []string {
	args := []string{p.Tool, "-d", dev, "-x", strconv.Itoa(gidIndex)}
	switch {
	case p.All:
		args = append(args, "-a")
	case p.Size > 0:
		args = append(args, "-s", strconv.Itoa(p.Size))
	}
	if p.Iters > 0 {
		args = append(args, "-n", strconv.Itoa(p.Iters))
	}
	if p.Duration > 0 {
		args = append(args, "-D", strconv.Itoa(int(max(p.Duration.Round(time.Second), time.Second)/time.Second)))
	}
	if p.ODP {
		args = append(args, "--odp")
	}
	if p.Port > 0 {
		args = append(args, "-p", strconv.Itoa(p.Port))
	}
	args = append(args, p.Extra...)
	if server != "" {
		args = append(args, server)
	}
	return args
}

// Latency tests report these columns per size, in µs.
type PerftestLatency struct {
	Min, Max, Typical, Avg, Stdev, P99, P999 float64
}

// PerftestRow is one message size's result line.
type PerftestRow struct {
	Bytes, Iters int
	// Bandwidth tests: MB/s (10^6 bytes), peak and average, and the
	// message rate in millions per second.
	PeakMBs, AvgMBs, MsgRateMpps float64
	// Latency tests.
	Latency *PerftestLatency
}

// ParsePerftest reads the result table perftest prints between dashed
// lines: a header naming the columns, then a row per message size.
func ParsePerftest(out string) ([]PerftestRow, error) {
	var rows []PerftestRow
	var cols []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "#bytes" {
			cols = perftestColumns(line)
			continue
		}
		// Rows start with the message size; perftest's notes ("Device not
		// recognized to implement inline feature...") may follow the table
		// in the same output.
		if _, err := strconv.Atoi(f[0]); cols == nil || err != nil {
			continue
		}
		if len(f) != len(cols) {
			return nil, fmt.Errorf("perftest: row %q has %d columns, the header %d (%v)", strings.TrimSpace(line), len(f), len(cols), cols)
		}
		var r PerftestRow
		var lat PerftestLatency
		for i, c := range cols {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil && c == "t_stdev[usec]" && strings.EqualFold(strings.TrimLeft(f[i], "+-"), "nan") {
				// perftest takes the square root of a variance that
				// rounding made negative when one sample dwarfs the
				// rest (a 201 ms stall among 700 µs ones): unknown.
				v, err = math.NaN(), nil
			}
			if err != nil {
				return nil, fmt.Errorf("perftest: column %s: %w", c, err)
			}
			switch c {
			case "#bytes":
				r.Bytes = int(v)
			case "#iterations":
				r.Iters = int(v)
			case "BW peak[MB/sec]":
				r.PeakMBs = v
			case "BW average[MB/sec]":
				r.AvgMBs = v
			case "MsgRate[Mpps]":
				r.MsgRateMpps = v
			case "t_min[usec]":
				lat.Min, r.Latency = v, &lat
			case "t_max[usec]":
				lat.Max = v
			case "t_typical[usec]":
				lat.Typical = v
			case "t_avg[usec]":
				lat.Avg = v
			case "t_stdev[usec]":
				lat.Stdev = v
			case "99% percentile[usec]":
				lat.P99 = v
			case "99.9% percentile[usec]":
				lat.P999 = v
			default:
				return nil, fmt.Errorf("perftest: unknown column %q", c)
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, errors.New("perftest: no result rows in the output")
	}
	return rows, nil
}

// IsPerftestTool reports whether program is one of perftest's
// ib_{send,write,read,atomic}_{bw,lat}.
func IsPerftestTool(program string) bool {
	rest, isIB := strings.CutPrefix(program, "ib_")
	verb, kind, ok := strings.Cut(rest, "_")
	if !isIB || !ok || (kind != "bw" && kind != "lat") {
		return false
	}
	switch verb {
	case "send", "write", "read", "atomic":
		return true
	}
	return false
}

// PerftestClockFailed reports whether a perftest run failed to produce
// its report because its own measurement of the CPU clock did not hold
// ("Correlation coefficient r^2: ... < 0.9", "Can't produce a report"):
// a TCG guest stalled while perftest sampled its clock. Nothing of the
// transfer failed, so a caller may run it again.
func PerftestClockFailed(out string) bool {
	return strings.Contains(out, "Correlation coefficient") && strings.Contains(out, "Can't produce a report")
}

// perftestColumns splits perftest's header line into its column names,
// some of which contain spaces ("BW peak[MB/sec]", "99% percentile[usec]"):
// a name ends with "]" or is a "#" word.
func perftestColumns(line string) []string {
	var cols []string
	var cur []string
	for _, w := range strings.Fields(line) {
		cur = append(cur, w)
		if strings.HasPrefix(w, "#") || strings.HasSuffix(w, "]") {
			cols = append(cols, strings.Join(cur, " "))
			cur = nil
		}
	}
	return cols
}

// Pingpong is one ibv_rc_pingpong run.
type Pingpong struct {
	// Program is the ibverbs-utils pingpong: ibv_rc_pingpong (the
	// default), ibv_srq_pingpong (which also takes QPs), ibv_uc_pingpong
	// or ibv_ud_pingpong (whose Size must fit the port's MTU): they take
	// the same flags.
	Program     string
	QPs         int // -q: ibv_srq_pingpong's QPs sharing its SRQ; 0: its 16
	Size, Iters int // -s, -n
	ODP         bool
	Events      bool // -e: sleep on CQ events
	Validate    bool // -c: check the received buffer's contents
	// Port is the TCP port of the out-of-band exchange (-p); 0: 18515.
	Port int
}

// Args is the command line on one side (see Perftest.Args).
func (p Pingpong) Args(dev string, gidIndex int, server string) []string {
	args := []string{cmp.Or(p.Program, "ibv_rc_pingpong"), "-d", dev, "-g", strconv.Itoa(gidIndex)}
	if p.QPs > 0 {
		args = append(args, "-q", strconv.Itoa(p.QPs))
	}
	if p.Size > 0 {
		args = append(args, "-s", strconv.Itoa(p.Size))
	}
	if p.Iters > 0 {
		args = append(args, "-n", strconv.Itoa(p.Iters))
	}
	if p.Port > 0 {
		args = append(args, "-p", strconv.Itoa(p.Port))
	}
	for _, f := range []struct {
		on   bool
		flag string
	}{{p.ODP, "-o"}, {p.Events, "-e"}, {p.Validate, "-c"}} {
		if f.on {
			args = append(args, f.flag)
		}
	}
	if server != "" {
		args = append(args, server)
	}
	return args
}

// PingpongResult is what ibv_rc_pingpong reports at the end.
type PingpongResult struct {
	Bytes       int64
	Mbps        float64
	Iters       int
	UsecPerIter float64
}

// ParsePingpong reads ibv_rc_pingpong's two result lines:
// "N bytes in S seconds = R Mbit/sec" and "N iters in S seconds = U usec/iter".
func ParsePingpong(out string) (PingpongResult, error) {
	var r PingpongResult
	var haveBytes, haveIters bool
	for _, line := range strings.Split(out, "\n") {
		var secs float64
		switch {
		case strings.Contains(line, " bytes in "):
			if _, err := fmt.Sscanf(strings.TrimSpace(line), "%d bytes in %g seconds = %g Mbit/sec", &r.Bytes, &secs, &r.Mbps); err != nil {
				return r, fmt.Errorf("ibv_rc_pingpong: %q: %w", line, err)
			}
			haveBytes = true
		case strings.Contains(line, " iters in "):
			if _, err := fmt.Sscanf(strings.TrimSpace(line), "%d iters in %g seconds = %g usec/iter", &r.Iters, &secs, &r.UsecPerIter); err != nil {
				return r, fmt.Errorf("ibv_rc_pingpong: %q: %w", line, err)
			}
			haveIters = true
		}
	}
	if !haveBytes || !haveIters {
		return r, errors.New("ibv_rc_pingpong: no result lines in the output")
	}
	return r, nil
}
