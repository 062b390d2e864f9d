package rdma

import (
	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// devCounts are the engine's own counters that QUERY_STATS reports besides
// the RC transport's: free-running since the engine was built, so RESET
// keeps their values then (worker.base) and QUERY_STATS subtracts them.
type devCounts struct {
	badWQEs     uint64
	lateRefused uint64
}

// counterValue is the value of the QUERY_STATS counter name
// (hw.RDMACounters) given the transport's counters and the engine's since
// RESET; ok is false for a name it does not know (TestQueryStatsNames
// keeps the two lists together).
func counterValue(name string, rc *ibrc.Stats, dev devCounts) (v uint64, ok bool) {
	switch name {
	case "rx_frames":
		return rc.RxFrames, true
	case "tx_frames":
		return rc.TxFrames, true
	case "messages_in":
		return rc.MessagesIn, true
	case "retransmits":
		return rc.Retransmits, true
	case "ack_timeouts":
		return rc.Timeouts, true
	case "rnr_naks_rcvd":
		return rc.RNRNakReceived, true
	case "rnr_naks_no_wqe":
		return rc.RNRNakNoWQE, true
	case "rnr_naks_fault":
		return rc.RNRNakFault, true
	case "fault_drops":
		return rc.FaultDrops, true
	case "responder_faults":
		return rc.ResponderFaults, true
	case "requester_faults":
		return rc.RequesterFaults, true
	case "read_retries":
		return rc.ReadRetries, true
	case "page_requests":
		return rc.PageRequests, true
	case "page_request_errors":
		return rc.PageRequestErrors, true
	case "seq_naks_sent":
		return rc.SeqNakSent, true
	case "err_naks_sent":
		return rc.ErrNakSent, true
	case "bad_wqes":
		return dev.badWQEs, true
	case "late_refused":
		return dev.lateRefused, true
	case "tx_dropped":
		return rc.TxDropped, true
	}
	return 0, false
}

// counters returns the QUERY_STATS counters since RESET, in
// hw.RDMACounters' order. The transport is the one the worker built at
// the last RESET, so its counters started there.
func (w *worker) counters() []uint64 {
	rc := w.e.rc.Load().Stats()
	dev := devCounts{
		badWQEs:     w.e.stats.badWQEs.Load() - w.base.badWQEs,
		lateRefused: w.e.stats.lateRefused.Load() - w.base.lateRefused,
	}
	out := w.statVals[:0]
	for _, c := range hw.RDMACounters {
		v, _ := counterValue(c.Name, &rc, dev)
		out = append(out, v)
	}
	w.statVals = out
	return out
}

// queryStats is QUERY_STATS: the first min(count, NPFNIC_RDMA_STATS)
// counters, 64 bits little-endian each, into the buffer at buf (8-byte
// aligned, inside guest memory), written through the control queues'
// stream as the command's own results are. The handle must be 0.
func (w *worker) queryStats(h uint32, b []byte) uint32 {
	if h != 0 {
		return hw.RDMACmdErrHandle
	}
	buf := hw.RDMAQueryStatsBuf.Get(b)
	n := min(uint64(hw.RDMAQueryStatsCount.Get(b)), uint64(len(hw.RDMACounters)))
	if n == 0 {
		return hw.RDMACmdOK
	}
	if buf%8 != 0 || wraps(buf, 8*n) {
		return hw.RDMACmdErrParam
	}
	p := w.statBuf[:8*n]
	for i, v := range w.counters()[:n] {
		le.PutUint64(p[8*i:], v)
	}
	in := w.inst
	if !in.dma.Begin() {
		return hw.RDMACmdErrParam // disabled or reset meanwhile: the status is not written either
	}
	err := in.dma.WriteAt(buf, p)
	in.dma.End()
	if err != nil {
		return hw.RDMACmdErrParam
	}
	return hw.RDMACmdOK
}
