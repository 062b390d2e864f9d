package guestmem

import "testing"

// TestStreamQuiesceSparesSuccessor: an engine instance that drains after
// the driver handed the same memory to the next instance (disable, enable
// without waiting for BUSY) fences only what no live stream owns, so the
// successor's writes there are not refused as late.
func TestStreamQuiesceSparesSuccessor(t *testing.T) {
	m := New()
	m.FenceOnQuiesce(true)
	buf := make([]byte, 0x3000)
	if err := m.MapHost(0x1000, buf, ProtRead|ProtWrite, nil); err != nil {
		t.Fatal(err)
	}
	old := m.NewStream("old")
	old.Own(0x1000, 0x2000)
	if !old.Begin() {
		t.Fatal("Begin on a running stream")
	}
	old.Stop() // a unit still in flight
	succ := m.NewStream("new")
	succ.Own(0x1000, 0x1000) // the driver re-enabled with the first page
	old.End()                // the old instance drains now
	if !old.Quiesced() {
		t.Fatal("old stream not quiesced")
	}
	if err := succ.WriteU32(0x1000, 1); err != nil {
		t.Fatalf("successor's write refused: %v", err)
	}
	if err := m.WriteAt(0x2000, []byte{1}); err == nil {
		t.Fatal("write into the old stream's other page accepted after it quiesced")
	}
	if n := m.LateWrites(); n != 1 {
		t.Fatalf("%d late writes, want 1: %v", n, m.LateLog())
	}
	succ.Stop()
	if err := m.WriteAt(0x1000, []byte{1}); err == nil {
		t.Fatal("write into the successor's memory accepted after it quiesced")
	}
}

// TestQuiesceFencesNothingByDefault: a device in a real guest must accept a
// live engine's write into memory that was a quiesced engine's ring (the
// guest freed the ring and posted the page as a buffer, which no stream
// owns); only writes through the quiesced stream itself are late.
func TestQuiesceFencesNothingByDefault(t *testing.T) {
	m := New()
	buf := make([]byte, 0x2000)
	if err := m.MapHost(0x1000, buf, ProtRead|ProtWrite, nil); err != nil {
		t.Fatal(err)
	}
	ring := m.NewStream("qp0")
	ring.Own(0x1000, 0x1000)
	ring.Stop()
	if !ring.Quiesced() {
		t.Fatal("idle stream not quiesced at Stop")
	}
	next := m.NewStream("qp0.next")
	if err := next.WriteAt(0x1000, []byte{7}); err != nil {
		t.Fatalf("a live stream's write into the old ring page refused: %v", err)
	}
	if err := ring.WriteAt(0x1000, []byte{9}); err == nil {
		t.Fatal("a write through the quiesced stream was accepted")
	}
	if buf[0] != 7 || m.LateWrites() != 1 {
		t.Fatalf("buf[0]=%d late=%d, want 7 and 1", buf[0], m.LateWrites())
	}
}
