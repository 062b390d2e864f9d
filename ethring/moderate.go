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
//
// With a notify area (hw.NotifyDoc) the driver may arm in memory instead:
// a completion that finds the vector disarmed looks at irq_arm (pollArm).
//
// A lazy completion (a TX completion under TX_IRQ_DELAY,
// hw.TxIRQDelayDoc) waits up to lazyDelay from the first one since the
// last interrupt for an urgent one (RX, error) to fire with: the poll that
// interrupt starts reclaims both.
type moderator struct {
	mu        sync.Mutex
	clock     clock.Clock
	fire      func()
	armed     bool
	pending   bool // an urgent completion since the last interrupt
	lazy      bool // a lazy completion since the last interrupt
	lazyAt    time.Time
	lazyDelay time.Duration
	itr       time.Duration
	last      time.Time // last interrupt; zero: none yet
	timer     clock.Timer
	timerAt   time.Time // when timer expires
	gen       uint64    // invalidates a timer that reset or a reschedule abandoned
	fired     atomic.Uint64
	trace     *trace.Recorder
	vector    int // for the trace
	// pollArm, if set, looks for an arm the driver stored in memory
	// (hw.NotifyDoc) and reports whether it found a new one. It is called
	// under mu, with the completion that asks already in the status block.
	pollArm func() bool
}

func (m *moderator) init(c clock.Clock, fire func(), tr *trace.Recorder, vector int) {
	m.clock, m.fire, m.trace, m.vector = c, fire, tr, vector
}

// event records a completion (or misc event). One that can not fire now
// is traced as deferred once per interrupt it waits for.
func (m *moderator) event() { m.record(false) }

// lazyEvent records a TX completion: it fires at once only with
// lazyDelay 0, and otherwise waits for an urgent event or the delay.
func (m *moderator) lazyEvent() { m.record(true) }

func (m *moderator) record(lazy bool) {
	m.mu.Lock()
	was := m.pending || m.lazy
	if lazy && m.lazyDelay > 0 {
		if !m.lazy {
			m.lazy, m.lazyAt = true, m.clock.Now()
		}
	} else {
		m.pending = true
	}
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

// setLazyDelay sets how long a lazy completion may wait (0: it is
// urgent). A shorter delay applies to lazy completions already waiting.
func (m *moderator) setLazyDelay(d time.Duration) {
	m.mu.Lock()
	m.lazyDelay = d
	if d == 0 && m.lazy {
		m.lazy, m.pending = false, true
	}
	f := m.tryLocked()
	m.mu.Unlock()
	if f {
		m.deliver()
	}
}

func (m *moderator) getLazyDelay() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lazyDelay
}

func (m *moderator) getITR() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.itr
}

// reset disarms, forgets pending work and the ITR window, and zeroes ITR
// and the lazy delay.
func (m *moderator) reset() {
	m.mu.Lock()
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	m.gen++
	m.armed, m.pending, m.lazy = false, false, false
	m.itr, m.lazyDelay = 0, 0
	m.last = time.Time{}
	m.mu.Unlock()
}

// tryLocked reports whether to fire now, and otherwise schedules the
// moment it may: the end of the ITR window, or a lazy completion's
// deadline. Caller holds m.mu.
func (m *moderator) tryLocked() bool {
	if !m.pending && !m.lazy {
		return false
	}
	now := m.clock.Now()
	if !m.armed {
		// An arm stored after this look finds these completions in the
		// status block: the driver polls them itself (hw.NotifyDoc).
		if m.pollArm == nil || !m.pollArm() {
			return false
		}
		m.armed = true
	}
	due := now
	if !m.pending {
		due = m.lazyAt.Add(m.lazyDelay)
	}
	if m.itr > 0 && !m.last.IsZero() {
		if end := m.last.Add(m.itr); end.After(due) {
			due = end
		}
	}
	if due.After(now) {
		m.scheduleLocked(due, now)
		return false
	}
	m.armed, m.pending, m.lazy = false, false, false
	m.last = now
	return true
}

// scheduleLocked makes sure a timer expires no later than due. A timer
// that expires earlier stays: its expiry looks again. Caller holds m.mu.
func (m *moderator) scheduleLocked(due, now time.Time) {
	if m.timer != nil {
		if !due.Before(m.timerAt) {
			return
		}
		m.timer.Stop()
	}
	m.gen++
	gen := m.gen
	m.timer, m.timerAt = m.clock.AfterFunc(due.Sub(now), func() { m.expire(gen) }), due
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
