package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/npfnic/npfnic/internal/exp/coldring"
	"github.com/npfnic/npfnic/internal/exp/datapath"
	"github.com/npfnic/npfnic/internal/exp/runner"
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// runDemo is the main job for a new user: everything from images to a guest
// whose driver bound to the NIC, with each step's result on the terminal.
func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	opt := addImageFlags(fs)
	out := fs.String("out", "out/demo", "output directory: the guests' logs, and the cold ring's table, CSV and figures in OUT/cold-ring")
	traffic := fs.Duration("time", 3*time.Second, "length of each iperf3 direction and of the memaslap run (whole seconds)")
	coldRing := fs.Bool("cold-ring", true, "end with a short cold-ring experiment (npfnic exp cold-ring: Lesokhin et al., ASPLOS'17, Figure 4)")
	// The paper's comparison, short enough that make run stays under
	// 5 minutes on a loaded 2-core TCG host: pin, drop and backup (exp
	// cold-ring adds off), drop twice, with npfnic's default fault_ahead
	// and with the paper's driver (fault_ahead=0), whose cold ring
	// stalls; part (a) 10 s per arm in the first round only; part (b)
	// 5,000 operations (pin takes 1-4 s) at two ring sizes in 2 rounds,
	// capped at 10 s, which the paper's driver reaches.
	cf := addColdRingFlags(fs, coldRingDefaults{policies: "pin,drop,backup", startup: 10 * time.Second, cap: 10 * time.Second,
		sizes: "64,256", ops: 5000, startupRounds: 1, aheadZero: "drop"})
	rounds := addRoundsFlag(fs, 2, coldRingRoundsHelp)
	gf := addGuestFlags(fs, 1024, "memory of each guest in MiB")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic demo [flags]\n\n"+
			"Builds the images, boots a guest with an npfnic device, shows it in lspci, has it DMA, binds\n"+
			"the driver, runs TCP and memcached through it and ends with a short cold-ring experiment\n"+
			"(seed 000 Figure 4), drop run twice: with the paper's driver (fault_ahead=0), whose cold\n"+
			"ring stalls, and with npfnic's default fault_ahead.\n"+
			"Needs root, iperf3 and libmemcached-tools.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Everything the command line says is checked before the images are
	// built: a mistake costs nothing. -accel was checked as it was parsed;
	// it is resolved after the build (auto boots a probe guest).
	if err := gf.check(); err != nil {
		return badUsage(err)
	}
	if *traffic < time.Second || *traffic > time.Hour || *traffic%time.Second != 0 {
		return usageErrorf("-time %v: want whole seconds from 1s to 1h", *traffic)
	}
	logDir, coldOut := filepath.Join(*out, "logs"), filepath.Join(*out, "cold-ring")
	cold, err := cf.config(runner.Env{LogDir: filepath.Join(coldOut, "logs")}, *rounds)
	if err != nil {
		return badUsage(err)
	}
	cold.MemoryMiB, cold.CPUs = *gf.mem, *gf.cpus
	if *coldRing {
		if err := cold.Validate(); err != nil {
			return badUsage(err)
		}
	}
	// The output folder can be made and written.
	if err := checkOutDir("-out", *out); err != nil {
		return err
	}
	a, err := buildImages(ctx, opt)
	if err != nil {
		return err
	}
	accel, err := gf.resolve(ctx, a)
	if err != nil {
		return err
	}
	cold.Images, cold.Accel = a, accel
	step := func(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }
	step("booting %s under %s with one npfnic device (vfio-user, served in this process)", a.Kernel.Release, accel)
	start := time.Now()
	v, err := vm.Start(ctx, vm.Config{
		Name: "demo", Images: a, LogDir: logDir, MemoryMiB: *gf.mem, CPUs: *gf.cpus, Accel: accel,
		NPFNICs: []vm.NPFNIC{{}}, DefaultServer: vm.InProcessServer{},
	})
	if err != nil {
		return err
	}
	defer v.Kill()
	step("guest up in %.1fs (console log %s)", time.Since(start).Seconds(), v.ConsoleLog())

	guest := func(script string) (string, error) {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		r, err := v.Run(gctx, script)
		if err != nil {
			return "", err
		}
		if r.Exit != 0 {
			return r.Stdout, fmt.Errorf("guest %q: exit %d: %s%s", script, r.Exit, r.Stdout, r.Stderr)
		}
		return r.Stdout, nil
	}
	bdf, err := guest("npfnic-guest find")
	if err != nil {
		return err
	}
	bdf = strings.TrimSpace(bdf)
	lspci, err := guest("lspci -vvv -s " + bdf)
	if err != nil {
		return err
	}
	step("lspci -vvv -s %s (PCIe, MSI-X, ATS, PRI, PASID):", bdf)
	fmt.Print(indent(lspci))

	// Before the driver claims BAR0: with a driver bound, the kernel
	// refuses user mappings of the BAR (strict iomem).
	dma, err := guest("npfnic-guest dmatest " + bdf + " 4096 0x5eed")
	if err != nil {
		return err
	}
	step("device DMA into a guest page (npfnic-guest, from user space):")
	fmt.Print(indent(dma))

	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = v.LoadDriver(lctx, "")
	cancel()
	if err != nil {
		return err
	}
	dmesg, err := guest("dmesg | grep npfnic; ls -l /sys/bus/pci/drivers/npfnic/ | grep " + bdf)
	if err != nil {
		return fmt.Errorf("the npfnic driver did not bind: %w", err)
	}
	step("driver bound:")
	fmt.Print(indent(dmesg))

	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := v.Shutdown(sctx); err != nil {
		return err
	}

	// Real traffic: the same guest with its npfnic cabled to a host tap.
	step("TCP and memcached through npfnic (a guest cabled to a tap in a network namespace):")
	nics, err := datapath.LookupNICs("npfnic")
	if err != nil {
		return err
	}
	c := datapath.Config{
		Env:  runner.Env{Images: a, LogDir: filepath.Join(logDir, "traffic"), Progress: &stampWriter{w: os.Stdout, start: start}, Accel: accel},
		NICs: nics, IperfTime: *traffic, MemaslapTime: *traffic, MemoryMiB: *gf.mem, CPUs: *gf.cpus,
		Rounds: 1, // a showing, not a measurement
	}
	results, err := datapath.Run(ctx, c)
	if len(results) > 0 {
		fmt.Print(indent(datapath.Table(c, results)))
	}
	if err != nil {
		return err
	}
	for _, r := range results {
		if r.Err != nil {
			return fmt.Errorf("traffic through npfnic: %w (logs in %s)", r.Err, c.LogDir)
		}
	}

	if *coldRing {
		// The cold-ring experiment, short: part (a) for a few seconds per
		// arm, part (b) at two ring sizes (npfnic exp cold-ring runs the
		// whole figure).
		cold.Progress = &stampWriter{w: os.Stdout, start: start}
		var arms []string
		for _, a := range cold.Arms() {
			arms = append(arms, a.Name())
		}
		zero := ""
		if len(cold.FaultAheadZero) > 0 {
			zero = fmt.Sprintf(" (fa=0: the paper's driver, fault_ahead=0; the others npfnic's default, fault_ahead=%d)", coldring.DriverDefaultAhead)
		}
		step("cold ring (Lesokhin et al., ASPLOS'17, Figure 4), short: memaslap from a cold RX ring under %s%s; (a) %d s per arm at %d entries, (b) %d ops at rings %v (cap %.0f s), %d rounds",
			strings.Join(arms, ", "), zero, int(cold.StartupTime/time.Second), cold.StartupRing, cold.Ops, cold.Sizes, cold.Cap.Seconds(), cold.Rounds)
		info := runner.NewRunInfo(append([]string{"npfnic", "demo"}, args...))
		info.Accelerator = accel.String()
		results, err := coldring.Run(ctx, cold)
		var table strings.Builder
		err = runner.Report(&table, coldring.Report(cold, results), coldOut, info, err)
		fmt.Print(indent(table.String()))
		if err != nil {
			return fmt.Errorf("cold ring: %w", err)
		}
	}
	step("done in %.1fs; logs in %s", time.Since(start).Seconds(), logDir)
	return nil
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}
