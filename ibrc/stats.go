package ibrc

import "sync/atomic"

// counters are the engine's Stats as atomics: every QP's roles count into
// them under their own QP's lock, so no lock of the engine's guards them.
// Field for field they are Stats (TestStatsCounters checks the mapping).
type counters struct {
	TxFrames, RxFrames atomic.Uint64
	RxMalformed        atomic.Uint64
	RxBadICRC          atomic.Uint64
	RxNoQP             atomic.Uint64
	RxDiscarded        atomic.Uint64

	DataPackets      atomic.Uint64
	Retransmits      atomic.Uint64
	Timeouts         atomic.Uint64
	RNRNakReceived   atomic.Uint64
	SeqNakReceived   atomic.Uint64
	ErrNakReceived   atomic.Uint64
	ReadRetries      atomic.Uint64
	RequesterFaults  atomic.Uint64
	ResponseDiscards atomic.Uint64

	Acks            atomic.Uint64
	DupRequests     atomic.Uint64
	SeqNakSent      atomic.Uint64
	RNRNakNoWQE     atomic.Uint64
	RNRNakFault     atomic.Uint64
	ErrNakSent      atomic.Uint64
	ResponderFaults atomic.Uint64
	FaultDrops      atomic.Uint64
	FaultHolds      atomic.Uint64
	OutOfSeqDropped atomic.Uint64
	MessagesIn      atomic.Uint64

	PageRequests      atomic.Uint64
	PageRequestErrors atomic.Uint64

	TxDropped atomic.Uint64
}

// snapshot reads every counter. Each is read on its own: while traffic
// runs, counters that move together (TxFrames and DataPackets) may be a
// packet apart; once the engine is idle the snapshot is exact.
func (c *counters) snapshot() Stats {
	return Stats{
		TxFrames: c.TxFrames.Load(), RxFrames: c.RxFrames.Load(),
		RxMalformed: c.RxMalformed.Load(), RxBadICRC: c.RxBadICRC.Load(),
		RxNoQP: c.RxNoQP.Load(), RxDiscarded: c.RxDiscarded.Load(),

		DataPackets: c.DataPackets.Load(), Retransmits: c.Retransmits.Load(),
		Timeouts: c.Timeouts.Load(), RNRNakReceived: c.RNRNakReceived.Load(),
		SeqNakReceived: c.SeqNakReceived.Load(), ErrNakReceived: c.ErrNakReceived.Load(),
		ReadRetries: c.ReadRetries.Load(), RequesterFaults: c.RequesterFaults.Load(),
		ResponseDiscards: c.ResponseDiscards.Load(),

		Acks: c.Acks.Load(), DupRequests: c.DupRequests.Load(),
		SeqNakSent: c.SeqNakSent.Load(), RNRNakNoWQE: c.RNRNakNoWQE.Load(),
		RNRNakFault: c.RNRNakFault.Load(), ErrNakSent: c.ErrNakSent.Load(),
		ResponderFaults: c.ResponderFaults.Load(), FaultDrops: c.FaultDrops.Load(), FaultHolds: c.FaultHolds.Load(),
		OutOfSeqDropped: c.OutOfSeqDropped.Load(), MessagesIn: c.MessagesIn.Load(),

		PageRequests: c.PageRequests.Load(), PageRequestErrors: c.PageRequestErrors.Load(),

		TxDropped: c.TxDropped.Load(),
	}
}
