package testbed

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Receive faults on the npfnic guest of an RDMA pair (issue 13): its
// driver's synthetic faults (debugfs rnpf_rate_ppm, here per message the
// device executed into an ODP memory region: every 10 ms the driver draws
// for each and evicts a random mapped page of a random ODP MR, as an
// invalidation would, so the next access faults), the responder's policy
// for a receive fault (debugfs rdma_recv_fault), emulated major faults
// (fault_delay_us), and the port's counters (rdma statistic), the device's
// and the driver's alike.

// RDMARecvFaultFile is the driver's debugfs file of the RC responder's
// receive-fault policy, RecvFaultRNR or RecvFaultDrop.
const RDMARecvFaultFile = "rdma_recv_fault"

// ODPPrefaultFile is the driver's debugfs file of RDMA_PREFAULT: the
// pages one page fault of a memory region asks for (interface 2.9).
const ODPPrefaultFile = "odp_prefault_pages"

// The responder's receive-fault policies: an RNR NAK for the faulting PSN
// (the sender retransmits after its RNR timer), or a silent drop (the
// sender recovers by its local ACK timeout).
const (
	RecvFaultRNR  = "rnr"
	RecvFaultDrop = "drop"
	// RecvFaultHold holds the request in the device until the page
	// arrives (interface 2.12): for peers whose RNR retry count is 0.
	RecvFaultHold = "hold"
)

// npfnicFunctions lists the PCI functions bound to the npfnic driver.
const npfnicFunctions = "for d in /sys/bus/pci/drivers/npfnic/0000:*; do echo $d; done"

// findBDF finds the PCI function of an npfnic guest's driver.
func (g *RDMAGuest) findBDF(ctx context.Context) error {
	out, err := g.shell(ctx, npfnicFunctions)
	if err != nil {
		return err
	}
	bdfs := ParseBoundFunctions(out)
	if len(bdfs) != 1 {
		return fmt.Errorf("want one PCI function bound to npfnic, found %q", out)
	}
	g.BDF = bdfs[0]
	return nil
}

// ParseBoundFunctions reads the paths the glob of npfnicFunctions printed
// (an unmatched glob prints itself) into PCI addresses.
func ParseBoundFunctions(out string) []string {
	var bdfs []string
	for _, f := range strings.Fields(out) {
		if b := path.Base(f); pciAddress.MatchString(b) {
			bdfs = append(bdfs, b)
		}
	}
	return bdfs
}

var pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

func (g *RDMAGuest) npfnic() error {
	if g.Kind != RDMANPFNIC || g.BDF == "" {
		return errors.New("testbed: receive-fault knobs need the npfnic guest of the pair")
	}
	return nil
}

// DebugfsPath is one of the npfnic driver's debugfs files for the guest's
// function.
func (g *RDMAGuest) DebugfsPath(name string) string {
	return "/sys/kernel/debug/npfnic/" + g.BDF + "/" + name
}

// WriteDebugfs writes value to one of the npfnic guest's debugfs files.
func (g *RDMAGuest) WriteDebugfs(ctx context.Context, name, value string) error {
	if err := g.npfnic(); err != nil {
		return err
	}
	return writeKnob(ctx, g.VM, g.DebugfsPath(name), value)
}

// ReadDebugfs reads one of the npfnic guest's debugfs files.
func (g *RDMAGuest) ReadDebugfs(ctx context.Context, name string) (string, error) {
	if err := g.npfnic(); err != nil {
		return "", err
	}
	b, err := g.VM.Get(ctx, g.DebugfsPath(name))
	return strings.TrimSpace(string(b)), err
}

// SetRNPFRate sets the synthetic receive-fault rate, in faults per million
// messages executed into ODP memory regions; the next draw uses it.
func (g *RDMAGuest) SetRNPFRate(ctx context.Context, ppm int) error {
	if err := checkPPM(ppm); err != nil {
		return err
	}
	return g.WriteDebugfs(ctx, RNPFRateFile, strconv.Itoa(ppm))
}

// SetRecvFault sets the RC responder's receive-fault policy (RecvFaultRNR
// or RecvFaultDrop) and reads it back; it applies from the next fault.
func (g *RDMAGuest) SetRecvFault(ctx context.Context, policy string) error {
	if policy != RecvFaultRNR && policy != RecvFaultDrop && policy != RecvFaultHold {
		return fmt.Errorf("receive-fault policy %q: want %s, %s or %s", policy, RecvFaultRNR, RecvFaultDrop, RecvFaultHold)
	}
	if err := g.WriteDebugfs(ctx, RDMARecvFaultFile, policy); err != nil {
		return err
	}
	got, err := g.ReadDebugfs(ctx, RDMARecvFaultFile)
	if err == nil && got != policy {
		err = fmt.Errorf("%s reads %q after writing %q", RDMARecvFaultFile, got, policy)
	}
	return err
}

// SetFaultDelay sets the emulated major-fault delay of the npfnic guest's
// driver (0: minor faults), as Testbed.SetFaultDelay does.
func (g *RDMAGuest) SetFaultDelay(ctx context.Context, d time.Duration) error {
	if err := g.npfnic(); err != nil {
		return err
	}
	if d < 0 || d > time.Second || d%time.Microsecond != 0 {
		return fmt.Errorf("fault delay %v: want whole microseconds from 0 to 1 s", d)
	}
	return writeKnob(ctx, g.VM, FaultDelayParam, strconv.FormatInt(d.Microseconds(), 10))
}

// Statistic reads the counters of the guest's RDMA port (rdma statistic):
// rxe's, or npfnic's device and driver counters.
func (g *RDMAGuest) Statistic(ctx context.Context) (map[string]int64, error) {
	out, err := g.shell(ctx, "rdma statistic show link "+g.Dev+"/1")
	if err != nil {
		return nil, err
	}
	st := ParseRDMAStatistic(out)
	if len(st) == 0 {
		return nil, fmt.Errorf("rdma statistic of %s shows no counter: %q", g.Dev, out)
	}
	return st, nil
}

// ParseRDMAStatistic reads `rdma statistic show link DEV/PORT`: "link
// DEV/PORT" followed by name value pairs, on one line or several.
func ParseRDMAStatistic(out string) map[string]int64 {
	st := map[string]int64{}
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if v, err := strconv.ParseInt(f[i+1], 10, 64); err == nil {
			st[f[i]] = v
			i++
		}
	}
	return st
}
