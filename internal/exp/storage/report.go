package storage

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed"
)

// Paper is what seed 000's text gives of Figure 8 (its plot's points are
// not in the text): a 4 GB LUN on one hard drive, tgt's 1 GB pool.
var Paper = []string{
	"(a) memory 4-8 GB: pinned fails to start below 5 GB, NPF runs from 4 GB; NPF up to 1.9x pinned's bandwidth;",
	"    pinned caches the whole disk only from 7 GB.",
	"(b) memory.max 6 GB: with 64 KB blocks NPF's tgtd RSS stays far below pinned's 1 GB pool (buffers never",
	"    touched are never backed); with 512 KB blocks it nears pinned's.",
}

// cell is the median of a value over the rounds that measured it, NaN
// without any; fails counts the runs where tgtd did not start.
func values(results []Result, p Point, v func(Result) float64) (vals []float64, fails int) {
	for _, r := range results {
		if r.Err != nil || r.Point != p {
			continue
		}
		if r.NoStart != "" {
			fails++
			continue
		}
		vals = append(vals, v(r))
	}
	return vals, fails
}

func median(vals []float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	return report.Median(vals)
}

func cellString(vals []float64, fails int, format string) string {
	switch {
	case len(vals) == 0 && fails > 0:
		return "fails"
	case len(vals) == 0:
		return "-"
	}
	s := fmt.Sprintf(format, report.Median(vals))
	if len(vals) > 1 {
		lo, hi := report.Spread(vals)
		s += fmt.Sprintf(" ("+format+"-"+format+")", lo, hi)
	}
	if fails > 0 {
		s += fmt.Sprintf(" [%d fails]", fails)
	}
	return s
}

func mbps(r Result) float64   { return r.MBps }
func rssMiB(r Result) float64 { return float64(r.RSSKiB) / 1024 }
func hwmMiB(r Result) float64 { return float64(r.HWMKiB) / 1024 }
func fileMiB(r Result) float64 {
	return float64(r.FileKiB) / 1024
}

// Table prints Figure 8's numbers beside the paper's.
func Table(c Config, results []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tgt 1.0.85 (iSER, unmodified) in an npfnic %s guest serving a %d MiB disk (virtio-blk, reads throttled to %d MB/s),\n",
		c.AccelName(), c.DiskMiB, c.ReadMBps)
	fmt.Fprintf(&b, "its pool %d MiB; tgtd and its page cache in a cgroup v2 with memory.max; ib_iser + open-iscsi initiator,\n", c.PoolMiB)
	fmt.Fprintf(&b, "npfnic-guest randread (O_DIRECT, %d readers per session, %v warm-up then %v, every block checked).\n", c.Jobs, c.Warm, c.Run)
	fmt.Fprintf(&b, "pinned: odp=explicit (tgt registers and pins its pool); npf: odp=all (the same tgt, its pool on demand).\n")
	fmt.Fprintf(&b, "Median of %d rounds (min-max). TCG time is not hardware time: compare ratios and shapes, not MB/s.\n", c.Rounds)
	b.WriteString("\nseed 000 (InfiniBand, hardware, §6.1):\n")
	for _, l := range Paper {
		b.WriteString("  " + l + "\n")
	}
	for _, peer := range c.Peers {
		fmt.Fprintf(&b, "\nFigure 8(a), %s initiator: random %d KiB reads, MB/s (10^6), and the cgroup's page cache (MiB) at the end\n", peer, 512)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "memory.max MiB\tpinned MB/s\tnpf MB/s\tnpf/pinned\tpinned cache\tnpf cache\tpinned tgtd RSS\tnpf tgtd RSS\t")
		for _, l := range c.Limits {
			row := []string{fmt.Sprint(l)}
			var bw [2]float64
			for i, cf := range Configs {
				v, f := values(results, Point{"a", peer, cf, l, 1, 512 << 10}, mbps)
				row = append(row, cellString(v, f, "%.2f"))
				bw[i] = median(v)
				if len(v) == 0 && f > 0 {
					bw[i] = 0
				}
			}
			switch {
			case bw[0] > 0 && bw[1] > 0:
				row = append(row, fmt.Sprintf("%.2fx", bw[1]/bw[0]))
			case bw[0] == 0 && bw[1] > 0:
				row = append(row, "only npf runs")
			default:
				row = append(row, "-")
			}
			for _, f := range []func(Result) float64{fileMiB, rssMiB} {
				for _, cf := range Configs {
					v, n := values(results, Point{"a", peer, cf, l, 1, 512 << 10}, f)
					row = append(row, cellString(v, n, "%.0f"))
				}
			}
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		tw.Flush()
	}
	if !c.NoSessions {
		peer := c.Peers[0]
		fmt.Fprintf(&b, "\nFigure 8(b), %s initiator, memory.max %d MiB: tgtd's resident memory (VmRSS at the end of the reads; peak VmHWM), MiB\n", peer, c.FixedMiB)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "block\tsessions\tpinned RSS\tnpf RSS\tpinned peak\tnpf peak\tpinned MB/s\tnpf MB/s\t")
		for _, bs := range c.Blocks {
			for _, n := range c.Sessions {
				row := []string{fmt.Sprintf("%d KiB", bs>>10), fmt.Sprint(n)}
				for _, f := range []func(Result) float64{rssMiB, hwmMiB} {
					for _, cf := range Configs {
						v, fl := values(results, Point{"b", peer, cf, c.FixedMiB, n, bs}, f)
						row = append(row, cellString(v, fl, "%.0f"))
					}
				}
				for _, cf := range Configs {
					v, fl := values(results, Point{"b", peer, cf, c.FixedMiB, n, bs}, mbps)
					row = append(row, cellString(v, fl, "%.2f"))
				}
				fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
			}
		}
		tw.Flush()
	}
	var failed []string
	for _, r := range results {
		if r.Err != nil {
			failed = append(failed, fmt.Sprintf("  %s round %d: %s", r.Point, r.Round, runner.FirstLine(r.Err.Error())))
		} else if r.NoStart != "" {
			failed = append(failed, fmt.Sprintf("  %s round %d: did not run: %s", r.Point, r.Round, r.NoStart))
		}
	}
	if len(failed) > 0 {
		b.WriteString("\nruns that failed or did not start:\n" + strings.Join(failed, "\n") + "\n")
	}
	return b.String()
}

// Report is what the runner prints and writes of a run.
func Report(c Config, results []Result) *runner.Outcome {
	return runner.Jobs(c, results, func(r Result) error { return r.Err }, "runs", c.LogDir, Table, WriteOutputs)
}

// WriteOutputs writes storage.csv (every run), storage.txt (the table)
// and storage.png (Figure 8: (a) bandwidth against memory.max per peer,
// (b) tgtd's RSS against sessions per block size).
func WriteOutputs(dir string, c Config, results []Result) ([]string, error) {
	var rows [][]string
	for _, r := range results {
		e := runner.ErrCell(r.Err)
		rows = append(rows, report.Row(r.Round, r.Part, string(r.Peer), r.Config, r.LimitMiB, r.Sessions, r.BS,
			r.NoStart, r.MBps, r.IOs, r.RSSKiB, r.HWMKiB, r.CgroupKiB, r.FileKiB, r.AnonKiB, r.OOMKills, r.Took.Seconds(), e))
	}
	f := runner.Files{Dir: dir}
	f.CSV("storage.csv", []string{"round", "part", "peer", "config", "memory_max_mib", "sessions", "block", "no_start",
		"MBps", "ios", "tgtd_rss_kib", "tgtd_hwm_kib", "cgroup_kib", "file_kib", "anon_kib", "oom_kills", "seconds", "error"}, rows)
	f.Text("storage.txt", Table(c, results))
	f.Charts("storage.png", 1000, 900, charts(c, results)...)
	return f.Done()
}

func charts(c Config, results []Result) []report.Chart {
	zero := 0.0
	a := report.LineChart{Title: "(a) random 512 KiB reads against tgtd's memory.max (median; 0: did not start)",
		XLabel: "memory.max (MiB)", YLabel: "MB/s", YMin: &zero}
	for _, peer := range c.Peers {
		for _, cf := range Configs {
			s := report.Series{Name: string(peer) + " initiator, " + cf, Dashed: peer != testbed.RDMARxe}
			for _, l := range c.Limits {
				v, f := values(results, Point{"a", peer, cf, l, 1, 512 << 10}, mbps)
				switch {
				case len(v) > 0:
					s.X, s.Y = append(s.X, float64(l)), append(s.Y, report.Median(v))
				case f > 0:
					s.X, s.Y = append(s.X, float64(l)), append(s.Y, 0)
				}
			}
			a.Series = append(a.Series, s)
		}
	}
	out := []report.Chart{a}
	if !c.NoSessions {
		bch := report.LineChart{Title: fmt.Sprintf("(b) tgtd's resident memory, memory.max %d MiB (median)", c.FixedMiB),
			XLabel: "sessions (initiators)", YLabel: "VmRSS (MiB)", YMin: &zero}
		for _, bs := range c.Blocks {
			for _, cf := range Configs {
				s := report.Series{Name: fmt.Sprintf("%s, %d KiB", cf, bs>>10), Dashed: bs != 512<<10}
				for _, n := range c.Sessions {
					if v, _ := values(results, Point{"b", c.Peers[0], cf, c.FixedMiB, n, bs}, rssMiB); len(v) > 0 {
						s.X, s.Y = append(s.X, float64(n)), append(s.Y, report.Median(v))
					}
				}
				bch.Series = append(bch.Series, s)
			}
		}
		out = append(out, bch)
	}
	return out
}
