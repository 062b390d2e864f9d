package atstest

import (
	"sync"

	"github.com/npfnic/npfnic/vdevice/guestmem"
)

// Remote is guest memory the device reaches only through vfio-user
// DMA_READ/DMA_WRITE (QEMU's fd-less regions), modelled in process: a
// test can hold its accesses, which is how a device unit is kept in
// flight on purpose (a client that is slow, or that is itself waiting for
// the device, to answer).
type Remote struct {
	Base uint64
	mem  []byte

	mu       sync.Mutex
	accesses int           // reads and writes so far
	hold     chan struct{} // closed to let held accesses go; nil: not holding
	entered  chan struct{} // receives one value per access that found hold set
}

// AddRemote maps size bytes at IOVA base as a remote region of g.Mem (and
// installs the accessor; one Remote per Guest).
func (g *Guest) AddRemote(base, size uint64) *Remote {
	r := &Remote{Base: base, mem: make([]byte, size), entered: make(chan struct{}, 64)}
	g.Mem.SetRemote(r)
	if err := g.Mem.MapRemote(base, size, guestmem.ProtRead|guestmem.ProtWrite); err != nil {
		panic("atstest: " + err.Error())
	}
	return r
}

// Hold makes every later access wait until Release.
func (r *Remote) Hold() {
	r.mu.Lock()
	if r.hold == nil {
		r.hold = make(chan struct{})
	}
	r.mu.Unlock()
}

// Release lets held accesses (and later ones) go.
func (r *Remote) Release() {
	r.mu.Lock()
	if r.hold != nil {
		close(r.hold)
		r.hold = nil
	}
	r.mu.Unlock()
}

// Entered receives a value each time an access starts waiting in Hold.
func (r *Remote) Entered() <-chan struct{} { return r.entered }

// Read returns a copy of n bytes of the region at iova.
func (r *Remote) Read(iova uint64, n int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	off := iova - r.Base
	return append([]byte(nil), r.mem[off:off+uint64(n)]...)
}

// Write sets n bytes of the region at iova, as the guest would.
func (r *Remote) Write(iova uint64, p []byte) {
	r.mu.Lock()
	copy(r.mem[iova-r.Base:], p)
	r.mu.Unlock()
}

// Accesses is the number of device reads and writes of the region so far.
func (r *Remote) Accesses() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accesses
}

func (r *Remote) wait() {
	r.mu.Lock()
	r.accesses++
	hold := r.hold
	r.mu.Unlock()
	if hold != nil {
		select {
		case r.entered <- struct{}{}:
		default:
		}
		<-hold
	}
}

// ReadRemote implements guestmem.Remote.
func (r *Remote) ReadRemote(iova uint64, p []byte) error {
	r.wait()
	r.mu.Lock()
	copy(p, r.mem[iova-r.Base:])
	r.mu.Unlock()
	return nil
}

// WriteRemote implements guestmem.Remote.
func (r *Remote) WriteRemote(iova uint64, p []byte) error {
	r.wait()
	r.mu.Lock()
	copy(r.mem[iova-r.Base:], p)
	r.mu.Unlock()
	return nil
}
