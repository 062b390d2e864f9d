package hw

import "testing"

func TestAwaitQuiesced(t *testing.T) {
	for _, tc := range []struct {
		name      string
		busyReads int // reads that still show BUSY
		busy      uint32
		wantLast  uint32
	}{
		{"idle at once", 0, PairCtrlBusy, 0},
		{"clears after a few reads", 5, PairCtrlBusy, 0},
		{"clears after the yielding phase", 1500, ATSCtrlBusy, 0},
		{"other bits do not count", 3, PRICtrlBusy, PRICtrlEnable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			read := func() uint32 {
				reads++
				if reads <= tc.busyReads {
					return tc.busy | tc.wantLast
				}
				return tc.wantLast
			}
			last, ok := AwaitQuiesced(read, tc.busy)
			if !ok || last != tc.wantLast || reads != tc.busyReads+1 {
				t.Fatalf("AwaitQuiesced = %#x, %v after %d reads; want %#x, true after %d",
					last, ok, reads, tc.wantLast, tc.busyReads+1)
			}
		})
	}
}

func TestAwaitQuiescedGivesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("waits QuiesceTimeoutMS")
	}
	last, ok := AwaitQuiesced(func() uint32 { return CtrlBusy | CtrlEnable }, CtrlBusy)
	if ok || last != CtrlBusy|CtrlEnable {
		t.Fatalf("AwaitQuiesced on a register that stays BUSY = %#x, %v; want the busy value, false", last, ok)
	}
}
