package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// MPI is the part of the guest images that runs seed 000's applications
// (npfnic exp mpi, npfnic exp overcommit): Open MPI 4.1 with UCX 1.13
// from bookworm, and the programs built here from guestdrv/mpi against
// them and libibverbs.
const (
	// MPIBench is the benchmark after IMB's definitions
	// (guestdrv/mpi/mpibench.c), in the guest's PATH.
	MPIBench = "npfnic-mpibench"
	// Overcommit is the RDMA server and client of npfnic exp overcommit
	// (guestdrv/mpi/overcommit.c): a region registered whole, a working
	// set of it written.
	Overcommit = "npfnic-overcommit"
)

// mpiTools are the C programs of guestdrv/mpi: their source, their guest
// path, their compiler (Open MPI's wrapper for MPI programs) and its
// arguments after the source.
var mpiTools = []struct {
	src, guest, cc string
	args           []string
}{
	{"mpibench.c", "/usr/bin/" + MPIBench, "mpicc", []string{"-lm"}},
	{"overcommit.c", "/usr/bin/" + Overcommit, "gcc-12", []string{"-libverbs"}},
}

// buildMPITools compiles guestdrv/mpi's programs in the bookworm tree
// (chroot), with its gcc-12 and Open MPI's mpicc wrapper, which
// libopenmpi-dev brings: they link against exactly the libraries the
// guest gets. The result maps guest paths to the built files.
func (b *Builder) buildMPITools(ctx context.Context, userland string) (map[string]string, error) {
	done := b.begin("MPI guest programs (guestdrv/mpi, in the bookworm tree)")
	src := filepath.Join(b.opt.SourceDir, "guestdrv", "mpi")
	key := NewKey("mpi-tools", "1")
	if err := key.AddFile("userland", filepath.Join(userland, stampName)); err != nil {
		return nil, err
	}
	for _, t := range mpiTools {
		if err := key.AddFile(t.src, filepath.Join(src, t.src)); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(b.opt.CacheDir, "mpitools")
	out := map[string]string{}
	for _, t := range mpiTools {
		out[t.guest] = filepath.Join(dir, filepath.Base(t.guest))
	}
	if _, ok := fresh(dir, key); ok {
		done("cached")
		return out, nil
	}
	if err := requireRoot("compile the MPI guest programs in the bookworm tree"); err != nil {
		return nil, err
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	// The sources go into the tree's /tmp for the chroot's compiler.
	work, err := os.MkdirTemp(filepath.Join(userland, "tmp"), "npfnic-mpi-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	inTree := "/tmp/" + filepath.Base(work)
	for _, t := range mpiTools {
		data, err := os.ReadFile(filepath.Join(src, t.src))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(work, t.src), data, 0o644); err != nil {
			return nil, err
		}
		bin := filepath.Base(t.guest)
		args := append([]string{userland, t.cc, "-O2", "-Wall", "-Wextra", "-Werror", inTree + "/" + t.src}, t.args...)
		args = append(args, "-o", inTree+"/"+bin)
		// Debian's gcc-12 has no plain gcc beside it without the gcc package.
		if err := b.run(ctx, "mpi-tools", "", []string{"OMPI_CC=gcc-12", "LC_ALL=C"}, "chroot", args...); err != nil {
			return nil, fmt.Errorf("compile guestdrv/mpi/%s: %w", t.src, err)
		}
		if err := os.Rename(filepath.Join(work, bin), filepath.Join(tmp, bin)); err != nil {
			return nil, err
		}
	}
	if err := writeStamp(tmp, stamp{Key: key.Sum()}); err != nil {
		return nil, err
	}
	if err := replaceDir(tmp, dir); err != nil {
		return nil, err
	}
	done(fmt.Sprintf("%d programs", len(mpiTools)))
	return out, nil
}
