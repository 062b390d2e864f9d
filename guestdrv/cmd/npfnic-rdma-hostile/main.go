// Command npfnic-rdma-hostile is user space at its worst against an RDMA
// device that speaks rdma_rxe's user ABI (npfnic's, or rdma_rxe itself):
// it opens the uverbs device with no libibverbs or librxe, issues the
// legacy write() commands itself, mmaps the queues from the rxe create
// responses, and writes into them what librxe never would: bad keys,
// SGEs past the region, opcodes and lengths no verb makes, SGE counts and
// inline lengths over the QP's limits, producer indices beyond the ring,
// garbage queue headers, a consumer index that makes a CQ overrun, UD
// SENDs to addresses the device can not reach or to QPs that are no UD
// QP, garbage in a shared receive queue. Each case runs on a fresh QP (an
// error moves a QP to the error state), and the device must complete each
// with the error status its contract names, write nothing outside the
// memory regions, and leave the next QP working: the last case is
// well-formed traffic whose bytes the server checks.
//
// The server side (-serve) is well-behaved: it opens one memory region
// and, for each case, a fresh QP connected to the client's over the
// out-of-band TCP exchange ibv_rc_pingpong uses (and a UD QP when the
// client asks for one), SENDs and checks what arrived when the client
// asks, and checks after each case that not one byte in or around its
// region changed that should not have.
//
// Usage:
//
//	npfnic-rdma-hostile -serve PORT [-d DEV] [-g GID_INDEX] [-ip ADDR]
//	npfnic-rdma-hostile -c SERVER:PORT [-d DEV] [-g GID_INDEX] [-ip ADDR] [-run RE] [-skip RE] [-repeat N]
//	npfnic-rdma-hostile -list
//
// The client prints one line per case (name, expected, got, ok) and exits
// 1 if any case's outcome differs from the expected one.
//
// With -odp-churn both sides run the ODP churn mode instead (odp.go): the
// client registers an on-demand paged region, forks and unmaps parts of it
// while the server's RDMA WRITEs stream into it, and checks that the
// device never reaches a page the process no longer maps:
//
//	npfnic-rdma-hostile -odp-churn -serve PORT [-d DEV] [-g GID_INDEX] [-ip ADDR]
//	npfnic-rdma-hostile -odp-churn -c SERVER:PORT [-forks N] [-munmaps N] [-mr odp|implicit|plain|overlap] [-d DEV] [-g GID_INDEX] [-ip ADDR]
//
// -mr says how the churner registers its region: odp (the default) with
// IBV_ACCESS_ON_DEMAND; implicit as one implicit ODP MR over the whole
// address space (start 0, length 2^64-1, ON_DEMAND), whose keys it uses
// for the region; plain without ON_DEMAND, for a driver that makes every
// MR on-demand by itself (npfnic's odp=all); overlap as odp, with an
// implicit ODP MR, an ODP MR over part of the region and a pinned MR over
// its source pages beside it, and a last step that checks the pinned
// MR's pages (pinnedStep).
//
// The client prints one line per step (step NAME ok|FAIL SECONDS DETAIL)
// and exits 1 at the first step that fails.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"regexp"
	"time"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("npfnic-rdma-hostile: ")
	dev := flag.String("d", "", "ibverbs device (default: the only one)")
	gidIndex := flag.Int("g", -1, "source GID index (default: the RoCE v2 GID of -ip, or of the only IPv4 address)")
	ipFlag := flag.String("ip", "", "local IPv4 address whose RoCE v2 GID to use")
	servePort := flag.Int("serve", 0, "serve one client on this TCP port")
	connect := flag.String("c", "", "run the cases against the server at HOST:PORT")
	runRE := flag.String("run", "", "run only the cases whose names match")
	skipRE := flag.String("skip", "", "skip the cases whose names match")
	rxeSafe := flag.Bool("rxe-safe", false, "skip the cases that make rdma_rxe, as the local device, read past an entry")
	list := flag.Bool("list", false, "list the cases and what they expect")
	repeat := flag.Int("repeat", 1, "run the selected cases this many times over (QP churn)")
	wait := flag.Duration("wait", 30*time.Second, "how long the client tries to reach the server")
	odpChurn := flag.Bool("odp-churn", false, "run the ODP churn mode: fork and munmap of an on-demand paged region under RDMA WRITEs")
	forks := flag.Int("forks", 6, "-odp-churn client: fork steps")
	munmaps := flag.Int("munmaps", 2, "-odp-churn client: munmap, WRITE from the unmapped pages and remap rounds")
	churnMR := flag.String("mr", "odp", "-odp-churn client: the region's registration: odp, implicit, plain or overlap")
	flag.Parse()

	if *list {
		for _, c := range cases {
			fmt.Printf("%-28s %s\n", c.name, c.want)
			if c.rxe != "" {
				note := "rdma_rxe: " + c.rxe
				if c.unsafeOnRxe {
					note += " (not safe with rdma_rxe as the local device)"
				}
				fmt.Printf("%-28s   %s\n", "", note)
			}
		}
		return
	}
	if (*servePort == 0) == (*connect == "") {
		log.Fatal("give -serve PORT or -c SERVER:PORT")
	}
	var run, skip *regexp.Regexp
	for _, r := range []struct {
		s  string
		re **regexp.Regexp
	}{{*runRE, &run}, {*skipRE, &skip}} {
		if r.s != "" {
			re, err := regexp.Compile(r.s)
			if err != nil {
				log.Fatal(err)
			}
			*r.re = re
		}
	}
	const sysfs = "/sys"
	if *dev == "" {
		d, err := defaultDevice(sysfs)
		if err != nil {
			log.Fatal(err)
		}
		*dev = d
	}
	var ip netip.Addr
	if *ipFlag != "" {
		a, err := netip.ParseAddr(*ipFlag)
		if err != nil || !a.Is4() {
			log.Fatalf("-ip %q: not an IPv4 address", *ipFlag)
		}
		ip = a
	}
	table, err := readGIDTable(sysfs, *dev)
	if err != nil {
		log.Fatal(err)
	}
	sgid, gid, err := pickGID(table, ip)
	if *gidIndex >= 0 {
		sgid, err = *gidIndex, nil
		for _, e := range table {
			if e.index == sgid {
				if a, perr := netip.ParseAddr(e.gid); perr == nil {
					gid = a.As16()
				}
			}
		}
	}
	if err != nil {
		log.Fatal(err)
	}
	v, err := openVerbs(sysfs, *dev)
	if err != nil {
		log.Fatal(err)
	}
	defer v.close()

	if *odpChurn {
		os.Exit(odpChurnMain(v, *servePort, *connect, *wait, uint8(sgid), gid, *dev, *forks, *munmaps, *churnMR))
	}
	// The network device of the GID: its Ethernet address is what UD
	// senders address the server by, its MTU bounds a UD message.
	nd, err := readGIDNetdev(sysfs, *dev, sgid)
	if err != nil {
		log.Fatalf("the network device of GID %d: %v", sgid, err)
	}
	if *servePort != 0 {
		s, err := newServer(v, uint8(sgid), gid, nd.mac)
		if err != nil {
			log.Fatal(err)
		}
		if err := s.serveOne(*servePort); err != nil {
			log.Fatal(err)
		}
		return
	}
	o, err := dialOOB(*connect, *wait)
	if err != nil {
		log.Fatal(err)
	}
	c, err := newClient(v, o, uint8(sgid), gid)
	if err != nil {
		log.Fatal(err)
	}
	c.mtu, c.noGID = roceMTU(nd.mtu), uint8(unusedGID(table))
	fmt.Printf("device %s, GID index %d (%s)\n", *dev, sgid, netip.AddrFrom16(gid).Unmap())
	start := time.Now()
	todo := cases
	if *rxeSafe {
		todo = nil
		for _, c := range cases {
			if !c.unsafeOnRxe {
				todo = append(todo, c)
			}
		}
	}
	if *repeat < 1 {
		log.Fatalf("-repeat %d: want at least 1", *repeat)
	}
	once := todo
	for i := 1; i < *repeat; i++ {
		todo = append(todo, once...)
	}
	res, err := c.runCases(todo, run, skip, os.Stdout)
	failed := 0
	for _, r := range res {
		if !r.ok {
			failed++
		}
	}
	fmt.Printf("%d cases, %d failed, %.1fs\n", len(res), failed, time.Since(start).Seconds())
	if err != nil {
		log.Fatal(err)
	}
	if failed > 0 || len(res) == 0 {
		os.Exit(1)
	}
}
