// Package guestmem is the one bounds-checked DMA layer: every access the
// device makes to guest memory goes through a Memory, which maps I/O virtual
// addresses (IOVAs) to the regions the vfio-user client announced with
// DMA_MAP.
//
// A region is either backed by a host mapping (the client passed a file
// descriptor, which the server mmaps) or "remote" (no descriptor: the bytes
// are reachable only through DMA_READ/DMA_WRITE messages, carried out by a
// Remote the server provides).
//
// Guarantees:
//   - An access must lie entirely inside one region and respect its
//     read/write permission; otherwise it fails with a *FaultError carrying
//     the address. Nothing outside the mapping is ever touched and nothing
//     panics, whatever the address or length.
//   - Unmap waits for in-flight copies into host-backed regions before the
//     mapping is released, so a region can be unmapped while device
//     goroutines are using it: they either complete against the old mapping
//     or fault.
//   - Accesses to host-backed regions do not allocate.
//   - A host-backed region whose file shrinks under the mapping (the client
//     may ftruncate its memfd at any time) makes the accesses past the new
//     end of the file fail with FaultTruncated instead of killing the
//     process with SIGBUS: host copies run with runtime/debug's
//     SetPanicOnFault and recover the fault (see copyHost).
//
// Remote accesses do not hold the region table lock while waiting for the
// client, so an Unmap arriving meanwhile is never blocked by them.
package guestmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// Prot is the access permission of a region.
type Prot uint8

// Permission bits, matching VFIO_USER_F_DMA_REGION_READ/WRITE.
const (
	ProtRead  Prot = 1 << 0
	ProtWrite Prot = 1 << 1
)

// FaultReason says why an access failed.
type FaultReason uint8

// Fault reasons.
const (
	FaultUnmapped   FaultReason = iota + 1 // no region contains the start address
	FaultCrosses                           // the access runs past the end of its region
	FaultPermission                        // region lacks read or write permission
	FaultRemote                            // the client failed a DMA_READ/DMA_WRITE
	FaultOverflow                          // address + length wraps around 2^64
	FaultLate                              // a write the quiesce contract forbids (see quiesce.go)
	FaultTruncated                         // the file behind a host-backed region no longer covers the address (SIGBUS)
)

func (r FaultReason) String() string {
	switch r {
	case FaultUnmapped:
		return "not mapped"
	case FaultCrosses:
		return "crosses the end of its region"
	case FaultPermission:
		return "permission denied"
	case FaultRemote:
		return "remote access failed"
	case FaultOverflow:
		return "address range overflows"
	case FaultLate:
		return "late: memory the driver took back"
	case FaultTruncated:
		return "backing file truncated under the mapping"
	}
	return "unknown"
}

// FaultError reports a guest-memory access the device must not perform. The
// device model turns it into a device-visible error state.
type FaultError struct {
	IOVA   uint64
	Len    int
	Write  bool
	Reason FaultReason
	Err    error // underlying cause for FaultRemote
}

func (e *FaultError) Error() string {
	op := "read"
	if e.Write {
		op = "write"
	}
	s := fmt.Sprintf("guestmem: %s of %d bytes at iova %#x: %s", op, e.Len, e.IOVA, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *FaultError) Unwrap() error { return e.Err }

// Remote performs accesses to regions mapped without a file descriptor, by
// sending DMA_READ/DMA_WRITE to the client. It must be safe for concurrent
// use and must never be called from the goroutine that reads the client's
// socket (the reply could never arrive).
type Remote interface {
	ReadRemote(iova uint64, p []byte) error
	WriteRemote(iova uint64, p []byte) error
}

// Errors returned by Map and Unmap.
var (
	ErrOverlap   = errors.New("guestmem: region overlaps an existing mapping")
	ErrNotMapped = errors.New("guestmem: no mapping matches exactly")
	ErrInvalid   = errors.New("guestmem: invalid region")
	ErrTooMany   = errors.New("guestmem: too many mappings")
	// ErrNotFile is returned by MapFD for a descriptor that is not a
	// regular file (a pipe, a socket, a directory, an eventfd...).
	ErrNotFile = errors.New("guestmem: descriptor is not a regular file")
	// ErrShortFile is returned by MapFD when the file ends before
	// offset+size: touching the missing part would raise SIGBUS.
	ErrShortFile = errors.New("guestmem: file is smaller than the mapping")
	errNoRemote  = errors.New("no remote accessor")
)

type region struct {
	start, end uint64 // [start, end)
	prot       Prot
	host       []byte // nil for remote regions
	release    func() // frees host (munmap); runs after in-flight copies drained
}

// RegionInfo describes one mapping, for logs and tests.
type RegionInfo struct {
	IOVA, Size uint64
	Prot       Prot
	Remote     bool
}

// Memory is a table of guest memory regions. The zero value is not usable;
// call New.
type Memory struct {
	mu       sync.RWMutex
	regions  []region // sorted by start, non-overlapping
	remote   Remote
	maxMaps  int
	pageSize uint64
	det      detector // the late-DMA detector (quiesce.go)
}

// New returns an empty region table.
func New() *Memory {
	return &Memory{maxMaps: 65535, pageSize: uint64(unix.Getpagesize())}
}

// SetRemote installs (or, with nil, removes) the accessor for fd-less
// regions.
func (m *Memory) SetRemote(r Remote) {
	m.mu.Lock()
	m.remote = r
	m.mu.Unlock()
}

// SetMaxMappings bounds the number of simultaneous regions (the
// max_dma_maps capability).
func (m *Memory) SetMaxMappings(n int) {
	m.mu.Lock()
	m.maxMaps = n
	m.mu.Unlock()
}

// MapHost adds a region backed by host memory. release, if not nil, runs
// once the region is unmapped and no copy uses host any more.
func (m *Memory) MapHost(iova uint64, host []byte, prot Prot, release func()) error {
	if len(host) == 0 {
		return ErrInvalid
	}
	return m.insert(region{start: iova, end: iova + uint64(len(host)), prot: prot, host: host, release: release}, uint64(len(host)))
}

// MapRemote adds a region reachable only through the Remote accessor.
func (m *Memory) MapRemote(iova, size uint64, prot Prot) error {
	return m.insert(region{start: iova, end: iova + size, prot: prot}, size)
}

// MapFD mmaps size bytes of fd at offset and adds them at iova. The caller
// keeps ownership of fd (it may close it right after: the mapping holds its
// own reference to the file). fd must be a regular file (memfd, tmpfs,
// hugetlbfs...) at least offset+size bytes long; mmap failing for lack of
// address space or of mappings (vm.max_map_count) returns an error that
// wraps unix.ENOMEM.
func (m *Memory) MapFD(iova, size uint64, fd int, offset uint64, prot Prot) error {
	if size == 0 || iova+size < iova || offset+size < offset {
		return ErrInvalid
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("guestmem: fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w (mode %#o)", ErrNotFile, st.Mode&unix.S_IFMT)
	}
	if st.Size < 0 || uint64(st.Size) < offset+size {
		return fmt.Errorf("%w: %d bytes, mapping needs %d", ErrShortFile, st.Size, offset+size)
	}
	// mmap needs a page-aligned file offset; map from the page start and
	// expose only the requested window.
	delta := offset % m.pageSize
	length := size + delta
	if length < size || length > uint64(^uint(0)>>1) {
		return ErrInvalid
	}
	mprot := 0
	if prot&ProtRead != 0 {
		mprot |= unix.PROT_READ
	}
	if prot&ProtWrite != 0 {
		mprot |= unix.PROT_WRITE
	}
	if mprot == 0 {
		mprot = unix.PROT_NONE
	}
	mapping, err := unix.Mmap(fd, int64(offset-delta), int(length), mprot, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("guestmem: mmap %#x bytes at offset %#x: %w", length, offset-delta, err)
	}
	host := mapping[delta : delta+size : delta+size]
	if err := m.MapHost(iova, host, prot, func() { _ = unix.Munmap(mapping) }); err != nil {
		_ = unix.Munmap(mapping)
		return err
	}
	return nil
}

func (m *Memory) insert(r region, size uint64) error {
	if size == 0 || r.end < r.start {
		return ErrInvalid
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.regions) >= m.maxMaps {
		return ErrTooMany
	}
	i := sort.Search(len(m.regions), func(i int) bool { return m.regions[i].start >= r.start })
	if i > 0 && m.regions[i-1].end > r.start {
		return ErrOverlap
	}
	if i < len(m.regions) && m.regions[i].start < r.end {
		return ErrOverlap
	}
	m.regions = append(m.regions, region{})
	copy(m.regions[i+1:], m.regions[i:])
	m.regions[i] = r
	return nil
}

// Unmap removes the region that starts at iova and has exactly size bytes.
// It returns once no copy uses the region any more.
func (m *Memory) Unmap(iova, size uint64) error {
	m.mu.Lock()
	i := sort.Search(len(m.regions), func(i int) bool { return m.regions[i].start >= iova })
	if i == len(m.regions) || m.regions[i].start != iova || m.regions[i].end-m.regions[i].start != size {
		m.mu.Unlock()
		return ErrNotMapped
	}
	r := m.regions[i]
	m.regions = append(m.regions[:i], m.regions[i+1:]...)
	m.mu.Unlock()
	// Holding the write lock above excluded every in-flight copy (they hold
	// the read lock for the whole copy), so the host memory is unused now.
	if r.release != nil {
		r.release()
	}
	return nil
}

// UnmapAll removes every region, as on client disconnect.
func (m *Memory) UnmapAll() {
	m.mu.Lock()
	rs := m.regions
	m.regions = nil
	m.mu.Unlock()
	for _, r := range rs {
		if r.release != nil {
			r.release()
		}
	}
}

// Regions lists the current mappings in IOVA order.
func (m *Memory) Regions() []RegionInfo {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]RegionInfo, len(m.regions))
	for i, r := range m.regions {
		out[i] = RegionInfo{IOVA: r.start, Size: r.end - r.start, Prot: r.prot, Remote: r.host == nil}
	}
	return out
}

// find returns the index of the region containing iova, or -1. Caller holds
// m.mu.
func (m *Memory) find(iova uint64) int {
	rs := m.regions
	lo, hi := 0, len(rs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if rs[mid].end <= iova {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(rs) && rs[lo].start <= iova {
		return lo
	}
	return -1
}

// hostAccess performs one bounds-checked copy if the target region is
// host-backed; the copy runs under the read lock so Unmap waits for it. For a
// remote region it returns the accessor (done=false) and the caller goes
// through remoteAccess. Keeping p out of any interface call here is what
// lets callers pass stack buffers without allocating.
func (m *Memory) hostAccess(iova uint64, p []byte, write bool) (remote Remote, done bool, err error) {
	n := uint64(len(p))
	if n == 0 {
		return nil, true, nil
	}
	if iova+n < iova {
		return nil, true, &FaultError{IOVA: iova, Len: len(p), Write: write, Reason: FaultOverflow}
	}
	m.mu.RLock()
	i := m.find(iova)
	if i < 0 {
		m.mu.RUnlock()
		return nil, true, &FaultError{IOVA: iova, Len: len(p), Write: write, Reason: FaultUnmapped}
	}
	r := &m.regions[i]
	if iova+n > r.end {
		m.mu.RUnlock()
		return nil, true, &FaultError{IOVA: iova, Len: len(p), Write: write, Reason: FaultCrosses}
	}
	need := ProtRead
	if write {
		need = ProtWrite
	}
	if r.prot&need == 0 {
		m.mu.RUnlock()
		return nil, true, &FaultError{IOVA: iova, Len: len(p), Write: write, Reason: FaultPermission}
	}
	if r.host != nil {
		off := iova - r.start
		var ok bool
		if write {
			ok = copyHost(r.host[off:off+n], p)
		} else {
			ok = copyHost(p, r.host[off:off+n])
		}
		m.mu.RUnlock()
		if !ok {
			return nil, true, &FaultError{IOVA: iova, Len: len(p), Write: write, Reason: FaultTruncated}
		}
		return nil, true, nil
	}
	remote = m.remote
	m.mu.RUnlock()
	if remote == nil {
		return nil, true, &FaultError{IOVA: iova, Len: len(p), Write: write, Reason: FaultRemote, Err: errNoRemote}
	}
	return remote, false, nil
}

// copyHost copies src to dst, one of which is a host mapping of a client's
// file, and reports false if the mapping faulted. The client can shrink the
// file at any time; the next access past its end raises SIGBUS, which
// SetPanicOnFault turns into a panic in this goroutine that the deferred
// recover catches. The flag is per goroutine and restored on return, so
// callers' own faults stay fatal. Cost: a few ns and no allocation
// (BenchmarkReadWrite; the defer is open-coded).
func copyHost(dst, src []byte) (ok bool) {
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
	copy(dst, src)
	return true
}

// remoteAccess runs a remote transfer through a private buffer, so the
// caller's slice never escapes into the Remote implementation.
func remoteAccess(remote Remote, iova uint64, p []byte, write bool) error {
	buf := make([]byte, len(p))
	var err error
	if write {
		copy(buf, p)
		err = remote.WriteRemote(iova, buf)
	} else {
		err = remote.ReadRemote(iova, buf)
		if err == nil {
			copy(p, buf)
		}
	}
	if err != nil {
		return &FaultError{IOVA: iova, Len: len(p), Write: write, Reason: FaultRemote, Err: err}
	}
	return nil
}

func (m *Memory) access(iova uint64, p []byte, write bool) error {
	if write && m.lateFenced("", iova, len(p)) {
		return lateError(iova, len(p))
	}
	return m.copyAt(iova, p, write)
}

// writeAs is a write on behalf of the named stream.
func (m *Memory) writeAs(stream string, iova uint64, p []byte) error {
	if m.lateFenced(stream, iova, len(p)) {
		return lateError(iova, len(p))
	}
	return m.copyAt(iova, p, true)
}

func (m *Memory) copyAt(iova uint64, p []byte, write bool) error {
	remote, done, err := m.hostAccess(iova, p, write)
	if done {
		return err
	}
	return remoteAccess(remote, iova, p, write)
}

// ReadAt copies len(p) bytes of guest memory at iova into p.
func (m *Memory) ReadAt(iova uint64, p []byte) error { return m.access(iova, p, false) }

// WriteAt copies p into guest memory at iova.
func (m *Memory) WriteAt(iova uint64, p []byte) error { return m.access(iova, p, true) }

// ReadU16 reads a little-endian uint16 at iova.
func (m *Memory) ReadU16(iova uint64) (uint16, error) {
	var b [2]byte
	err := m.access(iova, b[:], false)
	return binary.LittleEndian.Uint16(b[:]), err
}

// ReadU32 reads a little-endian uint32 at iova.
func (m *Memory) ReadU32(iova uint64) (uint32, error) {
	var b [4]byte
	err := m.access(iova, b[:], false)
	return binary.LittleEndian.Uint32(b[:]), err
}

// ReadU64 reads a little-endian uint64 at iova.
func (m *Memory) ReadU64(iova uint64) (uint64, error) {
	var b [8]byte
	err := m.access(iova, b[:], false)
	return binary.LittleEndian.Uint64(b[:]), err
}

// WriteU16 writes v little-endian at iova.
func (m *Memory) WriteU16(iova uint64, v uint16) error {
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], v)
	return m.access(iova, b[:], true)
}

// WriteU32 writes v little-endian at iova.
func (m *Memory) WriteU32(iova uint64, v uint32) error {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return m.access(iova, b[:], true)
}

// WriteU64 writes v little-endian at iova.
func (m *Memory) WriteU64(iova uint64, v uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return m.access(iova, b[:], true)
}
