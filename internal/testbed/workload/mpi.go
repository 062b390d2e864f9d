package workload

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The MPI workload: Open MPI 4.1 over UCX 1.13 between two guests, one
// rank each, running npfnic-mpibench (guestdrv/mpi/mpibench.c: IMB-MPI1's
// definitions with off_cache, and a b_eff-like effective bandwidth) in one
// of seed 000's three configurations of §6.2.

// MPIConfig is how UCX moves and registers message buffers.
type MPIConfig string

const (
	// MPICopying is UCX's buffered copy only: every message, whatever its
	// size, is copied through UCX's own pre-registered bounce buffers
	// (eager bcopy), neither zero-copy nor rendezvous: UCX_ZCOPY_THRESH
	// and UCX_RNDV_THRESH at inf.
	MPICopying MPIConfig = "copying"
	// MPIPinning is UCX as shipped: large messages go zero-copy from the
	// user's buffers, which UCX registers through its registration cache
	// (UCX_IB_REG_METHODS=rcache), a pin-down cache: registered, pinned
	// and kept until the memory is freed.
	MPIPinning MPIConfig = "pinning"
	// MPINPF is pinning's UCX, unmodified and as configured, on npfnic.ko
	// with odp=all (transparent ODP, set by testbed's RDMAPair.MPI for the
	// run): every region UCX registers, its cache's and its own buffers',
	// is on demand, so nothing is pinned and the NIC faults pages in as it
	// reaches them. rdma_rxe has no ODP: an rxe rank pins as under
	// pinning. (UCX's own on-demand method, UCX_IB_REG_METHODS=odp, one
	// implicit ODP region per rank, runs on npfnic too, but UCX 1.13
	// crashes closing it in MPI_Finalize: see docs/experiments.md.)
	MPINPF MPIConfig = "npf"
)

// MPIConfigs are the three, in the paper's order.
var MPIConfigs = []MPIConfig{MPICopying, MPIPinning, MPINPF}

// ParseMPIConfig reads copying, pinning or npf.
func ParseMPIConfig(s string) (MPIConfig, error) {
	for _, c := range MPIConfigs {
		if string(c) == s {
			return c, nil
		}
	}
	return "", fmt.Errorf("MPI configuration %q: want copying, pinning or npf", s)
}

// Env is the UCX environment of c, as NAME=VALUE.
func (c MPIConfig) Env() []string {
	switch c {
	case MPICopying:
		return []string{"UCX_ZCOPY_THRESH=inf", "UCX_RNDV_THRESH=inf"}
	case MPIPinning:
		return []string{"UCX_IB_REG_METHODS=rcache"}
	case MPINPF:
		return []string{"UCX_IB_REG_METHODS=rcache"}
	}
	return nil
}

// MPIBench is one run of npfnic-mpibench.
type MPIBench struct {
	// Benchmarks are PingPong, Sendrecv, Exchange, Allreduce; none: all.
	Benchmarks []string
	// Sizes are the message sizes in bytes; none: the program's.
	Sizes []int
	// WorkingSet is off_cache's working set per direction in bytes (0:
	// the program's 16 MiB); Budget bounds the bytes of one size (0: 32
	// MiB); MaxIters bounds its iterations (0: 200).
	WorkingSet, Budget, MaxIters int
	// BEff adds the b_eff run, its largest message BEffMax (0: 1 MiB),
	// each size and method BEffIters times (0: 20).
	BEff               bool
	BEffMax, BEffIters int
	NoOffCache         bool // one buffer per direction: -w 0
	Warmup             int  // untimed iterations (0: the program's 2)
	Check              bool // verify every byte received (-check)
	SkipBenchmarks     bool // b_eff alone
}

// Args is npfnic-mpibench's command line.
func (b MPIBench) Args() []string {
	args := []string{"npfnic-mpibench"}
	if b.SkipBenchmarks {
		args = append(args, "-b", "none")
	} else if len(b.Benchmarks) > 0 {
		args = append(args, "-b", strings.Join(b.Benchmarks, ","))
	}
	if len(b.Sizes) > 0 {
		s := make([]string, len(b.Sizes))
		for i, n := range b.Sizes {
			s[i] = strconv.Itoa(n)
		}
		args = append(args, "-s", strings.Join(s, ","))
	}
	switch {
	case b.NoOffCache:
		args = append(args, "-w", "0")
	case b.WorkingSet > 0:
		args = append(args, "-w", strconv.Itoa(b.WorkingSet))
	}
	if b.Budget > 0 {
		args = append(args, "-budget", strconv.Itoa(b.Budget))
	}
	if b.MaxIters > 0 {
		args = append(args, "-n", strconv.Itoa(b.MaxIters), "-min", strconv.Itoa(min(4, b.MaxIters)))
	}
	if b.Warmup > 0 {
		args = append(args, "-warmup", strconv.Itoa(b.Warmup))
	}
	if b.Check {
		args = append(args, "-check")
	}
	if b.BEff {
		args = append(args, "-beff")
		if b.BEffMax > 0 {
			args = append(args, "-beff-max", strconv.Itoa(b.BEffMax))
		}
		if b.BEffIters > 0 {
			args = append(args, "-beff-iters", strconv.Itoa(b.BEffIters))
		}
	}
	return args
}

// MPIRun is one mpirun between two guests.
type MPIRun struct {
	Config MPIConfig
	// Hosts are the two guests' addresses; rank 0 runs on the first,
	// where mpirun runs, and rank 1 on the second, through its rsh-serve.
	Hosts [2]string
	// Subnet is the cable's (CIDR): Open MPI's own TCP (mpirun to orted)
	// stays on it.
	Subnet string
	Bench  MPIBench
	// Devices are the ibverbs devices UCX may use (UCX_NET_DEVICES, port
	// 1 of each), the ranks' together: each uses those it has.
	Devices []string
	// Env is more NAME=VALUE for both ranks, after the configuration's.
	Env []string
}

// MPIRunAgent is mpirun's rsh agent: npfnic-guest's remote shell.
const MPIRunAgent = "npfnic-guest rsh"

// Argv is mpirun's command line (orterun, which Debian's mpirun is).
// Open MPI talks UCX (pml ucx) for messages; the btl and osc frameworks,
// which would open the devices a second time, are kept to self and to
// none; UCX sees RC over verbs and UD for its connection set-up only,
// not TCP or shared memory.
func (r MPIRun) Argv() ([]string, error) {
	if r.Hosts[0] == "" || r.Hosts[1] == "" || r.Subnet == "" || len(r.Devices) == 0 {
		return nil, errors.New("mpi: MPIRun needs both hosts, the subnet and the devices")
	}
	if _, err := ParseMPIConfig(string(r.Config)); err != nil {
		return nil, err
	}
	devs := make([]string, len(r.Devices))
	for i, d := range r.Devices {
		devs[i] = d + ":1"
	}
	argv := []string{"orterun", "--allow-run-as-root", "-np", "2",
		"--host", r.Hosts[0] + ":1," + r.Hosts[1] + ":1",
		"--bind-to", "none",
		"--mca", "plm_rsh_agent", MPIRunAgent,
		"--mca", "oob_tcp_if_include", r.Subnet,
		"--mca", "pml", "ucx", "--mca", "btl", "self", "--mca", "osc", "pt2pt",
		"--mca", "orte_base_help_aggregate", "0",
		"-x", "UCX_TLS=self,rc_verbs,ud_verbs",
		// npfnic takes 2047 work requests per queue (max_qp_wr, max_srq_wr);
		// UCX asks 4095 of RC's SRQ and 4096 of a UD QP.
		"-x", "UCX_RC_VERBS_RX_QUEUE_LEN=2047", "-x", "UCX_UD_VERBS_RX_QUEUE_LEN=2047",
		// UCX checks a UD packet's destination GID in its GRH as mlx5 lays
		// it out: the completion's sl says IPv4 or IPv6. librxe's (npfnic's
		// too) holds the IPv4 header in the GRH's last 20 bytes and sl 0, so
		// UCX would drop every packet of its UD wire-up.
		"-x", "UCX_UD_VERBS_ETH_DGID_CHECK=n",
		"-x", "UCX_NET_DEVICES=" + strings.Join(devs, ","),
	}
	for _, e := range append(r.Config.Env(), r.Env...) {
		argv = append(argv, "-x", e)
	}
	return append(argv, r.Bench.Args()...), nil
}

// MPIResult is one line of npfnic-mpibench's output: a benchmark at a
// message size.
type MPIResult struct {
	Bench string
	Bytes int
	Iters int
	Bufs  int
	Usec  float64 // the time of one iteration, IMB's t
	MBps  float64 // IMB's throughput, MB of 10^6 bytes
}

// MPIOutput is what npfnic-mpibench printed.
type MPIOutput struct {
	Results []MPIResult
	// BEffSizes are b_eff's per-size bandwidths (the best method's).
	BEffSizes []MPIResult
	// BEff is b_eff in MB/s; 0 without a b_eff run.
	BEff float64
	// CheckErrors is how many received buffers held wrong bytes (-check;
	// -1 without).
	CheckErrors int
}

// ParseMPIBench reads npfnic-mpibench's lines from a run's output (mpirun
// interleaves the ranks' stderr with them).
func ParseMPIBench(out string) (MPIOutput, error) {
	o := MPIOutput{CheckErrors: -1}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "result" || f[0] == "beff":
			kv := fieldsKV(f[1:])
			r := MPIResult{Bench: kv["bench"]}
			var err error
			if r.Bytes, err = strconv.Atoi(kv["bytes"]); err != nil {
				return o, fmt.Errorf("mpibench line %q: %v", l, err)
			}
			if r.MBps, err = strconv.ParseFloat(kv["MBps"], 64); err != nil {
				return o, fmt.Errorf("mpibench line %q: %v", l, err)
			}
			if f[0] == "beff" {
				o.BEffSizes = append(o.BEffSizes, r)
				continue
			}
			r.Iters, _ = strconv.Atoi(kv["iters"])
			r.Bufs, _ = strconv.Atoi(kv["bufs"])
			if r.Usec, err = strconv.ParseFloat(kv["usec"], 64); err != nil || r.Bench == "" {
				return o, fmt.Errorf("mpibench line %q: no bench or usec", l)
			}
			o.Results = append(o.Results, r)
		case f[0] == "check":
			n, err := strconv.Atoi(fieldsKV(f[1:])["errors"])
			if err != nil {
				return o, fmt.Errorf("mpibench line %q: %v", l, err)
			}
			o.CheckErrors = n
		case f[0] == "b_eff":
			v, err := strconv.ParseFloat(fieldsKV(f[1:])["MBps"], 64)
			if err != nil {
				return o, fmt.Errorf("mpibench line %q: %v", l, err)
			}
			o.BEff = v
		}
	}
	if len(o.Results) == 0 && o.BEff == 0 {
		return o, errors.New("npfnic-mpibench printed no result")
	}
	return o, nil
}

func fieldsKV(f []string) map[string]string {
	kv := map[string]string{}
	for _, s := range f {
		if k, v, ok := strings.Cut(s, "="); ok {
			kv[k] = v
		}
	}
	return kv
}
