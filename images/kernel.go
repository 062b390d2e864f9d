package images

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Kernel is the guest kernel and what it takes to build modules for it.
type Kernel struct {
	Release string // uname -r in the guest, e.g. 6.1.0-56-amd64
	Version string // the Debian package version
	Root    string // the extracted packages
	Vmlinux string // uncompressed ELF for PVH boot
	Headers string // kbuild-ready headers (make -C Headers M=... modules)
}

// ModulesDir is the kernel's /lib/modules/RELEASE inside Root.
func (k Kernel) ModulesDir() string {
	return filepath.Join(k.Root, "lib/modules", k.Release)
}

const kernelMeta = "linux-image-amd64"

// buildKernel downloads the kernel image, headers and kbuild that bookworm's
// linux-image-amd64 points to, extracts them and prepares vmlinux.
func (b *Builder) buildKernel(ctx context.Context) (Kernel, error) {
	done := b.begin("guest kernel (Debian bookworm " + kernelMeta + ")")
	kp, err := b.selectKernel(ctx)
	if err != nil {
		return Kernel{}, err
	}
	key := NewKey("kernel", "1").Add("abi", kp.ABI).Add("version", kp.Version)
	dir := filepath.Join(b.opt.CacheDir, "kernel", kp.ABI)
	k := Kernel{
		Release: kp.ABI, Version: kp.Version, Root: filepath.Join(dir, "root"),
		Vmlinux: filepath.Join(dir, "vmlinux"),
		Headers: filepath.Join(dir, "root/usr/src/linux-headers-"+kp.ABI),
	}
	if _, ok := fresh(dir, key); ok {
		done("cached, " + kp.ABI + " (" + kp.Version + ")")
		return k, nil
	}
	pkgs, err := b.kernelPackages(ctx, kp.ABI)
	if err != nil {
		return Kernel{}, err
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	debs := filepath.Join(tmp, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return Kernel{}, err
	}
	fmt.Fprintf(b.out, "      downloading %s\n", strings.Join(pkgs, " "))
	args := append([]string{"-o", "APT::Sandbox::User=root", "download"}, pkgs...)
	if err := b.run(ctx, "kernel-download", debs, nil, "apt-get", args...); err != nil {
		return Kernel{}, fmt.Errorf("download the guest kernel packages: %w", err)
	}
	files, _ := filepath.Glob(filepath.Join(debs, "*.deb"))
	for _, f := range files {
		if err := b.run(ctx, "kernel-extract", "", nil, "dpkg-deb", "-x", f, filepath.Join(tmp, "root")); err != nil {
			return Kernel{}, err
		}
	}
	if err := os.RemoveAll(debs); err != nil {
		return Kernel{}, err
	}
	headers := filepath.Join(tmp, "root/usr/src/linux-headers-"+kp.ABI)
	if err := relativizeHeadersMakefile(filepath.Join(headers, "Makefile")); err != nil {
		return Kernel{}, err
	}
	fmt.Fprintf(b.out, "      extracting vmlinux for PVH boot\n")
	if err := ExtractVmlinux(ctx, filepath.Join(tmp, "root/boot/vmlinuz-"+kp.ABI), filepath.Join(tmp, "vmlinux")); err != nil {
		return Kernel{}, err
	}
	if err := writeStamp(tmp, stamp{Key: key.Sum(), Info: map[string]string{"abi": kp.ABI, "version": kp.Version}}); err != nil {
		return Kernel{}, err
	}
	if err := replaceDir(tmp, dir); err != nil {
		return Kernel{}, err
	}
	done("ready, " + kp.ABI + " (" + kp.Version + ")")
	return k, nil
}

// selectKernel reads the ABI from the host's apt index, refreshing it once if
// it knows no kernel (a fresh machine has an empty index).
func (b *Builder) selectKernel(ctx context.Context) (KernelPackage, error) {
	for attempt := 0; ; attempt++ {
		out, _ := output(ctx, "apt-cache", "show", kernelMeta)
		kp, err := SelectKernel(kernelMeta, bytes.NewReader(out))
		if err == nil || attempt > 0 {
			return kp, err
		}
		if err := b.aptUpdate(ctx); err != nil {
			return kp, err
		}
	}
}

// kernelPackages names the image package and what out-of-tree builds need:
// the arch headers and the packages they depend on (common headers, kbuild).
func (b *Builder) kernelPackages(ctx context.Context, abi string) ([]string, error) {
	headers := "linux-headers-" + abi
	out, err := output(ctx, "apt-cache", "show", headers)
	if err != nil {
		return nil, fmt.Errorf("apt knows no %s: %w", headers, err)
	}
	deps := HeaderDependencies(bytes.NewReader(out), headers)
	if len(deps) == 0 {
		return nil, fmt.Errorf("%s depends on no linux-headers-*/linux-kbuild-* package; cannot prepare module builds", headers)
	}
	return append([]string{"linux-image-" + abi, headers}, deps...), nil
}

// HeaderDependencies returns the linux-headers-*/linux-kbuild-* packages a
// headers package depends on, from its apt-cache show stanza.
func HeaderDependencies(aptCacheShow io.Reader, pkg string) []string {
	var deps []string
	seen := map[string]bool{}
	for _, st := range parseStanzas(aptCacheShow) {
		if st["Package"] != pkg {
			continue
		}
		for _, dep := range strings.Split(st["Depends"], ",") {
			name := strings.TrimSpace(dep)
			if i := strings.IndexAny(name, " (|"); i >= 0 {
				name = name[:i]
			}
			if (strings.HasPrefix(name, "linux-headers-") || strings.HasPrefix(name, "linux-kbuild-")) && !seen[name] {
				seen[name] = true
				deps = append(deps, name)
			}
		}
		break // the first stanza is the candidate
	}
	return deps
}

// relativizeHeadersMakefile rewrites Debian's absolute include of the common
// headers ("include /usr/src/...") to a path relative to the headers dir, so
// the extracted tree works where it lies.
func relativizeHeadersMakefile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("headers Makefile: %w", err)
	}
	fixed, changed := RelativizeInclude(string(b))
	if !changed {
		return fmt.Errorf("%s has no absolute include of /usr/src/...; the headers package layout changed", path)
	}
	return os.WriteFile(path, []byte(fixed), 0o644)
}

// RelativizeInclude turns "include /usr/src/X/Makefile" into "include ../X/Makefile".
func RelativizeInclude(makefile string) (string, bool) {
	lines := strings.Split(makefile, "\n")
	changed := false
	for i, l := range lines {
		if rest, ok := strings.CutPrefix(l, "include /usr/src/"); ok {
			lines[i] = "include ../" + rest
			changed = true
		}
	}
	return strings.Join(lines, "\n"), changed
}

// ExtractVmlinux unpacks the ELF kernel from a bzImage using the boot
// protocol's payload_offset/payload_length fields (x86 boot protocol >= 2.08).
func ExtractVmlinux(ctx context.Context, bzImage, out string) error {
	img, err := os.ReadFile(bzImage)
	if err != nil {
		return err
	}
	payload, err := BzImagePayload(img)
	if err != nil {
		return fmt.Errorf("%s: %w", bzImage, err)
	}
	var elf []byte
	switch {
	case bytes.HasPrefix(payload, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		// The kernel's xz stream uses the x86 BCJ filter, which only xz-utils
		// decodes; a 4-byte size trailer follows the stream.
		cmd := exec.CommandContext(ctx, "xz", "--single-stream", "-dc")
		cmd.Stdin = bytes.NewReader(payload)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if elf, err = cmd.Output(); err != nil {
			return fmt.Errorf("xz -dc of the kernel payload (host package xz-utils): %v: %s", err, stderr.String())
		}
	case bytes.HasPrefix(payload, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(bytes.NewReader(payload))
		if err != nil {
			return err
		}
		zr.Multistream(false)
		if elf, err = io.ReadAll(zr); err != nil {
			return fmt.Errorf("gunzip kernel payload: %w", err)
		}
	default:
		return fmt.Errorf("kernel payload compression %x not supported (xz and gzip are)", payload[:min(6, len(payload))])
	}
	if !bytes.HasPrefix(elf, []byte("\x7fELF")) {
		return errors.New("decompressed kernel payload is not an ELF file")
	}
	return writeFileAtomic(out, elf, 0o644)
}

// BzImagePayload returns the compressed kernel inside a bzImage.
func BzImagePayload(img []byte) ([]byte, error) {
	if len(img) < 0x250 || string(img[0x202:0x206]) != "HdrS" {
		return nil, errors.New("not a bzImage (no HdrS setup header)")
	}
	if v := binary.LittleEndian.Uint16(img[0x206:]); v < 0x208 {
		return nil, fmt.Errorf("boot protocol %#x predates payload fields (need 2.08)", v)
	}
	setupSects := int(img[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	off := (setupSects+1)*512 + int(binary.LittleEndian.Uint32(img[0x248:]))
	n := int(binary.LittleEndian.Uint32(img[0x24c:]))
	if off < 0 || n <= 0 || off+n > len(img) {
		return nil, fmt.Errorf("payload [%d,+%d) outside the %d-byte image", off, n, len(img))
	}
	return img[off : off+n], nil
}
