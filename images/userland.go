package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// GuestPackages are the bookworm packages whose programs go into the guest
// images (the RDMA ones, rdmacm-utils, nvme-cli, tgt and open-iscsi among
// them, only into the RDMA variants, rdma-core's test suite only into the
// conformance variant). fio is left out: bookworm's links librbd,
// librados and glusterfs, whose libraries (some 35 MB by their packages'
// installed sizes) would grow the 57 MB RDMA image that every RDMA guest
// boots by half; NVMe over Fabrics and iSER are checked with coreutils'
// dd (O_DIRECT) and sha256sum instead. Open MPI and UCX go into the MPI
// variant only; libopenmpi-dev brings mpi.h and gcc-12 into the tree (not
// the images), with which the MPI benchmark is built (buildMPITools).
var GuestPackages = []string{
	"memcached", "iperf3", "pciutils", "pci.ids", "ethtool", "iproute2",
	"ibverbs-utils", "ibverbs-providers", "perftest", "coreutils",
	"python3-pyverbs", "rdmacm-utils", "nvme-cli", "tgt", "open-iscsi",
	"openmpi-bin", "libopenmpi-dev", "ucx-utils",
}

// buildUserland debootstraps a bookworm tree (the guest kernel's distribution)
// and installs the guest programs into it; initramfs images copy binaries and
// their libraries out of it, so the host needs none of them installed.
func (b *Builder) buildUserland(ctx context.Context) (string, error) {
	done := b.begin("guest userland (bookworm: " + strings.Join(GuestPackages, " ") + ")")
	mirror, err := b.debianMirror()
	if err != nil {
		return "", err
	}
	key := NewKey("userland", "1").Add("mirror", mirror).Add("suite", "bookworm").
		Add("packages", strings.Join(GuestPackages, " "))
	// Versioned like the images built from it: checkouts whose package
	// lists differ (a branch that adds one) keep a tree each instead of
	// debootstrapping over each other.
	parent := filepath.Join(b.opt.CacheDir, "userland")
	dir := versionedDir(parent, "bookworm", key)
	defer pruneVersions(parent, "bookworm", dir)
	if _, ok := fresh(dir, key); ok {
		touch(dir)
		done("cached")
		return dir, nil
	}
	if err := requireRoot("debootstrap the guest userland"); err != nil {
		return "", err
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(b.out, "      debootstrap bookworm from %s (about 30 s)\n", mirror)
	if err := b.debootstrap(ctx, "userland-debootstrap", "bookworm", tmp, mirror); err != nil {
		return "", err
	}
	if err := b.chrootInstall(ctx, "userland-install", tmp, nil, GuestPackages...); err != nil {
		return "", err
	}
	if err := writeStamp(tmp, stamp{Key: key.Sum()}); err != nil {
		return "", err
	}
	if err := replaceDir(tmp, dir); err != nil {
		return "", err
	}
	done("installed")
	return dir, nil
}
