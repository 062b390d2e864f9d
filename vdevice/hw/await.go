package hw

import (
	"runtime"
	"time"
)

// AwaitQuiesced is the driver's side of the quiesce handshake (QuiesceDoc)
// for the Go driver models of the tests: it reads a control register
// through read until none of the busy bits is set, for at most
// QuiesceTimeoutMS, and returns the last value read and whether they
// cleared. The C driver's npfnic_wait_quiesced is the same loop.
func AwaitQuiesced(read func() uint32, busy uint32) (last uint32, ok bool) {
	deadline := time.Now().Add(QuiesceTimeoutMS * time.Millisecond)
	// An engine ends its unit within microseconds: yield first, and sleep
	// only when it takes longer (a sub-millisecond sleep costs ~1 ms here,
	// which the fuzzers' per-input handshakes cannot afford).
	for try := 0; ; try++ {
		if last = read(); last&busy == 0 {
			return last, true
		}
		if time.Now().After(deadline) {
			return last, false
		}
		if try < 1000 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}
