package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/exp/storage"
	"github.com/npfnic/npfnic/internal/testbed"
)

// expStorage is `npfnic exp storage`: see internal/exp/storage.
var expStorage = experiment{
	name: "storage", guests: true,
	about: "Seed 000's Figure 8: tgt's iSER target (unmodified) in an npfnic guest serving a disk with\n" +
		"known content to Linux's iSER initiator (ib_iser, open-iscsi) in a peer guest, tgtd and its\n" +
		"page cache in a cgroup v2 with memory.max, as pinned (tgt as shipped) and npf (npfnic.ko\n" +
		"odp=all). (a) random 512 KiB read bandwidth against memory.max; (b) tgtd's resident memory\n" +
		"against the number of sessions at 64 KiB and 512 KiB. Prints the tables beside the paper's,\n" +
		"writes CSV and PNG. Needs root.",
	rounds: storage.DefaultRounds, roundsHelp: "rounds; each runs every point in both configurations, rotated",
	memory: 1024, memoryHelp: "memory of each guest in MiB",
	flags: func(fs *flag.FlagSet) expSetup {
		peers := fs.String("peers", storage.DefaultPeers, "initiators' kinds (rxe, npfnic), a pair each; the target is npfnic")
		limits := fs.String("limits", "96,160,224,320,416", "(a): tgtd's memory.max values in MiB")
		fixed := fs.Int("fixed", storage.DefaultFixedMiB, "(b): tgtd's memory.max in MiB")
		sessions := fs.String("sessions", "1,2,4", "(b): numbers of sessions (targets, each logged in once)")
		blocks := fs.String("blocks", "64,512", "(b): block sizes in KiB")
		noB := fs.Bool("no-sessions", false, "leave (b) out")
		disk := fs.Int("disk", storage.DefaultDiskMiB, "disk size in MiB")
		pool := fs.Int("pool", storage.DefaultPoolMiB, "tgtd's iSER pool (pool_sz_mb), MiB")
		readMBps := fs.Int("disk-mbps", storage.DefaultReadMBps, "the disk's read throttle in MB/s")
		jobs := fs.Int("jobs", 2, "readers per session")
		warm := fs.Duration("warm", 4*time.Second, "reads before the measurement")
		run := fs.Duration("time", 8*time.Second, "measured reads")
		recvFault := fs.String("recv-fault", storage.DefaultRecvFault, "the npfnic target's RC receive-fault policy: rnr, drop or hold (tgt's initiators take no RNR NAK: their RNR retry count is 0)")
		return func(x expRun) (expRunFunc, error) {
			var ps []testbed.RDMAKind
			for _, s := range strings.Split(*peers, ",") {
				k, err := testbed.ParseRDMAKind(strings.TrimSpace(s))
				if err != nil {
					return nil, fmt.Errorf("-peers: %w", err)
				}
				ps = append(ps, k)
			}
			ints := func(name, list string, unit int) ([]int, error) {
				var out []int
				for _, s := range strings.Split(list, ",") {
					n, err := strconv.Atoi(strings.TrimSpace(s))
					if err != nil {
						return nil, fmt.Errorf("-%s: %w", name, err)
					}
					out = append(out, n*unit)
				}
				return out, nil
			}
			ls, err := ints("limits", *limits, 1)
			if err != nil {
				return nil, err
			}
			ss, err := ints("sessions", *sessions, 1)
			if err != nil {
				return nil, err
			}
			bs, err := ints("blocks", *blocks, 1024)
			if err != nil {
				return nil, err
			}
			c := storage.Config{Env: x.Env, Peers: ps, Rounds: x.Rounds, DiskMiB: *disk, PoolMiB: *pool, ReadMBps: *readMBps,
				Limits: ls, FixedMiB: *fixed, Sessions: ss, Blocks: bs, NoSessions: *noB, Jobs: *jobs, Warm: *warm, Run: *run, RecvFault: *recvFault,
				MemoryMiB: x.MemoryMiB, CPUs: x.CPUs}
			if err := c.Validate(); err != nil {
				return nil, err
			}
			return func(ctx context.Context, g expGuests) (*runner.Outcome, error) {
				g.into(&c.Env)
				results, err := storage.Run(ctx, c)
				return storage.Report(c, results), err
			}, nil
		}
	},
}
