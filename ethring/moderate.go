package ethring

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/npfnic/npfnic/internal/clock"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// moderator decides when one MSI-X vector fires. The driver arms it (NAPI
// re-arm after polling); an armed vector fires once for a completion, then
// stays quiet until armed again. A completion that happens while the
// vector is disarmed is remembered, as an interrupt cause register latches
// it, so arming with work outstanding fires at once: a driver that re-arms
// after polling can not miss a completion that slipped in between. ITR
// spaces interrupts at least itr apart; a completion inside the window
// fires at the window's end if the vector is still armed then.
type moderator struct {
	mu      sync.Mutex
	clock   clock.Clock
	fire    func()
	armed   bool
	pending bool // a completion since the last interrupt
	itr     time.Duration
	last    time.Time // last interrupt; zero: none yet
	timer   clock.Timer
	gen     uint64 // invalidates a timer that reset abandoned
	fired   atomic.Uint64
	trace   *trace.Recorder
	vector  int // for the trace
}

func (m *moderator) init(c clock.Clock, fire func(), tr *trace.Recorder, vector int) {
	m.clock, m.fire, m.trace, m.vector = c, fire, tr, vector
}

// event records a completion (or misc event). One that can not fire now
// is traced as deferred once per interrupt it waits for.
func (m *moderator) event() {
	m.mu.Lock()
	was := m.pending
	m.pending = true
	f := m.tryLocked()
	m.mu.Unlock()
	if f {
		m.deliver()
	} else if !was {
		m.trace.Emit(trace.IRQDeferred, trace.TrackIRQ, uint64(m.vector), 0)
	}
}

// arm allows one interrupt.
func (m *moderator) arm() {
	m.mu.Lock()
	m.armed = true
	f := m.tryLocked()
	m.mu.Unlock()
	if f {
		m.deliver()
	}
}

func (m *moderator) setITR(d time.Duration) {
	m.mu.Lock()
	m.itr = d
	m.mu.Unlock()
}

func (m *moderator) getITR() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.itr
}

// reset disarms, forgets pending work and the ITR window, and zeroes ITR.
func (m *moderator) reset() {
	m.mu.Lock()
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	m.gen++
	m.armed, m.pending = false, false
	m.itr = 0
	m.last = time.Time{}
	m.mu.Unlock()
}

// tryLocked reports whether to fire now, and schedules the end of the ITR
// window otherwise. Caller holds m.mu.
func (m *moderator) tryLocked() bool {
	if !m.armed || !m.pending {
		return false
	}
	now := m.clock.Now()
	if m.itr > 0 && !m.last.IsZero() {
		if wait := m.last.Add(m.itr).Sub(now); wait > 0 {
			if m.timer == nil {
				gen := m.gen
				m.timer = m.clock.AfterFunc(wait, func() { m.expire(gen) })
			}
			return false
		}
	}
	m.armed, m.pending = false, false
	m.last = now
	return true
}

func (m *moderator) expire(gen uint64) {
	m.mu.Lock()
	if gen != m.gen {
		m.mu.Unlock()
		return
	}
	m.timer = nil
	f := m.tryLocked()
	m.mu.Unlock()
	if f {
		m.deliver()
	}
}

// deliver runs outside m.mu: the host's interrupt path has its own lock.
func (m *moderator) deliver() {
	m.fired.Add(1)
	m.fire()
}
