package ci

import (
	"context"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
	"github.com/npfnic/npfnic/vdevice/hw"
)

// odpChurnPort is the out-of-band TCP port of npfnic-rdma-hostile
// -odp-churn.
const odpChurnPort = 18720

// odpChurnStep is one step line of npfnic-rdma-hostile -odp-churn's
// client: step NAME ok|FAIL SECONDS DETAIL.
var odpChurnStep = regexp.MustCompile(`(?m)^step (\S+)\s+(ok|FAIL)\s+([0-9.]+)s (.*)$`)

// odpForkMunmap: the process that owns an ODP memory region on npfnic
// forks and unmaps parts of it while RDMA transfers run into and out of
// it (npfnic-rdma-hostile -odp-churn, against rdma_rxe with a pinned
// region, which streams RDMA WRITEs of page-sized, self-describing data
// into the npfnic process's region):
//   - fork: the kernel write-protects the region and invalidates the
//     device's translations; the device's next WRITE faults and breaks
//     COW. The forked child's copy (the old pages) must not change while
//     the peer writes every page again, the parent's pages hold the last
//     WRITEs, and WRITEs from freshly rewritten (COW-broken) source pages
//     carry the new bytes;
//   - munmap of the target's upper half mid-stream: the next WRITE into
//     it faults, the page request fails and rxe's WRITE completes with
//     REM_ACCESS_ERR; no WRITE posted after the munmap into those pages
//     succeeds, and the lower half holds what the WRITEs before it put
//     there. A WRITE from an unmapped page completes with LOC_ACCESS_ERR
//     and sends nothing;
//   - a CQ's queue mapped into the hole (the kernel's memory, VM_PFNMAP,
//     at an address the region still covers): rxe's WRITE there completes
//     with REM_ACCESS_ERR and the queue keeps its bytes;
//   - remap of fresh memory there: WRITEs land in the new pages (a stale
//     translation would put them into the freed ones), and WRITEs from
//     the new pages carry their bytes.
//
// The driver counted the invalidations and the failed faults, the
// late-DMA detector (the guest's late_dma, the device's LATE_DMA and its
// refused MR accesses) stays 0, the process's objects go with it and
// the guest's kernel log stays clean.
//
// mr is how the process registers its region (npfnic-rdma-hostile -mr):
// "odp" (IBV_ACCESS_ON_DEMAND), "implicit" (one implicit ODP MR over the
// whole address space, whose children the driver makes as the WRITEs
// fault and frees as invalidations empty them) or "plain" (no
// ON_DEMAND: the driver's odp=all makes it on-demand) or "overlap" (as
// odp, with an implicit ODP MR, an ODP MR over part of the region and a
// pinned MR over its source pages beside it: the ODP MRs' faults enter
// the pages the region's key reaches and their invalidations clear them,
// and the pinned MR keeps its pages through all of it, which its own
// last step checks after remapping one of them).
func odpForkMunmap(t *testing.T, p *testbed.RDMAPair, npf, rxe *testbed.RDMAGuest, mr string, forks, munmaps int) {
	if t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The driver's reason for each page request it refuses (its one
	// dev_dbg), for the log of a failure.
	const dyndbg = "echo 'file npfnic_ib_odp.c %sp' > /proc/dynamic_debug/control"
	if _, err := npf.Shell(ctx, fmt.Sprintf(dyndbg, "+")); err != nil {
		t.Logf("no dynamic debug for the driver: %v", err)
	}
	defer npf.Shell(ctx, fmt.Sprintf(dyndbg, "-"))
	before, rxeBefore := rdmaStatistic(t, npf), rxeStats(t, rxe)
	devBefore := npf.NIC.RDMA().Stats()
	start := time.Now()
	out, exit := runHostileTool(t, rxe, npf, odpChurnPort, []string{"-odp-churn"},
		[]string{"-odp-churn", "-forks", strconv.Itoa(forks), "-munmaps", strconv.Itoa(munmaps), "-mr", mr})
	t.Logf("npfnic-rdma-hostile -odp-churn -mr %s, npfnic against rdma_rxe (%.1fs):\n%s", mr, time.Since(start).Seconds(), out)

	after, rxeAfter := rdmaStatistic(t, npf), rxeStats(t, rxe)
	d := map[string]int64{}
	for _, k := range []string{"odp_faults", "odp_fault_errors", "odp_pages_mapped", "odp_invalidations", "odp_pages_invalidated",
		"page_requests", "page_request_errors", "responder_faults", "requester_faults", "rnr_naks_fault"} {
		if _, ok := after[k]; !ok {
			t.Fatalf("npfnic's rdma statistic has no %s: %v", k, after)
		}
		d[k] = after[k] - before[k]
	}
	t.Logf("npfnic: %v; rxe rcvd_rnr_err +%d", d, rxeAfter["rcvd_rnr_err"]-rxeBefore["rcvd_rnr_err"])

	steps := odpChurnStep.FindAllStringSubmatch(out, -1)
	ok := 0
	for _, s := range steps {
		if s[2] == "ok" {
			ok++
		} else {
			t.Errorf("step %s failed: %s", s[1], s[4])
		}
	}
	want := 1 + forks + 4*munmaps
	if mr == "overlap" {
		want++ // the pinned MR's step
	}
	if exit != 0 || ok != want {
		dmesg, err := npf.Shell(ctx, "dmesg")
		if err != nil {
			dmesg = err.Error()
		}
		dmesg = lastLines(dmesg, 40)
		t.Fatalf("npfnic-rdma-hostile -odp-churn: exit %d, %d of %d steps ok; the npfnic guest's log:\n%s", exit, ok, want, dmesg)
	}
	// Every fork dropped the translations the peer's WRITEs had made, and
	// so did a munmap with its pages mapped (the first one).
	if d["odp_invalidations"] < int64(forks)+1 {
		t.Errorf("%d invalidations for %d forks and %d munmaps", d["odp_invalidations"], forks, munmaps)
	}
	// Each munmap failed two faults of the responder (the peer's WRITEs
	// into the hole and into the foreign mapping there) and one of the
	// requester (the WRITE from the hole); no other fault may fail.
	if d["odp_fault_errors"] != 3*int64(munmaps) || d["page_request_errors"] != 3*int64(munmaps) {
		t.Errorf("failed faults: driver %d, device %d; want %d (3 per munmap)", d["odp_fault_errors"], d["page_request_errors"], 3*munmaps)
	}
	if d["responder_faults"] == 0 || d["requester_faults"] == 0 || d["odp_pages_mapped"] <= int64(forks)*16 {
		t.Errorf("too few faults for %d forks: %v", forks, d)
	}
	if rxeAfter["retry_exceeded_err"] != rxeBefore["retry_exceeded_err"] || rxeAfter["rcvd_seq_err"] != rxeBefore["rcvd_seq_err"] {
		t.Errorf("rxe saw sequence errors or exhausted its retries: %v", rxeAfter)
	}

	// The late-DMA detector: the guest's, the device's own and the RDMA
	// engine's refused MR accesses.
	eth, err := npf.Shell(ctx, "ethtool -S "+npf.IfName)
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`late_dma: (\d+)`).FindStringSubmatch(eth); m == nil || m[1] != "0" {
		t.Errorf("late_dma after fork and munmap under traffic: %v", m)
	}
	var b [4]byte
	if err := npf.NIC.RegionRead(hw.RegBAR, hw.RegLateDMA, b[:]); err != nil {
		t.Fatal(err)
	}
	if late := binary.LittleEndian.Uint32(b[:]); late != 0 {
		t.Errorf("the device's LATE_DMA is %d", late)
	}
	if st := npf.NIC.RDMA().Stats(); st.LateRefused != devBefore.LateRefused || st.RingErrors != devBefore.RingErrors {
		t.Errorf("the RDMA engine refused %d late MR accesses and had %d ring errors", st.LateRefused-devBefore.LateRefused, st.RingErrors-devBefore.RingErrors)
	}
	// The process's objects went with it.
	res, err := npf.Shell(ctx, "rdma resource show qp; rdma resource show mr")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res, "npfnic-rdma-hos") {
		t.Errorf("npfnic-rdma-hostile's objects outlived it:\n%s", res)
	}
	dmesg, err := npf.Shell(ctx, "dmesg")
	if err != nil {
		t.Fatal(err)
	}
	if m := badKernelLog.FindString(dmesg); m != "" {
		t.Errorf("the npfnic guest's kernel log has %q:\n%s", m, lastLines(dmesg, 60))
	}
}
