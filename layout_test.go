package npfnic_test

import (
	"bytes"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/npfnic/npfnic"

// layoutRow is one row of the Layout table: packages of one layer and what
// they own. layer is testsOnly for packages nothing may import, and
// notGo for a folder that is not a Go package (its files are checked
// against owns instead).
type layoutRow struct {
	layer int
	pkgs  []string // module-relative package directories; "." is the root
	owns  string
}

const (
	testsOnly = -1
	notGo     = -2
)

// layout is docs/architecture.md's layer table, which TestLayoutTable keeps
// generated from it. Every Go package of the module is in exactly one row;
// a non-test file imports only packages of lower layers, whatever folder
// they are in, so data flows one way (wire → ring → translation → DMA)
// and the engines sit side by side.
var layout = []layoutRow{
	{0, []string{"vdevice/hw"}, "the device interface, defined once: identity, BAR0 register table (access, write kind, partial-write rule, reset value, owning block), descriptor and queue-entry formats, the quiesce contract; generates `guestdrv/npfnic_hw.h` and [`docs/device.md`](device.md)"},
	{0, []string{"vdevice/guestmem"}, "the one bounds-checked DMA layer: guest memory regions, page-split access, engine streams, quiesce and the late-DMA detector"},
	{0, []string{"vdevice/port"}, "the NIC's network port: backends (TAP, QEMU's stream protocol, an in-memory pipe), pcap recording, and the `Mux` both engines plug into (receive demultiplexing by claim, a transmit endpoint per engine)"},
	{0, []string{"vdevice/pkthdr"}, "the one allocation-free view of a frame's headers (VLAN/QinQ, IPv4/IPv6 with extension headers, TCP/UDP) that steering, checksum offload, TSO and RoCEv2 classification share"},
	{0, []string{"internal/buildinfo"}, "what the Go toolchain stamped into the binary about its source (the VCS revision)"},
	{0, []string{"internal/clock"}, "time: timers, the virtual clock of simulations, the one fault timestamp"},
	{0, []string{"internal/fuzzseed"}, "fuzz seed corpus files kept in step with the Go code that builds them"},
	{0, []string{"internal/blockpat"}, "the known content of the storage experiment's disk, written on the host and checked in the guest"},
	{0, []string{"guestdrv/agent"}, "the guest agent's protocol: line-oriented JSON on the guest's second serial port, by which the host drives a test guest"},
	{0, []string{"internal/testbed/child"}, "starting helper processes (QEMU, device servers, host tools) so that they die with their parent"},
	{1, []string{"vdevice/vfiouser"}, "the generic vfio-user server: protocol codec, socket loop, DMA regions, IRQ eventfds, reset, reconnect and hostile-client limits; a device plugs in through `vfiouser.Device`"},
	{1, []string{"vdevice/trace"}, "the device event trace: a ring of typed events (doorbells, descriptor fetches, DMA, ATC hits and misses, walks, faults, page requests and responses, invalidations, interrupts, backup-ring stores and resolves, frames), written in the Chrome trace-event JSON format; free when off"},
	{1, []string{"pcie"}, "the 4096-byte configuration space, with the PCIe, MSI-X and PM capabilities and the ATS, PRI and PASID extended capabilities"},
	{1, []string{"ibrc/rocev2"}, "the RoCEv2 wire format: BTH and the extended transport headers as gopacket layers, the ICRC, a frame builder and a strict decoder, pcap capture"},
	{1, []string{"vdevice/hw/internal/cheader", "vdevice/hw/internal/datasheet"}, "render the C header and the datasheet from `vdevice/hw`'s tables"},
	{1, []string{"ats/atstest"}, "a model of the driver side of address translation (guest RAM in a memfd, PASID and I/O page tables, the invalidation queue), for tests without a VM"},
	{1, []string{"internal/testutil"}, "helpers the unit tests of several packages share"},
	{1, []string{"images"}, "builds QEMU, the kernel, the module and the initramfs images, cached by their inputs"},
	{1, []string{"internal/testbed/hostnet"}, "the host end of guest links: network namespaces, taps and veths, commands and servers run inside them"},
	{1, []string{"guestdrv/cmd/npfnic-agent", "guestdrv/cmd/npfnic-guest", "guestdrv/cmd/npfnic-rdma-hostile"}, "the guest-side tools: the agent serving the host, a BAR0 and diagnostic-DMA poker without a driver, and user space at its worst against an rdma_rxe-ABI device"},
	{2, []string{"ats", "pri"}, "address translation (I/O page tables, ATC, invalidation) and the page request interface (page request groups, responses, fault stage timing)"},
	{2, []string{"ibrc"}, "the InfiniBand RC transport over RoCEv2, protocol only: QPs and their state machine, PSNs, ACK/NAK, RNR NAK, retransmission, READ responses, the bounded transmit path, CQs and a verbs-like API"},
	{2, []string{"pri/pritest"}, "a model of the driver side of PRI (page request and response queues), for tests without a VM"},
	{2, []string{"vdevice/hw/internal/genheader", "vdevice/hw/internal/gendatasheet"}, "the `go generate` commands that write `guestdrv/npfnic_hw.h` and `docs/device.md`"},
	{2, []string{"internal/report"}, "the experiments' output: CSV tables and PNG charts"},
	{3, []string{"ibrc/rxeq"}, "rdma_rxe's user-ABI queues (send, receive, completion) as the device reads and writes them in guest memory"},
	{3, []string{"ibrc/ibrctest"}, "the RC transport's test doubles: unpinned memory with faults and a page requester, a simulated wire with impairments"},
	{4, []string{"ethring"}, "the Ethernet engine: TX and RX rings, the status block and interrupt moderation, the RX fault policies and the backup ring, TSO and checksum offload, large receive (host super-packets as RX descriptor chains)"},
	{4, []string{"rdma"}, "the RDMA engine: the NIC's RDMA register block, command and event queues, QPs over rxe queues, CQs, MRs through `ats`, on-demand paging through `pri`, the paced transmit goroutine"},
	{4, []string{"rdma/rdmatest"}, "a model of the driver and librxe for tests of the RDMA engine without a VM"},
	{5, []string{"."}, "the PCI function (`npfnic`): assembles config space, BAR0 (routed by the register table to the block that owns each register), MSI-X, the port's Mux and the engines, resets and quiesce; implements `vfiouser.Device`; `Source`, the files the image build compiles, embedded for the installed command"},
	{6, []string{"internal/testbed/vm"}, "boots and drives QEMU guests: q35 under KVM or TCG (a probe guest decides `auto`), QMP through go-qemu, the console log, the guest agent on ttyS1, device servers"},
	{7, []string{"internal/testbed/workload"}, "iperf3, memcached, memaslap and the ibverbs programs' output, run and parsed"},
	{8, []string{"internal/testbed"}, "the bench that `cmd/npfnic`, the experiments and `ci/` share: a guest with npfnic on a tap, memcached and the driver loaded; RDMA pairs of guests on a cable"},
	{9, []string{"internal/exp/runner"}, "the one runner every experiment runs on: rounds with the configurations rotated, the bench on either transport (one guest on a tap, or an RDMA pair) booted again when a guest dies, progress lines, the printed table and the CSV and PNG files"},
	{10, []string{"internal/exp/rnrsweep"}, "the simulated receive-fault sweep of the RC transport (RNR NAK against drop)"},
	{11, []string{"internal/exp/coldring", "internal/exp/conformance", "internal/exp/datapath", "internal/exp/faultcost", "internal/exp/mpi", "internal/exp/overcommit", "internal/exp/rdmaperf", "internal/exp/rnpfrate", "internal/exp/storage"}, "the experiments in VMs, each its workload, measurements and figure: cold ring, rdma-core's test suite on npfnic and rdma_rxe, NICs side by side, the cost of a fault, MPI over UCX, overcommitted RDMA servers, perftest between RC implementations, the rNPF rate, storage over iSER"},
	{12, []string{"cmd/npfnic"}, "the command: one table of subcommands (`serve`, `boot`, `demo`, `images`, `exp …`, `trace`); every `exp NAME` shares one set of common flags, usage text and report (`exp.go`) and adds its own"},
	{testsOnly, []string{"ci"}, "the VM tests and the CI scripts (`checkpatch.sh`, `fuzz.sh`, `stress.sh`), nothing else: `make vmtest` runs them, `make unit` every other package"},
	{notGo, []string{"guestdrv"}, "the Linux driver (GPL-2.0, kept checkpatch-clean): `npfnic_main.c` the PCI function, vectors and sysfs; Ethernet in `npfnic_eth.c` (the netdev: parameters, probe, open and stop with the quiesce handshake, link and queue errors), `npfnic_eth_txrx.c` (TX with offloads, RX, NAPI, the pair interrupt), `npfnic_eth_ring.c` (a pair's rings and buffers), `npfnic_ethtool.c` (the ethtool ops); `npfnic_xlat.c` the one translation engine both sides use (PASID table, invalidation, page request and response queues, start and stop by user); Ethernet page faults in `npfnic_npf.c` (set-up, teardown, counters), `npfnic_iopt.c` (PASID 0's I/O page tables, cool, synthetic rNPFs), `npfnic_fault.c` (the Ethernet page requests), `npfnic_backup.c` (the backup ring); `npfnic_diag.c` the debugfs test knobs; `npfnic.h` their declarations and `npfnic_hw.h` the generated device interface. RDMA: `npfnic_ib.c` the ib_device speaking rdma_rxe's user ABI, `npfnic_ib_cmd.c` the command and event queues, `npfnic_ib_queue.c` the rxe queues with the CQs and QPs on them, `npfnic_ib_mr.c` memory regions and each context's address space, `npfnic_ib_ats.c` their use of the translation engine, `npfnic_ib_odp.c` on-demand paging, `npfnic_ib_mw.c` memory windows; `npfnic_ib.h` their declarations"},
}

// engines must not import each other, nor ethring the RC protocol.
var engineRules = [][2]string{{"ethring", "rdma"}, {"rdma", "ethring"}, {"ethring", "ibrc"}}

// goPackages returns the module-relative directories holding Go files, and
// for each the module-relative imports of its non-test files.
func goPackages(t *testing.T) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "out" || strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if _, ok := pkgs[dir]; !ok {
			pkgs[dir] = nil
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, s := range f.Imports {
			p, _ := strconv.Unquote(s.Path.Value)
			if p == module {
				pkgs[dir] = append(pkgs[dir], ".")
			} else if rel, ok := strings.CutPrefix(p, module+"/"); ok {
				pkgs[dir] = append(pkgs[dir], rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages: not run from the module root?", len(pkgs))
	}
	return pkgs
}

// TestImportLayers: every Go package of the module is in the layout table
// once, no non-test file imports a package of its own layer or a higher
// one (inside a folder as across folders), the engines do not import each
// other, and nothing imports ci/.
func TestImportLayers(t *testing.T) {
	pkgs := goPackages(t)
	layerOf := map[string]int{}
	for _, r := range layout {
		if r.layer == notGo {
			continue
		}
		for _, p := range r.pkgs {
			if _, dup := layerOf[p]; dup {
				t.Errorf("%s is in the layout table twice", p)
			}
			layerOf[p] = r.layer
		}
	}
	for dir := range pkgs {
		if _, ok := layerOf[dir]; !ok {
			t.Errorf("package %s is not in the layout table (layout_test.go): place it on a layer", dir)
		}
	}
	for p := range layerOf {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("the layout table lists %s, which holds no Go package", p)
		}
	}
	within := func(dir, root string) bool { return dir == root || strings.HasPrefix(dir, root+"/") }
	for dir, deps := range pkgs {
		for _, dep := range deps {
			for _, r := range engineRules {
				if within(dir, r[0]) && within(dep, r[1]) {
					t.Errorf("%s imports %s: %s must not import %s", dir, dep, r[0], r[1])
				}
			}
			from, fok := layerOf[dir]
			to, tok := layerOf[dep]
			switch {
			case !fok || !tok:
			case to == testsOnly:
				t.Errorf("%s imports %s: ci/ holds tests and CI scripts only; shared code goes in internal/testbed", dir, dep)
			case to >= from:
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must run down the layers of the layout table", dir, from, dep, to)
			}
		}
	}
}

// TestLayoutNamesEveryDriverFile: the guestdrv row names every source file
// of the driver, so a new one cannot go unexplained.
func TestLayoutNamesEveryDriverFile(t *testing.T) {
	var owns string
	for _, r := range layout {
		if slices.Contains(r.pkgs, "guestdrv") {
			owns = r.owns
		}
	}
	files, err := filepath.Glob("guestdrv/*.[ch]")
	if err != nil || len(files) == 0 {
		t.Fatalf("no driver sources found: %v", err)
	}
	for _, f := range files {
		if !strings.Contains(owns, "`"+filepath.Base(f)+"`") {
			t.Errorf("the layout table's guestdrv row does not name %s", filepath.Base(f))
		}
	}
}

// layoutDoc holds the generated layer table.
const layoutDoc = "docs/architecture.md"

var update = flag.Bool("update", false, "rewrite "+layoutDoc+"'s layer table from layout_test.go")

const (
	layoutBegin = "<!-- layout table: generated from layout_test.go by `go test -run TestLayoutTable -update .` -->\n"
	layoutEnd   = "<!-- end of the layout table -->\n"
)

// layoutMarkdown renders the layout table.
func layoutMarkdown() string {
	var b strings.Builder
	b.WriteString("| layer | package | owns |\n| --- | --- | --- |\n")
	for _, r := range layout {
		layer := strconv.Itoa(r.layer)
		switch r.layer {
		case testsOnly:
			layer = "tests"
		case notGo:
			layer = "–"
		}
		names := make([]string, len(r.pkgs))
		for i, p := range r.pkgs {
			names[i] = "`" + p + "`"
			if p == "." {
				names[i] = "module root"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", layer, strings.Join(names, ", "), r.owns)
	}
	return b.String()
}

// TestLayoutTable: docs/architecture.md's layer table is the one in this file.
func TestLayoutTable(t *testing.T) {
	readme, err := os.ReadFile(layoutDoc)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(readme, []byte(layoutBegin))
	j := bytes.Index(readme, []byte(layoutEnd))
	if i < 0 || j < i {
		t.Fatalf("%s has no layout table between %q and %q", layoutDoc, layoutBegin, layoutEnd)
	}
	got, want := string(readme[i+len(layoutBegin):j]), layoutMarkdown()
	if got == want {
		return
	}
	if !*update {
		t.Fatalf("%s's layout table is stale: run go test -run TestLayoutTable -update .", layoutDoc)
	}
	out := append(append(append([]byte{}, readme[:i+len(layoutBegin)]...), want...), readme[j:]...)
	if err := os.WriteFile(layoutDoc, out, 0o644); err != nil {
		t.Fatal(err)
	}
}
