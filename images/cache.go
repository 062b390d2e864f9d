package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Key accumulates the inputs of one build step into a content hash, so a step
// reruns exactly when something it consumes changed.
type Key struct {
	h     []string
	files []string
}

// NewKey starts a key for the named step; recipe should change whenever the
// step's own logic changes in a way that invalidates old outputs.
func NewKey(step, recipe string) *Key {
	return &Key{h: []string{"step=" + step, "recipe=" + recipe}}
}

// Add records a named string input.
func (k *Key) Add(name, value string) *Key {
	k.h = append(k.h, name+"="+value)
	return k
}

// AddFile records a file's contents (by hash) under its name.
func (k *Key) AddFile(name, path string) error {
	sum, err := fileSHA256(path)
	if err != nil {
		return err
	}
	k.files = append(k.files, name)
	k.h = append(k.h, "file:"+name+"="+sum)
	return nil
}

// AddTree records every regular file under dir whose name matches one of the
// patterns (all files if none), by relative path and content.
func (k *Key) AddTree(name, dir string, patterns ...string) error {
	var rels []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		if len(patterns) > 0 && !matchesAny(d.Name(), patterns) {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rels = append(rels, rel)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(rels)
	for _, rel := range rels {
		if err := k.AddFile(name+"/"+rel, filepath.Join(dir, rel)); err != nil {
			return err
		}
	}
	return nil
}

func matchesAny(name string, patterns []string) bool {
	for _, p := range patterns {
		if ok, _ := filepath.Match(p, name); ok {
			return true
		}
	}
	return false
}

// Sum is the key's hash; the first 16 hex digits name cache entries.
func (k *Key) Sum() string {
	s := sha256.Sum256([]byte(strings.Join(k.h, "\n")))
	return hex.EncodeToString(s[:])
}

// Short is the part of the hash used in directory names.
func (k *Key) Short() string { return k.Sum()[:16] }

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// stamp is written last into a finished step's output directory; its presence
// with the right key is what makes the output valid.
type stamp struct {
	Key  string            `json:"key"`
	Info map[string]string `json:"info,omitempty"`
}

const stampName = ".npfnic-stamp.json"

func readStamp(dir string) (stamp, bool) {
	var s stamp
	b, err := os.ReadFile(filepath.Join(dir, stampName))
	if err != nil || json.Unmarshal(b, &s) != nil {
		return s, false
	}
	return s, true
}

func writeStamp(dir string, s stamp) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stampName+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stampName))
}

// fresh reports whether dir holds a finished output for key.
func fresh(dir string, key *Key) (stamp, bool) {
	s, ok := readStamp(dir)
	if !ok || s.Key != key.Sum() {
		return s, false
	}
	return s, true
}

// versionsKept is how many builds of one versioned step stay in the cache,
// at least; versionGrace keeps any used more recently than that (touch),
// for a VM suite from another checkout may still be booting from it: a run
// reads its images when it boots each guest, and checkouts built while it
// ran pruned its build once (a stress run beside three helpers' builds).
const (
	versionsKept = 4
	versionGrace = 3 * time.Hour
)

// versionedDir is the directory of the build of a step whose inputs hash
// to key: parent/name-KEY. Builds of different sources (two checkouts, or
// two CI jobs sharing one cache) get directories of their own, so one
// never replaces the artifacts another is booting VMs from, and switching
// back to a tree rebuilds nothing. pruneVersions bounds how many stay.
func versionedDir(parent, name string, key *Key) string {
	return filepath.Join(parent, name+"-"+key.Short())
}

// pruneVersions removes the builds of name in parent beyond the newest
// versionsKept that no one used for versionGrace, and never keep, the one
// just used.
func pruneVersions(parent, name, keep string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	type version struct {
		path string
		mod  time.Time
	}
	var vs []version
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() || !strings.HasPrefix(n, name+"-") || strings.HasSuffix(n, ".tmp") || strings.HasSuffix(n, ".old") {
			continue
		}
		if info, err := e.Info(); err == nil {
			vs = append(vs, version{filepath.Join(parent, n), info.ModTime()})
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].mod.After(vs[j].mod) })
	kept := 0
	for _, v := range vs {
		if v.path == keep || kept < versionsKept-1 || time.Since(v.mod) < versionGrace {
			if v.path != keep {
				kept++
			}
			continue
		}
		_ = os.RemoveAll(v.path)
	}
}

// touch marks dir as used now, for pruneVersions.
func touch(dir string) {
	now := time.Now()
	_ = os.Chtimes(dir, now, now)
}

// replaceDir atomically swaps a freshly built directory into place.
func replaceDir(tmp, final string) error {
	old := final + ".old"
	_ = os.RemoveAll(old)
	if _, err := os.Stat(final); err == nil {
		if err := os.Rename(final, old); err != nil {
			return fmt.Errorf("move old %s aside: %w", final, err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return os.RemoveAll(old)
}
