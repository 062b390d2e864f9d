package testbed

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Synthetic receive faults (seed 000 section 6.4): under rx_policy drop
// and backup the driver draws, for every frame it receives, an rNPF with
// probability rnpf_rate_ppm / 10^6, and takes the translation of a random
// posted RX buffer of that pair with a real invalidation, so that the
// device faults on it. The module parameter rnpf_rate_ppm sets the rate
// at probe; the function's debugfs file of the same name changes it at
// once. Under pin and off the knob does nothing and counts nothing.

// RNPFRateFile is the driver's debugfs file (and module parameter) of the
// synthetic rNPF rate, in faults per million received frames.
const RNPFRateFile = "rnpf_rate_ppm"

// PPM is the rate's unit: rnpf_rate_ppm = PPM is one rNPF per frame.
const PPM = 1_000_000

func checkPPM(ppm int) error {
	if ppm < 0 || ppm > PPM {
		return fmt.Errorf("rnpf_rate_ppm %d: want 0..%d", ppm, PPM)
	}
	return nil
}

// StreamBackupParams size rx_policy backup for a TCP stream into the
// guest: a bitmap (bm_size) deeper than the segments the guest's TCP
// receive window can hold (tcp_rmem allows 6 MB, about half of it
// advertised), and a backup ring (backup_ring_size) for the frames beyond
// the RX ring while an rNPF is resolved (2048 entries of 2 KiB: the
// largest the driver's coherent allocation gets). With the driver's defaults (256
// and 256) the device may run only 256 frames past an unresolved rNPF,
// about 3 ms of a TCG guest's stream, and when the guest resolves more
// slowly the frames that fault beyond are dropped.
const StreamBackupParams = "bm_size=4096 backup_ring_size=2048"

// RNPFParam is the module parameter that starts every function at ppm
// synthetic rNPFs per million received frames (for DriverParams' extra).
func RNPFParam(ppm int) (string, error) {
	if err := checkPPM(ppm); err != nil {
		return "", err
	}
	return RNPFRateFile + "=" + strconv.Itoa(ppm), nil
}

// SetRNPFRate changes the loaded driver's synthetic rNPF rate; it applies
// from the next frame on.
func (tb *Testbed) SetRNPFRate(ctx context.Context, ppm int) error {
	if err := checkPPM(ppm); err != nil {
		return err
	}
	return tb.WriteDebugfs(ctx, RNPFRateFile, strconv.Itoa(ppm))
}

// RNPFRate reads the loaded driver's synthetic rNPF rate.
func (tb *Testbed) RNPFRate(ctx context.Context) (int, error) {
	s, err := tb.ReadDebugfs(ctx, RNPFRateFile)
	if err != nil {
		return 0, err
	}
	ppm, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s reads %q: %w", RNPFRateFile, s, err)
	}
	return ppm, nil
}

// FaultDelayParam is the driver's module parameter (writable at run time)
// that turns every fault into an emulated major fault: its resolution
// waits this many microseconds from the interrupt that announced it.
const FaultDelayParam = "/sys/module/npfnic/parameters/fault_delay_us"

// SetFaultDelay sets the emulated major-fault delay of the loaded driver
// (0: minor faults, resolved at once); it applies to faults announced from
// then on.
func (tb *Testbed) SetFaultDelay(ctx context.Context, d time.Duration) error {
	if d < 0 || d > time.Second || d%time.Microsecond != 0 {
		return fmt.Errorf("fault delay %v: want whole microseconds from 0 to 1 s", d)
	}
	return tb.writeKnob(ctx, FaultDelayParam, strconv.FormatInt(d.Microseconds(), 10))
}

// RNPFCounters are the ethtool -S counters that say what synthetic rNPFs
// did: how many the driver injected or skipped, and the faults, backup
// frames and fault drops the device counted (all of them, synthetic or
// not), against the frames received.
type RNPFCounters struct {
	RxPackets  uint64 // q*_rx_packets summed over the pairs
	Injected   uint64 // rnpf_injected: translations taken away
	Skipped    uint64 // rnpf_skipped: drawn, not injected
	Faults     uint64 // rx_faults
	BackupPkts uint64 // rx_backup_pkts
	FaultDrops uint64 // rx_fault_drops
	LateDMA    uint64 // late_dma: nonzero only on a broken device
}

// rnpfPairs bounds the q<N>_rx_packets names ethtool -S may show.
const rnpfPairs = 16

// RNPFCountersOf picks the counters out of ethtool -S (ParseEthtoolStats).
func RNPFCountersOf(st map[string]uint64) RNPFCounters {
	c := RNPFCounters{
		Injected: st["rnpf_injected"], Skipped: st["rnpf_skipped"], Faults: st["rx_faults"],
		BackupPkts: st["rx_backup_pkts"], FaultDrops: st["rx_fault_drops"], LateDMA: st["late_dma"],
	}
	for q := range rnpfPairs {
		c.RxPackets += st[fmt.Sprintf("q%d_rx_packets", q)]
	}
	return c
}

// Since is what the counters grew by since before (a counter that went
// backwards, as the device's do across a driver reload, counts from 0).
func (c RNPFCounters) Since(before RNPFCounters) RNPFCounters {
	d := func(now, then uint64) uint64 {
		if now < then {
			return now
		}
		return now - then
	}
	return RNPFCounters{
		RxPackets: d(c.RxPackets, before.RxPackets), Injected: d(c.Injected, before.Injected),
		Skipped: d(c.Skipped, before.Skipped), Faults: d(c.Faults, before.Faults),
		BackupPkts: d(c.BackupPkts, before.BackupPkts), FaultDrops: d(c.FaultDrops, before.FaultDrops),
		LateDMA: d(c.LateDMA, before.LateDMA),
	}
}

// Rate is the injected rNPFs per million received frames (0 without
// frames).
func (c RNPFCounters) Rate() float64 {
	if c.RxPackets == 0 {
		return 0
	}
	return float64(c.Injected) * PPM / float64(c.RxPackets)
}

func (c RNPFCounters) String() string {
	return fmt.Sprintf("%d frames, %d rNPFs injected (%.0f ppm), %d skipped; rx_faults %d, rx_backup_pkts %d, rx_fault_drops %d, late_dma %d",
		c.RxPackets, c.Injected, c.Rate(), c.Skipped, c.Faults, c.BackupPkts, c.FaultDrops, c.LateDMA)
}
