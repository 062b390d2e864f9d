package ethring

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/clock"
)

// TestModeratorLazy runs the moderator on a virtual clock through scripts
// of steps: "arm", "rx" (an urgent completion), "tx" (a lazy one), "at N"
// (the clock at N µs), "itr N" and "delay N" (µs); want is the number of
// interrupts fired after each step.
func TestModeratorLazy(t *testing.T) {
	tests := []struct {
		name  string
		steps []string
		want  []int
	}{
		{"without a delay a TX completion is urgent",
			[]string{"arm", "tx"}, []int{0, 1}},
		{"a TX completion waits for the delay",
			[]string{"delay 500", "arm", "tx", "at 499", "at 500"}, []int{0, 0, 0, 0, 1}},
		{"an RX completion takes the waiting TX one along",
			[]string{"delay 500", "arm", "tx", "at 100", "rx", "at 1000"}, []int{0, 0, 0, 0, 1, 1}},
		{"the delay counts from the first TX completion",
			[]string{"delay 500", "arm", "tx", "at 300", "tx", "at 500"}, []int{0, 0, 0, 0, 0, 1}},
		{"disarmed at the deadline: fires when armed",
			[]string{"delay 500", "tx", "at 600", "arm"}, []int{0, 0, 0, 1}},
		{"armed before the deadline: waits for it",
			[]string{"delay 500", "tx", "at 200", "arm", "at 499", "at 500"}, []int{0, 0, 0, 0, 0, 1}},
		{"an interrupt forgets the TX completion it covered",
			[]string{"delay 500", "arm", "tx", "rx", "arm", "at 2000"}, []int{0, 0, 0, 1, 1, 1}},
		{"ITR holds an RX completion that comes before the deadline",
			[]string{"itr 100", "delay 500", "arm", "rx", "arm", "at 10", "tx", "at 50", "rx", "at 99", "at 100"},
			[]int{0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2}},
		{"ITR longer than the delay",
			[]string{"itr 800", "delay 100", "arm", "rx", "arm", "tx", "at 100", "at 800"},
			[]int{0, 0, 0, 1, 1, 1, 1, 2}},
		{"delay 0 releases a waiting TX completion",
			[]string{"delay 500", "arm", "tx", "at 10", "delay 0"}, []int{0, 0, 0, 0, 1}},
		{"a shorter delay applies to a waiting TX completion",
			[]string{"delay 500", "arm", "tx", "delay 100", "at 99", "at 100"}, []int{0, 0, 0, 0, 0, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewVirtual(time.Unix(0, 0))
			var m moderator
			fired := 0
			m.init(clk, func() { fired++ }, nil, 1)
			for i, s := range tc.steps {
				op, arg, _ := strings.Cut(s, " ")
				n, _ := strconv.Atoi(arg)
				us := time.Duration(n) * time.Microsecond
				switch op {
				case "arm":
					m.arm()
				case "rx":
					m.event()
				case "tx":
					m.lazyEvent()
				case "at":
					clk.RunUntil(us, nil)
				case "itr":
					m.setITR(us)
				case "delay":
					m.setLazyDelay(us)
				default:
					t.Fatalf("bad step %q", s)
				}
				if fired != tc.want[i] {
					t.Fatalf("after step %d (%q): %d interrupts, want %d", i, s, fired, tc.want[i])
				}
			}
		})
	}
}

func TestTxUrgent(t *testing.T) {
	tests := []struct {
		head, irqHead, size uint32
		want                bool
	}{
		{1, 0, 256, false},
		{127, 0, 256, false},
		{128, 0, 256, true},
		{300, 100, 256, true},
		{5, 0xfffffff0, 256, false}, // across the wrap of the free-running counters
		{0x70, 0xfffffff0, 256, true},
		{4, 0, 8, true},
	}
	for _, tc := range tests {
		if got := txUrgent(tc.head, tc.irqHead, tc.size); got != tc.want {
			t.Errorf("txUrgent(%d, %d, %d) = %v, want %v", tc.head, tc.irqHead, tc.size, got, tc.want)
		}
	}
}
