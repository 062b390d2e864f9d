package images

import (
	"debug/elf"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Tree resolves paths inside a root file system (a debootstrap'd tree),
// following symlinks the way they would resolve inside that root.
type Tree struct{ Root string }

// Resolve follows symlinks of p (absolute inside the tree) within the tree
// and returns the final path relative to the tree root.
func (t Tree) Resolve(p string) (string, error) {
	p = path.Clean("/" + p)
	for hops := 0; hops < 40; hops++ {
		// Resolve each component so a symlinked directory (bin -> usr/bin) works.
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		cur := "/"
		restarted := false
		for i, part := range parts {
			next := path.Join(cur, part)
			fi, err := os.Lstat(filepath.Join(t.Root, next))
			if err != nil {
				return "", fmt.Errorf("%s in %s: %w", p, t.Root, err)
			}
			if fi.Mode()&os.ModeSymlink != 0 {
				target, err := os.Readlink(filepath.Join(t.Root, next))
				if err != nil {
					return "", err
				}
				if !path.IsAbs(target) {
					target = path.Join(cur, target)
				}
				p = path.Clean(path.Join(append([]string{target}, parts[i+1:]...)...))
				restarted = true
				break
			}
			cur = next
		}
		if !restarted {
			return strings.TrimPrefix(cur, "/"), nil
		}
	}
	return "", fmt.Errorf("%s in %s: too many symlinks", p, t.Root)
}

// libDirs is where the dynamic loader of a Debian amd64 system looks.
var libDirs = []string{"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib", "/lib", "/usr/lib64", "/lib64"}

// ELFClosure returns every file (relative to the tree, with the absolute
// in-guest path it must appear at) that the given programs need to run:
// the programs, their interpreter and all DT_NEEDED libraries, transitively.
// The keys are guest paths, the values tree-relative real files.
func (t Tree) ELFClosure(programs ...string) (map[string]string, error) {
	files := map[string]string{}
	queue := append([]string(nil), programs...)
	seen := map[string]bool{}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		real, err := t.Resolve(p)
		if err != nil {
			return nil, err
		}
		files[p] = real
		f, err := elf.Open(filepath.Join(t.Root, real))
		if err != nil {
			continue // not an ELF file (pci.ids, a script): copied as is
		}
		needed, _ := f.ImportedLibraries()
		runpath, _ := f.DynString(elf.DT_RUNPATH)
		rpath, _ := f.DynString(elf.DT_RPATH)
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				b := make([]byte, prog.Filesz)
				if _, err := prog.ReadAt(b, 0); err == nil {
					queue = append(queue, strings.TrimRight(string(b), "\x00"))
				}
			}
		}
		f.Close()
		dirs := append(splitPaths(runpath, rpath), libDirs...)
		for _, lib := range needed {
			found := ""
			for _, d := range dirs {
				cand := path.Join(d, lib)
				if _, err := t.Resolve(cand); err == nil {
					found = cand
					break
				}
			}
			if found == "" {
				return nil, fmt.Errorf("%s needs %s, which is not in %s", p, lib, t.Root)
			}
			queue = append(queue, found)
		}
	}
	return files, nil
}

func splitPaths(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, s := range l {
			for _, d := range strings.Split(s, ":") {
				if d != "" && !strings.Contains(d, "$") {
					out = append(out, d)
				}
			}
		}
	}
	return out
}

// KernelModules indexes the .ko files of a kernel tree by module name.
type KernelModules struct {
	dir   string
	paths map[string]string // name (with '_') -> path
}

// LoadKernelModules walks lib/modules/RELEASE/kernel.
func LoadKernelModules(modulesDir string) (*KernelModules, error) {
	km := &KernelModules{dir: modulesDir, paths: map[string]string{}}
	err := filepath.Walk(filepath.Join(modulesDir, "kernel"), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".ko") {
			km.paths[moduleName(filepath.Base(p))] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index kernel modules: %w", err)
	}
	return km, nil
}

func moduleName(file string) string {
	return strings.ReplaceAll(strings.TrimSuffix(file, ".ko"), "-", "_")
}

// modinfo reads the key=value strings of a module's .modinfo section.
func modinfo(path string) (map[string][]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("%s has no .modinfo", path)
	}
	data, err := s.Data()
	if err != nil {
		return nil, err
	}
	info := map[string][]string{}
	for _, kv := range strings.Split(string(data), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			info[k] = append(info[k], v)
		}
	}
	return info, nil
}

// LoadOrder returns the modules to insmod, dependencies first, so that each
// named module loads; "pre:" soft dependencies are honoured when present.
func (km *KernelModules) LoadOrder(names ...string) ([]string, error) {
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string) error
	visit = func(n string) error {
		n = moduleName(n)
		switch state[n] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", n)
		case 2:
			return nil
		}
		p, ok := km.paths[n]
		if !ok {
			return fmt.Errorf("kernel module %s not found in %s", n, km.dir)
		}
		state[n] = 1
		info, err := modinfo(p)
		if err != nil {
			return err
		}
		var deps []string
		for _, d := range info["depends"] {
			deps = append(deps, strings.Split(d, ",")...)
		}
		for _, sd := range info["softdep"] {
			if pre, ok := strings.CutPrefix(sd, "pre:"); ok {
				pre, _, _ = strings.Cut(pre, "post:")
				for _, m := range strings.Fields(pre) {
					if _, ok := km.paths[moduleName(m)]; ok {
						deps = append(deps, m)
					}
				}
			}
		}
		for _, d := range deps {
			if d = strings.TrimSpace(d); d != "" {
				if err := visit(d); err != nil {
					return err
				}
			}
		}
		state[n] = 2
		order = append(order, n)
		return nil
	}
	for _, n := range names {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// Path is the .ko file of a module.
func (km *KernelModules) Path(name string) string { return km.paths[moduleName(name)] }

// Files lists the regular files and symlinks under dir (absolute inside
// the tree), as guest paths, leaving out the directories and files in
// skip.
func (t Tree) Files(dir string, skip map[string]bool) ([]string, error) {
	real, err := t.Resolve(dir)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(t.Root, real)
	var out []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		guest := path.Join(dir, filepath.ToSlash(rel))
		switch {
		case d.IsDir() && skip[guest]:
			return filepath.SkipDir
		case skip[guest]:
		case d.Type().IsRegular(), d.Type()&os.ModeSymlink != 0:
			out = append(out, guest)
		}
		return nil
	})
	return out, err
}
