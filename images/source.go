package images

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// sourceTreeName prefixes the extracted trees in <cache>/src: one per
// content, npfnic-HASH, so binaries of different versions sharing a cache
// each build from their own and pruneVersions bounds how many stay.
const sourceTreeName = "npfnic"

// ExtractSource writes the source files in src (npfnic.Source, embedded in
// the installed command) into parent/npfnic-HASH, HASH naming their
// content, and returns that directory: the SourceDir of a build run
// outside a checkout. A tree already there with exactly these files is
// reused; one that differs (edited by hand) is replaced. The tree appears
// by rename once complete, so a concurrent or interrupted extraction never
// leaves a partial one in use.
func ExtractSource(src fs.FS, parent string) (string, error) {
	files, err := sourceFiles(src)
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("the embedded npfnic source holds no files")
	}
	dir := filepath.Join(parent, sourceTreeName+"-"+sourceHash(files)[:16])
	defer pruneVersions(parent, sourceTreeName, dir)
	if sameTree(dir, files) {
		touch(dir)
		return dir, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, filepath.Base(dir)+"-*.tmp")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // gone after the rename, left over after a failure
	// MkdirTemp made it 0700; the cache's other trees are 0755.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	for _, f := range files {
		p := filepath.Join(tmp, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			return "", err
		}
	}
	if _, err := os.Stat(dir); err == nil {
		// A tree of this content that no longer matches it: set it aside
		// (the .old suffix keeps pruneVersions off it) and remove it.
		old := tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return "", fmt.Errorf("move the altered source tree %s aside: %w", dir, err)
		}
		defer os.RemoveAll(old)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if sameTree(dir, files) {
			return dir, nil // another npfnic extracted the same tree first
		}
		return "", fmt.Errorf("extract the embedded npfnic source: %w", err)
	}
	return dir, nil
}

// sourceFile is one regular file of an embedded source tree.
type sourceFile struct {
	path string // slash-separated, relative to the tree
	data []byte
}

// sourceFiles reads every regular file of src, sorted by path.
func sourceFiles(src fs.FS) ([]sourceFile, error) {
	var files []sourceFile
	err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		data, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		files = append(files, sourceFile{p, data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the embedded npfnic source: %w", err)
	}
	// By whole path, as sameTree compares: a walk puts "a/x" before "a-b".
	slices.SortFunc(files, func(a, b sourceFile) int { return strings.Compare(a.path, b.path) })
	return files, nil
}

// sourceHash is the hex SHA-256 of the files' paths and contents; each is
// length-prefixed, so no two different trees hash alike by concatenation.
func sourceHash(files []sourceFile) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s%d:", len(f.path), f.path, len(f.data))
		h.Write(f.data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sameTree reports whether dir holds exactly files: the same paths, the
// same bytes, nothing else (a stray .c file would enter the module).
func sameTree(dir string, files []sourceFile) bool {
	var onDisk []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		onDisk = append(onDisk, filepath.ToSlash(rel))
		return err
	})
	if err != nil || len(onDisk) != len(files) {
		return false
	}
	slices.Sort(onDisk)
	for i, f := range files {
		if onDisk[i] != f.path {
			return false
		}
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.path)))
		if err != nil || !bytes.Equal(data, f.data) {
			return false
		}
	}
	return true
}
