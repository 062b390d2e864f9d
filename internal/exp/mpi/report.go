package mpi

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/report"
	"github.com/npfnic/npfnic/internal/testbed/workload"
)

// PaperBEff is seed 000's Table 6: b_eff in MB/s on its InfiniBand
// testbed (mean ± deviation), by configuration.
var PaperBEff = map[workload.MPIConfig]string{
	workload.MPIPinning: "16,410 ± 45",
	workload.MPINPF:     "16,440 ± 10",
	workload.MPICopying: "8,020 ± 20",
}

// Cell is the median of one value over the rounds that measured it.
type Cell struct {
	Median, Lo, Hi float64 // NaN without any
	N              int
}

func cell(vals []float64) Cell {
	if len(vals) == 0 {
		return Cell{math.NaN(), math.NaN(), math.NaN(), 0}
	}
	lo, hi := report.Spread(vals)
	return Cell{report.Median(vals), lo, hi, len(vals)}
}

func (c Cell) String() string {
	if c.N == 0 {
		return "-"
	}
	if c.N == 1 {
		return fmt.Sprintf("%.3g", c.Median)
	}
	return fmt.Sprintf("%.3g (%.3g-%.3g)", c.Median, c.Lo, c.Hi)
}

// Int is String for counts: whole numbers.
func (c Cell) Int() string {
	switch c.N {
	case 0:
		return "-"
	case 1:
		return fmt.Sprintf("%.0f", c.Median)
	}
	return fmt.Sprintf("%.0f (%.0f-%.0f)", c.Median, c.Lo, c.Hi)
}

// Throughput is the cell of a benchmark at a size for a pair and a
// configuration.
func Throughput(results []Result, p Pair, cf workload.MPIConfig, bench string, size int) Cell {
	var vals []float64
	for _, r := range results {
		if r.Err != nil || r.Pair != p || r.Config != cf {
			continue
		}
		for _, m := range r.Out.Results {
			if m.Bench == bench && m.Bytes == size {
				vals = append(vals, m.MBps)
			}
		}
	}
	return cell(vals)
}

// BEff is the cell of b_eff for a pair and a configuration.
func BEff(results []Result, p Pair, cf workload.MPIConfig) Cell {
	var vals []float64
	for _, r := range results {
		if r.Err == nil && r.Pair == p && r.Config == cf && r.Out.BEff > 0 {
			vals = append(vals, r.Out.BEff)
		}
	}
	return cell(vals)
}

// Faults is the cell of the ODP faults of an mpirun for a pair and a
// configuration.
func Faults(results []Result, p Pair, cf workload.MPIConfig) Cell {
	var vals []float64
	for _, r := range results {
		if r.Err == nil && r.Pair == p && r.Config == cf && r.Faults >= 0 {
			vals = append(vals, float64(r.Faults))
		}
	}
	return cell(vals)
}

func ratio(a, b Cell) string {
	if a.N == 0 || b.N == 0 || b.Median == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a.Median/b.Median)
}

// Table prints Figure 9's numbers (throughput per benchmark and size, per
// pair and configuration, with pinning over copying, the paper's labels,
// and NPF over pinning) and Table 6's beside the paper's.
func Table(c Config, results []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "npfnic-mpibench (IMB-MPI1's definitions, not IMB) under Open MPI 4.1 + UCX 1.13, one rank in each of two %s guests,\n", c.AccelName())
	fmt.Fprintf(&b, "off_cache working set %d MiB per direction, up to %d iterations per size; MB/s (10^6), median of %d rounds (min-max)\n",
		c.WorkingSet>>20, c.Iters, c.Rounds)
	b.WriteString("TCG time is not hardware time: compare ratios, not MB/s, with the paper's.\n")
	for _, p := range c.Pairs {
		fmt.Fprintf(&b, "\nFigure 9, %s (rank 0 on %s, rank 1 on %s)\n", p, p.Server, p.Client)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		head := []string{"benchmark", "bytes"}
		for _, cf := range c.Configs {
			head = append(head, string(cf))
		}
		head = append(head, "pinning/copying", "npf/pinning")
		fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
		for _, bench := range Benchmarks {
			for _, size := range c.Sizes {
				row := []string{bench, fmt.Sprint(size)}
				cells := map[workload.MPIConfig]Cell{}
				for _, cf := range c.Configs {
					cells[cf] = Throughput(results, p, cf, bench, size)
					row = append(row, cells[cf].String())
				}
				row = append(row, ratio(cells[workload.MPIPinning], cells[workload.MPICopying]),
					ratio(cells[workload.MPINPF], cells[workload.MPIPinning]))
				fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
			}
		}
		tw.Flush()
	}
	if !c.NoBEff {
		fmt.Fprintf(&b, "\nTable 6: b_eff in MB/s (10^6), 21 sizes up to %d bytes, median of %d rounds (min-max)\n", c.BEffMax, c.Rounds)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		head := []string{"pair"}
		for _, cf := range c.Configs {
			head = append(head, string(cf))
		}
		fmt.Fprintln(tw, strings.Join(append(head, "npf/pinning", "pinning/copying"), "\t")+"\t")
		row := []string{"seed 000 (InfiniBand, hardware)"}
		for _, cf := range c.Configs {
			row = append(row, PaperBEff[cf])
		}
		fmt.Fprintln(tw, strings.Join(append(row, "1.00x", "2.05x"), "\t")+"\t")
		for _, p := range c.Pairs {
			row := []string{p.String()}
			cells := map[workload.MPIConfig]Cell{}
			for _, cf := range c.Configs {
				cells[cf] = BEff(results, p, cf)
				row = append(row, cells[cf].String())
			}
			row = append(row, ratio(cells[workload.MPINPF], cells[workload.MPIPinning]), ratio(cells[workload.MPIPinning], cells[workload.MPICopying]))
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		tw.Flush()
	}
	b.WriteString("\nODP faults on the npfnics per mpirun (median of rounds): under npf (odp=all) every region UCX registers\n" +
		"is on demand and the NIC faults pages in; copying and pinning register nothing on demand\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	head := []string{"pair"}
	for _, cf := range c.Configs {
		head = append(head, string(cf))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, p := range c.Pairs {
		row := []string{p.String()}
		for _, cf := range c.Configs {
			row = append(row, Faults(results, p, cf).Int())
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
	b.WriteString(runner.FailureList(results, func(r Result) (string, error) {
		return fmt.Sprintf("%s %s round %d", r.Pair, r.Config, r.Round), r.Err
	}))
	return b.String()
}

// Report is what the runner prints and writes of a run.
func Report(c Config, results []Result) *runner.Outcome {
	return runner.Jobs(c, results, func(r Result) error { return r.Err }, "runs", c.LogDir, Table, WriteOutputs)
}

// WriteOutputs writes mpi.csv (every measurement of every round),
// mpi-beff.csv, mpi.txt (the table) and mpi.png (Figure 9: throughput
// against message size, a panel per benchmark, a line per pair and
// configuration, with Table 6's b_eff as bars).
func WriteOutputs(dir string, c Config, results []Result) ([]string, error) {
	var rows, beff [][]string
	for _, r := range results {
		if r.Err != nil {
			rows = append(rows, report.Row(r.Round, r.Pair.String(), string(r.Config), "", "", "", "", "", "", runner.FirstLine(r.Err.Error())))
			continue
		}
		for _, m := range r.Out.Results {
			rows = append(rows, report.Row(r.Round, r.Pair.String(), string(r.Config), m.Bench, m.Bytes, m.Iters, m.Bufs, m.Usec, m.MBps, ""))
		}
		for _, m := range r.Out.BEffSizes {
			beff = append(beff, report.Row(r.Round, r.Pair.String(), string(r.Config), m.Bytes, m.MBps))
		}
		if r.Out.BEff > 0 {
			beff = append(beff, report.Row(r.Round, r.Pair.String(), string(r.Config), "b_eff", r.Out.BEff))
		}
	}
	f := runner.Files{Dir: dir}
	f.CSV("mpi.csv", []string{"round", "pair", "config", "benchmark", "bytes", "iters", "buffers", "usec", "MBps", "error"}, rows)
	f.CSV("mpi-beff.csv", []string{"round", "pair", "config", "bytes", "MBps"}, beff)
	f.Text("mpi.txt", Table(c, results))
	f.Charts("mpi.png", 1000, 1500, charts(c, results)...)
	return f.Done()
}

func charts(c Config, results []Result) []report.Chart {
	var out []report.Chart
	zero := 0.0
	for _, bench := range Benchmarks {
		ch := report.LineChart{Title: bench + " (median of rounds)", XLabel: "message size (bytes)", YLabel: "MB/s", LogX: true, YMin: &zero}
		for _, p := range c.Pairs {
			for _, cf := range c.Configs {
				s := report.Series{Name: p.String() + " " + string(cf), Dashed: p.Client != p.Server}
				for _, size := range c.Sizes {
					if v := Throughput(results, p, cf, bench, size); v.N > 0 {
						s.X, s.Y = append(s.X, float64(size)), append(s.Y, v.Median)
					}
				}
				ch.Series = append(ch.Series, s)
			}
		}
		out = append(out, ch)
	}
	if !c.NoBEff {
		bc := report.BarChart{Title: "b_eff (Table 6; median, min-max)", XLabel: "pair", YLabel: "MB/s"}
		for _, p := range c.Pairs {
			bc.Categories = append(bc.Categories, p.String())
		}
		for _, cf := range c.Configs {
			s := report.BarSeries{Name: string(cf)}
			for _, p := range c.Pairs {
				v := BEff(results, p, cf)
				s.Values, s.Lo, s.Hi = append(s.Values, nanZero(v.Median)), append(s.Lo, v.Lo), append(s.Hi, v.Hi)
			}
			bc.Series = append(bc.Series, s)
		}
		out = append(out, bc)
	}
	return out
}

func nanZero(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}
