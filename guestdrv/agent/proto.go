// Package agent is the guest agent that lets the host drive a test guest: a
// line-oriented JSON protocol over a dedicated serial port (ttyS1), so the
// console stays free for people and logs. It runs commands and returns their
// output and exit status, copies files in and out, and loads kernel modules
// with their dependencies. The host side (Client) is used by the VM harness.
package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// The guest image layout the agent and the image builder agree on.
const (
	GuestDriverPath = "/lib/npfnic/npfnic.ko"
	ModulesDir      = "/lib/npfnic/modules" // loaded on demand, never by init
	LoadOrderFile   = ModulesDir + "/load-order"
	AgentPath       = "/bin/npfnic-agent"
	AgentTTY        = "/dev/ttyS1"
)

// DriverDeps are the kernel modules npfnic.ko links against (its RDMA
// device: the RDMA core and its user verbs), shipped in every image and
// loaded, with their own dependencies, before the driver.
var DriverDeps = []string{"ib_core", "ib_uverbs"}

// Operations a request can ask for.
const (
	OpPing    = "ping"
	OpRun     = "run"
	OpPut     = "put"
	OpGet     = "get"
	OpModload = "modload"
)

// Request is one line from the host.
type Request struct {
	ID      uint64   `json:"id"`
	Op      string   `json:"op"`
	Argv    []string `json:"argv,omitempty"`
	Stdin   []byte   `json:"stdin,omitempty"`
	Timeout int64    `json:"timeout_ms,omitempty"` // run: kill the command after this long
	Path    string   `json:"path,omitempty"`
	Data    []byte   `json:"data,omitempty"`
	Mode    uint32   `json:"mode,omitempty"`
	Modules []string `json:"modules,omitempty"`
}

// Response is one line from the guest, answering the request with the same ID.
type Response struct {
	ID uint64 `json:"id"`
	// Op is never set in a response: a line that has it is the tty echoing
	// a request back (the port echoes until the agent puts it in raw mode).
	Op       string `json:"op,omitempty"`
	Exit     int    `json:"exit"`
	Stdout   []byte `json:"stdout,omitempty"`
	Stderr   []byte `json:"stderr,omitempty"`
	Data     []byte `json:"data,omitempty"`
	Err      string `json:"err,omitempty"` // the agent could not carry the request out
	TimedOut bool   `json:"timed_out,omitempty"`
}

// maxLine bounds one message; file transfers above it must be chunked by the caller.
const maxLine = 64 << 20

// Conn frames requests and responses as JSON lines over a byte stream.
type Conn struct {
	r  *bufio.Reader
	w  io.Writer
	mu sync.Mutex
}

// NewConn wraps a stream (the serial port on the guest, the chardev socket on the host).
func NewConn(rw io.ReadWriter) *Conn {
	return &Conn{r: bufio.NewReaderSize(rw, 1<<20), w: rw}
}

// Send writes one message as a single line.
func (c *Conn) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.w.Write(b)
	return err
}

// ErrLineTooLong is returned for a line above maxLine; the line is discarded.
var ErrLineTooLong = errors.New("agent: message line too long")

// ReadLine returns the next line without its newline. Serial ports may carry
// noise (boot messages, a half-sent line from before a reconnect): callers
// skip lines that do not decode.
func (c *Conn) ReadLine() ([]byte, error) {
	var line []byte
	discarding := false
	for {
		chunk, err := c.r.ReadSlice('\n')
		if !discarding {
			if len(line)+len(chunk) > maxLine {
				discarding, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return nil, err
		}
		if discarding {
			return nil, ErrLineTooLong
		}
		return line[:len(line)-1], nil
	}
}

// Decode parses a line into v, reporting noise as an error.
func Decode(line []byte, v any) error {
	if len(line) == 0 || line[0] != '{' {
		return fmt.Errorf("agent: not a message: %.40q", line)
	}
	return json.Unmarshal(line, v)
}
