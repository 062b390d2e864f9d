package npfnic

import (
	"sync"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// echoTimeout bounds the wait for the driver's answer to one echo round;
// a driver that does not answer ends the run.
const echoTimeout = 2 * time.Second

// echoKeep is how many round trips diagEcho keeps.
const echoKeep = 1 << 16

// diagEcho is the DIAG_ECHO diagnostic: the device fires DiagEchoVector
// and measures the time until the driver writes the round number back to
// DIAG_ECHO from process context. It is the floor a page fault's round
// trip (interrupt, driver work, doorbell) is compared with: the same path
// without any page to resolve.
type diagEcho struct {
	n *NIC

	mu       sync.Mutex
	gap      time.Duration // DIAG_ECHO_GAP: pause before each round
	gen      uint64        // bumped by every run and by reset: an older loop stops
	running  bool
	last     uint32        // the current run's last round
	want     uint32        // the round the loop waits for; 0: none
	answered chan struct{} // closed by the matching answer
	sent     time.Time
	done     uint32 // rounds completed in the current or last run (DIAG_ECHO reads it)
	samples  []time.Duration
	late     uint64 // answers for no round being waited for
}

func (e *diagEcho) init(n *NIC) { e.n = n }

// start runs rounds echo rounds on a goroutine, numbered from 1 in each
// run; a start while a run is going on is ignored.
func (e *diagEcho) start(rounds uint32) {
	if rounds == 0 || rounds > hw.DiagEchoMax {
		e.n.log.Warn("DIAG_ECHO_CTRL: bad round count; ignored", "rounds", rounds)
		return
	}
	e.mu.Lock()
	if e.running || !e.n.attached.Load() {
		e.mu.Unlock()
		e.n.log.Warn("DIAG_ECHO_CTRL: a run is going on, or no client; ignored")
		return
	}
	e.gen++
	e.running, e.last = true, rounds
	gen := e.gen
	e.mu.Unlock()
	go e.run(gen, rounds)
}

func (e *diagEcho) run(gen uint64, rounds uint32) {
	defer func() {
		e.mu.Lock()
		if e.gen == gen {
			e.running, e.want = false, 0
		}
		e.mu.Unlock()
	}()
	e.mu.Lock()
	e.done = 0
	e.mu.Unlock()
	for round := uint32(1); round <= rounds; round++ {
		e.mu.Lock()
		gap := e.gap
		e.mu.Unlock()
		// The gap lets the guest go idle, as it is when an isolated
		// fault arrives.
		time.Sleep(gap)
		e.mu.Lock()
		if e.gen != gen {
			e.mu.Unlock()
			return
		}
		ch := make(chan struct{})
		e.want, e.answered, e.sent = round, ch, time.Now()
		e.mu.Unlock()
		if err := e.n.host.IRQ.Trigger(hw.DiagEchoVector); err != nil {
			e.n.log.Warn("DIAG_ECHO: interrupt failed; run ended", "err", err)
			return
		}
		select {
		case <-ch:
		case <-time.After(echoTimeout):
			e.n.log.Warn("DIAG_ECHO: no answer; run ended", "round", round)
			return
		}
	}
}

// answer takes a DIAG_ECHO write.
func (e *diagEcho) answer(round uint32) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.want == 0 || round != e.want {
		e.late++
		return
	}
	if len(e.samples) == echoKeep {
		copy(e.samples, e.samples[1:])
		e.samples = e.samples[:echoKeep-1]
	}
	e.samples = append(e.samples, now.Sub(e.sent))
	e.done, e.want = round, 0
	// The run is over once its last round is answered: a driver that
	// reads DIAG_ECHO == N and starts the next run at once must not find
	// this one still going (its loop may not have returned yet).
	if round == e.last {
		e.running = false
	}
	close(e.answered)
}

func (e *diagEcho) rounds() uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done
}

func (e *diagEcho) setGap(us uint32) {
	e.mu.Lock()
	e.gap = time.Duration(min(us, hw.DiagEchoGapMax)) * time.Microsecond
	e.mu.Unlock()
}

func (e *diagEcho) getGap() uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return uint32(e.gap / time.Microsecond)
}

func (e *diagEcho) reset() {
	e.mu.Lock()
	e.gen++
	e.gap = 0
	if e.want != 0 {
		close(e.answered) // the loop wakes, sees the new generation and ends
	}
	e.running, e.want, e.done = false, 0, 0
	e.mu.Unlock()
}

// EchoRoundTrips returns the DIAG_ECHO round trips measured so far (the
// most recent ones, oldest first) and the answers that matched no round.
func (n *NIC) EchoRoundTrips() (rtts []time.Duration, unmatched uint64) {
	n.echo.mu.Lock()
	defer n.echo.mu.Unlock()
	return append([]time.Duration(nil), n.echo.samples...), n.echo.late
}
