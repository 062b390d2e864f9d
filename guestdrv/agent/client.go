package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// Client is the host end: it sends requests and matches responses by ID.
type Client struct {
	conn    *Conn
	closer  io.Closer
	nextID  atomic.Uint64
	mu      sync.Mutex
	waiters map[uint64]chan Response
	err     error // set once the stream failed
	done    chan struct{}
}

// NewClient starts reading responses from rw.
func NewClient(rw io.ReadWriteCloser) *Client {
	c := &Client{conn: NewConn(rw), closer: rw, waiters: map[uint64]chan Response{}, done: make(chan struct{})}
	go c.readLoop()
	return c
}

func (c *Client) readLoop() {
	var err error
	for {
		var line []byte
		line, err = c.conn.ReadLine()
		if errors.Is(err, ErrLineTooLong) {
			continue
		}
		if err != nil {
			break
		}
		var resp Response
		if Decode(line, &resp) != nil || resp.Op != "" {
			continue // noise, or our own request echoed by the tty
		}
		c.mu.Lock()
		ch := c.waiters[resp.ID]
		delete(c.waiters, resp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("agent connection: %w", err)
	c.mu.Unlock()
	close(c.done)
}

// Done is closed when the connection to the agent is lost.
func (c *Client) Done() <-chan struct{} { return c.done }

// Call sends a request and waits for its response or ctx.
func (c *Client) Call(ctx context.Context, req Request) (Response, error) {
	req.ID = c.nextID.Add(1)
	ch := make(chan Response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return Response{}, err
	}
	c.waiters[req.ID] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.waiters, req.ID)
		c.mu.Unlock()
	}
	if err := c.conn.Send(req); err != nil {
		forget()
		return Response{}, err
	}
	select {
	case resp := <-ch:
		if resp.Err != "" {
			return resp, fmt.Errorf("guest agent: %s", resp.Err)
		}
		return resp, nil
	case <-ctx.Done():
		forget()
		return Response{}, ctx.Err()
	case <-c.done:
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return Response{}, err
	}
}

// Close ends the connection.
func (c *Client) Close() error { return c.closer.Close() }
