package workload

import (
	"bufio"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Period is one line of memaslap's periodic statistics (-S 1s): the
// "Period" row of its "Total Statistics" block.
type Period struct {
	// Second is the end of the period in seconds since memaslap's clock
	// started (the "Global" row's time).
	Second int
	// Ops and OpsPerSec are the gets and sets completed in the period.
	Ops       int64
	OpsPerSec float64
	// Arrival is when the line was read, since memaslap was started (0:
	// unknown). memaslap starts its clock only once its connections are
	// up, which from a cold ring can take many seconds: Arrival places
	// the periods in wall-clock time.
	Arrival time.Duration
}

// PeriodParser reads memaslap's standard output line by line and picks out
// the periodic totals as they come. memaslap prints, every stat period, a
// "Get Statistics", a "Set Statistics" and a "Total Statistics" block, each
// with a "Period" row (this period) and a "Global" row (since the start,
// whose time column is the elapsed time); a period without operations still
// prints, with zeros.
type PeriodParser struct {
	section string // "Get", "Set", "Total" or ""
	pending *Period
	periods []Period
}

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// Line feeds one line of output; it returns the period completed by this
// line, if any.
func (p *PeriodParser) Line(line string) (Period, bool) {
	return p.LineAt(line, 0)
}

// LineAt is Line for a line read at arrival (since memaslap started).
func (p *PeriodParser) LineAt(line string, arrival time.Duration) (Period, bool) {
	line = strings.TrimSpace(ansiEscape.ReplaceAllString(line, ""))
	switch {
	case strings.HasSuffix(line, "Statistics") || strings.Contains(line, "Statistics ("):
		// "Total Statistics", or the final "Total Statistics (N events)".
		p.section = strings.Fields(line)[0]
		if strings.Contains(line, "events") {
			p.section = "" // the final summary, not a period block
		}
		p.pending = nil
		return Period{}, false
	case p.section != "Total":
		return Period{}, false
	}
	f := strings.Fields(line)
	if len(f) < 4 {
		return Period{}, false
	}
	switch f[0] {
	case "Period":
		ops, err1 := strconv.ParseInt(f[2], 10, 64)
		tps, err2 := strconv.ParseFloat(f[3], 64)
		if err1 != nil || err2 != nil {
			return Period{}, false
		}
		p.pending = &Period{Ops: ops, OpsPerSec: tps}
	case "Global":
		sec, err := strconv.Atoi(f[1])
		if err != nil || p.pending == nil {
			return Period{}, false
		}
		per := *p.pending
		per.Second, per.Arrival = sec, arrival
		p.pending = nil
		p.periods = append(p.periods, per)
		return per, true
	}
	return Period{}, false
}

// Periods returns the periods seen so far, in order.
func (p *PeriodParser) Periods() []Period { return p.periods }

// ParsePeriods reads a whole memaslap output.
func ParsePeriods(r io.Reader) ([]Period, error) {
	var p PeriodParser
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.Line(sc.Text())
	}
	return p.Periods(), sc.Err()
}

// Bins turns periods into operations per wall-clock second since
// memaslap was started: bin i is second i+1, for n seconds. memaslap's
// periods are one second of its own clock apart (the Global column), and
// its clock starts when its connections are up; with arrival times, the
// offset of its clock is the smallest (arrival - Global second) over the
// periods (the line printed with the least delay), and period k lands in
// wall second round(offset + k). Without arrival times the offset is 0.
// Periods landing on the same second add up; seconds without any are 0.
func Bins(periods []Period, n int) []float64 {
	out := make([]float64, n)
	offset := math.Inf(1)
	for _, p := range periods {
		if p.Arrival > 0 {
			offset = math.Min(offset, p.Arrival.Seconds()-float64(p.Second))
		}
	}
	if math.IsInf(offset, 1) {
		offset = 0
	}
	for _, p := range periods {
		i := int(math.Round(offset+float64(p.Second))) - 1
		if i < 0 || i >= n {
			continue
		}
		out[i] += float64(p.Ops)
	}
	return out
}
