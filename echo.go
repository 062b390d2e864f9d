package npfnic

import (
	"slices"
	"sync"
	"time"

	"github.com/npfnic/npfnic/ethring"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// regBlock is a register block another package decodes: ats, pri, and the
// datapath's backup ring.
type regBlock interface {
	RegRead(off uint32) (uint32, bool)
	RegWrite(off, v uint32) bool
}

// backupRegs adapts the datapath's backup ring registers to regBlock.
type backupRegs struct{ dp *ethring.Datapath }

func (b backupRegs) RegRead(off uint32) (uint32, bool) { return b.dp.BackupReadReg(off) }
func (b backupRegs) RegWrite(off, v uint32) bool       { return b.dp.BackupWriteReg(off, v) }

// faultBlock returns the block that decodes reg and the registers of it
// that act on a whole 32-bit write only (doorbells, control); in is false
// when reg belongs to none of them. The block is nil before Attach.
func (n *NIC) faultBlock(reg uint32) (b regBlock, actions []uint32, in bool) {
	switch {
	case reg >= hw.XlatRegBase && reg < hw.ATSRegEnd:
		if x := n.xlat.Load(); x != nil {
			b = x
		}
		return b, []uint32{hw.RegATSCtrl, hw.RegInvqTail}, true
	case reg >= hw.ATSRegEnd && reg < hw.PRIRegEnd:
		if e := n.pri.Load(); e != nil {
			b = e
		}
		return b, []uint32{hw.RegPRICtrl, hw.RegPRQHead, hw.RegPRSPQTail}, true
	case reg >= hw.RegBackupBaseLo && reg <= hw.RegBackupVector:
		if dp := n.dp.Load(); dp != nil {
			b = backupRegs{dp}
		}
		return b, []uint32{hw.RegBackupCtrl, hw.RegBackupTail}, true
	}
	return nil, nil, false
}

// readFaultReg reads a register of the ATS, PRI or backup ring blocks.
func (n *NIC) readFaultReg(reg uint32) (uint32, bool) {
	b, _, in := n.faultBlock(reg)
	if !in || b == nil {
		return 0, in
	}
	v, _ := b.RegRead(reg)
	return v, true
}

// writeFaultReg routes a write to the ATS, PRI or backup ring registers and
// reports whether reg was one of them. Doorbells and control registers act
// on whole 32-bit writes only; narrower writes merge into the others.
func (n *NIC) writeFaultReg(reg, v, mask uint32) bool {
	b, actions, in := n.faultBlock(reg)
	if !in || b == nil {
		return in
	}
	if mask != 0xffffffff {
		if slices.Contains(actions, reg) {
			return true
		}
		old, _ := b.RegRead(reg)
		v = merge(old, v, mask)
	}
	b.RegWrite(reg, v)
	return true
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
	gap      time.Duration // DIAG_ECHO_GAP: pause before each round
	gen      uint64        // bumped by reset: a running loop stops
	running  bool
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
