package ibrctest

import (
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/clock"
)

func TestTimingAndOrder(t *testing.T) {
	clk := clock.NewVirtual(time.Unix(0, 0))
	l := NewLink(LinkConfig{Clock: clk, BitsPerSecond: 8e9, Latency: 5 * time.Microsecond}) // 1 byte/ns
	type rx struct {
		at time.Duration
		n  int
	}
	var got []rx
	l.Attach(1, func(f []byte) error { got = append(got, rx{clk.Elapsed(), len(f)}); return nil })
	p := l.Port(0)
	p.SendFrame(make([]byte, 976)) // 1000 wire bytes: 1 µs
	p.SendFrame(make([]byte, 76))  // 100 wire bytes: queued behind
	clk.Run(nil)
	if len(got) != 2 || got[0].at != 6*time.Microsecond || got[1].at != 6100*time.Nanosecond || got[1].n != 76 {
		t.Fatalf("arrivals %+v", got)
	}
	if st := l.Stats(0); st.Frames != 2 || st.Delivered != 2 || st.Bytes != 1052 {
		t.Fatalf("stats %+v", st)
	}
}

func TestImpairments(t *testing.T) {
	clk := clock.NewVirtual(time.Unix(0, 0))
	l := NewLink(LinkConfig{Clock: clk, Latency: time.Microsecond, Loss: 0.1, Dup: 0.1, Reorder: 0.1, Seed: 3})
	var got []byte
	l.Attach(0, func(f []byte) error { got = append(got, f[0]); return nil })
	for i := 0; i < 200; i++ {
		l.Port(1).SendFrame([]byte{byte(i)})
		clk.RunUntil(clk.Elapsed()+100*time.Nanosecond, nil)
	}
	clk.Run(nil)
	st := l.Stats(1)
	if st.Dropped == 0 || st.Duplicated == 0 || st.Reordered == 0 {
		t.Fatalf("stats %+v", st)
	}
	if len(got) != int(200-st.Dropped+st.Duplicated) {
		t.Fatalf("%d delivered, stats %+v", len(got), st)
	}
	inversions := 0
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			inversions++
		}
	}
	if inversions == 0 {
		t.Fatal("reordering produced no inversion")
	}
	// A filter overrides the probabilities.
	l2 := NewLink(LinkConfig{Clock: clk, Loss: 1, Filter: func(side int, n uint64, f []byte) Action {
		if n == 1 {
			return Drop
		}
		return Deliver
	}})
	k := 0
	l2.Attach(1, func([]byte) error { k++; return nil })
	for i := 0; i < 3; i++ {
		l2.Port(0).SendFrame([]byte{1})
	}
	clk.Run(nil)
	if k != 2 {
		t.Fatalf("filter: %d delivered", k)
	}
}
