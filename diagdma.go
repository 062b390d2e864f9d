package npfnic

import (
	"errors"
	"sync/atomic"

	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// diagRun is one diagnostic DMA: its own guest-memory stream, so an abort
// or a reset stops it without waiting and DIAG_DMA_STATUS can tell when no
// byte will be written any more.
type diagRun struct {
	dma     *guestmem.Stream
	aborted atomic.Bool
}

// diagStatus is DIAG_DMA_STATUS: BUSY until the run has ended, or, once
// aborted, until its stream has quiesced; then ABORTED.
func (n *NIC) diagStatus() uint32 {
	st := n.dmaStatus.Load()
	if st != hw.DiagDMAStatusBusy {
		return st
	}
	if r := n.dmaRun.Load(); r != nil && r.aborted.Load() && r.dma.Quiesced() {
		n.dmaStatus.CompareAndSwap(hw.DiagDMAStatusBusy, hw.DiagDMAStatusAborted)
		return n.dmaStatus.Load()
	}
	return st
}

// diagCtrl applies a whole DIAG_DMA_CTRL write.
func (n *NIC) diagCtrl(v uint32) {
	switch {
	case v&hw.DiagDMACtrlAbort != 0:
		if n.abortDMA() {
			n.log.Info("DIAG_DMA_CTRL: abort")
		}
	case v&hw.DiagDMACtrlStart != 0:
		n.startDMA()
	}
}

// abortDMA stops the running diagnostic DMA, if any, without waiting; it
// reports whether one was running.
func (n *NIC) abortDMA() bool {
	r := n.dmaRun.Load()
	if r == nil || n.dmaStatus.Load() != hw.DiagDMAStatusBusy {
		return false
	}
	r.aborted.Store(true)
	r.dma.Stop()
	return true
}

// diagQuiesced reports whether no diagnostic DMA may write any more.
func (n *NIC) diagQuiesced() bool { return n.diagStatus() != hw.DiagDMAStatusBusy }

// startDMA validates the diagnostic DMA and launches it on its own
// goroutine: the write that started it is a (posted) request and must not
// wait for guest memory. A start while one runs is ignored: the driver
// reads DIAG_DMA_STATUS first.
func (n *NIC) startDMA() {
	if n.diagStatus() == hw.DiagDMAStatusBusy {
		n.log.Warn("DIAG_DMA_CTRL: start while busy ignored")
		return
	}
	n.mu.Lock()
	addr, length, seed := n.dmaAddr, n.dmaLen, n.dmaSeed
	n.mu.Unlock()
	switch {
	case !n.cfg.BusMaster():
		n.dmaStatus.Store(hw.DiagDMAStatusNoMaster)
	case length == 0 || length > hw.DiagDMAMaxLen:
		n.dmaStatus.Store(hw.DiagDMAStatusBadLen)
	default:
		// The target is the driver's buffer for this run only, so the
		// stream owns (and fences) nothing: the guest reuses that memory
		// for anything once the status left BUSY.
		r := &diagRun{dma: n.mem.NewStream("diag-dma")}
		n.dmaRun.Store(r)
		n.dmaStatus.Store(hw.DiagDMAStatusBusy)
		n.dmaWG.Add(1)
		go n.runDMA(r, addr, length, seed)
	}
}

// runDMA writes the pattern page by page, each page one unit of the run's
// stream: each piece then lies inside one guest page, hence inside one DMA
// mapping, even when the target spans two adjacent mappings, and an abort
// takes effect at the next page.
func (n *NIC) runDMA(r *diagRun, addr uint64, length, seed uint32) {
	defer n.dmaWG.Done()
	var buf [guestmem.PageSize]byte
	status := uint32(hw.DiagDMAStatusDone)
	err := guestmem.SplitPages(addr, int(length), func(iova uint64, done, chunk int) error {
		for i := range chunk {
			buf[i] = hw.DiagPattern(seed, uint32(done+i))
		}
		if !r.dma.Begin() {
			return guestmem.ErrStopped
		}
		defer r.dma.End()
		return r.dma.WriteAt(iova, buf[:chunk])
	})
	switch {
	case err == nil:
	case errors.Is(err, guestmem.ErrStopped):
		status = hw.DiagDMAStatusAborted
	default:
		var fe *guestmem.FaultError
		if errors.As(err, &fe) {
			n.log.Warn("diagnostic DMA fault", "iova", fe.IOVA, "len", fe.Len, "reason", fe.Reason.String())
		} else {
			n.log.Warn("diagnostic DMA failed", "err", err)
		}
		// A PCIe requester that gets Unsupported Request sets Received
		// Master Abort.
		n.cfg.RaiseStatus(pcie.StatusRecMasterAbort)
		status = hw.DiagDMAStatusFault
	}
	if r.aborted.Load() {
		status = hw.DiagDMAStatusAborted
	}
	if n.dmaRun.Load() == r {
		n.dmaStatus.CompareAndSwap(hw.DiagDMAStatusBusy, status)
	}
}
