package nic

import (
	"sync"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// writeFaultReg routes a write to the ATS, PRI or backup ring registers and
// reports whether reg was one of them. Doorbells and control registers act
// on whole 32-bit writes only; narrower writes merge into the others.
func (n *NIC) writeFaultReg(reg, v, mask uint32) bool {
	full := mask == 0xffffffff
	switch {
	case reg >= hw.XlatRegBase && reg < hw.ATSRegEnd:
		x := n.xlat.Load()
		if x == nil {
			return true
		}
		if !full {
			if reg == hw.RegATSCtrl || reg == hw.RegInvqTail {
				return true
			}
			old, _ := x.RegRead(reg)
			v = merge(old, v, mask)
		}
		x.RegWrite(reg, v)
		return true
	case reg >= hw.ATSRegEnd && reg < hw.PRIRegEnd:
		e := n.pri.Load()
		if e == nil {
			return true
		}
		if !full {
			if reg == hw.RegPRICtrl || reg == hw.RegPRQHead || reg == hw.RegPRSPQTail {
				return true
			}
			old, _ := e.RegRead(reg)
			v = merge(old, v, mask)
		}
		e.RegWrite(reg, v)
		return true
	case reg >= hw.RegBackupBaseLo && reg <= hw.RegBackupVector:
		dp := n.dp.Load()
		if dp == nil {
			return true
		}
		if !full {
			if reg == hw.RegBackupCtrl || reg == hw.RegBackupTail {
				return true
			}
			old, _ := dp.BackupReadReg(reg)
			v = merge(old, v, mask)
		}
		dp.BackupWriteReg(reg, v)
		return true
	}
	return false
}

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
	gen      uint64 // bumped by reset: a running loop stops
	running  bool
	want     uint32        // the round the loop waits for; 0: none
	answered chan struct{} // closed by the matching answer
	sent     time.Time
	done     uint32 // rounds completed since reset (DIAG_ECHO reads it)
	samples  []time.Duration
	late     uint64 // answers for no round being waited for
}

func (e *diagEcho) init(n *NIC) { e.n = n }

// start runs rounds echo rounds on a goroutine; a start while a run is
// going on is ignored.
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
	e.running = true
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
	for i := uint32(1); i <= rounds; i++ {
		e.mu.Lock()
		if e.gen != gen {
			e.mu.Unlock()
			return
		}
		round := e.done + 1
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
	close(e.answered)
}

func (e *diagEcho) rounds() uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done
}

func (e *diagEcho) reset() {
	e.mu.Lock()
	e.gen++
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
