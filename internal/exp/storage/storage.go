// Package storage is seed 000's storage experiment (`npfnic exp
// storage`, §6.1, Figure 8): Debian's tgt (its iSER driver, unmodified)
// serves a disk from the npfnic guest to Linux's iSER initiator (ib_iser
// with open-iscsi) in a peer guest (rdma_rxe, the main row, or another
// npfnic), which reads it at random in 512 KiB blocks (npfnic-guest
// randread: fio's randread with every block checked; fio is not in the
// images). tgtd runs in a cgroup v2 whose memory.max holds its buffer
// pool and the page cache of its disk. Two configurations: pinned (tgt
// as shipped: its pool registered and pinned) and npf (the same tgt with
// npfnic.ko's odp=all: every user MR on demand). (a) bandwidth against
// the memory limit, one initiator; (b) tgtd's resident memory against
// the number of sessions at 64 KiB and 512 KiB blocks.
package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/blockpat"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed"
)

// Configurations.
const (
	Pinned = "pinned"
	NPF    = "npf"
)

// Configs are both, in the paper's order.
var Configs = []string{Pinned, NPF}

// Defaults: seed 000's set-up (a 4 GB LUN, a 1 GB pinned pool, 4-8 GB of
// memory, 6 GB for (b)) scaled by 1/8 to 1/16 for a TCG guest: tgtd's
// smallest pool (128 MiB) is an eighth of its default.
const (
	DefaultPeers    = "rxe,npfnic"
	DefaultRounds   = 1
	DefaultDiskMiB  = 256
	DefaultPoolMiB  = 128
	DefaultReadMBps = 16
	DefaultFixedMiB = 320
)

// DefaultRecvFault is the target's receive-fault policy: tgt accepts its
// connections with an RNR retry count of 0, so the initiator's QP fails
// at the first RNR NAK (the first receive fault under rnr), and under
// drop each fault waits out the initiator's ACK timeout (0.5 s and more);
// hold keeps the request in the device for the few milliseconds the page
// takes. Seed 000 patched tgt instead.
const DefaultRecvFault = testbed.RecvFaultHold

// DefaultLimits are (a)'s memory.max values in MiB: below the pool, a
// little above it, and up to pool plus disk.
var DefaultLimits = []int{96, 160, 224, 320, 416}

// DefaultSessions and DefaultBlocks are (b)'s.
var (
	DefaultSessions = []int{1, 2, 4}
	DefaultBlocks   = []int{64 << 10, 512 << 10}
)

// Config configures Run.
type Config struct {
	runner.Env
	// Peers are the initiators' kinds, one pair each; the target is
	// always npfnic. Default rxe and npfnic.
	Peers  []testbed.RDMAKind
	Rounds int
	// DiskMiB is the disk; PoolMiB tgtd's pool; ReadMBps the disk's
	// read throttle (MB/s, 10^6).
	DiskMiB, PoolMiB, ReadMBps int
	// Limits are (a)'s memory.max in MiB; FixedMiB is (b)'s.
	Limits   []int
	FixedMiB int
	// Sessions and Blocks are (b)'s; NoSessions leaves (b) out, and (b)
	// runs on the first peer only.
	Sessions   []int
	Blocks     []int
	NoSessions bool
	// Jobs are randread's readers per session; Warm and Run its times.
	Jobs      int
	Warm, Run time.Duration
	// RecvFault is the npfnic target's receive-fault policy (default
	// DefaultRecvFault).
	RecvFault string
	// MemoryMiB and CPUs are each guest's.
	MemoryMiB, CPUs int
}

// Validate checks c and fills in the defaults.
func (c *Config) Validate() error {
	if len(c.Peers) == 0 {
		c.Peers = []testbed.RDMAKind{testbed.RDMARxe, testbed.RDMANPFNIC}
	}
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	c.DiskMiB = cmp.Or(c.DiskMiB, DefaultDiskMiB)
	c.PoolMiB = cmp.Or(c.PoolMiB, DefaultPoolMiB)
	c.ReadMBps = cmp.Or(c.ReadMBps, DefaultReadMBps)
	c.FixedMiB = cmp.Or(c.FixedMiB, DefaultFixedMiB)
	if len(c.Limits) == 0 {
		c.Limits = DefaultLimits
	}
	if len(c.Sessions) == 0 {
		c.Sessions = DefaultSessions
	}
	if len(c.Blocks) == 0 {
		c.Blocks = DefaultBlocks
	}
	c.Jobs = cmp.Or(c.Jobs, 2)
	c.Warm = cmp.Or(c.Warm, 4*time.Second)
	c.Run = cmp.Or(c.Run, 8*time.Second)
	c.MemoryMiB = cmp.Or(c.MemoryMiB, 1024)
	if c.PoolMiB < 128 || c.DiskMiB < 16 || c.Rounds < 1 || c.Jobs < 1 || c.Jobs > 16 || c.Run < time.Second {
		return fmt.Errorf("pool %d MiB (at least 128, tgtd's least), disk %d MiB (16), %d rounds, %d jobs (1-16), run %v (1 s): out of range",
			c.PoolMiB, c.DiskMiB, c.Rounds, c.Jobs, c.Run)
	}
	for _, l := range append(append([]int{}, c.Limits...), c.FixedMiB) {
		if l < 16 || l >= c.MemoryMiB {
			return fmt.Errorf("memory limit %d MiB: want 16 MiB up to the guest's %d MiB", l, c.MemoryMiB)
		}
	}
	for _, b := range c.Blocks {
		if b < 4096 || b%4096 != 0 || b > 512<<10 {
			return fmt.Errorf("block %d: want a multiple of 4 KiB up to 512 KiB (ib_iser's largest command)", b)
		}
	}
	for _, n := range c.Sessions {
		if n < 1 || n > 8 {
			return fmt.Errorf("%d sessions: want 1 to 8", n)
		}
	}
	c.RecvFault = cmp.Or(c.RecvFault, DefaultRecvFault)
	if c.RecvFault != testbed.RecvFaultRNR && c.RecvFault != testbed.RecvFaultDrop && c.RecvFault != testbed.RecvFaultHold {
		return fmt.Errorf("receive-fault policy %q: want %s, %s or %s", c.RecvFault, testbed.RecvFaultRNR, testbed.RecvFaultDrop, testbed.RecvFaultHold)
	}
	if c.LogDir == "" {
		return errors.New("storage: Config.LogDir is required")
	}
	return nil
}

// Point is one run's parameters: Part "a" (a limit, one session, 512
// KiB) or "b" (the fixed limit, sessions and a block size).
type Point struct {
	Part     string
	Peer     testbed.RDMAKind
	Config   string
	LimitMiB int
	Sessions int
	BS       int
}

func (p Point) String() string {
	return fmt.Sprintf("(%s) %s peer, %s, memory.max %d MiB, %d sessions, %d KiB", p.Part, p.Peer, p.Config, p.LimitMiB, p.Sessions, p.BS>>10)
}

// Result is one run.
type Result struct {
	Point
	Round int
	testbed.StorageResult
	Err error
}

type arm struct {
	i int // the peer's
	Point
}

func (a arm) String() string { return a.Point.String() }

// Run writes the disk image, boots a pair per peer (npfnic target with
// the disk), and runs (a) and (b) in rounds, the configurations rotated.
func Run(ctx context.Context, c Config) ([]Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	// Not under LogDir, which the runner makes afresh.
	tmp, err := os.MkdirTemp("", "npfnic-storage-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	// A disk per pair: QEMU locks its image for writing, and a target's
	// tgtd opens its disk read-write.
	var disks []string
	for i := range c.Peers {
		disk := filepath.Join(tmp, fmt.Sprintf("disk%d.img", i))
		if err := writeDisk(disk, c.DiskMiB); err != nil {
			return nil, err
		}
		disks = append(disks, disk)
	}
	var results []Result
	err = runner.Loop[*pairs, arm]{
		Env:       &c.Env,
		Transport: runner.Transport[*pairs]{Name: "pairs", Start: func(ctx context.Context, logDir string) (*pairs, error) { return c.boot(ctx, logDir, disks) }},
		Steps: runner.Rounds(c.Rounds, func(round int) []arm {
			var arms []arm
			for i, peer := range c.Peers {
				for _, l := range c.Limits {
					for _, cf := range runner.Rotate(Configs, round) {
						arms = append(arms, arm{i, Point{"a", peer, cf, l, 1, 512 << 10}})
					}
				}
			}
			if !c.NoSessions {
				for _, bs := range c.Blocks {
					for _, n := range c.Sessions {
						for _, cf := range runner.Rotate(Configs, round) {
							arms = append(arms, arm{0, Point{"b", c.Peers[0], cf, c.FixedMiB, n, bs}})
						}
					}
				}
			}
			return arms
		}),
		Run: func(ctx context.Context, ps *pairs, s runner.Step[arm], label string) error {
			a := s.Arm
			r := Result{Point: a.Point, Round: s.Round}
			if r.Err = ps.err[a.i]; r.Err == nil {
				p := ps.up[a.i]
				odp := map[string]string{Pinned: "explicit", NPF: "all"}[a.Config]
				rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
				r.StorageResult, r.Err = p.Storage(rctx, p.A, p.B, testbed.StorageRun{Backing: "/dev/vda", PoolMiB: c.PoolMiB,
					MemMaxMiB: a.LimitMiB, ODP: odp, Sessions: a.Sessions, BS: a.BS, Jobs: c.Jobs, Warm: c.Warm, Run: c.Run,
					RecvFault: c.RecvFault, Logf: func(f string, args ...any) { c.Logf("  "+f, args...) }})
				cancel()
			}
			switch {
			case r.Err != nil:
			case r.NoStart != "":
				c.Logf("%s: did not run: %s", label, r.NoStart)
			default:
				c.Logf("%s: %.2f MB/s, tgtd RSS %d MiB (peak %d), cgroup %d MiB (file %d, anon %d), %.0f s", label, r.MBps,
					r.RSSKiB>>10, r.HWMKiB>>10, r.CgroupKiB>>10, r.FileKiB>>10, r.AnonKiB>>10, r.Took.Seconds())
			}
			results = append(results, r)
			return r.Err
		},
	}.Go(ctx)
	return results, err
}

// writeDisk writes the disk image: mib MiB of blockpat's pattern.
func writeDisk(path string, mib int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := blockpat.Write(f, int64(mib)<<20); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type pairs struct {
	up  []*testbed.RDMAPair
	err []error
}

func (ps *pairs) Dead() bool {
	for _, p := range ps.up {
		if p != nil && p.Dead() {
			return true
		}
	}
	return false
}

func (ps *pairs) Close() {
	for _, p := range ps.up {
		if p != nil {
			p.Close()
		}
	}
}

func (c *Config) boot(ctx context.Context, logDir string, disks []string) (*pairs, error) {
	ps := &pairs{up: make([]*testbed.RDMAPair, len(c.Peers)), err: make([]error, len(c.Peers))}
	env := c.Env
	for i, peer := range c.Peers {
		c.Logf("pair %d: npfnic target with a %d MiB disk (reads throttled to %d MB/s), %s initiator: booting", i, c.DiskMiB, c.ReadMBps, peer)
		boot := runner.RC(&env, testbed.RDMAPairConfig{A: testbed.RDMANPFNIC, B: peer, Name: fmt.Sprintf("storage%d", i),
			MemoryMiB: c.MemoryMiB, CPUs: c.CPUs, DiskA: disks[i], DiskReadBps: int64(c.ReadMBps) * 1e6,
			AppendA: testbed.StorageAppend},
			func(ctx context.Context, p *testbed.RDMAPair) error {
				if err := p.A.VM.LoadModules(ctx, "virtio_pci", "virtio_blk"); err != nil {
					return err
				}
				out, err := p.A.Shell(ctx, "ls /sys/block")
				c.Logf("  target's disks: %s (%v)", strings.Join(strings.Fields(out), " "), err)
				return nil
			})
		ps.up[i], ps.err[i] = boot.Start(ctx, filepath.Join(logDir, fmt.Sprintf("%d-%s", i, peer)))
		if ps.err[i] != nil {
			c.Logf("pair %d: %v", i, ps.err[i])
		} else {
			env.Trace = nil
		}
		if ctx.Err() != nil {
			ps.Close()
			return nil, ctx.Err()
		}
	}
	return ps, nil
}
