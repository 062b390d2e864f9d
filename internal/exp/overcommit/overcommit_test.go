package overcommit

import (
	"errors"
	"strings"
	"testing"

	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

func TestValidate(t *testing.T) {
	c := Config{}
	c.LogDir = t.TempDir()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Regs) != 3 || c.Instances != DefaultInstances || c.Region != DefaultRegionMiB<<20 || c.Client != testbed.RDMANPFNIC {
		t.Errorf("defaults: %+v", c)
	}
	for _, bad := range []Config{{WS: 64 << 20, Region: 32 << 20}, {Instances: 17}, {WS: 4096}} {
		bad.LogDir = c.LogDir
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestTable(t *testing.T) {
	c := Config{Regs: []workload.OvercommitReg{workload.OvercommitPinned, workload.OvercommitODP}, Instances: 3, Rounds: 2}
	c.LogDir = t.TempDir()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var results []Result
	for round := 1; round <= 2; round++ {
		for n := 1; n <= 3; n++ {
			pinned := min(n, 2)
			results = append(results,
				Result{Reg: workload.OvercommitPinned, Instances: n, Round: round,
					Out: testbed.OvercommitResult{Started: pinned, Aggregate: float64(10 * pinned * round), Failed: make([]string, n-pinned)}},
				Result{Reg: workload.OvercommitODP, Instances: n, Round: round,
					Out: testbed.OvercommitResult{Started: n, Aggregate: float64(10 * n), Faults: 8192 * n}})
		}
	}
	results = append(results, Result{Reg: workload.OvercommitODP, Instances: 3, Round: 3, Err: errors.New("boom\nmore")})
	got := Table(c, results)
	for _, want := range []string{
		"registration                            1 servers      2 servers      3 servers",
		"pinned                                  1: 15 (10-20)  2: 30 (20-40)  2: 30 (20-40)",
		"odp                                     1: 10 (10-10)  2: 20 (20-20)  3: 30 (30-30)",
		"seed 000 pinning (memcached VMs, ktps)  185            310            N/A",
		"odp with 3 round 3: boom",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if s := Step(results, workload.OvercommitODP, 3); s.N != 2 || s.Faults != 24576 {
		t.Errorf("Step(odp, 3) = %+v: want 2 rounds, 24576 faults", s)
	}
}
