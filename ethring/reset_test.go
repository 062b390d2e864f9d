package ethring

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

// TestResetWhileTrafficFlows resets the datapath (and, in one variant,
// pulls guest memory away as a disconnecting client does) while frames
// stream in from the wire and the driver keeps posting TX frames. Nothing
// may panic or race; afterwards a fresh setup works.
func TestResetWhileTrafficFlows(t *testing.T) {
	for _, tc := range []struct {
		name  string
		unmap bool
	}{
		{"reset", false},
		{"client gone", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t, guestOpts{pairs: 2, depth: 16})
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { // the far end sends
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					if g.peer.Send(frame(60+i%1400, uint16(i))) != nil {
						return
					}
				}
			}()
			go func() { // and drains
				defer wg.Done()
				buf := make([]byte, port.MaxFrameLen)
				for {
					if _, err := g.peer.Recv(buf); errors.Is(err, port.ErrClosed) {
						return
					}
				}
			}()
			// The "socket goroutine": setup, traffic, reset, again.
			for round := 0; round < 30; round++ {
				if tc.unmap && round%3 == 2 {
					g.mem.UnmapAll()
					g.d.Reset()
					if err := g.mem.MapFD(guestIOVA, guestSize, g.fd, 0, guestmem.ProtRead|guestmem.ProtWrite); err != nil {
						t.Fatal(err)
					}
				}
				g.next = 0
				g.setupStatus()
				g.d.SetEnabled(true)
				for q := 0; q < 2; q++ {
					g.setupPair(q, 16, 16)
					g.postRX(q, 16, bufSize)
					for i := 0; i < 6; i++ {
						f := frame(100+i, uint16(i))
						g.postTX(q, f[:50], f[50:])
					}
				}
				if tc.unmap && round%3 == 1 {
					g.mem.UnmapAll() // mid-traffic: faults, not crashes
				}
				time.Sleep(time.Duration(round%4) * 200 * time.Microsecond)
				g.d.Reset()
			}
			if tc.unmap {
				g.mem.UnmapAll()
				if err := g.mem.MapFD(guestIOVA, guestSize, g.fd, 0, guestmem.ProtRead|guestmem.ProtWrite); err != nil {
					t.Fatal(err)
				}
			}
			// A clean setup after all that still carries frames.
			g.next = 0
			g.setupStatus()
			g.d.SetEnabled(true)
			g.setupPair(0, 8, 8)
			g.postRX(0, 8, bufSize)
			g.waitFor("RX after resets", func() bool { return g.qstatus(0).RxHead > 0 })
			if st := g.qstatus(0); st.Error != 0 {
				t.Fatalf("status %v", st)
			}
			stop.Store(true)
			g.peer.Close()
			wg.Wait()
		})
	}
}

// TestCloseStopsEverything: Close waits for every goroutine; guest memory
// is not touched afterwards.
func TestCloseStopsEverything(t *testing.T) {
	g := newGuest(t, guestOpts{pairs: 1})
	g.setupPair(0, 8, 8)
	g.postRX(0, 8, bufSize)
	g.postTX(0, frame(60, 1))
	g.recvPeer()
	if err := g.d.Close(); err != nil {
		t.Fatal(err)
	}
	before := append([]byte(nil), g.bytes(g.status, hw.StatusBlockSize)...)
	g.d.Receive(frame(60, 2)) // disabled: dropped
	g.d.Pair(0).WriteReg(hw.PairTxTail, 2)
	time.Sleep(5 * time.Millisecond)
	mustEqual(t, "status block after Close", g.bytes(g.status, hw.StatusBlockSize), before)
}
