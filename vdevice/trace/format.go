package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// The Chrome trace-event format (the JSON object form): instants ("i"),
// complete events ("X") for spans, async slices ("b"/"e") for a page
// request group's and an invalidation's lifetime, and metadata ("M") that
// names the process and the tracks. Timestamps are microseconds with
// nanosecond decimals. Arguments that hold addresses are hex strings, since
// JSON numbers lose bits above 2^53.

// args names A and B per kind; hex marks arguments written as hex strings.
var args = [kindCount]struct {
	a, b       string
	aHex, bHex bool
}{
	Doorbell:       {a: "reg", b: "value", aHex: true},
	DescFetch:      {a: "index", b: "count"},
	DMARead:        {a: "addr", b: "bytes", aHex: true},
	DMAWrite:       {a: "addr", b: "bytes", aHex: true},
	ATCHit:         {a: "page", b: "pasid", aHex: true},
	ATCMiss:        {a: "page", b: "pasid", aHex: true},
	Walk:           {a: "page", b: "frame", aHex: true, bHex: true},
	Fault:          {a: "va", b: "desc", aHex: true},
	PageRequest:    {a: "prgi", b: "page", bHex: true},
	PageResponse:   {a: "prgi", b: "code"},
	Invalidate:     {a: "tag", b: "page", bHex: true},
	InvalidateDone: {a: "tag", b: "dropped"},
	IRQ:            {a: "vector"},
	IRQDeferred:    {a: "vector"},
	BackupStore:    {a: "desc", b: "bm_index"},
	BackupResolve:  {a: "bm_index", b: "rx_head"},
	RxFrame:        {a: "desc", b: "bytes"},
	TxFrame:        {a: "desc", b: "bytes"},
	RxDrop:         {a: "desc", b: "reason"},
	RCTx:           {a: "qpn_syndrome", b: "opcode_psn", aHex: true, bHex: true},
	RCRx:           {a: "qpn_syndrome", b: "opcode_psn", aHex: true, bHex: true},
	CQE:            {a: "cqn", b: "status_opcode", bHex: true},
	RDMAEvent:      {a: "type", b: "handle"},
	RCResume:       {a: "qpn", b: "psn", aHex: true, bHex: true},
	RegRead:        {a: "reg", b: "value", aHex: true, bHex: true},
}

// async names the slice a kind begins or ends.
func async(k Kind) (name, ph string) {
	switch k {
	case PageRequest:
		return "page request group", "b"
	case PageResponse:
		return "page request group", "e"
	case Invalidate:
		return "invalidation", "b"
	case InvalidateDone:
		return "invalidation", "e"
	}
	return "", ""
}

const pid = 1

// WriteJSON writes events in the Chrome trace-event format. lost (events
// the ring overwrote) goes into the metadata.
func WriteJSON(w io.Writer, events []Event, lost uint64) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	fmt.Fprintf(bw, `{"displayTimeUnit":"ns","otherData":{"producer":"npfnic","lost_events":%d},"traceEvents":[`+"\n", lost)
	fmt.Fprintf(bw, `{"name":"process_name","ph":"M","pid":%d,"args":{"name":"npfnic"}}`, pid)
	tracks := map[Track]bool{}
	for _, e := range events {
		tracks[e.Track] = true
	}
	ids := make([]int, 0, len(tracks))
	for t := range tracks {
		ids = append(ids, int(t))
	}
	sort.Ints(ids)
	for _, t := range ids {
		fmt.Fprintf(bw, ",\n"+`{"name":"thread_name","ph":"M","pid":%d,"tid":%d,"args":{"name":%q}}`, pid, t, Track(t).Name())
		fmt.Fprintf(bw, ",\n"+`{"name":"thread_sort_index","ph":"M","pid":%d,"tid":%d,"args":{"sort_index":%d}}`, pid, t, t)
	}
	var buf []byte
	for _, e := range events {
		buf = appendEvent(buf[:0], e)
		bw.WriteString(",\n")
		bw.Write(buf)
		if name, ph := async(e.Kind); name != "" {
			buf = fmt.Appendf(buf[:0], `{"name":%q,"cat":"npfnic","ph":%q,"id":"%#x","ts":%s,"pid":%d,"tid":%d}`,
				name, ph, e.A, micros(e.TS), pid, e.Track)
			bw.WriteString(",\n")
			bw.Write(buf)
		}
	}
	bw.WriteString("\n]}\n")
	return bw.Flush()
}

func appendEvent(buf []byte, e Event) []byte {
	buf = fmt.Appendf(buf, `{"name":%q,"cat":"npfnic","ts":%s,"pid":%d,"tid":%d,`, e.Kind.String(), micros(e.TS), pid, e.Track)
	if e.Dur > 0 {
		buf = fmt.Appendf(buf, `"ph":"X","dur":%s,`, micros(e.Dur))
	} else {
		buf = append(buf, `"ph":"i","s":"t",`...)
	}
	buf = append(buf, `"args":{`...)
	var an = args[0]
	if e.Kind < kindCount {
		an = args[e.Kind]
	}
	if an.a == "" {
		an.a = "a"
	}
	buf = appendArg(buf, an.a, e.A, an.aHex)
	if an.b != "" {
		buf = append(buf, ',')
		buf = appendArg(buf, an.b, e.B, an.bHex)
	}
	return append(buf, "}}"...)
}

func appendArg(buf []byte, name string, v uint64, hex bool) []byte {
	if hex {
		return fmt.Appendf(buf, `%q:"%#x"`, name, v)
	}
	return fmt.Appendf(buf, `%q:%d`, name, v)
}

// micros formats nanoseconds as microseconds with three decimals.
func micros(ns int64) string {
	neg := ""
	if ns < 0 {
		neg, ns = "-", -ns
	}
	return fmt.Sprintf("%s%d.%03d", neg, ns/1000, ns%1000)
}

// WriteFile writes r's events to path.
func (r *Recorder) WriteFile(path string) error {
	events, lost := r.Snapshot()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteJSON(f, events, lost); err != nil {
		f.Close()
		return fmt.Errorf("trace: %w", err) // "write PATH: ..."
	}
	return f.Close()
}

// ReadJSON reads a trace WriteJSON wrote back into events, in file order
// (the async and metadata records that WriteJSON derives are skipped).
func ReadJSON(rd io.Reader) (events []Event, lost uint64, err error) {
	var doc struct {
		OtherData struct {
			Lost uint64 `json:"lost_events"`
		} `json:"otherData"`
		TraceEvents []struct {
			Name string                     `json:"name"`
			Ph   string                     `json:"ph"`
			TS   json.Number                `json:"ts"`
			Dur  json.Number                `json:"dur"`
			Tid  int                        `json:"tid"`
			Args map[string]json.RawMessage `json:"args"`
		} `json:"traceEvents"`
	}
	dec := json.NewDecoder(rd)
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, 0, fmt.Errorf("not a device trace: %w", err)
	}
	byName := map[string]Kind{}
	for k := Kind(1); k < kindCount; k++ {
		byName[k.String()] = k
	}
	for i, te := range doc.TraceEvents {
		if te.Ph != "i" && te.Ph != "X" {
			continue
		}
		k, ok := byName[te.Name]
		if !ok {
			return nil, 0, fmt.Errorf("event %d: unknown name %q", i, te.Name)
		}
		e := Event{Kind: k, Track: Track(te.Tid)}
		if e.TS, err = nanos(te.TS); err != nil {
			return nil, 0, fmt.Errorf("event %d: ts: %w", i, err)
		}
		if te.Ph == "X" {
			if e.Dur, err = nanos(te.Dur); err != nil {
				return nil, 0, fmt.Errorf("event %d: dur: %w", i, err)
			}
		}
		an := args[k]
		if an.a == "" {
			an.a = "a"
		}
		if e.A, err = argValue(te.Args, an.a); err != nil {
			return nil, 0, fmt.Errorf("event %d: %w", i, err)
		}
		if an.b != "" {
			if e.B, err = argValue(te.Args, an.b); err != nil {
				return nil, 0, fmt.Errorf("event %d: %w", i, err)
			}
		}
		events = append(events, e)
	}
	return events, doc.OtherData.Lost, nil
}

// ReadFile reads the trace at path.
func ReadFile(path string) ([]Event, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	events, lost, err := ReadJSON(f)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return events, lost, nil
}

func nanos(n json.Number) (int64, error) {
	s := string(n)
	whole, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(whole, "-")
	w, err := strconv.ParseInt(strings.TrimPrefix(whole, "-"), 10, 64)
	if err != nil {
		return 0, err
	}
	frac = (frac + "000")[:3]
	f, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return 0, err
	}
	v := w*1000 + f
	if neg {
		v = -v
	}
	return v, nil
}

func argValue(m map[string]json.RawMessage, name string) (uint64, error) {
	raw, ok := m[name]
	if !ok {
		return 0, fmt.Errorf("argument %q missing", name)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			return 0, fmt.Errorf("argument %q: %w", name, err)
		}
		return v, nil
	}
	v, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, errors.Join(fmt.Errorf("argument %q", name), err)
	}
	return v, nil
}
