package images

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/npfnic/npfnic/guestdrv/agent"
	"github.com/u-root/gobusybox/src/pkg/golang"
	"github.com/u-root/mkuimage/uimage"
	"github.com/u-root/uio/llog"
	"golang.org/x/mod/modfile"
)

// Variant is one kind of guest image.
type Variant string

const (
	// VariantBase is the guest that runs the npfnic driver and the
	// Ethernet workloads (memcached, iperf3).
	VariantBase Variant = "base"
	// VariantRDMA adds Linux's soft-RoCE (rdma_rxe), the RDMA user
	// tools (ibverbs-utils, perftest, rdmacm-utils, nvme-cli), the
	// rdma_cm modules, NVMe over Fabrics' (nvme-rdma, nvmet-rdma, a RAM
	// disk to back a namespace) and iSER's (tgt's target, open-iscsi
	// and ib_iser for the initiator), for a peer guest.
	VariantRDMA Variant = "rdma"
	// VariantConformance adds rdma-core's own test suite (python3 with
	// pyverbs, /usr/share/doc/rdma-core/tests): the judge of the RDMA
	// device (issue 24). It is
	// kept apart because python makes it twice the size of the RDMA
	// image, and every RDMA guest of the VM tests would boot it.
	VariantConformance Variant = "conformance"
	// VariantMPI adds Open MPI with UCX (mpirun, orted, their components,
	// ucx_info and ucx_perftest) and guestdrv/mpi's benchmark and ODP
	// library, for seed 000's MPI experiment (npfnic exp mpi). It is kept
	// apart because it adds about a quarter to the RDMA image, which
	// every other RDMA guest boots.
	VariantMPI Variant = "mpi"
)

// variantParts are the parts a variant's image is made of, in order.
var variantParts = map[Variant][]Variant{
	VariantBase:        {VariantBase},
	VariantRDMA:        {VariantBase, VariantRDMA},
	VariantConformance: {VariantBase, VariantRDMA, VariantConformance},
	VariantMPI:         {VariantBase, VariantRDMA, VariantMPI},
}

// uRootCommands are the u-root core commands in the guest (a busybox binary).
var uRootCommands = []string{"github.com/u-root/u-root/cmds/core/*"}

// guestPrograms are copied with their libraries from the bookworm tree.
var guestPrograms = map[Variant][]string{
	VariantBase: {
		"/usr/bin/memcached", "/usr/bin/iperf3", "/usr/bin/lspci", "/usr/bin/setpci",
		"/usr/sbin/ethtool", "/usr/sbin/ip", "/usr/bin/sha256sum", "/usr/share/misc/pci.ids",
	},
	VariantRDMA: {
		// ibverbs-utils and perftest whole, as a user has them.
		"/usr/bin/rdma", "/usr/bin/ibv_devinfo", "/usr/bin/ibv_devices", "/usr/bin/ibv_asyncwatch",
		"/usr/bin/ibv_rc_pingpong", "/usr/bin/ibv_uc_pingpong", "/usr/bin/ibv_ud_pingpong",
		"/usr/bin/ibv_srq_pingpong", "/usr/bin/ibv_xsrq_pingpong",
		"/usr/bin/ib_send_bw", "/usr/bin/ib_write_bw", "/usr/bin/ib_read_bw", "/usr/bin/ib_atomic_bw",
		"/usr/bin/ib_send_lat", "/usr/bin/ib_write_lat", "/usr/bin/ib_read_lat", "/usr/bin/ib_atomic_lat",
		"/etc/libibverbs.d/rxe.driver",
		"/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so",
		// rdmacm-utils whole, and the library glibc loads when rping's
		// threads exit (pthread_exit unwinds through it; no ELF needs it).
		"/usr/bin/rping", "/usr/bin/ucmatose", "/usr/bin/udaddy", "/usr/bin/mckey", "/usr/bin/rdma_server",
		"/usr/bin/rdma_client", "/usr/bin/rdma_xserver", "/usr/bin/rdma_xclient", "/usr/bin/rcopy",
		"/usr/bin/riostream", "/usr/bin/rstream", "/usr/bin/cmtime",
		"/usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
		// NVMe over Fabrics: nvme-cli's nvme (discover, connect,
		// disconnect), and coreutils' dd, whose iflag/oflag=direct
		// u-root's dd lacks: the data must cross the fabric, not stay in
		// a page cache.
		"/usr/sbin/nvme", "/usr/bin/dd",
		// iSER: tgt's user-space target (tgtd, iSER built in over
		// librdmacm and libibverbs, and tgtadm, which sets it up), and
		// open-iscsi's initiator daemon and its command (iscsid,
		// iscsiadm, whose built-in "iser" iface needs no file), with
		// Debian's iscsid.conf as iscsiadm's defaults for new nodes.
		// The initiator's name is the test's to write.
		"/usr/sbin/tgtd", "/usr/sbin/tgtadm", "/usr/sbin/iscsid", "/usr/sbin/iscsiadm",
		"/etc/iscsi/iscsid.conf",
	},
	VariantConformance: {
		"/usr/bin/python3",
	},
	VariantMPI: {
		// mpirun is orterun; orted is what it starts on the other guest.
		"/usr/bin/orterun", "/usr/bin/orted", "/usr/bin/ompi_info",
		"/usr/bin/ucx_info", "/usr/bin/ucx_perftest",
		"/etc/openmpi/openmpi-mca-params.conf",
	},
}

// guestTrees are directories of the bookworm tree copied whole (their ELF
// files with what they link), but for the subdirectories in treesLeftOut.
var guestTrees = map[Variant][]string{
	VariantConformance: {"/usr/lib/python3.11", "/usr/lib/python3/dist-packages", "/usr/share/doc/rdma-core/tests"},
	// Open MPI's and PMIx's components, loaded by directory scan, UCX's
	// transports, and Open MPI's help texts, which its errors print.
	VariantMPI: {"/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3", "/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix",
		"/usr/lib/x86_64-linux-gnu/ucx", "/usr/share/openmpi"},
}

// gunzipTrees are guest trees whose *.gz files go into the image
// decompressed, without the suffix: Debian compresses what it installs
// under /usr/share/doc, rdma-core's test modules included, which python
// cannot import so.
var gunzipTrees = []string{"/usr/share/doc/rdma-core/tests/"}

// treesLeftOut are parts of the python standard library nothing here
// imports: its own tests, the IDE, Tk and the like; and Open MPI's
// components for other fabrics (libfabric, PSM, PSM2), resource managers
// and MPI-IO, whose libraries would double what Open MPI adds (the
// remaining components do not miss them: each framework picks among
// those it finds).
var treesLeftOut = map[string]bool{
	"/usr/lib/python3.11/test": true, "/usr/lib/python3.11/idlelib": true, "/usr/lib/python3.11/tkinter": true,
	"/usr/lib/python3.11/turtledemo": true, "/usr/lib/python3.11/ensurepip": true, "/usr/lib/python3.11/lib2to3": true,
	"/usr/lib/python3.11/pydoc_data": true,
}

func init() {
	for _, c := range []string{"mtl_ofi", "btl_ofi", "mtl_psm", "mtl_psm2", "btl_openib", "plm_slurm", "ras_slurm",
		"ras_gridengine", "schizo_flux", "pmix_flux", "schizo_jsm", "io_romio321"} {
		treesLeftOut["/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_"+c+".so"] = true
	}
}

// guestModules are kernel modules shipped for loading on demand (with their
// dependencies): what the npfnic driver links against, the QEMU NICs npfnic
// is compared with, soft-RoCE, the rdma_cm modules (rdma_ucm for
// librdmacm), zram (swap for the ODP reclaim test), and NVMe over Fabrics:
// the host (nvme_rdma, with nvme_fabrics and nvme_core), the target
// (nvmet_rdma, with nvmet and configfs, through which it is set up) and
// brd, the RAM disks that back its namespaces; and iSER's initiator
// (ib_iser, with libiscsi and scsi_transport_iscsi) with sd_mod for the
// disks its sessions bring (tgt's target runs in user space); virtio_blk
// for the storage experiment's disk (npfnic exp storage).
var guestModules = map[Variant][]string{
	VariantBase: append([]string{"e1000e", "virtio_net", "virtio_pci", "tun"}, agent.DriverDeps...),
	VariantRDMA: {"crc32_generic", "rdma_rxe", "ib_uverbs", "rdma_ucm", "rdma_cm", "zram",
		"nvme_rdma", "nvmet_rdma", "configfs", "brd", "ib_iser", "sd_mod", "virtio_blk"},
}

const passwd = "root:x:0:0:root:/root:/bin/sh\nmemcache:x:100:100:memcached:/nonexistent:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
const group = "root:x:0:\nmemcache:x:100:\nnogroup:x:65534:\n"

// buildInitramfs assembles a u-root initramfs for the variant: tools are
// the guest tools (bin/NAME), built maps guest paths to programs built for
// the variant's parts (variantBuilt).
func (b *Builder) buildInitramfs(ctx context.Context, v Variant, k Kernel, module, userland, base string, tools map[string]string, built map[Variant]map[string]string) (string, error) {
	done := b.begin("initramfs (" + string(v) + ")")
	var programs []string
	var modules []string
	tree := Tree{Root: userland}
	own := map[string]string{} // guest path: host file
	for _, part := range variantParts[v] {
		for gp, f := range built[part] {
			own[gp] = f
		}
		programs = append(programs, guestPrograms[part]...)
		modules = append(modules, guestModules[part]...)
		for _, dir := range guestTrees[part] {
			fs, err := tree.Files(dir, treesLeftOut)
			if err != nil {
				return "", fmt.Errorf("guest tree: %w", err)
			}
			programs = append(programs, fs...)
		}
	}
	files, err := tree.ELFClosure(programs...)
	if err != nil {
		return "", fmt.Errorf("guest programs: %w", err)
	}
	km, err := LoadKernelModules(k.ModulesDir())
	if err != nil {
		return "", err
	}
	order, err := km.LoadOrder(modules...)
	if err != nil {
		return "", err
	}
	key := NewKey("initramfs", "2").Add("variant", string(v)).
		Add("kernel", k.Release+" "+k.Version).Add("modules", strings.Join(order, " "))
	if err := key.AddFile("u-root base", base); err != nil {
		return "", err
	}
	if err := key.AddFile("npfnic.ko", module); err != nil {
		return "", err
	}
	toolNames := sortedKeys(tools)
	for _, name := range toolNames {
		if err := key.AddFile("tool/"+name, tools[name]); err != nil {
			return "", err
		}
	}
	guestPaths := sortedKeys(files)
	for _, gp := range guestPaths {
		if err := key.AddFile(gp, filepath.Join(userland, files[gp])); err != nil {
			return "", err
		}
	}
	ownPaths := sortedKeys(own)
	for _, gp := range ownPaths {
		if err := key.AddFile("built"+gp, own[gp]); err != nil {
			return "", err
		}
	}
	parent := filepath.Join(b.opt.CacheDir, "initramfs")
	dir := versionedDir(parent, string(v), key)
	out := filepath.Join(dir, "initramfs.cpio")
	defer pruneVersions(parent, string(v), dir)
	if _, ok := fresh(dir, key); ok {
		touch(dir)
		done("cached")
		return out, nil
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Join(tmp, "work"), 0o755); err != nil {
		return "", err
	}
	// Small generated files go through a staging directory.
	stage := filepath.Join(tmp, "stage")
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return "", err
	}
	var extra []string
	addStaged := func(guestPath, content string) error {
		p := filepath.Join(stage, strings.TrimPrefix(guestPath, "/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
		extra = append(extra, p+":"+strings.TrimPrefix(guestPath, "/"))
		return nil
	}
	if err := addStaged("/etc/passwd", passwd); err != nil {
		return "", err
	}
	if err := addStaged("/etc/group", group); err != nil {
		return "", err
	}
	var loadOrder strings.Builder
	for _, m := range order {
		seq, err := km.LoadOrder(m)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&loadOrder, "%s: %s\n", m, strings.Join(seq, " "))
	}
	if err := addStaged(agent.LoadOrderFile, loadOrder.String()); err != nil {
		return "", err
	}
	for _, gp := range guestPaths {
		src := filepath.Join(userland, files[gp])
		if gunzipped(gp) {
			b, err := gunzipFile(src)
			if err != nil {
				return "", err
			}
			if err := addStaged(strings.TrimSuffix(gp, ".gz"), string(b)); err != nil {
				return "", err
			}
			continue
		}
		extra = append(extra, src+":"+strings.TrimPrefix(gp, "/"))
	}
	for _, m := range order {
		extra = append(extra, km.Path(m)+":"+strings.TrimPrefix(agent.ModulesDir, "/")+"/"+m+".ko")
	}
	extra = append(extra, module+":"+strings.TrimPrefix(agent.GuestDriverPath, "/"))
	for _, name := range toolNames {
		extra = append(extra, tools[name]+":bin/"+name)
	}
	for _, gp := range ownPaths {
		extra = append(extra, own[gp]+":"+strings.TrimPrefix(gp, "/"))
	}

	fmt.Fprintf(b.out, "      u-root base + %d files\n", len(extra))
	logger, closeLog, logPath, err := b.urootLogger("initramfs-" + string(v))
	if err != nil {
		return "", err
	}
	defer closeLog()
	err = uimage.Create(logger,
		uimage.WithTempDir(filepath.Join(tmp, "work")),
		uimage.WithBaseFile(base),
		uimage.WithExistingInit(true),
		uimage.WithSkipLDD(), // libraries come from the bookworm tree, resolved above
		uimage.WithFiles(extra...),
		uimage.WithCPIOOutput(filepath.Join(tmp, "initramfs.cpio")),
	)
	if err != nil {
		return "", fmt.Errorf("initramfs %s: %w (log: %s)\n%s", v, err, logPath, tailFile(logPath, 15))
	}
	_ = os.RemoveAll(filepath.Join(tmp, "work"))
	_ = os.RemoveAll(stage)
	if err := writeStamp(tmp, stamp{Key: key.Sum()}); err != nil {
		return "", err
	}
	if err := replaceDir(tmp, dir); err != nil {
		return "", err
	}
	fi, _ := os.Stat(out)
	done(fmt.Sprintf("built %s (%d MiB)", out, fi.Size()>>20))
	return out, nil
}

func (b *Builder) urootLogger(name string) (*llog.Logger, func(), string, error) {
	logPath := filepath.Join(b.logDir(), name+".log")
	if err := os.MkdirAll(b.logDir(), 0o755); err != nil {
		return nil, nil, "", err
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, "", err
	}
	return llog.New(slog.LevelInfo, llog.WritePrintf(lf)), func() { lf.Close() }, logPath, nil
}

// buildURootBase compiles u-root's core commands into one busybox binary
// with init, the shell and the uinit link (to the agent, which each variant
// adds as a file). It depends only on the u-root version, so a driver or
// tool change reuses it and rebuilding an image takes seconds.
func (b *Builder) buildURootBase(ctx context.Context) (string, error) {
	done := b.begin("u-root base (busybox of core commands)")
	urootVersion, err := uRootVersion(b.opt.SourceDir)
	if err != nil {
		return "", err
	}
	key := NewKey("uroot-base", "1").Add("u-root", urootVersion).
		Add("commands", strings.Join(uRootCommands, " ")).Add("uinit", agent.AgentPath)
	dir := filepath.Join(b.opt.CacheDir, "uroot")
	out := filepath.Join(dir, "base.cpio")
	if _, ok := fresh(dir, key); ok {
		done("cached, u-root " + urootVersion)
		return out, nil
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Join(tmp, "work"), 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(b.out, "      compiling u-root %s core commands (about 30 s)\n", urootVersion)
	logger, closeLog, logPath, err := b.urootLogger("uroot-base")
	if err != nil {
		return "", err
	}
	defer closeLog()
	err = uimage.Create(logger,
		uimage.WithReplaceEnv(golang.Default(golang.WithWorkingDir(b.opt.SourceDir), golang.DisableCGO())),
		uimage.WithTempDir(filepath.Join(tmp, "work")),
		uimage.WithBaseArchive(uimage.DefaultRamfs()),
		uimage.WithBusyboxCommands(uRootCommands...),
		uimage.WithInit("init"),
		uimage.WithShell("gosh"),
		uimage.WithUinit(agent.AgentPath),
		uimage.WithCPIOOutput(filepath.Join(tmp, "base.cpio")),
	)
	if err != nil {
		return "", fmt.Errorf("u-root base: %w (log: %s)\n%s", err, logPath, tailFile(logPath, 15))
	}
	_ = os.RemoveAll(filepath.Join(tmp, "work"))
	if err := writeStamp(tmp, stamp{Key: key.Sum()}); err != nil {
		return "", err
	}
	if err := replaceDir(tmp, dir); err != nil {
		return "", err
	}
	done("built u-root " + urootVersion)
	return out, nil
}

// uRootVersion is the u-root version npfnic's go.mod requires; the busybox
// is built from that module, so it is part of the initramfs cache key.
func uRootVersion(sourceDir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(sourceDir, "go.mod"))
	if err != nil {
		return "", err
	}
	mf, err := modfile.ParseLax("go.mod", data, nil)
	if err != nil {
		return "", err
	}
	for _, r := range mf.Require {
		if r.Mod.Path == "github.com/u-root/u-root" {
			return r.Mod.Version, nil
		}
	}
	return "", fmt.Errorf("%s/go.mod does not require github.com/u-root/u-root", sourceDir)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// gunzipped reports whether the guest file gp goes in decompressed.
func gunzipped(gp string) bool {
	if !strings.HasSuffix(gp, ".gz") {
		return false
	}
	for _, t := range gunzipTrees {
		if strings.HasPrefix(gp, t) {
			return true
		}
	}
	return false
}

func gunzipFile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	defer z.Close()
	return io.ReadAll(z)
}
