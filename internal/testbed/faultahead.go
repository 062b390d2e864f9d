package testbed

import (
	"context"
	"fmt"
	"strconv"
)

// Fault ahead (seed 004's PI4/PIA prefault policies, for an RX ring):
// under rx_policy drop and backup, once the driver resolved the fault of
// an RX slot it also backs the next N slots of that ring that never had a
// page, so a cold ring takes about one fault in N+1. The module parameter
// fault_ahead sets N at probe; the function's debugfs file of the same
// name changes it from the next fault on. ethtool -S counts the slots
// backed ahead as rx_prefaulted.

// FaultAheadFile is the driver's debugfs file (and module parameter) of
// the fault-ahead depth.
const FaultAheadFile = "fault_ahead"

// FaultAheadParam is the module parameter that starts every function with
// fault_ahead n (for DriverParams' extra).
func FaultAheadParam(n int) string { return FaultAheadFile + "=" + strconv.Itoa(n) }

// SetFaultAhead changes the loaded driver's fault-ahead depth.
func (tb *Testbed) SetFaultAhead(ctx context.Context, n int) error {
	if n < 0 {
		return fmt.Errorf("fault_ahead %d: want 0 or more", n)
	}
	return tb.WriteDebugfs(ctx, FaultAheadFile, strconv.Itoa(n))
}

// FaultAhead reads the loaded driver's fault-ahead depth.
func (tb *Testbed) FaultAhead(ctx context.Context) (int, error) {
	s, err := tb.ReadDebugfs(ctx, FaultAheadFile)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s reads %q: %w", FaultAheadFile, s, err)
	}
	return n, nil
}
