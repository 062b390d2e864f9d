package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
)

// qmpConn is a go-qemu QMP monitor that writes every command, reply and
// event to a transcript file.
type qmpConn struct {
	mon    *qmp.SocketMonitor
	mu     sync.Mutex
	log    *os.File
	cancel context.CancelFunc
}

func newQMP(sockPath, logPath string) (*qmpConn, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	mon, err := qmp.NewSocketMonitor("unix", sockPath, 10*time.Second)
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := mon.Connect(); err != nil {
		f.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := &qmpConn{mon: mon, log: f, cancel: cancel}
	events, err := mon.Events(ctx)
	if err == nil {
		go func() {
			for ev := range events {
				b, _ := json.Marshal(ev)
				q.write("event", b)
			}
		}()
	}
	q.write("connected", []byte(sockPath))
	return q, nil
}

func (q *qmpConn) write(kind string, b []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	fmt.Fprintf(q.log, "%s %-9s %s\n", time.Now().Format("15:04:05.000"), kind, b)
}

// run sends a raw QMP command: go-qemu's typed commands predate QEMU 11, so
// commands go as JSON through SocketMonitor.Run.
func (q *qmpConn) run(ctx context.Context, command string, arguments any) (json.RawMessage, error) {
	req := map[string]any{"execute": command}
	if arguments != nil {
		req["arguments"] = arguments
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	q.write("->", b)
	type result struct {
		out []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		out, err := q.mon.Run(b)
		ch <- result{out, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			q.write("<- error", []byte(r.err.Error()))
			return nil, fmt.Errorf("QMP %s: %w", command, r.err)
		}
		q.write("<-", r.out)
		var reply struct {
			Return json.RawMessage `json:"return"`
		}
		if err := json.Unmarshal(r.out, &reply); err != nil {
			return nil, fmt.Errorf("QMP %s reply: %w", command, err)
		}
		return reply.Return, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (q *qmpConn) close() {
	q.cancel()
	_ = q.mon.Disconnect()
	q.mu.Lock()
	q.log.Close()
	q.mu.Unlock()
}
