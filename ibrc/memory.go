package ibrc

import (
	"errors"
	"fmt"
	"time"
)

// Memory is the address space a memory region lives in. Every access the
// engine makes to a memory region's bytes goes through it; on the NIC it is
// the DMA path through the translation layer (ats), which may fault. va is
// the address as the verbs consumer sees it (the guest virtual or I/O
// virtual address). An access may fail part way; the engine only retries
// whole accesses. The arguments come in guestmem's order (address, then
// buffer), so a Memory over guestmem (the NIC's DMA path) passes them
// straight through.
//
// A translation fault is reported by an error that errors.As turns into a
// Faulter (FaultError is one); any other error is an access violation.
type Memory interface {
	ReadAt(va uint64, p []byte) error
	WriteAt(va uint64, p []byte) error
}

// Faulter is implemented by translation-fault errors: the first faulting
// address and whether the access was a write.
type Faulter interface {
	Fault() (va uint64, write bool)
}

// FaultError is a translation fault: the page holding VA is not present
// (or not writable, for a write).
type FaultError struct {
	VA    uint64
	Write bool
}

// Fault implements Faulter.
func (e *FaultError) Fault() (uint64, bool) { return e.VA, e.Write }

func (e *FaultError) Error() string {
	op := "read"
	if e.Write {
		op = "write"
	}
	return fmt.Sprintf("ibrc: translation fault on %s at %#x", op, e.VA)
}

// AsFault reports whether err is (or wraps) a translation fault.
func AsFault(err error) (va uint64, write bool, ok bool) {
	var f Faulter
	if errors.As(err, &f) {
		va, write = f.Fault()
		return va, write, true
	}
	return 0, false, false
}

// Role says which half of a QP took a fault.
type Role uint8

// Roles.
const (
	RoleRequester Role = iota // gathering a SEND/WRITE payload, or scattering a READ response
	RoleResponder             // scattering a SEND or RDMA WRITE, or gathering a READ response
)

func (r Role) String() string {
	if r == RoleRequester {
		return "requester"
	}
	return "responder"
}

// PageRequest asks the fault handler to make the page holding VA in Mem
// present (a PRI page request on the NIC).
type PageRequest struct {
	QPN   uint32
	Role  Role
	Mem   Memory
	VA    uint64
	Write bool
	// PSN is that of the packet whose data faulted: the request being
	// placed or the READ response being read (responder), the packet being
	// built or the READ response being scattered (requester).
	PSN uint32
	// Detected is clock.Nanotime when the access faulted (the device's
	// fault timestamps, package pri).
	Detected int64
	// Span is how many bytes from VA on, in Mem, the faulting request
	// goes on to touch (at least 1): the rest of the SGE VA is in, of an
	// RDMA WRITE from VA, of a READ's response. A pager may make them
	// present with VA's page (whole-request prefault), so that one fault,
	// not one per page, holds up a cold buffer.
	Span uint64
}

// PageRequester resolves translation faults. RequestPage must not block nor
// call into the engine before returning; it calls done exactly once, from
// any goroutine, when the request completes (ok = false when the page
// cannot be made present). The engine raises at most one request per QP,
// role and direction at a time, as seed 000's firmware does with its bitmap
// of in-flight faults; further faults of the same kind are handled (RNR
// NAK, drop, stall) without a new request.
type PageRequester interface {
	RequestPage(r PageRequest, done func(ok bool))
}

// PageRequesterFunc adapts a function to PageRequester.
type PageRequesterFunc func(r PageRequest, done func(ok bool))

// RequestPage calls f.
func (f PageRequesterFunc) RequestPage(r PageRequest, done func(ok bool)) { f(r, done) }

// Port is the wire: the engine hands it whole Ethernet frames (without
// FCS). The frame belongs to the port once passed; SendFrame must not call
// back into the engine synchronously with a frame for it (queue it). It
// runs on whatever goroutine released a QP's lock, a port reader's
// included, so it should not block: a port that cannot take the frame now
// returns ErrPortFull (the frame stays the engine's) and calls
// Transport.PortReady once it can.
type Port interface {
	SendFrame(frame []byte) error
}

// PortFunc adapts a function to Port.
type PortFunc func(frame []byte) error

// SendFrame calls f.
func (f PortFunc) SendFrame(frame []byte) error { return f(frame) }

// FrameWriter records frames (rocev2.PcapWriter is one).
type FrameWriter interface {
	WriteFrame(ts time.Time, frame []byte) error
}

// CapturePort tees every frame sent through Port to W, timestamped by Now.
type CapturePort struct {
	Port Port
	W    FrameWriter
	Now  func() time.Time
}

// SendFrame records the frame and passes it on.
func (c *CapturePort) SendFrame(frame []byte) error {
	if err := c.W.WriteFrame(c.Now(), frame); err != nil {
		return err
	}
	return c.Port.SendFrame(frame)
}
