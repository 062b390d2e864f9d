package npfnic_test

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"testing"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/images"
)

// guestToolPackage is what go list says of a package.
type guestToolPackage struct {
	Name, Dir                                                  string
	GoFiles, EmbedFiles, IgnoredGoFiles                        []string
	TestGoFiles, XTestGoFiles, TestEmbedFiles, XTestEmbedFiles []string
	Module                                                     *struct{ Path string }
}

// guestToolPackages lists the packages the guest tools are built from, as
// the image build compiles them (linux/amd64, no cgo).
func guestToolPackages(t *testing.T) []guestToolPackage {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	cmd := exec.Command(goCmd, "list", "-deps", "-json", "./guestdrv/cmd/...")
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list the guest tools: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []guestToolPackage
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p guestToolPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestSourceHoldsTheImageBuildInputs: the embedded sources hold, as in
// the checkout, everything the image build compiles (go.mod, go.sum, the
// driver's sources and Kbuild, each guest tool and every package of this
// module it imports) and nothing else but those packages' tests.
func TestSourceHoldsTheImageBuildInputs(t *testing.T) {
	needed := []string{"go.mod", "go.sum", "guestdrv/Kbuild"}
	for _, pattern := range []string{"guestdrv/*.c", "guestdrv/*.h", "guestdrv/mpi/*.c"} {
		m, err := filepath.Glob(pattern)
		if err != nil || len(m) == 0 {
			t.Fatalf("no %s in the checkout: %v", pattern, err)
		}
		needed = append(needed, m...)
	}
	checkout := mustGetwd(t)
	var tests []string
	tools := map[string]bool{}
	for _, p := range guestToolPackages(t) {
		if p.Module == nil || p.Module.Path != images.ModulePath {
			continue
		}
		rel, err := filepath.Rel(checkout, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(rel) == "guestdrv/cmd" && p.Name == "main" {
			tools[filepath.Base(rel)] = true
		}
		for _, f := range slices.Concat(p.GoFiles, p.EmbedFiles) {
			needed = append(needed, path.Join(filepath.ToSlash(rel), f))
		}
		for _, f := range slices.Concat(p.TestGoFiles, p.XTestGoFiles, p.IgnoredGoFiles, p.TestEmbedFiles, p.XTestEmbedFiles) {
			tests = append(tests, path.Join(filepath.ToSlash(rel), f))
		}
	}
	toolDirs, _ := filepath.Glob("guestdrv/cmd/*")
	for _, d := range toolDirs {
		if !tools[filepath.Base(d)] {
			t.Errorf("%s is not a main package of the guest tools' build", d)
		}
	}
	if !tools["npfnic-agent"] {
		t.Error("the guest tools' build has no npfnic-agent")
	}

	for _, f := range needed {
		embedded, err := fs.ReadFile(npfnic.Source, f)
		if err != nil {
			t.Errorf("npfnic.Source lacks %s, which the image build compiles: add it to source.go's go:embed patterns", f)
			continue
		}
		if onDisk, err := os.ReadFile(f); err != nil || !bytes.Equal(embedded, onDisk) {
			t.Errorf("npfnic.Source's %s differs from the checkout's (%v)", f, err)
		}
	}
	allowed := map[string]bool{}
	for _, f := range slices.Concat(needed, tests) {
		allowed[f] = true
	}
	err := fs.WalkDir(npfnic.Source, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !allowed[p] {
			t.Errorf("npfnic.Source holds %s, which the image build does not use", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// TestSourceExtractsToTheCheckout: extracted, the embedded sources are
// the checkout's files byte for byte, a second extraction reuses the
// tree, and an image build started outside a checkout uses it.
func TestSourceExtractsToTheCheckout(t *testing.T) {
	checkout := mustGetwd(t)
	cache := t.TempDir()
	dir, err := images.ExtractSource(npfnic.Source, filepath.Join(cache, "src"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		rel, _ := filepath.Rel(dir, p)
		extracted, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if orig, err := os.ReadFile(filepath.Join(checkout, rel)); err != nil || !bytes.Equal(extracted, orig) {
			t.Errorf("extracted %s differs from the checkout's (%v)", rel, err)
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("walking the extracted tree: %d files, %v", n, err)
	}
	if again, err := images.ExtractSource(npfnic.Source, filepath.Join(cache, "src")); err != nil || again != dir {
		t.Fatalf("second extraction: %s, %v; want %s", again, err, dir)
	}

	t.Chdir(t.TempDir())
	b, err := images.New(images.Options{CacheDir: cache, Source: npfnic.Source, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if b.SourceDir() != dir {
		t.Fatalf("images.New outside a checkout builds from %s, want the extracted %s", b.SourceDir(), dir)
	}
}
