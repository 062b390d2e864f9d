package ibrctest

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/internal/clock"
)

// Action is what the link does with one frame.
type Action uint8

// Actions.
const (
	Deliver Action = iota
	Drop
	Duplicate
	Delay
)

// DefaultOverhead is the per-frame wire overhead in bytes: 7 preamble, 1
// SFD, 4 FCS, 12 inter-frame gap.
const DefaultOverhead = 24

// LinkConfig configures a Link.
type LinkConfig struct {
	Clock         clock.Clock
	BitsPerSecond float64 // 0: infinitely fast
	Latency       time.Duration
	Overhead      int // bytes per frame on the wire besides the frame; <0 means 0, 0 means DefaultOverhead
	// Random impairments, each a probability per frame.
	Loss, Dup, Reorder float64
	ReorderDelay       time.Duration
	Seed               uint64
	// Filter, when set, decides each frame's fate instead of the
	// probabilities; side is the sending side (0 or 1), n counts the frames
	// sent on that side from 0.
	Filter func(side int, n uint64, frame []byte) Action
}

// LinkStats counts one direction's frames.
type LinkStats struct {
	Frames, Bytes                  uint64 // sent onto the wire
	Dropped, Duplicated, Reordered uint64
	Delivered                      uint64
}

// Link is the simulated wire between two ports: a full-duplex
// point-to-point Ethernet link with a line rate, a propagation latency and
// injected impairments (loss, duplication, reordering, or a per-frame
// decision), driven by a clock (clock.Virtual for deterministic tests and
// experiments).
//
// Wire model: each direction serializes frames one after another at
// BitsPerSecond, each frame occupying its length plus Overhead bytes
// (preamble, SFD, FCS and inter-frame gap: 24 bytes by default), and
// arrives Latency after its last bit left. A lost frame still used the
// wire; a duplicated one arrives twice; a reordered one arrives
// ReorderDelay late, behind frames sent after it.
//
// Frames sent on side i are delivered to the handler attached to side
// 1-i.
type Link struct {
	cfg LinkConfig
	mu  sync.Mutex
	rng *rand.Rand
	dir [2]struct {
		busy    time.Time
		handler func([]byte) error
		stats   LinkStats
		q       []inflight // frames on the wire, by arrival time then send order
		seq     uint64
		timer   clock.Timer
		timerAt time.Time
		busy2   bool // a deliver call is handing frames over
	}
}

type inflight struct {
	at    time.Time
	seq   uint64
	frame []byte
}

// NewLink returns a link.
func NewLink(cfg LinkConfig) *Link {
	if cfg.Overhead == 0 {
		cfg.Overhead = DefaultOverhead
	} else if cfg.Overhead < 0 {
		cfg.Overhead = 0
	}
	return &Link{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d))}
}

// Attach sets the receive handler of side (an engine's HandleFrame).
func (l *Link) Attach(side int, h func([]byte) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dir[side].handler = h
}

// Port returns the port that sends from side.
func (l *Link) Port(side int) ibrc.Port {
	return ibrc.PortFunc(func(f []byte) error { return l.send(side, f) })
}

// Stats returns the counters of frames sent from side.
func (l *Link) Stats(side int) LinkStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dir[side].stats
}

// SerializationTime returns how long a frame of n bytes occupies the wire.
func (l *Link) SerializationTime(n int) time.Duration {
	if l.cfg.BitsPerSecond <= 0 {
		return 0
	}
	return time.Duration(float64(n+l.cfg.Overhead) * 8 / l.cfg.BitsPerSecond * 1e9)
}

func (l *Link) send(side int, f []byte) error {
	l.mu.Lock()
	d := &l.dir[side]
	n := d.stats.Frames
	d.stats.Frames++
	d.stats.Bytes += uint64(len(f))
	now := l.cfg.Clock.Now()
	start := now
	if d.busy.After(start) {
		start = d.busy
	}
	d.busy = start.Add(l.SerializationTime(len(f)))
	arrive := d.busy.Add(l.cfg.Latency)
	act := Deliver
	if l.cfg.Filter != nil {
		act = l.cfg.Filter(side, n, f)
	} else {
		switch r := l.rng.Float64(); {
		case r < l.cfg.Loss:
			act = Drop
		case r < l.cfg.Loss+l.cfg.Dup:
			act = Duplicate
		case r < l.cfg.Loss+l.cfg.Dup+l.cfg.Reorder:
			act = Delay
		}
	}
	copies := 1
	switch act {
	case Drop:
		d.stats.Dropped++
		l.mu.Unlock()
		return nil
	case Duplicate:
		d.stats.Duplicated++
		copies = 2
	case Delay:
		d.stats.Reordered++
		delay := l.cfg.ReorderDelay
		if delay <= 0 {
			delay = 10 * (l.SerializationTime(len(f)) + time.Microsecond)
		}
		arrive = arrive.Add(delay)
	}
	for i := 0; i < copies; i++ {
		d.seq++
		it := inflight{at: arrive.Add(time.Duration(i)), seq: d.seq, frame: f}
		k := len(d.q)
		for k > 0 && (d.q[k-1].at.After(it.at) || d.q[k-1].at.Equal(it.at) && d.q[k-1].seq > it.seq) {
			k--
		}
		d.q = append(d.q, inflight{})
		copy(d.q[k+1:], d.q[k:])
		d.q[k] = it
	}
	l.schedule(side, now)
	l.mu.Unlock()
	return nil
}

// schedule arms the delivery timer of side's direction for its earliest
// frame; called with mu held.
func (l *Link) schedule(side int, now time.Time) {
	d := &l.dir[side]
	if len(d.q) == 0 {
		return
	}
	at := d.q[0].at
	if d.timer != nil {
		if !at.Before(d.timerAt) {
			return
		}
		d.timer.Stop()
	}
	d.timerAt = at
	d.timer = l.cfg.Clock.AfterFunc(at.Sub(now), func() { l.deliver(side) })
}

// deliver hands every frame that has arrived to the other side, in order,
// from one goroutine at a time, so that even on the real clock the link
// reorders only the frames it was told to.
func (l *Link) deliver(side int) {
	l.mu.Lock()
	d := &l.dir[side]
	d.timer = nil
	if d.busy2 {
		l.mu.Unlock()
		return // the running call delivers these too
	}
	d.busy2 = true
	h := l.dir[1-side].handler
	for {
		now := l.cfg.Clock.Now()
		k := 0
		for k < len(d.q) && !d.q[k].at.After(now) {
			k++
		}
		if k == 0 {
			break
		}
		due := append([]inflight(nil), d.q[:k]...)
		d.q = d.q[k:]
		d.stats.Delivered += uint64(k)
		l.mu.Unlock()
		for _, it := range due {
			if h != nil {
				_ = h(it.frame)
			}
		}
		l.mu.Lock()
	}
	d.busy2 = false
	l.schedule(side, l.cfg.Clock.Now())
	l.mu.Unlock()
}
