package rdma

import (
	"testing"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// TestQueryStatsNames: every counter of the contract has a value, each
// from a field of its own, and the contract lists each name once.
func TestQueryStatsNames(t *testing.T) {
	seen := map[string]bool{}
	values := map[uint64]string{}
	// Distinct values per field: a counter wired to another's field shows.
	rc := ibrc.Stats{}
	fields := []*uint64{&rc.RxFrames, &rc.TxFrames, &rc.MessagesIn, &rc.Retransmits, &rc.Timeouts, &rc.RNRNakReceived,
		&rc.RNRNakNoWQE, &rc.RNRNakFault, &rc.FaultDrops, &rc.ResponderFaults, &rc.RequesterFaults, &rc.ReadRetries,
		&rc.PageRequests, &rc.PageRequestErrors, &rc.SeqNakSent, &rc.ErrNakSent, &rc.TxDropped}
	for i, f := range fields {
		*f = uint64(100 + i)
	}
	dev := devCounts{badWQEs: 1000, lateRefused: 1001}
	for _, c := range hw.RDMACounters {
		if seen[c.Name] {
			t.Errorf("%s listed twice", c.Name)
		}
		seen[c.Name] = true
		v, ok := counterValue(c.Name, &rc, dev)
		if !ok {
			t.Errorf("QUERY_STATS has no value for %s", c.Name)
			continue
		}
		if other, dup := values[v]; dup {
			t.Errorf("%s and %s report the same field", c.Name, other)
		}
		values[v] = c.Name
	}
}
