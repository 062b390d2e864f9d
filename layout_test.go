package npfnic_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/npfnic/npfnic"

// layers is the README's Layout table: a package may import packages of a
// lower layer, and any package placed by the same folder of the table. Folders not listed (the
// guest tools, images, ci) are checked only against the engine rule.
var layers = []struct {
	layer int
	dirs  []string
}{
	{0, []string{"vdevice/hw", "vdevice/guestmem", "vdevice/port", "vdevice/pkthdr", "internal/clock"}},
	{1, []string{"vdevice/vfiouser", "vdevice/trace", "pcie"}},
	{2, []string{"ats", "pri"}},
	{3, []string{"ethring", "ibrc"}},
	{4, []string{"."}},
	{5, []string{"internal/testbed"}},
	{6, []string{"internal/exp"}},
	{7, []string{"cmd"}},
}

// engines must not import each other, whatever the layers say.
var engines = []string{"ethring", "ibrc"}

// layerOf returns dir's layer and the listed folder that places it.
func layerOf(dir string) (int, string) {
	best, layer := "", -1
	for _, l := range layers {
		for _, d := range l.dirs {
			if (dir == d || d != "." && strings.HasPrefix(dir, d+"/")) && len(d) > len(best) {
				best, layer = d, l.layer
			}
		}
	}
	return layer, best
}

// fixture reports a test-support package (ats/atstest, pri/pritest): it
// builds guest-side state for tests and may lean on its peers' fixtures.
func fixture(dir string) bool { return strings.HasSuffix(filepath.Base(dir), "test") }

// TestImportLayers: no non-test file imports a package of its own layer
// (outside its own folder) or a higher one, neither engine imports the
// other, and nothing imports ci/, so data flows one way and a second
// engine plugs in beside the first.
func TestImportLayers(t *testing.T) {
	imports := map[string][]string{} // dir -> module-relative imports of its non-test files
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "out" || strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		for _, s := range f.Imports {
			p, _ := strconv.Unquote(s.Path.Value)
			if p == module {
				imports[dir] = append(imports[dir], ".")
			} else if rel, ok := strings.CutPrefix(p, module+"/"); ok {
				imports[dir] = append(imports[dir], rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 10 {
		t.Fatalf("found imports in only %d folders: not run from the module root?", len(imports))
	}
	within := func(dir, root string) bool { return dir == root || strings.HasPrefix(dir, root+"/") }
	for dir, deps := range imports {
		for _, dep := range deps {
			for _, a := range engines {
				for _, b := range engines {
					if a != b && within(dir, a) && within(dep, b) {
						t.Errorf("%s imports %s: the engines must not import each other", dir, dep)
					}
				}
			}
			if within(dep, "ci") {
				t.Errorf("%s imports %s: ci/ holds tests and CI scripts only; shared code goes in internal/testbed", dir, dep)
			}
			from, fromDir := layerOf(dir)
			to, toDir := layerOf(dep)
			if fromDir == "" || toDir == "" || fromDir == toDir || fixture(dir) {
				continue
			}
			if to >= from {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must run down the layers of the README's Layout table", dir, from, dep, to)
			}
		}
	}
}
