package images

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// goTool is the go command of the toolchain running the test.
func goTool(t *testing.T) string {
	t.Helper()
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); p != "" {
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	return p
}

// TestURootCommandsResolve: uroot_tools.go lists exactly the commands the
// busybox glob (uRootCommands) matches, and every package they import
// resolves from go.mod and go.sum, so a fresh module cache builds the
// initramfs; go mod tidy once dropped the dependencies of the commands it
// did not list.
func TestURootCommandsResolve(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "uroot_tools.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		listed = append(listed, p)
	}
	slices.Sort(listed)

	if len(uRootCommands) != 1 || !strings.HasSuffix(uRootCommands[0], "/*") {
		t.Fatalf("uRootCommands %v: this test expands one DIR/* glob", uRootCommands)
	}
	// The glob is expanded over the module's directory, as the busybox
	// builder does.
	prefix := strings.TrimSuffix(uRootCommands[0], "*")
	goCmd := goTool(t)
	out, err := exec.Command(goCmd, "list", "-m", "-f", "{{.Dir}}", "github.com/u-root/u-root").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m github.com/u-root/u-root: %v\n%s", err, out)
	}
	entries, err := os.ReadDir(filepath.Join(strings.TrimSpace(string(out)), strings.TrimPrefix(prefix, "github.com/u-root/u-root/")))
	if err != nil {
		t.Fatal(err)
	}
	var glob []string
	for _, e := range entries {
		if e.IsDir() {
			glob = append(glob, prefix+e.Name())
		}
	}
	slices.Sort(glob)
	if !slices.Equal(listed, glob) {
		t.Errorf("uroot_tools.go imports\n  %v\nthe glob %s matches\n  %v", listed, uRootCommands[0], glob)
	}

	args := append([]string{"list", "-e", "-deps", "-f", "{{with .Error}}{{.}}\n{{end}}"}, listed...)
	out, err = exec.Command(goCmd, args...).CombinedOutput()
	var problems []string
	for _, l := range strings.Split(string(out), "\n") {
		// Commands of other systems (bind is Plan 9's): the busybox
		// leaves them out too.
		if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "build constraints exclude all Go files") {
			problems = append(problems, l)
		}
	}
	if err != nil || len(problems) > 0 {
		t.Errorf("the busybox's packages do not all resolve from go.mod and go.sum (go mod tidy after changing uroot_tools.go): %v\n%s", err, strings.Join(problems, "\n"))
	}
}
