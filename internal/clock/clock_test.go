package clock

import (
	"testing"
	"time"
)

func TestVirtualOrderAndStop(t *testing.T) {
	v := NewVirtual(time.Unix(0, 0))
	var got []string
	v.AfterFunc(3*time.Millisecond, func() { got = append(got, "c") })
	v.AfterFunc(1*time.Millisecond, func() {
		got = append(got, "a")
		v.AfterFunc(0, func() { got = append(got, "a2") })
	})
	v.AfterFunc(1*time.Millisecond, func() { got = append(got, "b") })
	stopped := v.AfterFunc(2*time.Millisecond, func() { got = append(got, "never") })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	if stopped.Stop() {
		t.Fatal("second Stop returned true")
	}
	n := v.Run(nil)
	want := []string{"a", "b", "a2", "c"}
	if n != 4 || len(got) != len(want) {
		t.Fatalf("ran %d: %v, want %v", n, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
	if v.Elapsed() != 3*time.Millisecond {
		t.Fatalf("elapsed %v", v.Elapsed())
	}
}

func TestVirtualRunUntil(t *testing.T) {
	v := NewVirtual(time.Unix(100, 0))
	fired := 0
	for i := 1; i <= 10; i++ {
		v.AfterFunc(time.Duration(i)*time.Second, func() { fired++ })
	}
	if n := v.RunUntil(5*time.Second, nil); n != 5 || fired != 5 {
		t.Fatalf("RunUntil ran %d (fired %d), want 5", n, fired)
	}
	if got := v.Now(); !got.Equal(time.Unix(105, 0)) {
		t.Fatalf("Now %v", got)
	}
	v.RunUntil(time.Hour, func() bool { return fired == 7 })
	if fired != 7 || v.Pending() != 3 {
		t.Fatalf("stop func ignored: fired %d pending %d", fired, v.Pending())
	}
	// An idle clock still advances to the deadline.
	v2 := NewVirtual(time.Unix(0, 0))
	v2.RunUntil(time.Second, nil)
	if v2.Elapsed() != time.Second {
		t.Fatalf("idle RunUntil left time at %v", v2.Elapsed())
	}
}

func TestRealClock(t *testing.T) {
	done := make(chan struct{})
	Real{}.AfterFunc(time.Millisecond, func() { close(done) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("real timer did not fire")
	}
	if tm := (Real{}).AfterFunc(time.Hour, func() {}); !tm.Stop() {
		t.Fatal("Stop of a pending real timer returned false")
	}
}
