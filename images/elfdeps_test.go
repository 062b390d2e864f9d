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
