package workload

import (
	"slices"
	"strings"
	"testing"
)

func TestMPIRunArgv(t *testing.T) {
	r := MPIRun{Config: MPINPF, Hosts: [2]string{"10.81.0.1", "10.81.0.2"}, Subnet: "10.81.0.0/24", Devices: []string{"npfnic0", "rxe0"},
		Bench: MPIBench{Benchmarks: []string{"PingPong"}, Sizes: []int{65536, 1 << 20}, MaxIters: 10, BEff: true}}
	argv, err := r.Argv()
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(argv, " ")
	for _, want := range []string{"orterun --allow-run-as-root -np 2 --host 10.81.0.1:1,10.81.0.2:1",
		"--mca plm_rsh_agent npfnic-guest rsh", "--mca oob_tcp_if_include 10.81.0.0/24", "--mca pml ucx",
		"-x UCX_NET_DEVICES=npfnic0:1,rxe0:1", "-x UCX_IB_REG_METHODS=rcache",
		"npfnic-mpibench -b PingPong -s 65536,1048576 -n 10 -min 4 -beff"} {
		if !strings.Contains(s, want) {
			t.Errorf("argv lacks %q:\n%s", want, s)
		}
	}
	r.Config = MPICopying
	argv, _ = r.Argv()
	if !slices.Contains(argv, "UCX_RNDV_THRESH=inf") || !slices.Contains(argv, "UCX_ZCOPY_THRESH=inf") || slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, "UCX_IB_REG_METHODS=") }) {
		t.Errorf("copying: %q", argv)
	}
	r.Config, r.Env = MPIPinning, []string{"UCX_LOG_LEVEL=info"}
	argv, _ = r.Argv()
	if s := strings.Join(argv, " "); !strings.Contains(s, "-x UCX_IB_REG_METHODS=rcache -x UCX_LOG_LEVEL=info npfnic-mpibench") {
		t.Errorf("pinning with an extra variable: %s", s)
	}
	for _, bad := range []MPIRun{{Config: "zero-copy", Hosts: r.Hosts, Subnet: r.Subnet, Devices: r.Devices}, {Config: MPIPinning, Subnet: r.Subnet, Devices: r.Devices}} {
		if _, err := bad.Argv(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestParseMPIBench(t *testing.T) {
	out := `# npfnic-mpibench: IMB-MPI1's definitions (not IMB), 2 ranks, off_cache working set 16777216 bytes per direction
result bench=PingPong bytes=65536 iters=10 bufs=256 usec=67993.65 MBps=0.964
[zz-b:191  :0]     ucp_context.c:1014 UCX  WARN  something
result bench=Exchange bytes=4096 iters=10 bufs=4096 usec=3516.77 MBps=4.659
beff bytes=1 MBps=0.002
beff bytes=1048576 MBps=30.5
b_eff MBps=12.250
check errors=0
`
	o, err := ParseMPIBench(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Results) != 2 || o.Results[0] != (MPIResult{Bench: "PingPong", Bytes: 65536, Iters: 10, Bufs: 256, Usec: 67993.65, MBps: 0.964}) ||
		o.Results[1].Bench != "Exchange" || len(o.BEffSizes) != 2 || o.BEff != 12.25 || o.CheckErrors != 0 {
		t.Errorf("parsed %+v", o)
	}
	for _, bad := range []string{"", "result bench=PingPong bytes=x usec=1 MBps=1", "result bench=PingPong bytes=1 MBps=1", "b_eff MBps=?"} {
		if _, err := ParseMPIBench(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if o, _ := ParseMPIBench("result bench=PingPong bytes=1 usec=1 MBps=1"); o.CheckErrors != -1 {
		t.Errorf("no check line: CheckErrors %d, want -1", o.CheckErrors)
	}
}
