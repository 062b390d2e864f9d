package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTreeResolveStaysInsideTheRoot(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/prog"), []byte("x"), 0o755))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))                 // merged /usr, relative
	must(os.Symlink("/usr/bin/prog", filepath.Join(root, "usr/bin/alias"))) // absolute, means the tree's /usr
	must(os.Symlink("loop", filepath.Join(root, "loop")))
	tree := Tree{Root: root}
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "/bin/prog", want: "usr/bin/prog"},
		{in: "/bin/alias", want: "usr/bin/prog"},
		{in: "/usr/bin/../bin/prog", want: "usr/bin/prog"},
		{in: "/missing", wantErr: true},
		{in: "/loop", wantErr: true},
	}
	for _, tt := range tests {
		got, err := tree.Resolve(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q (err %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestELFClosureFindsInterpreterAndLibraries(t *testing.T) {
	files, err := Tree{Root: "/"}.ELFClosure("/usr/bin/ls")
	if err != nil {
		t.Fatal(err)
	}
	var guestPaths []string
	for gp := range files {
		guestPaths = append(guestPaths, gp)
	}
	joined := strings.Join(guestPaths, " ")
	for _, want := range []string{"/usr/bin/ls", "ld-linux-x86-64.so.2", "libc.so.6"} {
		if !strings.Contains(joined, want) {
			t.Errorf("closure of ls lacks %s: %s", want, joined)
		}
	}
	if _, err := (Tree{Root: "/"}).ELFClosure("/no/such/program"); err == nil {
		t.Error("closure of a missing program succeeded")
	}
}

// TestTreeFiles: a directory's files and symlinks by guest path, through
// a symlinked parent, without the subdirectories left out.
func TestTreeFiles(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"usr/lib/py/a.py", "usr/lib/py/pkg/b.so", "usr/lib/py/test/t.py", "usr/lib/py/pkg/test/keep.py"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.py", filepath.Join(root, "usr/lib/py/link.py")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/lib", filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	got, err := Tree{Root: root}.Files("/lib/py", map[string]bool{"/lib/py/test": true})
	if err != nil {
		t.Fatal(err)
	}
	want := "/lib/py/a.py /lib/py/link.py /lib/py/pkg/b.so /lib/py/pkg/test/keep.py"
	if strings.Join(got, " ") != want {
		t.Fatalf("Files = %v, want %s", got, want)
	}
}

// TestGunzipped: only the test suite's compressed files go in
// decompressed.
func TestGunzipped(t *testing.T) {
	for gp, want := range map[string]bool{
		"/usr/share/doc/rdma-core/tests/base.py.gz":   true,
		"/usr/share/doc/rdma-core/tests/run_tests.py": false,
		"/usr/share/doc/other/changelog.gz":           false,
		"/usr/lib/python3.11/x.gz":                    false,
	} {
		if got := gunzipped(gp); got != want {
			t.Errorf("gunzipped(%s) = %v, want %v", gp, got, want)
		}
	}
}
