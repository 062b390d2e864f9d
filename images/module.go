package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// driverSources are the guest driver files that make up the module build.
var driverSources = []string{"*.c", "*.h", "Kbuild"}

// buildModule builds guestdrv/ as npfnic.ko against the guest kernel's headers,
// in a copy of the sources so the repository stays free of build products.
func (b *Builder) buildModule(ctx context.Context, k Kernel) (string, error) {
	done := b.begin("guest driver module (guestdrv/)")
	src := filepath.Join(b.opt.SourceDir, "guestdrv")
	key, err := moduleKey(src, k)
	if err != nil {
		return "", err
	}
	parent := filepath.Join(b.opt.CacheDir, "module")
	dir := versionedDir(parent, k.Release, key)
	ko := filepath.Join(dir, "npfnic.ko")
	defer pruneVersions(parent, k.Release, dir)
	if _, ok := fresh(dir, key); ok {
		touch(dir)
		done("cached")
		return ko, nil
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := copyTopLevel(src, tmp, driverSources); err != nil {
		return "", err
	}
	if err := b.run(ctx, "module-build", "", nil, "make", "-C", k.Headers, "M="+tmp, "modules"); err != nil {
		return "", fmt.Errorf("build the guest driver: %w", err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "npfnic.ko")); err != nil {
		return "", fmt.Errorf("the module build produced no npfnic.ko: %w", err)
	}
	if err := writeStamp(tmp, stamp{Key: key.Sum()}); err != nil {
		return "", err
	}
	if err := replaceDir(tmp, dir); err != nil {
		return "", err
	}
	done("built " + ko)
	return ko, nil
}

// moduleKey is the module build's key: the kernel, and the driver
// sources in src by name and content, not by where they are, so a
// checkout and the sources extracted from the binary share builds.
func moduleKey(src string, k Kernel) (*Key, error) {
	key := NewKey("module", "1").Add("kernel", k.Release+" "+k.Version)
	if err := addTopLevel(key, src, driverSources); err != nil {
		return nil, err
	}
	return key, nil
}

func topLevelFiles(dir string, patterns []string) ([]string, error) {
	var files []string
	for _, p := range patterns {
		m, err := filepath.Glob(filepath.Join(dir, p))
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no driver sources (%v) in %s", patterns, dir)
	}
	return files, nil
}

func addTopLevel(k *Key, dir string, patterns []string) error {
	files, err := topLevelFiles(dir, patterns)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := k.AddFile(filepath.Base(f), f); err != nil {
			return err
		}
	}
	return nil
}

func copyTopLevel(src, dst string, patterns []string) error {
	files, err := topLevelFiles(src, patterns)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
