package images

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
)

// fakeSource is a small npfnic source tree as the binary embeds one.
func fakeSource() fstest.MapFS {
	return fstest.MapFS{
		"go.mod":                         {Data: []byte("module " + ModulePath + "\n\ngo 1.26\n")},
		"go.sum":                         {Data: []byte("")},
		"guestdrv/Kbuild":                {Data: []byte("obj-m += npfnic.o\n")},
		"guestdrv/npfnic_main.c":         {Data: []byte("int main_c;\n")},
		"guestdrv/npfnic.h":              {Data: []byte("#define NPFNIC 1\n")},
		"guestdrv/cmd/npfnic-agent/a.go": {Data: []byte("package main\n\nfunc main() {}\n")},
		// A file beside a directory whose name it extends: a walk visits
		// guestdrv/cmd/... before it, a sort of whole paths after.
		"guestdrv/cmd-notes.txt": {Data: []byte("notes\n")},
	}
}

// checkTree fails unless dir holds exactly src's files, byte for byte.
func checkTree(t *testing.T, dir string, src fs.FS) {
	t.Helper()
	files, err := sourceFiles(src)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(files) {
		t.Errorf("%s holds %d files, the source %d", dir, n, len(files))
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(dir, f.path))
		if err != nil || !bytes.Equal(got, f.data) {
			t.Errorf("%s in %s: %q, %v; want %q", f.path, dir, got, err, f.data)
		}
	}
}

// TestExtractSource: the tree lands in a directory named by its content,
// byte for byte; a second extraction reuses it untouched; an altered tree
// (an edited file, a stray one) is replaced; other content gets a
// directory of its own.
func TestExtractSource(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "src")
	src := fakeSource()
	dir, err := ExtractSource(src, parent)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != parent || !strings.HasPrefix(filepath.Base(dir), sourceTreeName+"-") {
		t.Fatalf("extracted to %s, want %s/%s-HASH", dir, parent, sourceTreeName)
	}
	checkTree(t, dir, src)
	if fi, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o755 {
		t.Errorf("the extracted tree's mode is %v, want 0755 as the cache's other trees", fi.Mode().Perm())
	}

	kbuild := filepath.Join(dir, "guestdrv/Kbuild")
	before, err := os.Stat(kbuild)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ExtractSource(src, parent)
	if err != nil || again != dir {
		t.Fatalf("second extraction: %s, %v; want %s", again, err, dir)
	}
	if after, err := os.Stat(kbuild); err != nil || !os.SameFile(before, after) {
		t.Fatalf("the second extraction rewrote the tree (%v)", err)
	}

	if err := os.WriteFile(filepath.Join(dir, "guestdrv/npfnic_main.c"), []byte("int edited;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "guestdrv/stray.c"), []byte("int stray;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := ExtractSource(src, parent); err != nil || again != dir {
		t.Fatalf("extraction over an altered tree: %s, %v; want %s", again, err, dir)
	}
	checkTree(t, dir, src)

	other := fakeSource()
	other["guestdrv/npfnic_main.c"] = &fstest.MapFile{Data: []byte("int other;\n")}
	otherDir, err := ExtractSource(other, parent)
	if err != nil || otherDir == dir {
		t.Fatalf("other content extracted to %s, %v; want a directory other than %s", otherDir, err, dir)
	}
	checkTree(t, dir, src)
	checkTree(t, otherDir, other)
	entries, _ := os.ReadDir(parent)
	if len(entries) != 2 {
		t.Errorf("%s holds %d entries, want the two trees (no temporary ones left)", parent, len(entries))
	}
}

// TestExtractSourceConcurrently: npfnic commands started together (two
// shells, a script) all get the one complete tree.
func TestExtractSourceConcurrently(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "src")
	src := fakeSource()
	const n = 8
	dirs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { dirs[i], errs[i] = ExtractSource(src, parent) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || dirs[i] != dirs[0] {
			t.Errorf("extraction %d: %s, %v; want %s", i, dirs[i], errs[i], dirs[0])
		}
	}
	checkTree(t, dirs[0], src)
	if entries, _ := os.ReadDir(parent); len(entries) != 1 {
		t.Errorf("%s holds %d entries, want the one tree", parent, len(entries))
	}
}

// TestNewFindsItsSources: inside a checkout New builds from it, even with
// embedded sources at hand; outside one, from the embedded sources
// extracted into the cache; with neither, it says what is missing.
func TestNewFindsItsSources(t *testing.T) {
	checkout, err := FindSourceDir(".")
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	opt := Options{CacheDir: cache, Source: fakeSource(), Progress: io.Discard}
	b, err := New(opt)
	if err != nil || b.SourceDir() != checkout {
		t.Fatalf("New inside the checkout: SourceDir %q, %v; want %s", b.SourceDir(), err, checkout)
	}
	if _, err := os.Stat(filepath.Join(cache, "src")); err == nil {
		t.Error("New inside a checkout extracted the embedded sources")
	}

	t.Chdir(t.TempDir())
	b, err = New(opt)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ExtractSource(opt.Source, filepath.Join(cache, "src"))
	if err != nil {
		t.Fatal(err)
	}
	if b.SourceDir() != want {
		t.Fatalf("New outside a checkout: SourceDir %s, want the extracted tree %s", b.SourceDir(), want)
	}
	checkTree(t, want, opt.Source)

	opt.Source = nil
	if _, err := New(opt); err == nil || !strings.Contains(err.Error(), "no npfnic source tree") {
		t.Fatalf("New outside a checkout without embedded sources: %v", err)
	}
}

// TestModuleKeyIgnoresWhereSourcesAre: driver sources of equal content
// key the module build alike in a checkout and extracted from the binary,
// and an edit changes the key.
func TestModuleKeyIgnoresWhereSourcesAre(t *testing.T) {
	src := fakeSource()
	checkout := t.TempDir()
	if err := os.CopyFS(checkout, src); err != nil {
		t.Fatal(err)
	}
	extracted, err := ExtractSource(src, filepath.Join(t.TempDir(), "src"))
	if err != nil {
		t.Fatal(err)
	}
	k := Kernel{Release: "6.1.0-56-amd64", Version: "6.1.192-2"}
	key := func(dir string) string {
		t.Helper()
		key, err := moduleKey(filepath.Join(dir, "guestdrv"), k)
		if err != nil {
			t.Fatal(err)
		}
		return key.Sum()
	}
	if key(checkout) != key(extracted) {
		t.Fatal("the same driver sources key the module differently in a checkout and extracted")
	}
	if err := os.WriteFile(filepath.Join(checkout, "guestdrv/npfnic.h"), []byte("#define NPFNIC 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if key(checkout) == key(extracted) {
		t.Fatal("an edited header left the module key unchanged")
	}
}

// TestGuestToolsIgnoreWhereSourcesAre: the agent built from a git
// checkout and from a copy of its sources elsewhere, without git, is the
// same file, so the initramfs keyed by it stays cached. GOFLAGS asks for
// the VCS stamp, which would differ, to show that the build leaves it out.
func TestGuestToolsIgnoreWhereSourcesAre(t *testing.T) {
	goCmd := goTool(t)
	gitCmd, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git command")
	}
	checkout, err := FindSourceDir(".")
	if err != nil {
		t.Fatal(err)
	}
	// The sources: go.mod, go.sum and the files of the module's packages
	// the agent is built from, as the embedded sources hold them.
	list := exec.Command(goCmd, "list", "-deps", "-json=Dir,GoFiles,Module", "./guestdrv/cmd/npfnic-agent")
	list.Dir = checkout
	list.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0")
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	sources := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var pkg struct {
			Dir     string
			GoFiles []string
			Module  *struct{ Path string }
		}
		if err := dec.Decode(&pkg); err != nil {
			t.Fatal(err)
		}
		if pkg.Module == nil || pkg.Module.Path != ModulePath {
			continue
		}
		rel, err := filepath.Rel(checkout, pkg.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range pkg.GoFiles {
			sources = append(sources, filepath.Join(rel, f))
		}
	}
	copySources := func() string {
		t.Helper()
		dir := t.TempDir()
		for _, rel := range sources {
			data, err := os.ReadFile(filepath.Join(checkout, rel))
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	repo, plain := copySources(), copySources()
	for _, args := range [][]string{
		{"init", "-q"}, {"add", "."},
		{"-c", "user.name=npfnic test", "-c", "user.email=test@npfnic.invalid", "commit", "-q", "-m", "sources"},
	} {
		cmd := exec.Command(gitCmd, args...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	t.Setenv("GOFLAGS", "-buildvcs=true")
	agent := func(sourceDir string) []byte {
		t.Helper()
		b := &Builder{opt: Options{CacheDir: t.TempDir(), SourceDir: sourceDir}, out: io.Discard}
		tools, err := b.buildGuestTools(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(tools["npfnic-agent"])
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	if !bytes.Equal(agent(repo), agent(plain)) {
		t.Fatal("npfnic-agent built from a git checkout differs from the one built from a copy of its sources elsewhere")
	}
}
