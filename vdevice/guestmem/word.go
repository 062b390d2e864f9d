package guestmem

import (
	"encoding/binary"
	"errors"
	"runtime/debug"
	"sync/atomic"
	"unsafe"
)

// Words shared with a driver that polls them (a notify area's tail and
// arm counts, the device's "kick me" flag) need more than a copy: the
// read must see one whole store of the driver's, never two halves of
// different ones (Go's memmove moves 4 bytes as two 2-byte halves), and
// the device's store-then-load handshakes need a full barrier between
// its earlier stores and the load. LoadU32Fenced and StoreU32Fenced are
// single aligned 32-bit atomic accesses; on x86 both are locked
// instructions, so each is also a full barrier.

// errMisaligned is a word access at an address not a multiple of 4.
var errMisaligned = errors.New("word access not 4-byte aligned")

// LoadU32Fenced reads the little-endian uint32 at iova (4-byte aligned)
// with one atomic access after a full barrier: stores the device made
// before it are visible to the guest before this load reads. The region
// must be writable (the barrier is a locked read-modify-write that
// changes nothing). A remote region is read with a plain transfer: the
// client performs it as one aligned access.
func (m *Memory) LoadU32Fenced(iova uint64) (uint32, error) {
	var v uint32
	err := m.word(iova, func(p *uint32) { v = atomic.AddUint32(p, 0) }, false)
	return v, err
}

// StoreU32Fenced writes v little-endian at iova (4-byte aligned) with one
// atomic access that is also a full barrier.
func (m *Memory) StoreU32Fenced(iova uint64, v uint32) error {
	if m.lateFenced("", iova, 4) {
		return lateError(iova, 4)
	}
	return m.word(iova, func(p *uint32) { atomic.StoreUint32(p, v) }, true)
}

// word runs fn on the host word at iova under the region table's read
// lock, as hostAccess copies; a remote region falls back to a transfer.
// The caller checks for late stores.
func (m *Memory) word(iova uint64, fn func(*uint32), store bool) error {
	if iova%4 != 0 {
		return &FaultError{IOVA: iova, Len: 4, Write: true, Reason: FaultCrosses, Err: errMisaligned}
	}
	m.mu.RLock()
	i := m.find(iova)
	if i < 0 {
		m.mu.RUnlock()
		return &FaultError{IOVA: iova, Len: 4, Write: true, Reason: FaultUnmapped}
	}
	r := &m.regions[i]
	switch {
	case iova+4 > r.end:
		m.mu.RUnlock()
		return &FaultError{IOVA: iova, Len: 4, Write: true, Reason: FaultCrosses}
	case r.prot&ProtWrite == 0 || r.prot&ProtRead == 0:
		m.mu.RUnlock()
		return &FaultError{IOVA: iova, Len: 4, Write: true, Reason: FaultPermission}
	case r.host == nil:
		remote := m.remote
		m.mu.RUnlock()
		if remote == nil {
			return &FaultError{IOVA: iova, Len: 4, Write: true, Reason: FaultRemote, Err: errNoRemote}
		}
		return remoteWord(remote, iova, fn, store)
	}
	b := r.host[iova-r.start:]
	p := (*uint32)(unsafe.Pointer(&b[0]))
	if uintptr(unsafe.Pointer(p))%4 != 0 {
		m.mu.RUnlock()
		return &FaultError{IOVA: iova, Len: 4, Write: true, Reason: FaultCrosses, Err: errMisaligned}
	}
	ok := wordHost(p, fn)
	m.mu.RUnlock()
	if !ok {
		return &FaultError{IOVA: iova, Len: 4, Write: true, Reason: FaultTruncated}
	}
	return nil
}

// wordHost runs fn on p, reporting false if the mapping faulted (see
// copyHost). The host is little-endian, as the guest's words are.
func wordHost(p *uint32, fn func(*uint32)) (ok bool) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			ok = false
		}
	}()
	fn(p)
	return true
}

// remoteWord reads (or, for a store, writes) the word through the client.
func remoteWord(remote Remote, iova uint64, fn func(*uint32), store bool) error {
	var b [4]byte
	if !store {
		if err := remoteAccess(remote, iova, b[:], false); err != nil {
			return err
		}
	}
	w := binary.LittleEndian.Uint32(b[:])
	fn(&w)
	if !store {
		return nil
	}
	binary.LittleEndian.PutUint32(b[:], w)
	return remoteAccess(remote, iova, b[:], true)
}

// LoadU32Fenced is Memory.LoadU32Fenced, failing with ErrStopped once
// the stream quiesced, as ReadAt does.
func (s *Stream) LoadU32Fenced(iova uint64) (uint32, error) {
	if s.quiesced.Load() {
		return 0, &FaultError{IOVA: iova, Len: 4, Reason: FaultLate, Err: ErrStopped}
	}
	return s.m.LoadU32Fenced(iova)
}

// StoreU32Fenced is Memory.StoreU32Fenced on behalf of the stream: a
// store after the stream quiesced is a late write, recorded and refused.
func (s *Stream) StoreU32Fenced(iova uint64, v uint32) error {
	if s.quiesced.Load() {
		s.m.recordLate(LateWrite{Stream: s.name, IOVA: iova, Len: 4})
		return lateError(iova, 4)
	}
	if s.m.lateFenced(s.name, iova, 4) {
		return lateError(iova, 4)
	}
	return s.m.word(iova, func(p *uint32) { atomic.StoreUint32(p, v) }, true)
}
