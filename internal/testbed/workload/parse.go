package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Iperf is one iperf3 TCP run, as the receiver counted it.
type Iperf struct {
	// Bytes and Seconds are the receiver's (end.sum_received).
	Bytes   int64
	Seconds float64
	// Mbps is the receiver's rate in Mbit/s (10^6 bit/s).
	Mbps float64
	// SentBytes is what the sender wrote; Retransmits its TCP
	// retransmissions (only a Linux sender reports them).
	SentBytes   int64
	Retransmits int
}

func (r *Iperf) String() string {
	return fmt.Sprintf("%.1f Mbit/s (%.1f MB in %.1fs, %d retransmits)", r.Mbps, float64(r.Bytes)/1e6, r.Seconds, r.Retransmits)
}

// ParseIperf3 reads the JSON report of an iperf3 client (-J). The client's
// report carries the server's count in end.sum_received, so whichever side
// sends, the rate is the receiver's. An "error" in the report, a missing
// summary or zero received bytes is an error.
func ParseIperf3(report []byte) (*Iperf, error) {
	var j struct {
		Error string `json:"error"`
		End   struct {
			SumSent struct {
				Bytes       int64 `json:"bytes"`
				Retransmits int   `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived *struct {
				Seconds       float64 `json:"seconds"`
				Bytes         int64   `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(report, &j); err != nil {
		return nil, fmt.Errorf("iperf3 report is not JSON (%v): %s", err, tailString(strings.TrimSpace(string(report)), 500))
	}
	if j.Error != "" {
		return nil, fmt.Errorf("iperf3: %s", j.Error)
	}
	s := j.End.SumReceived
	if s == nil {
		return nil, errors.New("iperf3 report has no end.sum_received")
	}
	if s.Bytes <= 0 || s.Seconds <= 0 {
		return nil, fmt.Errorf("iperf3: the receiver got %d bytes in %.2fs", s.Bytes, s.Seconds)
	}
	return &Iperf{
		Bytes: s.Bytes, Seconds: s.Seconds, Mbps: s.BitsPerSecond / 1e6,
		SentBytes: j.End.SumSent.Bytes, Retransmits: j.End.SumSent.Retransmits,
	}, nil
}

// Memaslap is one memaslap run.
type Memaslap struct {
	// Ops (gets and sets) over RunTime seconds; OpsPerSec is memaslap's TPS.
	Ops       int64
	RunTime   float64
	OpsPerSec float64
	// NetMBps is memaslap's Net_rate (MiB/s both ways).
	NetMBps                                         float64
	Gets, Sets, GetMisses, VerifyMisses, VerifyFail int64
	// Errors counts failures memaslap reported: values that failed
	// verification, error replies from the server ("<FD SERVER_ERROR ..."),
	// sets that did not store, and messages on its standard error (lost
	// connections, protocol errors). ErrorLines holds the first few.
	Errors     int
	ErrorLines []string
}

func (m *Memaslap) String() string {
	return fmt.Sprintf("%.0f ops/s (%d ops in %.1fs, %d get misses, %d errors)", m.OpsPerSec, m.Ops, m.RunTime, m.GetMisses, m.Errors)
}

var memaslapSummary = regexp.MustCompile(`(?m)^Run time: ([0-9.]+)s Ops: ([0-9]+) TPS: ([0-9.]+) Net_rate: ([0-9.]+)M/s`)

// MaxErrorLines bounds Memaslap.ErrorLines.
const MaxErrorLines = 5

// benignStderr are memaslap's messages that are no failure.
var benignStderr = []string{"WARNING: Could not set CPU Affinity"}

// ParseMemaslap reads memaslap's standard output and error. A run without
// the final summary line is an error; failures it reported along the way
// are counted in Errors.
func ParseMemaslap(stdout, stderr string) (*Memaslap, error) {
	m := &Memaslap{}
	sum := memaslapSummary.FindStringSubmatch(stdout)
	if sum == nil {
		return nil, errors.New("memaslap printed no summary (Run time: ... Ops: ... TPS: ...)")
	}
	var err error
	num := func(s string) float64 {
		v, e := strconv.ParseFloat(s, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("memaslap summary: bad number %q", s)
		}
		return v
	}
	m.RunTime, m.Ops, m.OpsPerSec, m.NetMBps = num(sum[1]), int64(num(sum[2])), num(sum[3]), num(sum[4])
	if err != nil {
		return nil, err
	}
	counters := map[string]*int64{
		"cmd_get": &m.Gets, "cmd_set": &m.Sets, "get_misses": &m.GetMisses,
		"verify_misses": &m.VerifyMisses, "verify_failed": &m.VerifyFail,
	}
	addError := func(line string, n int) {
		m.Errors += n
		if len(m.ErrorLines) < MaxErrorLines {
			m.ErrorLines = append(m.ErrorLines, line)
		}
	}
	for _, line := range strings.Split(stdout, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ": "); ok {
			if p := counters[k]; p != nil {
				n, e := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if e != nil {
					return nil, fmt.Errorf("memaslap: bad counter line %q", line)
				}
				*p = n
				continue
			}
		}
		// "<17 SERVER_ERROR out of memory", "<17 ERROR", "key: ... didn't set success"
		if strings.HasPrefix(line, "<") || strings.Contains(line, "didn't set success") {
			addError(line, 1)
		}
	}
	if m.VerifyFail > 0 {
		addError(fmt.Sprintf("verify_failed: %d", m.VerifyFail), int(m.VerifyFail))
	}
	for _, line := range strings.Split(stderr, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || hasAnyPrefix(line, benignStderr) {
			continue
		}
		addError(line, 1)
	}
	return m, nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
