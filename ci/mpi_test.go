package ci

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// mpiBetween checks npfnic exp mpi's set-up end to end at a small size:
// Open MPI with UCX between the pair, one rank each, mpirun starting the
// second rank through npfnic-guest's remote shell, in each of seed 000's
// three configurations, with every byte received checked. Under npf
// (npfnic.ko's odp=all) every region UCX registers is on demand and the
// device faults pages in; under copying and pinning it faults nothing.
func mpiBetween(t *testing.T, p *testbed.RDMAPair) {
	bench := workload.MPIBench{Benchmarks: []string{"PingPong", "Exchange"}, Sizes: []int{65536}, WorkingSet: 256 << 10,
		MaxIters: 6, Check: true}
	for _, cf := range workload.MPIConfigs {
		b := bench
		b.BEff = cf == workload.MPIPinning // b_eff's 21 sizes, once, briefly
		b.BEffMax, b.BEffIters = 8192, 1
		faults := odpFaults(t, p.A)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		res, err := p.MPI(ctx, workload.MPIRun{Config: cf, Bench: b})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", cf, err)
		}
		o := res.Parsed
		t.Logf("%s: %d results in %.1f s: %+v, b_eff %.3g MB/s", cf, len(o.Results), res.Took.Seconds(), o.Results, o.BEff)
		if len(o.Results) != 2 || o.CheckErrors != 0 {
			t.Errorf("%s: %d results, %d check errors; want 2 and 0:\n%s", cf, len(o.Results), o.CheckErrors, res.Output)
		}
		for _, r := range o.Results {
			if r.MBps <= 0 || r.Iters != 6 || r.Bufs != 4 {
				t.Errorf("%s: %+v: want MB/s > 0, 6 iterations over 4 buffers", cf, r)
			}
		}
		if b.BEff && (o.BEff <= 0 || len(o.BEffSizes) != 21) {
			t.Errorf("%s: b_eff %g over %d sizes; want > 0 over 21", cf, o.BEff, len(o.BEffSizes))
		}
		got := odpFaults(t, p.A) - faults
		switch {
		case cf == workload.MPINPF && got == 0:
			t.Errorf("npf: no ODP faults on %s; want some (UCX's implicit ODP region)", p.A.IP)
		case cf != workload.MPINPF && got != 0:
			t.Errorf("%s: %d ODP faults on %s; want none (nothing on demand)", cf, got, p.A.IP)
		}
	}
}

// odpFaults is the device's count of ODP faults (rdma statistic).
func odpFaults(t *testing.T, g *testbed.RDMAGuest) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := g.ODPFaults(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// overcommitBetween checks npfnic exp overcommit's set-up end to end at a
// small size. In make test: two npfnic-overcommit servers on A under
// odp=all (registering without asking for ODP), each registering 55% of
// what A has available, so that together they do not fit; both start and
// their clients on B WRITE 1 MiB of each region, which A faults in, then
// for 1 s. Under NPFNIC_VM_FULL also the explicit-ODP step, one pinned
// server of 8 MiB, which faults nothing, and the pinned step of two 55%
// servers, where the second cannot start (registration refused, or the
// out-of-memory killer takes it): about a minute more.
func overcommitBetween(t *testing.T, p *testbed.RDMAPair) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	avail, err := p.A.MemAvailableMiB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	big := int64(avail) * 55 / 100 << 20
	type step struct {
		reg    workload.OvercommitReg
		region int64
		n, ok  int // servers asked, servers that must start
	}
	steps := []step{{workload.OvercommitODPAll, big, 2, 2}}
	if fullVMTests() {
		steps = append(steps, step{workload.OvercommitODP, big, 2, 2}, step{workload.OvercommitPinned, 8 << 20, 1, 1},
			step{workload.OvercommitPinned, big, 2, 1})
	}
	for _, st := range steps {
		start := time.Now()
		res, err := p.Overcommit(ctx, testbed.OvercommitRun{Reg: st.reg, Instances: st.n, Region: st.region, WS: 1 << 20, Seconds: 1})
		if err != nil {
			t.Fatalf("%s: %v\n%s", st.reg, err, strings.Join(res.Logs, "\n"))
		}
		t.Logf("%s: %d servers of %d MiB (%d MiB available): %d started, %.3g MB/s together, MemAvailable %d MiB serving, %d ODP faults, in %.1f s; not started: %q",
			st.reg, st.n, st.region>>20, avail, res.Started, res.Aggregate, res.AvailServing, res.Faults, time.Since(start).Seconds(), res.Failed)
		if res.Started != st.ok || res.Aggregate <= 0 {
			t.Errorf("%s: %d of %d servers started, %.3g MB/s; want %d, some", st.reg, res.Started, st.n, res.Aggregate, st.ok)
		}
		switch {
		case st.reg != workload.OvercommitPinned && res.Faults < st.n*256:
			// On demand, the NIC faults in the working sets: 256 pages each.
			t.Errorf("%s: %d ODP faults; want at least the working sets' %d pages", st.reg, res.Faults, st.n*256)
		case st.reg == workload.OvercommitPinned && res.Faults != 0:
			t.Errorf("pinned: %d ODP faults; want none", res.Faults)
		}
	}
}
